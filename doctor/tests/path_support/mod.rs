//! What the tests on an emulated path share (`paths.rs`, `causes.rs`): the path (two network
//! namespaces and a forwarder between them: the lab's [`EmulatedPath`]), sockets at either
//! end, captures taken at both ends at once, and a flow's budget read by cause.
#![allow(dead_code)] // each test binary uses its part

use std::net::{TcpListener, TcpStream};

use nagless_doctor::analysis::Cause;
use nagless_doctor::{Diagnosis, FlowReport};
use nagless_netpath::{EmulatedPath, PathError, PathSpec};
use nagless_test_support::{have_tool, skip, Tcpdump};

/// The path of `spec`, or `None` (with a note; a failure under CI) without the rights to make
/// one.
pub fn path(spec: PathSpec) -> Option<EmulatedPath> {
    // The path's forwarder threads are the test's network: on a loaded machine they must not
    // wait behind the load, or packets leave the stall rule's windows (recall fell to 0.54
    // beside `stress-ng --cpu 2`; 0.92-1.00 with the forwarder favoured).
    nagless_test_support::favour_this_thread();
    match EmulatedPath::new(&spec) {
        Ok(p) => Some(p),
        Err(PathError::NotPermitted(e)) => {
            skip(&format!(
                "an emulated path needs root or CAP_NET_ADMIN ({e})"
            ));
            None
        }
        Err(e) => panic!("emulated path: {e}"),
    }
}

/// A listener on `port` at the server's end.
pub fn listen(p: &EmulatedPath, port: u16) -> TcpListener {
    let addr = p.server_addr();
    p.run_in_server(move || TcpListener::bind((addr, port)))
        .unwrap()
        .unwrap()
}

/// A connection from the client's end to `port` at the server's.
pub fn connect(p: &EmulatedPath, port: u16) -> TcpStream {
    let addr = p.server_addr();
    p.run_in_client(move || TcpStream::connect((addr, port)))
        .unwrap()
        .unwrap()
}

/// What `scenarios` returns, and the captures tcpdump took at the client's end and at the
/// server's meanwhile, read by the doctor (with `opts`); `None` without tcpdump or the rights
/// to make a path. `NAGLESS_KEEP_CAPTURES=DIR` keeps the captures, named after the test.
pub fn at_both_ends<T>(
    spec: PathSpec,
    opts: nagless_doctor::analysis::Options,
    scenarios: impl FnOnce(&EmulatedPath) -> T,
) -> Option<(T, [(&'static str, Diagnosis); 2])> {
    if !have_tool("tcpdump") {
        return None;
    }
    let tag = format!("{}ms", spec.rtt.as_millis());
    let p = path(spec)?;
    let (cns, sns) = p.namespaces();
    let at_client = Tcpdump::start_in(Some(cns), &format!("client-{tag}"), "tcp", &["-i", "any"]);
    let at_server = Tcpdump::start_in(Some(sns), &format!("server-{tag}"), "tcp", &["-i", "any"]);
    let made = scenarios(&p);
    let captures = [
        ("client end", at_client.finish()),
        ("server end", at_server.finish()),
    ];
    let read = |(end, bytes): (&'static str, Vec<u8>)| {
        if let Some(file) = kept_capture(end) {
            std::fs::write(file, &bytes).unwrap();
        }
        let d = nagless_doctor::diagnose_reader(&bytes[..], opts.clone(), |_| {})
            .expect("tcpdump's capture parses");
        assert!(d.damage.is_none(), "{end}: {:?}", d.damage);
        (end, d)
    };
    let [c, s] = captures;
    Some((made, [read(c), read(s)]))
}

/// Where the capture at `end` ("client end", "server end") of the calling test is kept, when
/// `NAGLESS_KEEP_CAPTURES` names a directory: `DIR/TEST-client-end.pcap`.
pub fn kept_capture(end: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("NAGLESS_KEEP_CAPTURES")?;
    let test = std::thread::current()
        .name()
        .unwrap_or("paths")
        .replace("::", "-");
    Some(std::path::Path::new(&dir).join(format!("{test}-{}.pcap", end.replace(' ', "-"))))
}

/// The one flow of `d` to `port`.
pub fn flow_on(d: &Diagnosis, port: u16) -> &FlowReport {
    let suffix = format!(":{port}");
    let mut it = d
        .flows
        .iter()
        .filter(|f| f.sides[1].addr.ends_with(&suffix));
    let f = it
        .next()
        .unwrap_or_else(|| panic!("no flow on port {port}"));
    assert!(it.next().is_none(), "one flow on port {port}");
    f
}

/// The time `causes` give `cause` of `side`, ms.
pub fn spent(causes: &[nagless_doctor::analysis::Spent], cause: Cause, side: Option<&str>) -> f64 {
    causes
        .iter()
        .filter(|s| s.cause == cause && s.side == side)
        .map(|s| s.ms)
        .sum()
}

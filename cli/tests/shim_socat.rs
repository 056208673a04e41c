//! The preloaded shim on socat, an unmodified relay: no more data segments than natively,
//! without the stall (its waits that find the next chunk ready go on adding to the burst).
//! Loopback only; every program started here is stopped here.
#![allow(clippy::disallowed_methods)] // tests measure real time

use nagless_test_support as common;

mod shim_support;
use shim_support::servers::{SegmentCount, ServerGroup};
use shim_support::{stats_lines, with_shim};

// `exclusive()`, held by each test while it runs: these tests time real programs and count
// their segments, and must not share the two CPUs with each other when `cargo test` runs
// them in parallel (`./scripts/test` runs those that time or count alone: docs/testing.md).
use common::{exclusive, free_port, have_tool};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One run of an unmodified relay (socat, reading at most 100 bytes at a time) between a
/// client and a backend that exchange 200-byte messages (TCP_NODELAY), natively or under the
/// shim: the relay's data segments per exchange, and the mean exchange time. Each message
/// reaches the relay whole, so the relay reads and forwards it as two 100-byte chunks, the
/// second already readable when it polls after forwarding the first (whatever the load on
/// the machine: a client sending its message as two writes could be descheduled between
/// them).
fn relay_run(mode: Option<&str>, exchanges: usize) -> Option<(f64, Duration, String)> {
    use std::net::TcpListener;
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    let serve = std::thread::spawn(move || {
        let (mut s, _) = backend.accept().unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut req = [0u8; 200];
        for _ in 0..exchanges {
            s.read_exact(&mut req).unwrap();
            assert!(req[..100].iter().all(|&b| b == b'p') && req[100..].iter().all(|&b| b == b'q'));
            let mut resp = [b'h'; 200];
            resp[100..].fill(b'b');
            s.write_all(&resp).unwrap();
        }
    });
    let port = free_port();
    let mut cmd = Command::new("socat");
    // 100-byte reads: a message's two parts are two reads, the second already readable when
    // the relay polls after forwarding the first.
    cmd.args(["-b", "100"])
        .arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr"))
        .arg(format!("TCP:127.0.0.1:{backend_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(mode) = mode {
        with_shim(&mut cmd, mode);
    }
    let mut relay = ServerGroup::spawn(&mut cmd);
    let capture = SegmentCount::start_matching(&format!(
        "tcp src port {port} or tcp dst port {backend_port}"
    ))?;
    // socat serves one connection and exits: the client's is the first (no port probe).
    let waited = Instant::now();
    let mut c = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(e) if waited.elapsed() > Duration::from_secs(10) => panic!("socat: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    c.set_nodelay(true).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let start = Instant::now();
    let mut resp = [0u8; 200];
    for _ in 0..exchanges {
        let mut req = [b'p'; 200];
        req[100..].fill(b'q');
        c.write_all(&req).unwrap();
        c.read_exact(&mut resp).unwrap();
        assert!(resp[..100].iter().all(|&b| b == b'h') && resp[100..].iter().all(|&b| b == b'b'));
    }
    let mean = start.elapsed() / exchanges as u32;
    drop(c);
    serve.join().unwrap();
    let segments = capture.stop();
    let mut err = String::new();
    relay.stop();
    if let Some(mut e) = relay.child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    Some((segments as f64 / exchanges as f64, mean, err))
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn a_relay_under_the_shim_sends_no_more_segments_than_natively_without_the_stall() {
        let _one = exclusive();
        if !["socat", "tcpdump"].iter().all(|t| have_tool(t)) {
            return;
        }
        let Some(native) = relay_run(None, 50) else {
            return;
        };
        let Some(ours) = relay_run(Some("nagless"), 200) else {
            return;
        };
        eprintln!(
            "socat relay: natively {:.2} data segments per exchange, {:?} each; under the shim {:.2}, {:?}",
            native.0, native.1, ours.0, ours.1
        );
        // Natively the relay's Nagle holds each message's second chunk until a delayed ACK.
        assert!(
            native.1 > Duration::from_millis(10),
            "natively the relay must stall: {:?}",
            native.1
        );
        // Gone: the mean exchange well under half a stall and under half the native one (a
        // busy machine adds scheduling delays to each of the relay's hops, never a 40 ms timer).
        assert!(
            ours.1 < Duration::from_millis(20) && ours.1 < native.1 / 2,
            "the stall is gone: {:?} against {:?} natively",
            ours.1,
            native.1
        );
        assert!(
            ours.0 <= native.0 * 1.1,
            "no more segments than natively: {:.2} vs {:.2}",
            ours.0,
            native.0
        );
        // Natively four (each chunk alone, the second after a delayed ACK); the shim before it
        // told waits that block from those that do not, four too (each poll sent the chunk).
        assert!(
            ours.0 <= 2.3,
            "one segment per message each way: {:.2}",
            ours.0
        );
        // Its writes went on through waits that found the next chunk ready.
        let ready: u64 = stats_lines(&ours.2).iter().map(|s| s["ready"]).sum();
        assert!(ready >= 1, "{}", ours.2);
    }
}

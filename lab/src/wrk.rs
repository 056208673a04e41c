//! The `http-wrk` case (source 004's benchmark): Debian's `wrk`, a load tool nobody here
//! wrote, with one thread and `conns` keep-alive connections (it sets `TCP_NODELAY` on them
//! itself), against a server of the lab's that spends a fixed CPU time on each request and
//! writes its response as a header then a body, through the strategy under test.
//!
//! wrk's own figures are read back: requests completed, the run's duration, and every
//! latency it recorded (a `done()` script prints its histogram). The client side's segments
//! are counted at the server (`tcpi_segs_in` of the same connections).

use std::io::{self, Read};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::{ClientReport, Setup, SideCost};
use crate::strategy::{Burst, Conn, Strategy};
use crate::sys;

const HEADER: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\nConnection: keep-alive\r\n\r\n";
const BODY: [u8; 100] = [b'x'; 100];

/// Prints wrk's totals and its latency histogram, one `NAGLESS` line each.
const SCRIPT: &str = r#"done = function(summary, latency, requests)
  io.write("NAGLESS requests ", summary.requests, " duration ", summary.duration, "\n")
  for i = 1, #latency do
    local v, c = latency(i)
    io.write("NAGLESS latency ", v, " ", c, "\n")
  end
end
"#;

/// Busy for `d` of this thread's CPU time (an application's work per request).
fn spend(d: Duration) {
    let until = sys::thread_cpu_us() + d.as_micros() as u64;
    while sys::thread_cpu_us() < until {
        std::hint::spin_loop();
    }
}

/// Reads one request: the first byte by byte up to its blank line (its length is then known:
/// wrk sends the same request every time), the others whole.
fn read_request(conn: &mut Conn, len: &mut Option<usize>) -> io::Result<()> {
    match *len {
        Some(n) => conn.recv_exact(&mut vec![0u8; n]),
        None => {
            let mut req = Vec::new();
            let mut b = [0u8; 1];
            while !req.ends_with(b"\r\n\r\n") {
                if req.len() > 8192 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "request too long",
                    ));
                }
                conn.recv_exact(&mut b)?;
                req.push(b[0]);
            }
            *len = Some(req.len());
            Ok(())
        }
    }
}

/// Writes the `done()` script to a file of its own (created new: never through a link
/// someone left in the temporary folder).
fn script_file() -> io::Result<std::path::PathBuf> {
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SERIAL: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "nagless-lab-wrk-{}-{}.lua",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    );
    let path = std::env::temp_dir().join(name);
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    f.write_all(SCRIPT.as_bytes())?;
    Ok(path)
}

/// One connection's server: requests until wrk closes it.
fn serve(
    listener: &TcpListener,
    strategy: Strategy,
    work: Duration,
    pin: Option<usize>,
) -> io::Result<(SideCost, SideCost)> {
    if let Some(cpu) = pin {
        sys::pin_to_cpu(cpu);
    }
    let cpu0 = sys::thread_cpu_us();
    let (tcp, _) = listener.accept()?;
    tcp.set_read_timeout(Some(crate::harness::IO_TIMEOUT))?;
    let mut conn = Conn::new(tcp, strategy)?;
    let mut len = None;
    loop {
        match read_request(&mut conn, &mut len) {
            Ok(()) => {}
            Err(e) if crate::harness::peer_ended(&e) => break,
            Err(e) => return Err(e),
        }
        spend(work);
        if conn
            .send(HEADER, Burst::More)
            .and_then(|()| conn.send(&BODY, Burst::Last))
            .is_err()
        {
            break;
        }
    }
    let _ = conn.finish();
    let server = crate::harness::side_cost(&conn, cpu0)?;
    let info = conn.tcp_info()?;
    // What wrk sent on this connection, as the server received it.
    let client = SideCost {
        data_segs: info.data_segs_in.unwrap_or(0) as u64,
        segs: info.segs_in.unwrap_or(0) as u64,
        bytes: info.bytes_received.unwrap_or(0),
        syscalls: 0,
        cpu_us: 0,
    };
    Ok((client, server))
}

/// What wrk printed through the script.
#[derive(Debug, Default, PartialEq)]
struct WrkOutput {
    requests: u64,
    latencies_us: Vec<u64>,
}

fn parse(out: &str) -> io::Result<WrkOutput> {
    let mut w = WrkOutput::default();
    let bad = |l: &str| io::Error::other(format!("unexpected wrk output: {l:?}"));
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["NAGLESS", "requests", n, "duration", _] => {
                w.requests = n.parse::<f64>().map_err(|_| bad(line))?.round() as u64
            }
            ["NAGLESS", "latency", v, c] => {
                // (LuaJIT prints whole numbers bare; another Lua may print `40.0`.)
                let v = v.parse::<f64>().map_err(|_| bad(line))?.round() as u64;
                let c = c.parse::<f64>().map_err(|_| bad(line))?.round() as usize;
                w.latencies_us
                    .extend(std::iter::repeat_n(v, c.min(10_000_000)));
            }
            _ => {}
        }
    }
    if w.requests == 0 {
        return Err(io::Error::other(format!(
            "wrk completed no request: {}",
            out.trim()
        )));
    }
    Ok(w)
}

/// Runs wrk for `limit` (whole seconds, at least 1) against `conns` server connections.
pub(crate) fn run(
    conns: usize,
    work: Duration,
    strategy: Strategy,
    setup: Setup<'_>,
    limit: Duration,
) -> io::Result<(ClientReport, SideCost, SideCost)> {
    let listener = crate::harness::listener(&setup)?;
    let addr = listener.local_addr()?;
    let script = script_file()?;
    let secs = limit.as_secs().max(1);
    let mut cmd = match setup.net {
        Some(net) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", net.namespaces().0, "wrk"]);
            c
        }
        None => Command::new("wrk"),
    };
    cmd.args([
        "-t1",
        &format!("-c{conns}"),
        &format!("-d{secs}s"),
        "--timeout",
        "10s",
        "-s",
    ])
    .arg(&script)
    .arg(format!("http://{addr}/"))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let (costs, out) = std::thread::scope(|scope| {
        let servers: Vec<_> = (0..conns)
            .map(|_| scope.spawn(|| serve(&listener, strategy, work, setup.pin)))
            .collect();
        let out = cmd.output();
        // Servers wrk never connected to (it failed, or ended early) still wait in accept:
        // one connection each, from the client's side of the path, closed at once, ends them.
        // (Where wrk connected them all these wait unaccepted and go with the listener.)
        for _ in 0..conns {
            drop(crate::harness::connect(&setup, addr));
        }
        let costs: Vec<_> = servers
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("server thread panicked")))
            })
            .collect();
        (costs, out)
    });
    let _ = std::fs::remove_file(&script);
    let out = out.map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(
            io::ErrorKind::NotFound,
            "the http-wrk case drives Debian's wrk, which is not installed (apt-get install wrk)",
        ),
        _ => e,
    })?;
    if !out.status.success() {
        let mut err = String::new();
        let _ = out.stderr.as_slice().read_to_string(&mut err);
        return Err(io::Error::other(format!(
            "wrk failed ({}): {}",
            out.status,
            err.trim()
        )));
    }
    let w = parse(&String::from_utf8_lossy(&out.stdout))?;
    let (mut client, mut server) = (SideCost::default(), SideCost::default());
    for c in costs {
        let (c, s) = c?;
        client.add(&c);
        server.add(&s);
    }
    Ok((
        ClientReport {
            latencies_us: w.latencies_us,
            work: w.requests as f64,
        },
        client,
        server,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_output_is_read_back_and_refused_when_empty() {
        let out = "Running 1s test\nNAGLESS requests 3 duration 1000000\nNAGLESS latency 40 2\nNAGLESS latency 41000 1\n";
        assert_eq!(
            parse(out).unwrap(),
            WrkOutput {
                requests: 3,
                latencies_us: vec![40, 40, 41000]
            }
        );
        assert!(parse("NAGLESS requests 0 duration 1\n").is_err());
        assert!(parse("NAGLESS latency x 1\nNAGLESS requests 1 duration 1").is_err());
        let lua53 = "NAGLESS requests 2.0 duration 1.0\nNAGLESS latency 40.0 2.0\n";
        assert_eq!(parse(lua53).unwrap().latencies_us, vec![40, 40]);
    }
}

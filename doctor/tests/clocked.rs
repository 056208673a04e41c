//! The ACK-clocked verdict against ground truth: captures of a multiplexed client (four writer
//! threads sharing one connection under a lock, 64 requests in flight, one reader thread: the
//! shape of redis-rs #2195), with Nagle on (ACK-clocked) and with TCP_NODELAY (not clocked),
//! and of a sequential client that sends each request when the last answer has come (Nagle
//! on, nothing ever queued: not clocked), on loopback and at both ends of a 10 ms emulated
//! path. The captures are committed (`tests/clocked/`, gzip); `tests/golden/make-ack-clocked.sh`
//! makes them again (as root), and this file's ignored test `make_captures` is what it runs.
#![allow(clippy::disallowed_methods)] // the load measures real time

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

mod path_support;

use nagless_doctor::{Diagnosis, FlowReport};
use path_support::flow_on;

/// Bytes of each request and each answer.
const SIZE: usize = 40;
/// Requests per connection (the multiplexed client with Nagle on sends four times as many
/// across the 10 ms path, where it sends one segment per round trip or so).
const REQUESTS: usize = 2_000;
const WRITERS: usize = 4;
const IN_FLIGHT: usize = 64;

/// The flows of each capture, by server port: what the program did, and so what the doctor
/// must say of the client's direction.
const MULTIPLEXED_NAGLE: u16 = 7401;
const MULTIPLEXED_NODELAY: u16 = 7402;
const SEQUENTIAL_NAGLE: u16 = 7403;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clocked")
}

/// A server that answers each whole request with a write of its own (`nodelay` on its
/// socket as asked), until the client closes.
fn serve(l: TcpListener, nodelay: bool) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(nodelay).unwrap();
        let mut buf = [0u8; 65536];
        let mut left = 0;
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            left += n;
            while left >= SIZE {
                left -= SIZE;
                if s.write_all(&[b'R'; SIZE]).is_err() {
                    return;
                }
            }
        }
    })
}

/// A counting semaphore.
struct Permits {
    n: Mutex<usize>,
    cv: Condvar,
}

impl Permits {
    fn acquire(&self) {
        let mut n = self.n.lock().unwrap();
        while *n == 0 {
            n = self.cv.wait(n).unwrap();
        }
        *n -= 1;
    }

    fn release(&self, k: usize) {
        *self.n.lock().unwrap() += k;
        self.cv.notify_all();
    }
}

/// What a client run measured: requests per second.
struct Run {
    per_s: f64,
}

/// The multiplexed client: WRITERS threads each send their share of REQUESTS under one lock,
/// at most IN_FLIGHT unanswered, while one thread reads the answers.
fn multiplexed(s: TcpStream, nodelay: bool, requests: usize) -> Run {
    s.set_nodelay(nodelay).unwrap();
    let permits = Arc::new(Permits {
        n: Mutex::new(IN_FLIGHT),
        cv: Condvar::new(),
    });
    let w = Arc::new(Mutex::new(s.try_clone().unwrap()));
    let start = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (w, permits) = (w.clone(), permits.clone());
            thread::spawn(move || {
                for _ in 0..requests / WRITERS {
                    permits.acquire();
                    w.lock().unwrap().write_all(&[b'Q'; SIZE]).unwrap();
                }
            })
        })
        .collect();
    let mut r = s.try_clone().unwrap();
    let mut buf = [0u8; 65536];
    let (mut got, mut done) = (0, 0);
    while done < requests {
        let n = r.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed");
        got += n;
        let now = got / SIZE;
        permits.release(now - done);
        done = now;
    }
    let secs = start.elapsed().as_secs_f64();
    for t in writers {
        t.join().unwrap();
    }
    Run {
        per_s: requests as f64 / secs,
    }
}

/// The sequential client: one request, then its answer, then the next (Nagle on).
fn sequential(mut s: TcpStream, requests: usize) -> Run {
    let start = Instant::now();
    let mut buf = [0u8; SIZE];
    for _ in 0..requests {
        s.write_all(&[b'Q'; SIZE]).unwrap();
        s.read_exact(&mut buf).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    Run {
        per_s: requests as f64 / secs,
    }
}

/// The three flows, one after the other: `listen(port)` and `connect(port)` make each end;
/// `far`: across the 10 ms path.
fn three_flows(
    listen: impl Fn(u16) -> TcpListener,
    connect: impl Fn(u16) -> TcpStream,
    far: bool,
) -> Vec<String> {
    let mut said = Vec::new();
    for (port, nodelay) in [(MULTIPLEXED_NAGLE, false), (MULTIPLEXED_NODELAY, true)] {
        let srv = serve(listen(port), nodelay);
        let requests = if far && !nodelay {
            4 * REQUESTS
        } else {
            REQUESTS
        };
        let run = multiplexed(connect(port), nodelay, requests);
        srv.join().unwrap();
        said.push(format!(
            "port {port}: multiplexed, {}, {requests} requests: {:.0} requests/s",
            if nodelay { "TCP_NODELAY" } else { "Nagle on" },
            run.per_s,
        ));
    }
    let srv = serve(listen(SEQUENTIAL_NAGLE), false);
    // (One round trip each: a tenth as many across the path.)
    let requests = if far { REQUESTS / 10 } else { REQUESTS };
    let run = sequential(connect(SEQUENTIAL_NAGLE), requests);
    srv.join().unwrap();
    said.push(format!(
        "port {SEQUENTIAL_NAGLE}: sequential, Nagle on, {requests} requests: {:.0} requests/s",
        run.per_s
    ));
    said
}

/// The doctor on the committed capture `name`, every flow kept.
fn diagnose(name: &str) -> Diagnosis {
    let bytes = std::fs::read(dir().join(name)).unwrap();
    let (reader, _) = nagless_doctor::input::decompressed(&bytes[..]).unwrap();
    let opts = nagless_doctor::Options {
        top: 0,
        ..nagless_doctor::Options::default()
    };
    nagless_doctor::diagnose_reader(reader, opts, |_| {}).unwrap()
}

/// The directions the doctor finds ACK-clocked in `f`.
fn clocked(f: &FlowReport) -> Vec<&'static str> {
    f.ack_clocked.iter().map(|c| c.direction).collect()
}

/// Each capture, from each end: the multiplexed flow with Nagle on is ACK-clocked from its
/// client, its verdict and its finding for Wireshark as documented; with TCP_NODELAY, or a
/// client that sends each request when the last answer has come, no direction is. (Its
/// server, Nagle on too, answers each request with a write of its own, so its answers queue
/// behind the ACKs the client's requests carry; but each of its segments leaves as a
/// request arrives, as any answer does, and the wire does not tell the two apart: the server
/// is not named, the limit `src/analysis/clock.rs` gives.)
#[test]
fn the_verdict_matches_what_each_program_did_at_either_end() {
    for name in [
        "loopback.pcap.gz",
        "path10ms-client-end.pcap.gz",
        "path10ms-server-end.pcap.gz",
    ] {
        let d = diagnose(name);
        assert_eq!(d.flows_total, 3, "{name}");
        assert_eq!(d.flows_ack_clocked, 1, "{name}");
        let f = flow_on(&d, MULTIPLEXED_NAGLE);
        assert_eq!(
            clocked(f),
            ["client->server"],
            "{name}: {:#?}",
            f.ack_clocked
        );
        for c in &f.ack_clocked {
            eprintln!(
                "{name}, {}: {} of {} small segments clocked ({:.0} %), queued {:.2} s per second, {} µs each",
                c.direction,
                c.clocked,
                c.segments,
                c.share * 100.0,
                c.queued_per_s,
                c.mean_queued_us
            );
            assert!(c.share >= 0.8 && c.clocked >= 200, "{name}: {c:#?}");
            // The budget gives the clock the time its writes queued (out of the round trips
            // that ran meanwhile), and still adds up to the flow.
            let side = if c.direction == "client->server" {
                "client"
            } else {
                "server"
            };
            let given: f64 = f
                .budget
                .causes
                .iter()
                .filter(|s| s.cause == nagless_doctor::analysis::Cause::AckClocked)
                .filter(|s| s.side == Some(side))
                .map(|s| s.ms)
                .sum();
            // (All of it, unless the round trips were shorter in all: on loopback.)
            let path_left = f
                .budget
                .causes
                .iter()
                .any(|s| s.cause == nagless_doctor::analysis::Cause::RoundTrip);
            let queued = c.queued_s * 1000.0;
            assert!(
                given <= queued * 1.01 + 0.5 && (given >= queued * 0.99 || !path_left),
                "{name}: {given} ms in the budget, {queued} ms queued"
            );
            let sum: f64 = f.budget.causes.iter().map(|s| s.ms).sum();
            assert!((sum - f.budget.total_ms).abs() < 0.01, "{name}");
            assert!(c.first.len() == 32, "{name}");
            for s in &c.first {
                assert!(s.ack.frame < s.segment.frame, "{name}: {s:?}");
            }
        }
        let line = f
            .verdict
            .iter()
            .find(|v| v.starts_with("ACK-clocked, client->server"))
            .unwrap();
        assert!(
            line.contains("left as an ACK arrived") && line.contains("--nodelay"),
            "{line}"
        );
        let clocked: Vec<_> = f
            .findings
            .iter()
            .filter(|x| x.kind != "exchange-budget")
            .collect();
        assert_eq!(clocked.len(), 1, "{name}");
        for (finding, c) in clocked.into_iter().zip(&f.ack_clocked) {
            assert_eq!(finding.kind, "ack-clocked");
            assert_eq!(finding.direction, c.direction);
            assert_eq!(finding.frames.len(), 64);
            assert!(finding.summary.contains("is ACK-clocked"));
        }
        for port in [MULTIPLEXED_NODELAY, SEQUENTIAL_NAGLE] {
            let f = flow_on(&d, port);
            assert!(
                f.ack_clocked.is_empty(),
                "{name}, port {port}: {:#?}",
                f.ack_clocked
            );
            // (Only each exchange's budget.)
            assert!(
                f.findings.iter().all(|x| x.kind == "exchange-budget"),
                "{name}, port {port}"
            );
            assert!(!f.verdict.iter().any(|v| v.contains("ACK-clocked")));
        }
        let text = nagless_doctor::report::text(&d);
        assert!(text.contains("1 flow(s) ACK-clocked"), "{text}");
        assert!(text.contains("  clocked\n"), "{text}");
        let json = nagless_doctor::report::json(&d);
        assert_eq!(json["flows_ack_clocked"], 1);
    }
}

fn gzip(bytes: &[u8], to: &Path) {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(bytes).unwrap();
    std::fs::write(to, z.finish().unwrap()).unwrap();
}

/// Makes the committed captures: `tests/golden/make-ack-clocked.sh` runs it, as root.
#[test]
#[ignore = "makes the committed captures (tests/golden/make-ack-clocked.sh, as root)"]
fn make_captures() {
    use nagless_netpath::{EmulatedPath, PathSpec};
    use nagless_test_support::Tcpdump;
    std::fs::create_dir_all(dir()).unwrap();
    let mut notes = vec![format!(
        "# Made by doctor/tests/golden/make-ack-clocked.sh: requests and answers of {SIZE} B;"
    )];
    notes.push(format!(
        "# multiplexed: {WRITERS} writer threads, {IN_FLIGHT} in flight, one reader. What the client measured:"
    ));
    // Loopback: one capture is both ends.
    let lo = Tcpdump::start_in(None, "clocked-lo", "tcp portrange 7401-7403", &["-i", "lo"]);
    let said = three_flows(
        |port| TcpListener::bind(("127.0.0.1", port)).unwrap(),
        |port| TcpStream::connect(("127.0.0.1", port)).unwrap(),
        false,
    );
    gzip(&lo.finish(), &dir().join("loopback.pcap.gz"));
    notes.extend(said.iter().map(|s| format!("loopback.pcap.gz {s}")));
    // A 10 ms path, captured in each namespace.
    let p = EmulatedPath::new(&PathSpec {
        rtt: Duration::from_millis(10),
        ..PathSpec::default()
    })
    .expect("an emulated path (root)");
    let (cns, sns) = p.namespaces();
    let filter = "tcp portrange 7401-7403";
    let at_client = Tcpdump::start_in(Some(cns), "clocked-c", filter, &["-i", "any"]);
    let at_server = Tcpdump::start_in(Some(sns), "clocked-s", filter, &["-i", "any"]);
    let addr = p.server_addr();
    let said = three_flows(
        |port| {
            p.run_in_server(move || TcpListener::bind((addr, port)))
                .unwrap()
                .unwrap()
        },
        |port| {
            p.run_in_client(move || TcpStream::connect((addr, port)))
                .unwrap()
                .unwrap()
        },
        true,
    );
    gzip(
        &at_client.finish(),
        &dir().join("path10ms-client-end.pcap.gz"),
    );
    gzip(
        &at_server.finish(),
        &dir().join("path10ms-server-end.pcap.gz"),
    );
    notes.extend(said.iter().map(|s| format!("path10ms {s}")));
    std::fs::write(dir().join("made.txt"), notes.join("\n") + "\n").unwrap();
}

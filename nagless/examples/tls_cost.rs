//! What an answer of three writes costs over TLS, three ways (Linux).
//!
//! ```sh
//! scripts/bench-tls                       # or:
//! cargo run --release -p nagless --features tls --example tls_cost -- --answers 5000 --runs 3
//! ```
//!
//! A server thread answers `--answers` requests on 127.0.0.1, each answer written as three
//! writes (20 + 200 + 20 bytes), with
//! - `nodelay`: `rustls::StreamOwned` over a `TcpStream` with `TCP_NODELAY`;
//! - `stream`: `rustls::StreamOwned` over a `NaglessStream` (`explicit_flush(false)`), the
//!   stacking documented before the TLS layer;
//! - `layer`: `nagless::tls::TlsStream`, the TLS layer.
//!
//! The client (one rustls connection on a plain socket, the same for all three) sends a
//! 4-byte request, reads the 240-byte answer, and counts the TLS records it receives by their
//! headers. Per answer it reports: TLS records, data segments the server sent (`TCP_INFO`),
//! TCP payload bytes the server sent (`TCP_INFO` `bytes_sent`), the server thread's CPU time
//! (`getrusage(RUSAGE_THREAD)`, user + system), and the client's round-trip latency (p50,
//! p99). With `--runs N` the modes are run in turn N times and each figure is the median;
//! `--only MODE` measures one of them (for a profiler).

#[cfg(target_os = "linux")]
#[path = "../tests/tls_support/pki.rs"]
mod pki;
#[cfg(target_os = "linux")]
#[path = "../tests/tls_support/records.rs"]
mod records;

#[cfg(target_os = "linux")]
#[allow(clippy::disallowed_methods)] // a benchmark reads the clock
mod bench {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use nagless::{FlushPolicy, NaglessStream, TcpInfo};
    use rustls::pki_types::ServerName;

    const PARTS: [usize; 3] = [20, 200, 20];
    const ANSWER: usize = 240;

    use super::pki;
    use super::records::RecordScan as Scan;

    /// Configs for "localhost"; the server sends no session tickets, so every
    /// application-data record the client counts is an answer's.
    pub fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
        let pki = pki::pki();
        (pki.server, pki.client)
    }

    /// CPU time (user + system) of the calling thread.
    fn thread_cpu() -> Duration {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes one `rusage` through a valid pointer; RUSAGE_THREAD is
        // Linux's "the calling thread".
        let ret = unsafe { libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr()) };
        assert_eq!(ret, 0, "getrusage");
        // SAFETY: getrusage succeeded and filled the struct (it was zeroed before anyway).
        let ru = unsafe { ru.assume_init() };
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }

    #[derive(Debug, Clone)]
    pub struct Row {
        pub records: f64,
        pub segments: f64,
        pub bytes: f64,
        pub cpu_us: f64,
        pub p50_us: f64,
        pub p99_us: f64,
        pub suite: String,
    }

    /// What the server side measured.
    struct ServerSide {
        segments: u64,
        bytes: u64,
        cpu: Duration,
    }

    fn serve(
        mode: &str,
        tcp: TcpStream,
        cfg: Arc<rustls::ServerConfig>,
        answers: usize,
    ) -> ServerSide {
        let conn = rustls::ServerConnection::new(cfg).expect("server conn");
        let parts: Vec<Vec<u8>> = PARTS.iter().map(|&n| vec![b'x'; n]).collect();
        let info = |s: &TcpStream| {
            let i = TcpInfo::of(s).expect("TCP_INFO");
            (
                u64::from(i.data_segs_out.unwrap_or(0)),
                i.bytes_sent.unwrap_or(0),
            )
        };
        // The warm-up round (handshake, first answer) is not counted.
        fn run<S: Read + Write>(
            tls: &mut S,
            parts: &[Vec<u8>],
            answers: usize,
            mut on_start: impl FnMut(&S),
        ) {
            let mut req = [0u8; 4];
            tls.read_exact(&mut req).expect("first request");
            for p in parts {
                tls.write_all(p).expect("write");
            }
            tls.read_exact(&mut req).expect("request");
            on_start(tls);
            for i in 0..answers {
                for p in parts {
                    tls.write_all(p).expect("write");
                }
                if i + 1 < answers {
                    tls.read_exact(&mut req).expect("request");
                }
            }
            tls.flush().expect("flush");
        }
        let mut start = (0, 0, Duration::ZERO);
        let end;
        match mode {
            "nodelay" => {
                tcp.set_nodelay(true).expect("nodelay");
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                run(&mut tls, &parts, answers, |t| {
                    let (s, b) = info(&t.sock);
                    start = (s, b, thread_cpu());
                });
                let cpu = thread_cpu();
                // Let the last segment leave before reading the counters.
                let (s, b) = info(&tls.sock);
                end = (s, b, cpu);
            }
            "stream" => {
                let policy = FlushPolicy::default().explicit_flush(false);
                let sock = NaglessStream::with_policy(tcp, policy).expect("wrap");
                let mut tls = rustls::StreamOwned::new(conn, sock);
                run(&mut tls, &parts, answers, |t| {
                    let (s, b) = info(t.sock.get_ref());
                    start = (s, b, thread_cpu());
                });
                tls.sock.flush_now().expect("flush");
                let cpu = thread_cpu();
                let (s, b) = info(tls.sock.get_ref());
                end = (s, b, cpu);
            }
            "layer" => {
                let mut tls = nagless::tls::TlsStream::new(conn, tcp).expect("wrap");
                run(&mut tls, &parts, answers, |t| {
                    let (s, b) = info(t.get_ref());
                    start = (s, b, thread_cpu());
                });
                let cpu = thread_cpu();
                let (s, b) = info(tls.get_ref());
                end = (s, b, cpu);
            }
            other => panic!("unknown mode {other}"),
        }
        ServerSide {
            segments: end.0 - start.0,
            bytes: end.1 - start.1,
            cpu: end.2 - start.2,
        }
    }

    /// The client: returns (records, latencies) of the counted answers.
    fn client(
        addr: std::net::SocketAddr,
        cfg: Arc<rustls::ClientConfig>,
        answers: usize,
    ) -> (u64, Vec<Duration>, String) {
        let mut tcp = TcpStream::connect(addr).expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let mut conn =
            rustls::ClientConnection::new(cfg, ServerName::try_from("localhost").expect("name"))
                .expect("client conn");
        let mut scan = Scan::default();
        let mut buf = vec![0u8; 64 * 1024];
        let mut plain = Vec::new();
        let mut round =
            |conn: &mut rustls::ClientConnection, tcp: &mut TcpStream, scan: &mut Scan| {
                conn.writer().write_all(b"GET\n").expect("request");
                while conn.wants_write() {
                    conn.write_tls(tcp).expect("send");
                }
                while plain.len() < ANSWER {
                    let n = tcp.read(&mut buf).expect("read");
                    assert!(n > 0, "server closed");
                    scan.feed(&buf[..n]);
                    let mut rest = &buf[..n];
                    while !rest.is_empty() {
                        conn.read_tls(&mut rest).expect("read_tls");
                        conn.process_new_packets().expect("TLS");
                        let _ = conn.reader().read_to_end(&mut plain);
                    }
                    while conn.wants_write() {
                        conn.write_tls(tcp).expect("send");
                    }
                }
                plain.drain(..ANSWER);
            };
        // The warm-up round (the handshake's last flight may share it) is not counted.
        round(&mut conn, &mut tcp, &mut scan);
        let before = scan.app_records;
        let mut lat = Vec::with_capacity(answers);
        for _ in 0..answers {
            let t = Instant::now();
            round(&mut conn, &mut tcp, &mut scan);
            lat.push(t.elapsed());
        }
        let suite = conn
            .negotiated_cipher_suite()
            .map_or("none".into(), |s| format!("{:?}", s.suite()));
        (scan.app_records - before, lat, suite)
    }

    pub fn measure(
        mode: &str,
        server_cfg: Arc<rustls::ServerConfig>,
        client_cfg: Arc<rustls::ClientConfig>,
        answers: usize,
    ) -> Row {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let c = std::thread::spawn(move || client(addr, client_cfg, answers));
        let (tcp, _) = listener.accept().expect("accept");
        let mode_owned = mode.to_string();
        let s = std::thread::spawn(move || serve(&mode_owned, tcp, server_cfg, answers))
            .join()
            .expect("server");
        let (records, mut lat, suite) = c.join().expect("client");
        lat.sort();
        let n = answers as f64;
        Row {
            records: records as f64 / n,
            segments: s.segments as f64 / n,
            bytes: s.bytes as f64 / n,
            cpu_us: s.cpu.as_secs_f64() * 1e6 / n,
            p50_us: lat[lat.len() / 2].as_secs_f64() * 1e6,
            p99_us: lat[lat.len() * 99 / 100].as_secs_f64() * 1e6,
            suite,
        }
    }
}

#[cfg(target_os = "linux")]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let answers = arg("--answers", 5000);
    let runs = arg("--runs", 3).max(1);
    let (server, client) = bench::configs();
    let modes = [
        ("nodelay", "rustls `StreamOwned` over a NODELAY `TcpStream`"),
        (
            "stream",
            "rustls `StreamOwned` over `NaglessStream` (explicit_flush(false))",
        ),
        ("layer", "`nagless::tls::TlsStream` (the TLS layer)"),
    ];
    // `--only MODE` measures one stack (for a profiler).
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1));
    let mut rows: Vec<Vec<bench::Row>> = vec![Vec::new(); modes.len()];
    for _ in 0..runs {
        for (i, (mode, _)) in modes.iter().enumerate() {
            if only.is_some_and(|o| o != mode) {
                continue;
            }
            rows[i].push(bench::measure(
                mode,
                server.clone(),
                client.clone(),
                answers,
            ));
        }
    }
    let median = |v: &[bench::Row], f: fn(&bench::Row) -> f64| {
        let mut xs: Vec<f64> = v.iter().map(f).collect();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let suite = rows
        .iter()
        .flatten()
        .next()
        .map_or("", |r| r.suite.as_str());
    println!("answers={answers} runs={runs} suite={suite} (medians of the runs; per answer of 3 writes: 20+200+20 bytes)");
    println!();
    println!("| stack | TLS records | data segments | TCP payload bytes | server CPU µs | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|---|---|");
    for (i, (_, name)) in modes.iter().enumerate() {
        let r = &rows[i];
        if r.is_empty() {
            continue;
        }
        println!(
            "| {name} | {:.2} | {:.2} | {:.0} | {:.1} | {:.1} | {:.1} |",
            median(r, |r| r.records),
            median(r, |r| r.segments),
            median(r, |r| r.bytes),
            median(r, |r| r.cpu_us),
            median(r, |r| r.p50_us),
            median(r, |r| r.p99_us),
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("tls_cost counts segments with Linux's TCP_INFO: Linux only");
}

//! nagless inside the stacks Rust users run: rustls (std, and tokio-rustls over the tokio
//! adapter) and hyper. The examples are run as built by `cargo test`; every server is a
//! process or task of this test on 127.0.0.1, stopped by the test. Segment counts come from
//! the kernel (`TCP_INFO`), with margins for a descheduled thread.
#![allow(clippy::disallowed_methods)]
// Segments are counted with Linux's TCP_INFO.
#![cfg(target_os = "linux")]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/<name>`, built by `cargo test` with this test.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(p.is_file(), "{} not built", p.display());
    p
}

fn fields(text: &str) -> HashMap<String, f64> {
    text.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
        .collect()
}

#[cfg(feature = "tokio")]
#[path = "tls_support/pki.rs"]
mod pki;

#[cfg(feature = "tokio")]
mod with_tokio {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;
    use std::process::{Child, Stdio};

    use nagless::tokio_adapter::NaglessStream;
    use nagless::TcpInfo;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The hyper example server, stopped by its PID when dropped.
    struct Server(Child, std::net::SocketAddr);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn hyper_server(extra: &[&str]) -> Server {
        let mut child = Command::new(example("hyper_server"))
            .args(["--seconds", "60"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .trim_start_matches("listening on ")
            .parse()
            .unwrap();
        Server(child, addr)
    }

    /// Sends `batches` batches of `depth` pipelined GETs on one connection; returns data
    /// segments received per response.
    fn load(addr: std::net::SocketAddr, batches: usize, depth: usize) -> f64 {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let req = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n".repeat(depth);
        let before = TcpInfo::of(&c).unwrap().data_segs_in.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        for _ in 0..batches {
            c.write_all(&req).unwrap();
            let mut got = Vec::new();
            while got.windows(12).filter(|w| w == b"hello world\n").count() < depth {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "server closed");
                got.extend_from_slice(&buf[..n]);
            }
        }
        let after = TcpInfo::of(&c).unwrap().data_segs_in.unwrap();
        f64::from(after - before) / (batches * depth) as f64
    }

    /// Tests that run alone (docs/testing.md).
    mod alone {
        use super::*;

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn tokio_rustls_records_of_one_answer_leave_in_one_segment() {
            let pki = super::pki::pki();
            let (server_cfg, client_cfg) = (pki.server, pki.client);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            const ROUNDS: u32 = 50;
            let client = tokio::spawn(async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.set_nodelay(true).unwrap();
                let connector = tokio_rustls::TlsConnector::from(client_cfg);
                let name = ServerName::try_from("localhost").unwrap();
                let mut tls = connector.connect(name, tcp).await.unwrap();
                let mut answer = [0u8; 300];
                for _ in 0..ROUNDS {
                    tls.write_all(b"GET\n").await.unwrap();
                    tls.flush().await.unwrap();
                    tls.read_exact(&mut answer).await.unwrap();
                }
            });
            let (tcp, _) = listener.accept().await.unwrap();
            // tokio-rustls writes records without flushing, so the default policy is enough.
            let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg);
            let mut tls = acceptor
                .accept(NaglessStream::new(tcp).unwrap())
                .await
                .unwrap();
            let mut request = [0u8; 4];
            tls.read_exact(&mut request).await.unwrap();
            let before = tls.get_ref().0.tcp_info().unwrap().data_segs_out.unwrap();
            for i in 0..ROUNDS {
                tls.write_all(&[b'h'; 100]).await.unwrap();
                tls.write_all(&[b'b'; 150]).await.unwrap();
                tls.write_all(&[b't'; 50]).await.unwrap();
                if i + 1 < ROUNDS {
                    tls.read_exact(&mut request).await.unwrap();
                }
            }
            tls.flush().await.unwrap();
            client.await.unwrap();
            let segs = tls.get_ref().0.tcp_info().unwrap().data_segs_out.unwrap() - before;
            let lingered = tls
                .get_ref()
                .0
                .stats()
                .flushes_for(nagless::FlushReason::Linger);
            eprintln!("tokio-rustls over nagless: {segs} data segments for {ROUNDS} answers of 3 records ({lingered} linger flushes)");
            assert!(segs <= ROUNDS + lingered as u32, "{segs} segments");
            // A linger flush is a thread descheduled mid-burst: a few on a busy machine; one in
            // ten at most (a broken coalescer would flush most bursts so).
            assert!(
                lingered as usize <= ROUNDS as usize / 10,
                "{lingered} linger flushes"
            );
        }

        #[test]
        fn hyper_over_nagless_answers_keepalive_and_pipelined_requests() {
            let plain = hyper_server(&["--plain"]);
            let ours = hyper_server(&[]);
            let mut rows = Vec::new();
            for (name, s) in [("nodelay", &plain), ("nagless", &ours)] {
                let keepalive = load(s.1, 200, 1);
                let pipelined = load(s.1, 20, 10);
                eprintln!("hyper {name}: {keepalive:.2} data segments per response (keep-alive), {pipelined:.2} (pipelined depth 10)");
                rows.push((keepalive, pipelined));
            }
            // Every response arrived (load() checks). hyper buffers each response itself and
            // flushes it with one vectored write: one segment per response either way, and
            // nagless must not add any.
            assert!(
                rows[1].0 <= 1.05 && rows[1].0 <= rows[0].0 + 0.05,
                "{rows:?}"
            );
            assert!(rows[1].1 <= rows[0].1 + 0.05, "{rows:?}");
        }
    }
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn rustls_records_of_one_answer_leave_in_one_segment() {
        let out = Command::new(example("tls_stack")).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let f = fields(&text);
        let (ours, plain) = (f["nagless_segs_per_answer"], f["nodelay_segs_per_answer"]);
        eprintln!("{}", text.trim());
        // Three TLS records per answer: one segment over nagless (a linger release of a
        // descheduled server may split one or two answers), three with NODELAY alone.
        assert!(ours <= 1.1, "{text}");
        assert!(plain >= 2.0, "{text}");
    }

    /// hyper's HTTP/2 client shares one connection between 32 tasks over a clocked stream
    /// (`examples/multiplexed_client.rs`, which checks every body it reads): all answered, and
    /// far faster than a delayed-ACK wait per request would allow (32 tasks each waiting 40 ms
    /// make at most 800 requests a second; an unloaded run makes about a hundred times that).
    #[cfg(feature = "tokio")]
    #[test]
    fn hyper_http2_tasks_share_one_clocked_connection_without_a_stall() {
        let out = Command::new(example("multiplexed_client"))
            .args(["--requests", "4000"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rate: f64 = text
            .split(": ")
            .nth(2)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no rate in {text:?}"));
        // (A generous bar: the stall's ceiling is 800 a second, a debug build on a loaded
        // machine makes several thousand.)
        assert!(rate > 1_000.0, "{text}");
    }
}

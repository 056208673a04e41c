//! Interop of the std TLS layer (`nagless::tls::TlsStream`) with a TLS stack we did not
//! write: Debian's `openssl s_client` against our server and our client against
//! `openssl s_server`, with key updates both ways and close_notify. (Skipped with a note
//! when `openssl` is missing.)
#![cfg(all(feature = "tls", unix))]
#![allow(clippy::disallowed_methods)]

mod tls_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use nagless::tls::TlsStream;
use nagless_test_support::{have_tool, Started};
use rustls::pki_types::ServerName;
use tls_support::{listen, pki, Pki};

/// Writes the PEM files for `openssl` into a fresh directory.
fn pem_files(pki: &Pki) -> (tempdir::Dir, String, String) {
    let dir = tempdir::Dir::new();
    let cert = dir.path.join("cert.pem");
    let key = dir.path.join("key.pem");
    std::fs::write(&cert, &pki.cert_pem).unwrap();
    std::fs::write(&key, &pki.key_pem).unwrap();
    (dir, cert.display().to_string(), key.display().to_string())
}

mod tempdir {
    pub struct Dir {
        pub path: std::path::PathBuf,
    }
    impl Dir {
        pub fn new() -> Dir {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("nagless-tls-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Dir { path }
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Kills the child (by its PID) if the test has not ended in 30 s.
fn watchdog(pid: u32) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            rx.recv_timeout(Duration::from_secs(30))
        {
            // Timed out (the sender is still alive): stop our child.
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    });
    tx
}

/// `openssl s_client` talks to our server: lines in, three-write answers out, a key
/// update with "update requested" (`K`) in the middle, close_notify at the end.
#[test]
fn openssl_s_client_against_our_server() {
    if !have_tool("openssl") {
        return;
    }
    let pki = pki();
    let (l, addr) = listen();
    let mut child = Started(
        Command::new("openssl")
            .args(["s_client", "-connect", &addr.to_string()])
            .args(["-servername", "localhost", "-tls1_3", "-no_ign_eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let dog = watchdog(child.0.id());
    let mut stdin = child.0.stdin.take().unwrap();
    let stdout = child.0.stdout.take().unwrap();
    let stderr = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = BufReader::new(stdout).read_to_string(&mut out);
        out
    });
    let (key_update_tx, key_update_rx) = std::sync::mpsc::channel();
    let err_reader = std::thread::spawn(move || {
        let mut out = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line == "KEYUPDATE" {
                let _ = key_update_tx.send(());
            }
            out += &line;
            out.push('\n');
        }
        out
    });
    let (tcp, _) = l.accept().unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut tls = TlsStream::new(rustls::ServerConnection::new(pki.server).unwrap(), tcp).unwrap();
    let mut lines = Vec::new();
    let mut failure = None;
    'lines: for line in ["alpha\n", "K\n", "beta\n", "gamma\n"] {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
        if line.starts_with('K') {
            // s_client turns the line into a KeyUpdate (update requested); rustls answers
            // it with its own while reading the next line. s_client takes a whole read of
            // its input as the command: the next line waits until it said so.
            if key_update_rx.recv_timeout(Duration::from_secs(20)).is_err() {
                failure = Some("s_client did not send the key update".to_string());
                break;
            }
            continue;
        }
        let mut got = Vec::new();
        let mut b = [0u8; 1];
        while !got.ends_with(b"\n") {
            match tls.read(&mut b) {
                Ok(1) => got.push(b[0]),
                other => {
                    failure = Some(format!("reading {line:?}: {other:?}"));
                    break 'lines;
                }
            }
        }
        let text = String::from_utf8(got).unwrap();
        tls.write_all(b"[").unwrap();
        tls.write_all(text.trim_end().as_bytes()).unwrap();
        tls.write_all(b"]\n").unwrap();
        lines.push(text);
    }
    if failure.is_none() {
        tls.send_close_notify().unwrap();
    } else {
        drop(tls);
    }
    drop(stdin);
    let out = reader.join().unwrap() + &err_reader.join().unwrap();
    drop(dog);
    assert!(failure.is_none(), "{failure:?}; s_client said:\n{out}");
    assert_eq!(lines, ["alpha\n", "beta\n", "gamma\n"]);
    for want in ["[alpha]\n", "[beta]\n", "[gamma]\n", "KEYUPDATE"] {
        assert!(
            out.contains(want),
            "{want:?} missing from s_client's output:\n{out}"
        );
    }
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    /// Our client talks to `openssl s_server -rev` (which answers each line reversed),
    /// sending each line as two writes, with a key update of ours in the middle.
    #[test]
    fn our_client_against_openssl_s_server() {
        if !have_tool("openssl") {
            return;
        }
        let pki = pki();
        let (_dir, cert, key) = pem_files(&pki);
        let port = nagless_test_support::free_port();
        let mut child = Started(
            Command::new("openssl")
                .args(["s_server", "-accept", &port.to_string(), "-naccept", "1"])
                .args(["-cert", &cert, "-key", &key, "-rev", "-tls1_3"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let dog = watchdog(child.0.id());
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        let mut line = String::new();
        while !line.starts_with("ACCEPT") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "s_server ended");
        }
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let conn = rustls::ClientConnection::new(
            pki.client.clone(),
            ServerName::try_from("localhost").unwrap(),
        )
        .unwrap();
        let mut tls = TlsStream::new(conn, tcp).unwrap();
        for (i, (a, b)) in [("hello ", "world"), ("nag", "less"), ("after ", "update")]
            .iter()
            .enumerate()
        {
            if i == 2 {
                tls.refresh_traffic_keys().unwrap();
            }
            tls.write_all(a.as_bytes()).unwrap();
            tls.write_all(b.as_bytes()).unwrap();
            tls.write_all(b"\n").unwrap();
            let want: String = format!("{a}{b}").chars().rev().collect::<String>() + "\n";
            let mut got = vec![0u8; want.len()];
            tls.read_exact(&mut got).unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), want);
        }
        let records = tls.wire_stats().seals;
        tls.close().unwrap();
        drop(dog);
        // Three writes, one record per line.
        assert_eq!(records, 3);
    }
}

//! Benchmarks (not in CI): the cost of a **message** as a user pays it: K writes of 100 bytes
//! (K = 2, 3, 10), then the turn to read the peer's 1-byte answer, over a real loopback
//! connection. Each API of the library against what a careful programmer writes by hand
//! (`BufWriter` with a `flush()` placed before the read) and against plain writes under
//! `TCP_NODELAY` (one send, and one segment, per write). Criterion times a message; after
//! each case a line gives its system calls (sends) and data segments per message (the
//! client's `tcpi_data_segs_out`), and the client thread's own CPU time per message, which a
//! round trip's wake-ups do not blur. Figures: docs/results/benchmarks.md.
//!
//! The same over TLS (rustls, TLS 1.3, to a rustls peer): the library's two TLS streams (std
//! and tokio) against `rustls::StreamOwned` under a `BufWriter` flushed by hand before the
//! read (one record per message), the tokio one against tokio-rustls under tokio's
//! `BufWriter` flushed so, and both against `StreamOwned` written to directly under
//! `TCP_NODELAY` (a record and a send per write).
//! Run: `cargo bench -p nagless --features tokio,tls --bench messages`.
#![allow(missing_docs, clippy::disallowed_methods)]

use std::io::{BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

#[path = "../tests/tls_support/pki.rs"]
mod pki;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PART: usize = 100;
const WRITES: [usize; 3] = [2, 3, 10];

/// A connection to a peer that answers each `k * PART` bytes it receives with one byte.
fn peer(k: usize) -> TcpStream {
    peer_over(k, |tcp| tcp)
}

/// As [`peer`], over TLS: a rustls server answering each `k * PART` bytes of plaintext with
/// one byte (its own record, flushed at once).
fn tls_peer(k: usize, cfg: Arc<rustls::ServerConfig>) -> TcpStream {
    peer_over(k, move |tcp| {
        rustls::StreamOwned::new(rustls::ServerConnection::new(cfg).unwrap(), tcp)
    })
}

/// A connection to a peer thread that answers over `wrap(its end)`: each `k * PART` bytes
/// read, one byte written and flushed.
fn peer_over<S: Read + Write>(
    k: usize,
    wrap: impl FnOnce(TcpStream) -> S + Send + 'static,
) -> TcpStream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (tcp, _) = l.accept().unwrap();
        tcp.set_nodelay(true).unwrap();
        let mut s = wrap(tcp);
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0;
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                return;
            }
            got += n;
            while got >= k * PART {
                got -= k * PART;
                if s.write_all(b"!").and_then(|()| s.flush()).is_err() {
                    return;
                }
            }
        }
    });
    TcpStream::connect(addr).unwrap()
}

fn client_conn(cfg: &Arc<rustls::ClientConfig>) -> rustls::ClientConnection {
    rustls::ClientConnection::new(cfg.clone(), "localhost".try_into().unwrap()).unwrap()
}

fn segs_out(s: &TcpStream) -> u64 {
    nagless::TcpInfo::of(s)
        .ok()
        .and_then(|i| i.data_segs_out)
        .map_or(0, u64::from)
}

/// Prints a case's sends and data segments per message.
fn report(name: &str, k: usize, sends: u64, segs: u64, messages: u64, cpu: Duration) {
    let m = messages.max(1) as f64;
    eprintln!(
        "{name} k={k}: {:.2} send-side system calls, {:.2} data segments and {:.2} µs of the caller's CPU per message",
        sends as f64 / m,
        segs as f64 / m,
        cpu.as_secs_f64() * 1e6 / m
    );
}

/// The calling thread's CPU time so far (user and system): what a message costs the caller,
/// whatever the wake-ups of a round trip add to its time.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn messages(c: &mut Criterion) {
    let part = [7u8; PART];
    let mut g = c.benchmark_group("message");
    g.throughput(Throughput::Elements(1));
    for k in WRITES {
        g.bench_with_input(BenchmarkId::new("nagless_std", k), &k, |b, &k| {
            let tcp = peer(k);
            let mut s = nagless::NaglessStream::new(tcp).unwrap();
            let (segs0, mut n) = (segs_out(s.get_ref()), 0u64);
            let mut one = [0u8; 1];
            let cpu0 = thread_cpu();
            b.iter(|| {
                for _ in 0..k {
                    s.write_all(&part).unwrap();
                }
                s.read_exact(&mut one).unwrap(); // before-read sends the message
                n += 1;
            });
            let st = s.stats();
            report(
                "nagless_std",
                k,
                st.syscalls,
                segs_out(s.get_ref()) - segs0,
                n,
                thread_cpu() - cpu0,
            );
            eprintln!(
                "  (of which input checks: {:.2} per message)",
                st.input_checks as f64 / n.max(1) as f64
            );
        });
        g.bench_with_input(BenchmarkId::new("nagless_tokio", k), &k, |b, &k| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let tcp = peer(k);
            tcp.set_nonblocking(true).unwrap();
            let segs0 = segs_out(&tcp);
            let raw = tcp.try_clone().unwrap();
            let mut s = rt.block_on(async {
                nagless::tokio_adapter::NaglessStream::new(
                    tokio::net::TcpStream::from_std(tcp).unwrap(),
                )
                .unwrap()
            });
            let mut n = 0u64;
            let mut one = [0u8; 1];
            let cpu0 = thread_cpu();
            b.iter(|| {
                rt.block_on(async {
                    for _ in 0..k {
                        s.write_all(&part).await.unwrap();
                    }
                    s.read_exact(&mut one).await.unwrap();
                });
                n += 1;
            });
            let st = s.stats();
            report(
                "nagless_tokio",
                k,
                st.syscalls,
                segs_out(&raw) - segs0,
                n,
                thread_cpu() - cpu0,
            );
            eprintln!(
                "  (of which input checks: {:.2} per message)",
                st.input_checks as f64 / n.max(1) as f64
            );
        });
        g.bench_with_input(BenchmarkId::new("bufwriter_flush", k), &k, |b, &k| {
            let tcp = peer(k);
            tcp.set_nodelay(true).unwrap();
            let mut r = tcp.try_clone().unwrap();
            let segs0 = segs_out(&tcp);
            let mut w = BufWriter::new(tcp);
            let mut n = 0u64;
            let mut one = [0u8; 1];
            let cpu0 = thread_cpu();
            b.iter(|| {
                for _ in 0..k {
                    w.write_all(&part).unwrap();
                }
                w.flush().unwrap(); // placed by hand before the read
                r.read_exact(&mut one).unwrap();
                n += 1;
            });
            report(
                "bufwriter_flush",
                k,
                n,
                segs_out(&r) - segs0,
                n,
                thread_cpu() - cpu0,
            );
        });
        g.bench_with_input(BenchmarkId::new("tokio_bufwriter_flush", k), &k, |b, &k| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let tcp = peer(k);
            tcp.set_nodelay(true).unwrap();
            tcp.set_nonblocking(true).unwrap();
            let raw = tcp.try_clone().unwrap();
            let segs0 = segs_out(&raw);
            let mut w = rt.block_on(async {
                tokio::io::BufWriter::new(tokio::net::TcpStream::from_std(tcp).unwrap())
            });
            let mut n = 0u64;
            let mut one = [0u8; 1];
            let cpu0 = thread_cpu();
            b.iter(|| {
                rt.block_on(async {
                    for _ in 0..k {
                        w.write_all(&part).await.unwrap();
                    }
                    w.flush().await.unwrap(); // placed by hand before the read
                    w.read_exact(&mut one).await.unwrap();
                });
                n += 1;
            });
            report(
                "tokio_bufwriter_flush",
                k,
                n,
                segs_out(&raw) - segs0,
                n,
                thread_cpu() - cpu0,
            );
        });
        g.bench_with_input(BenchmarkId::new("nodelay_writes", k), &k, |b, &k| {
            let mut tcp = peer(k);
            tcp.set_nodelay(true).unwrap();
            let segs0 = segs_out(&tcp);
            let mut n = 0u64;
            let mut one = [0u8; 1];
            let cpu0 = thread_cpu();
            b.iter(|| {
                for _ in 0..k {
                    tcp.write_all(&part).unwrap();
                }
                tcp.read_exact(&mut one).unwrap();
                n += 1;
            });
            report(
                "nodelay_writes",
                k,
                n * k as u64,
                segs_out(&tcp) - segs0,
                n,
                thread_cpu() - cpu0,
            );
        });
    }
    g.finish();
}

fn tls_messages(c: &mut Criterion) {
    let part = [7u8; PART];
    let pki = pki::pki();
    let mut g = c.benchmark_group("tls_message");
    g.throughput(Throughput::Elements(1));
    for k in WRITES {
        g.bench_with_input(BenchmarkId::new("nagless_tls_std", k), &k, |b, &k| {
            let tcp = tls_peer(k, pki.server.clone());
            let mut s = nagless::tls::TlsStream::new(client_conn(&pki.client), tcp).unwrap();
            let mut one = [0u8; 1];
            // The handshake, and the peer's first answer, outside the count.
            s.write_all(&vec![0u8; k * PART]).unwrap();
            s.read_exact(&mut one).unwrap();
            let (segs0, sends0, mut n) = (segs_out(s.get_ref()), s.stats().syscalls, 0u64);
            let cpu0 = thread_cpu();
            b.iter(|| {
                for _ in 0..k {
                    s.write_all(&part).unwrap();
                }
                s.read_exact(&mut one).unwrap(); // before-read seals and sends the message
                n += 1;
            });
            let sends = s.stats().syscalls - sends0;
            report(
                "nagless_tls_std",
                k,
                sends,
                segs_out(s.get_ref()) - segs0,
                n,
                thread_cpu() - cpu0,
            );
        });
        g.bench_with_input(BenchmarkId::new("nagless_tls_tokio", k), &k, |b, &k| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let tcp = tls_peer(k, pki.server.clone());
            tcp.set_nonblocking(true).unwrap();
            let raw = tcp.try_clone().unwrap();
            let mut one = [0u8; 1];
            let mut s = rt.block_on(async {
                let tcp = tokio::net::TcpStream::from_std(tcp).unwrap();
                let mut s =
                    nagless::tokio_tls::TlsStream::new(client_conn(&pki.client), tcp).unwrap();
                s.write_all(&vec![0u8; k * PART]).await.unwrap();
                s.read_exact(&mut one).await.unwrap();
                s
            });
            let (segs0, sends0, mut n) = (segs_out(&raw), s.stats().syscalls, 0u64);
            let cpu0 = thread_cpu();
            b.iter(|| {
                rt.block_on(async {
                    for _ in 0..k {
                        s.write_all(&part).await.unwrap();
                    }
                    s.read_exact(&mut one).await.unwrap();
                });
                n += 1;
            });
            let sends = s.stats().syscalls - sends0;
            report(
                "nagless_tls_tokio",
                k,
                sends,
                segs_out(&raw) - segs0,
                n,
                thread_cpu() - cpu0,
            );
        });
        g.bench_with_input(
            BenchmarkId::new("rustls_bufwriter_flush", k),
            &k,
            |b, &k| {
                let tcp = tls_peer(k, pki.server.clone());
                tcp.set_nodelay(true).unwrap();
                let raw = tcp.try_clone().unwrap();
                let mut w = BufWriter::new(rustls::StreamOwned::new(client_conn(&pki.client), tcp));
                let mut one = [0u8; 1];
                w.write_all(&vec![0u8; k * PART]).unwrap();
                w.flush().unwrap();
                w.get_mut().read_exact(&mut one).unwrap();
                let (segs0, mut n) = (segs_out(&raw), 0u64);
                let cpu0 = thread_cpu();
                b.iter(|| {
                    for _ in 0..k {
                        w.write_all(&part).unwrap();
                    }
                    w.flush().unwrap(); // placed by hand before the read: one record
                    w.get_mut().read_exact(&mut one).unwrap();
                    n += 1;
                });
                report(
                    "rustls_bufwriter_flush",
                    k,
                    n,
                    segs_out(&raw) - segs0,
                    n,
                    thread_cpu() - cpu0,
                );
            },
        );
        g.bench_with_input(
            BenchmarkId::new("tokio_rustls_bufwriter_flush", k),
            &k,
            |b, &k| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let tcp = tls_peer(k, pki.server.clone());
                tcp.set_nodelay(true).unwrap();
                tcp.set_nonblocking(true).unwrap();
                let raw = tcp.try_clone().unwrap();
                let mut one = [0u8; 1];
                let connector = tokio_rustls::TlsConnector::from(pki.client.clone());
                let mut w = rt.block_on(async {
                    let tcp = tokio::net::TcpStream::from_std(tcp).unwrap();
                    let name = "localhost".try_into().unwrap();
                    let tls = connector.connect(name, tcp).await.unwrap();
                    let mut w = tokio::io::BufWriter::new(tls);
                    w.write_all(&vec![0u8; k * PART]).await.unwrap();
                    w.flush().await.unwrap();
                    w.read_exact(&mut one).await.unwrap();
                    w
                });
                let (segs0, mut n) = (segs_out(&raw), 0u64);
                let cpu0 = thread_cpu();
                b.iter(|| {
                    rt.block_on(async {
                        for _ in 0..k {
                            w.write_all(&part).await.unwrap();
                        }
                        w.flush().await.unwrap(); // placed by hand before the read
                        w.read_exact(&mut one).await.unwrap();
                    });
                    n += 1;
                });
                report(
                    "tokio_rustls_bufwriter_flush",
                    k,
                    n,
                    segs_out(&raw) - segs0,
                    n,
                    thread_cpu() - cpu0,
                );
            },
        );
        g.bench_with_input(BenchmarkId::new("rustls_nodelay_writes", k), &k, |b, &k| {
            let tcp = tls_peer(k, pki.server.clone());
            tcp.set_nodelay(true).unwrap();
            let raw = tcp.try_clone().unwrap();
            let mut s = rustls::StreamOwned::new(client_conn(&pki.client), tcp);
            let mut one = [0u8; 1];
            s.write_all(&vec![0u8; k * PART]).unwrap();
            s.read_exact(&mut one).unwrap();
            let (segs0, mut n) = (segs_out(&raw), 0u64);
            let cpu0 = thread_cpu();
            b.iter(|| {
                for _ in 0..k {
                    s.write_all(&part).unwrap(); // a record, sent at once
                }
                s.read_exact(&mut one).unwrap();
                n += 1;
            });
            report(
                "rustls_nodelay_writes",
                k,
                n * k as u64,
                segs_out(&raw) - segs0,
                n,
                thread_cpu() - cpu0,
            );
        });
    }
    g.finish();
}

criterion_group!(benches, messages, tls_messages);
criterion_main!(benches);

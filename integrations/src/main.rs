//! Measures tonic and axum (over rustls) served three ways (the kernel's defaults,
//! `TCP_NODELAY`, nagless) on loopback: a client (itself `TCP_NODELAY`, so that any stall is
//! the server's) makes REQUESTS calls one after another on one connection; per mode, the mean
//! and median call and the server's data segments per call (the server socket's
//! `tcpi_data_segs_out`, read through the client's peer: the client's `tcpi_data_segs_in`).
//!
//! usage: nagless-integrations [tonic|axum-tls|all] [REQUESTS] [BODY]   (default all, 200,
//!        and a 12-byte body of axum's answer)
//! Exit status 1 if a call failed or returned the wrong answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nagless_integrations::{serve_axum_tls, serve_tonic, tls_config, Mode};

/// Per call: the times, and the server's data segments (the client's segments received).
struct Calls {
    times: Vec<Duration>,
    segs_in: u64,
}

impl Calls {
    fn row(&self, what: &str, mode: Mode) {
        let mut t = self.times.clone();
        t.sort();
        let n = t.len().max(1) as u32;
        let mean = t.iter().sum::<Duration>() / n;
        println!(
            "{what:<10} {:<12} {:>10.3} {:>10.3} {:>12.2}",
            mode.name(),
            mean.as_secs_f64() * 1e3,
            t[t.len() / 2].as_secs_f64() * 1e3,
            self.segs_in as f64 / f64::from(n)
        );
    }
}

/// The data segments `fd`'s socket has received (`tcpi_data_segs_in`).
fn segs_in(fd: &impl std::os::fd::AsFd) -> u64 {
    let s = fd.as_fd();
    nagless::TcpInfo::of(&s)
        .ok()
        .and_then(|i| i.data_segs_in)
        .map_or(0, u64::from)
}

/// The client's own connection to `addr` (`TCP_NODELAY`, so that any stall is the server's),
/// and a second descriptor of it whose counters can be read while the first is in use.
async fn client(
    addr: std::net::SocketAddr,
) -> Result<(tokio::net::TcpStream, std::net::TcpStream), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let raw = tcp.into_std().map_err(|e| e.to_string())?;
    let probe = raw.try_clone().map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::from_std(raw).map_err(|e| e.to_string())?;
    Ok((tcp, probe))
}

async fn tonic_calls(mode: Mode, n: usize) -> Result<Calls, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(serve_tonic(listener, mode));
    let (tcp, probe) = client(addr).await?;
    let mut once = Some(tcp);
    let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1")
        .connect_with_connector(tower::service_fn(move |_| {
            let t = once.take();
            async move {
                t.map(hyper_util::rt::TokioIo::new)
                    .ok_or_else(|| std::io::Error::other("one connection only"))
            }
        }))
        .await
        .map_err(|e| e.to_string())?;
    let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
    let ask = || tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    };
    client.check(ask()).await.map_err(|e| e.to_string())?; // the connection's start
    let before = segs_in(&probe);
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = client.check(ask()).await.map_err(|e| e.to_string())?;
        times.push(t.elapsed());
        if r.into_inner().status
            != tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        {
            return Err("the health service did not answer SERVING".into());
        }
    }
    let calls = Calls {
        times,
        segs_in: segs_in(&probe) - before,
    };
    server.abort();
    Ok(calls)
}

/// One GET of `/` on the connection, its answer checked.
async fn get(
    send: &mut hyper::client::conn::http1::SendRequest<http_body_util::Empty<hyper::body::Bytes>>,
    want: usize,
) -> Result<(), String> {
    use http_body_util::{BodyExt, Empty};
    let req = hyper::Request::get("/")
        .header("host", "localhost")
        .body(Empty::<hyper::body::Bytes>::new())
        .map_err(|e| e.to_string())?;
    // (The connection's task must have run before a request can be taken.)
    send.ready().await.map_err(|e| e.to_string())?;
    let r = send.send_request(req).await.map_err(|e| e.to_string())?;
    let body = r
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if body.len() != want || body.iter().any(|&b| b != b'x') {
        return Err(format!("wrong answer {body:?}"));
    }
    Ok(())
}

async fn axum_tls_calls(mode: Mode, n: usize, body: &'static str) -> Result<Calls, String> {
    let (config, cert) = tls_config();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(serve_axum_tls(listener, config, mode, body));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client_config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let (tcp, probe) = client(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config))
        .connect("localhost".try_into().map_err(|_| "name")?, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    get(&mut send, body.len()).await?; // the connection's start
    let before = segs_in(&probe);
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        get(&mut send, body.len()).await?;
        times.push(t.elapsed());
    }
    let calls = Calls {
        times,
        segs_in: segs_in(&probe) - before,
    };
    server.abort();
    Ok(calls)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map_or("all", String::as_str);
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let size: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(12);
    let body: &'static str = "x".repeat(size).leak();
    if !matches!(which, "tonic" | "axum-tls" | "all") {
        eprintln!("usage: nagless-integrations [tonic|axum-tls|all] [REQUESTS] [BODY BYTES]");
        return std::process::ExitCode::from(2);
    }
    println!(
        "{:<10} {:<12} {:>10} {:>10} {:>12}",
        "server", "mode", "mean ms", "p50 ms", "segs/call"
    );
    for mode in Mode::ALL {
        if which != "axum-tls" {
            match tonic_calls(mode, n).await {
                Ok(c) => c.row("tonic", mode),
                Err(e) => {
                    eprintln!("tonic, {}: {e}", mode.name());
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
        if which != "tonic" {
            match axum_tls_calls(mode, n, body).await {
                Ok(c) => c.row("axum-tls", mode),
                Err(e) => {
                    eprintln!("axum-tls, {}: {e}", mode.name());
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    std::process::ExitCode::SUCCESS
}

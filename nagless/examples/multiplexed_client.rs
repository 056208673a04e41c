//! An async client library that shares one connection between many tasks, over a clocked
//! nagless stream: hyper's HTTP/2 client here, against a hyper HTTP/2 server started in the
//! same process on loopback.
//!
//! ```sh
//! cargo run --release -p nagless --features tokio --example multiplexed_client
//! cargo run --release -p nagless --features tokio --example multiplexed_client -- --plain
//! ```
//!
//! The one line that matters is the stream handed to the library:
//! `NaglessStream::with_policy(tcp, FlushPolicy::clocked())`. Any client library that takes
//! an `AsyncRead + AsyncWrite` stream takes it the same way, unmodified:
//!
//! - redis-rs: `redis::aio::MultiplexedConnection::new(&info, stream).await`
//! - tokio-postgres: `config.connect_raw(stream, tokio_postgres::NoTls).await`
//! - hyper HTTP/2: `hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await`
//!
//! Such a library writes each batch of requests and flushes it; the clocked stream hands each
//! batch to the kernel at its flush, sent at once or with the next ACK together with the
//! batches flushed since, and never lets one wait for the peer's delayed ACK. (The default
//! policy does the same with the flushes made while the peer answers, which are all of them
//! here once the first answer has come: `FlushPolicy::clock_answered`.) `--plain` runs
//! the same client over a tokio stream with `TCP_NODELAY`, for comparison. Prints requests per
//! second and the client's data segments per request; `--requests` (default 20,000) and
//! `--tasks` (default 32) set the load.

#![allow(clippy::disallowed_methods)] // it measures real time

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use nagless::tokio_adapter::NaglessStream;
use nagless::FlushPolicy;
use tokio::net::{TcpListener, TcpStream};

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    let i = args.iter().position(|a| a == name);
    i.and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

/// A hyper HTTP/2 server on `listener`: a 12-byte answer to every request.
async fn serve(listener: TcpListener) {
    while let Ok((tcp, _)) = listener.accept().await {
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                    b"hello world\n",
                ))))
            });
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

/// Data segments the socket has sent (Linux; 0 elsewhere).
fn segments(tcp: &std::net::TcpStream) -> u64 {
    nagless::TcpInfo::of(tcp)
        .ok()
        .and_then(|i| i.data_segs_out)
        .map_or(0, u64::from)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let plain = args.iter().any(|a| a == "--plain");
    let requests = arg(&args, "--requests", 20_000);
    let tasks = arg(&args, "--tasks", 32);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve(listener));

    let tcp = TcpStream::connect(addr).await?;
    // A second descriptor of the socket, only to count its segments at the end.
    let probe: std::net::TcpStream = socket2::SockRef::from(&tcp).try_clone()?.into();
    let (send, connection) = if plain {
        tcp.set_nodelay(true)?;
        let io = TokioIo::new(Box::new(tcp) as Box<dyn Io>);
        hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?
    } else {
        let stream = NaglessStream::with_policy(tcp, FlushPolicy::clocked())?;
        let io = TokioIo::new(Box::new(stream) as Box<dyn Io>);
        hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?
    };
    tokio::spawn(connection);

    let before = segments(&probe);
    let left = Arc::new(AtomicU64::new(requests));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (mut send, left) = (send.clone(), Arc::clone(&left));
        handles.push(tokio::spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                send.ready().await?;
                let request = Request::get(format!("http://{addr}/")).body(Empty::<Bytes>::new())?;
                let body = send
                    .send_request(request)
                    .await?
                    .into_body()
                    .collect()
                    .await?;
                assert_eq!(body.to_bytes(), &b"hello world\n"[..]);
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for h in handles {
        h.await?.map_err(|e| e.to_string())?;
    }
    let took = start.elapsed();
    let segs = segments(&probe) - before;
    println!(
        "{}: {requests} requests from {tasks} tasks on one connection: {:.0} requests/s, {:.3} data segments per request",
        if plain { "TCP_NODELAY" } else { "nagless clocked" },
        requests as f64 / took.as_secs_f64(),
        segs as f64 / requests as f64
    );
    Ok(())
}

/// What the client's connection is, whichever stream it runs over.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

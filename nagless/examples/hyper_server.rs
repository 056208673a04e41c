//! A hyper HTTP/1.1 server whose connections run over nagless streams.
//!
//! ```sh
//! cargo run --release -p nagless --features tokio --example hyper_server -- --port 8080
//! cargo run --release -p nagless --features tokio --example hyper_server -- --port 8080 --plain
//! wrk -t1 -c10 -d5s http://127.0.0.1:8080/
//! ```
//!
//! Each accepted connection is wrapped by [`nagless::tokio_adapter::accept`] (default policy)
//! and handed to hyper through `hyper_util::rt::TokioIo`; `--plain` serves the same responses
//! over plain tokio streams with `TCP_NODELAY`, for comparison. The server answers every
//! request with a 12-byte body and stops by itself after `--seconds` (default 30).

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

async fn hello(_: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"hello world\n",
    ))))
}

fn arg(args: &[String], name: &str) -> Option<u64> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let plain = args.iter().any(|a| a == "--plain");
    let port = arg(&args, "--port").unwrap_or(0) as u16;
    let seconds = arg(&args, "--seconds").unwrap_or(30);
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on {}", listener.local_addr()?);
    let stop = tokio::time::sleep(Duration::from_secs(seconds));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            accepted = async {
                if plain {
                    let (tcp, _) = listener.accept().await?;
                    tcp.set_nodelay(true)?;
                    Ok::<_, std::io::Error>(Err(tcp))
                } else {
                    nagless::tokio_adapter::accept(&listener).await.map(|(s, _)| Ok(s))
                }
            } => {
                let service = service_fn(hello);
                match accepted? {
                    Ok(stream) => tokio::spawn(async move {
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }),
                    Err(tcp) => tokio::spawn(async move {
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(tcp), service)
                            .await;
                    }),
                };
            }
        }
    }
}

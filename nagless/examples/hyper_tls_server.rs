//! A hyper HTTP/1.1 server over TLS, served through nagless's TLS layer
//! (`nagless::tokio_tls::TlsStream`): rustls seals each response as one record batch at the
//! flush hyper makes, and sends it with one gathered write.
//!
//! ```sh
//! cargo run --release -p nagless --features tls,tokio --example hyper_tls_server -- --port 8443
//! curl -k https://127.0.0.1:8443/
//! ```
//!
//! The server makes a self-signed certificate for "localhost" and prints, on its first two
//! lines, `listening on ADDR` and `cert HEX` (the certificate's DER bytes, for clients that
//! want to trust it). Every request is answered with the 12-byte body `hello world\n`; the
//! server stops by itself after `--seconds` (default 30).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
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
    let port = arg(&args, "--port").unwrap_or(0) as u16;
    let seconds = arg(&args, "--seconds").unwrap_or(30);

    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()])
        .map_err(std::io::Error::other)?;
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .map_err(std::io::Error::other)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);

    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on {}", listener.local_addr()?);
    let hex: String = cert.iter().map(|b| format!("{b:02x}")).collect();
    println!("cert {hex}");
    let stop = tokio::time::sleep(Duration::from_secs(seconds));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            accepted = listener.accept() => {
                let (tcp, _) = accepted?;
                let conn = rustls::ServerConnection::new(config.clone())
                    .map_err(std::io::Error::other)?;
                // Sets TCP_NODELAY; the handshake runs at hyper's first read.
                let tls = nagless::tokio_tls::TlsStream::new(conn, tcp)?;
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service_fn(hello))
                        .await;
                });
            }
        }
    }
}

//! axum and tonic served through nagless: the few lines each takes, and (in `main.rs`) their
//! measured effect beside plain `TCP_NODELAY` and the kernel's defaults. Users met the stall
//! here: tonic's `serve_with_incoming` leaves the accepted sockets as they come (grpc/grpc-rust
//! #2413; only tonic's own listener sets `TCP_NODELAY`), and axum served over rustls
//! (hyperswitch-encryption-service #81, with axum-server).
//!
//! Not part of the workspace: its dependencies (tonic, axum) are heavy, and only
//! `scripts/bench-integrations` and its CI step build it.

pub mod clients;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::StreamExt;

/// How the server's accepted sockets are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// As the kernel gives them: Nagle on.
    Defaults,
    /// `TCP_NODELAY` set: every write leaves at once.
    Nodelay,
    /// Through nagless: each response leaves as one send when the server turns to wait.
    Nagless,
}

impl Mode {
    /// Every mode, in table order.
    pub const ALL: [Mode; 3] = [Mode::Defaults, Mode::Nodelay, Mode::Nagless];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Defaults => "defaults",
            Mode::Nodelay => "TCP_NODELAY",
            Mode::Nagless => "nagless",
        }
    }
}

// ---- tonic ----------------------------------------------------------------------------

/// A connection served through nagless, as tonic's `serve_with_incoming` takes it (tonic asks
/// its IO type for `Connected`; a newtype gives it one).
pub struct NaglessIo(pub nagless::tokio_adapter::NaglessStream<TcpStream>);

impl tonic::transport::server::Connected for NaglessIo {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl AsyncRead for NaglessIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for NaglessIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Serves gRPC's health service (a stand-in for any tonic service) on `listener`, its
/// connections treated as `mode` says, until the task is dropped.
pub async fn serve_tonic(listener: TcpListener, mode: Mode) -> Result<(), tonic::transport::Error> {
    let (_, health) = tonic_health::server::health_reporter();
    let router = tonic::transport::Server::builder().add_service(health);
    let accepted = TcpListenerStream::new(listener);
    match mode {
        Mode::Defaults => router.serve_with_incoming(accepted).await,
        Mode::Nodelay => {
            let incoming = accepted.map(|s| s.and_then(|s| s.set_nodelay(true).map(|()| s)));
            router.serve_with_incoming(incoming).await
        }
        // The whole change for nagless: wrap each accepted socket.
        Mode::Nagless => {
            let incoming = accepted.map(|s| {
                s.and_then(|s| nagless::tokio_adapter::NaglessStream::new(s).map(NaglessIo))
            });
            router.serve_with_incoming(incoming).await
        }
    }
}

// ---- axum over TLS ----------------------------------------------------------------------

/// A TLS listener for `axum::serve`: each connection's handshake made with rustls, its
/// socket treated as `mode` says (under [`Mode::Nagless`], through nagless's TLS layer:
/// rustls seals each response at the flush hyper makes, and its records leave as one send).
pub struct TlsListener {
    tcp: TcpListener,
    config: Arc<rustls::ServerConfig>,
    mode: Mode,
}

impl TlsListener {
    /// Serves TLS with `config` on `tcp`, as `mode` says.
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>, mode: Mode) -> TlsListener {
        TlsListener { tcp, config, mode }
    }

    async fn handshake(&self, tcp: TcpStream) -> io::Result<TlsIo> {
        if self.mode == Mode::Nagless {
            // The whole change for nagless: its TLS stream.
            let conn =
                rustls::ServerConnection::new(self.config.clone()).map_err(io::Error::other)?;
            let mut tls = nagless::tokio_tls::TlsStream::new(conn, tcp)?;
            tls.handshake().await?;
            return Ok(TlsIo::Nagless(Box::new(tls)));
        }
        if self.mode == Mode::Nodelay {
            tcp.set_nodelay(true)?;
        }
        let tls = tokio_rustls::TlsAcceptor::from(self.config.clone())
            .accept(tcp)
            .await?;
        Ok(TlsIo::Rustls(Box::new(tls)))
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (TlsIo, std::net::SocketAddr) {
        loop {
            // (A failed accept or handshake is one client's problem: the next is served.)
            if let Ok((tcp, addr)) = self.tcp.accept().await {
                if let Ok(io) = self.handshake(tcp).await {
                    return (io, addr);
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.tcp.local_addr()
    }
}

/// A TLS connection: tokio-rustls's, or nagless's.
pub enum TlsIo {
    /// tokio-rustls over the socket as it is (or with `TCP_NODELAY`).
    Rustls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// nagless's TLS layer.
    Nagless(Box<nagless::tokio_tls::TlsStream<TcpStream, rustls::ServerConnection>>),
}

macro_rules! both {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            TlsIo::Rustls($s) => {
                let $s = Pin::new($s.as_mut());
                $e
            }
            TlsIo::Nagless($s) => {
                let $s = Pin::new($s.as_mut());
                $e
            }
        }
    };
}

impl AsyncRead for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        both!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        both!(self, s => s.poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, s => s.poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, s => s.poll_shutdown(cx))
    }
}

/// Serves an axum app (`GET /` answers `body`) over TLS on `listener`, its connections
/// treated as `mode` says, until the task is dropped.
pub async fn serve_axum_tls(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    mode: Mode,
    body: &'static str,
) -> io::Result<()> {
    let app = axum::Router::new().route("/", axum::routing::get(move || async move { body }));
    axum::serve(TlsListener::new(listener, config, mode), app).await
}

/// A self-signed certificate for "localhost": the server's configuration (HTTP/1.1) and the
/// certificate a client trusts.
pub fn tls_config() -> (
    Arc<rustls::ServerConfig>,
    rustls::pki_types::CertificateDer<'static>,
) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("rcgen");
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("the certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (Arc::new(config), cert)
}

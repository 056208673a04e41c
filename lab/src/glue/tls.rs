//! `tls-first-request` (alphaonedev/ai-memory-mcp #1581): a rustls TLS 1.3 server sends its
//! session tickets (two, rustls's default) as soon as the handshake completes, then the
//! answer to the first request. With Nagle on, the answer waits behind the unacknowledged
//! tickets until the client's delayed ACK: only the first request of each connection
//! stalls, so the stall shows in a short connection's every exchange. The client (fixed)
//! is a rustls client that sets `TCP_NODELAY`, resumes no session (each connection is a
//! first) and closes after its answer. Timed: connect to the answer read.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

use super::end::{Ctx, End, Identity, Role, Spec};
use super::{cost_of, Outcome};
use crate::harness::{peer_ended, side_cost, ClientReport, SideCost, IO_TIMEOUT};
use crate::scenario::Case;
use crate::strategy::{Burst, Conn, Strategy};
use crate::sys;

const REQUEST: &[u8] = b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 58\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{}}";
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 36\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn identity() -> io::Result<Identity> {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".into()]).map_err(io::Error::other)?;
    Ok(Identity {
        cert: made.cert.der().to_vec(),
        key: made.key_pair.serialize_der(),
    })
}

fn server_config(id: &Identity) -> io::Result<Arc<rustls::ServerConfig>> {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(id.key.clone()));
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(id.cert.clone())], key)
        .map_err(io::Error::other)?;
    Ok(Arc::new(config))
}

fn client_config(id: &Identity) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(id.cert.clone()))
        .map_err(io::Error::other)?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

pub(super) fn run(
    connections: usize,
    strategy: Strategy,
    ctx: Ctx<'_>,
    case: &Case,
    limit: Duration,
) -> io::Result<Outcome> {
    let id = identity()?;
    let client_config = client_config(&id)?;
    let spec = Spec {
        case: case.clone(),
        role: Role::Tested,
        upstream: None,
        tls: Some(id),
        pin: ctx.pin,
    };
    let server = End::start(spec, strategy, ctx)?;
    if let Some(cpu) = ctx.pin {
        sys::pin_to_cpu(cpu);
    }
    let mut report = ClientReport::default();
    let mut client = SideCost::default();
    let mut made = 0;
    let start = Instant::now();
    let name = ServerName::try_from("localhost").map_err(io::Error::other)?;
    let mut answer = vec![0u8; ANSWER.len()];
    for _ in 0..connections.max(1) {
        let cpu0 = sys::thread_cpu_us();
        let t = Instant::now();
        let tcp = TcpStream::connect(server.addr())?;
        made += 1;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(IO_TIMEOUT))?;
        let mut conn = rustls::ClientConnection::new(client_config.clone(), name.clone())
            .map_err(io::Error::other)?;
        // The request leaves with the client's Finished, as a client that writes it at once
        // sends it: the server reads both, sends its tickets and answers behind them. (Written
        // after the handshake, it raced the tickets: when they reached the client first, the
        // request carried their ACK and nothing held the answer.)
        conn.writer().write_all(REQUEST)?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        tls.flush()?;
        tls.read_exact(&mut answer)?;
        report.latencies_us.push(t.elapsed().as_micros() as u64);
        report.work += 1.0;
        tls.conn.send_close_notify();
        let _ = tls.flush();
        client.add(&cost_of(&tls.sock, 0, cpu0)?);
        drop(tls);
        if start.elapsed() > limit {
            break;
        }
    }
    let took = start.elapsed();
    Ok(((report, client, server.finish(made)?), took))
}

/// The server: the handshake, its tickets, one request read and answered, then the
/// client's close.
pub(super) fn serve(id: &Identity, strategy: Strategy, tcp: TcpStream) -> io::Result<SideCost> {
    let cpu0 = sys::thread_cpu_us();
    let tls = rustls::ServerConnection::new(server_config(id)?).map_err(io::Error::other)?;
    let mut req = vec![0u8; REQUEST.len()];
    if strategy == Strategy::Nagless {
        // The library's TLS stream, used as a plain `Read + Write`.
        let mut s = nagless::tls::TlsStream::new(tls, tcp)?;
        s.read_exact(&mut req)?;
        s.write_all(ANSWER)?;
        drain(&mut s)?;
        let sends = s.wire_stats().sends;
        return cost_of(s.get_ref(), sends, cpu0);
    }
    let mut conn = Conn::new(tcp, strategy)?;
    let mut tls = tls;
    while tls.is_handshaking() {
        send_tls(&mut tls, &mut conn)?;
        if tls.wants_read() {
            receive_tls(&mut tls, &mut conn)?;
        }
    }
    // The session tickets, queued as the client's Finished was read.
    send_tls(&mut tls, &mut conn)?;
    let mut got = 0;
    while got < req.len() {
        match tls.reader().read(&mut req[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => receive_tls(&mut tls, &mut conn)?,
            Err(e) => return Err(e),
        }
    }
    tls.writer().write_all(ANSWER)?;
    send_tls(&mut tls, &mut conn)?;
    // Until the client's close_notify or its FIN.
    loop {
        let mut buf = [0u8; 256];
        match tls.reader().read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match receive_tls(&mut tls, &mut conn) {
                    Ok(()) => {}
                    Err(e) if peer_ended(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            Err(e) if peer_ended(&e) => break,
            Err(e) => return Err(e),
        }
    }
    let _ = conn.finish();
    side_cost(&conn, cpu0)
}

/// Reads until the peer's close (close_notify or FIN).
fn drain(s: &mut impl Read) -> io::Result<()> {
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if peer_ended(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Everything rustls has to send, as one write that ends a burst (the server waits next).
fn send_tls(tls: &mut rustls::ServerConnection, conn: &mut Conn) -> io::Result<()> {
    if !tls.wants_write() {
        return Ok(());
    }
    let mut out = Vec::new();
    while tls.wants_write() {
        tls.write_tls(&mut out)?;
    }
    conn.send(&out, Burst::Last)
}

/// What has arrived, handed to rustls.
fn receive_tls(tls: &mut rustls::ServerConnection, conn: &mut Conn) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    let n = conn.recv_some(&mut buf)?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    tls.read_tls(&mut &buf[..n])?;
    tls.process_new_packets().map_err(io::Error::other)?;
    Ok(())
}

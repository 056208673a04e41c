//! TLS over nagless (std): `rustls::StreamOwned<ServerConnection, NaglessStream<TcpStream>>`.
//!
//! ```sh
//! cargo run --release -p nagless --example tls_stack
//! ```
//!
//! A server answers 50 requests over TLS on 127.0.0.1, each answer written as three TLS
//! records (three `write_all` calls), once over a nagless stream and once over a plain
//! `TcpStream` with `TCP_NODELAY`, and prints the data segments it sent per answer
//! (`TCP_INFO`). Over nagless the three records leave in one flush, when the server turns to
//! read the next request. rustls flushes its transport after every batch of records, so the
//! stream's policy makes flushes hints (`FlushPolicy::explicit_flush(false)`); the read that
//! follows each answer (before-read) and the linger bound decide when bytes leave.
//!
//! **Stack TLS on top of nagless, never the other way round.** rustls encrypts into records
//! and writes them to its transport; nagless below it queues those records and sends them
//! together. A nagless stream wrapped *around* a TLS stream would write its queue to the
//! socket descriptor directly (it sends with `sendmsg` on the fd), bypassing the encryption:
//! `NaglessStream` needs the socket itself (`AsOsSocket`: `AsFd` on Unix, `AsSocket` on
//! Windows) for exactly that reason, which rustls's streams do not offer.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use nagless::{FlushPolicy, NaglessStream, TcpInfo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

const ROUNDS: u32 = 50;

fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("certificate");
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server config");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("root");
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

/// Serves `ROUNDS` requests over TLS, over nagless or plain TCP; returns data segments per
/// answer.
fn run(
    nagless: bool,
    server_cfg: Arc<rustls::ServerConfig>,
    client_cfg: Arc<rustls::ClientConfig>,
) -> f64 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let client = std::thread::spawn(move || {
        let tcp = TcpStream::connect(addr).expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let conn = rustls::ClientConnection::new(
            client_cfg,
            ServerName::try_from("localhost").expect("name"),
        )
        .expect("client");
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut answer = [0u8; 300];
        for _ in 0..ROUNDS {
            tls.write_all(b"GET\n").expect("request");
            tls.read_exact(&mut answer).expect("answer");
            assert!(answer.iter().all(|&b| b == b'h' || b == b'b' || b == b't'));
        }
    });
    let (tcp, _) = listener.accept().expect("accept");
    let conn = rustls::ServerConnection::new(server_cfg).expect("server");
    let segs_of = |fd: &TcpStream| {
        TcpInfo::of(fd)
            .ok()
            .and_then(|i| i.data_segs_out)
            .unwrap_or(0)
    };
    let mut request = [0u8; 4];
    let answer = |tls: &mut dyn Write| {
        tls.write_all(&[b'h'; 100]).expect("header");
        tls.write_all(&[b'b'; 150]).expect("body");
        tls.write_all(&[b't'; 50]).expect("trailer");
    };
    let (before, after);
    if nagless {
        // rustls flushes its transport after every record batch: make those flushes hints.
        let policy = FlushPolicy::default().explicit_flush(false);
        let sock = NaglessStream::with_policy(tcp, policy).expect("wrap");
        let mut tls = rustls::StreamOwned::new(conn, sock);
        tls.read_exact(&mut request).expect("first request"); // handshake done
        before = segs_of(tls.sock.get_ref());
        for i in 0..ROUNDS {
            answer(&mut tls);
            if i + 1 < ROUNDS {
                tls.read_exact(&mut request).expect("request");
            }
        }
        tls.flush().expect("flush");
        // The last answer has no read after it: close sends what a flush hint left queued.
        let sock = tls.sock;
        let tcp = sock
            .into_inner()
            .map_err(|e| e.into_parts().0)
            .expect("into_inner");
        after = segs_of(&tcp);
    } else {
        tcp.set_nodelay(true).expect("nodelay");
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        tls.read_exact(&mut request).expect("first request");
        before = segs_of(&tls.sock);
        for i in 0..ROUNDS {
            answer(&mut tls);
            if i + 1 < ROUNDS {
                tls.read_exact(&mut request).expect("request");
            }
        }
        after = segs_of(&tls.sock);
    }
    client.join().expect("client");
    f64::from(after - before) / f64::from(ROUNDS)
}

fn main() {
    let (server, client) = configs();
    let ours = run(true, server.clone(), client.clone());
    let plain = run(false, server, client);
    println!(
        "answers={ROUNDS} nagless_segs_per_answer={ours:.2} nodelay_segs_per_answer={plain:.2}"
    );
}

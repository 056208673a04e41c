//! The driver with the TLS seal against an in-memory transport that takes a scripted number of bytes per
//! send (0: `WouldBlock`), with a real rustls client decrypting what it sent.
use super::*;
use proptest::prelude::*;
use rustls::pki_types::ServerName;

/// Server-to-client bytes, limited per send by `budgets` (cycled); client-to-server bytes
/// read until empty (then `WouldBlock`).
struct Pipe {
    to_client: Vec<u8>,
    to_server: Vec<u8>,
    budgets: Vec<usize>,
    turn: usize,
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let budget = self.budgets[self.turn % self.budgets.len()];
        self.turn += 1;
        if budget == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut left = budget;
        for b in bufs {
            let n = b.len().min(left);
            self.to_client.extend_from_slice(&b[..n]);
            left -= n;
        }
        Ok(budget - left)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Wire for Pipe {
    fn send(&mut self, bufs: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
        self.write_vectored(bufs)
    }
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.to_server.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(self.to_server.len());
        buf[..n].copy_from_slice(&self.to_server[..n]);
        self.to_server.drain(..n);
        Ok(n)
    }
}

#[path = "../../tests/tls_support/pki.rs"]
mod pki;

fn pair() -> (rustls::ServerConnection, rustls::ClientConnection) {
    let pki = pki::pki();
    (
        rustls::ServerConnection::new(pki.server).unwrap(),
        rustls::ClientConnection::new(pki.client, ServerName::try_from("localhost").unwrap())
            .unwrap(),
    )
}

/// The client's side: takes what reached it, returns the plaintext and the number of
/// application-data records (content type 23; no tickets are sent).
fn client_receive(client: &mut rustls::ClientConnection, pipe: &mut Pipe) -> (Vec<u8>, usize) {
    let mut records = 0;
    let mut at = 0;
    while at + 5 <= pipe.to_client.len() {
        records += usize::from(pipe.to_client[at] == 23);
        at += 5 + usize::from(u16::from_be_bytes([
            pipe.to_client[at + 3],
            pipe.to_client[at + 4],
        ]));
    }
    let mut wire = &pipe.to_client[..];
    let mut plain = Vec::new();
    while !wire.is_empty() {
        client.read_tls(&mut wire).unwrap();
        client.process_new_packets().unwrap();
        let _ = client.reader().read_to_end(&mut plain);
    }
    pipe.to_client.clear();
    (plain, records)
}

/// Runs the handshake over `pipe` with unlimited budgets.
fn handshake(
    driver: &mut Driver<Tls<rustls::ServerConnection>>,
    client: &mut rustls::ClientConnection,
) -> Pipe {
    let mut pipe = Pipe {
        to_client: Vec::new(),
        to_server: Vec::new(),
        budgets: vec![usize::MAX],
        turn: 0,
    };
    for _ in 0..10 {
        while client.wants_write() {
            client.write_tls(&mut pipe.to_server).unwrap();
        }
        while !pipe.to_server.is_empty() {
            driver.seal.read_input(&mut pipe).unwrap();
        }
        let (_, _) = client_receive(client, &mut pipe);
        if !driver.seal.conn.is_handshaking() && !client.is_handshaking() {
            pipe.turn = 0;
            return pipe;
        }
    }
    panic!("no handshake");
}

#[test]
fn three_writes_and_a_flush_are_one_record() {
    let (server, mut client) = pair();
    let mut driver = Driver::new(plaintext_core(FlushPolicy::default()), Tls::new(server));
    let mut pipe = handshake(&mut driver, &mut client);
    let t = now();
    for part in [&b"head"[..], b"body", b"tail"] {
        driver.core.write(part, Urgency::Normal, t);
        assert_eq!(driver.pump(&mut pipe, t, false).unwrap(), Drive::Idle);
    }
    assert!(pipe.to_client.is_empty(), "sent before a flush point");
    driver.core.flush();
    assert_eq!(driver.pump(&mut pipe, t, false).unwrap(), Drive::Idle);
    assert_eq!(pipe.turn, 1, "one send");
    let (plain, records) = client_receive(&mut client, &mut pipe);
    assert_eq!(plain, b"headbodytail");
    assert_eq!(records, 1);
}

#[test]
fn a_large_flush_is_full_records_and_a_tail() {
    let (server, mut client) = pair();
    let mut driver = Driver::new(
        plaintext_core(FlushPolicy::explicit_only()),
        Tls::new(server),
    );
    let mut pipe = handshake(&mut driver, &mut client);
    let t = now();
    let data: Vec<u8> = (0..3 * MAX_RECORD_PLAINTEXT + 100)
        .map(|i| i as u8)
        .collect();
    for chunk in data.chunks(1000) {
        driver.core.write(chunk, Urgency::Normal, t);
    }
    driver.core.flush();
    assert_eq!(driver.pump(&mut pipe, t, false).unwrap(), Drive::Idle);
    let (plain, records) = client_receive(&mut client, &mut pipe);
    assert!(plain == data);
    assert_eq!(records, 4);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Writes of any size, flushes anywhere, a transport that takes any number of bytes
    /// or would block: every byte arrives once, in order.
    #[test]
    fn no_byte_lost_or_reordered(
        writes in proptest::collection::vec((1usize..40_000, any::<bool>()), 1..30),
        budgets in proptest::collection::vec(0usize..70_000, 1..12),
    ) {
        let (server, mut client) = pair();
        let mut driver = Driver::new(plaintext_core(FlushPolicy::explicit_only()), Tls::new(server));
        let mut pipe = handshake(&mut driver, &mut client);
        // Progress is certain: one budget is never zero.
        pipe.budgets = budgets;
        pipe.budgets.push(1 + pipe.budgets.len());
        pipe.turn = 0;
        let t = now();
        let mut sent = Vec::new();
        let mut got = Vec::new();
        for (i, (len, flush)) in writes.into_iter().enumerate() {
            let data: Vec<u8> = (0..len).map(|j| (i * 7 + j) as u8).collect();
            let take = len.min(driver.core.room());
            driver.core.write(&data[..take], Urgency::Normal, t);
            sent.extend_from_slice(&data[..take]);
            if flush {
                driver.core.flush();
            }
            driver.pump(&mut pipe, t, false).unwrap();
            got.extend(client_receive(&mut client, &mut pipe).0);
        }
        driver.core.close();
        let mut rounds = 0;
        while driver.pump(&mut pipe, t, false).unwrap() == Drive::Blocked {
            got.extend(client_receive(&mut client, &mut pipe).0);
            rounds += 1;
            prop_assert!(rounds < 1_000_000, "no progress");
        }
        got.extend(client_receive(&mut client, &mut pipe).0);
        prop_assert_eq!(driver.core.pending(), 0);
        prop_assert!(!driver.seal.conn.wants_write());
        prop_assert!(got == sent, "{} bytes received of {}", got.len(), sent.len());
    }
}

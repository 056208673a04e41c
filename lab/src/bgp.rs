//! Source 000's case (`bgp-burst`): a BGP session in real framing, in the order of BGP's
//! state machine, timed from connect (the SYN) to the first UPDATE leaving the client.

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::harness::Session;
use crate::harness::{ClientReport, Setup};
use crate::strategy::{Burst, Conn, Strategy};

/// BGP messages in real framing: 16-byte marker, length, type.
mod message {
    pub(crate) const OPEN: u8 = 1;
    pub(crate) const UPDATE: u8 = 2;
    pub(crate) const KEEPALIVE: u8 = 4;
    pub(crate) const HEADER: usize = 19;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![0xff; 16];
        m.extend_from_slice(&((HEADER + body.len()) as u16).to_be_bytes());
        m.push(kind);
        m.extend_from_slice(body);
        m
    }

    pub(crate) fn open(asn: u16, id: [u8; 4]) -> Vec<u8> {
        let mut b = vec![4];
        b.extend_from_slice(&asn.to_be_bytes());
        b.extend_from_slice(&90u16.to_be_bytes());
        b.extend_from_slice(&id);
        b.push(0);
        message(OPEN, &b)
    }

    pub(crate) fn keepalive() -> Vec<u8> {
        message(KEEPALIVE, &[])
    }

    /// Routes one UPDATE can carry within BGP's 4096-byte message limit.
    pub(crate) const MAX_ROUTES: usize = 1000;

    /// An UPDATE announcing `n` /24s (10.x.y.0/24, from the `first`) with ORIGIN, AS_PATH
    /// and NEXT_HOP.
    pub(crate) fn update(first: usize, n: usize, asn: u16) -> Vec<u8> {
        let mut attrs = vec![0x40, 1, 1, 0]; // ORIGIN IGP
        attrs.extend_from_slice(&[0x40, 2, 4, 2, 1]); // AS_PATH: one AS_SEQUENCE of 1
        attrs.extend_from_slice(&asn.to_be_bytes());
        attrs.extend_from_slice(&[0x40, 3, 4, 192, 0, 2, 1]); // NEXT_HOP
        let mut b = vec![0, 0];
        b.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        b.extend_from_slice(&attrs);
        for i in first..first + n {
            b.extend_from_slice(&[24, 10, (i >> 8) as u8, i as u8]);
        }
        message(UPDATE, &b)
    }

    /// End-of-RIB: an UPDATE with no withdrawn routes and no attributes.
    pub(crate) fn end_of_rib() -> Vec<u8> {
        message(UPDATE, &[0, 0, 0, 0])
    }
}

fn read_bgp(conn: &mut Conn) -> io::Result<Vec<u8>> {
    let mut m = vec![0u8; message::HEADER];
    conn.recv_exact(&mut m)?;
    let len = u16::from_be_bytes([m[16], m[17]]) as usize;
    if !(message::HEADER..=4096).contains(&len) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bad BGP length"));
    }
    m.resize(len, 0);
    conn.recv_exact(&mut m[message::HEADER..])?;
    Ok(m)
}

/// One BGP session (source 000), in the order of BGP's state machine (RFC 4271 8.2.2) as
/// BIRD and its peer run it: both ends send OPEN as soon as the connection is up, each answers
/// the other's OPEN with a KEEPALIVE, and the client (BIRD), once the peer's KEEPALIVE has
/// come, sends `routes` UPDATEs and an End-of-RIB, one write each; the peer answers End-of-RIB
/// with a KEEPALIVE. The peer's KEEPALIVE left before the client's arrived, so it does not
/// acknowledge it: under Nagle the first UPDATE waits for the peer's delayed ACK.
///
/// Timed as the source text timed it: from connect (the SYN) to the first UPDATE leaving the
/// client, that is its arrival at the peer less the path's one-way delay.
pub(crate) fn session(
    routes: usize,
    per_update: usize,
    strategy: Strategy,
    setup: Setup<'_>,
) -> io::Result<Session> {
    let (tx, rx) = mpsc::channel::<Instant>();
    let one_way = Duration::from_micros(setup.path.link.map_or(0, |l| l.rtt_us / 2));
    crate::harness::session(
        setup,
        strategy,
        |conn, started| {
            conn.send(&message::open(65001, [192, 0, 2, 1]), Burst::Last)?;
            read_bgp(conn)?;
            conn.send(&message::keepalive(), Burst::Last)?;
            read_bgp(conn)?;
            let per_update = per_update.clamp(1, message::MAX_ROUTES);
            for first in (0..routes).step_by(per_update) {
                let n = per_update.min(routes - first);
                conn.send(&message::update(first, n, 65001), Burst::More)?;
            }
            conn.send(&message::end_of_rib(), Burst::Last)?;
            read_bgp(conn)?;
            let update_at = rx
                .recv()
                .map_err(|_| io::Error::other("peer never saw an UPDATE"))?;
            let left = update_at.saturating_duration_since(started);
            Ok(ClientReport {
                latencies_us: vec![left.saturating_sub(one_way).as_micros() as u64],
                work: 1.0,
            })
        },
        move |conn| {
            conn.send(&message::open(65002, [192, 0, 2, 2]), Burst::Last)?;
            read_bgp(conn)?;
            conn.send(&message::keepalive(), Burst::Last)?;
            read_bgp(conn)?;
            let mut first = true;
            loop {
                let m = read_bgp(conn)?;
                if m[18] != message::UPDATE {
                    continue;
                }
                if first {
                    first = false;
                    let _ = tx.send(Instant::now());
                }
                if m.len() == 23 {
                    conn.send(&message::keepalive(), Burst::Last)?;
                }
            }
        },
    )
}

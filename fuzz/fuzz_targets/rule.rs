//! Random segment sequences straight into the per-flow analysis and the stall rule, past the
//! capture parser: none may panic, and memory stays bounded however the sequence goes
//! (flows opened and never closed, sequence numbers that wrap or jump back, times that go
//! backwards). Each 12-byte chunk of the input is one segment on a handful of endpoints; the
//! first byte says how many times (1 to 8) the whole sequence is played, each time from other
//! client addresses and later in time, so that an input of 128 KiB reaches tens of thousands
//! of live flows (past the doctor's bound on them) and long unacknowledged queues.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use nagless_doctor::analysis::{Analyzer, Options};
use nagless_doctor::packet::Segment;

fuzz_target!(|data: &[u8]| {
    let mut analyzer = Analyzer::new(Options::default());
    let mut us = 0u64;
    let mut seq = [0u32; 16];
    let rounds = data.first().map_or(1, |b| 1 + (b & 7));
    let chunks = data.get(1..).unwrap_or_default().chunks_exact(12);
    let mut frame = 0u64;
    for round in 0..rounds {
        for c in chunks.clone() {
            frame += 1;
            push(&mut analyzer, &mut us, &mut seq, round, frame, c);
        }
    }
    let _ = analyzer.finish();
});

/// One 12-byte chunk as a segment, in play `round`.
fn push(
    analyzer: &mut Analyzer,
    us: &mut u64,
    seq: &mut [u32; 16],
    round: u8,
    frame: u64,
    c: &[u8],
) {
    // Four hosts, dozens of ports: flows meet, reuse and cross.
    let a = (c[0] & 3, 1000 + u16::from(c[0] >> 2));
    let b = (c[1] & 3, 2000 + u16::from(c[1] >> 2 & 31));
    let (src, dst) = if c[1] & 0x80 == 0 { (a, b) } else { (b, a) };
    // Each play from other client addresses: new flows, the old ones left open.
    let net =
        |h: u8, client: bool| IpAddr::V4(Ipv4Addr::new(10, if client { round } else { 0 }, 0, h));
    let slot = usize::from(c[0] & 15);
    // Mostly forward steps, sometimes a jump anywhere.
    seq[slot] = if c[2] == 0xff {
        u32::from_le_bytes([c[3], c[4], c[5], c[6]])
    } else {
        seq[slot].wrapping_add(u32::from(c[3]) << (c[2] & 7))
    };
    // Time steps from microseconds to seconds; now and then backwards.
    let step = u64::from(u16::from_le_bytes([c[7], c[8]])) << (c[9] & 15);
    *us = if c[9] & 0x80 != 0 {
        us.saturating_sub(step)
    } else {
        *us + step
    };
    let s = Segment {
        src: (net(src.0, src.1 < 2000), src.1),
        dst: (net(dst.0, dst.1 < 2000), dst.1),
        seq: seq[slot],
        ack: u32::from_le_bytes([c[4], c[5], c[10], c[6]]),
        flags: c[10] & 0x1f,
        len: u32::from(c[11]) << (c[2] >> 4 & 3) << 2,
        mss: (c[11] & 1 == 0).then_some(536 + u16::from(c[8])),
        window: u16::from(c[6]) << 4,
        wscale: (c[10] & 0x20 != 0).then_some(c[11] & 15),
        opt_len: c[9] & 0x28,
        sack: c[10] & 0x40 != 0,
        // A D-SACK-like first block now and then, below or around the ACK number.
        sack_first: (c[10] & 0x40 != 0).then(|| {
            let ack = u32::from_le_bytes([c[4], c[5], c[10], c[6]]);
            (
                ack.wrapping_sub(u32::from(c[3]) << 4),
                ack.wrapping_sub(u32::from(c[8])),
            )
        }),
        // IPv4 numbers that mostly go up by one (a skip now and then), or none (IPv6).
        ip_id: (c[1] & 1 == 0).then_some(frame as u16 ^ u16::from(c[7] & 3)),
        ts: (c[10] & 0x80 != 0).then_some((*us as u32 / 1000, u32::from(c[3]))),
        ttl: c[1],
        head: Default::default(),
    };
    analyzer.push(frame, *us, &s);
}

//! Writes a synthetic pcap of many concurrent TCP flows for the doctor's benchmark
//! (`scripts/bench-doctor`): request/response flows, one in ten with a write-write-read
//! Nagle/delayed-ACK stall in every round, and bulk flows, interleaved in time order.
//!
//! `cargo run --release -p nagless-doctor --example gen_capture -- OUT.pcap SIZE_MB [SNAPLEN]`
//! (SNAPLEN 0: whole packets). Deterministic: the same arguments give the same file. Prints
//! the flows and the stalls it wrote, so the benchmark can check the doctor's count.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufWriter, Write};

/// One packet of a flow's script: (µs after the previous, from the client?, payload, flags).
type Step = (u64, bool, u32, u8);

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;

struct Flow {
    id: u32,
    script: Vec<Step>,
    at: usize,
    seq: [u32; 2],
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn script(rng: &mut Rng, stalls: &mut u64) -> Vec<Step> {
    let mut s: Vec<Step> = vec![
        (0, true, 0, SYN),
        (300, false, 0, SYN | ACK),
        (300, true, 0, ACK),
    ];
    let stalling = rng.below(10) == 0;
    if rng.below(5) == 0 {
        // Bulk: the client sends 1-4 MB, the server ACKs every second segment.
        let segs = 700 + rng.below(2100);
        for i in 0..segs {
            s.push((20, true, 1448, ACK));
            if i % 2 == 1 {
                s.push((30, false, 0, ACK));
            }
        }
    } else {
        for _ in 0..(5 + rng.below(40)) {
            if stalling {
                // Part 1, a delayed ACK 40 ms later, part 2 released at once.
                s.push((2_000, true, 120, ACK | PSH));
                s.push((40_000, false, 0, ACK));
                s.push((60, true, 80, ACK | PSH));
                *stalls += 1;
            } else {
                s.push((2_000, true, 200, ACK | PSH));
            }
            let reply = 100 + rng.below(20_000) as u32;
            let mut left = reply;
            let mut n = 0;
            while left > 0 {
                let len = left.min(1448);
                s.push((if n == 0 { 400 } else { 15 }, false, len, ACK | PSH));
                left -= len;
                n += 1;
                if n % 2 == 0 {
                    s.push((300, true, 0, ACK));
                }
            }
            s.push((300, true, 0, ACK));
        }
    }
    s.push((1_000, true, 0, FIN | ACK));
    s.push((300, false, 0, FIN | ACK));
    s.push((300, true, 0, ACK));
    s
}

fn frame(f: &Flow, step: &Step, snaplen: usize, out: &mut Vec<u8>) -> u32 {
    let (_, from_client, len, flags) = *step;
    let d = usize::from(!from_client);
    let client = [10, 1, (f.id >> 16) as u8 & 0x7f, (f.id >> 8) as u8];
    let server = [10, 2, 0, (f.id % 8) as u8 + 1];
    let cport = 20_000 + (f.id % 40_000) as u16;
    let sport = [80u16, 443, 6379, 8080][f.id as usize % 4];
    let (src, dst, sp, dp) = if from_client {
        (client, server, cport, sport)
    } else {
        (server, client, sport, cport)
    };
    let opt: &[u8] = if flags & SYN != 0 {
        &[
            2, 4, 0x05, 0xb4, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ]
    } else {
        &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 1]
    };
    let tcp_len = 20 + opt.len();
    let ip_total = 20 + tcp_len + len as usize;
    out.clear();
    out.extend_from_slice(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00]);
    out.extend_from_slice(&[0x45, 0]);
    out.extend_from_slice(&(ip_total as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
    out.extend_from_slice(&src);
    out.extend_from_slice(&dst);
    out.extend_from_slice(&sp.to_be_bytes());
    out.extend_from_slice(&dp.to_be_bytes());
    out.extend_from_slice(&f.seq[d].to_be_bytes());
    out.extend_from_slice(&f.seq[1 - d].to_be_bytes());
    out.push(((tcp_len / 4) as u8) << 4);
    out.push(flags);
    out.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    out.extend_from_slice(opt);
    let wire = 14 + ip_total;
    let captured = if snaplen == 0 {
        wire
    } else {
        wire.min(snaplen)
    };
    out.resize(captured, 0x61);
    wire as u32
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: gen_capture OUT.pcap SIZE_MB [SNAPLEN]");
        std::process::exit(2);
    }
    let target = args[2].parse::<u64>().expect("SIZE_MB") << 20;
    let snaplen: usize = args.get(3).map_or(0, |s| s.parse().expect("SNAPLEN"));
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&args[1])?);
    w.write_all(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0])?;
    w.write_all(&262_144u32.to_le_bytes())?;
    w.write_all(&1u32.to_le_bytes())?;
    let mut written = 24u64;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut flows, mut stalls, mut packets) = (0u32, 0u64, 0u64);
    let mut live: Vec<Flow> = Vec::new();
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut free: Vec<usize> = Vec::new();
    const CONCURRENT: usize = 2_000;
    let start_us = 1_700_000_000_000_000u64;
    let mut now = start_us;
    let mut buf = Vec::new();
    loop {
        while written < target && live.len() - free.len() < CONCURRENT {
            flows += 1;
            let f = Flow {
                id: flows,
                script: script(&mut rng, &mut stalls),
                at: 0,
                seq: [rng.next() as u32, rng.next() as u32],
            };
            let slot = match free.pop() {
                Some(i) => {
                    live[i] = f;
                    i
                }
                None => {
                    live.push(f);
                    live.len() - 1
                }
            };
            heap.push(Reverse((now + rng.below(1_000), slot)));
        }
        let Some(Reverse((t, slot))) = heap.pop() else {
            break;
        };
        now = now.max(t);
        let f = &mut live[slot];
        let step = f.script[f.at];
        let wire = frame(f, &step, snaplen, &mut buf);
        let d = usize::from(!step.1);
        f.seq[d] = f.seq[d].wrapping_add(step.2 + u32::from(step.3 & (SYN | FIN) != 0));
        w.write_all(&((now / 1_000_000) as u32).to_le_bytes())?;
        w.write_all(&((now % 1_000_000) as u32).to_le_bytes())?;
        w.write_all(&(buf.len() as u32).to_le_bytes())?;
        w.write_all(&wire.to_le_bytes())?;
        w.write_all(&buf)?;
        written += 16 + buf.len() as u64;
        packets += 1;
        f.at += 1;
        if let Some(next) = f.script.get(f.at) {
            heap.push(Reverse((now + next.0, slot)));
        } else {
            free.push(slot);
        }
    }
    w.flush()?;
    println!(
        "{} bytes, {packets} packets, {flows} flows, {stalls} stalls written",
        written
    );
    Ok(())
}

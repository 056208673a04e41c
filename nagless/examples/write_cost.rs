//! The cost of one small write, outside criterion: 20 million 16-byte `write_all`s with a
//! flush every 1,024 (the flush syscall included), through `BufWriter<TcpStream>` and through
//! `NaglessStream` with the default policy and with `explicit_only` (no linger deadline, so
//! no clock read per write), and the cost of one cycle-counter read (`rdtsc`, what the
//! default policy's linger check costs per write on x86-64). Three rounds, to see the spread.
//!
//! `cargo run --release -p nagless --example write_cost`
#![allow(clippy::disallowed_methods)] // it measures real time

use std::io::Write;
use std::time::Instant;

#[path = "../benches/support/sink.rs"]
mod sink;
use sink::sink;

use nagless::{FlushPolicy, NaglessStream};

/// Nanoseconds per write.
fn per_write(w: &mut impl Write, writes: usize) -> f64 {
    let start = Instant::now();
    for i in 0..writes {
        w.write_all(std::hint::black_box(&[7u8; 16])).unwrap();
        if i % 1024 == 1023 {
            w.flush().unwrap();
        }
    }
    start.elapsed().as_nanos() as f64 / writes as f64
}

/// Nanoseconds per back-to-back cycle-counter read.
#[cfg(target_arch = "x86_64")]
fn per_counter_read() -> f64 {
    const READS: u32 = 50_000_000;
    let start = Instant::now();
    let mut sum = 0u64;
    for _ in 0..READS {
        // SAFETY: RDTSC has no preconditions on x86-64; it only reads the time-stamp counter.
        sum = sum.wrapping_add(unsafe { core::arch::x86_64::_rdtsc() });
    }
    std::hint::black_box(sum);
    start.elapsed().as_nanos() as f64 / f64::from(READS)
}

#[cfg(not(target_arch = "x86_64"))]
fn per_counter_read() -> f64 {
    f64::NAN
}

fn main() {
    const WRITES: usize = 20_000_000;
    for round in 1..=3 {
        let buffered = per_write(
            &mut std::io::BufWriter::with_capacity(64 * 1024, sink()),
            WRITES,
        );
        let mut by_policy = Vec::new();
        for policy in [FlushPolicy::default(), FlushPolicy::explicit_only()] {
            let mut s = NaglessStream::with_policy(sink(), policy.high_water(usize::MAX)).unwrap();
            by_policy.push(per_write(&mut s, WRITES));
        }
        println!(
            "round {round}: BufWriter {buffered:.1} ns, nagless default {:.1} ns, \
             explicit_only {:.1} ns per 16-byte write; one rdtsc {:.1} ns",
            by_policy[0],
            by_policy[1],
            per_counter_read()
        );
    }
}

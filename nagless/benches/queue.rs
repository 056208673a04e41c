//! Benchmarks (not in CI): ns per queued write, and a burst of 16 writes plus flush over real
//! loopback sockets against `BufWriter<TcpStream>` and one raw write per message.
//! Run: `cargo bench -p nagless`.
#![allow(missing_docs, clippy::disallowed_methods)]

use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::time::Instant;

#[path = "support/sink.rs"]
mod sink;
use sink::sink;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nagless::{Coalescer, FlushPolicy, NaglessStream, Urgency};

const SIZES: [usize; 4] = [16, 100, 1024, 16 * 1024];

fn queued_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("queued_write");
    for size in SIZES {
        let msg = vec![7u8; size];
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::from_parameter(size), &msg, |b, msg| {
            let mut core = Coalescer::new(FlushPolicy::explicit_only().high_water(usize::MAX));
            let now = Instant::now();
            let mut n = 0u32;
            b.iter(|| {
                core.write(black_box(msg), Urgency::Normal, now);
                n += 1;
                if n == 64 {
                    // Drain as a socket would, so the queue stays small.
                    let p = core.pending();
                    core.on_sent(p);
                    n = 0;
                }
            });
        });
    }
    g.finish();
}

fn burst_then_flush(c: &mut Criterion) {
    let mut g = c.benchmark_group("burst16_flush");
    for size in SIZES {
        let msg = vec![7u8; size];
        g.throughput(Throughput::Elements(16));
        g.bench_with_input(BenchmarkId::new("nagless", size), &msg, |b, msg| {
            let mut s = NaglessStream::new(sink()).unwrap();
            b.iter(|| {
                for _ in 0..16 {
                    s.write_all(msg).unwrap();
                }
                s.flush().unwrap();
            });
            let st = s.stats();
            eprintln!(
                "nagless {size} B: {:.2} syscalls per flush",
                st.syscalls as f64 / st.flushes.max(1) as f64
            );
        });
        g.bench_with_input(BenchmarkId::new("bufwriter", size), &msg, |b, msg| {
            let tcp = sink();
            tcp.set_nodelay(true).unwrap();
            let mut s = BufWriter::new(tcp);
            b.iter(|| {
                for _ in 0..16 {
                    s.write_all(msg).unwrap();
                }
                s.flush().unwrap();
            });
        });
        g.bench_with_input(BenchmarkId::new("raw_write", size), &msg, |b, msg| {
            let mut s = sink();
            s.set_nodelay(true).unwrap();
            b.iter(|| {
                for _ in 0..16 {
                    s.write_all(msg).unwrap();
                }
            });
        });
    }
    g.finish();
}

/// One 16-byte write through the std stream (the copy and the policy check; the clock only
/// when a deadline could have passed), with a flush every 1024 writes, by policy; and through
/// `BufWriter<TcpStream>` (64 KiB buffer) for comparison.
fn stream_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("stream_write16");
    g.throughput(Throughput::Elements(1));
    g.bench_function("bufwriter", |b| {
        let mut w = std::io::BufWriter::with_capacity(64 * 1024, sink());
        let mut n = 0u32;
        b.iter(|| {
            w.write_all(black_box(&[7u8; 16])).unwrap();
            n += 1;
            if n == 1024 {
                w.flush().unwrap();
                n = 0;
            }
        });
    });
    for (name, policy) in [
        ("default", FlushPolicy::default()),
        ("explicit_only", FlushPolicy::explicit_only()),
    ] {
        g.bench_function(name, |b| {
            let mut s =
                NaglessStream::with_policy(sink(), policy.clone().high_water(usize::MAX)).unwrap();
            let mut n = 0u32;
            b.iter(|| {
                s.write_all(black_box(&[7u8; 16])).unwrap();
                n += 1;
                if n == 1024 {
                    s.flush().unwrap();
                    n = 0;
                }
            });
        });
    }
    g.finish();
}

criterion_group!(benches, queued_write, burst_then_flush, stream_write);
criterion_main!(benches);

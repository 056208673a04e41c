//! Cost of one queued write through the std stream (no syscall), by policy.
//! Run: `cargo run --release -p nagless --example write_cost`.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use nagless::{FlushPolicy, NaglessStream};

fn main() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let tcp = TcpStream::connect(addr).unwrap();
    for (name, policy) in [
        ("default", FlushPolicy::default()),
        ("explicit_only", FlushPolicy::explicit_only()),
    ] {
        let mut s = NaglessStream::with_policy(&tcp, policy.high_water(usize::MAX)).unwrap();
        let msg = [7u8; 16];
        let n = 2_000_000u32;
        let t = Instant::now();
        for i in 0..n {
            s.write_all(&msg).unwrap();
            if i % 1024 == 1023 {
                s.flush().unwrap();
            }
        }
        s.flush().unwrap();
        println!(
            "{name}: {:.1} ns per 16-byte write (incl. one flush per 1024)",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
}

//! Heap held per idle stream, counted by a global allocator: after one burst each, 400 idle
//! `NaglessStream`s (std, and tokio over plain tokio streams as the baseline) must hold at
//! most 1 KiB each, so a server with 10,000 idle keep-alive connections spends < 10 MB on us.
#![allow(clippy::disallowed_methods)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const N: usize = 400; // 800 descriptors: under the usual soft limit of 1024
const LIMIT: isize = 1024;

/// Connected pairs on 127.0.0.1: (client, server side).
fn pairs(n: usize) -> Vec<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    (0..n)
        .map(|_| {
            let c = TcpStream::connect(a).unwrap();
            (c, l.accept().unwrap().0)
        })
        .collect()
}

#[test]
fn an_idle_std_stream_holds_at_most_1_kib() {
    let socks = pairs(N);
    let before = LIVE.load(Relaxed);
    let mut streams = Vec::with_capacity(N);
    let mut peers = Vec::with_capacity(N);
    let vec_cost = LIVE.load(Relaxed) - before;
    for (c, p) in socks {
        let mut s = nagless::NaglessStream::new(c).unwrap();
        s.write_all(&[1u8; 300]).unwrap();
        s.write_all(&[2u8; 300]).unwrap();
        s.flush().unwrap();
        streams.push(s);
        peers.push(p);
    }
    let per = (LIVE.load(Relaxed) - before - vec_cost) / N as isize;
    for p in &mut peers {
        let mut got = [0u8; 600];
        p.read_exact(&mut got).unwrap();
    }
    assert!(per <= LIMIT, "{per} bytes of heap per idle std stream");
    eprintln!("idle std NaglessStream: {per} bytes of heap each");
}

#[cfg(feature = "tokio")]
#[test]
fn an_idle_tokio_stream_holds_at_most_1_kib_more_than_a_plain_one() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use tokio::io::AsyncWriteExt;
        let mut cost = [0isize; 2];
        for (i, wrap) in [false, true].into_iter().enumerate() {
            let socks = pairs(N);
            let mut plain = Vec::with_capacity(N);
            let mut ours = Vec::with_capacity(N);
            let mut peers = Vec::with_capacity(N);
            let before = LIVE.load(Relaxed);
            for (c, p) in socks {
                c.set_nonblocking(true).unwrap();
                let t = tokio::net::TcpStream::from_std(c).unwrap();
                if wrap {
                    let mut s = nagless::tokio_adapter::NaglessStream::new(t).unwrap();
                    s.write_all(&[1u8; 300]).await.unwrap();
                    s.write_all(&[2u8; 300]).await.unwrap();
                    s.flush().await.unwrap();
                    ours.push(s);
                } else {
                    let mut t = t;
                    t.write_all(&[1u8; 600]).await.unwrap();
                    plain.push(t);
                }
                peers.push(p);
            }
            // Let the timer tasks (none should be left) finish.
            tokio::task::yield_now().await;
            cost[i] = (LIVE.load(Relaxed) - before) / N as isize;
        }
        let per = cost[1] - cost[0];
        assert!(per <= LIMIT, "{per} bytes more per idle tokio stream than a plain one");
        eprintln!("idle tokio NaglessStream: {per} bytes of heap each beyond a plain tokio stream ({} bytes)", cost[0]);
    });
}

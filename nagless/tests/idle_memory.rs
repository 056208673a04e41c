//! Heap held per idle stream, counted by a global allocator: after one burst each, 10,000 idle
//! `NaglessStream`s (std, and tokio over plain tokio streams as the baseline) must hold at
//! most 1 KiB each, so a server with 10,000 idle keep-alive connections spends < 10 MB on us.
//! (10,000 connections take 20,000 descriptors: the test raises its open-file limit, which
//! root may do; where it cannot, it uses as many connections as the limit allows and says so.)
#![allow(clippy::disallowed_methods)]
// The open-file limit is raised with getrlimit/setrlimit: Unix only.
#![cfg(unix)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

// `exclusive()`: the two tests take turns: each needs most of the open-file limit, and the
// heap counter is shared.
use nagless_test_support::exclusive;

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

const WANTED: usize = 10_000;

const LIMIT: isize = 1024;

/// How many idle connections this process can hold (two descriptors each): [`WANTED`] after
/// raising the open-file limit if need be, else what the limit allows.
fn connections() -> usize {
    let need = (2 * WANTED + 64) as libc::rlim_t;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the one rlimit struct we pass.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_cur < need {
            let raised = libc::rlimit {
                rlim_cur: need,
                rlim_max: lim.rlim_max.max(need),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    let n = WANTED.min((lim.rlim_cur as usize).saturating_sub(64) / 2);
    assert!(
        n >= 100,
        "open-file limit {} is too low for this test",
        lim.rlim_cur
    );
    if n < WANTED {
        eprintln!(
            "open-file limit {}: measuring {n} connections, not {WANTED}",
            lim.rlim_cur
        );
    }
    n
}

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
    let _turn = exclusive();
    let n = connections();
    let socks = pairs(n);
    let before = LIVE.load(Relaxed);
    let mut streams = Vec::with_capacity(n);
    let mut peers = Vec::with_capacity(n);
    let vec_cost = LIVE.load(Relaxed) - before;
    for (c, p) in socks {
        let mut s = nagless::NaglessStream::new(c).unwrap();
        s.write_all(&[1u8; 300]).unwrap();
        s.write_all(&[2u8; 300]).unwrap();
        s.flush().unwrap();
        streams.push(s);
        peers.push(p);
    }
    let per = (LIVE.load(Relaxed) - before - vec_cost) / n as isize;
    for p in &mut peers {
        let mut got = [0u8; 600];
        p.read_exact(&mut got).unwrap();
    }
    assert!(per <= LIMIT, "{per} bytes of heap per idle std stream");
    eprintln!("{n} idle std NaglessStreams: {per} bytes of heap each");
}

#[cfg(feature = "tokio")]
#[test]
fn an_idle_tokio_stream_holds_at_most_1_kib_more_than_a_plain_one() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _turn = exclusive();
    let n = connections();
    rt.block_on(async {
        use tokio::io::AsyncWriteExt;
        let mut cost = [0isize; 2];
        for (i, wrap) in [false, true].into_iter().enumerate() {
            let socks = pairs(n);
            let mut plain = Vec::with_capacity(n);
            let mut ours = Vec::with_capacity(n);
            let mut peers = Vec::with_capacity(n);
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
            cost[i] = (LIVE.load(Relaxed) - before) / n as isize;
        }
        let per = cost[1] - cost[0];
        assert!(per <= LIMIT, "{per} bytes more per idle tokio stream than a plain one");
        eprintln!("{n} idle tokio NaglessStreams: {per} bytes of heap each beyond a plain tokio stream ({} bytes)", cost[0]);
    });
}

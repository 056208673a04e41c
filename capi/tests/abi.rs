//! The C API's functions called as C calls them, from Rust, on every OS (Windows under Wine in
//! CI: `scripts/wine-test`): a write-write-read exchange on 127.0.0.1 leaves as one send and
//! never waits for a delayed ACK, bytes arrive whole and in order, and bad input gives `-1`
//! (or `NULL`) with the OS's error code, never a crash. (`tests/c_api.rs` runs the C programs
//! of `tests/c/`, built with `cc`, on Unix.)
#![allow(clippy::disallowed_methods)] // the exchange is timed
#![allow(clippy::undocumented_unsafe_blocks)] // every call below is a C call with valid arguments

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ptr;
use std::time::{Duration, Instant};

use nagless_capi::*;

/// The error codes the API documents, per OS.
#[cfg(unix)]
mod code {
    pub const EINVAL: i32 = libc::EINVAL;
    pub const EBADF: i32 = libc::EBADF;
}
#[cfg(windows)]
mod code {
    use windows_sys::Win32::Networking::WinSock as ws;
    pub const EINVAL: i32 = ws::WSAEINVAL;
    pub const EBADF: i32 = ws::WSAENOTSOCK;
}

fn raw(s: &TcpStream) -> NaglessSocket {
    #[cfg(unix)]
    return std::os::fd::AsRawFd::as_raw_fd(s);
    #[cfg(windows)]
    return std::os::windows::io::AsRawSocket::as_raw_socket(s) as NaglessSocket;
}

fn last_error() -> i32 {
    errno::errno().0
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    (c, l.accept().unwrap().0)
}

#[test]
fn writev_of_many_buffers_delivers_every_byte_in_order() {
    let (client, mut server) = pair();
    let h = unsafe { nagless_new(raw(&client), ptr::null()) };
    assert!(!h.is_null());
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; 300_000];
        server.read_exact(&mut got).unwrap();
        got
    });
    // 3000 buffers of 100 bytes, in batches of 1500: more than one gathered send can take.
    for batch in data.chunks(150_000) {
        let iov: Vec<iovec> = batch
            .chunks(100)
            .map(|c| iovec {
                iov_base: c.as_ptr() as *mut _,
                iov_len: c.len(),
            })
            .collect();
        let mut off = 0;
        while off < iov.len() {
            let n = unsafe { nagless_writev(h, iov[off..].as_ptr(), (iov.len() - off) as i32) };
            assert!(n > 0, "nagless_writev: {n}, error {}", last_error());
            // Whole buffers only here: the high-water mark is far above 150 kB.
            assert_eq!(n as usize % 100, 0);
            off += n as usize / 100;
        }
    }
    assert_eq!(unsafe { nagless_flush_wait(h, 10_000) }, 0);
    assert_eq!(unsafe { nagless_free(h) }, 0);
    assert!(reader.join().unwrap() == data, "bytes lost or reordered");
}

#[test]
fn bad_input_gives_minus_one_and_the_os_error_code() {
    let buf = [0u8; 4];
    // NULL handles.
    assert_eq!(
        unsafe { nagless_write(ptr::null_mut(), buf.as_ptr().cast(), 4) },
        -1
    );
    assert_eq!(last_error(), code::EINVAL);
    assert_eq!(unsafe { nagless_flush(ptr::null_mut()) }, -1);
    assert_eq!(last_error(), code::EINVAL);
    assert_eq!(unsafe { nagless_free(ptr::null_mut()) }, 0);
    // Not a socket: a number no open socket has.
    #[cfg(unix)]
    let bad: NaglessSocket = -1;
    #[cfg(windows)]
    let bad: NaglessSocket = usize::MAX - 7;
    assert!(unsafe { nagless_new(bad, ptr::null()) }.is_null());
    assert_eq!(last_error(), code::EBADF);
    // Policy fields out of range.
    let (client, _server) = pair();
    let mut p = std::mem::MaybeUninit::uninit();
    unsafe { nagless_policy_default(p.as_mut_ptr()) };
    let good = unsafe { p.assume_init() };
    for bad in [
        NaglessPolicy {
            high_water: 0,
            ..good
        },
        NaglessPolicy {
            linger_us: -2,
            ..good
        },
        NaglessPolicy {
            before_read: 2,
            ..good
        },
    ] {
        assert!(unsafe { nagless_new(raw(&client), &bad) }.is_null());
        assert_eq!(last_error(), code::EINVAL);
    }
    // A live handle: a NULL buffer with a length, an unknown urgency.
    let h = unsafe { nagless_new(raw(&client), &good) };
    assert!(!h.is_null());
    assert_eq!(unsafe { nagless_write(h, ptr::null(), 4) }, -1);
    assert_eq!(last_error(), code::EINVAL);
    assert_eq!(
        unsafe { nagless_write_urgent(h, buf.as_ptr().cast(), 4, 7) },
        -1
    );
    assert_eq!(last_error(), code::EINVAL);
    assert_eq!(unsafe { nagless_writev(h, ptr::null(), 3) }, -1);
    assert_eq!(last_error(), code::EINVAL);
    assert_eq!(unsafe { nagless_pending(h) }, 0, "nothing was accepted");
    assert_eq!(unsafe { nagless_free(h) }, 0);
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn write_write_read_leaves_as_one_send_and_never_stalls() {
        const ROUNDS: usize = 30;
        let (client, mut server) = pair();
        let echo = std::thread::spawn(move || {
            let mut req = [0u8; 200];
            let mut whole = 0;
            for _ in 0..ROUNDS {
                // One send of both writes reaches a waiting reader in one read.
                let first = server.read(&mut req).unwrap();
                whole += usize::from(first == 200);
                server.read_exact(&mut req[first..]).unwrap();
                assert!(
                    req[..100].iter().all(|&b| b == b'a') && req[100..].iter().all(|&b| b == b'b')
                );
                server.write_all(&[b'r'; 100]).unwrap();
            }
            whole
        });
        let h = unsafe { nagless_new(raw(&client), ptr::null()) };
        assert!(!h.is_null(), "nagless_new: {}", last_error());
        let mut times = Vec::with_capacity(ROUNDS);
        let mut reply = [0u8; 100];
        for _ in 0..ROUNDS {
            let t = Instant::now();
            assert_eq!(
                unsafe { nagless_write(h, [b'a'; 100].as_ptr().cast(), 100) },
                100
            );
            assert_eq!(
                unsafe { nagless_write(h, [b'b'; 100].as_ptr().cast(), 100) },
                100
            );
            let mut got = 0;
            while got < 100 {
                let n = unsafe { nagless_read(h, reply[got..].as_mut_ptr().cast(), 100 - got) };
                assert!(n > 0, "nagless_read: {n}, error {}", last_error());
                got += n as usize;
            }
            times.push(t.elapsed());
        }
        let mut st = NaglessStats::default();
        assert_eq!(unsafe { nagless_get_stats(h, &mut st) }, 0);
        assert_eq!(unsafe { nagless_free(h) }, 0);
        let whole = echo.join().unwrap();
        // A delayed ACK is at least 40 ms (Linux; 200 ms on Windows): a stall would hold most
        // rounds that long, a busy machine (or Wine's extra layers) only a few. (`spare`: the
        // rounds a busy machine may spoil, one in five; a broken library spoils them all.)
        let spare = ROUNDS / 5;
        let stall = Duration::from_millis(40);
        times.sort();
        let slow = times.iter().filter(|d| **d >= stall).count();
        assert!(
            times[ROUNDS / 2] < stall / 2 && slow <= spare,
            "rounds: {times:?}"
        );
        assert_eq!(st.bytes_sent, (ROUNDS * 200) as u64);
        // One send per request; a round descheduled past the 500 µs linger bound between its two
        // writes legitimately sends the first alone.
        assert!(
            (ROUNDS..=ROUNDS + spare).contains(&(st.flushes as usize)),
            "{} sends for {ROUNDS} requests",
            st.flushes
        );
        assert!(
            whole + spare >= ROUNDS,
            "only {whole}/{ROUNDS} requests arrived in one read"
        );
    }
}

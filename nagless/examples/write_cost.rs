//! The cost of one small write, outside criterion: 20 million 16-byte writes with a flush
//! every 1,024 (the flush syscall included), each API beside the buffered writer of its own
//! world, in one run, interleaved, so that the ratio holds on a busy machine:
//!
//! - the std stream against `std::io::BufWriter<TcpStream>` (`write_all`);
//! - the tokio adapter against `tokio::io::BufWriter<TcpStream>` (`write_all(..).await`);
//! - the C API (`nagless_write`, called as a C program calls it) against `BufWriter`, and
//!   against C's own buffered writer, stdio (glibc's `fwrite_unlocked`, the fastest stdio
//!   write) on a fully buffered `FILE` over the socket;
//!
//! with the default policy and with `explicit_only` (no linger deadline). Every socket has
//! `TCP_NODELAY` (nagless sets it; the buffered writers' sockets get it too), so that the
//! kernel does the same work for each flush and the difference is the cost of the writes.
//! Three rounds, to see the spread; the last line gives the cost of one cycle-counter read
//! (`rdtsc`), which the default policy pays on a write that joins an open linger window.
//!
//! `cargo run --release -p nagless --features tokio --example write_cost`
#![allow(clippy::disallowed_methods)] // it measures real time

use std::io::Write;
use std::time::Instant;

#[path = "../benches/support/sink.rs"]
mod sink;
use sink::sink;

use nagless::{FlushPolicy, NaglessStream};
use tokio::io::AsyncWriteExt;

const WRITES: usize = 20_000_000;
const MESSAGE: [u8; 16] = [7; 16];

/// Nanoseconds per write through a std writer.
fn per_write(w: &mut impl Write) -> f64 {
    let start = Instant::now();
    for i in 0..WRITES {
        w.write_all(std::hint::black_box(&MESSAGE)).unwrap();
        if i % 1024 == 1023 {
            w.flush().unwrap();
        }
    }
    start.elapsed().as_nanos() as f64 / WRITES as f64
}

/// Nanoseconds per write through a tokio writer, on a current-thread runtime.
fn per_write_async<W: tokio::io::AsyncWrite + Unpin>(
    rt: &tokio::runtime::Runtime,
    make: impl FnOnce() -> W,
) -> f64 {
    rt.block_on(async {
        let mut w = make();
        let start = Instant::now();
        for i in 0..WRITES {
            w.write_all(std::hint::black_box(&MESSAGE)).await.unwrap();
            if i % 1024 == 1023 {
                w.flush().await.unwrap();
            }
        }
        start.elapsed().as_nanos() as f64 / WRITES as f64
    })
}

/// Nanoseconds per write through the C API.
fn per_write_c(explicit_only: bool) -> f64 {
    use nagless_capi::*;
    use std::os::fd::AsRawFd;
    let socket = sink();
    let mut policy = std::mem::MaybeUninit::<NaglessPolicy>::uninit();
    // SAFETY: `policy` is writable; nagless_policy_default fills every field.
    let mut policy = unsafe {
        nagless_policy_default(policy.as_mut_ptr());
        policy.assume_init()
    };
    if explicit_only {
        (policy.before_read, policy.threshold, policy.linger_us) = (0, 0, -1);
    }
    policy.high_water = usize::MAX;
    // SAFETY: `socket` is an open socket kept open until after nagless_free; `policy` is
    // readable.
    let h = unsafe { nagless_new(socket.as_raw_fd(), &policy) };
    assert!(
        !h.is_null(),
        "nagless_new: {}",
        std::io::Error::last_os_error()
    );
    let start = Instant::now();
    for i in 0..WRITES {
        let m = std::hint::black_box(&MESSAGE);
        // SAFETY: `h` is live; `m` is readable for its length.
        let n = unsafe { nagless_write(h, m.as_ptr().cast(), m.len()) };
        assert_eq!(n, 16);
        if i % 1024 == 1023 {
            // SAFETY: `h` is live.
            assert_eq!(unsafe { nagless_flush(h) }, 0);
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / WRITES as f64;
    // SAFETY: `h` came from nagless_new and is freed once.
    assert_eq!(unsafe { nagless_free(h) }, 0);
    ns
}

/// Nanoseconds per write through C's buffered writer: stdio's `fwrite_unlocked` (glibc; the
/// fastest stdio write, with no lock, as the C API is used from one thread at a time) to a
/// fully buffered `FILE` over the socket, with 64 KiB of buffer, flushed as the others are.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn per_write_stdio() -> f64 {
    use std::os::fd::IntoRawFd;
    extern "C" {
        fn fwrite_unlocked(
            ptr: *const libc::c_void,
            size: libc::size_t,
            n: libc::size_t,
            f: *mut libc::FILE,
        ) -> libc::size_t;
        fn fflush_unlocked(f: *mut libc::FILE) -> libc::c_int;
    }
    let socket = sink();
    socket.set_nodelay(true).unwrap();
    let fd = socket.into_raw_fd();
    // SAFETY: `fd` is an open socket whose ownership passes to the FILE (fclose closes it);
    // the mode string is NUL-terminated.
    let f = unsafe { libc::fdopen(fd, c"w".as_ptr()) };
    assert!(!f.is_null(), "fdopen: {}", std::io::Error::last_os_error());
    // SAFETY: `f` is a fresh FILE with no I/O done yet; a NULL buffer lets stdio allocate it.
    let set = unsafe { libc::setvbuf(f, std::ptr::null_mut(), libc::_IOFBF, 64 * 1024) };
    assert_eq!(set, 0);
    let start = Instant::now();
    for i in 0..WRITES {
        let m = std::hint::black_box(&MESSAGE);
        // SAFETY: `f` is open; `m` is readable for its length.
        let n = unsafe { fwrite_unlocked(m.as_ptr().cast(), 1, m.len(), f) };
        assert_eq!(n, 16);
        if i % 1024 == 1023 {
            // SAFETY: `f` is open.
            let flushed = unsafe { fflush_unlocked(f) };
            assert_eq!(flushed, 0);
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / WRITES as f64;
    // SAFETY: `f` is open and closed once.
    assert_eq!(unsafe { libc::fclose(f) }, 0);
    ns
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn per_write_stdio() -> f64 {
    f64::NAN
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

/// One line: the baseline and each policy's cost, with its ratio to the baseline.
fn report(api: &str, baseline_name: &str, baseline: f64, default: f64, explicit: f64) {
    println!(
        "  {api:<6} {baseline_name} {baseline:5.1} ns | default {default:5.1} ns ({:.2}x) | \
         explicit_only {explicit:5.1} ns ({:.2}x)",
        default / baseline,
        explicit / baseline
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let policies = [
        FlushPolicy::default().high_water(usize::MAX),
        FlushPolicy::explicit_only().high_water(usize::MAX),
    ];
    let nodelay_sink = || {
        let s = sink();
        s.set_nodelay(true).unwrap();
        s
    };
    let tokio_sink = || {
        let s = nodelay_sink();
        s.set_nonblocking(true).unwrap();
        tokio::net::TcpStream::from_std(s).unwrap()
    };
    for round in 1..=3 {
        println!("round {round}, per 16-byte write:");
        let buffered = per_write(&mut std::io::BufWriter::with_capacity(
            64 * 1024,
            nodelay_sink(),
        ));
        let [default, explicit] = policies
            .clone()
            .map(|p| per_write(&mut NaglessStream::with_policy(sink(), p).unwrap()));
        report("std", "BufWriter      ", buffered, default, explicit);

        let buffered = per_write_async(&rt, || {
            tokio::io::BufWriter::with_capacity(64 * 1024, tokio_sink())
        });
        let [default, explicit] = policies.clone().map(|p| {
            per_write_async(&rt, || {
                nagless::tokio_adapter::NaglessStream::with_policy(tokio_sink(), p).unwrap()
            })
        });
        report("tokio", "tokio BufWriter", buffered, default, explicit);

        let buffered = per_write(&mut std::io::BufWriter::with_capacity(
            64 * 1024,
            nodelay_sink(),
        ));
        let (default, explicit) = (per_write_c(false), per_write_c(true));
        report("C API", "BufWriter      ", buffered, default, explicit);
        report("", "stdio fwrite   ", per_write_stdio(), default, explicit);
    }
    println!("one rdtsc: {:.1} ns", per_counter_read());
}

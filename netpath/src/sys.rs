//! The few syscalls the path needs (TUN devices, namespaces, precise waits): the only unsafe
//! code of the crate.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Moves the calling thread into the network namespace named `name` (`ip netns` names).
pub(crate) fn enter_netns(name: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: setns on a descriptor we hold open; affects only the calling thread.
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// Creates the TUN device `name` (no packet information header) in the calling thread's
/// network namespace; the descriptor is non-blocking.
pub(crate) fn open_tun(name: &str) -> io::Result<OwnedFd> {
    // SAFETY: plain open of a NUL-terminated path.
    let fd = cvt(unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is valid; we fill the name and the flags.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes().take(15)) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads the ifreq we pass; `fd` is a tun descriptor.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &req) })?;
    Ok(fd)
}

/// Waits until `fd` is readable or `timeout` passes (nanosecond precision). True if readable.
pub(crate) fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and a valid timespec for the duration of the call.
    match cvt(unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) }) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads one packet; `Ok(None)` when none is waiting.
pub(crate) fn read_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
        _ => Err(e),
    }
}

/// Writes one packet (a full TUN queue drops it, as a full link would).
pub(crate) fn write_packet(fd: RawFd, pkt: &[u8]) {
    // SAFETY: `pkt` is valid for `pkt.len()` bytes of reads.
    let _ = unsafe { libc::write(fd, pkt.as_ptr().cast(), pkt.len()) };
}

/// Makes the calling thread's timers as precise as the kernel allows (timer slack 1 ns).
pub(crate) fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects this thread only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

/// How late a thread asleep in [`wait_readable`] wakes after its descriptor turns readable:
/// the median of a few rounds of one thread writing a pipe while another waits on it. The
/// forwarder reads a packet that late after a sleep, so it dates the packet back by this much.
pub(crate) fn wake_latency() -> Duration {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array we pass.
    if cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }).is_err() {
        return Duration::ZERO;
    }
    // SAFETY: both descriptors were just made by pipe2 and are owned by nothing else.
    let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    #[allow(clippy::disallowed_methods)] // calibrates against real time
    let start = std::time::Instant::now();
    let mut samples = Vec::new();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut sent = Vec::new();
            for _ in 0..9 {
                std::thread::sleep(Duration::from_millis(5));
                let at = start.elapsed();
                // SAFETY: one byte from a valid buffer to the pipe's write end.
                unsafe { libc::write(tx.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
                sent.push(at);
            }
            sent
        });
        let mut byte = [0u8; 1];
        while samples.len() < 9 {
            if !wait_readable(rx.as_raw_fd(), Duration::from_millis(100)).unwrap_or(false) {
                break;
            }
            samples.push(start.elapsed());
            // SAFETY: reads one byte into a valid buffer.
            unsafe { libc::read(rx.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        }
        let sent = writer.join().unwrap_or_default();
        for (woke, at) in samples.iter_mut().zip(sent) {
            *woke = woke.saturating_sub(at);
        }
    });
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Whether a process with this PID exists.
pub(crate) fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

//! The lab's only unsafe code: per-thread CPU time, CPU pinning, and the bytes waiting to
//! be read on a socket.
#![allow(unsafe_code)]

/// CPU time (user + system) used by the calling thread so far, µs; 0 if unavailable.
/// `CLOCK_THREAD_CPUTIME_ID` is exact (the scheduler's runtime), where `getrusage`'s
/// per-thread figure moves in clock ticks (4 ms at HZ=250).
pub(crate) fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a Linux constant.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if ret != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Pins the calling thread to one CPU (best effort: errors are ignored, as an unpinned run
/// is still a valid run).
pub(crate) fn pin_to_cpu(cpu: usize) {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is reduced below CPU_SETSIZE, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size passed.
    let _ = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// Bytes waiting to be read on `fd` (`FIONREAD`), or `None` if the kernel does not say.
pub(crate) fn readable_bytes(fd: std::os::fd::BorrowedFd<'_>) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which is valid for writes; the
    // descriptor is borrowed for the call.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n as *mut libc::c_int) };
    (ret == 0 && n >= 0).then_some(n as usize)
}

/// `CLOCK_MONOTONIC` in ns: one clock for every process of the machine, so that a time
/// written by one end (a child process under `nagless run`) is read by the other.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a Linux constant.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if ret != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

//! The lab's only unsafe code: per-thread CPU time.
#![allow(unsafe_code)]

/// CPU time (user + system) used by the calling thread so far, µs; 0 if unavailable.
pub fn thread_cpu_us() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_THREAD is Linux's per-thread scope.
    let ret = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if ret != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// Pins the calling thread to one CPU (best effort: errors are ignored, as an unpinned run
/// is still a valid run).
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is reduced below CPU_SETSIZE, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size passed.
    let _ = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

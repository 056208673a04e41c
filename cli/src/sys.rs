//! The few system calls the command makes itself (the rest go through its crates).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Who runs this process: the real user ID and the real group ID.
pub fn identity() -> (u32, u32) {
    // SAFETY: getuid and getgid have no preconditions.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// Whether the file at `path` has the extended attribute `name`.
pub fn has_xattr(path: &Path, name: &str) -> bool {
    let (Ok(p), Ok(n)) = (
        CString::new(path.as_os_str().as_bytes()),
        CString::new(name),
    ) else {
        return false;
    };
    // SAFETY: NUL-terminated strings; a null buffer of size 0 asks only for the size.
    unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) >= 0 }
}

/// The effective user ID (the owner of the files this process creates).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Catches the first SIGINT, SIGTERM and SIGHUP (a second one acts as usual):
/// [`interrupted`] turns true and the program can stop and undo what it set up (drop its
/// paths, which removes the namespaces; detach and restore what `nagless fix` changed), also
/// when the terminal or ssh session it ran in goes away. (`nagless lab`, `watch` and `fix`.)
pub fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a plain handler, SA_RESETHAND so that the next
        // signal has its default action; the handler only stores an atomic.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether a caught SIGINT/SIGTERM arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// `TCP_DELACK_MAX_US` (Linux 6.15).
const TCP_DELACK_MAX_US: libc::c_int = 46;

/// What this kernel makes of `TCP_DELACK_MAX_US = us` on a fresh TCP socket: the bound it
/// keeps (rounded up to its clock's tick), or `None` if it refuses (before Linux 6.15, or a
/// bound below what it accepts).
pub fn delack_max_accepted(us: u32) -> Option<u32> {
    let v = libc::c_int::try_from(us).ok()?;
    // SAFETY: a plain socket call; the descriptor is closed below on every path.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let mut got: libc::c_int = 0;
    let mut len = size;
    // SAFETY: `v` and `got` are ints that live across the calls, their sizes passed; `fd` is
    // ours and closed once.
    let kept = unsafe {
        let set = libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            TCP_DELACK_MAX_US,
            (&v as *const libc::c_int).cast(),
            size,
        ) == 0;
        let read = set
            && libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                TCP_DELACK_MAX_US,
                (&mut got as *mut libc::c_int).cast(),
                &mut len,
            ) == 0;
        libc::close(fd);
        read
    };
    kept.then(|| u32::try_from(got).unwrap_or(us))
}

/// What `bpf(2)` says to a request it must refuse (`BPF_MAP_CREATE` of no map type): `ENOSYS`
/// when the kernel has no bpf(2) (or a seccomp filter hides it), `EPERM` when this process
/// may not use it, `EINVAL` when it may. Nothing is created.
pub fn bpf_probe() -> std::io::Error {
    // SAFETY: a null attribute pointer with size 0: the kernel reads nothing and refuses the
    // request (map type 0 is no map type).
    let r = unsafe { libc::syscall(libc::SYS_bpf, 0, std::ptr::null::<u8>(), 0) };
    if r >= 0 {
        // Cannot happen (no map type 0); close what we would own all the same.
        // SAFETY: a descriptor the kernel just returned, owned by nothing else.
        drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(r as i32) });
        return std::io::Error::from_raw_os_error(libc::EINVAL);
    }
    std::io::Error::last_os_error()
}

/// Copies one of this process's own descriptors through `pidfd_open` and `pidfd_getfd`
/// (Linux 5.3 and 5.6), as `nagless fix` copies another process's: `Ok` when both work here
/// (a process may always copy its own descriptors; another's needs root or CAP_SYS_PTRACE).
pub fn pidfd_getfd_probe() -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let own = |r: libc::c_long| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            // SAFETY: a descriptor the kernel just returned, owned by nothing else.
            Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
        }
    };
    // SAFETY: getpid has no preconditions; pidfd_open takes a pid and flags, no memory.
    let pidfd = own(unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) })?;
    // SAFETY: pidfd_getfd takes two descriptors and flags, no memory.
    let copy = own(unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd.as_raw_fd(),
            pidfd.as_raw_fd(),
            0,
        )
    })?;
    drop(copy);
    Ok(())
}

/// Takes an exclusive lock on `file` for as long as it stays open (`flock`), without waiting:
/// false if another process holds it.
pub fn try_lock(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a descriptor `file` owns; it only takes or refuses a lock.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

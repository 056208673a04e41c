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

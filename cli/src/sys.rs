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

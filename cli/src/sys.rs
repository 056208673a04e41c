//! The few system calls the command makes itself (the rest go through its crates).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Who runs this process: the real user ID, the real group ID and the supplementary groups.
pub fn identity() -> (u32, u32, Vec<u32>) {
    // SAFETY: getuid, getgid and getgroups have no preconditions; the buffer is sized by the
    // first getgroups call and truncated to what the second one filled.
    unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut()).max(0);
        let mut g = vec![0 as libc::gid_t; n as usize];
        let n = libc::getgroups(n, g.as_mut_ptr()).max(0);
        g.truncate(n as usize);
        (libc::getuid(), libc::getgid(), g)
    }
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

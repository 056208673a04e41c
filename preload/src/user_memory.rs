//! Reading and writing the program's memory the way the kernel does: a bad pointer is an
//! error (`EFAULT` for the program's call), never a fault in the shim. The hooks that look at
//! what a call points to (a `writev` vector, `select` sets, `epoll_pwait2`'s timeout) go
//! through here, so that a program passing a bad pointer gets exactly the error it gets
//! without the shim.
//!
//! How, with no system call a sandbox could refuse: `rt_sigprocmask` copies a signal set from
//! or to the program's memory before it looks at anything else, and reports a bad address as
//! `EFAULT`. Given an invalid `how`, its copy *in* changes nothing (it then fails with
//! `EINVAL`); its copy *out* (the current mask, 8 bytes) is undone at once from a copy of the
//! bytes it overwrote. One such probe per page a region spans tells whether the whole region
//! can be read (or written), since access is granted page by page; the region is then copied
//! directly. Every seccomp profile lets a program call `rt_sigprocmask` (libc calls it all the
//! time), where `process_vm_readv` is refused or kills in many (OpenSSH's, systemd's
//! `@system-service`).
#![allow(unsafe_code)]

use std::mem::MaybeUninit;

/// The kernel's `sigset_t`: the bytes each probe reads or writes.
const PROBE: usize = 8;
/// The smallest page size of the platforms the shim builds for.
const PAGE: usize = 4096;

/// An invalid `how` for `rt_sigprocmask`: the copy in is made, then the call fails.
const NO_HOW: libc::c_long = -1;

fn sigprocmask_probe(set: *const u8, old: *mut u8) -> libc::c_long {
    // SAFETY: the kernel checks both addresses; with NO_HOW and a set it changes no mask, and
    // with a null set it only writes the current mask at `old` (undone by the caller).
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            NO_HOW,
            set,
            old,
            PROBE as libc::c_long,
        )
    }
}

/// The addresses to probe for `len` bytes at `p` (`len` >= `PROBE`): the first 8 bytes of
/// every page the region touches, and its last 8 bytes.
fn probes(p: usize, len: usize) -> impl Iterator<Item = usize> {
    let last = p + len - PROBE;
    let first_page_end = (p / PAGE + 1) * PAGE;
    std::iter::once(p)
        .chain((first_page_end..=last).step_by(PAGE))
        .chain(std::iter::once(last))
}

/// Pages a hook call already found readable (or writable): a later probe of the same call
/// whose 8 bytes lie in them is skipped. Access is granted page by page, and one call's
/// regions often share a page (the first and last 8 bytes of a small region; a `select`'s
/// three sets, side by side on the program's stack): one probe per page, not per region end.
#[derive(Default)]
pub struct Checked {
    /// (page number, found writable), the first few found.
    pages: [(usize, bool); 6],
    n: usize,
}

impl Checked {
    fn has(&self, page: usize, write: bool) -> bool {
        self.pages[..self.n].contains(&(page, write))
    }

    /// Whether the probe at `a` would only check pages already found good.
    fn covers(&self, a: usize, write: bool) -> bool {
        self.has(a / PAGE, write) && self.has((a + PROBE - 1) / PAGE, write)
    }

    fn add(&mut self, a: usize, write: bool) {
        for page in [a / PAGE, (a + PROBE - 1) / PAGE] {
            if self.n < self.pages.len() && !self.has(page, write) {
                self.pages[self.n] = (page, write);
                self.n += 1;
            }
        }
    }
}

/// Whether the probe at `a` (reading there, or writing there if `write`) succeeds.
fn probe_ok(a: usize, write: bool) -> bool {
    crate::sys::quietly(|| {
        if write {
            sigprocmask_probe(std::ptr::null(), a as *mut u8) == 0
        } else {
            sigprocmask_probe(a as *const u8, std::ptr::null_mut()) == -1
                && crate::sys::errno() == libc::EINVAL
        }
    })
}

/// Whether `len` bytes at `src` can be read by the program (as the kernel would). A region
/// shorter than a probe (a 32-bit program's `select` set of one `long`) is readable if the 8
/// bytes from its start, or the 8 bytes that end with it, are: either covers every page it
/// touches.
fn readable(checked: &mut Checked, src: *const u8, len: usize) -> bool {
    let p = src as usize;
    if len == 0 {
        return true;
    }
    if p.checked_add(len.max(PROBE)).is_none() {
        return false;
    }
    let mut probe = |a: usize| {
        if checked.covers(a, false) {
            return true;
        }
        let ok = probe_ok(a, false);
        if ok {
            checked.add(a, false);
        }
        ok
    };
    if len < PROBE {
        return probe(p) || (p + len >= PROBE && probe(p + len - PROBE));
    }
    probes(p, len).all(probe)
}

/// Whether the 4 bytes at `dst` can be written: `getresuid` writes a 4-byte ID to each of its
/// three pointers (here all `dst`) and reports a bad address as `EFAULT`; the bytes it wrote
/// are put back from `saved`.
fn writable4(dst: *mut u8, saved: &[u8]) -> bool {
    #[cfg(target_arch = "x86")]
    const GETRESUID: libc::c_long = libc::SYS_getresuid32;
    #[cfg(not(target_arch = "x86"))]
    const GETRESUID: libc::c_long = libc::SYS_getresuid;
    let ok = crate::sys::quietly(|| {
        // SAFETY: the kernel checks the address; it writes 4 bytes there, undone below.
        unsafe { libc::syscall(GETRESUID, dst, dst, dst) == 0 }
    });
    if ok {
        // SAFETY: the kernel just wrote these 4 bytes; `saved` holds what was there.
        unsafe { std::ptr::copy_nonoverlapping(saved.as_ptr(), dst, 4) };
    }
    ok
}

/// Whether `len` bytes at `dst` can be written by the program, probed by writes undone at
/// once from `saved` (what the region holds now, `len` bytes, read first).
fn writable(checked: &mut Checked, dst: *mut u8, len: usize, saved: &[u8]) -> bool {
    debug_assert_eq!(saved.len(), len);
    if len < PROBE {
        // Only a 32-bit `long` comes this small; anything else is refused (the caller then
        // reports EFAULT, which no caller of today can reach).
        return len == 4 && writable4(dst, saved);
    }
    if (dst as usize).checked_add(len).is_none() {
        return false;
    }
    probes(dst as usize, len).all(|a| {
        if checked.covers(a, true) {
            return true;
        }
        let ok = probe_ok(a, true);
        if ok {
            let at = a - dst as usize;
            // SAFETY: the probe just wrote these 8 bytes: they are writable; `saved` holds
            // what was there (the region was read before).
            unsafe { std::ptr::copy_nonoverlapping(saved[at..].as_ptr(), a as *mut u8, PROBE) };
            checked.add(a, true);
        }
        ok
    })
}

/// Copies `dst.len()` bytes from the program's address `src`; false if any of them cannot be
/// read.
pub fn read_bytes(src: *const u8, dst: &mut [u8]) -> bool {
    read_bytes_in(&mut Checked::default(), src, dst)
}

/// [`read_bytes`], one of several regions a hook call reads: pages `checked` holds are not
/// probed again, and the pages found readable join it.
pub fn read_bytes_in(checked: &mut Checked, src: *const u8, dst: &mut [u8]) -> bool {
    if !readable(checked, src, dst.len()) {
        return false;
    }
    // SAFETY: every page of the region was just found readable; `dst` is ours.
    unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
    true
}

/// Copies `src` to the program's address `dst`, whose bytes are now `was` (read before);
/// false if any byte cannot be written. One of several regions a hook call writes: as
/// [`read_bytes_in`], pages `checked` holds are not probed again.
pub fn write_bytes_in(checked: &mut Checked, dst: *mut u8, src: &[u8], was: &[u8]) -> bool {
    if !writable(checked, dst, src.len(), was) {
        return false;
    }
    // SAFETY: every page of the region was just found writable.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    true
}

/// A copy of the `T` at the program's address `src`, if it can be read. For plain C structs
/// and integers (any bit pattern is a valid `T`).
pub fn read<T: Copy>(src: *const T) -> Option<T> {
    read_in(&mut Checked::default(), src)
}

/// [`read`], one of several regions a hook call reads (as [`read_bytes_in`]).
pub fn read_in<T: Copy>(checked: &mut Checked, src: *const T) -> Option<T> {
    let mut v = MaybeUninit::<T>::uninit();
    // SAFETY: the slice covers exactly the bytes of `v`, which `read_bytes` writes whole.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of::<T>())
    };
    // SAFETY: on success every byte of `v` was written, and T accepts any bit pattern (the
    // callers' types are C integers and structs of them).
    read_bytes_in(checked, src.cast(), bytes).then(|| unsafe { v.assume_init() })
}

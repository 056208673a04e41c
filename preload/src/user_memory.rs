//! Reading and writing the program's memory the way the kernel does: a bad pointer is an
//! error (`EFAULT` for the program's call), never a fault in the shim. The hooks that look at
//! what a call points to (a `writev` vector, `select` sets, a wait's timeout, a `sigaction`)
//! go through here, so that a program passing a bad pointer gets exactly the error it gets
//! without the shim. Made with `process_vm_readv`/`process_vm_writev` on the process itself;
//! where those are refused (a seccomp filter), the callers take the conservative path.
#![allow(unsafe_code)]

use std::mem::MaybeUninit;

/// Copies `dst.len()` bytes from the program's address `src`; false if any of them cannot be
/// read (or the copy cannot be made).
pub fn read_bytes(src: *const u8, dst: &mut [u8]) -> bool {
    if dst.is_empty() {
        return true;
    }
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: src.cast_mut().cast(),
        iov_len: dst.len(),
    };
    // SAFETY: `local` describes `dst`, writable for its length; the kernel checks `remote`
    // and reports a bad address as an error instead of faulting.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == dst.len() as isize
}

/// Copies `src` to the program's address `dst`; false if any byte cannot be written.
pub fn write_bytes(dst: *mut u8, src: &[u8]) -> bool {
    if src.is_empty() {
        return true;
    }
    let local = libc::iovec {
        iov_base: src.as_ptr().cast_mut().cast(),
        iov_len: src.len(),
    };
    let remote = libc::iovec {
        iov_base: dst.cast(),
        iov_len: src.len(),
    };
    // SAFETY: `local` describes `src`, readable for its length (the kernel only reads it);
    // the kernel checks `remote`.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == src.len() as isize
}

/// A copy of the `T` at the program's address `src`, if it can be read. For plain C structs
/// and integers (any bit pattern is a valid `T`).
pub fn read<T: Copy>(src: *const T) -> Option<T> {
    let mut v = MaybeUninit::<T>::uninit();
    // SAFETY: the slice covers exactly the bytes of `v`, which `read_bytes` writes whole.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of::<T>())
    };
    // SAFETY: on success every byte of `v` was written, and T accepts any bit pattern (the
    // callers' types are C integers and structs of them).
    read_bytes(src.cast(), bytes).then(|| unsafe { v.assume_init() })
}

//! The program's own socket options: `setsockopt` of `TCP_CORK` or `TCP_NODELAY` gives the
//! socket back to the program, and `getsockopt` of them reads the program's own values.

use super::*;

/// Defines a `setsockopt` hook (`setsockopt`, and `__setsockopt64` in 32-bit programs built
/// with 64-bit time): the real call, watched by [`program_setsockopt`].
macro_rules! setsockopt_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            level: c_int,
            name: c_int,
            value: *const c_void,
            len: socklen_t,
        ) -> c_int {
            let Some(real) = next!(
                stringify!($name),
                unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int
            ) else {
                return enosys();
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            unsafe {
                program_setsockopt(fd, level, name, value, len, || {
                    real(fd, level, name, value, len)
                })
            }
        }
    };
}
setsockopt_hook!(
    /// `setsockopt(2)`: a program that sets `TCP_CORK`, or chooses `TCP_NODELAY` either way,
    /// packetizes its own output; the shim leaves that socket to it.
    setsockopt
);
setsockopt_hook!(
    /// `setsockopt` in a 32-bit program built with 64-bit time (see `with_time64_twin!`).
    #[cfg(target_pointer_width = "32")]
    __setsockopt64
);

/// The program's `setsockopt`, made by `call`. `TCP_CORK` either way: from before the call
/// the shim never clears it (its own uncork would undo the program's), until the program
/// clears it itself. `TCP_CORK` on, or any `TCP_NODELAY` choice: the program packetizes its
/// own output on `fd`, and the shim stops holding it. So it does on a socket given an
/// upper-layer protocol (`TCP_ULP`: kTLS).
///
/// # Safety
/// `call` makes the program's call with these arguments.
unsafe fn program_setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let cork = level == libc::IPPROTO_TCP && name == libc::TCP_CORK;
    let nodelay = level == libc::IPPROTO_TCP && name == libc::TCP_NODELAY;
    let was = cork && hooks::program_cork_begins(fd);
    if nodelay {
        hooks::program_nodelay_begins(fd);
    }
    let r = call();
    let v = (r == 0 && !value.is_null() && len as usize >= 4)
        // SAFETY: the kernel just read an int from `value` (len >= 4) without fault.
        .then(|| unsafe { value.cast::<c_int>().read_unaligned() });
    if cork {
        hooks::program_cork_done(fd, was, v.map(|v| v != 0));
    }
    if nodelay && v.is_none() {
        hooks::program_nodelay_failed(fd);
    }
    match (level == libc::IPPROTO_TCP, v) {
        (true, Some(v)) if name == libc::TCP_CORK && v != 0 => hooks::program_holds(fd),
        (true, Some(v)) if name == libc::TCP_NODELAY => hooks::program_nodelay(fd, v != 0),
        // An upper-layer protocol on the socket (kTLS's "tls", which seals records as they
        // are written): what a held tail does there is the ULP's, so the socket is left
        // to the program.
        (true, _) if name == libc::TCP_ULP && r == 0 => hooks::program_holds(fd),
        _ => {}
    }
    r
}

/// Defines a `getsockopt` hook: the real call, then what the program sees of the options the
/// shim sets itself ([`program_getsockopt`]).
macro_rules! getsockopt_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            level: c_int,
            name: c_int,
            value: *mut c_void,
            len: *mut socklen_t,
        ) -> c_int {
            let Some(real) = next!(
                stringify!($name),
                unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int
            ) else {
                return enosys();
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { real(fd, level, name, value, len) };
            // SAFETY: the real call returned 0, so it wrote `*len` bytes to `value`.
            unsafe { program_getsockopt(r, fd, level, name, value, len) };
            r
        }
    };
}
getsockopt_hook!(
    /// `getsockopt(2)`: `TCP_NODELAY` and `TCP_CORK` read what the program set, or the
    /// kernel's default, never the shim's own (a server that copies its listener's options to
    /// each connection copies its own choice, not the shim's).
    getsockopt
);
getsockopt_hook!(
    /// `getsockopt` in a 32-bit program built with 64-bit time (glibc's other name for it).
    #[cfg(target_pointer_width = "32")]
    __getsockopt64
);

/// After the program's `getsockopt` returned `r`: a successful read of `TCP_NODELAY` or
/// `TCP_CORK` on a socket the shim manages gets the program's own value, written in the
/// bytes the kernel wrote (an int, or its first `*len` bytes for a shorter buffer).
///
/// # Safety
/// When `r == 0`, `len` and `value` are the pointers the kernel just filled: `*len` readable,
/// `*len` bytes (at most an int's) writable at `value`.
unsafe fn program_getsockopt(
    r: c_int,
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: *mut socklen_t,
) {
    if r != 0
        || level != libc::IPPROTO_TCP
        || (name != libc::TCP_NODELAY && name != libc::TCP_CORK)
        || value.is_null()
        || len.is_null()
    {
        return;
    }
    let Some(on) = hooks::program_view(fd, name == libc::TCP_NODELAY) else {
        return;
    };
    let bytes = c_int::from(on).to_ne_bytes();
    // SAFETY: the kernel set `*len` (readable) to the bytes it wrote at `value`.
    let n = (unsafe { len.read_unaligned() } as usize).min(bytes.len());
    // SAFETY: the kernel just wrote `n` bytes at `value` without fault.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), value.cast::<u8>(), n) };
}

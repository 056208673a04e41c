//! Writes: a burst starts or grows (`write`, `writev`, `send*`, `sendfile`, `splice` into a
//! socket), each made between the policy's two steps, with `MSG_MORE` when the policy holds
//! the burst by that flag.

use super::*;

/// Makes the write `f` on `fd` between the policy's two steps (a send with `MSG_MORE`
/// means the program packs its own bursts). `f` gets the flags the shim adds to the call:
/// `MSG_MORE` when the policy holds the burst by that flag (see
/// [`Shim::before_write`](nagless_shim_policy::Shim::before_write)), else 0; `carries_more` says
/// whether `f` can add them (`sendfile` and `splice` cannot).
fn writing<R: Copy + Default + PartialOrd>(
    fd: c_int,
    flags: c_int,
    carries_more: bool,
    f: impl FnOnce(c_int) -> R,
) -> R {
    if flags & libc::MSG_MORE != 0 {
        hooks::program_holds(fd);
    }
    let step = hooks::on_write(fd, carries_more);
    let r = f(if step.more { libc::MSG_MORE } else { 0 });
    // An error or 0: nothing was queued, so nothing held before was pushed by this call.
    hooks::after_write(fd, step, r <= R::default());
    r
}

type SendFn = unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
type SendMsgFn = unsafe extern "C" fn(c_int, *const libc::msghdr, c_int) -> ssize_t;

/// `write(2)`. Held by `MSG_MORE`, it is made as `send(2)` with that flag (the same call on
/// a socket, with flags). If the descriptor is no socket any more (closed where the shim
/// could not see it, inside libc by `fclose`, and reused), `send` refuses at once with
/// `ENOTSOCK`, the shim forgets the descriptor and makes the write as asked.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let Some(real) = next!(
        "write",
        unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t
    ) else {
        return enosys();
    };
    writing(fd, 0, true, |more| {
        if more != 0 {
            if let Some(send) = next!("send", SendFn) {
                // SAFETY: the caller's buffer and length, to send(2) on the same socket.
                if let Some(r) = hooks::held_send(fd, || unsafe { send(fd, buf, n, more) }) {
                    return r;
                }
            }
        }
        // SAFETY: forwarding the caller's arguments unchanged.
        unsafe { real(fd, buf, n) }
    })
}

/// `writev(2)`. Held by `MSG_MORE`, it is made as `sendmsg(2)` of the same vector (and as
/// `writev` if the descriptor turns out to be no socket, as for `write`).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    let Some(real) = next!(
        "writev",
        unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t
    ) else {
        return enosys();
    };
    writing(fd, 0, true, |more| {
        // Made as sendmsg only where the two calls agree: writev refuses more than IOV_MAX
        // entries with EINVAL (sendmsg with EMSGSIZE), and returns 0 for an empty vector
        // without looking at the socket (sendmsg may report its error, and raise SIGPIPE).
        // Looked at only when the write is to be held (a managed socket), as writev would.
        // The vector is read as the kernel reads it: one that cannot be read (a bad pointer)
        // is no fault here, and makes the plain writev, which reports EFAULT as it would.
        let nonempty = || {
            if !(1..=1024).contains(&cnt) {
                return false;
            }
            const AT_ONCE: usize = 64;
            let mut entries = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; AT_ONCE];
            let mut at = 0;
            while at < cnt as usize {
                let k = (cnt as usize - at).min(AT_ONCE);
                // SAFETY: `entries` is plain data, writable for `k` iovecs.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        entries.as_mut_ptr().cast::<u8>(),
                        k * std::mem::size_of::<libc::iovec>(),
                    )
                };
                if !crate::user_memory::read_bytes(iov.wrapping_add(at).cast(), dst) {
                    return false;
                }
                if entries[..k].iter().any(|v| v.iov_len > 0) {
                    return true;
                }
                at += k;
            }
            false
        };
        if more != 0 && nonempty() {
            if let Some(sendmsg) = next!("sendmsg", SendMsgFn) {
                // SAFETY: an all-zero msghdr is valid (no name, no control data).
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = iov.cast_mut();
                msg.msg_iovlen = cnt as _;
                // SAFETY: the caller's vector, unchanged, in a header that lives across the
                // call.
                if let Some(r) = hooks::held_send(fd, || unsafe { sendmsg(fd, &msg, more) }) {
                    return r;
                }
            }
        }
        // SAFETY: forwarding the caller's arguments unchanged.
        unsafe { real(fd, iov, cnt) }
    })
}

/// `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(real) = next!("send", SendFn) else {
        return enosys();
    };
    // SAFETY: forwarding the caller's arguments, with the shim's MSG_MORE.
    writing(fd, flags, true, |more| unsafe {
        real(fd, buf, n, flags | more)
    })
}

/// `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    let Some(real) = next!(
        "sendto",
        unsafe extern "C" fn(
            c_int,
            *const c_void,
            size_t,
            c_int,
            *const sockaddr,
            socklen_t,
        ) -> ssize_t
    ) else {
        return enosys();
    };
    // SAFETY: forwarding the caller's arguments, with the shim's MSG_MORE.
    writing(fd, flags, true, |more| unsafe {
        real(fd, buf, n, flags | more, addr, len)
    })
}

/// Whether the message `msg` points to carries `SCM_RIGHTS` control data (descriptors passed
/// to another process), read as the kernel reads it: unreadable memory passes nothing (the
/// call fails with `EFAULT`), and control data beyond what is looked at counts as passing.
fn passes_descriptors(msg: *const libc::msghdr) -> bool {
    // The header and its control data usually share a page of the caller's stack: one probe.
    let mut checked = crate::user_memory::Checked::default();
    let Some(m) = crate::user_memory::read_in(&mut checked, msg) else {
        return false;
    };
    #[allow(clippy::unnecessary_cast)] // a socklen_t on some libcs
    let len = m.msg_controllen as usize;
    if len == 0 || m.msg_control.is_null() {
        return false;
    }
    let mut buf = [0u8; 512];
    let n = len.min(buf.len());
    if !crate::user_memory::read_bytes_in(&mut checked, m.msg_control.cast(), &mut buf[..n]) {
        return false;
    }
    let head = std::mem::size_of::<libc::cmsghdr>();
    let align = std::mem::size_of::<usize>();
    let mut at = 0;
    while at + head <= n {
        // SAFETY: `buf[at..at + head]` holds a cmsghdr's bytes; read unaligned, any bits valid.
        let c: libc::cmsghdr =
            unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast::<libc::cmsghdr>()) };
        if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_RIGHTS {
            return true;
        }
        #[allow(clippy::unnecessary_cast)] // a socklen_t on some libcs
        let step = (c.cmsg_len as usize).div_ceil(align) * align;
        if step < head {
            return false;
        }
        at += step;
    }
    len > n
}

/// Defines a `sendmsg` hook (`sendmsg`, and `__sendmsg64` in 32-bit programs built with
/// 64-bit time: the same `msghdr`, whose control messages may carry 64-bit timestamps).
macro_rules! sendmsg_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            msg: *const libc::msghdr,
            flags: c_int,
        ) -> ssize_t {
            let Some(real) = next!(stringify!($name), SendMsgFn) else {
                return enosys();
            };
            // Descriptors passed away (a header that cannot be read: the call fails as it
            // would).
            hooks::before_passing(fd, || passes_descriptors(msg));
            // SAFETY: forwarding the caller's arguments, with the shim's MSG_MORE.
            writing(fd, flags, true, |more| unsafe { real(fd, msg, flags | more) })
        }
    };
}
sendmsg_hook!(
    /// `sendmsg(2)`.
    sendmsg
);
sendmsg_hook!(
    /// `sendmsg` with 64-bit time.
    #[cfg(target_pointer_width = "32")]
    __sendmsg64
);

// Writes of file bodies: part of the burst (nginx sends headers with writev, then the body).
forward!(
    /// `sendfile(2)`.
    fn sendfile(out: c_int, inp: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t {
    } => writing(out, 0)
);
forward!(
    /// `sendfile64`.
    fn sendfile64(out: c_int, inp: c_int, off: *mut libc::off64_t, n: size_t) -> ssize_t {
    } => writing(out, 0)
);
/// `splice(2)`: out of a socket it is a read (that socket's burst ends), into one a write
/// (part of the burst; `SPLICE_F_MORE` is the program's own `MSG_MORE`, and the shim's
/// `MSG_MORE` goes as `SPLICE_F_MORE`, which the kernel turns into it).
#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut libc::loff_t,
    fd_out: c_int,
    off_out: *mut libc::loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let Some(real) = next!(
        "splice",
        unsafe extern "C" fn(
            c_int,
            *mut libc::loff_t,
            c_int,
            *mut libc::loff_t,
            size_t,
            c_uint,
        ) -> ssize_t
    ) else {
        return enosys();
    };
    hooks::release_socket(fd_in);
    let programs = if flags & libc::SPLICE_F_MORE != 0 {
        libc::MSG_MORE
    } else {
        0
    };
    writing(fd_out, programs, true, |more| {
        let more = if more != 0 { libc::SPLICE_F_MORE } else { 0 };
        // SAFETY: forwarding the caller's arguments, with the shim's SPLICE_F_MORE.
        unsafe { real(fd_in, off_in, fd_out, off_out, len, flags | more) }
    })
}
with_time64_twin!(
    /// `sendmmsg(2)`: as `sendmsg`, on a socket the shim does not manage every burst ends
    /// first (its messages may pass descriptors; not looked into).
    fn sendmmsg / __sendmmsg64(fd: c_int, msgs: *mut Mmsghdr, n: c_uint, flags: c_int) -> c_int {
        hooks::before_passing(fd, || true)
    } => writing(fd, flags)
);

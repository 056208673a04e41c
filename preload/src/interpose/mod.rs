//! The interposed libc functions. Each hook finds the next definition of its symbol with
//! `dlsym(RTLD_NEXT)`, tells the burst policy what the program is doing (through `hooks` and
//! `waits`, which save and restore `errno`), calls the real function, and returns what it
//! returned. Nothing here panics: a missing real symbol reads as `ENOSYS`.
//!
//! Here the macros that define the hooks; the hooks, by what the program does, in the
//! modules below (each starts with `use super::*`: these imports are theirs).
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)] // the hooks' contracts are libc's own

use libc::{c_int, c_long, c_uint, c_void, size_t, sockaddr, socklen_t, ssize_t};

use crate::hooks;
use crate::sys::{self, next, set_errno};
use crate::waits::{self, Wait};

pub(crate) fn enosys<T: From<i8>>() -> T {
    set_errno(libc::ENOSYS);
    T::from(-1)
}

// ---- the hook macro ---------------------------------------------------------------------

/// Defines a hook: it finds the real `$name` (a missing one reads as `ENOSYS`), tells the
/// policy what the program does, and makes the call with the caller's arguments unchanged;
/// the C signature is spelled out at each use. The forms:
/// - `fn f(..) -> R { before }`: runs `before`, then the call;
/// - `fn f(..) -> R { before } => after(|r| after)`: then runs `after` with the call's
///   result `r`, and returns `r`;
/// - `fn f(..) -> R { before } => after(|b, r| after)`: the same, with `before`'s value `b`;
/// - `fn f(..) -> R { before } => writing(fd, flags)`: the call is a write of `fd` (see
///   [`writing`]);
/// - `fn f(..) -> R => waits(kind, never, [sets(n, r, w, e),] probe(args))`: the call is a wait
///   (see [`waits::waiting`]), probed with `args`.
macro_rules! forward {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty { $before:expr }) => {
        forward!(@hook $(#[$doc])* fn $name($($arg: $ty),*) -> $ret; |call| {
            $before;
            call()
        });
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty { $($before:expr)? }
        => after(|$r:ident| $after:expr)) => {
        forward!(@hook $(#[$doc])* fn $name($($arg: $ty),*) -> $ret; |call| {
            $($before;)?
            let $r = call();
            $after;
            $r
        });
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty { $before:expr }
        => after(|$b:ident, $r:ident| $after:expr)) => {
        forward!(@hook $(#[$doc])* fn $name($($arg: $ty),*) -> $ret; |call| {
            let $b = $before;
            let $r = call();
            $after;
            $r
        });
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty { $($before:expr)? }
        => writing($fd:expr, $flags:expr)) => {
        forward!(@hook $(#[$doc])* fn $name($($arg: $ty),*) -> $ret; |call| {
            $($before;)?
            // These calls cannot carry the shim's MSG_MORE (see `writing`).
            writing($fd, $flags, false, |_| call())
        });
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty
        => waits($kind:expr, $never:expr, $(sets($n:ident, $r:ident, $w:ident, $e:ident),)?
            probe($($probe:expr),*))) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let Some(real) = next!(stringify!($name), unsafe extern "C" fn($($ty),*) -> $ret)
            else {
                return enosys();
            };
            waits::waiting(
                $kind,
                || $never,
                || forward!(@probe real; $(sets($n, $r, $w, $e);)? ($($probe),*)),
                // SAFETY: forwarding the caller's arguments unchanged.
                || unsafe { real($($arg),*) },
            )
        }
    };
    (@probe $real:ident; ($($probe:expr),*)) => {
        // SAFETY: the caller's arguments, the timeout made zero (a static zero).
        unsafe { $real($($probe),*) }
    };
    (@probe $real:ident; sets($n:ident, $r:ident, $w:ident, $e:ident); ($($probe:expr),*)) => {
        // SAFETY: the probe is given copies of the caller's sets (or null), and a zero
        // timeout.
        waits::select_probe($n, $r, $w, $e, |$r, $w, $e| unsafe { $real($($probe),*) })
    };
    (@hook $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;
        |$call:ident| $body:block) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let Some(real) = next!(stringify!($name), unsafe extern "C" fn($($ty),*) -> $ret)
            else {
                return enosys();
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            let $call = || unsafe { real($($arg),*) };
            $body
        }
    };
}

// ---- 32-bit programs built with 64-bit time ---------------------------------------------

// A 32-bit program built with `_TIME_BITS=64` (the only way past 2038 on i386 and armhf, and
// the default of newer distributions there) calls other glibc names for the calls whose
// arguments carry a time (directly, or in what they point to: a `timespec`, `timeval`,
// `rusage`, or the control messages of a `msghdr`, which may carry timestamps): the same
// calls, with 64-bit times, which the shim passes through untouched. Each such hook is
// defined once, with its time-carrying types named by the aliases below, and
// `with_time64_twin!` defines it twice: under its own name with libc's types, and, in 32-bit
// builds (the twins exist in 32-bit glibc only), under the 64-bit-time name with opaque
// pointers.

/// A hook's time-carrying argument types in its own form: libc's.
mod native_time {
    pub type Timespec = libc::timespec;
    pub type Timeval = libc::timeval;
    /// A time's integer (what `waits::is_zero_time` reads).
    pub type TimeT = libc::time_t;
    pub type Rusage = libc::rusage;
    pub type Msghdr = libc::msghdr;
    pub type Mmsghdr = libc::mmsghdr;
}

/// A hook's time-carrying argument types in its 64-bit-time twin: opaque (passed through),
/// times read as 64-bit integers.
#[cfg(target_pointer_width = "32")]
mod time64 {
    use libc::c_void;
    pub type Timespec = c_void;
    pub type Timeval = c_void;
    pub type TimeT = i64;
    pub type Rusage = c_void;
    pub type Msghdr = c_void;
    pub type Mmsghdr = c_void;
}

/// Defines a hook as [`forward!`] does, written with the aliases `Timespec`, `Timeval`,
/// `TimeT`, `Rusage`, `Msghdr`, `Mmsghdr` for its time-carrying types: `fn name / name64(..)`
/// defines `name` with libc's types ([`native_time`]) and, in 32-bit builds, `name64`, its
/// 64-bit-time twin, with opaque ones (`time64`).
macro_rules! with_time64_twin {
    ($(#[$doc:meta])* fn $name:ident / $name64:ident $($rest:tt)*) => {
        const _: () = {
            use $crate::interpose::native_time::*;
            forward!($(#[$doc])* fn $name $($rest)*);
        };
        #[cfg(target_pointer_width = "32")]
        const _: () = {
            use $crate::interpose::time64::*;
            forward!(
                #[doc = concat!("`", stringify!($name), "` in a 32-bit program built with 64-bit time.")]
                fn $name64 $($rest)*
            );
        };
    };
}

mod blocking;
mod descriptors;
mod process;
mod reads;
mod socket_options;
mod writes;

//! The process ends or changes: every burst ends before `_exit`, `_Exit` and `fork` (exec,
//! in all its forms: `exec.rs`).

use super::*;

/// Defines an `_exit`-like hook: the process ends without its atexit handlers (a forked
/// child's usual way out), so its bursts are released first. Its sockets may live on in
/// another process (the parent, one they were passed to): a tail held by `MSG_MORE` would
/// otherwise wait for the kernel's ~200 ms probe timer.
macro_rules! exit_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(status: c_int) -> ! {
            hooks::release_everything();
            if let Some(real) = next!(stringify!($name), unsafe extern "C" fn(c_int) -> !) {
                // SAFETY: forwarding the caller's argument unchanged.
                unsafe { real(status) }
            }
            loop {
                // SAFETY: exit_group takes an int and does not return.
                unsafe { libc::syscall(libc::SYS_exit_group, status) };
            }
        }
    };
}
exit_hook!(
    /// `_exit(2)`.
    _exit
);
exit_hook!(
    /// `_Exit(3)`.
    _Exit
);

forward!(
    /// `fork(2)`: bursts end before, so neither process inherits a half-sent one (the
    /// child's flusher restarts from the pthread_atfork handler's mark, also for daemon()
    /// and other internal forks).
    fn fork() -> libc::pid_t {
        hooks::release_everything()
    }
);
// exec, in all its forms, and the calls that exec inside libc: `exec.rs`.

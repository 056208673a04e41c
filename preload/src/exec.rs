//! Every way a program replaces itself or starts another: bursts end first, so that no
//! `TCP_CORK` of the shim's stays on a socket a program that knows nothing of it inherits
//! (its small writes would then wait for the kernel's ~200 ms cork limit, for the life of the
//! socket). The vector forms and `fexecve`, `execveat` are hooked here; `posix_spawn`,
//! `posix_spawnp`, `system` and `popen` too, since they reach `execve` inside libc, where no
//! hook sees it; the variadic `execl`, `execle` and `execlp` are written in C (`c/execl.c`,
//! which calls the vector forms) and exported from here by a jump, the one thing stable Rust
//! can do with a variadic call. Those that start a program with an environment carry the
//! shim into it where that environment dropped it (`carry`).
#![allow(unsafe_code)]

use libc::{c_char, c_int};

use crate::carry;
use crate::hooks;
use crate::sys::{next, set_errno};

/// Defines a hook that ends every burst, then makes the call unchanged (`$fail`: what it
/// returns if libc has no such function).
macro_rules! releasing {
    ($(#[$attr:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty, $fail:expr) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            hooks::release_everything();
            let Some(real) = next!(stringify!($name), unsafe extern "C" fn($($ty),*) -> $ret)
            else {
                set_errno(libc::ENOSYS);
                return $fail;
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            unsafe { real($($arg),*) }
        }
    };
}

type Argv = *const *const c_char;

/// Defines a hook that ends every burst, then makes the call with the environment argument
/// `$env` (`$program`: what it starts, for the log) as [`carry::environment`] gives it: the
/// shim carried into a program whose environment dropped it.
macro_rules! carrying {
    ($(#[$attr:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty, $fail:expr,
     env: $env:ident, program: $program:expr) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            hooks::release_everything();
            let Some(real) = next!(stringify!($name), unsafe extern "C" fn($($ty),*) -> $ret)
            else {
                set_errno(libc::ENOSYS);
                return $fail;
            };
            let mut buf = [std::ptr::null(); carry::MOST + 1];
            // SAFETY: the caller's environment and program name, as libc takes them.
            let $env = unsafe { carry::environment($env, $program, &mut buf) };
            // SAFETY: forwarding the caller's arguments, the environment perhaps in `buf`,
            // which outlives the call.
            unsafe { real($($arg),*) }
        }
    };
}

/// Defines a hook of an exec function that takes the process's own environment: where that
/// dropped the shim, the call is made by `$with_env` (its form with an environment) and the
/// shim's variables added; else it is made unchanged.
macro_rules! carrying_environ {
    ($(#[$attr:meta])* fn $name:ident($prog:ident: $pty:ty, $argv:ident: $aty:ty) -> $ret:ty,
     with: $with_env:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($prog: $pty, $argv: $aty) -> $ret {
            hooks::release_everything();
            let own = carry::environ();
            let mut buf = [std::ptr::null(); carry::MOST + 1];
            // SAFETY: libc's environment and the caller's program name.
            let env = unsafe { carry::environment(own, $prog, &mut buf) };
            if env != own {
                let Some(real) =
                    next!(stringify!($with_env), unsafe extern "C" fn($pty, $aty, Argv) -> $ret)
                else {
                    set_errno(libc::ENOSYS);
                    return -1;
                };
                // SAFETY: the caller's arguments and an environment in `buf`, which outlives
                // the call.
                return unsafe { real($prog, $argv, env) };
            }
            let Some(real) = next!(stringify!($name), unsafe extern "C" fn($pty, $aty) -> $ret)
            else {
                set_errno(libc::ENOSYS);
                return -1;
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            unsafe { real($prog, $argv) }
        }
    };
}

carrying!(
    /// `execve(2)`.
    fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int, -1,
    env: envp, program: path
);
carrying_environ!(
    /// `execv(3)`.
    fn execv(path: *const c_char, argv: Argv) -> c_int, with: execve
);
carrying_environ!(
    /// `execvp(3)`.
    fn execvp(file: *const c_char, argv: Argv) -> c_int, with: execvpe
);
carrying!(
    /// `execvpe(3)`.
    fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int, -1,
    env: envp, program: file
);
carrying!(
    /// `fexecve(3)`.
    fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int, -1,
    env: envp, program: std::ptr::null()
);
carrying!(
    /// `execveat(2)`.
    fn execveat(dirfd: c_int, path: *const c_char, argv: Argv, envp: Argv, flags: c_int) -> c_int, -1,
    env: envp, program: path
);
carrying!(
    /// `posix_spawn(3)`: the child execs inside libc.
    fn posix_spawn(
        pid: *mut libc::pid_t,
        path: *const c_char,
        actions: *const libc::posix_spawn_file_actions_t,
        attr: *const libc::posix_spawnattr_t,
        argv: Argv,
        envp: Argv,
    ) -> c_int, libc::ENOSYS,
    env: envp, program: path
);
carrying!(
    /// `posix_spawnp(3)`.
    fn posix_spawnp(
        pid: *mut libc::pid_t,
        file: *const c_char,
        actions: *const libc::posix_spawn_file_actions_t,
        attr: *const libc::posix_spawnattr_t,
        argv: Argv,
        envp: Argv,
    ) -> c_int, libc::ENOSYS,
    env: envp, program: file
);
releasing!(
    /// `system(3)`: a shell runs, and the caller waits for it.
    fn system(command: *const c_char) -> c_int, -1
);
releasing!(
    /// `popen(3)`.
    fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE, std::ptr::null_mut()
);

/// Defines an exported variadic exec function as a jump to its C definition (the arguments,
/// in registers and on the stack, untouched).
macro_rules! variadic {
    ($(#[$attr:meta])* $name:ident => $c:ident) => {
        extern "C" {
            fn $c();
        }
        $(#[$attr])*
        #[no_mangle]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() {
            #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
            std::arch::naked_asm!("jmp {f}", f = sym $c);
            #[cfg(target_arch = "aarch64")]
            std::arch::naked_asm!("b {f}", f = sym $c);
        }
    };
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64"))]
mod variadic_forms {
    variadic!(
        /// `execl(3)`.
        execl => nagless_execl
    );
    variadic!(
        /// `execle(3)`.
        execle => nagless_execle
    );
    variadic!(
        /// `execlp(3)`.
        execlp => nagless_execlp
    );
}

//! The process ends or changes: every burst ends before `_exit`, `_Exit`, `fork`, `_Fork`,
//! `vfork` and `clone` (exec, in all its forms: `exec.rs`; the children the atfork handler
//! never hears of: `hooks::before_shared_child` and `hooks::after_fork_child`, and
//! `standing`); the flusher thread stops before the calls a multithreaded
//! process cannot make (`unshare` of a user namespace, `setns`), and for good before a
//! seccomp filter (`hooks::before_filter`).

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

forward!(
    /// `_Fork(3)`: a fork without atfork handlers (glibc 2.34): the child is told it has no
    /// flusher, as after `fork`.
    fn _Fork() -> libc::pid_t {
        hooks::release_everything()
    } => after(|r| if r == 0 { hooks::after_fork_child() })
);

/// The child of a `clone` without `CLONE_VM` starts here, on its own copy of the memory: it
/// is told it has no flusher, then runs the program's function.
struct CloneChild {
    f: extern "C" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
}

extern "C" fn clone_child(p: *mut c_void) -> c_int {
    hooks::after_fork_child();
    // SAFETY: `p` points to the `CloneChild` on the parent's stack at the moment of the
    // clone, of which this child has its own copy (no CLONE_VM).
    let c = unsafe { &*p.cast::<CloneChild>() };
    let r = (c.f)(c.arg);
    // glibc ends the child's thread when its function returns (`exit`, not `exit_group`):
    // a flusher of ours would keep the process alive. Its bursts end and the flusher stops
    // first, so that the process ends there, as natively.
    crate::hooks::pause_flusher();
    r
}

/// `clone(3)`, glibc's wrapper: `fn` runs in the child on `stack`. Declared with the three
/// optional arguments (parent TID, TLS, child TID) always: on the Linux ABIs the shim builds
/// for, a variadic call passes them exactly as a fixed one, and glibc reads them only when
/// `flags` asks (as `syscall`'s hook). A child with memory of its own is a fork without
/// atfork handlers; one that shares the memory and suspends its parent (`CLONE_VFORK`) is
/// a `vfork` child; threads (`CLONE_THREAD`) are left as they are.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86"))]
#[no_mangle]
pub unsafe extern "C" fn clone(
    f: Option<extern "C" fn(*mut c_void) -> c_int>,
    stack: *mut c_void,
    flags: c_int,
    arg: *mut c_void,
    ptid: *mut libc::pid_t,
    tls: *mut c_void,
    ctid: *mut libc::pid_t,
) -> c_int {
    type CloneFn = unsafe extern "C" fn(
        Option<extern "C" fn(*mut c_void) -> c_int>,
        *mut c_void,
        c_int,
        *mut c_void,
        *mut libc::pid_t,
        *mut c_void,
        *mut libc::pid_t,
    ) -> c_int;
    let Some(real) = next!("clone", CloneFn) else {
        return enosys();
    };
    let vm = flags & libc::CLONE_VM != 0;
    match (f, vm) {
        (Some(f), false) => {
            hooks::release_everything();
            let mut child = CloneChild { f, arg };
            // SAFETY: the caller's arguments, with our entry before its function; `child`
            // lives until the call returns, and the child reads its own copy of it.
            unsafe {
                real(
                    Some(clone_child),
                    stack,
                    flags,
                    (&mut child as *mut CloneChild).cast(),
                    ptid,
                    tls,
                    ctid,
                )
            }
        }
        _ if vm && flags & libc::CLONE_VFORK != 0 && flags & libc::CLONE_THREAD == 0 => {
            hooks::before_shared_child();
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { real(f, stack, flags, arg, ptid, tls, ctid) };
            crate::standing::shared_child_returned();
            r
        }
        // SAFETY: forwarding the caller's arguments unchanged.
        _ => unsafe { real(f, stack, flags, arg, ptid, tls, ctid) },
    }
}

/// Before the kernel call of a `vfork`: the parent's bursts end, and the child will find
/// itself a child sharing the memory.
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
extern "C" fn vfork_prepare() {
    hooks::before_shared_child();
}

/// In the parent, once the kernel call of a `vfork` returned `r` (the child's PID, or
/// `-errno`): the child has called `exec` or `_exit`. Sets `errno` on failure, as libc does.
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
extern "C" fn vfork_parent(r: libc::c_long) -> libc::c_long {
    crate::standing::shared_child_returned();
    if r < 0 {
        set_errno(-r as c_int);
        return -1;
    }
    r
}

/// `vfork(2)`, made here as libc makes it (the kernel call is this hook's own): the child
/// runs on its parent's stack, so the return address is kept in a register across the
/// system call (the kernel copies the registers into the child) and put back by each
/// process in turn; a hook that called the real `vfork` and then returned would find its
/// frame overwritten by the child. The parent alone then calls [`vfork_parent`]; the child
/// returns at once. Written for x86-64 and 32-bit x86 (the architectures the shim is tested
/// on); elsewhere `vfork` is not hooked (README's Limits).
#[cfg(target_arch = "x86_64")]
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    std::arch::naked_asm!(
        // Aligned for the call (the return address is on the stack).
        "sub rsp, 8",
        "call {prepare}",
        "add rsp, 8",
        // The return address into rdi, which the kernel keeps (and copies to the child).
        "pop rdi",
        "mov eax, {nr}",
        "syscall",
        "push rdi",
        "test rax, rax",
        "jz 2f",
        // The parent: count the child done, set errno on failure.
        "mov rdi, rax",
        "sub rsp, 8",
        "call {parent}",
        "add rsp, 8",
        "2:",
        "ret",
        prepare = sym vfork_prepare,
        parent = sym vfork_parent,
        nr = const libc::SYS_vfork,
    )
}

/// `vfork(2)` for 32-bit x86: as for x86-64, with the return address kept in `ecx` and the
/// system call made with `int 0x80`.
#[cfg(target_arch = "x86")]
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    std::arch::naked_asm!(
        "sub esp, 12",
        "call {prepare}",
        "add esp, 12",
        "pop ecx",
        "mov eax, {nr}",
        "int 0x80",
        "push ecx",
        "test eax, eax",
        "jz 2f",
        "sub esp, 8",
        "push eax",
        "call {parent}",
        "add esp, 12",
        "2:",
        "ret",
        prepare = sym vfork_prepare,
        parent = sym vfork_parent,
        nr = const libc::SYS_vfork,
    )
}

/// `prctl(2)`, declared with its four optional arguments (as glibc reads them). Before
/// `PR_SET_SECCOMP` the shim steps aside (`hooks::before_filter`).
#[no_mangle]
pub unsafe extern "C" fn prctl(
    option: c_int,
    a2: libc::c_ulong,
    a3: libc::c_ulong,
    a4: libc::c_ulong,
    a5: libc::c_ulong,
) -> c_int {
    type PrctlFn = unsafe extern "C" fn(
        c_int,
        libc::c_ulong,
        libc::c_ulong,
        libc::c_ulong,
        libc::c_ulong,
    ) -> c_int;
    let Some(real) = next!("prctl", PrctlFn) else {
        return enosys();
    };
    if option == libc::PR_SET_SECCOMP {
        hooks::before_filter("prctl(PR_SET_SECCOMP)");
    }
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(option, a2, a3, a4, a5) }
}

/// Whether `unshare(flags)` fails in a multithreaded process: a user namespace (and the
/// thread, signal-handler and memory sharing it implies).
pub(super) fn unshare_needs_one_thread(flags: c_int) -> bool {
    flags & (libc::CLONE_NEWUSER | libc::CLONE_THREAD | libc::CLONE_SIGHAND | libc::CLONE_VM) != 0
}

/// Whether `setns(fd, nstype)` may fail in a multithreaded process: joining a user, mount or
/// time namespace (or one of a kind not named: 0).
pub(super) fn setns_needs_one_thread(nstype: c_int) -> bool {
    const CLONE_NEWTIME: c_int = 0x80;
    nstype == 0 || nstype & (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | CLONE_NEWTIME) != 0
}

forward!(
    /// `unshare(2)`: what a multithreaded process cannot unshare, the flusher stops first
    /// for, and the next burst starts it again.
    fn unshare(flags: c_int) -> c_int {
        if unshare_needs_one_thread(flags) {
            hooks::pause_flusher()
        }
    }
);

forward!(
    /// `setns(2)`: the namespaces a multithreaded process cannot join, the flusher stops first
    /// for.
    fn setns(fd: c_int, nstype: c_int) -> c_int {
        if setns_needs_one_thread(nstype) {
            hooks::pause_flusher()
        }
    }
);

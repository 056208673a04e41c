//! The shim carried into the programs a process execs with an environment that dropped it:
//! a daemon that starts its workers with an emptied environment (Dovecot keeps only its
//! `import_environment`; other supervisors reset the environment the same way) would run
//! them, the processes that write to clients, without the shim, and nothing would say so.
//!
//! The rule (`docs/shim.md`, "Children with an emptied environment"):
//! - an environment with no `LD_PRELOAD` at all gets the shim's own variables back, as the
//!   shim was started with them (`LD_PRELOAD` and every `NAGLESS_*`, those the new
//!   environment does not set itself); nothing else of it changes;
//! - an environment that sets `LD_PRELOAD` itself is the program's choice and is left as it
//!   is; if the shim is not in it, that is said once per process, naming the program (in the
//!   debug log, and on stderr with `NAGLESS_STATS=1` where stderr is no socket);
//! - an environment of more than [`MOST`] variables is left as it is, and said the same way.
//!
//! The shim's variables are copied at start-up; the exec hooks may run in a `vfork` child,
//! which shares the parent's memory, so nothing here allocates after start-up: the new
//! environment is built in an array on the caller's stack.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use libc::c_char;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::debug_log::{log, write_formatted};

/// Whether this process said already that it did not carry the shim somewhere.
static SAID: AtomicBool = AtomicBool::new(false);

/// Says that the shim was not carried into `program`, and why: in the debug log, and once
/// per process on stderr when reports go there.
fn not_carried(program: &str, why: std::fmt::Arguments<'_>) {
    log(format_args!("not carried into {program}: {why}"));
    let reports = crate::hooks::shim_anywhere().is_some_and(|s| s.config().stats);
    if reports && crate::sys::stderr_takes_our_lines() && !SAID.swap(true, Relaxed) {
        write_formatted(
            2,
            format_args!(
                "nagless: the shim is not in {program}, which this process starts: {why}\n"
            ),
        );
    }
}

/// The most variables an environment may have for the shim to be carried into it (the array
/// the new one is built in lives on the stack: 8 KiB).
pub(crate) const MOST: usize = 1000;

/// The shim's own variables, `NAME=VALUE`, as the process started with them.
struct Carried {
    /// Owns the strings `pointers` point into.
    _strings: Vec<CString>,
    /// Their addresses (valid as long as the process: the strings are never dropped).
    pointers: Vec<usize>,
}

static CARRIED: OnceLock<Carried> = OnceLock::new();

/// Whether `entry` (`NAME=VALUE`) is one of the shim's: `LD_PRELOAD` or `NAGLESS_*`.
fn shims(entry: &[u8]) -> bool {
    entry.starts_with(b"LD_PRELOAD=") || entry.starts_with(b"NAGLESS_")
}

/// At start-up: copies the shim's variables of the process's environment.
pub(crate) fn init() {
    let strings: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            use std::os::unix::ffi::OsStrExt;
            let mut e = k.as_bytes().to_vec();
            e.push(b'=');
            e.extend_from_slice(v.as_bytes());
            shims(&e).then(|| CString::new(e).ok()).flatten()
        })
        .collect();
    if !strings
        .iter()
        .any(|s| s.as_bytes().starts_with(b"LD_PRELOAD="))
    {
        return;
    }
    let pointers = strings.iter().map(|s| s.as_ptr() as usize).collect();
    let _ = CARRIED.set(Carried {
        _strings: strings,
        pointers,
    });
}

/// The entries of a NULL-terminated environment.
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn entries<'a>(envp: *const *const c_char) -> impl Iterator<Item = &'a [u8]> {
    let mut i = 0;
    std::iter::from_fn(move || {
        if envp.is_null() {
            return None;
        }
        // SAFETY: the array is NULL-terminated (the caller's promise) and `i` stops there.
        let p = unsafe { *envp.add(i) };
        if p.is_null() {
            return None;
        }
        i += 1;
        // SAFETY: each entry is a NUL-terminated string.
        Some(unsafe { CStr::from_ptr(p) }.to_bytes())
    })
}

/// The variable name of `NAME=VALUE`, with its `=`.
fn name(entry: &[u8]) -> &[u8] {
    entry
        .iter()
        .position(|&b| b == b'=')
        .map_or(entry, |i| &entry[..=i])
}

/// The environment `program` is to be started with: `envp` itself, or, where it dropped the
/// shim (no `LD_PRELOAD`), `envp` and the shim's variables it does not set, built in `buf`.
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of NUL-terminated strings that outlives the
/// returned pointer's use; `program` is NULL or a NUL-terminated string.
pub(crate) unsafe fn environment(
    envp: *const *const c_char,
    program: *const c_char,
    buf: &mut [*const c_char; MOST + 1],
) -> *const *const c_char {
    let Some(carried) = CARRIED.get() else {
        return envp;
    };
    if envp.is_null() {
        return envp;
    }
    let what = || {
        if program.is_null() {
            "a program".into()
        } else {
            // SAFETY: a NUL-terminated string (the caller's promise).
            unsafe { CStr::from_ptr(program) }.to_string_lossy()
        }
    };
    // SAFETY: the caller's promise on `envp`, for each use below.
    let mut own = unsafe { entries(envp) };
    if let Some(preload) = own.find(|e| e.starts_with(b"LD_PRELOAD=")) {
        if !preload.windows(b"nagless".len()).any(|w| w == b"nagless") {
            not_carried(
                &what(),
                format_args!("its environment sets LD_PRELOAD itself"),
            );
        }
        return envp;
    }
    // SAFETY: as above.
    let n = unsafe { entries(envp) }.count();
    if n + carried.pointers.len() > MOST {
        not_carried(
            &what(),
            format_args!("its environment has {n} variables (at most {MOST})"),
        );
        return envp;
    }
    let mut at = 0;
    for i in 0..n {
        // SAFETY: `i` is below the array's length, counted above.
        buf[at] = unsafe { *envp.add(i) };
        at += 1;
    }
    for &p in &carried.pointers {
        // SAFETY: `p` points into a CString of `CARRIED`, which lives as long as the process.
        let entry = unsafe { CStr::from_ptr(p as *const c_char) }.to_bytes();
        // SAFETY: as above.
        if unsafe { entries(envp) }.any(|e| name(e) == name(entry)) {
            continue;
        }
        buf[at] = p as *const c_char;
        at += 1;
    }
    buf[at] = std::ptr::null();
    log(format_args!(
        "carried into {}: its environment had no LD_PRELOAD",
        what()
    ));
    buf.as_ptr()
}

/// The process's own environment (`environ`), as execv, execvp and execl use it.
pub(crate) fn environ() -> *const *const c_char {
    extern "C" {
        static environ: *const *const c_char;
    }
    // SAFETY: libc's `environ`, read once; the exec functions read it the same way.
    unsafe { environ }
}

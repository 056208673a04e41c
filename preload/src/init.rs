//! Start-up and exit: the library's constructor (`.init_array`) reads the configuration,
//! opens the debug log, sizes and installs the shim, adopts the TCP sockets the program
//! inherited as stdin, stdout or stderr, and registers the exit and fork handlers.
#![allow(unsafe_code)] // `#[link_section]`, for the constructor

use libc::c_int;

use nagless_shim_policy::{Config, Shim};

use crate::debug_log::log;
use crate::hooks::shim_anywhere;
use crate::sys::{self, quietly};

/// Most descriptors the table covers (the hard RLIMIT_NOFILE, up to this); the table is made
/// in chunks as sockets appear, so covering many costs nothing until they are used.
const MAX_FDS: usize = 1 << 24;

/// The descriptors a program may inherit as its connection: stdin, stdout and stderr.
const INHERITED: [c_int; 3] = [0, 1, 2];

/// Adopts the TCP sockets the program inherited as stdin, stdout or stderr (an inetd-style
/// service, a helper a server starts per connection), as any socket another process passes
/// ([`crate::hooks::adopt_passed`]): a read of any of them ends the bursts of all that name
/// the same socket.
fn adopt_inherited() {
    for (n, &fd) in INHERITED.iter().enumerate() {
        crate::hooks::adopt_passed(fd, &INHERITED[..n]);
    }
}

/// In the child after a fork: the flusher is gone, and restarts at the next held burst.
extern "C" fn after_fork_child() {
    // Also after a fork made in a signal handler: only atomics are stored.
    crate::hooks::after_fork_child();
}

/// At exit: every burst ends, and the report is made.
extern "C" fn at_exit() {
    let Some(s) = shim_anywhere() else { return };
    quietly(|| {
        s.release_all();
        crate::report::at_exit(s);
    });
}

/// The library's constructor.
extern "C" fn init_hook() {
    quietly(|| {
        crate::symbols::resolve_all();
        crate::carry::init();
        if crate::sandbox::filter_at_start() {
            // Born under a seccomp filter (or unable to tell): no call of ours from here on.
            crate::standing::step_aside();
            if let Ok(path) = std::env::var("NAGLESS_LOG") {
                crate::debug_log::open(&path);
            }
            log(format_args!(
                "a seccomp filter is (or may be) in force: stepping aside"
            ));
            return;
        }
        let _ = sys::epoch();
        let (config, complaints) = Config::from_env(|k| std::env::var(k).ok());
        if let Ok(path) = std::env::var("NAGLESS_LOG") {
            crate::debug_log::open(&path);
        }
        crate::report::init(std::env::var_os("NAGLESS_STATS_FILE"));
        for c in &complaints {
            log(format_args!("ignored: {c}"));
        }
        let size = sys::fd_limit().clamp(1024, MAX_FDS);
        if crate::hooks::install(Shim::new(config, size)).is_none() {
            return;
        }
        adopt_inherited();
        sys::on_exit_and_fork(at_exit, after_fork_child);
    });
}

// Run by the dynamic loader when it loads the library, before the program's `main`.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init_hook;

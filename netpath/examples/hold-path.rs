//! `hold-path RTT_MS`: makes an emulated path of that round trip (root), prints
//! `ready CLIENT_NETNS SERVER_NETNS SERVER_ADDR` and keeps it up until SIGINT or SIGTERM,
//! then removes it. For scripts that run programs on either end with `ip netns exec`
//! (`scripts/bench-watch`).

use std::time::Duration;

use nagless_netpath::{EmulatedPath, PathSpec};

fn main() -> std::process::ExitCode {
    let Some(Ok(ms)) = std::env::args().nth(1).map(|a| a.parse::<u64>()) else {
        eprintln!("usage: hold-path RTT_MS");
        return std::process::ExitCode::from(2);
    };
    let spec = PathSpec {
        rtt: Duration::from_millis(ms),
        ..PathSpec::default()
    };
    // (Before the namespaces exist: a signal during set-up still lets the path be removed.)
    let signals = block_interrupts();
    let path = match EmulatedPath::new(&spec) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("hold-path: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let (c, s) = path.namespaces();
    println!("ready {c} {s} {}", path.server_addr());
    let mut sig = 0;
    // SAFETY: `signals` is an initialised set, blocked in this (only) thread; `sig` is a
    // writable int. sigwait returns when one of them is pending.
    unsafe { libc::sigwait(&signals, &mut sig) };
    // Dropping the path removes the namespaces.
    drop(path);
    std::process::ExitCode::SUCCESS
}

/// Blocks SIGINT, SIGTERM and SIGHUP, so that they wait for `sigwait` instead of ending
/// the process before the path is removed.
fn block_interrupts() -> libc::sigset_t {
    // SAFETY: sigemptyset and sigaddset initialise and fill a set on the stack;
    // pthread_sigmask blocks it for this thread (threads started later inherit the mask).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

//! `hold-path RTT_MS`: makes an emulated path of that round trip (root), prints
//! `ready CLIENT_NETNS SERVER_NETNS SERVER_ADDR` and keeps it up until SIGINT or SIGTERM,
//! then removes it. For scripts that run programs on either end with `ip netns exec`
//! (`scripts/bench-watch`).

use std::time::Duration;

use nagless_netpath::{interrupted, on_interrupt, EmulatedPath, PathSpec};

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
    on_interrupt();
    let path = match EmulatedPath::new(&spec) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("hold-path: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let (c, s) = path.namespaces();
    println!("ready {c} {s} {}", path.server_addr());
    while !interrupted() {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::process::ExitCode::SUCCESS
}

//! The watcher's own process, from `/proc/self`: what it costs the host it watches, for the
//! summary and for the `process_*` metrics every Prometheus exporter publishes.

use std::time::Duration;

use nagless_host::text::Stat;

/// The watcher's own figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OwnProcess {
    /// CPU time used so far, user + system.
    pub cpu: Duration,
    /// Resident memory, bytes.
    pub(crate) rss_bytes: u64,
    /// Virtual memory, bytes.
    pub(crate) virtual_bytes: u64,
    /// Open file descriptors.
    pub(crate) open_fds: u64,
    /// The soft limit on open file descriptors (`None`: unlimited).
    pub(crate) max_fds: Option<u64>,
    /// When the process started, seconds since the Unix epoch.
    pub(crate) start_time_unix_s: f64,
}

/// Linux's `USER_HZ`: the unit of `/proc/PID/stat`'s times, 100 on every architecture.
const USER_HZ: u64 = 100;

/// Reads them; `None` where `/proc` is not mounted.
pub fn read() -> Option<OwnProcess> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let page = rustix::param::page_size() as u64;
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    parse(&stat, &boot, &limits, page, open_fds)
}

/// The figures from the texts of `/proc/self/stat`, `/proc/stat` and `/proc/self/limits`.
fn parse(stat: &str, boot: &str, limits: &str, page: u64, open_fds: u64) -> Option<OwnProcess> {
    let stat = Stat::parse(stat)?;
    let field = |n: usize| stat.field(n)?.parse::<u64>().ok();
    let ticks = field(14)? + field(15)?;
    let btime: u64 = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let max_fds = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok());
    Some(OwnProcess {
        cpu: Duration::from_millis(ticks * 1000 / USER_HZ),
        rss_bytes: field(24)? * page,
        virtual_bytes: field(23)?,
        open_fds,
        max_fds,
        start_time_unix_s: btime as f64 + field(22)? as f64 / USER_HZ as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_come_from_the_right_fields() {
        // A command name with a space and a parenthesis, as any process may choose.
        let stat = "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 3 0 1500 104857600 2048 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 20000                files\n";
        let p = parse(stat, boot, limits, 4096, 9).unwrap();
        assert_eq!(p.cpu, Duration::from_millis(3800));
        assert_eq!(p.rss_bytes, 2048 * 4096);
        assert_eq!(p.virtual_bytes, 104_857_600);
        assert_eq!(p.max_fds, Some(1024));
        assert_eq!(p.open_fds, 9);
        assert_eq!(p.start_time_unix_s, 1_700_000_015.0);
        let unlimited = limits.replace("1024 ", "unlimited ");
        assert_eq!(
            parse(stat, boot, &unlimited, 4096, 9).unwrap().max_fds,
            None
        );
        assert!(parse("garbage", boot, limits, 4096, 0).is_none());
        assert!(parse("1 (x)", boot, limits, 4096, 0).is_none());
    }

    #[test]
    fn this_process_reads() {
        let p = read().expect("/proc is mounted here");
        assert!(p.rss_bytes > 0 && p.open_fds >= 3, "{p:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Started within the last day, and not in the future (boot time has 1 s resolution).
        assert!(p.start_time_unix_s <= now + 2.0 && p.start_time_unix_s > now - 86400.0);
    }
}

//! What a report says about its run: the command line, the plan's settings, the kernel, the
//! machine and the date. `--json` writes it as `meta`; the HTML page opens with it.

use crate::Plan;

/// The run a report describes. Serialized as the JSON document's `meta` (`docs/lab-json.md`):
/// fields are only ever added, never renamed.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RunInfo {
    /// The command line, as run.
    pub command: String,
    /// Runs per case and strategy.
    pub repeats: usize,
    /// Time limit of one open-ended run, ms.
    pub limit_ms: u64,
    /// Whether the limit was asked for ([`Plan::limit_fixed`]).
    pub limit_fixed: bool,
    /// CPU both ends were pinned to, if any.
    pub pin: Option<usize>,
    /// The kernel's release (`uname -r`), empty if unknown.
    pub kernel: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// The CPU's model name (`/proc/cpuinfo`), empty if unknown.
    pub cpu_model: String,
    /// When the run started ([`RunInfo::here`] was called): UTC, RFC 3339
    /// (`2025-11-25T21:45:00Z`).
    pub date: String,
}

impl RunInfo {
    /// The run of `plan` by `command` on this machine, now.
    pub fn here(command: &str, plan: &Plan) -> RunInfo {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        RunInfo {
            command: command.to_string(),
            repeats: plan.repeats,
            limit_ms: plan.limit.as_millis() as u64,
            limit_fixed: plan.limit_fixed,
            pin: plan.pin,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: cpu_model(&cpuinfo),
            date: utc(now),
        }
    }
}

/// The first `model name` of a `/proc/cpuinfo` text.
fn cpu_model(cpuinfo: &str) -> String {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_default()
}

/// Seconds since the Unix epoch as an RFC 3339 UTC time (days to civil date as in Howard
/// Hinnant's `civil_from_days`).
pub(crate) fn utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_rfc3339() {
        // Checked against `date -u -d @N +%FT%TZ`.
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_825_600), "2000-02-29T12:00:00Z");
        assert_eq!(utc(1_764_107_100), "2025-11-25T21:45:00Z");
    }

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let text =
            "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(cpu_model(text), "AMD EPYC 7B13");
        assert_eq!(cpu_model("processor : 0\n"), "");
    }
}

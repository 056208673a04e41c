//! Stall by stall: `nagless watch --json --stalls` against `nagless doctor --json
//! --every-stall --top 0` on a capture of the same run.
//!
//! A stall is the writer's socket (its address, and its peer's) and the moment the held
//! write left. Both tools name the same socket; the times come from different clocks read
//! the same way (the watcher's: the kernel's release time for eBPF, the sample that saw
//! the ACK for sampling; the doctor's: the capture's stamp of the held segment), so a stall
//! of one matches a stall of the other on the same socket within a tolerance. Two stalls
//! of one socket are at least a delayed-ACK timer's 30 ms apart, so a tolerance under that
//! pairs each with at most one.
//!
//! Pairing is greedy in time order per socket, which is the largest matching for intervals
//! of equal width. Precision is the share of the watcher's stalls that the doctor also
//! found; recall the share of the doctor's that the watcher found.

use std::collections::HashMap;
use std::net::SocketAddr;

/// One stall: who wrote, to whom, when the held write left (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    /// The writer's address and port.
    pub writer: SocketAddr,
    /// Its peer's.
    pub peer: SocketAddr,
    /// When the held write left, Unix seconds.
    pub at: f64,
}

/// How two lists of stalls compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Matching {
    /// The watcher's stalls.
    pub watch: usize,
    /// The doctor's stalls.
    pub doctor: usize,
    /// Pairs.
    pub matched: usize,
}

impl Matching {
    /// Of the watcher's stalls, the share the doctor also found (1 if it reported none).
    pub fn precision(&self) -> f64 {
        if self.watch == 0 {
            1.0
        } else {
            self.matched as f64 / self.watch as f64
        }
    }

    /// Of the doctor's stalls, the share the watcher found (1 if there were none).
    pub fn recall(&self) -> f64 {
        if self.doctor == 0 {
            1.0
        } else {
            self.matched as f64 / self.doctor as f64
        }
    }
}

impl std::fmt::Display for Matching {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "precision {:.3} recall {:.3} ({} matched; watch {}, doctor {})",
            self.precision(),
            self.recall(),
            self.matched,
            self.watch,
            self.doctor
        )
    }
}

/// The default tolerance: 20 ms (under the 30 ms between two stalls of one socket).
pub(crate) const TOLERANCE_S: f64 = 0.020;

/// How far a watcher's time may be from the doctor's: at most `early_s` before, `late_s` after.
/// Narrower than the 30 ms between two stalls of one socket, so each pairs with at most one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Seconds before the doctor's time.
    pub early_s: f64,
    /// Seconds after.
    pub late_s: f64,
}

impl Window {
    /// Within `TOLERANCE_S` either way (the eBPF backend: the kernel's own time).
    pub const EITHER_WAY: Window = Window {
        early_s: TOLERANCE_S,
        late_s: TOLERANCE_S,
    };
    /// Sampling: its time is the sample that saw the ACK, never before the release and late
    /// by a descheduled sampler: 2 ms before to 28 ms after.
    pub const LATE: Window = Window {
        early_s: 0.002,
        late_s: 0.028,
    };
}

fn addr(v: &serde_json::Value) -> Option<SocketAddr> {
    let a: SocketAddr = v.as_str()?.parse().ok()?;
    Some(SocketAddr::new(a.ip().to_canonical(), a.port()))
}

/// The stalls in `nagless watch --json --stalls` output (its other lines are skipped).
pub fn watch_stalls(jsonl: &str) -> Vec<Stall> {
    jsonl
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| watch_stall(&v))
        .collect()
}

/// The stall on one line of `nagless watch --json --stalls` (`None` for its other lines).
pub fn watch_stall(v: &serde_json::Value) -> Option<Stall> {
    (v["type"] == "stall").then_some(())?;
    Some(Stall {
        writer: addr(&v["local"])?,
        peer: addr(&v["remote"])?,
        at: v["time_unix_s"].as_f64()?,
    })
}

/// The stalls in `nagless doctor --json --every-stall --top 0` output; `None` if it is not that
/// JSON. (Without `--every-stall` only each flow's worst 32 are there, without `--top 0` only
/// the 10 most stalled flows.)
pub fn doctor_stalls(json: &str) -> Option<Vec<Stall>> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let origin = v["start_unix_s"].as_f64().unwrap_or(0.0);
    let mut out = Vec::new();
    for f in v["flows"].as_array()? {
        let sides: Vec<SocketAddr> = f["sides"]
            .as_array()?
            .iter()
            .filter_map(|s| addr(&s["addr"]))
            .collect();
        let [a, b] = sides[..] else { continue };
        for s in f["stalls"].as_array()? {
            let Some(writer) = addr(&s["sender"]) else {
                continue;
            };
            out.push(Stall {
                writer,
                peer: if writer == a { b } else { a },
                at: origin + s["held"]["time_s"].as_f64()?,
            });
        }
    }
    Some(out)
}

/// Pairs the watcher's stalls with the doctor's: same socket, the watcher's time within
/// `window` of the doctor's.
pub fn pair(watch: &[Stall], doctor: &[Stall], window: Window) -> Matching {
    type Times = HashMap<(SocketAddr, SocketAddr), Vec<f64>>;
    let by_socket = |v: &[Stall]| {
        let mut m = Times::new();
        for s in v {
            m.entry((s.writer, s.peer)).or_default().push(s.at);
        }
        for t in m.values_mut() {
            t.sort_by(f64::total_cmp);
        }
        m
    };
    let (w, d) = (by_socket(watch), by_socket(doctor));
    let mut matched = 0;
    for (sock, wt) in &w {
        let Some(dt) = d.get(sock) else { continue };
        let (mut i, mut j) = (0, 0);
        while i < wt.len() && j < dt.len() {
            let d = wt[i] - dt[j];
            if (-window.early_s..=window.late_s).contains(&d) {
                matched += 1;
                i += 1;
                j += 1;
            } else if d < 0.0 {
                i += 1; // too early for this one of the doctor's, and for every later one
            } else {
                j += 1;
            }
        }
    }
    Matching {
        watch: watch.len(),
        doctor: doctor.len(),
        matched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(writer: &str, peer: &str, at: f64) -> Stall {
        Stall {
            writer: writer.parse().unwrap(),
            peer: peer.parse().unwrap(),
            at,
        }
    }

    #[test]
    fn stalls_pair_by_socket_and_time() {
        let (a, b, c) = ("127.0.0.1:80", "127.0.0.1:5000", "127.0.0.1:5001");
        let doctor = [
            s(a, b, 10.000),
            s(a, b, 10.045),
            s(a, b, 10.090),
            s(a, c, 10.010),
        ];
        let watch = [
            s(a, b, 10.002), // the first
            s(a, b, 10.044), // the second
            s(a, c, 10.090), // another socket's time: no pair
            s(b, a, 10.011), // the other direction: no pair
            s(a, b, 10.2),   // none near
        ];
        let m = pair(&watch, &doctor, Window::EITHER_WAY);
        assert_eq!(
            m,
            Matching {
                watch: 5,
                doctor: 4,
                matched: 2
            }
        );
        assert_eq!(m.precision(), 0.4);
        assert_eq!(m.recall(), 0.5);
        assert_eq!(pair(&[], &[], Window::EITHER_WAY).recall(), 1.0);
        // Late by 25 ms: sampling's window takes it, the symmetric one does not; early by
        // 5 ms: the other way round.
        let late = [s(a, b, 10.025)];
        let early = [s(a, b, 9.995)];
        let one = [s(a, b, 10.0)];
        assert_eq!(pair(&late, &one, Window::LATE).matched, 1);
        assert_eq!(pair(&late, &one, Window::EITHER_WAY).matched, 0);
        assert_eq!(pair(&early, &one, Window::LATE).matched, 0);
        assert_eq!(pair(&early, &one, Window::EITHER_WAY).matched, 1);
    }

    #[test]
    fn both_tools_json_is_read() {
        let watch = r#"{"type":"window","rows":[]}
{"type":"stall","time_unix_s":100.5,"local":"127.0.0.1:80","remote":"[::ffff:127.0.0.2]:5000","held":10}
{"type":"summary","rows":[]}"#;
        assert_eq!(
            watch_stalls(watch),
            [s("127.0.0.1:80", "127.0.0.2:5000", 100.5)]
        );
        let doctor = r#"{"start_unix_s": 100.0, "flows": [{"sides": [{"addr": "127.0.0.2:5000"}, {"addr": "127.0.0.1:80"}],
            "stalls": [{"sender": "127.0.0.1:80", "held": {"frame": 9, "time_s": 0.5}}]}]}"#;
        assert_eq!(
            doctor_stalls(doctor).unwrap(),
            [s("127.0.0.1:80", "127.0.0.2:5000", 100.5)]
        );
        assert!(doctor_stalls("not json").is_none());
    }
}

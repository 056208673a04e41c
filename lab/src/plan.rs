//! What to run: a [`Plan`] of cases on paths, the strategies to compare and how often, with
//! the default plans ([`Scale`]) and the time limit of a run on each path.

use std::time::Duration;

use crate::harness::Path;
use crate::scenario::{Case, Credit};
use crate::strategy::Strategy;

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Cases with the paths to run each on.
    pub cases: Vec<(Case, Path)>,
    /// Strategies to compare (rows of each table).
    pub strategies: Vec<Strategy>,
    /// Runs per case and strategy; medians are reported.
    pub repeats: usize,
    /// Time limit of one open-ended run on loopback (and anywhere when `limit_fixed`).
    pub limit: Duration,
    /// True when the limit was asked for: then it holds on emulated paths too, where by
    /// default an open-ended run lasts `PATH_ROUND_TRIPS` round trips (at least
    /// `PATH_LIMIT_MIN`, at most `limit`) so that an RTT sweep stays short.
    pub limit_fixed: bool,
    /// Pin both ends of every connection to this CPU (`None`: let the scheduler place them).
    pub pin: Option<usize>,
    /// The `nagless` executable, for the glue cases' `run` rows (`None`: no `run` row).
    pub exe: Option<std::path::PathBuf>,
}

/// Round trips an open-ended run lasts on an emulated path by default.
pub(crate) const PATH_ROUND_TRIPS: u32 = 20;
/// The shortest open-ended run on an emulated path by default.
pub(crate) const PATH_LIMIT_MIN: Duration = Duration::from_millis(300);

/// The CPU the lab pins to by default: the last one, away from CPU 0's interrupt work.
pub fn default_pin() -> Option<usize> {
    std::thread::available_parallelism()
        .ok()
        .map(|n| n.get() - 1)
}

/// Scale of the default plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Every default case in well under a minute.
    Quick,
    /// The defaults of the source texts.
    Full,
}

const ETHERNET_MSS: u32 = 1448;

impl Plan {
    /// The default cases of `scenario` (all scenarios but `custom` when `None`).
    pub fn default_cases(scenario: Option<&str>, scale: Scale) -> Vec<(Case, Path)> {
        let quick = scale == Scale::Quick;
        let lo = Path::LOOPBACK;
        let eth = Path::mss(ETHERNET_MSS);
        let mut out = Vec::new();
        let want = |name: &str| scenario.is_none_or(|s| s == name);
        if want("split-write") {
            for path in [lo, eth] {
                for k in [1, 10, 100, 1000] {
                    out.push((Case::SplitWrite { k, rounds: 10 }, path));
                }
            }
        }
        if want("bgp-burst") {
            let sessions = if quick { 5 } else { 20 };
            for path in [lo, eth] {
                out.push((
                    Case::BgpBurst {
                        routes: 255,
                        per_update: 1,
                        sessions,
                    },
                    path,
                ));
            }
        }
        if want("framed-window") {
            let total = 30 * 1024 * 1024;
            for path in [lo, eth] {
                for (message, window) in [(4098, 4096), (4098, 4098)] {
                    for credit in [Credit::HalfWindow, Credit::EachFrame] {
                        out.push((
                            Case::FramedWindow {
                                total,
                                message,
                                window,
                                credit,
                            },
                            path,
                        ));
                    }
                }
            }
        }
        if want("pipelined-read") {
            let total = if quick { 4 } else { 32 } * 1024 * 1024;
            for depth in [1, 2, 10] {
                out.push((
                    Case::PipelinedRead {
                        total,
                        block: 8192,
                        depth,
                    },
                    lo,
                ));
            }
        }
        if want("http-keepalive") {
            for conns in [1, 10] {
                out.push((Case::HttpKeepalive { conns }, lo));
            }
        }
        // The glue cases (issue 54), on loopback: see the module `glue`.
        if want("sse-stream") {
            out.push((
                Case::SseStream {
                    tokens: 32,
                    gap_us: 2_000,
                    streams: if quick { 3 } else { 8 },
                },
                lo,
            ));
        }
        if want("tls-first-request") {
            out.push((
                Case::TlsFirstRequest {
                    connections: if quick { 10 } else { 20 },
                },
                lo,
            ));
        }
        if want("nodelay-server") {
            out.push((
                Case::NodelayServer {
                    rounds: if quick { 10 } else { 20 },
                },
                lo,
            ));
        }
        if want("relay-hop") {
            out.push((
                Case::RelayHop {
                    rounds: if quick { 10 } else { 20 },
                },
                lo,
            ));
        }
        if want("multiplexed") {
            out.push((
                Case::Multiplexed {
                    writers: 4,
                    depth: 64,
                    requests: if quick { 5_000 } else { 20_000 },
                },
                lo,
            ));
        }
        out
    }

    /// The default plan: every scenario's defaults, every strategy.
    pub fn defaults(scale: Scale) -> Plan {
        Plan {
            cases: Self::default_cases(None, scale),
            strategies: Strategy::ALL.to_vec(),
            repeats: if scale == Scale::Quick { 1 } else { 3 },
            limit: if scale == Scale::Quick {
                Duration::from_millis(300)
            } else {
                Duration::from_millis(1500)
            },
            limit_fixed: false,
            pin: default_pin(),
            exe: None,
        }
    }

    /// The time limit of one open-ended run on `path`: see [`limit_fixed`](Self::limit_fixed).
    pub(crate) fn limit_on(&self, path: &Path) -> Duration {
        match path.link {
            Some(link) if !self.limit_fixed => (Duration::from_micros(link.rtt_us)
                * PATH_ROUND_TRIPS)
                .max(PATH_LIMIT_MIN)
                .min(self.limit),
            _ => self.limit,
        }
    }

    /// The strategies with a row in `case`'s table: `run` needs a glue case and the
    /// executable.
    pub fn rows_of<'a>(&'a self, case: &'a Case) -> impl Iterator<Item = Strategy> + 'a {
        self.strategies
            .iter()
            .copied()
            .filter(move |s| case.has_row(*s) && (*s != Strategy::Run || self.exe.is_some()))
    }

    /// Number of runs the plan makes.
    pub fn run_count(&self) -> usize {
        self.cases
            .iter()
            .map(|(case, _)| self.rows_of(case).count() * self.repeats)
            .sum()
    }
}

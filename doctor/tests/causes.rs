//! Ground truth by construction (issue 51): scripted scenarios on emulated paths, one or more
//! per cause, each made by small programs that measure what they did, captured at both ends
//! at once. On a 10 ms path: a server that sleeps, a client that waits between requests, a
//! request in two writes held by Nagle, an answer whose last piece is sent with `MSG_MORE` and
//! held by the kernel, a reader that stops reading, requests and answers the path loses on
//! purpose (one each in three rounds: at the far end the loss shows only in the sender's
//! IPv4 numbers), a client that writes a request every millisecond with Nagle on while a
//! thread of its own reads the answers (the ACK clock). On a 10 ms path of 4 Mbit/s: answers that
//! cross at the path's rate (the truth: their bytes on the wire at the rate). On a 50 ms path:
//! answers a CUBIC sender's window holds back (slow start, and its restart after idle; the
//! truth: the answer's first to last byte by the client's clock). Each exchange's truth comes
//! from the programs' own clocks or the path's, never from the doctor; the doctor's budget is
//! scored against it per cause, by time (the time it gives a cause that truly went to it,
//! over all it gives that cause, and over all that truly went to it) and by event (exchanges
//! where a cause took 20 ms or more, and whether the doctor gave it at least half of that; a
//! cause given 40 ms or more where it took less than half of that is a false one). Needs root
//! (namespaces, tcpdump): skipped with a note outside CI, a failure under CI.
//!
//! The figures are printed; `scripts/bench-causes` measures them on a quiet machine (most
//! 0.95 and above; `docs/doctor.md` names the rest). The test asserts what holds beside a load too:
//! a machine busy on both cores wakes the programs late after their sleeps, against their own
//! clocks (think and idle fell to 0.86-0.89 by time, a Nagle stall's recall at the server's
//! end to 0.74, beside one or two busy loops). So it holds each cause a scenario made to 0.6
//! by time (a build that does not know a cause gives it nothing), every exchange's cause by
//! event (found when given half its time, none given 40 ms falsely; 0.95),
//! and time given a cause no scenario of its path made to 40 ms an exchange at most. A busy
//! host also deschedules the path's forwarder, 0.2-10 ms at a time here: a wait no program
//! and no part of the path made, no truth here. A run that fails where the forwarder ran 1 ms
//! or more behind its schedule (with a packet due) is made once more, and that run's
//! verdicts count; one whose path kept time fails at once. The price: a defect that fails a
//! run at random half the time passes one time in four where the path ran late, so the
//! figures are held to account by `scripts/bench-causes` on a quiet machine.
#![allow(clippy::disallowed_methods)] // the programs measure real time

mod causes_support;
mod path_support;

use std::time::Duration;

use causes_support::{
    clocked, hold, idle, loss, receiver, rtt_ms, stall, think, transfer, window, Made, ROUNDS,
};
use nagless_doctor::analysis::{Cause, Options, Spent};
use nagless_doctor::Diagnosis;
use nagless_netpath::{EmulatedPath, PathSpec};
use path_support::{at_both_ends, flow_on, kept_capture, spent};

/// What a cause is scored as: a name, and the (cause, side) pairs of the budget it is.
struct Label {
    name: &'static str,
    parts: &'static [(Cause, Option<&'static str>)],
}

const LABELS: [Label; 13] = [
    Label {
        name: "think (server)",
        parts: &[(Cause::Think, Some("server"))],
    },
    Label {
        name: "idle (client)",
        parts: &[(Cause::Idle, Some("client"))],
    },
    Label {
        name: "Nagle stall (client)",
        parts: &[(Cause::NagleStall, Some("client"))],
    },
    Label {
        name: "ACK-clocked (client)",
        parts: &[(Cause::AckClocked, Some("client"))],
    },
    Label {
        name: "ACK-clocked (server)",
        parts: &[(Cause::AckClocked, Some("server"))],
    },
    Label {
        name: "delayed ACK",
        parts: &[
            (Cause::DelayedAck, Some("client")),
            (Cause::DelayedAck, Some("server")),
        ],
    },
    Label {
        name: "sender's hold (server)",
        parts: &[(Cause::SenderHold, Some("server"))],
    },
    Label {
        name: "the receiver (zero and receive window)",
        parts: &[
            (Cause::ZeroWindow, Some("server")),
            (Cause::ReceiveWindow, Some("client")),
        ],
    },
    Label {
        name: "transfer",
        parts: &[(Cause::Transfer, None)],
    },
    Label {
        name: "congestion window (server)",
        parts: &[(Cause::CongestionWindow, Some("server"))],
    },
    Label {
        name: "loss recovery (client)",
        parts: &[(Cause::LossRecovery, Some("client"))],
    },
    Label {
        name: "loss recovery (server)",
        parts: &[(Cause::LossRecovery, Some("server"))],
    },
    Label {
        name: "round trip",
        parts: &[(Cause::RoundTrip, None)],
    },
];

/// The time `causes` give `label`, ms.
fn given_to(causes: &[Spent], label: &Label) -> f64 {
    label
        .parts
        .iter()
        .map(|(c, side)| spent(causes, *c, *side))
        .sum()
}

/// Per label: time (truth, given, both) and events (found, false, missed).
#[derive(Default, Clone, Copy)]
struct Score {
    truth: f64,
    given: f64,
    both: f64,
    found: u32,
    false_found: u32,
    missed: u32,
}

/// An event: a cause that took this long in an exchange, ms.
const EVENT_MS: f64 = 20.0;

/// Time a cause no scenario of a path made may be given there, per exchange, ms; and a false
/// event: a cause given this long in an exchange where it took less than half of it (the
/// emulated path's forwarder, late on a busy host, makes gaps of 20-40 ms that read as a
/// window's or the program's; a build that names a wrong cause gives it more).
const STRAY_MS: f64 = 40.0;

/// 0 at the client's end, 1 at the server's.
fn end_index(end: &str) -> usize {
    usize::from(end == "server end")
}

/// Adds `made`'s truths and what `d` gives them, captured at `end` (0 client's, 1 server's)
/// of a path of `rtt` ms: per exchange, and for the round trips (the path's: a figure of
/// the whole flow) per flow.
fn score(d: &Diagnosis, made: &[Made], end: usize, rtt: f64, scores: &mut [Score; LABELS.len()]) {
    for m in made {
        let f = flow_on(d, m.port);
        let b = &f.budget;
        let (path, rest) = scores.split_last_mut().expect("the round trip is last");
        let path_label = &LABELS[LABELS.len() - 1];
        let truth = m.round_trips[end] * rtt;
        let given = given_to(&b.causes, path_label);
        path.add(
            truth,
            given,
            &format!("{}, its flow", m.name),
            path_label.name,
        );
        // Every exchange the doctor keeps and every one a truth names (one it does not keep
        // gives nothing: its truth counts as missed); a transfer's truth is its whole flow's.
        let truths = match (&m.truth_at_server, end) {
            (Some(t), 1) => t,
            _ => &m.truth,
        };
        let whole = truths.iter().all(|t| t.0 == 0);
        let mut indexes: Vec<u64> = truths.iter().map(|t| t.0).collect();
        if !whole {
            assert_eq!(f.exchanges, ROUNDS, "{}: {f:#?}", m.name);
            indexes.extend(b.exchanges.iter().map(|e| e.index));
        }
        indexes.sort_unstable();
        indexes.dedup();
        let none: &[Spent] = &[];
        for x in indexes {
            let causes = if whole {
                &b.causes[..]
            } else {
                b.exchanges
                    .iter()
                    .find(|e| e.index == x)
                    .map_or(none, |e| &e.causes[..])
            };
            for (label, s) in LABELS.iter().zip(rest.iter_mut()) {
                if m.unscored.contains(&label.name) {
                    continue;
                }
                let truth: f64 = truths
                    .iter()
                    .filter(|t| t.0 == x && t.1 == label.name)
                    .map(|t| t.2)
                    .sum();
                let given = given_to(causes, label);
                s.add(
                    truth,
                    given,
                    &format!("{}, exchange {x}", m.name),
                    label.name,
                );
            }
        }
    }
}

impl Score {
    /// One truth and what was given it, in `what`.
    fn add(&mut self, truth: f64, given: f64, what: &str, label: &str) {
        self.truth += truth;
        self.given += given;
        self.both += truth.min(given);
        if truth >= EVENT_MS {
            if given >= truth / 2.0 {
                self.found += 1;
            } else {
                self.missed += 1;
                eprintln!("{what}: {label} missed: {truth:.1} ms, given {given:.1}");
            }
        } else if given >= STRAY_MS && truth < given / 2.0 {
            self.false_found += 1;
            eprintln!("{what}: {label} given {given:.1} ms, truly {truth:.1}");
        }
    }
}

/// How far behind its schedule the path's forwarder may run in a run whose verdicts count:
/// a busy host that deschedules it longer makes waits no scenario made (the truths are the
/// programs' and the path's, not the host's), so such a run is made again. (This machine's
/// forwarder ran 0.2-10 ms late at most in a run, idle or beside two busy loops.)
const LATE_PATH: Duration = Duration::from_millis(1);

/// Runs in all: a run that fails on a late path is made once more, and the second's verdicts
/// count. (So a defect that fails a run at random half the time, on a path that ran late,
/// passes one time in four: `scripts/bench-causes` on a quiet machine is where the figures
/// are held to account.)
const RUNS: usize = 2;

/// Makes `scenarios` on a path of `spec`, captured at both ends, and holds the doctor's
/// budget to their truths: each label of `made_here` (which the scenarios made) and every
/// other (which they did not, so that what the doctor gives it is false). A run that fails
/// on a path whose forwarder ran late ([`LATE_PATH`]) is made again, [`RUNS`] in all.
fn check(spec: PathSpec, made_here: &[&str], scenarios: impl Fn(&EmulatedPath) -> Vec<Made>) {
    for run in 1..=RUNS {
        let Some((failures, late)) = check_once(spec.clone(), made_here, &scenarios) else {
            return;
        };
        if failures.is_empty() {
            return;
        }
        if late < LATE_PATH || run == RUNS {
            panic!("run {run} of {RUNS} (the path ran {late:?} late at most): {failures:#?}");
        }
        eprintln!("run {run}: the path ran {late:?} late, made again: {failures:#?}");
        keep_failed_run(run);
    }
}

/// Keeps the captures of failed run `run` (`NAGLESS_KEEP_CAPTURES`) beside the next run's:
/// renamed `...-run{run}.pcap`.
fn keep_failed_run(run: usize) {
    for from in ["client end", "server end"]
        .into_iter()
        .filter_map(kept_capture)
    {
        let _ = std::fs::rename(&from, from.with_extension(format!("run{run}.pcap")));
    }
}

/// One run of [`check`]: its failed verdicts, and how late the path ran; `None` where no
/// path can be made here.
fn check_once(
    spec: PathSpec,
    made_here: &[&str],
    scenarios: &impl Fn(&EmulatedPath) -> Vec<Made>,
) -> Option<(Vec<String>, Duration)> {
    let opts = Options {
        top: 0,
        ..Options::default()
    };
    let tag = match spec.rate_bps {
        Some(r) => format!("{} ms {} Mbit/s", spec.rtt.as_millis(), r / 1_000_000),
        None => format!("{} ms", spec.rtt.as_millis()),
    };
    let ((made, rtt, late), captures) = at_both_ends(spec, opts, |p| {
        (scenarios(p), rtt_ms(p), p.stats().late_most)
    })?;
    eprintln!("{tag}: the path ran {late:?} late at most");
    let mut failures = Vec::new();
    let mut verdict = |ok: bool, what: String| {
        if !ok {
            failures.push(what);
        }
    };
    for (end, d) in &captures {
        let mut scores = [Score::default(); LABELS.len()];
        score(d, &made, end_index(end), rtt, &mut scores);
        // (A flow scored whole, however many exchanges the doctor counts in it, is one.)
        let exchanges: u64 = made
            .iter()
            .map(|m| {
                if m.truth.iter().all(|t| t.0 == 0) {
                    1
                } else {
                    flow_on(d, m.port).exchanges.max(1)
                }
            })
            .sum();
        for (label, s) in LABELS.iter().zip(&scores) {
            let precision = if s.given > 0.0 { s.both / s.given } else { 1.0 };
            let recall = if s.truth > 0.0 { s.both / s.truth } else { 1.0 };
            let events = s.found + s.missed;
            let ratio = |n: u32, of: u32| {
                if of == 0 {
                    1.0
                } else {
                    f64::from(n) / f64::from(of)
                }
            };
            let ev_precision = ratio(s.found, s.found + s.false_found);
            let ev_recall = ratio(s.found, events);
            if s.truth > 0.0 || s.given > 0.0 {
                eprintln!(
                "{tag}, {end}, {}: by time precision {precision:.3} recall {recall:.3} ({:.1} of {:.1} ms true, {:.1} given); by event precision {ev_precision:.2} recall {ev_recall:.2} ({} of {events}, {} false)",
                label.name, s.both, s.truth, s.given, s.found, s.false_found
            );
            }
            if made_here.contains(&label.name) {
                verdict(
                    s.truth > 0.0,
                    format!("{end}, {}: a scenario made it", label.name),
                );
            }
            if s.truth > 0.0 {
                verdict(
                    precision >= 0.6 && recall >= 0.6,
                    format!(
                        "{end}, {}: by time {precision:.3} / {recall:.3}",
                        label.name
                    ),
                );
            } else {
                verdict(
                    s.given <= STRAY_MS * exchanges as f64,
                    format!("{end}, {}: {:.1} ms given, none made", label.name, s.given),
                );
            }
            verdict(
                ev_precision >= 0.95 && ev_recall >= 0.95,
                format!(
                    "{end}, {}: by event {ev_precision:.2} / {ev_recall:.2}",
                    label.name
                ),
            );
        }
    }
    Some((failures, late))
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn each_cause_is_given_its_time_at_either_end() {
        let _one = nagless_test_support::exclusive();
        let spec = PathSpec {
            rtt: Duration::from_millis(10),
            ..PathSpec::default()
        };
        let made_here = [
            "think (server)",
            "idle (client)",
            "Nagle stall (client)",
            "sender's hold (server)",
            "the receiver (zero and receive window)",
            "loss recovery (client)",
            "loss recovery (server)",
            "ACK-clocked (client)",
            "round trip",
        ];
        check(spec, &made_here, |p| {
            vec![
                think(p, 7101),
                idle(p, 7102),
                stall(p, 7103),
                hold(p, 7104),
                receiver(p, 7105),
                loss(p, 7106),
                clocked(p, 7107),
            ]
        });
    }

    #[test]
    fn the_path_s_rate_is_transfer_at_either_end() {
        let _one = nagless_test_support::exclusive();
        // 4 Mbit/s, and a queue that never drops (no loss to recover from).
        let spec = PathSpec {
            rtt: Duration::from_millis(10),
            rate_bps: Some(4_000_000),
            queue_bytes: Some(1 << 20),
            ..PathSpec::default()
        };
        // (At the sender's end the round trip is measured from its handshake, 11.4 ms here: the
        // forwarder's first packets, 1.5 ms an exchange more than the path's 10; precision
        // 0.90-0.93 by time.)
        check(spec, &["transfer", "round trip"], |p| {
            vec![transfer(p, 7111)]
        });
    }

    #[test]
    fn slow_start_is_the_congestion_window_at_either_end() {
        let _one = nagless_test_support::exclusive();
        let spec = PathSpec {
            rtt: Duration::from_millis(50),
            ..PathSpec::default()
        };
        check(
            spec,
            &["congestion window (server)", "idle (client)", "round trip"],
            |p| vec![window(p, 7121)],
        );
    }
}

//! Per direction: the waits of loss recovery and flow control, as evidence for people and for
//! the Wireshark plugin (issue 51): each retransmission timeout (the segment's last sending,
//! and its retransmission) and each zero window (the ACK that closed it, and the one that
//! opened it again). The first [`KEPT`] of each kind per direction are kept; their times are
//! totalled in the sides ([`Side`]), all of them.

use super::direction::Direction;
use super::judge::direction_name;
use super::output::{At, Finding, FindingFrame, Side};

/// Waits kept per kind and direction (a finding marks at most 64 frames: two each).
const KEPT: usize = 32;

/// The waits of one flow.
#[derive(Default)]
pub(super) struct Waits {
    /// Per sender: its last sending of a segment, and the retransmission a timeout made.
    timeouts: [Vec<(At, At)>; 2],
    /// Per receiver: the ACK that closed its window, and the one that opened it (if one did).
    windows: [Vec<(At, Option<At>)>; 2],
}

impl Waits {
    /// `d`'s data sent again after a timeout: `last` its previous sending.
    pub(super) fn on_timeout(&mut self, d: Direction, last: At, retransmission: At) {
        if self.timeouts[d].len() < KEPT {
            self.timeouts[d].push((last, retransmission));
        }
    }

    /// `d` advertised a zero window at `at`.
    pub(super) fn on_window_closed(&mut self, d: Direction, at: At) {
        if self.windows[d].len() < KEPT {
            self.windows[d].push((at, None));
        }
    }

    /// `d` opened its window again at `at` (the last one it closed, if it was kept).
    pub(super) fn on_window_opened(&mut self, d: Direction, at: At) {
        if let Some((_, opened @ None)) = self.windows[d].last_mut() {
            *opened = Some(at);
        }
    }

    /// The findings: per direction, one for its timeouts and one for its zero windows.
    pub(super) fn findings(&self, sides: &[Side; 2]) -> Vec<Finding> {
        let mut out = Vec::new();
        for d in Direction::BOTH {
            let timeouts = &self.timeouts[d];
            if !timeouts.is_empty() {
                out.push(Finding {
                    kind: "retransmission-timeout",
                    frames: timeouts
                        .iter()
                        .flat_map(|(last, again)| {
                            [frame(last, "sent"), frame(again, "retransmission")]
                        })
                        .collect(),
                    delay_ms: mean_ms(timeouts.iter().map(|(a, b)| (a, Some(b)))),
                    direction: direction_name(d),
                    summary: format!(
                        "{}'s data sent again after a retransmission timeout: the path lost packets (not Nagle)",
                        sides[d].addr
                    ),
                });
            }
            let windows = &self.windows[d];
            if !windows.is_empty() {
                out.push(Finding {
                    kind: "zero-window",
                    frames: windows
                        .iter()
                        .flat_map(|(closed, opened)| {
                            std::iter::once(frame(closed, "closed"))
                                .chain(opened.as_ref().map(|o| frame(o, "opened")))
                        })
                        .collect(),
                    delay_ms: mean_ms(windows.iter().map(|(c, o)| (c, o.as_ref()))),
                    // The way the data held back went: to the side that stopped reading.
                    direction: direction_name(d.peer()),
                    summary: format!(
                        "{} advertised a zero window: its application stopped reading (not Nagle)",
                        sides[d].addr
                    ),
                });
            }
        }
        out
    }
}

fn frame(at: &At, role: &'static str) -> FindingFrame {
    FindingFrame {
        frame: at.frame,
        role,
    }
}

/// The mean time from each start to its end, ms, over those that ended (0 if none did).
fn mean_ms<'a>(spans: impl Iterator<Item = (&'a At, Option<&'a At>)>) -> f64 {
    let (sum, n) = spans
        .filter_map(|(a, b)| b.map(|b| (b.time_s - a.time_s).max(0.0)))
        .fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        sum * 1000.0 / f64::from(n)
    }
}

//! A rule's trial (pure): a rule that may be taken back (`revert_after`) first counts, without
//! acting, the stalls of the connections it would take, for half its `revert_after` (the
//! rate before); then it acts for its whole `revert_after`, counting again (the rate after).
//! It is kept when the rate fell by half or more (a rate that drifts a little is no help),
//! and when there was none before and none after (nothing seen to hold against it);
//! otherwise it is taken back, for good (until the rule is edited).
//! A rule without `revert_after` acts from the start and is kept.
//!
//! Invariant: a trial moves only forward, `Before` -> `Trying` -> `Kept` or `TakenBack`, and
//! only `Trying` and `Kept` act.

use std::time::{Duration, Instant};

/// Stalls per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate(pub f64);

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} stalls/s", self.0)
    }
}

/// Where a rule's trial is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trial {
    /// Counting, without acting.
    Before {
        /// Since when.
        since: Instant,
        /// Stalls counted.
        stalls: u64,
    },
    /// Acting, counting again.
    Trying {
        /// Since when.
        since: Instant,
        /// The rate measured before.
        before: Rate,
        /// Stalls counted since it acts.
        stalls: u64,
    },
    /// In force for good.
    Kept {
        /// The rates before and while it acted (`None`: no `revert_after`, never tried).
        rates: Option<(Rate, Rate)>,
    },
    /// Taken back: its rate did not fall.
    TakenBack {
        /// The rate before.
        before: Rate,
        /// The rate while it acted.
        after: Rate,
    },
}

/// What a [`Trial::tick`] changed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// The rate before is known: the rule acts from now on.
    Acts(Rate),
    /// The trial ended and the rule stays.
    Kept(Rate, Rate),
    /// The trial ended and the rule is taken back: what it changed must be put back.
    TakenBack(Rate, Rate),
}

fn rate(stalls: u64, over: Duration) -> Rate {
    Rate(stalls as f64 / over.as_secs_f64().max(1e-3))
}

impl Trial {
    /// The trial of a rule with this `revert_after`, from `now`.
    pub fn new(revert_after: Option<Duration>, now: Instant) -> Trial {
        match revert_after {
            Some(_) => Trial::Before {
                since: now,
                stalls: 0,
            },
            None => Trial::Kept { rates: None },
        }
    }

    /// Whether the rule acts now.
    pub fn acts(&self) -> bool {
        matches!(self, Trial::Trying { .. } | Trial::Kept { .. })
    }

    /// Whether the trial still counts stalls.
    pub fn counting(&self) -> bool {
        matches!(self, Trial::Before { .. } | Trial::Trying { .. })
    }

    /// Counts again from `now` (the watch that counts was lost and is back): what was
    /// counted before is dropped, the phase stays.
    pub fn restart(&mut self, now: Instant) {
        match self {
            Trial::Before { since, stalls } | Trial::Trying { since, stalls, .. } => {
                *since = now;
                *stalls = 0;
            }
            Trial::Kept { .. } | Trial::TakenBack { .. } => {}
        }
    }

    /// A stall of a connection the rule takes (or would take, before it acts).
    pub fn stall(&mut self) {
        if let Trial::Before { stalls, .. } | Trial::Trying { stalls, .. } = self {
            *stalls += 1;
        }
    }

    /// Moves the trial on at `now`, for a rule with this `revert_after`.
    pub fn tick(&mut self, now: Instant, revert_after: Option<Duration>) -> Option<Step> {
        let window = revert_after?;
        match *self {
            Trial::Before { since, stalls } => {
                let took = now.saturating_duration_since(since);
                if took < window / 2 {
                    return None;
                }
                let before = rate(stalls, took);
                *self = Trial::Trying {
                    since: now,
                    before,
                    stalls: 0,
                };
                Some(Step::Acts(before))
            }
            Trial::Trying {
                since,
                before,
                stalls,
            } => {
                let took = now.saturating_duration_since(since);
                if took < window {
                    return None;
                }
                let after = rate(stalls, took);
                let fell = if before.0 == 0.0 {
                    stalls == 0
                } else {
                    after.0 <= before.0 / 2.0
                };
                if fell {
                    *self = Trial::Kept {
                        rates: Some((before, after)),
                    };
                    Some(Step::Kept(before, after))
                } else {
                    *self = Trial::TakenBack { before, after };
                    Some(Step::TakenBack(before, after))
                }
            }
            Trial::Kept { .. } | Trial::TakenBack { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// Runs a trial of `revert_after` 10 s with `before` stalls counted first, then `after`.
    fn run(before: u64, after: u64) -> (Trial, Vec<Step>) {
        let t0 = Instant::now();
        let w = Some(10 * S);
        let mut t = Trial::new(w, t0);
        assert!(!t.acts() && t.counting());
        let mut steps = Vec::new();
        for _ in 0..before {
            t.stall();
        }
        assert_eq!(t.tick(t0 + 4 * S, w), None, "half the window first");
        steps.extend(t.tick(t0 + 5 * S, w));
        assert!(t.acts());
        for _ in 0..after {
            t.stall();
        }
        assert_eq!(t.tick(t0 + 14 * S, w), None, "the whole window acting");
        steps.extend(t.tick(t0 + 15 * S, w));
        (t, steps)
    }

    #[test]
    fn a_restart_counts_again_in_the_same_phase() {
        let t0 = Instant::now();
        let w = Some(10 * S);
        let mut t = Trial::new(w, t0);
        t.stall();
        t.restart(t0 + 20 * S);
        assert_eq!(
            t.tick(t0 + 24 * S, w),
            None,
            "half the window from the restart"
        );
        assert_eq!(t.tick(t0 + 25 * S, w), Some(Step::Acts(Rate(0.0))));
    }

    #[test]
    fn a_rule_without_revert_after_acts_at_once_and_is_kept() {
        let mut t = Trial::new(None, Instant::now());
        assert!(t.acts() && !t.counting());
        assert_eq!(t.tick(Instant::now() + 100 * S, None), None);
    }

    #[test]
    fn a_rule_whose_stalls_fall_is_kept() {
        let (t, steps) = run(50, 3);
        assert_eq!(
            steps,
            [Step::Acts(Rate(10.0)), Step::Kept(Rate(10.0), Rate(0.3))]
        );
        assert!(t.acts() && !t.counting());
    }

    #[test]
    fn a_rule_whose_stalls_do_not_fall_is_taken_back_for_good() {
        let (mut t, steps) = run(50, 100);
        assert_eq!(steps[1], Step::TakenBack(Rate(10.0), Rate(10.0)));
        assert!(!t.acts() && !t.counting());
        t.stall();
        assert_eq!(t.tick(Instant::now() + 1000 * S, Some(10 * S)), None);
        assert!(!t.acts());
    }

    #[test]
    fn a_rule_whose_stalls_fall_by_less_than_half_is_taken_back() {
        assert!(matches!(run(50, 50).1[1], Step::Kept(..)), "half is enough");
        assert!(matches!(run(50, 60).1[1], Step::TakenBack(..)));
    }

    #[test]
    fn no_stall_before_or_after_keeps_the_rule_and_new_stalls_take_it_back() {
        assert!(matches!(run(0, 0).1[1], Step::Kept(..)));
        assert!(matches!(run(0, 1).1[1], Step::TakenBack(..)));
    }
}

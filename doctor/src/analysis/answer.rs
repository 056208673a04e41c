//! How long the answering side took to answer (issue 51's honest negative): from the
//! opener's last data segment of a turn to the answerer's first of the next, the answerer's
//! side of the round trip taken off (the whole round trip at the opener's end, nothing at the
//! answerer's). Without a stall, a median of 20 ms or more is named: the time is the
//! program's, not the network's.

/// Answers kept (the first ones): enough for a median.
const KEPT: usize = 1024;
/// A median answer time worth naming, µs, over at least [`MIN_ANSWERS`].
pub(super) const NOTABLE_US: u64 = 20_000;
pub(super) const MIN_ANSWERS: usize = 3;

/// The answerer's times to answer.
#[derive(Default)]
pub(super) struct Answers {
    gaps_us: Vec<u64>,
}

impl Answers {
    /// One answer, `gap_us` after the question (the answerer's side of the round trip taken
    /// off).
    pub(super) fn on_answer(&mut self, gap_us: u64) {
        if self.gaps_us.len() < KEPT {
            self.gaps_us.push(gap_us);
        }
    }

    /// The median time to answer, µs, and how many answers it is of.
    pub(super) fn median_us(&self) -> Option<(u64, usize)> {
        let mut g = self.gaps_us.clone();
        g.sort_unstable();
        g.get(g.len() / 2).map(|m| (*m, g.len()))
    }
}

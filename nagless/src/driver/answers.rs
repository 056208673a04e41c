//! Whether the peer answers what this stream sends: under a policy that clocks the batches
//! its peer answers ([`FlushPolicy::clock_answered`](crate::FlushPolicy::clock_answered)), a
//! batch goes to the kernel's Nagle only while answers come, because only answers bring the
//! ACKs that release what Nagle holds soon. A peer that only receives (server-sent events, a
//! response streamed in parts) acknowledges late, and a batch held for its ACK would wait
//! for the bound.
//!
//! A connection task that multiplexes (redis-rs's, hyper's HTTP/2) does not read between
//! every two of its flushes: its tasks' requests come in bursts, each flushed as it comes,
//! while the answers to earlier ones are on their way. So input turns clocking on for the
//! batches that follow, until a batch the kernel held waits a whole bound with no ACK to
//! release it (the look that pushes it): the peer is not answering now. The stream then
//! remembers that its peer lets batches wait, and clocks only a batch that input came just
//! before, until a held batch is seen released by an ACK (answers do come after all), or
//! until [`FORGIVE`] more answers have come (input between two of its batches, however many
//! reads it takes, is one): a peer that answers on (a busy server that once took longer
//! than the bound, a scheduler's hiccup on a loaded host) is not doubted for the rest of the
//! connection. A sender whose peer never speaks never clocks; a peer that speaks
//! only to ask once (server-sent events) is never trusted again; a server that streams each
//! answer in parts pays one bound every [`FORGIVE`] requests.
//!
//! Invariant: `answering` implies `doubt == 0` (a peer known to let batches wait is trusted
//! again only by a release, or after [`FORGIVE`] answers).

/// Answers (input between two batches) after which a peer that let a batch wait a whole
/// bound is trusted again.
///
/// Measured (redis-rs's multiplexed connection, 32 tasks, 300,000 requests over loopback, the
/// `redis_clients` program `scripts/bench-clients` runs): while a peer was doubted for good,
/// one bound waited in a whole run (a server descheduled on a 2-core host) sent 17-44 % of
/// the run's flushes at once, `TCP_NODELAY` set and cleared around them, and the run made
/// 7-11 % fewer requests a second than runs with no such wait; with this, one such wait
/// sent 113-1,419 flushes at once (of 60,000-170,000). A server streaming each answer in
/// parts pays one bound (a millisecond or two) per this many answers.
pub(crate) const FORGIVE: u16 = 64;

/// The peer's answers, as seen from the batches this stream hands over.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answers {
    /// Input came since the last batch was handed over.
    input: bool,
    /// Input came, and no batch held since waited a whole bound: clock every batch.
    answering: bool,
    /// Answers left before the peer is trusted again: a held batch waited a whole bound, and
    /// no held batch was released by an ACK since (0: trusted).
    doubt: u16,
}

impl Answers {
    /// Input came from the peer.
    pub(crate) fn input(&mut self) {
        // One step of the doubt per answer: the input between two batches, however many
        // reads it takes (a request read in pieces is one).
        if !self.input {
            self.doubt = self.doubt.saturating_sub(1);
        }
        self.input = true;
        self.answering = self.doubt == 0;
    }

    /// A batch is handed over: whether it may wait for the ACK an answer brings.
    pub(crate) fn clock(&mut self) -> bool {
        debug_assert!(!self.answering || self.doubt == 0);
        std::mem::take(&mut self.input) || self.answering
    }

    /// Bytes the kernel held waited a whole bound with nothing sent: no answer came soon.
    pub(crate) fn unanswered(&mut self) {
        self.answering = false;
        self.doubt = FORGIVE;
    }

    /// Bytes the kernel held were sent by an ACK before the bound: answers do come.
    pub(crate) fn released(&mut self) {
        self.doubt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that answered a batch, then let a held one wait a whole bound.
    fn doubted() -> Answers {
        let mut a = Answers::default();
        a.input();
        assert!(a.clock());
        a.unanswered();
        a
    }

    #[test]
    fn a_peer_that_never_spoke_gets_every_batch_at_once() {
        let mut a = Answers::default();
        assert!((0..10).all(|_| !a.clock()));
    }

    #[test]
    fn input_clocks_the_batches_after_it_until_one_waits_in_vain() {
        let mut a = Answers::default();
        a.input();
        assert!(a.clock());
        assert!(
            a.clock(),
            "batches without input between them: still answering"
        );
        a.unanswered();
        assert!(!a.clock());
    }

    #[test]
    fn a_peer_that_let_a_batch_wait_has_only_batches_right_after_input_clocked() {
        let mut a = Answers::default();
        a.input();
        a.unanswered();
        // A server streaming its next answer in parts: the part right after the request is
        // clocked (nothing of ours is in flight then: it leaves at once), the rest are not.
        a.input();
        assert!(a.clock());
        assert!(!a.clock());
        assert!(!a.clock());
    }

    #[test]
    fn a_release_trusts_the_peer_again() {
        let mut a = Answers::default();
        a.input();
        a.unanswered();
        a.input();
        assert!(a.clock());
        a.released();
        assert!(!a.clock(), "trusted from the next input on");
        a.input();
        assert!(a.clock());
        assert!(a.clock(), "every batch clocked again");
    }

    /// A busy server that once took longer than the bound, then answers on (redis-rs's
    /// multiplexed connection on a loaded host): doubted for `FORGIVE` answers, not for the
    /// rest of the connection.
    #[test]
    fn a_peer_that_answers_on_is_trusted_again_after_some_inputs() {
        let mut a = doubted();
        for _ in 1..FORGIVE {
            a.input();
            assert!(a.clock(), "right after input");
            assert!(
                !a.clock(),
                "doubted: a batch with no input before it leaves at once"
            );
        }
        a.input();
        assert!(a.clock());
        assert!(a.clock(), "trusted again: every batch clocked");
        // A second wait in vain doubts it again, for as long.
        a.unanswered();
        assert!(!a.clock());
    }

    /// A peer that only asked once (a server-sent-events client) is never trusted again.
    #[test]
    fn a_peer_that_asked_once_stays_doubted() {
        let mut a = doubted();
        assert!((0..10 * usize::from(FORGIVE)).all(|_| !a.clock()));
    }

    /// Input read in many pieces between two batches (a request read a few bytes at a time)
    /// is one answer: it does not wear the doubt down by itself.
    #[test]
    fn input_between_two_batches_counts_once() {
        let mut a = doubted();
        for _ in 0..2 * FORGIVE {
            a.input();
        }
        assert!(a.clock(), "right after input");
        assert!(!a.clock(), "still doubted: one answer came, not 128");
    }
}

//! A caller's batch under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked): the writes
//! it makes between two flushes, once its flushes show that it marks batches so (a codec
//! calls `poll_flush` after each batch; a std caller `flush`). A clocked write is held for
//! the next ACK only behind bytes of *earlier* batches: the pieces of one request (a header,
//! then a body) never wait for the ACK of their own first piece, which a peer that waits for
//! the whole request delays (40 ms on Linux). Before its first flush a caller's every write
//! is a batch of its own (writers that never flush: each write a request).
//!
//! Invariant: `base`, when set, is at most the bytes handed over so far, which only grow.

/// The current batch, as the caller's flushes delimit it.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The caller has flushed at least once: its flushes mark where its batches end.
    delimited: bool,
    /// Bytes handed to the kernel before the current batch's first one (`None`: no batch is
    /// open; the next hand-over opens one).
    base: Option<u64>,
}

impl Batch {
    /// The caller's flush handed its batch over: the batch ends here, and the caller's
    /// flushes delimit batches from now on.
    pub(crate) fn ended(&mut self) {
        self.delimited = true;
        self.base = None;
    }

    /// Of `sent` bytes handed to the kernel so far, those of the current batch (opening it at
    /// `sent` if none is open), when the caller's flushes delimit batches; `None` before its
    /// first flush.
    pub(crate) fn own(&mut self, sent: u64) -> Option<u64> {
        if !self.delimited {
            return None;
        }
        let base = *self.base.get_or_insert(sent);
        debug_assert!(base <= sent, "bytes handed over only grow");
        Some(sent - base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_the_first_flush_no_write_belongs_to_a_batch() {
        let mut b = Batch::default();
        assert_eq!(b.own(0), None);
        assert_eq!(b.own(100), None);
    }

    #[test]
    fn a_batch_counts_what_was_handed_over_since_it_opened() {
        let mut b = Batch::default();
        b.ended();
        // Opened by its first hand-over, at 500 bytes handed over before it.
        assert_eq!(b.own(500), Some(0));
        assert_eq!(b.own(540), Some(40));
        assert_eq!(b.own(600), Some(100));
        // The caller flushes: the next hand-over opens the next batch.
        b.ended();
        assert_eq!(b.own(600), Some(0));
        assert_eq!(b.own(640), Some(40));
    }
}

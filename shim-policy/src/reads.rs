//! Reads: a thread about to read a managed socket ends its burst, and counts as waiting in a
//! read of it until the read returns ([`Reading`]), so that other threads' writes are clocked
//! as Nagle clocks them (the `clock` module); a clocked socket's reads count nothing, and
//! their common case is [`Shim::clocked_read`]. Under `NAGLESS_ACKS=quickack`, each read that
//! returned data makes the socket acknowledge at once again.

use crate::config::Acks;
use crate::sync::Ordering::*;
use crate::*;

/// A read [`Shim::read_begins`] announced, for [`Shim::read_ends`]: whether it counts as a
/// thread waiting in a read of its socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct Reading {
    counted: bool,
}

impl Shim {
    /// A thread is about to read from or receive on `fd`: the socket's burst ends
    /// ([`release_socket`](Self::release_socket)), and the thread counts as waiting in a
    /// read of it until [`read_ends`](Self::read_ends), so that other threads' writes are
    /// clocked as Nagle clocks them (see [`before_write`](Self::before_write)). A socket
    /// clocked already counts nothing: its reader's calls write no memory its writers read.
    pub fn read_begins(&self, k: &impl Kernel, fd: i32) -> Reading {
        self.release_socket_only(k, fd);
        let counted = self.slot(fd).is_some_and(|slot| {
            let flags = slot.flags.peek();
            // The count decides only whether a socket is clocked (`clocks`).
            let count = flags.is_managed() && !slot.clocked.load(Relaxed);
            if count {
                slot.readers.fetch_add(1, Relaxed);
            }
            count
        });
        Reading { counted }
    }

    /// Whether [`Shim::read_ends`] has anything to do for `reading`.
    pub fn read_ends_needed(&self, reading: Reading) -> bool {
        reading.counted || self.config.acks == Acks::Quickack
    }

    /// The read [`read_begins`](Self::read_begins) announced (`reading`) returned; `got`:
    /// it returned data. Under `NAGLESS_ACKS=quickack` the socket then acknowledges at once
    /// again (the kernel clears the flag when it goes back to delaying its ACKs).
    pub fn read_ends(&self, k: &impl Kernel, fd: i32, reading: Reading, got: bool) {
        let Some(slot) = self.slot(fd) else { return };
        if reading.counted {
            let _ = slot
                .readers
                .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        }
        if got
            && self.config.acks == Acks::Quickack
            && slot.flags.peek().is_managed()
            && k.set_quickack(fd)
        {
            self.stats.ack_calls.fetch_add(1, Relaxed);
        }
    }
}

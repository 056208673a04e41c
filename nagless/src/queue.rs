//! The pending-output queue: bytes accepted from the application and not yet taken by the
//! socket, in order.
//!
//! Small writes are copied into the tail of one contiguous buffer so that a burst of tiny
//! messages becomes one slice; writes of [`OWNED_CHUNK_MIN`] bytes or more handed over as a
//! `Vec<u8>` are kept as chunks of their own and later sent by `writev` without another copy.
//! The queue only stores and hands out slices; it decides nothing.

use std::collections::VecDeque;
use std::io::IoSlice;

/// Owned writes at least this large are kept as separate chunks instead of being copied.
pub const OWNED_CHUNK_MIN: usize = 4096;

/// Copy buffers start with this capacity and a new one is started when one would grow past
/// [`COPY_BUFFER_MAX`] (so a long stream of small writes does not reallocate one huge buffer).
const COPY_BUFFER_START: usize = 4096;
const COPY_BUFFER_MAX: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Chunk {
    data: Vec<u8>,
    /// Bytes at the front of `data` already sent.
    consumed: usize,
}

impl Chunk {
    fn remaining(&self) -> &[u8] {
        &self.data[self.consumed..]
    }
}

/// Bytes waiting to be sent, in the order they were written.
///
/// Layout: sealed chunks (owned buffers, and copy buffers that filled up), then the tail, the
/// copy buffer small writes append to. Every sealed byte was written before every tail byte.
///
/// An emptied buffer is freed, not kept: an idle connection holds no buffer at all (thousands
/// of idle streams cost almost nothing), at the price of one allocation per burst.
#[derive(Debug, Default)]
pub struct SendQueue {
    sealed: VecDeque<Chunk>,
    /// The copy buffer small writes append to; no allocation while nothing is in it.
    tail: Chunk,
    /// The capacity the last emptied tail buffer had reached (at most [`COPY_BUFFER_MAX`]):
    /// the next one starts that large, so that a stream whose bursts are alike allocates once
    /// per burst and never grows a buffer by copying it.
    tail_hint: usize,
    len: usize,
}

impl SendQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of bytes pending.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of separate slices the pending bytes occupy.
    #[cfg(test)]
    fn chunk_count(&self) -> usize {
        self.sealed.len() + usize::from(!self.tail.remaining().is_empty())
    }

    /// How many bytes [`push_copy`](Self::push_copy) can take into the tail buffer without
    /// allocating.
    #[inline]
    pub fn tail_room(&self) -> usize {
        self.tail.data.capacity() - self.tail.data.len()
    }

    /// The length of the tail buffer (sent bytes at its front included): the measure of
    /// [`push_within`](Self::push_within)'s `end`.
    #[inline]
    pub fn tail_len(&self) -> usize {
        self.tail.data.len()
    }

    /// Appends a copy of `data` if that keeps the tail buffer's length below `end` (which
    /// must not exceed its capacity + 1: no allocation); false, with nothing appended,
    /// otherwise (always for an `end` of 0).
    #[inline]
    pub fn push_within(&mut self, data: &[u8], end: usize) -> bool {
        let tail = &mut self.tail.data;
        if tail.len() + data.len() >= end {
            return false;
        }
        debug_assert!(
            end <= tail.capacity() + 1,
            "the quiet end is within the buffer"
        );
        tail.extend_from_slice(data);
        self.len += data.len();
        true
    }

    /// Appends a copy of `data`.
    #[inline]
    pub fn push_copy(&mut self, data: &[u8]) {
        // Fast path: room in the tail buffer, no allocation.
        if self.tail_room() >= data.len() {
            self.tail.data.extend_from_slice(data);
            self.len += data.len();
            return;
        }
        self.push_copy_slow(data);
    }

    #[cold]
    fn push_copy_slow(&mut self, data: &[u8]) {
        let tail = &self.tail.data;
        if tail.len() + data.len() > COPY_BUFFER_MAX.max(tail.capacity()) {
            self.seal_tail();
        }
        if self.tail.data.capacity() == 0 {
            let start = self.tail_hint.max(COPY_BUFFER_START);
            self.tail.data = Vec::with_capacity(data.len().max(start));
        }
        self.tail.data.extend_from_slice(data);
        self.len += data.len();
    }

    /// Moves the tail buffer, if it holds unsent bytes, behind the sealed chunks: what comes
    /// next starts a new one.
    fn seal_tail(&mut self) {
        let tail = std::mem::take(&mut self.tail);
        if !tail.remaining().is_empty() {
            self.sealed.push_back(tail);
        }
    }

    /// Appends an owned buffer: large ones become a chunk of their own (no copy), small ones
    /// are copied into the tail buffer so that they still coalesce.
    pub fn push_owned(&mut self, data: Vec<u8>) {
        if data.len() < OWNED_CHUNK_MIN {
            self.push_copy(&data);
            return;
        }
        self.seal_tail();
        self.len += data.len();
        self.sealed.push_back(Chunk { data, consumed: 0 });
    }

    /// Fills `out` with slices covering at most `limit` bytes from the front; returns how many
    /// slices were written.
    pub fn io_slices<'a>(&'a self, out: &mut [IoSlice<'a>], limit: usize) -> usize {
        let mut n = 0;
        let mut left = limit;
        for rem in self.slices() {
            if n == out.len() || left == 0 {
                break;
            }
            let take = rem.len().min(left);
            out[n] = IoSlice::new(&rem[..take]);
            n += 1;
            left -= take;
        }
        n
    }

    /// Removes `n` bytes from the front (they were sent).
    ///
    /// # Panics
    /// If `n` exceeds [`len`](Self::len): that is a bug in the caller's accounting.
    pub fn consume(&mut self, mut n: usize) {
        assert!(n <= self.len, "consumed {n} bytes of {}", self.len);
        self.len -= n;
        while n > 0 {
            let Some(front) = self.sealed.front_mut() else {
                break;
            };
            let rem = front.data.len() - front.consumed;
            if n < rem {
                front.consumed += n;
                return;
            }
            n -= rem;
            self.sealed.pop_front();
        }
        // What is left of `n` comes from the tail (the sealed chunks precede it).
        self.tail.consumed += n;
        if self.tail.consumed == self.tail.data.len() {
            // Emptied: freed, so that an idle stream holds no buffer.
            self.tail_hint = self.tail.data.capacity().min(COPY_BUFFER_MAX);
            self.tail = Chunk::default();
        }
    }

    /// The pending bytes, slice by slice, front to back.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        let tail = Some(self.tail.remaining()).filter(|t| !t.is_empty());
        self.sealed.iter().map(Chunk::remaining).chain(tail)
    }

    /// Copies every pending byte out, front to back (for tests and diagnostics).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.slices() {
            v.extend_from_slice(s);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_writes_share_one_slice() {
        let mut q = SendQueue::new();
        for i in 0..100u8 {
            q.push_copy(&[i; 10]);
        }
        assert_eq!(q.len(), 1000);
        assert_eq!(q.chunk_count(), 1);
    }

    #[test]
    fn owned_large_write_is_its_own_chunk_and_small_after_it_coalesce() {
        let mut q = SendQueue::new();
        q.push_copy(b"head");
        q.push_owned(vec![7; 10_000]);
        q.push_copy(b"a");
        q.push_copy(b"b");
        assert_eq!(q.chunk_count(), 3);
        let mut s = [IoSlice::new(&[]); 8];
        let n = q.io_slices(&mut s, usize::MAX);
        assert_eq!(n, 3);
        assert_eq!(&*s[2], b"ab");
    }

    #[test]
    fn consume_across_chunks_and_limit() {
        let mut q = SendQueue::new();
        q.push_copy(b"abc");
        q.push_owned(vec![b'x'; OWNED_CHUNK_MIN]);
        q.push_copy(b"def");
        q.consume(4);
        let v = q.to_vec();
        assert_eq!(v.len(), OWNED_CHUNK_MIN - 1 + 3);
        assert_eq!(&v[v.len() - 3..], b"def");
        let mut s = [IoSlice::new(&[]); 8];
        let n = q.io_slices(&mut s, 10);
        assert_eq!(n, 1);
        assert_eq!(s[0].len(), 10);
    }

    #[test]
    fn an_emptied_queue_keeps_no_buffer() {
        let mut q = SendQueue::new();
        q.push_copy(b"hello");
        q.consume(5);
        assert!(q.is_empty());
        assert_eq!(q.chunk_count(), 0);
        assert_eq!(q.tail_room(), 0, "the emptied tail buffer is freed");
    }

    #[test]
    fn a_full_tail_is_sealed_and_order_kept() {
        let mut q = SendQueue::new();
        let mut want = Vec::new();
        for i in 0..(2 * COPY_BUFFER_MAX / 1000) {
            let part = [i as u8; 1000];
            q.push_copy(&part);
            want.extend_from_slice(&part);
        }
        assert!(q.chunk_count() >= 2, "a tail past its cap is sealed");
        q.consume(1500);
        q.push_owned(vec![9; OWNED_CHUNK_MIN]);
        q.push_copy(b"end");
        want.extend_from_slice(&[9; OWNED_CHUNK_MIN]);
        want.extend_from_slice(b"end");
        assert_eq!(q.to_vec(), want[1500..]);
        assert_eq!(q.len(), want.len() - 1500);
    }
}

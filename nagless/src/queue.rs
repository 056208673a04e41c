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

#[derive(Debug)]
struct Chunk {
    data: Vec<u8>,
    /// Bytes at the front of `data` already sent.
    consumed: usize,
    /// Whether small writes may be appended to this chunk (false for owned chunks).
    appendable: bool,
}

impl Chunk {
    fn remaining(&self) -> &[u8] {
        &self.data[self.consumed..]
    }
}

/// Bytes waiting to be sent, in the order they were written.
///
/// An emptied buffer is freed, not kept: an idle connection holds no buffer at all (thousands
/// of idle streams cost almost nothing), at the price of one allocation per burst.
#[derive(Debug, Default)]
pub struct SendQueue {
    chunks: VecDeque<Chunk>,
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
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Appends a copy of `data`.
    #[inline]
    pub fn push_copy(&mut self, data: &[u8]) {
        // Fast path: room in the tail buffer, no allocation.
        if let Some(back) = self.chunks.back_mut() {
            if back.appendable && back.data.capacity() - back.data.len() >= data.len() {
                back.data.extend_from_slice(data);
                self.len += data.len();
                return;
            }
        }
        self.push_copy_slow(data);
    }

    #[cold]
    fn push_copy_slow(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let fits = self.chunks.back().is_some_and(|c| {
            c.appendable && c.data.len() + data.len() <= COPY_BUFFER_MAX.max(c.data.capacity())
        });
        if !fits {
            self.chunks.push_back(Chunk {
                data: Vec::with_capacity(data.len().max(COPY_BUFFER_START)),
                consumed: 0,
                appendable: true,
            });
        }
        // The branch above guarantees a back chunk exists.
        if let Some(back) = self.chunks.back_mut() {
            back.data.extend_from_slice(data);
        }
        self.len += data.len();
    }

    /// Appends an owned buffer: large ones become a chunk of their own (no copy), small ones
    /// are copied into the tail buffer so that they still coalesce.
    pub fn push_owned(&mut self, data: Vec<u8>) {
        if data.len() < OWNED_CHUNK_MIN {
            self.push_copy(&data);
            return;
        }
        self.len += data.len();
        self.chunks.push_back(Chunk {
            data,
            consumed: 0,
            appendable: false,
        });
    }

    /// Fills `out` with slices covering at most `limit` bytes from the front; returns how many
    /// slices were written.
    pub fn io_slices<'a>(&'a self, out: &mut [IoSlice<'a>], limit: usize) -> usize {
        let mut n = 0;
        let mut left = limit;
        for chunk in &self.chunks {
            if n == out.len() || left == 0 {
                break;
            }
            let rem = chunk.remaining();
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
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let rem = front.data.len() - front.consumed;
            if n < rem {
                front.consumed += n;
                return;
            }
            n -= rem;
            self.chunks.pop_front();
        }
    }

    /// The pending bytes, slice by slice, front to back.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        self.chunks.iter().map(Chunk::remaining)
    }

    /// Copies every pending byte out, front to back (for tests and diagnostics).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for c in &self.chunks {
            v.extend_from_slice(c.remaining());
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
    }
}

//! The read buffer: bytes from the source, held one record at a time, so that memory does not
//! grow with the capture; every read is checked against what is there.

use std::io::{self, Read};
use std::ops::Range;

use super::CaptureError;

/// Bytes read from `src` and not yet consumed: `buf[start..end]`, the first at capture offset
/// `offset`.
pub(super) struct ReadBuffer<R> {
    src: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    offset: u64,
    eof: bool,
}

impl<R: Read> ReadBuffer<R> {
    pub(super) fn new(src: R) -> ReadBuffer<R> {
        ReadBuffer {
            src,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            offset: 0,
            eof: false,
        }
    }

    /// Bytes consumed so far.
    pub(super) fn offset(&self) -> u64 {
        self.offset
    }

    /// The bytes available at the cursor.
    pub(super) fn avail(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Makes at least `need` bytes available unless the input ends first. The buffer grows
    /// only as far as bytes actually come, so a damaged length field cannot make it huge.
    pub(super) fn fill(&mut self, need: usize) -> Result<(), CaptureError> {
        if self.end - self.start >= need || self.eof {
            return Ok(());
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end < need {
            if self.end == self.buf.len() {
                let grown = (self.buf.len() * 2).min(need.next_power_of_two());
                self.buf.resize(grown.max(self.end + 1), 0);
            }
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(CaptureError::Io {
                        offset: self.offset + self.end as u64,
                        why: e.to_string(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Whether the input has no byte left.
    pub(super) fn at_end(&mut self) -> Result<bool, CaptureError> {
        self.fill(1)?;
        Ok(self.start == self.end)
    }

    /// Checks that `len` bytes are available at the cursor and returns them without consuming
    /// (`what` and `record` name them in the error).
    pub(super) fn peek(
        &mut self,
        len: usize,
        what: &'static str,
        record: u64,
    ) -> Result<&[u8], CaptureError> {
        self.fill(len)?;
        let have = self.end - self.start;
        if have < len {
            return Err(CaptureError::Truncated {
                what,
                offset: self.offset,
                record,
                need: len,
                have,
            });
        }
        Ok(&self.buf[self.start..self.start + len])
    }

    /// Consumes `len` bytes, which [`peek`](Self::peek) found there, and gives where they are
    /// in the buffer (valid until the next read).
    pub(super) fn consume(&mut self, len: usize) -> Range<usize> {
        debug_assert!(self.end - self.start >= len, "consume past what was peeked");
        let s = self.start;
        self.start += len;
        self.offset += len as u64;
        s..s + len
    }

    /// Consumes `len` bytes and returns them.
    pub(super) fn take(
        &mut self,
        len: usize,
        what: &'static str,
        record: u64,
    ) -> Result<&[u8], CaptureError> {
        self.peek(len, what, record)?;
        let r = self.consume(len);
        Ok(&self.buf[r])
    }

    /// Bytes consumed earlier, by the range [`consume`](Self::consume) gave.
    pub(super) fn slice(&self, r: Range<usize>) -> &[u8] {
        &self.buf[r]
    }
}

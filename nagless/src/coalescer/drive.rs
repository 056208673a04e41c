//! Sending what the core says, in a loop against any [`Transport`]: the one code path the
//! real sockets and the tests' fakes share.

use std::io::{self, IoSlice};
use std::time::Instant;

use super::{Coalescer, MAX_IOV};

/// Where [`drive`] sends bytes: a socket, or a scripted fake in tests.
///
/// ```
/// use std::io::IoSlice;
/// use std::time::Instant;
/// use nagless::{drive, Coalescer, FlushPolicy, Transport, Urgency};
///
/// struct Sink(Vec<u8>); // a socket that takes everything
/// impl Transport for Sink {
///     fn send(&mut self, bufs: &[IoSlice<'_>], _more: bool) -> std::io::Result<usize> {
///         bufs.iter().for_each(|b| self.0.extend_from_slice(b));
///         Ok(bufs.iter().map(|b| b.len()).sum())
///     }
/// }
///
/// let mut core = Coalescer::new(FlushPolicy::default());
/// core.write(b"hello", Urgency::SendNow, Instant::now());
/// let mut sink = Sink(Vec::new());
/// drive(&mut core, &mut sink, Instant::now())?;
/// assert_eq!(sink.0, b"hello");
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait Transport {
    /// Sends a prefix of `bufs` in one call; `more` asks the kernel to hold a partial segment
    /// because the same flush continues with another call (`MSG_MORE`).
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize>;
}

/// How a [`drive`] call ended.
///
/// ```
/// use std::io::{self, IoSlice};
/// use std::time::Instant;
/// use nagless::{drive, Coalescer, Drive, FlushPolicy, Transport, Urgency};
///
/// struct Full; // a non-blocking socket whose buffer is full
/// impl Transport for Full {
///     fn send(&mut self, _: &[IoSlice<'_>], _: bool) -> io::Result<usize> {
///         Err(io::ErrorKind::WouldBlock.into())
///     }
/// }
///
/// let mut core = Coalescer::new(FlushPolicy::default());
/// core.write(b"hello", Urgency::SendNow, Instant::now());
/// assert_eq!(drive(&mut core, &mut Full, Instant::now())?, Drive::Blocked);
/// assert_eq!(core.pending(), 5); // kept: drive again when the socket is writable
/// # Ok::<(), io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Drive {
    /// Nothing is due any more (bytes may still be pending, waiting for a flush point).
    Idle,
    /// The socket would block with bytes still due.
    Blocked,
}

/// Sends everything due now through `transport`, retrying `EINTR` and looping on short
/// writes. Stops at `WouldBlock` (returns [`Drive::Blocked`]) or at the first other error,
/// which is returned with the unsent bytes still queued.
///
/// ```
/// use std::io::IoSlice;
/// use std::time::Instant;
/// use nagless::{drive, Coalescer, Drive, FlushPolicy, Transport, Urgency};
///
/// struct Sink(Vec<u8>); // a socket that takes everything
/// impl Transport for Sink {
///     fn send(&mut self, bufs: &[IoSlice<'_>], _more: bool) -> std::io::Result<usize> {
///         bufs.iter().for_each(|b| self.0.extend_from_slice(b));
///         Ok(bufs.iter().map(|b| b.len()).sum())
///     }
/// }
///
/// let mut core = Coalescer::new(FlushPolicy::default());
/// let mut sink = Sink(Vec::new());
/// core.write(b"a", Urgency::Normal, Instant::now());
/// core.write(b"b", Urgency::Normal, Instant::now());
/// core.flush();
/// assert_eq!(drive(&mut core, &mut sink, Instant::now())?, Drive::Idle);
/// assert_eq!(sink.0, b"ab");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn drive<T: Transport + ?Sized>(
    core: &mut Coalescer,
    transport: &mut T,
    now: Instant,
) -> io::Result<Drive> {
    while let Some(tx) = core.poll_transmit(now) {
        let mut slices = [IoSlice::new(&[]); MAX_IOV];
        let n = core.io_slices(&mut slices, tx.len);
        let gathered: usize = slices[..n].iter().map(|s| s.len()).sum();
        let more = core.policy().msg_more && gathered < tx.len;
        match transport.send(&slices[..n], more) {
            Ok(0) => {
                core.on_error();
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "socket accepted no bytes",
                ));
            }
            Ok(sent) => {
                debug_assert!(
                    sent <= gathered,
                    "transport took {sent} of {gathered} bytes"
                );
                core.on_sent(sent.min(gathered));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => core.on_interrupted(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                core.on_would_block();
                return Ok(Drive::Blocked);
            }
            Err(e) => {
                core.on_error();
                return Err(e);
            }
        }
    }
    Ok(Drive::Idle)
}

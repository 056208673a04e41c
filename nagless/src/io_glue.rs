//! What the streams share between the driver and a socket: the descriptor as a [`Wire`]
//! (sending through the OS), the segment size, `TCP_NODELAY`, and one vectored write queued
//! as one message.

use std::io::{self, IoSlice};
use std::time::Instant;

use crate::coalescer::Coalescer;
use crate::driver::Wire;
use crate::policy::Urgency;
use crate::sys::{self, Sock};

/// A socket as a wire: the OS's gathered send (`sendmsg`, `WSASend`), its segment size and,
/// on Linux, its send-queue counters for the clocked hand-over.
pub(crate) struct FdWire<'a>(pub Sock<'a>);

impl Wire for FdWire<'_> {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        sys::send_vectored(self.0, bufs, more)
    }
    fn socket(&self) -> Option<Sock<'_>> {
        Some(self.0)
    }
}

/// Sets `TCP_NODELAY` on TCP sockets; other descriptors (pipes, UNIX sockets) are fine as
/// they are. (On macOS and the BSDs but FreeBSD, also `SO_NOSIGPIPE`: see [`sys::prepare`].)
pub(crate) fn set_nodelay_if_tcp(fd: Sock<'_>) -> io::Result<()> {
    sys::prepare(fd)
}

/// Queues the first `limit` bytes of `bufs` as one message: every slice but the last one
/// queued is [`Urgency::MoreFollows`].
pub(crate) fn queue_vectored(
    core: &mut Coalescer,
    bufs: &[IoSlice<'_>],
    limit: usize,
    now: Instant,
) {
    let mut left = limit;
    let mut parts = bufs.iter().filter(|b| !b.is_empty()).peekable();
    while let Some(b) = parts.next() {
        let take = b.len().min(left);
        left -= take;
        let last = left == 0 || parts.peek().is_none();
        let urgency = if last {
            Urgency::Normal
        } else {
            Urgency::MoreFollows
        };
        core.write(&b[..take], urgency, now);
        if last {
            break;
        }
    }
}

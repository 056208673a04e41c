//! What the std stream, the tokio adapter and the TLS layers share between the core and a
//! socket: sending through the OS, the segment size, `TCP_NODELAY`, and one vectored write
//! queued as one message.

use std::io::{self, IoSlice};
use std::time::Instant;

use crate::coalescer::{Coalescer, Transport};
use crate::policy::Urgency;
use crate::sys::{self, Sock};

/// Sends through a socket with the OS's gathered send (`sendmsg`, `WSASend`).
pub(crate) struct FdTransport<'a>(pub Sock<'a>);

impl Transport for FdTransport<'_> {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        sys::send_vectored(self.0, bufs, more)
    }
}

/// Reads the socket's send MSS into the core, when the kernel tells it (Linux: `TCP_INFO`;
/// macOS and the BSDs: `TCP_MAXSEG`; Windows: `SIO_TCP_INFO`, else `TCP_MAXSEG`).
pub(crate) fn refresh_segment(core: &mut Coalescer, fd: Sock<'_>) {
    core.on_segment_check();
    if let Ok(mss) = sys::segment_size(fd) {
        if mss > 0 {
            core.set_segment_size(mss as usize);
        }
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

/// Longest a clocked write's bytes are left to the kernel's ACK clock when later writes come:
/// a clocked write that finds older bytes held this long sends them all at once.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) const CLOCK_BOUND: std::time::Duration = crate::policy::DEFAULT_LINGER;

/// What [`drive_clocked`] needs of a socket: the gathered send, the send queue's two counters
/// and the push. [`FdTransport`] is the real one; tests script a fake kernel.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) trait ClockedSocket: Transport {
    /// Bytes written and not yet acknowledged, sent or not (`SIOCOUTQ`).
    fn unacknowledged(&mut self) -> io::Result<u32>;
    /// Bytes written and not yet sent: what the kernel holds (`SIOCOUTQNSD`).
    fn unsent(&mut self) -> io::Result<u32>;
    /// Sends everything the kernel holds (`TCP_NODELAY` set again).
    fn push(&mut self) -> io::Result<()>;
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl ClockedSocket for FdTransport<'_> {
    fn unacknowledged(&mut self) -> io::Result<u32> {
        sys::unacknowledged(self.0)
    }
    fn unsent(&mut self) -> io::Result<u32> {
        sys::unsent(self.0)
    }
    fn push(&mut self) -> io::Result<()> {
        sys::set_nodelay(self.0, true)
    }
}

/// A socket every send of which asks the kernel to hold it (`MSG_MORE`).
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
struct Holding<'s, S>(&'s mut S);

impl<S: Transport> Transport for Holding<'_, S> {
    fn send(&mut self, bufs: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
        self.0.send(bufs, true)
    }
}

/// Sends what is due under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked).
///
/// `held` is since when the kernel holds bytes of this stream for an ACK (`None`: it holds
/// none), as this function last saw it. A transmit for a clocked write or flush is sent at
/// once when nothing is unacknowledged (`SIOCOUTQ` 0), or when bytes held earlier have waited
/// [`CLOCK_BOUND`]; otherwise it is sent with `MSG_MORE`, and then the kernel is asked
/// whether it now holds bytes with nothing in flight (no ACK will come to send them): if so
/// they are pushed at once. A transmit for any other reason (an urgent write, `flush_now`, a
/// read that would wait, close) is sent plainly, which also sends what the kernel held.
///
/// Why nothing strands: the kernel sends held bytes on every ACK it processes (with
/// `TCP_NODELAY` on), and an ACK that arrives while the send runs is processed after the bytes
/// are queued. So bytes can be held with nothing in flight only when every byte in flight was
/// acknowledged before the send began, and the check after the send sees that (both counters
/// stay put in that state, whatever order they are read in).
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn drive_clocked<S: ClockedSocket>(
    core: &mut Coalescer,
    held: &mut Option<Instant>,
    sock: &mut S,
    now: Instant,
) -> io::Result<crate::coalescer::Drive> {
    use crate::coalescer::{drive, Drive};
    use crate::policy::FlushReason;
    let Some(tx) = core.poll_transmit(now) else {
        return Ok(Drive::Idle);
    };
    let clocked = tx.reason == FlushReason::Clocked;
    let overdue = held.is_some_and(|t| now.saturating_duration_since(t) >= CLOCK_BOUND);
    let in_flight = clocked
        && !overdue
        // Bytes held already mean data in flight (or the check after the send finds out).
        && (held.is_some() || {
            core.on_clock_check();
            sock.unacknowledged().is_ok_and(|n| n > 0)
        });
    if !in_flight {
        let r = drive(core, sock, now);
        if matches!(r, Ok(Drive::Idle)) {
            // The last send went without MSG_MORE: the kernel sent everything it held.
            *held = None;
        }
        return r;
    }
    let sent_before = core.stats().bytes_sent;
    let r = drive(core, &mut Holding(sock), now);
    core.on_held_for_ack();
    let ours = core.stats().bytes_sent - sent_before;
    core.on_clock_check();
    let stranded = match sock.unsent() {
        Ok(0) => {
            *held = None;
            false
        }
        Ok(unsent) => {
            core.on_clock_check();
            match sock.unacknowledged() {
                Ok(unacked) if unacked > unsent => {
                    // Something is in flight: its ACK sends what is held. Only this send's
                    // bytes held: the older ones have left, so the bound restarts now.
                    if u64::from(unsent) <= ours {
                        *held = Some(now);
                    } else {
                        held.get_or_insert(now);
                    }
                    false
                }
                _ => true,
            }
        }
        Err(_) => true,
    };
    if stranded {
        push_held(core, held, sock)?;
    }
    r
}

/// Sends what the kernel holds for an ACK.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn push_held<S: ClockedSocket>(
    core: &mut Coalescer,
    held: &mut Option<Instant>,
    sock: &mut S,
) -> io::Result<()> {
    *held = None;
    core.on_push();
    sock.push()
}

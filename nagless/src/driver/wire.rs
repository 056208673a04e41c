//! How due bytes are moved ([`Wire`]: a gathered send, and what the socket under it can
//! tell: its segment size, its send-queue counters, its Nagle switch), and a wire as the core's
//! [`Transport`] ([`Sends`]); and the segment size a socket tells, read into the core
//! ([`refresh_segment`]).

use std::io::{self, IoSlice};

use crate::coalescer::{Coalescer, Transport};
use crate::sys::{self, Sock};

/// How due bytes are moved: a gathered send, and what the socket under it can tell.
pub(crate) trait Wire {
    /// Sends a prefix of `bufs` in one call; `more` asks the kernel to hold a partial segment
    /// (`MSG_MORE`). `WouldBlock` when the socket is full (tokio: `Pending`, with the fan-out
    /// waker registered by the socket).
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize>;

    /// The socket under the wire, when there is one: its segment size is read at the
    /// threshold.
    fn socket(&self) -> Option<Sock<'_>> {
        None
    }

    /// Whether the kernel can be asked to hold a send for the next ACK (`MSG_MORE` reaches
    /// it) and tells its send queue ([`FlushPolicy::clocked`](crate::FlushPolicy::clocked)).
    fn can_clock(&self) -> bool {
        cfg!(any(target_os = "linux", target_os = "android")) && self.socket().is_some()
    }

    /// Bytes written and not yet acknowledged, sent or not (`SIOCOUTQ`).
    fn unacknowledged(&mut self) -> io::Result<u32> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(fd) = self.socket() {
            return crate::sys::unacknowledged(fd);
        }
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Bytes written and not yet sent: what the kernel holds (`SIOCOUTQNSD`).
    fn unsent(&mut self) -> io::Result<u32> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(fd) = self.socket() {
            return crate::sys::unsent(fd);
        }
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Sends everything the kernel holds (`TCP_NODELAY` set again).
    fn push(&mut self) -> io::Result<()> {
        match self.socket().map(|fd| crate::sys::set_nodelay(fd, true)) {
            // A socket that is not TCP (a Unix socket) holds nothing for an ACK.
            Some(Err(e)) if crate::sys::not_tcp(&e) => Ok(()),
            Some(r) => r,
            None => Ok(()),
        }
    }

    /// Turns the kernel's Nagle algorithm on or off (`TCP_NODELAY` cleared or set); turning
    /// it off sends what it held.
    fn nagle(&mut self, on: bool) -> io::Result<()> {
        match self.socket() {
            Some(fd) => crate::sys::set_nodelay(fd, !on),
            None => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    /// What the kernel has sent of the stream in all, each byte once, and what it holds
    /// unsent (`TCP_INFO`'s `bytes_sent` less `bytes_retrans`, and `notsent_bytes`; Linux
    /// 4.19+).
    fn progress(&mut self) -> io::Result<(u64, u32)> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(fd) = self.socket() {
            let i = crate::tcp_info::TcpInfo::of(&fd)?;
            if let (Some(sent), Some(again), Some(unsent)) =
                (i.bytes_sent, i.bytes_retrans, i.notsent_bytes)
            {
                return Ok((sent.saturating_sub(again), unsent));
            }
        }
        Err(io::ErrorKind::Unsupported.into())
    }

    /// The caller will wait for socket space if the send that follows blocks: the tokio wire
    /// registers its task with the fan-out waker (before the send, so that readiness arriving
    /// after the socket said "full" finds it). Nothing for a blocking descriptor.
    fn wait_for_room(&mut self) {}

    /// The send did not block after all: the caller no longer waits.
    fn stop_waiting(&mut self) {}
}

/// A wire as the core's [`Transport`]; with `hold`, every send asks the kernel to hold it.
pub(crate) struct Sends<'w, W: ?Sized> {
    pub(crate) wire: &'w mut W,
    pub(crate) hold: bool,
}

impl<W: Wire + ?Sized> Transport for Sends<'_, W> {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        self.wire.send(bufs, more || self.hold)
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

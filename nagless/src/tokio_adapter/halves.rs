//! The halves of a split stream ([`ReadHalf`], [`WriteHalf`]), which share its queue, and
//! [`WriteHalf::reunite`], which puts them back together.

use std::io;
use std::sync::{Arc, Mutex};

use ::tokio::io::AsyncWrite;

use super::lane::Lane;
use super::shared::{lock, Shared};
use super::tasks::flush_on_drop;
use super::NaglessStream;
use crate::sys::AsOsSocket;
use crate::tcp_info::TcpInfo;

/// The read half of a split [`NaglessStream`]; reading flushes the write half's queue first.
pub struct ReadHalf<T: AsyncWrite + Unpin + 'static> {
    pub(super) shared: Arc<Mutex<Shared<T>>>,
}

/// The write half of a split [`NaglessStream`].
pub struct WriteHalf<T: AsyncWrite + Unpin + 'static> {
    pub(super) shared: Arc<Mutex<Shared<T>>>,
    pub(super) lane: Lane,
}

/// The halves given to [`WriteHalf::reunite`] came from different streams.
#[derive(Debug, thiserror::Error)]
#[error("tried to reunite halves that are not from the same stream")]
pub struct ReuniteError<T: AsyncWrite + Unpin + 'static>(pub ReadHalf<T>, pub WriteHalf<T>);

impl<T: AsyncWrite + Unpin + 'static> WriteHalf<T> {
    /// Puts the halves of one [`NaglessStream::into_split`] back together.
    pub fn reunite(self, read: ReadHalf<T>) -> Result<NaglessStream<T>, ReuniteError<T>> {
        if !Arc::ptr_eq(&self.shared, &read.shared) {
            return Err(ReuniteError(read, self));
        }
        let shared = Arc::clone(&self.shared);
        let lane = {
            let mut g = lock(&shared);
            g.handles += 1;
            Lane::new(g.core.policy(), false)
        };
        drop(read);
        drop(self);
        Ok(NaglessStream { shared, lane })
    }
}

impl<T: AsyncWrite + Unpin + 'static + AsOsSocket> ReadHalf<T> {
    /// A `TCP_INFO` snapshot of the socket (Linux; `ErrorKind::Unsupported` elsewhere).
    pub fn tcp_info(&self) -> io::Result<TcpInfo> {
        TcpInfo::of(&lock(&self.shared).io)
    }
}

impl<T: AsyncWrite + Unpin + 'static> ReadHalf<T> {
    /// Puts the halves of one [`NaglessStream::into_split`] back together.
    pub fn reunite(self, write: WriteHalf<T>) -> Result<NaglessStream<T>, ReuniteError<T>> {
        write.reunite(self)
    }
}

impl<T: AsyncWrite + Unpin + 'static> std::fmt::Debug for ReadHalf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadHalf { .. }")
    }
}

impl<T: AsyncWrite + Unpin + 'static> std::fmt::Debug for WriteHalf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteHalf { .. }")
    }
}

impl<T: AsyncWrite + Unpin + 'static> Drop for ReadHalf<T> {
    fn drop(&mut self) {
        flush_on_drop(&self.shared);
    }
}

//! The halves of a split stream ([`ReadHalf`], [`WriteHalf`]), which share its queue, and
//! [`WriteHalf::reunite`], which puts them back together.

use std::io;

use ::tokio::io::AsyncWrite;

use super::lane::Owner;
use super::shared::{lock, Shared};
use super::sync::{Arc, Mutex};
use super::tasks::flush_on_drop;
use super::NaglessStream;
use crate::driver::Plain;
use crate::sys::AsOsSocket;
use crate::tcp_info::TcpInfo;

/// The read half of a split [`NaglessStream`]; reading flushes the write half's queue first.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use nagless::tokio_adapter::NaglessStream;
///
/// let s = NaglessStream::connect("127.0.0.1:7000").await?;
/// let (mut rd, mut wr) = s.into_split(); // one queue: reading still flushes first
/// let writer = tokio::spawn(async move {
///     wr.write_all(b"PING\r\n").await?;
///     Ok::<_, std::io::Error>(wr)
/// });
/// let mut reply = [0u8; 64];
/// rd.read(&mut reply).await?;
/// let wr = writer.await.unwrap()?;
/// let s = rd.reunite(wr).expect("halves of one stream");
/// # drop(s); Ok(()) }
/// ```
pub struct ReadHalf<T: AsyncWrite + Unpin + 'static> {
    pub(super) shared: Arc<Mutex<Shared<T, Plain>>>,
}

/// The write half of a split [`NaglessStream`].
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use nagless::tokio_adapter::NaglessStream;
///
/// let s = NaglessStream::connect("127.0.0.1:7000").await?;
/// let (mut rd, mut wr) = s.into_split(); // one queue: reading still flushes first
/// let writer = tokio::spawn(async move {
///     wr.write_all(b"PING\r\n").await?;
///     Ok::<_, std::io::Error>(wr)
/// });
/// let mut reply = [0u8; 64];
/// rd.read(&mut reply).await?;
/// let wr = writer.await.unwrap()?;
/// let s = rd.reunite(wr).expect("halves of one stream");
/// # drop(s); Ok(()) }
/// ```
pub struct WriteHalf<T: AsyncWrite + Unpin + 'static> {
    /// The shared state, and this writing handle's lane.
    pub(super) owner: Owner<T>,
}

/// The halves given to [`WriteHalf::reunite`] came from different streams.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use nagless::tokio_adapter::NaglessStream;
///
/// let (rd_a, _wr_a) = NaglessStream::connect("127.0.0.1:7000").await?.into_split();
/// let (_rd_b, wr_b) = NaglessStream::connect("127.0.0.1:7000").await?.into_split();
/// let err = rd_a.reunite(wr_b).unwrap_err(); // not one stream's halves
/// let (rd_a, wr_b) = (err.0, err.1); // both handed back
/// # drop((rd_a, wr_b)); Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("tried to reunite halves that are not from the same stream")]
pub struct ReuniteError<T: AsyncWrite + Unpin + 'static>(pub ReadHalf<T>, pub WriteHalf<T>);

impl<T: AsyncWrite + Unpin + 'static> WriteHalf<T> {
    /// Puts the halves of one [`NaglessStream::into_split`] back together.
    pub fn reunite(self, read: ReadHalf<T>) -> Result<NaglessStream<T>, ReuniteError<T>> {
        let shared = self.owner.share();
        if !Arc::ptr_eq(&shared, &read.shared) {
            return Err(ReuniteError(read, self));
        }
        lock(&shared).handles += 1;
        drop(read);
        // Dropping the half hands its lane over and gives its handle up.
        drop(self);
        Ok(NaglessStream {
            owner: Owner::new(shared, false),
        })
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

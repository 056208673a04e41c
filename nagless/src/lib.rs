//! # nagless
//!
//! Application-level TCP send coalescing: the latency of `TCP_NODELAY` with the packet count
//! of perfect batching, without tuning.
//!
//! Nagle's algorithm (sender) and delayed ACK (receiver) together stall any exchange where a
//! small write waits behind unacknowledged data while the peer waits for that write before
//! answering: 40 ms per exchange on Linux. `TCP_NODELAY` removes the stall but sends one
//! packet per write; `TCP_CORK` saves packets but needs releasing at exactly the right
//! moment. nagless sets `TCP_NODELAY`, queues writes in user space and releases each burst
//! as one `sendmsg` at the moment only the application knows: before it reads
//! ([`FlushPolicy`]'s before-read point), when a full segment is ready, at a short hard
//! deadline, or when the caller says so.
//!
//! ## Layers
//! - [`Coalescer`]: the sans-IO state machine, pure and deterministic.
//! - A thin syscall layer (private), one file per OS family (Linux; macOS and the BSDs;
//!   Windows through Winsock): the gathered send, `TCP_NODELAY`, "input waiting", the segment
//!   size.
//! - [`NaglessStream`]: the std wrapper (`Read + Write`), and [`Sender`] for event loops.
//! - `nagless::tokio_adapter::NaglessStream` (feature `tokio`): `AsyncRead + AsyncWrite`.
//! - `nagless::tls::TlsStream` (feature `tls`): rustls driven by the coalescer, so that each
//!   flush seals the queued plaintext as one TLS record (or full records) and sends it with
//!   one `sendmsg`; `nagless::tokio_tls::TlsStream` (features `tls` and `tokio`) is its async
//!   twin, for hyper and the other tokio stacks. Handshake, alerts and key updates are sent at
//!   once; close_notify follows every byte.
//!
//! ## Feature flags
//!
//! None is on by default.
//!
//! | feature | adds |
//! |---|---|
//! | `tokio` | `nagless::tokio_adapter` (`NaglessStream`: `AsyncRead + AsyncWrite`, its split halves, `accept`), for tokio, hyper and tonic |
//! | `tls` | `nagless::tls::TlsStream`: rustls sealed at each flush point, one TLS record per burst; with `tokio` also `nagless::tokio_tls::TlsStream` |
//!
//! ## Example
//! ```no_run
//! use std::io::{Read, Write};
//! let mut s = nagless::NaglessStream::connect("127.0.0.1:7000")?;
//! s.write_all(b"header")?;   // queued
//! s.write_all(b"body")?;     // queued
//! let mut reply = [0u8; 100];
//! s.read(&mut reply)?;       // both leave as one segment, then we read
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

// The modules are private: the items a user needs are re-exported below, each at one path
// (`scripts/public-api`, run by CI, checks the list against `public-api.txt`). The async and TLS streams
// keep modules of their own, as their types share the std stream's names.
mod clock;
mod coalescer;
mod driver;
mod io_glue;
mod policy;
mod queue;
mod stream;
mod sys;
mod tcp_info;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "tokio")]
pub mod tokio_adapter;
#[cfg(all(feature = "tls", feature = "tokio"))]
pub mod tokio_tls;

pub use crate::coalescer::{drive, Coalescer, Drive, Stats, Transmit, Transport, MAX_IOV};
pub use crate::policy::{
    FlushPolicy, FlushReason, Linger, Urgency, DEFAULT_HIGH_WATER, DEFAULT_LINGER,
    DEFAULT_THRESHOLD,
};
pub use crate::stream::{IntoInnerError, NaglessStream, Sender};
pub use crate::sys::{AsOsSocket, Sock};
pub use crate::tcp_info::{CaState, TcpInfo, TcpState};

/// The README's Rust examples, compiled as doc tests so that they cannot drift from the API.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The crate's own README (the crate page of crates.io), compiled as doc tests too.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct CrateReadmeDoctests;

/// The Rust examples of `docs/library.md`, compiled as doc tests too.
#[doc = include_str!("../../docs/library.md")]
#[cfg(doctest)]
pub struct LibraryDocDoctests;

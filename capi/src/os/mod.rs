//! What differs per OS: the socket's C type, `struct iovec`, the error codes, and the two
//! calls the API makes on the caller's socket itself (the rest goes through the library).

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

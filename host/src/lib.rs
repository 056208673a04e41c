//! # nagless-host
//!
//! What nagless's tools read of the host they run on, in one place: `nagless watch` and
//! `nagless fix` (and `nagless version --verbose`, `nagless run`) ask here rather than each
//! reading /proc its own way.
//!
//! - [`text`]: what /proc's files say, read from their text: pure, allocation-free parsers
//!   (the shim uses some, inside the programs it runs under);
//! - [`process`]: processes ([`Proc`], a /proc to read: the host's, or a fake tree in
//!   tests), their parents, states, cgroups, names and status;
//! - [`fd`]: the sockets a process holds, its namespace's TCP tables;
//! - [`ns`]: network namespaces, and doing something inside one;
//! - [`caps`]: capabilities, and what each kernel feature of the tools needs;
//! - [`bpf`]: why the kernel refused a BPF load ([`BpfError`], with its errno).
//!
//! The system calls are in `sys`, the crate's only unsafe code.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod bpf;
pub mod caps;
pub mod fd;
pub mod ns;
pub mod process;
mod sys;
#[cfg(test)]
mod testing;
pub mod text;

pub use bpf::BpfError;
pub use caps::{Cap, Caps};
pub use process::{Pid, Proc};

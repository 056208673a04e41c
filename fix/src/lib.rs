//! # nagless-fix
//!
//! Repairs a running program's Nagle/delayed-ACK stalls from the operator's side, with no
//! restart and no change to the program (static, setuid, in a container, all alike): sets
//! TCP_NODELAY (the sender's stall) and/or bounds the delayed ACK (the receiver's side, for
//! peers that cannot be changed) on the connections of a process, a cgroup, a systemd unit
//! or a container.
//!
//! Two halves reach the connections:
//! - [`existing`]: the connections open now, through copies of the processes' descriptors
//!   (`pidfd_getfd`), put back as they were when the fix ends;
//! - [`attach`]: every new one, by a BPF `sock_ops` program on the selection's cgroup that
//!   sets the options as each connection is established (fix/bpf/fix.bpf.c).
//!
//! [`plan`] checks what is asked (pure); [`target`] resolves the selection; [`observe`]
//! chooses the fix from what `nagless watch` sees when none is asked for; [`policy`] reads
//! a fleet's rules, declared once, and decides which one a workload falls under (pure); [`ledger`]
//! notes what a policy's node agent changed, by rule, for its undo, and [`trial`] whether
//! a rule stays or is taken back by its stall rate (both pure). `docs/fix.md`
//! says how it works and what it cannot do.

#![warn(unreachable_pub)]

pub mod attach;
pub mod existing;
pub mod ledger;
pub mod observe;
pub mod plan;
pub mod policy;
mod sys;
pub mod target;
pub mod trial;

pub use plan::{Action, Ports};
pub use target::{Selector, Target};

/// The kernel's timer tick (a delayed-ACK bound must be at least two).
pub fn tick() -> std::time::Duration {
    sys::tick()
}

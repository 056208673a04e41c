//! What the kernel programs counted: `enum counter` of watch/bpf/holds.bpf.c indexes the
//! per-CPU `counters` map; [`Counters`] mirrors it as a `#[repr(C)]` struct, one `u64` per
//! counter in the enum's order (asserted at compile time), read from the map index by index.

use std::mem::offset_of;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The kernel programs' counters (summed over CPUs), in the order of holds.bpf.c's `enum
/// counter`.
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    FromBytes,
    IntoBytes,
    Immutable,
    KnownLayout,
)]
pub struct Counters {
    /// Writes held behind unacknowledged data, or by their sender's own cork (holds begun).
    pub(crate) holds: u64,
    /// Holds released by an ACK.
    pub(crate) released: u64,
    /// Holds whose bytes left without an ACK releasing them (NODELAY set, uncork, a timer),
    /// corks among them that lasted less than the kernel's ceiling.
    pub(crate) sent_without_ack: u64,
    /// Holds long enough to be stalls, sent to userspace.
    pub(crate) reported: u64,
    /// Reports lost to a full ring buffer.
    pub lost: u64,
    /// Short holds a prompt ACK released, added up per socket (ACK-clocked evidence).
    pub(crate) clocked: u64,
    /// Sockets' counters sent up as a program closed them (the waits of sockets closed
    /// between two walks).
    pub(crate) closes: u64,
    /// Those lost to a full ring buffer: their counts since the last walk are lost.
    pub closes_lost: u64,
}

/// `N_COUNTERS` of holds.bpf.c: how many counters the map holds.
pub(super) const N_COUNTERS: usize = 8;

/// `enum counter` of holds.bpf.c, in order: each member's name there, and the field of
/// [`Counters`] (its offset) that holds it.
const MEMBERS: [(&str, usize); N_COUNTERS] = [
    ("HOLDS", offset_of!(Counters, holds)),
    ("RELEASED", offset_of!(Counters, released)),
    ("SENT_NO_ACK", offset_of!(Counters, sent_without_ack)),
    ("REPORTED", offset_of!(Counters, reported)),
    ("LOST", offset_of!(Counters, lost)),
    ("CLOCKED", offset_of!(Counters, clocked)),
    ("CLOSES", offset_of!(Counters, closes)),
    ("CLOSES_LOST", offset_of!(Counters, closes_lost)),
];

// Counter `i` of the map is the `i`th u64 of the struct.
const _: () = assert!(nagless_host::bpf::counters_in_order(
    &MEMBERS,
    size_of::<Counters>()
));

impl Counters {
    /// The counters from the map's values, by index (`value(i)`: counter `i` summed over
    /// CPUs).
    pub(super) fn read(value: impl Fn(u32) -> u64) -> Counters {
        let mut c = [0u64; N_COUNTERS];
        for (i, v) in c.iter_mut().enumerate() {
            *v = value(i as u32);
        }
        zerocopy::transmute!(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagless_test_support::bpf_object::c_enum;

    #[test]
    fn the_counters_are_the_c_enums_in_its_order() {
        let source = include_str!("../../bpf/holds.bpf.c");
        let mut want: Vec<&str> = MEMBERS.iter().map(|m| m.0).collect();
        want.push("N_COUNTERS");
        assert_eq!(c_enum(source, "counter"), want);
        let c = Counters::read(|i| u64::from(i) * 10);
        assert_eq!((c.holds, c.sent_without_ack, c.clocked), (0, 20, 50));
    }
}

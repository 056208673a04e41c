//! The flow table ([`FlowTable`]): live flows by their 4-tuple, packed the same way for both
//! directions ([`FlowKey`]), with a fast hasher. When a flow enters and leaves the table is
//! the [`Analyzer`](super::Analyzer)'s business.

use std::collections::HashMap;
use std::net::IpAddr;

use super::flow::Flow;
use crate::packet::Segment;

/// The live flows, by 4-tuple. Boxed: the table then holds a pointer per flow, so that its
/// doubling (both tables live at once) costs little, not a copy of every flow.
pub(super) type FlowTable = HashMap<FlowKey, Box<Flow>, KeyHashing>;

/// A flow's 4-tuple in one order for both directions, packed for fast hashing.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct FlowKey {
    lo: u128,
    hi: u128,
    ports: u32,
}

impl FlowKey {
    pub(super) fn of(s: &Segment) -> FlowKey {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(v) => u128::from(v.to_bits()),
            IpAddr::V6(v) => v.to_bits() ^ (1 << 127),
        };
        let (a, b) = ((bits(s.src.0), s.src.1), (bits(s.dst.0), s.dst.1));
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        FlowKey {
            lo: lo.0,
            hi: hi.0,
            ports: u32::from(lo.1) << 16 | u32::from(hi.1),
        }
    }
}

/// A multiply-rotate hash for [`FlowKey`], seeded at random per analysis (SipHash, the
/// default, took a quarter of the doctor's time).
#[derive(Clone, Copy)]
pub(super) struct KeyHashing(u64);

impl Default for KeyHashing {
    /// A new random seed.
    fn default() -> KeyHashing {
        use std::hash::BuildHasher as _;
        KeyHashing(std::collections::hash_map::RandomState::new().hash_one(0u8) | 1)
    }
}

impl std::hash::BuildHasher for KeyHashing {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.0)
    }
}

pub(super) struct KeyHasher(u64);

impl KeyHasher {
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(26) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(a));
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }
    fn write_u128(&mut self, x: u128) {
        self.add(x as u64);
        self.add((x >> 64) as u64);
    }
    fn finish(&self) -> u64 {
        self.0 ^ self.0 >> 29
    }
}

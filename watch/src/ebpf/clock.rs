//! One socket's short holds an ACK released (the evidence of an ACK-clocked connection):
//! `struct clock` of watch/bpf/holds.bpf.c, a value of its `clocks` map keyed by the
//! socket's cookie, mirrored by a `#[repr(C)]` struct whose layout is asserted at compile
//! time and read out of the map's bytes.

use std::net::IpAddr;

use super::event::{comm, ip};

use zerocopy::{FromBytes, Immutable, KnownLayout};

/// Size of `struct clock` in holds.bpf.c.
pub(crate) const CLOCK_SIZE: usize = 88;

/// A socket's short ACK-released holds since the map was last drained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Clock {
    /// The socket's cookie (the map's key).
    pub(crate) cookie: u64,
    /// The time the held writes waited, summed, ns.
    pub(crate) held_ns: u64,
    /// How many there were.
    pub(crate) count: u64,
    /// The first writer's cgroup id.
    pub(crate) cgroup: u64,
    /// The first writer's process id.
    pub(crate) pid: u32,
    /// Its user id.
    pub(crate) uid: u32,
    /// Local address and port.
    pub(crate) local: (IpAddr, u16),
    /// Remote address and port.
    pub(crate) remote: (IpAddr, u16),
    /// The first writing task's name.
    pub(crate) comm: String,
}

/// `struct clock` of holds.bpf.c, field for field (native byte order).
#[repr(C)]
#[derive(Clone, Copy, FromBytes, KnownLayout, Immutable)]
struct RawClock {
    held_ns: u64,
    count: u64,
    cgroup: u64,
    pid: u32,
    uid: u32,
    family: u16,
    /// Host order (as is `dport`).
    sport: u16,
    dport: u16,
    _pad: [u8; 2],
    /// IPv4 in the first 4 bytes.
    saddr: [u8; 16],
    daddr: [u8; 16],
    comm: [u8; 16],
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<RawClock>() == CLOCK_SIZE);
    assert!(offset_of!(RawClock, held_ns) == 0);
    assert!(offset_of!(RawClock, count) == 8);
    assert!(offset_of!(RawClock, cgroup) == 16);
    assert!(offset_of!(RawClock, pid) == 24);
    assert!(offset_of!(RawClock, uid) == 28);
    assert!(offset_of!(RawClock, family) == 32);
    assert!(offset_of!(RawClock, sport) == 34);
    assert!(offset_of!(RawClock, dport) == 36);
    assert!(offset_of!(RawClock, saddr) == 40);
    assert!(offset_of!(RawClock, daddr) == 56);
    assert!(offset_of!(RawClock, comm) == 72);
};

impl Clock {
    /// Parses the `struct clock` of socket `cookie` (native byte order); `None` if `b` is too
    /// short.
    pub(crate) fn parse(cookie: u64, b: &[u8]) -> Option<Clock> {
        let (r, _) = RawClock::read_from_prefix(b).ok()?;
        Some(Clock {
            cookie,
            held_ns: r.held_ns,
            count: r.count,
            cgroup: r.cgroup,
            pid: r.pid,
            uid: r.uid,
            local: (ip(r.family, r.saddr), r.sport),
            remote: (ip(r.family, r.daddr), r.dport),
            comm: comm(&r.comm),
        })
    }

    /// The local address as sampling shows it (IPv4-mapped IPv6 as IPv4).
    #[cfg(test)]
    pub(crate) fn local_addr(&self) -> std::net::SocketAddr {
        super::event::canonical(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagless_test_support::bpf_object::c_struct;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn the_mirror_is_holds_bpf_cs_struct_clock() {
        let source = include_str!("../../bpf/holds.bpf.c");
        assert_eq!(
            c_struct(source, "clock"),
            nagless_test_support::mirror_layout!(RawClock: held_ns, count, cgroup, pid, uid,
                family, sport, dport, _pad, saddr, daddr, comm)
        );
        assert_eq!(size_of::<RawClock>(), CLOCK_SIZE);
    }

    #[test]
    fn a_clock_parses_at_the_c_offsets() {
        let mut b = vec![0u8; CLOCK_SIZE];
        b[0..8].copy_from_slice(&610_000_000u64.to_ne_bytes());
        b[8..16].copy_from_slice(&14_000u64.to_ne_bytes());
        b[24..28].copy_from_slice(&1234u32.to_ne_bytes());
        b[28..32].copy_from_slice(&1000u32.to_ne_bytes());
        b[32..34].copy_from_slice(&2u16.to_ne_bytes());
        b[34..36].copy_from_slice(&40000u16.to_ne_bytes());
        b[36..38].copy_from_slice(&6379u16.to_ne_bytes());
        b[40..44].copy_from_slice(&[127, 0, 0, 1]);
        b[56..60].copy_from_slice(&[127, 0, 0, 2]);
        b[72..79].copy_from_slice(b"python3");
        let c = Clock::parse(9, &b).unwrap();
        assert_eq!(
            c,
            Clock {
                cookie: 9,
                held_ns: 610_000_000,
                count: 14_000,
                cgroup: 0,
                pid: 1234,
                uid: 1000,
                local: (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 40000),
                remote: (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 6379),
                comm: "python3".into(),
            }
        );
        assert!(Clock::parse(9, &b[..CLOCK_SIZE - 1]).is_none());
        // IPv6, and a name with an escape in it.
        b[32..34].copy_from_slice(&10u16.to_ne_bytes());
        b[40..56].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
        b[72..75].copy_from_slice(b"a\x1bb");
        let c = Clock::parse(9, &b).unwrap();
        assert_eq!(c.local_addr(), "[::1]:40000".parse().unwrap());
        assert!(!c.comm.contains('\x1b'), "{}", c.comm);
    }
}

//! One report of the kernel programs: `struct event` of watch/bpf/holds.bpf.c, mirrored by
//! a `#[repr(C)]` struct whose layout is asserted at compile time, read out of the ring
//! buffer's bytes, and judged by the stall rule.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use zerocopy::{FromBytes, Immutable, KnownLayout};

use crate::detect::{HeldWrite, Release};

/// One report from the kernel: a write held until an ACK released it, at least
/// [`DELAYED_ACK_MIN_US`](nagless_stall_rule::DELAYED_ACK_MIN_US) later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The socket's cookie (unique while the system runs).
    pub(crate) cookie: u64,
    /// From the held write to the ACK that released it, ns.
    pub(crate) hold_ns: u64,
    /// The writer's cgroup id.
    pub(crate) cgroup: u64,
    /// The writer's process and thread ids, uid.
    pub(crate) pid: u32,
    /// Thread id.
    pub(crate) tid: u32,
    /// User id.
    pub(crate) uid: u32,
    /// Most bytes held at once.
    pub(crate) held: u32,
    /// The sender's MSS.
    pub(crate) mss: u32,
    /// The path's round trip (the windowed minimum), µs.
    pub(crate) min_rtt_us: u32,
    /// The smoothed round trip, µs.
    pub(crate) srtt_us: u32,
    /// Local address and port.
    pub(crate) local: (IpAddr, u16),
    /// Remote address and port.
    pub(crate) remote: (IpAddr, u16),
    /// The peer advertised a zero window during the hold.
    pub(crate) zero_window: bool,
    /// The hold began with nothing in flight: the sender's own cork (`TCP_CORK`,
    /// `MSG_MORE`), which the kernel's ceiling released (no ACK did), not Nagle's.
    pub(crate) cork: bool,
    /// The socket was in loss recovery during the hold.
    pub(crate) loss_recovery: bool,
    /// The writing task's name.
    pub(crate) comm: String,
    /// From the last segment that arrived during the hold to the release, µs (0 if none did).
    pub(crate) release_gap_us: u32,
    /// From the sending of the newest segment in flight when the hold began (the one whose
    /// ACK the write waited for) to the release, ns (0 if unknown).
    pub(crate) wait_ns: u64,
    /// When an ACK released the write (`bpf_ktime_get_ns`: `CLOCK_MONOTONIC`), ns.
    pub(crate) released_ns: u64,
}

/// Size of `struct event` in holds.bpf.c.
pub(crate) const EVENT_SIZE: usize = 128;

/// `struct event` of holds.bpf.c, field for field: what the kernel writes to the ring buffer
/// (native byte order). The asserts below hold it to the C layout (its `_Static_assert` and
/// the offsets its comments give).
#[repr(C)]
#[derive(Clone, Copy, FromBytes, KnownLayout, Immutable)]
struct RawEvent {
    cookie: u64,
    hold_ns: u64,
    cgroup: u64,
    pid: u32,
    tid: u32,
    uid: u32,
    held: u32,
    mss: u32,
    min_rtt_us: u32,
    srtt_us: u32,
    family: u16,
    /// Host order (as is `dport`).
    sport: u16,
    dport: u16,
    /// [`FLAG_ZERO_WINDOW`], [`FLAG_CORK`].
    flags: u8,
    loss: u8,
    /// IPv4 in the first 4 bytes.
    saddr: [u8; 16],
    daddr: [u8; 16],
    comm: [u8; 16],
    gap_us: u32,
    wait_ns: u64,
    released_ns: u64,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<RawEvent>() == EVENT_SIZE);
    assert!(offset_of!(RawEvent, cookie) == 0);
    assert!(offset_of!(RawEvent, hold_ns) == 8);
    assert!(offset_of!(RawEvent, cgroup) == 16);
    assert!(offset_of!(RawEvent, pid) == 24);
    assert!(offset_of!(RawEvent, tid) == 28);
    assert!(offset_of!(RawEvent, uid) == 32);
    assert!(offset_of!(RawEvent, held) == 36);
    assert!(offset_of!(RawEvent, mss) == 40);
    assert!(offset_of!(RawEvent, min_rtt_us) == 44);
    assert!(offset_of!(RawEvent, srtt_us) == 48);
    assert!(offset_of!(RawEvent, family) == 52);
    assert!(offset_of!(RawEvent, sport) == 54);
    assert!(offset_of!(RawEvent, dport) == 56);
    assert!(offset_of!(RawEvent, flags) == 58);
    assert!(offset_of!(RawEvent, loss) == 59);
    assert!(offset_of!(RawEvent, saddr) == 60);
    assert!(offset_of!(RawEvent, daddr) == 76);
    assert!(offset_of!(RawEvent, comm) == 92);
    assert!(offset_of!(RawEvent, gap_us) == 108);
    assert!(offset_of!(RawEvent, wait_ns) == 112);
    assert!(offset_of!(RawEvent, released_ns) == 120);
};

/// `AF_INET` in the `family` of holds.bpf.c's structs (its `#define`).
const AF_INET: u16 = 2;

/// The event's flags (holds.bpf.c's `#define`s): the peer's window was shut during the
/// hold; the hold began with nothing in flight (a cork).
const FLAG_ZERO_WINDOW: u8 = 1;
const FLAG_CORK: u8 = 2;

/// An address as sampling shows it: IPv4-mapped IPv6 as IPv4.
pub(super) fn canonical((ip, port): (IpAddr, u16)) -> SocketAddr {
    SocketAddr::new(ip.to_canonical(), port)
}

/// An address of holds.bpf.c's structs: IPv4 in the first 4 bytes when `family` is
/// `AF_INET`, else IPv6.
pub(super) fn ip(family: u16, a: [u8; 16]) -> IpAddr {
    if family == AF_INET {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(a))
    }
}

/// A task name of holds.bpf.c's structs (NUL-terminated unless it fills all 16 bytes),
/// shown, never obeyed ([`crate::procs::printable`]).
pub(super) fn comm(c: &[u8; 16]) -> String {
    let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    crate::procs::printable(&String::from_utf8_lossy(&c[..end]))
}

impl Event {
    /// Parses a `struct event` (native byte order); `None` if `b` is too short.
    pub(crate) fn parse(b: &[u8]) -> Option<Event> {
        // A copy out of the ring buffer's bytes, which need not be aligned.
        let (r, _) = RawEvent::read_from_prefix(b).ok()?;
        Some(Event {
            cookie: r.cookie,
            hold_ns: r.hold_ns,
            cgroup: r.cgroup,
            pid: r.pid,
            tid: r.tid,
            uid: r.uid,
            held: r.held,
            mss: r.mss,
            min_rtt_us: r.min_rtt_us,
            srtt_us: r.srtt_us,
            local: (ip(r.family, r.saddr), r.sport),
            remote: (ip(r.family, r.daddr), r.dport),
            zero_window: r.flags & FLAG_ZERO_WINDOW != 0,
            cork: r.flags & FLAG_CORK != 0,
            loss_recovery: r.loss != 0,
            comm: comm(&r.comm),
            release_gap_us: r.gap_us,
            wait_ns: r.wait_ns,
            released_ns: r.released_ns,
        })
    }

    /// The local address as sampling shows it (IPv4-mapped IPv6 as IPv4).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        canonical(self.local)
    }

    /// The remote address as sampling shows it (IPv4-mapped IPv6 as IPv4).
    pub(crate) fn remote_addr(&self) -> SocketAddr {
        canonical(self.remote)
    }

    /// The stall this hold was, judged by the stall rule; `None` if it was not one.
    #[cfg(test)]
    pub(crate) fn stall(&self, at_us: u64) -> Option<crate::detect::Stall> {
        match self.release(at_us)? {
            Release::Stall(s) => Some(s),
            Release::Clocked { .. } => None,
        }
    }

    /// The stall this hold was, or the clocked write (a long path's prompt ACK released it);
    /// `None` if neither.
    pub(crate) fn release(&self, at_us: u64) -> Option<Release> {
        let rtt_us = if self.min_rtt_us > 0 && self.min_rtt_us != u32::MAX {
            self.min_rtt_us
        } else {
            self.srtt_us
        };
        // How late the ACK came counts from when the segment it acknowledges left, as the
        // doctor counts it: that can be before the held write (a busy writer writes its second
        // part late), never after.
        HeldWrite {
            held: self.held,
            mss: self.mss,
            hold_us: self.hold_ns.max(self.wait_ns) / 1000,
            rtt_us: u64::from(rtt_us),
            release_gap_us: u64::from(self.release_gap_us),
            zero_window: self.zero_window,
            loss_recovery: self.loss_recovery,
        }
        .release(at_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagless_test_support::bpf_object::{c_define, c_struct};

    #[test]
    fn the_mirror_is_holds_bpf_cs_struct_event() {
        let source = include_str!("../../bpf/holds.bpf.c");
        assert_eq!(
            c_struct(source, "event"),
            nagless_test_support::mirror_layout!(RawEvent: cookie, hold_ns, cgroup, pid, tid,
                uid, held, mss, min_rtt_us, srtt_us, family, sport, dport, flags, loss,
                saddr, daddr, comm, gap_us, wait_ns, released_ns)
        );
        assert_eq!(size_of::<RawEvent>(), EVENT_SIZE);
        assert_eq!(c_define(source, "AF_INET"), Some(AF_INET.into()));
        assert_eq!(
            c_define(source, "FLAG_ZERO_WINDOW"),
            Some(FLAG_ZERO_WINDOW.into())
        );
        assert_eq!(c_define(source, "FLAG_CORK"), Some(FLAG_CORK.into()));
    }

    fn raw() -> Vec<u8> {
        let mut b = vec![0u8; EVENT_SIZE];
        b[0..8].copy_from_slice(&7u64.to_ne_bytes());
        b[8..16].copy_from_slice(&44_000_000u64.to_ne_bytes());
        b[24..28].copy_from_slice(&1234u32.to_ne_bytes());
        b[36..40].copy_from_slice(&100u32.to_ne_bytes());
        b[40..44].copy_from_slice(&65483u32.to_ne_bytes());
        b[44..48].copy_from_slice(&20u32.to_ne_bytes());
        b[52..54].copy_from_slice(&2u16.to_ne_bytes());
        b[54..56].copy_from_slice(&8000u16.to_ne_bytes());
        b[56..58].copy_from_slice(&40000u16.to_ne_bytes());
        b[60..64].copy_from_slice(&[127, 0, 0, 1]);
        b[76..80].copy_from_slice(&[127, 0, 0, 2]);
        b[92..98].copy_from_slice(b"python");
        b
    }

    #[test]
    fn an_event_parses_and_is_judged_by_the_stall_rule() {
        let mut b = raw();
        b[120..128].copy_from_slice(&9_000_000_000u64.to_ne_bytes());
        let e = Event::parse(&b).unwrap();
        assert_eq!(e.cookie, 7);
        assert_eq!(e.released_ns, 9_000_000_000);
        assert_eq!(e.pid, 1234);
        assert_eq!(e.local, (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8000));
        assert_eq!(e.remote, (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 40000));
        assert_eq!(e.comm, "python");
        let s = e.stall(5).unwrap();
        assert_eq!(s.lost_us, 44_000 - 20);
        assert_eq!(s.held, 100);
        // A full segment, loss recovery, a zero window: not stalls.
        for (held, loss, zw) in [
            (65483, false, false),
            (100, true, false),
            (100, false, true),
        ] {
            let e = Event {
                held,
                loss_recovery: loss,
                zero_window: zw,
                ..e.clone()
            };
            assert!(e.stall(5).is_none(), "{e:?}");
        }
        assert!(Event::parse(&raw()[..EVENT_SIZE - 1]).is_none());
        // The flags: a shut window, a cork.
        let mut b = raw();
        b[58] = FLAG_ZERO_WINDOW;
        let e = Event::parse(&b).unwrap();
        assert!(e.zero_window && !e.cork);
        b[58] = FLAG_CORK;
        let e = Event::parse(&b).unwrap();
        assert!(e.cork && !e.zero_window);
        // The ring buffer's bytes need not be aligned.
        let mut odd = vec![0u8];
        odd.extend(raw());
        assert_eq!(Event::parse(&odd[1..]), Event::parse(&raw()));
        // The ACK's lateness counts from when the segment it acknowledges was sent, when that
        // was before the held write; a short hold behind a late ACK is a stall.
        let mut b = raw();
        b[8..16].copy_from_slice(&25_000_000u64.to_ne_bytes());
        b[112..120].copy_from_slice(&50_000_000u64.to_ne_bytes());
        let e = Event::parse(&b).unwrap();
        assert_eq!(e.stall(5).unwrap().lost_us, 50_000 - 20);
    }
}

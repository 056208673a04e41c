//! One socket's counters as the `waits` iterator of watch/bpf/holds.bpf.c writes them (its
//! `struct waits`, mirrored by a `#[repr(C)]` struct whose layout is asserted at compile time),
//! and the kernel's tick rate that turns their jiffies into time.
//!
//! The iterator walks every process's open files once a refresh and writes each TCP socket
//! whose chronos moved since the jiffy it is given: the same busy, receive-window limited and
//! send-buffer limited times `tcp_info` reports (`tcp_get_info_chrono_stats` adds the running
//! one the same way), kept in jiffies, with the process that holds the socket.

use std::net::IpAddr;

use zerocopy::{FromBytes, Immutable, KnownLayout};

use super::event::{comm, ip};
use crate::waits::{Reading, Waits};

/// Size of `struct waits` in holds.bpf.c.
pub(crate) const WAITS_SIZE: usize = 176;

/// One socket's counters, and the process holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SocketWaits {
    pub(crate) cookie: u64,
    /// The holding task's cgroup id.
    pub(crate) cgroup: u64,
    /// Busy, receive-window limited and send-buffer limited time, jiffies.
    pub(crate) busy_j: u64,
    pub(crate) rwnd_j: u64,
    pub(crate) sndbuf_j: u64,
    /// `jiffies_64` and `CLOCK_MONOTONIC` (ns) when it was read.
    pub(crate) jiffies: u64,
    pub(crate) now_ns: u64,
    pub(crate) retransmits: u32,
    /// Timeouts in a row (`tcp_info`'s `retransmits`), and zero-window probes in a row
    /// (`probes`).
    pub(crate) timeouts: u8,
    pub(crate) probes: u8,
    /// `icsk_backoff`: how many times the next timeout's wait was doubled.
    pub(crate) backoff: u8,
    /// The turns its storage kept, and the age of the turn open.
    pub(crate) turns: crate::waits::Turned,
    /// The least round trip, µs.
    pub(crate) min_rtt_us: u32,
    pub(crate) pid: u32,
    pub(crate) uid: u32,
    pub(crate) local: (IpAddr, u16),
    pub(crate) remote: (IpAddr, u16),
    pub(crate) comm: String,
}

/// `struct waits` of holds.bpf.c, field for field (native byte order).
#[repr(C)]
#[derive(Clone, Copy, FromBytes, KnownLayout, Immutable)]
struct RawWaits {
    cookie: u64,
    cgroup: u64,
    busy_j: u64,
    rwnd_j: u64,
    sndbuf_j: u64,
    jiffies: u64,
    now_ns: u64,
    total_retrans: u32,
    pid: u32,
    uid: u32,
    family: u16,
    /// Host order (as is `dport`).
    sport: u16,
    dport: u16,
    timeouts: u8,
    probes: u8,
    /// IPv4 in the first 4 bytes.
    saddr: [u8; 16],
    daddr: [u8; 16],
    comm: [u8; 16],
    backoff: u8,
    _pad2: [u8; 3],
    own_ns: u64,
    peer_ns: u64,
    own_open_ns: u64,
    peer_open_ns: u64,
    own_turns: u32,
    peer_turns: u32,
    min_rtt_us: u32,
    _pad3: u32,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<RawWaits>() == WAITS_SIZE);
    assert!(offset_of!(RawWaits, cgroup) == 8);
    assert!(offset_of!(RawWaits, busy_j) == 16);
    assert!(offset_of!(RawWaits, jiffies) == 40);
    assert!(offset_of!(RawWaits, now_ns) == 48);
    assert!(offset_of!(RawWaits, total_retrans) == 56);
    assert!(offset_of!(RawWaits, pid) == 60);
    assert!(offset_of!(RawWaits, family) == 68);
    assert!(offset_of!(RawWaits, timeouts) == 74);
    assert!(offset_of!(RawWaits, saddr) == 76);
    assert!(offset_of!(RawWaits, daddr) == 92);
    assert!(offset_of!(RawWaits, comm) == 108);
    assert!(offset_of!(RawWaits, backoff) == 124);
    assert!(offset_of!(RawWaits, own_ns) == 128);
    assert!(offset_of!(RawWaits, own_open_ns) == 144);
    assert!(offset_of!(RawWaits, own_turns) == 160);
    assert!(offset_of!(RawWaits, min_rtt_us) == 168);
};

impl SocketWaits {
    /// Every record of a walk's output (whole records only).
    pub(crate) fn parse_all(b: &[u8]) -> Vec<SocketWaits> {
        b.chunks_exact(WAITS_SIZE).filter_map(Self::parse).collect()
    }

    /// Parses one `struct waits` (native byte order); `None` if `b` is too short.
    pub(crate) fn parse(b: &[u8]) -> Option<SocketWaits> {
        let (r, _) = RawWaits::read_from_prefix(b).ok()?;
        Some(SocketWaits {
            cookie: r.cookie,
            cgroup: r.cgroup,
            busy_j: r.busy_j,
            rwnd_j: r.rwnd_j,
            sndbuf_j: r.sndbuf_j,
            jiffies: r.jiffies,
            now_ns: r.now_ns,
            retransmits: r.total_retrans,
            timeouts: r.timeouts,
            probes: r.probes,
            backoff: r.backoff,
            turns: crate::waits::Turned {
                own_us: r.own_ns / 1000,
                own: u64::from(r.own_turns),
                peer_us: r.peer_ns / 1000,
                peer: u64::from(r.peer_turns),
                own_open_us: r.own_open_ns / 1000,
                peer_open_us: r.peer_open_ns / 1000,
            },
            // (`~0`: no round trip measured yet.)
            min_rtt_us: if r.min_rtt_us == u32::MAX {
                0
            } else {
                r.min_rtt_us
            },
            pid: r.pid,
            uid: r.uid,
            local: (ip(r.family, r.saddr), r.sport),
            remote: (ip(r.family, r.daddr), r.dport),
            comm: comm(&r.comm),
        })
    }

    /// Its counters, the times in jiffies ([`in_us`] turns what they count into `tcp_info`'s
    /// microseconds).
    pub(crate) fn reading_in_jiffies(&self) -> Reading {
        Reading::new(
            [self.busy_j, self.rwnd_j, self.sndbuf_j],
            u64::from(self.retransmits),
            [self.timeouts, self.probes, self.backoff],
            self.turns,
            u64::from(self.min_rtt_us),
        )
    }
}

/// Counts whose times are in jiffies, in microseconds at `hz` jiffies a second.
pub(crate) fn in_us(mut w: Waits, hz: u64) -> Waits {
    let us = |j: u64| j.saturating_mul(1_000_000) / hz.max(1);
    w.busy_us = us(w.busy_us);
    w.rwnd_limited_us = us(w.rwnd_limited_us);
    w.sndbuf_limited_us = us(w.sndbuf_limited_us);
    w
}

/// The kernel's tick rate as the walks find it: from one reading of `jiffies_64` and the
/// monotonic clock ([`tick_rate`]), else from two a second or more apart.
#[derive(Debug, Default)]
pub(crate) struct TickRate {
    hz: Option<u64>,
    first: Option<(u64, u64)>,
}

impl TickRate {
    /// Learns from `jiffies_64` and `CLOCK_MONOTONIC` (ns) read together.
    pub(crate) fn observe(&mut self, jiffies: u64, now_ns: u64) {
        if self.hz.is_some() {
            return;
        }
        self.hz = tick_rate(jiffies, now_ns);
        let &mut (j0, t0) = self.first.get_or_insert((jiffies, now_ns));
        if self.hz.is_none() && now_ns >= t0 + 1_000_000_000 {
            let per_s = jiffies.wrapping_sub(j0) as f64 * 1e9 / (now_ns - t0) as f64;
            // The rate within 3 % of what the two readings counted.
            self.hz = RATES
                .into_iter()
                .find(|&hz| (per_s - hz as f64).abs() <= hz as f64 * 0.03);
        }
    }

    /// The rate, once known.
    pub(crate) fn get(&self) -> Option<u64> {
        self.hz
    }
}

/// The tick rates Linux is built with (`CONFIG_HZ`).
const RATES: [u64; 4] = [100, 250, 300, 1000];

/// The kernel's tick rate, from `jiffies_64` and `CLOCK_MONOTONIC` (ns) read together:
/// `jiffies_64` starts 300 s' worth of ticks below 2^32 (`INITIAL_JIFFIES`, so that its low
/// 32 bits wrap early) and counts ticks from boot as the monotonic clock counts time, so the rate whose
/// count since boot is nearest the clock's is the one. `None` within a minute of 300 s after
/// boot, where every rate fits, and when no rate fits far better than the others (then the
/// counts are not what this assumes).
pub(crate) fn tick_rate(jiffies: u64, now_ns: u64) -> Option<u64> {
    let mut misses: Vec<(u64, u64)> = RATES
        .iter()
        .map(|&hz| {
            let ticks = jiffies.wrapping_add(300 * hz).wrapping_sub(1 << 32);
            let expected = (u128::from(now_ns) * u128::from(hz) / 1_000_000_000) as u64;
            (ticks.abs_diff(expected), hz)
        })
        .collect();
    // Within a minute of 300 s after boot, every rate's count from INITIAL_JIFFIES is alike.
    if now_ns.abs_diff(300_000_000_000) < 60_000_000_000 {
        return None;
    }
    misses.sort_unstable();
    let ((miss, hz), (next, _)) = (misses[0], misses[1]);
    // Within 10 s of ticks (the two counts start a moment apart at boot), and ten times
    // nearer than the next.
    (miss <= 10 * hz && next >= miss.saturating_mul(10).max(1)).then_some(hz)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagless_test_support::bpf_object::c_struct;
    use std::net::Ipv4Addr;

    #[test]
    fn the_mirror_is_holds_bpf_cs_struct_waits() {
        let source = include_str!("../../bpf/holds.bpf.c");
        assert_eq!(
            c_struct(source, "waits"),
            nagless_test_support::mirror_layout!(RawWaits: cookie, cgroup, busy_j, rwnd_j,
                sndbuf_j, jiffies, now_ns, total_retrans, pid, uid, family, sport, dport,
                timeouts, probes, saddr, daddr, comm, backoff, _pad2, own_ns, peer_ns,
                own_open_ns, peer_open_ns, own_turns, peer_turns, min_rtt_us, _pad3)
        );
    }

    #[test]
    fn a_record_parses_at_the_c_offsets_into_tcp_info_s_microseconds() {
        let mut b = vec![0u8; WAITS_SIZE];
        b[0..8].copy_from_slice(&77u64.to_ne_bytes());
        b[16..24].copy_from_slice(&500u64.to_ne_bytes());
        b[24..32].copy_from_slice(&250u64.to_ne_bytes());
        b[56..60].copy_from_slice(&3u32.to_ne_bytes());
        b[60..64].copy_from_slice(&4321u32.to_ne_bytes());
        b[68..70].copy_from_slice(&2u16.to_ne_bytes());
        b[70..72].copy_from_slice(&7778u16.to_ne_bytes());
        b[72..74].copy_from_slice(&51000u16.to_ne_bytes());
        b[74] = 2;
        b[76..80].copy_from_slice(&[127, 0, 0, 1]);
        b[108..115].copy_from_slice(b"python3");
        b[128..136].copy_from_slice(&750_000_000u64.to_ne_bytes());
        b[136..144].copy_from_slice(&2_000_000u64.to_ne_bytes());
        b[144..152].copy_from_slice(&40_000_000u64.to_ne_bytes());
        b[160..164].copy_from_slice(&5u32.to_ne_bytes());
        b[164..168].copy_from_slice(&4u32.to_ne_bytes());
        b[168..172].copy_from_slice(&60u32.to_ne_bytes());
        let mut two = b.clone();
        two.extend_from_slice(&b);
        two.extend_from_slice(&b[..10]); // a torn record is no record
        let all = SocketWaits::parse_all(&two);
        assert_eq!(all.len(), 2);
        let w = &all[0];
        assert_eq!(
            (w.cookie, w.pid, w.timeouts, w.retransmits),
            (77, 4321, 2, 3)
        );
        assert_eq!(w.local, (IpAddr::V4(Ipv4Addr::LOCALHOST), 7778));
        assert_eq!(w.remote.1, 51000);
        assert_eq!(w.comm, "python3");
        // 500 jiffies at 250 a second: 2 s busy, 1 s of it held back by the window.
        let r = in_us(w.reading_in_jiffies().since(None), 250);
        assert_eq!((r.busy_us, r.rwnd_limited_us), (2_000_000, 1_000_000));
        assert_eq!((r.retransmits, r.timeouts), (3, 2));
        // Its turns in µs (not jiffies), the one open, and its round trip.
        assert_eq!(
            (r.own_turn_us, r.own_turns, r.own_open_us),
            (750_000, 5, 40_000)
        );
        assert_eq!((r.peer_turn_us, r.peer_turns, r.min_rtt_us), (2_000, 4, 60));
        // No round trip measured yet: none, not 71 minutes.
        b[168..172].copy_from_slice(&u32::MAX.to_ne_bytes());
        let w = SocketWaits::parse(&b).unwrap();
        assert_eq!(in_us(w.reading_in_jiffies().since(None), 250).min_rtt_us, 0);
    }

    #[test]
    fn the_tick_rate_is_the_one_whose_ticks_match_the_clock() {
        for hz in RATES {
            for uptime_s in [20u64, 200, 400, 86_400 * 30] {
                // Ticks since boot, a little behind the clock (they start later).
                let ticks = uptime_s * hz - hz / 2;
                let jiffies = (ticks + (1 << 32)).wrapping_sub(300 * hz);
                let got = tick_rate(jiffies, uptime_s * 1_000_000_000);
                assert_eq!(got, Some(hz), "HZ {hz} after {uptime_s} s");
            }
        }
        // Read on this machine (HZ 250) 16 hours after boot.
        assert_eq!(tick_rate(4_309_476_633, 58_337_608_318_501), Some(250));
        // Near 300 s after boot, refused: every rate fits there.
        for uptime_s in [298.7f64, 300.0, 355.0] {
            let now_ns = (uptime_s * 1e9) as u64;
            let jiffies = ((uptime_s * 250.0) as u64 + (1 << 32)).wrapping_sub(300 * 250);
            assert_eq!(tick_rate(jiffies, now_ns), None, "{uptime_s} s");
        }
        // Then two readings a second apart or more give it.
        let mut r = TickRate::default();
        let at = |s: f64| {
            (
                ((s * 250.0) as u64 + (1 << 32)).wrapping_sub(75_000),
                (s * 1e9) as u64,
            )
        };
        let (j, t) = at(300.0);
        r.observe(j, t);
        assert_eq!(r.get(), None);
        let (j, t) = at(300.5);
        r.observe(j, t);
        assert_eq!(r.get(), None, "half a second is too short");
        let (j, t) = at(302.0);
        r.observe(j, t);
        assert_eq!(r.get(), Some(250));
        // Counts that fit no rate.
        assert_eq!(tick_rate(12_345_678, 1_000_000_000), None);
        assert_eq!(tick_rate(0, 0), None);
    }
}

//! The sockets' waits under eBPF: the `waits` iterator's walks over every process's open files
//! ([`WaitsWalk::walk`], spaced by their own cost) and the `closing` program's records of the
//! sockets programs close between two walks ([`WaitsWalk::closed`]); each record counts from
//! the socket's last reading (its records are `ebpf/waits.rs`'s).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use aya::maps::{Array, MapData, RingBuf};
use aya::programs::{BtfTracePoint, Iter};
use aya::{Btf, Ebpf};

use super::{in_us, SocketWaits, TickRate};

/// The `waits` iterator's walks: what each socket counted when last read, by cookie.
pub(super) struct WaitsWalk {
    /// Its settings: the jiffy from which a socket's chronos must have moved to be written,
    /// or the time from which its program must have read or written.
    since: Array<MapData, u64>,
    /// The sockets programs close, with their counters then (the `closing` program's ring
    /// buffer, drained with the events; `None` if the kernel refused it: a socket's counts
    /// since the last walk are then lost at its close).
    pub(super) closes: Option<RingBuf<MapData>>,
    /// Whether the `turn_read` program follows the sockets' reads (else the storage holds the
    /// writes' half only, and the walks' turns are dropped).
    pub(super) turns: bool,
    /// Each socket's counters when last read (`CLOCK_MONOTONIC` ns, and its times in
    /// jiffies).
    readings: HashMap<u64, (u64, crate::waits::Reading)>,
    /// The kernel's tick rate, once known ([`TickRate`]).
    hz: TickRate,
    /// A jiffy at or before the last walk's start (0: none yet), and when the last walk and
    /// the last full walk (every socket ever busy, which forgets the sockets gone) ran.
    jiffies: u64,
    /// When the last walk began (`CLOCK_MONOTONIC` ns): the next writes the sockets whose
    /// programs read or wrote since, too.
    began_ns: u64,
    walked_at: Option<Instant>,
    full_at: Option<Instant>,
    /// The last walk's time.
    last: Duration,
    pub(super) walks: u64,
    /// Time spent walking, and the records read.
    pub(super) spent: Duration,
    pub(super) records: u64,
}

/// How often a walk reads every socket that was ever busy (the others: only those whose
/// chronos moved since the last walk).
const FULL_WALK: Duration = Duration::from_secs(60);

/// The walks' share of one core at most, as the time between walks over a walk's time: a
/// walk visits every process's open files (about 0.6 µs each here), so on a host with
/// 200,000 sockets one takes 120 ms and the next comes 24 s later; with a few hundred, every
/// refresh (100 ms at the least).
const WALK_SPACING: u32 = 200;

impl WaitsWalk {
    /// Loads the iterator; `None` if the kernel refuses it (before Linux 5.11, or without
    /// `bpf_sock_from_file`): the watch then goes on without waits.
    pub(super) fn new(bpf: &mut Ebpf, btf: &Btf) -> Option<WaitsWalk> {
        let p: &mut Iter = bpf.program_mut("waits")?.try_into().ok()?;
        p.load("task_file", btf).ok()?;
        let since = Array::try_from(bpf.take_map("walk")?).ok()?;
        let closes = Self::closing(bpf, btf);
        let turns = Self::turns(bpf, btf);
        Some(WaitsWalk {
            since,
            closes,
            turns,
            readings: HashMap::new(),
            hz: TickRate::default(),
            jiffies: 0,
            began_ns: 0,
            walked_at: None,
            full_at: None,
            last: Duration::ZERO,
            walks: 0,
            spent: Duration::ZERO,
            records: 0,
        })
    }

    /// Loads and attaches the `closing` program, and takes its ring buffer.
    fn closing(bpf: &mut Ebpf, btf: &Btf) -> Option<RingBuf<MapData>> {
        let p: &mut BtfTracePoint = bpf.program_mut("closing")?.try_into().ok()?;
        p.load("inet_sock_set_state", btf).ok()?;
        p.attach().ok()?;
        RingBuf::try_from(bpf.take_map("closes")?).ok()
    }

    /// Loads and attaches the `turn_read` program (`send_done` keeps the writes' side).
    fn turns(bpf: &mut Ebpf, btf: &Btf) -> bool {
        let Some(p) = bpf.program_mut("turn_read") else {
            return false;
        };
        let Ok(p): Result<&mut BtfTracePoint, _> = p.try_into() else {
            return false;
        };
        p.load("sock_recv_length", btf).is_ok() && p.attach().is_ok()
    }

    /// What each socket a program closed (or shut the sending side of) since the last drain
    /// counted since its last reading, at that close. Its reading stays: a socket whose
    /// sending side only was shut down counts on from there at the next walk, and the next
    /// full walk forgets the sockets gone (within [`FULL_WALK`]).
    pub(super) fn closed(&mut self) -> Vec<(SocketWaits, crate::waits::Waits)> {
        let got = self.drain_closes();
        let mut out = Vec::new();
        for w in got {
            self.hz.observe(w.jiffies, w.now_ns);
            if let Some(c) = self.count(&w, false) {
                out.push((w, c));
            }
        }
        out
    }

    /// After the first walk: the sockets closed before it or during it are baselines too (the
    /// walk may not have read them), not counted from their start.
    pub(super) fn closed_as_baselines(&mut self) {
        for w in self.drain_closes() {
            self.hz.observe(w.jiffies, w.now_ns);
            let _baseline = self.count(&w, true);
        }
    }

    fn drain_closes(&mut self) -> Vec<SocketWaits> {
        let mut got = Vec::new();
        if let Some(ring) = &mut self.closes {
            while let Some(item) = ring.next() {
                got.extend(SocketWaits::parse(&item));
            }
        }
        got
    }

    /// What socket `w` counted since its last reading, which `w` replaces; `None` for a
    /// `baseline` (the first walk's readings), while the tick rate is not known, if nothing
    /// was counted, or if `w` is no newer than the last reading (a walk read the socket after
    /// this record was written): a reading is never replaced by an older one, so nothing
    /// counts twice.
    fn count(&mut self, w: &SocketWaits, baseline: bool) -> Option<crate::waits::Waits> {
        let now = if self.turns {
            w.reading_in_jiffies()
        } else {
            w.reading_in_jiffies().without_turns()
        };
        let before = match self.readings.get(&w.cookie) {
            Some((at_ns, _)) if *at_ns >= w.now_ns => return None,
            b => b.map(|(_, r)| *r),
        };
        self.readings.insert(w.cookie, (w.now_ns, now));
        let hz = self.hz.get()?;
        if baseline {
            return None;
        }
        let counted = in_us(now.since(before.as_ref()), hz);
        (!counted.is_empty()).then_some(counted)
    }

    /// Walks every process's files once (at most one walk in `WALK_SPACING` times the last
    /// one's time), and returns each socket's counts since its last reading: none on the
    /// first walk, whose readings are the baselines (a socket first read later was made, or
    /// first busy, after it), and none while the tick rate is not known (the readings are
    /// kept, in jiffies).
    pub(super) fn walk(&mut self, bpf: &mut Ebpf) -> Vec<(SocketWaits, crate::waits::Waits)> {
        let spacing = (self.last * WALK_SPACING).max(Duration::from_millis(100));
        if self.walked_at.is_some_and(|t| t.elapsed() < spacing) {
            return Vec::new();
        }
        let t = Instant::now();
        self.walked_at = Some(t);
        let full = self.full_at.is_none_or(|f| f.elapsed() >= FULL_WALK) || self.jiffies == 0;
        let since = if full { 0 } else { self.jiffies & 0xffff_ffff };
        let since_ns = if full { 0 } else { self.began_ns };
        let began_ns = super::monotonic_ns();
        if self.since.set(0, since, 0).is_err() || self.since.set(1, since_ns, 0).is_err() {
            return Vec::new();
        }
        self.began_ns = began_ns;
        let Some(bytes) = Self::read(bpf) else {
            return Vec::new();
        };
        if full {
            self.full_at = Some(t);
        }
        let got = SocketWaits::parse_all(&bytes);
        self.records += got.len() as u64;
        let first = self.walks == 0;
        self.walks += 1;
        let mut seen = HashSet::with_capacity(got.len());
        let mut out = Vec::new();
        let mut newest = 0;
        for w in got {
            newest = newest.max(w.jiffies);
            self.hz.observe(w.jiffies, w.now_ns);
            // (A socket held by several processes, or by one twice: its first holder.)
            if !seen.insert(w.cookie) {
                continue;
            }
            if let Some(counted) = self.count(&w, first) {
                out.push((w, counted));
            }
        }
        // The next walk writes the sockets whose chronos moved since this one began: its
        // newest record's jiffy, less the walk's length in ticks and one.
        if newest > 0 {
            self.jiffies = match self.hz.get() {
                Some(hz) => newest.saturating_sub(
                    (t.elapsed().as_nanos() as u64).saturating_mul(hz) / 1_000_000_000 + 1,
                ),
                None => 0,
            };
        }
        if full {
            self.readings.retain(|c, _| seen.contains(c));
        }
        self.last = t.elapsed();
        self.spent += self.last;
        out
    }

    /// One walk's output.
    fn read(bpf: &mut Ebpf) -> Option<Vec<u8>> {
        use std::io::Read;
        let p: &mut Iter = bpf.program_mut("waits")?.try_into().ok()?;
        let id = p.attach().ok()?;
        let link = p.take_link(id).ok()?;
        let mut file = link.into_file().ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }
}

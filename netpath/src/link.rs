//! The link model: what happens to one packet entering one direction of the path. Pure and
//! deterministic (time is passed in, loss comes from a seeded generator), so it is
//! unit-tested without a clock or a namespace.
//!
//! A packet of `size` bytes arriving at `now` is lost with probability `loss`; otherwise it
//! joins a drop-tail queue in front of a transmitter of `rate` bits per second (dropped if the
//! bytes queued or in transmission would exceed the queue limit), leaves the transmitter when
//! every packet before it has, and arrives one one-way delay later. Delivery times never
//! decrease, so each direction is a FIFO.

use std::time::Duration;

/// One direction of the link.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LinkSpec {
    /// Propagation delay of this direction (half the round trip).
    pub(crate) one_way: Duration,
    /// Transmitter rate in bits per second; `None`: infinitely fast.
    pub(crate) rate_bps: Option<u64>,
    /// Drop-tail queue limit in bytes (packets queued or in transmission).
    pub(crate) queue_bytes: usize,
    /// Probability that a packet is lost, 0.0 ..= 1.0.
    pub(crate) loss: f64,
    /// Seed of the loss generator (a run with the same seed loses the same packets).
    pub(crate) seed: u64,
}

/// What becomes of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Delivered at this time (same clock as `now`).
    Deliver(Duration),
    /// Lost at random.
    Lost,
    /// The queue was full.
    QueueFull,
}

/// The state of one direction.
#[derive(Debug)]
pub(crate) struct Link {
    spec: LinkSpec,
    /// When the transmitter finishes what it has.
    free_at: Duration,
    /// Transmission end and size of every packet not yet fully transmitted, oldest first.
    in_queue: std::collections::VecDeque<(Duration, usize)>,
    queued_bytes: usize,
    rng: u64,
}

impl Link {
    /// A link with nothing queued.
    pub(crate) fn new(spec: LinkSpec) -> Link {
        let rng = spec.seed ^ 0x9e37_79b9_7f4a_7c15;
        Link {
            spec,
            free_at: Duration::ZERO,
            in_queue: Default::default(),
            queued_bytes: 0,
            rng: rng.max(1),
        }
    }

    /// xorshift64*: a uniform number in [0, 1).
    fn uniform(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A packet of `size` bytes enters at `now`.
    pub(crate) fn on_packet(&mut self, now: Duration, size: usize) -> Verdict {
        if self.spec.loss > 0.0 && self.uniform() < self.spec.loss {
            return Verdict::Lost;
        }
        while let Some(&(end, bytes)) = self.in_queue.front() {
            if end > now {
                break;
            }
            self.queued_bytes -= bytes;
            self.in_queue.pop_front();
        }
        let Some(rate) = self.spec.rate_bps.filter(|&r| r > 0) else {
            return Verdict::Deliver(now + self.spec.one_way);
        };
        if self.queued_bytes + size > self.spec.queue_bytes {
            return Verdict::QueueFull;
        }
        let tx = Duration::from_nanos((size as u64 * 8).saturating_mul(1_000_000_000) / rate);
        self.free_at = self.free_at.max(now) + tx;
        self.in_queue.push_back((self.free_at, size));
        self.queued_bytes += size;
        Verdict::Deliver(self.free_at + self.spec.one_way)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LinkSpec {
        LinkSpec {
            one_way: Duration::from_millis(10),
            rate_bps: None,
            queue_bytes: 10_000,
            loss: 0.0,
            seed: 1,
        }
    }

    fn at(v: Verdict) -> Duration {
        match v {
            Verdict::Deliver(t) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn delay_only_adds_the_one_way_delay() {
        let mut l = Link::new(spec());
        assert_eq!(
            at(l.on_packet(Duration::from_millis(5), 1500)),
            Duration::from_millis(15)
        );
    }

    #[test]
    fn rate_serialises_packets_back_to_back() {
        // 8 Mbit/s: 1000 bytes take 1 ms.
        let mut l = Link::new(LinkSpec {
            rate_bps: Some(8_000_000),
            ..spec()
        });
        let t0 = Duration::ZERO;
        assert_eq!(at(l.on_packet(t0, 1000)), Duration::from_millis(11));
        assert_eq!(at(l.on_packet(t0, 1000)), Duration::from_millis(12));
        // An idle transmitter starts at once.
        assert_eq!(
            at(l.on_packet(Duration::from_millis(100), 1000)),
            Duration::from_millis(111)
        );
    }

    #[test]
    fn a_full_queue_drops_the_tail_and_drains_with_time() {
        let mut l = Link::new(LinkSpec {
            rate_bps: Some(8_000_000),
            queue_bytes: 3000,
            ..spec()
        });
        let t0 = Duration::ZERO;
        for _ in 0..3 {
            assert!(matches!(l.on_packet(t0, 1000), Verdict::Deliver(_)));
        }
        assert_eq!(l.on_packet(t0, 1000), Verdict::QueueFull);
        // After 1 ms the first packet has left: room for one more.
        assert!(matches!(
            l.on_packet(Duration::from_millis(1), 1000),
            Verdict::Deliver(_)
        ));
    }

    #[test]
    fn loss_is_seeded_and_near_its_rate() {
        let run = |seed| {
            let mut l = Link::new(LinkSpec {
                loss: 0.05,
                seed,
                ..spec()
            });
            (0..20_000)
                .map(|_| l.on_packet(Duration::ZERO, 100) == Verdict::Lost)
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "the same seed loses the same packets");
        assert_ne!(a, run(8));
        let lost = a.iter().filter(|&&x| x).count() as f64;
        // Binomial: mean 1000, sd 30.8; allow 5 sd.
        assert!((lost - 1000.0).abs() < 155.0, "{lost}");
    }

    #[test]
    fn delivery_times_never_decrease() {
        let mut l = Link::new(LinkSpec {
            rate_bps: Some(1_000_000),
            queue_bytes: usize::MAX,
            ..spec()
        });
        let mut last = Duration::ZERO;
        for i in 0..1000u64 {
            let t = at(l.on_packet(Duration::from_micros(i * 37), (i % 1500) as usize + 40));
            assert!(t >= last);
            last = t;
        }
    }
}

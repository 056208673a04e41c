//! A counter and a histogram of durations kept in whole microseconds and published in
//! seconds: a float that is added to again and again drifts (`0.37327999999999997` for
//! 373,280 µs), while the integer divided once at each scrape prints as it is (`0.37328`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Seconds of `us` microseconds.
fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

/// A counter of microseconds, published in seconds.
#[derive(Debug, Clone, Default)]
pub(super) struct MicrosCounter(Arc<AtomicU64>);

impl MicrosCounter {
    pub(super) fn inc_by(&self, us: u64) {
        self.0.fetch_add(us, Ordering::Relaxed);
    }
}

impl TypedMetric for MicrosCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for MicrosCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&seconds(self.0.load(Ordering::Relaxed)), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A histogram of durations in microseconds, its bucket bounds and sum published in seconds.
///
/// Invariant: `counts` has one entry per bound plus one for `+Inf`, and their sum is `count`.
#[derive(Debug, Clone)]
pub(super) struct MicrosHistogram {
    bounds_us: &'static [u64],
    inner: Arc<Mutex<Tally>>,
}

#[derive(Debug, Default)]
struct Tally {
    counts: Vec<u64>,
    sum_us: u64,
    count: u64,
}

impl MicrosHistogram {
    /// Empty, with these upper bounds (ascending, in µs; `+Inf` is added).
    pub(super) fn new(bounds_us: &'static [u64]) -> MicrosHistogram {
        debug_assert!(bounds_us.windows(2).all(|w| w[0] < w[1]));
        MicrosHistogram {
            bounds_us,
            inner: Arc::new(Mutex::new(Tally {
                counts: vec![0; bounds_us.len() + 1],
                ..Tally::default()
            })),
        }
    }

    pub(super) fn observe(&self, us: u64) {
        let at = self.bounds_us.partition_point(|&b| b < us);
        let mut t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        t.counts[at] += 1;
        t.sum_us += us;
        t.count += 1;
        debug_assert_eq!(t.counts.iter().sum::<u64>(), t.count);
    }
}

impl TypedMetric for MicrosHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for MicrosHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // (The encoder adds the counts up, and writes infinity `+Inf`.)
        let buckets: Vec<(f64, u64)> = self
            .bounds_us
            .iter()
            .map(|&b| seconds(b))
            .chain(std::iter::once(f64::INFINITY))
            .zip(t.counts.iter().copied())
            .collect();
        encoder.encode_histogram::<NoLabelSet>(seconds(t.sum_us), t.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

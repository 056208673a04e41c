//! The scenarios of `causes.rs`, each made by small programs that measure what they did: what
//! one made ([`Made`]), the exchanges on the 10 ms path (`exchanges`), the answers a rate or a
//! window holds back (`transfers`), and the kernel's arrival stamps the truths read
//! (`stamps`).

use std::time::Duration;

use nagless_netpath::EmulatedPath;

mod exchanges;
mod stamps;
mod transfers;

pub(crate) use exchanges::{clocked, hold, idle, loss, receiver, stall, think};
pub(crate) use transfers::{transfer, window};

/// Rounds per scenario: every exchange is kept in the budget (the first 8).
pub(crate) const ROUNDS: u64 = 6;

/// What one scenario made: its port, and the time each label truly took in each exchange,
/// ms (exchange 0: the whole flow, for a scenario of one transfer).
pub(crate) struct Made {
    pub(crate) name: &'static str,
    pub(crate) port: u16,
    pub(crate) truth: Vec<(u64, &'static str, f64)>,
    /// The truth at the server's end, where it differs: an exchange begins where its request
    /// passes the capture point, so a request lost before the server's end is waited for
    /// in the exchange before, there.
    pub(crate) truth_at_server: Option<Vec<(u64, &'static str, f64)>>,
    /// Labels this scenario may make happen beside its truth, not scored here (neither true
    /// nor false), with the reason at the scenario.
    pub(crate) unscored: &'static [&'static str],
    /// The round trips its flow spans as seen at the client's end and at the server's (the
    /// handshake's, a question's way to the answerer and the answer's back, the close's): each
    /// end sees the ones that begin and end within its first to last frame.
    pub(crate) round_trips: [f64; 2],
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(crate) fn rtt_ms(p: &EmulatedPath) -> f64 {
    ms(p.spec().rtt)
}

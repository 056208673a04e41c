//! # nagless-lab
//!
//! Reproduces each source case on real loopback sockets, strategy by strategy, and measures
//! latency per exchange against data segments per exchange (the two axes nagless must win
//! together). A [`Plan`] lists cases, paths and strategies; [`run_plan`] runs them with
//! repetitions and returns one [`Table`] per case and path, ready for [`report`].
//!
//! Public is what `nagless lab` (the command) and the lab's tests use; the rest is the
//! crate's own (`unreachable_pub` holds it).
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod bgp;
mod glue;
mod harness;
mod multiplexed;
mod pattern;
mod plan;
pub mod report;
mod run;
mod scenario;
pub mod seeds;
mod sources;
mod strategy;
mod sys;
mod table;
mod verdict;
mod wrk;

pub use glue::serve_end;
pub use harness::{Link, Path, RunResult, Setup, SideCost};
pub use pattern::{check_pair, Pattern, PatternError};
pub use plan::{default_pin, Plan, Scale};
pub use run::{make_paths, run_plan, Progress};
pub use scenario::{Case, Credit, SCENARIOS};
pub use strategy::Strategy;
pub use table::{Row, Spread, Table, Verdict};
pub use verdict::verdict;

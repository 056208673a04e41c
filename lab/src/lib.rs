//! # nagless-lab
//!
//! Reproduces each source case on real loopback sockets, strategy by strategy, and measures
//! latency per exchange against data segments per exchange (the two axes nagless must win
//! together). A [`Plan`] lists cases, paths and strategies; [`run_plan`] runs them with
//! repetitions and returns one [`Table`] per case and path, ready for [`report`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod bgp;
pub mod harness;
mod multiplexed;
pub mod pattern;
mod plan;
pub mod report;
mod run;
pub mod scenario;
pub mod seeds;
pub mod strategy;
mod sys;
mod table;
mod verdict;
mod wrk;

pub use harness::{Link, Path, RunResult, Setup, SideCost};
pub use plan::{default_pin, Plan, Scale, PATH_LIMIT_MIN, PATH_ROUND_TRIPS};
pub use run::{make_paths, run_plan, Progress};
pub use scenario::{Case, Credit};
pub use strategy::Strategy;
pub use table::{Row, Spread, Table};
pub use verdict::{verdict, Verdict};

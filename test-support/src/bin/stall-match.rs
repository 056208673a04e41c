//! `stall-match WATCH.jsonl DOCTOR.json [TOLERANCE_MS]`: pairs the stalls of `nagless watch
//! --json --stalls` with those of `nagless doctor --json --every-stall --top 0` (same socket, times
//! within the tolerance, default 20 ms) and prints precision and recall
//! (`scripts/bench-watch` runs it). Exit 2 on unreadable input.

use std::process::ExitCode;

use nagless_test_support::stall_match::{doctor_stalls, pair, watch_stalls, TOLERANCE_S};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(w), Some(d)) = (args.first(), args.get(1)) else {
        eprintln!("usage: stall-match WATCH.jsonl DOCTOR.json [TOLERANCE_MS]");
        return ExitCode::from(2);
    };
    let tolerance = match args.get(2).map(|t| t.parse::<f64>()) {
        None => TOLERANCE_S,
        Some(Ok(ms)) if ms > 0.0 => ms / 1000.0,
        Some(_) => {
            eprintln!("stall-match: TOLERANCE_MS must be a positive number");
            return ExitCode::from(2);
        }
    };
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
    let (w, d) = match (read(w), read(d)) {
        (Ok(w), Ok(d)) => (w, d),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("stall-match: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(doctor) = doctor_stalls(&d) else {
        eprintln!(
            "stall-match: {}: not `nagless doctor --json` output",
            args[1]
        );
        return ExitCode::from(2);
    };
    println!("{}", pair(&watch_stalls(&w), &doctor, tolerance));
    ExitCode::SUCCESS
}

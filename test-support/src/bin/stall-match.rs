//! `stall-match WATCH.jsonl DOCTOR.json [--ports LO-HI] [--window EARLY_MS,LATE_MS]`: pairs
//! the stalls of `nagless watch --json --stalls` with those of `nagless doctor --json
//! --every-stall --top 0` (same socket; the watcher's time from EARLY_MS before to LATE_MS
//! after the doctor's, default 20,20) and prints one JSON object: precision, recall, matched,
//! watch, doctor. `--ports` keeps only stalls whose writer's port is in LO-HI (servers' own).
//! `scripts/bench-watch` runs it. Exit 2 on bad arguments or unreadable input.

use std::process::ExitCode;

use nagless_test_support::stall_match::{doctor_stalls, pair, watch_stalls, Stall, Window};

const USAGE: &str =
    "usage: stall-match WATCH.jsonl DOCTOR.json [--ports LO-HI] [--window EARLY_MS,LATE_MS]";

/// Two numbers joined by `sep`.
fn two<T: std::str::FromStr>(s: &str, sep: char) -> Option<(T, T)> {
    let (a, b) = s.split_once(sep)?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut files = Vec::new();
    let mut ports = (0u16, u16::MAX);
    let mut window = Window::EITHER_WAY;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let ok = match a.as_str() {
            "--ports" => it.next().and_then(|v| two(v, '-')).map(|p| ports = p),
            "--window" => it
                .next()
                .and_then(|v| two::<f64>(v, ','))
                .filter(|&(e, l)| e >= 0.0 && l >= 0.0)
                .map(|(e, l)| {
                    window = Window {
                        early_s: e / 1000.0,
                        late_s: l / 1000.0,
                    }
                }),
            f if !f.starts_with("--") => {
                files.push(f.to_owned());
                Some(())
            }
            _ => None,
        };
        if ok.is_none() {
            eprintln!("stall-match: bad argument {a:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let [w, d] = &files[..] else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
    let (wt, dt) = match (read(w), read(d)) {
        (Ok(w), Ok(d)) => (w, d),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("stall-match: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(doctor) = doctor_stalls(&dt) else {
        eprintln!("stall-match: {d}: not `nagless doctor --json` output");
        return ExitCode::from(2);
    };
    let own = |v: Vec<Stall>| -> Vec<Stall> {
        v.into_iter()
            .filter(|s| (ports.0..=ports.1).contains(&s.writer.port()))
            .collect()
    };
    let m = pair(&own(watch_stalls(&wt)), &own(doctor), window);
    let out = serde_json::json!({
        "precision": m.precision(),
        "recall": m.recall(),
        "matched": m.matched,
        "watch": m.watch,
        "doctor": m.doctor,
    });
    println!("{out}");
    ExitCode::SUCCESS
}

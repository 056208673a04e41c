//! Running a plan: the emulated paths it needs ([`make_paths`]), then every case with every
//! strategy, repetition by repetition ([`run_plan`]), summed up into tables.

use crate::harness::{Link, Setup};
use crate::plan::Plan;
use crate::table::{row, Table};
use crate::verdict::verdict;

/// Progress callback: (runs done, runs total, what is running).
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize, &str);

/// The emulated paths a plan needs, made before it runs (one per distinct link, shared by
/// every case and strategy on it). Fails as [`nagless_netpath::EmulatedPath::new`] does,
/// e.g. without root.
pub fn make_paths(
    plan: &Plan,
) -> Result<Vec<(Link, nagless_netpath::EmulatedPath)>, nagless_netpath::PathError> {
    let mut nets: Vec<(Link, nagless_netpath::EmulatedPath)> = Vec::new();
    for (_, path) in &plan.cases {
        if let Some(link) = path.link {
            if !nets.iter().any(|(l, _)| *l == link) {
                nets.push((link, nagless_netpath::EmulatedPath::new(&link.spec())?));
            }
        }
    }
    Ok(nets)
}

/// Runs every case of `plan` with every strategy, `repeats` times each, on loopback or on
/// the emulated paths of `nets` ([`make_paths`]); stops early when `interrupted` says so.
pub fn run_plan(
    plan: &Plan,
    nets: &[(Link, nagless_netpath::EmulatedPath)],
    interrupted: &dyn Fn() -> bool,
    progress: Progress<'_>,
) -> Vec<Table> {
    let total = plan.run_count();
    let mut done = 0;
    let mut tables = Vec::new();
    for (case, path) in &plan.cases {
        if interrupted() {
            break;
        }
        let net = path
            .link
            .and_then(|link| nets.iter().find(|(l, _)| *l == link).map(|(_, n)| n));
        let mut rows = Vec::new();
        let mut errors = Vec::new();
        for strategy in plan.rows_of(case) {
            let mut runs = Vec::new();
            for rep in 0..plan.repeats {
                let what = format!(
                    "{} {} {} {} #{}",
                    case.scenario(),
                    case.params(),
                    path.label(),
                    strategy.name(),
                    rep + 1
                );
                progress(done, total, &what);
                let setup = Setup {
                    path: *path,
                    pin: plan.pin,
                    net,
                    exe: plan.exe.as_deref(),
                };
                if path.link.is_some() && net.is_none() {
                    errors.push(format!("{what}: no emulated path was made for it"));
                    done += 1;
                    continue;
                }
                match case.run(strategy, setup, plan.limit_on(path)) {
                    Ok(r) => runs.push(r),
                    Err(e) => errors.push(format!("{what}: {e}")),
                }
                done += 1;
            }
            rows.push(row(strategy, &runs));
        }
        progress(done, total, "");
        let best_latency = rows
            .iter()
            .filter(|r| r.runs > 0)
            .min_by(|a, b| a.p50_us.median.total_cmp(&b.p50_us.median))
            .map(|r| r.strategy);
        let fewest_segments = rows
            .iter()
            .filter(|r| r.runs > 0)
            .min_by(|a, b| {
                a.segs_per_exchange
                    .median
                    .total_cmp(&b.segs_per_exchange.median)
            })
            .map(|r| r.strategy);
        tables.push(Table {
            scenario: case.scenario().to_string(),
            params: case.params(),
            case: case.clone(),
            path: *path,
            unit: case.unit().to_string(),
            verdict: verdict(&rows),
            rows,
            best_latency,
            fewest_segments,
            errors,
        });
    }
    tables
}

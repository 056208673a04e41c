//! The watch's JSON lines: one per stall (`--stalls`) and the rows of a window or summary.

use std::io;

use nagless_watch::{Row, StallEvent};

/// One stall as a JSON line (`--stalls`), serialized straight from the event.
#[derive(serde::Serialize)]
struct StallLine<'a> {
    r#type: &'static str,
    time_unix_s: f64,
    pid: Option<u32>,
    comm: &'a Option<String>,
    container: &'a Option<String>,
    port: u16,
    serves: bool,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
    held: u32,
    lost_ms: f64,
    ack_timer: Option<nagless_doctor::rule::AckTimer>,
}

pub(super) fn write_stall(out: &mut impl io::Write, e: &StallEvent) -> io::Result<()> {
    let line = StallLine {
        r#type: "stall",
        time_unix_s: e
            .at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        pid: e.key.pid,
        comm: &e.comm,
        container: &e.container,
        port: e.key.port,
        serves: e.key.serves,
        local: e.local,
        remote: e.remote,
        held: e.stall.held,
        lost_ms: e.stall.lost_us as f64 / 1000.0,
        ack_timer: e.stall.timer,
    };
    serde_json::to_writer(&mut *out, &line).map_err(io::Error::from)?;
    out.write_all(b"\n")
}

pub(super) fn json_rows(rows: &[Row], secs: f64) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["stalls_per_s"] = (r.stalls as f64 / secs).into();
            v["lost_ms_per_s"] = (r.lost_ms / secs).into();
            v["ack_held_ms_per_s"] = (r.ack_held_ms / secs).into();
            v
        })
        .collect()
}

//! # nagless-doctor
//!
//! Finds Nagle and delayed-ACK stalls in packet captures made with tcpdump, tshark or
//! Wireshark, taken at either end of a path or between, and says where, how much, and what to
//! do. Layers: [`input`] (file or stdin, gzip or zstd), `capture` (pcap and pcapng,
//! streaming, checked, never panics), [`packet`] (link layer to TCP), [`analysis`] (per flow,
//! streaming), [`rule`] (what a stall is, shared with `nagless watch`), [`report`] (text,
//! JSON, SVG timeline).
//!
//! Public is what `nagless` (the command), the tests and the fuzz targets (`fuzz/`) use; the
//! rest is the crate's own (`unreachable_pub` holds it).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod analysis;
mod bytes;
mod capture;
pub mod input;
pub mod packet;
pub mod report;
pub use nagless_stall_rule as rule;

use std::io::Read;

pub use analysis::{FlowReport, Options, Outcome};
pub use capture::CaptureError;

/// Everything the doctor found in one capture: what was read, and the analysis of it.
///
/// It dereferences to its [`Outcome`], so `d.flows` is `d.outcome.flows`; in the JSON the
/// outcome's fields sit beside the others (`docs/doctor-json.md`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Diagnosis {
    /// The order each flow's stalls are listed in (and the report's lines).
    #[serde(skip)]
    pub order: analysis::StallOrder,
    /// Frames in the capture (up to the damage, if any).
    pub frames: u64,
    /// TCP segments decoded.
    pub tcp_segments: u64,
    /// Frames that are fragments of IP packets carrying TCP: not reassembled, so their bytes
    /// are missing from the flows.
    #[serde(skip_serializing_if = "is_zero")]
    pub tcp_fragments: u64,
    /// Bytes of capture read (after decompression).
    pub bytes: u64,
    /// When the first frame was captured, in seconds since the Unix epoch (as the capture
    /// stamped it); frame times in the report count from it.
    pub start_unix_s: Option<f64>,
    /// Frames of link types the doctor cannot read, by link type.
    pub unsupported_linktypes: Vec<u32>,
    /// Why reading stopped before the end of the input (a truncated or damaged capture): the
    /// frames before it were analysed.
    pub damage: Option<String>,
    /// The analysis: totals, services, the flows kept.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl std::ops::Deref for Diagnosis {
    type Target = Outcome;

    fn deref(&self) -> &Outcome {
        &self.outcome
    }
}

/// Reads a capture held in memory and analyses every TCP flow in it (all flows kept).
pub fn diagnose(bytes: &[u8]) -> Result<Diagnosis, CaptureError> {
    diagnose_reader(bytes, Options::default(), |_| {})
}

/// Streams a capture from `src` and analyses it; `progress` is called now and then with the
/// bytes read so far. A capture that is cut or damaged part-way is analysed up to the damage
/// (see [`Diagnosis::damage`]); one with no readable frame at all is an error.
pub fn diagnose_reader(
    src: impl Read,
    opts: Options,
    mut progress: impl FnMut(u64),
) -> Result<Diagnosis, CaptureError> {
    let mut reader = capture::CaptureReader::new(src)?;
    let order = opts.order;
    let mut analyzer = analysis::Analyzer::new(opts);
    let mut unsupported = Vec::new();
    let (mut frames, mut tcp_segments, mut tcp_fragments) = (0u64, 0u64, 0u64);
    let mut origin_ns = None;
    let mut damage = None;
    loop {
        let rec = match reader.next_record() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) if frames > 0 => {
                damage = Some(e.to_string());
                break;
            }
            Err(e) => return Err(e),
        };
        frames += 1;
        // Times count from the first frame, as Wireshark shows them.
        let origin = *origin_ns.get_or_insert(rec.ts_ns);
        if let capture::LinkType::Other(number) = rec.linktype {
            // (A few kinds are enough to say what is wrong; a hostile file may have thousands.)
            if unsupported.len() < 16 && !unsupported.contains(&number) {
                unsupported.push(number);
            }
            continue;
        }
        if let Some(s) = packet::decode(rec.linktype, rec.data, rec.orig_len) {
            tcp_segments += 1;
            let us = rec.ts_ns.saturating_sub(origin) / 1000;
            analyzer.push(rec.frame, us, &s);
        } else if packet::is_tcp_fragment(rec.linktype, rec.data) {
            tcp_fragments += 1;
        }
        if frames % 65_536 == 0 {
            progress(reader.offset());
        }
    }
    progress(reader.offset());
    let mut outcome = analyzer.finish();
    for f in &mut outcome.flows {
        order.sort(&mut f.stalls);
    }
    Ok(Diagnosis {
        frames,
        tcp_segments,
        tcp_fragments,
        bytes: reader.offset(),
        start_unix_s: origin_ns.map(|ns| ns as f64 / 1e9),
        unsupported_linktypes: unsupported,
        damage,
        order,
        outcome,
    })
}

/// For serde: a count left out of the JSON when 0.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

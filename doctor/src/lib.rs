//! # nagless-doctor
//!
//! Finds Nagle and delayed-ACK stalls in packet captures made with tcpdump, tshark or
//! Wireshark, and says where, how much, and what to do. Layers: [`capture`] (pcap and pcapng,
//! checked, never panics), [`packet`] (link layer to TCP), [`analysis`] (the rules, per flow),
//! [`report`] (text, JSON, SVG timeline).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod analysis;
pub mod capture;
pub mod packet;
pub mod report;

pub use analysis::{analyse, FlowReport, Pattern, Stall};
pub use capture::CaptureError;

/// Everything the doctor found in one capture.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Diagnosis {
    /// Frames in the capture.
    pub frames: u64,
    /// TCP segments decoded.
    pub tcp_segments: u64,
    /// Frames of link types the doctor cannot read, by link type.
    pub unsupported_linktypes: Vec<u32>,
    /// One report per TCP flow, in capture order.
    pub flows: Vec<FlowReport>,
}

/// Reads a capture held in memory and analyses every TCP flow in it.
pub fn diagnose(bytes: &[u8]) -> Result<Diagnosis, CaptureError> {
    let records = capture::read(bytes)?;
    let mut unsupported = Vec::new();
    let mut segs = Vec::new();
    for r in &records {
        if !packet::supported_linktype(r.linktype) {
            if !unsupported.contains(&r.linktype) {
                unsupported.push(r.linktype);
            }
            continue;
        }
        if let Some(s) = packet::decode(r.linktype, r.data) {
            segs.push((r.frame, r.ts_ns, s));
        }
    }
    Ok(Diagnosis {
        frames: records.len() as u64,
        tcp_segments: segs.len() as u64,
        unsupported_linktypes: unsupported,
        flows: analyse(&segs),
    })
}

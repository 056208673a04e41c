//! Bytes into decompression, the capture parser, the packet decoder and the analysis: none
//! may panic. Seeds: `corpus/capture/` (real loopback captures in pcap, pcapng and gzip, and
//! the head of a generated capture cut mid-record); `scripts/fuzz 30 capture`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((reader, _)) = nagless_doctor::input::decompressed(data) {
        let _ = nagless_doctor::diagnose_reader(reader, Default::default(), |_| {});
    }
});

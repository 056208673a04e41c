//! Bytes into the capture parser, the packet decoder and the analysis: none may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nagless_doctor::diagnose(data);
});

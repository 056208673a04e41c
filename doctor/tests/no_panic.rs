//! Random and damaged captures: an error or a diagnosis, never a panic.

use proptest::prelude::*;

fn valid_pcap() -> Vec<u8> {
    // Two Ethernet frames carrying IPv4 TCP segments (headers only).
    let mut v = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    for (i, flags) in [(0u32, 0x02u8), (1, 0x12)] {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&[
            0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
        ]);
        frame.extend_from_slice(&[0x1f, 0x40, 0x9c, 0x40]);
        frame.extend_from_slice(&i.to_be_bytes());
        frame.extend_from_slice(&0u32.to_be_bytes());
        frame.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        v.extend_from_slice(&i.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        v.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        v.extend_from_slice(&frame);
    }
    v
}

#[test]
fn the_valid_seed_parses() {
    let d = nagless_doctor::diagnose(&valid_pcap()).unwrap();
    assert_eq!(d.frames, 2);
    assert_eq!(d.tcp_segments, 2);
    assert_eq!(d.flows.len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = nagless_doctor::diagnose(&bytes);
    }

    #[test]
    fn random_pcapng_blocks_never_panic(body in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut v = vec![0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0];
        v.extend_from_slice(&[0xff; 8]);
        v.extend_from_slice(&28u32.to_le_bytes());
        v.extend_from_slice(&body);
        let _ = nagless_doctor::diagnose(&v);
    }

    #[test]
    fn damaged_captures_never_panic(cut in 0usize..200, flips in proptest::collection::vec((0usize..200, any::<u8>()), 0..8)) {
        let mut v = valid_pcap();
        for (at, b) in flips {
            let n = v.len();
            v[at % n] ^= b;
        }
        v.truncate(v.len().saturating_sub(cut));
        match nagless_doctor::diagnose(&v) {
            Ok(_) => {}
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}

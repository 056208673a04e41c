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
    assert_eq!(d.flows_total, 1);
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

/// One frame: Ethernet, IPv4 or IPv6 (with a hop-by-hop header sometimes), TCP with
/// options, and a body; fields taken from `f` so proptest can vary each.
#[derive(Debug, Clone)]
struct Frame {
    v6: bool,
    hop_by_hop: bool,
    ports: (u16, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: Vec<u8>,
    payload: u16,
    captured_payload: u16,
    ts_us: u32,
    /// (byte index, xor) applied to the frame after it is built.
    damage: Vec<(u16, u8)>,
}

fn frame_strategy() -> impl Strategy<Value = Frame> {
    (
        (any::<bool>(), any::<bool>(), (1u16..4, 1u16..4)),
        (0u32..5000, 0u32..5000, any::<u8>(), any::<u16>()),
        proptest::collection::vec(any::<u8>(), 0..40),
        (0u16..3000, 0u16..200, 0u32..400_000),
        proptest::collection::vec((any::<u16>(), any::<u8>()), 0..3),
    )
        .prop_map(
            |(
                (v6, hop_by_hop, ports),
                (seq, ack, flags, window),
                options,
                (payload, captured_payload, ts_us),
                damage,
            )| Frame {
                v6,
                hop_by_hop,
                ports,
                seq,
                ack,
                flags,
                window,
                options,
                payload,
                captured_payload,
                ts_us,
                damage,
            },
        )
}

fn build(f: &Frame) -> Vec<u8> {
    let mut opts = f.options.clone();
    opts.truncate(40);
    while opts.len() % 4 != 0 {
        opts.push(1);
    }
    let mut tcp = Vec::new();
    tcp.extend_from_slice(&(40000 + f.ports.0).to_be_bytes());
    tcp.extend_from_slice(&(8000 + f.ports.1).to_be_bytes());
    tcp.extend_from_slice(&f.seq.to_be_bytes());
    tcp.extend_from_slice(&f.ack.to_be_bytes());
    tcp.push((((20 + opts.len()) / 4) as u8) << 4);
    tcp.push(f.flags);
    tcp.extend_from_slice(&f.window.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 0]);
    tcp.extend_from_slice(&opts);
    let tcp_total = tcp.len() + usize::from(f.payload);
    let mut frame = vec![0u8; 12];
    if f.v6 {
        frame.extend_from_slice(&[0x86, 0xdd]);
        let ext = if f.hop_by_hop { 8 } else { 0 };
        frame.extend_from_slice(&[0x60, 0, 0, 0]);
        frame.extend_from_slice(&((tcp_total + ext) as u16).to_be_bytes());
        frame.push(if f.hop_by_hop { 0 } else { 6 });
        frame.push(64);
        frame.extend_from_slice(&[0; 15]);
        frame.push(1);
        frame.extend_from_slice(&[0; 15]);
        frame.push(2);
        if f.hop_by_hop {
            frame.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
        }
    } else {
        frame.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        frame.extend_from_slice(&((20 + tcp_total) as u16).to_be_bytes());
        frame.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    }
    frame.extend_from_slice(&tcp);
    frame.extend(std::iter::repeat_n(
        b'x',
        usize::from(f.captured_payload.min(f.payload)),
    ));
    for &(at, x) in &f.damage {
        let n = frame.len();
        frame[usize::from(at) % n] ^= x;
    }
    frame
}

fn pcap_of(frames: &[Frame]) -> Vec<u8> {
    let mut v = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    let mut t = 0u64;
    for f in frames {
        t += u64::from(f.ts_us);
        let data = build(f);
        v.extend_from_slice(&((t / 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&((t % 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&(data.len() as u32).to_le_bytes());
        v.extend_from_slice(&(data.len() as u32 + 100).to_le_bytes());
        v.extend_from_slice(&data);
    }
    v
}

/// Hands out at most `n` bytes per read: record boundaries fall anywhere in the buffer.
struct Trickle<'a>(&'a [u8], usize);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.1.min(buf.len()).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Valid headers with mutated fields, options and bodies reach the TCP analysis: every
    /// frame is read, none panics, and the same bytes read in small pieces give the same
    /// diagnosis.
    #[test]
    fn structured_frames_reach_the_analysis(frames in proptest::collection::vec(frame_strategy(), 1..60), piece in 1usize..50) {
        let bytes = pcap_of(&frames);
        let whole = nagless_doctor::diagnose(&bytes).expect("a well-formed pcap");
        prop_assert_eq!(whole.frames, frames.len() as u64);
        prop_assert!(whole.damage.is_none());
        let undamaged = frames.iter().filter(|f| f.damage.is_empty()).count() as u64;
        prop_assert!(whole.tcp_segments >= undamaged);
        let pieces = nagless_doctor::diagnose_reader(Trickle(&bytes, piece), Default::default(), |_| {}).unwrap();
        prop_assert_eq!(format!("{:?}", pieces.flows), format!("{:?}", whole.flows));
        // Cut anywhere: what comes before the cut is analysed, the cut is reported.
        let cut = &bytes[..bytes.len() - piece.min(bytes.len() - 25)];
        if let Ok(d) = nagless_doctor::diagnose(cut) {
            prop_assert!(d.frames <= frames.len() as u64);
        }
    }
}

/// The fuzzer's seed corpus (`fuzz/corpus/capture/`): each seed is read to its end (the
/// generated one is cut mid-record on purpose), and the real captures show their stalls; the
/// small hostile seeds (`hostile-*`: a SYN scan, a zstd frame asking for a 128 MiB window, a
/// pcapng section of 400 interfaces), from which the fuzzer grows the big ones, are refused
/// or read as they should be.
#[test]
fn the_fuzz_seeds_are_captures() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/capture");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("hostile-") {
            // (The window is found when the first bytes are decompressed.)
            let d = nagless_doctor::input::decompressed(&bytes[..])
                .map_err(|e| e.to_string())
                .and_then(|(reader, _)| {
                    nagless_doctor::diagnose_reader(reader, Default::default(), |_| {})
                        .map_err(|e| e.to_string())
                });
            match d {
                Err(e) => assert!(
                    name.contains("window") && e.contains("window"),
                    "{name}: {e}"
                ),
                Ok(d) => {
                    let want = if name.contains("syn-scan") { 300 } else { 1 };
                    assert_eq!(d.flows_total, want, "{name}");
                }
            }
            seen += 1;
            continue;
        }
        let (reader, _) = nagless_doctor::input::decompressed(&bytes[..]).unwrap();
        let d = nagless_doctor::diagnose_reader(reader, Default::default(), |_| {}).unwrap();
        assert!(d.frames > 0, "{name}");
        if name.starts_with("loopback-wwr") {
            assert!(d.stalls_total >= 1 && d.damage.is_none(), "{name}: {d:?}");
        } else {
            assert!(d.damage.is_some(), "{name}");
        }
        seen += 1;
    }
    assert_eq!(seen, 7);
}

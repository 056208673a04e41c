//! `nagless doctor` on inputs that hold nothing to judge, and on hostile ones (issue 28, "Bad
//! input"): nothing to judge is exit 3 with a message, never "no stall" with exit 0; a SYN
//! flood, a flood of pcapng interface descriptions and a zstd frame with a huge window each
//! stay under 100 MB of resident memory, streamed through stdin as they are made.

use std::io::Write as _;
use std::process::{Command, Stdio};

const NAGLESS: &str = env!("CARGO_BIN_EXE_nagless");

/// The bound the doctor keeps on any input, in kB.
const MAX_RSS_KB: i64 = 100 * 1024;

/// What a run of `nagless doctor ARGS -`, fed by `feed`, said and used.
struct Ran {
    code: Option<i32>,
    stderr: String,
    max_rss_kb: i64,
}

/// Runs `nagless doctor ARGS -` with `feed` writing its stdin (from a thread, so the input
/// need never be held whole), and reaps it with `wait4` for its own peak resident memory.
#[allow(clippy::zombie_processes)] // reaped by wait4 below, which gives its rusage
fn doctor(args: &[&str], feed: impl FnOnce(&mut dyn std::io::Write) + Send + 'static) -> Ran {
    let mut child = Command::new(NAGLESS)
        .arg("doctor")
        .args(args)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // (The doctor may stop reading early, on an error: the rest of the input is refused.)
    let writer = std::thread::spawn(move || feed(&mut stdin));
    let stderr = {
        use std::io::Read as _;
        let mut s = String::new();
        child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `child.id()` is our own unreaped child; `status` and `usage` are valid for
    // writes. It is reaped here only (`child.wait()` is never called).
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let _ = writer.join();
    Ran {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stderr,
        max_rss_kb: usage.ru_maxrss,
    }
}

fn pcap_header() -> Vec<u8> {
    let mut v = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
    v
}

/// A pcap record of an Ethernet/IPv4 frame with `proto` (6: TCP, 17: UDP) and a 20-byte TCP
/// header with `flags` (or 8 bytes of UDP).
fn record(us: u64, src: ([u8; 4], u16), dst: ([u8; 4], u16), proto: u8, flags: u8) -> Vec<u8> {
    let l4 = if proto == 6 { 20 } else { 8 };
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
    f.extend_from_slice(&(20 + l4 as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.1.to_be_bytes());
    f.extend_from_slice(&dst.1.to_be_bytes());
    if proto == 6 {
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        f.extend_from_slice(&[0, 8, 0, 0]);
    }
    let mut r = Vec::with_capacity(16 + f.len());
    r.extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
    r.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
    r.extend_from_slice(&(f.len() as u32).to_le_bytes());
    r.extend_from_slice(&(f.len() as u32).to_le_bytes());
    r.extend_from_slice(&f);
    r
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

#[test]
fn a_capture_with_nothing_to_judge_exits_3_and_says_why() {
    // Only a header.
    let r = doctor(&[], |w| {
        let _ = w.write_all(&pcap_header());
    });
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(
        r.stderr.contains("nothing to judge: it holds no packets"),
        "{}",
        r.stderr
    );
    // Only UDP.
    let r = doctor(&[], |w| {
        let mut v = pcap_header();
        for i in 0..5 {
            v.extend(record(
                i * 1000,
                ([10, 0, 0, 1], 5353),
                ([10, 0, 0, 2], 53),
                17,
                0,
            ));
        }
        let _ = w.write_all(&v);
    });
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(
        r.stderr.contains("none of its 5 frames is a TCP segment"),
        "{}",
        r.stderr
    );
    // Only fragments of IP packets carrying TCP (seladb/PcapPlusPlus's
    // `frag_http_req.pcap`): they are TCP, but not reassembled, and said so.
    let r = doctor(&[], |w| {
        let mut v = pcap_header();
        for i in 0..3 {
            let mut rec = record(
                i * 1000,
                ([10, 0, 0, 1], 40000),
                ([10, 0, 0, 2], 80),
                6,
                ACK,
            );
            // More fragments, at offset 0, then 1480 (the IPv4 header's flags and offset).
            let at = 16 + 14 + 6;
            rec[at..at + 2].copy_from_slice(&(0x2000u16 | (i as u16 * 185)).to_be_bytes());
            v.extend(rec);
        }
        let _ = w.write_all(&v);
    });
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(
        r.stderr.contains("none of its 3 frames is a whole TCP segment: 3 are fragments of IP packets carrying TCP"),
        "{}",
        r.stderr
    );
    // TCP, but not what the filter asks for; the same capture without it judges (exit 0).
    let tcp = || {
        let mut v = pcap_header();
        let (c, s) = (([10, 0, 0, 1], 40000), ([10, 0, 0, 2], 80));
        v.extend(record(0, c, s, 6, SYN));
        v.extend(record(100, s, c, 6, SYN | ACK));
        v.extend(record(200, c, s, 6, ACK));
        v
    };
    let r = doctor(&["--filter", ":8080", "--filter", "10.9.9.9"], move |w| {
        let _ = w.write_all(&tcp());
    });
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no TCP flow of its 3 segment(s) matches the filter(s) :8080 10.9.9.9"),
        "{}",
        r.stderr
    );
    let r = doctor(&[], move |w| {
        let _ = w.write_all(&tcp());
    });
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // A flow number the capture does not have: the error counts the flows it does have.
    for n in ["0", "2"] {
        let r = doctor(&["--flow", n], move |w| {
            let _ = w.write_all(&tcp());
        });
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert!(
            r.stderr.contains(&format!("no flow {n} in")) && r.stderr.contains("(1 flow(s) match"),
            "{}",
            r.stderr
        );
    }
}

/// A million distinct SYNs (each a flow of its own, none ending; the hostile capture):
/// the live flows are bounded, the older half judged early with a warning, and memory stays
/// under the bound (the build before took about 3.3 kB per flow: 3.3 GB here).
#[test]
fn a_syn_flood_stays_under_100_mb() {
    let r = doctor(&[], |w| {
        let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
        let _ = w.write_all(&pcap_header());
        for i in 0..1_000_000u32 {
            let [_, a, b, c] = i.to_be_bytes();
            let src = ([10, a, b, c], 1024 + (i % 60_000) as u16);
            if w.write_all(&record(u64::from(i), src, ([10, 255, 0, 1], 80), 6, SYN))
                .is_err()
            {
                return;
            }
        }
        let _ = w.flush();
    });
    eprintln!("SYN flood: exit {:?}, {} kB", r.code, r.max_rss_kb);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr.contains("were judged before they ended"),
        "{}",
        r.stderr
    );
    assert!(
        r.max_rss_kb < MAX_RSS_KB,
        "{} kB resident for a SYN flood",
        r.max_rss_kb
    );
}

/// A million pcapng interface descriptions (20 MB; a hostile file compresses them to
/// kilobytes): refused past the cap with a message naming it, under the memory bound.
#[test]
fn a_flood_of_pcapng_interfaces_is_refused_under_100_mb() {
    let r = doctor(&[], |w| {
        let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
        // Section header: type, length, byte-order magic, version 1.0, section length -1.
        let mut shb = vec![
            0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
        ];
        shb.extend_from_slice(&[0xff; 8]);
        shb.extend_from_slice(&28u32.to_le_bytes());
        let _ = w.write_all(&shb);
        // Interface description: type 1, length 20, Ethernet, snap length 65535.
        let mut idb = vec![1, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0];
        idb.extend_from_slice(&65535u32.to_le_bytes());
        idb.extend_from_slice(&20u32.to_le_bytes());
        for _ in 0..1_000_000 {
            if w.write_all(&idb).is_err() {
                return;
            }
        }
        let _ = w.flush();
    });
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("more than 65536 interfaces in one section"),
        "{}",
        r.stderr
    );
    assert!(r.max_rss_kb < MAX_RSS_KB, "{} kB resident", r.max_rss_kb);
}

/// A zstd frame that asks for a 128 MiB window (as `zstd --long=27` makes), written by hand
/// (frame header with a window descriptor, then one raw block holding a pcap header): refused
/// with what to do, under the memory bound.
#[test]
fn a_zstd_frame_with_a_huge_window_is_refused_with_what_to_do() {
    let r = doctor(&[], |w| {
        let body = pcap_header();
        // Magic; frame header descriptor 0 (a window descriptor follows, no content size);
        // window descriptor: exponent 17, so 2^(10 + 17) bytes.
        let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 17 << 3];
        // The last block, raw, of body.len() bytes: 1 | type 0 << 1 | size << 3.
        let block = 1 | (body.len() as u32) << 3;
        frame.extend_from_slice(&block.to_le_bytes()[..3]);
        frame.extend_from_slice(&body);
        let _ = w.write_all(&frame);
    });
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("window over 32 MiB") && r.stderr.contains("zstd -d --long=31"),
        "{}",
        r.stderr
    );
    assert!(r.max_rss_kb < MAX_RSS_KB, "{} kB resident", r.max_rss_kb);
}

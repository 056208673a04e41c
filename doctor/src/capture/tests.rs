//! The reader over hand-made files: both formats, both byte orders, and every error naming
//! its record and offset.

use super::pcapng::{EPB, IDB};
use super::*;

/// Every record of an in-memory capture, owned.
/// (ns, linktype, data, orig_len).
type Owned = (u64, LinkType, Vec<u8>, u32);

fn read(bytes: &[u8]) -> Result<Vec<Owned>, CaptureError> {
    let mut r = CaptureReader::new(bytes)?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record()? {
        out.push((rec.ts_ns, rec.linktype, rec.data.to_vec(), rec.orig_len));
    }
    Ok(out)
}

/// A pcapng section header, then a block of type 1 whose length field is `len`.
fn block_of_length(len: u32) -> Vec<u8> {
    let mut v = vec![
        0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
    ];
    v.extend_from_slice(&[0xff; 8]);
    v.extend_from_slice(&28u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&[0; 64]);
    v
}

#[test]
fn a_bad_block_length_says_which_rule_it_breaks() {
    for (len, says) in [
        (8, "block length 8: less than the 12 bytes"),
        (22, "block length 22: not a multiple of 4"),
        (32 << 20, "block length 33554432: more than the 16 MiB"),
    ] {
        let err = read(&block_of_length(len)).unwrap_err().to_string();
        assert!(err.contains(says), "{len}: {err}");
    }
}

pub(crate) fn pcap(records: &[(u64, &[u8])], linktype: u32) -> Vec<u8> {
    let mut v = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&linktype.to_le_bytes());
    for (us, d) in records {
        v.extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&(d.len() as u32).to_le_bytes());
        v.extend_from_slice(&(d.len() as u32).to_le_bytes());
        v.extend_from_slice(d);
    }
    v
}

fn block(kind: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    while body.len() % 4 != 0 {
        body.push(0);
    }
    let len = (body.len() + 12) as u32;
    let mut v = kind.to_le_bytes().to_vec();
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&body);
    v.extend_from_slice(&len.to_le_bytes());
    v
}

#[test]
fn pcap_both_byte_orders_and_nanoseconds() {
    let le = pcap(&[(1_500_000, b"abc")], 1);
    let r = read(&le).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, 1_500_000_000);
    assert_eq!(r[0].2, b"abc");
    assert_eq!(r[0].1, LinkType::Ethernet);
    // Big-endian, nanosecond magic.
    let mut be = vec![0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0];
    be.extend_from_slice(&65535u32.to_be_bytes());
    be.extend_from_slice(&101u32.to_be_bytes());
    be.extend_from_slice(&2u32.to_be_bytes());
    be.extend_from_slice(&5u32.to_be_bytes());
    be.extend_from_slice(&1u32.to_be_bytes());
    be.extend_from_slice(&1u32.to_be_bytes());
    be.push(0x45);
    let r = read(&be).unwrap();
    assert_eq!(r[0].0, 2_000_000_005);
    assert_eq!(r[0].1, LinkType::Raw);
}

#[test]
fn pcapng_with_tsresol_and_errors_name_the_offset() {
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    let mut idb = vec![113, 0, 0, 0];
    idb.extend_from_slice(&0u32.to_le_bytes());
    idb.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0]); // if_tsresol = 10^-9
    idb.extend_from_slice(&[0, 0, 0, 0]);
    let mut epb = 0u32.to_le_bytes().to_vec();
    let ts: u64 = 3_000_000_007;
    epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
    epb.extend_from_slice(&(ts as u32).to_le_bytes());
    epb.extend_from_slice(&3u32.to_le_bytes());
    epb.extend_from_slice(&60u32.to_le_bytes());
    epb.extend_from_slice(b"xyz");
    let mut file = block(0x0a0d_0d0a, &shb);
    file.extend(block(IDB, &idb));
    file.extend(block(EPB, &epb));
    let r = read(&file).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, 3_000_000_007);
    assert_eq!(r[0].1, LinkType::LinuxSll);
    assert_eq!(r[0].2, b"xyz");
    assert_eq!(r[0].3, 60);
    let cut = &file[..file.len() - 6];
    let e = read(cut).unwrap_err().to_string();
    assert!(e.contains("offset") && e.contains("record 3"), "{e}");
}

#[test]
fn a_pcap_link_type_that_says_its_frames_carry_a_check_sequence_is_still_ethernet() {
    // Bit 26: an FCS length is given; bits 28-31: 2 (in 16-bit words: 4 bytes).
    for field in [0x0400_0001u32, 0x2400_0001] {
        let mut f = pcap(&[(0, b"abc")], 1);
        f[20..24].copy_from_slice(&field.to_le_bytes());
        let r = read(&f).unwrap();
        assert_eq!(r[0].1, LinkType::Ethernet, "{field:#x}");
    }
}

#[test]
fn a_pcapng_time_past_2554_is_read_and_keeps_its_steps() {
    // PcapPlusPlus's pcapng-example.pcapng has an interface whose times (µs) are near 2^64:
    // the year 586,000. They are read (wrapped at 2^64 ns), and the steps between its frames
    // are kept, which is all the analysis uses.
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    let mut idb = vec![1, 0, 0, 0];
    idb.extend_from_slice(&0u32.to_le_bytes());
    let epb = |ts: u64| {
        let mut b = 0u32.to_le_bytes().to_vec();
        b.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        b.extend_from_slice(&(ts as u32).to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(b"xyz");
        block(EPB, &b)
    };
    let mut file = block(0x0a0d_0d0a, &shb);
    file.extend(block(IDB, &idb));
    file.extend(epb(18_446_744_073_204_126_329));
    file.extend(epb(18_446_744_073_204_128_332));
    let r = read(&file).unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[1].0.wrapping_sub(r[0].0), 2_003_000);
}

#[test]
fn truncated_pcap_names_the_frame() {
    let mut f = pcap(&[(0, b"abcdef"), (1, b"ghijkl")], 1);
    f.truncate(f.len() - 2);
    let e = read(&f).unwrap_err();
    assert!(
        matches!(e, CaptureError::Truncated { record: 2, .. }),
        "{e}"
    );
    assert!(read(b"hello world").is_err());
}

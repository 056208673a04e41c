//! A typed snapshot of Linux `struct tcp_info`: the kernel's own count of data segments,
//! bytes, RTT and MSS, readable without root.
//!
//! The kernel copies `min(asked, sizeof)` bytes, so older kernels return a shorter struct:
//! [`TcpInfo::parse`] reads only fields inside the returned length and leaves later ones
//! `None`. Layout: `include/uapi/linux/tcp.h` (6.x); counters are in MSS units (a 64 KiB GSO
//! super-packet counts as several segments).

use std::io;

use crate::sys::AsOsSocket;

/// The fields of `struct tcp_info` this project uses.
///
/// ```no_run
/// use std::io::{Read, Write};
/// use nagless::NaglessStream;
///
/// let mut s = NaglessStream::connect("127.0.0.1:7000")?;
/// s.write_all(b"GET / HTTP/1.1\r\n")?;
/// s.write_all(b"Host: a\r\n\r\n")?;
/// s.read(&mut [0u8; 512])?;
/// let info = s.tcp_info()?; // Linux
/// println!("{:?} data segments sent, RTT {} us", info.data_segs_out, info.rtt_us);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpInfo {
    /// TCP state ([`TcpState::raw`] gives the kernel's number).
    pub state: TcpState,
    /// Congestion-control state ([`CaState::raw`] gives the kernel's number).
    pub ca_state: CaState,
    /// Retransmission timeouts since the last ACK of new data (the kernel's
    /// `icsk_retransmits`; zero-window probes do not count).
    pub timeouts: u8,
    /// Unanswered zero-window or keep-alive probes now.
    pub probes: u8,
    /// Backoff of the retransmission or zero-window probe timer now (0 when neither backs
    /// off).
    pub backoff: u8,
    /// Retransmission timeout, µs.
    pub rto_us: u32,
    /// Delayed-ACK timeout, µs.
    pub ato_us: u32,
    /// Current send MSS.
    pub snd_mss: u32,
    /// Receiver's estimate of the peer's MSS.
    pub rcv_mss: u32,
    /// Segments in flight (MSS units).
    pub unacked: u32,
    /// Time since the last data segment was sent, ms (counted in the kernel's clock ticks:
    /// 4 ms at HZ=250).
    pub last_data_sent_ms: u32,
    /// Time since the last data segment arrived, ms (in clock ticks, as `last_data_sent_ms`).
    pub last_data_recv_ms: u32,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Retransmitted segments over the connection's life.
    pub total_retrans: u32,
    /// Cumulative bytes acknowledged by the peer (SYN and FIN count one each).
    pub bytes_acked: Option<u64>,
    /// Payload bytes received.
    pub bytes_received: Option<u64>,
    /// Every segment sent: data, pure ACKs, SYN/FIN, probes, retransmits.
    pub segs_out: Option<u32>,
    /// Every segment received.
    pub segs_in: Option<u32>,
    /// Bytes written but not yet sent.
    pub notsent_bytes: Option<u32>,
    /// Windowed minimum RTT, µs.
    pub min_rtt_us: Option<u32>,
    /// Segments received with payload.
    pub data_segs_in: Option<u32>,
    /// Segments sent with payload, including retransmits.
    pub data_segs_out: Option<u32>,
    /// Payload bytes sent, including retransmits.
    pub bytes_sent: Option<u64>,
    /// Time the connection was busy sending (data in flight or waiting to be sent), µs,
    /// 4.10+.
    pub busy_time_us: Option<u64>,
    /// Of that, time limited by the peer's receive window, µs, 4.10+.
    pub rwnd_limited_us: Option<u64>,
    /// Of that, time limited by the send buffer (the program wrote faster than the connection
    /// sent), µs, 4.10+.
    pub sndbuf_limited_us: Option<u64>,
    /// Payload bytes sent again (retransmits, loss probes), 4.19+.
    pub bytes_retrans: Option<u64>,
    /// The peer's advertised window, bytes (5.4+).
    pub snd_wnd: Option<u32>,
}

/// A TCP connection's state, as the kernel numbers it (`include/net/tcp_states.h`):
/// [`TcpInfo::state`]. Its default, `Other(0)`, is no state the kernel reports.
///
/// ```
/// use nagless::TcpState;
///
/// assert_eq!(TcpState::from_raw(1), TcpState::Established);
/// assert_eq!(TcpState::from_raw(8).raw(), 8); // CLOSE_WAIT, and back
/// assert_eq!(TcpState::from_raw(200), TcpState::Other(200)); // a number unknown here
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TcpState {
    /// `TCP_ESTABLISHED` (1).
    Established,
    /// `TCP_SYN_SENT` (2).
    SynSent,
    /// `TCP_SYN_RECV` (3).
    SynRecv,
    /// `TCP_FIN_WAIT1` (4).
    FinWait1,
    /// `TCP_FIN_WAIT2` (5).
    FinWait2,
    /// `TCP_TIME_WAIT` (6).
    TimeWait,
    /// `TCP_CLOSE` (7).
    Close,
    /// `TCP_CLOSE_WAIT` (8): the peer closed its side; this one may still send.
    CloseWait,
    /// `TCP_LAST_ACK` (9).
    LastAck,
    /// `TCP_LISTEN` (10).
    Listen,
    /// `TCP_CLOSING` (11).
    Closing,
    /// `TCP_NEW_SYN_RECV` (12).
    NewSynRecv,
    /// A number this version does not know; the kernel's value as is.
    Other(u8),
}

impl Default for TcpState {
    fn default() -> TcpState {
        TcpState::Other(0)
    }
}

impl TcpState {
    const NAMED: [TcpState; 12] = [
        TcpState::Established,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::FinWait1,
        TcpState::FinWait2,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::Listen,
        TcpState::Closing,
        TcpState::NewSynRecv,
    ];

    /// The state the kernel's number stands for.
    pub fn from_raw(raw: u8) -> TcpState {
        match raw {
            1..=12 => Self::NAMED[usize::from(raw) - 1],
            other => TcpState::Other(other),
        }
    }

    /// The kernel's number.
    pub fn raw(self) -> u8 {
        match self {
            TcpState::Other(raw) => raw,
            named => {
                // The named states are numbered 1..=12 in `NAMED`'s order.
                let i = Self::NAMED.iter().position(|s| *s == named).unwrap_or(0);
                i as u8 + 1
            }
        }
    }

    /// The connection can still send: established, or half-closed by the peer.
    pub fn can_send(self) -> bool {
        matches!(self, TcpState::Established | TcpState::CloseWait)
    }
}

impl From<u8> for TcpState {
    fn from(raw: u8) -> Self {
        TcpState::from_raw(raw)
    }
}

impl From<TcpState> for u8 {
    fn from(s: TcpState) -> u8 {
        s.raw()
    }
}

/// A connection's congestion-control state, as the kernel numbers it (`enum
/// tcp_ca_state`, `include/uapi/linux/tcp.h`): [`TcpInfo::ca_state`]. Its default is
/// `Open`.
///
/// ```
/// use nagless::CaState;
///
/// assert_eq!(CaState::from_raw(4), CaState::Loss);
/// assert!(!CaState::Recovery.is_open()); // losses are being repaired
/// assert_eq!(CaState::from_raw(9), CaState::Other(9)); // a number unknown here
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CaState {
    /// `TCP_CA_Open` (0): nothing lost, nothing in doubt.
    #[default]
    Open,
    /// `TCP_CA_Disorder` (1): duplicate ACKs or SACKs seen.
    Disorder,
    /// `TCP_CA_CWR` (2): the window was reduced (ECN, or a local congestion signal).
    Cwr,
    /// `TCP_CA_Recovery` (3): fast retransmit in progress.
    Recovery,
    /// `TCP_CA_Loss` (4): a retransmission timeout fired.
    Loss,
    /// A number this version does not know; the kernel's value as is.
    Other(u8),
}

impl CaState {
    /// The state the kernel's number stands for.
    pub fn from_raw(raw: u8) -> CaState {
        match raw {
            0 => CaState::Open,
            1 => CaState::Disorder,
            2 => CaState::Cwr,
            3 => CaState::Recovery,
            4 => CaState::Loss,
            other => CaState::Other(other),
        }
    }

    /// The kernel's number.
    pub fn raw(self) -> u8 {
        match self {
            CaState::Open => 0,
            CaState::Disorder => 1,
            CaState::Cwr => 2,
            CaState::Recovery => 3,
            CaState::Loss => 4,
            CaState::Other(raw) => raw,
        }
    }

    /// Nothing lost or in doubt: the connection is not repairing losses.
    pub fn is_open(self) -> bool {
        self == CaState::Open
    }
}

impl From<u8> for CaState {
    fn from(raw: u8) -> Self {
        CaState::from_raw(raw)
    }
}

impl From<CaState> for u8 {
    fn from(s: CaState) -> u8 {
        s.raw()
    }
}

/// The kernel's `__u32` at `off` (native order), if the kernel's struct reaches it.
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(*b.get(off..)?.first_chunk()?))
}

/// The kernel's `__u64` at `off` (native order), if the kernel's struct reaches it.
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(*b.get(off..)?.first_chunk()?))
}

/// Size of the original (pre-4.x) struct, which every Linux kernel fills.
const BASE_LEN: usize = 104;

impl TcpInfo {
    /// Parses the bytes `getsockopt(TCP_INFO)` filled. Returns `None` if even the base struct
    /// is missing.
    pub fn parse(raw: &[u8]) -> Option<TcpInfo> {
        if raw.len() < BASE_LEN {
            return None;
        }
        let base = |off| u32_at(raw, off).unwrap_or(0);
        Some(TcpInfo {
            state: TcpState::from_raw(raw[0]),
            ca_state: CaState::from_raw(raw[1]),
            timeouts: raw[2],
            probes: raw[3],
            backoff: raw[4],
            rto_us: base(8),
            ato_us: base(12),
            snd_mss: base(16),
            rcv_mss: base(20),
            unacked: base(24),
            last_data_sent_ms: base(44),
            last_data_recv_ms: base(52),
            rtt_us: base(68),
            rttvar_us: base(72),
            snd_cwnd: base(80),
            total_retrans: base(100),
            bytes_acked: u64_at(raw, 120),
            bytes_received: u64_at(raw, 128),
            segs_out: u32_at(raw, 136),
            segs_in: u32_at(raw, 140),
            notsent_bytes: u32_at(raw, 144),
            min_rtt_us: u32_at(raw, 148),
            data_segs_in: u32_at(raw, 152),
            data_segs_out: u32_at(raw, 156),
            busy_time_us: u64_at(raw, 168),
            rwnd_limited_us: u64_at(raw, 176),
            sndbuf_limited_us: u64_at(raw, 184),
            bytes_sent: u64_at(raw, 200),
            bytes_retrans: u64_at(raw, 208),
            snd_wnd: u32_at(raw, 228),
        })
    }

    /// Reads a snapshot from a TCP socket (Linux; `ErrorKind::Unsupported` on other OSes, whose
    /// TCP statistics have other layouts).
    pub fn of(socket: &impl AsOsSocket) -> io::Result<TcpInfo> {
        let mut buf = [0u8; 512];
        let len = crate::sys::tcp_info_raw(socket.as_os_socket(), &mut buf)?;
        TcpInfo::parse(&buf[..len]).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("kernel returned a {len}-byte tcp_info, shorter than {BASE_LEN}"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_struct_leaves_new_fields_empty() {
        let mut raw = vec![0u8; 120];
        raw[0] = 1;
        raw[16..20].copy_from_slice(&1448u32.to_ne_bytes());
        raw[44..48].copy_from_slice(&7u32.to_ne_bytes());
        raw[52..56].copy_from_slice(&250u32.to_ne_bytes());
        let info = TcpInfo::parse(&raw).unwrap();
        assert_eq!(info.state, TcpState::Established);
        assert_eq!(info.snd_mss, 1448);
        assert_eq!((info.last_data_sent_ms, info.last_data_recv_ms), (7, 250));
        assert_eq!(info.data_segs_out, None);
        assert_eq!(info.bytes_acked, None);
        assert!(TcpInfo::parse(&raw[..50]).is_none());
    }

    /// The kernel's own account of a sender's time: a receiver that reads nothing closes its
    /// window, and the sender's time from then is busy and limited by that window.
    #[cfg(target_os = "linux")]
    #[test]
    #[allow(clippy::disallowed_methods)] // the kernel's clock runs while the test waits
    fn a_window_that_stays_closed_is_the_senders_receive_window_limited_time() {
        use std::io::Write;
        use std::net::{TcpListener, TcpStream};
        use std::time::Duration;

        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s2 = socket2::Socket::from(TcpStream::connect(l.local_addr().unwrap()).unwrap());
        let (reader, _) = l.accept().unwrap();
        socket2::SockRef::from(&reader)
            .set_recv_buffer_size(4096)
            .unwrap();
        let mut sender = TcpStream::from(s2);
        sender.set_nonblocking(true).unwrap();
        // Written until the window and the send buffer are full (bounded: 64 MB).
        let chunk = [7u8; 65536];
        let mut written = 0;
        while written < 64 << 20 {
            match sender.write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        let info = TcpInfo::of(&sender).unwrap();
        let rwnd = info.rwnd_limited_us.expect("4.10+");
        let busy = info.busy_time_us.expect("4.10+");
        assert!(rwnd >= 100_000, "{info:?}");
        assert!(busy >= rwnd, "{info:?}");
        drop(reader);
    }

    #[test]
    fn every_state_number_comes_back() {
        for raw in 0..=u8::MAX {
            assert_eq!(TcpState::from_raw(raw).raw(), raw);
        }
        assert_eq!(TcpState::from_raw(8), TcpState::CloseWait);
        assert!(TcpState::from_raw(8).can_send() && !TcpState::from_raw(7).can_send());
        assert_eq!(
            TcpInfo::default().state,
            TcpState::Other(0),
            "no state the kernel reports"
        );
    }

    #[test]
    fn every_congestion_state_number_comes_back() {
        for raw in 0..=u8::MAX {
            assert_eq!(CaState::from_raw(raw).raw(), raw);
        }
        let mut raw = vec![0u8; 120];
        raw[1] = 3;
        assert_eq!(TcpInfo::parse(&raw).unwrap().ca_state, CaState::Recovery);
        raw[1] = 0;
        assert!(TcpInfo::parse(&raw).unwrap().ca_state.is_open());
        assert_eq!(TcpInfo::default().ca_state, CaState::Open);
    }

    #[test]
    fn full_struct_fields_at_their_offsets() {
        let mut raw = vec![0u8; 232];
        raw[156..160].copy_from_slice(&7u32.to_ne_bytes());
        raw[200..208].copy_from_slice(&12345u64.to_ne_bytes());
        let info = TcpInfo::parse(&raw).unwrap();
        assert_eq!(info.data_segs_out, Some(7));
        assert_eq!(info.bytes_sent, Some(12345));
    }
}

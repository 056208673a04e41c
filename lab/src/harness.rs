//! Runs one connection (a session) on loopback: a server thread and a client thread, each
//! with a [`Conn`] of the same strategy, and collects what each side cost.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

use crate::strategy::{Conn, Strategy};
use crate::sys;

/// The path a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Path {
    /// `TCP_MAXSEG` on both ends (`None`: the path's own, ~64 KiB on loopback).
    pub mss: Option<u32>,
    /// An emulated link between two network namespaces instead of loopback.
    #[serde(flatten)]
    pub link: Option<Link>,
}

/// An emulated link ([`nagless_netpath`]): what `--rtt`, `--rate`, `--mtu`, `--loss`,
/// `--queue`, `--seed` and `--peer-ack-delay` ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Round-trip time, µs.
    pub rtt_us: u64,
    /// Rate of each direction, bits per second (`None`: unlimited).
    pub rate_bps: Option<u64>,
    /// MTU, bytes.
    pub mtu: u32,
    /// Loss probability of each direction, in parts per million.
    pub loss_ppm: u32,
    /// Drop-tail queue, bytes (`None`: one bandwidth-delay product).
    pub queue_bytes: Option<u64>,
    /// Seed of the loss generators.
    pub seed: u64,
    /// The server end's delayed-ACK timer, µs, when it acts as a host whose timer is longer
    /// than Linux's 40 ms (`None`: its own kernel's).
    pub peer_ack_delay_us: Option<u64>,
}

impl serde::Serialize for Link {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Link", 7)?;
        st.serialize_field("rtt_us", &self.rtt_us)?;
        st.serialize_field("rate_bps", &self.rate_bps)?;
        st.serialize_field("mtu", &self.mtu)?;
        st.serialize_field("loss", &(f64::from(self.loss_ppm) / 1e6))?;
        st.serialize_field("queue_bytes", &self.queue_bytes)?;
        st.serialize_field("seed", &self.seed)?;
        st.serialize_field("peer_ack_delay_us", &self.peer_ack_delay_us)?;
        st.end()
    }
}

impl Link {
    /// The emulated path's settings.
    pub fn spec(&self) -> nagless_netpath::PathSpec {
        nagless_netpath::PathSpec {
            rtt: Duration::from_micros(self.rtt_us),
            rate_bps: self.rate_bps,
            mtu: self.mtu,
            loss: f64::from(self.loss_ppm) / 1e6,
            queue_bytes: self.queue_bytes.map(|q| q as usize),
            seed: self.seed,
            server_ack_delay: self.peer_ack_delay_us.map(Duration::from_micros),
            client_ack_delay: None,
        }
    }

    /// A short label: `rtt20ms`, with `/100mbit`, `/mtu1400`, `/loss0.5%`, `/peer-ack200ms`
    /// when set.
    pub(crate) fn label(&self) -> String {
        let ms = self.rtt_us as f64 / 1000.0;
        let mut l = format!("rtt{ms}ms");
        if let Some(r) = self.rate_bps {
            l += &format!("/{}mbit", r as f64 / 1e6);
        }
        if self.mtu != 1500 {
            l += &format!("/mtu{}", self.mtu);
        }
        if self.loss_ppm > 0 {
            l += &format!("/loss{}%", f64::from(self.loss_ppm) / 1e4);
        }
        if let Some(d) = self.peer_ack_delay_us {
            l += &format!("/peer-ack{}ms", d as f64 / 1000.0);
        }
        l
    }
}

impl Path {
    /// Loopback with its own MSS.
    pub const LOOPBACK: Path = Path {
        mss: None,
        link: None,
    };

    /// Loopback with `TCP_MAXSEG` set on both ends.
    pub const fn mss(mss: u32) -> Path {
        Path {
            mss: Some(mss),
            link: None,
        }
    }

    /// A short label: `lo`, `mss1448`, or the link's (`rtt20ms/100mbit`).
    pub(crate) fn label(&self) -> String {
        match (self.link, self.mss) {
            (Some(l), _) => l.label(),
            (None, None) => "lo".into(),
            (None, Some(m)) => format!("mss{m}"),
        }
    }
}

/// Where a run happens: the path, and the CPU both ends are pinned to.
///
/// Pinning client and server to one CPU (the default of `nagless lab`) takes cross-CPU
/// wake-ups out of the latencies: on a small virtual machine they cost 50-100 µs and vary
/// from run to run, while the stalls under study are 40 ms and the differences between
/// stall-free strategies are a few µs.
#[derive(Debug, Clone, Copy)]
pub struct Setup<'a> {
    /// The network path.
    pub path: Path,
    /// Pin both ends' threads to this CPU (`None`: the scheduler places them).
    pub pin: Option<usize>,
    /// The emulated path the sockets are made in, when `path.link` asks for one.
    pub net: Option<&'a nagless_netpath::EmulatedPath>,
    /// The `nagless` executable, which starts a glue case's end under `nagless run` (the
    /// `run` strategy).
    pub exe: Option<&'a std::path::Path>,
}

/// What one side of a session cost, from the kernel's and the process's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SideCost {
    /// Data segments sent (`tcpi_data_segs_out`, MSS units).
    pub data_segs: u64,
    /// All segments sent, pure ACKs included (`tcpi_segs_out`).
    pub segs: u64,
    /// Payload bytes sent (`tcpi_bytes_sent`).
    pub bytes: u64,
    /// Syscalls the strategy made.
    pub syscalls: u64,
    /// CPU time of the side's thread, µs.
    pub cpu_us: u64,
}

/// Bytes of headers per segment on an Ethernet wire: Ethernet 14 + IPv4 20 + TCP 20 +
/// timestamps option 12.
pub(crate) const HEADER_BYTES: u64 = 66;

impl SideCost {
    /// Payload plus headers of every segment.
    pub(crate) fn wire_bytes(&self) -> u64 {
        self.bytes + self.segs * HEADER_BYTES
    }

    /// Adds another side's counters.
    pub(crate) fn add(&mut self, o: &SideCost) {
        self.data_segs += o.data_segs;
        self.segs += o.segs;
        self.bytes += o.bytes;
        self.syscalls += o.syscalls;
        self.cpu_us += o.cpu_us;
    }
}

/// What a session's client reports: one latency per exchange and the units of work done.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientReport {
    /// Per-exchange latencies, µs.
    pub(crate) latencies_us: Vec<u64>,
    /// Units of work completed (round trips, messages, bytes, requests).
    pub(crate) work: f64,
}

/// The result of one run of a case with one strategy.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// Per-exchange latencies, µs.
    pub latencies_us: Vec<u64>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Units of work completed.
    pub work: f64,
    /// Client side cost.
    pub client: SideCost,
    /// Server side cost.
    pub server: SideCost,
}

impl RunResult {
    /// Merges another session into this run (elapsed is set by the caller).
    pub(crate) fn absorb(&mut self, report: ClientReport, client: SideCost, server: SideCost) {
        self.latencies_us.extend(report.latencies_us);
        self.work += report.work;
        self.client.add(&client);
        self.server.add(&server);
    }
}

/// Whether `e` is the peer ending the connection (closed, possibly with bytes unread: RST).
pub(crate) fn peer_ended(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
    )
}

/// Safety net: no lab socket waits longer than this for a byte.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// A TCP socket with the path's MSS set (before listen or connect, as the kernel needs).
fn socket(path: Path) -> io::Result<Socket> {
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    if let Some(mss) = path.mss {
        sock.set_tcp_mss(mss)?;
    }
    Ok(sock)
}

/// A listener on loopback, or on the server side of the emulated path (a socket stays in
/// the namespace it was made in, whichever thread uses it).
pub(crate) fn listener(setup: &Setup<'_>) -> io::Result<TcpListener> {
    let make = |ip: std::net::IpAddr| -> io::Result<TcpListener> {
        let sock = socket(setup.path)?;
        sock.set_reuse_address(true)?;
        sock.bind(&SocketAddr::new(ip, 0).into())?;
        sock.listen(128)?;
        Ok(sock.into())
    };
    match setup.net {
        None => make(std::net::Ipv4Addr::LOCALHOST.into()),
        Some(net) => net.run_in_server(|| make(net.server_addr().into()))?,
    }
}

pub(crate) fn connect(setup: &Setup<'_>, addr: SocketAddr) -> io::Result<TcpStream> {
    let make = || -> io::Result<TcpStream> {
        let sock = socket(setup.path)?;
        sock.connect(&addr.into())?;
        Ok(sock.into())
    };
    match setup.net {
        None => make(),
        Some(net) => net.run_in_client(make)?,
    }
}

pub(crate) fn side_cost(conn: &Conn, cpu_start: u64) -> io::Result<SideCost> {
    let info = conn.tcp_info()?;
    Ok(SideCost {
        data_segs: info.data_segs_out.unwrap_or(0) as u64,
        segs: info.segs_out.unwrap_or(0) as u64,
        bytes: info.bytes_sent.unwrap_or(0),
        syscalls: conn.syscalls(),
        cpu_us: sys::thread_cpu_us().saturating_sub(cpu_start),
    })
}

/// Runs one session: `server` on the accepted end, `client` on the connecting end. The
/// client closes the connection when it returns; the server should return on EOF.
/// `started` receives the instant just before connect.
pub(crate) fn session<C, S>(
    setup: Setup<'_>,
    strategy: Strategy,
    client: C,
    server: S,
) -> io::Result<(ClientReport, SideCost, SideCost)>
where
    C: FnOnce(&mut Conn, Instant) -> io::Result<ClientReport>,
    S: FnOnce(&mut Conn) -> io::Result<()> + Send,
{
    let listener = listener(&setup)?;
    let addr = listener.local_addr()?;
    std::thread::scope(|scope| {
        let server_thread = scope.spawn(move || -> io::Result<SideCost> {
            if let Some(cpu) = setup.pin {
                sys::pin_to_cpu(cpu);
            }
            let cpu0 = sys::thread_cpu_us();
            let (tcp, _) = listener.accept()?;
            tcp.set_read_timeout(Some(IO_TIMEOUT))?;
            let mut conn = Conn::new(tcp, strategy)?;
            match server(&mut conn) {
                Ok(()) => {}
                // The client ends a session by closing, possibly with replies unread (RST).
                Err(e) if peer_ended(&e) => {}
                Err(e) => return Err(e),
            }
            // The peer may be gone already: flushing what it will never read is no error.
            let _ = conn.finish();
            side_cost(&conn, cpu0)
        });
        let client_result: io::Result<(ClientReport, SideCost)> = (|| {
            if let Some(cpu) = setup.pin {
                sys::pin_to_cpu(cpu);
            }
            let cpu0 = sys::thread_cpu_us();
            let started = Instant::now();
            let tcp = connect(&setup, addr)?;
            tcp.set_read_timeout(Some(IO_TIMEOUT))?;
            let mut conn = Conn::new(tcp, strategy)?;
            let report = client(&mut conn, started)?;
            conn.finish()?;
            let cost = side_cost(&conn, cpu0)?;
            drop(conn);
            Ok((report, cost))
        })();
        if client_result.is_err() {
            // Unblock a server still waiting in accept (the client may have failed first).
            let _ = connect(&setup, addr);
        }
        let server_cost = server_thread
            .join()
            .map_err(|_| io::Error::other("server thread panicked"))?;
        let (report, client_cost) = client_result?;
        Ok((report, client_cost, server_cost?))
    })
}

/// What one session of a case gives: the client's report, and the two sides' costs.
pub(crate) type Session = (ClientReport, SideCost, SideCost);

//! The kernel's view of every TCP socket, through netlink `sock_diag` (what `ss -ti` reads):
//! addresses, state, owner, inode, and the raw `struct tcp_info`. One dump (one walk of the
//! kernel's socket hash) for both address families; the only module of the crate that talks
//! to the kernel's socket interface.

use std::io;
use std::net::{IpAddr, SocketAddr};

use nagless::TcpInfo;
use nagless::TcpState;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::constants::{AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::nlas::Nla;
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponse, SocketId, StateFlags,
};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::{Socket, SocketAddr as NlAddr};

/// One TCP socket.
#[derive(Debug, Clone)]
pub(crate) struct SocketRow {
    /// Local address and port.
    pub(crate) local: SocketAddr,
    /// Remote address and port.
    pub(crate) remote: SocketAddr,
    /// TCP state.
    pub(crate) state: TcpState,
    /// Socket inode (0 for time-wait and orphaned sockets): what /proc/PID/fd links name.
    pub(crate) inode: u32,
    /// Owner's uid.
    pub(crate) uid: u32,
    /// The kernel's unique id of the socket.
    pub(crate) cookie: u64,
    /// Its TCP_INFO, if the kernel sent one.
    pub(crate) info: Option<TcpInfo>,
    /// Its network namespace (the inode of `/proc/PID/ns/net`; 0 until [`crate::netns`] sets it).
    pub(crate) netns: u64,
    /// Its address family (`AF_INET` or `AF_INET6`: an IPv6 socket may have IPv4-mapped
    /// addresses, shown as IPv4 in `local` and `remote`).
    pub(crate) family: u8,
    /// The interface it is bound to (0: none).
    pub(crate) ifindex: u32,
    /// Bytes written and not yet acknowledged, sent or not (the kernel's `write_seq -
    /// snd_una`): 0 when the socket has nothing in flight. Listed with or without `info`.
    /// A listener's: its backlog.
    pub(crate) send_queue: u32,
    /// Bytes received and not yet read (`idiag_rqueue`). A listener's: the connections in
    /// its accept queue.
    pub(crate) recv_queue: u32,
    /// Packets the socket dropped (`sk_drops`, from `INET_DIAG_SKMEMINFO`), when asked for
    /// ([`Diag::list_listeners`]). A listener's: the handshake packets it dropped, a full
    /// accept queue's above all.
    pub(crate) drops: Option<u32>,
}

impl SocketRow {
    fn from_response(family: u8, r: &InetResponse) -> SocketRow {
        let h = &r.header;
        let id = &h.socket_id;
        let info = r.nlas.iter().find_map(|nla| match nla {
            Nla::TcpInfo(raw) => TcpInfo::parse(raw),
            _ => None,
        });
        let drops = r.nlas.iter().find_map(|nla| match nla {
            Nla::MemInfo(m) => Some(m.drops),
            _ => None,
        });
        SocketRow {
            local: SocketAddr::new(id.source_address.to_canonical(), id.source_port),
            remote: SocketAddr::new(id.destination_address.to_canonical(), id.destination_port),
            state: TcpState::from_raw(h.state),
            inode: h.inode,
            uid: h.uid,
            cookie: u64::from_ne_bytes(id.cookie),
            info,
            netns: 0,
            family,
            ifindex: id.interface_id,
            send_queue: h.send_queue,
            recv_queue: h.recv_queue,
            drops,
        }
    }

    /// Its identity for an exact lookup.
    fn socket_id(&self) -> SocketId {
        let ip = |a: IpAddr| match (self.family, a) {
            (AF_INET6, IpAddr::V4(v4)) => IpAddr::V6(v4.to_ipv6_mapped()),
            _ => a,
        };
        SocketId {
            source_port: self.local.port(),
            destination_port: self.remote.port(),
            source_address: ip(self.local.ip()),
            destination_address: ip(self.remote.ip()),
            interface_id: self.ifindex,
            cookie: self.cookie.to_ne_bytes(),
        }
    }
}

/// A cookie that matches any socket in an exact lookup (`INET_DIAG_NOCOOKIE`).
pub(crate) const NO_COOKIE: u64 = u64::MAX;

/// `TCPDIAG_GETSOCK`: the compatibility dump request (linux/inet_diag.h).
const TCPDIAG_GETSOCK: u16 = 18;
/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// A `struct nlmsghdr` and a `struct inet_diag_req`.
const COMPAT_REQUEST_LEN: usize = 16 + 60;

/// Exact lookups sent in one datagram: their replies must fit the socket's receive buffer.
const LOOKUP_BATCH: usize = 64;

/// A netlink socket for dumps.
pub(crate) struct Diag {
    sock: Socket,
    buf: Vec<u8>,
    seq: u32,
}

impl Diag {
    /// Opens the netlink socket.
    pub(crate) fn open() -> io::Result<Diag> {
        let mut sock = Socket::new(NETLINK_SOCK_DIAG)?;
        sock.bind_auto()?;
        sock.connect(&NlAddr::new(0, 0))?;
        Ok(Diag {
            sock,
            // The kernel sizes later datagrams of a dump to the reader's buffer, up to 32 KiB.
            buf: vec![0; 64 * 1024],
            seq: 0,
        })
    }

    /// Every TCP socket in `states`, IPv4 and IPv6, with its `tcp_info`, appended to `out`.
    #[cfg(test)]
    pub(crate) fn dump(&mut self, states: StateFlags, out: &mut Vec<SocketRow>) -> io::Result<()> {
        self.dump_with(states, ExtensionFlags::INFO, out)
    }

    /// The same without `tcp_info` (`info` is `None`): the kernel spends about half as long
    /// on each socket, and `send_queue` still tells which have data in flight.
    pub(crate) fn list(&mut self, states: StateFlags, out: &mut Vec<SocketRow>) -> io::Result<()> {
        self.dump_with(states, ExtensionFlags::empty(), out)
    }

    /// The listening sockets, with what each dropped (`drops`, from their memory information:
    /// `INET_DIAG_SKMEMINFO`) and without `tcp_info`.
    pub(crate) fn list_listeners(&mut self, out: &mut Vec<SocketRow>) -> io::Result<()> {
        self.dump_with(StateFlags::LISTEN, ExtensionFlags::SKMEMINFO, out)
    }

    /// One dump of both address families: the compatibility request (`TCPDIAG_GETSOCK`, a
    /// `struct inet_diag_req`) asks for `AF_UNSPEC`, so the kernel walks its socket hash once,
    /// where a `SOCK_DIAG_BY_FAMILY` request per family walks it twice. Its replies are
    /// `inet_diag_msg`s, as those of the newer request are.
    fn dump_with(
        &mut self,
        states: StateFlags,
        ext: ExtensionFlags,
        out: &mut Vec<SocketRow>,
    ) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        // struct nlmsghdr, then struct inet_diag_req: family, src_len, dst_len, ext, the
        // 48-byte inet_diag_sockid (zero: any), states, dbs.
        let mut tx = Vec::with_capacity(COMPAT_REQUEST_LEN);
        tx.extend_from_slice(&(COMPAT_REQUEST_LEN as u32).to_ne_bytes());
        tx.extend_from_slice(&TCPDIAG_GETSOCK.to_ne_bytes());
        tx.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        tx.extend_from_slice(&seq.to_ne_bytes());
        tx.extend_from_slice(&0u32.to_ne_bytes());
        tx.extend_from_slice(&[0, 0, 0, ext.bits()]);
        tx.extend_from_slice(&[0; 48]);
        tx.extend_from_slice(&states.bits().to_ne_bytes());
        tx.extend_from_slice(&0u32.to_ne_bytes());
        debug_assert_eq!(tx.len(), COMPAT_REQUEST_LEN);
        self.sock.send(&tx, 0)?;
        self.receive(|m| {
            if m.header.sequence_number != seq {
                return None;
            }
            match m.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
                    out.push(SocketRow::from_response(r.header.family, &r));
                    None
                }
                NetlinkPayload::Done(d) if d.code < 0 => {
                    Some(Err(io::Error::from_raw_os_error(-d.code)))
                }
                NetlinkPayload::Done(_) => Some(Ok(())),
                NetlinkPayload::Error(e) => Some(Err(e.to_io())),
                NetlinkPayload::Overrun(_) => Some(Err(io::Error::other("netlink overrun"))),
                _ => None,
            }
        })
    }

    /// Reads replies, handing each message to `each` until it says the exchange is over
    /// (`Some`: done, or failed).
    fn receive(
        &mut self,
        mut each: impl FnMut(NetlinkMessage<SockDiagMessage>) -> Option<io::Result<()>>,
    ) -> io::Result<()> {
        loop {
            let n = self.sock.recv(&mut &mut self.buf[..], libc::MSG_TRUNC)?;
            if n > self.buf.len() {
                return Err(io::Error::other("netlink datagram larger than the buffer"));
            }
            let mut off = 0;
            while off + 16 <= n {
                // Replies to the compatibility dump carry its type; they are read as what
                // they are, `SOCK_DIAG_BY_FAMILY` replies.
                if self.buf[off + 4..off + 6] == TCPDIAG_GETSOCK.to_ne_bytes() {
                    self.buf[off + 4..off + 6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
                }
                let m = NetlinkMessage::<SockDiagMessage>::deserialize(&self.buf[off..n])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let len = m.header.length as usize;
                if let Some(done) = each(m) {
                    return done;
                }
                if len == 0 {
                    break;
                }
                off += (len + 3) & !3;
            }
        }
    }

    /// The sockets `socks` again, each looked up by its exact identity (addresses, ports,
    /// interface and cookie): the kernel finds each in its hash at once instead of walking the
    /// whole table as a dump does. Sockets gone (or reused) are left out; the rest are appended
    /// to `out`.
    pub(crate) fn lookup(
        &mut self,
        socks: &[&SocketRow],
        out: &mut Vec<SocketRow>,
    ) -> io::Result<()> {
        for batch in socks.chunks(LOOKUP_BATCH) {
            self.lookup_batch(batch, out)?;
        }
        Ok(())
    }

    fn lookup_batch(&mut self, socks: &[&SocketRow], out: &mut Vec<SocketRow>) -> io::Result<()> {
        let first = self.seq.wrapping_add(1);
        let mut tx = Vec::new();
        let mut family_of = Vec::with_capacity(socks.len());
        for s in socks {
            self.seq = self.seq.wrapping_add(1);
            let mut hdr = NetlinkHeader::default();
            hdr.flags = NLM_F_REQUEST;
            hdr.sequence_number = self.seq;
            let req = SockDiagMessage::InetRequest(InetRequest {
                family: s.family,
                protocol: IPPROTO_TCP,
                extensions: ExtensionFlags::INFO,
                states: StateFlags::all(),
                socket_id: s.socket_id(),
            });
            let mut msg = NetlinkMessage::new(hdr, req.into());
            msg.finalize();
            let at = tx.len();
            tx.resize(at + msg.buffer_len(), 0);
            msg.serialize(&mut tx[at..]);
            family_of.push(s.family);
        }
        self.sock.send(&tx, 0)?;
        // One reply per request: the socket, or an error (ENOENT: gone; ESTALE: reused).
        let mut pending = socks.len();
        self.receive(|m| {
            let k = m.header.sequence_number.wrapping_sub(first) as usize;
            if k < socks.len() {
                match m.payload {
                    NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
                        out.push(SocketRow::from_response(family_of[k], &r));
                        pending -= 1;
                    }
                    NetlinkPayload::Error(_) => pending -= 1,
                    _ => {}
                }
            }
            (pending == 0).then_some(Ok(()))
        })
    }
}

/// `SKNLGRP_INET_TCP_DESTROY` and `SKNLGRP_INET6_TCP_DESTROY` (linux/sock_diag.h): the
/// multicast groups the kernel tells of every TCP socket it frees, with its last `tcp_info`.
const TCP_DESTROY_GROUPS: [u32; 2] = [1, 3];

/// The receive buffer asked for the freed sockets' messages, bytes.
const DESTROYED_BUFFER: usize = 4 << 20;

/// A netlink socket told of every TCP socket freed in its namespace (needs `CAP_NET_ADMIN`
/// there): the kernel's last word on a connection, however short it was.
pub(crate) struct Destroyed {
    sock: Socket,
    buf: Vec<u8>,
}

impl Destroyed {
    /// Joins the groups; `PermissionDenied` without `CAP_NET_ADMIN`.
    pub(crate) fn open() -> io::Result<Destroyed> {
        let mut sock = Socket::new(NETLINK_SOCK_DIAG)?;
        sock.bind_auto()?;
        sock.set_non_blocking(true)?;
        // Room for a host's closes between two drains (up to a scan interval apart when
        // idle): a few hundred bytes each. (The kernel may cap it at net.core.rmem_max; what
        // overflows is counted as lost.)
        let _ = sock.set_rx_buf_sz(DESTROYED_BUFFER);
        for g in TCP_DESTROY_GROUPS {
            sock.add_membership(g)?;
        }
        Ok(Destroyed {
            sock,
            buf: vec![0; 64 * 1024],
        })
    }

    /// The sockets freed since the last call, each with its last `tcp_info`, appended to
    /// `out`; and whether some were lost (the receive buffer overflowed: `ENOBUFS`).
    pub(crate) fn drain(&mut self, out: &mut Vec<SocketRow>) -> io::Result<bool> {
        let mut lost = false;
        loop {
            let n = match self.sock.recv(&mut &mut self.buf[..], libc::MSG_TRUNC) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(lost),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    lost = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // (A datagram larger than the buffer, MSG_TRUNC, is read as far as it fits.)
            let n = n.min(self.buf.len());
            let mut off = 0;
            while off + 16 <= n {
                let Ok(m) = NetlinkMessage::<SockDiagMessage>::deserialize(&self.buf[off..n])
                else {
                    break; // (a message of a kind not parsed here: skipped with its datagram)
                };
                let len = m.header.length as usize;
                if let NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) = m.payload {
                    out.push(SocketRow::from_response(r.header.family, &r));
                }
                if len == 0 {
                    break;
                }
                off += (len + 3) & !3;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_listener_is_listed_with_its_queue_backlog_and_drops() {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        s.listen(1).unwrap();
        let l: TcpListener = s.into();
        let addr = l.local_addr().unwrap();
        let mut d = Diag::open().unwrap();
        let find = |d: &mut Diag| {
            let mut rows = Vec::new();
            d.list_listeners(&mut rows).unwrap();
            rows.into_iter().find(|r| r.local == addr).expect("listed")
        };
        let before = find(&mut d);
        assert_eq!((before.recv_queue, before.send_queue), (0, 1));
        // Two connections fill a backlog of 1; a third's SYN is dropped (and sent again
        // later: each drop counts).
        let mut socks = Vec::new();
        for _ in 0..3 {
            let c =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            c.set_nonblocking(true).unwrap();
            let _ = c.connect(&addr.into());
            socks.push(c);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let r = find(&mut d);
            if r.recv_queue == 2 && r.drops > before.drops {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{r:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_freed_socket_is_told_with_its_last_tcp_info() {
        let mut d = match Destroyed::open() {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                eprintln!("skipped: joining the destroy groups needs CAP_NET_ADMIN");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        let (local, remote) = (a.local_addr().unwrap(), a.peer_addr().unwrap());
        std::io::Write::write_all(&mut &a, b"0123456789").unwrap();
        let mut buf = [0u8; 10];
        std::io::Read::read_exact(&mut &c, &mut buf).unwrap();
        drop(c);
        drop(a);
        let mut rows = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !rows
            .iter()
            .any(|r: &SocketRow| r.local == local && r.remote == remote)
        {
            assert!(std::time::Instant::now() < deadline, "not told: {rows:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
            d.drain(&mut rows).unwrap();
        }
        let r = rows
            .iter()
            .find(|r| r.local == local && r.remote == remote)
            .unwrap();
        let info = r.info.expect("its last tcp_info");
        // The 10 bytes it sent were acknowledged (and the SYN, FIN count one each).
        assert!(info.bytes_acked.unwrap() >= 11, "{info:?}");
        assert_ne!(r.cookie, 0);
    }

    /// The row of the socket from `local` to `remote`, from a dump.
    fn find(d: &mut Diag, local: SocketAddr, remote: SocketAddr) -> SocketRow {
        let mut rows = Vec::new();
        d.dump(StateFlags::ESTABLISHED, &mut rows).unwrap();
        rows.into_iter()
            .find(|r| r.local == local && r.remote == remote)
            .unwrap_or_else(|| panic!("no socket {local} -> {remote} in the dump"))
    }

    #[test]
    fn exact_lookups_find_v4_v6_and_v4_mapped_sockets_and_leave_out_closed_ones() {
        let mut d = Diag::open().unwrap();
        // A dual-stack listener: a connection from 127.0.0.1 is accepted on an IPv6 socket
        // with IPv4-mapped addresses.
        let mut cases = Vec::new();
        for (bind, connect) in [
            ("127.0.0.1:0", "127.0.0.1"),
            ("[::1]:0", "::1"),
            ("[::]:0", "127.0.0.1"),
        ] {
            let Ok(l) = TcpListener::bind(bind) else {
                eprintln!("skipped {bind}: cannot bind here");
                continue;
            };
            let port = l.local_addr().unwrap().port();
            let c = TcpStream::connect((connect, port)).unwrap();
            let (s, _) = l.accept().unwrap();
            cases.push((c, s));
        }
        let mut rows = Vec::new();
        for (c, s) in &cases {
            let (cl, sl) = (c.local_addr().unwrap(), s.local_addr().unwrap());
            let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
            rows.push(find(&mut d, canon(cl), canon(c.peer_addr().unwrap())));
            rows.push(find(&mut d, canon(sl), canon(s.peer_addr().unwrap())));
        }
        let mapped = rows
            .iter()
            .filter(|r| r.family == AF_INET6 && r.local.is_ipv4());
        assert!(
            mapped.count() > 0 || cases.len() < 3,
            "a v4-mapped socket among {rows:?}"
        );
        let refs: Vec<&SocketRow> = rows.iter().collect();
        let mut again = Vec::new();
        d.lookup(&refs, &mut again).unwrap();
        let mut want: Vec<u64> = rows.iter().map(|r| r.cookie).collect();
        let mut got: Vec<u64> = again.iter().map(|r| r.cookie).collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
        assert!(again.iter().all(|r| r.info.is_some()));
        // Closed: left out, and the rest still found.
        let (c, s) = cases.pop().unwrap();
        let gone = [c.local_addr().unwrap(), s.local_addr().unwrap()];
        drop((c, s));
        std::thread::sleep(std::time::Duration::from_millis(50));
        again.clear();
        d.lookup(&refs, &mut again).unwrap();
        let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        let left: Vec<&SocketRow> = again
            .iter()
            .filter(|r| r.state == TcpState::Established)
            .collect();
        assert!(
            left.iter()
                .all(|r| !gone.iter().any(|g| canon(*g) == r.local)),
            "a closed socket still ESTABLISHED: {left:?}"
        );
        assert_eq!(left.len(), rows.len() - 2, "{again:?}");
    }
}

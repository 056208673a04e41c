//! Descriptors: which sockets a process holds (its `/proc/PID/fd` links name their inodes:
//! `socket:[N]`), the TCP sockets of its network namespace (`/proc/PID/net/tcp{,6}`), and the
//! inode of a descriptor of our own.
//!
//! Another user's `/proc/PID/fd` can be listed only with root (or `CAP_SYS_PTRACE` and
//! `CAP_DAC_READ_SEARCH`): [`Proc::sockets`] then fails with `PermissionDenied`, never an
//! empty list that would read as "no sockets".

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use crate::text::{self, TcpRow};
use crate::{Pid, Proc};

impl Proc {
    /// The socket descriptors of process `pid` and their inodes. An error if its descriptors
    /// cannot be listed: `NotFound` if it exited, `PermissionDenied` if it is another user's
    /// (without the privilege to look). Descriptors closed while they are read are left out.
    pub fn sockets(&self, pid: impl Into<Pid>) -> io::Result<BTreeMap<RawFd, u64>> {
        let dir = fs::read_dir(self.file(pid, "fd"))?;
        Ok(dir
            .flatten()
            .filter_map(|e| {
                let fd = e.file_name().to_str()?.parse().ok()?;
                let link = fs::read_link(e.path()).ok()?;
                Some((fd, text::socket_inode(link.as_os_str().as_bytes())?))
            })
            .collect())
    }

    /// The TCP sockets of the network namespace of process `pid` (`/proc/PID/net/tcp` and
    /// `tcp6`; a table that cannot be read adds none).
    pub fn tcp_sockets(&self, pid: impl Into<Pid>) -> Vec<TcpRow> {
        let pid = pid.into();
        ["net/tcp", "net/tcp6"]
            .into_iter()
            .filter_map(|table| self.read(pid, table).ok())
            .flat_map(|t| text::tcp_rows(&t).collect::<Vec<_>>())
            .collect()
    }
}

/// The inode of what a descriptor of this process refers to (a socket's: what
/// [`Proc::sockets`] names), from its `/proc/self/fd` entry.
pub fn inode_of(fd: BorrowedFd<'_>) -> Option<u64> {
    fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .ok()
        .map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeProc;
    use std::os::fd::AsFd;

    #[test]
    fn a_process_socket_descriptors_and_nothing_else() {
        let f = FakeProc::new("sockets");
        f.link(7, "fd/0", "/dev/null");
        f.link(7, "fd/3", "socket:[4242]");
        f.link(7, "fd/4", "pipe:[99]");
        f.link(7, "fd/12", "socket:[17]");
        f.write(8, "stat", "8 (gone) Z 1");
        let p = f.proc();
        assert_eq!(p.sockets(7).unwrap(), BTreeMap::from([(3, 4242), (12, 17)]));
        // No descriptors to list: gone, not "no sockets".
        assert_eq!(p.sockets(8).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(p.sockets(9).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_namespaces_tcp_tables() {
        let f = FakeProc::new("tcp");
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        f.write(
            7,
            "net/tcp",
            &format!("{header}   0: 0100007F:1F40 0100007F:9C40 01 0:0 0:0 0 0 0 5\n"),
        );
        f.write(
            7,
            "net/tcp6",
            &format!("{header}   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 0:0 0:0 0 0 0 6\n"),
        );
        let rows = f.proc().tcp_sockets(7);
        assert_eq!(
            rows.iter()
                .map(|r| (r.local_port, r.inode, r.established()))
                .collect::<Vec<_>>(),
            [(8000, 5, true), (80, 6, false)]
        );
        assert!(f.proc().tcp_sockets(8).is_empty());
    }

    #[test]
    fn our_own_socket_is_found_by_its_inode() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let inode = inode_of(l.as_fd()).unwrap();
        let p = Proc::host();
        assert_eq!(p.sockets(Pid::Own).unwrap()[&l.as_raw_fd()], inode);
        let port = l.local_addr().unwrap().port();
        assert!(p
            .tcp_sockets(Pid::Own)
            .iter()
            .any(|r| r.inode == inode && r.local_port == port && r.state == 10));
    }
}

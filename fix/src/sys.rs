//! The syscalls `nagless fix` makes (pidfds, socket options on copied descriptors, BPF links
//! and pins): the only unsafe code of the crate.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cvt(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(r: libc::c_long) -> io::Result<OwnedFd> {
    let fd = cvt(r)? as RawFd;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A pidfd for process `pid` (Linux 5.3).
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags, no memory.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) })
}

/// A copy of descriptor `fd` of the process behind `pidfd` (Linux 5.6; needs
/// PTRACE_MODE_ATTACH_REALCREDS on it: root).
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes two descriptors and flags, no memory.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })
}

/// An integer socket option.
pub(crate) fn getsockopt_int(fd: BorrowedFd, level: i32, name: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    cvt(r.into()).map(|_| v)
}

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(fd: BorrowedFd, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: `v` is valid for reads of its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(r.into()).map(drop)
}

/// The TCP state of a socket (`tcpi_state`: 1 is ESTABLISHED) and `tcpi_unacked` (for a
/// listener: the connections waiting in its accept queue), from TCP_INFO.
pub(crate) fn tcp_state(fd: BorrowedFd) -> io::Result<(u8, u32)> {
    // tcpi_state is the first byte; tcpi_unacked the u32 at offset 24.
    let mut info = [0u8; 28];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for writes of the size given; the kernel copies at
    // most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    cvt(r.into())?;
    let unacked = u32::from_ne_bytes([info[24], info[25], info[26], info[27]]);
    Ok((info[0], if len >= 28 { unacked } else { 0 }))
}

/// The local and remote addresses of a connected socket.
pub(crate) fn addresses(fd: BorrowedFd) -> io::Result<(SocketAddr, SocketAddr)> {
    let address = |peer: bool| -> io::Result<SocketAddr> {
        // SAFETY: an all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let p = (&mut ss as *mut libc::sockaddr_storage).cast();
        // SAFETY: `ss` and `len` are valid for writes of the size given.
        let r = unsafe {
            if peer {
                libc::getpeername(fd.as_raw_fd(), p, &mut len)
            } else {
                libc::getsockname(fd.as_raw_fd(), p, &mut len)
            }
        };
        cvt(r.into())?;
        match i32::from(ss.ss_family) {
            libc::AF_INET => {
                // SAFETY: the kernel wrote a sockaddr_in (its family says so).
                let sin: &libc::sockaddr_in =
                    unsafe { &*(&ss as *const libc::sockaddr_storage).cast() };
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                Ok(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
            }
            libc::AF_INET6 => {
                // SAFETY: the kernel wrote a sockaddr_in6 (its family says so).
                let sin6: &libc::sockaddr_in6 =
                    unsafe { &*(&ss as *const libc::sockaddr_storage).cast() };
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Ok(SocketAddr::from((ip, u16::from_be(sin6.sin6_port))))
            }
            _ => Err(io::Error::from(io::ErrorKind::Unsupported)),
        }
    };
    Ok((address(false)?, address(true)?))
}

/// `bpf(cmd, attr)` with a zeroed 128-byte attribute block the caller filled.
fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> io::Result<libc::c_long> {
    // SAFETY: the kernel reads (and for some commands writes) at most the given size of
    // `attr`, which is valid for both.
    cvt(unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) })
}

const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_CGROUP_SOCK_OPS: u32 = 3;
const BPF_CGROUP_SETSOCKOPT: u32 = 22;
const BPF_CGROUP_INET_SOCK_CREATE: u32 = 2;

fn put_u32(attr: &mut [u8; 128], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(attr: &mut [u8; 128], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// Attaches the sock_ops program `prog` to the cgroup `cgroup` as a BPF link (Linux 5.7): it
/// stays attached while the returned descriptor (or a pin of it) lives, and goes with it.
pub(crate) fn link_sock_ops(prog: BorrowedFd, cgroup: BorrowedFd) -> io::Result<OwnedFd> {
    link_cgroup(prog, cgroup, BPF_CGROUP_SOCK_OPS)
}

/// Attaches the cgroup/setsockopt program `prog` to `cgroup` as a BPF link (Linux 5.7), as
/// [`link_sock_ops`].
pub(crate) fn link_setsockopt(prog: BorrowedFd, cgroup: BorrowedFd) -> io::Result<OwnedFd> {
    link_cgroup(prog, cgroup, BPF_CGROUP_SETSOCKOPT)
}

/// Attaches the cgroup/sock_create program `prog` to `cgroup` as a BPF link (Linux 5.7), as
/// [`link_sock_ops`].
pub(crate) fn link_sock_create(prog: BorrowedFd, cgroup: BorrowedFd) -> io::Result<OwnedFd> {
    link_cgroup(prog, cgroup, BPF_CGROUP_INET_SOCK_CREATE)
}

fn link_cgroup(prog: BorrowedFd, cgroup: BorrowedFd, attach_type: u32) -> io::Result<OwnedFd> {
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, prog.as_raw_fd() as u32); // prog_fd
    put_u32(&mut attr, 4, cgroup.as_raw_fd() as u32); // target_fd
    put_u32(&mut attr, 8, attach_type); // attach_type
    owned(bpf(BPF_LINK_CREATE, &mut attr)?)
}

/// Removes what a socket-storage map holds for the socket `sock` (nothing stored: no error).
pub(crate) fn sk_storage_delete(map: BorrowedFd, sock: BorrowedFd) -> io::Result<()> {
    let key: i32 = sock.as_raw_fd();
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, map.as_raw_fd() as u32); // map_fd
    put_u64(&mut attr, 8, &key as *const i32 as u64); // key: the socket's descriptor
    match bpf(BPF_MAP_DELETE_ELEM, &mut attr) {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Stores `value` in a socket-storage map for the socket `sock`.
pub(crate) fn sk_storage_set(map: BorrowedFd, sock: BorrowedFd, value: u32) -> io::Result<()> {
    let key: i32 = sock.as_raw_fd();
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, map.as_raw_fd() as u32); // map_fd
    put_u64(&mut attr, 8, &key as *const i32 as u64); // key: the socket's descriptor
    put_u64(&mut attr, 16, &value as *const u32 as u64); // value
                                                         // flags (at 24): BPF_ANY, 0.
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// The `u32` a socket-storage map holds for the socket `sock` (`None`: nothing stored).
pub(crate) fn sk_storage_u32(map: BorrowedFd, sock: BorrowedFd) -> io::Result<Option<u32>> {
    let key: i32 = sock.as_raw_fd();
    let mut value: u32 = 0;
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, map.as_raw_fd() as u32); // map_fd
    put_u64(&mut attr, 8, &key as *const i32 as u64); // key: the socket's descriptor
    put_u64(&mut attr, 16, &mut value as *mut u32 as u64); // value
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Ok(_) => Ok(Some(value)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))
}

/// Pins the BPF object `fd` (a link, a map, a program) at `path` on a BPF filesystem.
pub(crate) fn obj_pin(fd: BorrowedFd, path: &Path) -> io::Result<()> {
    let p = c_path(path)?;
    let mut attr = [0u8; 128];
    put_u64(&mut attr, 0, p.as_ptr() as u64); // pathname
    put_u32(&mut attr, 8, fd.as_raw_fd() as u32); // bpf_fd
    bpf(BPF_OBJ_PIN, &mut attr).map(drop)
}

/// Opens the BPF object pinned at `path`.
pub(crate) fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let p = c_path(path)?;
    let mut attr = [0u8; 128];
    put_u64(&mut attr, 0, p.as_ptr() as u64); // pathname
    owned(bpf(BPF_OBJ_GET, &mut attr)?)
}

/// The attach type and cgroup id of a cgroup BPF link (`struct bpf_link_info`).
pub(crate) fn cgroup_link_info(link: BorrowedFd) -> io::Result<(u32, u64)> {
    let mut info = [0u8; 64];
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, link.as_raw_fd() as u32); // bpf_fd
    put_u32(&mut attr, 4, info.len() as u32); // info_len
    put_u64(&mut attr, 8, info.as_mut_ptr() as u64); // info
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    // struct bpf_link_info: type u32, id u32, prog_id u32, then (8-aligned) the union; for
    // a cgroup link: cgroup_id u64, attach_type u32.
    let cgroup_id = u64::from_ne_bytes(info[16..24].try_into().unwrap());
    let attach_type = u32::from_ne_bytes(info[24..28].try_into().unwrap());
    Ok((attach_type, cgroup_id))
}

const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
const BPF_LINK_GET_NEXT_ID: libc::c_long = 31;

/// The id of the next BPF link after `id` on this host (`None` at the end).
pub(crate) fn link_next_id(id: u32) -> Option<u32> {
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, id); // start_id
    bpf(BPF_LINK_GET_NEXT_ID, &mut attr).ok()?;
    Some(u32::from_ne_bytes(attr[4..8].try_into().unwrap())) // next_id
}

/// Whether this process may walk the host's BPF links (an empty list, ENOENT, counts).
pub(crate) fn may_list_links() -> bool {
    let mut attr = [0u8; 128];
    match bpf(BPF_LINK_GET_NEXT_ID, &mut attr) {
        Ok(_) => true,
        Err(e) => e.raw_os_error() == Some(libc::ENOENT),
    }
}

/// A descriptor of the BPF link `id`.
pub(crate) fn link_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, id); // link_id
    owned(bpf(BPF_LINK_GET_FD_BY_ID, &mut attr)?)
}

/// The program id of a BPF link (`struct bpf_link_info`'s prog_id).
pub(crate) fn link_prog_id(link: BorrowedFd) -> io::Result<u32> {
    let mut info = [0u8; 64];
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, link.as_raw_fd() as u32);
    put_u32(&mut attr, 4, info.len() as u32);
    put_u64(&mut attr, 8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(u32::from_ne_bytes(info[8..12].try_into().unwrap()))
}

/// The name of the BPF program `id` (`struct bpf_prog_info`'s name, at most 15 bytes).
pub(crate) fn prog_name(id: u32) -> io::Result<String> {
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, id); // prog_id
    let prog = owned(bpf(BPF_PROG_GET_FD_BY_ID, &mut attr)?)?;
    let mut info = [0u8; 96];
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, prog.as_raw_fd() as u32);
    put_u32(&mut attr, 4, info.len() as u32);
    put_u64(&mut attr, 8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let name = &info[64..80];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Whether `attach_type` is the sock_ops one.
pub(crate) fn is_sock_ops(attach_type: u32) -> bool {
    attach_type == BPF_CGROUP_SOCK_OPS
}

/// Whether `attach_type` is the cgroup/setsockopt one.
pub(crate) fn is_setsockopt(attach_type: u32) -> bool {
    attach_type == BPF_CGROUP_SETSOCKOPT
}

/// Mounts a BPF filesystem at `dir` (which must exist).
pub(crate) fn mount_bpffs(dir: &Path) -> io::Result<()> {
    let d = c_path(dir)?;
    // SAFETY: NUL-terminated strings that outlive the call; no data argument.
    let r = unsafe {
        libc::mount(
            c"bpffs".as_ptr(),
            d.as_ptr(),
            c"bpf".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    cvt(r.into()).map(drop)
}

/// Whether `dir` is on a BPF filesystem.
pub(crate) fn is_bpffs(dir: &Path) -> io::Result<bool> {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let d = c_path(dir)?;
    // SAFETY: an all-zero statfs is valid; the kernel fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid statfs to fill.
    cvt(unsafe { libc::statfs(d.as_ptr(), &mut st) }.into())?;
    Ok(st.f_type as i64 == BPF_FS_MAGIC)
}

/// The kernel's timer tick, from CLOCK_MONOTONIC_COARSE's resolution (4 ms at HZ=250).
pub(crate) fn tick() -> std::time::Duration {
    // SAFETY: an all-zero timespec is valid; the kernel fills it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid timespec to fill.
    let r = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if r != 0 || (ts.tv_sec == 0 && ts.tv_nsec == 0) {
        return std::time::Duration::from_millis(4);
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

//! The kernel's arrival stamps (`SO_TIMESTAMPNS`) on what a scenario's server reads: when a
//! request truly arrived, a thread's wake-up after it not counted.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// Asks the kernel to stamp each segment `s` (or a connection it accepts) receives with its
/// arrival (`SO_TIMESTAMPNS`), once it stamps every packet ([`stamping`]).
pub(crate) fn stamp_arrivals(s: &impl AsRawFd) {
    stamping();
    set_stamps(s);
}

/// Waits until the kernel stamps every packet it receives, and keeps it so for the process.
/// The first socket to ask for stamps turns them on for all from a work item, later: on a
/// busy machine a request came before it ran, unstamped, and TCP then gives no stamp (UDP
/// would stamp such a datagram with the time of its read, so it cannot tell). A TCP
/// connection of ours on 127.0.0.1 asks, and bytes sent on it show when its ask took (at
/// most 10 s).
pub(crate) fn stamping() {
    type Pair = (std::net::TcpStream, std::net::TcpStream);
    static ON: std::sync::OnceLock<Pair> = std::sync::OnceLock::new();
    ON.get_or_init(|| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener on 127.0.0.1");
        let mut to = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (from, _) = l.accept().unwrap();
        set_stamps(&from);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            to.write_all(b"s").unwrap();
            let mut b = [0u8; 1];
            let (n, at) = read_with_stamp(&from, &mut b).expect("our byte");
            assert_eq!(n, 1, "our byte");
            if at.is_some() {
                return (to, from);
            }
            assert!(
                Instant::now() < deadline,
                "the kernel stamps no packet after 10 s"
            );
            thread::sleep(Duration::from_millis(5));
        }
    });
}

/// Sets `SO_TIMESTAMPNS` on `s`.
pub(crate) fn set_stamps(s: &impl AsRawFd) {
    let on: libc::c_int = 1;
    // SAFETY: a setsockopt on a socket this thread owns, with a live `c_int` of its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_TIMESTAMPNS: {}", std::io::Error::last_os_error());
}

/// A read from `s` (stamped by [`stamp_arrivals`]), and when the last segment it read
/// arrived, by the kernel's clock: a thread's wake-up after the arrival is not in it.
pub(crate) fn read_stamped(
    s: &std::net::TcpStream,
    buf: &mut [u8],
) -> std::io::Result<(usize, SystemTime)> {
    let (n, at) = read_with_stamp(s, buf)?;
    // (A read of nothing, the end of the stream, carries no stamp; any other must.)
    match at {
        Some(at) => Ok((n, at)),
        None if n == 0 => Ok((0, SystemTime::now())),
        None => panic!("a read of {n} bytes without the kernel's stamp"),
    }
}

/// A read from `s`, and the kernel's stamp on what it read, if any.
pub(crate) fn read_with_stamp(
    s: &impl AsRawFd,
    buf: &mut [u8],
) -> std::io::Result<(usize, Option<SystemTime>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // (Room for one `timespec` message, aligned as a `cmsghdr` is.)
    let mut control = [0u64; 8];
    // SAFETY: zeroed `msghdr` is a valid empty one; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` points at `buf` and `control`, both live and of the lengths given.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut at = None;
    // SAFETY: walks the control messages the kernel wrote into `control`, within
    // `msg_controllen`; a `SCM_TIMESTAMPNS` one carries a `timespec` (read unaligned).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                at = Some(
                    SystemTime::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
                );
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    assert_eq!(msg.msg_flags & libc::MSG_CTRUNC, 0, "the stamp was cut");
    Ok((n as usize, at))
}

/// Reads a whole request of `buf`'s length from `s` (stamped by [`stamp_arrivals`]): when
/// its last segment arrived, by the kernel's clock.
pub(crate) fn read_request(s: &std::net::TcpStream, buf: &mut [u8]) -> SystemTime {
    let (mut got, mut at) = (0, SystemTime::UNIX_EPOCH);
    while got < buf.len() {
        let (n, arrived) = read_stamped(s, &mut buf[got..]).unwrap();
        assert!(n > 0, "the client closed mid-request");
        (got, at) = (got + n, arrived);
    }
    at
}

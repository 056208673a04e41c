//! What the shim reports of itself: a `nagless stats:` line on stderr at exit
//! (`NAGLESS_STATS=1`), and a stats file kept current (`NAGLESS_STATS_FILE=PATH`: the line in
//! `PATH.PID`, one file per process) for programs that never reach their exit handlers:
//! daemons stopped by SIGTERM, as systemd and docker stop them, without touching the
//! program's signal handlers. The file is replaced whole (written aside, then renamed) at
//! most once per [`STATS_FILE_EVERY`] while the counters change (by the flusher, and at
//! closes of managed sockets), once more when they stop changing, and at exit. The file is
//! written in the directory opened at start-up, so that a worker that chroots or changes its
//! directory after its exec still reports; one that cannot write it (its user may not) says
//! so once on stderr, naming itself and why.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Duration;

use libc::c_int;
use nagless_shim_policy::Kernel;

use crate::signal_safe::SignalSafe;
use crate::sys::{tcp_info, write_all_raw, Libc};

/// How often at most the stats file is rewritten while the counters change.
pub const STATS_FILE_EVERY: Duration = Duration::from_secs(1);

/// The stats file's path, without its `.PID`.
static PATH: OnceLock<Vec<u8>> = OnceLock::new();
/// When the file was last written (µs on the shim's clock; 0: never), and the counters'
/// digest then.
static WRITTEN_AT: AtomicU64 = AtomicU64::new(0);
static WRITTEN_DIGEST: AtomicU64 = AtomicU64::new(u64::MAX);

/// The stats file's directory, opened at start-up: a daemon's workers chroot and drop
/// privileges after their exec, and still write their file there. A descriptor of ours, moved
/// far from the low numbers, and the directory it must still be (a daemon that closes every
/// descriptor may get the number back for one of its own).
struct Dir {
    fd: c_int,
    dev: u64,
    ino: u64,
    /// The file's name in it, without its `.PID`.
    name: Vec<u8>,
}

static DIR: OnceLock<Dir> = OnceLock::new();

/// This process said already that it cannot write its stats file.
static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Reads `NAGLESS_STATS_FILE` (at start-up), and opens its directory.
pub fn init(path: Option<OsString>) {
    if let Some(p) = path.filter(|p| !p.is_empty()) {
        let p = p.into_vec();
        if let Some(dir) = open_dir(&p) {
            let _ = DIR.set(dir);
        }
        let _ = PATH.set(p);
    }
}

fn open_dir(path: &[u8]) -> Option<Dir> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    let (dir, name) = (path.parent()?, path.file_name()?);
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path; the descriptor is ours.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let fd = crate::sys::move_fd_up(fd, 900);
    let Some(st) = crate::sys::fstat(fd) else {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(fd) };
        return None;
    };
    #[allow(clippy::unnecessary_cast)] // 32-bit fields on 32-bit targets
    Some(Dir {
        fd,
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        name: name.as_bytes().to_vec(),
    })
}

/// The stats directory's descriptor and the file's name in it, while the descriptor is still
/// that directory.
fn dir() -> Option<(c_int, &'static [u8])> {
    let d = DIR.get()?;
    #[allow(clippy::unnecessary_cast)] // 32-bit fields on 32-bit targets
    let same = crate::sys::fstat(d.fd)
        .is_some_and(|st| st.st_dev as u64 == d.dev && st.st_ino as u64 == d.ino);
    same.then_some((d.fd, &d.name[..]))
}

/// Says once, on stderr (where it takes our lines) and in the debug log, that this process
/// cannot write its stats file, and why.
fn cannot_write(path: &[u8], pid: u32, errno: c_int) {
    // (No allocation: this may run at exit, in a process whose malloc is not to be trusted.)
    let mut text = [0u8; 128];
    // SAFETY: strerror_r (the XSI form the libc crate binds) writes at most `text.len()`
    // bytes, NUL-terminated, into the buffer we own.
    let ok = unsafe { libc::strerror_r(errno, text.as_mut_ptr().cast(), text.len()) } == 0;
    let end = text.iter().position(|&b| b == 0).unwrap_or(0);
    let why = std::str::from_utf8(&text[..end])
        .ok()
        .filter(|_| ok)
        .unwrap_or("an error");
    let path = std::str::from_utf8(path).unwrap_or("the stats file");
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    crate::debug_log::log(format_args!(
        "cannot write the stats file {path}.{pid} as uid {uid}: {why}"
    ));
    if crate::sys::stderr_takes_our_lines() && !SAID.swap(true, Relaxed) {
        crate::debug_log::write_formatted(
            2,
            format_args!(
                "nagless: process {pid} (uid {uid}) cannot write its stats file {path}.{pid}: {why} (errno {errno}); give --stats-file a directory its user may write (mode 1777)\n"
            ),
        );
    }
}

/// Data segments and payload bytes the socket has sent (TCP_INFO).
fn sent_counters(fd: c_int) -> Option<(u64, u64)> {
    let info = tcp_info(fd)?;
    Some((info.data_segs_out? as u64, info.bytes_sent?))
}

/// Adds what the closing socket `fd` sent to the totals; whether the flusher is to write the
/// stats file now (the caller nudges it: the program's `close` never waits for a file
/// system). In the modes without a flusher the file is written here, at most once per
/// [`STATS_FILE_EVERY`].
#[must_use]
pub fn account(s: SignalSafe, fd: c_int) -> bool {
    if let Some((segs, bytes)) = sent_counters(fd) {
        s.stats().data_segs.fetch_add(segs, Relaxed);
        s.stats().bytes.fetch_add(bytes, Relaxed);
    }
    if !stale(s) {
        return false;
    }
    if s.config().mode == nagless_shim_policy::Mode::Nagless {
        return true;
    }
    if !crate::standing::in_handler() {
        refresh(s);
    }
    false
}

/// The report line into `buf`, its length. `live`: add what the sockets still open have sent
/// so far (their counts join the totals only when they close).
fn format(s: SignalSafe, live: bool, buf: &mut [u8]) -> usize {
    use std::io::Write;
    let st = &s.stats();
    let (mut segs, mut bytes) = (st.data_segs.load(Relaxed), st.bytes.load(Relaxed));
    if live {
        for (sg, b) in s.managed_fds().filter_map(sent_counters) {
            segs += sg;
            bytes += b;
        }
    }
    let mut c = std::io::Cursor::new(buf);
    let _ = writeln!(
        c,
        "nagless stats: pid {} mode {}: {} sockets, {} bursts, {} writes ({} coalesced, {} sent at their burst's learned shape), {} released by linger, {} left to the program, {segs} data segments, {bytes} bytes sent, {} TCP_CORK calls, {} defaults kept, {} ready waits, {} clocked by Nagle ({} reader-shared sockets), {} ACK settings",
        std::process::id(),
        s.config().mode.name(),
        st.sockets.load(Relaxed),
        st.bursts.load(Relaxed),
        st.writes.load(Relaxed),
        st.joined.load(Relaxed),
        st.shaped.load(Relaxed),
        st.linger_releases.load(Relaxed),
        st.self_managed.load(Relaxed),
        st.cork_calls.load(Relaxed),
        st.kept_defaults.load(Relaxed),
        st.ready_waits.load(Relaxed),
        st.clocked.load(Relaxed),
        st.clocked_sockets.load(Relaxed),
        st.ack_calls.load(Relaxed),
    );
    c.position() as usize
}

/// A digest of the counters that change with the program's traffic.
fn digest(s: SignalSafe) -> u64 {
    let st = &s.stats();
    [&st.sockets, &st.bursts, &st.writes, &st.data_segs]
        .iter()
        .fold(0u64, |h, c| h.rotate_left(17) ^ c.load(Relaxed))
}

/// Whether the stats file lags behind the counters (and may still be written: not after the
/// exit's own write).
pub fn stale(s: SignalSafe) -> bool {
    PATH.get().is_some()
        && !FINAL.load(Relaxed)
        && s.stats().sockets.load(Relaxed) > 0
        && WRITTEN_DIGEST.load(Relaxed) != digest(s)
}

/// The exit's write is made (or under way): no older figures may replace it.
static FINAL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Rewrites the stats file if it lags and was not written in the last [`STATS_FILE_EVERY`].
pub fn refresh(s: SignalSafe) {
    if !stale(s) {
        return;
    }
    let now = Libc.now_us().max(1);
    let last = WRITTEN_AT.load(Relaxed);
    let every = STATS_FILE_EVERY.as_micros() as u64;
    if last != 0 && now.saturating_sub(last) < every {
        return;
    }
    // One writer at a time: whoever moves the stamp writes.
    if WRITTEN_AT
        .compare_exchange(last, now, Relaxed, Relaxed)
        .is_ok()
    {
        write_file(s, true);
    }
}

/// Writes the stats file now (`PATH.PID`, replaced whole); `live` as for [`format`]. Through
/// the directory opened at start-up while it is still ours (a chroot or a change of working
/// directory since does not matter), else by its path.
fn write_file(s: SignalSafe, live: bool) {
    let Some(path) = PATH.get() else { return };
    WRITTEN_DIGEST.store(digest(s), Relaxed);
    let mut line = [0u8; 640];
    let n = format(s, live, &mut line);
    // "PATH.PID" and "PATH.PID.TID~" (or the same of the name alone, in the directory),
    // NUL-terminated, in stack buffers.
    let mut name = [0u8; 4200];
    let mut tmp = [0u8; 4200];
    let pid = std::process::id();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let (at, base) = dir().unwrap_or((libc::AT_FDCWD, &path[..]));
    let (Some(_), Some(_)) = (
        fill(&mut name, base, format_args!(".{pid}")),
        fill(&mut tmp, base, format_args!(".{pid}.{tid}~")),
    ) else {
        return;
    };
    // SAFETY: `tmp` and `name` are NUL-terminated; `at` is AT_FDCWD or the directory's
    // descriptor, checked above; the file's descriptor is ours and closed here.
    unsafe {
        let open = || {
            libc::openat(
                at,
                tmp.as_ptr().cast(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                0o644,
            )
        };
        let mut fd = open();
        if fd < 0 && crate::sys::errno() == libc::EEXIST {
            // Left by a process of this PID killed mid-write, or planted: ours to replace.
            libc::unlinkat(at, tmp.as_ptr().cast(), 0);
            fd = open();
        }
        if fd < 0 {
            cannot_write(path, pid, crate::sys::errno());
            return;
        }
        let ok = write_all_raw(fd, &line[..n]);
        libc::close(fd);
        if ok {
            // A write of the flusher's that ends after the exit's own began gives way to it
            // (`live`: the flusher's, with the open sockets counted live).
            if live && FINAL.load(Relaxed) {
                libc::unlinkat(at, tmp.as_ptr().cast(), 0);
            } else {
                libc::renameat(at, tmp.as_ptr().cast(), at, name.as_ptr().cast());
            }
        } else {
            libc::unlinkat(at, tmp.as_ptr().cast(), 0);
        }
    }
}

/// Writes `path` and `suffix` into `buf`, NUL-terminated; `None` if it does not fit.
fn fill(buf: &mut [u8], path: &[u8], suffix: std::fmt::Arguments<'_>) -> Option<()> {
    use std::io::Write;
    let room = buf.len() - 1;
    let mut c = std::io::Cursor::new(&mut buf[..room]);
    c.write_all(path).ok()?;
    c.write_fmt(suffix).ok()?;
    let end = c.position() as usize;
    buf[end] = 0;
    Some(())
}

/// At exit: every socket still open is counted, then the line goes to stderr
/// (`NAGLESS_STATS=1`) and to the stats file. Processes that never touched a TCP socket
/// (shells, helpers) stay quiet.
pub fn at_exit(s: SignalSafe) {
    if s.stats().sockets.load(Relaxed) == 0 || (!s.config().stats && PATH.get().is_none()) {
        return;
    }
    for fd in s.managed_fds() {
        if let Some((segs, bytes)) = sent_counters(fd) {
            s.stats().data_segs.fetch_add(segs, Relaxed);
            s.stats().bytes.fetch_add(bytes, Relaxed);
        }
    }
    let mut line = [0u8; 640];
    let n = format(s, false, &mut line);
    if s.config().stats && crate::sys::stderr_takes_our_lines() {
        write_all_raw(2, &line[..n]);
    }
    // What the open sockets sent is in the totals now: the file says what stderr says, and
    // no write of the flusher's may replace it afterwards.
    if !FINAL.swap(true, Relaxed) {
        write_file(s, false);
    }
}

//! The debug log (`NAGLESS_LOG=FILE`: appended lines, each with the process id and the
//! shim's clock), and the allocation-free formatted write it and the shim's messages use.

use std::sync::OnceLock;

use libc::c_int;

use nagless_shim_policy::Kernel;

use crate::sys::{self, quietly, write_all_raw, Libc};

/// The debug log: a descriptor of ours, and the file it must still be (a daemon that closes
/// every descriptor may get this number back for one of its own files).
struct Log {
    fd: c_int,
    dev: u64,
    ino: u64,
}

static LOG: OnceLock<Log> = OnceLock::new();

/// Opens the debug log at `path` (at start-up, from `NAGLESS_LOG`); a file that cannot be
/// opened means no log.
pub fn open(path: &str) {
    if let Some(log) = open_log(path) {
        let _ = LOG.set(log);
    }
}

fn open_log(path: &str) -> Option<Log> {
    use std::os::fd::IntoRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    let fd = f.into_raw_fd();
    // Far from the low numbers programs use and reuse.
    let fd = sys::move_fd_up(fd, 900);
    Some(Log {
        fd,
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// Writes a debug line if `NAGLESS_LOG` is set and its file is still ours.
pub fn log(args: std::fmt::Arguments<'_>) {
    let Some(l) = LOG.get() else { return };
    quietly(|| {
        #[allow(clippy::unnecessary_cast)] // 32-bit fields on 32-bit targets
        let same = sys::fstat(l.fd)
            .is_some_and(|st| st.st_dev as u64 == l.dev && st.st_ino as u64 == l.ino);
        if same {
            let pid = std::process::id();
            let now = Libc.now_us();
            write_formatted(l.fd, format_args!("nagless[{pid}] {now:>10} us {args}\n"));
        }
    });
}

/// Formats into a stack buffer (no allocation: this runs inside interposed calls) and writes
/// the result to `fd`; anything beyond 512 bytes is cut.
pub fn write_formatted(fd: c_int, args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut buf = [0u8; 512];
    let mut c = std::io::Cursor::new(&mut buf[..]);
    let _ = c.write_fmt(args);
    let n = c.position() as usize;
    let _ = write_all_raw(fd, &buf[..n]);
}

//! `nagless run -- CMD`: start CMD with `libnagless_preload.so` preloaded.
//!
//! Finds the shim (`NAGLESS_PRELOAD`, or the copy embedded in this executable), refuses programs it cannot
//! act on (statically linked ones, Go binaries that make syscalls directly) with a clear
//! message, sets `LD_PRELOAD` and the shim's settings, and replaces this process with CMD.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

const SHIM: &str = "libnagless_preload.so";

/// The shim, built by `build.rs` and carried inside this executable.
static EMBEDDED_SHIM: &[u8] = include_bytes!(env!("NAGLESS_SHIM_PATH"));

/// Where the shim library is: `NAGLESS_PRELOAD` if set, else the copy embedded in this
/// executable, written once to a private cache directory (named by its hash, so a new build
/// never runs an old shim).
pub fn find_shim() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NAGLESS_PRELOAD") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("NAGLESS_PRELOAD={} is not a file", p.display()))
        };
    }
    let name = format!("libnagless_preload-{}.so", env!("NAGLESS_SHIM_HASH"));
    let mut tried = Vec::new();
    for (dir, shared) in cache_dirs() {
        match unpack_shim(&dir, &name, shared) {
            Ok((path, written)) => {
                mark_used(&path);
                if written {
                    prune_old_shims(&dir, &name);
                }
                return Ok(path);
            }
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!(
        "cannot write {SHIM} to a private cache directory ({}); set NAGLESS_PRELOAD to a copy of it",
        tried.join("; ")
    ))
}

/// Directories for the unpacked shim, best first, each with whether others may read it.
/// `XDG_CACHE_HOME`, when set, is the user's choice. Then root's are system directories every
/// user can read (writable by root only): a command that drops its privileges (`setpriv`,
/// `runuser`, `su`, `gosu`, `su-exec`, as containers and init scripts start daemons) must
/// still find the shim its `LD_PRELOAD` names. Other users' are private.
fn cache_dirs() -> Vec<(PathBuf, bool)> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        dirs.push((PathBuf::from(d).join("nagless"), false));
    }
    if crate::sys::effective_uid() == 0 {
        dirs.push((PathBuf::from("/var/cache/nagless"), true));
        dirs.push((PathBuf::from("/run/nagless"), true));
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        dirs.push((PathBuf::from(h).join(".cache/nagless"), false));
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    dirs.push((std::env::temp_dir().join(format!("nagless-{user}")), false));
    dirs
}

/// Writes the embedded shim as `dir/name` unless it is already there; the directory must be
/// ours and writable by nobody else (a preloaded library runs inside every program), and
/// readable by all if `shared`.
fn unpack_shim(dir: &Path, name: &str, shared: bool) -> std::io::Result<(PathBuf, bool)> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(if shared { 0o755 } else { 0o700 })
        .create(dir)?;
    if shared {
        // Whatever the umask took away: every user must be able to read it.
        let meta = std::fs::symlink_metadata(dir)?;
        if meta.is_dir()
            && !meta.file_type().is_symlink()
            && meta.uid() == crate::sys::effective_uid()
        {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    // The directory itself, not what a symlink of that name points to (another user may
    // have made the name a link to a directory of ours, and can point it elsewhere later).
    let own_uid = crate::sys::effective_uid();
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(std::io::Error::other("a symbolic link, not a directory"));
    }
    if meta.uid() != own_uid || meta.permissions().mode() & 0o022 != 0 {
        return Err(std::io::Error::other(
            "not owned by this user, or writable by others",
        ));
    }
    let path = dir.join(name);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| {
        m.is_file()
            && m.len() == EMBEDDED_SHIM.len() as u64
            && m.uid() == own_uid
            && m.mode() & 0o022 == 0
    }) {
        return Ok((path, false));
    }
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(&tmp)?;
    let result = f
        .write_all(EMBEDDED_SHIM)
        .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(0o755)))
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map(|()| (path, true));
    let _ = std::fs::remove_file(&tmp);
    result
}

/// Shims of other builds left unused this long are removed from the cache.
const SHIM_UNUSED_FOR: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// A shim found is marked used (its modification time), at most once a day: pruning counts
/// in weeks, and a run should cost no write.
fn mark_used(path: &Path) {
    let now = std::time::SystemTime::now();
    let fresh = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| now.duration_since(t).is_ok_and(|d| d < MARK_USED_EVERY));
    if !fresh {
        if let Ok(f) = std::fs::File::open(path) {
            let _ = f.set_modified(now);
        }
    }
}

/// How often a shim in use is marked so.
const MARK_USED_EVERY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Each build unpacks its own shim (named by its hash); when it does, other builds' shims
/// unused for [`SHIM_UNUSED_FOR`] are removed, not at once: a process of an older `nagless
/// run` may still start programs that preload its own.
fn prune_old_shims(dir: &Path, current: &str) {
    let now = std::time::SystemTime::now();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let ours = name.starts_with("libnagless_preload-") && name.ends_with(".so");
        if !ours || name == current {
            continue;
        }
        let unused = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|d| d > SHIM_UNUSED_FOR));
        if unused {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Resolves CMD like `execvp` does: the first executable file of that name on PATH.
pub(crate) fn resolve(cmd: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if cmd.contains('/') {
        return Some(PathBuf::from(cmd));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(cmd))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    })
}

/// Why a program cannot be reached by a preloaded library, if it cannot.
pub fn unreachable_reason(path: &Path) -> Option<String> {
    // Before reading it: an execute-only set-user-ID program cannot be read.
    if let Some(why) = secure_execution(path) {
        return Some(why);
    }
    let file = std::fs::File::open(path).ok()?;
    let mut start = [0u8; 2];
    use std::os::unix::fs::FileExt;
    if file.read_exact_at(&mut start, 0).is_ok() && &start == b"#!" {
        return None; // a script: its interpreter is what runs, checked by the kernel
    }
    let elf = crate::elf::Elf::read(&file)?;
    if !elf.has_interp {
        return Some(format!(
            "{} is statically linked: a preloaded library cannot act on it (it has no dynamic \
             loader); {FIX_INSTEAD}",
            path.display()
        ));
    }
    if elf.is_go {
        return Some(format!(
            "{} is a Go program: Go makes socket syscalls directly, bypassing libc, so the shim \
             would see nothing; {FIX_INSTEAD}",
            path.display()
        ));
    }
    None
}

/// What reaches a program the shim cannot: `nagless fix`, from outside, for any binary.
const FIX_INSTEAD: &str = "start it as it is and fix its stalls from outside with \
    `sudo nagless fix --pid PID --nodelay` (any binary, no restart; see nagless fix --help)";

/// Why the loader would skip `shim` for the program at `path`, if it would: they are built
/// for different machines (a 32-bit program and a 64-bit shim). The loader would print an
/// error of its own on the program's stderr and run it without the shim.
fn arch_mismatch(path: &Path, shim: &Path) -> Option<String> {
    let arch = |p: &Path| Some(crate::elf::Elf::read(&std::fs::File::open(p).ok()?)?.arch);
    let (program, lib) = (arch(path)?, arch(shim)?);
    (program != lib).then(|| {
        format!(
            "{} is built for {program} and the shim ({}) for {lib}: the loader would not \
             load it. Build the shim for {program} and name it in NAGLESS_PRELOAD (see \
             docs/shim.md)",
            path.display(),
            shim.display()
        )
    })
}

/// Why the loader would run `path` in secure-execution mode, where it ignores `LD_PRELOAD`
/// (the kernel's rule: a set-user-ID program of another user than the real one, a
/// set-group-ID program of another group than the real one, or one with file capabilities
/// started by someone else than root), if it would.
fn secure_execution(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let (uid, gid) = crate::sys::identity();
    let mode = meta.mode();
    let setuid = mode & libc::S_ISUID != 0 && meta.uid() != uid;
    // S_ISGID without group execute marks mandatory locking, not set-group-ID.
    let setgid = mode & libc::S_ISGID != 0 && mode & 0o010 != 0 && meta.gid() != gid;
    let caps = uid != 0 && crate::sys::has_xattr(path, "security.capability");
    let what = if setuid {
        "set-user-ID"
    } else if setgid {
        "set-group-ID"
    } else if caps {
        "given file capabilities"
    } else {
        return None;
    };
    Some(format!(
        "{} is {what}: the dynamic loader ignores LD_PRELOAD for it when started by another user, so the shim would not be loaded (start it as its owner or as root)",
        path.display()
    ))
}

/// Options of `nagless run`.
pub struct RunOptions {
    /// `nagless`, `cork` or `nodelay`.
    pub mode: String,
    /// Print counters at exit.
    pub stats: bool,
    /// Debug trace file.
    pub log: Option<PathBuf>,
    /// Keep the counters current in this file, `.PID` appended.
    pub stats_file: Option<PathBuf>,
    /// Linger bound, µs.
    pub linger_us: u64,
    /// The program's delayed ACKs: `NAGLESS_ACKS`'s value, if they are to change.
    pub acks: Option<String>,
}

/// How `--ack-delay-max DUR` is done on this kernel: `NAGLESS_ACKS`'s value, and what it
/// means in words. `TCP_DELACK_MAX_US` (Linux 6.15) where the kernel takes the bound (it
/// rounds it up to its tick); else, or for 0, `TCP_QUICKACK` after every read: at once.
pub fn acks_for(max: std::time::Duration) -> (String, String) {
    let us = u32::try_from(max.as_micros()).unwrap_or(u32::MAX);
    match (us > 0).then(|| crate::sys::delack_max_accepted(us)).flatten() {
        Some(kept) => (
            format!("delack-max-us:{kept}"),
            format!(
                "the program's ACKs wait at most {} ms (TCP_DELACK_MAX_US)",
                kept as f64 / 1000.0
            ),
        ),
        None => (
            "quickack".to_owned(),
            match us {
                0 => "the program acknowledges at once (TCP_QUICKACK after every read)".to_owned(),
                _ => format!(
                    "this kernel takes no TCP_DELACK_MAX_US of {} ms (it needs Linux 6.15, and a bound above one tick of its clock): the program acknowledges at once instead (TCP_QUICKACK after every read)",
                    us as f64 / 1000.0
                ),
            },
        ),
    }
}

/// Why the shim would not act in a program started from here, if a seccomp filter is in
/// force (it is inherited): the shim then steps aside, making no system call of its own.
fn under_seccomp() -> Option<String> {
    let status = std::fs::read("/proc/self/status").ok()?;
    nagless_host::text::seccomp_in_force(&status).then(|| {
        "a seccomp filter is in force here (a container's default profile, systemd's \
         SystemCallFilter=, a sandbox): the shim cannot know which calls it forbids, so it \
         would make none of its own and do nothing; run the program without the filter, or \
         fix it from outside with `nagless fix --nodelay`"
            .to_string()
    })
}

/// Commands that run the program as another user (how containers and init scripts drop
/// privileges): it must be able to read the shim.
const PRIVILEGE_DROPPERS: &[&str] = &[
    "setpriv",
    "runuser",
    "su",
    "gosu",
    "su-exec",
    "chpst",
    "s6-setuidgid",
    "setuidgid",
];

/// Why the shim would not reach the program that `name ARGS` starts, if it would not: a
/// launcher that drops privileges, with a shim only its caller can read; `inetd` started
/// without `-E` (openbsd-inetd removes `LD_PRELOAD` from its services' environment).
fn launcher_reason(name: &str, args: &[OsString], shim: &Path) -> Option<String> {
    let base = Path::new(name).file_name()?.to_string_lossy().into_owned();
    if base == "sudo" {
        return Some(
            "sudo resets the environment, LD_PRELOAD with it: run `sudo nagless run -- CMD` instead"
                .into(),
        );
    }
    if PRIVILEGE_DROPPERS.contains(&base.as_str()) && !readable_by_all(shim) {
        let xdg = std::env::var_os("XDG_CACHE_HOME").is_some_and(|v| !v.is_empty());
        return Some(format!(
            "{base} runs the program as another user, who cannot read the shim ({}): run \
             nagless as root{} (it then unpacks the shim to /var/cache/nagless, which every \
             user can read), or set NAGLESS_PRELOAD to a copy every user can read",
            shim.display(),
            if xdg { " without XDG_CACHE_HOME" } else { "" }
        ));
    }
    let has_e = |a: &OsString| {
        let a = a.to_string_lossy();
        a.starts_with('-') && !a.starts_with("--") && a.contains('E')
    };
    if base == "inetd" && !args.iter().any(has_e) {
        return Some(
            "inetd removes LD_PRELOAD from its services' environment unless started with -E: \
             run `nagless run -- inetd -E ...`"
                .into(),
        );
    }
    None
}

/// Whether every user can read `path` (the file readable, every directory above it
/// searchable, by others).
fn readable_by_all(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.permissions().mode());
    mode(path) & 0o004 != 0 && path.ancestors().skip(1).all(|d| mode(d) & 0o001 != 0)
}

/// `--stats-file FILE` as the shim will use it: an absolute path (the program may change its
/// directory), in a directory that exists.
fn stats_file_path(f: &Path) -> Result<PathBuf, String> {
    let dir = match f.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = std::fs::canonicalize(&dir)
        .ok()
        .filter(|d| d.is_dir())
        .ok_or_else(|| format!("--stats-file {}: no such directory", f.display()))?;
    let name = f
        .file_name()
        .ok_or_else(|| format!("--stats-file {}: not a file name", f.display()))?;
    Ok(dir.join(name))
}

/// Replaces this process with `cmd` under the shim; returns only on failure.
pub fn run(opts: &RunOptions, cmd: &[OsString]) -> Result<std::convert::Infallible, String> {
    let Some(program) = cmd.first() else {
        return Err("nothing to run: nagless run [OPTIONS] -- CMD [ARGS...]".into());
    };
    let name = program.to_string_lossy();
    let path = resolve(&name).ok_or_else(|| format!("{name}: command not found"))?;
    if let Some(reason) = unreachable_reason(&path) {
        return Err(reason);
    }
    if let Some(log) = &opts.log {
        // The shim opens the log inside CMD and cannot complain there: check it here.
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
            .map_err(|e| format!("cannot write the log {}: {e}", log.display()))?;
    }
    let stats_file = opts
        .stats_file
        .as_deref()
        .map(stats_file_path)
        .transpose()?;
    if let Some(reason) = under_seccomp() {
        return Err(reason);
    }
    let shim = find_shim()?;
    if let Some(reason) = arch_mismatch(&path, &shim) {
        return Err(reason);
    }
    if let Some(reason) = launcher_reason(&name, &cmd[1..], &shim) {
        return Err(reason);
    }
    let mut preload = OsString::from(shim.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    // The path found above, named as asked (no second search of PATH).
    let mut c = std::process::Command::new(&path);
    c.arg0(program)
        .args(&cmd[1..])
        .env("LD_PRELOAD", preload)
        .env("NAGLESS_MODE", &opts.mode)
        .env("NAGLESS_LINGER_US", opts.linger_us.to_string());
    if opts.stats {
        c.env("NAGLESS_STATS", "1");
    }
    if let Some(log) = &opts.log {
        c.env("NAGLESS_LOG", log);
    }
    if let Some(f) = &stats_file {
        c.env("NAGLESS_STATS_FILE", f);
    }
    if let Some(a) = &opts.acks {
        c.env("NAGLESS_ACKS", a);
    }
    let err = c.exec();
    Err(format!("cannot run {name}: {err}"))
}

pub const RUN_HELP: &str = "\
HOW IT WORKS
  CMD starts with libnagless_preload.so preloaded. Every TCP socket it creates, accepts or
  connects gets TCP_NODELAY; each burst of writes is held with MSG_MORE and released when the
  program turns to wait (read/recv, poll/select/epoll, close, shutdown, fork, exec), when it
  completes the socket's learned burst shape (its usual number of writes), or after
  --linger at the latest (5 x that for a burst short of its shape on a socket whose
  writer pauses inside its bursts, as interpreters do). Unsent bytes stay in the kernel,
  never in a buffer of ours.
  The shim is carried inside the nagless executable and unpacked once to ~/.cache/nagless
  (other builds' shims unused for 30 days are removed there).
  Without nagless run: LD_PRELOAD=$(nagless run --print-shim) CMD (settings in NAGLESS_MODE,
  NAGLESS_STATS=1, NAGLESS_LOG=FILE, NAGLESS_LINGER_US).

EXAMPLES
  nagless run --stats -- python3 -m http.server --protocol HTTP/1.1 8000
  nagless run -s python3 -m http.server 8000      # `--` may be left out: CMD starts at the
                                                  # first word that is no option of run's
  nagless run --mode nodelay -- ./vendor-daemon --port 179
  nagless run --ack-delay-max 0 -- ./server   # its clients split their requests: ACK at once
  nagless run --stats-file /run/nagless/stats -- ./daemon   # /run/nagless/stats.PID, kept current

EXIT STATUS
  CMD's own; 2 if CMD cannot be run or cannot be reached (static or Go binaries, and
  set-user-ID, set-group-ID or file-capability programs started by another user than root,
  for which the loader ignores LD_PRELOAD: `nagless fix` reaches those from outside).";

#[derive(clap::Args)]
pub struct RunArgs {
    /// nagless (cork bursts, release on wait), cork (libautocork's rule: release on read and
    /// poll/select only), nodelay (set TCP_NODELAY only).
    #[arg(
        short,
        long,
        env = "NAGLESS_MODE",
        default_value = "nagless",
        value_parser = ["nagless", "cork", "nodelay"]
    )]
    mode: String,
    /// Print per-process counters to stderr at exit (not where stderr is a socket, as in an
    /// inetd service: use --stats-file there).
    #[arg(short, long)]
    stats: bool,
    /// Append a debug trace to FILE.
    #[arg(long, value_name = "FILE")]
    log: Option<std::path::PathBuf>,
    /// Keep the counters current in FILE.PID, one file per process (rewritten at most once a
    /// second while they change, and at exit): for daemons stopped by a signal, which never
    /// print --stats. Workers that drop privileges need FILE's directory writable by their
    /// user (mode 1777); one that cannot write says so on stderr.
    #[arg(long, value_name = "FILE")]
    stats_file: Option<std::path::PathBuf>,
    /// Longest time a burst is held when the program neither reads nor polls: 50us..=100ms,
    /// e.g. 500us, 2ms (a bare number is µs, as the older spelling --linger-us took, and as
    /// NAGLESS_LINGER_US, which it replaces, gives it).
    #[arg(
        long,
        alias = "linger-us",
        env = "NAGLESS_LINGER_US",
        value_name = "DUR",
        default_value = "1ms",
        value_parser = parse_linger
    )]
    linger: std::time::Duration,
    /// The receiver's half, for a program whose peers you cannot change: its ACKs of partial
    /// messages leave within DUR (`8ms`: TCP_DELACK_MAX_US, Linux 6.15, rounded up to the
    /// kernel's tick), or at once with 0 (TCP_QUICKACK after every read, also where the
    /// kernel takes no such bound). Says which on stderr.
    #[arg(long, value_name = "DUR", value_parser = crate::parse_duration)]
    ack_delay_max: Option<std::time::Duration>,
    /// Print the path of the shim library (for LD_PRELOAD by hand) and exit.
    #[arg(long, exclusive = true)]
    print_shim: bool,
    /// The program and its arguments. `--` before it is optional: everything from the first
    /// word that is not one of these options on is the program's (as with env or timeout).
    #[arg(
        trailing_var_arg = true,
        required_unless_present = "print_shim",
        value_name = "CMD"
    )]
    cmd: Vec<std::ffi::OsString>,
}

/// `--linger`: a duration of 50 µs to 100 ms; a bare number is µs (`--linger-us 500`).
fn parse_linger(s: &str) -> Result<std::time::Duration, String> {
    let d = match s.parse::<u64>() {
        Ok(us) => std::time::Duration::from_micros(us),
        Err(_) => crate::parse_duration(s)?,
    };
    let (lo, hi) = (
        std::time::Duration::from_micros(50),
        std::time::Duration::from_millis(100),
    );
    if !(lo..=hi).contains(&d) {
        return Err(format!("{s:?}: the linger bound must be 50us..=100ms"));
    }
    Ok(d)
}

/// `nagless run`: prints the shim's path, or replaces this process with CMD under it; exit
/// status 2 when that cannot be done.
pub fn command(args: RunArgs) -> std::process::ExitCode {
    use std::process::ExitCode;
    if args.print_shim {
        return match find_shim() {
            Ok(path) => {
                outln!("{}", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                errln!("nagless run: {e}");
                ExitCode::from(2)
            }
        };
    }
    let acks = args.ack_delay_max.map(|max| {
        let (value, words) = acks_for(max);
        errln!("nagless run: {words}");
        value
    });
    let opts = RunOptions {
        mode: args.mode,
        stats: args.stats,
        log: args.log,
        stats_file: args.stats_file,
        linger_us: args.linger.as_micros() as u64,
        acks,
    };
    let Err(e) = run(&opts, &args.cmd);
    errln!("nagless run: {e}");
    ExitCode::from(2)
}

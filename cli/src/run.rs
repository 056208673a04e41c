//! `nagless run -- CMD`: start CMD with `libnagless_preload.so` preloaded.
//!
//! Finds the shim (`NAGLESS_PRELOAD`, or next to this executable), refuses programs it cannot
//! act on (statically linked ones, Go binaries that make syscalls directly) with a clear
//! message, sets `LD_PRELOAD` and the shim's settings, and replaces this process with CMD.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

const SHIM: &str = "libnagless_preload.so";

/// Where the shim library is.
pub fn find_shim() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NAGLESS_PRELOAD") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("NAGLESS_PRELOAD={} is not a file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate nagless itself: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [
        dir.join(SHIM),
        dir.join("deps").join(SHIM),
        dir.join("../lib").join(SHIM),
    ] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "cannot find {SHIM} next to {} (build it with `cargo build --release --workspace`, or set NAGLESS_PRELOAD)",
        exe.display()
    ))
}

/// Resolves CMD like `execvp` does.
fn resolve(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Some(PathBuf::from(cmd));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(cmd))
            .find(|p| p.is_file())
    })
}

/// Why a program cannot be reached by a preloaded library, if it cannot.
pub fn unreachable_reason(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    if bytes.get(..2) == Some(b"#!") {
        return None; // a script: its interpreter is what runs, checked by the kernel
    }
    let elf = Elf::parse(&bytes)?;
    if !elf.has_interp {
        return Some(format!(
            "{} is statically linked: a preloaded library cannot act on it (it has no dynamic loader)",
            path.display()
        ));
    }
    if memfind(&bytes, b"\xff Go buildinf:") {
        return Some(format!(
            "{} is a Go program: Go makes socket syscalls directly, bypassing libc, so the shim would see nothing",
            path.display()
        ));
    }
    None
}

fn memfind(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The one fact we need from an ELF file: whether it asks for a dynamic loader (PT_INTERP).
struct Elf {
    has_interp: bool,
}

impl Elf {
    /// Reads the program headers of a 64- or 32-bit ELF file; `None` if it is not one.
    fn parse(b: &[u8]) -> Option<Elf> {
        if b.get(..4)? != b"\x7fELF" {
            return None;
        }
        let is64 = *b.get(4)? == 2;
        let le = *b.get(5)? == 1;
        let u16_at = |o: usize| -> Option<u64> {
            let s = b.get(o..o + 2)?;
            Some(if le {
                u16::from_le_bytes([s[0], s[1]])
            } else {
                u16::from_be_bytes([s[0], s[1]])
            } as u64)
        };
        let u32_at = |o: usize| -> Option<u64> {
            let s: [u8; 4] = b.get(o..o + 4)?.try_into().ok()?;
            Some(if le {
                u32::from_le_bytes(s)
            } else {
                u32::from_be_bytes(s)
            } as u64)
        };
        let u64_at = |o: usize| -> Option<u64> {
            let s: [u8; 8] = b.get(o..o + 8)?.try_into().ok()?;
            Some(if le {
                u64::from_le_bytes(s)
            } else {
                u64::from_be_bytes(s)
            })
        };
        let (phoff, phentsize, phnum) = if is64 {
            (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?)
        } else {
            (u32_at(0x1c)?, u16_at(0x2a)?, u16_at(0x2c)?)
        };
        const PT_INTERP: u64 = 3;
        let mut has_interp = false;
        for i in 0..phnum.min(512) {
            let off = usize::try_from(phoff + i * phentsize).ok()?;
            if u32_at(off)? == PT_INTERP {
                has_interp = true;
            }
        }
        Some(Elf { has_interp })
    }
}

/// Options of `nagless run`.
pub struct RunOptions {
    /// `nagless`, `cork` or `nodelay`.
    pub mode: String,
    /// Print counters at exit.
    pub stats: bool,
    /// Debug trace file.
    pub log: Option<PathBuf>,
    /// Linger bound, µs.
    pub linger_us: u64,
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
    let shim = find_shim()?;
    let mut preload = OsString::from(shim.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut c = std::process::Command::new(program);
    c.args(&cmd[1..])
        .env("LD_PRELOAD", preload)
        .env("NAGLESS_MODE", &opts.mode)
        .env("NAGLESS_LINGER_US", opts.linger_us.to_string());
    if opts.stats {
        c.env("NAGLESS_STATS", "1");
    }
    if let Some(log) = &opts.log {
        c.env("NAGLESS_LOG", log);
    }
    let err = c.exec();
    Err(format!("cannot run {name}: {err}"))
}

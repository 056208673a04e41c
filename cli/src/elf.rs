//! What `nagless run` reads of a program before starting it: whether it is an ELF file that
//! asks for a dynamic loader (a preloaded library needs one) and whether it is a Go program
//! (Go makes its socket calls without libc). Only the headers are read: the ELF header, the
//! program headers and the section headers with their names, a few kilobytes whatever the
//! program's size (reading a whole 100 MB binary made every `nagless run` of it slow).

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The facts `nagless run` needs.
pub struct Elf {
    /// It asks for a dynamic loader (PT_INTERP).
    pub has_interp: bool,
    /// It carries Go's build information (a `.go.buildinfo` section, or, in a file without
    /// section headers, Go's build-info magic anywhere).
    pub is_go: bool,
}

/// Most program headers, section headers and bytes of section names read.
const MAX_HEADERS: u64 = 4096;
const MAX_NAMES: u64 = 1 << 20;

/// Go's build-info magic, at the start of `.go.buildinfo`.
const GO_MAGIC: &[u8] = b"\xff Go buildinf:";

/// Reads `len` bytes at `off`; `None` past the end.
fn read_at(f: &File, off: u64, len: u64) -> Option<Vec<u8>> {
    let mut b = vec![0; usize::try_from(len).ok()?];
    f.read_exact_at(&mut b, off).ok()?;
    Some(b)
}

/// Little- or big-endian integers of a slice.
struct Fields {
    le: bool,
}

impl Fields {
    fn get(&self, b: &[u8], at: u64, width: usize) -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let s = b.get(at..at.checked_add(width)?)?;
        let mut v = 0u64;
        for i in 0..width {
            let byte = if self.le { s[width - 1 - i] } else { s[i] };
            v = v << 8 | u64::from(byte);
        }
        Some(v)
    }
}

impl Elf {
    /// Reads the facts of a 64- or 32-bit ELF file; `None` if it is not one.
    pub fn read(f: &File) -> Option<Elf> {
        let h = read_at(f, 0, 64).or_else(|| read_at(f, 0, 52))?;
        if h.get(..4)? != b"\x7fELF" {
            return None;
        }
        let is64 = *h.get(4)? == 2;
        let x = Fields {
            le: *h.get(5)? == 1,
        };
        let word = if is64 { 8 } else { 4 };
        let (phoff, shoff) = if is64 {
            (x.get(&h, 0x20, 8)?, x.get(&h, 0x28, 8)?)
        } else {
            (x.get(&h, 0x1c, 4)?, x.get(&h, 0x20, 4)?)
        };
        let at = if is64 { 0x36 } else { 0x2a };
        let phentsize = x.get(&h, at, 2)?;
        let phnum = x.get(&h, at + 2, 2)?.min(MAX_HEADERS);
        let shentsize = x.get(&h, at + 4, 2)?;
        let shnum = x.get(&h, at + 6, 2)?.min(MAX_HEADERS);
        let shstrndx = x.get(&h, at + 8, 2)?;

        const PT_INTERP: u64 = 3;
        let ph = read_at(f, phoff, phentsize * phnum)?;
        let has_interp = (0..phnum).any(|i| x.get(&ph, i * phentsize, 4) == Some(PT_INTERP));

        let is_go = if shoff == 0 || shnum == 0 || shstrndx >= shnum {
            // No section headers to name the section: look for the magic itself.
            std::fs::read(Self::path_of(f)?)
                .is_ok_and(|b| b.windows(GO_MAGIC.len()).any(|w| w == GO_MAGIC))
        } else {
            let sh = read_at(f, shoff, shentsize * shnum)?;
            // sh_name, then sh_offset and sh_size (after sh_type, sh_flags, sh_addr).
            let (off_at, size_at) = if is64 { (0x18, 0x20) } else { (0x10, 0x14) };
            let names_hdr = shstrndx * shentsize;
            let names_off = x.get(&sh, names_hdr + off_at, word)?;
            let names_len = x.get(&sh, names_hdr + size_at, word)?.min(MAX_NAMES);
            let names = read_at(f, names_off, names_len)?;
            (0..shnum).any(|i| {
                x.get(&sh, i * shentsize, 4)
                    .and_then(|n| names.get(usize::try_from(n).ok()?..))
                    .is_some_and(|n| n.starts_with(b".go.buildinfo\0"))
            })
        };
        Some(Elf { has_interp, is_go })
    }

    /// The path of an open file (for the rare whole-file scan).
    fn path_of(f: &File) -> Option<std::path::PathBuf> {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).ok()
    }
}

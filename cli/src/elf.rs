//! What `nagless run` reads of a program before starting it: whether it is an ELF file that
//! asks for a dynamic loader (a preloaded library needs one) and whether it is a Go program
//! (Go makes its socket calls without libc), and what it runs on (a loader preloads only a
//! library built for the same). Only the headers are read: the ELF header, the
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
    /// What it runs on: 64-bit (ELF class 2), and its machine (`e_machine`).
    pub arch: Arch,
}

/// An ELF file's class, byte order and machine: a loader only preloads a library built for
/// the same as its program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arch {
    pub is64: bool,
    pub little_endian: bool,
    pub machine: u64,
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bits = if self.is64 { 64 } else { 32 };
        let order = if self.little_endian {
            ""
        } else {
            ", big-endian"
        };
        match (self.machine, self.is64) {
            (3, false) => write!(f, "32-bit x86"),
            (62, true) => write!(f, "x86-64"),
            (62, false) => write!(f, "x32 (x86-64 with 32-bit pointers)"),
            (40, false) => write!(f, "32-bit ARM{order}"),
            (183, true) => write!(f, "AArch64{order}"),
            (243, _) => write!(f, "{bits}-bit RISC-V"),
            (m, _) => write!(f, "{bits}-bit ELF machine {m}{order}"),
        }
    }
}

/// Most program headers and section headers read, the largest entry size believed, and most
/// bytes of section names read: a hostile file cannot make `nagless run` allocate more than
/// about a megabyte.
const MAX_HEADERS: u64 = 4096;
const MAX_ENTRY: u64 = 256;
const MAX_NAMES: u64 = 1 << 20;

/// Go's build-info magic, at the start of `.go.buildinfo`.
const GO_MAGIC: &[u8] = b"\xff Go buildinf:";

/// An open file and its size (asked once).
struct Image<'a> {
    f: &'a File,
    size: u64,
}

impl Image<'_> {
    /// Reads `len` bytes at `off`; `None` past the end (checked before allocating).
    fn read_at(&self, off: u64, len: u64) -> Option<Vec<u8>> {
        if off.checked_add(len)? > self.size {
            return None;
        }
        let mut b = vec![0; usize::try_from(len).ok()?];
        self.f.read_exact_at(&mut b, off).ok()?;
        Some(b)
    }
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
        let img = Image {
            f,
            size: f.metadata().ok()?.len(),
        };
        let h = img.read_at(0, 64).or_else(|| img.read_at(0, 52))?;
        if h.get(..4)? != b"\x7fELF" {
            return None;
        }
        let is64 = *h.get(4)? == 2;
        let x = Fields {
            le: *h.get(5)? == 1,
        };
        let (phoff, shoff) = if is64 {
            (x.get(&h, 0x20, 8)?, x.get(&h, 0x28, 8)?)
        } else {
            (x.get(&h, 0x1c, 4)?, x.get(&h, 0x20, 4)?)
        };
        let arch = Arch {
            is64,
            little_endian: x.le,
            machine: x.get(&h, 0x12, 2)?,
        };
        let at = if is64 { 0x36 } else { 0x2a };
        let phentsize = x.get(&h, at, 2)?.min(MAX_ENTRY);
        let phnum = x.get(&h, at + 2, 2)?.min(MAX_HEADERS);
        let shentsize = x.get(&h, at + 4, 2)?.min(MAX_ENTRY);
        let shnum = x.get(&h, at + 6, 2)?.min(MAX_HEADERS);
        let shstrndx = x.get(&h, at + 8, 2)?;

        const PT_INTERP: u64 = 3;
        let ph = img.read_at(phoff, phentsize * phnum)?;
        let has_interp = (0..phnum).any(|i| x.get(&ph, i * phentsize, 4) == Some(PT_INTERP));

        let is_go = if shoff == 0 || shnum == 0 || shstrndx >= shnum {
            // No section headers to name the section: look for the magic itself.
            contains(f, GO_MAGIC)
        } else {
            // A broken section table says nothing of Go; what the program headers said holds.
            go_section(&img, &x, is64, shoff, shentsize, shnum, shstrndx).unwrap_or(false)
        };
        Some(Elf {
            has_interp,
            is_go,
            arch,
        })
    }
}

/// Whether a section is named `.go.buildinfo`.
fn go_section(
    img: &Image,
    x: &Fields,
    is64: bool,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
    shstrndx: u64,
) -> Option<bool> {
    let word = if is64 { 8 } else { 4 };
    let sh = img.read_at(shoff, shentsize * shnum)?;
    // sh_name, then sh_offset and sh_size (after sh_type, sh_flags, sh_addr).
    let (off_at, size_at) = if is64 { (0x18, 0x20) } else { (0x10, 0x14) };
    let names_hdr = shstrndx * shentsize;
    let names_off = x.get(&sh, names_hdr + off_at, word)?;
    let names_len = x.get(&sh, names_hdr + size_at, word)?.min(MAX_NAMES);
    let names = img.read_at(names_off, names_len)?;
    Some((0..shnum).any(|i| {
        x.get(&sh, i * shentsize, 4)
            .and_then(|n| names.get(usize::try_from(n).ok()?..))
            .is_some_and(|n| n.starts_with(b".go.buildinfo\0"))
    }))
}

/// Whether `needle` occurs in the file, read a megabyte at a time.
fn contains(f: &File, needle: &[u8]) -> bool {
    const CHUNK: usize = 1 << 20;
    let mut buf = vec![0u8; CHUNK + needle.len()];
    let mut off = 0u64;
    let mut carry = 0;
    loop {
        let n = match f.read_at(&mut buf[carry..], off) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let have = carry + n;
        if buf[..have].windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        // Keep the tail that could start a match across the boundary.
        carry = (needle.len() - 1).min(have);
        buf.copy_within(have - carry..have, 0);
        off += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary file holding `bytes`.
    fn file(name: &str, bytes: &[u8]) -> File {
        let p = std::env::temp_dir().join(format!("nagless-elf-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        let f = File::open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }

    /// A 64-bit little-endian ELF header with the given table fields.
    fn header(phnum: u16, phentsize: u16, shoff: u64, shnum: u16, shentsize: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        h[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        h[0x36..0x38].copy_from_slice(&phentsize.to_le_bytes());
        h[0x38..0x3a].copy_from_slice(&phnum.to_le_bytes());
        h[0x3a..0x3c].copy_from_slice(&shentsize.to_le_bytes());
        h[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
        h
    }

    #[test]
    fn the_running_test_binary_asks_for_a_loader_and_is_not_go() {
        let f = File::open(std::env::current_exe().unwrap()).unwrap();
        let elf = Elf::read(&f).expect("an ELF file");
        assert!(elf.has_interp);
        assert!(!elf.is_go);
    }

    #[test]
    fn hostile_headers_neither_panic_nor_allocate_past_the_file() {
        // Tables claiming 65,535 entries of 65,535 bytes, past the end of a tiny file.
        let h = header(u16::MAX, u16::MAX, u64::MAX - 10, u16::MAX, u16::MAX);
        assert!(Elf::read(&file("huge", &h)).is_none());
        // Truncated headers, not ELF, empty.
        assert!(Elf::read(&file("short", &h[..20])).is_none());
        assert!(Elf::read(&file("text", b"#!/bin/sh\necho hi\n")).is_none());
        assert!(Elf::read(&file("empty", b"")).is_none());
    }

    #[test]
    fn a_broken_section_table_keeps_what_the_program_headers_say() {
        // One PT_INTERP program header, and a section table pointing past the end.
        let mut b = header(1, 56, 1 << 40, 3, 64);
        let mut ph = vec![0u8; 56];
        ph[..4].copy_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&ph);
        let elf = Elf::read(&file("broken-sections", &b)).expect("an ELF file");
        assert!(elf.has_interp);
        assert!(!elf.is_go);
    }

    #[test]
    fn without_section_headers_the_magic_is_found_across_a_chunk_boundary() {
        let mut b = header(0, 56, 0, 0, 64);
        b.resize((1 << 20) - 5, 0);
        b.extend_from_slice(GO_MAGIC);
        b.extend_from_slice(&[0; 100]);
        let elf = Elf::read(&file("go-no-sections", &b)).expect("an ELF file");
        assert!(elf.is_go);
        assert!(!elf.has_interp);
    }
}

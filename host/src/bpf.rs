//! Why the kernel refused a BPF object, program, map or link: [`BpfError`], the errno the
//! kernel returned (found in the loader's error, not in its words), with the error's text.

use std::error::Error;
use std::fmt;
use std::io;

/// A BPF load, attach or map call the kernel refused, as a loader (aya) reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfError {
    errno: Option<i32>,
    text: String,
}

impl BpfError {
    /// The kernel's answer in `e`: the errno of the first `io::Error` among `e` and its
    /// sources (aya keeps the system call's error as the source of its own), and the error's
    /// text with its details (`DISPLAY: DEBUG`).
    pub fn of(e: &(dyn Error + 'static)) -> BpfError {
        let errno = std::iter::successors(Some(e), |&e| e.source())
            .find_map(|e| e.downcast_ref::<io::Error>()?.raw_os_error());
        BpfError {
            errno,
            text: format!("{e}: {e:?}"),
        }
    }

    /// The errno the kernel returned, if the error holds one.
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }

    /// The kernel said `EPERM`: this process lacks the privilege (root, or the capabilities
    /// the program type needs), or a lockdown or security module refuses BPF.
    pub fn not_permitted(&self) -> bool {
        self.errno == Some(libc::EPERM)
    }
}

impl fmt::Display for BpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Error for BpfError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error of a loader, with the system call's error as its source.
    #[derive(Debug)]
    struct Wrapped(Box<dyn Error + 'static>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("loading failed")
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    fn os(errno: i32) -> Box<dyn Error> {
        Box::new(io::Error::from_raw_os_error(errno))
    }

    #[test]
    fn the_errno_is_found_however_deep() {
        let e = BpfError::of(&Wrapped(Box::new(Wrapped(os(libc::EPERM)))));
        assert_eq!(e.errno(), Some(libc::EPERM));
        assert!(e.not_permitted());
        assert!(e.to_string().starts_with("loading failed: "), "{e}");
        let e = BpfError::of(&*os(libc::EINVAL));
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert!(!e.not_permitted());
        // Words are not errnos.
        let words = io::Error::other("EPERM: Operation not permitted");
        assert_eq!(BpfError::of(&Wrapped(Box::new(words))).errno(), None);
    }

    #[test]
    fn ayas_errors_hold_the_kernels_errno() {
        use aya::maps::MapError;
        use aya::programs::ProgramError;
        use aya::sys::SyscallError;
        use aya::EbpfError;
        let syscall = |errno| SyscallError {
            call: "bpf_prog_load",
            io_error: io::Error::from_raw_os_error(errno),
        };
        let e = EbpfError::ProgramError(ProgramError::SyscallError(syscall(libc::EPERM)));
        assert!(BpfError::of(&e).not_permitted(), "{e:?}");
        let e = ProgramError::SyscallError(syscall(libc::EACCES));
        assert_eq!(BpfError::of(&e).errno(), Some(libc::EACCES));
        let e = EbpfError::MapError(MapError::CreateError {
            name: "events".into(),
            io_error: io::Error::from_raw_os_error(libc::EPERM),
        });
        assert!(BpfError::of(&e).not_permitted(), "{e:?}");
        let e = EbpfError::MapError(MapError::SyscallError(syscall(libc::E2BIG)));
        assert_eq!(BpfError::of(&e).errno(), Some(libc::E2BIG));
        assert_eq!(BpfError::of(&EbpfError::NoBTF).errno(), None);
    }
}

/// Whether a `#[repr(C)]` struct of `size` bytes mirrors a BPF array of u64 counters whose
/// members are `members` (the C enum's names, in order, each with the offset of the field
/// that holds it): counter `i` is the struct's `i`th u64, and there are no others. For a
/// `const` assertion beside the mirror.
pub const fn counters_in_order(members: &[(&str, usize)], size: usize) -> bool {
    if size != members.len() * 8 {
        return false;
    }
    let mut i = 0;
    while i < members.len() {
        if members[i].1 != i * 8 {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod counters_tests {
    use super::counters_in_order;

    #[test]
    fn counters_must_be_u64s_in_the_enums_order() {
        assert!(counters_in_order(&[("A", 0), ("B", 8)], 16));
        assert!(!counters_in_order(&[("A", 8), ("B", 0)], 16), "swapped");
        assert!(
            !counters_in_order(&[("A", 0), ("B", 8)], 24),
            "a field too many"
        );
        assert!(!counters_in_order(&[("A", 0), ("B", 4)], 8), "u32s");
    }
}

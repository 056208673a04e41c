//! The libc functions the hooks forward to, found with `dlsym(RTLD_NEXT)`. Each use of
//! [`next!`] has a slot of its own, registered in [`SYMBOLS`]; [`resolve_all`] fills every
//! slot at start-up, so that no hook calls `dlsym` later: a hook may run inside a signal
//! handler, where `dlsym` (which takes the loader's lock and may allocate) is not safe. A
//! hook called before start-up (by another library's constructor) resolves its own slot.
#![allow(unsafe_code)]

use linkme::distributed_slice;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// One libc function: its NUL-terminated name and its address once looked up.
pub struct Symbol {
    name: &'static str,
    addr: AtomicUsize,
}

/// Not found: a missing symbol is looked up once, not at every call.
const MISSING: usize = usize::MAX;

impl Symbol {
    /// A slot for `name` (NUL-terminated), not yet looked up.
    pub const fn new(name: &'static str) -> Symbol {
        Symbol {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The address of the next definition of the function, or `None` if there is none.
    pub fn get(&self) -> Option<usize> {
        let mut p = self.addr.load(Relaxed);
        if p == 0 {
            p = self.resolve();
        }
        (p != MISSING).then_some(p)
    }

    fn resolve(&self) -> usize {
        debug_assert!(self.name.ends_with('\0'));
        // SAFETY: RTLD_NEXT lookup of a NUL-terminated name; dlsym has no other contract.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr().cast()) } as usize;
        let p = if p == 0 { MISSING } else { p };
        self.addr.store(p, Relaxed);
        p
    }
}

/// Every [`next!`] slot of the library.
#[distributed_slice]
pub static SYMBOLS: [&'static Symbol];

/// Looks up every registered function (at start-up, before any hook can run in a signal
/// handler of the program).
pub fn resolve_all() {
    for s in SYMBOLS {
        if s.addr.load(Relaxed) == 0 {
            s.resolve();
        }
    }
}

/// The next definition of the libc function `$name`, of C signature `$ty`, or `None`.
macro_rules! next {
    ($name:expr, $ty:ty) => {{
        static SLOT: $crate::symbols::Symbol = $crate::symbols::Symbol::new(concat!($name, "\0"));
        #[linkme::distributed_slice($crate::symbols::SYMBOLS)]
        static REGISTERED: &'static $crate::symbols::Symbol = &SLOT;
        SLOT.get().map(|p| {
            // SAFETY: `p` is the address of the libc function named $name, whose C signature
            // is $ty.
            unsafe { std::mem::transmute::<usize, $ty>(p) }
        })
    }};
}
pub(crate) use next;

//! A /proc tree made in a temporary directory, for the readers' tests.

use std::fs;
use std::path::PathBuf;

use crate::Proc;

/// A fake /proc, removed when dropped.
pub(crate) struct FakeProc {
    root: PathBuf,
}

impl FakeProc {
    /// An empty one (`name` tells the tests' trees apart).
    pub(crate) fn new(name: &str) -> FakeProc {
        let root = std::env::temp_dir().join(format!("nagless-host-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        FakeProc { root }
    }

    /// The /proc to read it through.
    pub(crate) fn proc(&self) -> Proc {
        Proc::at(&self.root)
    }

    /// A directory under the root.
    pub(crate) fn mkdir(&self, path: &str) {
        fs::create_dir_all(self.root.join(path)).unwrap();
    }

    /// Process `pid`'s file `name`, holding `text`.
    pub(crate) fn write(&self, pid: u32, name: &str, text: &str) {
        let path = self.root.join(pid.to_string()).join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// Process `pid`'s link `name`, naming `target` (`socket:[N]`, `net:[N]`).
    pub(crate) fn link(&self, pid: u32, name: &str, target: &str) {
        let path = self.root.join(pid.to_string()).join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    /// `self` is process `pid`.
    pub(crate) fn own(&self, pid: u32) {
        std::os::unix::fs::symlink(pid.to_string(), self.root.join("self")).unwrap();
    }
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

//! A pod as a kubelet lays one out on a node, faked (no kubelet runs here).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::agent::Guard;
use super::{Cgroup, Netns};

/// A pod as a kubelet lays one out on a node, faked: its container's cgroup under
/// `kubepods`, named for the pod's uid and the container's id, the kubelet's link in
/// `/var/log/containers` that names its pod, namespace and container, and a network
/// namespace of its own. Its process holds one connection to itself there (both ends) and
/// answers each line with the two sockets' TCP_NODELAY. Everything is removed when dropped.
pub struct Pod {
    pub cgroup: Cgroup,
    pub slice: PathBuf,
    pub log: PathBuf,
    pub _netns: Netns,
    pub holder: Guard,
    pub out: BufReader<std::process::ChildStdout>,
    pub stdin: std::process::ChildStdin,
}

impl Pod {
    pub fn new(top: &Path, namespace: &str, name: &str, n: u8) -> Pod {
        let uid = format!("{n:08x}-0000-4000-8000-00000000000{n}");
        let id = format!("{n:02x}").repeat(32);
        let root = nagless_fix::target::cgroup2_root().unwrap();
        let slice = top.join(format!(
            "kubepods-besteffort-pod{}.slice",
            uid.replace('-', "_")
        ));
        let rel = slice.join(format!("cri-containerd-{id}.scope"));
        let cgroup = Cgroup::named(rel.strip_prefix(&root).unwrap().to_str().unwrap());
        let netns = Netns::new(&format!("pod{n}"));
        const HOLD: &str = "import socket, sys\n\
l = socket.socket()\n\
l.bind(('127.0.0.1', 0))\n\
l.listen(1)\n\
c = socket.create_connection(l.getsockname())\n\
a, _ = l.accept()\n\
print('ready', flush=True)\n\
for line in sys.stdin:\n    print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), a.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), flush=True)\n";
        // Into the cgroup first: `ip netns exec` mounts a sysfs of the namespace's own.
        let mut child = cgroup
            .command()
            .args(["ip", "netns", "exec", &netns.0, "python3", "-c", HOLD])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        // Last, so that a failure above leaves no link behind.
        std::fs::create_dir_all("/var/log/containers").unwrap();
        let log = PathBuf::from(format!(
            "/var/log/containers/{name}_{namespace}_app-{id}.log"
        ));
        std::fs::write(&log, "").unwrap();
        Pod {
            cgroup,
            slice,
            log,
            _netns: netns,
            holder: Guard(Some(child)),
            out,
            stdin,
        }
    }

    /// Its two sockets' TCP_NODELAY, as its program sees them.
    pub fn nodelay(&mut self) -> String {
        self.stdin.write_all(b"?\n").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut c) = self.holder.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.log);
        // (The container's cgroup goes with `cgroup`; its pod's slice after it.)
        let _ = &self.cgroup;
    }
}

//! What the files of /proc say, read from their text: pure functions, the text in, a value
//! out. None of them allocates, does I/O or panics: the shim (`nagless-preload`) calls
//! [`seccomp_in_force`], [`cgroup_lines`] and [`mounts`] inside the programs it is loaded
//! into. The readers of the files are [`Proc`](crate::Proc)'s methods.

/// The value of the `KEY:` line of a `/proc/PID/status` text, trimmed; `None` if it has no
/// such line (a kernel built without the feature).
pub(crate) fn status_value<'a>(status: &'a [u8], key: &str) -> Option<&'a [u8]> {
    status.split(|&b| b == b'\n').find_map(|line| {
        let rest = line.strip_prefix(key.as_bytes())?.strip_prefix(b":")?;
        Some(rest.trim_ascii())
    })
}

/// Whether a `/proc/PID/status` text says a seccomp mode is in force (strict or filter). No
/// `Seccomp:` line (a kernel built without seccomp) means none.
pub fn seccomp_in_force(status: &[u8]) -> bool {
    status_value(status, "Seccomp").is_some_and(|v| v != b"0")
}

/// The effective capabilities (`CapEff:`, a hex mask) of a `/proc/PID/status` text.
pub(crate) fn cap_eff(status: &[u8]) -> Option<u64> {
    let hex = std::str::from_utf8(status_value(status, "CapEff")?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}

/// The effective user id (the second of `Uid:`'s real, effective, saved and filesystem ids)
/// of a `/proc/PID/status` text.
pub(crate) fn effective_uid(status: &[u8]) -> Option<u32> {
    let ids = std::str::from_utf8(status_value(status, "Uid")?).ok()?;
    ids.split_whitespace().nth(1)?.parse().ok()
}

/// The inode a `/proc` link of kind `kind` names (`socket:[4242]`, `net:[4026531840]`).
pub(crate) fn link_inode(link: &[u8], kind: &str) -> Option<u64> {
    let n = link
        .strip_prefix(kind.as_bytes())?
        .strip_prefix(b":[")?
        .strip_suffix(b"]")?;
    std::str::from_utf8(n).ok()?.parse().ok()
}

/// The socket inode a `/proc/PID/fd` link names (`socket:[4242]`); `None` for any other
/// file.
pub(crate) fn socket_inode(link: &[u8]) -> Option<u64> {
    link_inode(link, "socket")
}

/// A `/proc/PID/stat` line (proc(5)), read after the command name: that holds whatever the
/// process chose (spaces and parentheses too), so the fields start after its last `)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat<'a> {
    /// From the state (field 3) on.
    rest: &'a str,
}

/// `PF_KTHREAD` of `/proc/PID/stat`'s flags: a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

impl<'a> Stat<'a> {
    /// The fields of a `/proc/PID/stat` text; `None` if it has no command name.
    pub fn parse(text: &'a str) -> Option<Stat<'a>> {
        Some(Stat {
            rest: text.rsplit_once(')')?.1,
        })
    }

    /// Field `n`, numbered as proc(5) numbers them (3 the state, 4 the parent, 9 the flags,
    /// 14 and 15 the user and system time...); `None` for 1 and 2, and past the end.
    pub fn field(&self, n: usize) -> Option<&'a str> {
        self.rest.split_whitespace().nth(n.checked_sub(3)?)
    }

    /// The state (`R`, `S`, `Z`...).
    pub(crate) fn state(&self) -> Option<char> {
        self.field(3)?.chars().next()
    }

    /// The parent's process id.
    pub(crate) fn ppid(&self) -> Option<u32> {
        self.field(4)?.parse().ok()
    }

    /// Whether it is a kernel thread (`PF_KTHREAD` in its flags).
    pub(crate) fn kernel_thread(&self) -> bool {
        self.field(9)
            .and_then(|f| f.parse::<u64>().ok())
            .is_some_and(|flags| flags & PF_KTHREAD != 0)
    }

    /// Whether it exited (a zombie, not yet reaped by its parent, or dead).
    pub(crate) fn exited(&self) -> bool {
        matches!(self.state(), Some('Z' | 'X'))
    }
}

/// One line of a `/proc/PID/cgroup` text: `ID:CONTROLLERS:PATH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLine<'a> {
    /// The hierarchy's id (`0` for cgroup v2).
    pub id: &'a str,
    /// Its controllers, comma-separated (empty for cgroup v2).
    pub controllers: &'a str,
    /// The cgroup's path in it, relative to the cgroup namespace's root.
    pub path: &'a str,
}

impl CgroupLine<'_> {
    /// Whether `controller` (`pids`, `memory`...) is one of its controllers.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.split(',').any(|c| c == controller)
    }
}

/// The lines of a `/proc/PID/cgroup` text (those with three fields).
pub fn cgroup_lines(text: &str) -> impl Iterator<Item = CgroupLine<'_>> {
    text.lines().filter_map(|l| {
        let mut f = l.splitn(3, ':');
        Some(CgroupLine {
            id: f.next()?,
            controllers: f.next()?,
            path: f.next()?,
        })
    })
}

/// The cgroup v2 path (its `0::` line) of a `/proc/PID/cgroup` text.
pub fn cgroup_v2_path(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// One line of a `/proc/PID/mountinfo` text (proc(5)): `ID PARENT MAJ:MIN ROOT MOUNTPOINT
/// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`. Paths are as the kernel escapes them
/// (a space is `\040`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mount<'a> {
    /// The directory of the filesystem mounted there (`/` for all of it).
    pub root: &'a str,
    /// Where it is mounted.
    pub point: &'a str,
    /// Its type (`cgroup2`, `ext4`...).
    pub fstype: &'a str,
    /// Its superblock's options (`rw,pids` for a cgroup v1 hierarchy); empty if none.
    pub super_options: &'a str,
}

impl<'a> Mount<'a> {
    /// Reads one line; `None` if it is not one.
    pub fn parse(line: &'a str) -> Option<Mount<'a>> {
        let (left, right) = line.split_once(" - ")?;
        let mut left = left.split_whitespace().skip(3);
        let mut right = right.split_whitespace();
        Some(Mount {
            root: left.next()?,
            point: left.next()?,
            fstype: right.next()?,
            super_options: right.nth(1).unwrap_or(""),
        })
    }

    /// Whether `option` is one of its superblock's options.
    pub fn has_option(&self, option: &str) -> bool {
        self.super_options.split(',').any(|o| o == option)
    }
}

/// The mounts of a `/proc/PID/mountinfo` text, in its order.
pub fn mounts(text: &str) -> impl Iterator<Item = Mount<'_>> {
    text.lines().filter_map(Mount::parse)
}

/// Where the cgroup v2 hierarchy is mounted, from a `/proc/PID/mountinfo` text (the first
/// `cgroup2` mount).
pub fn cgroup2_mount(mountinfo: &str) -> Option<&str> {
    mounts(mountinfo).find_map(|m| (m.fstype == "cgroup2").then_some(m.point))
}

/// A row of a `/proc/net/tcp` or `/proc/net/tcp6` text: one TCP socket of the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRow {
    /// Its local address.
    pub local_addr: std::net::IpAddr,
    /// Its remote address (unspecified for a listener).
    pub remote_addr: std::net::IpAddr,
    /// Its local port.
    pub local_port: u16,
    /// Its remote port (0 for a listener).
    pub remote_port: u16,
    /// Its TCP state (1 is ESTABLISHED, 10 LISTEN).
    pub state: u8,
    /// Its inode: what the `/proc/PID/fd` links of its owners name ([`Proc::sockets`](crate::Proc::sockets)).
    pub inode: u64,
}

/// `TCP_ESTABLISHED` of the kernel's TCP states.
pub const TCP_ESTABLISHED: u8 = 1;

impl TcpRow {
    /// Whether it is an established connection.
    pub fn established(&self) -> bool {
        self.state == TCP_ESTABLISHED
    }
}

/// The rows of a `/proc/net/tcp` or `tcp6` text (its header left out).
pub fn tcp_rows(text: &str) -> impl Iterator<Item = TcpRow> + '_ {
    // `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
    // inode ...`, addresses as `HEXADDR:HEXPORT`.
    // Each 32-bit word of an address is printed as the host reads it from memory.
    let addr_port = |a: &str| {
        let (addr, port) = a.rsplit_once(':')?;
        let word = |i: usize| {
            u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16)
                .ok()
                .map(u32::to_ne_bytes)
        };
        let ip = match addr.len() {
            8 => std::net::IpAddr::from(word(0)?),
            32 => {
                let mut b = [0u8; 16];
                for i in 0..4 {
                    b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
                }
                std::net::IpAddr::from(b)
            }
            _ => return None,
        };
        Some((ip, u16::from_str_radix(port, 16).ok()?))
    };
    text.lines().skip(1).filter_map(move |l| {
        let mut f = l.split_whitespace().skip(1);
        let (local_addr, local_port) = addr_port(f.next()?)?;
        let (remote_addr, remote_port) = addr_port(f.next()?)?;
        let state = u8::from_str_radix(f.next()?, 16).ok()?;
        let inode = f.nth(5)?.parse().ok()?;
        Some(TcpRow {
            local_addr,
            remote_addr,
            local_port,
            remote_port,
            state,
            inode,
        })
    })
}

/// The major and minor version of a kernel release (`/proc/sys/kernel/osrelease`,
/// `uname -r`): `6.18.0-1-amd64` is (6, 18).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    Some((it.next()?.ok()?, it.next()?.ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tx\nUid:\t1000\t0\t0\t0\nCapEff:\t000001ffffffffff\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";

    #[test]
    fn status_lines_are_read_by_their_key() {
        let s = STATUS.as_bytes();
        assert_eq!(status_value(s, "Name"), Some(&b"x"[..]));
        assert_eq!(status_value(s, "Seccomp"), Some(&b"2"[..]));
        assert_eq!(status_value(s, "Nope"), None);
        assert_eq!(cap_eff(s), Some(0x1ff_ffff_ffff));
        assert_eq!(effective_uid(s), Some(0));
        assert_eq!(cap_eff(b"CapEff:\tzz\n"), None);
    }

    #[test]
    fn the_status_line_says_whether_a_seccomp_filter_is_in_force() {
        let with = |v: &str| STATUS.replace("Seccomp:\t2", &format!("Seccomp:\t{v}"));
        assert!(!seccomp_in_force(with("0").as_bytes()));
        assert!(seccomp_in_force(with("2").as_bytes()));
        assert!(seccomp_in_force(with("1").as_bytes()));
        // (Seccomp_filters: is another line.)
        assert!(!seccomp_in_force(b"Name:\tx\nSeccomp_filters:\t1\n"));
        assert!(!seccomp_in_force(b"Name:\tx\nState:\tR\n"));
    }

    #[test]
    fn links_name_socket_and_namespace_inodes() {
        assert_eq!(socket_inode(b"socket:[4242]"), Some(4242));
        assert_eq!(socket_inode(b"pipe:[4242]"), None);
        assert_eq!(socket_inode(b"/dev/null"), None);
        assert_eq!(socket_inode(b"socket:[x]"), None);
        assert_eq!(link_inode(b"net:[4026531840]", "net"), Some(4026531840));
        assert_eq!(link_inode(b"net:[4026531840]", "mnt"), None);
    }

    #[test]
    fn stat_fields_count_from_after_the_command_name() {
        // A command name with a space and a parenthesis, as any process may choose.
        let stat = "4242 (a b) c) Z 17 4242 4242 0 -1 2097216 100 0 0 0 250 130";
        let s = Stat::parse(stat).unwrap();
        assert_eq!(s.state(), Some('Z'));
        assert_eq!(s.ppid(), Some(17));
        assert_eq!(s.field(14), Some("250"));
        assert_eq!((s.field(1), s.field(2), s.field(99)), (None, None, None));
        assert!(s.exited() && s.kernel_thread());
        let running = Stat::parse("1 (init) S 0 1 1 0 -1 4194560").unwrap();
        assert!(!running.exited() && !running.kernel_thread());
        assert!(Stat::parse("garbage").is_none());
        assert_eq!(Stat::parse("1 (x)").unwrap().state(), None);
    }

    #[test]
    fn cgroup_lines_of_v1_and_v2() {
        let text = "9:name=systemd:/\n8:pids,cpu:/svc/a\n0::/system.slice/x.service\n";
        let v: Vec<_> = cgroup_lines(text).collect();
        assert_eq!(v.len(), 3);
        assert!(v[1].has("pids") && !v[0].has("pids"));
        assert_eq!(v[1].path, "/svc/a");
        assert_eq!(cgroup_v2_path(text), Some("/system.slice/x.service"));
        assert_eq!(cgroup_v2_path("8:pids:/a\n"), None);
        // A path may hold colons.
        assert_eq!(cgroup_lines("0::/a:b\n").next().unwrap().path, "/a:b");
    }

    #[test]
    fn mounts_and_the_cgroup2_one_among_v1_ones() {
        let text = "\
35 25 0:30 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory
39 25 0:36 /sub /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 25 0:35 / /sys/fs/cgroup/unified rw,relatime shared:19 - cgroup2 cgroup2 rw
";
        let m: Vec<_> = mounts(text).collect();
        assert_eq!(m.len(), 3);
        assert_eq!(
            m[1],
            Mount {
                root: "/sub",
                point: "/sys/fs/cgroup/pids",
                fstype: "cgroup",
                super_options: "rw,pids",
            }
        );
        assert!(m[1].has_option("pids") && !m[0].has_option("pids"));
        assert_eq!(cgroup2_mount(text), Some("/sys/fs/cgroup/unified"));
        assert_eq!(cgroup2_mount("1 0 0:1 / / rw - ext4 /dev/sda rw\n"), None);
        assert_eq!(Mount::parse("not a mount"), None);
    }

    #[test]
    fn tcp_table_rows() {
        let text = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 5678 1 0000000000000000 20 4 30 10 -1
";
        let rows: Vec<_> = tcp_rows(text).collect();
        assert_eq!(
            rows,
            [
                TcpRow {
                    local_addr: [127, 0, 0, 1].into(),
                    remote_addr: [0, 0, 0, 0].into(),
                    local_port: 8000,
                    remote_port: 0,
                    state: 10,
                    inode: 1234
                },
                TcpRow {
                    local_addr: [127, 0, 0, 1].into(),
                    remote_addr: [127, 0, 0, 1].into(),
                    local_port: 8000,
                    remote_port: 40000,
                    state: 1,
                    inode: 5678
                },
            ]
        );
        assert!(rows[1].established() && !rows[0].established());
        // tcp6's addresses are longer; the port is after the last colon all the same.
        let v6 = "h\n 0: 00000000000000000000000001000000:1F40 00000000000000000000000001000000:9C40 01 0:0 0:0 0 0 0 99\n";
        let r = tcp_rows(v6).next().unwrap();
        assert_eq!(r.inode, 99);
        if cfg!(target_endian = "little") {
            assert_eq!(r.remote_addr, std::net::Ipv6Addr::LOCALHOST);
        }
    }

    #[test]
    fn kernel_releases_parse_to_major_and_minor() {
        assert_eq!(kernel_version("6.18.0-1-amd64"), Some((6, 18)));
        assert_eq!(kernel_version("6.18.44-fc-v657\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.10.0"), Some((5, 10)));
        assert_eq!(kernel_version("6.2"), Some((6, 2)));
        assert_eq!(kernel_version("nonsense"), None);
    }
}

//! The kernel half's life: loaded with aya, configured, attached to a cgroup as BPF links
//! (gone when a link's last descriptor closes, whatever ends the process), or pinned in
//! bpffs to outlive it (`--persist`), listed and removed from there. Two programs: the
//! sock_ops one sets the options on every new connection of a whole cgroup; the
//! cgroup/setsockopt one notes the options the program sets itself, which the undo leaves
//! alone (attached for every fix, also one of a process that shares its cgroup). Sockets
//! charged elsewhere (a process that shares its cgroup, a listener made in another cgroup)
//! are reached by marks: a third program marks the sockets the selected processes make, this
//! module marks those they hold, and a marked copy of the sock_ops program on the root cgroup
//! sets the options on marked connections wherever they are charged.

use std::fs;
use std::mem::offset_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{CgroupSock, CgroupSockopt, SockOps};
use aya::{Ebpf, EbpfLoader};
use nagless_host::BpfError;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::plan::TcpOption;
use crate::plan::{Config, CONFIG_LEN};
use crate::sys;

/// The compiled kernel half (built from fix/bpf/fix.bpf.c by `scripts/build-bpf`).
pub(crate) static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/fix.bpf.o");

/// Where pinned fixes live: one directory per cgroup, named by the cgroup's id.
pub(crate) const PIN_ROOT: &str = "/sys/fs/bpf/nagless-fix";

/// The kernel program's counters (summed over CPUs), in the order of fix.bpf.c's `enum
/// counter`, which indexes the per-CPU `counters` map: one `u64` per counter (asserted at
/// compile time, and against the C source by a test), read from the map index by index.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Counters {
    /// Connections that became established in the cgroup.
    pub(crate) established: u64,
    /// Of those, on a selected port.
    pub selected: u64,
    /// TCP_NODELAY set.
    pub(crate) nodelay_set: u64,
    /// Delayed-ACK bound set.
    pub(crate) delack_set: u64,
    /// Options the kernel refused.
    pub refused: u64,
}

/// `NCOUNTERS` of fix.bpf.c: how many counters the map holds.
const N_COUNTERS: usize = 5;

/// `enum counter` of fix.bpf.c, in order: each member's name there, and the field of
/// [`Counters`] (its offset) that holds it.
const MEMBERS: [(&str, usize); N_COUNTERS] = [
    ("ESTABLISHED", offset_of!(Counters, established)),
    ("SELECTED", offset_of!(Counters, selected)),
    ("NODELAY_SET", offset_of!(Counters, nodelay_set)),
    ("DELACK_SET", offset_of!(Counters, delack_set)),
    ("REFUSED", offset_of!(Counters, refused)),
];

// Counter `i` of the map is the `i`th u64 of the struct.
const _: () = assert!(nagless_host::bpf::counters_in_order(
    &MEMBERS,
    size_of::<Counters>()
));

/// The bit of fix.bpf.c's `mine` map (`MINE_MARKED`) that marks a socket of the selection.
const MINE_MARKED: u32 = 1;

/// The bits of fix.bpf.c's `chosen` map (`CHOSE_NODELAY`, `CHOSE_DELACK_MAX`): the options a
/// program set itself.
const CHOSE_NODELAY: u32 = 1;
const CHOSE_DELACK_MAX: u32 = 2;

/// Why the kernel half could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// Not allowed to load BPF programs (the kernel said `EPERM`).
    #[error("loading nagless fix's BPF programs needs root, or CAP_BPF and CAP_NET_ADMIN ({0})")]
    NoPermission(BpfError),
    /// The kernel refused the object or the program.
    #[error("the kernel refused nagless fix's BPF program (bpf_setsockopt of TCP_NODELAY needs Linux 6.1, of TCP_BPF_DELACK_MAX Linux 5.10): {0}")]
    Load(BpfError),
    /// The object lacks a program or a map this module asks for.
    #[error("the kernel refused nagless fix's BPF program (bpf_setsockopt of TCP_NODELAY needs Linux 6.1, of TCP_BPF_DELACK_MAX Linux 5.10): no {0}")]
    Missing(&'static str),
    /// The cgroup could not be opened or linked to.
    #[error("cannot attach to cgroup {cgroup} (BPF links to cgroups need Linux 5.7): {error}")]
    Link {
        /// The cgroup.
        cgroup: PathBuf,
        /// What the kernel said.
        error: String,
    },
    /// Pinning failed.
    #[error("cannot pin under {PIN_ROOT}: {0}")]
    Pin(String),
}

/// What a failed load or map call means: no permission if the kernel said `EPERM`.
fn load_error(e: &(dyn std::error::Error + 'static)) -> AttachError {
    let e = BpfError::of(e);
    if e.not_permitted() {
        AttachError::NoPermission(e)
    } else {
        AttachError::Load(e)
    }
}

/// The kernel half attached to one cgroup.
pub struct Attached {
    bpf: Ebpf,
    /// The sock_ops program's link: a fix of the whole cgroup.
    link: Option<OwnedFd>,
    /// The note_choice program's link.
    _observer: OwnedFd,
    /// The fix_marked program's link on the root cgroup (marked connections, wherever they
    /// are charged), and mark_new's there (a fix of one process: the sockets its processes
    /// make), when the kernel can set the options from BPF.
    marked: Option<OwnedFd>,
    _marker: Option<OwnedFd>,
    /// Why the programs on the root cgroup could not be attached, if they could not.
    root_error: Option<String>,
    cgroup: PathBuf,
}

/// The id of a cgroup (v2): its directory's inode (as BPF links name the cgroup).
pub fn cgroup_id(dir: &Path) -> std::io::Result<u64> {
    fs::metadata(dir).map(|m| m.ino())
}

/// Takes the program `$name` of `$bpf` as a `$ty`, loads it and links it to the cgroup
/// directory `$dir` with `$link`: the link's descriptor (`?` on any error, a link's through
/// `$err`).
macro_rules! load_and_link {
    ($bpf:expr, $name:literal, $ty:ty, $link:path, $dir:expr, $err:expr) => {{
        let prog: &mut $ty = $bpf
            .program_mut($name)
            .ok_or(AttachError::Missing(concat!($name, " program")))?
            .try_into()
            .map_err(|e| load_error(&e))?;
        prog.load().map_err(|e| load_error(&e))?;
        let fd = prog.fd().map_err(|e| load_error(&e))?;
        $link(fd.as_fd(), $dir.as_fd()).map_err($err)?
    }};
}

/// Loads the programs with `config` and attaches them to `cgroup`: from now on the options a
/// program of it sets itself are noted, and, if `whole` (the fix is the cgroup's), every
/// connection a process of it (or of a cgroup under it) makes or accepts gets the options.
/// With `root` (the root cgroup), every connection marked as the selection's gets them too,
/// wherever it is charged (the sockets `existing::fix` marks); for a fix of one process (`target_pid`), the
/// sockets the processes of [`Attached::set_targeted`] make are marked as they are made.
pub fn attach(
    cgroup: &Path,
    config: &Config,
    whole: bool,
    root: Option<&Path>,
    pids: &[u32],
) -> Result<Attached, AttachError> {
    // `chosen` and `mine` are socket-storage maps, read and written by descriptor from
    // `&self` (sys.rs), where aya's `SkStorage` writes need the map borrowed mutably.
    let mut bpf = EbpfLoader::new().load(OBJECT).map_err(|e| load_error(&e))?;
    {
        let map = bpf
            .map_mut("config")
            .ok_or(AttachError::Missing("config map"))?;
        let mut array: Array<&mut MapData, [u8; CONFIG_LEN]> =
            Array::try_from(map).map_err(|e| load_error(&e))?;
        array
            .set(0, config.to_bytes(), 0)
            .map_err(|e| load_error(&e))?;
    }
    let link_err = |e: std::io::Error| AttachError::Link {
        cgroup: cgroup.to_path_buf(),
        error: e.to_string(),
    };
    let dir = fs::File::open(cgroup).map_err(link_err)?;
    let observer = load_and_link!(
        bpf,
        "note_choice",
        CgroupSockopt,
        sys::link_setsockopt,
        dir,
        link_err
    );
    let link = if whole {
        Some(load_and_link!(
            bpf,
            "fix_sockops",
            SockOps,
            sys::link_sock_ops,
            dir,
            link_err
        ))
    } else {
        None
    };
    let (mut marked, mut marker, mut root_error) = (None, None, None);
    if let Some(root) = root {
        // Best effort: without it the fix reaches what it reached before (the cgroup's own
        // sockets; a shared process's new connections by looking again), and says so.
        match attach_marked(&mut bpf, root, config, pids) {
            Ok((m, k)) => (marked, marker) = (m, k),
            Err(e) => root_error = Some(e.to_string()),
        }
    }
    Ok(Attached {
        bpf,
        link,
        _observer: observer,
        marked,
        _marker: marker,
        root_error,
        cgroup: cgroup.to_path_buf(),
    })
}

/// The programs that act on marked sockets, attached to the root cgroup: `fix_marked`, and
/// for a fix of one process `mark_new`.
fn attach_marked(
    bpf: &mut Ebpf,
    root: &Path,
    config: &Config,
    pids: &[u32],
) -> Result<(Option<OwnedFd>, Option<OwnedFd>), AttachError> {
    let root_err = |e: std::io::Error| AttachError::Link {
        cgroup: root.to_path_buf(),
        error: e.to_string(),
    };
    let root_dir = fs::File::open(root).map_err(root_err)?;
    let marked = load_and_link!(
        bpf,
        "fix_marked",
        SockOps,
        sys::link_sock_ops,
        root_dir,
        root_err
    );
    if config.target_pid == 0 {
        return Ok((Some(marked), None));
    }
    // The processes first: no socket one of them makes once the program runs is missed.
    set_targeted(bpf, pids);
    let marker = load_and_link!(
        bpf,
        "mark_new",
        CgroupSock,
        sys::link_sock_create,
        root_dir,
        root_err
    );
    Ok((Some(marked), Some(marker)))
}

/// Fills the `targeted` map of `bpf` with exactly `pids`.
fn set_targeted(bpf: &mut Ebpf, pids: &[u32]) {
    let Some(map) = bpf.map_mut("targeted") else {
        return;
    };
    let Ok(mut hash) = aya::maps::HashMap::<_, u32, u8>::try_from(map) else {
        return;
    };
    let gone: Vec<u32> = hash
        .keys()
        .flatten()
        .filter(|k| !pids.contains(k))
        .collect();
    for k in gone {
        let _ = hash.remove(&k);
    }
    for &p in pids {
        let _ = hash.insert(p, 1, 0);
    }
}

/// The counters of a `counters` map (the attached program's, or a pinned one's).
fn counters_of<T: std::borrow::Borrow<MapData>>(map: PerCpuArray<T, u64>) -> Counters {
    let mut c = [0u64; N_COUNTERS];
    for (i, v) in c.iter_mut().enumerate() {
        *v = map.get(&(i as u32), 0).map_or(0, |v| v.iter().sum());
    }
    zerocopy::transmute!(c)
}

impl Attached {
    /// Whether the program set `option` on the socket `sock` (a copy of its descriptor)
    /// itself since the fix began (`note_choice`). Unknown reads as no.
    pub fn chose(&self, sock: BorrowedFd<'_>, option: TcpOption) -> bool {
        let bit = match option {
            TcpOption::Nodelay => CHOSE_NODELAY,
            TcpOption::DelackMax => CHOSE_DELACK_MAX,
        };
        let Some(aya::maps::Map::SkStorage(map)) = self.bpf.map("chosen") else {
            return false;
        };
        sys::sk_storage_u32(map.fd().as_fd(), sock).is_ok_and(|v| v.is_some_and(|v| v & bit != 0))
    }

    /// Forgets what `note_choice` noted of the socket `sock` (a copy of the program's
    /// descriptor): the fix has just set an option on it itself, from a process that may be
    /// in the cgroup too.
    pub(crate) fn forget_choices(&self, sock: BorrowedFd<'_>) {
        if let Some(aya::maps::Map::SkStorage(map)) = self.bpf.map("chosen") {
            let _ = sys::sk_storage_delete(map.fd().as_fd(), sock);
        }
    }

    /// Marks the socket `sock` (a copy of a selected process's descriptor) as the
    /// selection's: if it connects later, or is a listener, its connections get the options
    /// (those it accepts inherit the mark), wherever they are charged. Nothing without the
    /// root cgroup's program.
    pub(crate) fn mark(&self, sock: BorrowedFd<'_>) {
        if self.marked.is_none() {
            return;
        }
        if let Some(aya::maps::Map::SkStorage(map)) = self.bpf.map("mine") {
            let was = sys::sk_storage_u32(map.fd().as_fd(), sock)
                .ok()
                .flatten()
                .unwrap_or(0);
            if was & MINE_MARKED == 0 {
                let _ = sys::sk_storage_set(map.fd().as_fd(), sock, was | MINE_MARKED);
            }
        }
    }

    /// The processes (a fix of one process and its children) whose new sockets are marked as
    /// they are made: exactly `pids` from now on.
    pub fn set_targeted(&mut self, pids: &[u32]) {
        set_targeted(&mut self.bpf, pids);
    }

    /// Why the programs that act on marked sockets (on the root cgroup) could not be
    /// attached: the fix then reaches the connections charged to its own cgroup only.
    pub fn root_error(&self) -> Option<&str> {
        self.root_error.as_deref()
    }

    /// Whether it sets options on new connections as they are made (of its whole cgroup, or
    /// the marked ones of its processes), not only notes the program's choices.
    pub fn sets_new_connections(&self) -> bool {
        self.link.is_some() || self.marked.is_some()
    }

    /// What the program did so far.
    pub fn counters(&self) -> Counters {
        self.bpf
            .map("counters")
            .and_then(|m| PerCpuArray::try_from(m).ok())
            .map(counters_of)
            .unwrap_or_default()
    }

    /// Pins the link and the maps under `PIN_ROOT` (mounting bpffs at /sys/fs/bpf if it is
    /// not): the fix stays when this process ends, until `nagless fix --remove`.
    pub fn persist(self) -> Result<PathBuf, AttachError> {
        let pin = |e: std::io::Error| AttachError::Pin(e.to_string());
        let Some(link) = self.link else {
            return Err(AttachError::Pin(
                "only a fix of a whole cgroup can be pinned".into(),
            ));
        };
        let bpffs = Path::new("/sys/fs/bpf");
        if !sys::is_bpffs(bpffs).unwrap_or(false) {
            fs::create_dir_all(bpffs).map_err(pin)?;
            sys::mount_bpffs(bpffs).map_err(pin)?;
        }
        let dir = Path::new(PIN_ROOT).join(cgroup_id(&self.cgroup).map_err(pin)?.to_string());
        if dir.exists() {
            return Err(AttachError::Pin(format!(
                "{} is pinned already: `nagless fix --remove --cgroup {}` it first",
                dir.display(),
                self.cgroup.display()
            )));
        }
        fs::create_dir_all(&dir).map_err(pin)?;
        let mut bpf = self.bpf;
        let pinned = (|| -> Result<(), AttachError> {
            for name in ["config", "counters"] {
                if let Some(m) = bpf.map_mut(name) {
                    m.pin(dir.join(name))
                        .map_err(|e| AttachError::Pin(e.to_string()))?;
                }
            }
            if let Some(marked) = &self.marked {
                sys::obj_pin(marked.as_fd(), &dir.join("marked-link")).map_err(pin)?;
            }
            sys::obj_pin(link.as_fd(), &dir.join("link")).map_err(pin)
        })();
        if let Err(e) = pinned {
            // No half-made pin: without its link it would block the next try.
            let _ = fs::remove_dir_all(&dir);
            return Err(e);
        }
        Ok(dir)
    }
}

/// A fix pinned in bpffs.
#[derive(Debug, Clone)]
pub struct Pinned {
    /// Its directory under `PIN_ROOT`.
    pub dir: PathBuf,
    /// The cgroup it is attached to (`None` if the cgroup is gone).
    pub cgroup: Option<PathBuf>,
    /// Its configuration.
    pub config: Option<Config>,
    /// What it did so far.
    pub counters: Counters,
}

/// Every fix pinned on this host.
pub fn pinned(cgroup_root: &Path) -> Vec<Pinned> {
    let Ok(dir) = fs::read_dir(PIN_ROOT) else {
        return Vec::new();
    };
    let mut out: Vec<Pinned> = dir
        .flatten()
        .map(|e| {
            let dir = e.path();
            let id = sys::obj_get(&dir.join("link"))
                .and_then(|l| sys::cgroup_link_info(l.as_fd()))
                .ok()
                .filter(|(t, _)| sys::is_sock_ops(*t))
                .map(|(_, id)| id);
            let cgroup = id.and_then(|id| find_cgroup(cgroup_root, id));
            let config = MapData::from_pin(dir.join("config"))
                .ok()
                .and_then(|m| Array::<_, [u8; CONFIG_LEN]>::try_from(aya::maps::Map::Array(m)).ok())
                .and_then(|a| a.get(&0, 0).ok())
                .map(|b| Config::from_bytes(&b));
            let counters = MapData::from_pin(dir.join("counters"))
                .ok()
                .map(aya::maps::Map::PerCpuArray)
                .and_then(|m| PerCpuArray::<_, u64>::try_from(m).ok())
                .map(counters_of)
                .unwrap_or_default();
            Pinned {
                dir,
                cgroup,
                config,
                counters,
            }
        })
        .collect();
    out.sort_by(|a, b| a.dir.cmp(&b.dir));
    out
}

/// A `nagless fix` program attached on this host now, pinned or running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    /// The cgroup (by id) it is attached to.
    pub cgroup: u64,
    /// Its configuration, read from its `config` map (`None` if that could not be read).
    pub config: Option<Config>,
    /// It sets options on every new connection of the cgroup (`fix_sockops`); else it only
    /// notes the program's choices for a fix of some of its processes (`note_choice`).
    pub whole: bool,
}

/// Every `nagless fix` program attached now: every sock_ops link of the host whose program
/// is `fix_sockops` (with what it sets), and every cgroup/setsockopt link whose program is
/// `note_choice` (a fix running, of a whole cgroup or of a process in it).
pub fn running() -> Vec<Running> {
    let mut out = Vec::new();
    let mut id = 0;
    while let Some(next) = sys::link_next_id(id) {
        id = next;
        let Ok(link) = sys::link_by_id(id) else {
            continue;
        };
        let Ok((attach_type, cgroup)) = sys::cgroup_link_info(link.as_fd()) else {
            continue;
        };
        let (whole, name) = if sys::is_sock_ops(attach_type) {
            (true, "fix_sockops")
        } else if sys::is_setsockopt(attach_type) {
            (false, "note_choice")
        } else {
            continue;
        };
        let Ok(prog) = sys::link_prog_id(link.as_fd()) else {
            continue;
        };
        if sys::prog_name(prog).is_ok_and(|n| n == name) {
            out.push(Running {
                cgroup,
                config: config_of(prog),
                whole,
            });
        }
    }
    out
}

/// The fixes running now whose cgroup has no pin among `pinned` (a pinned fix's programs are
/// running too, and are told as pinned).
pub fn running_unpinned(pinned: &[Pinned]) -> Vec<Running> {
    let pinned_ids: Vec<u64> = pinned
        .iter()
        .filter_map(|p| cgroup_id(p.cgroup.as_ref()?).ok())
        .collect();
    running()
        .into_iter()
        .filter(|r| !pinned_ids.contains(&r.cgroup))
        .collect()
}

/// Whether this process may list the host's BPF links (root, or CAP_SYS_ADMIN): without, no
/// fix in force can be seen.
pub fn can_list() -> bool {
    sys::may_list_links()
}

/// The cgroups (by id) whose new connections a `nagless fix` program sets options on now,
/// pinned or running.
pub fn attached_cgroups() -> Vec<u64> {
    running()
        .into_iter()
        .filter(|r| r.whole)
        .map(|r| r.cgroup)
        .collect()
}

/// The configuration of the loaded program `prog_id`, from its map named `config`.
fn config_of(prog_id: u32) -> Option<Config> {
    let info = aya::programs::loaded_programs()
        .flatten()
        .find(|p| p.id() == prog_id)?;
    for id in info.map_ids().ok()?? {
        let Ok(map) = MapData::from_id(id) else {
            continue;
        };
        if map.info().ok()?.name_as_str() != Some("config") {
            continue;
        }
        let array = Array::<_, [u8; CONFIG_LEN]>::try_from(aya::maps::Map::Array(map)).ok()?;
        return array.get(&0, 0).ok().map(|b| Config::from_bytes(&b));
    }
    None
}

/// Removes a pinned fix: its link goes (the program detaches), then its maps.
pub fn remove(p: &Pinned) -> std::io::Result<()> {
    for name in ["link", "marked-link", "config", "counters"] {
        match fs::remove_file(p.dir.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    fs::remove_dir(&p.dir)
}

/// The cgroup directory whose id is `id`, under `root`.
pub fn find_cgroup(root: &Path, id: u64) -> Option<PathBuf> {
    crate::target::cgroup_dirs(root)
        .into_iter()
        .find(|d| cgroup_id(d).ok() == Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagless_test_support::bpf_object::{c_define, c_enum};

    const SOURCE: &str = include_str!("../bpf/fix.bpf.c");

    #[test]
    fn the_counters_are_the_c_enums_in_its_order() {
        let mut want: Vec<&str> = MEMBERS.iter().map(|m| m.0).collect();
        want.push("NCOUNTERS");
        assert_eq!(c_enum(SOURCE, "counter"), want);
    }

    #[test]
    fn the_constants_shared_with_fix_bpf_c_agree() {
        let define = |name| c_define(SOURCE, name);
        assert_eq!(define("CHOSE_NODELAY"), Some(CHOSE_NODELAY.into()));
        assert_eq!(define("CHOSE_DELACK_MAX"), Some(CHOSE_DELACK_MAX.into()));
        assert_eq!(
            define("TCP_DELACK_MAX_US"),
            Some(crate::plan::TCP_DELACK_MAX_US.into())
        );
        assert_eq!(define("SOL_TCP"), Some(libc::SOL_TCP.into()));
        assert_eq!(define("TCP_NODELAY"), Some(libc::TCP_NODELAY.into()));
    }
}

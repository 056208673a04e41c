//! Which process owns a socket: /proc/PID/fd links name socket inodes
//! ([`Proc::sockets`](nagless_host::Proc::sockets)). Other users' /proc/PID/fd can be read
//! only with root (or CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH); their sockets stay
//! unattributed, and `ProcMap::denied` counts the processes that could not be read.
//! `program_name` and [`unit()`] say which program a process runs, beyond its interpreter:
//! the script, module or main class of its command line, and the systemd unit its cgroup
//! names.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nagless_host::text::{cgroup_lines, cgroup_v2_path};
use nagless_host::{Pid, Proc};

/// A process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Process {
    /// Process id.
    pub(crate) pid: u32,
    /// Its command line (arguments joined by spaces, at most 80 characters).
    pub(crate) cmd: String,
    /// Which program it runs ([`program_name`] of its command line, at most 80 characters).
    pub(crate) program: String,
    /// Its command name (`/proc/PID/comm`, at most 15 bytes; empty if unreadable).
    pub(crate) comm: String,
    /// Its cgroup (the cgroup v2 path of `/proc/PID/cgroup`, else the first hierarchy's).
    pub(crate) cgroup: String,
    /// The id of its container, if its cgroup names one ([`container_id`]).
    pub(crate) container: Option<String>,
    /// Its program without arguments ([`service_name`]): what a metric's label says.
    pub(crate) service: String,
    /// Its container's pod, on a Kubernetes node ([`crate::kube`]).
    pub(crate) pod: Option<crate::kube::Pod>,
}

/// Socket inode to owning process, rebuilt by scanning /proc.
#[derive(Debug, Default)]
pub(crate) struct ProcMap {
    owners: HashMap<u32, u32>,
    cmds: HashMap<u32, Process>,
    /// Processes whose fds could not be read in the last scan.
    pub(crate) denied: usize,
}

impl ProcMap {
    /// Scans every process's fds.
    pub(crate) fn rescan(&mut self) {
        self.owners.clear();
        self.denied = 0;
        let proc = Proc::host();
        for pid in proc.pids() {
            let Ok(sockets) = proc.sockets(pid) else {
                self.denied += 1;
                continue;
            };
            // (sock_diag's inodes are 32 bits wide.)
            for inode in sockets.into_values().filter_map(|i| u32::try_from(i).ok()) {
                self.owners.insert(inode, pid);
            }
        }
        self.cmds
            .retain(|pid, _| self.owners.values().any(|p| p == pid));
    }

    /// Whether the last scan saw this inode.
    pub(crate) fn knows(&self, inode: u32) -> bool {
        self.owners.contains_key(&inode)
    }

    /// The process owning socket `inode`, if known.
    pub(crate) fn owner(&mut self, inode: u32) -> Option<Process> {
        let pid = *self.owners.get(&inode)?;
        Some(self.cmds.entry(pid).or_insert_with(|| process(pid)).clone())
    }
}

/// A [`ProcMap`] walked again only for a socket inode it does not know: at most once per
/// `every`, and at most [`Walked::TRIES`] times for any one inode (some are never found:
/// other users' sockets without root, a kernel's own listener). The sampler's listing thread
/// and the eBPF backend's looks at listeners both find owners so.
#[derive(Debug)]
pub(crate) struct Walked {
    procs: ProcMap,
    /// Walks that did not find each inode still unknown.
    tries: HashMap<u32, u8>,
    last: Option<Instant>,
    every: Duration,
}

impl Walked {
    /// Walks of /proc that may look for one inode.
    pub(crate) const TRIES: u8 = 3;

    pub(crate) fn new(procs: ProcMap, every: Duration) -> Walked {
        Walked {
            procs,
            tries: HashMap::new(),
            last: None,
            every,
        }
    }

    /// Walks /proc if one of `inodes` is unknown and not given up on, and the last walk is
    /// `every` old; a walk that does not find one counts a try against it.
    pub(crate) fn look_for(&mut self, inodes: &[u32]) {
        let wanted = |w: &Walked, i: u32| i != 0 && !w.procs.knows(i) && !w.given_up(i);
        if !inodes.iter().any(|&i| wanted(self, i))
            || self.last.is_some_and(|t| t.elapsed() < self.every)
        {
            return;
        }
        self.procs.rescan();
        self.last = Some(Instant::now());
        for &i in inodes {
            if wanted(self, i) {
                *self.tries.entry(i).or_default() += 1;
            }
        }
    }

    /// Whether `inode` is no longer looked for.
    pub(crate) fn given_up(&self, inode: u32) -> bool {
        self.tries.get(&inode).is_some_and(|&n| n >= Walked::TRIES)
    }

    /// Forgets the tries of inodes not `present` (inodes are reused).
    pub(crate) fn keep_only(&mut self, present: &HashSet<u32>) {
        self.tries.retain(|i, _| present.contains(i));
    }

    /// The process owning socket `inode`, if the last walk found it.
    pub(crate) fn owner(&mut self, inode: u32) -> Option<Process> {
        self.procs.owner(inode)
    }

    /// Processes whose fds could not be read at the last walk.
    pub(crate) fn denied(&self) -> usize {
        self.procs.denied
    }
}

/// What the watch names a process by: the labels of its series (`process`, `unit`,
/// `container`, the Kubernetes ones) and its cgroup. `nagless fix`'s policies select by them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// Its program without arguments, the `process` label (`python3 app.py`).
    pub program: String,
    /// Its systemd unit, outside containers.
    pub unit: Option<String>,
    /// Its container's id.
    pub container: Option<String>,
    /// Its container's pod, on a Kubernetes node.
    pub pod: Option<crate::kube::Pod>,
    /// Its cgroup.
    pub cgroup: String,
}

/// The names of process `pid` ([`Names`]), `None` if it is gone.
pub fn names_of(pid: u32) -> Option<Names> {
    let p = process_of(pid)?;
    Some(Names {
        unit: service_unit(p.container.as_deref(), Some(&p.cgroup)),
        program: p.service,
        container: p.container,
        pod: p.pod,
        cgroup: p.cgroup,
    })
}

/// What /proc says of process `pid`, `None` if it is gone.
pub(crate) fn process_of(pid: u32) -> Option<Process> {
    Proc::host().exists(pid).then(|| process(pid))
}

/// What /proc says of a process.
pub(crate) fn process(pid: u32) -> Process {
    let (cgroup, container) = cgroup(pid);
    let comm = comm(pid);
    let raw = Proc::host().cmdline(pid).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    let argv: Vec<&str> = text.split('\0').filter(|a| !a.is_empty()).collect();
    // (No command line: a kernel thread, or a process exiting.)
    let (cmd, program, service) = match argv.is_empty() {
        true => (format!("[{comm}]"), format!("[{comm}]"), comm.clone()),
        false => (
            printable(&argv.join(" ")),
            program_name(&argv),
            service_name(&argv),
        ),
    };
    let pod = container
        .as_deref()
        .and_then(|id| crate::kube::pod_of(id, &cgroup));
    Process {
        pid,
        cmd: shorten(cmd, 80),
        program: shorten(program, 80),
        comm,
        cgroup,
        container,
        service: shorten(service, 80),
        pod,
    }
}

/// `s` cut to `n` characters, the last three of them `...`.
fn shorten(s: String, n: usize) -> String {
    if s.chars().count() <= n {
        return s;
    }
    s.chars().take(n.saturating_sub(3)).collect::<String>() + "..."
}

/// How an interpreter's command line names what it runs.
struct Interpreter {
    /// Options that take a value: the rest of their word, else the next argument (`-cp PATH`).
    with_value: &'static [&'static str],
    /// Options whose value is the program (a module, inline code), shown as given.
    naming: &'static [&'static str],
    /// Options whose value is the program's file (`-jar app.jar`), shown by its file name.
    naming_file: &'static [&'static str],
    /// Single-letter options may share a word (`-uc CODE`, `-Wignore`).
    clustered: bool,
}

/// The interpreter a program's file name (`python3.11`, `perl5.36`) names, if any.
fn interpreter(name: &str) -> Option<Interpreter> {
    let i = |with_value, naming, naming_file, clustered| Interpreter {
        with_value,
        naming,
        naming_file,
        clustered,
    };
    Some(
        match name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.') {
            "python" | "pypy" => i(
                &["-W", "-X", "--check-hash-based-pycs"],
                &["-m", "-c"],
                &[],
                true,
            ),
            "perl" => i(&["-I", "-M", "-m"], &["-e", "-E"], &[], true),
            "ruby" => i(&["-I", "-r", "-C", "-E"], &["-e"], &[], true),
            "node" | "nodejs" => i(
                &[
                    "-r",
                    "--require",
                    "--import",
                    "--loader",
                    "--experimental-loader",
                    "-C",
                    "--conditions",
                    "--title",
                ],
                &["-e", "--eval", "-p", "--print"],
                &[],
                false,
            ),
            "php" => i(&["-c", "-d", "-t", "-z"], &["-r", "-S"], &["-f"], false),
            "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" => i(
                &["-o", "+o", "-O", "+O", "--rcfile", "--init-file"],
                &["-c"],
                &[],
                true,
            ),
            "java" => i(
                &[
                    "-cp",
                    "-classpath",
                    "--class-path",
                    "-p",
                    "--module-path",
                    "--upgrade-module-path",
                    "--add-modules",
                    "--add-opens",
                    "--add-exports",
                    "--add-reads",
                    "--patch-module",
                    "--limit-modules",
                    "--source",
                ],
                &["-m", "--module"],
                &["-jar"],
                false,
            ),
            _ => return None,
        },
    )
}

/// The file name of a path (`/usr/bin/python3`: `python3`).
fn file_name(path: &str) -> &str {
    match path.trim_end_matches('/').rsplit('/').next() {
        Some(n) if !n.is_empty() => n,
        _ => path,
    }
}

/// Which program an argv runs, for people: for an interpreter (Python, Perl, Ruby, Node.js,
/// PHP, a shell, Java) its name and, past its own options, the script's file name (`python3
/// app.py`), the module or inline code (`python3 -m http.server`, `bash -c CODE`), the main
/// class or jar (`java com.example.Main`, `java -jar app.jar`); for any other program its
/// executable's file name (argv\[0\] as it is when it holds a space: a title set with
/// `setproctitle`, `nginx: worker process`). Then the remaining arguments. Escaped with
/// [`printable`]; empty for an empty argv.
pub(crate) fn program_name(argv: &[&str]) -> String {
    let (named, rest) = program_parts(argv);
    printable(
        &named
            .into_iter()
            .chain(rest.iter().copied())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// [`program_name`] without the remaining arguments (`python3 app.py`, `java -jar app.jar`,
/// `redis-server`): what a metric's label may say, since arguments (a port, a file, a time)
/// could make a new series of every run.
pub(crate) fn service_name(argv: &[&str]) -> String {
    printable(&program_parts(argv).0.join(" "))
}

/// What names the program of `argv` (its name and, for an interpreter, what it runs), and the
/// arguments after that.
fn program_parts<'a, 'b>(argv: &'b [&'a str]) -> (Vec<&'a str>, &'b [&'a str]) {
    let Some((&first, args)) = argv.split_first() else {
        return (Vec::new(), &[]);
    };
    let name = if first.contains(' ') {
        first
    } else {
        file_name(first)
    };
    let mut shown = vec![name];
    let mut rest = args.iter().copied();
    if let Some(i) = interpreter(name) {
        while let Some(a) = rest.next() {
            let option = a.len() > 1 && (a.starts_with('-') || a.starts_with('+'));
            if a == "--" {
                shown.extend(rest.next().map(file_name));
                break;
            } else if !option && (name != "java" || !a.starts_with('@')) {
                // (Java's `@FILE` holds more options.)
                shown.push(file_name(a)); // the script, or Java's main class
                break;
            } else if i.naming.contains(&a) || i.naming_file.contains(&a) {
                shown.push(a);
                let v = rest.next();
                shown.extend(if i.naming_file.contains(&a) {
                    v.map(file_name)
                } else {
                    v
                });
                break;
            } else if i.with_value.contains(&a) {
                rest.next();
            } else if i.clustered && option && !a.starts_with("--") {
                // `-uc CODE`, `-Wignore`, `-uWignore`: letters up to one taking a value; a
                // non-letter starts an attached value (`-i.bak`, `-d:Trace`).
                let (sign, letters) = a.split_at(1);
                let mut named = None;
                for (at, c) in letters.char_indices() {
                    if !c.is_ascii_alphabetic() {
                        break;
                    }
                    let flag = format!("{sign}{c}");
                    let attached = &letters[at + 1..];
                    if i.naming.contains(&flag.as_str()) {
                        named = Some((&a[..a.len() - attached.len()], attached));
                        break;
                    } else if i.with_value.contains(&flag.as_str()) {
                        if attached.is_empty() {
                            rest.next();
                        }
                        break;
                    }
                }
                if let Some((flags, attached)) = named {
                    shown.push(flags);
                    shown.extend(if attached.is_empty() {
                        rest.next()
                    } else {
                        Some(attached)
                    });
                    break;
                }
            }
        }
    }
    let left = rest.len();
    (shown, &args[args.len() - left..])
}

/// The systemd unit a cgroup path names: its last component ending in `.service` or `.scope`
/// (`/system.slice/nginx.service`: `nginx.service`), escaped with `printable`. `None` when
/// that is a login session's (`session-2.scope`), systemd's own (`init.scope`) or a
/// container's scope (its id says more: [`container_id`]), which name no service.
pub fn unit(cgroup: &str) -> Option<String> {
    let c = cgroup
        .rsplit('/')
        .find(|c| c.ends_with(".service") || c.ends_with(".scope"))?;
    // Login sessions, terminals' and desktops' transient scopes name no service.
    let other = c.starts_with("session-")
        || c == "init.scope"
        || c.starts_with("app-")
        || c.contains("-spawn-")
        || container_id(c).is_some();
    (!other).then(|| printable(c))
}

/// The systemd unit of a process outside containers (in one, its container's id and pod say
/// more): [`unit()`] of its `cgroup`.
pub(crate) fn service_unit(container: Option<&str>, cgroup: Option<&str>) -> Option<String> {
    match container {
        Some(_) => None,
        None => cgroup.and_then(unit),
    }
}

/// The cgroup path of a process (its cgroup v2 path, else the first hierarchy's) and its
/// container's id (see [`container_id`]).
fn cgroup(pid: u32) -> (String, Option<String>) {
    let text = Proc::host().cgroup(pid).unwrap_or_default();
    let paths: Vec<&str> = cgroup_lines(&text).map(|l| l.path).collect();
    let path = cgroup_v2_path(&text)
        .or(paths.first().copied())
        .unwrap_or_default();
    let id = container_id(path).or_else(|| paths.iter().find_map(|p| container_id(p)));
    (path.to_owned(), id)
}

/// The container id a cgroup path names: the last component holding a run of 64 hex digits
/// as a word of its own, as Docker (`docker-ID.scope`, `/docker/ID`), containerd and
/// Kubernetes (`cri-containerd-ID.scope`, `/kubepods/.../podUID/ID`), CRI-O (`crio-ID.scope`)
/// and Podman (`libpod-ID.scope`, `.../libpod-ID.scope/container`) name them.
pub fn container_id(cgroup: &str) -> Option<String> {
    cgroup.rsplit('/').find_map(|c| {
        c.split(['-', '.', '_', ':'])
            .find(|w| w.len() == 64 && w.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_owned)
    })
}

/// `text` with every control character (C0, DEL, C1, and the Unicode direction overrides)
/// written as an escape (`\x1b`, `\u{202e}`): what any local user puts in a process name or a
/// command line (`prctl(PR_SET_NAME)`, argv) is shown, never acted on by the terminal of the
/// watcher, which runs as root. Every name and command line the watcher reports goes through
/// here when it is read.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            let code = c as u32;
            if code < 0x100 {
                out.push_str(&format!("\\x{code:02x}"));
            } else {
                out.push_str(&format!("\\u{{{code:x}}}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn comm(pid: u32) -> String {
    Proc::host()
        .comm(pid)
        .map(|c| printable(&c))
        .unwrap_or_default()
}

/// The effective uid of this process (from /proc/self/status).
pub(crate) fn euid() -> Option<u32> {
    Proc::host().euid(Pid::Own)
}

#[cfg(test)]
mod tests;

//! A fix declared once for a fleet (issue 52): a policy file of rules, each selecting
//! workloads by what `nagless watch` names them (program, systemd unit, container,
//! Kubernetes namespace, pod and container, cgroup), their connections by port and peer
//! range, and the options to set (`nodelay`, `ack_delay_max`), optionally on a stable share
//! of them first (a canary) and taken back when the stall rate they select does not fall.
//!
//! The file is TOML (`docs/fix.md` has examples):
//!
//! ```toml
//! [[rule]]
//! name = "api-to-postgres"        # unique; names the rule in logs and metrics
//! k8s_namespace = "shop"          # what it selects: every key given must match
//! k8s_pod = "api-*"               # `*` matches any run of characters
//! ports = [5432]                  # local or remote port (none: every port)
//! peers = ["10.0.0.0/8"]          # the remote address (none: every peer)
//! nodelay = true                  # and/or ack_delay_max = "8ms"
//! canary = 10                     # percent of the selected workloads, chosen stably
//! revert_after = "2m"             # taken back unless its stall rate fell by then
//! ```
//!
//! Everything here is pure: [`Policy::parse`] checks a file (every error names its line) and
//! [`Policy::decide`] says, for a workload as `watch` names it, which rules select it and
//! whether each one's canary takes it. Overlaps are decided by one written rule: **the first
//! rule in the file that selects a connection (its workload, its port and its peer) applies
//! to it, alone** ([`Decision::rule_for`]); a later rule that selects it too does not.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::plan::{parse_duration, Action, Ports};

/// A workload, as `nagless watch` names it (every field it could read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    /// Process id.
    pub pid: u32,
    /// The program it runs, as the watch's `process` label (`python3 app.py`).
    pub program: String,
    /// Its systemd unit, outside containers.
    pub unit: Option<String>,
    /// Its container's id.
    pub container: Option<String>,
    /// Kubernetes namespace, on a node.
    pub k8s_namespace: Option<String>,
    /// Kubernetes pod.
    pub k8s_pod: Option<String>,
    /// Kubernetes container.
    pub k8s_container: Option<String>,
    /// Its cgroup (v2 path, from the hierarchy's root).
    pub cgroup: String,
    /// The host it runs on (its machine id), which tells apart the same unit or program on
    /// every host of a fleet.
    pub node: String,
}

impl Workload {
    /// What names it for the canary: its pod (namespace and name), else its container's id,
    /// else its host and unit, else its host and program. A host's unit or program is chosen
    /// alike on every run of the agent; a pod or container made again (a rollout, a restart)
    /// has a new name or id, and is drawn again.
    fn identity(&self) -> String {
        match (&self.k8s_namespace, &self.k8s_pod) {
            (Some(ns), Some(pod)) => format!("pod {ns}/{pod}"),
            _ => match (&self.container, &self.unit) {
                (Some(c), _) => format!("container {c}"),
                (None, Some(u)) => format!("{} unit {u}", self.node),
                (None, None) => format!("{} program {}", self.node, self.program),
            },
        }
    }
}

/// A peer range: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    addr: IpAddr,
    prefix: u8,
}

impl Range {
    /// `10.0.0.0/8`, `fd00::/8`, or one address.
    fn parse(s: &str) -> Result<Range, String> {
        let (a, p) = s.split_once('/').unwrap_or((s, ""));
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{s:?} is not an address range such as 10.0.0.0/8"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = if p.is_empty() {
            max
        } else {
            p.parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?
        };
        // An IPv4-mapped range is its IPv4 range (addresses are compared so too).
        if let IpAddr::V6(v6) = addr {
            if let Some(v4) = v6.to_ipv4_mapped().filter(|_| prefix >= 96) {
                return Ok(Range {
                    addr: IpAddr::V4(v4),
                    prefix: prefix - 96,
                });
            }
        }
        Ok(Range { addr, prefix })
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let bits = |a: IpAddr| -> u128 {
            match a {
                IpAddr::V4(v) => u128::from(u32::from(v)) << 96,
                IpAddr::V6(v) => u128::from(v),
            }
        };
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        let mask = if self.prefix == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(self.prefix))
        };
        bits(ip) & mask == bits(self.addr) & mask
    }
}

/// What a rule selects by: every field given must match the workload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Select {
    /// The program, as the watch's `process` label (`*` globs, as in every name here).
    pub program: Option<String>,
    /// The systemd unit (`api` or `api.service`).
    pub unit: Option<String>,
    /// The container, by its id's first 12 or more hex digits.
    pub container: Option<String>,
    /// The Kubernetes namespace.
    pub k8s_namespace: Option<String>,
    /// The pod.
    pub k8s_pod: Option<String>,
    /// The container's name in its pod.
    pub k8s_container: Option<String>,
    /// This cgroup and every cgroup below it.
    pub cgroup: Option<String>,
}

/// `pattern` against `text`, where `*` matches any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    let Some(rest) = text.strip_prefix(first) else {
        return false;
    };
    let Some(mut rest) = rest.strip_suffix(last) else {
        return false;
    };
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

impl Select {
    fn is_empty(&self) -> bool {
        *self == Select::default()
    }

    /// Whether every field given matches `w`.
    pub fn matches(&self, w: &Workload) -> bool {
        let field = |want: &Option<String>, have: Option<&str>| {
            want.as_deref()
                .is_none_or(|p| have.is_some_and(|h| glob(p, h)))
        };
        let container = self.container.as_deref().is_none_or(|want| {
            w.container
                .as_deref()
                .is_some_and(|id| id.starts_with(&want.to_ascii_lowercase()))
        });
        let cgroup = self.cgroup.as_deref().is_none_or(|want| {
            let want = want.trim_end_matches('/');
            w.cgroup == want || w.cgroup.starts_with(&format!("{want}/")) || want.is_empty()
        });
        let unit = self.unit.as_deref().is_none_or(|want| {
            w.unit.as_deref().is_some_and(|u| {
                glob(want, u) || (!want.contains('.') && u == format!("{want}.service"))
            })
        });
        field(&self.program, Some(&w.program))
            && unit
            && container
            && field(&self.k8s_namespace, w.k8s_namespace.as_deref())
            && field(&self.k8s_pod, w.k8s_pod.as_deref())
            && field(&self.k8s_container, w.k8s_container.as_deref())
            && cgroup
    }
}

/// What a canary shares out: workloads, or connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanaryBy {
    /// A share of the selected workloads, all of each one's connections.
    Workload,
    /// A share of every selected workload's connections.
    Connection,
}

/// A rule of the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its name, unique in the file.
    pub name: String,
    /// The line its `[[rule]]` table begins on.
    pub line: usize,
    /// What it selects.
    pub select: Select,
    /// The ports it keeps to (none: every port).
    pub ports: Ports,
    /// The peer ranges it keeps to (none: every peer).
    pub peers: Vec<Range>,
    /// What it sets.
    pub action: Action,
    /// The share it applies to first, percent (100: all), and of what.
    pub canary: f64,
    /// What the canary shares out.
    pub canary_by: CanaryBy,
    /// Taken back unless the stall rate it selects fell within this long.
    pub revert_after: Option<Duration>,
}

impl Rule {
    /// Whether a connection between `local` and `remote` is this rule's, by port and peer.
    pub fn selects_connection(&self, local: (IpAddr, u16), remote: (IpAddr, u16)) -> bool {
        self.ports.selects(local.1, remote.1)
            && (self.peers.is_empty() || self.peers.iter().any(|r| r.contains(remote.0)))
    }

    /// Whether the canary takes `key` (a workload's identity, or a connection's): a stable
    /// hash of the rule's name and the key, so every node chooses alike.
    fn in_canary(&self, key: &str) -> bool {
        if self.canary >= 100.0 {
            return true;
        }
        let h = fnv1a(format!("{}\0{key}", self.name).as_bytes());
        // The top 53 bits as a fraction in [0, 1): below the share, in the canary.
        ((h >> 11) as f64 / (1u64 << 53) as f64) * 100.0 < self.canary
    }

    /// Whether the canary takes a connection of this rule (a canary by connection; a canary
    /// by workload takes all of a chosen workload's).
    pub fn canary_takes_connection(&self, local: (IpAddr, u16), remote: (IpAddr, u16)) -> bool {
        self.canary_by == CanaryBy::Workload
            || self.in_canary(&format!(
                "{}:{} {}:{}",
                local.0, local.1, remote.0, remote.1
            ))
    }
}

/// FNV-1a, 64 bits, its bits then mixed (MurmurHash3's finalizer: FNV alone leaves its top
/// bits alike for keys that differ at the end): stable across builds and machines, which
/// std's hasher is not promised to be.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// What the policy does with a workload: the rules that select it, in the file's order,
/// and whether each one's canary takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<'a> {
    /// The rules that select it, with whether each applies to it now: 100 %, or a canary by
    /// connection (decided per connection), or a canary by workload that took it.
    pub rules: Vec<(&'a Rule, bool)>,
}

impl Decision<'_> {
    /// The rule that takes a connection between `local` and `remote`: the first of
    /// [`rules`](Self::rules) that selects it by port and peer (`None`: none does), and
    /// whether it applies to it (its canary took the workload, or the connection).
    pub fn rule_for(&self, local: (IpAddr, u16), remote: (IpAddr, u16)) -> Option<(&Rule, bool)> {
        let &(rule, applies) = self
            .rules
            .iter()
            .find(|(r, _)| r.selects_connection(local, remote))?;
        Some((rule, applies && rule.canary_takes_connection(local, remote)))
    }
}

/// A checked policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Policy {
    /// Its rules, in the file's order (the first that selects a workload applies).
    pub rules: Vec<Rule>,
}

/// A policy file that cannot be used: the line, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct PolicyError {
    /// The line (from 1).
    pub line: usize,
    /// Why.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    program: Option<String>,
    unit: Option<String>,
    container: Option<Spanned<String>>,
    k8s_namespace: Option<String>,
    k8s_pod: Option<String>,
    k8s_container: Option<String>,
    cgroup: Option<String>,
    ports: Option<Spanned<Vec<u16>>>,
    #[serde(default)]
    peers: Vec<Spanned<String>>,
    #[serde(default)]
    nodelay: bool,
    ack_delay_max: Option<Spanned<String>>,
    canary: Option<Spanned<f64>>,
    canary_by: Option<Spanned<String>>,
    revert_after: Option<Spanned<String>>,
}

/// The line of byte `offset` in `text` (from 1).
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl Policy {
    /// Reads and checks a policy file's text; `tick` is the kernel's timer tick (a
    /// delayed-ACK bound must be at least two).
    pub fn parse(text: &str, tick: Duration) -> Result<Policy, PolicyError> {
        let raw: RawPolicy = toml::from_str(text).map_err(|e| PolicyError {
            line: e.span().map_or(1, |s| line_of(text, s.start)),
            message: e.message().trim().to_string(),
        })?;
        let mut rules: Vec<Rule> = Vec::new();
        for spanned in raw.rule {
            let line = line_of(text, spanned.span().start);
            let err = |at: usize, message: String| PolicyError { line: at, message };
            let r = spanned.into_inner();
            let name = r
                .name
                .filter(|n| !n.trim().is_empty())
                .ok_or_else(|| err(line, "a rule needs a `name`".into()))?;
            // It names the rule in log lines, metrics and the agent's journal: one line each.
            if name.chars().any(char::is_control) {
                return Err(err(
                    line,
                    format!("the rule name {name:?} holds a control character"),
                ));
            }
            if let Some(first) = rules.iter().find(|o| o.name == name) {
                return Err(err(
                    line,
                    format!(
                        "a second rule named {name:?} (the first is on line {})",
                        first.line
                    ),
                ));
            }
            let container_line = r.container.as_ref().map(|c| line_of(text, c.span().start));
            let select = Select {
                program: r.program,
                unit: r.unit,
                container: r.container.map(Spanned::into_inner),
                k8s_namespace: r.k8s_namespace,
                k8s_pod: r.k8s_pod,
                k8s_container: r.k8s_container,
                cgroup: r.cgroup,
            };
            if select.is_empty() {
                return Err(err(line, format!("rule {name:?} selects nothing: give at least one of program, unit, container, k8s_namespace, k8s_pod, k8s_container, cgroup")));
            }
            if let Some(c) = &select.container {
                if c.len() < 12 || !c.chars().all(|ch| ch.is_ascii_hexdigit()) {
                    return Err(err(container_line.unwrap_or(line), format!("rule {name:?}: container {c:?} is not a container id (12 or more hex digits)")));
                }
            }
            let ports = match &r.ports {
                Some(p) => Ports::new(p.get_ref()).map_err(|e| {
                    err(
                        line_of(text, p.span().start),
                        format!(
                            "rule {name:?}: ports: {}",
                            e.to_string().replace("--port", "ports")
                        ),
                    )
                })?,
                None => Ports::new(&[]).map_err(|e| err(line, e.to_string()))?,
            };
            let mut peers = Vec::new();
            for p in r.peers {
                let at = line_of(text, p.span().start);
                peers.push(Range::parse(p.get_ref()).map_err(|e| err(at, e))?);
            }
            let delay_line = r
                .ack_delay_max
                .as_ref()
                .map(|d| line_of(text, d.span().start));
            let ack_delay_max = match r.ack_delay_max {
                Some(d) => Some(
                    parse_duration(d.get_ref())
                        .map_err(|e| err(line_of(text, d.span().start), e))?,
                ),
                None => None,
            };
            let action = Action {
                nodelay: r.nodelay,
                ack_delay_max,
            };
            action.check(tick).map_err(|e| {
                err(
                    // (A bound out of range names its key's line; nothing to do, the rule's.)
                    if ack_delay_max.is_some() {
                        delay_line.unwrap_or(line)
                    } else {
                        line
                    },
                    format!(
                        "rule {name:?}: {}",
                        e.to_string()
                            .replace("--ack-delay-max DUR", "ack_delay_max")
                            .replace("--nodelay", "nodelay = true")
                            .replace("--ack-delay-max", "ack_delay_max")
                    ),
                )
            })?;
            let canary = match r.canary {
                Some(c) => {
                    let v = *c.get_ref();
                    if !(v > 0.0 && v <= 100.0) {
                        return Err(err(
                            line_of(text, c.span().start),
                            format!("rule {name:?}: canary {v} is not a share in percent above 0 and at most 100"),
                        ));
                    }
                    v
                }
                None => 100.0,
            };
            let canary_by = match r.canary_by {
                None => CanaryBy::Workload,
                Some(b) => match b.get_ref().as_str() {
                    "workload" => CanaryBy::Workload,
                    "connection" => CanaryBy::Connection,
                    other => {
                        return Err(err(
                            line_of(text, b.span().start),
                            format!("rule {name:?}: canary_by {other:?} is neither \"workload\" nor \"connection\""),
                        ))
                    }
                },
            };
            let revert_after = match r.revert_after {
                Some(d) => {
                    let at = line_of(text, d.span().start);
                    let v = parse_duration(d.get_ref()).map_err(|e| err(at, e))?;
                    if v < Duration::from_secs(10) {
                        return Err(err(at, format!("rule {name:?}: revert_after {:?} is too short to judge a stall rate by (10s at least)", d.get_ref())));
                    }
                    Some(v)
                }
                None => None,
            };
            rules.push(Rule {
                name,
                line,
                select,
                ports,
                peers,
                action,
                canary,
                canary_by,
                revert_after,
            });
        }
        Ok(Policy { rules })
    }

    /// The rules that select `w` (`None`: none does).
    pub fn decide(&self, w: &Workload) -> Option<Decision<'_>> {
        let rules: Vec<(&Rule, bool)> = self
            .rules
            .iter()
            .filter(|r| r.select.matches(w))
            .map(|r| {
                let applies = r.canary_by == CanaryBy::Connection || r.in_canary(&w.identity());
                (r, applies)
            })
            .collect();
        (!rules.is_empty()).then_some(Decision { rules })
    }
}

#[cfg(test)]
mod tests;

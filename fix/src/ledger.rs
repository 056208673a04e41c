//! What a policy's node agent has changed, by rule (pure): the sockets each rule's action
//! was set on, with what they had before, so that a rule removed or changed, the agent's
//! stop, or the next agent after a killed one puts them back; and its journal, the text kept
//! on disk for that next agent.
//!
//! Invariant: a socket (by inode) is in the ledger at most once, under the one rule that
//! changed it (the first rule that selects a connection takes it, alone).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::existing::Changed;

/// The sockets a policy's agent changed, by inode, each with the rule that changed it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ledger {
    entries: BTreeMap<u64, (String, Changed)>,
}

/// The first line of a journal: what wrote it.
const HEADER: &str = "nagless fix --policy journal v1";

impl Ledger {
    /// Notes that `rule` changed `c` (a socket already noted keeps its first entry: the
    /// agent never changes a socket twice).
    pub fn record(&mut self, rule: &str, c: Changed) {
        self.entries
            .entry(c.inode)
            .or_insert_with(|| (rule.to_owned(), c));
    }

    /// The sockets noted, by inode.
    pub fn inodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.keys().copied()
    }

    /// Whether the socket with this inode is noted.
    pub fn has(&self, inode: u64) -> bool {
        self.entries.contains_key(&inode)
    }

    /// Takes out the entries of every rule `keep` does not keep: the sockets to put back.
    pub fn retire(&mut self, keep: impl Fn(&str) -> bool) -> Vec<Changed> {
        let gone: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, (rule, _))| !keep(rule))
            .map(|(&inode, _)| inode)
            .collect();
        gone.into_iter()
            .filter_map(|i| self.entries.remove(&i))
            .map(|(_, c)| c)
            .collect()
    }

    /// Takes out the sockets whose descriptor `open` says is closed: nothing to put back
    /// through it (another process may still hold the socket: a forked child, a descriptor
    /// passed on).
    pub fn forget_closed(&mut self, open: impl Fn(u32, i32, u64) -> bool) -> Vec<Changed> {
        let gone: Vec<u64> = self
            .entries
            .values()
            .filter(|(_, c)| !open(c.pid, c.fd, c.inode))
            .map(|(_, c)| c.inode)
            .collect();
        gone.into_iter()
            .filter_map(|i| self.entries.remove(&i))
            .map(|(_, c)| c)
            .collect()
    }

    /// Sockets changed now, per rule.
    pub fn per_rule(&self) -> BTreeMap<&str, usize> {
        let mut n = BTreeMap::new();
        for (rule, _) in self.entries.values() {
            *n.entry(rule.as_str()).or_default() += 1;
        }
        n
    }

    /// The processes whose sockets `rule` changed.
    pub fn pids_of(&self, rule: &str) -> std::collections::BTreeSet<u32> {
        self.entries
            .values()
            .filter(|(r, _)| r == rule)
            .map(|(_, c)| c.pid)
            .collect()
    }

    /// The processes whose sockets are noted.
    pub fn pids(&self) -> std::collections::BTreeSet<u32> {
        self.entries.values().map(|(_, c)| c.pid).collect()
    }

    /// How many sockets are noted.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The journal's text, written by agent `agent` (its pid): a header line, the agent's
    /// pid, then one line per socket.
    pub fn to_journal(&self, agent: u32) -> String {
        let opt = |v: Option<i32>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        let mut t = format!("{HEADER}\nagent {agent}\n");
        for (rule, c) in self.entries.values() {
            t += &format!(
                "{} {} {} {} {} {} {} {} {}\n",
                c.pid,
                c.fd,
                c.inode,
                c.addresses.0,
                c.addresses.1,
                opt(c.nodelay_was),
                opt(c.delack_was),
                opt(c.delack_set),
                rule
            );
        }
        t
    }

    /// Reads a journal: the pid of the agent that wrote it, and its ledger. An error names
    /// the line.
    pub fn from_journal(text: &str) -> Result<(u32, Ledger), String> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, HEADER)) => {}
            _ => return Err(format!("line 1: not a journal ({HEADER:?} expected)")),
        }
        let agent = lines
            .next()
            .and_then(|(_, l)| l.strip_prefix("agent "))
            .and_then(|p| p.parse().ok())
            .ok_or("line 2: `agent PID` expected")?;
        let mut ledger = Ledger::default();
        for (i, line) in lines {
            let bad = || format!("line {}: a socket's entry expected, found {line:?}", i + 1);
            let f: Vec<&str> = line.splitn(9, ' ').collect();
            if f.len() != 9 {
                return Err(bad());
            }
            let opt = |s: &str| -> Result<Option<i32>, String> {
                if s == "-" {
                    Ok(None)
                } else {
                    s.parse().map(Some).map_err(|_| bad())
                }
            };
            let addr = |s: &str| s.parse::<SocketAddr>().map_err(|_| bad());
            let c = Changed {
                pid: f[0].parse().map_err(|_| bad())?,
                fd: f[1].parse().map_err(|_| bad())?,
                inode: f[2].parse().map_err(|_| bad())?,
                addresses: (addr(f[3])?, addr(f[4])?),
                nodelay_was: opt(f[5])?,
                delack_was: opt(f[6])?,
                delack_set: opt(f[7])?,
            };
            ledger.record(f[8], c);
        }
        Ok((agent, ledger))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(inode: u64, pid: u32) -> Changed {
        Changed {
            pid,
            fd: 5,
            inode,
            addresses: (
                "127.0.0.1:4000".parse().unwrap(),
                "[::1]:5432".parse().unwrap(),
            ),
            nodelay_was: Some(0),
            delack_was: None,
            delack_set: None,
        }
    }

    #[test]
    fn a_socket_is_noted_once_under_the_rule_that_changed_it_first() {
        let mut l = Ledger::default();
        l.record("db", sock(1, 10));
        l.record("other", sock(1, 10));
        l.record("db", sock(2, 11));
        assert_eq!(l.per_rule(), BTreeMap::from([("db", 2)]));
        assert!(l.has(1) && !l.has(3));
    }

    #[test]
    fn retiring_a_rule_gives_back_its_sockets_alone() {
        let mut l = Ledger::default();
        l.record("db", sock(1, 10));
        l.record("cache", sock(2, 11));
        l.record("db", sock(3, 12));
        let back = l.retire(|r| r != "db");
        let mut inodes: Vec<u64> = back.iter().map(|c| c.inode).collect();
        inodes.sort();
        assert_eq!(inodes, [1, 3]);
        assert_eq!(l.per_rule(), BTreeMap::from([("cache", 1)]));
        assert_eq!(l.retire(|_| false).len(), 1);
        assert!(l.is_empty());
    }

    #[test]
    fn closed_sockets_are_forgotten() {
        let mut l = Ledger::default();
        l.record("db", sock(1, 10));
        l.record("db", sock(2, 11));
        let gone = l.forget_closed(|pid, _, _| pid == 11);
        assert_eq!(gone.iter().map(|c| c.inode).collect::<Vec<_>>(), [1]);
        assert_eq!(l.pids().into_iter().collect::<Vec<_>>(), [11]);
    }

    #[test]
    fn a_journal_reads_back_as_it_was_written() {
        let mut l = Ledger::default();
        l.record("db clients", sock(1, 10));
        let mut c = sock(2, 11);
        c.nodelay_was = None;
        c.delack_was = Some(40_000);
        c.delack_set = Some(8_000);
        l.record("acks", c);
        let text = l.to_journal(77);
        assert_eq!(Ledger::from_journal(&text), Ok((77, l)));
    }

    #[test]
    fn a_damaged_journal_is_refused_with_its_line() {
        assert!(Ledger::from_journal("").unwrap_err().contains("line 1"));
        let t = format!("{HEADER}\nagent x\n");
        assert!(Ledger::from_journal(&t).unwrap_err().contains("line 2"));
        let t = format!("{HEADER}\nagent 7\n1 2 3 nonsense\n");
        assert!(Ledger::from_journal(&t).unwrap_err().contains("line 3"));
    }
}

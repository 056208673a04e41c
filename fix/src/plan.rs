//! What to change on each selected connection ([`Action`]), on which ports ([`Ports`]), and
//! the configuration the kernel program reads ([`Config`]): pure, checked before anything is
//! attached.

use std::time::Duration;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `TCP_DELACK_MAX_US` (Linux 6.15): the most a socket's delayed ACK waits (also
/// fix.bpf.c's, which notes the program's own choice of it: a test holds the two alike).
pub(crate) const TCP_DELACK_MAX_US: i32 = 46;

/// An option a fix sets (what [`undo`](crate::existing::undo) asks the program's choices about).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption {
    /// `TCP_NODELAY`.
    Nodelay,
    /// `TCP_DELACK_MAX_US`.
    DelackMax,
}

/// Ports a fix may be narrowed to: `MAX_PORTS` of fix.bpf.c (a test holds the two alike).
pub(crate) const MAX_PORTS: usize = 16;

/// What to set on each selected connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    /// TCP_NODELAY: the sender's stall (its small writes no longer wait for an ACK).
    pub nodelay: bool,
    /// The most its delayed ACKs may wait: the receiver's side, for peers that cannot change.
    pub ack_delay_max: Option<Duration>,
}

/// Why an [`Action`] or a port list cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Neither fix was asked for.
    #[error("nothing to do: give --nodelay, --ack-delay-max DUR, or both")]
    Nothing,
    /// The kernel refuses delayed-ACK bounds that round up to fewer than two timer ticks.
    #[error("--ack-delay-max {} is no more than one of this kernel's timer ticks ({}); the kernel takes only bounds that round up to two ticks or more", human(*.asked), human(*.tick))]
    AckDelayTooShort {
        /// What was asked.
        asked: Duration,
        /// One tick.
        tick: Duration,
    },
    /// More than 200 ms would lengthen the delayed ACK, not bound it.
    #[error("--ack-delay-max {} is more than the 200 ms delayed ACKs wait at most: it would bound nothing", human(*.0))]
    AckDelayTooLong(Duration),
    /// Too many ports.
    #[error("at most {MAX_PORTS} --port values")]
    TooManyPorts,
    /// Port 0 names no connection.
    #[error("--port 0 names no connection (ports are 1 to 65535)")]
    PortZero,
    /// The running kernel lacks something the fix needs.
    #[error("{what} needs Linux {}.{} or later; this kernel is {}.{}", .needs.0, .needs.1, .have.0, .have.1)]
    KernelTooOld {
        /// What needs it.
        what: &'static str,
        /// The first version that has it.
        needs: (u32, u32),
        /// The running one.
        have: (u32, u32),
    },
}

/// A duration for people: "0 ms", "4 ms", "500 µs", "1.5 s".
pub(crate) fn human(d: Duration) -> String {
    let us = d.as_micros();
    if us == 0 {
        "0 ms".into()
    } else if us < 1000 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        format!("{} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

/// Checks what attaching the kernel programs for `action` needs against kernel `have`: BPF
/// links to cgroups (5.7, which the program noting the program's own choices needs too),
/// and, for a fix of a whole cgroup (`whole`), `bpf_setsockopt` of TCP_NODELAY (6.1) and of
/// TCP_BPF_DELACK_MAX (5.10).
pub fn check_kernel(action: &Action, have: (u32, u32), whole: bool) -> Result<(), PlanError> {
    let mut needs = vec![("a BPF link to a cgroup", (5, 7))];
    if action.nodelay && whole {
        needs.push(("setting TCP_NODELAY from a BPF sock_ops program", (6, 1)));
    }
    if action.ack_delay_max.is_some() && whole {
        needs.push((
            "setting TCP_BPF_DELACK_MAX from a BPF sock_ops program",
            (5, 10),
        ));
    }
    match needs.into_iter().find(|(_, v)| have < *v) {
        Some((what, needs)) => Err(PlanError::KernelTooOld { what, needs, have }),
        None => Ok(()),
    }
}

impl Action {
    /// Checks the action against the kernel's timer tick.
    pub fn check(&self, tick: Duration) -> Result<(), PlanError> {
        if !self.nodelay && self.ack_delay_max.is_none() {
            return Err(PlanError::Nothing);
        }
        if let Some(d) = self.ack_delay_max {
            // usecs_to_jiffies rounds up: anything over one tick is two or more.
            if d <= tick {
                return Err(PlanError::AckDelayTooShort { asked: d, tick });
            }
            if d > Duration::from_millis(200) {
                return Err(PlanError::AckDelayTooLong(d));
            }
        }
        Ok(())
    }

    /// In words, for people: "TCP_NODELAY and delayed ACKs of at most 8 ms".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.nodelay {
            parts.push("TCP_NODELAY".to_string());
        }
        if let Some(d) = self.ack_delay_max {
            parts.push(format!("delayed ACKs of at most {} ms", d.as_millis()));
        }
        parts.join(" and ")
    }
}

/// The ports a fix is narrowed to: a connection is selected if its local or its remote port
/// is one of them; no ports select every connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ports(Vec<u16>);

impl Ports {
    /// At most `MAX_PORTS` ports.
    pub fn new(ports: &[u16]) -> Result<Ports, PlanError> {
        if ports.len() > MAX_PORTS {
            return Err(PlanError::TooManyPorts);
        }
        if ports.contains(&0) {
            return Err(PlanError::PortZero);
        }
        Ok(Ports(ports.to_vec()))
    }

    /// Whether a connection between `local` and `remote` ports is selected.
    pub fn selects(&self, local: u16, remote: u16) -> bool {
        self.0.is_empty() || self.0.iter().any(|&p| p == local || p == remote)
    }

    /// The ports, in the order given.
    pub fn as_slice(&self) -> &[u16] {
        &self.0
    }
}

/// The kernel program's configuration: `struct config` of fix/bpf/fix.bpf.c, field by field
/// (the asserts below hold it to the C layout, and a test to the C source), as the `config`
/// map holds it (native byte order).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Config {
    /// 1: set TCP_NODELAY.
    pub(crate) nodelay: u32,
    /// 0: leave delayed ACKs alone; else their bound, µs.
    pub(crate) delack_max_us: u32,
    /// How many of `ports` count (0: every connection).
    pub(crate) nports: u32,
    /// The ports, host order.
    pub(crate) ports: [u16; MAX_PORTS],
    /// The `nagless fix` process: the program's choices it notes are not its own.
    pub fixer_tgid: u32,
    /// The process (and its children) fixed; 0: the whole cgroup.
    pub target_pid: u32,
}

/// The size of `struct config`: the bytes of the `config` map's value.
pub(crate) const CONFIG_LEN: usize = size_of::<Config>();

// The C struct: three u32, sixteen u16, two u32, no padding; each field where C has it.
const _: () = {
    use std::mem::offset_of;
    assert!(CONFIG_LEN == 12 + 2 * MAX_PORTS + 8);
    assert!(offset_of!(Config, nodelay) == 0);
    assert!(offset_of!(Config, delack_max_us) == 4);
    assert!(offset_of!(Config, nports) == 8);
    assert!(offset_of!(Config, ports) == 12);
    assert!(offset_of!(Config, fixer_tgid) == 12 + 2 * MAX_PORTS);
    assert!(offset_of!(Config, target_pid) == 16 + 2 * MAX_PORTS);
};

impl Config {
    /// The configuration for `action` on `ports`.
    pub fn new(action: &Action, ports: &Ports) -> Config {
        let mut c = Config {
            nodelay: u32::from(action.nodelay),
            delack_max_us: action
                .ack_delay_max
                .map_or(0, |d| d.as_micros().min(u128::from(u32::MAX)) as u32),
            nports: ports.0.len() as u32,
            ports: [0; MAX_PORTS],
            fixer_tgid: 0,
            target_pid: 0,
        };
        c.ports[..ports.0.len()].copy_from_slice(&ports.0);
        c
    }

    /// The configuration back as an action and ports (for `--list`).
    pub fn action(&self) -> (Action, Ports) {
        let n = (self.nports as usize).min(MAX_PORTS);
        (
            Action {
                nodelay: self.nodelay != 0,
                ack_delay_max: (self.delack_max_us != 0)
                    .then(|| Duration::from_micros(u64::from(self.delack_max_us))),
            },
            Ports(self.ports[..n].to_vec()),
        )
    }

    /// The bytes the kernel map holds.
    pub(crate) fn to_bytes(self) -> [u8; CONFIG_LEN] {
        zerocopy::transmute!(self)
    }

    /// A configuration from the kernel map's bytes.
    pub(crate) fn from_bytes(b: &[u8; CONFIG_LEN]) -> Config {
        zerocopy::transmute!(*b)
    }
}

/// A duration as people write one: a number and a unit (`h`, `m`, `s`, `ms`, `us`), e.g.
/// `20ms`, `1.5s`; `0` alone. For the command line and the policy file alike.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_alphabetic()).unwrap_or(s.len()));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 20ms"))?;
    let secs = match unit {
        "h" => v * 3600.0,
        "m" => v * 60.0,
        "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "" if v == 0.0 => 0.0,
        _ => return Err(format!("{s:?}: the unit must be h, m, s, ms or us")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(4);

    #[test]
    fn actions_are_checked_against_the_kernel() {
        let none = Action {
            nodelay: false,
            ack_delay_max: None,
        };
        assert_eq!(none.check(TICK), Err(PlanError::Nothing));
        let short = Action {
            ack_delay_max: Some(Duration::from_millis(4)),
            ..none
        };
        let five = Action {
            ack_delay_max: Some(Duration::from_millis(5)),
            ..none
        };
        assert_eq!(five.check(TICK), Ok(()));
        assert!(matches!(
            short.check(TICK),
            Err(PlanError::AckDelayTooShort { .. })
        ));
        let long = Action {
            ack_delay_max: Some(Duration::from_millis(300)),
            ..none
        };
        assert!(matches!(
            long.check(TICK),
            Err(PlanError::AckDelayTooLong(_))
        ));
        let both = Action {
            nodelay: true,
            ack_delay_max: Some(Duration::from_millis(8)),
        };
        assert_eq!(both.check(TICK), Ok(()));
        assert_eq!(
            both.describe(),
            "TCP_NODELAY and delayed ACKs of at most 8 ms"
        );
    }

    #[test]
    fn the_kernel_is_checked_for_what_the_fix_needs() {
        let nodelay = Action {
            nodelay: true,
            ack_delay_max: None,
        };
        let bound = Action {
            nodelay: false,
            ack_delay_max: Some(Duration::from_millis(8)),
        };
        assert_eq!(check_kernel(&nodelay, (6, 18), true), Ok(()));
        assert!(matches!(
            check_kernel(&nodelay, (5, 15), true),
            Err(PlanError::KernelTooOld { needs: (6, 1), .. })
        ));
        // A process's own connections only: no option set from BPF.
        assert_eq!(check_kernel(&nodelay, (5, 15), false), Ok(()));
        assert_eq!(check_kernel(&bound, (5, 15), true), Ok(()));
        assert!(matches!(
            check_kernel(&bound, (5, 4), false),
            Err(PlanError::KernelTooOld { needs: (5, 7), .. })
        ));
    }

    #[test]
    fn ports_select_either_end_and_none_selects_all() {
        assert!(Ports::default().selects(1, 2));
        let p = Ports::new(&[8000]).unwrap();
        assert!(p.selects(8000, 40000) && p.selects(40000, 8000) && !p.selects(1, 2));
        assert_eq!(Ports::new(&[1; 17]), Err(PlanError::TooManyPorts));
    }

    #[test]
    fn the_config_round_trips_through_the_maps_bytes() {
        let a = Action {
            nodelay: true,
            ack_delay_max: Some(Duration::from_millis(8)),
        };
        let p = Ports::new(&[8000, 443]).unwrap();
        let c = Config::new(&a, &p);
        assert_eq!(c.delack_max_us, 8_000);
        let back = Config::from_bytes(&c.to_bytes());
        assert_eq!(back, c);
        assert_eq!(back.action(), (a, p));
        let b = c.to_bytes();
        assert_eq!(b[4..8], 8_000u32.to_ne_bytes());
        assert_eq!(
            b[12..16],
            [8000u16.to_ne_bytes(), 443u16.to_ne_bytes()].concat()[..]
        );
    }

    #[test]
    fn the_config_is_fix_bpf_cs_struct_config() {
        use nagless_test_support::bpf_object::{c_define, c_struct};
        let source = include_str!("../bpf/fix.bpf.c");
        assert_eq!(c_define(source, "MAX_PORTS"), Some(MAX_PORTS as i64));
        assert_eq!(
            c_struct(source, "config"),
            nagless_test_support::mirror_layout!(Config: nodelay, delack_max_us, nports, ports,
                fixer_tgid, target_pid)
        );
        assert_eq!(size_of::<Config>(), CONFIG_LEN);
    }
}

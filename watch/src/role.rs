//! Which side of a connection a socket is, and which port names its group: the rule both
//! backends use, and the metrics' labels.
//!
//! A socket on a port something listens on *serves* that port. One that does not, whose local
//! port is a fixed one while the remote port is in the host's ephemeral range, was accepted by
//! a listener that has closed since (a server restarting, or one that stopped accepting): it
//! still serves its local port. Any other *connects* to its remote port. So a client's
//! ephemeral port never names a group but between two ephemeral ports (an FTP data
//! connection, peer to peer). The metrics label every port the host may hand out to clients
//! `ephemeral` ([`label`]): a server bound to port 0 too.

/// The first port of IANA's dynamic range.
const DYNAMIC_PORTS: u16 = 49152;

/// The ports the host hands out to clients: `net.ipv4.ip_local_port_range` less
/// `net.ipv4.ip_local_reserved_ports` (a service in the range that the administrator reserved,
/// so that no client gets its port, is a fixed port like any other).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EphemeralPorts {
    range: (u16, u16),
    reserved: Vec<(u16, u16)>,
}

impl EphemeralPorts {
    /// `lo..=hi`, less the `reserved` ranges.
    #[cfg(test)]
    pub(crate) fn new(lo: u16, hi: u16, reserved: Vec<(u16, u16)>) -> EphemeralPorts {
        EphemeralPorts {
            range: (lo, hi),
            reserved,
        }
    }

    /// The host's (Linux's defaults, 32768-60999 and none reserved, where they cannot be read).
    pub(crate) fn of_host() -> EphemeralPorts {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| {
                let mut w = s.split_whitespace().map(|n| n.parse::<u16>());
                Some((w.next()?.ok()?, w.next()?.ok()?))
            })
            .filter(|(lo, hi)| lo <= hi)
            .unwrap_or((32768, 60999));
        let reserved = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_reserved_ports")
            .map(|s| parse_reserved(&s))
            .unwrap_or_default();
        EphemeralPorts { range, reserved }
    }

    /// Whether `port` may be a client's: in this host's range, or in IANA's dynamic range
    /// (49152-65535, which Windows and macOS clients take theirs from), and not reserved.
    pub(crate) fn contains(&self, port: u16) -> bool {
        ((self.range.0..=self.range.1).contains(&port) || port >= DYNAMIC_PORTS)
            && !self.reserved.iter().any(|&(a, b)| (a..=b).contains(&port))
    }
}

/// `ip_local_reserved_ports`'s text: `50051,60000-60010`.
fn parse_reserved(s: &str) -> Vec<(u16, u16)> {
    s.trim()
        .split(',')
        .filter_map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        })
        .collect()
}

/// (serves, the group's port) of a socket from `local` to `remote`; `listening`: something
/// listens on its local port in its namespace.
pub(crate) fn role(listening: bool, local: u16, remote: u16, eph: &EphemeralPorts) -> (bool, u16) {
    if listening || (!eph.contains(local) && eph.contains(remote)) {
        (true, local)
    } else {
        (false, remote)
    }
}

/// The `port` label of a group: its port, or `ephemeral` for one the host may hand out to
/// clients (a server bound to port 0, a client's port between two ephemeral ones): such a
/// port changes with every restart or connection, and would make new series each time. The
/// process label still names the service.
pub(crate) fn label(port: u16, eph: &EphemeralPorts) -> String {
    if eph.contains(port) {
        "ephemeral".to_owned()
    } else {
        port.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eph() -> EphemeralPorts {
        EphemeralPorts::new(32768, 60999, vec![(50051, 50051)])
    }

    #[test]
    fn a_listening_port_is_served_whatever_its_number() {
        assert_eq!(role(true, 41000, 1234, &eph()), (true, 41000));
        assert_eq!(role(true, 8080, 1234, &eph()), (true, 8080));
    }

    #[test]
    fn an_accepted_socket_whose_listener_closed_still_serves() {
        assert_eq!(role(false, 8000, 51234, &eph()), (true, 8000));
        // A reserved port in the range is a fixed one.
        assert_eq!(role(false, 50051, 51234, &eph()), (true, 50051));
    }

    #[test]
    fn a_client_connects_to_the_remote_port() {
        assert_eq!(role(false, 51234, 6379, &eph()), (false, 6379));
        assert_eq!(role(false, 40000, 45000, &eph()), (false, 45000));
        // Two fixed ports (a privileged client port): connects.
        assert_eq!(role(false, 1023, 514, &eph()), (false, 514));
    }

    #[test]
    fn only_ports_clients_may_get_are_labelled_ephemeral() {
        assert_eq!(label(8080, &eph()), "8080");
        assert_eq!(label(41000, &eph()), "ephemeral");
        assert_eq!(label(60999, &eph()), "ephemeral");
        // Above Linux's range, in the one other systems' clients use.
        assert_eq!(label(61000, &eph()), "ephemeral");
        assert_eq!(role(false, 8000, 63000, &eph()), (true, 8000));
        assert_eq!(label(50051, &eph()), "50051");
    }

    #[test]
    fn reserved_ports_parse_and_the_hosts_range_reads() {
        assert_eq!(
            parse_reserved("50051,60000-60010\n"),
            vec![(50051, 50051), (60000, 60010)]
        );
        assert!(parse_reserved("\n").is_empty());
        let host = EphemeralPorts::of_host();
        assert!(host.range.0 <= host.range.1 && host.range.0 > 0, "{host:?}");
    }
}

//! Which side of a connection a socket is, and which port names its group: the rule both
//! backends use, and the metrics' labels.
//!
//! A socket on a port something listens on *serves* that port. One that does not, whose local
//! port is a fixed one while the remote port is in the host's ephemeral range, was accepted by
//! a listener that has closed since (a server restarting, or one that stopped accepting): it
//! still serves its local port. Any other *connects* to its remote port. So a client's
//! ephemeral port never names a group; only a connection between two ephemeral ports (an FTP
//! data connection, peer to peer) leaves its group named by one, and the metrics label such a
//! port `ephemeral` ([`label`]).

/// The host's ephemeral port range (`net.ipv4.ip_local_port_range`; Linux's default when it
/// cannot be read).
pub fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut w = s.split_whitespace().map(|n| n.parse::<u16>());
            Some((w.next()?.ok()?, w.next()?.ok()?))
        })
        .filter(|(lo, hi)| lo <= hi)
        .unwrap_or((32768, 60999))
}

fn ephemeral(port: u16, range: (u16, u16)) -> bool {
    (range.0..=range.1).contains(&port)
}

/// (serves, the group's port) of a socket from `local` to `remote`; `listening`: something
/// listens on its local port in its namespace.
pub fn role(listening: bool, local: u16, remote: u16, range: (u16, u16)) -> (bool, u16) {
    if listening || (!ephemeral(local, range) && ephemeral(remote, range)) {
        (true, local)
    } else {
        (false, remote)
    }
}

/// The `port` label of a group: its port, or `ephemeral` for a port that connects in the
/// ephemeral range (which would make a series per connection).
pub fn label(serves: bool, port: u16, range: (u16, u16)) -> String {
    if !serves && ephemeral(port, range) {
        "ephemeral".to_owned()
    } else {
        port.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: (u16, u16) = (32768, 60999);

    #[test]
    fn a_listening_port_is_served_whatever_its_number() {
        // gRPC's 50051 is in the range; a server bound to port 0 too.
        assert_eq!(role(true, 50051, 41000, RANGE), (true, 50051));
        assert_eq!(role(true, 8080, 1234, RANGE), (true, 8080));
        assert_eq!(label(true, 50051, RANGE), "50051");
    }

    #[test]
    fn an_accepted_socket_whose_listener_closed_still_serves() {
        assert_eq!(role(false, 8000, 51234, RANGE), (true, 8000));
    }

    #[test]
    fn a_client_connects_to_the_remote_port() {
        assert_eq!(role(false, 51234, 6379, RANGE), (false, 6379));
        assert_eq!(label(false, 6379, RANGE), "6379");
        // To a server in the range: the port is known, but the label cannot tell it from a
        // connection between two ephemeral ports.
        assert_eq!(role(false, 40000, 50051, RANGE), (false, 50051));
        assert_eq!(label(false, 50051, RANGE), "ephemeral");
        // Two fixed ports (a privileged client port): connects.
        assert_eq!(role(false, 1023, 514, RANGE), (false, 514));
    }

    #[test]
    fn the_hosts_range_reads() {
        let (lo, hi) = ephemeral_ports();
        assert!(lo <= hi && lo > 0, "{lo}-{hi}");
    }
}

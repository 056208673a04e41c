//! Which flows to analyse and what to keep: [`Options`], and the host/port [`Filter`]s that
//! `--filter` parses.

use std::net::IpAddr;

use super::endpoint::Endpoint;

/// Which flows to analyse and what to keep.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Flows reported in full, most stalled first (0: all of them).
    pub top: usize,
    /// Only flows matching every filter.
    pub filters: Vec<Filter>,
    /// Only the flow with this index.
    pub flow: Option<usize>,
    /// Keep each reported flow's segments for a timeline.
    pub timeline: bool,
    /// Keep every stall of each flow, not only the worst 32.
    pub every_stall: bool,
    /// The order each flow's stalls are listed in.
    pub order: StallOrder,
}

/// The order a flow's stalls are listed in (which stalls are kept does not change: the worst
/// 32, or every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StallOrder {
    /// In capture order, by the held segment's frame, as Wireshark lists frames.
    #[default]
    Time,
    /// The longest first (then capture order).
    Delay,
}

impl std::str::FromStr for StallOrder {
    type Err = String;

    /// `time` or `delay`.
    fn from_str(s: &str) -> Result<StallOrder, String> {
        match s {
            "time" => Ok(StallOrder::Time),
            "delay" => Ok(StallOrder::Delay),
            _ => Err(format!("{s:?}: the order is `time` or `delay`")),
        }
    }
}

impl StallOrder {
    /// Sorts `stalls` into this order.
    pub(crate) fn sort(self, stalls: &mut [super::Stall]) {
        match self {
            StallOrder::Time => stalls.sort_by_key(|s| s.held.frame),
            StallOrder::Delay => stalls.sort_by(|a, b| {
                b.stalled_us
                    .cmp(&a.stalled_us)
                    .then(a.held.frame.cmp(&b.held.frame))
            }),
        }
    }
}

impl Options {
    /// Whether a flow between `client` and `server` passes every filter.
    pub(super) fn wants(&self, client: Endpoint, server: Endpoint) -> bool {
        self.filters
            .iter()
            .all(|f| f.matches(client) || f.matches(server))
    }
}

/// A host and/or port a flow must have on either side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Filter {
    /// Address.
    pub host: Option<IpAddr>,
    /// Port.
    pub port: Option<u16>,
}

impl std::str::FromStr for Filter {
    type Err = String;

    /// `10.0.0.1`, `:8000`, `8000`, `10.0.0.1:8000`, `::1`, `[::1]:8000`.
    fn from_str(s: &str) -> Result<Filter, String> {
        let bad = || format!("'{s}' is not a host, :port or host:port");
        if let Ok(a) = s.parse::<std::net::SocketAddr>() {
            return Ok(Filter {
                host: Some(a.ip()),
                port: Some(a.port()),
            });
        }
        if let Ok(h) = s.trim_matches(['[', ']']).parse::<IpAddr>() {
            return Ok(Filter {
                host: Some(h),
                port: None,
            });
        }
        let port = s.strip_prefix(':').unwrap_or(s);
        port.parse::<u16>()
            .map(|p| Filter {
                host: None,
                port: Some(p),
            })
            .map_err(|_| bad())
    }
}

impl std::fmt::Display for Filter {
    /// As it is written on the command line: `10.0.0.1:8000`, `[::1]:8000`, `:8000`, `::1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.host, self.port) {
            (Some(h), Some(p)) => write!(f, "{}", std::net::SocketAddr::new(h, p)),
            (Some(h), None) => write!(f, "{h}"),
            (None, Some(p)) => write!(f, ":{p}"),
            (None, None) => f.write_str("any"),
        }
    }
}

impl Filter {
    fn matches(&self, a: Endpoint) -> bool {
        self.host.is_none_or(|h| h == a.0) && self.port.is_none_or(|p| p == a.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_print_as_written() {
        for s in ["10.0.0.1:80", ":8000", "10.0.0.1", "[::1]:8000", "::1"] {
            assert_eq!(s.parse::<Filter>().unwrap().to_string(), s);
        }
        assert_eq!("8000".parse::<Filter>().unwrap().to_string(), ":8000");
    }

    #[test]
    fn filters_parse() {
        let f: Filter = "10.0.0.1:80".parse().unwrap();
        assert_eq!(f.port, Some(80));
        let f: Filter = ":8000".parse().unwrap();
        assert_eq!((f.host, f.port), (None, Some(8000)));
        let f: Filter = "::1".parse().unwrap();
        assert!(f.host.is_some() && f.port.is_none());
        let f: Filter = "[::1]:9".parse().unwrap();
        assert_eq!(f.port, Some(9));
        assert!("nonsense".parse::<Filter>().is_err());
    }
}

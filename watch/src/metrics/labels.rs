//! The labels of a group's series: its process, port, role and container.

use prometheus_client::encoding::EncodeLabelSet;

use crate::role::EphemeralPorts;

/// The labels of a group's series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Labels {
    /// Command name (`/proc/PID/comm`), empty if unknown.
    pub process: String,
    /// The served local port (`role="serves"`) or the remote port (`role="connects"`);
    /// `ephemeral` for a port the host may hand out to clients (see [`crate::role`]).
    pub port: String,
    /// `serves`, `connects`, or `overflow` (the series that gathers the groups beyond
    /// [`Limits::max_series`](super::Limits::max_series)).
    pub role: &'static str,
    /// Container id (its first 12 hex digits), empty on the host.
    pub container: String,
}

impl Labels {
    pub(super) fn new(
        port: u16,
        serves: bool,
        comm: Option<&str>,
        container: Option<&str>,
        ephemeral: &EphemeralPorts,
    ) -> Labels {
        Labels {
            process: comm.unwrap_or_default().to_owned(),
            port: crate::role::label(port, ephemeral),
            role: if serves { "serves" } else { "connects" },
            // The short id, as `docker ps` and `crictl ps` show it.
            container: container
                .map(|c| c.chars().take(12).collect())
                .unwrap_or_default(),
        }
    }

    /// The series that gathers every group beyond the cap.
    pub(super) fn overflow() -> Labels {
        Labels {
            process: String::new(),
            port: String::new(),
            role: "overflow",
            container: String::new(),
        }
    }
}

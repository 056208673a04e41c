//! The labels of a group's series: its program, unit, port, role, container and pod.

use prometheus_client::encoding::EncodeLabelSet;

use crate::kube::Pod;
use crate::role::EphemeralPorts;

/// The labels of a group's series. Each is a function of the group's process (its command
/// line without arguments, its cgroup) and port, so none adds series beyond the group's own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct Labels {
    /// The program without its arguments, as the table names it (`python3 app.py`, `java
    /// -jar app.jar`, `redis-server`: [`procs::service_name`](crate::procs::service_name));
    /// the command name (`/proc/PID/comm`) when the command line could not be read; empty
    /// when the owner is not known.
    pub(crate) process: String,
    /// The systemd unit the process's cgroup names (`nginx.service`), empty in a container or
    /// when none does.
    pub(crate) unit: String,
    /// The served local port (`role="serves"`) or the remote port (`role="connects"`);
    /// `ephemeral` for a port the host may hand out to clients (see [`crate::role`]).
    pub(crate) port: String,
    /// `serves`, `connects`, or `overflow` (the series that gathers the groups beyond
    /// [`Limits::max_series`](super::Limits::max_series)).
    pub(crate) role: &'static str,
    /// Container id (its first 12 hex digits), empty on the host.
    pub(crate) container: String,
    /// The pod's namespace, on a Kubernetes node ([`crate::kube`]); `k8s_` because a scrape
    /// of the watcher's own pod already carries `namespace` and `pod` labels of its own.
    pub(crate) k8s_namespace: String,
    /// The pod's name.
    pub(crate) k8s_pod: String,
    /// The container's name in its pod.
    pub(crate) k8s_container: String,
}

/// What a group's labels are made of.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Owner<'a> {
    /// [`Labels::process`]'s program name.
    pub(crate) service: Option<&'a str>,
    /// The command name, for when `service` is not known.
    pub(crate) comm: Option<&'a str>,
    /// The systemd unit.
    pub(crate) unit: Option<&'a str>,
    /// The full container id.
    pub(crate) container: Option<&'a str>,
    /// The pod.
    pub(crate) pod: Option<&'a Pod>,
}

impl Labels {
    pub(super) fn new(
        port: u16,
        serves: bool,
        owner: &Owner<'_>,
        ephemeral: &EphemeralPorts,
    ) -> Labels {
        let pod = owner.pod.cloned().unwrap_or_default();
        Labels {
            process: owner
                .service
                .filter(|s| !s.is_empty())
                .or(owner.comm)
                .unwrap_or_default()
                .to_owned(),
            unit: owner.unit.unwrap_or_default().to_owned(),
            port: crate::role::label(port, ephemeral),
            role: if serves { "serves" } else { "connects" },
            // The short id, as `docker ps` and `crictl ps` show it.
            container: owner
                .container
                .map(|c| c.chars().take(12).collect())
                .unwrap_or_default(),
            k8s_namespace: pod.namespace,
            k8s_pod: pod.name,
            k8s_container: pod.container,
        }
    }

    /// The series that gathers every group beyond the cap.
    pub(super) fn overflow() -> Labels {
        Labels {
            process: String::new(),
            unit: String::new(),
            port: String::new(),
            role: "overflow",
            container: String::new(),
            k8s_namespace: String::new(),
            k8s_pod: String::new(),
            k8s_container: String::new(),
        }
    }
}

//! The Kubernetes names of a container (its pod, the pod's namespace, the container's name),
//! read from what the kubelet writes on every node: `/var/log/containers` holds a link per
//! container named `<pod>_<namespace>_<container>-<container id>.log`, and `/var/log/pods` a
//! directory per pod named `<namespace>_<pod>_<pod uid>`, whose subdirectories are its
//! containers. No API server and no CRI socket are asked. Each name is a function of the
//! container id (or of the pod uid its cgroup path carries), so labels made of them add no
//! series beyond the container's own.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A container's place in Kubernetes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Pod {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The container's name in the pod (empty when the pod has several and the kubelet's
    /// links do not say which).
    pub container: String,
}

/// The kubelet's files under a root (`/var/log` on a node), read again at most every 10 s
/// when a container is asked for that the last reading did not know.
#[derive(Debug)]
pub(crate) struct Kubelet {
    root: PathBuf,
    by_container: HashMap<String, Pod>,
    /// Pod uid: namespace, name and container names.
    by_uid: HashMap<String, (String, String, Vec<String>)>,
    read_at: Option<Instant>,
}

impl Kubelet {
    /// The kubelet's files under `root` (`/var/log` on a node).
    pub(crate) fn new(root: impl Into<PathBuf>) -> Kubelet {
        Kubelet {
            root: root.into(),
            by_container: HashMap::new(),
            by_uid: HashMap::new(),
            read_at: None,
        }
    }

    /// The pod of the container `id` (full or its first 12 digits) whose cgroup path is
    /// `cgroup`; `None` off Kubernetes.
    pub(crate) fn pod(&mut self, id: &str, cgroup: &str) -> Option<Pod> {
        let uid = pod_uid(cgroup);
        if uid.is_none() && !cgroup.contains("kubepods") {
            return None; // (a container, but not a pod's: Docker, Podman)
        }
        if self.find(id, uid.as_deref()).is_none()
            && self
                .read_at
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            self.read();
        }
        self.find(id, uid.as_deref())
    }

    fn find(&self, id: &str, uid: Option<&str>) -> Option<Pod> {
        if let Some(p) = self
            .by_container
            .iter()
            .find(|(c, _)| !id.is_empty() && (c.starts_with(id) || id.starts_with(c.as_str())))
        {
            return Some(p.1.clone());
        }
        let (namespace, name, containers) = self.by_uid.get(uid?)?;
        Some(Pod {
            namespace: namespace.clone(),
            name: name.clone(),
            container: match containers.as_slice() {
                [only] => only.clone(),
                _ => String::new(),
            },
        })
    }

    fn read(&mut self) {
        self.read_at = Some(Instant::now());
        self.by_container = names(&self.root.join("containers"))
            .filter_map(|f| container_log(&f))
            .collect();
        self.by_uid = names(&self.root.join("pods"))
            .filter_map(|d| {
                let (namespace, name, uid) = pod_dir(&d)?;
                let dir = self.root.join("pods").join(&d);
                let mut containers: Vec<String> = names(&dir).collect();
                containers.sort();
                Some((uid, (namespace, name, containers)))
            })
            .collect();
    }
}

/// The file names in `dir` (none if it cannot be read).
fn names(dir: &std::path::Path) -> impl Iterator<Item = String> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
}

/// The pod of the container `id` whose cgroup path is `cgroup`, from this node's kubelet files
/// (`/var/log`).
pub(crate) fn pod_of(id: &str, cgroup: &str) -> Option<Pod> {
    static NODE: OnceLock<Mutex<Kubelet>> = OnceLock::new();
    NODE.get_or_init(|| Mutex::new(Kubelet::new("/var/log")))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pod(id, cgroup)
}

/// A `/var/log/containers` link's name, `<pod>_<namespace>_<container>-<64 hex digits>.log`:
/// the container id and its pod. (None of the three names may hold `_`: they are DNS labels.)
fn container_log(file: &str) -> Option<(String, Pod)> {
    let stem = file.strip_suffix(".log")?;
    let (names, id) = stem.rsplit_once('-')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut parts = names.split('_');
    let (name, namespace, container) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || [name, namespace, container].contains(&"") {
        return None;
    }
    Some((
        id.to_owned(),
        Pod {
            namespace: printable(namespace),
            name: printable(name),
            container: printable(container),
        },
    ))
}

/// A `/var/log/pods` directory's name, `<namespace>_<pod>_<uid>`.
fn pod_dir(dir: &str) -> Option<(String, String, String)> {
    let mut parts = dir.split('_');
    let (namespace, name, uid) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || [namespace, name].contains(&"") || !is_uid(uid) {
        return None;
    }
    Some((printable(namespace), printable(name), uid.to_owned()))
}

fn printable(s: &str) -> String {
    crate::procs::printable(s)
}

/// Whether `s` is a pod uid (a UUID, `8-4-4-4-12` hex digits).
fn is_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The pod uid a cgroup path carries: `kubepods-burstable-pod<uid with _>.slice` (systemd's
/// cgroup driver) or `pod<uid>` (cgroupfs'), as the `/var/log/pods` directories write it.
pub(crate) fn pod_uid(cgroup: &str) -> Option<String> {
    cgroup.rsplit('/').find_map(|c| {
        let c = c.strip_suffix(".slice").unwrap_or(c);
        let at = c.rfind("pod")?;
        let uid = c[at + 3..].replace('_', "-");
        is_uid(&uid).then_some(uid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "1a2b3c4d-0000-1111-2222-333344445555";

    #[test]
    fn pod_uids_of_both_cgroup_drivers() {
        for path in [
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope", UID.replace('-', "_")),
            format!("/kubepods/besteffort/pod{UID}/{ID}"),
            format!("/kubepods.slice/kubepods-pod{}.slice/crio-{ID}.scope", UID.replace('-', "_")),
        ] {
            assert_eq!(pod_uid(&path).as_deref(), Some(UID), "{path}");
        }
        assert_eq!(pod_uid(&format!("/system.slice/docker-{ID}.scope")), None);
        assert_eq!(pod_uid("/kubepods.slice/kubepods-podnotauid.slice"), None);
    }

    #[test]
    fn the_kubelets_names() {
        let (id, pod) = container_log(&format!("web-7d4b9c-x2kqz_shop_nginx-{ID}.log")).unwrap();
        assert_eq!(id, ID);
        assert_eq!(
            pod,
            Pod {
                namespace: "shop".into(),
                name: "web-7d4b9c-x2kqz".into(),
                container: "nginx".into()
            }
        );
        for bad in [
            format!("web_shop_nginx-{}.log", &ID[..12]),
            format!("web_shop-{ID}.log"),
            format!("a_b_c_d-{ID}.log"),
            format!("web_shop_nginx-{ID}"),
        ] {
            assert_eq!(container_log(&bad), None, "{bad}");
        }
        assert_eq!(
            pod_dir(&format!("shop_web-7d4b9c-x2kqz_{UID}")),
            Some(("shop".into(), "web-7d4b9c-x2kqz".into(), UID.into()))
        );
        assert_eq!(pod_dir("shop_web_notauid"), None);
    }

    #[test]
    fn a_node_s_files_name_the_pod_by_container_id_or_by_pod_uid() {
        let root = std::env::temp_dir().join(format!("nagless-kube-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let pods = root.join("pods");
        fs::create_dir_all(root.join("containers")).unwrap();
        // One pod with a link for its container; one with two containers and no links.
        fs::create_dir_all(pods.join(format!("shop_web-1_{UID}")).join("nginx")).unwrap();
        fs::write(
            root.join("containers")
                .join(format!("web-1_shop_nginx-{ID}.log")),
            "",
        )
        .unwrap();
        let other = "99999999-0000-1111-2222-333344445555";
        for c in ["app", "sidecar"] {
            fs::create_dir_all(pods.join(format!("ops_batch-2_{other}")).join(c)).unwrap();
        }
        let mut k = Kubelet::new(&root);
        let cgroup = format!("/kubepods/besteffort/pod{UID}/{ID}");
        let want = Pod {
            namespace: "shop".into(),
            name: "web-1".into(),
            container: "nginx".into(),
        };
        assert_eq!(k.pod(ID, &cgroup), Some(want.clone()));
        assert_eq!(k.pod(&ID[..12], &cgroup), Some(want));
        let unlinked = "f".repeat(64);
        let cgroup = format!(
            "/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{unlinked}.scope",
            other.replace('-', "_")
        );
        assert_eq!(
            k.pod(&unlinked, &cgroup),
            Some(Pod {
                namespace: "ops".into(),
                name: "batch-2".into(),
                container: String::new(),
            })
        );
        // Not a pod's container: nothing read, nothing named.
        assert_eq!(k.pod(ID, &format!("/system.slice/docker-{ID}.scope")), None);
        fs::remove_dir_all(&root).unwrap();
    }
}

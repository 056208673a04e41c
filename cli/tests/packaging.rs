//! The shipped Kubernetes files agree with each other and with the image the repository
//! builds: the DaemonSet runs `nagless:VERSION` (what `scripts/package-image` tags), and the
//! PodMonitor scrapes exactly its pods, port, path and scheme.

use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

fn load(name: &str) -> Vec<Yaml> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kubernetes")
        .join(name);
    YamlLoader::load_from_str(&std::fs::read_to_string(&path).unwrap()).expect("valid YAML")
}

fn daemonset() -> Yaml {
    load("nagless-watch.yaml")
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .expect("a DaemonSet")
}

#[test]
fn the_daemonset_runs_the_image_package_image_builds() {
    let ds = daemonset();
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    let version = env!("CARGO_PKG_VERSION");
    // podman names a local image localhost/NAME, and so does an archive of it imported into
    // a node's containerd: the DaemonSet names it so, or the node would try to pull it.
    assert_eq!(
        c["image"].as_str(),
        Some(format!("localhost/nagless:{version}").as_str())
    );
    // Built locally, not pulled: IfNotPresent (a `:latest` tag would mean Always).
    assert_eq!(c["imagePullPolicy"].as_str(), Some("IfNotPresent"));
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/package-image"),
    )
    .unwrap();
    assert!(
        script.contains(r#"tag="localhost/nagless:$version""#),
        "package-image's default tag"
    );
    // The Containerfile puts the binary where the DaemonSet's image is expected to have it.
    let recipe = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/container/Containerfile"),
    )
    .unwrap();
    assert!(
        recipe.lines().any(|l| l == "FROM scratch"),
        "nothing pulled"
    );
    assert!(recipe.contains("COPY nagless /usr/local/bin/nagless"));
    assert!(recipe.contains(r#"ENTRYPOINT ["/usr/local/bin/nagless"]"#));
}

#[test]
fn the_podmonitor_scrapes_the_daemonsets_pods_as_the_annotations_do() {
    let ds = daemonset();
    let pm = load("nagless-podmonitor.yaml")
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("PodMonitor"))
        .expect("a PodMonitor");
    assert_eq!(pm["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    let ns = ds["metadata"]["namespace"].as_str().unwrap();
    assert_eq!(pm["metadata"]["namespace"].as_str(), Some(ns));
    assert_eq!(
        pm["spec"]["namespaceSelector"]["matchNames"][0].as_str(),
        Some(ns)
    );
    // Its selector matches the pod template's labels.
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    let wanted = pm["spec"]["selector"]["matchLabels"].as_hash().unwrap();
    assert!(!wanted.is_empty());
    for (k, v) in wanted {
        assert_eq!(&labels[k.as_str().unwrap()], v, "label {k:?}");
    }
    // The endpoint: the container's named port, and the annotations' path and scheme.
    let ep = &pm["spec"]["podMetricsEndpoints"][0];
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    let port = ep["port"].as_str().unwrap();
    assert!(
        c["ports"]
            .as_vec()
            .unwrap()
            .iter()
            .any(|p| p["name"].as_str() == Some(port)),
        "no container port named {port}"
    );
    let ann = &ds["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(ep["path"].as_str(), ann["prometheus.io/path"].as_str());
    assert_eq!(ep["scheme"].as_str(), ann["prometheus.io/scheme"].as_str());
    // TLS trusted through the Secret the pod serves its certificate from, and a password.
    let web_secret = ds["spec"]["template"]["spec"]["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .find_map(|v| v["secret"]["secretName"].as_str())
        .expect("a Secret volume");
    assert_eq!(
        ep["tlsConfig"]["ca"]["secret"]["name"].as_str(),
        Some(web_secret)
    );
    assert!(ep["basicAuth"]["password"]["name"].as_str().is_some());
}

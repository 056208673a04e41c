//! The shipped deploy/ files: the alerting rules pass `promtool check rules` and their unit
//! tests, and the DaemonSet manifest (a YAML parse) asks for exactly the privileges the
//! watcher needs.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_fleet_support;

use std::process::Command;

use nagless_test_support::{have_tool, tool_path};
use watch_fleet_support::deploy;

#[test]
fn the_alerting_rules_pass_promtool_check_and_its_unit_tests() {
    if !have_tool("promtool") {
        return;
    }
    // Valid rules, and alerts that fire on a stalling service and a silent watcher only.
    for (cmd, file) in [
        ("check", "nagless-alerts.yml"),
        ("test", "nagless-alerts.test.yml"),
    ] {
        let o = Command::new(tool_path("promtool").unwrap())
            .args([cmd, "rules"])
            .arg(deploy().join("prometheus").join(file))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "promtool {cmd} rules {file}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn the_daemonset_asks_for_exactly_the_privileges_it_needs() {
    use yaml_rust2::YamlLoader;
    let text = std::fs::read_to_string(deploy().join("kubernetes/nagless-watch.yaml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    let ds = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .expect("a DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["hostPID"].as_bool(), Some(true), "sees every process");
    assert!(
        spec["hostNetwork"].as_bool() != Some(true),
        "enters each pod's namespace itself: no hostNetwork"
    );
    let c = &spec["containers"][0];
    let sc = &c["securityContext"];
    assert_ne!(sc["privileged"].as_bool(), Some(true), "never privileged");
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    let drop: Vec<_> = sc["capabilities"]["drop"].as_vec().unwrap().to_vec();
    assert_eq!(drop.len(), 1);
    assert_eq!(drop[0].as_str(), Some("ALL"));
    let mut add: Vec<&str> = sc["capabilities"]["add"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    add.sort();
    assert_eq!(
        add,
        [
            "BPF",
            "DAC_READ_SEARCH",
            "PERFMON",
            "SYS_ADMIN",
            "SYS_PTRACE"
        ]
    );
    let args: Vec<&str> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--serve"), "{args:?}");
    // Safe by default: the pod network reaches it, so TLS and a password, from a Secret.
    let web = args
        .iter()
        .position(|a| *a == "--web-config")
        .map(|i| args[i + 1]);
    assert_eq!(web, Some("/etc/nagless/web.yml"), "{args:?}");
    assert_eq!(
        c["volumeMounts"][0]["mountPath"].as_str(),
        Some("/etc/nagless")
    );
    assert_eq!(
        spec["volumes"][0]["secret"]["secretName"].as_str(),
        Some("nagless-watch-web")
    );
    // The systemd unit runs the same command, on loopback only.
    let unit = std::fs::read_to_string(deploy().join("systemd/nagless-watch.service")).unwrap();
    assert!(
        unit.lines()
            .any(|l| l.starts_with("ExecStart=") && l.contains("watch --serve 127.0.0.1:")),
        "{unit}"
    );
}

//! The shipped deploy/ files: the alerting rules pass `promtool check rules` and their unit
//! tests, and the DaemonSet manifest (a YAML parse) asks for exactly the privileges the
//! watcher needs, and the policy agent beside it its policy (from a ConfigMap) and its own.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_fleet_support;

use std::process::Command;

use nagless_test_support::{have_tool, tool_path};
use watch_fleet_support::{deploy, NAGLESS};

/// The manifest's documents.
fn manifest() -> Vec<yaml_rust2::Yaml> {
    let text = std::fs::read_to_string(deploy().join("kubernetes/nagless-watch.yaml")).unwrap();
    yaml_rust2::YamlLoader::load_from_str(&text).expect("valid YAML")
}

/// A YAML list of strings.
fn strings(list: &yaml_rust2::Yaml) -> Vec<&str> {
    list.as_vec()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// A container's security context: never privileged, no way to gain more, a read-only root,
/// every capability dropped; the ones it adds back, sorted.
fn capabilities(container: &yaml_rust2::Yaml) -> Vec<&str> {
    let sc = &container["securityContext"];
    assert_ne!(sc["privileged"].as_bool(), Some(true), "never privileged");
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    let mut add = strings(&sc["capabilities"]["add"]);
    add.sort();
    add
}

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
    let docs = manifest();
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
    assert_eq!(
        capabilities(c),
        [
            "BPF",
            "DAC_READ_SEARCH",
            "PERFMON",
            "SYS_ADMIN",
            "SYS_PTRACE"
        ]
    );
    let args = strings(&c["args"]);
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

/// Issue 52's deploy: the DaemonSet's second container is the policy's node agent, with the
/// policy from a ConfigMap (the same text as deploy/policy/policy.toml, which `nagless fix
/// --policy --dry-run` accepts), mounted so that the kubelet's updates reach it, its journal
/// on the node, and the capabilities it uses; the systemd unit runs the same agent.
#[test]
fn the_policy_agent_is_deployed_with_its_policy() {
    let docs = manifest();
    let ds = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .expect("a DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    let containers = spec["containers"].as_vec().unwrap();
    let agent = containers
        .iter()
        .find(|c| c["name"].as_str() == Some("nagless-fix-policy"))
        .expect("the agent's container");
    assert_eq!(
        strings(&agent["args"]),
        [
            "fix",
            "--policy",
            "/etc/nagless/policy/policy.toml",
            "--state",
            "/run/nagless"
        ]
    );
    let volume = |name: &str| {
        spec["volumes"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"))
            .clone()
    };
    let mount = |c: &yaml_rust2::Yaml, name: &str| {
        c["volumeMounts"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|m| m["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no mount {name}"))
            .clone()
    };
    let p = mount(agent, "policy");
    assert_eq!(p["mountPath"].as_str(), Some("/etc/nagless/policy"));
    assert!(p["subPath"].is_badvalue(), "a subPath is never updated");
    assert_eq!(
        volume("policy")["configMap"]["name"].as_str(),
        Some("nagless-policy")
    );
    assert_eq!(
        mount(agent, "state")["mountPath"].as_str(),
        Some("/run/nagless")
    );
    assert_eq!(
        volume("state")["hostPath"]["path"].as_str(),
        Some("/run/nagless")
    );
    // The watcher reads the agent's status beside its journal.
    let watch = &containers[0];
    assert_eq!(mount(watch, "state")["readOnly"].as_bool(), Some(true));
    assert_eq!(
        capabilities(agent),
        [
            "BPF",
            "DAC_READ_SEARCH",
            "PERFMON",
            "SYS_ADMIN",
            "SYS_PTRACE"
        ]
    );
    // The ConfigMap carries the example policy, which the agent accepts.
    let cm = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("ConfigMap"))
        .expect("the policy's ConfigMap");
    let example = deploy().join("policy/policy.toml");
    assert_eq!(
        cm["data"]["policy.toml"].as_str(),
        Some(std::fs::read_to_string(&example).unwrap().as_str())
    );
    let out = Command::new(NAGLESS)
        .args(["fix", "--policy"])
        .arg(&example)
        .arg("--dry-run")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 rule(s)"));
    // The systemd unit runs the same agent on /etc/nagless/policy.toml.
    let unit =
        std::fs::read_to_string(deploy().join("systemd/nagless-fix-policy.service")).unwrap();
    assert!(
        unit.lines().any(|l| l.starts_with("ExecStart=")
            && l.contains("fix --policy /etc/nagless/policy.toml --state /run/nagless")),
        "{unit}"
    );
}

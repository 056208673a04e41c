//! The policy file's reading and its choices: rules, refusals with their line, workloads
//! selected by watch's names, the first rule that takes a connection, canaries.

use super::*;

const TICK: Duration = Duration::from_millis(4);

fn workload(pid: u32, program: &str) -> Workload {
    Workload {
        pid,
        program: program.into(),
        cgroup: "/system.slice/api.service".into(),
        unit: Some("api.service".into()),
        ..Workload::default()
    }
}

fn pod(pid: u32, ns: &str, name: &str) -> Workload {
    Workload {
        pid,
        program: "python3 app.py".into(),
        container: Some(format!("{pid:064x}")),
        k8s_namespace: Some(ns.into()),
        k8s_pod: Some(name.into()),
        k8s_container: Some("app".into()),
        cgroup: format!("/kubepods.slice/pod-{name}"),
        ..Workload::default()
    }
}

#[test]
fn a_rule_name_is_one_printable_line() {
    let e = Policy::parse(
        "[[rule]]\nname = \"a\\nb\"\nunit = \"api\"\nnodelay = true\n",
        TICK,
    )
    .unwrap_err();
    assert_eq!(e.line, 1, "{e}");
    assert!(e.to_string().contains("control character"), "{e}");
}

#[test]
fn a_policy_reads_into_rules() {
    let text = r#"
# the API's clients to its database
[[rule]]
name = "api-to-db"
unit = "api"
ports = [5432]
peers = ["10.0.0.0/8", "fd00::/8", "192.168.1.7"]
nodelay = true

[[rule]]
name = "receivers"
k8s_namespace = "shop"
k8s_pod = "cart-*"
ack_delay_max = "8ms"
canary = 25
revert_after = "2m"
"#;
    let p = Policy::parse(text, TICK).unwrap();
    assert_eq!(p.rules.len(), 2);
    let (a, b) = (&p.rules[0], &p.rules[1]);
    assert_eq!((a.name.as_str(), a.line), ("api-to-db", 3));
    assert!(a.action.nodelay && a.action.ack_delay_max.is_none());
    assert_eq!(a.canary, 100.0);
    assert_eq!(b.action.ack_delay_max, Some(Duration::from_millis(8)));
    assert_eq!(b.revert_after, Some(Duration::from_secs(120)));
    assert_eq!((b.canary, b.canary_by), (25.0, CanaryBy::Workload));
    // Ports and peers.
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(a.selects_connection((ip("10.1.1.1"), 40000), (ip("10.2.3.4"), 5432)));
    assert!(a.selects_connection((ip("::1"), 40000), (ip("::ffff:10.2.3.4"), 5432)));
    assert!(a.selects_connection((ip("::1"), 40000), (ip("fd12::1"), 5432)));
    assert!(a.selects_connection((ip("::1"), 40000), (ip("192.168.1.7"), 5432)));
    assert!(!a.selects_connection((ip("10.1.1.1"), 40000), (ip("11.0.0.1"), 5432)));
    assert!(!a.selects_connection((ip("10.1.1.1"), 40000), (ip("10.0.0.1"), 6379)));
    assert!(!a.selects_connection((ip("::1"), 40000), (ip("192.168.1.8"), 5432)));
    // No rules at all is a policy too (everything taken back).
    assert!(Policy::parse("", TICK).unwrap().rules.is_empty());
}

#[test]
fn a_bad_policy_is_refused_with_its_line() {
    let cases = [
        ("[[rule]]\nname = \"a\"\nnodelay = true\n", 1, "selects nothing"),
        ("[[rule]]\nunit = \"x\"\nnodelay = true\n", 1, "needs a `name`"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\n", 1, "nothing to do"),
        ("\n[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\nspeed = 3\n", 6, "unknown field"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\npeers = [\n\"10.0.0.0/33\"]\n", 6, "prefix length"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\npeers = [\"ten\"]\n", 5, "not an address range"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\n\nack_delay_max = \"8 ms\"\n", 5, "not a duration"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nack_delay_max = \"1s\"\n", 4, "more than the 200 ms"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\ncanary = 0\n", 5, "canary 0"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\ncanary = 150\n", 5, "canary 150"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\ncanary_by = \"pod\"\n", 5, "canary_by"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\nrevert_after = \"1s\"\n", 5, "too short"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\nports = [0]\n", 5, "ports: ports 0 names no connection"),
        ("[[rule]]\nname = \"a\"\ncontainer = \"abc\"\nnodelay = true\n", 3, "not a container id"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = true\n[[rule]]\nname = \"a\"\nunit = \"y\"\nnodelay = true\n", 5, "second rule named \"a\" (the first is on line 1)"),
        ("[[rule]]\nname = \"a\"\nunit = \"x\"\nnodelay = yes\n", 4, "must be quoted"),
        ("[rules]\n", 1, "unknown field"),
    ];
    for (text, line, words) in cases {
        let e = Policy::parse(text, TICK).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.to_string().contains(words), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
    }
}

#[test]
fn workloads_are_selected_by_what_watch_names_them() {
    let s = |f: fn(&mut Select)| {
        let mut s = Select::default();
        f(&mut s);
        s
    };
    let api = workload(10, "python3 app.py");
    let cart = pod(20, "shop", "cart-7d9f");
    assert!(s(|s| s.unit = Some("api".into())).matches(&api));
    assert!(s(|s| s.unit = Some("api.service".into())).matches(&api));
    assert!(s(|s| s.unit = Some("api*".into())).matches(&api));
    assert!(!s(|s| s.unit = Some("ap".into())).matches(&api));
    assert!(!s(|s| s.unit = Some("api".into())).matches(&cart));
    assert!(s(|s| s.program = Some("python3 *".into())).matches(&api));
    assert!(s(|s| s.cgroup = Some("/system.slice".into())).matches(&api));
    assert!(s(|s| s.cgroup = Some("/system.slice/".into())).matches(&api));
    assert!(!s(|s| s.cgroup = Some("/system.sl".into())).matches(&api));
    assert!(s(|s| s.k8s_pod = Some("cart-*".into())).matches(&cart));
    assert!(s(|s| s.k8s_pod = Some("*-7d9f".into())).matches(&cart));
    assert!(s(|s| s.k8s_pod = Some("c*t*9f".into())).matches(&cart));
    assert!(!s(|s| s.k8s_pod = Some("cart-*-x".into())).matches(&cart));
    assert!(!s(|s| s.k8s_pod = Some("cart-*".into())).matches(&api));
    assert!(s(|s| s.container = Some(format!("{:012x}", 0))).matches(&cart));
    // Every field given must match.
    let both = s(|s| {
        s.k8s_namespace = Some("shop".into());
        s.k8s_container = Some("db".into());
    });
    assert!(!both.matches(&cart));
}

#[test]
fn the_first_rule_that_selects_a_connection_takes_it() {
    let text = r#"
[[rule]]
name = "carts to the database"
k8s_pod = "cart-*"
ports = [5432]
nodelay = true
[[rule]]
name = "shop"
k8s_namespace = "shop"
ack_delay_max = "8ms"
"#;
    let p = Policy::parse(text, TICK).unwrap();
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    let cart = pod(1, "shop", "cart-1");
    let d = p.decide(&cart).unwrap();
    assert_eq!(d.rules.len(), 2);
    // Its connection to the database: the first rule's, alone; the others: the second's.
    let (r, applies) = d.rule_for((ip, 40000), (ip, 5432)).unwrap();
    assert_eq!((r.name.as_str(), applies), ("carts to the database", true));
    let (r, _) = d.rule_for((ip, 40001), (ip, 6379)).unwrap();
    assert_eq!(r.name, "shop");
    let web = p.decide(&pod(2, "shop", "web-1")).unwrap();
    assert_eq!(web.rules.len(), 1);
    assert_eq!(web.rule_for((ip, 1), (ip, 5432)).unwrap().0.name, "shop");
    assert!(p.decide(&pod(3, "other", "web-1")).is_none());
}

#[test]
fn names_and_ranges_in_every_form() {
    // A name of several bytes a character where a cut would fall: no panic, no match.
    assert!(!glob("a*b", "a\u{e9}"));
    assert!(glob("a*\u{e9}", "ab\u{e9}"));
    assert!(!glob("ab*ba", "aba"));
    assert!(glob("*", ""));
    // A container id written in capitals; an IPv4-mapped range.
    let s = Select {
        container: Some("ABCDEF012345".into()),
        ..Select::default()
    };
    let mut w = pod(0xabc, "shop", "x");
    w.container = Some(format!("abcdef012345{}", "0".repeat(52)));
    assert!(s.matches(&w));
    let r = Range::parse("::ffff:10.0.0.0/104").unwrap();
    assert!(r.contains("10.1.2.3".parse().unwrap()));
    assert!(r.contains("::ffff:10.1.2.3".parse().unwrap()));
    assert!(!r.contains("11.1.2.3".parse().unwrap()));
    assert!(Range::parse("0.0.0.0/0")
        .unwrap()
        .contains("8.8.8.8".parse().unwrap()));
    // One unit on two hosts: two workloads for the canary.
    let (mut a, mut b) = (workload(1, "nginx"), workload(1, "nginx"));
    a.node = "host-a".into();
    b.node = "host-b".into();
    assert_ne!(a.identity(), b.identity());
}

#[test]
fn a_canary_takes_its_share_stably() {
    let text = "[[rule]]\nname = \"c\"\nk8s_namespace = \"shop\"\nnodelay = true\ncanary = 10\n";
    let p = Policy::parse(text, TICK).unwrap();
    let pods: Vec<Workload> = (0..4000)
        .map(|i| pod(i, "shop", &format!("web-{i}")))
        .collect();
    let applies = |w: &Workload| p.decide(w).unwrap().rules[0].1;
    let taken = pods.iter().filter(|w| applies(w)).count();
    // 10 % of 4,000 within 2 points.
    assert!((320..=480).contains(&taken), "{taken} of 4000");
    // The same pod is chosen alike on every run and node (its pid does not count).
    for w in &pods[..50] {
        let mut again = w.clone();
        again.pid += 100_000;
        assert_eq!(applies(w), applies(&again));
    }
    // By connection: every workload applies, and a share of its connections.
    let by_conn = Policy::parse(&format!("{text}canary_by = \"connection\"\n"), TICK).unwrap();
    let r = &by_conn.rules[0];
    assert!(by_conn.decide(&pods[0]).unwrap().rules[0].1);
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    let conns = (0..4000u16)
        .filter(|&i| r.canary_takes_connection((ip, 20000 + i), (ip, 5432)))
        .count();
    assert!((320..=480).contains(&conns), "{conns} of 4000");
    assert!(p.rules[0].canary_takes_connection((ip, 1), (ip, 2)));
}

//! The metrics' tests: each family's names, values and bounds, on rows and stalls made by
//! hand.

use super::*;
use crate::detect::Stall;
use crate::GroupKey;

fn event(port: u16, lost_us: u64) -> StallEvent {
    StallEvent {
        key: GroupKey {
            pid: Some(7),
            uid: 0,
            port,
            serves: true,
            netns: 1,
        },
        comm: Some("python3".into()),
        container: None,
        service: Some("python3 app.py".into()),
        unit: None,
        pod: None,
        local: ([127, 0, 0, 1], port).into(),
        remote: ([127, 0, 0, 1], 40000).into(),
        at: std::time::UNIX_EPOCH,
        stall: Stall {
            held: 100,
            lost_us,
            at_us: 0,
            timer: None,
        },
    }
}

fn metrics(max_series: usize) -> Metrics {
    let mut m = Metrics::new(Limits {
        forget_after: Duration::from_secs(60),
        max_series,
    });
    m.set_ephemeral_ports(EphemeralPorts::new(32768, 60999, vec![]));
    m
}

fn row(comm: &str, port: u16, serves: bool) -> Row {
    Row {
        port,
        serves,
        comm: Some(comm.into()),
        connections: 1,
        stalling_connections: 1,
        ..Row::default()
    }
}

/// A group's label set as the page writes it, on the host.
fn l(process: &str, port: &str, role: &str, container: &str) -> String {
    format!(
        r#"{{process="{process}",unit="",port="{port}",role="{role}",container="{container}",k8s_namespace="",k8s_pod="",k8s_container=""}}"#
    )
}

#[test]
fn stalls_are_counted_in_seconds_with_conventional_names() {
    let mut m = metrics(1000);
    m.window(&[Row {
        port: 9,
        serves: false,
        comm: Some("curl".into()),
        connections: 3,
        stalling_connections: 3,
        ..Row::default()
    }]);
    m.stall(&event(8000, 40_000));
    m.stall(&event(8000, 200_000));
    let mut in_container = event(8080, 50_000);
    in_container.container = Some("0123456789abcdef".repeat(4));
    m.stall(&in_container);
    let text = m.encode();
    let g = l("python3 app.py", "8000", "serves", "");
    for want in [
        format!("nagless_stalls_total{g} 2"),
        format!("nagless_stall_seconds_total{g} 0.24"),
        format!("nagless_stall_duration_seconds_count{g} 2"),
        format!(
            "nagless_stall_duration_seconds_bucket{{le=\"0.045\",{} 1",
            &g[1..]
        ),
        format!(
            "nagless_stall_duration_seconds_bucket{{le=\"0.035\",{} 0",
            &g[1..]
        ),
        format!("nagless_stall_duration_seconds_sum{g} 0.24"),
        "nagless_watch_stalls_total 3".into(),
        format!("nagless_stalls_total{} 0", l("curl", "9", "connects", "")),
        format!(
            "nagless_stalling_connections{} 3",
            l("curl", "9", "connects", "")
        ),
        "# TYPE nagless_watch_cpu_seconds counter".into(),
        format!(
            "nagless_stalls_total{} 1",
            l("python3 app.py", "8080", "serves", "0123456789ab")
        ),
        "# EOF".into(),
    ] {
        assert!(text.contains(&want), "no {want} in\n{text}");
    }
}

#[test]
fn ack_clocked_time_is_counted_only_where_the_group_was_clocked() {
    let mut m = metrics(1000);
    let clocked = Row {
        ack_released: 14_000,
        ack_held_ms: 610.5,
        ack_clocked: Some(nagless_stall_rule::AckClocked {
            releases: 14_000,
            share: 0.61,
            held_ms_per_s: 610.5,
        }),
        ..row("python3 client.py", 6379, false)
    };
    // Short holds that were not judged clocked count nothing.
    let quiet = Row {
        ack_released: 20,
        ack_held_ms: 3.0,
        ..row("redis-server", 6380, true)
    };
    m.window(&[clocked.clone(), quiet.clone()]);
    m.window(&[clocked, quiet]);
    let text = m.encode();
    for want in [
        format!(
            "nagless_ack_clocked_seconds_total{} 1.221",
            l("python3 client.py", "6379", "connects", "")
        ),
        format!(
            "nagless_ack_clocked_seconds_total{} 0",
            l("redis-server", "6380", "serves", "")
        ),
        "# TYPE nagless_ack_clocked_seconds counter".into(),
    ] {
        assert!(text.contains(&want), "no {want} in\n{text}");
    }
}

#[test]
fn the_kernels_account_of_a_groups_time_adds_up_refresh_by_refresh() {
    let mut m = metrics(1000);
    let slow_reader = Row {
        waits: crate::waits::Waits {
            busy_us: 900_000,
            rwnd_limited_us: 850_000,
            sndbuf_limited_us: 20_000,
            retransmits: 3,
            timeouts: 1,
            probes: 2,
            backoff: 2,
            own_turn_us: 750_000,
            own_turns: 5,
            own_open_us: 120_000,
            peer_open_us: 9_000_000,
            min_rtt_us: 500,
            ..Default::default()
        },
        ..row("python3 push.py", 9000, true)
    };
    m.window(std::slice::from_ref(&slow_reader));
    // Two rows of one group: the most backed off of them.
    let other = Row {
        waits: crate::waits::Waits {
            backoff: 1,
            ..slow_reader.waits
        },
        ..slow_reader.clone()
    };
    m.window(&[slow_reader.clone(), other, row("curl", 80, false)]);
    let text = m.encode();
    let g = l("python3 push.py", "9000", "serves", "");
    // A refresh that read none of its connections leaves the backoff; one that read
    // them after an ACK came sets it back to 0.
    let mut later = metrics(1000);
    later.window(std::slice::from_ref(&slow_reader));
    later.window(&[row("python3 push.py", 9000, true)]);
    assert!(later
        .encode()
        .contains(&format!("nagless_tcp_backoff{g} 2\n")));
    let acked = Row {
        waits: crate::waits::Waits {
            busy_us: 1_000,
            ..crate::waits::Waits::default()
        },
        ..row("python3 push.py", 9000, true)
    };
    later.window(&[acked]);
    assert!(later
        .encode()
        .contains(&format!("nagless_tcp_backoff{g} 0\n")));
    for want in [
        format!("nagless_tcp_busy_seconds_total{g} 2.7\n"),
        format!("nagless_tcp_rwnd_limited_seconds_total{g} 2.55\n"),
        format!("nagless_tcp_sndbuf_limited_seconds_total{g} 0.06\n"),
        format!("nagless_tcp_retransmits_total{g} 9\n"),
        format!("nagless_tcp_timeouts_total{g} 3\n"),
        format!("nagless_tcp_zero_window_probes_total{g} 6\n"),
        format!("nagless_tcp_backoff{g} 2\n"),
        // Its program's turns (a server answering): 5 in 750 ms each refresh.
        format!("nagless_own_turn_seconds_total{g} 2.25\n"),
        format!("nagless_own_turns_total{g} 15\n"),
        format!("nagless_peer_turns_total{g} 0\n"),
        format!("nagless_tcp_min_rtt_seconds{g} 0.0005\n"),
        // A serving group's open turn is its own (its wait for requests is no turn of its).
        format!("nagless_turn_open_seconds{g} 0.12\n"),
        format!("nagless_tcp_backoff{} 0\n", l("curl", "80", "connects", "")),
        // A group without any: its series at 0.
        format!(
            "nagless_tcp_busy_seconds_total{} 0",
            l("curl", "80", "connects", "")
        ),
        "# TYPE nagless_tcp_rwnd_limited_seconds counter".into(),
    ] {
        assert!(text.contains(&want), "no {want} in\n{text}");
    }
}

#[test]
fn a_senders_own_holds_are_counted_beside_its_stalls() {
    let mut m = metrics(1000);
    let corking = Row {
        sender_holds: 2,
        sender_hold_ms: 410.5,
        sender_hold_connections: 1,
        ..row("haproxy", 8080, true)
    };
    m.window(std::slice::from_ref(&corking));
    m.window(&[corking, row("curl", 80, false)]);
    let text = m.encode();
    for want in [
        format!(
            "nagless_sender_holds_total{} 4\n",
            l("haproxy", "8080", "serves", "")
        ),
        format!(
            "nagless_sender_hold_seconds_total{} 0.821\n",
            l("haproxy", "8080", "serves", "")
        ),
        format!(
            "nagless_sender_holds_total{} 0\n",
            l("curl", "80", "connects", "")
        ),
    ] {
        assert!(text.contains(&want), "no {want} in\n{text}");
    }
}

#[test]
fn seconds_print_as_the_microseconds_they_add_up_to() {
    let mut m = metrics(1000);
    // Added up as floats, these make 0.38622399999999996.
    for us in [54978, 55138, 30069, 52801, 44594, 38727, 53643, 56274] {
        m.stall(&event(8000, us));
    }
    let g = l("python3 app.py", "8000", "serves", "");
    let text = m.encode();
    for want in [
        format!("nagless_stall_seconds_total{g} 0.386224\n"),
        format!("nagless_stall_duration_seconds_sum{g} 0.386224\n"),
        format!(
            "nagless_stall_duration_seconds_bucket{{le=\"+Inf\",{} 8\n",
            &g[1..]
        ),
        // 30,069 µs: above the rule's 30 ms, below the first bucket's bound.
        format!(
            "nagless_stall_duration_seconds_bucket{{le=\"0.035\",{} 1\n",
            &g[1..]
        ),
    ] {
        assert!(text.contains(&want), "no {want} in\n{text}");
    }
}

#[test]
fn a_group_whose_connections_stop_stalling_reads_0_not_nothing() {
    let mut m = metrics(1000);
    let t0 = Instant::now();
    m.window_at(&[row("redis", 6379, true)], t0);
    let g = l("redis", "6379", "serves", "");
    assert!(m
        .encode()
        .contains(&format!("nagless_stalling_connections{g} 1\n")));
    // A window without its rows (eBPF: no stall in it).
    m.window_at(&[], t0 + Duration::from_secs(1));
    assert!(m
        .encode()
        .contains(&format!("nagless_stalling_connections{g} 0\n")));
}

#[test]
fn the_hosts_stalls_are_a_series_from_the_start() {
    let mut m = metrics(1000);
    assert!(m.encode().contains("nagless_watch_stalls_total 0\n"));
    m.stall(&event(8000, 40_000));
    assert!(m.encode().contains("nagless_watch_stalls_total 1\n"));
}

#[test]
fn what_the_watch_cannot_see_is_exported_from_zero() {
    let mut m = metrics(1000);
    let text = m.encode();
    for want in [
        "nagless_watch_events_lost_total 0",
        "nagless_watch_late_samples_total 0",
        "nagless_watch_namespaces_not_entered 0",
        "nagless_watch_processes_unattributed 0",
        "nagless_watch_sockets_unseen_total 0",
    ] {
        assert!(text.contains(want), "no {want} in\n{text}");
    }
    let seen = |lost, late, ns, procs, unseen| BlindSpots {
        events_lost: lost,
        late_samples: late,
        namespaces_not_entered: ns,
        processes_unattributed: procs,
        sockets_unseen: unseen,
    };
    m.blind_spots(seen(5, 2, 3, 1, 4));
    m.blind_spots(seen(7, 2, 1, 0, 9));
    let text = m.encode();
    for want in [
        "nagless_watch_events_lost_total 7",
        "nagless_watch_late_samples_total 2",
        "nagless_watch_namespaces_not_entered 1",
        "nagless_watch_processes_unattributed 0",
        "nagless_watch_sockets_unseen_total 9",
    ] {
        assert!(text.contains(want), "no {want} in\n{text}");
    }
}

#[test]
fn groups_unseen_for_forget_after_lose_their_series() {
    let mut m = metrics(1000);
    let t0 = Instant::now();
    m.window_at(&[row("curl", 80, false), row("redis", 6379, true)], t0);
    m.window_at(&[row("redis", 6379, true)], t0 + Duration::from_secs(59));
    let text = m.encode();
    assert!(text.contains(r#"process="curl""#), "{text}");
    assert!(text.contains("nagless_watch_series_groups 2"), "{text}");
    // curl was last seen 60 s ago: gone from every family; redis stays.
    m.window_at(&[row("redis", 6379, true)], t0 + Duration::from_secs(60));
    let text = m.encode();
    assert!(!text.contains(r#"process="curl""#), "{text}");
    assert!(
        text.contains(&format!(
            "nagless_stalls_total{} 0",
            l("redis", "6379", "serves", "")
        )),
        "{text}"
    );
    assert!(
        text.contains("nagless_watch_groups_forgotten_total 1"),
        "{text}"
    );
    assert!(text.contains("nagless_watch_series_groups 1"), "{text}");
}

#[test]
fn groups_beyond_the_cap_go_to_one_overflow_series() {
    let mut m = metrics(2);
    m.window(&[
        row("a", 1, true),
        row("b", 2, true),
        row("c", 3, true),
        row("d", 4, true),
    ]);
    m.stall(&event(9000, 40_000));
    let text = m.encode();
    for gone in [
        r#"process="c""#,
        r#"process="d""#,
        r#"process="python3 app.py""#,
    ] {
        assert!(!text.contains(gone), "{gone} in\n{text}");
    }
    let o = l("", "", "overflow", "");
    for want in [
        format!("nagless_stalling_connections{o} 2"),
        format!("nagless_stalls_total{o} 1"),
        "nagless_watch_groups_overflowed_total 3".to_owned(),
        "nagless_watch_series_groups 2".to_owned(),
    ] {
        assert!(text.contains(&want), "no {want} in\n{text}");
    }
    // A series forgotten makes room again.
    m.window_at(&[], Instant::now() + Duration::from_secs(61));
    m.stall(&event(9000, 40_000));
    assert!(m.encode().contains(&format!(
        "nagless_stalls_total{} 1",
        l("python3 app.py", "9000", "serves", "")
    )));
}

#[test]
fn ports_clients_may_get_never_become_labels() {
    let mut m = metrics(1000);
    // Connections between two ephemeral ports, a server bound to port 0, and one on a
    // fixed port.
    m.window(&[
        row("p2p", 51234, false),
        row("p2p", 60999, false),
        row("srv", 40001, true),
        row("srv", 8080, true),
    ]);
    let text = m.encode();
    for gone in ["51234", "60999", "40001"] {
        assert!(!text.contains(gone), "{gone} in\n{text}");
    }
    for want in [
        format!(
            "nagless_stalling_connections{} 2",
            l("p2p", "ephemeral", "connects", "")
        ),
        format!(
            "nagless_stalling_connections{} 1",
            l("srv", "ephemeral", "serves", "")
        ),
        format!(
            "nagless_stalling_connections{} 1",
            l("srv", "8080", "serves", "")
        ),
        "nagless_watch_series_groups 3".into(),
    ] {
        assert!(text.contains(&want), "no {want} in\n{text}");
    }
}

#[test]
fn a_full_accept_queue_is_counted_on_its_listener_only() {
    let mut m = metrics(1000);
    let full = Row {
        accept_queue: crate::AcceptQueue {
            full_us: 500_000,
            full_looks: 2,
            most_queued: 2,
            backlog: 1,
            drops: 4,
        },
        ..row("python3 srv.py", 7777, true)
    };
    m.window(std::slice::from_ref(&full));
    m.window(&[full, row("nginx", 80, true)]);
    let text = m.encode();
    let g = l("python3 srv.py", "7777", "serves", "");
    for want in [
        format!("nagless_accept_queue_full_seconds_total{g} 1.0\n"),
        format!("nagless_accept_queue_drops_total{g} 8\n"),
        "# TYPE nagless_accept_queue_full_seconds counter".into(),
    ] {
        assert!(text.contains(&want), "no {want} in\n{text}");
    }
    // A listener never full has no series of these.
    let nginx = l("nginx", "80", "serves", "");
    assert!(
        !text.contains(&format!("nagless_accept_queue_drops_total{nginx}")),
        "{text}"
    );
}

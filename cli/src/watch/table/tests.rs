//! The table's rows as an operator reads them: the process column, ACK-clocked rows, and
//! each fix given once.

use super::*;
use nagless_doctor::rule::AckTimer;

fn row(pid: u32, program: &str, port: u16, stalls: u64, timer: Option<AckTimer>) -> Row {
    Row {
        pid: Some(pid),
        cmd: Some(format!("/usr/local/bin/long/path/to/{program}")),
        program: Some(program.into()),
        port,
        serves: true,
        netns: 1,
        cgroup: Some("/".into()),
        connections: 1,
        stalls,
        lost_ms: stalls as f64 * 40.0,
        ack_timer: timer,
        advice: timer.map_or(String::new(), |t| format!("fix for {t:?}")),
        ..Row::default()
    }
}

#[test]
fn the_process_column_names_the_program_then_cuts_its_arguments() {
    let mut r = row(
        4242,
        "python3 app.py --workers 4 --port 8080 --verbose",
        80,
        0,
        None,
    );
    assert_eq!(
        who(&r, 1, 44),
        "4242 python3 app.py --workers 4 --port 80..."
    );
    assert_eq!(
        who(&r, 1, usize::MAX),
        "4242 python3 app.py --workers 4 --port 8080 --verbose"
    );
    // A systemd unit stays when the program is cut.
    r.cgroup = Some("/system.slice/app.service".into());
    assert_eq!(
        who(&r, 1, 44),
        "4242 python3 app.py --worke... (app.service)"
    );
    // A container names it instead.
    r.container = Some("0123456789abcdef".repeat(4));
    r.cgroup = Some(format!(
        "/system.slice/docker-{}.scope",
        "0123456789abcdef".repeat(4)
    ));
    r.program = Some("nginx".into());
    assert_eq!(who(&r, 1, 44), "[0123456789ab] 4242 nginx");
    // On a Kubernetes node, its pod.
    r.pod = Some(nagless_watch::kube::Pod {
        namespace: "shop".into(),
        name: "web-7d4b9c-x2kqz".into(),
        container: "nginx".into(),
    });
    assert_eq!(who(&r, 1, 44), "[shop/web-7d4b9c-x2kqz] 4242 nginx");
    r.pod = None;
    // Another network namespace; a process that is gone (its cmd: `[task]`).
    let gone = Row {
        program: None,
        cmd: Some("[java]".into()),
        netns: 7,
        ..row(77, "", 80, 0, None)
    };
    assert_eq!(who(&gone, 1, 44), "[netns 7] 77 [java]");
    let unknown = Row {
        pid: None,
        uid: 1000,
        ..Row::default()
    };
    assert_eq!(who(&unknown, 0, 44), "uid 1000 (pid not readable)");
}

#[test]
fn an_ack_clocked_row_is_marked_and_told_its_cost_and_fix() {
    let clocked = Row {
        serves: false,
        ack_clocked: Some(nagless_doctor::rule::AckClocked {
            releases: 23_630,
            share: 0.61,
            held_ms_per_s: 610.0,
        }),
        ..row(5, "python3 client.py", 6379, 0, None)
    };
    let stalling = row(1, "python3 a.py", 8000, 10, Some(AckTimer::Linux40ms));
    let rows = [stalling, clocked];
    let mut t = String::new();
    table(&rows, 1.0, 1, true, &mut t);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[1].ends_with("  [1]"), "{t}");
    assert!(lines[2].ends_with("  [2] ACK-clocked 61%"), "{t}");
    assert!(
        lines[5].starts_with("[2] ACK-clocked, not a stall: ") && lines[5].contains("TCP_NODELAY"),
        "{t}"
    );
    let mut s = String::new();
    stalled_lines(&rows, 1, &[], &mut s);
    assert!(s.contains("1 python3 a.py :8000: 10 stall(s)"), "{s}");
    assert!(
        s.contains(
            "5 python3 client.py ->:6379: ACK-clocked, not a stall: writes queued behind the peer's ACKs 61 % of the time (610 ms/s), 23630 writes released one ACK at a time\n  \
             repair it live: nagless fix --pid 5 --port 6379 --nodelay\n  \
             fix [2]: set TCP_NODELAY"
        ),
        "{s}"
    );
    assert!(
        !s.contains("5 python3 client.py ->:6379: 0 stall(s)"),
        "{s}"
    );
}

#[test]
fn each_fix_is_given_once_for_the_rows_it_fits() {
    let linux = Some(AckTimer::Linux40ms);
    let rows = [
        row(1, "python3 a.py", 8000, 10, linux),
        row(
            2,
            "java com.example.Main",
            9000,
            5,
            Some(AckTimer::Classic200ms),
        ),
        row(3, "node server.js", 3000, 2, linux),
        row(4, "redis-server", 6379, 0, None),
    ];
    let mut t = String::new();
    table(&rows, 1.0, 1, true, &mut t);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].ends_with("  fix"), "{t}");
    assert!(
        lines[1].starts_with("1 python3 a.py ") && lines[1].ends_with("  [1]"),
        "{t}"
    );
    assert!(lines[2].ends_with("  [2]"), "{t}");
    assert!(lines[3].ends_with("  [1]"), "{t}");
    assert!(
        lines[4].ends_with("0.0  "),
        "no fix for a row without stalls: {t}"
    );
    assert_eq!(
        &lines[5..],
        ["", "[1] fix for Linux40ms", "[2] fix for Classic200ms"]
    );
    assert_eq!(t.matches("fix for Linux40ms").count(), 1, "{t}");

    // A row the kernel counted waits for says so in the same column, with no fix.
    let mut waiting = rows.clone();
    waiting[3].waits = nagless_watch::waits::Waits {
        busy_us: 2_000_000,
        rwnd_limited_us: 1_500_000,
        sndbuf_limited_us: 10_000,
        retransmits: 2,
        timeouts: 0,
        probes: 0,
        backoff: 0,
        ..Default::default()
    };
    let mut t = String::new();
    table(&waiting, 2.0, 1, false, &mut t);
    assert!(
        t.lines()
            .nth(4)
            .unwrap()
            .ends_with("0.0  (not Nagle: window 1500 ms, 2 resent)"),
        "{t}"
    );
    // A connection still backing off: the table and the summary say how far.
    waiting[3].waits.retransmits = 3;
    waiting[3].waits.timeouts = 3;
    waiting[3].waits.backoff = 3;
    let mut t = String::new();
    table(&waiting, 2.0, 1, false, &mut t);
    assert!(
        t.lines()
            .nth(4)
            .unwrap()
            .ends_with("(not Nagle: window 1500 ms, 3 resent, backoff 3)"),
        "{t}"
    );
    // Its turns, when long, follow.
    waiting[3].waits.own_turn_us = 600_000;
    waiting[3].waits.own_turns = 4;
    waiting[3].waits.peer_turn_us = 600_000;
    waiting[3].waits.peer_turns = 4;
    let mut t = String::new();
    table(&waiting, 2.0, 1, false, &mut t);
    assert!(waiting[3].serves, "a server's row");
    assert!(
        t.lines()
            .nth(4)
            .unwrap()
            .ends_with("backoff 3) (answers in 150 ms)"),
        "{t}"
    );
    let mut t = String::new();
    waits_lines(&waiting[3..], 2.0, 1, &mut t);
    assert!(
        t.contains("3 segment(s) sent again, 3 retransmission timeout(s), backed off up to 3 time(s) in a row (each doubled the wait)"),
        "{t}"
    );
    // Loss is not only the path's: a server's full listen queue drops its clients' SYNs.
    assert!(
        t.contains("or SYNs dropped by a server whose listen queue was full")
            && !t.contains("not at the programs"),
        "{t}"
    );

    let mut s = String::new();
    // A fix pinned on node's cgroup covers it; the others are told the command.
    let pins = [Pin {
        cgroup: "/apps".into(),
        ports: vec![3000],
        what: "pinned: TCP_NODELAY on /sys/fs/bpf/nagless-fix/7".into(),
    }];
    let mut rows = rows;
    rows[2].cgroup = Some("/apps/node".into());
    rows[1].cgroup = Some("/system.slice/java.service".into());
    stalled_lines(&rows[..3], 1, &pins, &mut s);
    assert_eq!(
        s,
        "1 python3 a.py :8000: 10 stall(s), 400.0 ms lost\n  \
         repair it live: nagless fix --pid 1 --port 8000 --nodelay\n\
         3 node server.js :3000: 2 stall(s), 80.0 ms lost\n  \
         a `nagless fix` covers its new connections (pinned: TCP_NODELAY on /sys/fs/bpf/nagless-fix/7)\n  \
         peers ACK with a 40 ms delayed-ACK timer, as Linux and FreeBSD (since 2020) have.\n  \
         fix [1]: fix for Linux40ms\n\
         2 java com.example.Main (java.service) :9000: 5 stall(s), 200.0 ms lost\n  \
         repair it live: nagless fix --unit java.service --port 9000 --nodelay\n  \
         peer ACKs with a 100-200 ms delayed-ACK timer, as Windows (200 ms) and macOS (100 ms) have.\n  \
         fix [2]: fix for Classic200ms\n"
    );
    let mut t = String::new();
    table(&rows[..3], 1.0, 1, false, &mut t);
    assert!(
        !t.contains("fix for"),
        "the summary's table points to its lines: {t}"
    );
}

#[test]
fn a_full_accept_queue_is_named_with_its_fix_and_its_clients_point_to_it() {
    let mut listener = row(30, "python3 srv.py", 7777, 0, None);
    listener.accept_queue = nagless_watch::AcceptQueue {
        full_us: 2_250_000,
        full_looks: 9,
        most_queued: 2,
        backlog: 1,
        drops: 12,
    };
    let mut client = row(31, "python3 cli.py", 7777, 0, None);
    client.serves = false;
    client.waits.retransmits = 12;
    // The client of another namespace's listener of the same port is not pointed to it.
    let mut elsewhere = client.clone();
    elsewhere.netns = 2;
    let rows = [listener, client, elsewhere];
    let mut t = String::new();
    table(&rows, 2.0, 1, false, &mut t);
    assert!(
        t.contains("accept queue full 2.2 s, 12 handshake packet(s) dropped"),
        "{t}"
    );
    let mut s = String::new();
    accept_lines(&rows, 1, &mut s);
    assert_eq!(s.lines().count(), 1, "{s}");
    assert!(
        s.starts_with("30 python3 srv.py :7777: its listener's accept queue was full for 2.2 s (9 look(s), up to 2 connection(s) waiting to be accepted, backlog 1); 12 handshake packet(s) dropped")
            && s.contains("raise the backlog (listen()'s argument; the kernel caps it at net.core.somaxconn)"),
        "{s}"
    );
    let mut w = String::new();
    waits_lines(&rows, 2.0, 1, &mut w);
    let lines: Vec<&str> = w.lines().collect();
    assert_eq!(lines.len(), 2, "{w}");
    assert!(
        lines[0].contains(
            "30 python3 srv.py on :7777 here dropped handshakes meanwhile (see its line)"
        ) && lines[0].contains("look at loss"),
        "{w}"
    );
    assert!(
        lines[1].contains("look at loss") && !lines[1].contains("here dropped"),
        "{w}"
    );
}

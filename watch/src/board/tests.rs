//! The board's rows: what stalls, clocked writes, corks and accept queues make of a group.

use super::*;

fn key(port: u16) -> GroupKey {
    GroupKey {
        pid: Some(7),
        uid: 0,
        port,
        serves: false,
        netns: 1,
    }
}

fn stall(lost_us: u64) -> Stall {
    Stall {
        held: 40,
        lost_us,
        at_us: 0,
        timer: Some(AckTimer::Linux40ms),
    }
}

#[test]
fn a_group_is_ack_clocked_by_the_rule_and_a_stall_stays_a_stall() {
    let mut b = Board::default();
    let who = Who::default();
    // Connection 1 of port 6379: 14,000 writes that waited 610 ms of a 1 s window, and
    // one stall; counted once, as clocked and as stalling.
    b.add_clock(&key(6379), &who, 1, (10_000, 400_000), (0, 600_000));
    b.add_clock(&key(6379), &who, 1, (4_000, 210_000), (600_000, 1_000_000));
    b.add_stall(&key(6379), &who, 1, &stall(40_000), None);
    // Port 80: stalls, and a few prompt-ACK releases (not clocked).
    b.add_stall(&key(80), &who, 2, &stall(40_000), None);
    b.add_stall(&key(80), &who, 2, &stall(41_000), None);
    b.add_clock(&key(80), &who, 2, (12, 600), (0, 1_000_000));
    let rows = b.rows(1_000_000);
    let clocked = rows.iter().find(|r| r.port == 6379).unwrap();
    assert_eq!(clocked.kind, RowKind::AckClocked, "{clocked:?}");
    let c = clocked.ack_clocked.unwrap();
    assert_eq!(c.releases, 14_000);
    assert!((c.share - 0.61).abs() < 1e-9, "{c:?}");
    assert_eq!(
        (
            clocked.connections,
            clocked.stalling_connections,
            clocked.ack_released_connections
        ),
        (1, 1, 1)
    );
    assert_eq!(clocked.stalls, 1);
    let stalling = rows.iter().find(|r| r.port == 80).unwrap();
    assert_eq!(stalling.kind, RowKind::Stall, "{stalling:?}");
    assert!(stalling.ack_clocked.is_none());
    assert_eq!(stalling.ack_released, 12);
    // Clocked first: it cost more.
    assert_eq!(rows[0].port, 6379);
    // Over a 10 s watch, the clocked second is judged over its span, not the watch.
    let c = b.rows(10_000_000)[0].ack_clocked.unwrap();
    assert!((c.share - 0.61).abs() < 1e-9, "{c:?}");
}

#[test]
fn a_senders_own_holds_name_the_group_when_they_cost_most() {
    let mut b = Board::default();
    let who = Who::default();
    // Port 8080: three corked answers on two connections, and one shorter stall.
    b.add_cork(&key(8080), &who, 1, 204_000);
    b.add_cork(&key(8080), &who, 1, 208_000);
    b.add_cork(&key(8080), &who, 2, 212_000);
    b.add_stall(&key(8080), &who, 2, &stall(40_000), None);
    // Port 80: a stall that cost more than its one hold.
    b.add_cork(&key(80), &who, 3, 200_000);
    b.add_stall(&key(80), &who, 3, &stall(300_000), None);
    let rows = b.rows(1_000_000);
    let corking = rows.iter().find(|r| r.port == 8080).unwrap();
    assert_eq!(corking.kind, RowKind::SenderHold, "{corking:?}");
    assert_eq!(
        (
            corking.sender_holds,
            corking.sender_hold_connections,
            corking.connections
        ),
        (3, 2, 2)
    );
    assert!((corking.sender_hold_ms - 624.0).abs() < 1e-9);
    assert_eq!(corking.stalls, 1);
    let stalling = rows.iter().find(|r| r.port == 80).unwrap();
    assert_eq!(stalling.kind, RowKind::Stall, "{stalling:?}");
    assert_eq!(stalling.sender_holds, 1);
    // The corking group first: its holds cost the most.
    assert_eq!(rows[0].port, 8080);
}

#[test]
fn a_listener_s_queue_is_added_under_its_owner_serving_its_port() {
    use crate::accept::Listener;
    let l = |port: u16, inode: u32| Listener {
        netns: 1,
        port,
        inode,
        uid: 33,
        queued: 2,
        backlog: 1,
        drops: None,
    };
    let q = AcceptQueue {
        full_us: 250_000,
        full_looks: 1,
        most_queued: 2,
        backlog: 1,
        drops: 3,
    };
    // Its IPv4 and IPv6 listeners on 7777 (inodes 10 and 12), and another on 8080.
    let (a, b, a6) = (l(7777, 10), l(8080, 11), l(7777, 12));
    let judged = [(&a, q), (&b, q), (&a6, q)];
    let owner = |inode: u32| {
        (inode != 11).then(|| crate::procs::Process {
            pid: 7,
            cmd: "python3 srv.py".into(),
            program: "python3 srv.py".into(),
            comm: "python3".into(),
            cgroup: "/".into(),
            container: None,
            service: "python3 srv.py".into(),
            pod: None,
        })
    };
    let (mut window, mut total) = (Board::default(), Board::default());
    // Twice into the total: the looks add up.
    Board::add_accepts(
        [&mut window, &mut total],
        &judged,
        &crate::Filter::default(),
        owner,
    );
    let mut other = Board::default();
    Board::add_accepts(
        [&mut total, &mut other],
        &judged[..1],
        &crate::Filter::default(),
        owner,
    );
    let rows = total.rows(1_000_000);
    let named = rows.iter().find(|r| r.port == 7777).unwrap();
    assert_eq!((named.pid, named.serves, named.uid), (Some(7), true, 33));
    assert_eq!(named.cmd.as_deref(), Some("python3 srv.py"));
    // One look at two listeners of the group is one full look, their drops added; two
    // looks (the second at 7777's first listener alone), two.
    let a = &named.accept_queue;
    assert_eq!((a.full_looks, a.full_us, a.drops), (2, 500_000, 9));
    assert_eq!(
        (a.most_queued, a.backlog),
        (4, 1),
        "the most seen; the last backlog"
    );
    assert_eq!(named.connections, 0, "a listener is no connection");
    // Its owner unknown: its uid names it.
    let unknown = rows.iter().find(|r| r.port == 8080).unwrap();
    assert_eq!((unknown.pid, unknown.uid), (None, 33));
    // The filter keeps only what it asks for.
    let mut only = Board::default();
    let filter = crate::Filter {
        port: Some(8080),
        pid: None,
    };
    Board::add_accepts([&mut only, &mut Board::default()], &judged, &filter, owner);
    let rows = only.rows(1_000_000);
    assert_eq!(rows.iter().map(|r| r.port).collect::<Vec<_>>(), [8080]);
}

//! The receiver's half: the program's own delayed ACKs, made immediate (`TCP_QUICKACK` after
//! every read that returned data) or bounded (`TCP_DELACK_MAX_US` on every TCP socket).

use super::*;

fn shim_with(acks: Acks) -> (Shim, Fake) {
    let s = Shim::new(
        Config {
            acks,
            ..Config::default()
        },
        256,
    );
    let k = Fake::default();
    for fd in [3, 4, 150] {
        s.adopt(&k, fd);
    }
    (s, k)
}

#[test]
fn quickack_is_set_again_after_each_read_that_returned_data() {
    let (s, k) = shim_with(Acks::Quickack);
    let r = s.read_begins(&k, 3);
    assert!(s.read_ends_needed(r), "every read's end sets it");
    s.read_ends(&k, 3, r, true);
    let r = s.read_begins(&k, 3);
    s.read_ends(&k, 3, r, false); // EAGAIN, EOF or an error: nothing to acknowledge
    let r = s.read_begins(&k, 150); // not a TCP socket
    s.read_ends(&k, 150, r, true);
    let r = s.read_begins(&k, 4);
    s.read_ends(&k, 4, r, true);
    assert_eq!(*k.quickacks.borrow(), vec![3, 4]);
    assert_eq!(s.stats.ack_calls.load(Relaxed), 2);
    assert!(k.delack_max.borrow().is_empty());
}

#[test]
fn delack_max_is_set_once_on_every_tcp_socket_the_program_gets() {
    let (s, k) = shim_with(Acks::DelackMaxUs(8000));
    // Its own choice of how to send does not exempt a socket: the bound is the receiver's.
    s.program_holds(&k, 4);
    let r = s.read_begins(&k, 3);
    s.read_ends(&k, 3, r, true);
    assert_eq!(*k.delack_max.borrow(), vec![(3, 8000), (4, 8000)]);
    assert!(k.quickacks.borrow().is_empty());
}

#[test]
fn native_acks_are_left_alone() {
    let (s, k) = shim_with(Acks::Native);
    let r = s.read_begins(&k, 3);
    s.read_ends(&k, 3, r, true);
    assert!(k.quickacks.borrow().is_empty() && k.delack_max.borrow().is_empty());
    assert_eq!(s.stats.ack_calls.load(Relaxed), 0);
}

#[test]
fn the_setting_parses_and_refuses_what_it_cannot_read() {
    assert_eq!(Acks::parse("quickack"), Some(Acks::Quickack));
    assert_eq!(
        Acks::parse("delack-max-us:8000"),
        Some(Acks::DelackMaxUs(8000))
    );
    for bad in [
        "",
        "fast",
        "delack-max-us:",
        "delack-max-us:0",
        "delack-max-us:-1",
        "quickack:1",
    ] {
        assert_eq!(Acks::parse(bad), None, "{bad}");
    }
    let (c, complaints) = Config::from_env(|v| (v == "NAGLESS_ACKS").then(|| "soon".into()));
    assert_eq!(c.acks, Acks::Native);
    assert_eq!(complaints.len(), 1);
}

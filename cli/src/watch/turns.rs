//! The watch's text on whose turn the time was (issue 51): a server's time to answer and a
//! client's wait for its answers, as the rows' turns counted them ([`nagless_watch::waits`]),
//! in the table's last column and in the summary's lines. A server slow to answer is named
//! as such, with its round trip beside it: its own time, not the network's.

use nagless_watch::Row;

use super::table::{port, who};

/// A turn worth naming: this long on average, µs (a server that answers in 20 ms or more).
const NOTABLE_TURN_US: u64 = 20_000;

/// What a row's turns say, when notable: a serving row's mean time to answer, a connecting
/// row's mean wait for an answer (its peer's turn, the round trip included), µs, and the
/// turns.
fn notable(r: &Row) -> Option<(u64, u64)> {
    let w = &r.waits;
    let (mean, n) = if r.serves {
        (w.own_turn_mean_us()?, w.own_turns)
    } else {
        (w.peer_turn_mean_us()?, w.peer_turns)
    };
    (mean >= NOTABLE_TURN_US).then_some((mean, n))
}

/// A row's turns in the table's last column, when [`notable`]: `(answers in 150 ms)` for a
/// server, `(answered in 151 ms)` for a client.
pub(super) fn turns_tag(r: &Row) -> Option<String> {
    let (mean, _) = notable(r)?;
    let verb = if r.serves { "answers" } else { "answered" };
    Some(format!("({verb} in {:.0} ms)", mean as f64 / 1000.0))
}

/// A request held unanswered this long is named, µs.
const OPEN_NOTABLE_US: u64 = 1_000_000;

/// Whether any row has a [`notable`] turn, or a request held unanswered a second or more.
pub(super) fn any_notable(rows: &[Row]) -> bool {
    rows.iter().any(|r| {
        let open = if r.serves {
            r.waits.own_open_us
        } else {
            r.waits.peer_open_us
        };
        notable(r).is_some() || open >= OPEN_NOTABLE_US
    })
}

/// The summary's lines on the rows whose turns were [`notable`]: a server's time to answer,
/// which is its own (not the network's: the round trip is beside it); a client's wait, and
/// whether its peer's time or the path's round trip made it. A row that stalled, held its own
/// writes or lost packets has that time in its turns too, and is told so rather than cleared
/// of it. And a request held unanswered for a second or more (the longest a reading found).
pub(super) fn turn_lines(rows: &[Row], own_netns: u64, out: &mut String) {
    use std::fmt::Write as _;
    for r in rows {
        let w = &r.waits;
        let open = if r.serves {
            w.own_open_us
        } else {
            w.peer_open_us
        };
        let open = (open >= OPEN_NOTABLE_US).then(|| {
            let who = if r.serves { "it held" } else { "it waited on" };
            format!(
                "; {who} a request unanswered for up to {:.1} s",
                open as f64 / 1e6
            )
        });
        let Some((mean_us, n)) = notable(r) else {
            if let Some(open) = open {
                let _ = writeln!(
                    out,
                    "{} {}: no turn ended{open}",
                    who(r, own_netns, usize::MAX),
                    port(r)
                );
            }
            continue;
        };
        let (mean, rtt) = (mean_us as f64 / 1000.0, w.min_rtt_us as f64 / 1000.0);
        let path = if w.min_rtt_us == 0 {
            "the path's round trip not measured".to_owned()
        } else {
            format!("the path's round trip {rtt:.2} ms")
        };
        // Its stalls, holds and losses are in its turns too (a request's tail held by Nagle
        // waits in the client's turn of waiting; an answer's, in the server's).
        let blurred = r.stalls > 0
            || r.ack_released > 0
            || r.sender_holds > 0
            || w.retransmits > 0
            || w.timeouts > 0;
        let whose = if blurred {
            "its stalls, held writes or losses above included: look at those first"
        } else if r.serves {
            "its own time, not the network's nor Nagle's: look at what it does between reading a request and writing its answer"
        } else if w.min_rtt_us == 0 {
            "the peer's time and the path's"
        } else if rtt * 2.0 >= mean {
            "half of it or more the path's round trip: fewer round trips (batching, pipelining) or a nearer peer"
        } else {
            "the peer's own time, not the network's nor Nagle's: look at the server (its row, if it runs here)"
        };
        let what = if r.serves {
            format!(
                "took {mean:.1} ms on average to answer ({n} answer(s), {:.0} ms in all: from a request to its answer), {path}; {whose}",
                w.own_turn_us as f64 / 1000.0
            )
        } else {
            format!(
                "waited {mean:.1} ms on average for each answer ({n} answer(s): from a request to its answer), {path}; {whose}"
            )
        };
        let _ = writeln!(
            out,
            "{} {}: {what}{}",
            who(r, own_netns, usize::MAX),
            port(r),
            open.unwrap_or_default()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagless_watch::waits::Waits;

    fn row(serves: bool, waits: Waits) -> Row {
        Row {
            pid: Some(7),
            cmd: Some("python3 app.py".into()),
            port: 8000,
            serves,
            connections: 1,
            waits,
            ..Row::default()
        }
    }

    #[test]
    fn a_slow_server_is_named_by_its_answers_and_its_clients_by_their_waits() {
        let server = row(
            true,
            Waits {
                own_turn_us: 750_000,
                own_turns: 5,
                peer_turn_us: 4_000_000,
                peer_turns: 4,
                min_rtt_us: 50,
                ..Waits::default()
            },
        );
        let client = row(
            false,
            Waits {
                peer_turn_us: 751_000,
                peer_turns: 5,
                min_rtt_us: 50,
                ..Waits::default()
            },
        );
        let far = row(
            false,
            Waits {
                peer_turn_us: 520_000,
                peer_turns: 5,
                min_rtt_us: 100_000,
                ..Waits::default()
            },
        );
        // A quick server, and a client whose own turns (between an answer and its next
        // request) are long: neither is named.
        let quick = row(
            true,
            Waits {
                own_turn_us: 500,
                own_turns: 5,
                ..Waits::default()
            },
        );
        let idle_client = row(
            false,
            Waits {
                own_turn_us: 9_000_000,
                own_turns: 3,
                peer_turn_us: 300,
                peer_turns: 3,
                ..Waits::default()
            },
        );
        assert_eq!(turns_tag(&server).unwrap(), "(answers in 150 ms)");
        assert_eq!(turns_tag(&client).unwrap(), "(answered in 150 ms)");
        assert_eq!(turns_tag(&quick), None);
        assert_eq!(turns_tag(&idle_client), None);
        assert!(!any_notable(&[quick.clone(), idle_client.clone()]));
        let mut out = String::new();
        turn_lines(&[server, client, far, quick, idle_client], 1, &mut out);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with("7 python3 app.py :8000: took 150.0 ms on average to answer (5 answer(s), 750 ms in all"), "{out}");
        assert!(
            lines[0].contains(
                "the path's round trip 0.05 ms; its own time, not the network's nor Nagle's"
            ),
            "{out}"
        );
        assert!(
            lines[1].starts_with(
                "7 python3 app.py ->:8000: waited 150.2 ms on average for each answer (5 answer(s)"
            ),
            "{out}"
        );
        assert!(lines[1].ends_with("the peer's own time, not the network's nor Nagle's: look at the server (its row, if it runs here)"), "{out}");
        assert!(
            lines[2].contains(
                "the path's round trip 100.00 ms; half of it or more the path's round trip"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_client_that_stalled_is_not_told_its_wait_was_the_server_s() {
        // A request's tail held by Nagle against a delayed ACK: 46 ms a request, in the
        // client's wait.
        let stalled = Row {
            stalls: 5,
            ..row(
                false,
                Waits {
                    peer_turn_us: 230_000,
                    peer_turns: 5,
                    min_rtt_us: 50,
                    ..Waits::default()
                },
            )
        };
        let mut out = String::new();
        turn_lines(&[stalled], 1, &mut out);
        assert!(out.contains("waited 46.0 ms on average"), "{out}");
        assert!(
            out.contains("its stalls, held writes or losses above included: look at those first"),
            "{out}"
        );
        assert!(!out.contains("the peer's own time"), "{out}");
    }

    #[test]
    fn a_round_trip_not_measured_is_not_taken_for_the_path_s() {
        let client = row(
            false,
            Waits {
                peer_turn_us: 500_000,
                peer_turns: 5,
                ..Waits::default()
            },
        );
        let mut out = String::new();
        turn_lines(&[client], 1, &mut out);
        assert!(
            out.ends_with("the path's round trip not measured; the peer's time and the path's\n"),
            "{out}"
        );
    }

    #[test]
    fn a_request_held_unanswered_is_named_before_it_ends() {
        let hung = row(
            true,
            Waits {
                own_open_us: 12_500_000,
                ..Waits::default()
            },
        );
        // A client idle since its last answer holds its own turn: no request of its.
        let idle = row(
            false,
            Waits {
                own_open_us: 60_000_000,
                ..Waits::default()
            },
        );
        assert!(any_notable(std::slice::from_ref(&hung)));
        assert!(!any_notable(std::slice::from_ref(&idle)));
        let mut out = String::new();
        turn_lines(&[hung, idle], 1, &mut out);
        assert_eq!(
            out,
            "7 python3 app.py :8000: no turn ended; it held a request unanswered for up to 12.5 s\n"
        );
    }
}

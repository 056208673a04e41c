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

/// Whether any row has a [`notable`] turn.
pub(super) fn any_notable(rows: &[Row]) -> bool {
    rows.iter().any(|r| notable(r).is_some())
}

/// The summary's lines on the rows whose turns were [`notable`]: a server's time to answer,
/// which is its own (not the network's: the round trip is beside it); a client's wait, and
/// whether its peer's time or the path's round trip made it.
pub(super) fn turn_lines(rows: &[Row], own_netns: u64, out: &mut String) {
    use std::fmt::Write as _;
    for r in rows {
        let Some((mean_us, n)) = notable(r) else {
            continue;
        };
        let (mean, rtt) = (mean_us as f64 / 1000.0, r.waits.rtt_us as f64 / 1000.0);
        let what = if r.serves {
            format!(
                "took {mean:.1} ms on average to answer ({n} answer(s), {:.0} ms in all: from its last read of a request to its first write of the answer); its own time, not the network's (round trip {rtt:.1} ms) nor Nagle's: look at what it does between reading a request and writing its answer",
                r.waits.own_turn_us as f64 / 1000.0
            )
        } else {
            let whose = if rtt * 2.0 >= mean {
                "most of it the path's round trip: fewer round trips (batching, pipelining) or a nearer peer"
            } else {
                "the peer's own time, not the network's nor Nagle's: look at the server (its row, if it runs here)"
            };
            format!(
                "waited {mean:.1} ms on average for each answer ({n} answer(s): from its last write of a request to its first read of the answer), of which the round trip is {rtt:.1} ms; {whose}"
            )
        };
        let _ = writeln!(out, "{} {}: {what}", who(r, own_netns, usize::MAX), port(r));
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
                rtt_us: 50,
                ..Waits::default()
            },
        );
        let client = row(
            false,
            Waits {
                peer_turn_us: 751_000,
                peer_turns: 5,
                rtt_us: 50,
                ..Waits::default()
            },
        );
        let far = row(
            false,
            Waits {
                peer_turn_us: 520_000,
                peer_turns: 5,
                rtt_us: 100_000,
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
            lines[0].contains("its own time, not the network's (round trip 0.1 ms)"),
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
            lines[2]
                .contains("of which the round trip is 100.0 ms; most of it the path's round trip"),
            "{out}"
        );
    }
}

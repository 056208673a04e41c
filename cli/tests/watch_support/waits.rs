//! The waits a watch must name under either backend, each made here and judged from the
//! watch's summary: a reader that stops, a server that thinks (alone, and behind a pooled
//! connection), short connections held back, a small buffer on a lossy path. Each backend's
//! test file runs them with its own backend.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{json_lines, wait_ready, watch_by, Started};

/// The last summary of a watch that ended with `code` and saw no stall (exit 0).
fn quiet_summary(lines: &[serde_json::Value], code: Option<i32>) -> &serde_json::Value {
    let summary = lines.iter().rev().find(|l| l["type"] == "summary").unwrap();
    assert_eq!(code, Some(0), "no stall: {summary}");
    summary
}

/// The row of `summary` for `pid`'s connections on `port`, serving it or connecting to it.
fn row_of(summary: &serde_json::Value, pid: u32, port: u16, serves: bool) -> serde_json::Value {
    summary["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == pid && r["serves"] == serves && r["port"] == port)
        .unwrap_or_else(|| {
            panic!(
                "no row of {pid} serving {serves} on {port} ({}): {summary}",
                summary["backend"]
            )
        })
        .clone()
}

/// The summary row of this process's connections to `port` once watch `w` ended, which saw
/// no stall (exit 0).
fn senders_row(w: Child, port: u16) -> serde_json::Value {
    let (lines, code) = json_lines(w);
    row_of(quiet_summary(&lines, code), std::process::id(), port, false)
}

/// Issue 51's honest negative, live, under either backend: a reader that stops reading for 1.5 s holds its
/// sender back by its receive window. No stall, so the exit status stays 0; the sender's
/// row carries the time the kernel counted as limited by the peer's window (most of the
/// 1.5 s), and the summary names it, on the sender's process and port.
/// Under `backend` (the caller holds the machine).
pub fn a_reader_that_stops(backend: &str) {
    use std::io::{Read, Write};
    // A small receive buffer, set before the handshake (no autotuning then).
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(65536).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    s.listen(1).unwrap();
    let listener: TcpListener = s.into();
    let port = listener.local_addr().unwrap().port();
    let reader = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let mut v = Vec::new();
        c.read_to_end(&mut v).unwrap();
        v.len()
    });
    let mut w = watch_by(backend, Some(port), 3.5);
    wait_ready(&mut w);
    std::thread::sleep(Duration::from_millis(300));
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(&vec![9u8; 16 << 20]).unwrap();
    drop(c);
    assert_eq!(reader.join().unwrap(), 16 << 20);
    let sender = senders_row(w, port);
    let rwnd = sender["waits"]["rwnd_limited_us"].as_u64().unwrap();
    let busy = sender["waits"]["busy_us"].as_u64().unwrap();
    assert!(rwnd >= 700_000 && busy >= rwnd, "{sender}");
    // The closed window was probed (the kernel's count in a row, which sampling reads at
    // every lookup; the eBPF backend's walks are spaced by their cost, and may come after
    // the window opened again).
    if backend == "sampling" {
        assert!(sender["waits"]["probes"].as_u64() >= Some(1), "{sender}");
    }
    assert_eq!(sender["stalls"], 0, "{sender}");
    // Bytes a shut or narrow window held back are the reader's doing, not a cork.
    assert_eq!(sender["sender_holds"], 0, "{sender}");
}

/// Issue 51's think time, live, under `backend`: a server that takes 150 ms to answer each of
/// five requests, on a connection made while watching. The server's row (its process, its
/// port, serving) carries its own turns: under eBPF all five, under sampling most (those its
/// looks saw), each about 150 ms; the client's row carries the same as its peer's turns, with
/// a round trip of a small part of it; and no stall (exit 0). A server that answers at once
/// has turns of a few ms at most. The caller holds the machine.
pub fn a_server_that_thinks(backend: &str) {
    use std::io::{Read, Write};
    const ROUNDS: u64 = 5;
    for think_ms in [150u64, 0] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut w = watch_by(backend, Some(port), 2.5);
        wait_ready(&mut w);
        // (A listing or a walk before the connection: it is made while watching.)
        std::thread::sleep(Duration::from_millis(300));
        let srv = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let mut q = [0u8; 10];
            for _ in 0..ROUNDS {
                s.read_exact(&mut q).unwrap();
                std::thread::sleep(Duration::from_millis(think_ms));
                s.write_all(&[b'a'; 20]).unwrap();
            }
            (s, l)
        });
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_nodelay(true).unwrap();
        let mut a = [0u8; 20];
        for _ in 0..ROUNDS {
            c.write_all(&[b'q'; 10]).unwrap();
            c.read_exact(&mut a).unwrap();
        }
        // Both ends open until the watch ends.
        let (lines, code) = json_lines(w);
        drop((srv.join().unwrap(), c));
        let summary = quiet_summary(&lines, code);
        let row = |serves| row_of(summary, std::process::id(), port, serves);
        let (server, client) = (row(true), row(false));
        let turns = |r: &serde_json::Value, side: &str| {
            let w = &r["waits"];
            let n = w[format!("{side}_turns")].as_u64().unwrap_or(0);
            let ms = w[format!("{side}_turn_us")].as_u64().unwrap_or(0) as f64 / 1000.0;
            (n, ms)
        };
        let (answers, answering_ms) = turns(&server, "own");
        let (waits, waiting_ms) = turns(&client, "peer");
        eprintln!(
            "{backend}, think {think_ms} ms: server {answers} turns, {answering_ms:.1} ms; client waited {waits} turns, {waiting_ms:.1} ms; least round trip {} µs",
            client["waits"]["min_rtt_us"]
        );
        if think_ms == 0 {
            // Every turn under eBPF; those sampling saw, if any; all short.
            if backend == "ebpf" {
                assert_eq!((answers, waits), (ROUNDS, ROUNDS), "{server}\n{client}");
            }
            for (n, ms) in [(answers, answering_ms), (waits, waiting_ms)] {
                assert!(ms <= n.max(1) as f64 * 15.0, "{server}\n{client}");
            }
            continue;
        }
        if backend == "ebpf" {
            // Every turn: five answers, each after its 150 ms.
            assert_eq!(answers, ROUNDS, "{server}");
            assert_eq!(waits, ROUNDS, "{client}");
            assert!(answering_ms >= (ROUNDS * think_ms) as f64, "{server}");
            assert!(waiting_ms >= answering_ms, "{client}\n{server}");
        } else {
            // Looked at every 2 ms while in use: most turns, and most of their time.
            assert!(answers >= 3 && waits >= 3, "{server}\n{client}");
            let most = (ROUNDS * think_ms) as f64 * 0.6;
            assert!(
                answering_ms >= most && waiting_ms >= most,
                "{server}\n{client}"
            );
        }
        // Each turn about the 150 ms (a few of the kernel's 4 ms ticks off under sampling,
        // which reads its times in ticks), and not the round trip's.
        for (n, ms) in [(answers, answering_ms), (waits, waiting_ms)] {
            let mean = ms / n as f64;
            assert!(
                (think_ms as f64 * 0.8..think_ms as f64 * 2.0).contains(&mean),
                "{mean} ms a turn: {server}\n{client}"
            );
        }
        let rtt_ms = client["waits"]["min_rtt_us"].as_u64().unwrap() as f64 / 1000.0;
        assert!(rtt_ms < think_ms as f64 / 10.0, "{client}");
        // No request held open longer than its answer took.
        let open_ms = server["waits"]["own_open_us"].as_u64().unwrap() as f64 / 1000.0;
        assert!(open_ms < think_ms as f64 * 2.0, "{server}");
    }
}

/// Issue 51's think time on a connection made before the watch began (a pooled one), under
/// `backend`: one exchange before the watch, then 24 answers 150 ms each (3.6 s). Under eBPF
/// every answer after the programs came is counted; sampling, which looks at every connection
/// again once in 2 s (when within them is drawn per connection), finds it in use and follows
/// it: at least one answer, about 150 ms. (With sixteen answers, 2.4 s, a look drawn late in
/// its 2 s came after the last answer on a loaded CI run: 0 turns; here runs counted 3-16.)
/// The caller holds the machine.
pub fn a_pooled_connection_s_server_that_thinks(backend: &str) {
    use std::io::{Read, Write};
    const ROUNDS: u64 = 24;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_nodelay(true).unwrap();
    let (mut s, _) = l.accept().unwrap();
    s.set_nodelay(true).unwrap();
    let (mut q, mut a) = ([0u8; 10], [0u8; 20]);
    c.write_all(&q).unwrap();
    s.read_exact(&mut q).unwrap();
    s.write_all(&a).unwrap();
    c.read_exact(&mut a).unwrap();
    let mut w = watch_by(backend, Some(port), 4.8);
    wait_ready(&mut w);
    std::thread::sleep(Duration::from_millis(300));
    let srv = std::thread::spawn(move || {
        let mut q = [0u8; 10];
        for _ in 0..ROUNDS {
            s.read_exact(&mut q).unwrap();
            std::thread::sleep(Duration::from_millis(150));
            s.write_all(&[b'a'; 20]).unwrap();
        }
        (s, l)
    });
    for _ in 0..ROUNDS {
        c.write_all(&[b'q'; 10]).unwrap();
        c.read_exact(&mut a).unwrap();
    }
    let (lines, code) = json_lines(w);
    drop((srv.join().unwrap(), c));
    let server = row_of(quiet_summary(&lines, code), std::process::id(), port, true);
    let answers = server["waits"]["own_turns"].as_u64().unwrap_or(0);
    let ms = server["waits"]["own_turn_us"].as_u64().unwrap_or(0) as f64 / 1000.0;
    eprintln!("{backend}, pooled: server {answers} turns, {ms:.1} ms");
    let least = if backend == "ebpf" { ROUNDS } else { 1 };
    assert!(answers >= least, "{server}");
    let mean = ms / answers as f64;
    assert!((120.0..300.0).contains(&mean), "{mean} ms a turn: {server}");
}

/// Issue 51's waits for connections that live less than a refresh, under eBPF
/// (sampling sees a socket only when a listing finds it: 300 of the 800 ms, measured once):
/// eight in turn, each held back 100 ms by a reader that waits before it reads a
/// megabyte through a 64 KB buffer, answers one byte, and is closed at once. The sender's row
/// carries most of the 0.8 s its peers' windows held it back, though no connection outlived a
/// refresh: under eBPF the counts of a socket closed between two walks come from the moment
/// its program closed it (a walk reads only the files processes hold). The caller holds the
/// machine.
pub fn short_connections_held_back(backend: &str) {
    use std::io::{Read, Write};
    const CONNECTIONS: usize = 8;
    const SIZE: usize = 1 << 20;
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(65536).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    s.listen(CONNECTIONS as i32).unwrap();
    let listener: TcpListener = s.into();
    let port = listener.local_addr().unwrap().port();
    let reader = std::thread::spawn(move || {
        for _ in 0..CONNECTIONS {
            let (mut c, _) = listener.accept().unwrap();
            std::thread::sleep(Duration::from_millis(100));
            let mut v = vec![0u8; SIZE];
            c.read_exact(&mut v).unwrap();
            c.write_all(b"k").unwrap();
        }
    });
    let mut w = watch_by(backend, Some(port), 3.0);
    wait_ready(&mut w);
    std::thread::sleep(Duration::from_millis(300));
    let started = std::time::Instant::now();
    for _ in 0..CONNECTIONS {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(&vec![7u8; SIZE]).unwrap();
        let mut k = [0u8; 1];
        c.read_exact(&mut k).unwrap();
    }
    let took = started.elapsed();
    reader.join().unwrap();
    let sender = senders_row(w, port);
    let rwnd = sender["waits"]["rwnd_limited_us"].as_u64().unwrap();
    eprintln!(
        "{backend}: {CONNECTIONS} connections in {took:?}, {} ms held back by the windows",
        rwnd / 1000
    );
    // Each waited about 100 ms (the reader's sleep, less the first window's worth):
    // three fifths of it, where a backend that loses what it read last gets a quarter or so.
    assert!(rwnd >= 480_000, "{backend}: {sender}");
    assert_eq!(sender["stalls"], 0, "{sender}");
    assert_eq!(sender["sender_holds"], 0, "{sender}");
}

/// Issue 51's path causes, live, under either backend: a program in a network namespace of
/// its own (as in a container) sends 1 MB through a 16 KB send buffer across an emulated
/// 40 ms path that loses two of its segments. Its row, on its process and the server's port,
/// carries the time it had nothing to send because that buffer, full of data in flight, was
/// too small for the path (0.4 s of 1.1 s busy here, under both backends), and the segments
/// it sent again. Then one byte more, which the path loses five times in a row (its tail
/// loss probe, then four retransmission timeouts' copies): each timeout doubles the wait
/// before the next, and the row says how far the backoff went (3 or more: the third
/// timeout's state lasts about 1.9 s, longer than the eBPF backend's walks are apart; the
/// fourth's only until the last copy's ACK comes, a round trip). No stall, so the exit status stays 0. The caller holds the machine;
/// `false` if the path could not be made (skipped).
pub fn a_small_buffer_on_a_lossy_path(backend: &str) -> bool {
    use nagless_netpath::{EmulatedPath, PathSpec, Toward};
    use std::io::BufRead;
    let spec = PathSpec {
        rtt: Duration::from_millis(40),
        ..PathSpec::default()
    };
    let p = match EmulatedPath::new(&spec) {
        Ok(p) => p,
        Err(e) => {
            nagless_test_support::skip(&format!("cannot make an emulated path: {e}"));
            return false;
        }
    };
    let (cns, sns) = p.namespaces();
    let server = p.server_addr();
    let port = 8100;
    let python_in = |ns: &str, code: String| {
        Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", &code])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    };
    let first_line = |c: &mut Child| {
        let mut line = String::new();
        let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        c.stdout = Some(out.into_inner());
        line
    };
    let mut w = watch_by(backend, Some(port), 10.0);
    wait_ready(&mut w);
    // (`ip netns exec` execs python: the child's pid is python's.)
    let mut sink = Started(python_in(
        sns,
        format!(
            "import socket\nl = socket.socket()\nl.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             l.bind(('{server}', {port}))\nl.listen()\nprint('ready', flush=True)\nc, _ = l.accept()\n\
             while c.recv(65536):\n    pass\n"
        ),
    ));
    assert_eq!(first_line(&mut sink.0).trim(), "ready");
    let mut sender = Started(python_in(
        cns,
        format!(
            "import socket, sys, time\ns = socket.socket()\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)\n\
             s.connect(('{server}', {port}))\nprint('connected', flush=True)\n\
             s.sendall(b'x' * (1 << 20))\ntime.sleep(0.5)\nprint('sent', flush=True)\n\
             sys.stdin.readline()\ns.send(b'y')\ntime.sleep(5.0)\n"
        ),
    ));
    assert_eq!(first_line(&mut sender.0).trim(), "connected");
    let pid = sender.0.id();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(400));
        p.lose_next_data(Toward::Server);
    }
    // Its megabyte sent (and acknowledged, half a second later): the byte's first five
    // copies are lost.
    assert_eq!(first_line(&mut sender.0).trim(), "sent");
    let lost_before = p.stats().lost;
    for _ in 0..5 {
        p.lose_next_data(Toward::Server);
    }
    std::io::Write::write_all(&mut sender.0.stdin.take().unwrap(), b"go\n").unwrap();
    assert!(sender.0.wait().unwrap().success());
    assert_eq!(p.stats().lost, lost_before + 5, "{:?}", p.stats());
    let (lines, code) = json_lines(w);
    let row = row_of(quiet_summary(&lines, code), pid, port, false);
    let waits = &row["waits"];
    let sndbuf = waits["sndbuf_limited_us"].as_u64().unwrap_or(0);
    let retransmits = waits["retransmits"].as_u64().unwrap_or(0);
    // (0.40-0.44 s here when idle. A loaded machine's sender refills its buffer late, and
    // the kernel counts that time as the program's, not the buffer's: a tenth of a second
    // still tells a build that counts it from one that does not.)
    assert!(sndbuf >= 100_000, "the send buffer ({backend}): {row}");
    assert!(retransmits >= 6, "the losses ({backend}): {row}");
    let (timeouts, backoff) = (waits["timeouts"].as_u64(), waits["backoff"].as_u64());
    assert!(
        timeouts >= Some(3) && backoff >= Some(3),
        "the byte's timeouts ({backend}): {row}"
    );
    assert!(
        p.stats().lost >= 1,
        "the path lost nothing: {:?}",
        p.stats()
    );
    assert_eq!(row["stalls"], 0, "{row}");
    true
}

/// The acceptor's stall, live, under `backend`: a listener with a backlog of 1 whose program
/// accepts nothing for 2 s while six clients connect. Its queue fills (two connections wait
/// in it), the kernel drops the other clients' SYNs, and they connect only when a SYN sent
/// again finds room (1 s after the first, then 3 s). The listener's row (this process, its port,
/// serving) names its full queue: the looks that saw it full, the connections in it, its
/// backlog and the handshake packets dropped; and no stall (exit 0). The caller holds the
/// machine.
pub fn a_listener_that_accepts_too_slowly(backend: &str) {
    const CLIENTS: usize = 6;
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    s.listen(1).unwrap();
    let listener: TcpListener = s.into();
    let addr = listener.local_addr().unwrap();
    let mut w = watch_by(backend, Some(addr.port()), 5.0);
    wait_ready(&mut w);
    // (A look before the connects: the drops' baseline.)
    std::thread::sleep(Duration::from_millis(400));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                let c = TcpStream::connect_timeout(&addr, Duration::from_secs(10));
                (c.map(drop), t.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let acceptor = std::thread::spawn(move || {
        (0..CLIENTS)
            .map(|_| listener.accept().map(drop))
            .collect::<Vec<_>>()
    });
    let waited: Vec<Duration> = clients
        .into_iter()
        .map(|c| {
            let (r, t) = c.join().unwrap();
            r.unwrap();
            t
        })
        .collect();
    assert!(acceptor.join().unwrap().iter().all(Result::is_ok));
    // What the watch must name: connects that waited for their SYN's timer.
    assert!(
        waited.iter().any(|t| *t >= Duration::from_millis(900)),
        "connects: {waited:?}"
    );
    let (lines, code) = json_lines(w);
    let row = row_of(
        quiet_summary(&lines, code),
        std::process::id(),
        addr.port(),
        true,
    );
    let q = &row["accept_queue"];
    assert!(
        q["full_looks"].as_u64() >= Some(1)
            && q["full_us"].as_u64() >= Some(100_000)
            && q["drops"].as_u64() >= Some(1)
            && q["most_queued"].as_u64() >= Some(2)
            && q["backlog"] == 1,
        "{row}"
    );
    assert_eq!(row["stalls"], 0, "{row}");
}

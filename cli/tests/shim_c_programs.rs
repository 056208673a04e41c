//! The preloaded shim on our own C programs (`tests/c/`, built here with gcc): a client and
//! server that write twice and read (`wwr`), an epoll echo server, and `shim_cases`, one
//! mode per case (threads, forks, signals, the program's own cork, splice, closes unseen,
//! every wait, in 64- and 32-bit programs). Loopback only; every program started here is
//! stopped here, by its PID.
#![allow(clippy::disallowed_methods)] // tests measure real time

use nagless_test_support as common;

mod shim_support;
use shim_support::{c_program, compile_c, fields, shim_case, stats_lines, with_shim, ShimCases};

// `exclusive()`, held by each test while it runs: these tests time real programs and count
// their segments, and must not share the two CPUs with each other when `cargo test` runs
// them in parallel (`./scripts/test` runs those that time or count alone: docs/testing.md).
use common::{exclusive, Started};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn run_wwr(rounds: u32, mode: Option<&str>) -> (HashMap<String, i64>, String) {
    let mut cmd = Command::new(c_program("wwr"));
    cmd.arg(rounds.to_string());
    if let Some(m) = mode {
        with_shim(&mut cmd, m);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    assert!(status.success());
    let out = String::from_utf8_lossy(&stdout).into_owned();
    (fields(&out), String::from_utf8_lossy(&stderr).into_owned())
}

fn start_echo(mode: Option<&str>) -> (Started, u16) {
    let mut cmd = Command::new(c_program("echo_epoll"));
    cmd.arg("2").stdout(Stdio::piped()).stderr(Stdio::null());
    if let Some(m) = mode {
        with_shim(&mut cmd, m);
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = fields(&line)["port"] as u16;
    (Started(child), port)
}

/// A tiny deterministic generator (xorshift) for message sizes and contents.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn epoll_echo_server_under_the_shim_loses_and_reorders_nothing() {
    let _one = exclusive();
    let (_server, port) = start_echo(Some("nagless"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let clients: Vec<_> = (0..100u64)
        .map(|id| {
            std::thread::spawn(move || -> (u64, u64) {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut rng = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let (mut sent, mut sum) = (0u64, 0u64);
                let mut back = vec![0u8; 16 * 1024];
                // Bounded in count and time.
                for _ in 0..1_000_000 {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let len = (xorshift(&mut rng) % 16_000) as usize + 1;
                    let msg: Vec<u8> = (0..len).map(|_| xorshift(&mut rng) as u8).collect();
                    s.write_all(&msg).unwrap();
                    s.read_exact(&mut back[..len]).unwrap();
                    assert_eq!(&back[..len], &msg[..], "client {id}: echo differs");
                    sent += len as u64;
                    sum = msg
                        .iter()
                        .fold(sum, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
                }
                (sent, sum)
            })
        })
        .collect();
    let mut total = 0;
    for c in clients {
        let (sent, _checksum) = c.join().expect("a client failed");
        assert!(sent > 0);
        total += sent;
    }
    eprintln!("echoed {total} bytes over 100 connections in 10 s");
}

/// Accepts `n` connections on `listener` and returns, for each, the first message and how
/// long after the accept it arrived.
fn first_messages(listener: &std::net::TcpListener, n: usize) -> Vec<(String, Duration)> {
    listener.set_nonblocking(false).unwrap();
    (0..n)
        .map(|_| {
            let (mut s, _) = listener.accept().unwrap();
            let t = Instant::now();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 16];
            let k = s.read(&mut buf).unwrap();
            (String::from_utf8_lossy(&buf[..k]).into_owned(), t.elapsed())
        })
        .collect()
}

#[test]
fn the_flusher_never_takes_a_signal_the_program_blocked() {
    let _one = exclusive();
    let r = shim_case(&["sigwait"], &[]).fields();
    assert_eq!(r["signal"], 10, "SIGUSR1 went to the flusher thread");
}

#[test]
fn a_program_that_corks_its_own_socket_is_left_alone() {
    let _one = exclusive();
    let r = shim_case(&["selfcork"], &[]).fields();
    assert_eq!(
        r["segs"], 1,
        "the shim uncorked the program's own cork at its poll"
    );
}

#[test]
fn connections_of_a_listener_the_program_corked_are_left_alone() {
    let _one = exclusive();
    let r = shim_case(&["corklistener"], &[]).fields();
    assert_eq!(
        r["segs"], 1,
        "the shim uncorked a connection that inherited the program's cork from its listener"
    );
}

#[test]
fn a_socket_closed_by_a_raw_syscall_is_forgotten_at_its_close() {
    let _one = exclusive();
    // libuv (node) closes with syscall(SYS_close): the shim must see it there, not trust the
    // number's old slot once a pipe reuses it.
    let run = shim_case(&["rawclose"], &[]);
    let stderr = &run.stderr;
    assert_eq!(
        run.fields()["reused"],
        1,
        "the pipe did not reuse the number"
    );
    let stats = run.stats();
    assert_eq!(stats.len(), 1, "{stderr}");
    // The closed socket's one data segment is counted when it closes; a stale slot would be
    // counted at exit on the pipe (no TCP_INFO there: nothing).
    assert_eq!(stats[0]["data"], 1, "{stderr}");
}

#[test]
fn a_socket_closed_inside_libc_and_reused_by_a_pipe_still_writes_as_a_pipe() {
    let _one = exclusive();
    // fclose of an fdopen stream closes inside libc, unseen; the learned shape of the old
    // socket would have its next write made as send(MSG_MORE), which a pipe refuses.
    let log = std::env::temp_dir().join(format!("nagless-stale-{}.log", std::process::id()));
    let run = shim_case(&["stale"], &[("NAGLESS_LOG", log.to_str().unwrap())]);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let r = run.fields();
    assert_eq!(r["reused"], 1, "the pipe did not reuse the number: {r:?}");
    assert_eq!(
        r["whole"], 1,
        "a write to the pipe failed or was cut: {r:?}"
    );
    // The path under test was taken: the pipe met the shim's send(MSG_MORE).
    assert!(
        text.contains("no socket any more"),
        "the stale slot was not found by its write: {text}"
    );
}

#[test]
fn an_empty_last_write_sends_the_burst_it_completes() {
    let _one = exclusive();
    // A 0-byte write queues nothing and so pushes nothing: the header held by MSG_MORE
    // before it must still leave at once, not at the (here 100 ms) linger bound.
    let r = shim_case(&["emptylast"], &[("NAGLESS_LINGER_US", "100000")]).fields();
    assert_eq!(
        r["arrived"], 1,
        "the header waited for the linger bound: {r:?}"
    );
}

/// The shim built for 32-bit x86, if this machine can (Rust's i686 target, gcc -m32), and
/// `shim_cases` built as a 32-bit program with 64-bit time.
fn shim_cases_32() -> Option<ShimCases> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("i686");
    let cases = dir.join("shim_cases");
    std::fs::create_dir_all(&dir).unwrap();
    let gcc = compile_c(
        "shim_cases",
        &cases,
        &["-m32", "-D_TIME_BITS=64", "-D_FILE_OFFSET_BITS=64"],
    );
    if !gcc.status.success() {
        // gcc-multilib is a Debian package ./scripts/test installs: as for other tools, a
        // failure under CI.
        common::skip(&format!(
            "gcc -m32 did not build shim_cases.c (is gcc-multilib installed?): {}",
            String::from_utf8_lossy(&gcc.stderr)
        ));
        return None;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["build", "--quiet", "--offline", "-p", "nagless-preload"])
        .args(["--target", "i686-unknown-linux-gnu", "--target-dir"])
        .arg(dir.join("target"))
        .output()
        .expect("cargo");
    if !build.status.success() {
        // Rust's i686 standard library comes from rustup's servers, not a package registry:
        // its absence skips the 32-bit half even under CI (scripts/test warns).
        eprintln!(
            "skipped: no i686 build of the shim (rustup target add i686-unknown-linux-gnu): {}",
            String::from_utf8_lossy(&build.stderr)
        );
        return None;
    }
    let shim = dir.join("target/i686-unknown-linux-gnu/debug/libnagless_preload.so");
    Some(ShimCases {
        shim,
        program: cases,
    })
}

/// Runs `shim_cases waits` with a 100 ms linger bound and checks that each wait of its writer
/// sent the held byte at once, while the control (no wait) kept it held.
fn check_waits(cases: &ShimCases) {
    let r = cases
        .run(&["waits"], &[("NAGLESS_LINGER_US", "100000")])
        .fields();
    assert_eq!(
        r["none_held"], 1,
        "without a wait the byte must be held: {r:?}"
    );
    for wait in [
        "ppoll",
        "select",
        "pselect",
        "epoll_pwait2",
        "nanosleep",
        "clock_nanosleep",
        "sigtimedwait",
        "wait4",
        "recvmsg",
        "recvmmsg",
    ] {
        // Released at the wait: a few ms at most (the sleeps last 1 ms); unseen, the byte
        // waits out the 100 ms bound.
        assert!(
            (0..50).contains(&r[wait]),
            "{wait} did not end the writer's burst ({} ms): {r:?}",
            r[wait]
        );
    }
}

#[test]
fn a_select_on_sets_sized_by_nfds_is_probed_within_them() {
    let _one = exclusive();
    // A read set of 8 bytes ending where an unmapped page begins, a burst held and the
    // descriptor ready: the probe that tells whether select would block must touch only the
    // bytes select itself does (a copy of a whole fd_set faulted past the page).
    let run = shim_case(&["shortset"], &[]);
    let stderr = &run.stderr;
    let r = run.fields();
    assert_eq!((r["ready"], r["isset"]), (1, 1), "{r:?}");
    let ready: u64 = run.stats().iter().map(|s| s["ready"]).sum();
    assert!(ready >= 1, "the probe found the descriptor ready: {stderr}");
}

/// A 32-bit program under the 64-bit shim `nagless` carries is refused with the fix (exit 2),
/// not started with the loader's "wrong ELF class" error on its stderr and no shim.
#[test]
fn a_program_built_for_another_machine_is_refused_with_the_fix() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("m32-refused");
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("shim_cases");
    let gcc = compile_c("shim_cases", &program, &["-m32"]);
    if !gcc.status.success() {
        common::skip(&format!(
            "gcc -m32 did not build shim_cases.c (is gcc-multilib installed?): {}",
            String::from_utf8_lossy(&gcc.stderr)
        ));
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_nagless"))
        .args(["run", "--"])
        .arg(&program)
        .env_remove("NAGLESS_PRELOAD")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is built for 32-bit x86 and the shim")
            && stderr.contains("NAGLESS_PRELOAD"),
        "{stderr}"
    );
    assert!(!stderr.contains("ld.so"), "{stderr}");
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn c_write_write_read_stalls_plain_and_not_under_the_shim() {
        let _one = exclusive();
        let (plain, _) = run_wwr(30, None);
        assert!(plain["stalled"] >= 15, "unshimmed: {plain:?}");

        let (ours, stderr) = run_wwr(30, Some("nagless"));
        // No stall: the median round far below one, and at most a round or two (a busy
        // machine's, not most as natively) as long as one.
        assert!(ours["stalled"] <= 2, "{ours:?}");
        assert!(ours["median_us"] < 15_000, "{ours:?}");
        // Both processes (client and forked server): one segment per burst, two writes per
        // round. A process descheduled past the 1 ms linger bound between its two writes has
        // that burst released early, which makes it two bursts: a few such rounds on a busy
        // machine, never most of them. The forked server has no flusher until its first burst's
        // second write, so that burst's first write leaves alone: one segment more, once
        // (docs/shim.md, "Forked children").
        let stats = stats_lines(&stderr);
        assert_eq!(stats.len(), 2, "{stderr}");
        let released: i64 = stats.iter().map(|s| s["released"] as i64).sum();
        for s in &stats {
            assert_eq!(s["writes"], 60, "{s:?}");
            assert!(
                (s["bursts"]..=s["bursts"] + 1).contains(&s["data"]),
                "one segment per burst (a forked child's first, two): {s:?}"
            );
            assert!((30..=30 + s["released"]).contains(&s["bursts"]), "{s:?}");
            assert!(s["released"] <= 6, "{s:?}");
            // After three rounds the shape (two writes, then a read) is learned: from then on
            // the second write sends the burst itself, before the read.
            assert!(s["sent"] + 3 + 2 * s["released"] >= 30, "{s:?}");
            // A burst of the learned shape is held by MSG_MORE on its first write and sent by
            // its plain second one: no setsockopt. The others cork and uncork (a linger release
            // of a MSG_MORE burst is one uncork); two to spare. Before, two per burst: 60.
            assert!(
                s["TCP_CORK"] <= 2 * (30 - s["sent"]) + 2 * s["released"] + 2,
                "TCP_CORK calls beyond the bursts not sent at their shape: {s:?}"
            );
        }
        assert!(
            (30..=30 + released).contains(&ours["client_segs"]),
            "one data segment per request: {ours:?}"
        );
    }

    #[test]
    fn nodelay_mode_sends_a_segment_per_write() {
        let _one = exclusive();
        let (r, _) = run_wwr(20, Some("nodelay"));
        assert_eq!(r["stalled"], 0);
        assert_eq!(r["client_segs"], 40);
    }

    #[test]
    fn another_threads_poll_does_not_split_a_burst() {
        let _one = exclusive();
        // The writer's three writes span ~0.4 ms while another thread polls every 0.1 ms. A
        // process-wide release on poll split almost every response (two or three segments
        // each); per-thread bursts keep one segment per response (a writer descheduled past the
        // 1 ms bound sends early: a few percent, more on a busy machine; allow half as many
        // again).
        let r = shim_case(&["threads"], &[]).fields();
        let (responses, segs) = (r["responses"], r["segs"]);
        assert!(
            segs >= responses && segs * 2 <= responses * 3,
            "{segs} data segments for {responses} responses"
        );
    }

    #[test]
    fn the_linger_bound_holds_in_forked_and_daemonized_children() {
        let _one = exclusive();
        // Each process sends one message and then stays busy with no syscall for 400 ms: only
        // its own flusher can release the burst, in ~1 ms. Without one the kernel's cork timer
        // (~200 ms) would: the bound splits the two with room for a busy machine's delays.
        for mode in ["fork", "daemon"] {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port().to_string();
            let mut child = ShimCases::native()
                .command(&[mode, &port])
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let got = first_messages(&listener, 2);
            let status = child.wait().unwrap();
            assert!(status.success(), "{mode}: {status}");
            let second = if mode == "fork" { "child" } else { "daemon" };
            assert_eq!(got[0].0, "parent", "{got:?}");
            assert_eq!(got[1].0, second, "{got:?}");
            for (who, delay) in &got {
                assert!(
                    *delay < Duration::from_millis(150),
                    "{mode}: {who} held {delay:?}"
                );
            }
        }
    }

    #[test]
    fn a_body_spliced_into_the_socket_is_part_of_the_burst() {
        let _one = exclusive();
        // A 100 ms linger bound: a writer descheduled between the splice and the write (a busy
        // machine) must not split the burst; nothing else ends it before the bound.
        let r = shim_case(&["splice"], &[("NAGLESS_LINGER_US", "100000")]).fields();
        assert_eq!(
            r["segs"], 1,
            "the spliced body left before the trailer written after it"
        );
    }

    #[test]
    fn a_tail_held_by_msg_more_leaves_within_the_linger_bound_however_its_writer_ends() {
        let _one = exclusive();
        // A socket's bursts are a header and a body; then a header alone, held by the shim's
        // MSG_MORE, whose body never comes. Whatever its writer does next, the header must leave
        // within the linger bound (1 ms; 100 ms allowed for a loaded machine), never at the
        // kernel's ~200 ms probe timer (a forked child leaving by _exit took 211 ms before the
        // shim hooked _exit).
        for ending in ["sleep", "thread", "exit", "handoff"] {
            let run = shim_case(&["tail", ending], &[]);
            let stderr = &run.stderr;
            let us = run.fields()["us"];
            assert!(
                (0..100_000).contains(&us),
                "{ending}: the header arrived after {us} us"
            );
            // The shape was learned (the test process's own counters; a child's die with them),
            // so the lone header is a burst the shim holds by MSG_MORE. The `exit` ending is the
            // one only the `_exit` hook sends in time; the others check nothing regressed.
            let shaped: u64 = run.stats().iter().map(|s| s["sent"]).sum();
            assert!(shaped >= 1, "{ending}: no shape learned: {stderr}");
            eprintln!("{ending}: header arrived after {us} us");
        }
    }

    #[test]
    fn every_wait_ends_its_writers_burst_in_64_and_32_bit_programs() {
        let _one = exclusive();
        check_waits(&ShimCases::native());
        // A 32-bit program built with 64-bit time calls __ppoll64, __select64 and the like, and
        // __setsockopt64 for setsockopt.
        let Some(cases32) = shim_cases_32() else {
            return;
        };
        let nm = Command::new("nm")
            .args(["-D", "--undefined-only"])
            .arg(&cases32.program)
            .output()
            .expect("nm");
        let imports = String::from_utf8_lossy(&nm.stdout);
        for name in ["__ppoll64", "__select64", "__nanosleep64", "__setsockopt64"] {
            assert!(imports.contains(name), "{name} not called: {imports}");
        }
        check_waits(&cases32);
        for case in ["selfcork", "corklistener"] {
            let r = cases32.run(&[case], &[]).fields();
            assert_eq!(
                r["segs"], 1,
                "{case}: the program's own TCP_CORK was overridden"
            );
        }
        // A select set of one 32-bit long, the last 4 bytes before an unmapped page, read and
        // written back by the shim within those 4 bytes.
        let r = cases32.run(&["shortset"], &[]).fields();
        assert_eq!((r["ready"], r["isset"]), (1, 1), "32-bit shortset: {r:?}");
    }
}

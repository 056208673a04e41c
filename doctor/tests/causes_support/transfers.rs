//! Answers a path's rate or a sender's congestion window holds back.

use std::io::{Read, Write};
use std::thread;
use std::time::{Duration, Instant};

use nagless_netpath::EmulatedPath;

use super::{ms, rtt_ms, Made, ROUNDS};
use crate::path_support::{connect, listen};

/// A server that answers each 100-byte request with `size` bytes at once, its listener on
/// CUBIC (the host's default may pace, as BBR does, where the scenario wants the classic
/// window); with the maximum segment size it sends at.
pub(crate) fn answering(p: &EmulatedPath, port: u16, size: usize) -> thread::JoinHandle<usize> {
    let l = listen(p, port);
    socket2::SockRef::from(&l)
        .set_tcp_congestion(b"cubic")
        .expect("the kernel has CUBIC");
    thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mss = socket2::SockRef::from(&s).tcp_mss().unwrap() as usize;
        let mut buf = [0u8; 100];
        for _ in 0..ROUNDS {
            s.read_exact(&mut buf).unwrap();
            s.write_all(&vec![b'r'; size]).unwrap();
        }
        mss
    })
}

/// Per request, `size` bytes read: from the request to the last byte, and from the first
/// byte to the last, by the client's clock; between rounds it waits `pause`.
pub(crate) fn ask(
    p: &EmulatedPath,
    port: u16,
    size: usize,
    pause: Duration,
) -> Vec<(f64, f64, f64)> {
    let mut c = connect(p, port);
    c.set_nodelay(true).unwrap();
    let mut v = vec![0u8; size];
    let mut out = Vec::new();
    for i in 0..ROUNDS {
        let t = Instant::now();
        c.write_all(&[b'q'; 100]).unwrap();
        let mut got = c.read(&mut v).unwrap();
        let first = Instant::now();
        while got < size {
            got += c.read(&mut v[got..]).unwrap();
        }
        let (whole, spread) = (ms(t.elapsed()), ms(first.elapsed()));
        let mut slept = 0.0;
        if i + 1 < ROUNDS && !pause.is_zero() {
            let t = Instant::now();
            thread::sleep(pause);
            slept = ms(t.elapsed());
        }
        out.push((whole, spread, slept));
    }
    out
}

/// 64 KB answers over the path's rate (its queue never full): by construction each takes
/// its bytes on the wire (each segment's headers too) at the rate, the first segment's way
/// included.
pub(crate) fn transfer(p: &EmulatedPath, port: u16) -> Made {
    const SIZE: usize = 64 << 10;
    let srv = answering(p, port, SIZE);
    let asked = ask(p, port, SIZE, Duration::ZERO);
    let mss = srv.join().unwrap();
    let spec = p.spec();
    let segments = SIZE.div_ceil(mss);
    let wire = SIZE + segments * (spec.mtu as usize - mss);
    let rate = spec.rate_bps.expect("a path with a rate") as f64;
    let each = wire as f64 * 8.0 / rate * 1000.0;
    for (whole, _, _) in &asked {
        // The client's clock agrees: the round trip, and a scheduler's slack (up to half as
        // long again on a loaded host, 33 ms of 136 seen beside a build); a path at half
        // the rate would still fail it.
        assert!(
            *whole >= each && *whole < each * 1.5 + rtt_ms(p) + 20.0,
            "{whole:.1} ms for {each:.1} ms of transfer"
        );
    }
    Made {
        name: "answers at the path's rate",
        port,
        truth: (1..=ROUNDS).map(|x| (x, "transfer", each)).collect(),
        truth_at_server: None,
        unscored: &[],
        round_trips: [ROUNDS as f64 + 2.0, ROUNDS as f64 + 1.0],
    }
}

/// 96 KB answers on a path with no rate to speak of, the client waiting 400 ms between its
/// requests (longer than the retransmission timeout: the window starts again smaller): the
/// sender's window holds each answer back a round trip or two, the time from the answer's
/// first byte to its last by the client's clock.
pub(crate) fn window(p: &EmulatedPath, port: u16) -> Made {
    const SIZE: usize = 96 << 10;
    roomy_receiver(p);
    let srv = answering(p, port, SIZE);
    let asked = ask(p, port, SIZE, Duration::from_millis(400));
    srv.join().unwrap();
    let mut truth = Vec::new();
    for (i, (_, spread, slept)) in asked.iter().enumerate() {
        let x = i as u64 + 1;
        truth.push((x, "congestion window (server)", *spread));
        if *slept > 0.0 {
            truth.push((x, "idle (client)", *slept));
        }
    }
    Made {
        name: "answers a window holds back",
        port,
        truth,
        truth_at_server: None,
        unscored: &[],
        round_trips: [ROUNDS as f64 + 2.0, ROUNDS as f64 + 1.0],
    }
}

/// Gives connections in the client's namespace a 4 MB receive buffer from their start (its
/// `tcp_rmem` default): the client's window then opens two segments for each it takes, ahead
/// of a sender's window in slow start, so only the server's congestion window holds the
/// answers back. (With the host's 128 KB the window stays near 80 KB until autotuning grows
/// the buffer; a congestion window grown by then meets it, and the receive window truly
/// holds the sender back, as the doctor said on a busy machine.)
pub(crate) fn roomy_receiver(p: &EmulatedPath) {
    p.run_in_client(|| std::fs::write("/proc/sys/net/ipv4/tcp_rmem", "4096 4194304 8388608"))
        .and_then(|r| r)
        .expect("the client's namespace takes a tcp_rmem (per namespace since Linux 4.15)");
}

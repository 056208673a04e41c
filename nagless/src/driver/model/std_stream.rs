//! The std stream over a non-blocking `SOCK_SEQPACKET` pair.

use super::*;
use socket2::{Domain, Socket, Type};

pub(super) fn pair() -> (Socket, Socket) {
    let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

/// The packets waiting at the peer.
fn drain(peer: &Option<Socket>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let Some(p) = peer else { return out };
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match (&*p).read(&mut buf) {
            // The stream's end closed (no stream sends an empty packet).
            Ok(0) => return out,
            Ok(n) => out.push(buf[..n].to_vec()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return out,
            Err(e) => panic!("peer read: {e}"),
        }
    }
}

/// The manual clock the stream reads.
struct Clock(std::rc::Rc<std::cell::Cell<Instant>>);

impl Drop for Clock {
    fn drop(&mut self) {
        crate::clock::fake::set(None);
    }
}

pub(super) fn run(policy: FlushPolicy, ops: &[Op]) -> (Vec<Step>, Vec<Step>) {
    let start = crate::clock::now();
    let t = std::rc::Rc::new(std::cell::Cell::new(start));
    let read = t.clone();
    crate::clock::fake::set(Some(Box::new(move || read.get())));
    let clock = Clock(t);
    let (ours, peer) = pair();
    let mut peer = Some(peer);
    let mut s = crate::stream::NaglessStream::with_policy(ours, policy.clone()).unwrap();
    let mut m = Model::new(policy, start);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for (k, op) in ops.iter().enumerate() {
        let (r, mr) = match op {
            Op::Write(len, u) => {
                let d = data(k, *len);
                let mr = m.write(*len, |c, n, now| c.write(&d[..n], *u, now));
                (show(s.write_with(&d, *u)), show(mr))
            }
            Op::Vectored(lens) => {
                let p = parts(k, lens);
                let slices: Vec<IoSlice<'_>> = p.iter().map(|p| IoSlice::new(p)).collect();
                let total = lens.iter().sum();
                let mr = m.write(total, |c, n, now| queue_vectored(c, &slices, n, now));
                (show(s.write_vectored(&slices)), show(mr))
            }
            Op::Flush => (show(s.flush()), show(m.flush(false))),
            Op::FlushNow => (show(s.flush_now()), show(m.flush(true))),
            Op::Read(n) => {
                let waiting = match &peer {
                    Some(p) if *n > 0 => {
                        p.send(&input(k, *n)).unwrap();
                        Some(input(k, *n))
                    }
                    _ => None,
                };
                let mut buf = vec![0u8; 1 << 16];
                let r = s.read(&mut buf).map(|n| buf[..n].to_vec());
                (show(r), show(m.read(waiting)))
            }
            Op::Advance(us) => {
                clock.0.set(clock.0.get() + Duration::from_micros(*us));
                m.now = clock.0.get();
                (String::new(), String::new())
            }
            Op::PollDeadline => {
                let mr = m.take_deferred().and_then(|()| m.drive().map(drop));
                (show(s.poll_deadline()), show(mr))
            }
            Op::Short(_) => (String::new(), String::new()),
            Op::PeerCloses => {
                peer = None;
                m.sock.closed = true;
                m.eof = true;
                (String::new(), String::new())
            }
        };
        got.push(Step {
            result: r,
            sent: drain(&peer),
            pending: s.pending(),
            counters: counters(s.stats()),
        });
        want.push(m.step(mr));
    }
    let counters = counters(s.stats());
    drop(s);
    got.push(Step {
        result: "drop".into(),
        sent: drain(&peer),
        pending: 0,
        counters,
    });
    want.push(m.close());
    drop(clock);
    (got, want)
}

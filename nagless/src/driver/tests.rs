//! The clocked hand-over against a scripted kernel: what it holds, what is in flight,
//! and an ACK that can be made to arrive between the check and the send.
use std::time::Duration;

use std::io::IoSlice;

use super::*;
use crate::policy::FlushPolicy;

/// A kernel's send side with `TCP_NODELAY` on: `MSG_MORE` holds, a plain send or an ACK
/// sends everything held as one segment.
#[derive(Default)]
struct Kernel {
    in_flight: u32,
    held: u32,
    segments: Vec<u32>,
    /// The next `unacknowledged` query is followed by an ACK of everything in flight
    /// (it arrives between the check and the send).
    ack_after_check: bool,
    pushes: u32,
}

impl Kernel {
    fn send_held(&mut self) {
        if self.held > 0 {
            self.segments.push(self.held);
            self.in_flight += self.held;
            self.held = 0;
        }
    }
    fn ack(&mut self) {
        self.in_flight = 0;
        self.send_held();
    }
}

impl Wire for Kernel {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        self.held += n as u32;
        if !more {
            self.send_held();
        }
        Ok(n)
    }
    fn can_clock(&self) -> bool {
        true
    }
    fn unacknowledged(&mut self) -> io::Result<u32> {
        let n = self.in_flight + self.held;
        if std::mem::take(&mut self.ack_after_check) {
            self.in_flight = 0;
        }
        Ok(n)
    }
    fn unsent(&mut self) -> io::Result<u32> {
        Ok(self.held)
    }
    fn push(&mut self) -> io::Result<()> {
        self.pushes += 1;
        self.send_held();
        Ok(())
    }
}

/// A clocked driver with nothing held, and a scripted kernel with nothing in flight.
fn clocked() -> (Driver<Plain>, Kernel) {
    (
        Driver::new(Coalescer::new(FlushPolicy::clocked()), Plain),
        Kernel::default(),
    )
}

fn write(d: &mut Driver<Plain>, k: &mut Kernel, at: Instant) {
    d.core.write(&[b'q'; 40], crate::Urgency::Normal, at);
    assert_eq!(d.pump(k, at, false).unwrap(), Drive::Idle);
    assert_eq!(d.core.pending(), 0, "no byte waits in the stream");
}

#[test]
fn with_nothing_in_flight_a_write_leaves_at_once() {
    let (mut d, mut k) = clocked();
    let t = crate::clock::now();
    write(&mut d, &mut k, t);
    assert_eq!(k.segments, [40]);
    assert_eq!(d.held, None);
    assert_eq!(d.core.stats().clock_checks, 1);
    assert_eq!(d.core.stats().held_for_ack, 0);
}

#[test]
fn with_data_in_flight_writes_wait_for_the_ack_and_leave_together() {
    let (mut d, mut k) = clocked();
    let t = crate::clock::now();
    write(&mut d, &mut k, t);
    write(&mut d, &mut k, t);
    write(&mut d, &mut k, t);
    assert_eq!(k.segments, [40], "held for the first one's ACK");
    assert_eq!((k.held, d.held), (80, Some(t)));
    assert_eq!(d.core.stats().held_for_ack, 2);
    k.ack();
    assert_eq!(k.segments, [40, 80], "the ACK sends both as one segment");
    assert_eq!(k.pushes, 0);
}

#[test]
fn an_ack_between_the_check_and_the_send_cannot_strand_the_write() {
    let (mut d, mut k) = clocked();
    let t = crate::clock::now();
    write(&mut d, &mut k, t);
    k.ack_after_check = true;
    write(&mut d, &mut k, t);
    assert_eq!(k.held, 0, "pushed: no ACK was left to send it");
    assert_eq!(k.segments, [40, 40]);
    assert_eq!((k.pushes, d.core.stats().pushes, d.held), (1, 1, None));
}

#[test]
fn bytes_held_once_do_not_make_a_later_write_wait_with_nothing_in_flight() {
    let (mut d, mut k) = clocked();
    let t = crate::clock::now();
    write(&mut d, &mut k, t);
    write(&mut d, &mut k, t);
    assert!(d.held.is_some());
    k.ack();
    k.ack();
    // The stream still thinks bytes are held (it skips the check before the send); the
    // check after it finds nothing in flight and pushes.
    write(&mut d, &mut k, t);
    assert_eq!((k.held, k.in_flight, k.pushes), (0, 40, 1));
    assert_eq!(d.held, None);
}

#[test]
fn bytes_held_past_the_bound_leave_with_the_next_write() {
    let (mut d, mut k) = clocked();
    let t = crate::clock::now();
    write(&mut d, &mut k, t);
    write(&mut d, &mut k, t);
    write(&mut d, &mut k, t + CLOCK_BOUND / 2);
    assert_eq!(
        (k.held, d.held),
        (80, Some(t)),
        "the oldest held byte's age counts"
    );
    write(&mut d, &mut k, t + CLOCK_BOUND + Duration::from_micros(1));
    assert_eq!(k.segments, [40, 120], "sent plainly, with everything held");
    assert_eq!(d.held, None);
}

#[test]
fn a_send_now_write_takes_what_the_kernel_held_with_it() {
    let (mut d, mut k) = clocked();
    let t = crate::clock::now();
    write(&mut d, &mut k, t);
    write(&mut d, &mut k, t);
    d.core.write(b"ping", crate::Urgency::SendNow, t);
    d.pump(&mut k, t, false).unwrap();
    assert_eq!(k.segments, [40, 44]);
    assert_eq!((k.held, d.held), (0, None));
}

#[test]
fn more_follows_pieces_wait_for_the_write_that_ends_the_request() {
    let (mut d, mut k) = clocked();
    let t = crate::clock::now();
    d.core.write(b"header", crate::Urgency::MoreFollows, t);
    d.pump(&mut k, t, false).unwrap();
    assert_eq!((d.core.pending(), k.segments.len()), (6, 0));
    write(&mut d, &mut k, t);
    assert_eq!(k.segments, [46], "one request, one segment");
}

//! The clocked hand-over against a scripted kernel: what it holds, what is in flight,
//! and an ACK that can be made to arrive between the check and the send; and the kernel
//! clock's (batches to a Nagle socket, its looks and pushes, and its fallbacks) against one
//! with Nagle's switch and counters.
use std::time::Duration;

use std::io::IoSlice;

use super::*;
use crate::policy::{FlushPolicy, FlushReason};

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

/// A kernel with the switches the kernel clock uses: with Nagle on (`TCP_NODELAY` cleared),
/// a plain send is held while anything is in flight; clearing Nagle sends what it holds; its
/// counters tell what it has sent in all and what it holds.
#[derive(Default)]
struct NagleKernel {
    k: Kernel,
    nagle: bool,
    /// Bytes sent in all.
    sent: u64,
    /// Turning Nagle back on fails from now on.
    refuse_nagle: bool,
    switches: Vec<bool>,
}

impl NagleKernel {
    fn ack(&mut self) {
        self.k.in_flight = 0;
        self.send_held();
    }
    fn send_held(&mut self) {
        self.sent += u64::from(self.k.held);
        self.k.send_held();
    }
}

impl Wire for NagleKernel {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        self.k.held += n as u32;
        let nagle_holds = self.nagle && self.k.in_flight > 0;
        if !(more || nagle_holds) {
            self.send_held();
        }
        Ok(n)
    }
    fn can_clock(&self) -> bool {
        true
    }
    fn unacknowledged(&mut self) -> io::Result<u32> {
        self.k.unacknowledged()
    }
    fn unsent(&mut self) -> io::Result<u32> {
        Ok(self.k.held)
    }
    fn push(&mut self) -> io::Result<()> {
        self.k.pushes += 1;
        self.send_held();
        Ok(())
    }
    fn nagle(&mut self, on: bool) -> io::Result<()> {
        if on && self.refuse_nagle {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        self.switches.push(on);
        self.nagle = on;
        if !on {
            self.send_held();
        }
        Ok(())
    }
    fn progress(&mut self) -> io::Result<(u64, u32)> {
        Ok((self.sent, self.k.held))
    }
}

/// A clocked driver in a stream that can make looks, whose caller flushes its batches.
fn kernel_clocked() -> (Driver<Plain>, NagleKernel) {
    let mut d = Driver::new(Coalescer::new(FlushPolicy::clocked()), Plain);
    d.allow_kernel_clock();
    (d, NagleKernel::default())
}

/// One batch of 40 bytes, flushed as a tokio caller flushes it.
fn batch(d: &mut Driver<Plain>, k: &mut NagleKernel, at: Instant) {
    d.core.write(&[b'b'; 40], crate::Urgency::Normal, at);
    d.flush_point(true);
    assert_eq!(d.pump(k, at, false).unwrap(), Drive::Idle);
    d.batch_ended();
    assert_eq!(
        d.core.pending(),
        0,
        "the batch went to the kernel at its flush"
    );
}

#[test]
fn a_flushed_batch_goes_to_a_nagle_socket_in_one_send_and_is_looked_at() {
    let (mut d, mut k) = kernel_clocked();
    let t = crate::clock::now();
    batch(&mut d, &mut k, t);
    assert_eq!(k.switches, [true], "Nagle on at the first delimited batch");
    assert_eq!(k.k.segments, [40], "nothing in flight: sent at once");
    // One look, right after the send (none before it): nothing held, nothing more owed,
    // so no timer has to wake for this batch.
    assert_eq!(d.core.stats().clock_checks, 1);
    assert_eq!(d.kernel.due(), None);
    assert_eq!(d.core.stats().pushes, 0);
}

#[test]
fn a_batch_held_a_whole_bound_with_nothing_sent_is_pushed() {
    let (mut d, mut k) = kernel_clocked();
    let t = crate::clock::now();
    batch(&mut d, &mut k, t);
    // The peer never answers the first batch (an HTTP/2 WINDOW_UPDATE): the second waits.
    let sent = t + Duration::from_micros(10);
    batch(&mut d, &mut k, sent);
    assert_eq!(
        (k.k.segments.len(), k.k.held),
        (1, 40),
        "held behind the first"
    );
    // Its first look was made at its send: the next is due a bound later.
    assert_eq!(d.kernel.due(), Some(sent + CLOCK_BOUND));
    d.look_at_kernel(&mut k, sent + Duration::from_micros(20), true)
        .unwrap();
    d.look_at_kernel(&mut k, sent + CLOCK_BOUND - Duration::from_micros(1), false)
        .unwrap();
    assert_eq!(k.k.held, 40, "not due yet: one look alone never pushes");
    d.look_at_kernel(&mut k, sent + CLOCK_BOUND, false).unwrap();
    assert_eq!(k.k.segments, [40, 40], "pushed a bound after its send");
    assert_eq!(
        k.switches,
        [true, false, true],
        "TCP_NODELAY set and cleared"
    );
    assert_eq!(d.core.stats().pushes, 1);
    assert_eq!(d.kernel.due(), None);
}

#[test]
fn a_batch_released_by_an_ack_between_looks_is_not_pushed() {
    let (mut d, mut k) = kernel_clocked();
    let t = crate::clock::now();
    batch(&mut d, &mut k, t);
    batch(&mut d, &mut k, t);
    d.look_at_kernel(&mut k, t, true).unwrap();
    // The answer to the first comes, its ACK sends the second; a third is held behind it.
    k.ack();
    batch(&mut d, &mut k, t + Duration::from_micros(50));
    d.look_at_kernel(&mut k, t + CLOCK_BOUND, false).unwrap();
    assert_eq!(
        d.core.stats().pushes,
        0,
        "the bytes held at the first look left"
    );
    assert_eq!(k.k.held, 40);
    assert!(
        d.kernel.due().is_some(),
        "the newer bytes are looked at again"
    );
    // Nothing sent for a whole bound since: now they are pushed.
    d.look_at_kernel(&mut k, t + 2 * CLOCK_BOUND, false)
        .unwrap();
    assert_eq!((k.k.held, d.core.stats().pushes), (0, 1));
}

#[test]
fn an_urgent_write_pushes_what_the_nagle_socket_holds() {
    let (mut d, mut k) = kernel_clocked();
    let t = crate::clock::now();
    batch(&mut d, &mut k, t);
    batch(&mut d, &mut k, t);
    d.core.write(b"ping", crate::Urgency::SendNow, t);
    d.pump(&mut k, t, false).unwrap();
    assert_eq!((k.k.held, d.core.stats().pushes), (0, 1));
    assert_eq!(k.switches, [true, false, true]);
}

#[test]
fn a_socket_that_will_not_turn_nagle_back_on_keeps_the_msg_more_hand_over() {
    let (mut d, mut k) = kernel_clocked();
    let t = crate::clock::now();
    batch(&mut d, &mut k, t);
    batch(&mut d, &mut k, t);
    k.refuse_nagle = true;
    d.release_held(&mut k).unwrap();
    assert_eq!(k.k.held, 0, "pushed");
    assert_eq!(d.kernel, KernelClock::Refused);
    assert!(!k.nagle, "TCP_NODELAY stays set");
    // From now on a batch with data in flight is held with MSG_MORE, checked before and
    // after its send.
    let checks = d.core.stats().clock_checks;
    batch(&mut d, &mut k, t);
    assert!(d.core.stats().clock_checks > checks, "{:?}", d.core.stats());
}

#[test]
fn a_socket_without_the_kernel_counters_keeps_the_msg_more_hand_over() {
    // The plain scripted kernel has no `progress` (a wire that cannot ask the send queue).
    let mut d = Driver::new(Coalescer::new(FlushPolicy::clocked()), Plain);
    d.allow_kernel_clock();
    let mut k = Kernel::default();
    let t = crate::clock::now();
    d.core.write(&[b'b'; 40], crate::Urgency::Normal, t);
    d.flush_point(true);
    d.pump(&mut k, t, false).unwrap();
    assert_eq!(d.kernel, KernelClock::Refused);
    assert_eq!(k.segments, [40]);
}

/// The default policy in a stream that can make looks.
fn answered_default() -> (Driver<Plain>, NagleKernel) {
    let mut d = Driver::new(Coalescer::new(FlushPolicy::default()), Plain);
    d.allow_kernel_clock();
    (d, NagleKernel::default())
}

#[test]
fn under_the_default_only_flushes_after_input_go_to_nagle() {
    let (mut d, mut k) = answered_default();
    let t = crate::clock::now();
    batch(&mut d, &mut k, t);
    assert!(k.switches.is_empty(), "no input yet: sent at once");
    assert_eq!(k.k.segments, [40]);
    d.input_arrived();
    batch(&mut d, &mut k, t + Duration::from_micros(10));
    assert_eq!(k.switches, [true], "Nagle on for the answered flush");
    assert_eq!(k.k.held, 40, "held behind the first, for its ACK");
    k.ack();
    assert_eq!(k.k.segments, [40, 40], "the answer's ACK sent it");
    // Due for another reason (an urgent write): Nagle off first, then sent at once.
    d.core.write(
        &[b'u'; 10],
        crate::Urgency::SendNow,
        t + Duration::from_micros(20),
    );
    d.pump(&mut k, t + Duration::from_micros(20), false)
        .unwrap();
    assert_eq!(k.switches, [true, false]);
    assert_eq!(k.k.segments, [40, 40, 10]);
    assert_eq!(d.core.stats().held_for_ack, 0, "no MSG_MORE hand-over");
}

#[test]
fn a_look_that_must_push_stops_the_default_clocking_until_input() {
    let (mut d, mut k) = answered_default();
    let t = crate::clock::now();
    d.input_arrived();
    batch(&mut d, &mut k, t);
    // A second batch behind the first, which the peer never acknowledges.
    let sent = t + Duration::from_micros(10);
    batch(&mut d, &mut k, sent);
    assert_eq!(k.k.held, 40);
    d.look_at_kernel(&mut k, sent + CLOCK_BOUND, false).unwrap();
    assert_eq!(k.k.held, 0, "pushed a bound after its send");
    // The peer let it wait: the next flush, without input, leaves at once (Nagle off).
    batch(&mut d, &mut k, sent + 2 * CLOCK_BOUND);
    assert_eq!(k.switches.last(), Some(&false));
    assert_eq!(k.k.held, 0, "sent at once");
}

#[test]
fn a_socket_that_refuses_nagle_sends_the_default_s_flushes_plainly() {
    let (mut d, mut k) = answered_default();
    k.refuse_nagle = true;
    let t = crate::clock::now();
    // A first batch is in flight (unacknowledged) when the answered ones come.
    batch(&mut d, &mut k, t);
    for i in 1..4 {
        d.input_arrived();
        batch(&mut d, &mut k, t + Duration::from_micros(i));
    }
    assert_eq!(k.k.segments, [40, 40, 40, 40], "each flush sent at once");
    assert!(k.switches.is_empty());
    assert_eq!(d.core.stats().held_for_ack, 0, "no MSG_MORE hand-over");
    assert_eq!(d.kernel, KernelClock::Refused);
}

#[test]
fn a_clocked_flush_hands_no_urgent_byte_to_nagle() {
    let (mut d, _) = answered_default();
    let t = crate::clock::now();
    // An urgent write the socket has not taken yet, then a normal one, then an answered flush.
    d.core.write(&[b'u'; 10], crate::Urgency::SendNow, t);
    d.core.write(&[b'n'; 10], crate::Urgency::Normal, t);
    d.core.flush_for(true);
    let tx = d.core.poll_transmit(t).expect("due");
    assert_eq!(tx.len, 20);
    assert_eq!(tx.reason, FlushReason::Urgent, "the stronger reason stays");
}

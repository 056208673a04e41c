//! When pending output leaves: the flush policy, per-write urgency and flush reasons.
//!
//! A policy combines independent flush points. Any one of them that fires makes bytes due; the
//! [`Coalescer`](crate::Coalescer) turns the policy into "send these bytes now" and "wake me
//! at T". The default needs no tuning: flush before every read, send the first full segment
//! of a burst built from small writes at once, stream full segments once 64 KiB are pending,
//! and never hold a byte longer than 500 µs; in a tokio stream, a flush made while the peer
//! answers is clocked as Nagle clocks it ([`FlushPolicy::clock_answered`]).

use std::time::Duration;

/// How a [`Coalescer`](crate::Coalescer) decides that pending bytes must leave.
///
/// Flush points combine: bytes become due when *any* enabled point fires. An explicit
/// [`flush`](crate::Coalescer::flush), a [`Urgency::SendNow`] write and closing always flush,
/// whatever the policy.
///
/// | point | fires when | choose it for |
/// |---|---|---|
/// | before-read | the application reads and no input is waiting (it is about to wait) | request/response (the write-write-read fix) |
/// | threshold | `threshold` bytes are pending, or a small write fills a burst's first segment; sends whole segments, keeps the tail | bulk streams, long bursts |
/// | linger | the oldest unflushed byte is `linger` old (a hard deadline, not an idle timer) | senders that wait elsewhere (event loops) |
///
/// The linger is only a bound, never a wait the program pays when nothing else can come:
/// the moment the program turns to wait for input on the stream (before-read), flushes,
/// closes or marks a write [`Urgency::SendNow`], everything pending leaves at once. The
/// deadline matters only while the program keeps running without waiting on this stream.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use nagless::FlushPolicy;
///
/// // A framing layer that knows where its messages end: flush() decides, and no byte
/// // waits longer than 200 µs if it forgets.
/// let policy = FlushPolicy::explicit_only().linger(Some(Duration::from_micros(200)));
/// assert!(!policy.is_before_read());
/// assert_eq!(policy.linger_deadline(), Some(Duration::from_micros(200)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushPolicy {
    pub(crate) before_read: bool,
    pub(crate) threshold: Option<usize>,
    pub(crate) linger: Linger,
    pub(crate) high_water: usize,
    pub(crate) msg_more: bool,
    pub(crate) explicit_flush: bool,
    pub(crate) clocked: bool,
    pub(crate) clock_answered: bool,
}

/// Default size threshold: 64 KiB pending (a loopback segment, or 45 Ethernet segments).
///
/// ```
/// assert_eq!(nagless::FlushPolicy::default().threshold_bytes(), Some(nagless::DEFAULT_THRESHOLD));
/// ```
pub const DEFAULT_THRESHOLD: usize = 64 * 1024;
/// Default linger deadline: no byte waits longer than this.
///
/// ```
/// assert_eq!(nagless::FlushPolicy::default().linger_deadline(), Some(nagless::DEFAULT_LINGER));
/// ```
pub const DEFAULT_LINGER: Duration = Duration::from_micros(500);
/// Default high-water mark: beyond this many pending bytes writes flush first and, on a
/// non-blocking socket, return `WouldBlock`.
///
/// ```
/// assert_eq!(nagless::FlushPolicy::default().high_water_bytes(), nagless::DEFAULT_HIGH_WATER);
/// ```
pub const DEFAULT_HIGH_WATER: usize = 4 * 1024 * 1024;

impl Default for FlushPolicy {
    /// Before-read on, threshold [`DEFAULT_THRESHOLD`], linger [`DEFAULT_LINGER`], high-water
    /// [`DEFAULT_HIGH_WATER`], `MSG_MORE` between the syscalls of one flush, flushes the peer
    /// answered clocked ([`clock_answered`](Self::clock_answered)).
    fn default() -> Self {
        Self {
            before_read: true,
            threshold: Some(DEFAULT_THRESHOLD),
            linger: Linger::Deadline(DEFAULT_LINGER),
            high_water: DEFAULT_HIGH_WATER,
            msg_more: true,
            explicit_flush: true,
            clocked: false,
            clock_answered: true,
        }
    }
}

impl FlushPolicy {
    /// Only explicit flushes, urgent writes, closing and the high-water mark send anything:
    /// like `BufWriter`, but the caller must flush.
    pub fn explicit_only() -> Self {
        Self {
            before_read: false,
            threshold: None,
            linger: Linger::Off,
            ..Self::default()
        }
    }

    /// Every write leaves at once (what `TCP_NODELAY` alone does): for comparisons.
    pub fn immediate() -> Self {
        Self {
            linger: Linger::Immediate,
            clocked: false,
            ..Self::default()
        }
    }

    /// Every write is handed to the kernel at once and **clocked as Nagle clocks it**: for a
    /// connection that several threads write to (each request under a lock) while another
    /// thread reads the answers from a clone of the socket, the pattern of Redis, gRPC and
    /// database clients.
    ///
    /// Such writers never read the stream and then wait somewhere else (a semaphore, a
    /// channel), so no flush point of the default policy comes, and the std stream has no
    /// thread to honour a linger deadline: a write left queued would wait for the next call.
    /// Under this policy no byte waits in the stream (but in a tokio stream whose caller
    /// flushes: below). A write (or a [`flush`] of
    /// [`MoreFollows`] pieces) is sent at once, plainly, when nothing is unacknowledged on the
    /// socket: it is the only request on the wire and nothing else would carry it. With data in
    /// flight it is given to the kernel with `MSG_MORE`, which holds it until the next ACK
    /// comes in and then sends it with everything held since (`TCP_NODELAY` is on), in one
    /// segment where `TCP_NODELAY` alone sends one per write. That ACK comes when the peer
    /// answers a request in flight, so requests are not delayed for it in a busy pipeline.
    ///
    /// A request written in pieces and then flushed (a codec's header and body, then
    /// `flush` or `poll_flush`) does not wait for the ACK of its own first piece: from the
    /// caller's first flush on, its flushes delimit its batches, and a write is held only
    /// behind bytes of earlier batches. The tokio streams (over a socket they clock, with
    /// explicit flushes) also keep a batch's writes until its `poll_flush`, which hands it
    /// over in one send (a read that would wait sends them too). Before a first flush every
    /// write is a batch of its own, handed over as it is made.
    ///
    /// In a tokio stream made on a runtime with a timer (and built with `panic = "unwind"`,
    /// where the timer can be probed; Linux), once the caller flushes, each batch
    /// is one plain send to the socket with the kernel's Nagle on (`TCP_NODELAY` cleared): the
    /// kernel sends it at once when no small segment is unacknowledged and otherwise with the
    /// next ACK, one send per batch, as a client that already batches (redis-rs, hyper) gets
    /// from the kernel's defaults. The stream then looks at what the kernel holds (its send
    /// queue's unsent bytes, `SIOCOUTQNSD`) right after a send that finds no look owed, and every
    /// [`DEFAULT_LINGER`] after while bytes stay held, and pushes bytes held a whole bound: a
    /// batch behind one the peer does not answer (an HTTP/2 `WINDOW_UPDATE`) waits one to two
    /// milliseconds (the bound, on tokio's 1 ms timer), not the peer's delayed ACK.
    ///
    /// The bound elsewhere (the std stream, the C API, and a tokio stream before its first
    /// flush), honestly: held bytes leave with the next ACK, so a peer that answers slowly
    /// and delays its ACKs (40 ms on Linux, up to 200 ms elsewhere) holds them that long, as
    /// Nagle would; a later clocked write sends everything that waited more than
    /// [`DEFAULT_LINGER`], and [`Urgency::SendNow`], [`flush_now`], a read of the stream that
    /// would wait, `shutdown` and close send at once. Bytes the kernel holds never strand:
    /// after a held send the stream checks that something is still in flight to bring an ACK,
    /// and sends them itself otherwise.
    ///
    /// Clocking needs the kernel's send-queue counters (`SIOCOUTQ`, `SIOCOUTQNSD`: Linux
    /// and Android) and a send the kernel can be asked to hold: every stream has it (the std
    /// [`NaglessStream`](crate::NaglessStream) and [`Sender`](crate::Sender), the TLS streams,
    /// the tokio streams over tokio's own `TcpStream`). A tokio stream over another
    /// `AsyncWrite` (a `UnixStream` too: no Nagle, no ACKs), and every stream elsewhere, take
    /// this policy as
    /// [`immediate`](Self::immediate): every write leaves at once. Costs two to four syscalls
    /// per write (the counters, the send, at times a push) where `TCP_NODELAY` costs one.
    ///
    /// ```no_run
    /// use std::io::{Read, Write};
    /// use std::sync::{Arc, Mutex};
    /// use nagless::{FlushPolicy, NaglessStream};
    ///
    /// let tcp = std::net::TcpStream::connect("127.0.0.1:6379")?;
    /// let mut replies = tcp.try_clone()?; // the reader thread's handle
    /// let conn = Arc::new(Mutex::new(NaglessStream::with_policy(tcp, FlushPolicy::clocked())?));
    /// let writers: Vec<_> = (0..4)
    ///     .map(|_| {
    ///         let conn = Arc::clone(&conn);
    ///         std::thread::spawn(move || -> std::io::Result<()> {
    ///             // No flush needed: the request is with the kernel when write_all returns.
    ///             conn.lock().unwrap().write_all(b"*1\r\n$4\r\nPING\r\n")
    ///         })
    ///     })
    ///     .collect();
    /// let mut buf = [0u8; 7 * 4];
    /// replies.read_exact(&mut buf)?; // four "+PONG\r\n"
    /// for w in writers {
    ///     w.join().unwrap()?;
    /// }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// [`flush`]: std::io::Write::flush
    /// [`MoreFollows`]: Urgency::MoreFollows
    /// [`flush_now`]: crate::NaglessStream::flush_now
    pub fn clocked() -> Self {
        Self {
            linger: Linger::Immediate,
            clocked: true,
            ..Self::default()
        }
    }

    /// Whether writes are clocked as Nagle clocks them ([`clocked`](Self::clocked)).
    pub fn is_clocked(&self) -> bool {
        self.clocked
    }

    /// Flush pending output before the wrapped stream waits for input. Reading input that is
    /// already there does not flush, so answers to pipelined requests still coalesce.
    pub fn before_read(mut self, on: bool) -> Self {
        self.before_read = on;
        self
    }

    /// Send whole segments as soon as `bytes` are pending (`None` disables). The threshold is
    /// never below one segment; the sub-segment tail waits for the next flush point.
    ///
    /// With a threshold, the first full segment of a burst built piece by piece (a write
    /// smaller than a segment fills it; a burst is the bytes written since everything
    /// pending was last made due) also leaves at once: on a path whose segments are small
    /// next to the burst, its first bytes travel while the program writes the rest, at no
    /// segment more (whole segments either way) and one send more per such burst. A write of
    /// a segment or more is never split so: it waits for its flush point whole.
    pub fn threshold(mut self, bytes: Option<usize>) -> Self {
        self.threshold = bytes;
        self
    }

    /// Hard deadline counted from the first unflushed byte: a [`Linger`], or as before it an
    /// `Option<Duration>` (`None` disables; zero sends every normal write at once). Anything
    /// but [`Linger::Immediate`] ends [`clocked`](Self::clocked) handing-over (writes are
    /// queued again).
    ///
    /// ```
    /// use std::time::Duration;
    /// use nagless::{FlushPolicy, Linger};
    ///
    /// let us200 = Duration::from_micros(200);
    /// assert_eq!(FlushPolicy::default().linger(Some(us200)).linger_mode(), Linger::Deadline(us200));
    /// assert_eq!(FlushPolicy::default().linger(None).linger_mode(), Linger::Off);
    /// assert_eq!(FlushPolicy::default().linger(Linger::Immediate), FlushPolicy::immediate());
    /// ```
    pub fn linger(mut self, linger: impl Into<Linger>) -> Self {
        self.linger = linger.into().normalized();
        if self.linger != Linger::Immediate {
            self.clocked = false;
        }
        self
    }

    /// Pending bytes beyond which writes flush first and may return `WouldBlock`.
    pub fn high_water(mut self, bytes: usize) -> Self {
        self.high_water = bytes.max(1);
        self
    }

    /// Set `MSG_MORE` on every syscall of a flush but the last (Linux).
    pub fn msg_more(mut self, on: bool) -> Self {
        self.msg_more = on;
        self
    }

    /// Whether `flush()` sends (the default, `BufWriter`'s meaning) or is only a hint.
    ///
    /// Some layers flush their transport after every write whether or not a message ends:
    /// rustls's `Stream`/`StreamOwned` flush after each batch of TLS records. With
    /// `explicit_flush(false)` such flushes send nothing by themselves; the bytes leave at the
    /// next before-read, threshold or linger point, so a response written as several records
    /// still leaves as one. Closing, `into_inner` and [`Urgency::SendNow`] still send at once.
    /// Use it only where a read or the linger bound follows: the std stream honours linger
    /// only when it is called, so a program that flushes and then waits elsewhere for long
    /// should keep the default.
    pub fn explicit_flush(mut self, on: bool) -> Self {
        self.explicit_flush = on;
        self
    }

    /// Whether `flush()` sends at once.
    pub fn is_explicit_flush(&self) -> bool {
        self.explicit_flush
    }

    /// Whether the flushes made while the peer answers are clocked as Nagle clocks them, in a
    /// tokio stream over tokio's `TcpStream` on a runtime with a timer, on Linux (on by
    /// default; elsewhere, in the std streams, the C API and a tokio stream over another
    /// `AsyncWrite`, every flush is sent at once).
    ///
    /// A connection task that writes batches while the answers to earlier ones come in
    /// (redis-rs's multiplexed connection, hyper's HTTP/2 client, a database driver) reads
    /// input between its flushes. Once input has come, each flush hands its batch to the
    /// socket with the kernel's Nagle on: it leaves at once when nothing small of ours is
    /// unacknowledged, and otherwise with the next ACK (which the peer's next answer
    /// carries) together with what was written meanwhile, in one segment where
    /// `TCP_NODELAY` sends one per batch. The stream looks at what the kernel holds, and
    /// pushes bytes held a whole [`DEFAULT_LINGER`] with no ACK to release them: a batch
    /// waits one to two milliseconds at most (tokio's timer), never the peer's delayed ACK.
    ///
    /// Such a push says the peer is not answering now, and the stream doubts it: from then
    /// on only a flush made right after input is clocked, until a held batch is seen
    /// released by an ACK (answers do come) or 64 more answers have come (the input between
    /// two batches is one), when every flush after input is clocked again. So a stream whose
    /// peer speaks only to ask (a server-sent-events client: its request) has the tokens of
    /// one bound wait, once; a server that streams each answer in parts pays the bound once
    /// per 64 answers, not once per answer; and a peer late once (a busy server, a loaded
    /// host) is doubted for a while, not for good. Bytes made due by an urgent write, the
    /// linger deadline, the threshold, a read that would wait or close leave at once,
    /// `TCP_NODELAY` set again first. See [`clocked`](Self::clocked), which
    /// clocks every batch.
    ///
    /// Off: every flush leaves at once, as with `TCP_NODELAY` (for a caller that counts each
    /// flush's latency above its segments).
    ///
    /// ```
    /// use nagless::FlushPolicy;
    /// assert!(FlushPolicy::default().is_clock_answered());
    /// assert!(!FlushPolicy::default().clock_answered(false).is_clock_answered());
    /// assert!(!FlushPolicy::immediate().is_clock_answered(), "every write leaves at once");
    /// ```
    pub fn clock_answered(mut self, on: bool) -> Self {
        self.clock_answered = on;
        self
    }

    /// Whether flushes the peer answered are clocked ([`clock_answered`](Self::clock_answered)):
    /// on, with explicit flushes, under a policy that neither clocks every write
    /// ([`clocked`](Self::clocked)) nor sends every write at once ([`immediate`](Self::immediate)).
    pub fn is_clock_answered(&self) -> bool {
        self.clock_answered
            && self.explicit_flush
            && !self.clocked
            && self.linger != Linger::Immediate
    }

    /// Whether before-read flushing is on.
    pub fn is_before_read(&self) -> bool {
        self.before_read
    }

    /// The size threshold, if any.
    pub fn threshold_bytes(&self) -> Option<usize> {
        self.threshold
    }

    /// The linger setting as an `Option<Duration>` (`Some(ZERO)`: immediate); see
    /// [`linger_mode`](Self::linger_mode).
    pub fn linger_deadline(&self) -> Option<Duration> {
        self.linger.into()
    }

    /// The linger setting: off, immediate, or a deadline.
    pub fn linger_mode(&self) -> Linger {
        self.linger
    }

    /// The high-water mark in bytes.
    pub fn high_water_bytes(&self) -> usize {
        self.high_water
    }
}

/// How long a normal write may wait in the queue ([`FlushPolicy::linger`]).
///
/// It was an `Option<Duration>` whose `Some(ZERO)` meant "at once": both convert to and from
/// it (`None` is [`Off`](Self::Off), `Some(ZERO)` [`Immediate`](Self::Immediate)).
///
/// ```
/// use std::time::Duration;
/// use nagless::Linger;
///
/// assert_eq!(Linger::from(None), Linger::Off);
/// assert_eq!(Linger::from(Some(Duration::ZERO)), Linger::Immediate);
/// let ms = Duration::from_millis(1);
/// assert_eq!(Linger::from(Some(ms)).deadline(), Some(ms));
/// assert_eq!(Option::<Duration>::from(Linger::Immediate), Some(Duration::ZERO));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Linger {
    /// No deadline: bytes wait for a flush point (before-read, threshold, flush, close).
    Off,
    /// Every normal write leaves at once ([`FlushPolicy::immediate`]); an
    /// [`Urgency::MoreFollows`] write waits for the next one.
    Immediate,
    /// No byte waits longer than this, counted from the first unflushed byte (a hard
    /// deadline, not an idle timer). A zero deadline is [`Immediate`](Self::Immediate).
    Deadline(Duration),
}

impl Linger {
    /// The deadline, if the linger is one.
    pub fn deadline(self) -> Option<Duration> {
        match self {
            Linger::Deadline(d) => Some(d),
            Linger::Off | Linger::Immediate => None,
        }
    }

    /// The one spelling of each state: a zero deadline is immediate.
    fn normalized(self) -> Self {
        match self {
            Linger::Deadline(d) if d.is_zero() => Linger::Immediate,
            other => other,
        }
    }
}

impl From<Option<Duration>> for Linger {
    /// `None`: off; zero: immediate; else the deadline.
    fn from(d: Option<Duration>) -> Self {
        match d {
            None => Linger::Off,
            Some(d) => Linger::Deadline(d).normalized(),
        }
    }
}

impl From<Duration> for Linger {
    /// A deadline (zero: immediate).
    fn from(d: Duration) -> Self {
        Linger::Deadline(d).normalized()
    }
}

impl From<Linger> for Option<Duration> {
    /// The former spelling: `None` off, `Some(ZERO)` immediate.
    fn from(l: Linger) -> Self {
        match l {
            Linger::Off => None,
            Linger::Immediate => Some(Duration::ZERO),
            Linger::Deadline(d) => Some(d),
        }
    }
}

/// What a single write says about its own timing.
///
/// ```
/// use std::time::Instant;
/// use nagless::{Coalescer, FlushPolicy, Urgency};
///
/// let mut core = Coalescer::new(FlushPolicy::immediate());
/// core.write(b"len=5;", Urgency::MoreFollows, Instant::now()); // waits for its payload
/// assert!(core.poll_transmit(Instant::now()).is_none());
/// core.write(b"hello", Urgency::SendNow, Instant::now()); // both leave now
/// assert_eq!(core.poll_transmit(Instant::now()).unwrap().len, 11);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Urgency {
    /// The policy decides.
    #[default]
    Normal,
    /// Send this and everything before it now (a keepalive, an error notice, the last reply);
    /// under [`FlushPolicy::clocked`] also what the kernel holds for an ACK.
    SendNow,
    /// More follows: pack this with the next write. It never makes bytes due by itself, even
    /// under [`FlushPolicy::immediate`] (where it waits for the next write); flush points and
    /// a non-zero linger deadline still apply.
    MoreFollows,
}

/// Why bytes were sent: counted in [`Stats`](crate::Stats).
///
/// ```
/// use nagless::{FlushReason, Stats};
///
/// let stats = Stats::default();
/// for reason in FlushReason::ALL {
///     println!("{:>12}: {}", reason.name(), stats.flushes_for(reason));
/// }
/// assert_eq!(FlushReason::BeforeRead.name(), "before-read");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushReason {
    /// The caller flushed.
    Explicit,
    /// The application read or waited for input.
    BeforeRead,
    /// Enough bytes were pending for whole segments.
    Threshold,
    /// The linger deadline passed.
    Linger,
    /// A write said [`Urgency::SendNow`], or a normal write under a zero linger.
    Urgent,
    /// Close, shutdown or drop.
    Close,
    /// More than the high-water mark was pending.
    HighWater,
    /// A normal write or a flush under [`FlushPolicy::clocked`]: handed to the kernel at
    /// once, sent now or with the next ACK.
    Clocked,
}

impl FlushReason {
    /// Every reason, in a fixed order (the order of [`Stats::flushes_for`](crate::Stats::flushes_for)).
    pub const ALL: [FlushReason; 8] = [
        FlushReason::Explicit,
        FlushReason::BeforeRead,
        FlushReason::Threshold,
        FlushReason::Linger,
        FlushReason::Urgent,
        FlushReason::Close,
        FlushReason::HighWater,
        FlushReason::Clocked,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// A short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            FlushReason::Explicit => "explicit",
            FlushReason::BeforeRead => "before-read",
            FlushReason::Threshold => "threshold",
            FlushReason::Linger => "linger",
            FlushReason::Urgent => "urgent",
            FlushReason::Close => "close",
            FlushReason::HighWater => "high-water",
            FlushReason::Clocked => "clocked",
        }
    }
}

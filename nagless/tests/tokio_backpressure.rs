//! The tokio adapter under backpressure, at close and on errors: a writer parked in `flush`
//! is always woken (one socket, several waiting tasks), the linger timer survives a full
//! socket, a dropped stream still delivers its queue, a read half never takes the write
//! half's error, and a runtime without a timer is refused up front. 127.0.0.1 and socket
//! pairs only; every wait has a timeout.
#![cfg(feature = "tokio")]
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::io::Read;
use std::time::Duration;

use nagless::tokio_adapter::NaglessStream;
use nagless::FlushPolicy;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BULK: usize = 8 << 20;
const LIMIT: Duration = Duration::from_secs(30);

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// A std peer on its own thread that reads slowly (64 KiB then a 1 ms nap), then answers
/// "done" once it has `expect` bytes, then reads to EOF. Returns everything it read.
fn slow_peer(listener: std::net::TcpListener, expect: usize) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        while got.len() < expect {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "EOF after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
            std::thread::sleep(Duration::from_millis(1));
        }
        std::io::Write::write_all(&mut s, b"done").unwrap();
        s.read_to_end(&mut got).unwrap();
        got
    })
}

fn listen() -> (std::net::TcpListener, std::net::SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// One task: 8 MiB to a slow reader, `flush` must finish; then the linger timer must still
/// work for a later small burst (it was never starved by the writer's wake-ups).
async fn one_task() {
    let (l, addr) = listen();
    let tail = b"tail after backpressure";
    let peer = slow_peer(l, BULK + tail.len());
    let mut s = NaglessStream::new(TcpStream::connect(addr).await.unwrap()).unwrap();
    let data = pattern(BULK);
    tokio::time::timeout(LIMIT, async {
        s.write_all(&data).await.unwrap();
        s.flush().await.unwrap();
    })
    .await
    .expect("flush under backpressure never finished");
    // Neither flushed nor followed by a read: only the timer can send this.
    s.write_all(tail).await.unwrap();
    let mut done = [0u8; 4];
    tokio::time::timeout(LIMIT, s.read_exact(&mut done))
        .await
        .expect("the peer never got the tail: the linger timer is gone")
        .unwrap();
    drop(s);
    let got = tokio::task::spawn_blocking(move || peer.join().unwrap())
        .await
        .unwrap();
    assert_eq!(got.len(), BULK + tail.len());
    assert_eq!(&got[..BULK], &data[..]);
    assert_eq!(&got[BULK..], tail);
}

/// Two tasks on split halves: the reader waits for "done" (and so drives output whenever it
/// is polled), the writer writes 8 MiB and flushes. Both must finish.
async fn split_halves() {
    let (l, addr) = listen();
    let peer = slow_peer(l, BULK);
    let (mut rd, mut wr) = NaglessStream::new(TcpStream::connect(addr).await.unwrap())
        .unwrap()
        .into_split();
    let reader = tokio::spawn(async move {
        let mut done = [0u8; 4];
        rd.read_exact(&mut done).await.unwrap();
        rd
    });
    let data = pattern(BULK);
    let writer = tokio::spawn(async move {
        wr.write_all(&data).await.unwrap();
        wr.flush().await.unwrap();
        wr
    });
    let wr = tokio::time::timeout(LIMIT, writer)
        .await
        .expect("the writer's flush was never woken")
        .unwrap();
    let rd = tokio::time::timeout(LIMIT, reader)
        .await
        .expect("the reader never got the answer")
        .unwrap();
    let s = wr.reunite(rd).unwrap();
    drop(s);
    let got = tokio::task::spawn_blocking(move || peer.join().unwrap())
        .await
        .unwrap();
    assert_eq!(got, pattern(BULK));
}

#[test]
fn flush_under_backpressure_finishes_one_task_current_thread() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(one_task());
}

#[test]
fn flush_under_backpressure_finishes_one_task_multi_thread() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(one_task());
}

#[test]
fn flush_under_backpressure_finishes_split_halves_current_thread() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(split_halves());
}

#[test]
fn flush_under_backpressure_finishes_split_halves_multi_thread() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(split_halves());
}

#[test]
fn a_runtime_without_a_timer_is_refused_when_the_stream_is_made() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async {
        let (l, addr) = listen();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let e = NaglessStream::new(tcp).expect_err("linger needs the time driver");
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("enable_time"), "{e}");
        // A policy without linger needs no timer, and works.
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut s = NaglessStream::with_policy(tcp, FlushPolicy::default().linger(None)).unwrap();
        s.write_all(b"hello").await.unwrap();
        s.flush().await.unwrap();
        let _first = l.accept().unwrap();
        let (mut peer, _) = l.accept().unwrap();
        let mut got = [0u8; 5];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
    });
}

/// A stream dropped with its queue full hands the queue to a background task, which sends
/// every byte. The peer reads nothing until the drop, and both ends' buffers are small, so the
/// queue fills however the machine schedules the two (a peer that slept 200 ms before reading
/// once woke, on a busy machine, while the writer still wrote, and took everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_stream_with_a_full_queue_still_delivers_every_byte() {
    let small = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    small.set_recv_buffer_size(64 << 10).unwrap();
    small
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    small.listen(1).unwrap();
    let l: std::net::TcpListener = small.into();
    let addr = l.local_addr().unwrap();
    let (go, dropped) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        dropped.recv().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    let tcp = tokio::net::TcpSocket::new_v4().unwrap();
    tcp.set_send_buffer_size(64 << 10).unwrap();
    let mut s = NaglessStream::with_policy(
        tcp.connect(addr).await.unwrap(),
        FlushPolicy::explicit_only(),
    )
    .unwrap();
    let data = pattern(BULK);
    // Writes until one waits (the kernel's buffers full, the queue at its mark) with bytes
    // queued. A write either takes bytes or none, so one cut short by the timeout lost none.
    let mut written = 0;
    let start = std::time::Instant::now();
    loop {
        assert!(written < BULK, "{BULK} bytes went without a wait");
        assert!(start.elapsed() < LIMIT, "no write ever waited");
        match tokio::time::timeout(Duration::from_millis(100), s.write(&data[written..])).await {
            Ok(n) => written += n.unwrap(),
            Err(_) if s.pending() > 0 => break,
            Err(_) => {}
        }
    }
    drop(s); // no flush, no shutdown: the queue is handed to a background task
    go.send(()).unwrap();
    let got = tokio::time::timeout(
        LIMIT,
        tokio::task::spawn_blocking(move || peer.join().unwrap()),
    )
    .await
    .expect("the dropped stream's bytes never all arrived")
    .unwrap();
    assert_eq!(got.len(), written);
    assert_eq!(got, data[..written]);
}

#[cfg(unix)] // a UNIX socket pair
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_half_leaves_the_write_halfs_error_to_the_writer() {
    let (ours, mut peer) = tokio::net::UnixStream::pair().unwrap();
    peer.write_all(b"413 too large").await.unwrap();
    drop(peer);
    let (mut rd, mut wr) = NaglessStream::from_io(ours, FlushPolicy::immediate())
        .unwrap()
        .into_split();
    // Accepted; the send fails (EPIPE) and the error is kept for the writer.
    wr.write_all(b"a large request").await.unwrap();
    let mut reply = Vec::new();
    rd.read_to_end(&mut reply).await.unwrap();
    assert_eq!(reply, b"413 too large");
    let e = wr.flush().await.expect_err("the writer gets its error");
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectored_writes_are_one_message_and_halves_reunite_only_with_their_own() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let a = NaglessStream::new(TcpStream::connect(addr).await.unwrap()).unwrap();
    let (mut pa, _) = listener.accept().await.unwrap();
    let b = NaglessStream::new(TcpStream::connect(addr).await.unwrap()).unwrap();
    assert!(a.is_write_vectored());
    let (ra, mut wa) = a.into_split();
    let (rb, wb) = b.into_split();
    #[cfg(target_os = "linux")]
    let before = wa.tcp_info().unwrap().data_segs_out.unwrap();
    let bufs = [
        std::io::IoSlice::new(b"HTTP/1.1 200 OK\r\n"),
        std::io::IoSlice::new(b"content-length: 5\r\n\r\n"),
        std::io::IoSlice::new(b"hello"),
    ];
    let n = wa.write_vectored(&bufs).await.unwrap();
    assert_eq!(n, 17 + 21 + 5);
    wa.flush().await.unwrap();
    let mut got = vec![0u8; n];
    pa.read_exact(&mut got).await.unwrap();
    assert_eq!(&got[n - 5..], b"hello");
    #[cfg(target_os = "linux")]
    assert_eq!(wa.tcp_info().unwrap().data_segs_out.unwrap() - before, 1);
    assert_eq!(wa.stats().flushes, 1, "one gathered send");
    let err = wa.reunite(rb).expect_err("halves of two streams");
    let (rb, wa) = (err.0, err.1);
    assert!(wa.reunite(ra).is_ok());
    assert!(wb.reunite(rb).is_ok());
}

/// A tokio stream that is not `Send` (an `Rc` rides along), as `LocalSet` programs have.
struct NotSend(TcpStream, #[allow(dead_code)] std::rc::Rc<()>);

impl tokio::io::AsyncRead for NotSend {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for NotSend {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[test]
fn a_stream_that_is_not_send_works_on_a_local_set_and_is_refused_elsewhere() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let (l, addr) = listen();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut peer, _) = l.accept().unwrap();
        let mut s = NaglessStream::from_io_local(
            NotSend(tcp, std::rc::Rc::new(())),
            FlushPolicy::default(),
        )
        .unwrap();
        s.write_all(b"local").await.unwrap();
        assert_eq!(s.pending(), 5, "held for coalescing");
        // Only the linger timer (a spawn_local task) can send it now.
        let got = tokio::task::spawn_blocking(move || {
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 5];
            peer.read_exact(&mut b).map(|()| b)
        })
        .await
        .unwrap()
        .expect("the local linger timer never flushed");
        assert_eq!(&got, b"local");
        drop(s);
    });
    // On the runtime but outside a LocalSet: a clear error, not a panic later.
    rt.block_on(async {
        let (_l, addr) = listen();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let e = NaglessStream::from_io_local(
            NotSend(tcp, std::rc::Rc::new(())),
            FlushPolicy::default(),
        )
        .expect_err("outside a LocalSet");
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("LocalSet"), "{e}");
    });
}

/// A second handle of the socket, as a std stream.
#[cfg(unix)]
fn dup(tcp: &TcpStream) -> std::os::fd::OwnedFd {
    use std::os::fd::AsFd;
    tcp.as_fd().try_clone_to_owned().unwrap()
}

/// A second handle of the socket, as a std stream.
#[cfg(windows)]
fn dup(tcp: &TcpStream) -> std::os::windows::io::OwnedSocket {
    use std::os::windows::io::AsSocket;
    tcp.as_socket().try_clone_to_owned().unwrap()
}

/// How the test below makes bytes due while the socket is full.
enum MakeDue {
    /// A `SendNow` write.
    SendNowWrite,
    /// A `flush()` that is given up (its future dropped) while the socket is full.
    AbandonedFlush,
}

/// Bytes made due while the socket is full and the flusher sleeps towards a far linger
/// deadline leave as soon as the socket has room, not at that deadline.
async fn bytes_made_due_on_a_full_socket(how: MakeDue) {
    use nagless::Urgency;
    use std::io::Write;
    const FAR: Duration = Duration::from_secs(5);
    let (l, addr) = listen();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut peer, _) = l.accept().unwrap();
    // Fixed buffer sizes on both ends: a kernel that grows them on its own (receive-buffer
    // autotuning, send-buffer expansion as ACKs come back) would make room while the test
    // expects none.
    socket2::SockRef::from(&peer)
        .set_recv_buffer_size(16 * 1024)
        .unwrap();
    socket2::SockRef::from(&tcp)
        .set_send_buffer_size(16 * 1024)
        .unwrap();
    // Fill the socket through a second descriptor of it: the kernel's buffers are full and
    // the stream's own queue is empty.
    let mut filler = std::net::TcpStream::from(dup(&tcp));
    let mut filled = 0;
    let chunk = [7u8; 64 * 1024];
    // Down to single bytes, twice (the kernel may grow the buffers after the first pass).
    for size in [64 * 1024, 1024, 1, 64 * 1024, 1024, 1] {
        loop {
            match filler.write(&chunk[..size]) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(filler);
    let mut s = NaglessStream::with_policy(tcp, FlushPolicy::default().linger(Some(FAR))).unwrap();
    // A small write: pending, due at the far deadline; the flusher sleeps towards it.
    s.write_with(b"small", Urgency::Normal).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Made due now, but the socket is full.
    match how {
        MakeDue::SendNowWrite => {
            s.write_with(b" urgent", Urgency::SendNow).await.unwrap();
        }
        MakeDue::AbandonedFlush => {
            s.write_with(b" urgent", Urgency::Normal).await.unwrap();
            let flush = tokio::time::timeout(Duration::from_millis(50), s.flush());
            assert!(
                flush.await.is_err(),
                "the flush should wait for a full socket"
            );
        }
    }
    assert!(s.pending() > 0, "the socket should have been full");
    let expect = filled + b"small urgent".len();
    let start = std::time::Instant::now();
    let got = tokio::task::spawn_blocking(move || {
        let mut got = vec![0u8; expect];
        peer.read_exact(&mut got).unwrap();
        got
    })
    .await
    .unwrap();
    let took = start.elapsed();
    assert_eq!(&got[filled..], b"small urgent");
    assert!(
        took < FAR / 2,
        "the urgent bytes waited {took:?}, for the linger deadline ({FAR:?})"
    );
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_a_send_now_write_makes_due_on_a_full_socket_leave_when_it_drains() {
    bytes_made_due_on_a_full_socket(MakeDue::SendNowWrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_an_abandoned_flush_made_due_on_a_full_socket_leave_when_it_drains() {
    bytes_made_due_on_a_full_socket(MakeDue::AbandonedFlush).await;
}

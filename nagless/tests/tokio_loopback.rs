//! The tokio adapter on 127.0.0.1: no stall, one segment per request, a linger that fires by
//! timer while the task is busy elsewhere, and split halves that keep before-read.
#![cfg(feature = "tokio")]
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::time::{Duration, Instant};

use nagless::tokio_adapter::NaglessStream;
use nagless::FlushPolicy;
#[cfg(target_os = "linux")]
use nagless::TcpInfo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ROUNDS: usize = 50;

#[path = "support/rounds.rs"]
mod rounds;

async fn reply_server(rounds: usize) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let h = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut req = [0u8; 200];
        for _ in 0..rounds {
            s.read_exact(&mut req).await.unwrap();
            s.write_all(&[b'r'; 100]).await.unwrap();
        }
    });
    (addr, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flushes_everything() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut peer, _) = listener.accept().await.unwrap();
    let mut c = NaglessStream::with_policy(tcp, FlushPolicy::explicit_only()).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let reader = tokio::spawn(async move {
        let mut v = Vec::new();
        peer.read_to_end(&mut v).await.unwrap();
        v
    });
    for chunk in data.chunks(1000) {
        c.write_all(chunk).await.unwrap();
    }
    c.shutdown().await.unwrap();
    assert_eq!(reader.await.unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_now_leaves_without_a_flush() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut peer, _) = listener.accept().await.unwrap();
    let mut c = NaglessStream::with_policy(tcp, FlushPolicy::explicit_only()).unwrap();
    c.write_with(b"queued ", nagless::Urgency::Normal)
        .await
        .unwrap();
    assert_eq!(c.pending(), 7);
    c.write_with(b"now", nagless::Urgency::SendNow)
        .await
        .unwrap();
    let mut got = [0u8; 10];
    tokio::time::timeout(Duration::from_secs(5), peer.read_exact(&mut got))
        .await
        .expect("SendNow bytes never arrived")
        .unwrap();
    assert_eq!(&got, b"queued now");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_met_by_the_timer_flush_is_reported_to_the_next_call() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (peer, _) = listener.accept().await.unwrap();
    drop(peer);
    let policy = FlushPolicy::default().linger(Some(Duration::from_micros(500)));
    let mut c = NaglessStream::with_policy(tcp, policy).unwrap();
    // Only the timer ever sends; the error it meets must surface at a later call.
    let mut failure = None;
    for _ in 0..200 {
        match c.write_with(&[0u8; 100], nagless::Urgency::Normal).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let e = failure.expect("the timer's send error was swallowed");
    assert!(
        matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ),
        "{e:?}"
    );
    assert!(c.stats().flushes_for(nagless::FlushReason::Linger) >= 1);
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plain_tokio_stream_stalls() {
        let (addr, server) = reply_server(ROUNDS).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        let mut reply = [0u8; 100];
        let mut stalled = 0;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            c.write_all(&[b'a'; 100]).await.unwrap();
            c.write_all(&[b'b'; 100]).await.unwrap();
            c.read_exact(&mut reply).await.unwrap();
            if t.elapsed() >= Duration::from_millis(30) {
                stalled += 1;
            }
        }
        server.await.unwrap();
        assert!(stalled >= ROUNDS / 2, "only {stalled}/{ROUNDS} stalled");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nagless_tokio_stream_never_stalls() {
        let (addr, server) = reply_server(ROUNDS).await;
        let tcp = TcpStream::connect(addr).await.unwrap();
        #[cfg(target_os = "linux")]
        let before = TcpInfo::of(&tcp).unwrap().data_segs_out.unwrap();
        let mut c = NaglessStream::new(tcp).unwrap();
        let mut reply = [0u8; 100];
        let (mut times, mut writing) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
        for _ in 0..ROUNDS {
            let t = Instant::now();
            c.write_all(&[b'a'; 100]).await.unwrap();
            c.write_all(&[b'b'; 100]).await.unwrap();
            writing.push(t.elapsed());
            c.read_exact(&mut reply).await.unwrap();
            times.push(t.elapsed());
        }
        server.await.unwrap();
        #[cfg(target_os = "linux")]
        let segs = c.tcp_info().unwrap().data_segs_out.unwrap() - before;
        rounds::assert_no_stall(&times);
        // One segment per request; a round where the task was descheduled for longer than the
        // linger bound between its two writes legitimately sends the first one alone.
        let lingered = c.stats().flushes_for(nagless::FlushReason::Linger) as usize;
        // A linger flush is a thread descheduled mid-burst: only a round as long as the linger.
        rounds::assert_lingers_fit(lingered, &writing, nagless::DEFAULT_LINGER);
        // A linger flush between the writes sends the first alone; one after the second (the
        // task descheduled before its read) sends both together.
        #[cfg(target_os = "linux")]
        assert!(
            (ROUNDS..=ROUNDS + lingered).contains(&(segs as usize)),
            "{segs} segments"
        );
        // One gathered send per request, two where a linger release sent the first write alone,
        // and one more for each send the kernel refused for the moment (WouldBlock: tokio's
        // readiness can be stale), whose bytes went at the next try.
        let st = c.stats();
        let refused = st.would_block as usize;
        assert!(
            (ROUNDS..=ROUNDS + lingered + refused).contains(&(st.flushes as usize)),
            "{st:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn split_halves_keep_before_read() {
        let (addr, server) = reply_server(ROUNDS).await;
        let tcp = TcpStream::connect(addr).await.unwrap();
        // No linger: only before-read can release the requests.
        let policy = FlushPolicy::default().linger(None);
        let (mut rd, mut wr) = NaglessStream::with_policy(tcp, policy)
            .unwrap()
            .into_split();
        let mut reply = [0u8; 100];
        let mut times = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let t = Instant::now();
            wr.write_all(&[b'a'; 100]).await.unwrap();
            wr.write_all(&[b'b'; 100]).await.unwrap();
            rd.read_exact(&mut reply).await.unwrap();
            times.push(t.elapsed());
        }
        server.await.unwrap();
        rounds::assert_no_stall(&times);
        let st = wr.stats();
        assert_eq!(
            st.segment_checks, 1,
            "one TCP_INFO query, when the stream was made"
        );
        assert_eq!(
            (st.syscalls - st.segment_checks) as usize,
            ROUNDS,
            "one send per request"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn linger_fires_by_timer_while_the_task_waits_elsewhere() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut peer, _) = listener.accept().await.unwrap();
        let policy = FlushPolicy::default().linger(Some(Duration::from_micros(500)));
        let mut c = NaglessStream::with_policy(tcp, policy).unwrap();
        c.write_all(b"ping").await.unwrap();
        assert_eq!(c.pending(), 4, "held for coalescing");
        // The writer never touches the stream again; the peer must still get the bytes.
        let mut got = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), peer.read_exact(&mut got))
            .await
            .expect("linger timer never flushed")
            .unwrap();
        assert_eq!(&got, b"ping");
        assert_eq!(c.pending(), 0);
        assert_eq!(c.stats().flushes_for(nagless::FlushReason::Linger), 1);
    }
}

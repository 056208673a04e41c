//! The stall count the trials read: `nagless watch`'s backend on a thread of its own.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::log;

/// The watch that counts stalls for the trials: `nagless watch`'s backend (eBPF where it
/// loads, else sampling) on a thread of its own, each stall sent as (pid, local, remote).
pub(super) struct StallWatch {
    pub(super) rx: mpsc::Receiver<(u32, SocketAddr, SocketAddr)>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StallWatch {
    pub(super) fn start() -> Result<StallWatch, String> {
        use nagless_watch::backend::{Backend, Choice};
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut w = match Backend::open(Choice::Auto, nagless_watch::Filter::default()) {
                Ok((w, _)) => w,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            w.keep_stalls();
            let every = if w.name() == "ebpf" {
                Duration::from_millis(50)
            } else {
                Duration::from_millis(2)
            };
            let _ = ready_tx.send(Ok(w.name()));
            while !stopping.load(Ordering::Relaxed) {
                if w.sample().is_err() {
                    break;
                }
                for e in w.take_stalls() {
                    if let Some(pid) = e.key.pid {
                        let _ = tx.send((pid, e.local, e.remote));
                    }
                }
                std::thread::sleep(every);
            }
        });
        match ready.recv() {
            Ok(Ok(name)) => {
                log(format_args!(
                    "counting stalls for the rules on trial ({name} backend)"
                ));
                Ok(StallWatch {
                    rx,
                    stop,
                    thread: Some(thread),
                })
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err("the watch thread ended".into()),
        }
    }
}

impl StallWatch {
    /// Its thread ended (its backend failed).
    pub(super) fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl Drop for StallWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

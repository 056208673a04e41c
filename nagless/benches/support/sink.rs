//! A loopback connection whose peer reads and discards everything: the socket the write-cost
//! measurements write to (shared by `benches/queue.rs` and `examples/write_cost.rs`).

use std::io::Read;
use std::net::{TcpListener, TcpStream};

/// A connected stream whose far end discards everything.
pub fn sink() -> TcpStream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    TcpStream::connect(addr).unwrap()
}

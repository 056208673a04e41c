//! Which way a segment goes: [`Direction`], and per-direction pairs (`[T; 2]`) indexed by it.

use std::ops::{Index, IndexMut};

/// The side that sent a segment, and so the direction it goes: from the client (the SYN
/// sender; without a handshake, the side with the higher port) to the server, or back.
///
/// Per-direction state is a pair `[T; 2]`, indexed by a `Direction` (client first, as in
/// [`FlowReport::sides`](super::FlowReport::sides)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Sent by the client.
    Client,
    /// Sent by the server.
    Server,
}

impl Direction {
    /// Both, client first (the order of per-direction pairs).
    pub(crate) const BOTH: [Direction; 2] = [Direction::Client, Direction::Server];

    /// The other side: the receiver of what this side sends.
    pub(crate) fn peer(self) -> Direction {
        match self {
            Direction::Client => Direction::Server,
            Direction::Server => Direction::Client,
        }
    }

    /// The position in a per-direction pair: 0 for the client, 1 for the server.
    pub(crate) fn index(self) -> usize {
        match self {
            Direction::Client => 0,
            Direction::Server => 1,
        }
    }
}

impl<T> Index<Direction> for [T; 2] {
    type Output = T;

    fn index(&self, d: Direction) -> &T {
        &self[d.index()]
    }
}

impl<T> IndexMut<Direction> for [T; 2] {
    fn index_mut(&mut self, d: Direction) -> &mut T {
        &mut self[d.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_and_pairs() {
        for d in Direction::BOTH {
            assert_eq!(d.peer().peer(), d);
            assert_ne!(d.peer(), d);
        }
        let mut pair = ["client", "server"];
        assert_eq!(pair[Direction::Client], "client");
        assert_eq!(pair[Direction::Server], "server");
        pair[Direction::Server.peer()] = "c";
        assert_eq!(pair, ["c", "server"]);
    }
}

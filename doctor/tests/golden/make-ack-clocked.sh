#!/bin/sh
# Makes the ACK-clocked ground-truth captures in doctor/tests/clocked/ (gzip pcap) and their
# notes (made.txt): a multiplexed client with Nagle on (ACK-clocked) and with TCP_NODELAY, and
# a sequential client with Nagle on (not clocked), on loopback and at both ends of a 10 ms
# emulated path (network namespaces: needs root, tcpdump and iproute2). The load and the
# capture are the ignored test `make_captures` in doctor/tests/clocked.rs.
set -eu
cd "$(dirname "$0")/../../.."
cargo test -p nagless-doctor --test clocked -- --ignored --exact make_captures --nocapture
ls -l doctor/tests/clocked/

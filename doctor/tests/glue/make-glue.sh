#!/bin/sh
# Makes the captures of doctor/tests/glue/: each of the lab's glue cases (issue 54) with its
# program as shipped (`-s nagle`; nodelay-server: `-s nodelay`), captured on loopback with
# tcpdump (first 128 bytes of each frame). Run as root, from the repository, on a quiet
# machine (the capture takes all of lo); needs tcpdump.
set -eu
out=$(dirname "$0")
cargo build -q --release -p nagless-cli
for case in sse-stream:nagle tls-first-request:nagle nodelay-server:nodelay relay-hop:nagle; do
    name=${case%%:*}
    strategy=${case#*:}
    tcpdump -i lo --immediate-mode -U -Z root -s 128 -w "$out/$name.pcap" tcp 2>/dev/null &
    dump=$!
    sleep 1
    ./target/release/nagless lab "$name" --quick --repeat 1 --strategy "$strategy" >/dev/null 2>&1
    sleep 1.5
    kill "$dump"
    wait "$dump" || true
done
ls -l "$out"/*.pcap

"""The client of scripts/c/forkgreet.c (scripts/bench-forked): N connections one after
another; per connection the time from connect to the greeting, and from sending the module
line to the "@RSYNCD: OK" that follows the child's setuid calls. Prints the medians, 99th
percentiles and maxima in ms, and how many took over 20 ms.
usage: forkgreet_client.py PORT N"""
import socket
import sys
import time

port, n = int(sys.argv[1]), int(sys.argv[2])
greet, ok = [], []
for _ in range(n):
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"@RSYNCD: 31.0 md5\n")
    f = s.makefile("rb")
    f.readline()
    greet.append((time.monotonic() - t0) * 1e3)
    t1 = time.monotonic()
    s.sendall(b"mod\n")
    f.readline()
    ok.append((time.monotonic() - t1) * 1e3)
    s.sendall(b"--server\n.\n\n")
    s.shutdown(socket.SHUT_WR)
    f.read()
    s.close()


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


for name, v in (("greeting", greet), ("after setuid", ok)):
    print(f"  {name:<13} p50 {q(v, .5):7.3f}  p99 {q(v, .99):7.3f}  max {max(v):7.3f}  "
          f"over 20 ms {sum(x > 20 for x in v)}")

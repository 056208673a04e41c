#!/usr/bin/env python3
"""Short connections that stall once, as a TLS 1.3 server's first answer does (issue 54).

    short_stalls.py server PORT
    short_stalls.py client PORT RATE SECONDS

Each connection: the client sends a hello (100 B), the server answers (600 B, its
handshake), the client sends 200 B (its Finished and request, so its kernel takes the
connection for an interactive one and delays its next ACK), and the server writes 200 B
(tickets) then 100 B (the answer) with Nagle on: the answer waits for the client's delayed
ACK of the tickets. The client reads both and closes. Connections start RATE a second, one at
a time, at random (exponential) intervals as independent clients arrive, seeded; the client
prints how many it made and how many took 30 ms or more after the request.
"""
import random
import socket
import sys
import threading
import time


def serve_one(c):
    try:
        c.recv(100, socket.MSG_WAITALL)
        c.sendall(b"h" * 600)
        c.recv(200, socket.MSG_WAITALL)
        c.sendall(b"t" * 200)
        c.sendall(b"a" * 100)
        while c.recv(4096):
            pass
    except OSError:
        pass
    finally:
        c.close()


def server(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve_one, args=(c,), daemon=True).start()


def client(port, rate, seconds):
    made = slow = 0
    arrivals = random.Random(54)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t0 = time.monotonic()
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sendall(b"c" * 100)
        c.recv(600, socket.MSG_WAITALL)
        t1 = time.monotonic()
        c.sendall(b"f" * 200)
        c.recv(300, socket.MSG_WAITALL)
        if time.monotonic() - t1 >= 0.030:
            slow += 1
        c.close()
        made += 1
        left = arrivals.expovariate(rate) - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    print(f"connections {made} stalled {slow}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]))
    else:
        client(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))

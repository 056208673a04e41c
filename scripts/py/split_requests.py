"""A client that sends each request as two writes and then reads the answer (the write-write-
read of every Nagle/delayed-ACK stall), and its server, which answers each whole request
with one write. Run the server under `nagless run --ack-delay-max` to remove the stall from
the receiver's side, the client left as it is.

usage: split_requests.py server PORT
       split_requests.py client PORT EXCHANGES
The client prints: the median and the worst exchange in microseconds.
"""
import socket
import sys
import time

PART = 100


def server(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(4)
    while True:
        conn, _ = ls.accept()
        left = 0
        while True:
            data = conn.recv(65536)
            if not data:
                break
            left += len(data)
            while left >= 2 * PART:
                left -= 2 * PART
                conn.sendall(b"A" * PART)
        conn.close()


def client(port, n):
    s = socket.create_connection(("127.0.0.1", port))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        s.send(b"h" * PART)
        s.send(b"b" * PART)
        got = 0
        while got < PART:
            got += len(s.recv(65536))
        times.append(time.perf_counter() - t)
    times.sort()
    print("median %.0f us worst %.0f us" % (times[n // 2] * 1e6, times[-1] * 1e6))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]))
    else:
        client(int(sys.argv[2]), int(sys.argv[3]))

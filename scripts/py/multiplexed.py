"""A multiplexed client and its server: several writer threads share one TCP connection,
each sending 40-byte requests under a lock and then waiting on a semaphore of IN_FLIGHT
requests in flight, while one reader thread receives the 40-byte responses (the shape of a
Redis, gRPC or database client that shares a connection between tasks: redis-rs #2195).

usage: multiplexed.py server PORT [each]   (each: one send per response, not one per read)
       multiplexed.py client PORT REQUESTS [WRITERS] [IN_FLIGHT] [split]
(split: each request is written in two halves, a header and a body, under the lock: with
one in flight, Nagle holds the body until the server's delayed ACK of the header.)
The client prints one line: requests/s, p50 and p99 latency in microseconds, and its data
segments sent per request (TCP_INFO's tcpi_data_segs_out).
"""
import socket
import struct
import sys
import threading
import time

SIZE = 40


def server(port, each):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(conn, each), daemon=True).start()


def serve(conn, each):
    # Answers the whole requests it has received: with one send, or one send each.
    left = 0
    while True:
        data = conn.recv(65536)
        if not data:
            return
        left += len(data)
        n, left = divmod(left, SIZE)
        if n and each:
            for _ in range(n):
                conn.sendall(b"R" * SIZE)
        elif n:
            conn.sendall(b"R" * (SIZE * n))


def data_segs_out(s):
    # struct tcp_info: tcpi_data_segs_out is the u32 at offset 156 (Linux 4.6+).
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    return struct.unpack_from("I", info, 156)[0]


def client(port, requests, writers, in_flight, split=False):
    s = socket.create_connection(("127.0.0.1", port))
    sem = threading.Semaphore(in_flight)
    lock = threading.Lock()
    sent = []  # send times, in order: responses come back in order
    per = requests // writers
    total = per * writers
    lat = []
    before = data_segs_out(s)

    def write():
        for _ in range(per):
            sem.acquire()
            with lock:
                sent.append(time.perf_counter())
                if split:
                    s.sendall(b"H" * (SIZE // 2))
                    s.sendall(b"B" * (SIZE - SIZE // 2))
                else:
                    s.send(b"Q" * SIZE)

    def read():
        got = 0
        done = 0
        while done < total:
            data = s.recv(65536)
            if not data:
                raise SystemExit("server closed")
            got += len(data)
            now = time.perf_counter()
            while done < got // SIZE:
                lat.append(now - sent[done])
                done += 1
                sem.release()

    start = time.perf_counter()
    threads = [threading.Thread(target=write) for _ in range(writers)]
    r = threading.Thread(target=read)
    r.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r.join()
    secs = time.perf_counter() - start
    segs = data_segs_out(s) - before
    lat.sort()
    print(
        "%.0f req/s  p50 %.0f us  p99 %.0f us  %.3f segments/request"
        % (total / secs, lat[len(lat) // 2] * 1e6, lat[len(lat) * 99 // 100] * 1e6, segs / total)
    )


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), sys.argv[3:] == ["each"])
    else:
        split = sys.argv[-1] == "split"
        a = [int(x) for x in sys.argv[2 : len(sys.argv) - split]]
        client(a[0], a[1], a[2] if len(a) > 2 else 4, a[3] if len(a) > 3 else 64, split)

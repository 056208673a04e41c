"""The workloads of scripts/bench-fix-policy: CGROUPS processes, each in a cgroup of its own
under PARENT (a cgroup v2 directory), each holding CONNS connections to a listener here; one
more process in UNSELECTED (a cgroup outside PARENT) holding CONNS too. Driven on stdin, one
command per line, answered on stdout:

  ready                  (printed once every process holds its connections)
  nodelay                -> "selected S/T unselected U/C": sockets with TCP_NODELAY set
  new                    -> a new process in the first cgroup opens one connection: its pid
  quit

Each process reports its own sockets' TCP_NODELAY through a pipe (the program's own view).
Loopback only; every process is a child of this one and ends with it.
"""
import os
import signal
import socket
import sys
import threading


def main():
    parent, unselected, cgroups, conns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(4096)
    port = lst.getsockname()[1]
    held = []

    def accept():
        while True:
            try:
                s, _ = lst.accept()
            except OSError:
                return
            held.append(s)

    threading.Thread(target=accept, daemon=True).start()

    children = []  # (pid, to_child, from_child, selected)

    def spawn(cgroup, n, selected):
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(w1)
            os.close(r2)
            # Only its own connections: none of the listener's, nor the other children's pipes.
            keep = {r1, w2, 0, 1, 2}
            for fd in map(int, os.listdir("/proc/self/fd")):
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
            inp, out = os.fdopen(r1), os.fdopen(w2, "w")
            out.write("ok\n")
            out.flush()
            for line in inp:
                if line.strip() == "q":
                    break
                on = sum(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0 for s in socks)
                out.write(f"{on} {len(socks)}\n")
                out.flush()
            os._exit(0)
        os.close(r1)
        os.close(w2)
        to, frm = os.fdopen(w1, "w"), os.fdopen(r2)
        assert frm.readline().strip() == "ok"
        children.append((pid, to, frm, selected))
        return pid

    for i in range(cgroups):
        d = os.path.join(parent, f"w{i}")
        os.makedirs(d, exist_ok=True)
        spawn(d, conns, True)
    spawn(unselected, conns, False)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "nodelay":
            sel = [0, 0]
            uns = [0, 0]
            for _, to, frm, selected in children:
                to.write("?\n")
                to.flush()
                on, n = map(int, frm.readline().split())
                t = sel if selected else uns
                t[0] += on
                t[1] += n
            print(f"selected {sel[0]}/{sel[1]} unselected {uns[0]}/{uns[1]}", flush=True)
        elif cmd == "new":
            print(spawn(os.path.join(parent, "w0"), 1, True), flush=True)
        elif cmd == "quit":
            break
    for pid, to, _, _ in children:
        try:
            to.write("q\n")
            to.flush()
        except OSError:
            pass
        os.waitpid(pid, 0)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()

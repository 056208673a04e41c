//! `nagless watch --help`'s long text: how each backend works, what it can and cannot see,
//! containers, permissions, Prometheus, the output, examples and the exit status.

pub const WATCH_HELP: &str = "\
BACKENDS
  --backend auto (the default) uses eBPF where it loads (root or CAP_BPF+CAP_PERFMON, a
  kernel with BTF and BPF trampolines), else sampling, and says which it took and why.
  eBPF: programs on kernel tracepoints (sock:sock_send_length after each send; tcp:tcp_probe
  and net:net_dev_queue on the ACK path) note each write TCP holds behind unacknowledged data
  (time, bytes, pid, tid, uid, cgroup) and report it when an ACK releases it; the same rule as
  below judges it. Its cost follows sends and held writes, not sockets; it misses no hold,
  sees every network namespace, and its CONNS column counts the connections that stalled.
  Its summary gives the kernel programs' own run time. Sampling: as below.

HOW IT WORKS (sampling)
  It reads TCP sockets' tcp_info through netlink sock_diag (what `ss -ti` shows; how often:
  below) and follows each socket's held writes: bytes written but not sent (notsent) while
  earlier data is unacknowledged and the congestion window has room. When the peer's ACK
  releases them (the ACK arrives and the bytes leave), the hold's length less the path's
  round trip (min_rtt; the smoothed RTT counts the delayed ACKs themselves) is how late that
  ACK came. It is a stall when the held bytes are less than the MSS and the ACK came 30 ms or
  more late (Linux's shortest delayed-ACK timer is 40 ms), with no zero window and no loss
  recovery: the rule `nagless doctor` applies to captures (the nagless-stall-rule crate).

WHAT SAMPLING CAN AND CANNOT SEE
  Every SCAN_INTERVAL (100 ms) it asks the kernel for every ESTABLISHED and CLOSE_WAIT socket
  (listening ones only when a new connection appears); between those listings it looks up,
  each by its exact identity, only the sockets that had data in flight (unacknowledged or
  unsent bytes) in the last 2 s, every INTERVAL (2 ms); with none, it waits for the next
  listing. So an idle host costs little, and the cost follows the busy sockets.
  Short connections (a stall in the first 50 ms, then closed): as root the kernel tells it of
  every TCP socket freed, with its last state, so a hold whose connection closed within a
  sample still counts, and a socket that came and went between listings is counted as unseen
  (`sockets_unseen`); while short connections hold writes, listings run four times as often.
  It sees the sending side: a stall shows on the socket whose write waits, on this host. A
  hold shorter than INTERVAL can be missed, and each stall's length is known to within one
  INTERVAL (the default 2 ms is fine for 40 ms and 200 ms delayed-ACK timers). On a
  connection idle for 2 s or more, the first stall after the pause is seen only from the
  listing that finds it busy (up to 1.5 SCAN_INTERVAL late): shortened, or missed; so is a short
  connection whose hold falls between two listings. A remote
  sender waiting for this host's delayed ACKs does not show here (capture at either end and
  use `nagless doctor`).

ACK-CLOCKED CONNECTIONS (not stalls)
  A busy connection shared by many requests (a Redis, gRPC or database client) can lose time
  to Nagle with no stall: each small write waits for the peer's prompt ACK of the last, one
  round trip after another. Both backends add up the holds a prompt ACK released; a group
  with 50 or more of them whose writes waited 10 % or more of the time is ACK-clocked: its
  fix column reads `[N] ACK-clocked 61%`, the summary gives its cost (the share of the time
  its writes queued behind the peer's ACKs, in ms/s) and its fix (TCP_NODELAY: `nagless fix
  --nodelay` live, `nagless run --mode nodelay`, or in code); JSON rows say `kind`
  (stall, ack-clocked, sender-hold or none) and `ack_clocked`; Prometheus counts the time in
  nagless_ack_clocked_seconds_total. It does not change the exit status.

A SENDER'S OWN HOLD (not Nagle; eBPF backend)
  A program that sends a message's last piece with MSG_MORE, or leaves TCP_CORK on, keeps
  that piece in its kernel with nothing in flight: no ACK comes to push it, and the
  kernel's probe timer sends it about 200 ms later (HAProxy #3447, with TCP_NODELAY on).
  The eBPF backend sees such a hold begin (bytes left unsent with TCP_CORK on, or with
  nothing in flight and the peer's window open to them) and end with no ACK, by the
  kernel's ceiling (190 ms or more): the fix column reads
  `(not Nagle: N held by its own cork)`, the summary names the process and port and the fix
  (release the cork after each message); JSON rows say `sender_holds` and `sender_hold_ms`
  (`kind` sender-hold when they cost the row most); Prometheus counts
  nagless_sender_holds_total and nagless_sender_hold_seconds_total. Sampling cannot see it
  (capture either end and use `nagless doctor`). It does not change the exit status.

A LISTENER THAT ACCEPTS TOO SLOWLY (not Nagle; both backends)
  A program whose accept loop falls behind fills its listener's accept queue; the kernel
  then drops new connection attempts, and each such client's connect waits for its SYN to
  be sent again (1 s, then 3 s). Every 250 ms (sampling: at its listings, that often at
  most) both backends look at every listener's queue
  and backlog and the SYNs and handshake ACKs it dropped (sock_diag): the fix column reads
  `(not Nagle: accept queue full 2.4 s, 12 handshake packet(s) dropped)`, the
  summary names the process and port and the fix (accept faster, or raise the backlog up
  to net.core.somaxconn), and a client row of this host that sent segments again to that
  port is pointed to it; JSON rows say `accept_queue`; Prometheus counts
  nagless_accept_queue_full_seconds_total and nagless_accept_queue_drops_total. It does
  not change the exit status.

WHOSE TURN IT WAS (a server slow to answer, a client waiting)
  When the time is no stall and no wait of the network's, it is a program's: a server that
  takes 150 ms to answer. Both backends follow whose turn it is on each connection. eBPF
  counts every turn from the programs' own reads and writes: a server's from its last read
  of a request to its first write of the answer, a client's wait from its last write of a
  request to its first read of the answer. Sampling reads tcp_info's times since data last
  arrived and left (in the kernel's ticks): a turn from the request's arrival to the last
  departure before a look, of the turns its looks see. When a serving row's turns average
  20 ms or more (or a connecting row's waits do), the fix column reads
  `(answers in 150 ms)` or `(answered in 151 ms)`, and the summary names the process and
  port with the path's least round trip beside it: a server's time is its own, not the
  network's; a client's wait far above the round trip is its peer's. A row that stalled or
  lost packets has that time in its turns too, and is told so. A request held unanswered a
  second or more is named before it ends (a client's wait under eBPF: when it ends, or at
  the full walks), on connections that have gone both ways. JSON rows carry waits.own_turn_us, own_turns,
  peer_turn_us, peer_turns, own_open_us, peer_open_us and min_rtt_us; Prometheus
  nagless_own_turn_seconds_total, nagless_own_turns_total, nagless_peer_turn_seconds_total,
  nagless_peer_turns_total, nagless_turn_open_seconds and nagless_tcp_min_rtt_seconds. On a
  connection whose two directions run at once (HTTP/2, streams) turns mean little. It does
  not change the exit status.

CONTAINERS
  Every network namespace named by /proc/PID/ns/net (each container, each Kubernetes pod) is
  entered once to list its sockets; new ones are found every 2 s, gone ones dropped. Rows
  name the namespace and, when the owner's cgroup names one, the container (Docker,
  containerd, CRI-O, Podman ids). Entering takes root (CAP_SYS_ADMIN, CAP_SYS_PTRACE);
  without it only the watcher's own namespace is listed, and it says so. The eBPF backend
  sees the stalls of every namespace in the kernel; it enters them only to list their
  listening ports (whether a row serves its port), and names the namespace and container of
  the writing process from /proc/PID.

PERMISSIONS
  Without root, every socket is still sampled, but only your own processes' sockets can be
  attributed (other users' /proc/PID/fd are unreadable); theirs show as `uid N`. Run as root
  (or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH) to name every process.

PROMETHEUS
  With --serve ADDR (127.0.0.1:9911, or :9911 for every address) it runs until stopped
  (SIGINT or SIGTERM, then a clean exit 0) and serves GET /metrics (OpenMetrics to clients
  that ask for it, as Prometheus does; Prometheus's text format to others):
  nagless_stalls_total, nagless_stall_seconds_total and the histogram
  nagless_stall_duration_seconds, labelled by process (command name), port (served local
  port, or remote port; `ephemeral` for one clients may get), role (serves|connects) and
  container; nagless_connections; the watcher's own cost (nagless_watch_cpu_seconds_total
  and the usual process_* metrics); nagless_build_info. A group unseen for --forget-after
  loses its series, and beyond --max-series groups the rest share one role=\"overflow\"
  series. Many clients are served at once, each with 10 s for its request. The page names
  every process: beyond loopback, serve it with TLS and a password (--web-config FILE, the
  web configuration file of Prometheus's exporters: tls_server_config, basic_auth_users).
  deploy/ holds a systemd unit, a Kubernetes DaemonSet, an example web configuration and
  alerting rules.

OUTPUT
  A table refreshed in place in a terminal (process, port, connections, stalls/s, time lost
  per second, worst stall, fix); JSON lines with --json (one per refresh, then a summary;
  with --stalls also one per stall, to be matched with those of `nagless doctor --json
  --every-stall --top 0` on a capture); a summary of the whole watch at the end, and the
  watcher's own CPU use.
  The process column names the program, not its interpreter: PID, then the script, module
  or main class (`4242 python3 app.py`, `77 java com.example.Main`, `java -jar app.jar`) or
  the executable's name, then its arguments as room allows; its container (`[0123456789ab]`)
  or, outside containers, its systemd unit (`901 redis-server (redis.service)`). A stalling
  row's FIX column points (`[1]`) to one line of advice under the table, shared by every row
  it fits; the summary groups the rows the same way.

EXAMPLES
  nagless watch                                  # the whole host for 10 s, then a summary
  nagless watch --duration 30s                   # for 30 s
  nagless watch --port 8080                      # one port (local or remote)
  nagless watch --pid 4242 --duration 0          # one process, until Ctrl-C
  nagless watch --json --stalls > stalls.jsonl   # JSON lines, one per refresh and per stall
  nagless watch --serve 127.0.0.1:9911           # Prometheus metrics, until stopped
  nagless watch --serve :9911 --web-config /etc/nagless/web.yml   # over TLS, with a password
  nagless watch --backend sampling               # sock_diag sampling even where eBPF loads

EXIT STATUS
  0 no stall seen (or stopped after --serve), 1 stalls seen, 2 bad arguments, no access to
  sock_diag, the --serve address unusable, or a --web-config file refused.";

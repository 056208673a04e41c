# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_nagless_global_optspecs
    string join \n h/help V/version
end

function __fish_nagless_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_nagless_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_nagless_using_subcommand
    set -l cmd (__fish_nagless_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c nagless -n "__fish_nagless_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nagless -n "__fish_nagless_needs_command" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "lab" -d 'Reproduce each published case on loopback, strategy by strategy: latency against packets'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "run" -d 'Run an unmodified program with its TCP sockets coalesced (LD_PRELOAD shim)'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "doctor" -d 'Find Nagle and delayed-ACK stalls in a packet capture (pcap or pcapng, file or stdin)'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "watch" -d 'Find processes stalling on Nagle and delayed ACK, live, from the kernel\'s socket state'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "fix" -d 'Fix a running program\'s stalls from outside, no restart: TCP_NODELAY, a delayed-ACK bound'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "version" -d 'Print the version, commit, target and features; with --verbose, what this host offers'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "generate" -d 'Write the man pages and shell completions (deploy/man, deploy/completions)'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "lab-end" -d 'Serve the end under test of a lab glue case: what the lab starts under `nagless run` for a `run` row'
complete -c nagless -n "__fish_nagless_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c nagless -n "__fish_nagless_using_subcommand lab" -s s -l strategy -d 'Strategies to compare, comma-separated (default: all)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l repeat -d 'Runs per case and strategy (default 3, or 1 with --quick); medians are reported' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l limit -d 'Time limit of one open-ended run, e.g. 1500ms or 2s (a bare number is ms, as the older spelling --limit-ms took; default 1500ms, or 300ms with --quick; on an emulated path 20 round trips, at least 300 ms and at most that)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l mss -d 'Only this path: TCP_MAXSEG on both ends (e.g. 1448); default: loopback, plus 1448 where segments matter' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l k -d 'split-write: writes per message (default: 1, 10, 100, 1000)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l client -d 'Client pattern for custom, e.g. w100,w100,r100' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l server -d 'Server pattern for custom, e.g. r200,w100' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l rounds -d 'Rounds for custom and split-write' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l json-out -d 'Write the results as JSON to FILE (\'-\' for stdout)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l csv-out -d 'Write the results as CSV to FILE (\'-\' for stdout)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l html -d 'Write a self-contained HTML report with SVG charts to FILE' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l rtt -d 'Emulated path round-trip times, comma-separated (e.g. 1ms,20ms): run every case across two network namespaces joined by an emulated link instead of loopback (needs root)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l rate -d 'Emulated link rate, e.g. 100mbit, 1gbit, 500kbit (default: unlimited)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l mtu -d 'Emulated link MTU, bytes (576..=65535)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l loss -d 'Random loss on the emulated link, each direction, e.g. 0.5%' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l queue -d 'Drop-tail queue of the emulated link, bytes (default: one bandwidth-delay product)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l seed -d 'Seed of the emulated link\'s loss (runs with the same seed lose the same packets)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l peer-ack-delay -d 'The server end\'s delayed-ACK timer on the emulated link, as a host that is not Linux would run it: a duration (8ms..=1s) or `windows` (200 ms) or `macos` (100 ms)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l pin -d 'Pin both ends of each connection to this CPU (default: the last CPU)' -r
complete -c nagless -n "__fish_nagless_using_subcommand lab" -s q -l quick -d 'Run every default case small and once: well under a minute'
complete -c nagless -n "__fish_nagless_using_subcommand lab" -s j -l json -d 'Print the results as JSON on stdout (schema in docs/lab-json.md); the tables then go to stderr. As `--json` in doctor and watch'
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l csv -d 'Print the results as CSV on stdout; the tables then go to stderr'
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l seeds -d 'Run each published case in its text\'s conditions and print the text\'s figure beside ours, with a verdict (as root also on emulated paths: BIRD\'s 3.7 ms path to a 200 ms peer, a LAN, a 30 ms path; source 004 drives Debian\'s wrk)'
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l no-pin -d 'Let the scheduler place client and server threads (cross-CPU wake-ups add noise)'
complete -c nagless -n "__fish_nagless_using_subcommand lab" -l no-progress -d 'No progress bar or progress lines'
complete -c nagless -n "__fish_nagless_using_subcommand lab" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nagless -n "__fish_nagless_using_subcommand lab" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_using_subcommand run" -s m -l mode -d 'nagless (cork bursts, release on wait), cork (libautocork\'s rule: release on read and poll/select only), nodelay (set TCP_NODELAY only)' -r -f -a "nagless\t''
cork\t''
nodelay\t''"
complete -c nagless -n "__fish_nagless_using_subcommand run" -l log -d 'Append a debug trace to FILE' -r -F
complete -c nagless -n "__fish_nagless_using_subcommand run" -l stats-file -d 'Keep the counters current in FILE.PID, one file per process (rewritten at most once a second while they change, and at exit): for daemons stopped by a signal, which never print --stats. Workers that drop privileges need FILE\'s directory writable by their user (mode 1777); one that cannot write says so on stderr' -r -F
complete -c nagless -n "__fish_nagless_using_subcommand run" -l linger -d 'Longest time a burst is held when the program neither reads nor polls: 50us..=100ms, e.g. 500us, 2ms (a bare number is µs, as the older spelling --linger-us took, and as NAGLESS_LINGER_US, which it replaces, gives it)' -r
complete -c nagless -n "__fish_nagless_using_subcommand run" -l ack-delay-max -d 'The receiver\'s half, for a program whose peers you cannot change: its ACKs of partial messages leave within DUR (`8ms`: TCP_DELACK_MAX_US, Linux 6.15, rounded up to the kernel\'s tick), or at once with 0 (TCP_QUICKACK after every read, also where the kernel takes no such bound). Says which on stderr' -r
complete -c nagless -n "__fish_nagless_using_subcommand run" -s s -l stats -d 'Print per-process counters to stderr at exit (not where stderr is a socket, as in an inetd service: use --stats-file there)'
complete -c nagless -n "__fish_nagless_using_subcommand run" -l print-shim -d 'Print the path of the shim library (for LD_PRELOAD by hand) and exit'
complete -c nagless -n "__fish_nagless_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nagless -n "__fish_nagless_using_subcommand run" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -l flow -d 'Only this flow: its number in the report' -r
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -s f -l filter -d 'Only flows with this host and/or port on either side: 10.0.0.1, :8000, 10.0.0.1:8000, [::1]:8000. Repeat to require several' -r
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -s n -l top -d 'Report this many flows in full, most stalled time first (0: all)' -r
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -l sort -d 'List each flow\'s stalls in capture order (`time`, as Wireshark lists frames) or the longest first (`delay`). Which stalls are listed does not change: the 5 longest per flow in the report, the 32 longest (or all, --every-stall) in the JSON' -r
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -l svg -d 'Write an SVG timeline of the worst (or chosen) flow to FILE' -r -F
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -s j -l json -d 'Print JSON (schema in docs/doctor-json.md) instead of the report'
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -l every-stall -d 'Keep every stall of each flow in the JSON, not only the worst 32'
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nagless -n "__fish_nagless_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l interval -d 'How often to sample the busy sockets (those with data in flight lately; sampling), or to drain the kernel\'s reports (eBPF, at least 50 ms: each carries the kernel\'s time)' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l scan-interval -d 'How often to list every established socket (finding new and newly busy ones; sampling)' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l backend -d 'Where stalls come from: auto (eBPF where it loads, else sampling), ebpf, sampling' -r -f -a "auto\t''
ebpf\t''
sampling\t''"
complete -c nagless -n "__fish_nagless_using_subcommand watch" -s d -l duration -d 'How long to watch (0: until Ctrl-C) [default: 10s, or 0 with --serve]' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l refresh -d 'How often to refresh the table (or print a JSON line)' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l port -d 'Only connections with this local or remote port' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -s p -l pid -d 'Only this process\'s connections' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l serve -d 'Serve Prometheus metrics on this address (GET /metrics) and run until stopped; `:PORT` listens on every IPv4 address, as exporters\' `:9100` does' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l forget-after -d 'With --serve: a group (process, port, role, container) neither refreshed nor stalling for this long loses its series' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l max-series -d 'With --serve: groups with series of their own at most; the rest share one series labelled role="overflow" (counted in nagless_watch_groups_overflowed_total)' -r
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l web-config -d 'With --serve: TLS and basic authentication from a web configuration file, in the format of Prometheus\'s exporters (exporter-toolkit: `tls_server_config`, `basic_auth_users` with bcrypt hashes); see docs/watch.md' -r -F
complete -c nagless -n "__fish_nagless_using_subcommand watch" -s j -l json -d 'JSON lines instead of the table'
complete -c nagless -n "__fish_nagless_using_subcommand watch" -l stalls -d 'With --json, also a line for each stall as it ends (`"type": "stall"`): when (Unix time), the process, the stalled socket\'s local and remote address, bytes held, ms lost'
complete -c nagless -n "__fish_nagless_using_subcommand watch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nagless -n "__fish_nagless_using_subcommand watch" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_using_subcommand fix" -s p -l pid -d 'The process to fix, and its children' -r
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l cgroup -d 'A cgroup v2 to fix (and every cgroup below it)' -r -F
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l unit -d 'A systemd unit to fix' -r
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l container -d 'A container to fix, by id (12 or more hex digits)' -r
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l port -d 'Only connections with this local or remote port (repeat for several)' -r
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l ack-delay-max -d 'Bound the delayed ACK to this (the receiver\'s side), e.g. 8ms' -r
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l observe -d 'With neither --nodelay nor --ack-delay-max: how long to watch the target first, to choose the fix from the stalls seen' -r
complete -c nagless -n "__fish_nagless_using_subcommand fix" -s d -l duration -d 'How long to keep the fix (0: until Ctrl-C or SIGTERM)' -r
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l policy -d 'A fleet\'s policy file (rules declared once; docs/fix.md): the node agent keeps it true on this host; with --dry-run, what it would select here now' -r -F
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l state -d 'With --policy: the directory of the agent\'s journal and status (what it changed, for its undo after a kill; one agent per directory); with --list: the agent\'s to show' -r -F
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l nodelay -d 'Set TCP_NODELAY (the sender\'s stall)'
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l persist -d 'Pin the fix in bpffs so it outlives this command (new connections only; see --list)'
complete -c nagless -n "__fish_nagless_using_subcommand fix" -s l -l list -d 'List every fix in force on this host: running and pinned'
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l remove -d 'Remove the pinned fix of the selection (with --all: every pinned fix)'
complete -c nagless -n "__fish_nagless_using_subcommand fix" -l all -d 'Mean everything: a selection that covers every process of the host (--pid 1, the root cgroup), or with --remove every pinned fix'
complete -c nagless -n "__fish_nagless_using_subcommand fix" -s n -l dry-run -d 'Show what the selection covers (processes, cgroup, connections) and change nothing'
complete -c nagless -n "__fish_nagless_using_subcommand fix" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nagless -n "__fish_nagless_using_subcommand fix" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_using_subcommand version" -s v -l verbose -d 'Also say what this host offers each command (eBPF, sock_ops, pidfd_getfd, TCP_DELACK_MAX_US, the shim\'s loader)'
complete -c nagless -n "__fish_nagless_using_subcommand version" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c nagless -n "__fish_nagless_using_subcommand version" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_using_subcommand generate" -s h -l help -d 'Print help'
complete -c nagless -n "__fish_nagless_using_subcommand generate" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_using_subcommand lab-end" -s h -l help -d 'Print help'
complete -c nagless -n "__fish_nagless_using_subcommand lab-end" -s V -l version -d 'Print version'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "lab" -d 'Reproduce each published case on loopback, strategy by strategy: latency against packets'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "run" -d 'Run an unmodified program with its TCP sockets coalesced (LD_PRELOAD shim)'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "doctor" -d 'Find Nagle and delayed-ACK stalls in a packet capture (pcap or pcapng, file or stdin)'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "watch" -d 'Find processes stalling on Nagle and delayed ACK, live, from the kernel\'s socket state'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "fix" -d 'Fix a running program\'s stalls from outside, no restart: TCP_NODELAY, a delayed-ACK bound'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "version" -d 'Print the version, commit, target and features; with --verbose, what this host offers'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "generate" -d 'Write the man pages and shell completions (deploy/man, deploy/completions)'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "lab-end" -d 'Serve the end under test of a lab glue case: what the lab starts under `nagless run` for a `run` row'
complete -c nagless -n "__fish_nagless_using_subcommand help; and not __fish_seen_subcommand_from lab run doctor watch fix version generate lab-end help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'

# Shell functions shared by the benchmark scripts (sourced, not run).

# wait_port PORT: true once something listens on 127.0.0.1:PORT (at most 5 s).
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# wait_port_once PORT: true if something listens on 127.0.0.1:PORT now.
wait_port_once() { (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; }

# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

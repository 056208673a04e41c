/* Where the shim's own code may not run (issue 40): children it is not told about, a socket
 * that outlives the process that held bytes on it, limits and sandboxes that count or forbid
 * what the shim adds. One program, `corners CASE`; each case is self-contained and forks a
 * peer over 127.0.0.1 that measures when each message arrives.
 *
 * A message is a 32-byte header (length, whether the peer echoes it, a CLOCK_MONOTONIC
 * timestamp taken just before its first byte was written, a label) and a payload. The peer
 * prints `LABEL_us=N` for each message: the delay from that timestamp to the moment its last
 * byte was read (the clock is the machine's, so it holds across processes). The writer's
 * own fields are printed by the case (`ok=1` when everything it checked held).
 *
 *   vfork V      a vfork child writes a message and _exits; the parent then writes one and
 *                blocks 300 ms in pthread_cond_timedwait (no wait the shim sees):
 *                `child_us`, `parent_us`, `child_exit` (-1: it had not ended 2 s after it
 *                was told to, and was killed). V is `burst` (the child comes after a first
 *                exchange: the parent has held a burst) or `fresh` (the socket connected,
 *                nothing written yet).
 *   clone V      the same with clone(fn, stack, SIGCHLD, arg): the child writes, then blocks
 *                300 ms in read() of a pipe, then returns (glibc then makes the exit system
 *                call, which ends the calling thread, not the process).
 *   _Fork V      the same with glibc's _Fork(): the child writes, blocks 300 ms in read()
 *                of a pipe, then _exits.
 *   scm_rights V process A connects, writes a 2-write message and hands the socket to B
 *                with SCM_RIGHTS, then SIGKILLs itself; B writes ten 50-byte messages 20 ms
 *                apart, each echoed by the peer: `a_us`, `b0_us`..`b9_us`, `peer_messages`.
 *                V is `read` (B reads the echoes, then closes) or `unread` (B closes with
 *                them unread: the kernel resets the connection, dropping what it holds).
 *   unshare      an exchange, then unshare(CLONE_NEWUSER): `unshare=R errno=E threads=T`.
 *   nproc DIR    a fork-per-connection server: moves itself into the cgroup DIR (its
 *                pids.max set by the caller), accepts 20 connections and forks a child per
 *                connection that answers with a header and a body (two writes) and then
 *                stays blocked in read: `forks=N fork_failures=M answered=K`.
 *   inherited_nodelay [plain]  a listener with TCP_NODELAY=1 (plain: the kernel's default),
 *                then exec of `corners inherited_nodelay_server FD PEER`, which accepts a
 *                connection on it and prints `listener_nodelay=` and `nodelay=` (getsockopt).
 *   seccomp      an exchange, then a seccomp filter that kills the process on setsockopt,
 *                clone, clone3, rt_sigprocmask and sendto, then 20 exchanges of two writes
 *                and a read of the echo: `exchanges_ok=20`.
 *   seccomp_exec the filter first, then exec of `corners seccomp_child PORT PEER`, which
 *                connects and does the 20 exchanges under it.
 *   filtered_exec CMD...  the seccomp filter below, then an exec of CMD.
 *   seccomp_tsync a thread, an exchange, then the filter by seccomp(2) with
 *                SECCOMP_FILTER_FLAG_TSYNC (every thread, the shim's too), then the
 *                exchanges.
 *
 * Every case is bounded: an alarm of 20 s ends a stuck run (the peer's too).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "children.h"

extern pid_t _Fork(void);

#define HDR 32
#define MAXMSG 256
#define MSG 100
#define ALARM_S 20

static const char *self_path;


static void die(const char *what) {
    printf("error=1 what=%s errno_at_error=%d\n", what, errno);
    fflush(stdout);
    exit(1);
}

static int read_full(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= n;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= n;
    }
    return 0;
}

/* ---- messages ---- */

/* Fills msg (len bytes): the header with the time now, then a payload drawn from the label. */
static void make_msg(char *msg, size_t len, int reply, const char *label) {
    memset(msg, 0, len);
    uint16_t l = (uint16_t)len;
    memcpy(msg, &l, 2);
    msg[2] = (char)reply;
    strncpy(msg + 16, label, 15);
    for (size_t k = HDR; k < len; k++) msg[k] = (char)(label[0] + k * 7);
    int64_t t = now_ns();
    memcpy(msg + 8, &t, 8);
}

/* Writes one message of len bytes in `parts` writes (1 or 2); the time is taken just before
 * the first write. */
static int send_msg(int fd, size_t len, int reply, const char *label, int parts, char *copy) {
    char msg[MAXMSG];
    make_msg(msg, len, reply, label);
    if (copy) memcpy(copy, msg, len);
    if (parts == 1) return write_full(fd, msg, len);
    size_t first = len * 2 / 5;
    if (write_full(fd, msg, first)) return -1;
    return write_full(fd, msg + first, len - first);
}

/* One exchange: a message in two writes, then the peer's echo, compared. */
static int exchange(int fd, const char *label) {
    char sent[MAXMSG], back[MAXMSG];
    if (send_msg(fd, MSG, 1, label, 2, sent)) return -1;
    if (read_full(fd, back, MSG)) return -1;
    return memcmp(sent, back, MSG) ? -1 : 0;
}

/* ---- the peer ---- */

static struct sockaddr_in peer_addr;

/* Accepts one connection on l and reads messages until EOF: prints each one's delay, echoes
 * those that ask for it. Exits. */
static void measuring_peer(int l) {
    alarm(ALARM_S);
    int c = accept(l, NULL, NULL);
    if (c < 0) _exit(3);
    close(l);
    int n = 0;
    char msg[MAXMSG];
    for (;;) {
        if (read_full(c, msg, HDR)) break;
        uint16_t len;
        memcpy(&len, msg, 2);
        if (len < HDR || len > MAXMSG || read_full(c, msg + HDR, len - HDR)) {
            printf("peer_bad_message=1\n");
            break;
        }
        int64_t t, at = now_ns();
        memcpy(&t, msg + 8, 8);
        char label[16];
        memcpy(label, msg + 16, 16);
        label[15] = 0;
        printf("%s_us=%lld\n", label, (long long)((at - t) / 1000));
        fflush(stdout);
        n++;
        if (msg[2] && write_full(c, msg, len)) break;
    }
    printf("peer_messages=%d\n", n);
    fflush(stdout);
    _exit(0);
}

/* A listener on 127.0.0.1 (its address in peer_addr), not inherited by an exec. */
static int listener(int cloexec) {
    int l = socket(AF_INET, SOCK_STREAM | (cloexec ? SOCK_CLOEXEC : 0), 0);
    peer_addr.sin_family = AF_INET;
    peer_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    peer_addr.sin_port = 0;
    socklen_t len = sizeof peer_addr;
    if (l < 0 || bind(l, (struct sockaddr *)&peer_addr, len) || listen(l, 64) ||
        getsockname(l, (struct sockaddr *)&peer_addr, &len))
        die("listen");
    return l;
}

/* Forks the measuring peer; returns its pid. */
static pid_t start_peer(void) {
    int l = listener(1);
    fflush(stdout);
    pid_t p = fork();
    if (p < 0) die("fork peer");
    if (p == 0) measuring_peer(l);
    close(l);
    return p;
}

static int connect_peer(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&peer_addr, sizeof peer_addr)) die("connect");
    return fd;
}


/* Waits for a helper process (the peer, a client) to finish, at most 10 s; prints
 * NAME_status= (-1: still running after 10 s, killed). */
static int reap(pid_t pid, const char *name) {
    int st = wait_bounded(pid, 10000);
    printf("%s_status=%d\n", name, st);
    return st == 0 ? 0 : -1;
}


/* ---- vfork, clone, _Fork: children the shim is not told about ---- */

static int child_fd;
static int child_pipe[2] = {-1, -1}; /* a child blocks reading [0]; the parent closes [1] */

/* What a clone or _Fork child does: writes, blocks 300 ms in read() of a pipe, leaves. */
static int child_writes_then_blocks(void *arg) {
    (void)arg;
    close(child_pipe[1]);
    if (send_msg(child_fd, MSG, 1, "child", 1, NULL)) return 1;
    char b;
    while (read(child_pipe[0], &b, 1) < 0 && errno == EINTR) {
    }
    return 0;
}

/* The parent's half: after the child, it writes a message and blocks in no wait the shim
 * sees, then reads both echoes (the child's and its own). */
static int parent_after_child(int fd) {
    cond_block(100); /* the child's message is measured alone */
    if (send_msg(fd, MSG, 1, "parent", 1, NULL)) return -1;
    cond_block(300);
    char back[2 * MSG];
    return read_full(fd, back, sizeof back);
}

/* `how` is vfork, clone or _Fork; `fresh`: the child comes before this process held any
 * burst (its socket connected, nothing written yet), else after a first exchange. */
static int children(const char *how, int fresh) {
    pid_t peer = start_peer();
    int fd = connect_peer();
    if (!fresh && exchange(fd, "first")) die("first exchange");
    child_fd = fd;
    int *p = child_pipe;
    if (pipe(p)) die("pipe");
    fflush(stdout);
    pid_t pid;
    if (!strcmp(how, "vfork")) {
        pid = vfork();
        if (pid == 0) {
            if (send_msg(fd, MSG, 1, "child", 1, NULL)) _exit(1);
            _exit(0);
        }
    } else if (!strcmp(how, "clone")) {
        static char stack[256 * 1024] __attribute__((aligned(16)));
        pid = clone(child_writes_then_blocks, stack + sizeof stack, SIGCHLD, NULL);
    } else {
        pid = _Fork();
        if (pid == 0) _exit(child_writes_then_blocks(NULL));
    }
    if (pid < 0) die("child");
    /* The clone and _Fork children block until this end closes, 300 ms from now (no wait
     * the shim sees in this process meanwhile). The vfork child has exited already. */
    if (strcmp(how, "vfork")) cond_block(300);
    close(p[1]);
    int r = parent_after_child(fd);
    /* It was told to end 400 ms ago: 2 s more is a hang. */
    int child = wait_bounded(pid, 2000);
    printf("child_exit=%d\n", child);
    close(fd);
    close(p[0]);
    int pr = reap(peer, "peer");
    printf("ok=%d\n", r == 0 && pr == 0 && child == 0);
    return 0;
}

/* ---- scm_rights: the socket outlives the process that wrote on it ---- */


/* `unread`: B closes the socket without reading the peer's echoes (the kernel then resets
 * the connection, dropping whatever it still held unsent); else B reads them first. */
static int scm_rights(int unread) {
    pid_t peer = start_peer();
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp)) die("socketpair");
    fflush(stdout);
    pid_t b = fork();
    if (b == 0) {
        alarm(ALARM_S);
        close(sp[0]);
        int fd = recv_fd(sp[1]);
        if (fd < 0) _exit(1);
        /* Each echoed (so that natively an ACK comes at once); the echoes read only after the
         * last message: a read would end whatever is held on the socket. */
        for (int k = 0; k < 10; k++) {
            char label[8];
            snprintf(label, sizeof label, "b%d", k);
            if (send_msg(fd, 50, 1, label, 1, NULL)) _exit(1);
            struct timespec d = {0, 20 * 1000000};
            nanosleep(&d, NULL);
        }
        char echoes[10 * 50];
        if (!unread && read_full(fd, echoes, sizeof echoes)) _exit(1);
        close(fd);
        _exit(0);
    }
    pid_t a = fork();
    if (a == 0) {
        alarm(ALARM_S);
        close(sp[1]);
        int fd = connect_peer();
        if (send_msg(fd, MSG, 1, "a", 2, NULL)) _exit(1);
        if (send_fd(sp[0], fd)) _exit(1);
        kill(getpid(), SIGKILL); /* no hook, no flusher: nothing of ours runs again */
        _exit(1);
    }
    close(sp[0]);
    close(sp[1]);
    int st = wait_bounded(a, 10000);
    printf("a_killed=%d\n", st == 128 + SIGKILL);
    int rb = reap(b, "b");
    int pr = reap(peer, "peer");
    printf("ok=%d\n", rb == 0 && pr == 0);
    return 0;
}

/* ---- unshare(CLONE_NEWUSER) after the first TCP write ---- */

static int threads_now(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    if (f) fclose(f);
    return n;
}

static int unshare_case(void) {
    pid_t peer = start_peer();
    int fd = connect_peer();
    if (exchange(fd, "first")) die("first exchange");
    int threads = threads_now();
    int r = unshare(CLONE_NEWUSER);
    int e = r ? errno : 0;
    printf("unshare=%d errno=%d threads=%d\n", r, e, threads);
    close(fd);
    int pr = reap(peer, "peer");
    printf("ok=%d\n", pr == 0);
    return 0;
}

/* ---- nproc: a fork-per-connection server under a task limit ---- */

#define NPROC_CONNS 20

/* The client: connections one after another, each sends a request and reads the answer (or
 * EOF when the server could not fork); all kept open until the last. */
static void nproc_client(void) {
    alarm(ALARM_S);
    int fds[NPROC_CONNS], answered = 0;
    for (int k = 0; k < NPROC_CONNS; k++) {
        fds[k] = connect_peer();
        char msg[MSG];
        if (send_msg(fds[k], MSG, 0, "req", 1, NULL)) _exit(1);
        if (read_full(fds[k], msg, MSG) == 0) answered++;
    }
    printf("answered=%d\n", answered);
    fflush(stdout);
    _exit(0);
}

static int nproc(const char *cgroup_dir) {
    int l = listener(1);
    fflush(stdout);
    pid_t client = fork();
    if (client == 0) {
        close(l);
        nproc_client();
    }
    /* Only now into the limited cgroup: the client stays out of it. */
    char path[4096];
    snprintf(path, sizeof path, "%s/cgroup.procs", cgroup_dir);
    int cg = open(path, O_WRONLY);
    char pid_s[32];
    int n = snprintf(pid_s, sizeof pid_s, "%d\n", getpid());
    if (cg < 0 || write(cg, pid_s, n) != n) die("cgroup.procs");
    close(cg);
    pid_t kids[NPROC_CONNS];
    int forks = 0, failures = 0, fork_errno = 0;
    for (int k = 0; k < NPROC_CONNS; k++) {
        int c = accept(l, NULL, NULL);
        if (c < 0) die("accept");
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) {
            close(l);
            char req[MSG];
            if (read_full(c, req, MSG)) _exit(1);
            /* A header and a body, two writes, then blocked in read until the end. */
            char answer[MSG];
            make_msg(answer, MSG, 0, "answer");
            if (write_full(c, answer, HDR) || write_full(c, answer + HDR, MSG - HDR)) _exit(1);
            (void)!read(c, req, 1);
            _exit(0);
        }
        if (p < 0) {
            failures++;
            fork_errno = errno;
        } else {
            kids[forks++] = p;
        }
        close(c);
    }
    close(l);
    int rc = reap(client, "client");
    for (int k = 0; k < forks; k++) kill(kids[k], SIGKILL);
    for (int k = 0; k < forks; k++) waitpid(kids[k], NULL, 0);
    printf("forks=%d fork_failures=%d fork_errno=%d\n", forks, failures, fork_errno);
    printf("ok=%d\n", rc == 0);
    return 0;
}

/* ---- a connection accepted on an inherited listener that has TCP_NODELAY ---- */

static int inherited_nodelay(int plain) {
    int l = listener(0);
    int one = 1;
    if (!plain && setsockopt(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)) die("setsockopt");
    fflush(stdout);
    pid_t client = fork();
    if (client == 0) {
        alarm(ALARM_S);
        close(l);
        int fd = connect_peer();
        char buf[MSG];
        if (read_full(fd, buf, MSG)) _exit(1);
        _exit(0);
    }
    char fd_s[16], pid_s[16];
    snprintf(fd_s, sizeof fd_s, "%d", l);
    snprintf(pid_s, sizeof pid_s, "%d", client);
    execl(self_path, self_path, "inherited_nodelay_server", fd_s, pid_s, (char *)NULL);
    die("execl");
    return 1;
}

static int inherited_nodelay_server(int l, pid_t client) {
    int v = -1;
    socklen_t len = sizeof v;
    getsockopt(l, IPPROTO_TCP, TCP_NODELAY, &v, &len);
    printf("listener_nodelay=%d\n", v);
    int c = accept(l, NULL, NULL);
    if (c < 0) die("accept");
    v = -1;
    len = sizeof v;
    getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &len);
    printf("nodelay=%d\n", v);
    char answer[MSG];
    make_msg(answer, MSG, 0, "answer");
    int r = write_full(c, answer, HDR) || write_full(c, answer + HDR, MSG - HDR);
    close(c);
    int rc = reap(client, "client");
    printf("ok=%d\n", r == 0 && rc == 0);
    return 0;
}

/* ---- seccomp: the filter a sandboxed daemon installs ---- */

#if defined(__x86_64__)
#define THIS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_ARCH AUDIT_ARCH_AARCH64
#elif defined(__i386__)
#define THIS_ARCH AUDIT_ARCH_I386
#else
#error "corners.c: add this machine's AUDIT_ARCH"
#endif

#ifndef __NR_clone3
#define __NR_clone3 435
#endif

#define KILL_IF(nr) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)

/* Kills the process on setsockopt, clone, clone3, rt_sigprocmask and sendto (and on any
 * other architecture's or x32's calls); allows everything else. */
static struct sock_filter filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_ARCH, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1), /* x32 */
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
#endif
    KILL_IF(__NR_setsockopt),
    KILL_IF(__NR_clone),
    KILL_IF(__NR_clone3),
    KILL_IF(__NR_rt_sigprocmask),
    KILL_IF(__NR_sendto),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

static struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};

static void install_filter(int tsync) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) die("no_new_privs");
    if (tsync) {
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog))
            die("seccomp tsync");
    } else if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)) {
        die("seccomp");
    }
}

/* 20 exchanges: two writes, then the echo, compared. */
static int exchanges(int fd) {
    int ok = 0;
    for (int k = 0; k < 20; k++) {
        char label[8];
        snprintf(label, sizeof label, "s%d", k);
        if (exchange(fd, label) == 0) ok++;
    }
    printf("exchanges_ok=%d\n", ok);
    return ok == 20 ? 0 : -1;
}

/* The sleeper thread's pipes: [0] it says it runs (its start, with the signal mask glibc
 * sets by rt_sigprocmask, is over: the filter would kill that call), [1] it waits on. */
static int sleeper_pipes[2][2];

static void *sleeper(void *arg) {
    (void)arg;
    char b = 1;
    if (write(sleeper_pipes[0][1], &b, 1) != 1) die("sleeper ready");
    /* Never returns: a pipe nobody writes. The process ends with it blocked here. */
    while (read(sleeper_pipes[1][0], &b, 1) != 0) {
    }
    for (;;) pause();
    return NULL;
}

static int seccomp_case(int tsync) {
    pid_t peer = start_peer();
    if (tsync) {
        pthread_t t;
        char b;
        if (pipe(sleeper_pipes[0]) || pipe(sleeper_pipes[1]) ||
            pthread_create(&t, NULL, sleeper, NULL))
            die("thread");
        /* Its start done before the filter (on a busy machine it once was not: the filter,
         * synced to it, killed its rt_sigprocmask, natively). */
        if (read(sleeper_pipes[0][0], &b, 1) != 1) die("sleeper start");
    }
    int fd = connect_peer();
    if (exchange(fd, "first")) die("first exchange");
    fflush(stdout);
    install_filter(tsync);
    printf("filtered=1\n");
    int r = exchanges(fd);
    close(fd);
    int pr = reap(peer, "peer");
    printf("ok=%d\n", r == 0 && pr == 0);
    return 0;
}

static int seccomp_exec(void) {
    pid_t peer = start_peer();
    char port_s[16], pid_s[16];
    snprintf(port_s, sizeof port_s, "%d", ntohs(peer_addr.sin_port));
    snprintf(pid_s, sizeof pid_s, "%d", peer);
    fflush(stdout);
    install_filter(0);
    printf("filtered=1\n");
    fflush(stdout);
    execl(self_path, self_path, "seccomp_child", port_s, pid_s, (char *)NULL);
    die("execl");
    return 1;
}

static int seccomp_child(int port, pid_t peer) {
    peer_addr.sin_family = AF_INET;
    peer_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    peer_addr.sin_port = htons(port);
    int fd = connect_peer();
    int r = exchanges(fd);
    close(fd);
    int pr = reap(peer, "peer");
    printf("ok=%d\n", r == 0 && pr == 0);
    return 0;
}

/* filtered_exec CMD...: the filter above, then CMD (a command started under a sandbox). */
static int filtered_exec(char **argv) {
    install_filter(0);
    execvp(argv[0], argv);
    die("execvp");
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    self_path = argv[0];
    signal(SIGPIPE, SIG_IGN);
    alarm(ALARM_S);
    const char *c = argc >= 2 ? argv[1] : "";
    if (!strcmp(c, "filtered_exec") && argc >= 3) return filtered_exec(argv + 2);
    const char *v = argc >= 3 ? argv[2] : "";
    if (!strcmp(c, "vfork") || !strcmp(c, "clone") || !strcmp(c, "_Fork"))
        return children(c, !strcmp(v, "fresh"));
    if (!strcmp(c, "scm_rights")) return scm_rights(!strcmp(v, "unread"));
    if (!strcmp(c, "unshare")) return unshare_case();
    if (!strcmp(c, "nproc") && argc == 3) return nproc(argv[2]);
    if (!strcmp(c, "inherited_nodelay"))
        return inherited_nodelay(argc > 2 && !strcmp(argv[2], "plain"));
    if (!strcmp(c, "inherited_nodelay_server") && argc == 4)
        return inherited_nodelay_server(atoi(argv[2]), atoi(argv[3]));
    if (!strcmp(c, "seccomp")) return seccomp_case(0);
    if (!strcmp(c, "seccomp_tsync")) return seccomp_case(1);
    if (!strcmp(c, "seccomp_exec")) return seccomp_exec();
    if (!strcmp(c, "seccomp_child") && argc == 4) return seccomp_child(atoi(argv[2]), atoi(argv[3]));
    fprintf(stderr, "usage: corners vfork|clone|_Fork [fresh]|scm_rights [unread]|unshare|nproc DIR|"
                    "inherited_nodelay|seccomp|seccomp_exec|seccomp_tsync\n");
    return 2;
}

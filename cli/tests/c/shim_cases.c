/* Programs for the shim's process, thread and signal tests. One per mode:
 *
 *   shim_cases threads           a server thread writes each 300 B response as 3 writes
 *                                (~0.4 ms apart) while another thread polls every 100 us;
 *                                prints the server's data segments per response.
 *   shim_cases fork PORT         the parent sends "parent" (a burst, so its flusher runs),
 *                                then forks; the child connects and sends "child"; neither
 *                                waits or reads afterwards (they spin without syscalls).
 *   shim_cases daemon PORT       the same from a process made by daemon(3).
 *   shim_cases sigwait           SIGUSR1 blocked in the main thread, a burst starts the
 *                                flusher, then kill(getpid(), SIGUSR1) + sigwait: prints
 *                                "signal=10" unless the signal went to another thread.
 *   shim_cases selfcork          the program corks its own socket, writes "a", polls, writes
 *                                "b", uncorks: prints its data segments (1 if left alone).
 *   shim_cases corklistener     the same, corked on the listening socket before accept (a
 *                                connection inherits it): the server side writes.
 *   shim_cases splice            a 100-byte body spliced from a pipe into the socket, then a
 *                                5-byte trailer written, then the other end reads both:
 *                                prints the writer's data segments (1 if the splice and the
 *                                write were one burst).
 *   shim_cases rawclose          a socket closed by syscall(SYS_close), its number reused.
 *   shim_cases stale             a socket closed inside libc (fclose), its number reused by
 *                                a pipe: prints whether writes to the pipe arrived whole.
 *   shim_cases waits             one held byte per wait of the poll, select, epoll, sleep,
 *                                signal, wait4 and recvmsg families: prints how long (ms)
 *                                the byte took to arrive once its writer made that wait.
 *                                Built as a 32-bit program with _TIME_BITS=64 it calls
 *                                glibc's 64-bit-time names (__ppoll64 and the like).
 *   shim_cases emptylast         a learned header+body shape, then an empty body: prints
 *                                whether the header arrived without a wait.
 *   shim_cases tail ENDING       a learned header+body shape, then a header alone (held by
 *                                the shim's MSG_MORE) whose body never comes: its writer
 *                                sleeps (sleep), exits its thread (thread), is a forked child
 *                                that leaves by _exit (exit), or hands the socket to another
 *                                process over a unix socket and keeps running (handoff).
 *                                Prints us=, the time until the header reached the client.
 *   shim_cases shortset          select on a read set sized by its nfds (a long, as libevent
 *                                and OpenSSH allocate theirs), the last bytes before an
 *                                unmapped page, while the thread holds a burst and the
 *                                descriptor is ready: prints what select said.
 *
 * Loopback only; every loop is bounded.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Busy for `us` microseconds without a single syscall (clock_gettime is a vDSO call). */
static void spin(double us) {
    double end = now_us() + us;
    while (now_us() < end) {
    }
}

static unsigned data_segs(int fd) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return 0;
    return ti.tcpi_data_segs_out;
}

static int listener(int *port) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 16)) return -1;
    getsockname(l, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return l;
}

static int dial(int port) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a)) return -1;
    return c;
}

static int read_full(int fd, char *buf, int n) {
    int got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) return -1;
        got += r;
    }
    return 0;
}

/* ---- threads ---------------------------------------------------------------------- */

static volatile int stop_poller;

static void *poller(void *arg) {
    int *pipefd = arg;
    for (int i = 0; i < 200000 && !stop_poller; i++) {
        struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
        poll(&p, 1, 0);
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
    }
    return NULL;
}

static int threads(void) {
    enum { ROUNDS = 100 };
    int port, l = listener(&port);
    if (l < 0) return 1;
    int pipefd[2];
    if (pipe(pipefd)) return 1;
    pthread_t t;
    pthread_create(&t, NULL, poller, pipefd);
    pid_t pid = fork();
    if (pid == 0) { /* the client: one request byte, a 300-byte answer */
        int c = dial(port);
        char buf[300];
        for (int i = 0; i < ROUNDS; i++) {
            if (write(c, "q", 1) != 1 || read_full(c, buf, 300)) _exit(1);
        }
        close(c);
        _exit(0);
    }
    int s = accept(l, NULL, NULL);
    char req, body[100];
    memset(body, 'r', sizeof body);
    unsigned before = data_segs(s);
    for (int i = 0; i < ROUNDS; i++) {
        if (read_full(s, &req, 1)) return 1;
        for (int k = 0; k < 3; k++) {
            if (write(s, body, sizeof body) != sizeof body) return 1;
            if (k < 2) spin(200);
        }
    }
    /* The client's EOF: the read ends the last burst, then count. */
    if (read(s, &req, 1) != 0) return 1;
    unsigned segs = data_segs(s) - before;
    int status = 0;
    waitpid(pid, &status, 0);
    stop_poller = 1;
    pthread_join(t, NULL);
    printf("responses=%d segs=%u\n", ROUNDS, segs);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

/* ---- fork and daemon ---------------------------------------------------------------- */

/* Connects, sends `msg` as one write, then stays busy for 400 ms without a syscall: only the
 * shim's flusher can release the burst. */
static void send_and_spin(int port, const char *msg) {
    int c = dial(port);
    if (c < 0) _exit(1);
    if (write(c, msg, strlen(msg)) < 0) _exit(1);
    spin(400000);
    close(c);
}

static int forking(int port, int use_daemon) {
    send_and_spin(port, "parent");
    if (use_daemon) {
        if (daemon(1, 1) != 0) return 1; /* the caller's process exits here */
        send_and_spin(port, "daemon");
        return 0;
    }
    pid_t pid = fork();
    if (pid == 0) {
        send_and_spin(port, "child");
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

/* ---- signals ------------------------------------------------------------------------ */

static int signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    int port, l = listener(&port);
    int c = dial(port);
    int s = accept(l, NULL, NULL);
    if (s < 0 || write(c, "burst", 5) != 5) return 1; /* starts the flusher if not yet */
    spin(5000); /* the flusher releases it */
    kill(getpid(), SIGUSR1);
    int sig = 0;
    if (sigwait(&set, &sig)) return 1;
    printf("signal=%d\n", sig);
    return 0;
}

/* ---- a program that corks its own socket ------------------------------------------- */

/* The program corks one end itself (or, with on_listener, the listening socket before the
 * connection exists, which the accepted end inherits), writes "a", polls, writes "b" and
 * uncorks; the other end reads both. Prints the writer's data segments: 1 if left alone. */
static int selfcork(int on_listener) {
    int port = 0, l = listener(&port);
    int on = 1, off = 0;
    if (l < 0 || (on_listener && setsockopt(l, IPPROTO_TCP, TCP_CORK, &on, sizeof on))) return 1;
    int c = dial(port);
    int s = c < 0 ? -1 : accept(l, NULL, NULL);
    if (s < 0) return 1;
    int w = on_listener ? s : c, r = on_listener ? c : s;
    unsigned before = data_segs(w);
    if (!on_listener && setsockopt(w, IPPROTO_TCP, TCP_CORK, &on, sizeof on)) return 1;
    if (write(w, "a", 1) != 1) return 1;
    poll(NULL, 0, 5); /* a wait: the shim must not uncork what the program corked */
    if (write(w, "b", 1) != 1) return 1;
    setsockopt(w, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
    char buf[2];
    if (read_full(r, buf, 2)) return 1;
    printf("segs=%u\n", data_segs(w) - before);
    return 0;
}

static int splicing(void) {
    int port = 0, l = listener(&port);
    int c = l < 0 ? -1 : dial(port);
    int s = c < 0 ? -1 : accept(l, NULL, NULL);
    int p[2];
    char body[100], buf[105];
    if (s < 0 || pipe(p)) return 1;
    memset(body, 'b', sizeof body);
    if (write(p[1], body, sizeof body) != (ssize_t)sizeof body) return 1;
    unsigned before = data_segs(s);
    if (splice(p[0], NULL, s, NULL, sizeof body, 0) != (ssize_t)sizeof body) return 1;
    if (write(s, "\r\n0\r\n", 5) != 5) return 1;
    /* The client end's read does not end the server end's burst: the linger bound does. */
    if (read_full(c, buf, sizeof buf)) return 1;
    printf("segs=%u\n", data_segs(s) - before);
    return 0;
}

/* rawclose: a corked socket closed by syscall(SYS_close), as libuv (node) closes, its number
 * then reused by a pipe. Prints whether the number was reused; the shim's counters show
 * whether it saw the close (the socket's one data segment is counted at its close). */
static int rawclose(void) {
    int port = 0, l = listener(&port);
    int c = l < 0 ? -1 : dial(port);
    int s = c < 0 ? -1 : accept(l, NULL, NULL);
    int p[2];
    char buf[5];
    if (s < 0 || write(c, "hello", 5) != 5) return 1;
    if (syscall(SYS_close, c)) return 1;
    if (pipe(p)) return 1;
    if (write(p[1], "x", 1) != 1) return 1;
    if (read_full(s, buf, 5) || memcmp(buf, "hello", 5)) return 1;
    printf("reused=%d\n", p[0] == c);
    return 0;
}

/* stale: a socket whose bursts have a learned shape is closed behind the shim's back (fclose
 * of its fdopen stream closes inside libc) and its number reused by a pipe's write end
 * (a raw dup3 system call, not seen either). Writes to the pipe must behave as writes to a pipe.
 * Prints whether the number was reused and whether both writes arrived whole. */
static int stale(void) {
    int port = 0, l = listener(&port);
    int c = l < 0 ? -1 : dial(port);
    int s = c < 0 ? -1 : accept(l, NULL, NULL);
    int p[2];
    char buf[8];
    if (s < 0) return 1;
    for (int i = 0; i < 4; i++) {
        if (write(s, "ab", 2) != 2 || write(s, "cd", 2) != 2) return 1;
        poll(NULL, 0, 1); /* the writer sleeps: the burst ends, its shape is learned */
        if (read_full(c, buf, 4)) return 1;
    }
    if (pipe(p)) return 1;
    FILE *f = fdopen(s, "w");
    if (!f || fclose(f)) return 1;
    int w = (int)syscall(SYS_dup3, p[1], s, 0);
    ssize_t a = write(w, "ab", 2), b = write(w, "cd", 2);
    int whole = a == 2 && b == 2 && read(p[0], buf, 4) == 4 && !memcmp(buf, "abcd", 4);
    printf("reused=%d whole=%d\n", w == s, whole);
    return 0;
}

/* One connection (a new socket has no learned shape, so its first write is held), one byte
 * written on the server end, then `wait(server, client)`; prints NAME=ms, the time until
 * the byte reached the client. */
static void timed_wait(const char *name, void (*wait)(int, int)) {
    int port = 0, l = listener(&port);
    int c = l < 0 ? -1 : dial(port);
    int s = c < 0 ? -1 : accept(l, NULL, NULL);
    char b;
    if (s < 0) {
        printf("%s=-1\n", name);
        return;
    }
    double t0 = now_us();
    if (write(s, "x", 1) != 1) return;
    wait(s, c);
    int got = read_full(c, &b, 1) == 0;
    printf("%s=%.0f\n", name, got ? (now_us() - t0) / 1e3 : -1.0);
    close(s), close(c), close(l);
}

static void w_ppoll(int s, int c) {
    struct pollfd p = {c, POLLIN, 0};
    struct timespec t = {1, 0};
    (void)s, ppoll(&p, 1, &t, NULL);
}
static void w_select(int s, int c) {
    fd_set r;
    struct timeval t = {1, 0};
    FD_ZERO(&r);
    FD_SET(c, &r);
    (void)s, select(c + 1, &r, NULL, NULL, &t);
}
static void w_pselect(int s, int c) {
    fd_set r;
    struct timespec t = {1, 0};
    FD_ZERO(&r);
    FD_SET(c, &r);
    (void)s, pselect(c + 1, &r, NULL, NULL, &t, NULL);
}
static void w_epoll_pwait2(int s, int c) {
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = c};
    struct timespec t = {1, 0};
    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
    (void)s, epoll_pwait2(ep, &ev, 1, &t, NULL);
    close(ep);
}
static void w_nanosleep(int s, int c) {
    struct timespec t = {0, 1000000};
    (void)s, (void)c, nanosleep(&t, NULL);
}
static void w_clock_nanosleep(int s, int c) {
    struct timespec t = {0, 1000000};
    (void)s, (void)c, clock_nanosleep(CLOCK_MONOTONIC, 0, &t, NULL);
}
static void w_sigtimedwait(int s, int c) {
    sigset_t set;
    struct timespec t = {0, 1000000};
    sigemptyset(&set), sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, NULL);
    (void)s, (void)c, sigtimedwait(&set, NULL, &t);
}
static pid_t child;
static void w_wait4(int s, int c) {
    int st;
    (void)s, (void)c, wait4(child, &st, 0, NULL);
}
static void w_recvmsg(int s, int c) {
    char b;
    struct iovec v = {&b, 1};
    struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
    (void)c, recvmsg(s, &m, MSG_DONTWAIT);
}
static void w_recvmmsg(int s, int c) {
    char b;
    struct iovec v = {&b, 1};
    struct mmsghdr m = {.msg_hdr = {.msg_iov = &v, .msg_iovlen = 1}};
    (void)c, recvmmsg(s, &m, 1, MSG_DONTWAIT, NULL);
}
/* The control: no wait the shim can see (a spin, then a look that does not wait). */
static void w_none(int s, int c) {
    char b;
    (void)s, spin(20000);
    printf("none_held=%d\n", recv(c, &b, 1, MSG_DONTWAIT | MSG_PEEK) < 0);
}

static int waits(void) {
    timed_wait("ppoll", w_ppoll);
    timed_wait("select", w_select);
    timed_wait("pselect", w_pselect);
    timed_wait("epoll_pwait2", w_epoll_pwait2);
    timed_wait("nanosleep", w_nanosleep);
    timed_wait("clock_nanosleep", w_clock_nanosleep);
    timed_wait("sigtimedwait", w_sigtimedwait);
    /* Forked before the write: a fork releases every burst itself. */
    child = fork();
    if (child == 0) {
        usleep(2000);
        _exit(0);
    }
    timed_wait("wait4", w_wait4);
    timed_wait("recvmsg", w_recvmsg);
    timed_wait("recvmmsg", w_recvmmsg);
    timed_wait("none", w_none);
    return 0;
}

/* emptylast: a socket's bursts are a header and a body (the shape is learned after three);
 * then a response whose body is empty (write of 0 bytes, as for a 204). The writer then
 * spins 30 ms without a call the shim sees. Prints whether the header had reached the
 * client by then (the test runs it with a 100 ms linger bound). */
static int emptylast(void) {
    int port = 0, l = listener(&port);
    int c = l < 0 ? -1 : dial(port);
    int s = c < 0 ? -1 : accept(l, NULL, NULL);
    char buf[8];
    if (s < 0) return 1;
    for (int i = 0; i < 4; i++) {
        if (write(s, "hd", 2) != 2 || write(s, "bd", 2) != 2) return 1;
        poll(NULL, 0, 1); /* a wait that sleeps (a zero timeout would not end the burst) */
        if (read_full(c, buf, 4)) return 1;
    }
    if (write(s, "hd", 2) != 2 || write(s, "", 0) != 0) return 1;
    spin(30000);
    printf("arrived=%d\n", recv(c, buf, 2, MSG_DONTWAIT | MSG_PEEK) == 2);
    return 0;
}

/* ---- tail: a burst whose last write never comes -------------------------------------- */

static int tail_s = -1;

static void *tail_thread(void *arg) {
    int sleeps = *(int *)arg;
    if (write(tail_s, "hd", 2) != 2) return NULL;
    if (sleeps) {
        struct timespec t = {2, 0};
        nanosleep(&t, NULL);
    }
    return NULL;
}

static int tail(const char *ending) {
    int port = 0, l = listener(&port);
    int c = l < 0 ? -1 : dial(port);
    int s = c < 0 ? -1 : accept(l, NULL, NULL);
    char buf[8];
    if (s < 0) return 1;
    for (int i = 0; i < 5; i++) {
        if (write(s, "hd", 2) != 2 || write(s, "bd", 2) != 2) return 1;
        poll(NULL, 0, 1); /* the writer sleeps: the burst ends, its shape is learned */
        if (read_full(c, buf, 4)) return 1;
    }
    tail_s = s;
    double t0 = now_us();
    pid_t child = -1, keeper = -1;
    pthread_t th;
    int sleeps = !strcmp(ending, "sleep");
    if (sleeps || !strcmp(ending, "thread")) {
        if (pthread_create(&th, NULL, tail_thread, &sleeps)) return 1;
        if (!sleeps) pthread_join(th, NULL); /* a futex: no wait the shim sees */
    } else if (!strcmp(ending, "exit")) {
        child = fork();
        if (child == 0) {
            ssize_t w = write(s, "hd", 2);
            _exit(w == 2 ? 0 : 1);
        }
    } else if (!strcmp(ending, "handoff")) {
        int u[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, u)) return 1;
        keeper = fork();
        if (keeper == 0) { /* the other process: takes the socket and keeps it, silent */
            char b;
            char ctl[CMSG_SPACE(sizeof(int))];
            struct iovec v = {&b, 1};
            struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl,
                               .msg_controllen = sizeof ctl};
            close(u[0]);
            if (recvmsg(u[1], &m, 0) != 1) _exit(1);
            spin(1500000);
            _exit(0);
        }
        close(u[1]);
        if (write(s, "hd", 2) != 2) return 1;
        char ctl[CMSG_SPACE(sizeof(int))];
        memset(ctl, 0, sizeof ctl);
        struct iovec v = {"s", 1};
        struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl,
                           .msg_controllen = sizeof ctl};
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS, h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &s, sizeof(int));
        if (sendmsg(u[0], &m, 0) != 1) return 1;
    } else {
        return 2;
    }
    /* Watch for the header without a wait of this thread's (it may hold the burst itself). */
    double arrived = -1;
    while (now_us() - t0 < 1000000) {
        if (recv(c, buf, 2, MSG_DONTWAIT | MSG_PEEK) == 2) {
            arrived = now_us();
            break;
        }
    }
    printf("us=%.0f\n", arrived < 0 ? -1.0 : arrived - t0);
    fflush(stdout);
    if (child > 0) waitpid(child, NULL, 0);
    if (keeper > 0) waitpid(keeper, NULL, 0);
    if (sleeps) pthread_join(th, NULL);
    return 0;
}

/* ---- shortset: an fd_set sized by its nfds ------------------------------------------- */

static int shortset(void) {
    int port = 0, l = listener(&port);
    int c = l < 0 ? -1 : dial(port);
    int s = c < 0 ? -1 : accept(l, NULL, NULL);
    long page = sysconf(_SC_PAGESIZE);
    if (s < 0 || s >= (int)(8 * sizeof(unsigned long))) return 1;
    if (write(c, "x", 1) != 1) return 1;
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return 1; /* s is readable from here on */
    if (write(s, "y", 1) != 1) return 1;  /* a burst this thread holds */
    unsigned char *m = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + page, page, PROT_NONE)) return 1;
    unsigned long *set = (unsigned long *)(m + page - sizeof(unsigned long));
    *set = 1UL << s;
    struct timeval t = {1, 0};
    int n = select(s + 1, (fd_set *)set, NULL, NULL, &t);
    printf("ready=%d isset=%d\n", n, (int)((*set >> s) & 1));
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "threads")) return threads();
    if (argc >= 3 && !strcmp(argv[1], "fork")) return forking(atoi(argv[2]), 0);
    if (argc >= 3 && !strcmp(argv[1], "daemon")) return forking(atoi(argv[2]), 1);
    if (argc >= 2 && !strcmp(argv[1], "sigwait")) return signals();
    if (argc >= 2 && !strcmp(argv[1], "selfcork")) return selfcork(0);
    if (argc >= 2 && !strcmp(argv[1], "corklistener")) return selfcork(1);
    if (argc >= 2 && !strcmp(argv[1], "splice")) return splicing();
    if (argc >= 2 && !strcmp(argv[1], "rawclose")) return rawclose();
    if (argc >= 2 && !strcmp(argv[1], "stale")) return stale();
    if (argc >= 2 && !strcmp(argv[1], "waits")) return waits();
    if (argc >= 2 && !strcmp(argv[1], "emptylast")) return emptylast();
    if (argc >= 3 && !strcmp(argv[1], "tail")) return tail(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "shortset")) return shortset();
    fprintf(stderr, "usage: shim_cases threads|fork PORT|daemon PORT|sigwait|selfcork|corklistener|splice|rawclose|stale|waits|emptylast|tail sleep|thread|exit|handoff|shortset\n");
    return 2;
}

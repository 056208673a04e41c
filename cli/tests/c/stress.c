/* Byte integrity under the shim, stressed: every stream written here, by every call and in
 * every situation a real program puts the shim in, must arrive exactly as written: no byte
 * lost, duplicated or reordered. Bounded in count and in time.
 *
 *   stress SEED          runs every scenario with write sizes and calls drawn from SEED and
 *                        prints "streams=N bad=B bytes=T" (B must be 0), then one line per
 *                        bad stream.
 *   stress continue FD ID OFFSET SEED   (internal) the program an exec variant starts: goes
 *                        on writing stream ID on descriptor FD from OFFSET, then exits.
 *
 * Each stream is one TCP connection to a verifier process forked at the start: its first 4
 * bytes are its ID, then byte i of the stream is pattern(ID, i). The scenarios:
 *   threads   4 threads write one socket under the program's own lock, each op a random
 *             call (write, writev, send with or without MSG_MORE, sendmsg, sendfile from a
 *             file of the pattern, splice through a pipe) of a random size, with random waits
 *             (poll 0 or 1 ms, usleep) between.
 *   fork      bytes written (held), then a fork: the child writes more and leaves by _exit or
 *             exit, the parent waits and writes the rest.
 *   signal    a SIGALRM handler writes stream B (its own socket) while the main line writes
 *             stream A.
 *   nonblock  O_NONBLOCK, a verifier that reads slowly: EAGAIN and partial writes.
 *   exec      bytes written, then each exec variant (execl, execle, execlp, execv, execvp,
 *             execvpe, fexecve, execveat in a forked child; posix_spawn, system, popen from
 *             the writer itself) starts `stress continue`, which writes more on the same socket.
 *
 * Timed scenarios, each in a process of its own forked for it (so the shim's state there is a
 * fresh fork's), all five at once: every write's time (taken just before the call) and every
 * read of the verifier (with the offset it reached) are logged in shared memory, and each
 * write's delay is the time from its call to the read that brought its last byte. The worst
 * per scenario is printed on the summary line (`worst_ms_vfork=` ...), with `hung_children=`
 * (children that had not ended 1 s after they were told to, and were killed).
 *   vfork     a vfork child writes the stream's ID and some bytes before the process held
 *             any burst, and _exits; the process writes, then writes once and blocks 150 ms
 *             in a condition variable (no wait the shim sees: only the flusher releases it);
 *             then a second vfork child writes, after the process's bursts (the last ended
 *             by a wait), and the same block follows.
 *   clone     the same with clone(fn, stack, SIGCHLD, arg), and _Fork with glibc's _Fork():
 *   _Fork     each child writes, then blocks 150 ms in read() of a pipe before it ends.
 *   passed    process A writes, hands the socket to B with SCM_RIGHTS and SIGKILLs itself at
 *             once; B writes ten times, 20 ms apart.
 *   stopped   the writer stops itself with SIGSTOP just after a write; its parent sends
 *             SIGCONT 300 ms later; it writes the rest.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "children.h"

extern char **environ;
extern pid_t _Fork(void);

#define PATTERN_FILE_BYTES (1 << 20)
#define SLOW_ID_BIT 0x80000000u

static uint8_t pattern(uint32_t id, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)id << 32);
    x ^= x >> 29;
    return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

struct timed;

struct stream {
    int fd;
    uint32_t id;
    uint64_t off;
    pthread_mutex_t lock;
    struct timed *tm; /* where its writes are logged, for a timed stream */
};

/* ---- timed streams: every write and every read of the verifier logged, in memory shared
 * by every process of the run (made before the verifier is forked) ---- */

enum { T_VFORK, T_CLONE, T_FORK, T_PASSED, T_STOPPED, T_N };
static const char *const timed_name[T_N] = {"vfork", "clone", "_Fork", "passed", "stopped"};
#define TIMED_ID(k) (600u + 4u * (k)) /* 0 mod 4: never the program's own MSG_MORE */
#define LOG_N 2048

struct rec { uint64_t off; int64_t t; };

struct timed {
    struct stream s; /* the stream, written by several processes in turn */
    uint64_t expect; /* its length, set by its last writer */
    int hung;        /* children killed because they had not ended */
    uint32_t nw, nr;
    struct rec w[LOG_N]; /* off: the stream's length after the write (0: the ID) */
    struct rec r[LOG_N]; /* off: the bytes after the ID read so far */
};

static struct timed *timed;


static struct timed *timed_of(uint32_t id) {
    for (int k = 0; k < T_N; k++)
        if (timed && id == TIMED_ID(k)) return &timed[k];
    return NULL;
}

static void log_rec(struct rec *log, uint32_t *n, uint64_t off, int64_t t) {
    if (*n < LOG_N) log[(*n)++] = (struct rec){off, t};
}

/* ---- the verifier ---- */

static void verify_one(int c) {
    uint32_t id;
    size_t got = 0;
    while (got < 4) {
        ssize_t n = read(c, (char *)&id + got, 4 - got);
        if (n <= 0) { printf("BAD stream ? short id\n"); return; }
        got += n;
    }
    int slow = (id & SLOW_ID_BIT) != 0;
    struct timed *tm = timed_of(id);
    if (tm) log_rec(tm->r, &tm->nr, 0, now_ns());
    uint64_t off = 0;
    uint8_t buf[16384];
    for (;;) {
        ssize_t n = read(c, buf, slow ? 4096 : sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (tm) log_rec(tm->r, &tm->nr, off + n, now_ns());
        for (ssize_t k = 0; k < n; k++, off++) {
            if (buf[k] != pattern(id, off)) {
                printf("BAD stream %u at %llu\n", id, (unsigned long long)off);
                fflush(stdout);
                return;
            }
        }
        if (slow) usleep(500);
    }
    printf("OK stream %u %llu\n", id, (unsigned long long)off);
    fflush(stdout);
}

/* Accepts connections until the listener is shut down; one thread per connection. */
static void *verify_thread(void *arg) {
    verify_one((int)(intptr_t)arg);
    close((int)(intptr_t)arg);
    return NULL;
}

static void verifier(int l) {
    pthread_t t[256];
    int n = 0;
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) break;
        if (n == 256) { close(c); continue; }
        pthread_create(&t[n++], NULL, verify_thread, (void *)(intptr_t)c);
    }
    for (int k = 0; k < n; k++) pthread_join(t[k], NULL);
    _exit(0);
}

/* ---- writing a stream ---- */

static struct sockaddr_in target;
static int pattern_fd = -1; /* a file holding pattern(PFILE_ID, 0..) */
#define PFILE_ID 0u


static unsigned rnd(unsigned *s) {
    *s ^= *s << 13; *s ^= *s >> 17; *s ^= *s << 5;
    return *s;
}

static int wait_writable(int fd) {
    struct pollfd p = {fd, POLLOUT, 0};
    return poll(&p, 1, 5000) == 1 ? 0 : -1;
}

/* Writes all of buf (len bytes) with plain write, for ids and fallbacks. */
static int write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) { if (errno == EAGAIN && wait_writable(fd)) return -1; continue; }
        if (n <= 0) return -1;
        p += n; len -= n;
    }
    return 0;
}

static int open_stream(struct stream *s, uint32_t id) {
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->fd < 0 || connect(s->fd, (struct sockaddr *)&target, sizeof target)) return -1;
    s->id = id;
    s->off = 0;
    s->tm = NULL;
    pthread_mutex_init(&s->lock, NULL);
    return write_all(s->fd, &id, 4);
}

/* MSG_MORE of the program's own, now and then, on the streams whose ID is 3 mod 4 only: a
 * program that sends with MSG_MORE packetizes its own output, and the shim leaves the socket
 * to it (the other streams stay the shim's to hold). */
static int own_more(struct stream *s, unsigned *seed) {
    return (s->id & 3) == 3 && rnd(seed) % 2 ? MSG_MORE : 0;
}

/* One write op of up to `max` bytes of the stream by a random call; returns bytes written
 * (0 on EAGAIN), -1 on error. The caller holds the stream's lock. */
static ssize_t one_op(struct stream *s, unsigned *seed, size_t max) {
    uint8_t buf[8192];
    size_t len = 1 + rnd(seed) % (max < sizeof buf ? max : sizeof buf);
    for (size_t k = 0; k < len; k++) buf[k] = pattern(s->id, s->off + k);
    int64_t t0 = now_ns();
    ssize_t n;
    int call = rnd(seed) % 8;
    if ((call == 6 && s->id != PFILE_ID) || (call == 6 && pattern_fd < 0)) call = 0;
    switch (call) {
    case 0: n = write(s->fd, buf, len); break;
    case 1: {
        size_t a = len / 3, b = len / 3;
        struct iovec v[3] = {{buf, a}, {buf + a, b}, {buf + a + b, len - a - b}};
        n = writev(s->fd, v, 3);
        break;
    }
    case 2: n = send(s->fd, buf, len, 0); break;
    case 3: n = send(s->fd, buf, len, own_more(s, seed)); break;
    case 4: {
        struct iovec v = {buf, len};
        struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
        n = sendmsg(s->fd, &m, own_more(s, seed));
        break;
    }
    case 5: {
        /* splice through a pipe: every byte put in the pipe must reach the socket. */
        int p[2];
        if (pipe(p)) return -1;
        if (write_all(p[1], buf, len)) { close(p[0]); close(p[1]); return -1; }
        close(p[1]);
        size_t done = 0;
        while (done < len) {
            ssize_t k = splice(p[0], NULL, s->fd, NULL, len - done, 0);
            if (k < 0 && errno == EAGAIN) { if (wait_writable(s->fd)) break; continue; }
            if (k <= 0) break;
            done += k;
        }
        close(p[0]);
        n = done == len ? (ssize_t)len : -1;
        break;
    }
    case 6: {
        off_t at = (off_t)s->off;
        if (s->off + len > PATTERN_FILE_BYTES) { n = write(s->fd, buf, len); break; }
        n = sendfile(s->fd, pattern_fd, &at, len);
        break;
    }
    default: n = write(s->fd, buf, len); break;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (wait_writable(s->fd)) return -1;
        return 0;
    }
    if (n < 0) return -1;
    s->off += n;
    if (s->tm && n > 0) log_rec(s->tm->w, &s->tm->nw, s->off, t0);
    return n;
}

/* Writes `bytes` more bytes of the stream, op by op, with waits now and then. */
static int write_some(struct stream *s, unsigned *seed, uint64_t bytes, size_t max) {
    uint64_t end = s->off + bytes;
    while (s->off < end) {
        pthread_mutex_lock(&s->lock);
        ssize_t n = one_op(s, seed, end - s->off < max ? end - s->off : max);
        pthread_mutex_unlock(&s->lock);
        if (n < 0) return -1;
        switch (rnd(seed) % 16) {
        case 0: poll(NULL, 0, 0); break;
        case 1: poll(NULL, 0, 1); break;
        case 2: usleep(50); break;
        default: break;
        }
    }
    return 0;
}

/* ---- the scenarios ---- */

/* What each stream should hold when it ends (by ID without the slow bit). */
static unsigned long long expect[1024];

static void expect_stream(uint32_t id, unsigned long long bytes) { expect[id & 1023] = bytes; }


struct worker { struct stream *s; unsigned seed; };

static void *thread_writer(void *arg) {
    struct worker *w = arg;
    for (int k = 0; k < 200; k++) {
        pthread_mutex_lock(&w->s->lock);
        ssize_t n = one_op(w->s, &w->seed, 3000);
        pthread_mutex_unlock(&w->s->lock);
        if (n < 0) break;
        if (rnd(&w->seed) % 8 == 0) poll(NULL, 0, rnd(&w->seed) % 2);
    }
    return NULL;
}

static int threads(unsigned seed) {
    struct stream s;
    if (open_stream(&s, PFILE_ID)) return -1;
    pthread_t t[4];
    struct worker w[4];
    for (int k = 0; k < 4; k++) {
        w[k] = (struct worker){&s, seed * 31 + k + 1};
        pthread_create(&t[k], NULL, thread_writer, &w[k]);
    }
    for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
    expect_stream(s.id, s.off);
    close(s.fd);
    return 0;
}

static int forking(unsigned seed, uint32_t id) {
    struct stream s;
    if (open_stream(&s, id)) return -1;
    if (write_some(&s, &seed, 20000, 700)) return -1;
    int p[2];
    if (pipe(p)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        int r = write_some(&s, &seed, 20000, 700);
        (void)!write(p[1], &s.off, sizeof s.off);
        if (id % 2) _exit(r ? 1 : 0);
        exit(r ? 1 : 0);
    }
    close(p[1]);
    int st;
    waitpid(pid, &st, 0);
    if (read(p[0], &s.off, sizeof s.off) != sizeof s.off) return -1;
    close(p[0]);
    seed += 7;
    if (write_some(&s, &seed, 20000, 700)) return -1;
    expect_stream(s.id, s.off);
    close(s.fd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static struct stream sig_stream;
static volatile int sig_budget;
static unsigned sig_seed;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    if (sig_budget > 0) {
        sig_budget--;
        one_op(&sig_stream, &sig_seed, 200); /* nobody else writes this stream */
    }
    errno = saved;
}

static int signals(unsigned seed) {
    struct stream a;
    if (open_stream(&a, 300) || open_stream(&sig_stream, 301)) return -1;
    sig_seed = seed + 99;
    sig_budget = 300;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 300}, {0, 300}};
    setitimer(ITIMER_REAL, &it, NULL);
    int r = write_some(&a, &seed, 300000, 2000);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_IGN);
    expect_stream(a.id, a.off);
    expect_stream(sig_stream.id, sig_stream.off);
    close(a.fd);
    close(sig_stream.fd);
    return r;
}

static int nonblocking(unsigned seed) {
    struct stream s;
    if (open_stream(&s, 400 | SLOW_ID_BIT)) return -1;
    int small = 4096;
    setsockopt(s.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) | O_NONBLOCK);
    int r = write_some(&s, &seed, 400000, 8192);
    expect_stream(s.id, s.off);
    close(s.fd);
    return r;
}

static const char *self_path;


static int exec_variant(int v, unsigned seed) {
    struct stream s;
    uint32_t id = 500 + v;
    if (open_stream(&s, id)) return -1;
    if (write_some(&s, &seed, 5000, 500)) return -1;
    expect_stream(id, s.off + 5000); /* `continue` writes 5000 more */
    char fd_s[16], id_s[16], off_s[32], seed_s[16];
    snprintf(fd_s, sizeof fd_s, "%d", s.fd);
    snprintf(id_s, sizeof id_s, "%u", id);
    snprintf(off_s, sizeof off_s, "%llu", (unsigned long long)s.off);
    snprintf(seed_s, sizeof seed_s, "%u", seed + 1);
    char *argv[] = {(char *)self_path, "continue", fd_s, id_s, off_s, seed_s, NULL};
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "exec '%s' continue %s %s %s %s", self_path, fd_s, id_s, off_s, seed_s);
    int st = 0;
    if (v < 8) {
        pid_t pid = fork();
        if (pid == 0) {
            switch (v) {
            case 0: execl(self_path, self_path, "continue", fd_s, id_s, off_s, seed_s, (char *)NULL); break;
            case 1: execle(self_path, self_path, "continue", fd_s, id_s, off_s, seed_s, (char *)NULL, environ); break;
            case 2: execlp(self_path, self_path, "continue", fd_s, id_s, off_s, seed_s, (char *)NULL); break;
            case 3: execv(self_path, argv); break;
            case 4: execvp(self_path, argv); break;
            case 5: execvpe(self_path, argv, environ); break;
            case 6: { int f = open(self_path, O_RDONLY | O_CLOEXEC); fexecve(f, argv, environ); break; }
            case 7: execveat(AT_FDCWD, self_path, argv, environ, 0); break;
            }
            _exit(3);
        }
        waitpid(pid, &st, 0);
    } else if (v == 8) {
        pid_t pid;
        if (posix_spawn(&pid, self_path, NULL, NULL, argv, environ)) return -1;
        waitpid(pid, &st, 0);
    } else if (v == 9) {
        st = system(cmd);
    } else {
        FILE *f = popen(cmd, "r");
        if (!f) return -1;
        st = pclose(f);
    }
    close(s.fd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int continue_stream(int argc, char **argv) {
    if (argc < 6) return 2;
    struct stream s = {.fd = atoi(argv[2]), .id = (uint32_t)strtoul(argv[3], NULL, 10),
                       .off = strtoull(argv[4], NULL, 10)};
    pthread_mutex_init(&s.lock, NULL);
    unsigned seed = (unsigned)strtoul(argv[5], NULL, 10);
    return write_some(&s, &seed, 5000, 500) ? 1 : 0;
}

/* ---- the timed scenarios ---- */

/* Connects a timed stream; the ID is written by timed_id (by whoever writes first). */
static int timed_connect(struct timed *tm, uint32_t id) {
    struct stream *s = &tm->s;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->fd < 0 || connect(s->fd, (struct sockaddr *)&target, sizeof target)) return -1;
    s->id = id;
    s->off = 0;
    s->tm = tm;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&s->lock, &a);
    return 0;
}

static int timed_id(struct timed *tm) {
    int64_t t = now_ns();
    if (write_all(tm->s.fd, &tm->s.id, 4)) return -1;
    log_rec(tm->w, &tm->nw, 0, t);
    return 0;
}

/* What a child the shim is not told about does: `ops` plain writes (write, writev or send),
 * no waits; async-signal-safe, for a vfork child. */
static int child_writes(struct stream *s, unsigned seed, int ops) {
    for (int k = 0; k < ops; k++) {
        uint8_t buf[700];
        size_t len = 1 + rnd(&seed) % sizeof buf;
        for (size_t i = 0; i < len; i++) buf[i] = pattern(s->id, s->off + i);
        int64_t t = now_ns();
        size_t done = 0;
        while (done < len) {
            ssize_t n;
            struct iovec v[2] = {{buf + done, (len - done) / 2}, {buf + done + (len - done) / 2, len - done - (len - done) / 2}};
            switch (rnd(&seed) % 3) {
            case 0: n = write(s->fd, buf + done, len - done); break;
            case 1: n = writev(s->fd, v, 2); break;
            default: n = send(s->fd, buf + done, len - done, 0); break;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return -1;
            done += n;
        }
        s->off += len;
        log_rec(s->tm->w, &s->tm->nw, s->off, t);
    }
    return 0;
}



struct child_arg {
    struct timed *tm;
    unsigned seed;
    int with_id;
    int done_w, block_r, block_w;
};

/* A clone or _Fork child: writes, says so, blocks in read() of a pipe until its parent
 * closes the other end, ends. */
static int timed_child(void *p) {
    struct child_arg *a = p;
    close(a->block_w);
    int r = (a->with_id && timed_id(a->tm)) || child_writes(&a->tm->s, a->seed, 4);
    char b = 1;
    (void)!write(a->done_w, &b, 1);
    while (read(a->block_r, &b, 1) < 0 && errno == EINTR) {
    }
    return r ? 1 : 0;
}

/* One child of kind `how` writes on the stream (its ID first if with_id); the child has
 * ended, or was killed, when this returns. */
static int timed_children_one(int how, struct timed *tm, unsigned seed, int with_id) {
    static char stack[256 * 1024] __attribute__((aligned(16)));
    int done[2], block[2];
    if (pipe(done)) return -1;
    if (pipe(block)) return -1;
    struct child_arg a = {tm, seed, with_id, done[1], block[0], block[1]};
    pid_t pid;
    if (how == T_VFORK) {
        pid = vfork();
        if (pid == 0) {
            if (with_id && timed_id(tm)) _exit(1);
            _exit(child_writes(&tm->s, seed, 4) ? 1 : 0);
        }
    } else if (how == T_CLONE) {
        pid = clone(timed_child, stack + sizeof stack, SIGCHLD, &a);
    } else {
        pid = _Fork();
        if (pid == 0) _exit(timed_child(&a));
    }
    close(done[1]);
    close(block[0]);
    if (pid < 0) { close(done[0]); close(block[1]); return -1; }
    if (how != T_VFORK) {
        char b;
        (void)!read(done[0], &b, 1);
        cond_block(150); /* the child's bytes are on their own now */
    }
    close(block[1]);
    close(done[0]);
    int st = wait_bounded(pid, 1000);
    if (st == -1) tm->hung++;
    return st == 0 || st == -1 ? 0 : -1;
}

/* The process writes once and blocks 150 ms in no wait the shim sees: only a flusher can
 * release that write. */
static int parent_probe(struct timed *tm, unsigned *seed) {
    if (one_op(&tm->s, seed, 700) < 0) return -1;
    cond_block(150);
    return 0;
}

static int timed_children(int how, unsigned seed) {
    struct timed *tm = &timed[how];
    if (timed_connect(tm, TIMED_ID(how))) return -1;
    /* Before this process held any burst: a fork's fresh state. */
    if (timed_children_one(how, tm, seed + 1, 1)) return -1;
    if (write_some(&tm->s, &seed, 3000, 700) || parent_probe(tm, &seed)) return -1;
    /* After its bursts (its flusher runs), ended by a wait: a burst of the process's own
     * still held would be released by its flusher, and the child's bytes with it. */
    if (write_some(&tm->s, &seed, 2000, 700)) return -1;
    poll(NULL, 0, 1);
    if (timed_children_one(how, tm, seed + 2, 0)) return -1;
    if (parent_probe(tm, &seed) || write_some(&tm->s, &seed, 2000, 700)) return -1;
    tm->expect = tm->s.off;
    close(tm->s.fd);
    return 0;
}


static int timed_passed(unsigned seed) {
    struct timed *tm = &timed[T_PASSED];
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp)) return -1;
    pid_t b = fork();
    if (b == 0) {
        close(sp[0]);
        int fd = recv_fd(sp[1]);
        if (fd < 0) _exit(1);
        tm->s.fd = fd;
        seed += 3;
        for (int k = 0; k < 10; k++) {
            if (one_op(&tm->s, &seed, 500) < 0) _exit(1);
            usleep(20000);
        }
        tm->expect = tm->s.off;
        close(fd);
        _exit(0);
    }
    pid_t a = fork();
    if (a == 0) {
        close(sp[1]);
        if (timed_connect(tm, TIMED_ID(T_PASSED)) || timed_id(tm)) _exit(1);
        if (write_some(&tm->s, &seed, 5000, 700) || one_op(&tm->s, &seed, 700) < 0) _exit(1);
        if (send_fd(sp[0], tm->s.fd)) _exit(1);
        kill(getpid(), SIGKILL); /* nothing of the shim's runs in A again */
        _exit(1);
    }
    close(sp[0]);
    close(sp[1]);
    int sa = wait_bounded(a, 10000), sb = wait_bounded(b, 10000);
    return sa == 128 + SIGKILL && sb == 0 ? 0 : -1;
}

static int timed_stopped(unsigned seed) {
    struct timed *tm = &timed[T_STOPPED];
    pid_t w = fork();
    if (w == 0) {
        if (timed_connect(tm, TIMED_ID(T_STOPPED)) || timed_id(tm)) _exit(1);
        if (write_some(&tm->s, &seed, 5000, 700) || one_op(&tm->s, &seed, 700) < 0) _exit(1);
        kill(getpid(), SIGSTOP); /* just after a write; SIGCONT 300 ms later */
        if (write_some(&tm->s, &seed, 3000, 700)) _exit(1);
        tm->expect = tm->s.off;
        close(tm->s.fd);
        _exit(0);
    }
    int st;
    if (waitpid(w, &st, WUNTRACED) != w) return -1;
    if (WIFSTOPPED(st)) {
        usleep(300000);
        kill(w, SIGCONT);
        if (waitpid(w, &st, 0) != w) return -1;
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Runs the timed scenarios at once, each in a process forked for it; the number that
 * failed. */
static int timed_scenarios(unsigned seed) {
    pid_t pid[T_N];
    for (int k = 0; k < T_N; k++) {
        pid[k] = fork();
        if (pid[k] == 0) {
            unsigned sd = seed * 17 + k;
            int r = k <= T_FORK ? timed_children(k, sd) : k == T_PASSED ? timed_passed(sd) : timed_stopped(sd);
            _exit(r ? 1 : 0);
        }
    }
    int failed = 0;
    for (int k = 0; k < T_N; k++) {
        int st;
        failed += pid[k] < 0 || waitpid(pid[k], &st, 0) != pid[k] || !WIFEXITED(st) || WEXITSTATUS(st);
        expect_stream(TIMED_ID(k), timed[k].expect);
    }
    return failed;
}

/* The worst delay of a write of timed stream k (from its call to the read that brought its
 * last byte), in ms rounded up; -1 if some write's bytes never arrived. */
static long long worst_ms(int k) {
    struct timed *tm = &timed[k];
    int64_t worst = 0;
    uint32_t r = 0;
    for (uint32_t w = 0; w < tm->nw; w++) {
        while (r < tm->nr && tm->r[r].off < tm->w[w].off) r++;
        if (r == tm->nr) return -1;
        int64_t d = tm->r[r].t - tm->w[w].t;
        if (d > worst) worst = d;
    }
    return (worst + 999999) / 1000000;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    self_path = argv[0];
    if (argc >= 2 && !strcmp(argv[1], "continue")) return continue_stream(argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: stress SEED\n");
        return 2;
    }
    unsigned seed = (unsigned)strtoul(argv[1], NULL, 10) | 1;
    signal(SIGPIPE, SIG_IGN);
    /* The file sendfile reads: the pattern of stream PFILE_ID. */
    char path[] = "/tmp/nagless-stress-XXXXXX";
    pattern_fd = mkstemp(path);
    if (pattern_fd < 0) return 2;
    unlink(path);
    static uint8_t filebuf[PATTERN_FILE_BYTES];
    for (size_t k = 0; k < sizeof filebuf; k++) filebuf[k] = pattern(PFILE_ID, k);
    if (write_all(pattern_fd, filebuf, sizeof filebuf)) return 2;

    timed = mmap(NULL, T_N * sizeof *timed, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (timed == MAP_FAILED) return 2;

    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    target.sin_family = AF_INET;
    target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof target;
    if (bind(l, (struct sockaddr *)&target, len) || listen(l, 128) ||
        getsockname(l, (struct sockaddr *)&target, &len))
        return 2;
    int out[2];
    if (pipe(out)) return 2;
    pid_t ver = fork();
    if (ver == 0) {
        dup2(out[1], 1);
        close(out[0]);
        verifier(l);
    }
    close(out[1]);

    int failed = 0, streams = 0;
    streams++; failed += threads(seed) != 0;
    for (uint32_t k = 0; k < 4; k++) { streams++; failed += forking(seed + k, 200 + k) != 0; }
    streams += 2; failed += signals(seed) != 0;
    streams++; failed += nonblocking(seed) != 0;
    for (int v = 0; v < 11; v++) { streams++; failed += exec_variant(v, seed + v) != 0; }
    streams += T_N; failed += timed_scenarios(seed);

    shutdown(l, SHUT_RDWR);
    close(l);
    FILE *f = fdopen(out[0], "r");
    char line[256];
    int ok = 0, bad = 0;
    unsigned long long bytes = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned id;
        unsigned long long n;
        if (sscanf(line, "OK stream %u %llu", &id, &n) == 2 && n == expect[id & 1023]) {
            ok++;
            bytes += n;
        } else {
            bad++;
            printf("%s (expected %llu)\n", strtok(line, "\n"), expect[id & 1023]);
        }
    }
    int st;
    waitpid(ver, &st, 0);
    printf("streams=%d ok=%d bad=%d writer_failures=%d bytes=%llu", streams, ok, bad, failed, bytes);
    for (int k = 0; k < T_N; k++) printf(" worst_ms_%s=%lld", timed_name[k], worst_ms(k));
    int hung = 0;
    for (int k = 0; k < T_N; k++) hung += timed[k].hung;
    printf(" hung_children=%d\n", hung);
    return 0;
}

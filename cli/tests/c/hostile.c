/* What real daemons do that a preloaded shim must survive (issue: the shim is never the
 * cause). Modes:
 *   sigwrite N   N forked children each write to a TCP socket only from a SIGALRM handler
 *                (their first burst starts there) while their main line mallocs and frees;
 *                prints "died=K" (children that did not exit 0).
 *   sigsocket N  as sigwrite, but the handler also creates, connects and closes its socket.
 *   exec VARIANT writes a byte (a burst starts), then replaces itself (or starts a child) by
 *                VARIANT: the new program prints "cork=X", TCP_CORK of the inherited socket.
 *   cork-of FD   prints "cork=X" for descriptor FD.
 *   badptr       calls the hooked functions with bad pointers while a burst is held; prints
 *                each call's result and errno.
 *   sandboxed-badptr  badptr under a seccomp filter that kills on process_vm_readv/writev.
 *   duplicates   a burst on a dup (dup, dup2, fcntl F_DUPFD_CLOEXEC), then a read on the
 *                original: prints the kernel's TCP_CORK before and after the read.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int listener(struct sockaddr_in *a) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *a;
    if (l < 0 || bind(l, (struct sockaddr *)a, len) || listen(l, 64) ||
        getsockname(l, (struct sockaddr *)a, &len)) {
        perror("listener");
        exit(2);
    }
    return l;
}

static int dial(const struct sockaddr_in *a) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (const struct sockaddr *)a, sizeof *a)) return -1;
    return s;
}

/* ---- signal handlers ---- */

static volatile int sock = -1;
static struct sockaddr_in target;
static int handler_makes_socket;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    if (handler_makes_socket) {
        int s = dial(&target);
        if (s >= 0) {
            (void)!write(s, "h", 1);
            close(s);
        }
    } else if (sock >= 0) {
        (void)!write(sock, "h", 1);
    }
    errno = saved;
}

static void child_main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    /* The main line lives in malloc, where a handler that allocates corrupts the heap. */
    unsigned seed = (unsigned)getpid();
    void *keep[64] = {0};
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0;; i++) {
        int k = rand_r(&seed) % 64;
        free(keep[k]);
        keep[k] = malloc(16 + rand_r(&seed) % 4096);
        if ((i & 1023) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > 60)
                break;
        }
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    for (int k = 0; k < 64; k++) free(keep[k]);
    _exit(0);
}

static int signal_children(int n, int makes_socket) {
    int l = listener(&target);
    handler_makes_socket = makes_socket;
    int died = 0;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            close(l);
            if (!makes_socket) sock = dial(&target);
            child_main();
        }
        /* Read every connection the child makes until it exits. */
        int status = 0, conns[256], nconns = 0;
        for (;;) {
            struct pollfd p[257];
            p[0] = (struct pollfd){l, POLLIN, 0};
            for (int c = 0; c < nconns; c++) p[c + 1] = (struct pollfd){conns[c], POLLIN, 0};
            if (poll(p, nconns + 1, 5) > 0) {
                char buf[4096];
                for (int c = 0; c < nconns; c++)
                    if (p[c + 1].revents) (void)!read(conns[c], buf, sizeof buf);
                if (p[0].revents) {
                    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
                    if (c >= 0 && nconns < 256) conns[nconns++] = c;
                    else if (c >= 0) close(c);
                }
            }
            if (waitpid(pid, &status, WNOHANG) == pid) break;
        }
        for (int c = 0; c < nconns; c++) close(conns[c]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            died++;
            fprintf(stderr, "child %d: status %#x\n", (int)pid, status);
        }
    }
    printf("died=%d\n", died);
    return 0;
}

/* ---- exec ---- */

static int print_cork(int fd) {
    int v = -1;
    socklen_t len = sizeof v;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, &len)) return 1;
    printf("cork=%d\n", v);
    fflush(stdout);
    return 0;
}

static int exec_variant(const char *self, const char *v) {
    struct sockaddr_in a;
    int l = listener(&a);
    int s = dial(&a);
    int peer = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0 || peer < 0 || dup2(s, 7) != 7) return 2;
    close(s);
    if (write(7, "a", 1) != 1) return 2; /* a burst starts: the shim corks fd 7 */
    char *argv[] = {(char *)self, "cork-of", "7", NULL};
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "exec '%s' cork-of 7", self);
    if (!strcmp(v, "execl")) execl(self, self, "cork-of", "7", (char *)NULL);
    else if (!strcmp(v, "execle")) execle(self, self, "cork-of", "7", (char *)NULL, environ);
    else if (!strcmp(v, "execlp")) execlp(self, self, "cork-of", "7", (char *)NULL);
    else if (!strcmp(v, "execv")) execv(self, argv);
    else if (!strcmp(v, "execvpe")) execvpe(self, argv, environ);
    else if (!strcmp(v, "fexecve")) {
        int fd = open(self, O_RDONLY | O_CLOEXEC);
        fexecve(fd, argv, environ);
    } else if (!strcmp(v, "execveat")) execveat(AT_FDCWD, self, argv, environ, 0);
    else if (!strcmp(v, "posix_spawn") || !strcmp(v, "posix_spawnp")) {
        pid_t pid;
        int r = v[11] ? posix_spawnp(&pid, self, NULL, NULL, argv, environ)
                      : posix_spawn(&pid, self, NULL, NULL, argv, environ);
        if (r) return 2;
        int st;
        waitpid(pid, &st, 0);
        return 0;
    } else if (!strcmp(v, "system")) {
        return system(cmd) == 0 ? 0 : 2;
    } else if (!strcmp(v, "popen")) {
        FILE *f = popen(cmd, "r");
        char line[64];
        if (!f) return 2;
        while (fgets(line, sizeof line, f)) fputs(line, stdout);
        return pclose(f) == 0 ? 0 : 2;
    } else {
        fprintf(stderr, "unknown variant %s\n", v);
        return 2;
    }
    perror(v);
    return 2;
}

/* ---- bad pointers ---- */

/* Hidden from the compiler, which would refuse the calls below. */
static void *volatile bad_pointer = (void *)16;
#define BAD (bad_pointer)

static void show(const char *what, long r) {
    printf("%s=%ld/%s\n", what, r, r < 0 ? strerrorname_np(errno) : "-");
    errno = 0;
}

static int bad_pointers(void) {
    struct sockaddr_in a;
    int l = listener(&a);
    int s = dial(&a);
    int peer = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0 || peer < 0) return 2;
    char buf[64];
    /* Teach the socket a three-write shape (bursts ended by a read), so that the next burst
     * is held by MSG_MORE and a writev in its middle is looked at by the shim. */
    for (int round = 0; round < 5; round++) {
        for (int w = 0; w < 3; w++) (void)!write(s, "x", 1);
        (void)!recv(s, buf, sizeof buf, MSG_DONTWAIT);
    }
    (void)!write(s, "y", 1);
    show("writev_bad_vector", writev(s, BAD, 2));
    struct iovec bad_base = {BAD, 8};
    show("writev_bad_base", writev(s, &bad_base, 1));
    struct iovec empty = {buf, 0};
    show("writev_empty", writev(s, &empty, 1));
    (void)!write(s, "y", 1);
    struct timeval tv = {0, 1000};
    show("select_bad_set", select(s + 1, BAD, NULL, NULL, &tv));
    (void)!write(s, "y", 1);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(peer, &rs);
    /* (select with a bad timeout faults inside glibc itself, which reads it: not tried.) */
    /* (ppoll and pselect with a bad timeout fault inside glibc too.) */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = peer};
    epoll_ctl(ep, EPOLL_CTL_ADD, peer, &ev);
    (void)!write(s, "y", 1);
    struct epoll_event out[4];
    show("epoll_pwait2_bad_timeout", epoll_pwait2(ep, out, 4, BAD, NULL));
    /* (sigaction with a bad action faults inside glibc, which copies it.) */
    int v = -1;
    socklen_t len = sizeof v;
    show("getsockopt_nodelay", getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &len));
    printf("nodelay=%d\n", v);
    show("getsockopt_cork", getsockopt(s, IPPROTO_TCP, TCP_CORK, &v, &len));
    printf("cork=%d\n", v);
    return 0;
}

/* A seccomp filter as strict sandboxes install: process_vm_readv and process_vm_writev kill
 * the process (OpenSSH's pre-authentication sandbox and systemd's @system-service refuse
 * them), everything else is allowed. */
static int sandbox(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp");
        return -1;
    }
    return 0;
}

/* ---- duplicates ---- */

/* Whether the kernel holds bytes of fd unsent (held by TCP_CORK or a MSG_MORE tail: nothing
 * is in flight on these idle connections, so nothing else keeps a byte back). */
static int kernel_holds(int fd) {
    int n = -1;
    if (ioctl(fd, SIOCOUTQNSD, &n)) return -1;
    return n > 0;
}

/* For each way to duplicate a socket: a byte written on the duplicate (a burst starts), then
 * a read on the original: prints whether the kernel holds it before and after the read (0
 * after: the read ended the burst held on the other descriptor). */
static int duplicates(void) {
    struct sockaddr_in a;
    int l = listener(&a);
    const char *names[] = {"dup", "dup2", "fcntl"};
    for (int way = 0; way < 3; way++) {
        int s = dial(&a);
        int peer = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0 || peer < 0) return 2;
        int d = way == 0 ? dup(s) : way == 1 ? dup2(s, 40) : fcntl(s, F_DUPFD_CLOEXEC, 50);
        if (d < 0 || write(d, "z", 1) != 1) return 2;
        int held = kernel_holds(d);
        char buf[8];
        (void)!recv(s, buf, sizeof buf, MSG_DONTWAIT);
        printf("%s: held=%d after_read=%d\n", names[way], held, kernel_holds(d));
        close(d);
        close(s);
        close(peer);
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "sigwrite")) return signal_children(atoi(argv[2]), 0);
    if (argc >= 3 && !strcmp(argv[1], "sigsocket")) return signal_children(atoi(argv[2]), 1);
    if (argc >= 3 && !strcmp(argv[1], "exec")) return exec_variant(argv[0], argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "cork-of")) return print_cork(atoi(argv[2]));
    if (argc >= 2 && !strcmp(argv[1], "badptr")) return bad_pointers();
    if (argc >= 2 && !strcmp(argv[1], "sandboxed-badptr")) return sandbox() ? 2 : bad_pointers();
    if (argc >= 2 && !strcmp(argv[1], "duplicates")) return duplicates();
    fprintf(stderr, "usage: hostile sigwrite N | sigsocket N | exec VARIANT | badptr | duplicates\n");
    return 2;
}

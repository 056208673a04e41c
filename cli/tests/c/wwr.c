#define _GNU_SOURCE
/* write-write-read on both sides, for the preload tests.
 * Usage: wwr ROUNDS
 * Forks a server; both sides send each message as two writes and then read the reply.
 * Prints: rounds=N stalled=S median_us=D max_us=M client_segs=C server_segs=T
 * (stalled: rounds of 30 ms or more; segs: TCP_INFO data segments sent). */
#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>

static long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
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

static int by_value(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static unsigned segs(int fd) {
    struct tcp_info info;
    socklen_t len = sizeof info;
    memset(&info, 0, sizeof info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
    return info.tcpi_data_segs_out;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&a, &alen)) {
        perror("listen");
        return 1;
    }
    char buf[200];
    memset(buf, 'x', sizeof buf);
    pid_t pid = fork();
    if (pid == 0) {
        int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        for (int i = 0; i < rounds; i++) {
            if (read_full(s, buf, 200)) return 1;
            write(s, buf, 50);
            write(s, buf, 50);
        }
        printf("server_segs=%u\n", segs(s));
        fflush(stdout);
        close(s);
        return 0;
    }
    close(lfd);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    /* Connect non-blocking, then switch to blocking, as event-loop programs do. */
    connect(c, (struct sockaddr *)&a, sizeof a);
    struct timespec pause = {0, 10000000};
    nanosleep(&pause, NULL);
    int flags = 0;
    ioctl(c, FIONBIO, &flags);
    int stalled = 0;
    long long worst = 0;
    long long *took = calloc(rounds > 0 ? rounds : 1, sizeof *took);
    if (!took) return 1;
    for (int i = 0; i < rounds; i++) {
        long long t = now_us();
        write(c, buf, 100);
        send(c, buf, 100, 0);
        if (read_full(c, buf, 100)) { fprintf(stderr, "client read failed\n"); return 1; }
        long long d = now_us() - t;
        if (d >= 30000) stalled++;
        if (d > worst) worst = d;
        took[i] = d;
    }
    qsort(took, rounds, sizeof *took, by_value);
    printf("rounds=%d stalled=%d median_us=%lld max_us=%lld client_segs=%u\n", rounds, stalled,
           rounds > 0 ? took[rounds / 2] : 0, worst, segs(c));
    free(took);
    fflush(stdout);
    close(c);
    int st;
    waitpid(pid, &st, 0);
    return 0;
}

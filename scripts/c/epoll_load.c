/* Load for scripts/bench-epoll: opens CONNS connections to 127.0.0.1:PORT, keeps ACTIVE of
 * them busy with one 32-byte request at a time (each waits for its 100-byte answer before the
 * next), leaves the rest idle, and after SECONDS prints
 * "requests=N seconds=S p50_us=X p99_us=Y". Single-threaded epoll; stops by itself.
 * Usage: epoll_load PORT CONNS ACTIVE SECONDS */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RESP 100
#define MAXFD 65536

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static unsigned char got[MAXFD];
static double sent_at[MAXFD];
static unsigned lat_hist[100001]; /* µs, capped */


int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: epoll_load PORT CONNS ACTIVE SECONDS\n"); return 2; }
    int port = atoi(argv[1]), conns = atoi(argv[2]), active = atoi(argv[3]);
    double secs = atof(argv[4]);
    if (active > conns || conns <= 0) { fprintf(stderr, "need 0 < ACTIVE <= CONNS\n"); return 2; }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ep = epoll_create1(0), one = 1;
    static int fds[MAXFD];
    for (int i = 0; i < conns; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0 || s >= MAXFD || connect(s, (void *)&a, sizeof a)) { perror("connect"); return 1; }
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fds[i] = s;
    }
    char req[32];
    memset(req, 'q', sizeof req);
    for (int i = 0; i < active; i++) {
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = fds[i] };
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
        sent_at[fds[i]] = now();
        if (write(fds[i], req, sizeof req) != sizeof req) { perror("write"); return 1; }
    }
    unsigned long long done = 0;
    double start = now(), end = start + secs;
    struct epoll_event evs[512];
    char buf[RESP];
    while (now() < end) {
        int n = epoll_wait(ep, evs, 512, 100);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            ssize_t r = read(fd, buf, RESP - got[fd]);
            if (r <= 0) { if (r < 0 && errno == EINTR) continue; fprintf(stderr, "server closed\n"); return 1; }
            got[fd] += r;
            if (got[fd] < RESP) continue;
            got[fd] = 0;
            double t = now();
            unsigned us = (unsigned)((t - sent_at[fd]) * 1e6);
            lat_hist[us > 100000 ? 100000 : us]++;
            done++;
            sent_at[fd] = t;
            if (write(fd, req, sizeof req) != sizeof req) { perror("write"); return 1; }
        }
    }
    double took = now() - start;
    unsigned long long seen = 0, p50 = 0, p99 = 0;
    int have50 = 0;
    for (unsigned us = 0; us <= 100000; us++) {
        seen += lat_hist[us];
        if (!have50 && seen * 2 >= done) { p50 = us; have50 = 1; }
        if (seen * 100 >= done * 99) { p99 = us; break; }
    }
    printf("requests=%llu seconds=%.3f p50_us=%llu p99_us=%llu\n", done, took, p50, p99);
    return 0;
}

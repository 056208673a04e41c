/* The cost of a write on an ACK-clocked socket, for scripts/bench-clocked-writer.
 * Usage: clocked_writer drain PORT          listen on 127.0.0.1:PORT and read every
 *                                           connection to its end (until killed)
 *        clocked_writer write PORT N ROUNDS  connect to it; one thread waits in recv on the
 *                                           connection (the shim then leaves it to Nagle,
 *                                           clocked by the drain's ACKs) while the main thread
 *                                           sends N 40-byte writes, ROUNDS times.
 * Prints the fastest round's nanoseconds per write and the connection's data segments
 * (TCP_INFO), one line: "NS_PER_WRITE SEGMENTS". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void *drain_one(void *arg) {
    int fd = (int)(long)arg;
    char b[65536];
    while (recv(fd, b, sizeof b, 0) > 0) {}
    close(fd);
    return 0;
}

static void *wait_in_recv(void *arg) {
    char b[64];
    recv((int)(long)arg, b, sizeof b, 0);
    return 0;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: clocked_writer drain PORT | write PORT N ROUNDS\n"); return 2; }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!strcmp(argv[1], "drain")) {
        int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(l, (void *)&a, sizeof a) || listen(l, 16)) { perror("listen"); return 1; }
        for (;;) {
            int fd = accept(l, 0, 0);
            if (fd < 0) { perror("accept"); return 1; }
            pthread_t t;
            pthread_create(&t, 0, drain_one, (void *)(long)fd);
            pthread_detach(t);
        }
    }
    if (argc != 5 || strcmp(argv[1], "write")) { fprintf(stderr, "usage: clocked_writer drain PORT | write PORT N ROUNDS\n"); return 2; }
    long n = atol(argv[3]), rounds = atol(argv[4]);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (void *)&a, sizeof a)) { perror("connect"); return 1; }
    pthread_t r;
    pthread_create(&r, 0, wait_in_recv, (void *)(long)fd);
    usleep(20000); /* the reader is in recv before the first write */
    char buf[40];
    memset(buf, 'Q', sizeof buf);
    double best = 1e18;
    for (long k = 0; k < rounds; k++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++)
            if (send(fd, buf, sizeof buf, 0) != sizeof buf) { perror("send"); return 1; }
        double per = (now_ns() - t0) / n;
        if (per < best) best = per;
    }
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl);
    printf("%.1f %u\n", best, ti.tcpi_data_segs_out);
    return 0;
}

/* A client that sends each request as two writes (a header, then a body) and waits for the
 * reply: the write-write-read pattern that Nagle's algorithm and delayed ACKs stall for
 * 40 ms per round. Through nagless both writes leave as one segment when the program reads.
 *
 *   cc request_reply.c $(pkg-config --cflags --libs nagless) -o request_reply
 *   ./request_reply            (runs its own echo peer on 127.0.0.1)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nagless.h>

int main(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &len))
        return perror("listen"), 1;
    if (fork() == 0) { /* the peer: answer every 64-byte request with 16 bytes */
        int s = accept(l, NULL, NULL);
        char buf[64];
        for (;;) {
            size_t got = 0;
            while (got < sizeof buf) {
                ssize_t r = read(s, buf + got, sizeof buf - got);
                if (r <= 0) _exit(0);
                got += r;
            }
            if (write(s, buf, 16) != 16) _exit(1);
        }
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) return perror("connect"), 1;

    nagless *n = nagless_new(fd, NULL); /* default policy; sets TCP_NODELAY */
    if (!n) return perror("nagless_new"), 1;
    char header[32] = "HEADER", body[32] = "BODY", reply[16];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 20; i++) {
        nagless_write(n, header, sizeof header); /* queued */
        nagless_write(n, body, sizeof body);     /* queued */
        size_t got = 0;                          /* the read sends both, then waits */
        while (got < sizeof reply) {
            ssize_t r = nagless_read(n, reply + got, sizeof reply - got);
            if (r <= 0) return perror("read"), 1;
            got += r;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    nagless_stats st;
    nagless_get_stats(n, &st);
    printf("nagless %s: 20 request/reply rounds in %.2f ms, %llu flushes\n", nagless_version(), ms,
           (unsigned long long)st.flushes);
    nagless_flush_wait(n, 1000); /* nothing is left; this is how to finish */
    nagless_free(n);
    close(fd);
    wait(NULL);
    return 0;
}

/* A single-threaded epoll request/response server for scripts/bench-epoll.
 * Usage: epoll_rr PORT
 * Listens on 127.0.0.1:PORT; every 32-byte request gets a 16-byte header and an 84-byte body
 * as two separate writes (the pattern Nagle and delayed ACK stall on). Runs until killed.
 * Level-triggered, non-blocking sockets; a connection whose reply does not fit the socket
 * (never with these sizes) is dropped rather than buffered. Stops when accept fails with
 * anything but EAGAIN/EINTR (e.g. out of descriptors), rather than spin on the listener. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define REQ 32
#define MAXFD 65536

static unsigned char got[MAXFD]; /* bytes of the current request read so far */

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: epoll_rr PORT\n"); return 2; }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(l, (void *)&a, sizeof a) || listen(l, 4096)) { perror("listen"); return 1; }
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = l };
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    static const char header[] = "HDR 84 bytes...\n"; /* 16 bytes and a NUL */
    static char body[84];
    memset(body, 'b', sizeof body);
    struct epoll_event evs[512];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { perror("epoll_wait"); return 1; }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == l) {
                int c;
                while ((c = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0 || errno == EINTR) {
                    if (c < 0) continue;
                    if (c >= MAXFD) { close(c); continue; }
                    got[c] = 0;
                    struct epoll_event ce = { .events = EPOLLIN, .data.fd = c };
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                }
                if (errno != EAGAIN) { perror("accept4"); return 1; }
                continue;
            }
            char buf[REQ];
            ssize_t r = read(fd, buf, REQ - got[fd]);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) { close(fd); continue; }
            if (r < 0) continue;
            got[fd] += r;
            if (got[fd] < REQ) continue;
            got[fd] = 0;
            if (write(fd, header, sizeof header - 1) != sizeof header - 1 ||
                write(fd, body, sizeof body) != sizeof body)
                close(fd);
        }
    }
}

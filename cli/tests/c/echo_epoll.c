/* A multi-threaded epoll echo server, for the preload tests.
 * Usage: echo_epoll THREADS
 * Prints "port=N" once listening on 127.0.0.1, then echoes every byte back on the same
 * connection until it is killed. Accepted sockets are non-blocking (accept4 SOCK_NONBLOCK)
 * and spread round-robin over THREADS epoll loops; a short write keeps the rest in a
 * per-connection buffer and waits for EPOLLOUT. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXFD 65536
#define BUF (64 * 1024)

struct conn { char *pending; size_t len; };
static struct conn conns[MAXFD];

static void drop(int ep, int fd) {
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    free(conns[fd].pending);
    conns[fd].pending = NULL;
    conns[fd].len = 0;
    close(fd);
}

/* Sends what is pending; returns 0 when all is out, 1 if the socket is full, -1 on error. */
static int flush_pending(int fd) {
    struct conn *c = &conns[fd];
    size_t off = 0;
    while (off < c->len) {
        ssize_t n = send(fd, c->pending + off, c->len - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) break;
            return -1;
        }
        off += n;
    }
    memmove(c->pending, c->pending + off, c->len - off);
    c->len -= off;
    return c->len > 0;
}

static void *loop(void *arg) {
    int ep = *(int *)arg;
    struct epoll_event evs[64];
    char *buf = malloc(BUF);
    for (;;) {
        int n = epoll_wait(ep, evs, 64, 1000);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            struct conn *c = &conns[fd];
            if (c->len > 0) { /* writable again: finish the echo before reading more */
                int r = flush_pending(fd);
                if (r < 0) { drop(ep, fd); continue; }
                if (r > 0) continue;
                struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
                epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
            }
            ssize_t got = recv(fd, buf, BUF, 0);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) { drop(ep, fd); continue; }
            if (got < 0) continue;
            if (!c->pending) c->pending = malloc(2 * BUF);
            memcpy(c->pending + c->len, buf, got);
            c->len += got;
            int r = flush_pending(fd);
            if (r < 0) { drop(ep, fd); continue; }
            if (r > 0) {
                struct epoll_event ev = {.events = EPOLLOUT, .data.fd = fd};
                epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1 || threads > 16) threads = 2;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 512) ||
        getsockname(lfd, (struct sockaddr *)&a, &alen)) {
        perror("listen");
        return 1;
    }
    int eps[16];
    pthread_t t[16];
    for (int i = 0; i < threads; i++) {
        eps[i] = epoll_create1(EPOLL_CLOEXEC);
        pthread_create(&t[i], NULL, loop, &eps[i]);
    }
    printf("port=%d\n", ntohs(a.sin_port));
    fflush(stdout);
    for (int next = 0;; next = (next + 1) % threads) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) continue;
        if (fd >= MAXFD) { close(fd); continue; }
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(eps[next], EPOLL_CTL_ADD, fd, &ev);
    }
}

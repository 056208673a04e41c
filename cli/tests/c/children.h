/* What corners.c and stress.c share to drive children and other processes: a monotonic
 * clock, a bounded wait for a child, a block the shim does not see as a wait, and passing a
 * descriptor to another process (SCM_RIGHTS, as nginx, haproxy and systemd pass sockets). */
#ifndef NAGLESS_TESTS_CHILDREN_H
#define NAGLESS_TESTS_CHILDREN_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Waits for the child pid, at most ms milliseconds; then kills it. Its exit status (128 +
 * the signal that ended it), or -1 when it was still running and had to be killed. */
static int wait_bounded(pid_t pid, int ms) {
    int st;
    int64_t until = now_ns() + (int64_t)ms * 1000000;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0) return -2;
        if (now_ns() > until) break;
        struct timespec d = {0, 5 * 1000000};
        nanosleep(&d, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* Blocks ms milliseconds in a condition variable: no wait the shim sees. */
static void cond_block(int ms) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&c, &a);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&m);
    while (pthread_cond_timedwait(&c, &m, &until) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&m);
    pthread_cond_destroy(&c);
}

static int send_fd(int via, int fd) {
    char byte = 'F';
    struct iovec v = {&byte, 1};
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(via, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int via) {
    char byte;
    struct iovec v = {&byte, 1};
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
    struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    if (recvmsg(via, &m, 0) != 1) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

#endif

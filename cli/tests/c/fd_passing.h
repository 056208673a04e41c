/* Passing a descriptor to another process over a unix socket (SCM_RIGHTS), as nginx, haproxy
 * and systemd pass sockets: shared by the tests' C programs. One byte carries each. */
#ifndef NAGLESS_TESTS_FD_PASSING_H
#define NAGLESS_TESTS_FD_PASSING_H

#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

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

/* nagless.h: the C API of nagless (application-level TCP send coalescing).
 * Generated from capi/src/lib.rs by cbindgen; do not edit (scripts/test checks it).
 * Reference: capi/README.md. */

#ifndef NAGLESS_H
#define NAGLESS_H

#include <stddef.h>
#include <stdint.h>
#if defined(_WIN32)
/* A Winsock SOCKET. Errors are in WSAGetLastError(), with Winsock's codes. */
typedef uintptr_t nagless_socket_t;
#if defined(_MSC_VER)
#include <BaseTsd.h>
typedef SSIZE_T ssize_t;
#else
#include <sys/types.h>
#endif
/* Windows has no struct iovec: the one of nagless_writev, with the Unix layout. */
struct iovec {
  void *iov_base;
  size_t iov_len;
};
#else
#include <sys/types.h>
#include <sys/uio.h>
/* A socket descriptor. Errors are in errno. */
typedef int nagless_socket_t;
#endif

/* The version of nagless this header belongs to (nagless_version() says the library's). */
#define NAGLESS_VERSION_MAJOR 0
#define NAGLESS_VERSION_MINOR 1
#define NAGLESS_VERSION_PATCH 0
#define NAGLESS_VERSION_STRING "0.1.0"
/* NAGLESS_VERSION_MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons. */
#define NAGLESS_VERSION_NUMBER 100

/*
 Let the policy decide.
 */
#define NAGLESS_NORMAL 0

/*
 Send this and everything before it now (a keepalive, an error notice, the last reply).
 */
#define NAGLESS_SEND_NOW 1

/*
 More follows: pack this with the next write.
 */
#define NAGLESS_MORE_FOLLOWS 2

/*
 The opaque handle (`nagless *` in C).
 */
typedef struct nagless nagless;

/*
 When pending bytes leave. Fill it with `nagless_policy_default`, then change fields.
 */
typedef struct nagless_policy {
  /*
   1: send pending bytes when the program is about to wait for input (`nagless_read`
   that would block, `nagless_before_wait`). 0: off. Default 1.
   */
  int before_read;
  /*
   Send whole segments once this many bytes are pending; 0: off. Default 65536.
   */
  size_t threshold;
  /*
   No byte waits longer than this many microseconds (checked at every call, and by an
   event loop through `nagless_timeout_ms`); -1: off; 0: every write leaves at once.
   Default 500.
   */
  int64_t linger_us;
  /*
   Beyond this many pending bytes, writes flush first and a full non-blocking socket
   gives `EAGAIN`. At least 1. Default 4194304.
   */
  size_t high_water;
  /*
   1: `MSG_MORE` between the syscalls of one flush. Default 1.
   */
  int msg_more;
  /*
   1: `nagless_flush` sends at once. 0: it is a hint (before-read, the threshold and the
   linger bound decide). Default 1.
   */
  int explicit_flush;
  /*
   1: every write is handed to the kernel at once and **clocked as Nagle clocks it**
   (the library's `FlushPolicy::clocked`), for a connection several threads write
   requests to (each under a lock) while another reads the answers: a write leaves at
   once when nothing is unacknowledged, and is held by the kernel (`MSG_MORE`) for the
   next ACK otherwise, then sent with everything held since in one segment. Nothing waits
   in the handle, so no linger bound applies: needs `linger_us` 0. Linux and Android;
   elsewhere every write leaves at once. 0: off. Default 0.
   */
  int clocked;
} nagless_policy;

/*
 Counters of one handle (`nagless_get_stats`).
 */
typedef struct nagless_stats {
  /*
   Writes accepted.
   */
  uint64_t writes;
  /*
   Bytes accepted.
   */
  uint64_t bytes_written;
  /*
   Flushes that sent at least one byte.
   */
  uint64_t flushes;
  /*
   Syscalls made: sends, input checks and TCP_INFO queries.
   */
  uint64_t syscalls;
  /*
   Sends that met a full socket (`EAGAIN`).
   */
  uint64_t would_block;
  /*
   Bytes the socket took.
   */
  uint64_t bytes_sent;
  /*
   Bytes accepted and not yet sent.
   */
  uint64_t pending;
  /*
   Queries of the kernel's send queue under the clocked policy (`SIOCOUTQ`,
   `SIOCOUTQNSD`): how often a hand-over was clocked.
   */
  uint64_t clock_checks;
  /*
   Clocked sends the kernel was asked to hold for the next ACK.
   */
  uint64_t held_for_ack;
  /*
   Pushes of bytes the kernel held with nothing left in flight to bring an ACK.
   */
  uint64_t pushes;
} nagless_stats;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/*
 Fills `*policy` with the defaults (before-read on, threshold 64 KiB, linger 500 µs,
 high-water 4 MiB, MSG_MORE on, explicit flush on). Does nothing if `policy` is NULL.
 Thread-safe.
 */
void nagless_policy_default(struct nagless_policy *policy);

/*
 Wraps the connected socket `fd` (which the caller keeps open, and closes, itself) with
 `policy` (NULL: the defaults); sets `TCP_NODELAY` on TCP sockets. Returns NULL with errno:
 `EBADF` (not an open descriptor; `WSAENOTSOCK` on Windows, for anything but an open
 socket), `EINVAL` (a policy field out of range), or the error of `setsockopt`.
 Thread-safe.
 */
struct nagless *nagless_new(nagless_socket_t fd, const struct nagless_policy *policy);

/*
 Frees the handle: first hands the socket what it takes without waiting for space (on a
 blocking descriptor the send blocks as `write(2)` would). Returns
 how many accepted bytes it could not send and so discarded (0: none were lost; call
 `nagless_flush_wait` first to make sure), or -1 with errno if that last send failed (the
 bytes are discarded too). The descriptor stays open. `NULL` is a no-op returning 0.
 Not thread-safe: one thread at a time per handle.
 */
ssize_t nagless_free(struct nagless *h);

/*
 Queues `len` bytes (at most the room below the high-water mark: a short count, as
 `write(2)` may give); sends what the policy makes due. Returns the bytes accepted, or -1:
 `EAGAIN` when a non-blocking socket is full and nothing fits (wait for `POLLOUT`, call
 `nagless_on_writable`, retry), an earlier send's error, `EINVAL`.
 Not thread-safe: one thread at a time per handle.
 */
ssize_t nagless_write(struct nagless *h, const void *buf, size_t len);

/*
 `nagless_write` with an urgency: `NAGLESS_NORMAL`, `NAGLESS_SEND_NOW` (this and
 everything before it leave now) or `NAGLESS_MORE_FOLLOWS` (pack with the next write).
 Not thread-safe: one thread at a time per handle.
 */
ssize_t nagless_write_urgent(struct nagless *h, const void *buf, size_t len, int urgency);

/*
 Queues the `iovcnt` buffers as one message (as many bytes as fit below the high-water
 mark). Returns and fails as `nagless_write`.
 Not thread-safe: one thread at a time per handle.
 */
ssize_t nagless_writev(struct nagless *h, const struct iovec *iov, int iovcnt);

/*
 Sends everything pending. 0, or -1: `EAGAIN` when a non-blocking socket could not take it
 all (the rest stays queued: wait for `POLLOUT` and call `nagless_on_writable`), or the
 send's error.
 Not thread-safe: one thread at a time per handle.
 */
int nagless_flush(struct nagless *h);

/*
 Sends everything pending, waiting for a full socket to take it, for at most `timeout_ms`
 milliseconds (-1: no limit): the way to finish before `nagless_free` and `close(2)`.
 0, or -1: `ETIMEDOUT` (bytes remain queued), the send's error.
 Not thread-safe: one thread at a time per handle.
 */
int nagless_flush_wait(struct nagless *h, int timeout_ms);

/*
 The program is about to wait for input elsewhere (`poll`, `epoll_wait`): sends what
 before-read sends. 0, or -1 as `nagless_flush`.
 Not thread-safe: one thread at a time per handle.
 */
int nagless_before_wait(struct nagless *h);

/*
 `read(2)` on the socket; if it would wait, pending bytes are sent first (before-read).
 Input already buffered is read without flushing. A send error met here is kept for the
 next write or flush; the input comes first. Returns bytes read (0 at end of input) or -1.
 Not thread-safe: one thread at a time per handle.
 */
ssize_t nagless_read(struct nagless *h, void *buf, size_t len);

/*
 Milliseconds until the linger deadline of pending bytes (rounded up), for the timeout of
 `poll`/`epoll_wait`: -1 when nothing waits on a deadline, 0 when it has passed (call
 `nagless_poll_deadline`). -1 with errno `EINVAL` for a NULL handle.
 Not thread-safe: one thread at a time per handle.
 */
int nagless_timeout_ms(const struct nagless *h);

/*
 Sends what has come due by the linger deadline (call when the timeout from
 `nagless_timeout_ms` expires). 0, or -1 as `nagless_flush`.
 Not thread-safe: one thread at a time per handle.
 */
int nagless_poll_deadline(struct nagless *h);

/*
 The socket became writable: continues a send that met `EAGAIN`. 1 when nothing due is
 left (stop waiting for `POLLOUT`), 0 when the socket filled again, -1 on error.
 Not thread-safe: one thread at a time per handle.
 */
int nagless_on_writable(struct nagless *h);

/*
 1 when bytes are due but the socket was full (wait for `POLLOUT`, then call
 `nagless_on_writable`), 0 otherwise, -1 (`EINVAL`) for a NULL handle.
 Not thread-safe: one thread at a time per handle.
 */
int nagless_wants_writable(const struct nagless *h);

/*
 Bytes accepted and not yet sent (0 for a NULL handle).
 Not thread-safe: one thread at a time per handle.
 */
size_t nagless_pending(const struct nagless *h);

/*
 Copies the handle's counters into `*out`. 0, or -1 (`EINVAL`) for NULL arguments.
 Not thread-safe: one thread at a time per handle.
 */
int nagless_get_stats(const struct nagless *h, struct nagless_stats *out);

/*
 The library's version, e.g. "0.1.0" (a static string). Thread-safe.
 */
const char *nagless_version(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* NAGLESS_H */

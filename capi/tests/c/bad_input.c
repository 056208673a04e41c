/* (4) Bad input: NULL handles, a closed descriptor, policy values out of range, NULL
 * buffers and an unknown urgency give -1 (or NULL) with errno; nothing crashes. */
#include "common.h"

#define EXPECT_ERR(expr, err) do { errno = 0; long r_ = (long)(expr); \
    CHECK(r_ == -1 && errno == (err), "%s: %ld errno %d (%s)", #expr, r_, errno, strerror(errno)); } while (0)
#define EXPECT_NULL(expr, err) do { errno = 0; void *p_ = (void *)(expr); \
    CHECK(p_ == NULL && errno == (err), "%s: %p errno %d", #expr, p_, errno); } while (0)

int main(void) {
    char buf[8] = "abcdefg";
    nagless_stats st;
    EXPECT_ERR(nagless_write(NULL, buf, 3), EINVAL);
    EXPECT_ERR(nagless_flush(NULL), EINVAL);
    EXPECT_ERR(nagless_read(NULL, buf, 3), EINVAL);
    EXPECT_ERR(nagless_before_wait(NULL), EINVAL);
    EXPECT_ERR(nagless_poll_deadline(NULL), EINVAL);
    EXPECT_ERR(nagless_on_writable(NULL), EINVAL);
    EXPECT_ERR(nagless_timeout_ms(NULL), EINVAL);
    EXPECT_ERR(nagless_wants_writable(NULL), EINVAL);
    EXPECT_ERR(nagless_get_stats(NULL, &st), EINVAL);
    EXPECT_ERR(nagless_flush_wait(NULL, 10), EINVAL);
    CHECK(nagless_free(NULL) == 0, "free(NULL)");
    CHECK(nagless_pending(NULL) == 0, "pending(NULL)");

    EXPECT_NULL(nagless_new(-1, NULL), EBADF);
    int port, l = listen_on(&port, 0);
    int c = connect_to(port, 0);
    int closed = dup(c);
    close(closed);
    EXPECT_NULL(nagless_new(closed, NULL), EBADF);

    nagless_policy p;
    nagless_policy_default(&p);
    CHECK(p.before_read == 1 && p.linger_us == 500 && p.high_water == 4194304, "defaults");
    nagless_policy bad = p;
    bad.linger_us = -5;
    EXPECT_NULL(nagless_new(c, &bad), EINVAL);
    bad = p;
    bad.high_water = 0;
    EXPECT_NULL(nagless_new(c, &bad), EINVAL);
    bad = p;
    bad.before_read = 7;
    EXPECT_NULL(nagless_new(c, &bad), EINVAL);

    nagless *h = nagless_new(c, &p);
    CHECK(h, "nagless_new: %s", strerror(errno));
    EXPECT_ERR(nagless_write(h, NULL, 3), EINVAL);
    EXPECT_ERR(nagless_write_urgent(h, buf, 3, 9), EINVAL);
    EXPECT_ERR(nagless_read(h, NULL, 3), EINVAL);
    EXPECT_ERR(nagless_writev(h, NULL, 2), EINVAL);
    EXPECT_ERR(nagless_get_stats(h, NULL), EINVAL);
    CHECK(nagless_write(h, NULL, 0) == 0, "empty write");
    CHECK(nagless_writev(h, NULL, 0) == 0, "empty writev");
    CHECK(nagless_timeout_ms(h) == -1, "no deadline while nothing is pending");
    CHECK(nagless_write(h, buf, 3) == 3, "write");
    int t = nagless_timeout_ms(h);
    CHECK(t >= 0 && t <= 1, "deadline %d ms", t);
    CHECK(nagless_get_stats(h, &st) == 0 && st.pending == 3 && st.bytes_written == 3, "stats");
    CHECK(nagless_free(h) == 0, "free sent everything");
    /* Under explicit_flush = 0, flush is a hint, but flush_wait still sends everything. */
    nagless_policy hint = p;
    hint.explicit_flush = 0;
    h = nagless_new(c, &hint);
    CHECK(nagless_write(h, buf, 3) == 3 && nagless_flush(h) == 0, "hinted flush");
    CHECK(nagless_pending(h) == 3, "a hint sends nothing by itself");
    CHECK(nagless_flush_wait(h, 1000) == 0 && nagless_pending(h) == 0, "flush_wait sends all");
    CHECK(nagless_free(h) == 0, "free");
    /* A handle over a descriptor closed behind its back reports the error, never crashes. */
    h = nagless_new(c, &p);
    close(c);
    CHECK(nagless_write(h, buf, 3) == 3, "queued");
    EXPECT_ERR(nagless_flush(h), EBADF);
    CHECK(nagless_free(h) == -1 && errno == EBADF, "free reports the failed send");
    close(l);
    printf("ok version=%s\n", nagless_version());
    return 0;
}

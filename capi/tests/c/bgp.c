/* (2) A BGP-style daemon loop: non-blocking socket, poll() with nagless_timeout_ms, one
 * nagless_write per message: 255 UPDATEs (45 bytes each) and End-of-RIB (23 bytes). The
 * loop calls nagless_before_wait before every poll, as a daemon about to sleep does. MSS
 * 1448 (as on Ethernet). Prints "bytes=B mss=M segs=S min_segs=N eor_alone=0|1". */
#include "common.h"
#include <fcntl.h>

enum { UPDATES = 255, UPDATE_LEN = 45, EOR_LEN = 23 };

int main(void) {
    int port, l = listen_on(&port, 1448);
    int c = connect_to(port, 1448);
    int s = accept(l, NULL, NULL);
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    nagless *h = nagless_new(c, NULL);
    CHECK(h, "nagless_new: %s", strerror(errno));
    unsigned before = tcp_info_of(c).tcpi_data_segs_out;
    unsigned char msg[UPDATE_LEN];
    memset(msg, 0xff, 16); /* BGP marker */
    size_t total = 0;
    int queued = 0;
    /* The daemon's loop: write what it has, then wait (poll) for the peer or a deadline. */
    for (int round = 0; round < 1000 && queued <= UPDATES; round++) {
        for (int k = 0; queued <= UPDATES; k++) { /* everything the daemon has to say */
            size_t len = queued < UPDATES ? UPDATE_LEN : EOR_LEN;
            msg[18] = queued < UPDATES ? 2 : 2; /* UPDATE type; EoR is an empty UPDATE */
            ssize_t n = nagless_write(h, msg, len);
            if (n < 0 && errno == EAGAIN) break;
            CHECK(n == (ssize_t)len, "write: %zd %s", n, strerror(errno));
            total += len;
            queued++;
        }
        CHECK(nagless_before_wait(h) == 0 || errno == EAGAIN, "before_wait: %s", strerror(errno));
        struct pollfd p = {.fd = c, .events = POLLIN | (nagless_wants_writable(h) ? POLLOUT : 0)};
        poll(&p, 1, nagless_timeout_ms(h) < 0 ? 0 : nagless_timeout_ms(h));
        if (p.revents & POLLOUT) nagless_on_writable(h);
        if (queued > UPDATES && nagless_pending(h) == 0) break;
    }
    CHECK(nagless_flush_wait(h, 5000) == 0, "flush_wait: %s", strerror(errno));
    unsigned char *got = malloc(total);
    CHECK(read_full(s, got, total) == 0, "peer read");
    free(got);
    struct tcp_info ti = tcp_info_of(c);
    unsigned segs = ti.tcpi_data_segs_out - before;
    unsigned mss = ti.tcpi_snd_mss;
    unsigned min_segs = (total + mss - 1) / mss;
    /* With one flush, End-of-RIB is alone in a packet only if the tail is exactly its size. */
    int eor_alone = segs > min_segs || total % mss == EOR_LEN;
    printf("bytes=%zu mss=%u segs=%u min_segs=%u eor_alone=%d\n", total, mss, segs, min_segs, eor_alone);
    CHECK(nagless_free(h) == 0, "free lost bytes");
    return 0;
}

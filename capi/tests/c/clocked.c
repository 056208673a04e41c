/* (5) the clocked policy (`clocked` 1), as a multiplexed client uses it: a thread pipelines
 * 2000 requests of 40 bytes through the handle with no flush while the main thread reads the
 * echoed answers from the socket; then one request at a time. Checks that the policy is
 * refused with a linger bound, that no byte ever waits in the handle, that answers come back
 * whole and in order, and that the hand-over asked the kernel's send queue. Prints
 * "pipelined=N data_segs=S clock_checks=C held_for_ack=H single_median_ms=D single_max_ms=X". */
#include "common.h"

#include <pthread.h>

enum { N = 2000, SIZE = 40, SINGLE = 40 };

static void request(char *req, unsigned seq) {
    memset(req, 'q', SIZE);
    memcpy(req, &seq, sizeof seq);
}

struct writer {
    nagless *h;
    int fail;
};

static void *write_all(void *arg) {
    struct writer *w = arg;
    char req[SIZE];
    for (unsigned seq = 0; seq < N; seq++) {
        request(req, seq);
        if (nagless_write(w->h, req, SIZE) != SIZE || nagless_pending(w->h) != 0 ||
            nagless_timeout_ms(w->h) != -1) {
            w->fail = 1;
            return NULL;
        }
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    struct nagless_policy p;
    nagless_policy_default(&p);
    CHECK(p.clocked == 0, "clocked is off by default");
    int port, l = listen_on(&port, 0);
    pid_t pid = fork();
    if (pid == 0) { /* an echo server: each request answered by its own write */
        int s = accept(l, NULL, NULL);
        int one = 1;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char buf[SIZE];
        while (read_full(s, buf, SIZE) == 0)
            if (write(s, buf, SIZE) != SIZE) _exit(1);
        _exit(0);
    }
    close(l);
    int c = connect_to(port, 0);
    /* Clocking leaves nothing in the handle: a linger bound is refused. */
    p.clocked = 1;
    CHECK(nagless_new(c, &p) == NULL && errno == EINVAL, "clocked with a linger bound");
    p.linger_us = 0;
    nagless *h = nagless_new(c, &p);
    CHECK(h, "nagless_new: %s", strerror(errno));
    unsigned before = tcp_info_of(c).tcpi_data_segs_out;
    struct writer w = {h, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, write_all, &w) == 0, "pthread_create");
    char ans[SIZE], want[SIZE];
    for (unsigned seq = 0; seq < N; seq++) {
        CHECK(read_full(c, ans, SIZE) == 0, "answer %u", seq);
        request(want, seq);
        CHECK(memcmp(ans, want, SIZE) == 0, "answer %u out of order or damaged", seq);
    }
    pthread_join(t, NULL);
    CHECK(!w.fail, "a write left bytes in the handle or set a linger timeout");
    unsigned segs = tcp_info_of(c).tcpi_data_segs_out - before;
    /* One request in flight at a time: each finds nothing unacknowledged and leaves at once. */
    double took[SINGLE];
    char req[SIZE];
    for (int i = 0; i < SINGLE; i++) {
        request(req, N + i);
        double t0 = now_ms();
        CHECK(nagless_write(h, req, SIZE) == SIZE, "write");
        CHECK(read_full(c, ans, SIZE) == 0 && memcmp(ans, req, SIZE) == 0, "single answer");
        took[i] = now_ms() - t0;
    }
    qsort(took, SINGLE, sizeof took[0], by_value);
    struct nagless_stats st;
    nagless_get_stats(h, &st);
    CHECK(st.bytes_sent == (uint64_t)(N + SINGLE) * SIZE, "bytes sent %llu",
          (unsigned long long)st.bytes_sent);
    printf("pipelined=%d data_segs=%u clock_checks=%llu held_for_ack=%llu single_median_ms=%.3f "
           "single_max_ms=%.3f\n",
           N, segs, (unsigned long long)st.clock_checks, (unsigned long long)st.held_for_ack,
           took[SINGLE / 2], took[SINGLE - 1]);
    CHECK(nagless_free(h) == 0, "free lost bytes");
    close(c);
    int status;
    waitpid(pid, &status, 0);
    return 0;
}

/* (1) write-write-read: each request is two 100-byte writes, then a read of the 100-byte
 * answer; the server answers alike. Plain sockets stall ~40 ms per round (Nagle + delayed
 * ACK); through the C API no round stalls. Prints "plain_stalled=N nagless_stalled=M
 * nagless_median_ms=D nagless_max_ms=X client_segs=S rounds=R". */
#include "common.h"

enum { ROUNDS = 20 };

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(int use_nagless, double *worst, double *median, unsigned *segs) {
    int port, l = listen_on(&port, 0);
    pid_t pid = fork();
    if (pid == 0) { /* server: read 200, answer 100 as one write (a plain server) */
        int s = accept(l, NULL, NULL);
        char buf[200];
        for (int i = 0; i < ROUNDS; i++) {
            if (read_full(s, buf, 200)) _exit(1);
            if (write(s, buf, 100) != 100) _exit(1);
        }
        _exit(0);
    }
    close(l);
    int c = connect_to(port, 0);
    nagless *h = use_nagless ? nagless_new(c, NULL) : NULL;
    CHECK(!use_nagless || h, "nagless_new: %s", strerror(errno));
    char req[100], ans[100];
    memset(req, 'q', sizeof req);
    int stalled = 0;
    unsigned before = tcp_info_of(c).tcpi_data_segs_out;
    double took[ROUNDS];
    *worst = 0;
    for (int i = 0; i < ROUNDS; i++) {
        double t = now_ms();
        if (h) {
            CHECK(nagless_write(h, req, 100) == 100, "write");
            CHECK(nagless_write(h, req, 100) == 100, "write");
            size_t got = 0;
            while (got < 100) {
                ssize_t r = nagless_read(h, ans + got, 100 - got);
                CHECK(r > 0, "read: %s", strerror(errno));
                got += r;
            }
        } else {
            CHECK(write(c, req, 100) == 100 && write(c, req, 100) == 100, "write");
            CHECK(read_full(c, ans, 100) == 0, "read");
        }
        double d = now_ms() - t;
        if (d >= 30) stalled++;
        if (d > *worst) *worst = d;
        took[i] = d;
    }
    qsort(took, ROUNDS, sizeof took[0], by_value);
    *median = took[ROUNDS / 2];
    *segs = tcp_info_of(c).tcpi_data_segs_out - before;
    CHECK(nagless_free(h) == 0, "free lost bytes");
    close(c);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "server failed");
    return stalled;
}

int main(void) {
    double worst_plain, worst, median_plain, median;
    unsigned segs_plain, segs;
    int plain = run(0, &worst_plain, &median_plain, &segs_plain);
    int ours = run(1, &worst, &median, &segs);
    printf("plain_stalled=%d nagless_stalled=%d nagless_median_ms=%.3f nagless_max_ms=%.3f "
           "client_segs=%u rounds=%d\n",
           plain, ours, median, worst, segs, ROUNDS);
    return 0;
}

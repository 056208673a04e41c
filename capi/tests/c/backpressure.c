/* (3) Non-blocking backpressure: 64 MiB to a slow reader (a child that reads 64 KiB, naps
 * 1 ms), through nagless_write on a non-blocking socket and a poll loop on EAGAIN. The reader
 * checks every byte (a counter pattern) and the count. Prints "sent=N eagain=E". */
#include "common.h"
#include <fcntl.h>

#define TOTAL (64u << 20)

int main(void) {
    int port, l = listen_on(&port, 0);
    pid_t pid = fork();
    if (pid == 0) {
        int s = accept(l, NULL, NULL);
        static unsigned char buf[65536];
        size_t got = 0;
        for (;;) {
            ssize_t r = read(s, buf, sizeof buf);
            if (r < 0) _exit(2);
            if (r == 0) break;
            for (ssize_t i = 0; i < r; i++)
                if (buf[i] != (unsigned char)((got + i) % 251)) _exit(3);
            got += r;
            if ((got >> 20) % 8 == 0) usleep(1000);
        }
        _exit(got == TOTAL ? 0 : 4);
    }
    close(l);
    int c = connect_to(port, 0);
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    nagless_policy p;
    nagless_policy_default(&p);
    p.high_water = 256 * 1024;
    nagless *h = nagless_new(c, &p);
    CHECK(h, "nagless_new: %s", strerror(errno));
    static unsigned char chunk[10000];
    size_t sent = 0;
    unsigned eagain = 0;
    double start = now_ms();
    while (sent < TOTAL) {
        CHECK(now_ms() - start < 60000, "too slow: %zu bytes", sent);
        size_t len = TOTAL - sent < sizeof chunk ? TOTAL - sent : sizeof chunk;
        for (size_t i = 0; i < len; i++) chunk[i] = (unsigned char)((sent + i) % 251);
        ssize_t n = nagless_write(h, chunk, len);
        if (n < 0) {
            CHECK(errno == EAGAIN, "write: %s", strerror(errno));
            eagain++;
            struct pollfd pf = {.fd = c, .events = POLLOUT};
            poll(&pf, 1, 1000);
            CHECK(nagless_on_writable(h) >= 0, "on_writable: %s", strerror(errno));
            continue;
        }
        CHECK(n > 0 && (size_t)n <= len, "short count %zd", n);
        CHECK(nagless_pending(h) <= p.high_water, "pending %zu beyond high water", nagless_pending(h));
        sent += n;
    }
    CHECK(nagless_flush_wait(h, 60000) == 0, "flush_wait: %s", strerror(errno));
    CHECK(nagless_free(h) == 0, "free lost bytes");
    close(c);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reader status %d", WEXITSTATUS(status));
    printf("sent=%zu eagain=%u\n", sent, eagain);
    return 0;
}

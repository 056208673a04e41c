/* The variadic exec functions, which stable Rust cannot define: each gathers its arguments
 * into a vector and calls the vector form (execv, execve, execvp), which the shim hooks
 * (bursts end before the program is replaced). Reached through the exported `execl`,
 * `execle` and `execlp` of preload/src/exec.rs, which jump here. */
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* Counts the arguments from `arg` up to the terminating NULL (the NULL not counted). */
static size_t count(const char *arg, va_list ap) {
    size_t n = 1;
    (void)arg;
    while (va_arg(ap, const char *) != NULL) n++;
    return n;
}

/* Fills argv[0..n] from `arg` and `*ap` (n - 1 arguments, then the NULL) and leaves `*ap`
 * after the NULL (through a pointer: a va_list passed by value is left indeterminate). */
static void fill(char **argv, const char *arg, size_t n, va_list *ap) {
    argv[0] = (char *)arg;
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(*ap, char *);
}

/* Declares `argv`, the vector of the variadic arguments after `arg`, and `ap`, left after
 * the terminating NULL (execle's environment follows it). */
#define GATHER(arg)                      \
    va_list ap;                          \
    va_start(ap, arg);                   \
    size_t n = count(arg, ap);           \
    va_end(ap);                          \
    char *argv[n + 1];                   \
    va_start(ap, arg);                   \
    fill(argv, arg, n, &ap)

HIDDEN int nagless_execl(const char *path, const char *arg, ...) {
    GATHER(arg);
    va_end(ap);
    return execv(path, argv);
}

HIDDEN int nagless_execlp(const char *file, const char *arg, ...) {
    GATHER(arg);
    va_end(ap);
    return execvp(file, argv);
}

HIDDEN int nagless_execle(const char *path, const char *arg, ...) {
    GATHER(arg);
    char **envp = va_arg(ap, char **);
    va_end(ap);
    return execve(path, argv, envp);
}

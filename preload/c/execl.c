/* The variadic exec functions, which stable Rust cannot define: each gathers its arguments
 * into a vector and calls the vector form (execv, execve, execvp), which the shim hooks
 * (bursts end before the program is replaced). Reached through the exported `execl`,
 * `execle` and `execlp` of preload/src/exec.rs, which jump here. */
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* Counts the arguments after `arg` up to the terminating NULL. */
#define COUNT(arg, n)                                 \
    do {                                              \
        va_list ap;                                   \
        va_start(ap, arg);                            \
        n = 1;                                        \
        while (va_arg(ap, const char *) != NULL) n++; \
        va_end(ap);                                   \
    } while (0)

/* Fills argv[0..n] and leaves `ap` after the NULL. */
#define FILL(argv, arg, n, ap)                                       \
    do {                                                             \
        argv[0] = (char *)arg;                                       \
        for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, char *); \
    } while (0)

HIDDEN int nagless_execl(const char *path, const char *arg, ...) {
    size_t n;
    COUNT(arg, n);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    FILL(argv, arg, n - 1, ap);
    argv[n] = NULL;
    va_end(ap);
    return execv(path, argv);
}

HIDDEN int nagless_execlp(const char *file, const char *arg, ...) {
    size_t n;
    COUNT(arg, n);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    FILL(argv, arg, n - 1, ap);
    argv[n] = NULL;
    va_end(ap);
    return execvp(file, argv);
}

HIDDEN int nagless_execle(const char *path, const char *arg, ...) {
    size_t n;
    COUNT(arg, n);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    FILL(argv, arg, n - 1, ap);
    argv[n] = NULL;
    (void)va_arg(ap, char *); /* the NULL */
    char **envp = va_arg(ap, char **);
    va_end(ap);
    return execve(path, argv, envp);
}

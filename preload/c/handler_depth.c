/* How deep in the program's signal handlers the calling thread is (see src/signals.rs).
 * Kept here for its TLS model: initial-exec TLS is a fixed offset from the thread pointer,
 * read without __tls_get_addr, which may allocate on a thread's first access after a
 * dlopen: not something to do inside a signal handler. */
#define HIDDEN __attribute__((visibility("hidden")))

static __thread unsigned depth __attribute__((tls_model("initial-exec")));

HIDDEN unsigned nagless_handler_depth(void) { return depth; }
HIDDEN void nagless_handler_enter(void) { depth++; }
HIDDEN void nagless_handler_leave(void) {
    if (depth) depth--;
}

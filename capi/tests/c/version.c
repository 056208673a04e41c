/* (5) The version: nagless.h's NAGLESS_VERSION_* macros (usable in #if) name the same
 * release as the library it runs against (nagless_version()). Prints version=MAJOR.MINOR.PATCH. */
#include <stdio.h>
#include <string.h>

#include "nagless.h"

#if !defined(NAGLESS_VERSION_MAJOR) || !defined(NAGLESS_VERSION_MINOR) || !defined(NAGLESS_VERSION_PATCH)
#error "nagless.h lacks NAGLESS_VERSION_MAJOR/MINOR/PATCH"
#endif
#if NAGLESS_VERSION_NUMBER != NAGLESS_VERSION_MAJOR * 10000 + NAGLESS_VERSION_MINOR * 100 + NAGLESS_VERSION_PATCH
#error "NAGLESS_VERSION_NUMBER disagrees with MAJOR/MINOR/PATCH"
#endif

int main(void) {
    char header[64];
    snprintf(header, sizeof header, "%d.%d.%d", NAGLESS_VERSION_MAJOR, NAGLESS_VERSION_MINOR,
             NAGLESS_VERSION_PATCH);
    const char *library = nagless_version();
    if (strcmp(header, NAGLESS_VERSION_STRING) != 0 || strcmp(header, library) != 0) {
        fprintf(stderr, "header %s (string %s), library %s\n", header, NAGLESS_VERSION_STRING,
                library);
        return 1;
    }
    printf("version=%s\n", header);
    return 0;
}

/* A stand-in for Windows' bcryptprimitives.dll, for Wine releases without it (Wine 8.0,
 * Debian 12): Rust's standard library imports ProcessPrng from it (since Rust 1.78) for its
 * random seeds, and a program that cannot import it does not start. This one answers with
 * RtlGenRandom (advapi32's SystemFunction036), which Wine has. Built by scripts/wine-test
 * only when Wine has no bcryptprimitives.dll of its own. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}

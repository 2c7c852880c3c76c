/*
 * lib/random.c - getrandom(2) without short reads.
 */
#include "lib/random.h"

#include <errno.h>
#include <sys/random.h>
#include <sys/types.h>

int random_bytes(void *out, size_t n)
{
    unsigned char *p = out;
    size_t got = 0;

    while (got < n) {
        ssize_t r = getrandom(p + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

int random_hex(char *out, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];

    if (n > sizeof(raw) || random_bytes(raw, n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * n] = '\0';
    return 0;
}

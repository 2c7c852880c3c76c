/*
 * lib/random.c - bytes from getrandom(2), fetched 4 KiB at a time per
 * thread: one system call per 256 tokens. Each byte is handed out once and
 * then wiped from the buffer.
 */
#include "lib/random.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>

#include "lib/text.h"

static _Thread_local unsigned char rnd_buf[4096];
static _Thread_local size_t rnd_left;

static int refill(void)
{
    size_t got = 0;

    while (got < sizeof(rnd_buf)) {
        ssize_t r = getrandom(rnd_buf + got, sizeof(rnd_buf) - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    rnd_left = sizeof(rnd_buf);
    return 0;
}

int random_bytes(void *out, size_t n)
{
    unsigned char *p = out;

    while (n > 0) {
        size_t take;

        if (rnd_left == 0 && refill() != 0)
            return -1;
        take = n < rnd_left ? n : rnd_left;
        rnd_left -= take;
        memcpy(p, rnd_buf + rnd_left, take);
        memset(rnd_buf + rnd_left, 0, take);
        p += take;
        n -= take;
    }
    return 0;
}

int random_hex(char *out, size_t n)
{
    unsigned char raw[64];

    if (n > sizeof(raw) || random_bytes(raw, n) != 0)
        return -1;
    text_hex(out, raw, n);
    memset(raw, 0, sizeof(raw));
    return 0;
}

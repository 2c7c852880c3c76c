/*
 * lib/logfmt.c - the pieces lib/log.c builds a line from: escaped strings,
 * literals, integers and milliseconds, appended at *pos of a buffer of cap
 * bytes and never past cap - 1, always NUL-terminated.
 *
 * The lines are built by hand, not with snprintf: at the default level a
 * lock pair writes four of them (two access lines, a grant and a release
 * event), and printf's format parsing was a sixth of lockd's CPU on the
 * memory backend. tests/unit/test_log_format.c pins the bytes.
 */
#include "lib/logfmt.h"
#include "lib/text.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char hex_digits[] = "0123456789abcdef";

/* Per byte: 0 escaped in both formats (NUL, control bytes, DEL), 1 only
 * in JSON (quote, backslash), 2 kept as it is in both. A byte c is kept
 * when byte_class[c] > json. */
static const unsigned char byte_class[256] = {
    [0x20 ... 0x21] = 2, ['"'] = 1,           [0x23 ... 0x5b] = 2,
    ['\\'] = 1,          [0x5d ... 0x7e] = 2, [0x80 ... 0xff] = 2,
};

/* Append s[0..n) to buf at *pos, JSON-escaped (json) or with control
 * bytes escaped (text), a NUL written as '?' (a string value's bytes may
 * hold one), never past cap - 1. */
void logfmt_put_escaped_n(
    char *buf, size_t cap, size_t *pos, const char *s, size_t n, int json)
{
    json = json != 0; /* byte_class's threshold */
    for (size_t i = 0; i < n && *pos + 7 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        /* a run of bytes kept as they are, copied at once: the same
         * bytes as one at a time, as far as the loop's bound lets */
        size_t run = 0, room = cap - 7 - *pos;
        const unsigned char *u = (const unsigned char *)s + i;
        if (room > n - i)
            room = n - i;
        while (run < room && byte_class[u[run]] > json)
            run++;
        if (run > 0) {
            memcpy(buf + *pos, s + i, run);
            *pos += run;
            i += run - 1;
            continue;
        }
        if (c == '\0') {
            buf[(*pos)++] = '?';
        } else if (json && (c == '"' || c == '\\')) {
            buf[(*pos)++] = '\\';
            buf[(*pos)++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            buf[(*pos)++] = '\\';
            if (json) {
                buf[(*pos)++] = 'u';
                buf[(*pos)++] = '0';
                buf[(*pos)++] = '0';
            } else {
                buf[(*pos)++] = 'x';
            }
            buf[(*pos)++] = hex_digits[c >> 4];
            buf[(*pos)++] = hex_digits[c & 15];
        } else {
            buf[(*pos)++] = (char)c;
        }
    }
    buf[*pos] = '\0';
}

/* Append the C string s as logfmt_put_escaped_n() does. */
void logfmt_put_escaped(
    char *buf, size_t cap, size_t *pos, const char *s, int json)
{
    logfmt_put_escaped_n(buf, cap, pos, s, strlen(s), json);
}

/* Append s[0..n) as it is, cut to fit before cap - 1; *pos < cap. */
void logfmt_put_mem(char *buf, size_t cap, size_t *pos, const char *s, size_t n)
{
    size_t room = cap - *pos - 1;

    if (n > room)
        n = room;
    memcpy(buf + *pos, s, n);
    *pos += n;
    buf[*pos] = '\0';
}

void logfmt_put_raw(char *buf, size_t cap, size_t *pos, const char *s)
{
    logfmt_put_mem(buf, cap, pos, s, strlen(s));
}

void logfmt_put_i64(char *buf, size_t cap, size_t *pos, int64_t v)
{
    char d[TEXT_U64_MAX + 1];
    size_t n = 0;

    if (v < 0)
        d[n++] = '-';
    n += text_put_u64(d + n, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
    logfmt_put_mem(buf, cap, pos, d, n);
}

/* us in milliseconds with three decimals, as printf's "%.3f" writes
 * us / 1000.0: exactly, below 10^15 us (31 years) either way. */
void logfmt_put_ms(char *buf, size_t cap, size_t *pos, int64_t us)
{
    char d[32];
    size_t n = 0;
    uint64_t a;

    if (us <= -1000000000000000LL || us >= 1000000000000000LL) {
        snprintf(d, sizeof(d), "%.3f", (double)us / 1000.0);
        logfmt_put_raw(buf, cap, pos, d);
        return;
    }
    a = us < 0 ? (uint64_t)-us : (uint64_t)us;
    if (us < 0)
        d[n++] = '-';
    n += text_put_u64(d + n, a / 1000);
    d[n++] = '.';
    d[n++] = (char)('0' + a / 100 % 10);
    d[n++] = (char)('0' + a / 10 % 10);
    d[n++] = (char)('0' + a % 10);
    logfmt_put_mem(buf, cap, pos, d, n);
}

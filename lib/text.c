/*
 * lib/text.c - number parsing, percent-decoding, constant-time compare.
 */
#include "lib/text.h"

#include <stdlib.h>
#include <string.h>

int text_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (s == NULL || *s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

bool text_secret_eq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    volatile unsigned char diff = (unsigned char)(la != lb);

    /* Walk the longer string's length either way so the time depends on
     * the lengths only, never on where the first difference is. */
    size_t n = la > lb ? la : lb;
    for (size_t i = 0; i < n; i++) {
        unsigned char ca = i < la ? (unsigned char)a[i] : 0;
        unsigned char cb = i < lb ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(ca ^ cb);
    }
    return diff == 0;
}

static const char hex_digits[] = "0123456789abcdef";

void text_hex(char *out, const void *in, size_t n)
{
    const unsigned char *b = in;

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex_digits[b[i] >> 4];
        out[2 * i + 1] = hex_digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* 16 + the value of each lowercase hex digit, 0 for any other byte: one
 * lookup a digit (every token of every release goes through it) */
#define HEX_DIGIT(c, v) [(unsigned char)(c)] = 16 + (v)
static const unsigned char lower_hex_value[256] = {
    HEX_DIGIT('0', 0),  HEX_DIGIT('1', 1),  HEX_DIGIT('2', 2),
    HEX_DIGIT('3', 3),  HEX_DIGIT('4', 4),  HEX_DIGIT('5', 5),
    HEX_DIGIT('6', 6),  HEX_DIGIT('7', 7),  HEX_DIGIT('8', 8),
    HEX_DIGIT('9', 9),  HEX_DIGIT('a', 10), HEX_DIGIT('b', 11),
    HEX_DIGIT('c', 12), HEX_DIGIT('d', 13), HEX_DIGIT('e', 14),
    HEX_DIGIT('f', 15),
};
#undef HEX_DIGIT

bool text_unhex_lower(const char *s, void *out, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned char *b = out;

    for (size_t i = 0; i < n; i++) {
        unsigned char hi = lower_hex_value[u[2 * i]];
        unsigned char lo = hi != 0 ? lower_hex_value[u[2 * i + 1]] : 0;
        if (lo == 0)
            return false;
        b[i] = (unsigned char)((hi & 15) << 4 | (lo & 15));
    }
    return s[2 * n] == '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t text_put_u64(char *out, uint64_t v)
{
    /* two digits per division: a fence has 16 of them, in every grant's
     * answer, event and access line */
    static const char pairs[] = "00010203040506070809"
                                "10111213141516171819"
                                "20212223242526272829"
                                "30313233343536373839"
                                "40414243444546474849"
                                "50515253545556575859"
                                "60616263646566676869"
                                "70717273747576777879"
                                "80818283848586878889"
                                "90919293949596979899";
    char d[TEXT_U64_MAX];
    size_t k = TEXT_U64_MAX, n;

    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        d[--k] = pairs[2 * r + 1];
        d[--k] = pairs[2 * r];
    }
    if (v >= 10) {
        d[--k] = pairs[2 * v + 1];
        d[--k] = pairs[2 * v];
    } else {
        d[--k] = (char)('0' + v);
    }
    n = TEXT_U64_MAX - k;
    memcpy(out, d + k, n);
    return n;
}

size_t text_put_ipv4(char *out, const unsigned char *a)
{
    size_t n = 0;

    for (int i = 0; i < 4; i++) {
        if (i > 0)
            out[n++] = '.';
        n += text_put_u64(out + n, a[i]);
    }
    return n;
}

char *text_percent_decode(const char *s, size_t n, size_t *out_len, bool *bad)
{
    char *out = malloc(n + 1);
    size_t j = 0;

    *bad = false;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            out[j++] = s[i];
            continue;
        }
        int hi = i + 1 < n ? hexval(s[i + 1]) : -1;
        int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
            free(out);
            *bad = true;
            return NULL;
        }
        out[j++] = (char)(hi * 16 + lo);
        i += 2;
    }
    out[j] = '\0';
    *out_len = j;
    return out;
}

bool text_utf8_valid(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;

    while (i < len) {
        unsigned char c = s[i];
        size_t n;
        uint32_t cp;

        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false; /* continuation byte, 0xc0/0xc1 or > 0xf4 */
        }
        for (size_t k = 1; k <= n; k++) {
            if (i + k >= len || (s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

bool text_has_control(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return true;
    }
    return false;
}

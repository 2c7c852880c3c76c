/*
 * tests/fuzz/fuzz.h - what the libFuzzer targets share: the input as a C
 * string, split into fields, and the guard that keeps a target from
 * opening device files an input names (a FIFO or a terminal would block).
 * Header only: each target is one program (tests/fuzz/README.md).
 */
#ifndef TESTS_FUZZ_FUZZ_H
#define TESTS_FUZZ_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The input as a new NUL-terminated string (a NUL inside ends it early
 * for the C-string readers, as it would for libmicrohttpd's). */
static inline char *fuzz_strdup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);

    if (s == NULL)
        abort(); /* libFuzzer's -rss_limit_mb catches a real exhaustion */
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Split s in place at every sep into at most max fields (the last keeps
 * the rest); the count. */
static inline size_t fuzz_split(char *s, char sep, char **fields, size_t max)
{
    size_t n = 0;

    while (n + 1 < max) {
        char *at = strchr(s, sep);
        fields[n++] = s;
        if (at == NULL)
            return n;
        *at = '\0';
        s = at + 1;
    }
    fields[n++] = s;
    return n;
}

/* The name=value pairs of query (changed in place: '+' becomes ' ', '&'
 * and '=' become NULs) into q (room for max); their count, 0 for "". */
static inline size_t
fuzz_query_pairs(char *query, struct api_param *q, size_t max)
{
    char *pairs[64];
    size_t n;

    if (query[0] == '\0')
        return 0;
    for (char *c = query; *c != '\0'; c++)
        if (*c == '+')
            *c = ' ';
    n = fuzz_split(query, '&', pairs, max < 64 ? max : 64);
    for (size_t i = 0; i < n; i++) {
        char *eq = strchr(pairs[i], '=');
        if (eq != NULL)
            *eq = '\0';
        q[i].name = pairs[i];
        q[i].value = eq != NULL ? eq + 1 : NULL;
    }
    return n;
}

/* True if s names something under /dev, /proc or /sys, which the file
 * options must not open while fuzzing (reading /dev/stdin would hang). */
static inline bool fuzz_names_device(const char *s, size_t len)
{
    static const char *const bad[] = { "/dev", "/proc", "/sys", "/run" };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = strlen(bad[i]);
        for (size_t j = 0; j + n <= len; j++)
            if (memcmp(s + j, bad[i], n) == 0)
                return true;
    }
    return false;
}

#endif /* TESTS_FUZZ_FUZZ_H */

/*
 * lib/logfmt.h - appending the parts of a log line to a buffer (lib/log.c's
 * helpers). Each writes at buf + *pos, advances *pos, stops before cap - 1
 * and leaves buf NUL-terminated; *pos < cap on entry.
 */
#ifndef LIB_LOGFMT_H
#define LIB_LOGFMT_H

#include <stddef.h>
#include <stdint.h>

/* s[0..n), JSON-escaped (json) or with control bytes escaped (text), a NUL
 * written as '?'; it stops while *pos + 7 >= cap, so an escape is never
 * cut. */
void logfmt_put_escaped_n(
    char *buf, size_t cap, size_t *pos, const char *s, size_t n, int json);
/* The C string s, as logfmt_put_escaped_n(). */
void logfmt_put_escaped(
    char *buf, size_t cap, size_t *pos, const char *s, int json);
/* s[0..n) as it is, cut to fit. */
void logfmt_put_mem(
    char *buf, size_t cap, size_t *pos, const char *s, size_t n);
/* The C string s as it is, cut to fit. */
void logfmt_put_raw(char *buf, size_t cap, size_t *pos, const char *s);
/* v in decimal. */
void logfmt_put_i64(char *buf, size_t cap, size_t *pos, int64_t v);
/* us in milliseconds with three decimals, as printf's "%.3f" writes
 * us / 1000.0. */
void logfmt_put_ms(char *buf, size_t cap, size_t *pos, int64_t us);

#endif /* LIB_LOGFMT_H */

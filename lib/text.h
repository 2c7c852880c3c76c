/*
 * lib/text.h - small string helpers every part may use: decimal number
 * parsing and writing, percent-decoding and a constant-time compare. Leaf.
 */
#ifndef LIB_TEXT_H
#define LIB_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parse a decimal unsigned integer in [min, max]: 0, or -1 on junk,
 * signs, overflow, range or NULL. */
int text_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* Write v in decimal at out (room for TEXT_U64_MAX bytes; no NUL): the
 * bytes written. By hand, for the per-request paths that printf cost. */
#define TEXT_U64_MAX 20
size_t text_put_u64(char *out, uint64_t v);
/* Write the IPv4 address a (4 bytes, network order) in dotted decimal at
 * out, as inet_ntop() does (room for 15 bytes; no NUL): the bytes
 * written. */
size_t text_put_ipv4(char *out, const unsigned char *a);

/* Percent-decode s[0..n) into a new NUL-terminated string of *out_len
 * bytes (it may hold NULs: callers decide). NULL on a malformed escape
 * (*bad set) or no memory. The caller frees. */
char *text_percent_decode(const char *s, size_t n, size_t *out_len, bool *bad);

/* Write n bytes at in as 2n lowercase hex digits and a NUL at out (which
 * holds 2n + 1 bytes). */
void text_hex(char *out, const void *in, size_t n);
/* Read s as exactly 2n lowercase hex digits, then its end, into out's n
 * bytes: true; false (out partly written) for anything else, an upper
 * case digit too. It reads no further than the first byte that is not a
 * digit, so never past s's NUL. For tokens and digests, which lockd
 * writes in lower case only: "AB" is not "ab". */
bool text_unhex_lower(const char *s, void *out, size_t n);

/* Constant-time comparison of two NUL-terminated strings (tokens,
 * secrets): true if equal. The time depends on the lengths only. */
bool text_secret_eq(const char *a, const char *b);

/* True if s[0..len) is well-formed UTF-8 (no overlongs, surrogates or
 * code points past U+10FFFF). */
bool text_utf8_valid(const char *s, size_t len);
/* True if s[0..len) holds a C0 control character or DEL. */
bool text_has_control(const char *s, size_t len);

#endif /* LIB_TEXT_H */

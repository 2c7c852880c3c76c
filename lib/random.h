/*
 * lib/random.h - bytes from the operating system's CSPRNG (getrandom),
 * for tokens, seeds and instance ids. Leaf.
 */
#ifndef LIB_RANDOM_H
#define LIB_RANDOM_H

#include <stddef.h>

/* Fill out[0..n) with bytes from getrandom() (buffered per thread, each
 * byte handed out once): 0, or -1 when it fails. */
int random_bytes(void *out, size_t n);

/* n random bytes as 2n lowercase hex digits and a NUL in out (which holds
 * 2n + 1 bytes): 0, or -1. */
int random_hex(char *out, size_t n);

#endif /* LIB_RANDOM_H */

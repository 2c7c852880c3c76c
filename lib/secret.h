/*
 * lib/secret.h - a bearer token read from a file (the first line), that
 * requests check against while SIGHUP may re-read the file: a reload swaps
 * the value whole under a read-write lock, so a check sees the old token
 * or the new one, never a mix. Compared in constant time.
 */
#ifndef LIB_SECRET_H
#define LIB_SECRET_H

#include <stdbool.h>
#include <stddef.h>

struct secret;

/* Read path's first line (without its line end; 1..1023 bytes). NULL on
 * failure, with a reason in err (errlen bytes, NUL-terminated, naming the
 * file but never its content). path is copied. */
struct secret *secret_open(const char *path, char *err, size_t errlen);
/* Read the file again: 0 and the new value in force, or -1 with the
 * reason in err and the old value kept (a rotation half-written by an
 * operator must not lock everyone out). Thread-safe. */
int secret_reload(struct secret *s, char *err, size_t errlen);
/* True if candidate equals the current value; constant time in the
 * value's length. Thread-safe. A NULL s or candidate is false. */
bool secret_check(struct secret *s, const char *candidate);
/* The first line of path (without its line end; 1..1023 bytes),
 * malloc'ed: the caller wipes (explicit_bzero) and frees it. NULL with the
 * reason in err, naming the file but never its content. */
char *secret_file_line(const char *path, char *err, size_t errlen);
/* The file it reads. */
const char *secret_path(const struct secret *s);
void secret_close(struct secret *s); /* accepts NULL */

#endif /* LIB_SECRET_H */

/*
 * lib/secret.c - a bearer token from a file, re-read on demand (see
 * secret.h). Readers take the read lock for the compare only; a reload
 * reads the file outside the lock and swaps the pointer under the write
 * lock.
 */
#include "lib/secret.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text.h"

#define SECRET_LINE_MAX 1024

struct secret {
    pthread_rwlock_t lock; /* guards value */
    char *path;            /* owned */
    char *value;           /* owned: the first line */
};

char *secret_file_line(const char *path, char *err, size_t errlen)
{
    char line[SECRET_LINE_MAX];
    FILE *f = fopen(path, "r");
    char *v;
    size_t n;

    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    fclose(f);
    n = strcspn(line, "\r\n");
    line[n] = '\0';
    if (n == 0) {
        snprintf(err, errlen, "%s: the first line is empty", path);
        return NULL;
    }
    v = strdup(line);
    explicit_bzero(line, sizeof(line));
    if (v == NULL)
        snprintf(err, errlen, "%s: out of memory", path);
    return v;
}

struct secret *secret_open(const char *path, char *err, size_t errlen)
{
    struct secret *s = calloc(1, sizeof(*s));

    if (s == NULL || (s->path = strdup(path)) == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        free(s);
        return NULL;
    }
    s->value = secret_file_line(path, err, errlen);
    if (s->value == NULL) {
        free(s->path);
        free(s);
        return NULL;
    }
    pthread_rwlock_init(&s->lock, NULL);
    return s;
}

int secret_reload(struct secret *s, char *err, size_t errlen)
{
    char *v = secret_file_line(s->path, err, errlen);
    char *old;

    if (v == NULL)
        return -1;
    pthread_rwlock_wrlock(&s->lock);
    old = s->value;
    s->value = v;
    pthread_rwlock_unlock(&s->lock);
    explicit_bzero(old, strlen(old));
    free(old);
    return 0;
}

bool secret_check(struct secret *s, const char *candidate)
{
    bool ok;

    if (s == NULL || candidate == NULL)
        return false;
    pthread_rwlock_rdlock(&s->lock);
    ok = text_secret_eq(candidate, s->value);
    pthread_rwlock_unlock(&s->lock);
    return ok;
}

const char *secret_path(const struct secret *s)
{
    return s->path;
}

void secret_close(struct secret *s)
{
    if (s == NULL)
        return;
    pthread_rwlock_destroy(&s->lock);
    explicit_bzero(s->value, strlen(s->value));
    free(s->value);
    free(s->path);
    free(s);
}

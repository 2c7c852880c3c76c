/*
 * backends/zookeeper/call.c - one asynchronous ZooKeeper call waited for
 * with a deadline (see call.h). The call is shared by the requesting thread
 * and the library's completion thread: whichever lets go last frees it.
 */
#include "backends/zookeeper/call.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"

struct zk_call *zk_call_new(void)
{
    struct zk_call *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (clock_cond_init(&c->cv) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    c->refs = 2; /* the caller's and the completion's */
    return c;
}

void zk_call_unref(struct zk_call *c)
{
    int left;

    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0)
        return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->data);
    free(c->kids);
    free(c->extra);
    free(c);
}

/* Completion side: store, wake the caller, let go. */
static void zk_call_finish(struct zk_call *c, int rc)
{
    pthread_mutex_lock(&c->mu);
    c->rc = rc;
    c->done = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    zk_call_unref(c);
}

void zk_call_on_void(int rc, const void *data)
{
    zk_call_finish((struct zk_call *)(uintptr_t)data, rc);
}

void zk_call_on_stat(int rc, const struct Stat *stat, const void *data)
{
    struct zk_call *c = (struct zk_call *)(uintptr_t)data;

    if (rc == ZOK && stat != NULL)
        c->stat = *stat;
    zk_call_finish(c, rc);
}

void zk_call_on_data(int rc,
                     const char *value,
                     int value_len,
                     const struct Stat *stat,
                     const void *data)
{
    struct zk_call *c = (struct zk_call *)(uintptr_t)data;

    if (rc == ZOK) {
        if (stat != NULL)
            c->stat = *stat;
        if (value != NULL && value_len > 0) {
            c->data = malloc((size_t)value_len);
            if (c->data == NULL) {
                rc = ZSYSTEMERROR;
            } else {
                memcpy(c->data, value, (size_t)value_len);
                c->data_len = value_len;
            }
        }
    }
    zk_call_finish(c, rc);
}

/* An owned copy of a listing: one block, the pointers then the names.
 * ZOK (*out NULL for none), or ZSYSTEMERROR without memory. */
static int
zk_kids_copy(const struct String_vector *strings, char ***out, int *n_out)
{
    size_t n, total = 0;
    char **kids, *p;

    *out = NULL;
    *n_out = 0;
    if (strings == NULL || strings->count <= 0)
        return ZOK;
    n = (size_t)strings->count;
    for (size_t i = 0; i < n; i++)
        total += strlen(strings->data[i]) + 1;
    kids = malloc(n * sizeof(char *) + total);
    if (kids == NULL)
        return ZSYSTEMERROR;
    p = (char *)(kids + n);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(strings->data[i]) + 1;
        memcpy(p, strings->data[i], l);
        kids[i] = p;
        p += l;
    }
    *out = kids;
    *n_out = (int)n;
    return ZOK;
}

void zk_call_on_kids(int rc,
                     const struct String_vector *strings,
                     const struct Stat *stat,
                     const void *data)
{
    struct zk_call *c = (struct zk_call *)(uintptr_t)data;

    if (rc == ZOK)
        rc = zk_kids_copy(strings, &c->kids, &c->nkids);
    if (rc == ZOK && stat != NULL)
        c->stat = *stat;
    zk_call_finish(c, rc);
}

void zk_call_on_create(int rc,
                       const char *name,
                       const struct Stat *stat,
                       const void *data)
{
    struct zk_call *c = (struct zk_call *)(uintptr_t)data;

    if (rc == ZOK) {
        if (name != NULL)
            snprintf(c->name, sizeof(c->name), "%s", name);
        if (stat != NULL)
            c->stat = *stat;
    }
    zk_call_finish(c, rc);
}

int zk_call_wait(struct zk_call *c, int issued, int64_t deadline)
{
    int rc;

    if (issued != ZOK) {
        zk_call_unref(c); /* the completion's reference: it never runs */
        return issued;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->done) {
        if (clock_cond_wait_until(&c->cv, &c->mu, deadline) == ETIMEDOUT)
            break;
    }
    rc = c->done ? c->rc : ZOPERATIONTIMEOUT;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int zk_call_run(struct zk_call *c,
                int issued,
                int64_t deadline,
                struct Stat *st)
{
    int rc = zk_call_wait(c, issued, deadline);

    if (rc == ZOK && st != NULL)
        *st = c->stat;
    zk_call_unref(c);
    return rc;
}

int zk_call_multi_failed(struct zk_call *c, int n)
{
    int done;

    pthread_mutex_lock(&c->mu);
    done = c->done;
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; done && i < n; i++)
        if (c->results[i].err != ZOK &&
            c->results[i].err != ZRUNTIMEINCONSISTENCY)
            return i;
    return -1;
}
/* ---- batches of gets ---------------------------------------------------- */

struct zk_batch *zk_batch_new(size_t n)
{
    struct zk_batch *b =
        calloc(1, sizeof(*b) + n * sizeof(struct zk_batch_slot));

    if (b == NULL)
        return NULL;
    if (pthread_mutex_init(&b->mu, NULL) != 0) {
        free(b);
        return NULL;
    }
    if (clock_cond_init(&b->cv) != 0) {
        pthread_mutex_destroy(&b->mu);
        free(b);
        return NULL;
    }
    b->refs = 1;
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        b->slots[i].b = b;
        b->slots[i].rc = ZOPERATIONTIMEOUT;
    }
    return b;
}

void zk_batch_sent(struct zk_batch *b)
{
    pthread_mutex_lock(&b->mu);
    b->refs++;
    b->pending++;
    pthread_mutex_unlock(&b->mu);
}

void zk_batch_not_sent(struct zk_batch *b, int i, int rc)
{
    pthread_mutex_lock(&b->mu);
    b->refs--;
    b->pending--;
    b->slots[i].rc = rc;
    b->slots[i].done = true;
    pthread_mutex_unlock(&b->mu);
}

void zk_batch_on_data(int rc,
                      const char *value,
                      int value_len,
                      const struct Stat *stat,
                      const void *data)
{
    struct zk_batch_slot *s = (struct zk_batch_slot *)(uintptr_t)data;
    struct zk_batch *b = s->b;
    char *copy = NULL;

    if (rc == ZOK && value != NULL && value_len > 0) {
        copy = malloc((size_t)value_len);
        if (copy == NULL)
            rc = ZSYSTEMERROR;
        else
            memcpy(copy, value, (size_t)value_len);
    }
    pthread_mutex_lock(&b->mu);
    s->rc = rc;
    s->done = true;
    if (rc == ZOK) {
        if (stat != NULL)
            s->stat = *stat;
        s->data = copy;
        s->data_len = copy != NULL ? value_len : 0;
        copy = NULL;
    }
    b->pending--;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    free(copy);
    zk_batch_unref(b);
}

void zk_batch_on_kids(int rc,
                      const struct String_vector *strings,
                      const struct Stat *stat,
                      const void *data)
{
    struct zk_batch_slot *s = (struct zk_batch_slot *)(uintptr_t)data;
    struct zk_batch *b = s->b;
    char **kids = NULL;
    int n = 0;

    if (rc == ZOK)
        rc = zk_kids_copy(strings, &kids, &n);
    pthread_mutex_lock(&b->mu);
    s->rc = rc;
    s->done = true;
    if (rc == ZOK) {
        if (stat != NULL)
            s->stat = *stat;
        s->kids = kids;
        s->nkids = n;
    }
    b->pending--;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    zk_batch_unref(b);
}

void zk_batch_wait(struct zk_batch *b, int64_t deadline)
{
    pthread_mutex_lock(&b->mu);
    while (b->pending > 0)
        if (clock_cond_wait_until(&b->cv, &b->mu, deadline) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&b->mu);
}

void zk_batch_unref(struct zk_batch *b)
{
    int left;

    if (b == NULL)
        return;
    pthread_mutex_lock(&b->mu);
    left = --b->refs;
    pthread_mutex_unlock(&b->mu);
    if (left > 0)
        return;
    for (size_t i = 0; i < b->n; i++) {
        free(b->slots[i].data);
        free(b->slots[i].kids);
    }
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/*
 * backends/zookeeper/index.c - the keys this instance knows to be in the
 * store, sorted in byte order, for list() and for the keeper's sweep.
 * ZooKeeper cannot page the children of a node, and a listing of
 * <root>/lockd/locks costs as much as there are keys, so no list() request
 * lists it: the keeper's one relisting (keeper.c, at most every
 * zk_index_period()) is decoded and sorted here, and every grant made
 * through this instance is added at once (zk_index_add()).
 *
 * Staleness: a key granted through another instance sharing the store
 * appears once the keeper relists, within one relist period:
 * ZK_SWEEP_RELIST_MS (2 s) up to ZK_RELIST_RATE keys a second, longer
 * above (N keys: N / ZK_RELIST_RATE s; 4 s for 10 000 keys). A key freed
 * stays in the index until then; list() reads it and leaves it out.
 * Memory: the index keeps at most ZK_INDEX_MAX keys (the first ones in
 * byte order, with a warning: list() then misses the rest) and
 * ZK_INDEX_RECENT grants made here since the last relisting (more are
 * seen after the next one).
 */
#include "backends/zookeeper/zk.h"

#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"

/* A key in a relisting: where its bytes are in the blob. */
struct zk_ixent {
    uint32_t off;
    uint16_t len;
};

/* One relisting, decoded and sorted; replaced whole, never changed. */
struct zk_ix {
    char *blob; /* the keys' bytes, back to back */
    struct zk_ixent *ents;
    size_t n;
};

/* A grant made here since the last relisting was asked for. */
struct zk_ixrec {
    char *key; /* owned */
    size_t len;
    int64_t at; /* monotonic ms when it was added */
};

/* Plain byte order: memcmp over the shorter length, then shorter first. */
static int zk_key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen;
}

static int zk_ixent_cmp(const void *x, const void *y, void *arg)
{
    const struct zk_ixent *a = x, *b = y;
    const char *blob = arg;

    return zk_key_cmp(blob + a->off, a->len, blob + b->off, b->len);
}

static void zk_ix_free(struct zk_ix *ix)
{
    if (ix == NULL)
        return;
    free(ix->blob);
    free(ix->ents);
    free(ix);
}

/* A relisting's names, decoded and sorted; NULL without memory. Names
 * that are not a key's node are left out; past ZK_INDEX_MAX keys, the
 * first ones in byte order are kept. */
static struct zk_ix *zk_ix_build(const struct zk_call *kc, bool *cut)
{
    struct zk_ix *ix = calloc(1, sizeof(*ix));
    size_t cap = 0, used = 0;

    *cut = false;
    if (ix == NULL)
        return NULL;
    for (int i = 0; i < kc->nkids; i++)
        cap += strlen(kc->kids[i]);
    ix->blob = malloc(cap + 1);
    ix->ents = calloc((size_t)kc->nkids + 1, sizeof(*ix->ents));
    if (ix->blob == NULL || ix->ents == NULL) {
        zk_ix_free(ix);
        return NULL;
    }
    for (int i = 0; i < kc->nkids; i++) {
        const char *name = kc->kids[i];
        long n;
        if (name[0] != 'k' || used > UINT32_MAX - LOCK_KEY_MAX)
            continue;
        /* a key's base64url is 4/3 of it: it fits where its name was */
        n = zk_b64_decode(name + 1, strlen(name + 1),
                          (unsigned char *)ix->blob + used, cap - used);
        if (n <= 0 || n > LOCK_KEY_MAX)
            continue;
        ix->ents[ix->n].off = (uint32_t)used;
        ix->ents[ix->n++].len = (uint16_t)n;
        used += (size_t)n;
    }
    qsort_r(ix->ents, ix->n, sizeof(*ix->ents), zk_ixent_cmp, ix->blob);
    if (ix->n > ZK_INDEX_MAX) {
        ix->n = ZK_INDEX_MAX;
        *cut = true;
    }
    return ix;
}

/* The first entry of ix not before key (strict: after it). */
static size_t
zk_ix_bound(const struct zk_ix *ix, const char *key, size_t len, bool strict)
{
    size_t lo = 0, hi = ix != NULL ? ix->n : 0;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct zk_ixent *e = &ix->ents[mid];
        int c = zk_key_cmp(ix->blob + e->off, e->len, key, len);
        if (c < 0 || (strict && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The same in the recent grants (be->ix_mu held). */
static size_t
zk_rec_bound(const struct zk_be *be, const char *key, size_t len, bool strict)
{
    size_t lo = 0, hi = be->nrecent;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct zk_ixrec *r = &be->recent[mid];
        int c = zk_key_cmp(r->key, r->len, key, len);
        if (c < 0 || (strict && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int zk_index_init(struct zk_be *be)
{
    be->ix = NULL;
    be->nrecent = 0;
    be->recent = calloc(ZK_INDEX_RECENT, sizeof(*be->recent));
    if (be->recent == NULL)
        return -1;
    if (pthread_mutex_init(&be->ix_mu, NULL) != 0) {
        free(be->recent);
        be->recent = NULL;
        return -1;
    }
    be->ix_ready = true;
    return 0;
}

void zk_index_cleanup(struct zk_be *be)
{
    if (!be->ix_ready)
        return;
    zk_ix_free(be->ix);
    for (size_t i = 0; i < be->nrecent; i++)
        free(be->recent[i].key);
    free(be->recent);
    pthread_mutex_destroy(&be->ix_mu);
    be->ix_ready = false;
}

void zk_index_add(struct zk_be *be, const char *key, size_t len)
{
    struct zk_ixrec *r;
    char *copy;
    size_t i;

    pthread_mutex_lock(&be->ix_mu);
    i = zk_rec_bound(be, key, len, false);
    if (i < be->nrecent && be->recent[i].len == len &&
        memcmp(be->recent[i].key, key, len) == 0) {
        be->recent[i].at = clock_mono_ms();
        goto out;
    }
    /* already listed, and no listing under way that may have missed it:
     * the next one is asked for after this grant */
    if (!be->ix_listing) {
        size_t j = zk_ix_bound(be->ix, key, len, false);
        if (j < (be->ix != NULL ? be->ix->n : 0) &&
            be->ix->ents[j].len == len &&
            memcmp(be->ix->blob + be->ix->ents[j].off, key, len) == 0)
            goto out;
    }
    if (be->nrecent >= ZK_INDEX_RECENT || (copy = malloc(len + 1)) == NULL)
        goto out; /* seen after the next relisting */
    memcpy(copy, key, len);
    copy[len] = '\0';
    memmove(&be->recent[i + 1], &be->recent[i],
            (be->nrecent - i) * sizeof(*be->recent));
    r = &be->recent[i];
    r->key = copy;
    r->len = len;
    r->at = clock_mono_ms();
    be->nrecent++;
out:
    pthread_mutex_unlock(&be->ix_mu);
}

void zk_index_listing(struct zk_be *be)
{
    pthread_mutex_lock(&be->ix_mu);
    be->ix_listing = true;
    pthread_mutex_unlock(&be->ix_mu);
}

void zk_index_listed(struct zk_be *be, const struct zk_call *kc, int64_t asked)
{
    bool cut = false;
    struct zk_ix *ix = kc != NULL ? zk_ix_build(kc, &cut) : NULL, *old;
    size_t keep = 0;

    pthread_mutex_lock(&be->ix_mu);
    be->ix_listing = false;
    old = ix != NULL ? be->ix : NULL;
    if (ix != NULL) {
        be->ix = ix;
        /* grants asked for before the listing are in it, if still there */
        for (size_t i = 0; i < be->nrecent; i++) {
            if (be->recent[i].at < asked)
                free(be->recent[i].key);
            else
                be->recent[keep++] = be->recent[i];
        }
        be->nrecent = keep;
    }
    pthread_mutex_unlock(&be->ix_mu);
    zk_ix_free(old);
    if (cut && !be->ix_cut_said) {
        be->ix_cut_said = true;
        log_warn("zookeeper: more than %d keys in the store: lists show the "
                 "first %d only",
                 ZK_INDEX_MAX, ZK_INDEX_MAX);
    }
}

size_t zk_index_size(struct zk_be *be)
{
    size_t n;

    pthread_mutex_lock(&be->ix_mu);
    n = (be->ix != NULL ? be->ix->n : 0) + be->nrecent;
    pthread_mutex_unlock(&be->ix_mu);
    return n;
}

int64_t zk_index_period(struct zk_be *be)
{
    int64_t n = (int64_t)zk_index_size(be);
    int64_t ms = n * 1000 / ZK_RELIST_RATE;

    return ms > ZK_SWEEP_RELIST_MS ? ms : ZK_SWEEP_RELIST_MS;
}

static bool zk_has_prefix(const char *k, size_t len, const char *p, size_t plen)
{
    return len >= plen && memcmp(k, p, plen) == 0;
}

/* Copy key into out[*n] and count it. */
static void
zk_cand_put(struct zk_ixkey *out, size_t *n, const char *key, size_t len)
{
    memcpy(out[*n].key, key, len);
    out[*n].key[len] = '\0';
    out[(*n)++].len = len;
}

size_t zk_index_next(struct zk_be *be,
                     const struct zk_ixkey *after,
                     const char *prefix,
                     size_t plen,
                     struct zk_ixkey *out,
                     size_t max,
                     bool *end)
{
    const struct zk_ix *ix;
    size_t i, j, n = 0, nix;

    pthread_mutex_lock(&be->ix_mu);
    ix = be->ix;
    nix = ix != NULL ? ix->n : 0;
    /* the keys with prefix are one run: start at it, or after `after` */
    i = zk_ix_bound(ix, prefix, plen, false);
    j = zk_rec_bound(be, prefix, plen, false);
    if (after != NULL &&
        zk_key_cmp(after->key, after->len, prefix, plen) >= 0) {
        i = zk_ix_bound(ix, after->key, after->len, true);
        j = zk_rec_bound(be, after->key, after->len, true);
    }
    while (n < max) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        int c;
        if (i < nix) {
            a = ix->blob + ix->ents[i].off;
            alen = ix->ents[i].len;
            if (!zk_has_prefix(a, alen, prefix, plen))
                a = NULL;
        }
        if (j < be->nrecent) {
            b = be->recent[j].key;
            blen = be->recent[j].len;
            if (!zk_has_prefix(b, blen, prefix, plen))
                b = NULL;
        }
        if (a == NULL && b == NULL)
            break;
        c = a == NULL ? 1 : b == NULL ? -1 : zk_key_cmp(a, alen, b, blen);
        if (c <= 0) {
            zk_cand_put(out, &n, a, alen);
            i++;
            j += c == 0;
        } else {
            zk_cand_put(out, &n, b, blen);
            j++;
        }
    }
    *end = n < max;
    pthread_mutex_unlock(&be->ix_mu);
    return n;
}

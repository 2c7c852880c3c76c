/*
 * backends/memory/holders.c - the holders of one memory-store entry: grant
 * (a new fence), expiry one holder at a time, lookup by token or by
 * Idempotency-Key, removal, and the inspect view. Holder 0 is inline in
 * the entry; the others sit in a separate array (mem_int.h) that grows by
 * doubling and goes away when one holder is left.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/memory/mem_int.h"
#include "lib/clock.h"
#include "lib/metrics.h"
#include "lib/text.h"

struct mem_holder *mem_holder_at(struct mem_entry *e, uint32_t i)
{
    return i == 0 ? &e->first : &e->more[i - 1];
}

/* Is t a token of lockd's form? Then its bytes are in out. */
static bool token_bytes(const char *t, uint8_t out[MEM_TOKEN_BYTES])
{
    return text_unhex_lower(t, out, MEM_TOKEN_BYTES);
}

/* Does h hold token? Constant time in what h holds. */
static bool token_is(const struct mem_holder *h,
                     const char *token,
                     bool bin,
                     const uint8_t bytes[MEM_TOKEN_BYTES])
{
    volatile uint8_t diff = 0;

    if (h->tok_text != NULL || !bin)
        return h->tok_text != NULL && !bin &&
               text_secret_eq(h->tok_text, token);
    for (size_t i = 0; i < MEM_TOKEN_BYTES; i++)
        diff |= (uint8_t)(h->tok[i] ^ bytes[i]);
    return diff == 0;
}

void mem_holder_token(const struct mem_holder *h, char out[LOCK_TOKEN_MAX + 1])
{
    if (h->tok_text != NULL) {
        memcpy(out, h->tok_text, strlen(h->tok_text) + 1);
        return;
    }
    text_hex(out, h->tok, MEM_TOKEN_BYTES);
}

void mem_holder_drop(struct mem_holder *h)
{
    free(h->owner);
    free(h->idem);
    free(h->tok_text);
}

/* Slots of `more` for n extra holders: 0, or a power of two >= 4. The
 * array holds at least this many while n are in it. */
static uint32_t more_cap(uint32_t n)
{
    uint32_t c = 4;

    if (n == 0)
        return 0;
    while (c < n)
        c *= 2;
    return c;
}

/* Room for holder number e->nheld: 0, or -1 (out of memory). */
static int do_room(struct mem_entry *e)
{
    uint32_t n = e->nheld; /* extra holders once it is added */
    struct mem_holder *p;

    if (n == 0 || more_cap(n) == more_cap(n - 1))
        return 0;
    p = realloc(e->more, (size_t)more_cap(n) * sizeof(*p));
    if (p == NULL)
        return -1;
    e->more = p;
    return 0;
}

/* After the holders shrank to e->nheld: the vacated slots keep no token,
 * and a key held once (or not at all) keeps no array. */
static void do_shrunk(struct mem_entry *e, uint32_t was)
{
    for (uint32_t i = e->nheld; i < was; i++)
        memset(mem_holder_at(e, i), 0, sizeof(struct mem_holder));
    if (e->nheld <= 1) {
        free(e->more);
        e->more = NULL;
    }
    if (e->nheld == 0) {
        e->mode = LOCK_EXCLUSIVE;
        e->limit = 0;
    }
}

uint32_t do_mem_expire(struct mem_be *m,
                       struct mem_entry *e,
                       int64_t now,
                       uint64_t *gone)
{
    uint32_t n = e->nheld, kept = 0;

    if (n == 1 && now < e->first.expires_mono)
        return 0; /* the common case, in one compare */
    for (uint32_t i = 0; i < n; i++) {
        struct mem_holder *h = mem_holder_at(e, i);
        if (now >= h->expires_mono) {
            if (gone != NULL && h->fence > *gone)
                *gone = h->fence;
            mem_holder_drop(h);
            continue;
        }
        if (kept != i) /* keeps the order by fence */
            *mem_holder_at(e, kept) = *h;
        kept++;
    }
    if (kept == n)
        return 0;
    e->nheld = kept;
    do_shrunk(e, n);
    do_mem_due_set(mem_shard_of(m, e), e);
    atomic_fetch_sub_explicit(&m->held, n - kept, memory_order_relaxed);
    metrics_lock_expired(n - kept);
    return n - kept;
}

enum backend_result do_mem_grant(struct mem_be *m,
                                 struct mem_entry *e,
                                 const struct lock_req *req,
                                 int64_t now,
                                 struct lock_grant *out)
{
    /* the token: <= LOCK_TOKEN_MAX bytes, the wrapper checked it */
    struct mem_holder *h, got = { .owner = NULL };
    bool bin = token_bytes(req->token, got.tok);
    int64_t wall = clock_wall_ms();

    if (req->owner != NULL)
        got.owner = strdup(req->owner);
    if (req->idem_key != NULL)
        got.idem = strdup(req->idem_key);
    if (!bin)
        got.tok_text = strdup(req->token);
    if ((req->owner != NULL && got.owner == NULL) ||
        (req->idem_key != NULL && got.idem == NULL) ||
        (!bin && got.tok_text == NULL) || do_room(e) != 0 ||
        (e->due_at == 0 && do_mem_due_room(mem_shard_of(m, e)) != 0)) {
        mem_holder_drop(&got);
        return BACKEND_NO_MEMORY;
    }
    if (e->nheld == 0) { /* the first holder gives the key its kind */
        e->mode = (uint8_t)req->mode;
        e->limit = req->mode == LOCK_SHARED ? req->limit : 0;
    }
    h = mem_holder_at(e, e->nheld++);
    *h = got;
    h->holds = 1;
    h->ttl_ms = req->ttl_ms;
    h->expires_mono = now + (int64_t)req->ttl_ms;
    h->expires_wall = wall + (int64_t)req->ttl_ms;
    h->granted_wall = wall;
    h->fence =
        atomic_fetch_add_explicit(&m->fence, 1, memory_order_relaxed) + 1;
    atomic_fetch_add_explicit(&m->held, 1, memory_order_relaxed);
    do_mem_due_set(mem_shard_of(m, e), e);
    out->fence = h->fence;
    out->ttl_ms = h->ttl_ms;
    out->expires_at_ms = h->expires_wall;
    out->mode = (enum lock_mode)e->mode;
    out->limit = e->limit;
    out->holds = 1;
    return BACKEND_OK;
}

void do_mem_unhold(struct mem_be *m, struct mem_entry *e, uint32_t i)
{
    uint32_t n = e->nheld;
    struct mem_holder *h = mem_holder_at(e, i);

    mem_holder_drop(h);
    if (i == 0 && n > 1) {
        e->first = e->more[0];
        i = 1;
    }
    if (i >= 1 && i + 1 < n) /* more[i-1] <- more[i..n-2] */
        memmove(&e->more[i - 1], &e->more[i],
                (size_t)(n - 1 - i) * sizeof(*e->more));
    e->nheld = n - 1;
    do_shrunk(e, n);
    do_mem_due_set(mem_shard_of(m, e), e);
    atomic_fetch_sub_explicit(&m->held, 1, memory_order_relaxed);
}

int64_t do_mem_find_token(struct mem_entry *e, const char *token)
{
    uint8_t bytes[MEM_TOKEN_BYTES];
    bool bin = token_bytes(token, bytes);

    for (uint32_t i = 0; i < e->nheld; i++)
        if (token_is(mem_holder_at(e, i), token, bin, bytes))
            return i;
    return -1;
}

int64_t do_mem_find_idem(struct mem_entry *e, const char *idem)
{
    for (uint32_t i = 0; i < e->nheld; i++) {
        const struct mem_holder *h = mem_holder_at(e, i);
        if (h->idem != NULL && strcmp(h->idem, idem) == 0)
            return i;
    }
    return -1;
}

uint64_t mem_holder_left(const struct mem_holder *h, int64_t now)
{
    return h->expires_mono > now ? (uint64_t)(h->expires_mono - now) : 1;
}

uint64_t do_mem_first_expiry(struct mem_entry *e, int64_t now)
{
    uint64_t least = UINT64_MAX;

    for (uint32_t i = 0; i < e->nheld; i++) {
        uint64_t left = mem_holder_left(mem_holder_at(e, i), now);
        if (left < least)
            least = left;
    }
    return e->nheld > 0 ? least : 1;
}

static void copy_owner(const char *owner, bool *has, char *dst)
{
    size_t n;

    *has = owner != NULL;
    if (owner == NULL)
        return;
    n = strlen(owner);
    if (n > LOCK_OWNER_MAX)
        n = LOCK_OWNER_MAX;
    memcpy(dst, owner, n);
    dst[n] = '\0';
}

enum backend_result
do_mem_fill_info(struct mem_entry *e, int64_t now, struct lock_info *out)
{
    uint32_t shown =
        e->nheld < LOCK_HOLDERS_SHOWN ? e->nheld : LOCK_HOLDERS_SHOWN;
    const struct mem_holder *last = &e->first; /* expires last */

    out->holders = calloc(shown, sizeof(*out->holders));
    if (out->holders == NULL)
        return BACKEND_NO_MEMORY;
    out->nholders = shown;
    for (uint32_t i = 0; i < e->nheld; i++) {
        const struct mem_holder *h = mem_holder_at(e, i);
        if (h->expires_mono > last->expires_mono)
            last = h;
        if (i >= shown)
            continue;
        out->holders[i].fence = h->fence;
        out->holders[i].ttl_ms = mem_holder_left(h, now);
        out->holders[i].expires_at_ms = h->expires_wall;
        out->holders[i].holds = h->holds;
        copy_owner(h->owner, &out->holders[i].has_owner, out->holders[i].owner);
    }
    out->mode = (enum lock_mode)e->mode;
    out->limit = e->limit;
    out->holder_count = e->nheld;
    out->fence = mem_holder_at(e, e->nheld - 1)->fence; /* the greatest */
    out->ttl_ms = mem_holder_left(last, now);
    out->expires_at_ms = last->expires_wall;
    if (e->mode == LOCK_EXCLUSIVE) {
        out->holds = e->first.holds;
        copy_owner(e->first.owner, &out->has_owner, out->owner);
    }
    return BACKEND_OK;
}

bool do_mem_fill_entry(struct mem_entry *e, int64_t now, struct lock_entry *out)
{
    const struct mem_holder *last = NULL; /* the live one expiring last */
    uint32_t live = 0;
    uint64_t fence = 0;

    for (uint32_t i = 0; i < e->nheld; i++) {
        const struct mem_holder *h = mem_holder_at(e, i);
        if (now >= h->expires_mono)
            continue;
        live++;
        fence = h->fence; /* ascending: the last live one is the greatest */
        if (last == NULL || h->expires_mono > last->expires_mono)
            last = h;
    }
    if (live == 0)
        return false;
    memcpy(out->key, e->key, e->ke.key_len);
    out->key[e->ke.key_len] = '\0';
    out->key_len = e->ke.key_len;
    out->mode = (enum lock_mode)e->mode;
    out->fence = fence;
    out->ttl_ms = mem_holder_left(last, now);
    out->expires_at_ms = last->expires_wall;
    out->holder_count = live;
    out->has_owner = false;
    out->owner[0] = '\0';
    if (e->mode == LOCK_EXCLUSIVE)
        copy_owner(last->owner, &out->has_owner, out->owner);
    return true;
}

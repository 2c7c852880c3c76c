/*
 * backends/memory/due.c - each shard's expiry index: a binary min-heap of
 * the shard's held entries by the earliest expiry of their holders. The
 * sweeper takes from its top only what has expired, so a pass costs what
 * expires, not what is held: with a million locks held and nothing
 * expiring, a pass is 64 mutexes and 64 compares. Each entry knows its
 * place (due_at), so a grant, renew or release moves it in O(log n). An
 * idle entry keeps its place, at the time it may be freed: a key released
 * and acquired again moves within the heap, it is not taken out and put
 * back.
 */
#include <stdlib.h>

#include "backends/memory/mem_int.h"

#define DUE_MIN_CAP 64u /* the smallest array a shard keeps once grown */

static void due_put(struct mem_shard *s, uint32_t i, struct mem_due d)
{
    s->due[i] = d;
    d.e->due_at = i + 1;
}

static void due_up(struct mem_shard *s, uint32_t i)
{
    struct mem_due d = s->due[i];

    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (s->due[p].at <= d.at)
            break;
        due_put(s, i, s->due[p]);
        i = p;
    }
    due_put(s, i, d);
}

static void due_down(struct mem_shard *s, uint32_t i)
{
    struct mem_due d = s->due[i];

    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->ndue)
            break;
        if (c + 1 < s->ndue && s->due[c + 1].at < s->due[c].at)
            c++;
        if (s->due[c].at >= d.at)
            break;
        due_put(s, i, s->due[c]);
        i = c;
    }
    due_put(s, i, d);
}

int do_mem_due_room(struct mem_shard *s)
{
    uint32_t cap;
    struct mem_due *p;

    if (s->ndue < s->due_cap)
        return 0;
    if (s->due_cap > UINT32_MAX / 2)
        return -1;
    cap = s->due_cap == 0 ? DUE_MIN_CAP : s->due_cap * 2;
    p = realloc(s->due, (size_t)cap * sizeof(*p));
    if (p == NULL)
        return -1;
    s->due = p;
    s->due_cap = cap;
    return 0;
}

void do_mem_due_shrink(struct mem_shard *s)
{
    uint32_t cap = s->due_cap / 2;
    struct mem_due *p;

    if (s->due_cap <= DUE_MIN_CAP || s->ndue > s->due_cap / 4)
        return;
    p = realloc(s->due, (size_t)cap * sizeof(*p));
    if (p == NULL)
        return; /* keeps the larger array: no harm */
    s->due = p;
    s->due_cap = cap;
}

/* Held: the earliest expiry of its holders; idle: when it may go. */
static int64_t due_earliest(struct mem_entry *e)
{
    int64_t at = e->first.expires_mono;

    for (uint32_t i = 1; i < e->nheld; i++)
        if (e->more[i - 1].expires_mono < at)
            at = e->more[i - 1].expires_mono;
    return at;
}

static void due_remove(struct mem_shard *s, struct mem_entry *e)
{
    uint32_t i = e->due_at - 1;
    struct mem_due last = s->due[--s->ndue];

    e->due_at = 0;
    if (i == s->ndue)
        return; /* it was the last place */
    due_put(s, i, last);
    due_up(s, i);
    due_down(s, last.e->due_at - 1);
}

void do_mem_due_drop(struct mem_shard *s, struct mem_entry *e)
{
    if (e->due_at != 0)
        due_remove(s, e);
}

void do_mem_due_set(struct mem_shard *s, struct mem_entry *e)
{
    int64_t at, was;
    uint32_t i;

    if (e->nheld == 0 && e->qhead != NULL) {
        do_mem_due_drop(s, e); /* its places keep it */
        return;
    }
    at = due_earliest(e);
    if (e->due_at == 0) {
        if (s->ndue == s->due_cap && do_mem_due_room(s) != 0)
            abort(); /* the caller made room: do_mem_grant() before its
                        first holder, do_mem_entry_idle() before idling */
        i = s->ndue++;
        due_put(s, i, (struct mem_due){ at, e });
        due_up(s, i);
        return;
    }
    i = e->due_at - 1;
    was = s->due[i].at;
    s->due[i].at = at;
    if (at < was)
        due_up(s, i);
    else if (at > was)
        due_down(s, i);
}

struct mem_entry *do_mem_due_first(const struct mem_shard *s, int64_t now)
{
    if (s->ndue == 0 || s->due[0].at > now)
        return NULL;
    return s->due[0].e;
}

struct due_count {
    const struct mem_shard *s;
    uint32_t held;
    bool ok;
};

static void due_check_entry(struct keytab_entry *ke, void *arg)
{
    struct due_count *c = arg;
    struct mem_entry *e = (struct mem_entry *)ke;

    if (e->nheld == 0 && e->qhead != NULL) {
        c->ok = c->ok && e->due_at == 0;
        return;
    }
    c->held++; /* held or idle: in the heap */
    if (e->due_at == 0 || e->due_at > c->s->ndue ||
        c->s->due[e->due_at - 1].e != e ||
        c->s->due[e->due_at - 1].at != due_earliest(e))
        c->ok = false;
}

bool mem_due_check(struct backend *be)
{
    struct mem_be *m = (struct mem_be *)be;
    bool ok = true;

    for (int k = 0; k < MEM_SHARDS; k++) {
        struct mem_shard *s = &m->shards[k];
        struct due_count c = { .s = s, .ok = true };
        pthread_mutex_lock(&s->mu);
        keytab_foreach(&s->tab, due_check_entry, &c);
        ok = ok && c.ok && c.held == s->ndue && s->ndue <= s->due_cap;
        for (uint32_t i = 1; i < s->ndue; i++)
            ok = ok && s->due[(i - 1) / 2].at <= s->due[i].at;
        pthread_mutex_unlock(&s->mu);
    }
    return ok;
}

/*
 * tests/unit/test_memory_due.c - the memory store's expiry index
 * (backends/memory/due.c) and the sweeper that reads it: a pass visits
 * only what has expired, however many locks are held; the heaps agree
 * with the entries after every kind of change, under threads; the heaps
 * give their memory back when the locks go; and an entry nobody holds
 * lingers for its key's next acquire, then goes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/memory/mem_int.h"
#include "lib/clock.h"
#include "tests/unit/check.h"

extern const struct backend_ops memory_backend;

#define TOK "dddddddddddddddddddddddddddddddd"

static struct backend *open_mem(void)
{
    struct backend *be = NULL;

    CHECK_EQ_INT(memory_backend.open("memory://", NULL, &be, NULL, 0),
                 BACKEND_OK);
    CHECK(be != NULL);
    return be;
}

static enum backend_result
acq(struct backend *be, const char *key, const char *tok, uint64_t ttl)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .ttl_ms = ttl
    };
    struct lock_grant g;

    memset(&g, 0, sizeof(g));
    return memory_backend.acquire(be, &req, &g);
}

static enum backend_result
rel(struct backend *be, const char *key, const char *tok)
{
    struct lock_req req = { .key = key, .key_len = strlen(key), .token = tok };
    struct lock_grant g;

    return memory_backend.release(be, &req, &g);
}

/* Entries in m's tables (held, idle or kept by waiters) and the address
 * of key's, or NULL. */
static size_t entries(struct backend *be, const char *key, void **at)
{
    struct mem_be *m = (struct mem_be *)be;
    size_t n = 0;

    *at = NULL;
    for (int i = 0; i < MEM_SHARDS; i++) {
        struct mem_shard *s = &m->shards[i];
        struct keytab_entry *ke;
        pthread_mutex_lock(&s->mu);
        n += s->tab.count;
        ke = keytab_find(&s->tab, key, strlen(key),
                         keytab_hash(key, strlen(key)));
        if (ke != NULL)
            *at = ke;
        pthread_mutex_unlock(&s->mu);
    }
    return n;
}

static uint64_t swept(struct backend *be)
{
    return atomic_load(&((struct mem_be *)be)->swept);
}

static uint64_t due_capacity(struct backend *be)
{
    struct mem_be *m = (struct mem_be *)be;
    uint64_t cap = 0;

    for (int i = 0; i < MEM_SHARDS; i++) {
        pthread_mutex_lock(&m->shards[i].mu);
        cap += m->shards[i].due_cap;
        pthread_mutex_unlock(&m->shards[i].mu);
    }
    return cap;
}

#define LONG_HELD  20000
#define SHORT_HELD 100

/* 20,000 locks held for a minute and 100 for 100 ms: the sweeper's passes
 * over the next 700 ms (at least two) visit the 100 that expire, once
 * each, and none of the others. A sweeper that walks every entry visits
 * more than 40,000. */
static void test_sweep_visits_only_what_expires(void)
{
    struct backend *be = open_mem();
    char key[32];
    uint64_t s0, s1;
    int64_t until;

    for (int i = 0; i < LONG_HELD; i++) {
        snprintf(key, sizeof(key), "long/%05d", i);
        CHECK_EQ_INT(acq(be, key, TOK, 60000), BACKEND_OK);
    }
    s0 = swept(be);
    for (int i = 0; i < SHORT_HELD; i++) {
        snprintf(key, sizeof(key), "short/%03d", i);
        CHECK_EQ_INT(acq(be, key, TOK, 100), BACKEND_OK);
    }
    until = clock_mono_ms() + 2000; /* the short ones gone: ~350 ms */
    while (memory_backend.held_count(be) > LONG_HELD && clock_mono_ms() < until)
        check_sleep_ms(10);
    check_sleep_ms(600); /* two more passes with nothing due */
    s1 = swept(be);
    printf("  %llu entries visited by the sweeper for %d expiries beside "
           "%d held\n",
           (unsigned long long)(s1 - s0), SHORT_HELD, LONG_HELD);
    CHECK_EQ_INT(memory_backend.held_count(be), LONG_HELD);
    CHECK(s1 - s0 == SHORT_HELD);
    CHECK(mem_due_check(be));
    memory_backend.close(be);
}

/* ---- the heaps against the entries, under threads ---- */

#define DUE_THREADS 6
#define DUE_KEYS    64
#define DUE_MS      1500

struct due_run {
    struct backend *be;
    atomic_bool stop;
    atomic_long ops;
};

struct due_worker {
    struct due_run *run;
    unsigned seed;
    int id;
};

static void due_key(char *buf, size_t len, unsigned *seed)
{
    snprintf(buf, len, "due/%02d", rand_r(seed) % DUE_KEYS);
}

/* One multi-key round: acquire 2 or 3 keys, maybe renew, release. */
static void due_multi(struct backend *be, const char *tok, unsigned *seed)
{
    char k[3][16];
    const char *keys[3];
    size_t lens[3], n = 2 + (size_t)(rand_r(seed) % 2);
    struct lock_multi_req req = { .keys = keys, .key_lens = lens };
    struct lock_multi_grant g;

    for (size_t i = 0; i < n; i++) {
        snprintf(k[i], sizeof(k[i]), "due/%02d",
                 (rand_r(seed) % (DUE_KEYS / 3)) * 3 + (int)i);
        keys[i] = k[i];
        lens[i] = strlen(k[i]);
    }
    req.n = n;
    req.token = tok;
    req.ttl_ms = 1 + (uint64_t)(rand_r(seed) % 30);
    memset(&g, 0, sizeof(g));
    if (memory_backend.acquire_multi(be, &req, &g) != BACKEND_OK)
        return;
    if (rand_r(seed) % 2 == 0) {
        req.ttl_ms = (uint64_t)(rand_r(seed) % 40);
        memory_backend.renew_multi(be, &req, &g);
    }
    if (rand_r(seed) % 4 != 0)
        memory_backend.release_multi(be, &req, &g);
}

/* One single-key step of a random kind; short TTLs, so the sweeper and
 * the expiry on access both take holders away. */
static void
due_single(struct backend *be, const char *tok, uint64_t wid, unsigned *seed)
{
    char key[16];
    struct lock_waiter w = { .id = wid };
    struct lock_req req = { .key = key, .token = tok };
    struct lock_grant g;
    struct lock_info info;
    int what = rand_r(seed) % 8;

    due_key(key, sizeof(key), seed);
    req.key_len = strlen(key);
    req.ttl_ms = 1 + (uint64_t)(rand_r(seed) % 40);
    req.mode = what % 2 == 0 ? LOCK_SHARED : LOCK_EXCLUSIVE;
    req.limit = req.mode == LOCK_SHARED ? 3 : 0;
    req.waiter = what == 1 ? &w : NULL;
    memset(&g, 0, sizeof(g));
    if (what == 7) {
        memset(&info, 0, sizeof(info));
        if (memory_backend.force_release(be, key, req.key_len, &info) ==
            BACKEND_OK)
            free(info.holders);
        return;
    }
    if (memory_backend.acquire(be, &req, &g) != BACKEND_OK) {
        if (w.be_data != NULL)
            memory_backend.cancel_wait(be, key, req.key_len, &w);
        return;
    }
    req.waiter = NULL;
    if (what >= 4) {
        req.ttl_ms = (uint64_t)(rand_r(seed) % 40);
        req.reenter = what == 5;
        memory_backend.renew(be, &req, &g);
    }
    if (what % 3 != 0) {
        req.all = true;
        memory_backend.release(be, &req, &g);
    }
}

static void *due_worker_main(void *arg)
{
    struct due_worker *wk = arg;
    char tok[33];
    uint64_t n = 0;

    while (!atomic_load(&wk->run->stop)) {
        snprintf(tok, sizeof(tok), "t%02d%029llu", wk->id,
                 (unsigned long long)n);
        if (rand_r(&wk->seed) % 5 == 0)
            due_multi(wk->run->be, tok, &wk->seed);
        else
            due_single(wk->run->be, tok, (uint64_t)wk->id << 40 | ++n,
                       &wk->seed);
        atomic_fetch_add(&wk->run->ops, 1);
    }
    return NULL;
}

/* Six threads grant (both modes, several keys at once too), renew,
 * re-enter, release, force and queue on 64 keys with TTLs of a few ms,
 * while this one checks every heap against its entries; at the end the
 * sweeper alone empties them. */
static void test_due_heaps_agree_under_threads(void)
{
    struct due_run run = { .be = open_mem() };
    struct due_worker wk[DUE_THREADS];
    pthread_t th[DUE_THREADS];
    int started = 0, checks = 0, bad = 0;
    int64_t until;

    for (int i = 0; i < DUE_THREADS; i++) {
        wk[i] = (struct due_worker){ .run = &run, .seed = 0xd0e + i, .id = i };
        if (pthread_create(&th[i], NULL, due_worker_main, &wk[i]) == 0)
            started++;
    }
    CHECK_EQ_INT(started, DUE_THREADS);
    for (until = clock_mono_ms() + DUE_MS; clock_mono_ms() < until; checks++) {
        bad += !mem_due_check(run.be);
        check_sleep_ms(5);
    }
    atomic_store(&run.stop, true);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    printf("  %d checks beside %ld steps\n", checks, atomic_load(&run.ops));
    CHECK_EQ_INT(bad, 0);
    CHECK(mem_due_check(run.be));
    until = clock_mono_ms() + 2000; /* TTLs of 40 ms at most, then a pass */
    while (memory_backend.held_count(run.be) > 0 && clock_mono_ms() < until)
        check_sleep_ms(10);
    CHECK_EQ_INT(memory_backend.held_count(run.be), 0);
    CHECK(mem_due_check(run.be));
    memory_backend.close(run.be);
}

/* 50,000 locks taken and released: the heaps grew to hold them, and the
 * sweeper's passes give that room back (halving a shard's array per pass
 * while it is a quarter full or less) down to 64 places a shard. */
static void test_due_heaps_give_back_their_room(void)
{
    struct backend *be = open_mem();
    char key[32];
    uint64_t grown, left;
    int64_t until;

    for (int i = 0; i < 50000; i++) {
        snprintf(key, sizeof(key), "room/%05d", i);
        CHECK_EQ_INT(acq(be, key, TOK, 60000), BACKEND_OK);
    }
    grown = due_capacity(be);
    for (int i = 0; i < 50000; i++) {
        snprintf(key, sizeof(key), "room/%05d", i);
        CHECK_EQ_INT(rel(be, key, TOK), BACKEND_OK);
    }
    /* the entries linger MEM_LINGER_MS; then 1024 to 64: four passes */
    until = clock_mono_ms() + MEM_LINGER_MS + 3000;
    while (due_capacity(be) > 64 * MEM_SHARDS && clock_mono_ms() < until)
        check_sleep_ms(50);
    left = due_capacity(be);
    printf("  due heaps: %llu places for 50000 held, %llu once released\n",
           (unsigned long long)grown, (unsigned long long)left);
    CHECK(grown >= 50000);
    CHECK(left == 64 * MEM_SHARDS);
    CHECK(mem_due_check(be));
    memory_backend.close(be);
}

/* A key released and taken again within MEM_LINGER_MS finds its entry
 * (the same one, not a new allocation); 1,000 keys released stay until
 * then and are gone within MEM_LINGER_MS + a few sweeps after, with the
 * heaps in order all along. Freeing at release (the old way) fails the
 * first checks; never freeing fails the last. */
static void test_idle_entries_linger_then_go(void)
{
    struct backend *be = open_mem();
    char key[32];
    void *first, *again;
    int64_t released, until, gone_ms;
    size_t n;

    CHECK_EQ_INT(acq(be, "linger/k", TOK, 60000), BACKEND_OK);
    entries(be, "linger/k", &first);
    CHECK_EQ_INT(rel(be, "linger/k", TOK), BACKEND_OK);
    CHECK(mem_due_check(be));
    CHECK_EQ_INT(acq(be, "linger/k", TOK, 60000), BACKEND_OK);
    entries(be, "linger/k", &again);
    CHECK(first != NULL && again == first);
    CHECK_EQ_INT(rel(be, "linger/k", TOK), BACKEND_OK);

    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "linger/%04d", i);
        CHECK_EQ_INT(acq(be, key, TOK, 60000), BACKEND_OK);
        CHECK_EQ_INT(rel(be, key, TOK), BACKEND_OK);
    }
    released = clock_mono_ms();
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    n = entries(be, "linger/0999", &again);
    CHECK(again != NULL);
    CHECK_EQ_INT((int)n, 1001); /* every one still there */
    CHECK(mem_due_check(be));
    until = released + MEM_LINGER_MS + 5000;
    while ((n = entries(be, "", &again)) > 0 && clock_mono_ms() < until)
        check_sleep_ms(20);
    gone_ms = clock_mono_ms() - released;
    printf("  1001 idle entries gone %lld ms after their release\n",
           (long long)gone_ms);
    CHECK_EQ_INT((int)n, 0);
    CHECK(gone_ms >= MEM_LINGER_MS - 50); /* not before their time */
    CHECK(mem_due_check(be));
    memory_backend.close(be);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_sweep_visits_only_what_expires),
    CHECK_CASE(test_due_heaps_agree_under_threads),
    CHECK_CASE(test_due_heaps_give_back_their_room),
    CHECK_CASE(test_idle_entries_linger_then_go),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

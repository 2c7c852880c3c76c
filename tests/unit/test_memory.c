/*
 * tests/unit/test_memory.c - the memory backend's contract (backend.h),
 * through its ops table memory_backend: grants, renew and release by token,
 * expiry judged on access, fences, owners, the FIFO of waiters
 * (BACKEND_CAP_QUEUE), notifications, and mutual exclusion under threads;
 * then the lock kinds: shared holders under a limit, FIFO across modes,
 * re-entry and its cap, idempotent replay, inspect's holder list, holders
 * expiring one by one, and readers and writers apart under threads; and
 * what only the memory store does for several keys at once.
 */
#include "backends/backend.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "tests/unit/check.h"

extern const struct backend_ops memory_backend;

#define TOK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define TOK_C "cccccccccccccccccccccccccccccccc"

/* ---- the notify hook: records every key it hears ---- */

#define MAX_NOTES 256

static pthread_mutex_t notes_mu = PTHREAD_MUTEX_INITIALIZER;
static char notes[MAX_NOTES][64]; /* guarded by notes_mu */
static size_t nnotes;

static void record_notify(void *arg, const char *key, size_t len)
{
    (void)arg;
    pthread_mutex_lock(&notes_mu);
    if (nnotes < MAX_NOTES)
        snprintf(notes[nnotes++], sizeof(notes[0]), "%.*s", (int)len, key);
    pthread_mutex_unlock(&notes_mu);
}

static void notes_clear(void)
{
    pthread_mutex_lock(&notes_mu);
    nnotes = 0;
    pthread_mutex_unlock(&notes_mu);
}

/* How many times key was notified. */
static int notes_count(const char *key)
{
    int n = 0;

    pthread_mutex_lock(&notes_mu);
    for (size_t i = 0; i < nnotes; i++)
        n += strcmp(notes[i], key) == 0;
    pthread_mutex_unlock(&notes_mu);
    return n;
}

/* ---- helpers ---- */

static struct backend *open_mem(void)
{
    struct backend_hooks hooks = { .notify = record_notify, .arg = NULL };
    struct backend *be = NULL;

    CHECK_EQ_INT(memory_backend.open("memory://", &hooks, &be, NULL, 0),
                 BACKEND_OK);
    CHECK(be != NULL);
    notes_clear();
    return be;
}

static enum backend_result acq(struct backend *be,
                               const char *key,
                               const char *token,
                               const char *owner,
                               uint64_t ttl,
                               struct lock_waiter *w,
                               struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = token,
                            .owner = owner,
                            .ttl_ms = ttl,
                            .waiter = w };

    memset(g, 0, sizeof(*g));
    return memory_backend.acquire(be, &req, g);
}

static enum backend_result renew(struct backend *be,
                                 const char *key,
                                 const char *token,
                                 uint64_t ttl,
                                 struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = token, .ttl_ms = ttl
    };

    memset(g, 0, sizeof(*g));
    return memory_backend.renew(be, &req, g);
}

static enum backend_result
rel(struct backend *be, const char *key, const char *token)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = token };
    struct lock_grant g = { 0 };

    return memory_backend.release(be, &req, &g);
}

static enum backend_result
inspect(struct backend *be, const char *key, struct lock_info *info)
{
    memset(info, 0, sizeof(*info));
    return memory_backend.inspect(be, key, strlen(key), info);
}

static enum backend_result
cancel(struct backend *be, const char *key, struct lock_waiter *w)
{
    return memory_backend.cancel_wait(be, key, strlen(key), w);
}

/* ---- cases ---- */

static void test_mem_open_rejects_options(void)
{
    static const char *const bad[] = { "memory://x", "memory:///path",
                                       "memory://?a=1", "memory", "redis://" };
    struct backend *be = (struct backend *)1;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        be = (struct backend *)1;
        CHECK_EQ_INT(memory_backend.open(bad[i], NULL, &be, NULL, 0),
                     BACKEND_INVALID);
        CHECK(be == NULL);
    }
    CHECK_STR_EQ(memory_backend.scheme, "memory");
    CHECK((memory_backend.caps & BACKEND_CAP_QUEUE) != 0);
    memory_backend.close(NULL); /* accepts NULL */
    be = open_mem();
    CHECK_EQ_INT(memory_backend.ping(be), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    memory_backend.close(be);
}

static void test_mem_acquire_grants_then_held(void)
{
    struct backend *be = open_mem();
    struct lock_grant g, g2;
    struct lock_info info;
    int64_t before = clock_wall_ms();

    CHECK_EQ_INT(acq(be, "orders/42", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK(g.fence > 0 && g.fence <= LOCK_FENCE_MAX);
    CHECK_EQ_U64(g.ttl_ms, 5000);
    CHECK(g.expires_at_ms >= before + 5000 &&
          g.expires_at_ms <= clock_wall_ms() + 5000);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);

    /* held: another token, and the same token again */
    CHECK_EQ_INT(acq(be, "orders/42", TOK_B, NULL, 1000, NULL, &g2),
                 BACKEND_HELD);
    CHECK(g2.retry_ms >= 4000 && g2.retry_ms <= 5000);
    CHECK(!g2.behind);
    CHECK_EQ_INT(acq(be, "orders/42", TOK_A, NULL, 1000, NULL, &g2),
                 BACKEND_HELD);

    CHECK_EQ_INT(inspect(be, "orders/42", &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK(info.ttl_ms >= 4000 && info.ttl_ms <= 5000);
    CHECK_EQ_INT(info.expires_at_ms, g.expires_at_ms);
    CHECK(!info.has_owner);
    lock_info_clear(&info);

    /* other keys are independent, including near-identical ones */
    CHECK_EQ_INT(acq(be, "orders/4", TOK_B, NULL, 1000, NULL, &g2), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "orders/42 ", TOK_B, NULL, 1000, NULL, &g2),
                 BACKEND_OK);
    CHECK_EQ_INT(acq(be, "Orders/42", TOK_B, NULL, 1000, NULL, &g2),
                 BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 4);
    memory_backend.close(be); /* with locks held: ASan checks the frees */
}

static void test_mem_release_frees_and_token_dies(void)
{
    struct backend *be = open_mem();
    struct lock_grant g, g2;
    struct lock_info info;

    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq(be, "k", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    /* mismatch: held under another token; prefixes are not the token */
    CHECK_EQ_INT(rel(be, "k", TOK_B), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be, "k", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
                 BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be, "k", TOK_A "a"), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be, "k", ""), BACKEND_MISMATCH);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK); /* still held */
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_NOT_FOUND);
    /* the token is dead: not found while free, mismatch once re-held */
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(renew(be, "k", TOK_A, 0, &g2), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, NULL, &g2), BACKEND_OK);
    CHECK(g2.fence > g.fence);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_MISMATCH);
    CHECK_EQ_INT(renew(be, "k", TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be, "k", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    memory_backend.close(be);
}

static void test_mem_renew_zero_keeps_last_ttl(void)
{
    struct backend *be = open_mem();
    struct lock_grant g, r;
    struct lock_info info;

    CHECK_EQ_INT(acq(be, "k", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(renew(be, "k", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_U64(r.ttl_ms, 5000);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_EQ_INT(renew(be, "k", TOK_A, 7000, &r), BACKEND_OK);
    CHECK_EQ_U64(r.ttl_ms, 7000);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK(info.ttl_ms > 6000 && info.ttl_ms <= 7000);
    lock_info_clear(&info);
    CHECK_EQ_INT(renew(be, "k", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_U64(r.ttl_ms, 7000); /* the renewed TTL, not the granted one */
    /* a short renew really shortens */
    CHECK_EQ_INT(renew(be, "k", TOK_A, 100, &r), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK(info.ttl_ms >= 1 && info.ttl_ms <= 100);
    lock_info_clear(&info);
    CHECK_EQ_INT(renew(be, "k", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(renew(be, "free", TOK_A, 0, &r), BACKEND_NOT_FOUND);
    memory_backend.close(be);
}

static void test_mem_expiry_is_judged_on_access(void)
{
    struct backend *be = open_mem();
    struct lock_grant g, g2;
    struct lock_info info;

    CHECK_EQ_INT(acq(be, "k", TOK_A, "me", 50, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k2", TOK_A, NULL, 50, NULL, &g2), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k3", TOK_A, NULL, 50, NULL, &g2), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK(info.ttl_ms >= 1 && info.ttl_ms <= 50);
    lock_info_clear(&info);
    check_sleep_ms(80); /* well before the sweeper's 250 ms */
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(renew(be, "k2", TOK_A, 0, &g2), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be, "k3", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    /* free for someone else, with a larger fence; the old token is dead */
    CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, NULL, &g2), BACKEND_OK);
    CHECK(g2.fence > g.fence);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_MISMATCH);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK(!info.has_owner); /* the old owner went with the old grant */
    lock_info_clear(&info);
    /* a held lock past its TTL is free for acquire too */
    CHECK_EQ_INT(acq(be, "k4", TOK_A, NULL, 30, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k4", TOK_B, NULL, 30, NULL, &g2), BACKEND_HELD);
    check_sleep_ms(50);
    CHECK_EQ_INT(acq(be, "k4", TOK_B, NULL, 5000, NULL, &g2), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 2);
    memory_backend.close(be);
}

static void test_mem_fences_grow_across_keys_and_reopen(void)
{
    struct backend *be = open_mem();
    struct lock_grant g;
    uint64_t last = 0;
    char key[32];

    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "k%d", i % 7);
        CHECK_EQ_INT(acq(be, key, TOK_A, NULL, 1000, NULL, &g), BACKEND_OK);
        CHECK_MSG(g.fence > last, "grant %d: fence %llu after %llu", i,
                  (unsigned long long)g.fence, (unsigned long long)last);
        CHECK(g.fence <= LOCK_FENCE_MAX);
        last = g.fence;
        CHECK_EQ_INT(rel(be, key, TOK_A), BACKEND_OK);
    }
    memory_backend.close(be);
    /* a restart (a new open) keeps growing */
    check_sleep_ms(2);
    be = open_mem();
    CHECK_EQ_INT(acq(be, "k0", TOK_A, NULL, 1000, NULL, &g), BACKEND_OK);
    CHECK_MSG(g.fence > last, "after reopen: fence %llu after %llu",
              (unsigned long long)g.fence, (unsigned long long)last);
    memory_backend.close(be);
}

static void test_mem_owner_is_stored_and_shown(void)
{
    struct backend *be = open_mem();
    struct lock_grant g;
    struct lock_info info;
    char owner[LOCK_OWNER_MAX + 1];

    CHECK_EQ_INT(acq(be, "k", TOK_A, "pod-a/worker-3", 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK(info.has_owner);
    CHECK_STR_EQ(info.owner, "pod-a/worker-3");
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_OK);
    memset(owner, 'o', LOCK_OWNER_MAX);
    owner[LOCK_OWNER_MAX] = '\0';
    CHECK_EQ_INT(acq(be, "k", TOK_B, owner, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK_STR_EQ(info.owner, owner);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be, "k", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k", TOK_C, "", 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK(info.has_owner);
    CHECK_STR_EQ(info.owner, "");
    lock_info_clear(&info);
    memory_backend.close(be);
}

static void test_mem_keys_are_exact_bytes(void)
{
    static const char *const keys[] = {
        "a/../b",
        "a/b",
        "..",
        "/",
        "%2F",
        "a b",
        "\"q\"",
        "caf\xc3\xa9",
        "cafe\xcc\x81",
        "\xf0\x9f\x94\x92",
        "A",
        "a",
    };
    struct backend *be = open_mem();
    struct lock_grant g;
    struct lock_info info;
    char big[LOCK_KEY_MAX + 1];

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        CHECK_MSG(acq(be, keys[i], TOK_A, keys[i], 5000, NULL, &g) ==
                      BACKEND_OK,
                  "key #%zu", i);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        CHECK_EQ_INT(inspect(be, keys[i], &info), BACKEND_OK);
        CHECK_STR_EQ(info.owner, keys[i]);
        lock_info_clear(&info);
    }
    memset(big, 'x', LOCK_KEY_MAX);
    big[LOCK_KEY_MAX] = '\0';
    CHECK_EQ_INT(acq(be, big, TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    big[LOCK_KEY_MAX - 1] = '\0';
    CHECK_EQ_INT(inspect(be, big, &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(memory_backend.held_count(be),
                 (long long)(sizeof(keys) / sizeof(keys[0])) + 1);
    memory_backend.close(be);
}

static void test_mem_waiters_are_served_fifo(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w1 = { .id = 1 }, w2 = { .id = 2 }, w3 = { .id = 3 };
    struct lock_grant g;

    CHECK_EQ_INT(acq(be, "k", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    /* the first call registers each waiter at the tail */
    CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, &w1, &g), BACKEND_HELD);
    CHECK(w1.be_data != NULL);
    CHECK(!g.behind);
    CHECK(g.retry_ms >= 4000 && g.retry_ms <= 5000);
    CHECK_EQ_INT(acq(be, "k", TOK_C, NULL, 5000, &w2, &g), BACKEND_HELD);
    CHECK(w2.be_data != NULL && w2.be_data != w1.be_data);
    CHECK_EQ_INT(
        acq(be, "k", "dddddddddddddddddddddddddddddddd", NULL, 5000, &w3, &g),
        BACKEND_HELD);
    /* a later call keeps the place */
    {
        void *place = w1.be_data;
        CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, &w1, &g), BACKEND_HELD);
        CHECK(w1.be_data == place);
    }

    notes_clear();
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(notes_count("k"), 1); /* waiters hear the release */
    CHECK_EQ_INT(memory_backend.held_count(be), 0);

    /* free, but not first: HELD with behind; try-once doesn't jump in */
    CHECK_EQ_INT(acq(be, "k", TOK_C, NULL, 5000, &w2, &g), BACKEND_HELD);
    CHECK(g.behind);
    CHECK(g.retry_ms >= 1);
    CHECK_EQ_INT(
        acq(be, "k", "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", NULL, 5000, NULL, &g),
        BACKEND_HELD);
    CHECK(g.retry_ms >= 1);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);

    /* the head gets it and leaves the queue */
    CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, &w1, &g), BACKEND_OK);
    CHECK(w1.be_data == NULL);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);
    CHECK_EQ_INT(acq(be, "k", TOK_C, NULL, 5000, &w2, &g), BACKEND_HELD);
    CHECK(!g.behind); /* held now, not merely behind */

    CHECK_EQ_INT(rel(be, "k", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(
        acq(be, "k", "dddddddddddddddddddddddddddddddd", NULL, 5000, &w3, &g),
        BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(acq(be, "k", TOK_C, NULL, 5000, &w2, &g), BACKEND_OK);
    CHECK(w2.be_data == NULL);
    CHECK_EQ_INT(rel(be, "k", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(
        acq(be, "k", "dddddddddddddddddddddddddddddddd", NULL, 5000, &w3, &g),
        BACKEND_OK);
    CHECK(w3.be_data == NULL);
    CHECK_EQ_INT(rel(be, "k", "dddddddddddddddddddddddddddddddd"), BACKEND_OK);
    /* the queue is empty: try-once works again; nothing is left */
    CHECK_EQ_INT(acq(be, "k", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    memory_backend.close(be);
}

static void test_mem_waiter_on_free_key_is_granted_at_once(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w = { .id = 9 };
    struct lock_grant g;

    CHECK_EQ_INT(acq(be, "k", TOK_A, NULL, 5000, &w, &g), BACKEND_OK);
    CHECK(w.be_data == NULL); /* no place taken */
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, NULL, &g), BACKEND_OK);
    memory_backend.close(be);
}

static void test_mem_cancel_wait_of_head_notifies_next(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w1 = { .id = 1 }, w2 = { .id = 2 }, w3 = { .id = 3 };
    struct lock_grant g;

    CHECK_EQ_INT(cancel(be, "k", &w1), BACKEND_OK); /* no place: no-op */
    CHECK_EQ_INT(acq(be, "k", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, &w1, &g), BACKEND_HELD);
    CHECK_EQ_INT(acq(be, "k", TOK_C, NULL, 5000, &w2, &g), BACKEND_HELD);
    CHECK_EQ_INT(acq(be, "k", TOK_C, NULL, 5000, &w3, &g), BACKEND_HELD);

    /* a waiter in the middle leaves: the order of the rest holds */
    CHECK_EQ_INT(cancel(be, "k", &w2), BACKEND_OK);
    CHECK(w2.be_data == NULL);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_OK);
    notes_clear();
    /* the head leaves while the key is free: the next must hear it */
    CHECK_EQ_INT(cancel(be, "k", &w1), BACKEND_OK);
    CHECK(w1.be_data == NULL);
    CHECK_EQ_INT(notes_count("k"), 1);
    CHECK_EQ_INT(acq(be, "k", TOK_C, NULL, 5000, &w3, &g), BACKEND_OK);
    CHECK(w3.be_data == NULL);
    CHECK_EQ_INT(rel(be, "k", TOK_C), BACKEND_OK);

    /* the last waiter leaving frees the entry: the key is plain free */
    CHECK_EQ_INT(acq(be, "k", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, &w1, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(cancel(be, "k", &w1), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k", TOK_C, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "k", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);

    /* close with places still queued: ASan checks they are freed */
    CHECK_EQ_INT(acq(be, "k", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k", TOK_B, NULL, 5000, &w1, &g), BACKEND_HELD);
    memory_backend.close(be);
}

static void test_mem_expiry_with_waiters_is_notified(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w = { .id = 1 };
    struct lock_grant g;
    int64_t t0;

    CHECK_EQ_INT(acq(be, "exp", TOK_A, NULL, 50, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "exp", TOK_B, NULL, 5000, &w, &g), BACKEND_HELD);
    CHECK(g.retry_ms >= 1 && g.retry_ms <= 50);
    notes_clear();
    /* no traffic on the key: the sweeper must notice and tell */
    t0 = check_mono_ms();
    while (notes_count("exp") == 0 && check_mono_ms() - t0 < 2000)
        check_sleep_ms(10);
    CHECK_MSG(notes_count("exp") >= 1, "no notification after %lld ms",
              (long long)(check_mono_ms() - t0));
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    CHECK_EQ_INT(acq(be, "exp", TOK_B, NULL, 5000, &w, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "exp", TOK_B), BACKEND_OK);

    /* expiry seen by an access with waiters queued notifies too */
    CHECK_EQ_INT(acq(be, "exp2", TOK_A, NULL, 30, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "exp2", TOK_B, NULL, 5000, &w, &g), BACKEND_HELD);
    check_sleep_ms(40);
    notes_clear();
    CHECK_EQ_INT(rel(be, "exp2", TOK_A), BACKEND_NOT_FOUND);
    CHECK(notes_count("exp2") >= 1);
    CHECK_EQ_INT(acq(be, "exp2", TOK_B, NULL, 5000, &w, &g), BACKEND_OK);
    memory_backend.close(be);
}

/* ---- threads ---- */

#define NTHREADS 4
#define NKEYS    3
#define RUN_MS   400

struct worker {
    struct backend *be;
    int id;
    bool use_queue;
    long grants, violations, bad_results;
};

static _Atomic int holders[NKEYS];
static _Atomic uint64_t last_fence[NKEYS];
static _Atomic long fence_regressions;

static void hold_key(struct worker *wk,
                     int k,
                     const struct lock_grant *g,
                     const char *key,
                     const char *token)
{
    uint64_t prev;

    if (atomic_fetch_add(&holders[k], 1) != 0)
        wk->violations++;
    prev = atomic_exchange(&last_fence[k], g->fence);
    if (g->fence <= prev)
        atomic_fetch_add(&fence_regressions, 1);
    for (volatile int spin = 0; spin < 200; spin++)
        ;
    if (atomic_fetch_sub(&holders[k], 1) != 1)
        wk->violations++;
    wk->grants++;
    if (wk->grants % 3 == 0) {
        struct lock_grant r;
        if (renew(wk->be, key, token, 0, &r) != BACKEND_OK)
            wk->bad_results++;
    }
    if (rel(wk->be, key, token) != BACKEND_OK)
        wk->bad_results++;
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    char token[LOCK_TOKEN_MAX + 1], key[16];
    unsigned seed = (unsigned)wk->id * 7919u + 1;
    int64_t end = check_mono_ms() + RUN_MS;
    uint64_t wid = (uint64_t)wk->id << 32;

    snprintf(token, sizeof(token), "token-of-worker-%d", wk->id);
    while (check_mono_ms() < end) {
        int k = (int)(rand_r(&seed) % NKEYS);
        struct lock_grant g;
        enum backend_result r;

        snprintf(key, sizeof(key), "key-%d", k);
        if (!wk->use_queue) {
            r = acq(wk->be, key, token, NULL, 10000, NULL, &g);
            if (r == BACKEND_OK)
                hold_key(wk, k, &g, key, token);
            else if (r != BACKEND_HELD)
                wk->bad_results++;
            continue;
        }
        /* a waiter: poll until granted, or give up and cancel */
        struct lock_waiter w = { .id = ++wid };
        int64_t give_up = check_mono_ms() + 50;
        for (;;) {
            r = acq(wk->be, key, token, NULL, 10000, &w, &g);
            if (r == BACKEND_OK) {
                if (w.be_data != NULL)
                    wk->bad_results++;
                hold_key(wk, k, &g, key, token);
                break;
            }
            if (r != BACKEND_HELD) {
                wk->bad_results++;
                break;
            }
            if (check_mono_ms() > give_up) {
                if (cancel(wk->be, key, &w) != BACKEND_OK || w.be_data != NULL)
                    wk->bad_results++;
                break;
            }
            sched_yield();
        }
    }
    return NULL;
}

/* ---- many keys of one shard expire in one sweep ---- */

#define MANY 8192 /* about 128 a shard: two sweep batches each */

static _Atomic int many_seen[MANY];

static void count_notify(void *arg, const char *key, size_t len)
{
    char buf[32];
    int i;

    (void)arg;
    if (len >= sizeof(buf))
        return;
    memcpy(buf, key, len);
    buf[len] = '\0';
    if (sscanf(buf, "many-%d", &i) == 1 && i >= 0 && i < MANY)
        atomic_store(&many_seen[i], 1);
}

static int many_count(void)
{
    int n = 0;

    for (int i = 0; i < MANY; i++)
        n += atomic_load(&many_seen[i]);
    return n;
}

static void test_mem_every_expiry_with_waiters_is_notified(void)
{
    struct backend_hooks hooks = { .notify = count_notify, .arg = NULL };
    struct backend *be = NULL;
    struct lock_waiter *w = calloc(MANY, sizeof(*w));
    struct lock_grant g;
    char key[32];
    int64_t t0;

    CHECK(w != NULL);
    if (w == NULL)
        return;
    CHECK_EQ_INT(memory_backend.open("memory://", &hooks, &be, NULL, 0),
                 BACKEND_OK);
    for (int i = 0; i < MANY; i++) {
        snprintf(key, sizeof(key), "many-%d", i);
        w[i].id = (uint64_t)i + 1;
        CHECK_EQ_INT(acq(be, key, TOK_A, NULL, 100, NULL, &g), BACKEND_OK);
        CHECK_EQ_INT(acq(be, key, TOK_B, NULL, 60000, &w[i], &g), BACKEND_HELD);
    }
    /* nobody touches the keys: the sweeper alone must tell every one */
    t0 = check_mono_ms();
    while (many_count() < MANY && check_mono_ms() - t0 < 3000)
        check_sleep_ms(20);
    CHECK_MSG(many_count() == MANY,
              "%d of %d expired keys with waiters notified after %lld ms",
              many_count(), MANY, (long long)(check_mono_ms() - t0));
    for (int i = 0; i < MANY; i++) {
        snprintf(key, sizeof(key), "many-%d", i);
        cancel(be, key, &w[i]);
    }
    memory_backend.close(be);
    free(w);
}

static void test_mem_threads_keep_mutual_exclusion(void)
{
    struct backend *be = open_mem();
    struct worker wk[NTHREADS];
    pthread_t th[NTHREADS];
    long grants = 0;

    for (int k = 0; k < NKEYS; k++) {
        atomic_store(&holders[k], 0);
        atomic_store(&last_fence[k], 0);
    }
    atomic_store(&fence_regressions, 0);
    for (int i = 0; i < NTHREADS; i++) {
        wk[i] = (struct worker){ .be = be, .id = i, .use_queue = i % 2 == 1 };
        CHECK_EQ_INT(pthread_create(&th[i], NULL, worker_main, &wk[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(wk[i].violations, 0);
        CHECK_EQ_INT(wk[i].bad_results, 0);
        grants += wk[i].grants;
    }
    CHECK_EQ_INT(atomic_load(&fence_regressions), 0);
    CHECK_MSG(grants > 100, "only %ld grants", grants);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    /* every key is free and unqueued again */
    for (int k = 0; k < NKEYS; k++) {
        char key[16];
        struct lock_grant g;
        snprintf(key, sizeof(key), "key-%d", k);
        CHECK_EQ_INT(acq(be, key, TOK_A, NULL, 1000, NULL, &g), BACKEND_OK);
    }
    memory_backend.close(be);
}

/* ---- lock kinds: shared mode, limits, re-entry, idempotent retries ---- */

static enum backend_result acq_k(struct backend *be,
                                 const char *key,
                                 const char *token,
                                 enum lock_mode mode,
                                 uint32_t limit,
                                 const char *idem,
                                 uint64_t ttl,
                                 struct lock_waiter *w,
                                 struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = token,
                            .owner = NULL,
                            .ttl_ms = ttl,
                            .waiter = w,
                            .mode = mode,
                            .limit = limit,
                            .idem_key = idem };

    memset(g, 0, sizeof(*g));
    return memory_backend.acquire(be, &req, g);
}

/* A shared acquire of key with no waiter, limit lim, a 5 s TTL. */
static enum backend_result
shr(struct backend *be, const char *key, const char *token, uint32_t lim)
{
    struct lock_grant g;

    return acq_k(be, key, token, LOCK_SHARED, lim, NULL, 5000, NULL, &g);
}

static enum backend_result reenter(struct backend *be,
                                   const char *key,
                                   const char *token,
                                   struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = token, .reenter = true
    };

    memset(g, 0, sizeof(*g));
    return memory_backend.renew(be, &req, g);
}

/* Release one hold (every hold with all); *left = the holds left. */
static enum backend_result rel_k(struct backend *be,
                                 const char *key,
                                 const char *token,
                                 bool all,
                                 uint32_t *left)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = token, .all = all
    };
    struct lock_grant g;
    enum backend_result r;

    memset(&g, 0xff, sizeof(g)); /* the adapter must set holds */
    r = memory_backend.release(be, &req, &g);
    *left = g.holds;
    return r;
}

static const char *tok(int i)
{
    static char toks[256][LOCK_TOKEN_MAX + 1];

    snprintf(toks[i], sizeof(toks[i]), "token-%032d", i);
    return toks[i];
}

static void test_mem_shared_grants_up_to_limit_then_held(void)
{
    struct backend *be = open_mem();
    struct lock_grant g, g2;
    uint64_t last = 0;
    uint32_t left;

    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(acq_k(be, "sem", tok(i), LOCK_SHARED, 3, NULL,
                           5000 - 1000 * (uint64_t)i, NULL, &g),
                     BACKEND_OK);
        CHECK_EQ_INT(g.mode, LOCK_SHARED);
        CHECK_EQ_INT(g.limit, 3);
        CHECK_EQ_INT(g.holds, 1);
        CHECK(!g.replay);
        CHECK(g.fence > last);
        last = g.fence;
    }
    CHECK_EQ_INT(memory_backend.held_count(be), 3);
    /* full: the fourth is HELD until the first holder's TTL (3 s) */
    CHECK_EQ_INT(
        acq_k(be, "sem", tok(3), LOCK_SHARED, 3, NULL, 5000, NULL, &g2),
        BACKEND_HELD);
    CHECK_MSG(g2.retry_ms > 2500 && g2.retry_ms <= 3000, "retry %llu",
              (unsigned long long)g2.retry_ms);
    CHECK(!g2.behind);
    CHECK_EQ_INT(memory_backend.held_count(be), 3);
    /* one leaves: room for one more, with a greater fence */
    CHECK_EQ_INT(rel_k(be, "sem", tok(1), false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(
        acq_k(be, "sem", tok(3), LOCK_SHARED, 3, NULL, 5000, NULL, &g2),
        BACKEND_OK);
    CHECK(g2.fence > last);
    CHECK_EQ_INT(shr(be, "sem", tok(4), 3), BACKEND_HELD);
    /* a limit of one is a shared lock one at a time */
    CHECK_EQ_INT(shr(be, "one", tok(0), 1), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "one", tok(1), 1), BACKEND_HELD);
    /* no limit: as many readers as come */
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(shr(be, "readers", tok(i), 0), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 3 + 1 + 50);
    memory_backend.close(be); /* with shared holders: ASan checks frees */
}

static void test_mem_exclusive_and_shared_exclude(void)
{
    struct backend *be = open_mem();
    struct lock_grant g;
    uint32_t left;

    CHECK_EQ_INT(
        acq_k(be, "rw", TOK_A, LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &g),
        BACKEND_OK);
    CHECK_EQ_INT(g.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(g.limit, 0);
    CHECK_EQ_INT(g.holds, 1);
    CHECK_EQ_INT(shr(be, "rw", TOK_B, 0), BACKEND_HELD);
    CHECK_EQ_INT(shr(be, "rw", TOK_B, 5), BACKEND_HELD); /* not mismatch */
    CHECK_EQ_INT(rel_k(be, "rw", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "rw", TOK_B, 0), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "rw", TOK_C, 0), BACKEND_OK);
    CHECK_EQ_INT(
        acq_k(be, "rw", TOK_A, LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &g),
        BACKEND_HELD);
    CHECK(!g.behind);
    CHECK_EQ_INT(rel_k(be, "rw", TOK_B, false, &left), BACKEND_OK);
    CHECK_EQ_INT(
        acq_k(be, "rw", TOK_A, LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &g),
        BACKEND_HELD); /* one reader is still in */
    CHECK_EQ_INT(rel_k(be, "rw", TOK_C, false, &left), BACKEND_OK);
    CHECK_EQ_INT(
        acq_k(be, "rw", TOK_A, LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &g),
        BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);
    memory_backend.close(be);
}

static void test_mem_limit_mismatch_changes_nothing(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w = { .id = 1 }, w2 = { .id = 2 };
    struct lock_grant g;
    uint32_t left;

    CHECK_EQ_INT(shr(be, "k", TOK_A, 3), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "k", TOK_B, 4), BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(shr(be, "k", TOK_B, 0), BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(shr(be, "k", TOK_B, 2), BACKEND_LIMIT_MISMATCH);
    /* a waiter takes no place on a mismatch */
    CHECK_EQ_INT(acq_k(be, "k", TOK_B, LOCK_SHARED, 4, NULL, 5000, &w, &g),
                 BACKEND_LIMIT_MISMATCH);
    CHECK(w.be_data == NULL);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);
    /* no limit against a number, too */
    CHECK_EQ_INT(shr(be, "u", TOK_A, 0), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "u", TOK_B, 1), BACKEND_LIMIT_MISMATCH);
    /* a queued waiter whose key turned to another limit keeps its place
     * (the caller cancels it) */
    CHECK_EQ_INT(shr(be, "k", TOK_B, 3), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "k", TOK_C, 3), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "k", "dddd", LOCK_EXCLUSIVE, 0, NULL, 5000, &w2, &g),
                 BACKEND_HELD);
    CHECK(w2.be_data != NULL);
    /* the last holder leaving frees the limit */
    CHECK_EQ_INT(rel_k(be, "u", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "u", TOK_B, 1), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "u", TOK_C, 1), BACKEND_HELD);
    CHECK_EQ_INT(cancel(be, "k", &w2), BACKEND_OK);
    memory_backend.close(be);
}

/* A shared waiter never overtakes an exclusive waiter ahead of it, and a
 * try-once acquire never overtakes anyone. */
static void test_mem_fifo_across_modes(void)
{
    struct backend *be = open_mem();
    struct lock_waiter wx = { .id = 1 }, ws = { .id = 2 };
    struct lock_grant g;
    uint32_t left;

    CHECK_EQ_INT(shr(be, "q", TOK_A, 0), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "q", TOK_B, LOCK_EXCLUSIVE, 0, NULL, 5000, &wx, &g),
                 BACKEND_HELD);
    CHECK(!g.behind);
    CHECK(wx.be_data != NULL);
    /* readers have room, but a writer waits first */
    CHECK_EQ_INT(acq_k(be, "q", TOK_C, LOCK_SHARED, 0, NULL, 5000, &ws, &g),
                 BACKEND_HELD);
    CHECK(g.behind);
    CHECK(ws.be_data != NULL);
    CHECK_EQ_INT(acq_k(be, "q", TOK_C, LOCK_SHARED, 0, NULL, 5000, &ws, &g),
                 BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(shr(be, "q", "eeee", 0), BACKEND_HELD); /* try-once */
    CHECK_EQ_INT(memory_backend.held_count(be), 1);
    notes_clear();
    CHECK_EQ_INT(rel_k(be, "q", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(notes_count("q"), 1);
    /* free now: still the writer first */
    CHECK_EQ_INT(acq_k(be, "q", TOK_C, LOCK_SHARED, 0, NULL, 5000, &ws, &g),
                 BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(
        acq_k(be, "q", "eeee", LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &g),
        BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(acq_k(be, "q", TOK_B, LOCK_EXCLUSIVE, 0, NULL, 5000, &wx, &g),
                 BACKEND_OK);
    CHECK(wx.be_data == NULL);
    CHECK_EQ_INT(acq_k(be, "q", TOK_C, LOCK_SHARED, 0, NULL, 5000, &ws, &g),
                 BACKEND_HELD);
    CHECK(!g.behind); /* held by the writer now */
    CHECK_EQ_INT(rel_k(be, "q", TOK_B, false, &left), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "q", TOK_C, LOCK_SHARED, 0, NULL, 5000, &ws, &g),
                 BACKEND_OK);
    CHECK(ws.be_data == NULL);
    /* the queue is empty: readers join freely again */
    CHECK_EQ_INT(shr(be, "q", "eeee", 0), BACKEND_OK);
    memory_backend.close(be);
}

static void test_mem_try_once_never_overtakes_shared_waiters(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w1 = { .id = 1 }, w2 = { .id = 2 };
    struct lock_grant g;
    uint32_t left;

    /* full semaphore, one reader waiting */
    CHECK_EQ_INT(shr(be, "s", TOK_A, 2), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "s", TOK_B, 2), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "s", TOK_C, LOCK_SHARED, 2, NULL, 5000, &w1, &g),
                 BACKEND_HELD);
    CHECK(!g.behind);
    CHECK_EQ_INT(rel_k(be, "s", TOK_A, false, &left), BACKEND_OK);
    /* a permit is free, but the waiter goes first: not a try-once, not a
     * later waiter */
    CHECK_EQ_INT(shr(be, "s", "eeee", 2), BACKEND_HELD);
    CHECK_EQ_INT(acq_k(be, "s", "eeee", LOCK_SHARED, 2, NULL, 5000, NULL, &g),
                 BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(acq_k(be, "s", "ffff", LOCK_SHARED, 2, NULL, 5000, &w2, &g),
                 BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(acq_k(be, "s", TOK_C, LOCK_SHARED, 2, NULL, 5000, &w1, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "s", "ffff", LOCK_SHARED, 2, NULL, 5000, &w2, &g),
                 BACKEND_HELD);
    CHECK(!g.behind);
    CHECK_EQ_INT(memory_backend.held_count(be), 2);
    CHECK_EQ_INT(cancel(be, "s", &w2), BACKEND_OK);
    /* room even with the waiter counted: still no overtaking */
    CHECK_EQ_INT(shr(be, "s3", TOK_A, 3), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "s3", TOK_B, 3), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "s3", TOK_C, 3), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "s3", "ffff", LOCK_SHARED, 3, NULL, 5000, &w2, &g),
                 BACKEND_HELD);
    CHECK_EQ_INT(rel_k(be, "s3", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(rel_k(be, "s3", TOK_B, false, &left), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "s3", "eeee", LOCK_SHARED, 3, NULL, 5000, NULL, &g),
                 BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(acq_k(be, "s3", "ffff", LOCK_SHARED, 3, NULL, 5000, &w2, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(shr(be, "s3", "eeee", 3), BACKEND_OK);
    memory_backend.close(be);
}

/* Shared waiters behind one another are granted together up to the
 * limit, each grant notifying the key for the next. */
static void test_mem_shared_waiters_are_granted_together(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w[4] = {
        { .id = 1 }, { .id = 2 }, { .id = 3 }, { .id = 4 }
    };
    struct lock_grant g;
    uint32_t left;

    CHECK_EQ_INT(acq_k(be, "t", TOK_A, LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &g),
                 BACKEND_OK);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(
            acq_k(be, "t", tok(i), LOCK_SHARED, 2, NULL, 5000, &w[i], &g),
            BACKEND_HELD);
    CHECK_EQ_INT(
        acq_k(be, "t", tok(3), LOCK_EXCLUSIVE, 0, NULL, 5000, &w[3], &g),
        BACKEND_HELD);
    CHECK_EQ_INT(rel_k(be, "t", TOK_A, false, &left), BACKEND_OK);
    /* the second may go with the first (1 ahead < 2); the third not */
    CHECK_EQ_INT(acq_k(be, "t", tok(2), LOCK_SHARED, 2, NULL, 5000, &w[2], &g),
                 BACKEND_HELD);
    CHECK(g.behind);
    notes_clear();
    CHECK_EQ_INT(acq_k(be, "t", tok(1), LOCK_SHARED, 2, NULL, 5000, &w[1], &g),
                 BACKEND_OK);
    CHECK(w[1].be_data == NULL);
    CHECK_EQ_INT(notes_count("t"), 1); /* the next ones are told */
    CHECK_EQ_INT(acq_k(be, "t", tok(2), LOCK_SHARED, 2, NULL, 5000, &w[2], &g),
                 BACKEND_HELD); /* 1 holder + 1 ahead: full */
    notes_clear();
    CHECK_EQ_INT(acq_k(be, "t", tok(0), LOCK_SHARED, 2, NULL, 5000, &w[0], &g),
                 BACKEND_OK);
    CHECK_EQ_INT(notes_count("t"), 1);
    CHECK_EQ_INT(acq_k(be, "t", tok(2), LOCK_SHARED, 2, NULL, 5000, &w[2], &g),
                 BACKEND_HELD);
    CHECK(!g.behind); /* the holders alone are full */
    CHECK_EQ_INT(memory_backend.held_count(be), 2);
    /* a new waiter is granted at once with the queue ahead all shared */
    CHECK_EQ_INT(rel_k(be, "t", tok(0), false, &left), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "t", tok(2), LOCK_SHARED, 2, NULL, 5000, &w[2], &g),
                 BACKEND_OK);
    /* the writer goes once both readers left */
    CHECK_EQ_INT(rel_k(be, "t", tok(1), false, &left), BACKEND_OK);
    CHECK_EQ_INT(
        acq_k(be, "t", tok(3), LOCK_EXCLUSIVE, 0, NULL, 5000, &w[3], &g),
        BACKEND_HELD);
    CHECK_EQ_INT(rel_k(be, "t", tok(2), false, &left), BACKEND_OK);
    CHECK_EQ_INT(
        acq_k(be, "t", tok(3), LOCK_EXCLUSIVE, 0, NULL, 5000, &w[3], &g),
        BACKEND_OK);
    memory_backend.close(be);
}

/* An exclusive waiter that leaves lets the readers behind it go. */
static void test_mem_cancel_of_writer_lets_readers_go(void)
{
    struct backend *be = open_mem();
    struct lock_waiter wx = { .id = 1 }, ws = { .id = 2 };
    struct lock_grant g;

    CHECK_EQ_INT(shr(be, "c", TOK_A, 0), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "c", TOK_B, LOCK_EXCLUSIVE, 0, NULL, 5000, &wx, &g),
                 BACKEND_HELD);
    CHECK_EQ_INT(acq_k(be, "c", TOK_C, LOCK_SHARED, 0, NULL, 5000, &ws, &g),
                 BACKEND_HELD);
    notes_clear();
    CHECK_EQ_INT(cancel(be, "c", &wx), BACKEND_OK);
    CHECK_EQ_INT(notes_count("c"), 1);
    CHECK_EQ_INT(acq_k(be, "c", TOK_C, LOCK_SHARED, 0, NULL, 5000, &ws, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 2);
    memory_backend.close(be);
}

static void test_mem_reentry_counts_holds(void)
{
    struct backend *be = open_mem();
    struct lock_grant g, r;
    struct lock_info info;
    uint32_t left;

    CHECK_EQ_INT(
        acq_k(be, "re", TOK_A, LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &g),
        BACKEND_OK);
    CHECK_EQ_INT(reenter(be, "re", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_EQ_U64(r.ttl_ms, 5000);
    CHECK_EQ_INT(r.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(reenter(be, "re", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 3);
    CHECK_EQ_INT(renew(be, "re", TOK_A, 0, &r), BACKEND_OK); /* keeps it */
    CHECK_EQ_INT(r.holds, 3);
    CHECK_EQ_INT(reenter(be, "re", TOK_B, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(reenter(be, "free", TOK_A, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(inspect(be, "re", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holds, 3);
    CHECK_EQ_INT(info.nholders, 1);
    CHECK_EQ_INT(info.holders[0].holds, 3);
    lock_info_clear(&info);
    /* one hold back at a time; others are refused untouched */
    CHECK_EQ_INT(rel_k(be, "re", TOK_B, false, &left), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel_k(be, "re", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 2);
    CHECK_EQ_INT(rel_k(be, "re", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 1);
    CHECK_EQ_INT(
        acq_k(be, "re", TOK_B, LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &r),
        BACKEND_HELD);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);
    CHECK_EQ_INT(rel_k(be, "re", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(rel_k(be, "re", TOK_A, false, &left), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    /* all: every hold at once, and the waiters hear it */
    CHECK_EQ_INT(acq_k(be, "re", TOK_B, LOCK_SHARED, 2, NULL, 5000, NULL, &g),
                 BACKEND_OK);
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(reenter(be, "re", TOK_B, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 5);
    CHECK_EQ_INT(r.mode, LOCK_SHARED);
    CHECK_EQ_INT(r.limit, 2);
    CHECK_EQ_INT(shr(be, "re", TOK_C, 2), BACKEND_OK); /* holds != holders */
    CHECK_EQ_INT(rel_k(be, "re", TOK_B, true, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(renew(be, "re", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);
    memory_backend.close(be);
}

static void test_mem_reentry_stops_at_holds_max(void)
{
    struct backend *be = open_mem();
    struct lock_grant g, r;
    struct lock_info info;
    uint32_t left;

    CHECK_EQ_INT(
        acq_k(be, "cap", TOK_A, LOCK_EXCLUSIVE, 0, NULL, 60000, NULL, &g),
        BACKEND_OK);
    for (uint32_t i = 2; i <= LOCK_HOLDS_MAX; i++)
        if (reenter(be, "cap", TOK_A, &r) != BACKEND_OK || r.holds != i) {
            CHECK_MSG(0, "re-entry %u answered holds %u", i, r.holds);
            break;
        }
    CHECK_EQ_INT(r.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(reenter(be, "cap", TOK_A, &r), BACKEND_HOLDS_MAX);
    CHECK_EQ_INT(inspect(be, "cap", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holds, LOCK_HOLDS_MAX); /* nothing changed */
    lock_info_clear(&info);
    CHECK_EQ_INT(renew(be, "cap", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(rel_k(be, "cap", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, LOCK_HOLDS_MAX - 1);
    CHECK_EQ_INT(reenter(be, "cap", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(rel_k(be, "cap", TOK_A, true, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    memory_backend.close(be);
}

static void test_mem_idempotent_replay_and_conflict(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w = { .id = 1 };
    struct lock_grant g, r;
    uint32_t left;

    CHECK_EQ_INT(
        acq_k(be, "i", TOK_A, LOCK_EXCLUSIVE, 0, "req-1", 5000, NULL, &g),
        BACKEND_OK);
    CHECK(!g.replay);
    check_sleep_ms(20);
    /* the retry, under a token the caller made afresh */
    CHECK_EQ_INT(
        acq_k(be, "i", TOK_B, LOCK_EXCLUSIVE, 0, "req-1", 5000, NULL, &r),
        BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, TOK_A);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_EQ_INT(r.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(r.holds, 1);
    CHECK_MSG(r.ttl_ms >= 1 && r.ttl_ms <= 4985, "ttl %llu",
              (unsigned long long)r.ttl_ms); /* what is left, not renewed */
    CHECK_EQ_INT(r.expires_at_ms, g.expires_at_ms);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);
    CHECK_EQ_INT(rel_k(be, "i", TOK_B, false, &left), BACKEND_MISMATCH);
    /* its holds, after a re-entry */
    CHECK_EQ_INT(reenter(be, "i", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(
        acq_k(be, "i", TOK_C, LOCK_EXCLUSIVE, 0, "req-1", 5000, NULL, &r),
        BACKEND_OK);
    CHECK(r.replay);
    CHECK_EQ_INT(r.holds, 2);
    /* another key is another grant; another Idempotency-Key waits */
    CHECK_EQ_INT(
        acq_k(be, "i2", TOK_C, LOCK_EXCLUSIVE, 0, "req-1", 5000, NULL, &r),
        BACKEND_OK);
    CHECK(!r.replay);
    CHECK_EQ_INT(
        acq_k(be, "i", TOK_C, LOCK_EXCLUSIVE, 0, "req-2", 5000, NULL, &r),
        BACKEND_HELD);
    /* the same key with another mode or limit: a conflict */
    CHECK_EQ_INT(acq_k(be, "i", TOK_C, LOCK_SHARED, 0, "req-1", 5000, NULL, &r),
                 BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(shr(be, "s", TOK_A, 3), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "s", TOK_B, LOCK_SHARED, 3, "x", 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "s", TOK_C, LOCK_SHARED, 4, "x", 5000, NULL, &r),
                 BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(acq_k(be, "s", TOK_C, LOCK_EXCLUSIVE, 0, "x", 5000, NULL, &r),
                 BACKEND_IDEM_CONFLICT);
    /* among shared holders, the one it names */
    CHECK_EQ_INT(acq_k(be, "s", TOK_C, LOCK_SHARED, 3, "x", 5000, NULL, &r),
                 BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, TOK_B);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_EQ_INT(r.limit, 3);
    CHECK_EQ_INT(memory_backend.held_count(be), 4);
    /* a queued waiter's retry that finds its grant leaves the queue */
    CHECK_EQ_INT(shr(be, "s", TOK_C, 3), BACKEND_OK); /* full */
    CHECK_EQ_INT(acq_k(be, "s", "dddd", LOCK_SHARED, 3, "y", 5000, &w, &r),
                 BACKEND_HELD);
    CHECK(w.be_data != NULL);
    CHECK_EQ_INT(acq_k(be, "s", "dddd", LOCK_SHARED, 3, "x", 5000, &w, &r),
                 BACKEND_OK);
    CHECK(r.replay);
    CHECK(w.be_data == NULL);
    /* released: the key names no grant any more */
    CHECK_EQ_INT(rel_k(be, "s", TOK_B, false, &left), BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "s", "dddd", LOCK_SHARED, 3, "x", 5000, NULL, &r),
                 BACKEND_OK);
    CHECK(!r.replay);
    CHECK(r.fence > g.fence);
    /* expired: nor does it */
    CHECK_EQ_INT(acq_k(be, "e", TOK_A, LOCK_EXCLUSIVE, 0, "z", 30, NULL, &g),
                 BACKEND_OK);
    check_sleep_ms(50);
    CHECK_EQ_INT(acq_k(be, "e", TOK_B, LOCK_EXCLUSIVE, 0, "z", 5000, NULL, &r),
                 BACKEND_OK);
    CHECK(!r.replay);
    CHECK(r.fence > g.fence);
    memory_backend.close(be);
}

/* lockd's own tokens are kept as the bytes they spell and any other as
 * text: either way a token matches itself only, byte for byte (not in
 * upper case, not cut or extended), and a replay gives its text back. */
static void test_mem_tokens_of_any_form_match_only_themselves(void)
{
    static const char *const other[] = {
        "0123456789ABCDEF0123456789abcdef", /* upper case digits */
        "0123456789abcdef0123456789abcde",  /* one short */
        "0123456789abcdef0123456789abcdef0", "0123456789abcdeg0123456789abcdef",
        "0123456789abcdef 123456789abcdef",  "",
    };
    const char *hex = "0123456789abcdef0123456789abcdef";
    const char *text = "tok-1 not of lockd's form";
    struct backend *be = open_mem();
    struct lock_grant g, r;
    uint32_t left;

    CHECK_EQ_INT(acq_k(be, "h", hex, LOCK_EXCLUSIVE, 0, "i1", 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "t", text, LOCK_SHARED, 0, "i2", 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "t", "0123456789ABCDEF0123456789ABCDEF", LOCK_SHARED,
                       0, NULL, 5000, NULL, &g),
                 BACKEND_OK);
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        CHECK_MSG(renew(be, "h", other[i], 0, &r) == BACKEND_MISMATCH, "%s",
                  other[i]);
        CHECK_MSG(renew(be, "t", other[i], 0, &r) == BACKEND_MISMATCH, "%s",
                  other[i]);
    }
    CHECK_EQ_INT(renew(be, "t", hex, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(renew(be, "h", text, 0, &r), BACKEND_MISMATCH);
    /* a replay spells each token as it was given */
    CHECK_EQ_INT(acq_k(be, "h", TOK_B, LOCK_EXCLUSIVE, 0, "i1", 5000, NULL, &r),
                 BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, hex);
    CHECK_EQ_INT(acq_k(be, "t", TOK_B, LOCK_SHARED, 0, "i2", 5000, NULL, &r),
                 BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, text);
    CHECK_EQ_INT(renew(be, "h", hex, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(rel_k(be, "t", text, false, &left), BACKEND_OK);
    CHECK_EQ_INT(
        rel_k(be, "t", "0123456789ABCDEF0123456789ABCDEF", false, &left),
        BACKEND_OK);
    CHECK_EQ_INT(rel_k(be, "h", hex, false, &left), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    memory_backend.close(be);
}

static void test_mem_inspect_shows_holders_by_fence(void)
{
    struct backend *be = open_mem();
    struct lock_req req = {
        .key = "in", .key_len = 2, .mode = LOCK_SHARED, .limit = 0
    };
    struct lock_grant g[3];
    struct lock_info info;
    uint32_t left;
    static const char *const owners[3] = { "alpha", NULL, "gamma" };
    static const uint64_t ttls[3] = { 3000, 9000, 6000 };

    for (int i = 0; i < 3; i++) {
        req.token = tok(i);
        req.owner = owners[i];
        req.ttl_ms = ttls[i];
        memset(&g[i], 0, sizeof(g[i]));
        CHECK_EQ_INT(memory_backend.acquire(be, &req, &g[i]), BACKEND_OK);
    }
    CHECK_EQ_INT(reenter(be, "in", tok(2), &g[2]), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "in", &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_SHARED);
    CHECK_EQ_INT(info.limit, 0);
    CHECK_EQ_INT(info.holder_count, 3);
    CHECK_EQ_INT(info.nholders, 3);
    CHECK_EQ_U64(info.fence, g[2].fence);             /* the greatest */
    CHECK(info.ttl_ms > 8500 && info.ttl_ms <= 9000); /* expires last */
    CHECK_EQ_INT(info.expires_at_ms, g[1].expires_at_ms);
    CHECK(!info.has_owner); /* no top-level owner or holds when shared */
    CHECK_EQ_INT(info.holds, 0);
    for (int i = 0; i < 3; i++) {
        const struct lock_holder *h = &info.holders[i];
        CHECK_EQ_U64(h->fence, g[i].fence);
        CHECK(h->ttl_ms >= 1 && h->ttl_ms <= ttls[i]);
        CHECK_EQ_INT(h->expires_at_ms, g[i].expires_at_ms);
        CHECK_EQ_INT(h->holds, i == 2 ? 2 : 1);
        CHECK_EQ_INT(h->has_owner, owners[i] != NULL);
        if (owners[i] != NULL)
            CHECK_STR_EQ(h->owner, owners[i]);
    }
    lock_info_clear(&info);
    /* the first leaves: the others keep their order */
    CHECK_EQ_INT(rel_k(be, "in", tok(0), false, &left), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "in", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 2);
    CHECK_EQ_INT(info.nholders, 2);
    CHECK_EQ_U64(info.holders[0].fence, g[1].fence);
    CHECK_EQ_U64(info.holders[1].fence, g[2].fence);
    CHECK_STR_EQ(info.holders[1].owner, "gamma");
    lock_info_clear(&info);
    /* more than LOCK_HOLDERS_SHOWN: the first ones by fence */
    req.key = "many";
    req.key_len = 4;
    req.owner = NULL;
    req.ttl_ms = 5000;
    for (int i = 0; i < LOCK_HOLDERS_SHOWN + 20; i++) {
        struct lock_grant gi;
        req.token = tok(i);
        memset(&gi, 0, sizeof(gi));
        CHECK_EQ_INT(memory_backend.acquire(be, &req, &gi), BACKEND_OK);
        if (i == 0)
            g[0] = gi;
    }
    CHECK_EQ_INT(rel_k(be, "many", tok(5), false, &left), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "many", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, LOCK_HOLDERS_SHOWN + 19);
    CHECK_EQ_INT(info.nholders, LOCK_HOLDERS_SHOWN);
    CHECK_EQ_U64(info.holders[0].fence, g[0].fence);
    for (int i = 1; i < LOCK_HOLDERS_SHOWN; i++)
        CHECK(info.holders[i].fence > info.holders[i - 1].fence);
    CHECK(info.fence > info.holders[LOCK_HOLDERS_SHOWN - 1].fence);
    lock_info_clear(&info);
    /* exclusive: owner and holds at the top, one holder */
    CHECK_EQ_INT(acq(be, "x", TOK_A, "solo", 5000, NULL, &g[0]), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "x", &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    CHECK(info.has_owner);
    CHECK_STR_EQ(info.owner, "solo");
    CHECK_EQ_INT(info.holds, 1);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_INT(info.nholders, 1);
    CHECK_STR_EQ(info.holders[0].owner, "solo");
    lock_info_clear(&info);
    memory_backend.close(be);
}

static void test_mem_shared_holders_expire_one_by_one(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w = { .id = 1 };
    struct lock_grant g;
    struct lock_info info;
    int64_t t0;

    CHECK_EQ_INT(acq_k(be, "x", TOK_A, LOCK_SHARED, 0, NULL, 40, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "x", TOK_B, LOCK_SHARED, 0, NULL, 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "x", TOK_C, LOCK_SHARED, 0, NULL, 120, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 3);
    check_sleep_ms(70);
    CHECK_EQ_INT(inspect(be, "x", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 2);
    lock_info_clear(&info);
    CHECK_EQ_INT(renew(be, "x", TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_EQ_INT(memory_backend.held_count(be), 2);
    check_sleep_ms(80);
    CHECK_EQ_INT(inspect(be, "x", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK(info.ttl_ms > 4000);
    lock_info_clear(&info);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);

    /* no traffic: the sweeper expires a permit and tells the waiter */
    CHECK_EQ_INT(acq_k(be, "y", TOK_A, LOCK_SHARED, 2, NULL, 60, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "y", TOK_B, LOCK_SHARED, 2, NULL, 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_k(be, "y", TOK_C, LOCK_SHARED, 2, NULL, 5000, &w, &g),
                 BACKEND_HELD);
    CHECK(g.retry_ms >= 1 && g.retry_ms <= 60); /* the first to expire */
    notes_clear();
    t0 = check_mono_ms();
    while (notes_count("y") == 0 && check_mono_ms() - t0 < 2000)
        check_sleep_ms(10);
    CHECK_MSG(notes_count("y") >= 1, "no notification after %lld ms",
              (long long)(check_mono_ms() - t0));
    CHECK_EQ_INT(memory_backend.held_count(be), 2);
    CHECK_EQ_INT(acq_k(be, "y", TOK_C, LOCK_SHARED, 2, NULL, 5000, &w, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 3);
    memory_backend.close(be);
}

/* ---- threads: readers and writers on one key ---- */

#define RW_LIMIT 3

static _Atomic int rw_readers, rw_writers;

struct rw_worker {
    struct backend *be;
    int id;
    bool writer;
    long grants, violations, bad_results;
};

static void rw_hold(struct rw_worker *wk, const char *token)
{
    _Atomic int *mine = wk->writer ? &rw_writers : &rw_readers;
    int n = atomic_fetch_add(mine, 1) + 1;
    uint32_t left;

    if (wk->writer ? n != 1 || atomic_load(&rw_readers) != 0
                   : n > RW_LIMIT || atomic_load(&rw_writers) != 0)
        wk->violations++;
    for (volatile int spin = 0; spin < 300; spin++)
        ;
    atomic_fetch_sub(mine, 1);
    wk->grants++;
    if (rel_k(wk->be, "rw", token, false, &left) != BACKEND_OK || left != 0)
        wk->bad_results++;
}

static void *rw_main(void *arg)
{
    struct rw_worker *wk = arg;
    char token[LOCK_TOKEN_MAX + 1];
    int64_t end = check_mono_ms() + RUN_MS;
    uint64_t wid = (uint64_t)wk->id << 32;
    enum lock_mode mode = wk->writer ? LOCK_EXCLUSIVE : LOCK_SHARED;
    uint32_t limit = wk->writer ? 0 : RW_LIMIT;

    snprintf(token, sizeof(token), "rw-token-%d", wk->id);
    while (check_mono_ms() < end) {
        struct lock_waiter w = { .id = ++wid };
        struct lock_grant g;
        enum backend_result r;
        int64_t give_up = check_mono_ms() + 50;

        for (;;) {
            r = acq_k(wk->be, "rw", token, mode, limit, NULL, 10000, &w, &g);
            if (r == BACKEND_OK) {
                rw_hold(wk, token);
                break;
            }
            if (r != BACKEND_HELD) {
                wk->bad_results++;
                break;
            }
            if (check_mono_ms() > give_up) {
                if (cancel(wk->be, "rw", &w) != BACKEND_OK)
                    wk->bad_results++;
                break;
            }
            sched_yield();
        }
    }
    return NULL;
}

static void test_mem_threads_keep_readers_and_writers_apart(void)
{
    struct backend *be = open_mem();
    struct rw_worker wk[6];
    pthread_t th[6];
    long rgrants = 0, wgrants = 0;

    atomic_store(&rw_readers, 0);
    atomic_store(&rw_writers, 0);
    for (int i = 0; i < 6; i++) {
        wk[i] = (struct rw_worker){ .be = be, .id = i, .writer = i < 2 };
        CHECK_EQ_INT(pthread_create(&th[i], NULL, rw_main, &wk[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(wk[i].violations, 0);
        CHECK_EQ_INT(wk[i].bad_results, 0);
        if (wk[i].writer)
            wgrants += wk[i].grants;
        else
            rgrants += wk[i].grants;
    }
    CHECK_MSG(rgrants > 20 && wgrants > 5, "%ld reader, %ld writer grants",
              rgrants, wgrants);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    memory_backend.close(be);
}

/* ---- several keys at once ---- */

static enum backend_result
macq(struct backend *be, const char *const *keys, size_t n, const char *tok)
{
    size_t lens[8];
    struct lock_multi_req req = {
        .n = n, .keys = keys, .key_lens = lens, .token = tok, .ttl_ms = 5000
    };
    struct lock_multi_grant out = { 0 };

    for (size_t i = 0; i < n; i++)
        lens[i] = strlen(keys[i]);
    return memory_backend.acquire_multi(be, &req, &out);
}

static enum backend_result
mrel(struct backend *be, const char *const *keys, size_t n, const char *tok)
{
    size_t lens[8];
    struct lock_multi_req req = {
        .n = n, .keys = keys, .key_lens = lens, .token = tok
    };
    struct lock_multi_grant out = { 0 };

    for (size_t i = 0; i < n; i++)
        lens[i] = strlen(keys[i]);
    return memory_backend.release_multi(be, &req, &out);
}

/* A refused multi-key acquire keeps no place in the FIFO, yet the key's
 * next release, expiry (with no traffic: the sweeper) or given-up place
 * is notified, once; a key nobody was refused stays quiet. */
static void test_mem_multi_refusal_is_notified(void)
{
    struct backend *be = open_mem();
    static const char *const ks[] = { "mx", "my" };
    static const char *const kq[] = { "mq" };
    struct lock_waiter w = { .id = 1 };
    struct lock_grant g;
    int64_t t0;

    CHECK_EQ_INT(acq(be, "my", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "my", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(notes_count("my"), 0);
    /* held shared by two: the entry outlives the first release */
    CHECK_EQ_INT(shr(be, "my", TOK_A, 0), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "my", TOK_C, 0), BACKEND_OK);
    CHECK_EQ_INT(macq(be, ks, 2, TOK_B), BACKEND_HELD);
    CHECK_EQ_INT(rel(be, "my", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(notes_count("my"), 1);
    CHECK_EQ_INT(shr(be, "my", TOK_A, 0), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "my", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(notes_count("my"), 1); /* told once */
    CHECK_EQ_INT(rel(be, "my", TOK_C), BACKEND_OK);

    /* expiry with no traffic */
    CHECK_EQ_INT(acq(be, "mx", TOK_A, NULL, 50, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(macq(be, ks, 2, TOK_B), BACKEND_HELD);
    t0 = check_mono_ms();
    while (notes_count("mx") == 0 && check_mono_ms() - t0 < 2000)
        check_sleep_ms(10);
    CHECK_MSG(notes_count("mx") == 1, "%d notifications after %lld ms",
              notes_count("mx"), (long long)(check_mono_ms() - t0));
    CHECK_EQ_INT(macq(be, ks, 2, TOK_B), BACKEND_OK);
    CHECK_EQ_INT(mrel(be, ks, 2, TOK_B), BACKEND_OK);

    /* the only waiter gives up its place on a free key */
    CHECK_EQ_INT(acq(be, "mq", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "mq", TOK_B, NULL, 5000, &w, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel(be, "mq", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(macq(be, kq, 1, TOK_C), BACKEND_HELD);
    notes_clear();
    CHECK_EQ_INT(cancel(be, "mq", &w), BACKEND_OK);
    CHECK_EQ_INT(notes_count("mq"), 1);
    CHECK_EQ_INT(macq(be, kq, 1, TOK_C), BACKEND_OK);
    CHECK_EQ_INT(mrel(be, kq, 1, TOK_C), BACKEND_OK);
    CHECK_EQ_INT(memory_backend.held_count(be), 0);
    memory_backend.close(be);
}

/* ---- list, force_release, the grant times ---- */

/* One page, as backend_list() calls the op (n, more, resume zeroed). */
static enum backend_result mlist(struct backend *be,
                                 const char *prefix,
                                 const char *after,
                                 uint32_t limit,
                                 struct lock_list *out)
{
    struct lock_list_req req = { .prefix = prefix,
                                 .prefix_len = strlen(prefix),
                                 .after = after,
                                 .after_len = after ? strlen(after) : 0,
                                 .limit = limit };

    out->n = 0;
    out->more = false;
    out->resume[0] = '\0';
    out->resume_len = 0;
    return memory_backend.list(be, &req, out);
}

/* Page through prefix limit at a time: how often each key "<prefix>NNNN"
 * (NNNN < nseen) was listed, in seen[]; false if the order broke or the
 * listing did not end. *short_pages: pages cut short by the budget. */
static bool mlist_count(struct backend *be,
                        const char *prefix,
                        uint32_t limit,
                        int *seen,
                        int nseen,
                        int *short_pages)
{
    static struct lock_entry ents[LOCK_LIST_MAX];
    struct lock_list page = { .entries = ents };
    char after[LOCK_KEY_MAX + 1] = "";
    size_t plen = strlen(prefix);
    bool ok = true;

    for (int pages = 0; pages < 100000; pages++) {
        if (mlist(be, prefix, pages > 0 ? after : NULL, limit, &page) !=
            BACKEND_OK)
            return false;
        for (size_t k = 0; k < page.n; k++) {
            long i = strtol(ents[k].key + plen, NULL, 10);
            if (pages + k > 0 &&
                strcmp(ents[k].key, k > 0 ? ents[k - 1].key : after) <= 0)
                ok = false;
            if (i >= 0 && i < nseen)
                seen[i]++;
        }
        if (!page.more)
            return ok;
        if (page.n < limit)
            (*short_pages)++;
        memcpy(after, page.resume, page.resume_len + 1);
    }
    return false;
}

#define UNSWEPT_KEYS 300

/* Holders whose TTL has passed but that the sweeper has not reached are
 * skipped within the budget: pages come out short (more, resume at the
 * last key looked at), and every live key still comes exactly once. The
 * sweeper may reap the keys first: up to 3 tries to see a short page. */
static void test_mem_list_skips_expired_within_a_budget(void)
{
    struct backend *be = open_mem();
    struct lock_grant g;
    int seen[UNSWEPT_KEYS], short_pages = 0, tries = 0;

    for (; tries < 3 && short_pages == 0; tries++) {
        int64_t t0 = check_mono_ms();
        for (int i = 0; i < UNSWEPT_KEYS; i++) {
            char key[16];
            snprintf(key, sizeof(key), "u/%04d", i);
            /* three expiring keys, then a live one */
            CHECK_EQ_INT(
                acq(be, key, TOK_A, NULL, i % 4 == 3 ? 30000 : 60, NULL, &g),
                BACKEND_OK);
        }
        while (check_mono_ms() < t0 + 70)
            check_sleep_ms(2);
        for (uint32_t limit = 1; limit <= 3; limit += 2) {
            memset(seen, 0, sizeof(seen));
            CHECK(
                mlist_count(be, "u/", limit, seen, UNSWEPT_KEYS, &short_pages));
            for (int i = 0; i < UNSWEPT_KEYS; i++)
                CHECK_MSG(seen[i] == (i % 4 == 3), "u/%04d listed %d times", i,
                          seen[i]);
        }
        for (int i = 3; i < UNSWEPT_KEYS; i += 4) {
            char key[16];
            snprintf(key, sizeof(key), "u/%04d", i);
            CHECK_EQ_INT(rel(be, key, TOK_A), BACKEND_OK);
        }
    }
    CHECK_MSG(short_pages > 0, "no short page in %d tries", tries);
    memory_backend.close(be);
}

/* The grant that finds the holder expired reports its fence (the
 * sweeper may reap it first: then 0, never another fence). */
static void test_mem_takeover_reports_the_expired_fence(void)
{
    struct backend *be = open_mem();
    struct lock_grant g, h, s2;
    int exact = 0;

    for (int i = 0; i < 3; i++) {
        int64_t t0 = check_mono_ms();
        CHECK_EQ_INT(acq(be, "tk", TOK_A, NULL, 40, NULL, &g), BACKEND_OK);
        CHECK_EQ_U64(g.expired_fence, 0);
        while (check_mono_ms() < t0 + 42)
            check_sleep_ms(1);
        CHECK_EQ_INT(acq(be, "tk", TOK_B, NULL, 5000, NULL, &h), BACKEND_OK);
        CHECK(h.expired_fence == 0 || h.expired_fence == g.fence);
        exact += h.expired_fence == g.fence;
        CHECK_EQ_INT(rel(be, "tk", TOK_B), BACKEND_OK);
    }
    CHECK_MSG(exact > 0, "no takeover seen in 3 tries");
    /* shared: one of two holders expired, the next grant took its place */
    for (int i = 0; i < 3; i++) {
        int64_t t0 = check_mono_ms();
        CHECK_EQ_INT(
            acq_k(be, "tks", TOK_A, LOCK_SHARED, 2, NULL, 40, NULL, &g),
            BACKEND_OK);
        CHECK_EQ_INT(
            acq_k(be, "tks", TOK_B, LOCK_SHARED, 2, NULL, 5000, NULL, &s2),
            BACKEND_OK);
        CHECK_EQ_U64(s2.expired_fence, 0);
        while (check_mono_ms() < t0 + 42)
            check_sleep_ms(1);
        CHECK_EQ_INT(
            acq_k(be, "tks", TOK_C, LOCK_SHARED, 2, NULL, 5000, NULL, &h),
            BACKEND_OK);
        CHECK(h.expired_fence == 0 || h.expired_fence == g.fence);
        exact += h.expired_fence == g.fence ? 10 : 0;
        CHECK_EQ_INT(rel(be, "tks", TOK_B), BACKEND_OK);
        CHECK_EQ_INT(rel(be, "tks", TOK_C), BACKEND_OK);
    }
    CHECK_MSG(exact >= 10, "no shared takeover seen in 3 tries");
    memory_backend.close(be);
}

/* granted_at_ms is the grant's own instant (expires_at - ttl at grant),
 * kept through renewals and re-entries; only the last release says it. */
static void test_mem_release_tells_the_grant_instant(void)
{
    struct backend *be = open_mem();
    struct lock_req req = { .key = "gi", .key_len = 2, .token = TOK_A };
    struct lock_grant g, r;

    CHECK_EQ_INT(acq(be, "gi", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    check_sleep_ms(20);
    CHECK_EQ_INT(renew(be, "gi", TOK_A, 9000, &r), BACKEND_OK);
    CHECK_EQ_INT(reenter(be, "gi", TOK_A, &r), BACKEND_OK);
    memset(&r, 0, sizeof(r));
    CHECK_EQ_INT(memory_backend.release(be, &req, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 1);
    CHECK_EQ_INT(r.granted_at_ms, 0);
    CHECK_EQ_INT(memory_backend.release(be, &req, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 0);
    CHECK_EQ_INT(r.granted_at_ms, g.expires_at_ms - 5000);
    memory_backend.close(be);
}

/* force_release takes every holder off the held count and the index, and
 * leaves the key's waiters queued, the first one told. */
static void test_mem_force_release_counts_and_unlists(void)
{
    struct backend *be = open_mem();
    struct lock_waiter w = { .id = 7 };
    struct lock_entry ents[4];
    struct lock_list page = { .entries = ents };
    struct lock_info info = { 0 };
    struct lock_grant g;

    CHECK_EQ_INT(shr(be, "fq", TOK_A, 0), BACKEND_OK);
    CHECK_EQ_INT(shr(be, "fq", TOK_B, 0), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "fr", TOK_A, NULL, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "fq", TOK_C, NULL, 5000, &w, &g), BACKEND_HELD);
    CHECK_EQ_INT(memory_backend.held_count(be), 3);
    notes_clear();
    CHECK_EQ_INT(memory_backend.force_release(be, "fq", 2, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 2);
    lock_info_clear(&info);
    CHECK_EQ_INT(notes_count("fq"), 1);
    CHECK_EQ_INT(memory_backend.held_count(be), 1);
    CHECK_EQ_INT(mlist(be, "f", NULL, 4, &page), BACKEND_OK);
    CHECK_EQ_INT(page.n, 1);
    CHECK_STR_EQ(ents[0].key, "fr");
    /* the waiter's place was kept: it goes before a try-once */
    CHECK_EQ_INT(acq(be, "fq", TOK_B, NULL, 5000, NULL, &g), BACKEND_HELD);
    CHECK_EQ_INT(acq(be, "fq", TOK_C, NULL, 5000, &w, &g), BACKEND_OK);
    CHECK(w.be_data == NULL);
    memory_backend.close(be);
}

#define IDX_THREADS 8
#define IDX_KEYS    2000
#define IDX_MS      1000

struct idx_run {
    struct backend *be;
    atomic_bool stop;
    atomic_long ops;
};

struct idx_worker {
    struct idx_run *run;
    unsigned seed;
    int errors;
};

/* Grant random keys (exclusive or shared) and give them back, holding up
 * to 4 at a time, so entries come and go in every shard. */
static void *idx_worker_main(void *arg)
{
    struct idx_worker *w = arg;
    char tok[40], held[4][16];
    int nheld = 0;

    snprintf(tok, sizeof(tok), "%032x", w->seed);
    while (!atomic_load(&w->run->stop)) {
        char key[16];
        struct lock_grant g;
        enum backend_result r;
        snprintf(key, sizeof(key), "ix/%04d", rand_r(&w->seed) % IDX_KEYS);
        r = acq_k(w->run->be, key, tok,
                  rand_r(&w->seed) % 2 ? LOCK_SHARED : LOCK_EXCLUSIVE, 0, NULL,
                  5000, NULL, &g);
        if (r == BACKEND_OK && nheld < 4)
            memcpy(held[nheld++], key, sizeof(key));
        else if (r == BACKEND_OK)
            w->errors += rel(w->run->be, key, tok) != BACKEND_OK;
        else if (r != BACKEND_HELD)
            w->errors++;
        if (nheld == 4 || (nheld > 0 && rand_r(&w->seed) % 3 == 0))
            w->errors += rel(w->run->be, held[--nheld], tok) != BACKEND_OK;
        atomic_fetch_add(&w->run->ops, 1);
    }
    while (nheld > 0)
        w->errors += rel(w->run->be, held[--nheld], tok) != BACKEND_OK;
    return NULL;
}

/* 8 threads grant and release random keys while this one lists: every
 * key held throughout (every tenth, held here) is listed exactly once a
 * pass, in order; at the end the index holds exactly what is held. */
static void test_mem_list_index_under_threads(void)
{
    struct idx_run run = { .be = open_mem() };
    struct idx_worker wk[IDX_THREADS];
    pthread_t th[IDX_THREADS];
    static int seen[IDX_KEYS];
    int passes = 0, short_pages = 0, started = 0;
    struct lock_grant g;
    int64_t until;

    for (int i = 0; i < IDX_KEYS; i += 10) {
        char key[16];
        snprintf(key, sizeof(key), "ix/%04d", i);
        CHECK_EQ_INT(acq(run.be, key, TOK_A, NULL, 60000, NULL, &g),
                     BACKEND_OK);
    }
    for (int i = 0; i < IDX_THREADS; i++) {
        wk[i] = (struct idx_worker){ .run = &run, .seed = 0x5eed + i };
        if (pthread_create(&th[i], NULL, idx_worker_main, &wk[i]) == 0)
            started++;
    }
    CHECK_EQ_INT(started, IDX_THREADS);
    for (until = check_mono_ms() + IDX_MS; check_mono_ms() < until; passes++) {
        uint32_t limit = 1 + (uint32_t)(passes * 37 % 200);
        memset(seen, 0, sizeof(seen));
        CHECK(mlist_count(run.be, "ix/", limit, seen, IDX_KEYS, &short_pages));
        for (int i = 0; i < IDX_KEYS; i += 10)
            CHECK_MSG(seen[i] == 1,
                      "pass %d, limit %u: ix/%04d listed %d "
                      "times",
                      passes, limit, i, seen[i]);
    }
    atomic_store(&run.stop, true);
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(wk[i].errors, 0);
    }
    printf("  %d listing passes beside %ld grants and releases\n", passes,
           atomic_load(&run.ops));
    /* from the first key of the store: no number follows an empty
     * prefix, so every key listed counts under 0 */
    memset(seen, 0, sizeof(seen));
    CHECK(mlist_count(run.be, "", 1000, seen, IDX_KEYS, &short_pages));
    CHECK_EQ_INT(seen[0], IDX_KEYS / 10);
    CHECK_EQ_INT(memory_backend.held_count(run.be), IDX_KEYS / 10);
    memset(seen, 0, sizeof(seen));
    CHECK(mlist_count(run.be, "ix/", 1000, seen, IDX_KEYS, &short_pages));
    for (int i = 0; i < IDX_KEYS; i++)
        CHECK_MSG(seen[i] == (i % 10 == 0), "ix/%04d listed %d times", i,
                  seen[i]);
    memory_backend.close(run.be);
}

/* ---- the expired hook: the sweep tells who expired ---- */

static pthread_mutex_t gone_mu = PTHREAD_MUTEX_INITIALIZER;
static char gone_key[64];
static uint64_t gone_fence;
static char gone_owner[64];
static int gone_calls;

static void record_expired(void *arg,
                           const char *key,
                           size_t key_len,
                           uint64_t fence,
                           const char *owner)
{
    (void)arg;
    pthread_mutex_lock(&gone_mu);
    gone_calls++;
    snprintf(gone_key, sizeof(gone_key), "%.*s", (int)key_len, key);
    gone_fence = fence;
    snprintf(gone_owner, sizeof(gone_owner), "%s",
             owner != NULL ? owner : "(none)");
    pthread_mutex_unlock(&gone_mu);
}

static int gone_count(void)
{
    int n;

    pthread_mutex_lock(&gone_mu);
    n = gone_calls;
    pthread_mutex_unlock(&gone_mu);
    return n;
}

/* A holder whose TTL passes with no one touching the key is expired by the
 * sweep, which tells the expired hook its key, fence and owner, once. */
static void test_mem_sweep_tells_the_expired_hook(void)
{
    struct backend_hooks hooks = { .notify = record_notify,
                                   .expired = record_expired };
    struct backend *be = NULL;
    struct lock_grant g;
    int64_t deadline;

    CHECK_EQ_INT(memory_backend.open("memory://", &hooks, &be, NULL, 0),
                 BACKEND_OK);
    CHECK_EQ_INT(acq(be, "gone/a", TOK_A, "job-a", 100, NULL, &g), BACKEND_OK);
    deadline = clock_mono_ms() + 2000;
    while (gone_count() == 0 && clock_mono_ms() < deadline)
        check_sleep_ms(20);
    check_sleep_ms(600); /* two more sweeps: told once */
    pthread_mutex_lock(&gone_mu);
    CHECK_EQ_INT(gone_calls, 1);
    CHECK_STR_EQ(gone_key, "gone/a");
    CHECK_EQ_U64(gone_fence, g.fence);
    CHECK_STR_EQ(gone_owner, "job-a");
    pthread_mutex_unlock(&gone_mu);
    memory_backend.close(be);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_mem_open_rejects_options),
    CHECK_CASE(test_mem_acquire_grants_then_held),
    CHECK_CASE(test_mem_release_frees_and_token_dies),
    CHECK_CASE(test_mem_tokens_of_any_form_match_only_themselves),
    CHECK_CASE(test_mem_renew_zero_keeps_last_ttl),
    CHECK_CASE(test_mem_expiry_is_judged_on_access),
    CHECK_CASE(test_mem_fences_grow_across_keys_and_reopen),
    CHECK_CASE(test_mem_owner_is_stored_and_shown),
    CHECK_CASE(test_mem_keys_are_exact_bytes),
    CHECK_CASE(test_mem_waiters_are_served_fifo),
    CHECK_CASE(test_mem_waiter_on_free_key_is_granted_at_once),
    CHECK_CASE(test_mem_cancel_wait_of_head_notifies_next),
    CHECK_CASE(test_mem_expiry_with_waiters_is_notified),
    CHECK_CASE(test_mem_every_expiry_with_waiters_is_notified),
    CHECK_CASE(test_mem_threads_keep_mutual_exclusion),
    CHECK_CASE(test_mem_shared_grants_up_to_limit_then_held),
    CHECK_CASE(test_mem_exclusive_and_shared_exclude),
    CHECK_CASE(test_mem_limit_mismatch_changes_nothing),
    CHECK_CASE(test_mem_fifo_across_modes),
    CHECK_CASE(test_mem_try_once_never_overtakes_shared_waiters),
    CHECK_CASE(test_mem_shared_waiters_are_granted_together),
    CHECK_CASE(test_mem_cancel_of_writer_lets_readers_go),
    CHECK_CASE(test_mem_reentry_counts_holds),
    CHECK_CASE(test_mem_reentry_stops_at_holds_max),
    CHECK_CASE(test_mem_idempotent_replay_and_conflict),
    CHECK_CASE(test_mem_inspect_shows_holders_by_fence),
    CHECK_CASE(test_mem_shared_holders_expire_one_by_one),
    CHECK_CASE(test_mem_threads_keep_readers_and_writers_apart),
    CHECK_CASE(test_mem_multi_refusal_is_notified),
    CHECK_CASE(test_mem_list_skips_expired_within_a_budget),
    CHECK_CASE(test_mem_takeover_reports_the_expired_fence),
    CHECK_CASE(test_mem_release_tells_the_grant_instant),
    CHECK_CASE(test_mem_force_release_counts_and_unlists),
    CHECK_CASE(test_mem_list_index_under_threads),
    CHECK_CASE(test_mem_sweep_tells_the_expired_hook),
};

int main(int argc, char **argv)
{
    log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_TEXT);
    return CHECK_MAIN(cases);
}

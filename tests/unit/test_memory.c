/*
 * tests/unit/test_memory.c - the memory backend's contract (backend.h),
 * through its ops table memory_backend: grants, renew and release by token,
 * expiry judged on access, fences, owners, the FIFO of waiters
 * (BACKEND_CAP_QUEUE), notifications, and mutual exclusion under threads.
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
    CHECK_EQ_INT(renew(be, "k", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_U64(r.ttl_ms, 7000); /* the renewed TTL, not the granted one */
    /* a short renew really shortens */
    CHECK_EQ_INT(renew(be, "k", TOK_A, 100, &r), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK(info.ttl_ms >= 1 && info.ttl_ms <= 100);
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
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_OK);
    memset(owner, 'o', LOCK_OWNER_MAX);
    owner[LOCK_OWNER_MAX] = '\0';
    CHECK_EQ_INT(acq(be, "k", TOK_B, owner, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK_STR_EQ(info.owner, owner);
    CHECK_EQ_INT(rel(be, "k", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "k", TOK_C, "", 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(inspect(be, "k", &info), BACKEND_OK);
    CHECK(info.has_owner);
    CHECK_STR_EQ(info.owner, "");
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

static const struct check_case cases[] = {
    CHECK_CASE(test_mem_open_rejects_options),
    CHECK_CASE(test_mem_acquire_grants_then_held),
    CHECK_CASE(test_mem_release_frees_and_token_dies),
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
};

int main(int argc, char **argv)
{
    log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_TEXT);
    return CHECK_MAIN(cases);
}

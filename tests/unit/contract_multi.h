/*
 * tests/unit/contract_multi.h - the multi-key part of the contract suite
 * (tests/unit/test_contract.c includes it before its case table): n keys
 * acquired all or nothing, each then an ordinary lock; renew of all or
 * none; release of what the token holds; a queued waiter, a shared holder
 * and an expired one as the store sees them; the wrappers' refusals; and
 * threads mixing multi-key and single-key grants on overlapping keys.
 * Every case runs on every adapter through the wrappers; an adapter
 * without the ops fails them (the wrappers answer INVALID).
 */
#ifndef TESTS_UNIT_CONTRACT_MULTI_H
#define TESTS_UNIT_CONTRACT_MULTI_H

enum multi_op {
    MULTI_ACQUIRE,
    MULTI_RENEW,
    MULTI_RELEASE,
};

/* One multi-key call on handle be; keys may be up to LOCK_MULTI_MAX + 1
 * (to be refused). */
static enum backend_result multi_on(struct backend *be,
                                    enum multi_op op,
                                    const char *const *keys,
                                    size_t n,
                                    const char *tok,
                                    uint64_t ttl,
                                    struct lock_multi_grant *out)
{
    size_t lens[LOCK_MULTI_MAX + 1];
    struct lock_multi_req req = {
        .n = n, .keys = keys, .key_lens = lens, .token = tok, .ttl_ms = ttl
    };

    for (size_t i = 0; i < n && i <= LOCK_MULTI_MAX; i++)
        lens[i] = strlen(keys[i]);
    switch (op) {
    case MULTI_ACQUIRE:
        return backend_acquire_multi(be, &req, out);
    case MULTI_RENEW:
        return backend_renew_multi(be, &req, out);
    case MULTI_RELEASE:
        return backend_release_multi(be, &req, out);
    }
    return BACKEND_INVALID;
}

static enum backend_result macq(const char *const *keys,
                                size_t n,
                                const char *tok,
                                uint64_t ttl,
                                struct lock_multi_grant *out)
{
    return multi_on(cur->be, MULTI_ACQUIRE, keys, n, tok, ttl, out);
}

static enum backend_result mren(const char *const *keys,
                                size_t n,
                                const char *tok,
                                uint64_t ttl,
                                struct lock_multi_grant *out)
{
    return multi_on(cur->be, MULTI_RENEW, keys, n, tok, ttl, out);
}

static enum backend_result mrel(const char *const *keys,
                                size_t n,
                                const char *tok,
                                struct lock_multi_grant *out)
{
    return multi_on(cur->be, MULTI_RELEASE, keys, n, tok, 0, out);
}

/* flags[0..n) is exactly want[0..n) (what: "held" or "released") */
#define CHECK_FLAGS(flags, want, n, what)                               \
    do {                                                                \
        for (size_t cf_i_ = 0; cf_i_ < (n); cf_i_++)                    \
            CHECK_MSG((flags)[cf_i_] == (want)[cf_i_], "%s[%zu] is %d", \
                      (what), cf_i_, (int)(flags)[cf_i_]);              \
    } while (0)

/* cur has the three ops (else every call is INVALID) */
static bool multi_ops_present(void)
{
    const struct backend_ops *ops = cur->be->ops;

    CHECK_MSG(ops->acquire_multi != NULL && ops->renew_multi != NULL &&
                  ops->release_multi != NULL,
              "%s has no multi-key ops", cur->name);
    return ops->acquire_multi != NULL && ops->renew_multi != NULL &&
           ops->release_multi != NULL;
}

/* key is free: inspect says so and another token can take it singly */
static void check_free(const char *key)
{
    struct lock_info info;
    struct lock_grant g;

    CHECK_MSG(insp(key, &info) == BACKEND_NOT_FOUND, "\"%s\" is held", key);
    CHECK_MSG(acq(key, TOK_F, 5000, &g) == BACKEND_OK, "\"%s\" not free", key);
    CHECK_RES(rel(key, TOK_F), BACKEND_OK);
}

/* One key held: HELD naming exactly the held keys, a retry hint from the
 * holders' TTLs, and none of the other keys taken. */
static void test_multi_all_or_nothing(void)
{
    static const char *const keys[] = { "multi/aon/1", "multi/aon/2",
                                        "multi/aon/3", "multi/aon/4" };
    static const bool want[] = { false, true, false, true };
    struct lock_multi_grant m;
    struct lock_grant g;

    CHECK_RES(acq(keys[1], TOK_B, 10000, &g), BACKEND_OK);
    CHECK_RES(macq(keys, 4, TOK_A, 5000, &m), BACKEND_HELD);
    CHECK_FLAGS(m.held, ((bool[]){ false, true, false, false }), 4, "held");
    CHECK_MSG(m.retry_ms > 0 && m.retry_ms <= 10000, "retry_ms %llu",
              (unsigned long long)m.retry_ms);
    check_free(keys[0]);
    check_free(keys[2]);
    check_free(keys[3]);
    /* two held: both named, the hint is the earlier expiry */
    CHECK_RES(acq(keys[3], TOK_C, 3000, &g), BACKEND_OK);
    CHECK_RES(macq(keys, 4, TOK_A, 5000, &m), BACKEND_HELD);
    CHECK_FLAGS(m.held, want, 4, "held");
    CHECK_MSG(m.retry_ms > 0 && m.retry_ms <= 3000, "retry_ms %llu",
              (unsigned long long)m.retry_ms);
    check_free(keys[0]);
    check_free(keys[2]);
    CHECK_RES(rel(keys[1], TOK_B), BACKEND_OK);
    CHECK_RES(macq(keys, 4, TOK_A, 5000, &m), BACKEND_HELD);
    CHECK_FLAGS(m.held, ((bool[]){ false, false, false, true }), 4, "held");
    check_free(keys[1]);
    CHECK_RES(rel(keys[3], TOK_C), BACKEND_OK);
    CHECK_RES(macq(keys, 4, TOK_A, 5000, &m), BACKEND_OK);
    CHECK_RES(mrel(keys, 4, TOK_A, &m), BACKEND_OK);
}

/* Each key's fence is greater than every earlier grant of it, single or
 * multi, and a later single grant's is greater again. */
static void test_multi_fences_grow_per_key(void)
{
    static const char *const keys[] = { "multi/fence/1", "multi/fence/2",
                                        "multi/fence/3" };
    uint64_t before[3];
    struct lock_multi_grant m, m2;
    struct lock_grant g;
    struct lock_info info;
    int64_t t0 = clock_wall_ms(), t1;

    for (int i = 0; i < 3; i++) {
        CHECK_RES(acq(keys[i], TOK_B, 5000, &g), BACKEND_OK);
        before[i] = g.fence;
        CHECK_RES(rel(keys[i], TOK_B), BACKEND_OK);
    }
    CHECK_RES(macq(keys, 3, TOK_A, 5000, &m), BACKEND_OK);
    t1 = clock_wall_ms();
    CHECK_TTL(m.ttl_ms, 5000);
    CHECK_NEAR(m.expires_at_ms, t0 + 5000, t1 + 5000);
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(m.fences[i] > before[i] && m.fences[i] <= LOCK_FENCE_MAX,
                  "key %d: fence %llu after %llu", i,
                  (unsigned long long)m.fences[i],
                  (unsigned long long)before[i]);
        CHECK_RES(insp(keys[i], &info), BACKEND_OK);
        CHECK_EQ_U64(info.fence, m.fences[i]);
    }
    CHECK_RES(mrel(keys, 3, TOK_A, &m2), BACKEND_OK);
    CHECK_RES(macq(keys, 3, TOK_C, 5000, &m2), BACKEND_OK);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(m2.fences[i] > m.fences[i], "key %d: fence %llu after %llu",
                  i, (unsigned long long)m2.fences[i],
                  (unsigned long long)m.fences[i]);
    CHECK_RES(mrel(keys, 3, TOK_C, &m), BACKEND_OK);
    CHECK_RES(acq(keys[1], TOK_B, 5000, &g), BACKEND_OK);
    CHECK(g.fence > m2.fences[1]);
    CHECK_RES(rel(keys[1], TOK_B), BACKEND_OK);
}

/* After a multi grant every key is an ordinary exclusive lock: inspect,
 * renew, re-entry and release per key; releasing one frees only it. */
static void test_multi_keys_are_ordinary_locks(void)
{
    static const char *const keys[] = { "multi/each/1", "multi/each/2",
                                        "multi/each/3" };
    struct lock_multi_grant m;
    struct lock_grant g;
    struct lock_info info;
    uint32_t left;

    CHECK_RES(macq(keys, 3, TOK_A, 5000, &m), BACKEND_OK);
    for (int i = 0; i < 3; i++) {
        CHECK_RES(insp(keys[i], &info), BACKEND_OK);
        CHECK_EQ_U64(info.fence, m.fences[i]);
        CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
        CHECK_EQ_INT(info.holds, 1);
        CHECK_EQ_INT(info.holder_count, 1);
        CHECK_RES(acq(keys[i], TOK_B, 5000, &g), BACKEND_HELD);
        CHECK_RES(acq_sh(keys[i], TOK_B, 0, &g), BACKEND_HELD);
    }
    CHECK_RES(ren(keys[0], TOK_A, 8000, &g), BACKEND_OK);
    CHECK_EQ_U64(g.fence, m.fences[0]);
    CHECK_TTL(g.ttl_ms, 8000);
    CHECK_RES(ren(keys[0], TOK_B, 8000, &g), BACKEND_MISMATCH);
    CHECK_RES(reenter(keys[1], TOK_A, &g), BACKEND_OK);
    CHECK_EQ_INT(g.holds, 2);
    CHECK_RES(rel(keys[0], TOK_A), BACKEND_OK);
    CHECK_RES(insp(keys[0], &info), BACKEND_NOT_FOUND);
    for (int i = 1; i < 3; i++) {
        CHECK_RES(insp(keys[i], &info), BACKEND_OK);
        CHECK_EQ_U64(info.fence, m.fences[i]);
    }
    CHECK_RES(rel_holds(keys[1], TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 1);
    CHECK_RES(acq(keys[1], TOK_B, 5000, &g), BACKEND_HELD);
    CHECK_RES(rel_holds(keys[1], TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_RES(insp(keys[2], &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, m.fences[2]);
    CHECK_RES(rel(keys[2], TOK_A), BACKEND_OK);
    for (int i = 0; i < 3; i++)
        check_free(keys[i]);
}

/* ttl_ms of key as inspect() sees it; 0 when not held */
static uint64_t ttl_left(const char *key)
{
    struct lock_info info;

    return insp(key, &info) == BACKEND_OK ? info.ttl_ms : 0;
}

/* Renew all or nothing: the first key (in req order) not held by the
 * token is named, and no key's expiry moves. */
static void test_multi_renew_is_all_or_nothing(void)
{
    static const char *const keys[] = { "multi/renew/1", "multi/renew/2",
                                        "multi/renew/3" };
    const char *rev[] = { keys[2], keys[1], keys[0] };
    struct lock_multi_grant m, r;
    struct lock_grant g;
    int64_t t0, t1;

    CHECK_RES(macq(keys, 3, TOK_A, 5000, &m), BACKEND_OK);
    CHECK_RES(rel(keys[1], TOK_A), BACKEND_OK);
    CHECK_RES(mren(keys, 3, TOK_A, 20000, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(r.bad, 1);
    CHECK_MSG(ttl_left(keys[0]) <= 5000, "key 0 renewed");
    CHECK_MSG(ttl_left(keys[2]) <= 5000, "key 2 renewed");
    CHECK_RES(acq(keys[1], TOK_B, 5000, &g), BACKEND_OK);
    CHECK_RES(mren(keys, 3, TOK_A, 20000, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(r.bad, 1);
    CHECK_MSG(ttl_left(keys[0]) <= 5000, "key 0 renewed");
    CHECK_MSG(ttl_left(keys[1]) <= 5000, "key 1 renewed");
    CHECK_MSG(ttl_left(keys[2]) <= 5000, "key 2 renewed");
    /* the first in req order decides */
    CHECK_RES(rel(keys[2], TOK_A), BACKEND_OK);
    CHECK_RES(mren(rev, 3, TOK_A, 20000, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(r.bad, 0);
    CHECK_RES(mren(keys, 3, TOK_A, 20000, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(r.bad, 1);
    CHECK_MSG(ttl_left(keys[0]) <= 5000, "key 0 renewed");
    CHECK_RES(rel(keys[1], TOK_B), BACKEND_OK);
    /* held by the token again: renewed, fences kept */
    CHECK_RES(macq(keys + 1, 2, TOK_A, 5000, &r), BACKEND_OK);
    t0 = clock_wall_ms();
    CHECK_RES(mren(keys, 3, TOK_A, 20000, &r), BACKEND_OK);
    t1 = clock_wall_ms();
    CHECK_EQ_U64(r.fences[0], m.fences[0]);
    CHECK_TTL(r.ttl_ms, 20000);
    CHECK_NEAR(r.expires_at_ms, t0 + 20000, t1 + 20000);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(ttl_left(keys[i]) > 5000, "key %d not renewed", i);
    CHECK_RES(mrel(keys, 3, TOK_A, &r), BACKEND_OK);
}

/* Renew with ttl 0 keeps each key's own last TTL (the answer gives the
 * least); hold counts stay. */
static void test_multi_renew_ttl_zero_keeps_each_ttl(void)
{
    static const char *const keys[] = { "multi/ttl0/1", "multi/ttl0/2" };
    struct lock_multi_grant m, r;
    struct lock_grant g;
    struct lock_info info;
    uint64_t t;

    CHECK_RES(macq(keys, 2, TOK_A, 3000, &m), BACKEND_OK);
    CHECK_RES(ren(keys[1], TOK_A, 9000, &g), BACKEND_OK);
    CHECK_RES(reenter(keys[1], TOK_A, &g), BACKEND_OK);
    check_sleep_ms(800); /* a renew that moved nothing shows */
    CHECK_RES(mren(keys, 2, TOK_A, 0, &r), BACKEND_OK);
    CHECK_TTL(r.ttl_ms, 3000);
    CHECK_EQ_U64(r.fences[0], m.fences[0]);
    CHECK_EQ_U64(r.fences[1], m.fences[1]);
    t = ttl_left(keys[0]);
    CHECK_MSG(t > 3000 - 400 && t <= 3000, "key 0 ttl %llu",
              (unsigned long long)t);
    t = ttl_left(keys[1]);
    CHECK_MSG(t > 9000 - 400 && t <= 9000, "key 1 ttl %llu",
              (unsigned long long)t);
    CHECK_RES(insp(keys[1], &info), BACKEND_OK);
    CHECK_EQ_INT(info.holds, 2);
    CHECK_RES(mrel(keys, 2, TOK_A, &r), BACKEND_OK);
    CHECK_FLAGS(r.released, ((bool[]){ true, true }), 2, "released");
}

/* Release gives back every hold of the token on the keys it holds, and
 * leaves the others alone; a waiter on a released key hears of it. */
static void test_multi_release_only_what_the_token_holds(void)
{
    static const char *const keys[] = { "multi/rel/1", "multi/rel/2",
                                        "multi/rel/3", "multi/rel/4" };
    static const bool want[] = { true, true, false, false };
    struct lock_waiter w = new_waiter();
    struct lock_multi_grant m;
    struct lock_grant g, h;
    struct lock_info info;

    CHECK_RES(macq(keys, 2, TOK_A, 5000, &m), BACKEND_OK);
    CHECK_RES(reenter(keys[0], TOK_A, &g), BACKEND_OK);
    CHECK_RES(acq(keys[2], TOK_B, 5000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, keys[1], TOK_C, &w, &h), BACKEND_HELD);
    notes_watch(keys[1], strlen(keys[1]));
    CHECK_RES(mrel(keys, 4, TOK_A, &m), BACKEND_OK);
    CHECK_FLAGS(m.released, want, 4, "released");
    CHECK_MSG(notes_watched(1000) >= 1, "no notify for a released key in 1 s");
    notes_watch("", 0);
    CHECK_RES(insp(keys[0], &info), BACKEND_NOT_FOUND); /* both holds */
    CHECK_RES(insp(keys[2], &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK_RES(mrel(keys, 4, TOK_A, &m), BACKEND_NOT_FOUND);
    CHECK_RES(acq_w(cur->be, keys[1], TOK_C, &w, &h), BACKEND_OK);
    CHECK_RES(rel(keys[1], TOK_C), BACKEND_OK);
    CHECK_RES(rel(keys[2], TOK_B), BACKEND_OK);
    CHECK_RES(mrel(keys, 4, TOK_B, &m), BACKEND_NOT_FOUND);
    backend_cancel_wait(cur->be, keys[1], strlen(keys[1]), &w); /* failure */
}

/* A key a multi-key acquire was refused for is heard of when its holder
 * releases it: the service's multi-key waiter retries on that. */
static void test_multi_held_key_release_notifies(void)
{
    static const char *const keys[] = { "multi/hear/1", "multi/hear/2" };
    struct lock_multi_grant m;
    struct lock_grant g;

    CHECK_RES(acq(keys[1], TOK_B, 10000, &g), BACKEND_OK);
    CHECK_RES(macq(keys, 2, TOK_A, 5000, &m), BACKEND_HELD);
    notes_watch(keys[1], strlen(keys[1]));
    CHECK_RES(rel(keys[1], TOK_B), BACKEND_OK);
    CHECK_MSG(notes_watched(1000) >= 1, "no notify for the key in 1 s");
    notes_watch("", 0);
    CHECK_RES(macq(keys, 2, TOK_A, 5000, &m), BACKEND_OK);
    CHECK_RES(mrel(keys, 2, TOK_A, &m), BACKEND_OK);
}

/* A try-once multi-key acquire never goes before a waiter queued in the
 * store, and takes none of the keys. */
static void test_multi_never_passes_a_queued_waiter(void)
{
    static const char *const keys[] = { "multi/queue/1", "multi/queue/2" };
    struct lock_waiter w = new_waiter();
    struct lock_multi_grant m;
    struct lock_grant g;
    struct lock_info info;

    if (!(cur->caps & BACKEND_CAP_QUEUE)) {
        skip_case("no BACKEND_CAP_QUEUE");
        return;
    }
    CHECK_RES(acq(keys[1], TOK_B, 10000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, keys[1], TOK_C, &w, &g), BACKEND_HELD);
    CHECK_RES(rel(keys[1], TOK_B), BACKEND_OK);
    /* free, but C waits for it */
    CHECK_RES(macq(keys, 2, TOK_A, 5000, &m), BACKEND_HELD);
    CHECK_FLAGS(m.held, ((bool[]){ false, true }), 2, "held");
    CHECK_RES(insp(keys[0], &info), BACKEND_NOT_FOUND);
    CHECK_RES(acq_w(cur->be, keys[1], TOK_C, &w, &g), BACKEND_OK);
    CHECK_RES(rel(keys[1], TOK_C), BACKEND_OK);
    CHECK_RES(macq(keys, 2, TOK_A, 5000, &m), BACKEND_OK);
    CHECK_RES(mrel(keys, 2, TOK_A, &m), BACKEND_OK);
    backend_cancel_wait(cur->be, keys[1], strlen(keys[1]), &w); /* failure */
}

/* A key held shared counts as held. */
static void test_multi_shared_holder_counts_as_held(void)
{
    static const char *const keys[] = { "multi/shared/1", "multi/shared/2" };
    struct lock_multi_grant m;
    struct lock_grant g;

    CHECK_RES(acq_sh(keys[0], TOK_B, 0, &g), BACKEND_OK);
    CHECK_RES(macq(keys, 2, TOK_A, 5000, &m), BACKEND_HELD);
    CHECK_FLAGS(m.held, ((bool[]){ true, false }), 2, "held");
    CHECK(m.retry_ms > 0 && m.retry_ms <= 10000);
    check_free(keys[1]);
    CHECK_RES(acq_sh(keys[0], TOK_C, 0, &g), BACKEND_OK); /* still shared */
    CHECK_RES(rel(keys[0], TOK_B), BACKEND_OK);
    CHECK_RES(rel(keys[0], TOK_C), BACKEND_OK);
    CHECK_RES(macq(keys, 2, TOK_A, 5000, &m), BACKEND_OK);
    CHECK_RES(mrel(keys, 2, TOK_A, &m), BACKEND_OK);
}

/* Holders whose TTL passed count as gone, for the multi grant and for
 * its own keys afterwards. */
static void test_multi_expired_holders_are_free(void)
{
    static const char *const keys[] = { "multi/expiry/1", "multi/expiry/2",
                                        "multi/expiry/3" };
    struct lock_req sh = { .key = keys[2],
                           .key_len = strlen(keys[2]),
                           .token = TOK_C,
                           .ttl_ms = SHORT_TTL_MS,
                           .mode = LOCK_SHARED };
    struct lock_multi_grant m, r;
    struct lock_grant g, h;

    CHECK_RES(acq(keys[0], TOK_B, SHORT_TTL_MS, &g), BACKEND_OK);
    CHECK_RES(backend_acquire(cur->be, &sh, &h), BACKEND_OK);
    CHECK_RES(macq(keys, 3, TOK_A, 5000, &m), BACKEND_HELD);
    CHECK_FLAGS(m.held, ((bool[]){ true, false, true }), 3, "held");
    check_sleep_ms(PAST_TTL_MS);
    CHECK_RES(macq(keys, 3, TOK_A, SHORT_TTL_MS, &m), BACKEND_OK);
    CHECK(m.fences[0] > g.fence);
    CHECK(m.fences[2] > h.fence);
    CHECK_RES(acq(keys[1], TOK_B, 5000, &g), BACKEND_HELD);
    check_sleep_ms(PAST_TTL_MS);
    CHECK_RES(mren(keys, 3, TOK_A, 5000, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(r.bad, 0);
    CHECK_RES(mrel(keys, 3, TOK_A, &r), BACKEND_NOT_FOUND);
    CHECK_RES(acq(keys[1], TOK_B, 5000, &g), BACKEND_OK);
    CHECK(g.fence > m.fences[1]);
    CHECK_RES(rel(keys[1], TOK_B), BACKEND_OK);
}

/* The wrappers refuse a list the contract does not allow, on every op,
 * and the most keys allowed work. */
static void test_multi_bad_lists_are_invalid(void)
{
    static char names[LOCK_MULTI_MAX + 1][24];
    const char *many[LOCK_MULTI_MAX + 1];
    const char *dup[] = { "multi/bad/1", "multi/bad/2", "multi/bad/1" };
    const char *empty[] = { "multi/bad/1", "" };
    const char *ctl[] = { "multi/bad/1", "multi/bad/\x01" };
    struct lock_multi_grant m;
    struct lock_grant g;
    int nrel = 0;

    if (!multi_ops_present())
        return;
    for (size_t i = 0; i <= LOCK_MULTI_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "multi/bad/n%zu", i);
        many[i] = names[i];
    }
    for (int op = MULTI_ACQUIRE; op <= MULTI_RELEASE; op++) {
        enum multi_op o = (enum multi_op)op;
        CHECK_RES(multi_on(cur->be, o, many, 0, TOK_A, 5000, &m),
                  BACKEND_INVALID);
        CHECK_RES(
            multi_on(cur->be, o, many, LOCK_MULTI_MAX + 1, TOK_A, 5000, &m),
            BACKEND_INVALID);
        CHECK_RES(multi_on(cur->be, o, dup, 3, TOK_A, 5000, &m),
                  BACKEND_INVALID);
        CHECK_RES(multi_on(cur->be, o, empty, 2, TOK_A, 5000, &m),
                  BACKEND_INVALID);
        CHECK_RES(multi_on(cur->be, o, ctl, 2, TOK_A, 5000, &m),
                  BACKEND_INVALID);
    }
    check_free(dup[0]);
    check_free(many[0]);
    CHECK_RES(macq(many, LOCK_MULTI_MAX, TOK_A, 10000, &m), BACKEND_OK);
    CHECK_RES(acq(many[LOCK_MULTI_MAX - 1], TOK_B, 5000, &g), BACKEND_HELD);
    CHECK_RES(mren(many, LOCK_MULTI_MAX, TOK_A, 0, &m), BACKEND_OK);
    CHECK_RES(mrel(many, LOCK_MULTI_MAX, TOK_A, &m), BACKEND_OK);
    for (size_t i = 0; i < LOCK_MULTI_MAX; i++)
        nrel += m.released[i];
    CHECK_EQ_INT(nrel, LOCK_MULTI_MAX);
    check_free(many[LOCK_MULTI_MAX - 1]);
}

/* ---- threads: multi-key and single-key grants on overlapping keys ---- */

#define MT_KEYS   6
#define MT_ROUNDS 12
#define MT_MAXN   4 /* keys of one multi-key acquire: 2..MT_MAXN */

struct mt {
    struct backend *be[2];
    const char *keys[MT_KEYS];
    atomic_int done;    /* threads finished */
    pthread_mutex_t mu; /* guards the fields below */
    int owner[MT_KEYS]; /* thread id + 1 holding the key; 0: free */
    uint64_t last_fence[MT_KEYS];
    int overlaps, fence_errors, errors, starved, grants, multi_grants;
    int64_t t0; /* when the case began: the diagnostics' time base */
};

struct mt_thread {
    struct mt *t;
    int id;
};

/* On a grant of idx[0..n) with fences: record the holder, counting a key
 * somebody else holds by our books and a fence that did not grow. */
static void
mt_took(struct mt *t, int id, const int *idx, size_t n, const uint64_t *fences)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        if (t->owner[idx[i]] != 0)
            t->overlaps++;
        t->owner[idx[i]] = id + 1;
        if (fences[i] <= t->last_fence[idx[i]])
            t->fence_errors++;
        t->last_fence[idx[i]] = fences[i];
    }
    t->grants++;
    t->multi_grants += n > 1;
    pthread_mutex_unlock(&t->mu);
}

/* Before the release in the store: the keys are ours no more. */
static void mt_giving_back(struct mt *t, int id, const int *idx, size_t n)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        if (t->owner[idx[i]] != id + 1)
            t->overlaps++;
        t->owner[idx[i]] = 0;
    }
    pthread_mutex_unlock(&t->mu);
}

static void mt_count(struct mt *t, int *field)
{
    pthread_mutex_lock(&t->mu);
    (*field)++;
    pthread_mutex_unlock(&t->mu);
}

/* Pick n (1..MT_MAXN) distinct keys in random order into idx, keys. */
static size_t mt_pick(struct mt *t, unsigned *seed, int *idx, const char **keys)
{
    int all[MT_KEYS];
    size_t n = rand_r(seed) % 3 == 0 ? 1 : 2 + rand_r(seed) % (MT_MAXN - 1);

    for (int i = 0; i < MT_KEYS; i++)
        all[i] = i;
    for (size_t i = 0; i < n; i++) { /* a partial Fisher-Yates */
        size_t j = i + (size_t)rand_r(seed) % (MT_KEYS - i);
        int x = all[i];
        all[i] = all[j];
        all[j] = x;
        idx[i] = all[i];
        keys[i] = t->keys[all[i]];
    }
    return n;
}

static const char *const mt_op_names[] = { "acquire", "multi acquire",
                                           "multi renew", "release",
                                           "multi release" };

/* An op answered neither OK nor (acquiring) HELD: count it, and say which
 * op, what it answered and on which keys. */
static void mt_erred(struct mt *t,
                     int id,
                     int op,
                     enum backend_result r,
                     const char *const *keys,
                     size_t n)
{
    char list[MT_MAXN * 16] = "";

    for (size_t i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                 i > 0 ? " " : "", keys[i]);
    mt_count(t, &t->errors);
    printf("  +%lld ms thread %d: %s of [%s] answered %s\n",
           (long long)(check_mono_ms() - t->t0), id, mt_op_names[op], list,
           backend_result_str(r));
    fflush(stdout);
}

/* A thread gave up on keys after retrying HELD: what the store says of
 * each of them now. */
static void mt_stuck(
    struct mt *t, int id, struct backend *be, const char *const *keys, size_t n)
{
    printf("  +%lld ms thread %d gave up on %zu key(s):\n",
           (long long)(check_mono_ms() - t->t0), id, n);
    for (size_t i = 0; i < n; i++) {
        struct lock_info in = { 0 };
        enum backend_result r =
            backend_inspect(be, keys[i], strlen(keys[i]), &in);
        printf("    %s: %s, fence %llu, ttl left %llu ms, holders %u\n",
               keys[i], backend_result_str(r), (unsigned long long)in.fence,
               (unsigned long long)in.ttl_ms, in.holder_count);
        lock_info_clear(&in);
    }
    fflush(stdout);
}

/* One round: take the keys (retrying HELD), check and give them back. */
static int mt_round(
    struct mt *t, int id, struct backend *be, unsigned *seed, const char *tok)
{
    int idx[MT_MAXN];
    const char *keys[MT_MAXN];
    size_t n = mt_pick(t, seed, idx, keys);
    struct lock_multi_grant m;
    struct lock_grant g;
    enum backend_result r = BACKEND_HELD;
    int64_t give_up = check_mono_ms() + 30000;

    while (check_mono_ms() < give_up) {
        if (n == 1)
            r = acq_full(be, keys[0], strlen(keys[0]), tok, NULL, 10000, NULL,
                         &g);
        else
            r = multi_on(be, MULTI_ACQUIRE, keys, n, tok, 10000, &m);
        if (r == BACKEND_OK)
            break;
        if (r != BACKEND_HELD) {
            mt_erred(t, id, n == 1 ? 0 : 1, r, keys, n);
            return -1;
        }
        usleep(200 + (unsigned)rand_r(seed) % 1000);
    }
    if (r != BACKEND_OK) {
        mt_stuck(t, id, be, keys, n);
        return -1;
    }
    mt_took(t, id, idx, n, n == 1 ? &g.fence : m.fences);
    usleep(300);
    if (n > 1 &&
        (r = multi_on(be, MULTI_RENEW, keys, n, tok, 0, &m)) != BACKEND_OK)
        mt_erred(t, id, 2, r, keys, n);
    mt_giving_back(t, id, idx, n);
    if (n == 1)
        r = rel_on(be, keys[0], strlen(keys[0]), tok);
    else
        r = multi_on(be, MULTI_RELEASE, keys, n, tok, 0, &m);
    if (r != BACKEND_OK)
        mt_erred(t, id, n == 1 ? 3 : 4, r, keys, n);
    return 0;
}

static void *mt_main(void *arg)
{
    struct mt_thread *me = arg;
    struct mt *t = me->t;
    unsigned seed = (unsigned)me->id * 7919u + 17u;
    char tok[40];

    snprintf(tok, sizeof(tok), "%032x", (unsigned)me->id + 0x3000);
    for (int round = 0; round < MT_ROUNDS; round++) {
        if (mt_round(t, me->id, t->be[me->id % 2], &seed, tok) != 0) {
            mt_count(t, &t->starved);
            break;
        }
    }
    atomic_fetch_add(&t->done, 1);
    return NULL;
}

/* Never two holders of a key, fences growing per key, and every thread
 * done in bounded time (a deadlock leaves them stuck: the run ends there,
 * as closing the store would hang as well). */
static void test_multi_threads_never_overlap_nor_deadlock(void)
{
    static struct mt t;
    static struct mt_thread who[RACE_THREADS];
    static const char *const keys[MT_KEYS] = { "multi/mt/0", "multi/mt/1",
                                               "multi/mt/2", "multi/mt/3",
                                               "multi/mt/4", "multi/mt/5" };
    char err[256];
    struct backend *other = NULL;
    struct backend_hooks hooks = { .notify = notes_hook, .arg = NULL };
    pthread_t th[RACE_THREADS];
    int started = 0;
    int64_t t0 = check_mono_ms();

    if (!multi_ops_present())
        return;
    memset(&t, 0, sizeof(t));
    t.t0 = t0;
    memcpy(t.keys, keys, sizeof(keys));
    pthread_mutex_init(&t.mu, NULL);
    t.be[0] = t.be[1] = cur->be;
    if (strcmp(cur->name, "memory") != 0 &&
        backend_open(cur->url, &hooks, &other, err, sizeof(err)) == BACKEND_OK)
        t.be[1] = other;
    for (int i = 0; i < RACE_THREADS; i++) {
        who[i] = (struct mt_thread){ &t, i };
        if (pthread_create(&th[i], NULL, mt_main, &who[i]) != 0)
            break;
        started++;
    }
    CHECK_EQ_INT(started, RACE_THREADS);
    while (atomic_load(&t.done) < started && check_mono_ms() - t0 < 90000)
        check_sleep_ms(10);
    CHECK_MSG(atomic_load(&t.done) == started, "%d of %d threads stuck",
              started - atomic_load(&t.done), started);
    if (atomic_load(&t.done) < started) {
        /* a deadlock: closing the store would hang too, so stop here */
        printf("FAIL %s: test_multi_threads_never_overlap_nor_deadlock "
               "(threads stuck: the run stops)\n",
               cur->name);
        fflush(stdout);
        _exit(1);
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&t.mu);
    CHECK_EQ_INT(t.overlaps, 0);
    CHECK_EQ_INT(t.fence_errors, 0);
    CHECK_EQ_INT(t.errors, 0);
    CHECK_EQ_INT(t.starved, 0);
    CHECK_EQ_INT(t.grants, started * MT_ROUNDS);
    printf("  %d grants (%d multi-key) on %d threads, %s, %lld ms\n", t.grants,
           t.multi_grants, started,
           other != NULL ? "two handles" : "one handle",
           (long long)(check_mono_ms() - t0));
    backend_close(other);
}

#define CONTRACT_MULTI_CASES                                      \
    CHECK_CASE(test_multi_all_or_nothing),                        \
        CHECK_CASE(test_multi_fences_grow_per_key),               \
        CHECK_CASE(test_multi_keys_are_ordinary_locks),           \
        CHECK_CASE(test_multi_renew_is_all_or_nothing),           \
        CHECK_CASE(test_multi_renew_ttl_zero_keeps_each_ttl),     \
        CHECK_CASE(test_multi_release_only_what_the_token_holds), \
        CHECK_CASE(test_multi_held_key_release_notifies),         \
        CHECK_CASE(test_multi_never_passes_a_queued_waiter),      \
        CHECK_CASE(test_multi_shared_holder_counts_as_held),      \
        CHECK_CASE(test_multi_expired_holders_are_free),          \
        CHECK_CASE(test_multi_bad_lists_are_invalid),             \
        CHECK_CASE(test_multi_threads_never_overlap_nor_deadlock),

#endif /* TESTS_UNIT_CONTRACT_MULTI_H */

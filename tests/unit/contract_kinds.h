/*
 * tests/unit/contract_kinds.h - the lock kinds' part of the contract suite
 * (tests/unit/test_contract.c includes it before its case table): shared
 * mode and limits, one FIFO for both modes, re-entry, the Idempotency-Key,
 * holders expiring one by one, and threads on two handles mixing modes.
 * Every case runs on every adapter through the wrappers.
 */
#ifndef TESTS_UNIT_CONTRACT_KINDS_H
#define TESTS_UNIT_CONTRACT_KINDS_H

#define TOK_E "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
#define TOK_F "ffffffffffffffffffffffffffffffff"

/* any acquire: mode, limit, Idempotency-Key, waiter, on handle be */
static enum backend_result acq_kind(struct backend *be,
                                    const char *key,
                                    const char *tok,
                                    enum lock_mode mode,
                                    uint32_t limit,
                                    const char *idem,
                                    struct lock_waiter *w,
                                    struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = tok,
                            .ttl_ms = 10000,
                            .waiter = w,
                            .mode = mode,
                            .limit = limit,
                            .idem_key = idem };

    return backend_acquire(be, &req, g);
}

/* try-once shared on the main handle */
static enum backend_result
acq_sh(const char *key, const char *tok, uint32_t limit, struct lock_grant *g)
{
    return acq_kind(cur->be, key, tok, LOCK_SHARED, limit, NULL, NULL, g);
}

/* a waiter in mode (shared with limit) on the main handle */
static enum backend_result acq_wm(const char *key,
                                  const char *tok,
                                  enum lock_mode mode,
                                  uint32_t limit,
                                  struct lock_waiter *w,
                                  struct lock_grant *g)
{
    return acq_kind(cur->be, key, tok, mode, limit, NULL, w, g);
}

static enum backend_result
reenter(const char *key, const char *tok, struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .reenter = true
    };

    return backend_renew(cur->be, &req, g);
}

/* give back one hold (or all); *left = the holds left */
static enum backend_result
rel_holds(const char *key, const char *tok, bool all, uint32_t *left)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .all = all
    };
    struct lock_grant g;
    enum backend_result r = backend_release(cur->be, &req, &g);

    *left = g.holds;
    return r;
}

/* inspect, keeping the holders list: lock_info_clear() after */
static enum backend_result insp_keep(const char *key, struct lock_info *i)
{
    return backend_inspect(cur->be, key, strlen(key), i);
}

/* The limit a case takes for a shared key: lim where semaphores are
 * offered, else `served` (0 = no limit, or 1), which a
 * BACKEND_CAP_NO_SEMAPHORE store serves: its cases keep their point with
 * read-write locks or a limit of 1. */
static uint32_t kind_limit(uint32_t lim, uint32_t served)
{
    return (cur->caps & BACKEND_CAP_NO_SEMAPHORE) ? served : lim;
}

static void cancel_all(const char *key, struct lock_waiter *ws, size_t n)
{
    for (size_t i = 0; i < n; i++)
        backend_cancel_wait(cur->be, key, strlen(key), &ws[i]);
}

/* Shared holders up to the limit, then HELD for both modes; the grant
 * bodies and inspect() say so; a freed slot is taken again. Limit 3, or 1
 * where semaphores are not offered. */
static void test_kinds_shared_up_to_the_limit(void)
{
    static const char key[] = "kinds/limit";
    const char *toks[] = { TOK_A, TOK_B, TOK_C };
    const uint32_t n = kind_limit(3, 1), freed = n > 1 ? 1 : 0;
    struct lock_grant g[3], h;
    struct lock_info info;
    uint32_t left;

    for (uint32_t i = 0; i < n; i++) {
        CHECK_RES(acq_sh(key, toks[i], n, &g[i]), BACKEND_OK);
        CHECK_EQ_INT(g[i].mode, LOCK_SHARED);
        CHECK_EQ_INT(g[i].limit, n);
        CHECK_EQ_INT(g[i].holds, 1);
        CHECK(!g[i].replay);
        if (i > 0)
            CHECK_MSG(g[i].fence > g[i - 1].fence, "fence %llu after %llu",
                      (unsigned long long)g[i].fence,
                      (unsigned long long)g[i - 1].fence);
    }
    CHECK_RES(acq_sh(key, TOK_D, n, &h), BACKEND_HELD);
    CHECK_MSG(h.retry_ms > 0 && h.retry_ms <= 10000, "retry_ms %llu",
              (unsigned long long)h.retry_ms);
    CHECK_RES(acq(key, TOK_D, 5000, &h), BACKEND_HELD);
    CHECK_RES(insp_keep(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_SHARED);
    CHECK_EQ_INT(info.limit, n);
    CHECK_EQ_INT(info.holder_count, n);
    CHECK_EQ_INT(info.nholders, n);
    CHECK_EQ_U64(info.fence, g[n - 1].fence);
    CHECK(!info.has_owner);
    for (uint32_t i = 0; i < info.nholders && info.holders != NULL; i++) {
        CHECK_EQ_U64(info.holders[i].fence, g[i].fence);
        CHECK_EQ_INT(info.holders[i].holds, 1);
        CHECK(info.holders[i].ttl_ms >= 1 && info.holders[i].ttl_ms <= 10000);
    }
    lock_info_clear(&info);
    CHECK_RES(rel_holds(key, toks[freed], false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_RES(acq_sh(key, TOK_D, n, &h), BACKEND_OK);
    CHECK(h.fence > g[n - 1].fence);
    CHECK_RES(acq_sh(key, TOK_E, n, &h), BACKEND_HELD);
    for (uint32_t i = 0; i < n; i++)
        if (i != freed)
            CHECK_RES(rel(key, toks[i]), BACKEND_OK);
    CHECK_RES(rel(key, TOK_D), BACKEND_OK);
    CHECK_RES(insp(key, &info), BACKEND_NOT_FOUND);
}

/* A 409 for a shared key says when its first holder's TTL passes: the
 * earliest expiry, not the latest. Where semaphores are not offered, two
 * readers (no limit) and the writer's 409 only. */
static void test_kinds_retry_hint_is_the_first_expiry(void)
{
    static const char key[] = "kinds/hint";
    const uint32_t lim = kind_limit(2, 0);
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = TOK_A,
                            .ttl_ms = 2000,
                            .mode = LOCK_SHARED,
                            .limit = lim };
    struct lock_grant g;

    CHECK_RES(acq_sh(key, TOK_B, lim, &g), BACKEND_OK); /* 10 s */
    CHECK_RES(backend_acquire(cur->be, &req, &g), BACKEND_OK);
    if (lim > 0) {
        CHECK_RES(acq_sh(key, TOK_C, lim, &g), BACKEND_HELD);
        CHECK_MSG(g.retry_ms >= 1 && g.retry_ms <= 2000, "shared retry_ms %llu",
                  (unsigned long long)g.retry_ms);
    }
    CHECK_RES(acq(key, TOK_C, 5000, &g), BACKEND_HELD);
    CHECK_MSG(g.retry_ms >= 1 && g.retry_ms <= 2000, "exclusive retry_ms %llu",
              (unsigned long long)g.retry_ms);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
}

/* Readers without a limit share; a writer waits for all of them, and
 * readers wait for a writer. */
static void test_kinds_readers_and_a_writer_exclude(void)
{
    static const char key[] = "kinds/rw";
    const char *toks[] = { TOK_A, TOK_B, TOK_C, TOK_D, TOK_E };
    struct lock_grant g;
    struct lock_info info;

    for (int i = 0; i < 5; i++) {
        CHECK_RES(acq_sh(key, toks[i], 0, &g), BACKEND_OK);
        CHECK_EQ_INT(g.limit, 0);
    }
    CHECK_RES(acq(key, TOK_F, 5000, &g), BACKEND_HELD);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 5);
    CHECK_EQ_INT(info.limit, 0);
    for (int i = 0; i < 4; i++) {
        CHECK_RES(rel(key, toks[i]), BACKEND_OK);
        CHECK_RES(acq(key, TOK_F, 5000, &g), BACKEND_HELD);
    }
    CHECK_RES(rel(key, TOK_E), BACKEND_OK);
    CHECK_RES(acq(key, TOK_F, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.mode, LOCK_EXCLUSIVE);
    CHECK_RES(acq_sh(key, TOK_A, 0, &g), BACKEND_HELD);
    CHECK_RES(acq_sh(key, TOK_A, kind_limit(7, 1), &g), BACKEND_HELD);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_INT(info.holds, 1);
    CHECK_RES(rel(key, TOK_F), BACKEND_OK);
}

/* The limit is the key's while anyone holds it: another one is refused at
 * once, waiter or not, full or not; once free, any limit goes. Where
 * semaphores are not offered: 1 against 0 (no limit) and back. */
static void test_kinds_limit_mismatch(void)
{
    static const char key[] = "kinds/mismatch";
    const uint32_t lim = kind_limit(2, 1), num = kind_limit(4, 1);
    struct lock_waiter w = new_waiter();
    struct lock_grant g;
    struct lock_info info;

    CHECK_RES(acq_sh(key, TOK_A, lim, &g), BACKEND_OK);
    CHECK_RES(acq_sh(key, TOK_B, kind_limit(3, 0), &g), BACKEND_LIMIT_MISMATCH);
    CHECK_RES(acq_sh(key, TOK_B, 0, &g), BACKEND_LIMIT_MISMATCH);
    CHECK_RES(acq_wm(key, TOK_B, LOCK_SHARED, kind_limit(5, 0), &w, &g),
              BACKEND_LIMIT_MISMATCH);
    backend_cancel_wait(cur->be, key, strlen(key), &w);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    if (lim > 1)
        CHECK_RES(acq_sh(key, TOK_B, lim, &g), BACKEND_OK);
    CHECK_RES(acq_sh(key, TOK_C, lim, &g), BACKEND_HELD);
    CHECK_RES(acq_sh(key, TOK_C, kind_limit(9, 0), &g), BACKEND_LIMIT_MISMATCH);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    if (lim > 1)
        CHECK_RES(rel(key, TOK_B), BACKEND_OK);
    /* unlimited readers: a number against none */
    CHECK_RES(acq_sh(key, TOK_A, 0, &g), BACKEND_OK);
    CHECK_RES(acq_sh(key, TOK_B, num, &g), BACKEND_LIMIT_MISMATCH);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_RES(acq_sh(key, TOK_B, num, &g), BACKEND_OK);
    CHECK_EQ_INT(g.limit, num);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
}

/* Re-entry counts holds on the same fence; a release gives back one; all
 * gives back every one; a renew keeps the count. */
static void test_kinds_reentry_counts_holds(void)
{
    static const char key[] = "kinds/reentry";
    struct lock_grant g, r;
    struct lock_info info;
    uint32_t left;

    CHECK_RES(reenter(key, TOK_A, &r), BACKEND_NOT_FOUND);
    CHECK_RES(acq(key, TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.holds, 1);
    CHECK_RES(reenter(key, TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_TTL(r.ttl_ms, 5000); /* the last TTL */
    CHECK_RES(reenter(key, TOK_B, &r), BACKEND_MISMATCH);
    CHECK_RES(ren(key, TOK_A, 7000, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_RES(reenter(key, TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 3);
    CHECK_TTL(r.ttl_ms, 7000);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holds, 3);
    CHECK_RES(rel_holds(key, TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 2);
    CHECK_RES(acq(key, TOK_B, 5000, &r), BACKEND_HELD);
    CHECK_RES(rel_holds(key, TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 1);
    CHECK_RES(rel_holds(key, TOK_B, false, &left), BACKEND_MISMATCH);
    CHECK_RES(rel_holds(key, TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_RES(insp(key, &info), BACKEND_NOT_FOUND);
    CHECK_RES(rel_holds(key, TOK_A, false, &left), BACKEND_NOT_FOUND);
    /* all at once */
    CHECK_RES(acq(key, TOK_A, 5000, &g), BACKEND_OK);
    for (int i = 0; i < 4; i++)
        CHECK_RES(reenter(key, TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 5);
    CHECK_RES(rel_holds(key, TOK_A, true, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_RES(acq(key, TOK_B, 5000, &r), BACKEND_OK);
    CHECK(r.fence > g.fence);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
}

/* A shared holder re-enters on its own; the others keep one hold; the
 * limit counts holders, not holds (readers without a limit where
 * semaphores are not offered). */
static void test_kinds_reentry_of_a_shared_holder(void)
{
    static const char key[] = "kinds/reentry-shared";
    const uint32_t lim = kind_limit(2, 0);
    struct lock_grant g, r;
    struct lock_info info;
    uint32_t left;

    CHECK_RES(acq_sh(key, TOK_A, lim, &g), BACKEND_OK);
    CHECK_RES(acq_sh(key, TOK_B, lim, &g), BACKEND_OK);
    CHECK_RES(reenter(key, TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_INT(r.mode, LOCK_SHARED);
    CHECK_EQ_INT(r.limit, lim);
    CHECK_RES(reenter(key, TOK_C, &r), BACKEND_MISMATCH);
    if (lim > 0) /* holders, not holds */
        CHECK_RES(acq_sh(key, TOK_C, lim, &r), BACKEND_HELD);
    CHECK_RES(insp_keep(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 2);
    if (info.nholders == 2 && info.holders != NULL) {
        CHECK_EQ_INT(info.holders[0].holds, 2);
        CHECK_EQ_INT(info.holders[1].holds, 1);
    } else {
        CHECK_EQ_INT(info.nholders, 2);
    }
    lock_info_clear(&info);
    CHECK_RES(rel_holds(key, TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 1);
    CHECK_RES(rel_holds(key, TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
}

/* One hold short of the cap is fine, the cap itself is refused: checked
 * on memory only (a million round trips elsewhere; the adapters' own
 * programs reach the cap in their stores). */
static void test_kinds_reentry_cap(void)
{
    static const char key[] = "kinds/cap";
    struct lock_grant g, r;
    uint32_t left;

    if (strcmp(cur->name, "memory") != 0) {
        skip_case("a million round trips: in the adapter's own program");
        return;
    }
    CHECK_RES(acq(key, TOK_A, 60000, &g), BACKEND_OK);
    for (uint32_t i = 1; i < LOCK_HOLDS_MAX; i++)
        if (reenter(key, TOK_A, &r) != BACKEND_OK)
            break;
    CHECK_EQ_INT(r.holds, LOCK_HOLDS_MAX);
    CHECK_RES(reenter(key, TOK_A, &r), BACKEND_HOLDS_MAX);
    CHECK_RES(rel_holds(key, TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, LOCK_HOLDS_MAX - 1);
    CHECK_RES(rel_holds(key, TOK_A, true, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
}

/* shared: per holder, and its limit must match (readers without a limit
 * where semaphores are not offered: a new key is one more reader) */
static void test_kinds_idempotent_replay_shared(const char *key)
{
    const uint32_t lim = kind_limit(2, 0);
    struct lock_grant g, r;

    CHECK_RES(acq_kind(cur->be, key, TOK_A, LOCK_SHARED, lim, "s-1", NULL, &g),
              BACKEND_OK);
    CHECK_RES(acq_kind(cur->be, key, TOK_B, LOCK_SHARED, lim, "s-2", NULL, &r),
              BACKEND_OK);
    CHECK_RES(acq_kind(cur->be, key, TOK_C, LOCK_SHARED, lim, "s-1", NULL, &r),
              BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, TOK_A);
    CHECK_EQ_INT(r.limit, lim);
    CHECK_RES(acq_kind(cur->be, key, TOK_C, LOCK_SHARED, kind_limit(3, 1),
                       "s-1", NULL, &r),
              BACKEND_IDEM_CONFLICT);
    if (lim > 0) {
        CHECK_RES(
            acq_kind(cur->be, key, TOK_C, LOCK_SHARED, lim, "s-3", NULL, &r),
            BACKEND_HELD);
    } else {
        CHECK_RES(
            acq_kind(cur->be, key, TOK_C, LOCK_SHARED, lim, "s-3", NULL, &r),
            BACKEND_OK);
        CHECK(!r.replay);
        CHECK_RES(rel(key, TOK_C), BACKEND_OK);
    }
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
}

/* The same Idempotency-Key gets the same live grant again, nothing
 * renewed; another mode or limit is a conflict; after the release it is
 * an ordinary acquire. */
static void test_kinds_idempotent_replay(void)
{
    static const char key[] = "kinds/idem";
    struct lock_grant g, r;
    uint32_t left;

    CHECK_RES(
        acq_kind(cur->be, key, TOK_A, LOCK_EXCLUSIVE, 0, "req-1", NULL, &g),
        BACKEND_OK);
    CHECK(!g.replay);
    check_sleep_ms(30);
    CHECK_RES(
        acq_kind(cur->be, key, TOK_B, LOCK_EXCLUSIVE, 0, "req-1", NULL, &r),
        BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, TOK_A);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_EQ_INT(r.holds, 1);
    CHECK_MSG(r.ttl_ms < 10000 && r.ttl_ms > 5000, "replay ttl_ms %llu",
              (unsigned long long)r.ttl_ms);
    CHECK_RES(acq_kind(cur->be, key, TOK_B, LOCK_SHARED, 0, "req-1", NULL, &r),
              BACKEND_IDEM_CONFLICT);
    CHECK_RES(
        acq_kind(cur->be, key, TOK_B, LOCK_EXCLUSIVE, 0, "req-2", NULL, &r),
        BACKEND_HELD);
    /* B's token never held it */
    CHECK_RES(rel(key, TOK_B), BACKEND_MISMATCH);
    CHECK_RES(rel_holds(key, TOK_A, false, &left), BACKEND_OK);
    CHECK_RES(
        acq_kind(cur->be, key, TOK_C, LOCK_EXCLUSIVE, 0, "req-1", NULL, &r),
        BACKEND_OK);
    CHECK(!r.replay);
    CHECK(r.fence > g.fence);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
    test_kinds_idempotent_replay_shared(key);
}

/* A waiter with a place keeps FIFO across modes: a shared waiter does not
 * overtake an earlier exclusive one, nor does a try-once. */
static void test_kinds_fifo_across_modes(void)
{
    static const char key[] = "kinds/fifo";
    struct lock_waiter w[2] = { new_waiter(), new_waiter() };
    struct lock_grant g;

    if (!(cur->caps & BACKEND_CAP_QUEUE)) {
        skip_case("no BACKEND_CAP_QUEUE");
        return;
    }
    CHECK_RES(acq_sh(key, TOK_A, 0, &g), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_B, LOCK_EXCLUSIVE, 0, &w[0], &g), BACKEND_HELD);
    /* compatible with the holder, but the writer is first */
    CHECK_RES(acq_wm(key, TOK_C, LOCK_SHARED, 0, &w[1], &g), BACKEND_HELD);
    CHECK_RES(acq_sh(key, TOK_D, 0, &g), BACKEND_HELD);
    CHECK(g.behind);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_C, LOCK_SHARED, 0, &w[1], &g), BACKEND_HELD);
    CHECK_RES(acq_wm(key, TOK_B, LOCK_EXCLUSIVE, 0, &w[0], &g), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_C, LOCK_SHARED, 0, &w[1], &g), BACKEND_HELD);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_C, LOCK_SHARED, 0, &w[1], &g), BACKEND_OK);
    CHECK(w[1].be_data == NULL);
    /* nobody waits: a try-once reader joins */
    CHECK_RES(acq_sh(key, TOK_D, 0, &g), BACKEND_OK);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
    CHECK_RES(rel(key, TOK_D), BACKEND_OK);
    cancel_all(key, w, 2);
}

/* Shared waiters behind the head are granted with it, up to the limit;
 * an exclusive waiter stops the run. */
static void test_kinds_shared_waiters_go_together(void)
{
    static const char key[] = "kinds/together";
    struct lock_waiter w[4] = { new_waiter(), new_waiter(), new_waiter(),
                                new_waiter() };
    struct lock_grant g;

    if (!(cur->caps & BACKEND_CAP_QUEUE)) {
        skip_case("no BACKEND_CAP_QUEUE");
        return;
    }
    if (cur->caps & BACKEND_CAP_NO_SEMAPHORE) {
        skip_case("a limit above 1: BACKEND_CAP_NO_SEMAPHORE");
        return;
    }
    CHECK_RES(acq(key, TOK_A, 10000, &g), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_B, LOCK_SHARED, 2, &w[0], &g), BACKEND_HELD);
    CHECK_RES(acq_wm(key, TOK_C, LOCK_SHARED, 2, &w[1], &g), BACKEND_HELD);
    CHECK_RES(acq_wm(key, TOK_D, LOCK_SHARED, 2, &w[2], &g), BACKEND_HELD);
    CHECK_RES(acq_wm(key, TOK_E, LOCK_EXCLUSIVE, 0, &w[3], &g), BACKEND_HELD);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    /* the second reader may go before the first: room is kept for it */
    CHECK_RES(acq_wm(key, TOK_C, LOCK_SHARED, 2, &w[1], &g), BACKEND_OK);
    /* the third would take the first's place under the limit */
    CHECK_RES(acq_wm(key, TOK_D, LOCK_SHARED, 2, &w[2], &g), BACKEND_HELD);
    CHECK_RES(acq_wm(key, TOK_B, LOCK_SHARED, 2, &w[0], &g), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_D, LOCK_SHARED, 2, &w[2], &g), BACKEND_HELD);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_E, LOCK_EXCLUSIVE, 0, &w[3], &g), BACKEND_HELD);
    CHECK_RES(acq_wm(key, TOK_D, LOCK_SHARED, 2, &w[2], &g), BACKEND_OK);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
    CHECK_RES(rel(key, TOK_D), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_E, LOCK_EXCLUSIVE, 0, &w[3], &g), BACKEND_OK);
    CHECK_RES(rel(key, TOK_E), BACKEND_OK);
    cancel_all(key, w, 4);
}

/* A holder leaving a full semaphore (of 2, or of 1 where semaphores are
 * not offered) is heard by the waiter. */
static void test_kinds_release_of_a_holder_notifies(void)
{
    static const char key[] = "kinds/notify";
    const uint32_t lim = kind_limit(2, 1);
    struct lock_waiter w = new_waiter();
    struct lock_grant g;

    CHECK_RES(acq_sh(key, TOK_A, lim, &g), BACKEND_OK);
    if (lim > 1)
        CHECK_RES(acq_sh(key, TOK_B, lim, &g), BACKEND_OK);
    CHECK_RES(acq_wm(key, TOK_C, LOCK_SHARED, lim, &w, &g), BACKEND_HELD);
    notes_watch(key, strlen(key));
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_MSG(notes_watched(1000) >= 1, "no notify for the key in 1 s");
    notes_watch("", 0);
    CHECK_RES(acq_wm(key, TOK_C, LOCK_SHARED, lim, &w, &g), BACKEND_OK);
    if (lim > 1)
        CHECK_RES(rel(key, TOK_B), BACKEND_OK);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
    cancel_all(key, &w, 1);
}

/* Each holder expires at its own TTL; the others stay. */
static void test_kinds_holders_expire_one_by_one(void)
{
    static const char key[] = "kinds/expire";
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = TOK_A,
                            .ttl_ms = SHORT_TTL_MS,
                            .mode = LOCK_SHARED };
    struct lock_grant g, h;
    struct lock_info info;

    CHECK_RES(backend_acquire(cur->be, &req, &g), BACKEND_OK);
    CHECK_RES(acq_sh(key, TOK_B, 0, &h), BACKEND_OK);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 2);
    check_sleep_ms(PAST_TTL_MS);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_U64(info.fence, h.fence);
    CHECK_RES(ren(key, TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_RES(ren(key, TOK_B, 0, &g), BACKEND_OK);
    CHECK_RES(acq(key, TOK_C, 5000, &g), BACKEND_HELD);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
    CHECK_RES(acq(key, TOK_C, 5000, &g), BACKEND_OK);
    CHECK(g.fence > h.fence);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
}

/* ---- threads mixing modes on two handles ---- */

#define MIX_LIMIT 3

struct mix {
    const char *key;
    uint32_t limit; /* MIX_LIMIT, or 0 (no limit) without semaphores */
    struct backend *be[2];
    atomic_int excl, shared; /* holders now, by our own count */
    atomic_int overlaps, errors, grants, shared_grants;
};

struct mixer {
    struct mix *m;
    int id;
};

static void *mix_thread(void *arg)
{
    struct mixer *me = arg;
    struct mix *m = me->m;
    struct backend *be = m->be[me->id % 2];
    char tok[40];

    snprintf(tok, sizeof(tok), "%032x", (unsigned)me->id + 0x2000);
    for (int round = 0; round < RACE_ROUNDS; round++) {
        bool shared = (me->id + round) % 3 != 0;
        struct lock_grant g;
        enum backend_result res = BACKEND_HELD;
        int64_t give_up = check_mono_ms() + 30000;

        while (check_mono_ms() < give_up) {
            res =
                acq_kind(be, m->key, tok, shared ? LOCK_SHARED : LOCK_EXCLUSIVE,
                         shared ? m->limit : 0, NULL, NULL, &g);
            if (res == BACKEND_OK)
                break;
            if (res != BACKEND_HELD)
                atomic_fetch_add(&m->errors, 1);
            check_sleep_ms(1);
        }
        if (res != BACKEND_OK) {
            atomic_fetch_add(&m->errors, 1);
            return NULL;
        }
        atomic_fetch_add(&m->grants, 1);
        if (shared) {
            int before = atomic_fetch_add(&m->shared, 1);

            atomic_fetch_add(&m->shared_grants, 1);
            if ((m->limit > 0 && before >= (int)m->limit) ||
                atomic_load(&m->excl) != 0)
                atomic_fetch_add(&m->overlaps, 1);
        } else if (atomic_fetch_add(&m->excl, 1) != 0 ||
                   atomic_load(&m->shared) != 0) {
            atomic_fetch_add(&m->overlaps, 1);
        }
        usleep(500);
        atomic_fetch_sub(shared ? &m->shared : &m->excl, 1);
        if (rel_on(be, m->key, strlen(m->key), tok) != BACKEND_OK)
            atomic_fetch_add(&m->errors, 1);
    }
    return NULL;
}

static void test_kinds_threads_mixing_modes(void)
{
    char err[256];
    struct backend *other = NULL;
    struct backend_hooks hooks = { .notify = notes_hook, .arg = NULL };
    struct mix m = { .key = "kinds/mix", .limit = kind_limit(MIX_LIMIT, 0) };
    struct mixer who[RACE_THREADS];
    pthread_t t[RACE_THREADS];
    int started = 0;

    m.be[0] = m.be[1] = cur->be;
    if (strcmp(cur->name, "memory") != 0 &&
        backend_open(cur->url, &hooks, &other, err, sizeof(err)) == BACKEND_OK)
        m.be[1] = other;
    for (int i = 0; i < RACE_THREADS; i++) {
        who[i] = (struct mixer){ &m, i };
        if (pthread_create(&t[i], NULL, mix_thread, &who[i]) != 0)
            break;
        started++;
    }
    CHECK_EQ_INT(started, RACE_THREADS);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_INT(atomic_load(&m.overlaps), 0);
    CHECK_EQ_INT(atomic_load(&m.errors), 0);
    CHECK_EQ_INT(atomic_load(&m.grants), started * RACE_ROUNDS);
    printf("  %d grants (%d shared) on %d threads, %s\n",
           atomic_load(&m.grants), atomic_load(&m.shared_grants), started,
           other != NULL ? "two handles" : "one handle");
    backend_close(other);
}

#define CONTRACT_KINDS_CASES                                   \
    CHECK_CASE(test_kinds_shared_up_to_the_limit),             \
        CHECK_CASE(test_kinds_retry_hint_is_the_first_expiry), \
        CHECK_CASE(test_kinds_readers_and_a_writer_exclude),   \
        CHECK_CASE(test_kinds_limit_mismatch),                 \
        CHECK_CASE(test_kinds_reentry_counts_holds),           \
        CHECK_CASE(test_kinds_reentry_of_a_shared_holder),     \
        CHECK_CASE(test_kinds_reentry_cap),                    \
        CHECK_CASE(test_kinds_idempotent_replay),              \
        CHECK_CASE(test_kinds_fifo_across_modes),              \
        CHECK_CASE(test_kinds_shared_waiters_go_together),     \
        CHECK_CASE(test_kinds_release_of_a_holder_notifies),   \
        CHECK_CASE(test_kinds_holders_expire_one_by_one),      \
        CHECK_CASE(test_kinds_threads_mixing_modes),

#endif /* TESTS_UNIT_CONTRACT_KINDS_H */

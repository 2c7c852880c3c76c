/*
 * tests/unit/contract_ops.h - the operator part of the contract suite
 * (tests/unit/test_contract.c includes it, after contract_kinds.h, before
 * its case table): list() of the held keys (byte order, prefix, pages
 * through resume, what is left out, shared keys summed up) and
 * force_release() (every holder gone, fences kept growing, a waiter let
 * in), and the grant times (expired_fence on a takeover, granted_at_ms on
 * the last release). Every case runs on every adapter through the
 * wrappers, each under its own key prefix (the store is shared by the
 * cases); a page may hold fewer keys than its limit with more set (an
 * adapter's budget of skipped candidates), so paging loops follow resume.
 */
#ifndef TESTS_UNIT_CONTRACT_OPS_H
#define TESTS_UNIT_CONTRACT_OPS_H

#define OPS_MAX_KEYS  300 /* keys one case collects by paging */
#define OPS_MAX_PAGES 1000

/* One page of the keys under prefix after `after` (NULL: from the first). */
static enum backend_result lst(const char *prefix,
                               const char *after,
                               uint32_t limit,
                               struct lock_list *out)
{
    struct lock_list_req req = { .prefix = prefix,
                                 .prefix_len = strlen(prefix),
                                 .after = after,
                                 .after_len = after != NULL ? strlen(after) : 0,
                                 .limit = limit };

    return backend_list(cur->be, &req, out);
}

/* Every page under prefix, limit at a time, following resume: the keys
 * in keys[0..*n) (each malloc'ed), checking each page's rules on the way
 * (within the limit, ascending across pages, under the prefix, resume as
 * backend.h says); entries, if not NULL, gets the entries themselves.
 * Returns the pages read, or -1 if the listing did not end. */
static int list_all(const char *prefix,
                    uint32_t limit,
                    char **keys,
                    struct lock_entry *entries,
                    size_t *n)
{
    struct lock_list page = { 0 };
    char after[LOCK_KEY_MAX + 1] = "";
    bool have_after = false;
    int pages = 0;

    page.entries = calloc(limit, sizeof(*page.entries));
    *n = 0;
    if (page.entries == NULL)
        return -1;
    for (; pages < OPS_MAX_PAGES; pages++) {
        enum backend_result r =
            lst(prefix, have_after ? after : NULL, limit, &page);
        CHECK_RES(r, BACKEND_OK);
        if (r != BACKEND_OK)
            break;
        CHECK_MSG(page.n <= limit, "page of %zu, limit %u", page.n, limit);
        for (size_t i = 0; i < page.n && i < limit; i++) {
            const struct lock_entry *e = &page.entries[i];
            CHECK_MSG(e->key_len == strlen(e->key) &&
                          strncmp(e->key, prefix, strlen(prefix)) == 0,
                      "key \"%.60s\" not under \"%s\"", e->key, prefix);
            if (*n > 0 || have_after)
                CHECK_MSG(strcmp(e->key, *n > 0 ? keys[*n - 1] : after) > 0,
                          "\"%.60s\" does not follow \"%.60s\"", e->key,
                          *n > 0 ? keys[*n - 1] : after);
            if (*n < OPS_MAX_KEYS) {
                if (entries != NULL)
                    entries[*n] = *e;
                keys[(*n)++] = strdup(e->key);
            }
        }
        if (!page.more)
            break;
        if (page.n == limit)
            CHECK_STR_EQ(page.resume, page.entries[limit - 1].key);
        CHECK_MSG(!have_after || strcmp(page.resume, after) > 0,
                  "resume \"%.60s\" does not move past \"%.60s\"", page.resume,
                  after);
        if (have_after && strcmp(page.resume, after) <= 0)
            break;
        memcpy(after, page.resume, page.resume_len + 1);
        have_after = true;
    }
    free(page.entries);
    CHECK_MSG(pages < OPS_MAX_PAGES, "no last page after %d", pages);
    return pages < OPS_MAX_PAGES ? pages + 1 : -1;
}

static void free_keys(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
}

/* keys[0..n) is exactly want[0..nwant) */
static void
check_keys(char **keys, size_t n, const char *const *want, size_t nwant)
{
    CHECK_MSG(n == nwant, "%zu keys listed, %zu expected", n, nwant);
    for (size_t i = 0; i < n && i < nwant; i++)
        CHECK_MSG(strcmp(keys[i], want[i]) == 0,
                  "key %zu: \"%.60s\", not \"%s\"", i, keys[i], want[i]);
}

/* Keys come in byte order (not the order granted), under the prefix
 * only, with the summary inspect() gives, the owner shown; after skips
 * to the keys past it, held or not. */
static void test_list_shows_held_keys_in_byte_order(void)
{
    /* byte order: ' ' < '/' < 'B' < 'a' < 0xc3; shorter first */
    static const char *const sorted[] = {
        "ls/",    "ls/ a",  "ls/B",  "ls/a",
        "ls/a b", "ls/a/b", "ls/ab", "ls/\xc3\xa9",
    };
    static const int order[] = { 5, 2, 7, 0, 4, 1, 6, 3 }; /* grant order */
    enum {
        N = sizeof(sorted) / sizeof(sorted[0])
    };
    static const char *const outside[] = { "ls", "lr/x", "lt/", "LS/a" };
    char *keys[OPS_MAX_KEYS];
    struct lock_entry ents[OPS_MAX_KEYS];
    struct lock_grant g[N], h;
    struct lock_list page = { 0 };
    struct lock_entry one[N];
    size_t n = 0;
    int64_t t0 = clock_wall_ms();

    for (int k = 0; k < N; k++) {
        int i = order[k];
        CHECK_RES(acq_full(cur->be, sorted[i], strlen(sorted[i]), TOK_A,
                           i == 3 ? "worker 3" : NULL, 20000, NULL, &g[i]),
                  BACKEND_OK);
    }
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++)
        CHECK_RES(acq(outside[i], TOK_B, 20000, &h), BACKEND_OK);
    list_all("ls/", 100, keys, ents, &n);
    check_keys(keys, n, sorted, N);
    for (size_t i = 0; i < n && i < N; i++) {
        CHECK_EQ_U64(ents[i].fence, g[i].fence);
        CHECK_EQ_INT(ents[i].mode, LOCK_EXCLUSIVE);
        CHECK_EQ_INT(ents[i].holder_count, 1);
        CHECK_MSG(ents[i].ttl_ms >= 1 && ents[i].ttl_ms <= 20000 &&
                      ents[i].ttl_ms > 20000 - CLOCK_SLACK_MS,
                  "ttl_ms %llu", (unsigned long long)ents[i].ttl_ms);
        CHECK_NEAR(ents[i].expires_at_ms, t0 + 20000, clock_wall_ms() + 20000);
        CHECK_EQ_INT(ents[i].has_owner, i == 3);
    }
    if (n > 3)
        CHECK_STR_EQ(ents[3].owner, "worker 3");
    free_keys(keys, n);

    /* after a key that is not held: the keys past it */
    page.entries = one;
    CHECK_RES(lst("ls/", "ls/a a", N, &page), BACKEND_OK);
    CHECK_EQ_INT(page.n, 4);
    CHECK(!page.more);
    if (page.n == 4) {
        CHECK_STR_EQ(one[0].key, "ls/a b");
        CHECK_STR_EQ(one[3].key, "ls/\xc3\xa9");
    }
    /* a cursor past the prefix: nothing; before it: from the first */
    CHECK_RES(lst("ls/", "lt", N, &page), BACKEND_OK);
    CHECK_EQ_INT(page.n, 0);
    CHECK(!page.more);
    CHECK_RES(lst("ls/", "lr/zzz", 1, &page), BACKEND_OK);
    if (page.n == 1)
        CHECK_STR_EQ(one[0].key, "ls/");
    /* a longer prefix */
    CHECK_RES(lst("ls/a", NULL, N, &page), BACKEND_OK);
    CHECK_EQ_INT(page.n, 4);
    CHECK(!page.more);
    for (int i = 0; i < N; i++)
        CHECK_RES(rel(sorted[i], TOK_A), BACKEND_OK);
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++)
        CHECK_RES(rel(outside[i], TOK_B), BACKEND_OK);
    CHECK_RES(lst("ls/", NULL, N, &page), BACKEND_OK);
    CHECK_EQ_INT(page.n, 0);
    CHECK(!page.more);
}

#define PAGED_KEYS 250

/* 250 keys paged 7, 1 and 1000 at a time: each exactly once, in order. */
static void test_list_pages_cover_every_key_once(void)
{
    static const uint32_t limits[] = { 7, 1, 1000 };
    char names[PAGED_KEYS][24];
    const char *want[PAGED_KEYS];
    char *keys[OPS_MAX_KEYS];
    struct lock_grant g;
    size_t n;

    for (int i = 0; i < PAGED_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "lp/%03d", i);
        want[i] = names[i];
    }
    for (int k = 0; k < PAGED_KEYS; k++) { /* not in key order */
        int i = (k * 97) % PAGED_KEYS;
        CHECK_RES(acq(names[i], TOK_A, 30000, &g), BACKEND_OK);
    }
    for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
        int pages = list_all("lp/", limits[l], keys, NULL, &n);
        check_keys(keys, n, want, PAGED_KEYS);
        CHECK_MSG(pages >= (int)((PAGED_KEYS + limits[l] - 1) / limits[l]),
                  "%d pages of %u", pages, limits[l]);
        free_keys(keys, n);
    }
    for (int i = 0; i < PAGED_KEYS; i++)
        CHECK_RES(rel(names[i], TOK_A), BACKEND_OK);
}

/* Expired holders and waiters alone do not make a key held. */
static void test_list_leaves_out_expired_and_waiter_only_keys(void)
{
    static const char *const live[] = { "lx/live" };
    struct lock_waiter w = new_waiter();
    struct lock_grant g;
    char *keys[OPS_MAX_KEYS];
    size_t n;

    CHECK_RES(acq("lx/live", TOK_A, 20000, &g), BACKEND_OK);
    CHECK_RES(acq("lx/short", TOK_A, SHORT_TTL_MS, &g), BACKEND_OK);
    CHECK_RES(acq("lx/waited", TOK_A, 20000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, "lx/waited", TOK_B, &w, &g), BACKEND_HELD);
    CHECK_RES(rel("lx/waited", TOK_A), BACKEND_OK);
    check_sleep_ms(PAST_TTL_MS);
    list_all("lx/", 2, keys, NULL, &n);
    check_keys(keys, n, live, 1);
    free_keys(keys, n);
    list_all("lx/", 1000, keys, NULL, &n);
    check_keys(keys, n, live, 1);
    free_keys(keys, n);
    CHECK_RES(backend_cancel_wait(cur->be, "lx/waited", 9, &w), BACKEND_OK);
    CHECK_RES(rel("lx/live", TOK_A), BACKEND_OK);
}

/* A shared key: its live holders counted, the greatest fence, no owner. */
static void test_list_shared_key_sums_its_holders(void)
{
    static const char key[] = "lh/shared";
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = TOK_D,
                            .owner = "short one",
                            .ttl_ms = SHORT_TTL_MS,
                            .mode = LOCK_SHARED };
    struct lock_grant g[4];
    struct lock_entry one[2];
    struct lock_list page = { .entries = one };
    uint64_t top = 0;

    CHECK_RES(backend_acquire(cur->be, &req, &g[3]), BACKEND_OK);
    req.ttl_ms = 20000;
    req.owner = "reader";
    req.token = TOK_A;
    CHECK_RES(backend_acquire(cur->be, &req, &g[0]), BACKEND_OK);
    req.token = TOK_B;
    CHECK_RES(backend_acquire(cur->be, &req, &g[1]), BACKEND_OK);
    req.token = TOK_C;
    CHECK_RES(backend_acquire(cur->be, &req, &g[2]), BACKEND_OK);
    for (int i = 0; i < 3; i++)
        top = g[i].fence > top ? g[i].fence : top;
    check_sleep_ms(PAST_TTL_MS); /* D's TTL passes */
    CHECK_RES(lst("lh/", NULL, 2, &page), BACKEND_OK);
    CHECK_EQ_INT(page.n, 1);
    CHECK(!page.more);
    if (page.n == 1) {
        CHECK_STR_EQ(one[0].key, key);
        CHECK_EQ_INT(one[0].mode, LOCK_SHARED);
        CHECK_EQ_INT(one[0].holder_count, 3);
        CHECK_EQ_U64(one[0].fence, top);
        CHECK(!one[0].has_owner);
        CHECK_MSG(one[0].ttl_ms > 20000 - CLOCK_SLACK_MS - PAST_TTL_MS &&
                      one[0].ttl_ms <= 20000,
                  "ttl_ms %llu", (unsigned long long)one[0].ttl_ms);
    }
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
}

#define CHURN_KEYS 40

/* Keys held throughout paging each appear exactly once while the keys
 * around them (before, at and past the cursor) are granted and freed. */
static void test_list_key_held_throughout_appears_once(void)
{
    char names[CHURN_KEYS][16];
    bool held[CHURN_KEYS] = { false };
    int seen[CHURN_KEYS] = { 0 };
    struct lock_entry ents[3];
    struct lock_list page = { .entries = ents };
    char after[LOCK_KEY_MAX + 1] = "";
    struct lock_grant g;
    int pages = 0, flips = 0;

    for (int i = 0; i < CHURN_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "lc/%02d", i);
        if (i % 2 == 0) /* the even keys are held throughout */
            CHECK_RES(acq(names[i], TOK_A, 30000, &g), BACKEND_OK);
    }
    for (; pages < OPS_MAX_PAGES; pages++) {
        CHECK_RES(lst("lc/", pages > 0 ? after : NULL, 3, &page), BACKEND_OK);
        for (size_t k = 0; k < page.n; k++) {
            long i = strtol(ents[k].key + 3, NULL, 10);
            CHECK_MSG(pages == 0 || strcmp(ents[k].key, after) > 0,
                      "\"%s\" after \"%s\"", ents[k].key, after);
            if (i >= 0 && i < CHURN_KEYS && i % 2 == 0)
                seen[i]++;
        }
        if (!page.more)
            break;
        memcpy(after, page.resume, page.resume_len + 1);
        /* flip the odd keys: all of them, every page */
        for (int i = 1; i < CHURN_KEYS; i += 2, flips++) {
            if (held[i])
                CHECK_RES(rel(names[i], TOK_B), BACKEND_OK);
            else
                CHECK_RES(acq(names[i], TOK_B, 30000, &g), BACKEND_OK);
            held[i] = !held[i];
        }
    }
    for (int i = 0; i < CHURN_KEYS; i += 2)
        CHECK_MSG(seen[i] == 1, "%s listed %d times", names[i], seen[i]);
    printf("  %d pages, %d grants and releases between them\n", pages + 1,
           flips);
    for (int i = 0; i < CHURN_KEYS; i++)
        if (i % 2 == 0 || held[i])
            CHECK_RES(rel(names[i], i % 2 == 0 ? TOK_A : TOK_B), BACKEND_OK);
}

/* renew and release of a token whose lock was taken away */
#define CHECK_GONE(r)                                                          \
    do {                                                                       \
        enum backend_result gone_r_ = (r);                                     \
        CHECK_MSG(gone_r_ == BACKEND_NOT_FOUND || gone_r_ == BACKEND_MISMATCH, \
                  "%s: %s", #r, backend_result_str(gone_r_));                  \
    } while (0)

static enum backend_result force(const char *key, struct lock_info *info)
{
    return backend_force_release(cur->be, key, strlen(key), info);
}

/* An exclusive holder with re-entries goes at once; its token is dead;
 * the next grant's fence is greater. */
static void test_force_release_frees_an_exclusive_key(void)
{
    static const char key[] = "fx/excl";
    struct lock_grant g, h;
    struct lock_info info = { 0 };

    CHECK_RES(
        acq_full(cur->be, key, strlen(key), TOK_A, "job 9", 20000, NULL, &g),
        BACKEND_OK);
    CHECK_RES(reenter(key, TOK_A, &h), BACKEND_OK);
    CHECK_RES(reenter(key, TOK_A, &h), BACKEND_OK);
    CHECK_RES(force(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(info.holds, 3);
    CHECK(info.has_owner);
    CHECK_STR_EQ(info.owner, "job 9");
    CHECK_EQ_INT(info.nholders, 1);
    if (info.nholders == 1 && info.holders != NULL)
        CHECK_EQ_U64(info.holders[0].fence, g.fence);
    lock_info_clear(&info);
    CHECK_RES(insp(key, &info), BACKEND_NOT_FOUND);
    CHECK_GONE(ren(key, TOK_A, 0, &h));
    CHECK_GONE(rel(key, TOK_A));
    CHECK_RES(force(key, &info), BACKEND_NOT_FOUND);
    CHECK_RES(acq(key, TOK_B, 20000, &h), BACKEND_OK);
    CHECK_MSG(h.fence > g.fence, "fence %llu after %llu",
              (unsigned long long)h.fence, (unsigned long long)g.fence);
    CHECK_RES(ren(key, TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_RES(rel(key, TOK_A), BACKEND_MISMATCH);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
}

/* Three shared holders go at once, each listed; every token is dead. */
static void test_force_release_frees_shared_holders(void)
{
    static const char key[] = "fx/shared";
    static const char *const toks[] = { TOK_A, TOK_B, TOK_C };
    struct lock_grant g[3], h;
    struct lock_info info = { 0 };

    for (int i = 0; i < 3; i++)
        CHECK_RES(acq_sh(key, toks[i], 0, &g[i]), BACKEND_OK);
    CHECK_RES(reenter(key, TOK_B, &h), BACKEND_OK);
    CHECK_RES(force(key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_SHARED);
    CHECK_EQ_INT(info.holder_count, 3);
    CHECK_EQ_U64(info.fence, g[2].fence);
    CHECK(!info.has_owner);
    CHECK_EQ_INT(info.nholders, 3);
    for (uint32_t i = 0; i < info.nholders && i < 3 && info.holders; i++)
        CHECK_EQ_U64(info.holders[i].fence, g[i].fence);
    lock_info_clear(&info);
    CHECK_RES(insp(key, &info), BACKEND_NOT_FOUND);
    for (int i = 0; i < 3; i++) {
        CHECK_GONE(ren(key, toks[i], 0, &h));
        CHECK_GONE(rel(key, toks[i]));
    }
    CHECK_RES(acq(key, TOK_D, 20000, &h), BACKEND_OK); /* exclusive now */
    CHECK(h.fence > g[2].fence);
    CHECK_RES(rel(key, TOK_D), BACKEND_OK);
}

/* Nothing to force: never held, released, expired, or only waited for. */
static void test_force_release_of_a_free_key_is_not_found(void)
{
    static const char waited[] = "fx/waiter only";
    struct lock_waiter w = new_waiter();
    struct lock_grant g;
    struct lock_info info = { 0 };

    CHECK_RES(acq(waited, TOK_A, 20000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, waited, TOK_B, &w, &g), BACKEND_HELD);
    CHECK_RES(rel(waited, TOK_A), BACKEND_OK);
    CHECK_RES(force(waited, &info), BACKEND_NOT_FOUND);
    CHECK_RES(backend_cancel_wait(cur->be, waited, strlen(waited), &w),
              BACKEND_OK);

    CHECK_RES(force("fx/never", &info), BACKEND_NOT_FOUND);
    CHECK_RES(acq("fx/released", TOK_A, 20000, &g), BACKEND_OK);
    CHECK_RES(rel("fx/released", TOK_A), BACKEND_OK);
    CHECK_RES(force("fx/released", &info), BACKEND_NOT_FOUND);
    CHECK_RES(acq("fx/expired", TOK_A, SHORT_TTL_MS, &g), BACKEND_OK);
    check_sleep_ms(PAST_TTL_MS);
    CHECK_RES(force("fx/expired", &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(info.holder_count, 0);
    CHECK(info.holders == NULL);
}

struct forced_waiter {
    const char *key;
    struct lock_waiter w;
    int heard;          /* the notify hook named the key */
    int64_t granted_at; /* monotonic ms; 0: never */
    uint64_t fence;
};

/* As service/waitq.c does: wait for the notify (or the retry hint), then
 * try again; poll after that, to tell a late grant from none. */
static void *forced_waiter_main(void *arg)
{
    struct forced_waiter *fw = arg;
    int64_t until = check_mono_ms() + 5000;
    struct lock_grant g;

    fw->heard = notes_watched(3000);
    while (check_mono_ms() < until) {
        if (acq_w(cur->be, fw->key, TOK_B, &fw->w, &g) == BACKEND_OK) {
            fw->granted_at = check_mono_ms();
            fw->fence = g.fence;
            break;
        }
        check_sleep_ms(20);
    }
    return NULL;
}

static void test_force_release_lets_a_waiter_in(void)
{
    struct forced_waiter fw = { .key = "fx/waited", .w = new_waiter() };
    struct lock_grant g;
    struct lock_info info = { 0 };
    pthread_t t;
    int64_t forced_at;

    CHECK_RES(acq(fw.key, TOK_A, 20000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, fw.key, TOK_B, &fw.w, &g), BACKEND_HELD);
    notes_watch(fw.key, strlen(fw.key));
    if (pthread_create(&t, NULL, forced_waiter_main, &fw) != 0) {
        CHECK_MSG(0, "no thread");
        return;
    }
    check_sleep_ms(100);
    forced_at = check_mono_ms();
    CHECK_RES(force(fw.key, &info), BACKEND_OK);
    lock_info_clear(&info);
    pthread_join(t, NULL);
    notes_watch("", 0);
    CHECK_MSG(fw.heard >= 1, "no notify for the key in 3 s");
    CHECK_MSG(fw.granted_at > 0 && fw.granted_at - forced_at < 1500,
              "waiter granted %lld ms after the forced release",
              (long long)(fw.granted_at - forced_at));
    if (fw.granted_at > 0) {
        CHECK(fw.fence > g.fence);
        CHECK_RES(rel(fw.key, TOK_B), BACKEND_OK);
    } else { /* leave nothing behind for the next cases */
        backend_cancel_wait(cur->be, fw.key, strlen(fw.key), &fw.w);
        rel(fw.key, TOK_A);
    }
}

/* A grant that finds its key's holder expired says which fence it took
 * over (or 0 where the store reaped it first or cannot tell); a grant of
 * a free key never does. The last release says when its hold was
 * granted, by the store's clock, within the grant call. */
static void test_grant_times_takeover_and_grant_instant(void)
{
    static const char key[] = "gt/key";
    struct lock_req req = { .key = key, .key_len = strlen(key) };
    struct lock_grant g, h, r;
    int64_t t0, t1;

    CHECK_RES(acq(key, TOK_A, SHORT_TTL_MS, &g), BACKEND_OK);
    CHECK_EQ_U64(g.expired_fence, 0);
    check_sleep_ms(PAST_TTL_MS);
    t0 = clock_wall_ms();
    CHECK_RES(acq(key, TOK_B, 20000, &h), BACKEND_OK);
    t1 = clock_wall_ms();
    CHECK_MSG(h.expired_fence == 0 || h.expired_fence == g.fence,
              "expired_fence %llu, the expired holder had %llu",
              (unsigned long long)h.expired_fence, (unsigned long long)g.fence);
    printf("  takeover %s\n", h.expired_fence != 0 ? "seen" : "not seen");
    CHECK_RES(reenter(key, TOK_B, &r), BACKEND_OK);
    req.token = TOK_B;
    CHECK_RES(backend_release(cur->be, &req, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 1);
    CHECK_RES(backend_release(cur->be, &req, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 0);
    /* 0: the store keeps no grant time (said in the adapter: MySQL) */
    if (r.granted_at_ms != 0)
        CHECK_NEAR(r.granted_at_ms, t0, t1);
    printf("  grant time %s\n", r.granted_at_ms != 0 ? "kept" : "not kept");
    /* released, not expired: the next grant took nothing over */
    CHECK_RES(acq(key, TOK_C, 20000, &h), BACKEND_OK);
    CHECK_EQ_U64(h.expired_fence, 0);
    req.token = TOK_C;
    req.all = true;
    CHECK_RES(backend_release(cur->be, &req, &r), BACKEND_OK);
    CHECK_MSG(r.granted_at_ms >= 0, "granted_at_ms %lld",
              (long long)r.granted_at_ms);
}

#define CONTRACT_OPS_CASES                                             \
    CHECK_CASE(test_list_shows_held_keys_in_byte_order),               \
        CHECK_CASE(test_list_pages_cover_every_key_once),              \
        CHECK_CASE(test_list_leaves_out_expired_and_waiter_only_keys), \
        CHECK_CASE(test_list_shared_key_sums_its_holders),             \
        CHECK_CASE(test_list_key_held_throughout_appears_once),        \
        CHECK_CASE(test_force_release_frees_an_exclusive_key),         \
        CHECK_CASE(test_force_release_frees_shared_holders),           \
        CHECK_CASE(test_force_release_of_a_free_key_is_not_found),     \
        CHECK_CASE(test_force_release_lets_a_waiter_in),               \
        CHECK_CASE(test_grant_times_takeover_and_grant_instant),

#endif /* TESTS_UNIT_CONTRACT_OPS_H */

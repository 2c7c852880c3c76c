/*
 * tests/unit/test_contract.c - one suite for every adapter: the contract
 * of backends/backend.h, checked through the public wrappers
 * (backend_open(), backend_acquire(), ...) against memory:// and against
 * Redis, ZooKeeper and MariaDB servers this program starts once each on
 * free loopback ports in temp dirs (tests/unit/server.h).
 *
 * Every case runs against every backend and prints "ok <backend>: <case>"
 * or "FAIL <backend>: <case> (N checks failed)"; a case that does not apply
 * to a backend (a queue on a store without BACKEND_CAP_QUEUE, two handles
 * on memory://, which are two stores) prints "skip: <backend>: <case>:
 * <why>" and is counted as skipped. A store whose server cannot run here
 * prints "skip: <backend>: <reason>" and its cases are skipped; memory://
 * always runs; such a store prints "skip store: <backend>: <reason>",
 * which tests/run.py counts as a skip. Ends with
 * "N skipped" and "N passed, N failed"; exits 1 if anything failed, else
 * SKIP_EXIT (77) if nothing ran, else 0.
 *
 * Arguments are substrings of "<backend>: <case>": only matching cases run
 * (e.g. `test_contract redis`, `test_contract fence`), and only the
 * servers they need are started.
 *
 * The adapters' own programs (test_memory.c, test_redis.c, ...) keep what
 * only their store has: URL options, outages, restarts, data layout. Some
 * of their cases are also here (grant then HELD, growing fences, renew and
 * release by token, expiry, owners, distinct keys, FIFO, threads): left
 * there for now, to be pruned once this suite has run for a while.
 */
#include "backends/backend.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/clock.h"
#include "tests/unit/check.h"
#include "tests/unit/server.h"

#define TOK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define TOK_C "cccccccccccccccccccccccccccccccc"
#define TOK_D "dddddddddddddddddddddddddddddddd"

/* How far a store's clock (expires_at_ms) may be from ours: the servers
 * run on this machine, so only the time the calls take counts. */
#define CLOCK_SLACK_MS 2000
/* for expiry cases (ZooKeeper answers UNAVAILABLE to a grant that may be
 * over by the time its answer arrives: not too short)... */
#define SHORT_TTL_MS 300
#define PAST_TTL_MS  700 /* ...and how long they sleep past it */

#define RACE_THREADS 8
#define RACE_ROUNDS  10 /* grants per thread */

/* ---- the backend under test ---- */

struct target {
    const char *name;
    /* start the store's server in srv, fill url: 0, or -1 and *why */
    int (*start)(struct target *t, const char **why);
    struct test_server srv;
    struct test_server more[2]; /* redlock: the other two nodes */
    char url[256];
    struct backend *be; /* the main handle, its hooks are notes_hook */
    unsigned caps;
};

static struct target *cur; /* the one the running case is about */

/* set by a case that does not apply to cur */
static const char *case_skip_why;

/* Mark the running case as not applying to this backend (it returns
 * right after). */
static void skip_case(const char *why)
{
    case_skip_why = why;
}

/* Each waiter's id is unique in this process (struct lock_waiter). */
static uint64_t waiter_seq = 1000;

static struct lock_waiter new_waiter(void)
{
    struct lock_waiter w = { .id = ++waiter_seq,
                             .deadline_ms = clock_wall_ms() + 30000 };
    return w;
}

/* ---- calls, as api/ makes them: through the wrappers ---- */

#define CHECK_RES(a, b)                                     \
    do {                                                    \
        enum backend_result check_r_ = (a), check_w_ = (b); \
        if (check_r_ != check_w_) {                         \
            check_fail_at(__FILE__, __LINE__);              \
            printf("%s == %s, expected %s\n", #a,           \
                   backend_result_str(check_r_),            \
                   backend_result_str(check_w_));           \
        }                                                   \
    } while (0)

static enum backend_result acq_full(struct backend *be,
                                    const char *key,
                                    size_t key_len,
                                    const char *tok,
                                    const char *owner,
                                    uint64_t ttl,
                                    struct lock_waiter *w,
                                    struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = key_len,
                            .token = tok,
                            .owner = owner,
                            .ttl_ms = ttl,
                            .waiter = w };

    return backend_acquire(be, &req, g);
}

/* try-once, no owner, on the main handle */
static enum backend_result
acq(const char *key, const char *tok, uint64_t ttl, struct lock_grant *g)
{
    return acq_full(cur->be, key, strlen(key), tok, NULL, ttl, NULL, g);
}

/* as a waiter, on handle be */
static enum backend_result acq_w(struct backend *be,
                                 const char *key,
                                 const char *tok,
                                 struct lock_waiter *w,
                                 struct lock_grant *g)
{
    return acq_full(be, key, strlen(key), tok, NULL, 5000, w, g);
}

static enum backend_result ren_on(struct backend *be,
                                  const char *key,
                                  const char *tok,
                                  uint64_t ttl,
                                  struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .ttl_ms = ttl
    };

    return backend_renew(be, &req, g);
}

static enum backend_result
ren(const char *key, const char *tok, uint64_t ttl, struct lock_grant *g)
{
    return ren_on(cur->be, key, tok, ttl, g);
}

static enum backend_result
rel_on(struct backend *be, const char *key, size_t key_len, const char *tok)
{
    struct lock_req req = { .key = key, .key_len = key_len, .token = tok };
    struct lock_grant g;

    return backend_release(be, &req, &g);
}

static enum backend_result rel(const char *key, const char *tok)
{
    return rel_on(cur->be, key, strlen(key), tok);
}

/* the holders list is freed at once (its count stays in nholders): the
 * cases that read it use insp_keep() and lock_info_clear() */
static enum backend_result
insp_on(struct backend *be, const char *key, size_t len, struct lock_info *i)
{
    enum backend_result r = backend_inspect(be, key, len, i);

    free(i->holders);
    i->holders = NULL;
    return r;
}

static enum backend_result insp(const char *key, struct lock_info *i)
{
    return insp_on(cur->be, key, strlen(key), i);
}

/* t lies in [lo, hi] give or take CLOCK_SLACK_MS */
#define CHECK_NEAR(t, lo, hi)                                             \
    CHECK_MSG((t) >= (lo)-CLOCK_SLACK_MS && (t) <= (hi) + CLOCK_SLACK_MS, \
              "%lld not in [%lld, %lld] +- %d ms", (long long)(t),        \
              (long long)(lo), (long long)(hi), CLOCK_SLACK_MS)

/* The TTL a grant or renew answers: the one asked for, except where the
 * store answers its validity (redlock://: the TTL less the time the
 * nodes took and the clock drift, 1 % + 2 ms), a little less. */
static bool ttl_is(uint64_t got, uint64_t want)
{
    if (strcmp(backend_scheme(cur->be), "redlock") != 0)
        return got == want;
    return got <= want && got + want / 100 + 2 + CLOCK_SLACK_MS >= want;
}

#define CHECK_TTL(got, want)                                            \
    CHECK_MSG(ttl_is((got), (want)), "%s == %llu, expected %llu", #got, \
              (unsigned long long)(got), (unsigned long long)(want))

/* ---- cases ---- */

static void test_ping_answers_ok(void)
{
    CHECK_RES(backend_ping(cur->be), BACKEND_OK);
}

/* Every adapter says what its store guarantees (no "unknown"): a known
 * topology, store nodes only outside the process, and the same answer
 * every time (it is fixed at open). */
static void test_describe_names_a_topology_and_its_guarantees(void)
{
    static const char *const known[] = { "process", "single",   "sentinel",
                                         "cluster", "ensemble", "redlock" };
    struct backend_topology t, again;
    bool found = false;

    backend_describe(cur->be, &t);
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        found = found || strcmp(t.topology, known[i]) == 0;
    CHECK_MSG(found, "topology '%s'", t.topology);
    CHECK_MSG(strlen(t.fence) > 8 && strcmp(t.fence, "unknown") != 0,
              "fence '%s'", t.fence);
    CHECK_MSG(strlen(t.failover) > 8 && strcmp(t.failover, "unknown") != 0,
              "failover '%s'", t.failover);
    if (strcmp(t.topology, "process") == 0)
        CHECK_EQ_INT(t.nodes, 0);
    else
        CHECK_MSG(t.nodes >= 1, "%s with %u nodes", t.topology, t.nodes);
    if (strcmp(t.topology, "ensemble") == 0)
        CHECK_MSG(t.nodes >= 2, "an ensemble of %u nodes", t.nodes);
    backend_describe(cur->be, &again);
    CHECK(memcmp(&t, &again, sizeof(t)) == 0);
}

/* -1 (cannot tell) or the exact number of held locks, following grants
 * and releases. Runs before the cases that leave expired locks behind. */
static void test_held_count_is_exact_or_unknown(void)
{
    static const char *const keys[] = { "hc/1", "hc/2", "hc/3" };
    struct lock_grant g;
    int64_t n0 = backend_held_count(cur->be);

    CHECK_MSG(n0 >= -1, "held_count %lld", (long long)n0);
    for (int i = 0; i < 3; i++)
        CHECK_RES(acq(keys[i], TOK_A, 30000, &g), BACKEND_OK);
    if ((backend_caps(cur->be) & BACKEND_CAP_HELD_LAGS) != 0) {
        /* as of the adapter's last pass: only its sense is checked here */
        CHECK_MSG(backend_held_count(cur->be) >= -1, "held_count %lld",
                  (long long)backend_held_count(cur->be));
        n0 = -2;
    } else if (n0 == -1) {
        CHECK_EQ_INT(backend_held_count(cur->be), -1);
    } else {
        CHECK_EQ_INT(backend_held_count(cur->be), n0 + 3);
        CHECK_RES(rel(keys[0], TOK_A), BACKEND_OK);
        CHECK_EQ_INT(backend_held_count(cur->be), n0 + 2);
    }
    for (int i = n0 < 0 ? 0 : 1; i < 3; i++)
        CHECK_RES(rel(keys[i], TOK_A), BACKEND_OK);
    if (n0 >= 0)
        CHECK_EQ_INT(backend_held_count(cur->be), n0);
    else if (n0 == -1)
        CHECK_EQ_INT(backend_held_count(cur->be), -1);
}

static void test_acquire_grants_a_free_key(void)
{
    struct lock_grant g;
    int64_t t0 = clock_wall_ms(), t1;
    uint64_t left;

    CHECK_RES(acq("free", TOK_A, 5000, &g), BACKEND_OK);
    t1 = clock_wall_ms();
    CHECK_MSG(g.fence >= 1 && g.fence <= LOCK_FENCE_MAX, "fence %llu",
              (unsigned long long)g.fence);
    CHECK_TTL(g.ttl_ms, 5000);
    CHECK_NEAR(g.expires_at_ms, t0 + 5000, t1 + 5000);
    /* the wrapper's bound: at most the TTL, counted from the send */
    left = backend_grant_left_ms(&g, clock_mono_us());
    CHECK_MSG(left <= 5000 && left > 5000 - CLOCK_SLACK_MS, "left %llu",
              (unsigned long long)left);
    CHECK_RES(rel("free", TOK_A), BACKEND_OK);
}

static void test_second_token_is_held_with_a_retry_hint(void)
{
    struct lock_grant g, h;
    struct lock_info info;

    CHECK_RES(acq("held", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_RES(acq("held", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_MSG(h.retry_ms > 0 && h.retry_ms <= 5000, "retry_ms %llu",
              (unsigned long long)h.retry_ms);
    /* the attempt changed nothing */
    CHECK_RES(insp("held", &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK_RES(ren("held", TOK_A, 0, &h), BACKEND_OK);
    CHECK_RES(rel("held", TOK_A), BACKEND_OK);
}

static void test_grant_after_release_has_a_greater_fence(void)
{
    static const char *const toks[] = { TOK_A, TOK_B, TOK_A, TOK_C, TOK_C };
    struct lock_grant g;
    uint64_t last = 0;

    for (int i = 0; i < 5; i++) {
        CHECK_RES(acq("again", toks[i], 5000, &g), BACKEND_OK);
        CHECK_MSG(g.fence > last, "grant %d: fence %llu after %llu", i,
                  (unsigned long long)g.fence, (unsigned long long)last);
        last = g.fence;
        CHECK_RES(rel("again", toks[i]), BACKEND_OK);
    }
}

static void test_grant_after_expiry_has_a_greater_fence(void)
{
    struct lock_grant g, h;

    CHECK_RES(acq("expiry-fence", TOK_A, SHORT_TTL_MS, &g), BACKEND_OK);
    check_sleep_ms(PAST_TTL_MS);
    CHECK_RES(acq("expiry-fence", TOK_B, 5000, &h), BACKEND_OK);
    CHECK_MSG(h.fence > g.fence, "fence %llu after %llu",
              (unsigned long long)h.fence, (unsigned long long)g.fence);
    CHECK_RES(rel("expiry-fence", TOK_B), BACKEND_OK);
}

static void test_renew_by_holder_other_token_and_free_key(void)
{
    struct lock_grant g, r;
    int64_t t0, t1;

    CHECK_RES(acq("renew", TOK_A, 5000, &g), BACKEND_OK);
    t0 = clock_wall_ms();
    CHECK_RES(ren("renew", TOK_A, 8000, &r), BACKEND_OK);
    t1 = clock_wall_ms();
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_TTL(r.ttl_ms, 8000);
    CHECK_NEAR(r.expires_at_ms, t0 + 8000, t1 + 8000);
    /* 0: the lock's last TTL */
    CHECK_RES(ren("renew", TOK_A, 0, &r), BACKEND_OK);
    CHECK_TTL(r.ttl_ms, 8000);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_RES(ren("renew", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_RES(ren("renew", TOK_B, 3000, &r), BACKEND_MISMATCH);
    CHECK_RES(rel("renew", TOK_A), BACKEND_OK);
    CHECK_RES(ren("renew", TOK_A, 0, &r), BACKEND_NOT_FOUND);
    CHECK_RES(ren("renew/never-held", TOK_A, 5000, &r), BACKEND_NOT_FOUND);
}

static void test_release_by_another_token_is_a_mismatch(void)
{
    char junk[151];
    /* renew and release take "any ASCII string" */
    const char *const others[] = { TOK_B, "x y!", "", junk };
    struct lock_grant g, h;
    struct lock_info info;

    memset(junk, 'z', sizeof(junk) - 1);
    junk[sizeof(junk) - 1] = '\0';
    CHECK_RES(acq("mismatch", TOK_A, 5000, &g), BACKEND_OK);
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        enum backend_result r = rel("mismatch", others[i]);
        CHECK_MSG(r == BACKEND_MISMATCH, "release by token %zu: %s", i,
                  backend_result_str(r));
        r = ren("mismatch", others[i], 0, &h);
        CHECK_MSG(r == BACKEND_MISMATCH, "renew by token %zu: %s", i,
                  backend_result_str(r));
    }
    /* still A's */
    CHECK_RES(insp("mismatch", &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK_RES(acq("mismatch", TOK_C, 5000, &h), BACKEND_HELD);
    CHECK_RES(ren("mismatch", TOK_A, 0, &h), BACKEND_OK);
    CHECK_RES(rel("mismatch", TOK_A), BACKEND_OK);
}

static void test_second_release_is_not_found(void)
{
    struct lock_grant g;

    CHECK_RES(acq("twice", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_RES(rel("twice", TOK_A), BACKEND_OK);
    CHECK_RES(rel("twice", TOK_A), BACKEND_NOT_FOUND);
    CHECK_RES(rel("twice", TOK_B), BACKEND_NOT_FOUND);
    CHECK_RES(rel("twice/never-held", TOK_A), BACKEND_NOT_FOUND);
}

static void test_inspect_shows_fence_ttl_and_owner(void)
{
    static const char owner[] = "pod-7/worker 3 \xc3\xa9";
    char big[LOCK_OWNER_MAX + 1];
    struct lock_grant g;
    struct lock_info info;
    const char *key = "inspect";

    CHECK_RES(insp(key, &info), BACKEND_NOT_FOUND);
    CHECK_RES(acq_full(cur->be, key, strlen(key), TOK_A, owner, 5000, NULL, &g),
              BACKEND_OK);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK_MSG(info.ttl_ms >= 1 && info.ttl_ms <= 5000 &&
                  info.ttl_ms > 5000 - CLOCK_SLACK_MS,
              "ttl_ms %llu", (unsigned long long)info.ttl_ms);
    CHECK_NEAR(info.expires_at_ms, g.expires_at_ms, g.expires_at_ms);
    CHECK(info.has_owner);
    CHECK_STR_EQ(info.owner, owner);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_RES(insp(key, &info), BACKEND_NOT_FOUND);

    /* no owner */
    CHECK_RES(acq(key, TOK_B, 5000, &g), BACKEND_OK);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK(!info.has_owner);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);

    /* the longest owner, whole */
    memset(big, 'o', LOCK_OWNER_MAX);
    big[LOCK_OWNER_MAX - 1] = 'z';
    big[LOCK_OWNER_MAX] = '\0';
    CHECK_RES(acq_full(cur->be, key, strlen(key), TOK_C, big, 5000, NULL, &g),
              BACKEND_OK);
    CHECK_RES(insp(key, &info), BACKEND_OK);
    CHECK(info.has_owner);
    CHECK_STR_EQ(info.owner, big);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
}

static void test_expired_lock_is_free_for_another_token(void)
{
    struct lock_grant g, h;
    struct lock_info info;

    CHECK_RES(acq("expired", TOK_A, SHORT_TTL_MS, &g), BACKEND_OK);
    check_sleep_ms(PAST_TTL_MS);
    CHECK_RES(insp("expired", &info), BACKEND_NOT_FOUND);
    CHECK_RES(ren("expired", TOK_A, 0, &h), BACKEND_NOT_FOUND);
    CHECK_RES(rel("expired", TOK_A), BACKEND_NOT_FOUND);
    CHECK_RES(acq("expired", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    /* the old token is dead for good */
    CHECK_RES(ren("expired", TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_RES(rel("expired", TOK_A), BACKEND_MISMATCH);
    CHECK_RES(rel("expired", TOK_B), BACKEND_OK);
}

static void test_keys_are_independent(void)
{
    static char long_a[LOCK_KEY_MAX + 1], long_b[LOCK_KEY_MAX + 1],
        long_c[LOCK_KEY_MAX];
    const char *keys[] = {
        "a",
        "A",
        "a:b",
        "a/b",
        "a:",
        "a/",
        "ab",
        "a b",
        " a",
        "a ",
        "/a",
        ":a",
        "{a}",
        "a{",
        "a}",
        "{",
        "%",
        "a%",
        "a%2Fb",
        "a%3Ab",
        "*",
        "a*",
        "?",
        ".",
        "..",
        "a/../b",
        "a\\b",
        "a'b",
        "a\"b",
        "a`b",
        "a;b",
        "' OR '1'='1",
        "caf\xc3\xa9",              /* café, precomposed */
        "cafe\xcc\x81",             /* café, e + combining accent */
        "\xc3\xbc",                 /* ü */
        "\xe6\x97\xa5\xe6\x9c\xac", /* 日本 */
        "\xf0\x9f\x94\x92",         /* a lock emoji, 4 bytes */
        long_a,
        long_b,
        long_c,
    };
    enum {
        N = sizeof(keys) / sizeof(keys[0])
    };
    uint64_t fence[N];
    bool held[N];
    struct lock_grant g;
    struct lock_info info;

    memset(long_a, 'x', LOCK_KEY_MAX); /* 512 x */
    memcpy(long_b, long_a, LOCK_KEY_MAX);
    long_b[LOCK_KEY_MAX - 1] = 'y';        /* 511 x, y */
    memset(long_c, 'x', LOCK_KEY_MAX - 1); /* 511 x: a prefix of both */
    for (size_t i = 0; i < N; i++) {
        enum backend_result r = acq(keys[i], TOK_A, 30000, &g);
        CHECK_MSG(r == BACKEND_OK, "acquire key %zu \"%.40s\": %s", i, keys[i],
                  backend_result_str(r));
        fence[i] = g.fence;
        held[i] = r == BACKEND_OK;
    }
    for (size_t i = 0; i < N; i++) {
        enum backend_result r = acq(keys[i], TOK_B, 30000, &g);
        CHECK_MSG(r == BACKEND_HELD, "key %zu \"%.40s\" by another: %s", i,
                  keys[i], backend_result_str(r));
    }
    /* one release frees exactly its own key */
    for (size_t i = 0; i < N; i++) {
        enum backend_result r = rel(keys[i], TOK_A);
        CHECK_MSG(r == BACKEND_OK, "release key %zu \"%.40s\": %s", i, keys[i],
                  backend_result_str(r));
        held[i] = false;
        CHECK_MSG(insp(keys[i], &info) == BACKEND_NOT_FOUND,
                  "key %zu \"%.40s\" still held", i, keys[i]);
        for (size_t j = 0; j < N; j++) {
            if (!held[j])
                continue;
            r = insp(keys[j], &info);
            CHECK_MSG(r == BACKEND_OK && info.fence == fence[j],
                      "releasing key %zu \"%.40s\" changed key %zu \"%.40s\":"
                      " %s, fence %llu (was %llu)",
                      i, keys[i], j, keys[j], backend_result_str(r),
                      (unsigned long long)info.fence,
                      (unsigned long long)fence[j]);
        }
    }
}

/* hooks->notify: a release of a key a waiter waits for (with a place in
 * the store's queue, or told HELD on a store without one) is heard: what
 * service/waitq.c waits for. */
static void test_release_notifies_a_waiting_key(void)
{
    static const char key[] = "notify waiter";
    struct lock_waiter w = new_waiter();
    struct lock_grant g;

    CHECK_RES(acq(key, TOK_A, 5000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, key, TOK_B, &w, &g), BACKEND_HELD);
    notes_watch(key, strlen(key));
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_MSG(notes_watched(1000) >= 1, "no notify for the key in 1 s");
    notes_watch("", 0);
    CHECK_RES(acq_w(cur->be, key, TOK_B, &w, &g), BACKEND_OK);
    CHECK(w.be_data == NULL);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
}

/* A waiter on a free key nobody waits for is granted at once, and its
 * be_data is freed with the grant. */
static void test_waiter_on_a_free_key_is_granted(void)
{
    struct lock_waiter w = new_waiter();
    struct lock_grant g;

    CHECK_RES(acq_w(cur->be, "waiter-free", TOK_A, &w, &g), BACKEND_OK);
    CHECK(w.be_data == NULL);
    CHECK(g.fence >= 1);
    CHECK_RES(rel("waiter-free", TOK_A), BACKEND_OK);
    /* a cancel with no place is fine on every store */
    CHECK_RES(backend_cancel_wait(cur->be, "waiter-free", 11, &w), BACKEND_OK);
}

static void test_queue_first_waiter_goes_first(void)
{
    static const char key[] = "fifo";
    struct lock_waiter w1 = new_waiter(), w2 = new_waiter();
    struct lock_grant g;
    enum backend_result r;

    if (!(cur->caps & BACKEND_CAP_QUEUE)) {
        skip_case("no BACKEND_CAP_QUEUE");
        return;
    }
    CHECK_RES(acq(key, TOK_A, 10000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, key, TOK_B, &w1, &g), BACKEND_HELD);
    CHECK_RES(acq_w(cur->be, key, TOK_C, &w2, &g), BACKEND_HELD);
    CHECK_RES(acq(key, TOK_D, 5000, &g), BACKEND_HELD);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    /* free, but w1 is first: neither a try-once nor w2 gets it */
    CHECK_RES(acq(key, TOK_D, 5000, &g), BACKEND_HELD);
    r = acq_w(cur->be, key, TOK_C, &w2, &g);
    CHECK_RES(r, BACKEND_HELD);
    CHECK_RES(acq_w(cur->be, key, TOK_B, &w1, &g), BACKEND_OK);
    CHECK(w1.be_data == NULL);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
    /* now w2 is first */
    CHECK_RES(acq(key, TOK_D, 5000, &g), BACKEND_HELD);
    CHECK_RES(acq_w(cur->be, key, TOK_C, &w2, &g), BACKEND_OK);
    CHECK(w2.be_data == NULL);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
    /* nobody waits: a try-once gets it */
    CHECK_RES(acq(key, TOK_D, 5000, &g), BACKEND_OK);
    CHECK_RES(rel(key, TOK_D), BACKEND_OK);
    backend_cancel_wait(cur->be, key, strlen(key), &w1); /* after a failure */
    backend_cancel_wait(cur->be, key, strlen(key), &w2);
}

static void test_cancel_wait_of_the_first_passes_the_turn(void)
{
    static const char key[] = "cancel-first";
    struct lock_waiter w1 = new_waiter(), w2 = new_waiter();
    struct lock_grant g;

    if (!(cur->caps & BACKEND_CAP_QUEUE)) {
        skip_case("no BACKEND_CAP_QUEUE");
        return;
    }
    CHECK_RES(acq(key, TOK_A, 10000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, key, TOK_B, &w1, &g), BACKEND_HELD);
    CHECK_RES(acq_w(cur->be, key, TOK_C, &w2, &g), BACKEND_HELD);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, key, TOK_C, &w2, &g), BACKEND_HELD);
    CHECK_RES(backend_cancel_wait(cur->be, key, strlen(key), &w1), BACKEND_OK);
    CHECK(w1.be_data == NULL);
    CHECK_RES(acq_w(cur->be, key, TOK_C, &w2, &g), BACKEND_OK);
    CHECK(w2.be_data == NULL);
    CHECK_RES(rel(key, TOK_C), BACKEND_OK);
    CHECK_RES(acq(key, TOK_D, 5000, &g), BACKEND_OK);
    CHECK_RES(rel(key, TOK_D), BACKEND_OK);
    backend_cancel_wait(cur->be, key, strlen(key), &w2); /* after a failure */
}

static void test_cancel_wait_in_the_middle_keeps_the_order(void)
{
    static const char key[] = "cancel-middle";
    struct lock_waiter w1 = new_waiter(), w2 = new_waiter(), w3 = new_waiter();
    struct lock_grant g;

    if (!(cur->caps & BACKEND_CAP_QUEUE)) {
        skip_case("no BACKEND_CAP_QUEUE");
        return;
    }
    CHECK_RES(acq(key, TOK_A, 10000, &g), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, key, TOK_B, &w1, &g), BACKEND_HELD);
    CHECK_RES(acq_w(cur->be, key, TOK_C, &w2, &g), BACKEND_HELD);
    CHECK_RES(acq_w(cur->be, key, TOK_D, &w3, &g), BACKEND_HELD);
    CHECK_RES(backend_cancel_wait(cur->be, key, strlen(key), &w2), BACKEND_OK);
    CHECK(w2.be_data == NULL);
    CHECK_RES(rel(key, TOK_A), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, key, TOK_D, &w3, &g), BACKEND_HELD);
    CHECK_RES(acq_w(cur->be, key, TOK_B, &w1, &g), BACKEND_OK);
    CHECK_RES(rel(key, TOK_B), BACKEND_OK);
    CHECK_RES(acq_w(cur->be, key, TOK_D, &w3, &g), BACKEND_OK);
    CHECK(w3.be_data == NULL);
    CHECK_RES(rel(key, TOK_D), BACKEND_OK);
    backend_cancel_wait(cur->be, key, strlen(key), &w1); /* after a failure */
    backend_cancel_wait(cur->be, key, strlen(key), &w3);
}

/* ---- many threads, one key ---- */

struct race {
    const char *key;
    struct backend *be[2]; /* thread i uses be[i % 2] */
    int rounds;
    atomic_int inside; /* holders right now, by our own count */
    atomic_int overlaps;
    pthread_mutex_t mu; /* guards the fields below */
    uint64_t last_fence;
    int fence_errors;
    int grants;
    int errors;
    int starved;
};

struct racer {
    struct race *r;
    int id;
};

static void race_error(struct race *r, int *field)
{
    pthread_mutex_lock(&r->mu);
    (*field)++;
    pthread_mutex_unlock(&r->mu);
}

static void *race_thread(void *arg)
{
    struct racer *me = arg;
    struct race *r = me->r;
    struct backend *be = r->be[me->id % 2];
    size_t klen = strlen(r->key);
    char tok[40];

    snprintf(tok, sizeof(tok), "%032x", (unsigned)me->id + 0x1000);
    for (int round = 0; round < r->rounds; round++) {
        struct lock_grant g;
        enum backend_result res = BACKEND_HELD;
        int64_t give_up = check_mono_ms() + 30000;

        while (check_mono_ms() < give_up) {
            res = acq_full(be, r->key, klen, tok, NULL, 10000, NULL, &g);
            if (res == BACKEND_OK)
                break;
            if (res != BACKEND_HELD)
                race_error(r, &r->errors);
            check_sleep_ms(1);
        }
        if (res != BACKEND_OK) {
            race_error(r, &r->starved);
            return NULL;
        }
        if (atomic_fetch_add(&r->inside, 1) != 0)
            atomic_fetch_add(&r->overlaps, 1);
        pthread_mutex_lock(&r->mu);
        if (g.fence <= r->last_fence)
            r->fence_errors++;
        r->last_fence = g.fence;
        r->grants++;
        pthread_mutex_unlock(&r->mu);
        usleep(300);
        atomic_fetch_sub(&r->inside, 1);
        if (rel_on(be, r->key, klen, tok) != BACKEND_OK)
            race_error(r, &r->errors);
    }
    return NULL;
}

static void race_run(struct race *r)
{
    struct racer who[RACE_THREADS];
    pthread_t t[RACE_THREADS];
    int started = 0;
    int64_t t0 = check_mono_ms();

    pthread_mutex_init(&r->mu, NULL);
    for (int i = 0; i < RACE_THREADS; i++) {
        who[i] = (struct racer){ r, i };
        if (pthread_create(&t[i], NULL, race_thread, &who[i]) != 0)
            break;
        started++;
    }
    CHECK_EQ_INT(started, RACE_THREADS);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_destroy(&r->mu);
    CHECK_EQ_INT(atomic_load(&r->overlaps), 0);
    CHECK_EQ_INT(r->fence_errors, 0);
    CHECK_EQ_INT(r->errors, 0);
    CHECK_EQ_INT(r->starved, 0);
    CHECK_EQ_INT(r->grants, started * r->rounds);
    printf("  %d grants on %d threads in %lld ms\n", r->grants, started,
           (long long)(check_mono_ms() - t0));
}

static void test_threads_never_hold_a_key_at_once(void)
{
    struct race r = { .key = "race/one handle",
                      .be = { cur->be, cur->be },
                      .rounds = RACE_ROUNDS };

    race_run(&r);
}

/* BACKEND_CAP_NO_SEMAPHORE: a shared acquire with a limit above 1 is
 * INVALID (the API answers it 400 first), limits 0 and 1 are served; the
 * kinds cases take those there (kind_limit() in contract_kinds.h). */
static void test_no_semaphore_refuses_a_limit_above_one(void)
{
    struct lock_req req = { .key = "nosem",
                            .key_len = 5,
                            .token = TOK_A,
                            .ttl_ms = 5000,
                            .mode = LOCK_SHARED,
                            .limit = 2 };
    struct lock_grant g;

    if (!(cur->caps & BACKEND_CAP_NO_SEMAPHORE)) {
        skip_case("semaphores offered");
        return;
    }
    CHECK_RES(backend_acquire(cur->be, &req, &g), BACKEND_INVALID);
    req.limit = 1;
    CHECK_RES(backend_acquire(cur->be, &req, &g), BACKEND_OK);
    CHECK_EQ_INT(g.limit, 1);
    CHECK_RES(rel("nosem", TOK_A), BACKEND_OK);
    req.limit = 0;
    CHECK_RES(backend_acquire(cur->be, &req, &g), BACKEND_OK);
    req.token = TOK_B;
    CHECK_RES(backend_acquire(cur->be, &req, &g), BACKEND_OK);
    CHECK_RES(rel("nosem", TOK_A), BACKEND_OK);
    CHECK_RES(rel("nosem", TOK_B), BACKEND_OK);
}

/* Two handles on one store are two lockd instances. */
static void test_two_instances_exclude_each_other(void)
{
    char err[256];
    struct backend *other = NULL;
    struct lock_grant g, h;
    struct lock_info info;
    struct backend_hooks hooks = { .notify = notes_hook, .arg = NULL };
    struct race r = { .key = "race/two handles", .rounds = RACE_ROUNDS };

    if (strcmp(cur->name, "memory") == 0) {
        skip_case("two memory:// handles are two stores");
        return;
    }
    CHECK_RES(backend_open(cur->url, &hooks, &other, err, sizeof(err)),
              BACKEND_OK);
    if (other == NULL) {
        printf("  %s\n", err);
        return;
    }
    CHECK_RES(acq("instances", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_RES(acq_full(other, "instances", 9, TOK_B, NULL, 5000, NULL, &h),
              BACKEND_HELD);
    CHECK_RES(insp_on(other, "instances", 9, &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    /* a token is good on every instance */
    CHECK_RES(ren_on(other, "instances", TOK_A, 0, &h), BACKEND_OK);
    CHECK_RES(rel_on(other, "instances", 9, TOK_A), BACKEND_OK);
    CHECK_RES(acq_full(other, "instances", 9, TOK_B, NULL, 5000, NULL, &h),
              BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_RES(acq("instances", TOK_A, 5000, &g), BACKEND_HELD);
    CHECK_RES(rel("instances", TOK_B), BACKEND_OK);

    r.be[0] = cur->be;
    r.be[1] = other;
    race_run(&r);
    backend_close(other);
}

/* the lock kinds: shared mode and limits, re-entry, Idempotency-Key */
#include "tests/unit/contract_kinds.h"
/* several keys at once */
#include "tests/unit/contract_multi.h"
/* list, force_release, the grant times */
#include "tests/unit/contract_ops.h"

/* ---- batches (backend_batch(): one round trip on Redis) ---- */

struct batch {
    struct backend_call c[BACKEND_BATCH_MAX];
    struct lock_req r[BACKEND_BATCH_MAX];
    struct lock_grant g[BACKEND_BATCH_MAX];
    char keys[BACKEND_BATCH_MAX][16];
    size_t n;
};

static void batch_add(struct batch *b,
                      enum backend_op op,
                      const char *key,
                      const char *tok,
                      uint64_t ttl)
{
    size_t i = b->n++;

    snprintf(b->keys[i], sizeof(b->keys[i]), "%s", key);
    b->r[i] = (struct lock_req){ .key = b->keys[i],
                                 .key_len = strlen(b->keys[i]),
                                 .token = tok,
                                 .ttl_ms = ttl };
    b->c[i] = (struct backend_call){
        .op = op, .req = &b->r[i], .out = &b->g[i], .result = BACKEND_NO_MEMORY
    };
}

static void test_batch_answers_each_call_as_alone(void)
{
    struct batch b = { .n = 0 };
    struct lock_grant one;
    struct lock_info info;
    uint64_t f0;

    CHECK_RES(acq("bt1", TOK_A, 5000, &one), BACKEND_OK);
    f0 = one.fence;
    CHECK_RES(rel("bt1", TOK_A), BACKEND_OK);
    batch_add(&b, BACKEND_OP_ACQUIRE, "bt1", TOK_A, 5000);
    batch_add(&b, BACKEND_OP_ACQUIRE, "bt1", TOK_B, 5000);
    batch_add(&b, BACKEND_OP_ACQUIRE, "bt2", TOK_A, 5000);
    batch_add(&b, BACKEND_OP_RENEW, "bt1", TOK_A, 7000);
    batch_add(&b, BACKEND_OP_RELEASE, "bt2", TOK_B, 0);
    batch_add(&b, BACKEND_OP_RELEASE, "bt3", TOK_A, 0);
    batch_add(&b, BACKEND_OP_RELEASE, "bt1", TOK_A, 0);
    batch_add(&b, BACKEND_OP_ACQUIRE, "bt4", TOK_A, 0); /* no TTL */
    backend_batch(cur->be, b.c, b.n);
    CHECK_RES(b.c[0].result, BACKEND_OK);
    CHECK(b.g[0].fence > f0);
    CHECK(ttl_is(b.g[0].ttl_ms, 5000));
    CHECK(b.g[0].valid_until_us > 0);
    CHECK_RES(b.c[1].result, BACKEND_HELD);
    CHECK_RES(b.c[2].result, BACKEND_OK);
    CHECK_RES(b.c[3].result, BACKEND_OK);
    CHECK_EQ_INT(b.g[3].fence, b.g[0].fence);
    CHECK(ttl_is(b.g[3].ttl_ms, 7000));
    CHECK_RES(b.c[4].result, BACKEND_MISMATCH);
    CHECK_RES(b.c[5].result, BACKEND_NOT_FOUND);
    CHECK_RES(b.c[6].result, BACKEND_OK);
    CHECK_EQ_INT(b.g[6].holds, 0);
    CHECK_RES(b.c[7].result, BACKEND_INVALID);
    /* what the batch left: bt1 free, bt2 held by A, bt4 never sent */
    CHECK_RES(insp("bt1", &info), BACKEND_NOT_FOUND);
    CHECK_RES(insp("bt4", &info), BACKEND_NOT_FOUND);
    CHECK_RES(acq("bt2", TOK_B, 5000, &one), BACKEND_HELD);
    CHECK_RES(rel("bt2", TOK_A), BACKEND_OK);
    /* a full batch, every key its own */
    b.n = 0;
    for (int i = 0; i < BACKEND_BATCH_MAX; i++) {
        char k[16];
        snprintf(k, sizeof(k), "bf%d", i);
        batch_add(&b, BACKEND_OP_ACQUIRE, k, TOK_A, 5000);
    }
    backend_batch(cur->be, b.c, b.n);
    for (size_t i = 0; i < b.n; i++) {
        CHECK_RES(b.c[i].result, BACKEND_OK);
        CHECK_RES(rel(b.keys[i], TOK_A), BACKEND_OK);
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_ping_answers_ok),
    CHECK_CASE(test_describe_names_a_topology_and_its_guarantees),
    CHECK_CASE(test_held_count_is_exact_or_unknown),
    CHECK_CASE(test_acquire_grants_a_free_key),
    CHECK_CASE(test_second_token_is_held_with_a_retry_hint),
    CHECK_CASE(test_grant_after_release_has_a_greater_fence),
    CHECK_CASE(test_grant_after_expiry_has_a_greater_fence),
    CHECK_CASE(test_renew_by_holder_other_token_and_free_key),
    CHECK_CASE(test_release_by_another_token_is_a_mismatch),
    CHECK_CASE(test_second_release_is_not_found),
    CHECK_CASE(test_inspect_shows_fence_ttl_and_owner),
    CHECK_CASE(test_expired_lock_is_free_for_another_token),
    CHECK_CASE(test_keys_are_independent),
    CHECK_CASE(test_release_notifies_a_waiting_key),
    CHECK_CASE(test_waiter_on_a_free_key_is_granted),
    CHECK_CASE(test_queue_first_waiter_goes_first),
    CHECK_CASE(test_cancel_wait_of_the_first_passes_the_turn),
    CHECK_CASE(test_cancel_wait_in_the_middle_keeps_the_order),
    CHECK_CASE(test_threads_never_hold_a_key_at_once),
    CHECK_CASE(test_two_instances_exclude_each_other),
    CHECK_CASE(test_no_semaphore_refuses_a_limit_above_one),
    CHECK_CASE(test_batch_answers_each_call_as_alone),
    CONTRACT_KINDS_CASES CONTRACT_MULTI_CASES CONTRACT_OPS_CASES
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* ---- the stores ---- */

static int start_memory(struct target *t, const char **why)
{
    (void)why;
    snprintf(t->url, sizeof(t->url), "memory://");
    return 0;
}

static int start_redis(struct target *t, const char **why)
{
    if (access(TESTSRV_REDIS, X_OK) != 0) {
        *why = TESTSRV_REDIS " is not installed";
        return -1;
    }
    if (testsrv_setup(&t->srv, "contract-redis") != 0 ||
        testsrv_redis_start(&t->srv) != 0) {
        *why = TESTSRV_REDIS " did not start";
        return -1;
    }
    snprintf(t->url, sizeof(t->url), "redis://127.0.0.1:%d", t->srv.port);
    return 0;
}

/* Three redis-server nodes, AOF with fsync always and trust_fsync=1:
 * every node votes from the start (and after a restart). */
static int start_redlock(struct target *t, const char **why)
{
    struct test_server *s[3] = { &t->srv, &t->more[0], &t->more[1] };

    if (access(TESTSRV_REDIS, X_OK) != 0) {
        *why = TESTSRV_REDIS " is not installed";
        return -1;
    }
    for (size_t i = 0; i < 3; i++) {
        *s[i] = (struct test_server)TEST_SERVER_INIT;
        if (testsrv_setup(s[i], "contract-redlock") != 0 ||
            testsrv_redis_start(s[i]) != 0) {
            *why = TESTSRV_REDIS " did not start";
            return -1;
        }
    }
    snprintf(t->url, sizeof(t->url),
             "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?trust_fsync=1",
             s[0]->port, s[1]->port, s[2]->port);
    return 0;
}

/* Stop t's servers and remove their dirs. */
static void stop_target(struct target *t)
{
    testsrv_cleanup(&t->srv, SIGKILL);
    for (size_t i = 0; i < 2; i++)
        testsrv_cleanup(&t->more[i], SIGKILL);
}

static int start_zookeeper(struct target *t, const char **why)
{
    if (access(TESTSRV_JAVA, X_OK) != 0 || access(TESTSRV_ZK_JAR, R_OK) != 0) {
        *why = TESTSRV_JAVA " or " TESTSRV_ZK_JAR " is missing";
        return -1;
    }
    if (testsrv_setup(&t->srv, "contract-zk") != 0 ||
        testsrv_zk_start(&t->srv) != 0) {
        *why = "ZooKeeper did not start";
        return -1;
    }
    snprintf(t->url, sizeof(t->url),
             "zookeeper://127.0.0.1:%d?session_timeout_ms=4000", t->srv.port);
    return 0;
}

static int start_mysql(struct target *t, const char **why)
{
    struct backend *be = NULL;
    char err[256];
    int rc;

    if (access(TESTSRV_INSTALL_DB, X_OK) != 0 ||
        access(TESTSRV_MARIADBD, X_OK) != 0) {
        *why = "no MariaDB server here (" TESTSRV_MARIADBD ")";
        return -1;
    }
    if (testsrv_setup(&t->srv, "contract-mysql") != 0) {
        *why = "no free port or temp dir";
        return -1;
    }
    snprintf(t->url, sizeof(t->url), "mysql://lockd:%s@127.0.0.1:%d/lockd",
             TESTSRV_MYSQL_PASSWORD_U, t->srv.port);
    /* the adapter initialises Connector/C: before the root connections */
    if (backend_open(t->url, NULL, &be, err, sizeof(err)) != BACKEND_OK) {
        *why = "the mysql adapter does not open";
        return -1;
    }
    rc = testsrv_mariadb_install(&t->srv);
    backend_close(be);
    if (rc != 0)
        *why = "MariaDB could not be set up";
    return rc;
}

/* MySQL step by step: each step of an acquire, renew or release its own
 * statement, as on a server without compound statements (MySQL). */
static int start_mysql_steps(struct target *t, const char **why)
{
    size_t n;

    if (start_mysql(t, why) != 0)
        return -1;
    n = strlen(t->url);
    snprintf(t->url + n, sizeof(t->url) - n, "?compound=0");
    return 0;
}

static struct target targets[] = {
    { .name = "memory", .start = start_memory, .srv = TEST_SERVER_INIT },
    { .name = "redis", .start = start_redis, .srv = TEST_SERVER_INIT },
    { .name = "redlock", .start = start_redlock, .srv = TEST_SERVER_INIT },
    { .name = "zookeeper", .start = start_zookeeper, .srv = TEST_SERVER_INIT },
    { .name = "mysql", .start = start_mysql, .srv = TEST_SERVER_INIT },
    { .name = "mysql-steps",
      .start = start_mysql_steps,
      .srv = TEST_SERVER_INIT },
};

static bool selected(const struct target *t, size_t c, int argc, char **argv)
{
    char name[128];

    snprintf(name, sizeof(name), "%s: %s", t->name, cases[c].name);
    return check_selected(name, argc, argv);
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, skipped = 0;
    int64_t t_all = check_mono_ms();

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN); /* as lockd does */
    for (size_t ti = 0; ti < sizeof(targets) / sizeof(targets[0]); ti++) {
        struct target *t = &targets[ti];
        struct backend_hooks hooks = { .notify = notes_hook, .arg = NULL };
        const char *why = "";
        char err[256];
        size_t want = 0;
        int64_t t0 = check_mono_ms(), t_started;
        int p0 = passed, f0 = failed, s0 = skipped;

        for (size_t c = 0; c < NCASES; c++)
            want += selected(t, c, argc, argv);
        if (want == 0)
            continue;
        if (t->start(t, &why) != 0) {
            printf("skip store: %s: %s\n", t->name, why);
            skipped += (int)want;
            stop_target(t);
            continue;
        }
        t_started = check_mono_ms();
        if (backend_open(t->url, &hooks, &t->be, err, sizeof(err)) !=
                BACKEND_OK ||
            !testsrv_wait_ping(backend_ping, t->be, 30000)) {
            printf("FAIL %s: %s\n", t->name,
                   t->be == NULL ? err : "no answer to ping in 30 s");
            backend_close(t->be);
            t->be = NULL;
            failed += (int)want;
            stop_target(t);
            continue;
        }
        t->caps = backend_caps(t->be);
        cur = t;
        for (size_t c = 0; c < NCASES; c++) {
            if (!selected(t, c, argc, argv))
                continue;
            check_failures = 0;
            case_skip_why = NULL;
            cases[c].fn();
            if (check_failures > 0) {
                failed++;
                printf("FAIL %s: %s (%d checks failed)\n", t->name,
                       cases[c].name, check_failures);
            } else if (case_skip_why != NULL) {
                skipped++;
                printf("skip: %s: %s: %s\n", t->name, cases[c].name,
                       case_skip_why);
            } else {
                passed++;
                printf("ok %s: %s\n", t->name, cases[c].name);
            }
        }
        backend_close(t->be);
        t->be = NULL;
        cur = NULL;
        stop_target(t);
        printf("  %s: %d passed, %d failed, %d skipped; server start %.1f s, "
               "cases %.1f s\n",
               t->name, passed - p0, failed - f0, skipped - s0,
               (double)(t_started - t0) / 1000,
               (double)(check_mono_ms() - t_started) / 1000);
    }
    printf("  all: %.1f s\n", (double)(check_mono_ms() - t_all) / 1000);
    printf("%d skipped\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    if (failed > 0)
        return 1;
    return passed == 0 ? SKIP_EXIT : 0;
}

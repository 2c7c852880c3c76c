/*
 * tests/unit/test_redis.c - the Redis adapter (backends/redis/) through its
 * ops table, against a real redis-server this program starts on a free
 * loopback port in a temp dir (appendonly, so a restart keeps the data).
 * Prints "skip: <reason>" and exits SKIP_EXIT (77) when redis-server
 * cannot run.
 */
#include "backends/backend.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "backends/redis/library.h"
#include "backends/redis/redis_int.h"
#include "tests/unit/check.h"
extern const struct backend_ops redis_backend;
#define TEST_BE_OPS redis_backend
#include "lib/clock.h"
#include "tests/unit/server.h"

#define TOK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static struct test_server srv = TEST_SERVER_INIT;
static char url[128];

/* ---- the server ---- */

static int start_redis(void)
{
    return testsrv_redis_start(&srv);
}

/* A raw command on a fresh connection, for looking behind the adapter. */
static redisReply *raw(const char *fmt, const char *arg)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", srv.port, tv);
    redisReply *r = NULL;

    if (c != NULL && c->err == 0)
        r = redisCommand(c, fmt, arg);
    redisFree(c);
    return r;
}

/* ---- helpers ---- */

static struct backend *open_be(const char *u)
{
    return be_open(u, notes_hook, NULL);
}

/* A backend on the test server with keys under prefix (URL-encoded); NULL
 * (a failed check) if it did not open. */
static struct backend *open_prefixed(const char *prefix)
{
    char u[160];
    struct backend *be;

    snprintf(u, sizeof(u), "%s?prefix=%s", url, prefix);
    be = open_be(u);
    CHECK(be != NULL);
    return be;
}

static struct backend *be_main;

/* ---- cases ---- */

static void test_open_rejects_bad_urls(void)
{
    static const char *const bad[] = {
        "redis://127.0.0.1:6379?bogus=1",
        "redis://127.0.0.1:6379?prefix=a&timeout_ms=0",
        "redis://127.0.0.1:6379?connect_timeout_ms=x",
        "redis://127.0.0.1:70000",
        "redis://127.0.0.1:12ab",
        "redis://127.0.0.1/db1",
        "redis://127.0.0.1/-1",
        "redis://h1:1,h2:2",
        "redis://user@127.0.0.1",
        "redis://[::1",
        NULL,
    };
    struct backend *be;

    for (int i = 0; bad[i] != NULL; i++) {
        be = (struct backend *)1;
        CHECK_EQ_INT(redis_backend.open(bad[i], NULL, &be, NULL, 0),
                     BACKEND_INVALID);
        CHECK(be == NULL);
    }
}

/* redis+sentinel:// (issue 17): refused without Sentinels, master name or
 * with a bad port; opened while no Sentinel answers (503 until one does). */
static void test_sentinel_urls_refused_or_opened(void)
{
    static const char *const bad[] = {
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/",
        "redis+sentinel:///lockd",
        "redis+sentinel://127.0.0.1:70000/lockd",
        "redis+sentinel://127.0.0.1:26379,/lockd",
        "redis+sentinel://127.0.0.1:26379/lockd/x",
        "redis+sentinel://user@127.0.0.1:26379/lockd",
        "redis://127.0.0.1?sentinel_password=x",
        NULL,
    };
    char u[160];
    struct backend *be;
    char err[256];

    for (int i = 0; bad[i] != NULL; i++) {
        be = (struct backend *)1;
        CHECK_EQ_INT(redis_backend.open(bad[i], NULL, &be, err, sizeof(err)),
                     BACKEND_INVALID);
        CHECK(be == NULL);
        CHECK(strncmp(err, "redis: ", 7) == 0);
    }
    snprintf(u, sizeof(u),
             "redis+sentinel://:pw@127.0.0.1:%d,127.0.0.1:%d/lockd/2"
             "?sentinel_password=s&min_replicas=1&timeout_ms=300",
             testsrv_free_port(), testsrv_free_port());
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(redis_backend.ping(be), BACKEND_UNAVAILABLE);
    redis_backend.close(be);
}

static void test_open_succeeds_while_redis_is_down(void)
{
    char u[128];
    struct backend *be;
    struct lock_grant g;
    int64_t t0;

    snprintf(u, sizeof(u), "redis://127.0.0.1:%d?timeout_ms=200",
             testsrv_free_port());
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    t0 = clock_mono_ms();
    CHECK_EQ_INT(acq(be, "down", TOK_A, 1000, &g), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(redis_backend.ping(be), BACKEND_UNAVAILABLE);
    CHECK(clock_mono_ms() - t0 < 1000);
    redis_backend.close(be);
}

static void test_acquire_grants_free_key_once(void)
{
    struct lock_grant g, h;
    int64_t now = clock_wall_ms();

    CHECK_EQ_INT(acq(be_main, "a1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK(g.fence > 0 && g.fence <= LOCK_FENCE_MAX);
    CHECK_EQ_INT(g.ttl_ms, 5000);
    CHECK(g.expires_at_ms > now + 4000 && g.expires_at_ms < now + 6000);
    CHECK_EQ_INT(acq(be_main, "a1", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 4000 && h.retry_ms <= 5000);
    /* the same token again (a retry whose reply was lost): same grant */
    CHECK_EQ_INT(acq(be_main, "a1", TOK_A, 5000, &h), BACKEND_OK);
    CHECK_EQ_INT(h.fence, g.fence);
    CHECK_EQ_INT(rel(be_main, "a1", TOK_A), BACKEND_OK);
}

static void test_fence_grows_with_every_grant(void)
{
    struct lock_grant g;
    uint64_t last = 0;

    for (int i = 0; i < 20; i++) {
        CHECK_EQ_INT(acq(be_main, "f1", TOK_A, 5000, &g), BACKEND_OK);
        CHECK(g.fence > last);
        last = g.fence;
        CHECK_EQ_INT(rel(be_main, "f1", TOK_A), BACKEND_OK);
    }
}

static void test_renew_keeps_fence_and_stored_ttl(void)
{
    struct lock_grant g, r;

    CHECK_EQ_INT(acq(be_main, "r1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "r1", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(r.fence, g.fence);
    CHECK_EQ_INT(r.ttl_ms, 5000);
    CHECK_EQ_INT(ren(be_main, "r1", TOK_A, 2000, &r), BACKEND_OK);
    CHECK_EQ_INT(r.ttl_ms, 2000);
    CHECK_EQ_INT(ren(be_main, "r1", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(r.ttl_ms, 2000);
    CHECK(r.expires_at_ms > clock_wall_ms() + 1000);
    CHECK_EQ_INT(ren(be_main, "r1", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "r1", TOK_B), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "r1", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "r1", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(ren(be_main, "r1", TOK_A, 0, &r), BACKEND_NOT_FOUND);
}

static void test_expired_token_is_dead(void)
{
    struct lock_grant g, r;
    struct lock_info info;

    CHECK_EQ_INT(acq(be_main, "e1", TOK_A, 60, &g), BACKEND_OK);
    check_sleep_ms(150);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "e1", 2, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(ren(be_main, "e1", TOK_A, 0, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq(be_main, "e1", TOK_B, 5000, &r), BACKEND_OK);
    CHECK(r.fence > g.fence);
    CHECK_EQ_INT(ren(be_main, "e1", TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "e1", TOK_B), BACKEND_OK);
}

static void test_inspect_shows_owner_never_token(void)
{
    struct lock_req req = { .key = "i1",
                            .key_len = 2,
                            .token = TOK_A,
                            .owner = "pod-a/worker 3",
                            .ttl_ms = 5000 };
    struct lock_grant g;
    struct lock_info info;
    redisReply *r;

    CHECK_EQ_INT(redis_backend.acquire(be_main, &req, &g), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "i1", 2, &info), BACKEND_OK);
    CHECK_EQ_INT(info.fence, g.fence);
    CHECK(info.ttl_ms >= 1 && info.ttl_ms <= 5000);
    CHECK(info.has_owner);
    CHECK(strcmp(info.owner, "pod-a/worker 3") == 0);
    lock_info_clear(&info);
    /* the token itself is nowhere in Redis: only its digest */
    r = raw("HGETALL %s", "lockd:lock:{i1}");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 6);
    for (size_t i = 0; r != NULL && i < r->elements; i++)
        CHECK(strstr(r->element[i]->str, TOK_A) == NULL);
    freeReplyObject(r);
    CHECK_EQ_INT(rel(be_main, "i1", TOK_A), BACKEND_OK);
    req.owner = NULL;
    CHECK_EQ_INT(redis_backend.acquire(be_main, &req, &g), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "i1", 2, &info), BACKEND_OK);
    CHECK(!info.has_owner);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be_main, "i1", TOK_A), BACKEND_OK);
}

static void test_distinct_keys_are_distinct_locks(void)
{
    static char big[LOCK_KEY_MAX + 1];
    const char *keys[] = {
        "k",        "k}",       "{k}",       "{k",       "k:", ":k",
        "lock:{k}", "}",        "{",         "k b",      "*",  "k*",
        "?",        "\xc3\xbc", "fence:{k}", "k}lock:{", big,  NULL,
    };
    struct lock_grant g;
    redisReply *r;

    memset(big, 'x', LOCK_KEY_MAX);
    for (int i = 0; keys[i] != NULL; i++)
        CHECK_EQ_INT(acq(be_main, keys[i], TOK_A, 5000, &g), BACKEND_OK);
    for (int i = 0; keys[i] != NULL; i++)
        CHECK_EQ_INT(acq(be_main, keys[i], TOK_B, 5000, &g), BACKEND_HELD);
    /* everything stays under the prefix */
    r = raw("KEYS %s", "*");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY);
    for (size_t i = 0; r != NULL && i < r->elements; i++)
        CHECK(strncmp(r->element[i]->str, "lockd:", 6) == 0);
    freeReplyObject(r);
    for (int i = 0; keys[i] != NULL; i++)
        CHECK_EQ_INT(rel(be_main, keys[i], TOK_A), BACKEND_OK);
}

static void test_prefixes_are_separate_namespaces(void)
{
    struct backend *other;
    struct lock_grant g;

    other = open_prefixed("other%3A");
    if (other == NULL)
        return;
    CHECK_EQ_INT(acq(be_main, "p1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(other, "p1", TOK_B, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(other, "p1", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "p1", TOK_A), BACKEND_OK);
    redis_backend.close(other);
}

static void test_release_notifies_every_instance(void)
{
    struct backend *other = open_be(url);
    struct lock_grant g;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    CHECK_EQ_INT(acq(other, "n1 {x}", TOK_A, 5000, &g), BACKEND_OK);
    notes_reset();
    CHECK_EQ_INT(rel(other, "n1 {x}", TOK_A), BACKEND_OK);
    redis_backend.close(other); /* the notification must come via Redis */
    CHECK(notes_heard("n1 {x}", 2000));
}

static void test_stopped_redis_answers_unavailable_in_time(void)
{
    char u[160];
    struct backend *be;
    struct lock_grant g;
    int64_t t0, dt;
    int ok = 0;

    snprintf(u, sizeof(u), "%s?timeout_ms=300", url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(redis_backend.ping(be), BACKEND_OK);
    testsrv_signal(&srv, SIGSTOP);
    for (int i = 0; i < 3; i++) {
        t0 = clock_mono_ms();
        CHECK_EQ_INT(acq(be, "s1", TOK_B, 5000, &g), BACKEND_UNAVAILABLE);
        dt = clock_mono_ms() - t0;
        CHECK(dt < 900);
    }
    testsrv_signal(&srv, SIGCONT);
    t0 = clock_mono_ms();
    while (clock_mono_ms() - t0 < 3000) {
        /* the acquires answered UNAVAILABLE sat in Redis's socket and ran
         * when it resumed: they must have granted nothing */
        enum backend_result r = acq(be, "s1", TOK_A, 5000, &g);
        if (r == BACKEND_OK) {
            ok = 1;
            break;
        }
        CHECK_EQ_INT(r, BACKEND_UNAVAILABLE);
        check_sleep_ms(50);
    }
    CHECK(ok);
    CHECK_EQ_INT(rel(be, "s1", TOK_A), BACKEND_OK);
    redis_backend.close(be);
}

static void test_restart_keeps_holders_and_fences(void)
{
    struct lock_grant g, r;
    int64_t t0;
    int ok = 0;

    CHECK_EQ_INT(acq(be_main, "rs1", TOK_A, 20000, &g), BACKEND_OK);
    testsrv_signal(&srv, SIGKILL);
    CHECK_EQ_INT(ren(be_main, "rs1", TOK_A, 0, &r), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(acq(be_main, "rs1", TOK_B, 5000, &r), BACKEND_UNAVAILABLE);
    CHECK(start_redis() == 0);
    t0 = clock_mono_ms();
    while (clock_mono_ms() - t0 < 5000) {
        enum backend_result res = ren(be_main, "rs1", TOK_A, 0, &r);
        if (res == BACKEND_OK) {
            ok = 1;
            break;
        }
        CHECK_EQ_INT(res, BACKEND_UNAVAILABLE);
        check_sleep_ms(50);
    }
    CHECK(ok);
    CHECK_EQ_INT(r.fence, g.fence);
    CHECK_EQ_INT(acq(be_main, "rs1", TOK_B, 5000, &r), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "rs1", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "rs1", TOK_B, 5000, &r), BACKEND_OK);
    CHECK(r.fence > g.fence);
    CHECK_EQ_INT(rel(be_main, "rs1", TOK_B), BACKEND_OK);
}

static enum backend_result acq_w(struct backend *be,
                                 const char *key,
                                 const char *tok,
                                 struct lock_waiter *w,
                                 struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = tok,
                            .ttl_ms = 5000,
                            .waiter = w };
    memset(g, 0, sizeof(*g));
    return redis_backend.acquire(be, &req, g);
}

static void test_queue_is_fifo_and_try_once_waits_its_turn(void)
{
    struct lock_waiter w1 = { .id = 101,
                              .deadline_ms = clock_wall_ms() + 5000 };
    struct lock_waiter w2 = { .id = 102,
                              .deadline_ms = clock_wall_ms() + 5000 };
    struct lock_grant g;

    CHECK_EQ_INT(acq(be_main, "q1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_w(be_main, "q1", TOK_B, &w1, &g), BACKEND_HELD);
    CHECK(w1.be_data != NULL);
    CHECK(!g.behind);
    CHECK(g.retry_ms > 4000);
    CHECK_EQ_INT(
        acq_w(be_main, "q1", "cccccccccccccccccccccccccccccccc", &w2, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "q1", TOK_A), BACKEND_OK);
    /* free, but w1 came first: neither w2 nor a try-once gets it */
    CHECK_EQ_INT(
        acq_w(be_main, "q1", "cccccccccccccccccccccccccccccccc", &w2, &g),
        BACKEND_HELD);
    CHECK(g.behind);
    CHECK(g.retry_ms >= 1);
    CHECK_EQ_INT(acq(be_main, "q1", TOK_A, 5000, &g), BACKEND_HELD);
    CHECK_EQ_INT(acq_w(be_main, "q1", TOK_B, &w1, &g), BACKEND_OK);
    CHECK(w1.be_data == NULL);
    CHECK_EQ_INT(rel(be_main, "q1", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(
        acq_w(be_main, "q1", "cccccccccccccccccccccccccccccccc", &w2, &g),
        BACKEND_OK);
    CHECK(w2.be_data == NULL);
    CHECK_EQ_INT(rel(be_main, "q1", "cccccccccccccccccccccccccccccccc"),
                 BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "q1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "q1", TOK_A), BACKEND_OK);
}

static void test_cancel_wait_passes_the_turn_and_notifies(void)
{
    struct backend *other = open_be(url);
    struct lock_waiter w1 = { .id = 201,
                              .deadline_ms = clock_wall_ms() + 5000 };
    struct lock_waiter w2 = { .id = 202,
                              .deadline_ms = clock_wall_ms() + 5000 };
    struct lock_grant g;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    CHECK_EQ_INT(acq(be_main, "c1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_w(other, "c1", TOK_B, &w1, &g), BACKEND_HELD);
    CHECK_EQ_INT(acq_w(be_main, "c1", TOK_B, &w2, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "c1", TOK_A), BACKEND_OK);
    /* behind another instance's waiter: not "behind one of ours" */
    CHECK_EQ_INT(acq_w(be_main, "c1", TOK_B, &w2, &g), BACKEND_HELD);
    CHECK(!g.behind);
    notes_reset();
    CHECK_EQ_INT(redis_backend.cancel_wait(other, "c1", 2, &w1), BACKEND_OK);
    CHECK(w1.be_data == NULL);
    CHECK(notes_heard("c1", 2000)); /* the next waiter hears its turn came */
    CHECK_EQ_INT(acq_w(be_main, "c1", TOK_B, &w2, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "c1", TOK_B), BACKEND_OK);
    redis_backend.close(other);
}

static void test_dead_waiters_are_dropped_after_their_deadline(void)
{
    struct lock_waiter w1 = { .id = 301, .deadline_ms = clock_wall_ms() + 100 };
    struct lock_grant g;

    CHECK_EQ_INT(acq(be_main, "d1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_w(be_main, "d1", TOK_B, &w1, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "d1", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "d1", TOK_A, 5000, &g), BACKEND_HELD);
    CHECK(g.retry_ms >= 1 && g.retry_ms <= 1100);
    /* w1's lockd is gone: its place goes after deadline + grace (1 s) */
    check_sleep_ms(1200);
    CHECK_EQ_INT(acq(be_main, "d1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "d1", TOK_A), BACKEND_OK);
    free(w1.be_data);
}

static long long raw_int(const char *fmt, const char *arg)
{
    redisReply *r = raw(fmt, arg);
    long long v = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -9;

    freeReplyObject(r);
    return v;
}

static void test_failed_cancel_is_retried_once_redis_is_back(void)
{
    struct lock_waiter w1 = { .id = 361,
                              .deadline_ms = clock_wall_ms() + 30000 };
    struct lock_grant g;
    enum backend_result r = BACKEND_UNAVAILABLE;
    int64_t t0;

    CHECK_EQ_INT(acq(be_main, "tr1", TOK_A, 30000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_w(be_main, "tr1", TOK_B, &w1, &g), BACKEND_HELD);
    testsrv_signal(&srv, SIGKILL);
    CHECK_EQ_INT(redis_backend.cancel_wait(be_main, "tr1", 3, &w1),
                 BACKEND_UNAVAILABLE);
    CHECK(w1.be_data == NULL);
    CHECK(start_redis() == 0); /* appendonly: the place is still there */
    t0 = clock_mono_ms();
    while (r != BACKEND_OK && clock_mono_ms() - t0 < 3000) {
        r = rel(be_main, "tr1", TOK_A);
        if (r != BACKEND_OK)
            check_sleep_ms(20);
    }
    CHECK_EQ_INT(r, BACKEND_OK);
    /* the place goes within moments, not at its deadline 30 s away */
    t0 = clock_mono_ms();
    r = BACKEND_HELD;
    while (r != BACKEND_OK && clock_mono_ms() - t0 < 3000) {
        r = acq(be_main, "tr1", TOK_A, 5000, &g);
        if (r != BACKEND_OK)
            check_sleep_ms(20);
    }
    CHECK_EQ_INT(r, BACKEND_OK);
    CHECK(clock_mono_ms() - t0 < 2000);
    CHECK_EQ_INT(raw_int("ZCARD lockd:fifo:{%s}", "tr1"), 0);
    CHECK_EQ_INT(rel(be_main, "tr1", TOK_A), BACKEND_OK);
}

/* ---- lock kinds ---- */

#define TOK_C "cccccccccccccccccccccccccccccccc"
#define TOK_D "dddddddddddddddddddddddddddddddd"
#define TOK_E "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"

static enum backend_result shr(const char *key,
                               const char *tok,
                               uint32_t limit,
                               struct lock_waiter *w,
                               struct lock_grant *g)
{
    return acq_kind(be_main, key, tok, LOCK_SHARED, limit, NULL, 5000, w, g);
}

static enum backend_result exc(const char *key,
                               const char *tok,
                               struct lock_waiter *w,
                               struct lock_grant *g)
{
    return acq_kind(be_main, key, tok, LOCK_EXCLUSIVE, 0, NULL, 5000, w, g);
}

static struct lock_waiter waiter(uint64_t id)
{
    struct lock_waiter w = { .id = id, .deadline_ms = clock_wall_ms() + 10000 };
    return w;
}

static void test_shared_grants_up_to_limit_then_held(void)
{
    struct lock_grant g, h;
    uint64_t last = 0;
    const char *toks[] = { TOK_A, TOK_B, TOK_C };
    uint32_t n;

    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(shr("sl1", toks[i], 3, NULL, &g), BACKEND_OK);
        CHECK(g.fence > last);
        last = g.fence;
        CHECK_EQ_INT(g.mode, LOCK_SHARED);
        CHECK_EQ_INT(g.limit, 3);
        CHECK_EQ_INT(g.holds, 1);
        CHECK_EQ_INT(g.ttl_ms, 5000);
        check_sleep_ms(20); /* A expires first */
    }
    CHECK_EQ_INT(shr("sl1", TOK_D, 3, NULL, &h), BACKEND_HELD);
    CHECK(!h.behind);
    /* the first holder's TTL, not the last's */
    CHECK(h.retry_ms > 4000 && h.retry_ms <= 4970);
    CHECK_EQ_INT(exc("sl1", TOK_E, NULL, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, "sl1", TOK_B, false, &n), BACKEND_OK);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(shr("sl1", TOK_D, 3, NULL, &g), BACKEND_OK);
    CHECK(g.fence > last);
    CHECK_EQ_INT(shr("sl1", TOK_E, 3, NULL, &h), BACKEND_HELD);
    /* no limit: any number */
    for (int i = 0; i < 50; i++) {
        char tok[48];
        snprintf(tok, sizeof(tok), "unlimited-%032d", i);
        CHECK_EQ_INT(shr("s1u", tok, 0, NULL, &g), BACKEND_OK);
        CHECK_EQ_INT(g.limit, 0);
    }
    CHECK_EQ_INT(raw_int("DEL lockd:lock:{%s}", "s1u"), 1);
    CHECK_EQ_INT(rel_holds(be_main, "sl1", TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "sl1", TOK_C, false, &n), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "sl1", TOK_D, false, &n), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "sl1", TOK_D, false, &n),
                 BACKEND_NOT_FOUND);
    /* the last holder gone: nothing stays but the fence counter */
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "sl1"), 0);
    CHECK_EQ_INT(raw_int("EXISTS lockd:exp:{%s}", "sl1"), 0);
}

static void test_exclusive_and_shared_exclude_each_other(void)
{
    struct lock_grant g, h;
    uint64_t f1, f2;
    uint32_t n;

    CHECK_EQ_INT(exc("x1", TOK_A, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(g.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(g.holds, 1);
    f1 = g.fence;
    CHECK_EQ_INT(shr("x1", TOK_B, 0, NULL, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 4000 && h.retry_ms <= 5000);
    CHECK_EQ_INT(rel_holds(be_main, "x1", TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(shr("x1", TOK_B, 0, NULL, &g), BACKEND_OK);
    CHECK(g.fence > f1);
    f2 = g.fence;
    CHECK_EQ_INT(exc("x1", TOK_C, NULL, &h), BACKEND_HELD);
    CHECK_EQ_INT(shr("x1", TOK_C, 0, NULL, &h), BACKEND_OK);
    CHECK(h.fence > f2);
    /* renew and release per holder, by token */
    CHECK_EQ_INT(ren(be_main, "x1", TOK_B, 2000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.fence, f2);
    CHECK_EQ_INT(g.mode, LOCK_SHARED);
    CHECK_EQ_INT(g.ttl_ms, 2000);
    CHECK_EQ_INT(ren(be_main, "x1", TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel_holds(be_main, "x1", TOK_A, false, &n), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel_holds(be_main, "x1", TOK_B, false, &n), BACKEND_OK);
    CHECK_EQ_INT(exc("x1", TOK_A, NULL, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, "x1", TOK_C, false, &n), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "x1", TOK_C, 0, &g), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(exc("x1", TOK_A, NULL, &g), BACKEND_OK);
    CHECK(g.fence > h.fence);
    CHECK_EQ_INT(rel_holds(be_main, "x1", TOK_A, false, &n), BACKEND_OK);
}

static void test_shared_under_another_limit_is_a_mismatch(void)
{
    struct lock_grant g;
    struct lock_waiter w = waiter(401);
    uint32_t n;

    CHECK_EQ_INT(shr("lm1", TOK_A, 2, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("lm1", TOK_B, 3, NULL, &g), BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(shr("lm1", TOK_B, 0, NULL, &g), BACKEND_LIMIT_MISMATCH);
    /* whatever the wait, and no place taken */
    CHECK_EQ_INT(shr("lm1", TOK_B, 1, &w, &g), BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(raw_int("ZCARD lockd:fifo:{%s}", "lm1"), 0);
    CHECK_EQ_INT(redis_backend.cancel_wait(be_main, "lm1", 3, &w), BACKEND_OK);
    CHECK_EQ_INT(shr("lm1", TOK_B, 2, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "lm1", TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "lm1", TOK_B, false, &n), BACKEND_OK);
    /* the limit went with the last holder */
    CHECK_EQ_INT(shr("lm1", TOK_C, 0, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("lm1", TOK_D, 5, NULL, &g), BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(rel_holds(be_main, "lm1", TOK_C, false, &n), BACKEND_OK);
    /* a no-limit holder against numbers, and numbers against none */
    CHECK_EQ_INT(shr("lm1", TOK_C, 1, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("lm1", TOK_D, 0, NULL, &g), BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(rel_holds(be_main, "lm1", TOK_C, false, &n), BACKEND_OK);
}

static void test_shared_waiter_never_overtakes_an_exclusive_one(void)
{
    struct lock_waiter wx = waiter(411), ws = waiter(412);
    struct lock_grant g;
    uint32_t n;

    CHECK_EQ_INT(shr("fq1", TOK_A, 0, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(exc("fq1", TOK_B, &wx, &g), BACKEND_HELD);
    CHECK(!g.behind);
    /* the holders alone would let it in; the writer ahead does not */
    CHECK_EQ_INT(shr("fq1", TOK_C, 0, &ws, &g), BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(shr("fq1", TOK_D, 0, NULL, &g), BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(rel_holds(be_main, "fq1", TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(shr("fq1", TOK_C, 0, &ws, &g), BACKEND_HELD);
    CHECK_EQ_INT(exc("fq1", TOK_B, &wx, &g), BACKEND_OK);
    CHECK(wx.be_data == NULL);
    CHECK_EQ_INT(shr("fq1", TOK_C, 0, &ws, &g), BACKEND_HELD);
    CHECK(!g.behind);
    CHECK(g.retry_ms > 4000);
    CHECK_EQ_INT(rel_holds(be_main, "fq1", TOK_B, false, &n), BACKEND_OK);
    /* try-once never overtakes a waiter, whatever the mode */
    CHECK_EQ_INT(shr("fq1", TOK_D, 0, NULL, &g), BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(exc("fq1", TOK_D, NULL, &g), BACKEND_HELD);
    CHECK_EQ_INT(shr("fq1", TOK_C, 0, &ws, &g), BACKEND_OK);
    CHECK(ws.be_data == NULL);
    CHECK_EQ_INT(shr("fq1", TOK_D, 0, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "fq1", TOK_C, false, &n), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "fq1", TOK_D, false, &n), BACKEND_OK);
}

static void test_shared_waiters_are_granted_together(void)
{
    struct backend *other = open_be(url);
    struct lock_waiter w1 = waiter(421), w2 = waiter(422), w3 = waiter(423);
    struct lock_grant g;
    uint32_t n;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    CHECK_EQ_INT(exc("gt1", TOK_A, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(other, "gt1", TOK_B, LOCK_SHARED, 2, NULL, 5000, &w1, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(shr("gt1", TOK_C, 2, &w2, &g), BACKEND_HELD);
    CHECK_EQ_INT(shr("gt1", TOK_D, 2, &w3, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, "gt1", TOK_A, false, &n), BACKEND_OK);
    /* the second goes with the first (both fit under 2), even before it */
    CHECK_EQ_INT(shr("gt1", TOK_C, 2, &w2, &g), BACKEND_OK);
    CHECK_EQ_INT(g.mode, LOCK_SHARED);
    /* the third does not fit; behind another instance's waiter, which
     * goes first: not "behind one of ours", and a short retry */
    CHECK_EQ_INT(shr("gt1", TOK_D, 2, &w3, &g), BACKEND_HELD);
    CHECK(!g.behind);
    CHECK(g.retry_ms >= 1 && g.retry_ms <= 200);
    /* granted with others still queued: every instance hears of it */
    notes_reset();
    CHECK_EQ_INT(
        acq_kind(other, "gt1", TOK_B, LOCK_SHARED, 2, NULL, 5000, &w1, &g),
        BACKEND_OK);
    CHECK(notes_heard("gt1", 2000));
    CHECK_EQ_INT(shr("gt1", TOK_D, 2, &w3, &g), BACKEND_HELD);
    CHECK(!g.behind);
    CHECK_EQ_INT(rel_holds(be_main, "gt1", TOK_B, false, &n), BACKEND_OK);
    CHECK_EQ_INT(shr("gt1", TOK_D, 2, &w3, &g), BACKEND_OK);
    CHECK_EQ_INT(raw_int("ZCARD lockd:fifo:{%s}", "gt1"), 0);
    CHECK_EQ_INT(rel_holds(be_main, "gt1", TOK_C, false, &n), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "gt1", TOK_D, false, &n), BACKEND_OK);
    redis_backend.close(other);
}

/* Set the holds of tok's holder on key in Redis, either mode. */
static void set_holds(const char *key, const char *tok, long holds)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", srv.port, tv);
    char lk[64];
    redisReply *r = NULL;

    snprintf(lk, sizeof(lk), "lockd:lock:{%s}", key);
    if (c != NULL && c->err == 0)
        r = redisCommand(
            c, "EVAL %s 1 %s %s %ld",
            "local d = redis.sha1hex(ARGV[1]) "
            "if redis.call('HGET', KEYS[1], 't') == string.sub(d, 1, 20) "
            "then "
            "  return redis.call('HSET', KEYS[1], 'n', ARGV[2]) end "
            "local r = cmsgpack.unpack(redis.call('HGET', KEYS[1], 'h:'..d)) "
            "r[3] = tonumber(ARGV[2]) "
            "return redis.call('HSET', KEYS[1], 'h:'..d, cmsgpack.pack(r))",
            lk, tok, holds);
    CHECK(r != NULL && r->type == REDIS_REPLY_INTEGER);
    freeReplyObject(r);
    redisFree(c);
}

static void reentry_in(const char *key, enum lock_mode mode)
{
    struct lock_grant g, h;
    uint32_t n;

    CHECK_EQ_INT(acq_kind(be_main, key, TOK_A, mode, 0, NULL, 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, key, TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(h.holds, 2);
    CHECK_EQ_INT(h.fence, g.fence);
    CHECK_EQ_INT(h.ttl_ms, 5000); /* the last TTL */
    CHECK_EQ_INT(h.mode, mode);
    CHECK_EQ_INT(reenter(be_main, key, TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(h.holds, 3);
    CHECK_EQ_INT(reenter(be_main, key, TOK_B, &h), BACKEND_MISMATCH);
    CHECK_EQ_INT(ren(be_main, key, TOK_A, 3000, &h), BACKEND_OK);
    CHECK_EQ_INT(h.holds, 3); /* a renew keeps the count */
    CHECK_EQ_INT(rel_holds(be_main, key, TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(
        acq_kind(be_main, key, TOK_B, LOCK_EXCLUSIVE, 0, NULL, 5000, NULL, &h),
        BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, key, TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(rel_holds(be_main, key, TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(rel_holds(be_main, key, TOK_A, false, &n), BACKEND_NOT_FOUND);
    /* all at once */
    CHECK_EQ_INT(acq_kind(be_main, key, TOK_A, mode, 0, NULL, 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, key, TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, key, TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, key, TOK_A, true, &n), BACKEND_OK);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(ren(be_main, key, TOK_A, 0, &h), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(reenter(be_main, key, TOK_A, &h), BACKEND_NOT_FOUND);
    /* the cap: nothing changes past it */
    CHECK_EQ_INT(acq_kind(be_main, key, TOK_A, mode, 0, NULL, 5000, NULL, &g),
                 BACKEND_OK);
    set_holds(key, TOK_A, LOCK_HOLDS_MAX - 1);
    CHECK_EQ_INT(reenter(be_main, key, TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(h.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(reenter(be_main, key, TOK_A, &h), BACKEND_HOLDS_MAX);
    CHECK_EQ_INT(ren(be_main, key, TOK_A, 0, &h), BACKEND_OK);
    CHECK_EQ_INT(h.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(rel_holds(be_main, key, TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(n, LOCK_HOLDS_MAX - 1);
    CHECK_EQ_INT(rel_holds(be_main, key, TOK_A, true, &n), BACKEND_OK);
    CHECK_EQ_INT(n, 0);
}

static void test_reentry_counts_holds_up_to_the_cap(void)
{
    reentry_in("re1", LOCK_EXCLUSIVE);
    reentry_in("re2", LOCK_SHARED);
}

/* True if the text of tok is anywhere in key's hash. */
static bool token_in_redis(const char *key, const char *tok)
{
    char lk[64];
    redisReply *r;
    bool found = false;

    snprintf(lk, sizeof(lk), "lockd:lock:{%s}", key);
    r = raw("HGETALL %s", lk);
    for (size_t i = 0; r != NULL && i < r->elements; i++)
        if (memmem(r->element[i]->str, r->element[i]->len, tok, strlen(tok)) !=
            NULL)
            found = true;
    freeReplyObject(r);
    return found;
}

static void test_idempotency_key_replays_the_live_grant(void)
{
    struct backend *other = open_be(url);
    struct lock_waiter w = waiter(431);
    struct lock_grant g, h;
    uint32_t n;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    CHECK_EQ_INT(acq_kind(be_main, "id1", TOK_A, LOCK_EXCLUSIVE, 0, "req-1",
                          5000, NULL, &g),
                 BACKEND_OK);
    CHECK(!g.replay);
    CHECK(!token_in_redis("id1", TOK_A));
    check_sleep_ms(30);
    /* through another instance, with a waiter: answered again */
    CHECK_EQ_INT(
        acq_kind(other, "id1", TOK_B, LOCK_EXCLUSIVE, 0, "req-1", 5000, &w, &h),
        BACKEND_OK);
    CHECK(h.replay);
    CHECK(strcmp(h.token, TOK_A) == 0);
    CHECK_EQ_INT(h.fence, g.fence);
    CHECK(h.ttl_ms >= 1 && h.ttl_ms < 5000);
    CHECK_EQ_INT(h.holds, 1);
    CHECK(w.be_data == NULL);
    CHECK_EQ_INT(raw_int("ZCARD lockd:fifo:{%s}", "id1"), 0);
    CHECK_EQ_INT(acq_kind(be_main, "id1", TOK_B, LOCK_SHARED, 0, "req-1", 5000,
                          NULL, &h),
                 BACKEND_IDEM_CONFLICT);
    /* another key is not a retry: held */
    CHECK_EQ_INT(acq_kind(be_main, "id1", TOK_B, LOCK_EXCLUSIVE, 0, "req-2",
                          5000, NULL, &h),
                 BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, "id1", TOK_A, false, &n), BACKEND_OK);
    /* released: the key names nothing any more */
    CHECK_EQ_INT(acq_kind(be_main, "id1", TOK_B, LOCK_SHARED, 2, "req-1", 5000,
                          NULL, &h),
                 BACKEND_OK);
    CHECK(!h.replay);
    CHECK_EQ_INT(acq_kind(be_main, "id1", TOK_C, LOCK_SHARED, 2, "req-3", 5000,
                          NULL, &g),
                 BACKEND_OK);
    CHECK(!token_in_redis("id1", TOK_B));
    CHECK_EQ_INT(
        acq_kind(other, "id1", TOK_D, LOCK_SHARED, 2, "req-1", 5000, NULL, &g),
        BACKEND_OK);
    CHECK(g.replay);
    CHECK(strcmp(g.token, TOK_B) == 0);
    CHECK_EQ_INT(g.fence, h.fence);
    CHECK_EQ_INT(g.mode, LOCK_SHARED);
    CHECK_EQ_INT(g.limit, 2);
    CHECK_EQ_INT(acq_kind(be_main, "id1", TOK_D, LOCK_SHARED, 3, "req-1", 5000,
                          NULL, &g),
                 BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(acq_kind(be_main, "id1", TOK_D, LOCK_EXCLUSIVE, 0, "req-1",
                          5000, NULL, &g),
                 BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(rel_holds(be_main, "id1", TOK_B, false, &n), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "id1", TOK_C, false, &n), BACKEND_OK);
    redis_backend.close(other);
}

static void test_inspect_lists_holders_by_fence(void)
{
    struct lock_info info;
    struct lock_grant g;
    uint64_t fences[3];
    const char *toks[] = { TOK_A, TOK_B, TOK_C };
    const uint64_t ttls[] = { 8000, 3000, 5000 };
    uint32_t n;

    /* three shared holders, the second with an owner */
    for (int i = 0; i < 3; i++) {
        struct lock_req req = { .key = "in1",
                                .key_len = 3,
                                .token = toks[i],
                                .owner = i == 1 ? "pod-b" : NULL,
                                .ttl_ms = ttls[i],
                                .mode = LOCK_SHARED,
                                .limit = 4 };
        memset(&g, 0, sizeof(g));
        CHECK_EQ_INT(redis_backend.acquire(be_main, &req, &g), BACKEND_OK);
        fences[i] = g.fence;
    }
    CHECK_EQ_INT(reenter(be_main, "in1", TOK_C, &g), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "in1", 3, &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_SHARED);
    CHECK_EQ_INT(info.limit, 4);
    CHECK_EQ_INT(info.holder_count, 3);
    CHECK_EQ_INT(info.nholders, 3);
    CHECK_EQ_INT(info.fence, fences[2]);
    CHECK(info.ttl_ms > 7000 && info.ttl_ms <= 8000); /* the last to go */
    CHECK(!info.has_owner);
    for (uint32_t i = 0; info.holders != NULL && i < info.nholders; i++) {
        CHECK_EQ_INT(info.holders[i].fence, fences[i]);
        CHECK(info.holders[i].ttl_ms >= 1 && info.holders[i].ttl_ms <= ttls[i]);
        CHECK(info.holders[i].ttl_ms > ttls[i] - 1000);
        CHECK_EQ_INT(info.holders[i].holds, i == 2 ? 2 : 1);
        CHECK_EQ_INT(info.holders[i].has_owner, i == 1);
    }
    if (info.nholders == 3)
        CHECK(strcmp(info.holders[1].owner, "pod-b") == 0);
    lock_info_clear(&info);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(rel_holds(be_main, "in1", toks[i], true, &n), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "in1", 3, &info),
                 BACKEND_NOT_FOUND);
    CHECK(info.holders == NULL);
    /* exclusive: owner and holds on top, one holder listed */
    CHECK_EQ_INT(acq_full(be_main, "in1", TOK_A, "pod-x", 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "in1", TOK_A, &g), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "in1", 3, &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_INT(info.nholders, 1);
    CHECK_EQ_INT(info.holds, 2);
    CHECK(info.has_owner && strcmp(info.owner, "pod-x") == 0);
    if (info.nholders == 1) {
        CHECK_EQ_INT(info.holders[0].fence, g.fence);
        CHECK_EQ_INT(info.holders[0].holds, 2);
    }
    lock_info_clear(&info);
    CHECK_EQ_INT(rel_holds(be_main, "in1", TOK_A, true, &n), BACKEND_OK);
}

static void test_inspect_shows_the_first_hundred_holders(void)
{
    struct lock_info info;
    struct lock_grant g;
    uint64_t first = 0, last = 0;
    char tok[48];
    uint32_t n;

    for (int i = 0; i < 105; i++) {
        snprintf(tok, sizeof(tok), "many-%032d", i);
        CHECK_EQ_INT(shr("in2", tok, 0, NULL, &g), BACKEND_OK);
        if (i == 0)
            first = g.fence;
        last = g.fence;
    }
    CHECK_EQ_INT(redis_backend.inspect(be_main, "in2", 3, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 105);
    CHECK_EQ_INT(info.nholders, LOCK_HOLDERS_SHOWN);
    CHECK_EQ_INT(info.fence, last);
    if (info.nholders > 0)
        CHECK_EQ_INT(info.holders[0].fence, first);
    for (uint32_t i = 1; info.holders != NULL && i < info.nholders; i++)
        CHECK(info.holders[i].fence > info.holders[i - 1].fence);
    lock_info_clear(&info);
    for (int i = 0; i < 105; i++) {
        snprintf(tok, sizeof(tok), "many-%032d", i);
        CHECK_EQ_INT(rel_holds(be_main, "in2", tok, false, &n), BACKEND_OK);
    }
}

static void test_shared_holders_expire_one_by_one(void)
{
    struct lock_info info;
    struct lock_grant g;
    struct lock_waiter w = waiter(441);
    uint32_t n;

    CHECK_EQ_INT(
        acq_kind(be_main, "ex1", TOK_A, LOCK_SHARED, 2, NULL, 100, NULL, &g),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "ex1", TOK_B, LOCK_SHARED, 2, NULL, 400, NULL, &g),
        BACKEND_OK);
    /* the whole key lives as long as its last holder */
    CHECK(raw_int("PTTL lockd:lock:{%s}", "ex1") > 300);
    CHECK(raw_int("PTTL lockd:exp:{%s}", "ex1") > 300);
    CHECK_EQ_INT(shr("ex1", TOK_C, 2, &w, &g), BACKEND_HELD);
    CHECK(g.retry_ms >= 1 && g.retry_ms <= 100);
    check_sleep_ms(200);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "ex1", 3, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    lock_info_clear(&info);
    CHECK_EQ_INT(ren(be_main, "ex1", TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel_holds(be_main, "ex1", TOK_A, false, &n), BACKEND_MISMATCH);
    CHECK_EQ_INT(shr("ex1", TOK_C, 2, &w, &g), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "ex1", TOK_C, false, &n), BACKEND_OK);
    check_sleep_ms(300);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "ex1", 3, &info),
                 BACKEND_NOT_FOUND);
    /* with no traffic, nothing stays but the fence counter */
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "ex1"), 0);
    CHECK_EQ_INT(raw_int("EXISTS lockd:exp:{%s}", "ex1"), 0);
    CHECK_EQ_INT(ren(be_main, "ex1", TOK_B, 0, &g), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(exc("ex1", TOK_A, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "ex1", TOK_A, false, &n), BACKEND_OK);
}

/* ---- list, force_release, held_count, takeover, grant time ---- */

/* One page of list(): after NULL = from the first key. */
static enum backend_result list_page(struct backend *be,
                                     const char *prefix,
                                     size_t prefix_len,
                                     const char *after,
                                     size_t after_len,
                                     uint32_t limit,
                                     struct lock_list *out)
{
    static struct lock_entry entries[LOCK_LIST_MAX];
    struct lock_list_req req = { .prefix = prefix,
                                 .prefix_len = prefix_len,
                                 .after = after,
                                 .after_len = after_len,
                                 .limit = limit };

    memset(out, 0, sizeof(*out));
    out->entries = entries;
    return redis_backend.list(be, &req, out);
}

/* Every page of prefix (limit each) into keys[] (at most max, each
 * NUL-terminated in its own LOCK_KEY_MAX + 1 slot): how many keys, or -1
 * on an error, a page over limit, or keys out of order. *pages counts the
 * calls, *short_pages those that stopped early (n < limit, more). */
static int list_all(struct backend *be,
                    const char *prefix,
                    uint32_t limit,
                    char (*keys)[LOCK_KEY_MAX + 1],
                    int max,
                    int *pages,
                    int *short_pages)
{
    struct lock_list out;
    char after[LOCK_KEY_MAX + 1];
    size_t after_len = 0;
    int n = 0;

    *pages = 0;
    *short_pages = 0;
    for (int i = 0; i < 200; i++) { /* bounded: 200 pages at most */
        if (list_page(be, prefix, strlen(prefix), after_len ? after : NULL,
                      after_len, limit, &out) != BACKEND_OK ||
            out.n > limit)
            return -1;
        (*pages)++;
        for (size_t j = 0; j < out.n; j++) {
            if (n >= max ||
                strncmp(out.entries[j].key, prefix, strlen(prefix)) != 0)
                return -1;
            if (n > 0 && strcmp(keys[n - 1], out.entries[j].key) >= 0)
                return -1;
            memcpy(keys[n++], out.entries[j].key, LOCK_KEY_MAX + 1);
        }
        if (!out.more)
            return n;
        if (out.n < limit)
            (*short_pages)++;
        if (out.resume_len == 0)
            return -1;
        memcpy(after, out.resume, out.resume_len + 1);
        after_len = out.resume_len;
    }
    return -1;
}

static char listed[400][LOCK_KEY_MAX + 1];

static long long index_count(const char *key);

static void test_list_pages_every_held_key_once_in_order(void)
{
    struct lock_grant g;
    char k[32];
    int n, pages, shorts;
    uint64_t fence7 = 0;
    struct lock_list out;

    for (int i = 0; i < 250; i++) {
        snprintf(k, sizeof(k), "lp/%03d", (i * 7) % 250); /* not in order */
        CHECK_EQ_INT(
            acq_full(be_main, k, TOK_A, i % 2 ? "pod" : NULL, 10000, NULL, &g),
            BACKEND_OK);
        if ((i * 7) % 250 == 7)
            fence7 = g.fence;
    }
    /* neighbours outside the prefix */
    CHECK_EQ_INT(acq(be_main, "lp", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "lp0", TOK_A, 10000, &g), BACKEND_OK);
    n = list_all(be_main, "lp/", 7, listed, 400, &pages, &shorts);
    CHECK_EQ_INT(n, 250);
    CHECK_EQ_INT(pages, 36); /* 35 full pages, then 5 keys */
    for (int i = 0; i < n && i < 250; i++) {
        snprintf(k, sizeof(k), "lp/%03d", i);
        CHECK(strcmp(listed[i], k) == 0);
    }
    /* the summary is inspect's, never a token */
    CHECK_EQ_INT(list_page(be_main, "lp/00", 5, "lp/006", 6, 1, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 1);
    CHECK(out.more);
    CHECK(strcmp(out.entries[0].key, "lp/007") == 0);
    CHECK_EQ_INT(out.entries[0].key_len, 6);
    CHECK_EQ_INT(out.resume_len, 6);
    CHECK(strcmp(out.resume, "lp/007") == 0);
    CHECK_EQ_INT(out.entries[0].mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(out.entries[0].fence, fence7);
    CHECK_EQ_INT(out.entries[0].holder_count, 1);
    CHECK(out.entries[0].ttl_ms > 5000 && out.entries[0].ttl_ms <= 10000);
    CHECK(out.entries[0].expires_at_ms > clock_wall_ms() + 5000);
    CHECK(out.entries[0].has_owner);
    CHECK(strcmp(out.entries[0].owner, "pod") == 0);
    /* the last page: no more */
    CHECK_EQ_INT(list_page(be_main, "lp/", 3, "lp/248", 6, 7, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 1);
    CHECK(!out.more);
    for (int i = 0; i < 250; i++) {
        snprintf(k, sizeof(k), "lp/%03d", i);
        CHECK_EQ_INT(rel(be_main, k, TOK_A), BACKEND_OK);
    }
    CHECK_EQ_INT(rel(be_main, "lp", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "lp0", TOK_A), BACKEND_OK);
    /* released keys leave the index at once */
    for (int i = 0; i < 250; i += 7) {
        snprintf(k, sizeof(k), "lp/%03d", i);
        CHECK(index_count(k) == 0);
    }
    CHECK_EQ_INT(list_page(be_main, "lp", 2, NULL, 0, 10, &out), BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK(!out.more);
}

/* The index's bucket for a key (holders.lua): "lockd:keys#" hi for the
 * least hi > key in "lockd:keys@", or "lockd:keys" when none is. */
#define IX_BUCKET                                                  \
    "local hi = redis.call('ZRANGEBYLEX', KEYS[1] .. '@', '(' .. " \
    "ARGV[1], '+', 'LIMIT', 0, 1)[1] "                             \
    "local b = KEYS[1] if hi then b = b .. '#' .. hi end "

/* EVAL of script with the index's name and key (any bytes). */
static redisReply *index_eval(const char *script, const char *key)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", srv.port, tv);
    redisReply *r = NULL;
    const char *argv[5] = { "EVAL", script, "1", "lockd:keys", key };
    size_t lens[5] = { 4, strlen(script), 1, 10, strlen(key) };

    if (c != NULL && c->err == 0)
        r = redisCommandArgv(c, 5, argv, lens);
    redisFree(c);
    return r;
}

/* key's members in its bucket of the index: key NUL fence, one each. */
static redisReply *index_members(const char *key)
{
    return index_eval(IX_BUCKET "return redis.call('ZRANGEBYLEX', b, '[' "
                                ".. ARGV[1], '[' .. ARGV[1] .. '\\0\\255')",
                      key);
}

/* Put key NUL fence into key's bucket, as a grant would. */
static void index_add(const char *key, unsigned fence)
{
    char script[512];

    snprintf(script, sizeof(script),
             IX_BUCKET
             "return redis.call('ZADD', b, 0, ARGV[1] .. '\\0' .. '%u')",
             fence);
    freeReplyObject(index_eval(script, key));
}

/* Take key's members out of its bucket. */
static void index_del(const char *key)
{
    freeReplyObject(index_eval(IX_BUCKET
                               "return redis.call('ZREMRANGEBYLEX', b, '[' .. "
                               "ARGV[1], '[' .. ARGV[1] .. '\\0\\255')",
                               key));
}

/* How many index members key has (-1: no answer). */
static long long index_count(const char *key)
{
    redisReply *r = index_members(key);
    long long n =
        r != NULL && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;

    freeReplyObject(r);
    return n;
}

/* The fence in key's own index member: 0 when it has none. */
static uint64_t index_fence(const char *key)
{
    redisReply *r = index_members(key);
    size_t n = strlen(key);
    uint64_t f = 0;

    for (size_t i = 0;
         r != NULL && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *m = r->element[i];
        if (m->type == REDIS_REPLY_STRING && m->len > n + 1 &&
            m->str[n] == '\0')
            f = strtoull(m->str + n + 1, NULL, 10);
    }
    freeReplyObject(r);
    return f;
}

static bool in_index(const char *key)
{
    return index_count(key) > 0;
}

static void test_list_leaves_out_expired_keys_and_prunes_them(void)
{
    struct lock_grant g;
    struct lock_list out;

    CHECK_EQ_INT(acq(be_main, "le/a", TOK_A, 40, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "le/b", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("le/c", TOK_A, 0, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "le/c", TOK_B, LOCK_SHARED, 0, NULL, 40, NULL, &g),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "le/d", TOK_B, LOCK_SHARED, 0, NULL, 40, NULL, &g),
        BACKEND_OK);
    CHECK(in_index("le/a") && in_index("le/d"));
    check_sleep_ms(100);
    CHECK_EQ_INT(list_page(be_main, "le/", 3, NULL, 0, 10, &out), BACKEND_OK);
    CHECK_EQ_INT(out.n, 2);
    CHECK(!out.more);
    CHECK(out.n == 2 && strcmp(out.entries[0].key, "le/b") == 0 &&
          strcmp(out.entries[1].key, "le/c") == 0);
    /* the shared key shows its live holder only */
    CHECK(out.n == 2 && out.entries[1].holder_count == 1 &&
          out.entries[1].mode == LOCK_SHARED && !out.entries[1].has_owner);
    /* Redis expired le/a and le/d by themselves: list took out their
     * members, and one an older lockd's release left */
    CHECK(!in_index("le/a"));
    CHECK(!in_index("le/d"));
    index_add("le/f", 7);
    CHECK_EQ_INT(index_fence("le/f"), 7);
    CHECK_EQ_INT(list_page(be_main, "le/", 3, NULL, 0, 10, &out), BACKEND_OK);
    CHECK_EQ_INT(out.n, 2);
    CHECK(!in_index("le/f"));
    CHECK(in_index("le/b"));
    CHECK_EQ_INT(rel(be_main, "le/b", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "le/c", TOK_A), BACKEND_OK);
    CHECK(!in_index("le/b"));
    CHECK(!in_index("le/c"));
}

/* The index's buckets (holders.lua), checked with Redis's own byte
 * order: the directory names every bucket but the last (a name whose
 * bucket Redis dropped once empty routes no key but to a bucket the next
 * grant makes; not counted), none holds more than 120 members, each is a
 * listpack (or a ziplist, Redis 6) with an expiry, and each holds only
 * keys from the hi before it to its own. {buckets, members} or an error
 * string. */
#define IX_CHECK                                                              \
    "local his = redis.call('ZRANGE', KEYS[1] .. '@', 0, -1) "                \
    "local bs = {} "                                                          \
    "for _, hi in ipairs(his) do bs[#bs + 1] = {hi, KEYS[1] .. '#' .. hi} "   \
    "end "                                                                    \
    "bs[#bs + 1] = {false, KEYS[1]} "                                         \
    "local total, count = 0, 0 "                                              \
    "for i, b in ipairs(bs) do "                                              \
    "  local n = redis.call('ZCARD', b[2]) "                                  \
    "  if n > 120 then return 'a bucket of ' .. n end "                       \
    "  if n > 0 then "                                                        \
    "    local e = redis.call('OBJECT', 'ENCODING', b[2]) "                   \
    "    if e ~= 'listpack' and e ~= 'ziplist' then return e end "            \
    "    if redis.call('PTTL', b[2]) < 0 then return 'no expiry' end "        \
    "    count = count + 1 "                                                  \
    "  end "                                                                  \
    "  if b[1] and redis.call('ZLEXCOUNT', b[2], '[' .. b[1], '+') > 0 then " \
    "    return 'past its hi ' .. b[1] end "                                  \
    "  if i > 1 and "                                                         \
    "     redis.call('ZLEXCOUNT', b[2], '-', '(' .. bs[i - 1][1]) > 0 then "  \
    "    return 'before the hi ' .. bs[i - 1][1] end "                        \
    "  total = total + n "                                                    \
    "end "                                                                    \
    "return {count, total}"

/* IX_CHECK's buckets (-1 on an error, printed). */
static long long index_buckets(void)
{
    redisReply *r = index_eval(IX_CHECK, "");
    long long n = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        n = r->element[0]->integer;
    else
        CHECK_MSG(false, "index: %s",
                  r != NULL && r->str != NULL ? r->str : "no answer");
    freeReplyObject(r);
    return n;
}

/* The index is cut into buckets of at most 120 members, small enough for
 * Redis's compact encoding: they split as keys come, merge and go as keys
 * leave, and a list pages through them in key order whatever the page
 * size. */
static void test_index_is_cut_into_small_buckets(void)
{
    struct lock_grant g;
    struct lock_list out;
    char k[32];
    int n, pages, shorts;
    long long b;

    CHECK(index_buckets() >= 0);
    for (int i = 0; i < 390; i++) {
        snprintf(k, sizeof(k), "ix/%03d", (i * 37) % 390); /* not in order */
        CHECK_EQ_INT(acq(be_main, k, TOK_A, 10000, &g), BACKEND_OK);
    }
    b = index_buckets();
    CHECK_MSG(b >= 4, "390 keys in %lld buckets", b);
    for (int i = 0; i < 390; i += 13) {
        snprintf(k, sizeof(k), "ix/%03d", i);
        CHECK_EQ_INT(index_count(k), 1);
    }
    for (uint32_t limit = 2; limit <= 1000; limit = limit * 5 + 2) {
        n = list_all(be_main, "ix/", limit, listed, 400, &pages, &shorts);
        CHECK_MSG(n == 390, "limit %u: %d keys", (unsigned)limit, n);
        CHECK_EQ_INT(shorts, 0);
        for (int i = 0; i < n && i < 390; i++) {
            snprintf(k, sizeof(k), "ix/%03d", i);
            CHECK(strcmp(listed[i], k) == 0);
        }
    }
    /* a page that starts inside a bucket and ends in a later one */
    CHECK_EQ_INT(list_page(be_main, "ix/", 3, "ix/100", 6, 200, &out),
                 BACKEND_OK);
    CHECK(out.n == 200 && out.more &&
          strcmp(out.entries[0].key, "ix/101") == 0 &&
          strcmp(out.entries[199].key, "ix/300") == 0);
    /* keys leave: small buckets join their neighbours, empty ones go */
    for (int i = 0; i < 390; i++) {
        snprintf(k, sizeof(k), "ix/%03d", i);
        if (i % 30 != 0)
            CHECK_EQ_INT(rel(be_main, k, TOK_A), BACKEND_OK);
    }
    CHECK_MSG(index_buckets() < b, "%lld buckets after 377 of 390 left",
              index_buckets());
    n = list_all(be_main, "ix/", 5, listed, 400, &pages, &shorts);
    CHECK_EQ_INT(n, 13);
    for (int i = 0; i < 390; i += 30) {
        snprintf(k, sizeof(k), "ix/%03d", i);
        CHECK_EQ_INT(rel(be_main, k, TOK_A), BACKEND_OK);
        CHECK_EQ_INT(index_count(k), 0);
    }
    CHECK(index_buckets() >= 0);
    CHECK_EQ_INT(list_page(be_main, "ix/", 3, NULL, 0, 10, &out), BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
}

/* A name left in the directory once its bucket went (Redis drops an
 * emptied set; the directory is looked at about every fourth release)
 * routes no key but its bucket's: a list walks past it at the cost of one
 * entry of its budget, drops it, and still pages every key once in
 * order; a page may end on such names, short, and resume past them. */
static void test_list_walks_past_names_of_gone_buckets(void)
{
    char k[32];
    struct backend *be;
    struct lock_grant g;
    struct lock_list out;
    redisReply *r;
    int n, pages, shorts, a = -1, b = -1;

    be = open_prefixed("dl:");
    if (be == NULL)
        return;
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof(k), "k/%03d", (i * 37) % 300);
        CHECK_EQ_INT(acq(be, k, TOK_A, 10000, &g), BACKEND_OK);
    }
    /* the buckets outlive their keys: with a minute left or less (here
     * 300 ms), the next grant that makes a second of the counts (a TTL
     * ending in a second not counted yet) gives every bucket and the
     * directory ten minutes more than its holder needs */
    CHECK_EQ_INT(
        raw_int("EVAL %s 0",
                "for _, hi in ipairs(redis.call('ZRANGE', 'dl:keys@', 0, "
                "-1)) do redis.call('PEXPIRE', 'dl:keys#' .. hi, 300) end "
                "redis.call('PEXPIRE', 'dl:keys@', 300) "
                "redis.call('PEXPIRE', 'dl:counts', 300) return 1"),
        1);
    CHECK_EQ_INT(acq(be, "k/~", TOK_A, 30000, &g), BACKEND_OK);
    CHECK_EQ_INT(
        raw_int("EVAL %s 0",
                "local low = 0 for _, hi in ipairs(redis.call('ZRANGE',"
                " 'dl:keys@', 0, -1)) do if redis.call('PTTL', "
                "'dl:keys#' .. hi) < 600000 then low = low + 1 end "
                "end return low"),
        0);
    CHECK(raw_int("PTTL dl:keys@%s", "") > 600000);
    CHECK_EQ_INT(rel(be, "k/~", TOK_A), BACKEND_OK);
    /* the keys of the second bucket, [a, b) (the directory names the
     * buckets by their ends), all go; then 40 names between a and b,
     * which route no key */
    r = raw("ZRANGE dl:keys@ 0 %s", "1");
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        a = atoi(r->element[0]->str + 2);
        b = atoi(r->element[1]->str + 2);
    }
    freeReplyObject(r);
    CHECK_MSG(a > 0 && b > a, "buckets from k/%03d and k/%03d", a, b);
    if (a <= 0 || b <= a) {
        redis_backend.close(be);
        return;
    }
    for (int i = a; i < b; i++) {
        snprintf(k, sizeof(k), "k/%03d", i);
        CHECK_EQ_INT(rel(be, k, TOK_A), BACKEND_OK);
    }
    for (int i = 0; i < 40; i++) {
        snprintf(k, sizeof(k), "k/%03d!%02d", a, i);
        CHECK_EQ_INT(raw_int("ZADD dl:keys@ 0 %s", k), 1);
    }
    snprintf(k, sizeof(k), "k/%03d", a - 1);
    CHECK_EQ_INT(list_page(be, "k/", 2, k, 5, 1, &out), BACKEND_OK);
    CHECK_MSG(out.n == 0 && out.more && out.resume_len == 8 &&
                  strncmp(out.resume, k, 5) > 0,
              "a page over 18 names of gone buckets: %zu keys, more %d, "
              "resume %s",
              out.n, (int)out.more, out.more ? out.resume : "-");
    n = list_all(be, "k/", 5, listed, 400, &pages, &shorts);
    CHECK_EQ_INT(n, 300 - (b - a));
    for (int i = 0; i < n && i < 300; i++) {
        snprintf(k, sizeof(k), "k/%03d", i < a ? i : i + (b - a));
        CHECK(strcmp(listed[i], k) == 0);
    }
    /* the names went; each one left names a bucket */
    CHECK_EQ_INT(raw_int("EVAL %s 0",
                         "local n = 0 for _, lo in ipairs(redis.call('ZRANGE', "
                         "'dl:keys@', 0, -1)) do if redis.call('EXISTS', "
                         "'dl:keys#' .. lo) == 0 then n = n + 1 end end "
                         "return n"),
                 0);
    for (int i = 0; i < 300; i++) {
        snprintf(k, sizeof(k), "k/%03d", i);
        if (i < a || i >= b)
            CHECK_EQ_INT(rel(be, k, TOK_A), BACKEND_OK);
    }
    redis_backend.close(be);
}

/* A key may have two members: an earlier holder's stayed (one an older
 * lockd left) beside the
 * grant's: list shows the key once, and a page that ends on it resumes
 * past both. */
static void test_list_shows_a_key_of_two_members_once(void)
{
    struct lock_grant g;
    struct lock_list out;

    CHECK_EQ_INT(acq(be_main, "l2/a", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "l2/b", TOK_A, 10000, &g), BACKEND_OK);
    index_add("l2/a", 123456789);
    CHECK_EQ_INT(index_count("l2/a"), 2);
    CHECK_EQ_INT(list_page(be_main, "l2/", 3, NULL, 0, 10, &out), BACKEND_OK);
    CHECK_EQ_INT(out.n, 2);
    CHECK(out.n == 2 && strcmp(out.entries[0].key, "l2/a") == 0 &&
          strcmp(out.entries[1].key, "l2/b") == 0);
    CHECK_EQ_INT(list_page(be_main, "l2/", 3, NULL, 0, 1, &out), BACKEND_OK);
    CHECK(out.n == 1 && out.more && strcmp(out.entries[0].key, "l2/a") == 0);
    CHECK_EQ_INT(list_page(be_main, "l2/", 3, "l2/a", 4, 1, &out), BACKEND_OK);
    CHECK(out.n == 1 && strcmp(out.entries[0].key, "l2/b") == 0);
    /* the release takes its own member; the earlier one goes when a list
     * finds the key free */
    CHECK_EQ_INT(rel(be_main, "l2/a", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(index_count("l2/a"), 1);
    CHECK_EQ_INT(list_page(be_main, "l2/", 3, NULL, 0, 10, &out), BACKEND_OK);
    CHECK(out.n == 1 && strcmp(out.entries[0].key, "l2/b") == 0);
    CHECK_EQ_INT(index_count("l2/a"), 0);
    CHECK_EQ_INT(rel(be_main, "l2/b", TOK_A), BACKEND_OK);
}

static void test_list_bytes_over_0x7f_and_prefix_of_0xff(void)
{
    /* byte order: a < é (c3 a9) < 中 (e4 b8 ad) < U+10FFFF (f4 8f bf bf) */
    static const char *const keys[] = {
        "hb/a", "hb/\xc3\xa9", "hb/\xe4\xb8\xad", "hb/\xf4\x8f\xbf\xbf",
        "hb0",  NULL
    };
    struct lock_grant g;
    struct lock_list out;
    int n, pages, shorts;

    for (int i = 0; keys[i] != NULL; i++)
        CHECK_EQ_INT(acq(be_main, keys[i], TOK_A, 10000, &g), BACKEND_OK);
    n = list_all(be_main, "hb/", 2, listed, 400, &pages, &shorts);
    CHECK_EQ_INT(n, 4);
    for (int i = 0; i < n && i < 4; i++)
        CHECK(strcmp(listed[i], keys[i]) == 0);
    /* a prefix ending inside a character */
    CHECK_EQ_INT(list_page(be_main, "hb/\xc3", 4, NULL, 0, 10, &out),
                 BACKEND_OK);
    CHECK(out.n == 1 && strcmp(out.entries[0].key, keys[1]) == 0);
    CHECK_EQ_INT(list_page(be_main, "hb/\xf4", 4, NULL, 0, 10, &out),
                 BACKEND_OK);
    CHECK(out.n == 1 && strcmp(out.entries[0].key, keys[3]) == 0);
    /* prefixes ending in 0xff: their range ends where "hb0" begins, and
     * no key starts with them */
    CHECK_EQ_INT(list_page(be_main, "hb/\xff", 4, NULL, 0, 10, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK(!out.more);
    CHECK_EQ_INT(list_page(be_main, "hb/\xff\xff", 5, NULL, 0, 10, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK_EQ_INT(list_page(be_main, "\xff\xff", 2, NULL, 0, 10, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    /* after before the prefix starts at the prefix; after inside it */
    CHECK_EQ_INT(list_page(be_main, "hb/", 3, "ha", 2, 1, &out), BACKEND_OK);
    CHECK(out.n == 1 && strcmp(out.entries[0].key, "hb/a") == 0);
    CHECK_EQ_INT(list_page(be_main, "hb/", 3, "hb/\xe4", 4, 1, &out),
                 BACKEND_OK);
    CHECK(out.n == 1 && strcmp(out.entries[0].key, keys[2]) == 0);
    /* the empty prefix from a key on */
    CHECK_EQ_INT(list_page(be_main, "", 0, keys[3], strlen(keys[3]), 1, &out),
                 BACKEND_OK);
    CHECK(out.n == 1 && strcmp(out.entries[0].key, "hb0") == 0);
    for (int i = 0; keys[i] != NULL; i++)
        CHECK_EQ_INT(rel(be_main, keys[i], TOK_A), BACKEND_OK);
}

static void test_list_shared_key_sums_up_its_holders(void)
{
    struct lock_grant g;
    struct lock_list out;
    uint64_t top = 0;
    int64_t last = 0;

    for (int i = 0; i < 3; i++) {
        const char *tok = i == 0 ? TOK_A : (i == 1 ? TOK_B : TOK_C);
        CHECK_EQ_INT(acq_kind(be_main, "ls/s", tok, LOCK_SHARED, 5, NULL,
                              i == 1 ? 9000 : 3000, NULL, &g),
                     BACKEND_OK);
        if (g.fence > top)
            top = g.fence;
        if (g.expires_at_ms > last)
            last = g.expires_at_ms;
    }
    CHECK_EQ_INT(list_page(be_main, "ls/", 3, NULL, 0, 10, &out), BACKEND_OK);
    CHECK_EQ_INT(out.n, 1);
    CHECK_EQ_INT(out.entries[0].mode, LOCK_SHARED);
    CHECK_EQ_INT(out.entries[0].holder_count, 3);
    CHECK_EQ_INT(out.entries[0].fence, top);
    CHECK(out.entries[0].ttl_ms > 8000 && out.entries[0].ttl_ms <= 9000);
    CHECK(out.entries[0].expires_at_ms >= last - 50 &&
          out.entries[0].expires_at_ms <= last);
    CHECK(!out.entries[0].has_owner);
    CHECK_EQ_INT(rel(be_main, "ls/s", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "ls/s", TOK_B), BACKEND_OK);
    CHECK(in_index("ls/s")); /* one holder is left */
    CHECK_EQ_INT(rel(be_main, "ls/s", TOK_C), BACKEND_OK);
    CHECK(!in_index("ls/s"));
}

static void test_list_stops_at_its_budget_of_expired_keys(void)
{
    struct lock_grant g;
    struct lock_list out;
    char k[32];
    int n, pages, shorts;

    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "lb/0%02d", i);
        CHECK_EQ_INT(acq(be_main, k, TOK_A, 10000, &g), BACKEND_OK);
    }
    for (int i = 1; i <= 3; i++) {
        snprintf(k, sizeof(k), "lb/z%d", i);
        CHECK_EQ_INT(acq(be_main, k, TOK_A, 10000, &g), BACKEND_OK);
    }
    /* the first 100 expire together, once no grant runs (a grant's
     * sampling could take out some of them) */
    CHECK_EQ_INT(raw_int("EVAL %s 0",
                         "for i = 0, 99 do redis.call('PEXPIRE', "
                         "string.format('lockd:lock:{lb/0%02d}', i), 1) end "
                         "return 1"),
                 1);
    check_sleep_ms(20);
    /* limit 7: a budget of 2 * 7 + 16 = 30 entries, all expired */
    CHECK_EQ_INT(list_page(be_main, "lb/", 3, NULL, 0, 7, &out), BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK(out.more);
    CHECK(strcmp(out.resume, "lb/029") == 0);
    CHECK_EQ_INT(out.resume_len, 6);
    /* the entries it looked at went, and no other */
    CHECK(!in_index("lb/000") && !in_index("lb/029") && in_index("lb/030"));
    /* paging on from the start reaches the live keys, each once: 30, 30,
     * then 10 + 3 */
    n = list_all(be_main, "lb/", 7, listed, 400, &pages, &shorts);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(shorts, 2);
    CHECK(n == 3 && strcmp(listed[0], "lb/z1") == 0 &&
          strcmp(listed[2], "lb/z3") == 0);
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "lb/%03d", i);
        CHECK(!in_index(k));
    }
    for (int i = 1; i <= 3; i++) {
        snprintf(k, sizeof(k), "lb/z%d", i);
        CHECK_EQ_INT(rel(be_main, k, TOK_A), BACKEND_OK);
    }
}

static void test_force_release_exclusive_with_reentries(void)
{
    struct lock_grant g, h;
    struct lock_info info = { 0 };

    CHECK_EQ_INT(acq_full(be_main, "fr/x", TOK_A, "pod-f", 5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "fr/x", TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "fr/x", TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.force_release(be_main, "fr/x", 4, &info),
                 BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_INT(info.holds, 3);
    CHECK_EQ_INT(info.fence, g.fence);
    CHECK(info.ttl_ms > 4000 && info.ttl_ms <= 5000);
    CHECK(info.has_owner && strcmp(info.owner, "pod-f") == 0);
    CHECK(info.nholders == 1 && info.holders != NULL &&
          info.holders[0].fence == g.fence);
    lock_info_clear(&info);
    /* the key is free, the old token dead, the fence counter kept */
    CHECK_EQ_INT(redis_backend.inspect(be_main, "fr/x", 4, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(ren(be_main, "fr/x", TOK_A, 0, &h), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be_main, "fr/x", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(redis_backend.force_release(be_main, "fr/x", 4, &info),
                 BACKEND_NOT_FOUND);
    CHECK(!in_index("fr/x"));
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "fr/x"), 0);
    CHECK_EQ_INT(acq(be_main, "fr/x", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(h.expired_fence, 0); /* freed, not expired */
    CHECK_EQ_INT(rel(be_main, "fr/x", TOK_B), BACKEND_OK);
}

static void test_force_release_shared_holders(void)
{
    const char *toks[] = { TOK_A, TOK_B, TOK_C };
    struct lock_grant g[3], h;
    struct lock_info info = { 0 };

    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(acq_kind(be_main, "fr/s", toks[i], LOCK_SHARED, 4,
                              i == 1 ? "idem-fr" : NULL, 5000, NULL, &g[i]),
                     BACKEND_OK);
    CHECK_EQ_INT(redis_backend.force_release(be_main, "fr/s", 4, &info),
                 BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_SHARED);
    CHECK_EQ_INT(info.limit, 4);
    CHECK_EQ_INT(info.holder_count, 3);
    CHECK_EQ_INT(info.nholders, 3);
    CHECK_EQ_INT(info.fence, g[2].fence);
    for (uint32_t i = 0; i < info.nholders && i < 3; i++)
        CHECK_EQ_INT(info.holders[i].fence, g[i].fence);
    lock_info_clear(&info);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(ren(be_main, "fr/s", toks[i], 0, &h), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(raw_int("EXISTS lockd:exp:{%s}", "fr/s"), 0);
    /* the Idempotency-Key went with its holder: a new grant, not a replay;
     * under another limit too (the key's limit went as well) */
    CHECK_EQ_INT(acq_kind(be_main, "fr/s", TOK_D, LOCK_SHARED, 2, "idem-fr",
                          5000, NULL, &h),
                 BACKEND_OK);
    CHECK(!h.replay);
    CHECK(h.fence > g[2].fence);
    CHECK_EQ_INT(h.expired_fence, 0);
    CHECK_EQ_INT(rel(be_main, "fr/s", TOK_D), BACKEND_OK);
}

static void test_force_release_of_a_free_key_is_not_found(void)
{
    struct lock_grant g;
    struct lock_info info = { 0 };

    CHECK_EQ_INT(redis_backend.force_release(be_main, "fr/never", 8, &info),
                 BACKEND_NOT_FOUND);
    CHECK(info.holders == NULL && info.holder_count == 0);
    CHECK_EQ_INT(acq(be_main, "fr/gone", TOK_A, 30, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("fr/gone2", TOK_A, 0, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(raw_int("PEXPIRE lockd:lock:{fr/gone2} %s", "30"), 1);
    check_sleep_ms(80);
    CHECK_EQ_INT(redis_backend.force_release(be_main, "fr/gone", 7, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(redis_backend.force_release(be_main, "fr/gone2", 8, &info),
                 BACKEND_NOT_FOUND);
    /* their fenced members stay: the witnesses of expired holders */
    CHECK(in_index("fr/gone") && in_index("fr/gone2"));
}

static void test_force_release_wakes_a_waiter_on_another_instance(void)
{
    struct backend *other = open_be(url);
    struct backend *admin = be_open(url, NULL, NULL); /* hears nothing */
    struct lock_waiter w = waiter(77);
    struct lock_grant g;
    struct lock_info info = { 0 };
    int64_t t0;

    CHECK(other != NULL && admin != NULL);
    if (other == NULL || admin == NULL) {
        redis_backend.close(other);
        redis_backend.close(admin);
        return;
    }
    CHECK_EQ_INT(acq(admin, "fw/x", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_full(other, "fw/x", TOK_B, NULL, 10000, &w, &g),
                 BACKEND_HELD);
    notes_watch("fw/x", 4);
    t0 = clock_mono_ms();
    CHECK_EQ_INT(redis_backend.force_release(admin, "fw/x", 4, &info),
                 BACKEND_OK);
    lock_info_clear(&info);
    /* through Redis (admin has no hook), long before the retry hint */
    CHECK(notes_watched(1000) > 0);
    CHECK(clock_mono_ms() - t0 < 1000);
    CHECK_EQ_INT(acq_full(other, "fw/x", TOK_B, NULL, 10000, &w, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(rel(other, "fw/x", TOK_B), BACKEND_OK);
    notes_watch("", 0);
    redis_backend.close(admin);
    redis_backend.close(other);
}

static void test_held_count_counts_live_holders(void)
{
    char u[160];
    struct backend *be;
    struct lock_grant g;
    uint32_t n;

    be = open_prefixed("hc:");
    if (be == NULL)
        return;
    CHECK_EQ_INT(redis_backend.held_count(be), 0);
    CHECK_EQ_INT(acq(be, "x1", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "x2", TOK_A, 300, &g), BACKEND_OK);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(
            acq_kind(be, "s1", i == 0 ? TOK_A : (i == 1 ? TOK_B : TOK_C),
                     LOCK_SHARED, 0, NULL, i == 2 ? 300 : 10000, NULL, &g),
            BACKEND_OK);
    CHECK_EQ_INT(redis_backend.held_count(be), 5);
    /* re-entries and renewals are not holders */
    CHECK_EQ_INT(reenter(be, "x1", TOK_A, &g), BACKEND_OK);
    CHECK_EQ_INT(ren(be, "s1", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.held_count(be), 5);
    /* expiry, by Redis's clock, with no script run: a holder counts
     * until the second it expires in has passed */
    check_sleep_ms(1350);
    CHECK_EQ_INT(redis_backend.held_count(be), 3);
    CHECK_EQ_INT(rel_holds(be, "x1", TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.held_count(be), 3);
    CHECK_EQ_INT(rel_holds(be, "x1", TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.held_count(be), 2);
    CHECK_EQ_INT(rel(be, "s1", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.held_count(be), 1);
    /* a renew moves the holder's expiry in the count too */
    CHECK_EQ_INT(acq(be, "x3", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.held_count(be), 2);
    CHECK_EQ_INT(ren(be, "x3", TOK_A, 40, &g), BACKEND_OK);
    check_sleep_ms(1080);
    CHECK_EQ_INT(redis_backend.held_count(be), 1);
    CHECK_EQ_INT(rel(be, "s1", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(redis_backend.held_count(be), 0);
    /* a count takes out the index members of free keys it samples (64 of
     * a bucket: all of them here), and seconds passed of the counts; a
     * live key's member stays */
    CHECK_EQ_INT(acq(be, "x4", TOK_A, 10000, &g), BACKEND_OK);
    freeReplyObject(raw("EVAL %s 0", "return redis.call('ZADD', "
                                     "'hc:keys', 0, 'old\\0' .. 1)"));
    freeReplyObject(raw("HSET hc:counts 1000 %s", "5"));
    CHECK(raw_int("ZCARD %s", "hc:keys") >= 2);
    CHECK_EQ_INT(redis_backend.held_count(be), 1);
    CHECK_EQ_INT(raw_int("ZCARD %s", "hc:keys"), 1);
    CHECK_EQ_INT(raw_int("HEXISTS hc:counts %s", "1000"), 0);
    CHECK_EQ_INT(raw_int("ZLEXCOUNT hc:keys [x4 %s", "[x4\xff"), 1);
    CHECK_EQ_INT(raw_int("ZLEXCOUNT hc:keys [old %s", "[old\xff"), 0);
    CHECK_EQ_INT(rel(be, "x4", TOK_A), BACKEND_OK);
    redis_backend.close(be);
    /* Redis gone: unknown */
    snprintf(u, sizeof(u), "redis://127.0.0.1:%d?timeout_ms=200",
             testsrv_free_port());
    be = open_be(u);
    CHECK(be != NULL);
    if (be != NULL)
        CHECK_EQ_INT(redis_backend.held_count(be), -1);
    redis_backend.close(be);
}

/* A grant writes no fence counter of its own: the counter of its slot
 * keeps a key's fences increasing, and the key's last fence (what a
 * takeover tells) is in its index member, which goes with the last holder;
 * a counter an older lockd kept (for ever) is taken into the max and goes
 * at the next grant. */
static void test_fence_is_in_the_index_member(void)
{
    struct lock_grant g, h;
    uint64_t last;

    CHECK_EQ_INT(acq(be_main, "fc/a", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "fc/a"), 0);
    CHECK_EQ_INT(index_count("fc/a"), 1);
    CHECK_EQ_INT(index_fence("fc/a"), g.fence);
    CHECK_EQ_INT(ren(be_main, "fc/a", TOK_A, 20000, &h), BACKEND_OK);
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "fc/a"), 0);
    CHECK_EQ_INT(index_fence("fc/a"), g.fence);
    CHECK_EQ_INT(rel(be_main, "fc/a", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(index_count("fc/a"), 0);
    last = g.fence;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(acq(be_main, "fc/a", TOK_A, 5000, &g), BACKEND_OK);
        CHECK(g.fence > last);
        CHECK_EQ_INT(index_fence("fc/a"), g.fence);
        last = g.fence;
        CHECK_EQ_INT(rel(be_main, "fc/a", TOK_A), BACKEND_OK);
        CHECK_EQ_INT(index_count("fc/a"), 0);
    }
    /* shared: the fence of the grant that made it held, gone with the
     * last holder */
    CHECK_EQ_INT(shr("fc/s", TOK_A, 0, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("fc/s", TOK_B, 0, NULL, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(index_count("fc/s"), 1);
    CHECK_EQ_INT(index_fence("fc/s"), g.fence);
    CHECK_EQ_INT(rel(be_main, "fc/s", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(index_count("fc/s"), 1);
    CHECK_EQ_INT(rel(be_main, "fc/s", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(index_count("fc/s"), 0);
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "fc/s"), 0);
    /* an expired holder whose member went (a list or a prune passed):
     * the next grant's fence is still greater (the slot's counter), no
     * takeover to tell */
    CHECK_EQ_INT(acq(be_main, "fc/e", TOK_A, 40, &g), BACKEND_OK);
    check_sleep_ms(80);
    CHECK_EQ_INT(index_fence("fc/e"), g.fence);
    index_del("fc/e");
    CHECK_EQ_INT(index_count("fc/e"), 0);
    CHECK_EQ_INT(acq(be_main, "fc/e", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(h.expired_fence, 0);
    CHECK_EQ_INT(rel(be_main, "fc/e", TOK_B), BACKEND_OK);
    /* an older lockd's counter: no expiry, ahead of the slot's, and the
     * key's member left by a holder that expired */
    CHECK_EQ_INT(raw_int("DEL lockd:fence:{%s}", "fc/old"), 0);
    freeReplyObject(raw("SET lockd:fence:{%s} 4000000000000", "fc/old"));
    index_add("fc/old", 7);
    CHECK_EQ_INT(acq(be_main, "fc/old", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.fence, 4000000000001ULL);
    CHECK_EQ_INT(g.expired_fence, 4000000000000ULL); /* its holder expired */
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "fc/old"), 0);
    CHECK_EQ_INT(index_count("fc/old"), 1);
    CHECK_EQ_INT(index_fence("fc/old"), g.fence);
    CHECK_EQ_INT(rel(be_main, "fc/old", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "fc/old", TOK_A, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(be_main, "fc/old", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(index_count("fc/old"), 0);
}

/* A holder that an older lockd granted (its grant time in g, its key's
 * counter without an expiry and ahead of the slot's): this lockd's release
 * keeps that counter, so the next fence is greater than it. A grant of
 * this lockd writes a instead, and its release takes the counter in the
 * same DEL as the lock. */
static void test_release_keeps_an_older_lockds_counter(void)
{
    redisReply *d = raw("EVAL %s 0 " TOK_A, "return redis.sha1hex(ARGV[1])");
    struct lock_grant g;

    CHECK(d != NULL && d->type == REDIS_REPLY_STRING);
    if (d == NULL || d->type != REDIS_REPLY_STRING) {
        freeReplyObject(d);
        return;
    }
    freeReplyObject(raw("HSET lockd:lock:{fc/legacy} t %s f 5000000000000 "
                        "ttl 5000 g 1",
                        d->str));
    freeReplyObject(d);
    CHECK_EQ_INT(raw_int("PEXPIRE lockd:lock:{fc/legacy} %s", "5000"), 1);
    freeReplyObject(raw("SET lockd:fence:{fc/legacy} %s", "5000000000000"));
    CHECK_EQ_INT(rel(be_main, "fc/legacy", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "fc/legacy"), 0);
    CHECK_EQ_INT(raw_int("PTTL lockd:fence:{%s}", "fc/legacy"), -1);
    CHECK_EQ_INT(acq(be_main, "fc/legacy", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.fence, 5000000000001ULL);
    CHECK_EQ_INT(raw_int("HEXISTS lockd:lock:{%s} a", "fc/legacy"), 1);
    CHECK_EQ_INT(raw_int("HEXISTS lockd:lock:{%s} g", "fc/legacy"), 0);
    CHECK_EQ_INT(rel(be_main, "fc/legacy", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "fc/legacy"), 0);
}

/* An exclusive holder's hash keeps the first 20 hex digits (80 bits) of
 * its token's SHA-1 (holders.lua's tok_t()), where an older lockd kept
 * all 40: a holder of either form is its token's, for renew, re-entry, a
 * retried acquire and release, and no other token's. */
static void test_token_digest_is_80_bits_and_takes_the_older_40(void)
{
    redisReply *d = raw("EVAL %s 0 " TOK_A, "return redis.sha1hex(ARGV[1])");
    redisReply *t;
    struct lock_grant g, h;
    uint32_t n;

    CHECK(d != NULL && d->type == REDIS_REPLY_STRING && d->len == 40);
    if (d == NULL || d->type != REDIS_REPLY_STRING || d->len != 40) {
        freeReplyObject(d);
        return;
    }
    CHECK_EQ_INT(acq(be_main, "tk/new", TOK_A, 5000, &g), BACKEND_OK);
    t = raw("HGET lockd:lock:{tk/new} %s", "t");
    CHECK(t != NULL && t->type == REDIS_REPLY_STRING && t->len == 20 &&
          memcmp(t->str, d->str, 20) == 0);
    freeReplyObject(t);
    freeReplyObject(
        raw("HSET lockd:lock:{tk/old} t %s f 7 ttl 5000 a 1", d->str));
    CHECK_EQ_INT(raw_int("PEXPIRE lockd:lock:{tk/old} %s", "5000"), 1);
    freeReplyObject(d);
    for (int i = 0; i < 2; i++) {
        const char *k = i == 0 ? "tk/new" : "tk/old";
        CHECK_EQ_INT(acq(be_main, k, TOK_B, 5000, &h), BACKEND_HELD);
        CHECK_EQ_INT(ren(be_main, k, TOK_B, 5000, &h), BACKEND_MISMATCH);
        CHECK_EQ_INT(rel(be_main, k, TOK_B), BACKEND_MISMATCH);
        CHECK_EQ_INT(acq(be_main, k, TOK_A, 5000, &h), BACKEND_OK);
        CHECK_EQ_INT(h.fence, i == 0 ? g.fence : 7);
        CHECK_EQ_INT(ren(be_main, k, TOK_A, 6000, &h), BACKEND_OK);
        CHECK_EQ_INT(reenter(be_main, k, TOK_A, &h), BACKEND_OK);
        CHECK_EQ_INT(h.holds, 2);
        CHECK_EQ_INT(rel_holds(be_main, k, TOK_A, false, &n), BACKEND_OK);
        CHECK_EQ_INT(n, 1);
        CHECK_EQ_INT(rel(be_main, k, TOK_A), BACKEND_OK);
        CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", k), 0);
    }
}

/* Only a second's first holder moves the counts' and the index's expiry
 * on; each later one of that second expires within the second, so both
 * still outlive every holder by at least REDIS_BE_RETAIN_MS less a second,
 * through grants and renews into seconds new and seconds counted. */
static void check_outlive(const char *const *keys, size_t n, const char *what)
{
    long long last = -1, counts, index;

    for (size_t i = 0; i < n; i++) {
        long long t = raw_int("PTTL co:lock:{%s}", keys[i]);
        if (t > last)
            last = t;
    }
    counts = raw_int("PTTL co:counts%s", "");
    index = raw_int("PTTL co:keys%s", "");
    CHECK_MSG(last > 0 && counts >= last + REDIS_BE_RETAIN_MS - 1000 &&
                  index >= last + REDIS_BE_RETAIN_MS - 1000,
              "%s: the last holder lives %lld ms, the counts %lld, the "
              "index %lld",
              what, last, counts, index);
}

static void test_counts_outlive_every_holder(void)
{
    static const char *const keys[] = { "a", "b", "c", "d" };
    struct backend *be;
    struct lock_grant g;

    be = open_prefixed("co:");
    if (be == NULL)
        return;
    CHECK_EQ_INT(acq(be, "a", TOK_A, 5000, &g), BACKEND_OK);
    check_outlive(keys, 1, "a new second");
    /* the same second, or the next: counted, or made */
    CHECK_EQ_INT(acq(be, "b", TOK_A, 5000, &g), BACKEND_OK);
    check_outlive(keys, 2, "a second counted");
    CHECK_EQ_INT(acq(be, "c", TOK_A, 200000, &g), BACKEND_OK);
    check_outlive(keys, 3, "a later second");
    CHECK_EQ_INT(ren(be, "a", TOK_A, 200500, &g), BACKEND_OK);
    check_outlive(keys, 3, "a renew to a later second");
    CHECK_EQ_INT(acq(be, "d", TOK_A, 200400, &g), BACKEND_OK);
    check_outlive(keys, 4, "a grant into a renew's second");
    CHECK_EQ_INT(ren(be, "b", TOK_A, 200450, &g), BACKEND_OK);
    check_outlive(keys, 4, "a renew into a counted second");
    for (size_t i = 0; i < 4; i++)
        CHECK_EQ_INT(rel(be, keys[i], TOK_A), BACKEND_OK);
    CHECK_EQ_INT(raw_int("EXISTS co:counts%s", ""), 0);
    redis_backend.close(be);
}

/* The counts and the index expire REDIS_BE_RETAIN_MS after their last
 * holder, and one grant in 16 or so drops seconds passed of the counts
 * and, while those counted holders that expired unreleased, samples 32
 * members of a bucket for free keys: neither grows with the keys ever
 * held, metrics scraped or not. */
static void test_grants_prune_what_expired_long_ago(void)
{
    char k[32];
    struct backend *be;
    struct lock_grant g;
    long long pttl, n;

    be = open_prefixed("pr:");
    if (be == NULL)
        return;
    freeReplyObject(raw("EVAL %s 0", "return redis.call('ZADD', "
                                     "'pr:keys', 0, 'old\\0' .. 3)"));
    freeReplyObject(raw("HSET pr:counts 1000 %s", "2"));
    /* one grant in 16 or so prunes (by fence, key and millisecond): the
     * second passed goes, whose two holders expired unreleased, and so
     * the members are looked at (all of a bucket of two) */
    for (int i = 0; i < 400; i++) {
        CHECK_EQ_INT(acq(be, "new", TOK_A, 5000, &g), BACKEND_OK);
        if (raw_int("ZLEXCOUNT pr:keys [old %s", "[old\xff") == 0)
            break;
        CHECK_EQ_INT(rel(be, "new", TOK_A), BACKEND_OK);
    }
    CHECK_EQ_INT(raw_int("ZLEXCOUNT pr:keys [old %s", "[old\xff"), 0);
    CHECK_EQ_INT(raw_int("ZLEXCOUNT pr:keys [new %s", "[new\xff"), 1);
    CHECK_EQ_INT(raw_int("HEXISTS pr:counts %s", "1000"), 0);
    pttl = raw_int("PTTL pr:counts%s", "");
    CHECK_MSG(pttl > 5000 && pttl <= 5000 + 2 * REDIS_BE_RETAIN_MS,
              "the counts live %lld ms", pttl);
    pttl = raw_int("PTTL pr:keys%s", "");
    CHECK_MSG(pttl > 5000 && pttl <= 5000 + 2 * REDIS_BE_RETAIN_MS,
              "the index lives %lld ms", pttl);
    CHECK_EQ_INT(rel(be, "new", TOK_A), BACKEND_OK);
    /* 3 x 300 keys granted for 1 ms each, a second apart, none released,
     * no list, no count: once their seconds have passed, the grants'
     * samples take out most members of the free keys (900 without; the
     * last 300 are due once their second has passed) */
    for (int i = 0; i < 900; i++) {
        if (i > 0 && i % 300 == 0)
            check_sleep_ms(1100);
        snprintf(k, sizeof(k), "x/%03d", (i * 7) % 900);
        CHECK_EQ_INT(acq(be, k, TOK_A, 1, &g), BACKEND_OK);
    }
    n = raw_int("EVAL %s 0",
                "local n = redis.call('ZCARD', 'pr:keys') "
                "for _, hi in ipairs(redis.call('ZRANGE', 'pr:keys@', 0, "
                "-1)) do n = n + redis.call('ZCARD', 'pr:keys#' .. hi) end "
                "return n");
    CHECK_MSG(n >= 0 && n < 450, "%lld members of 900 expired keys", n);
    redis_backend.close(be);
}

static void test_takeover_tells_the_expired_fence(void)
{
    struct lock_grant g, a, b, h;

    /* exclusive: Redis expired the hash; the held member tells */
    CHECK_EQ_INT(acq(be_main, "to/x", TOK_A, 40, &g), BACKEND_OK);
    check_sleep_ms(80);
    CHECK_EQ_INT(acq(be_main, "to/x", TOK_B, 5000, &h), BACKEND_OK);
    CHECK_EQ_INT(h.expired_fence, g.fence);
    CHECK(h.fence > g.fence);
    /* a release is no takeover */
    CHECK_EQ_INT(rel(be_main, "to/x", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "to/x", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.expired_fence, 0);
    CHECK_EQ_INT(rel(be_main, "to/x", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "to/x", TOK_A, 5000, &h), BACKEND_OK);
    CHECK_EQ_INT(h.expired_fence, 0);
    CHECK_EQ_INT(rel(be_main, "to/x", TOK_A), BACKEND_OK);
    /* shared: the reaped holders' greatest fence, beside a live one */
    CHECK_EQ_INT(shr("to/s", TOK_A, 0, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "to/s", TOK_B, LOCK_SHARED, 0, NULL, 40, NULL, &a),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "to/s", TOK_C, LOCK_SHARED, 0, NULL, 40, NULL, &b),
        BACKEND_OK);
    check_sleep_ms(80);
    CHECK_EQ_INT(shr("to/s", TOK_D, 0, NULL, &h), BACKEND_OK);
    CHECK_EQ_INT(h.expired_fence, b.fence);
    CHECK_EQ_INT(shr("to/s", TOK_E, 0, NULL, &h), BACKEND_OK);
    CHECK_EQ_INT(h.expired_fence, 0);
    /* a replay tells nothing */
    CHECK_EQ_INT(shr("to/s", TOK_E, 0, NULL, &h), BACKEND_OK);
    CHECK_EQ_INT(h.expired_fence, 0);
    CHECK_EQ_INT(rel(be_main, "to/s", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "to/s", TOK_D), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "to/s", TOK_E), BACKEND_OK);
}

/* release with the grant answered */
static enum backend_result
rel_grant(const char *key, const char *tok, bool all, struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .all = all
    };

    memset(g, 0, sizeof(*g));
    return redis_backend.release(be_main, &req, g);
}

static void test_release_tells_when_the_hold_was_granted(void)
{
    struct lock_grant g, r;
    int64_t t0 = clock_wall_ms(), t1;

    CHECK_EQ_INT(acq(be_main, "ga/x", TOK_A, 5000, &g), BACKEND_OK);
    t1 = clock_wall_ms();
    CHECK_EQ_INT(reenter(be_main, "ga/x", TOK_A, &g), BACKEND_OK);
    check_sleep_ms(30);
    CHECK_EQ_INT(rel_grant("ga/x", TOK_A, false, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 1);
    CHECK_EQ_INT(r.granted_at_ms, 0); /* still held */
    CHECK_EQ_INT(rel_grant("ga/x", TOK_A, false, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 0);
    /* Redis's clock and ours are the same machine's */
    CHECK(r.granted_at_ms >= t0 - 2 && r.granted_at_ms <= t1 + 2);
    CHECK(clock_wall_ms() - r.granted_at_ms >= 30);
    t0 = clock_wall_ms();
    CHECK_EQ_INT(shr("ga/s", TOK_A, 0, NULL, &g), BACKEND_OK);
    t1 = clock_wall_ms();
    check_sleep_ms(20);
    CHECK_EQ_INT(shr("ga/s", TOK_B, 0, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel_grant("ga/s", TOK_A, true, &r), BACKEND_OK);
    CHECK(r.granted_at_ms >= t0 - 2 && r.granted_at_ms <= t1 + 2);
    CHECK_EQ_INT(rel_grant("ga/s", TOK_B, false, &r), BACKEND_OK);
    CHECK(r.granted_at_ms >= t1 + 18); /* its own grant's time */
}

/* ---- several keys at once ---- */

/* A multi-key request over keys (NULL-terminated); the key lengths live
 * in the returned request's own static array. */
static struct lock_multi_req
mreq(const char *const *keys, const char *tok, const char *owner, uint64_t ttl)
{
    static size_t lens[LOCK_MULTI_MAX];
    struct lock_multi_req req = { .keys = keys,
                                  .key_lens = lens,
                                  .token = tok,
                                  .owner = owner,
                                  .ttl_ms = ttl };

    while (keys[req.n] != NULL) {
        lens[req.n] = strlen(keys[req.n]);
        req.n++;
    }
    return req;
}

static enum backend_result m_acquire(struct backend *be,
                                     const char *const *keys,
                                     const char *tok,
                                     uint64_t ttl,
                                     struct lock_multi_grant *g)
{
    struct lock_multi_req req = mreq(keys, tok, NULL, ttl);

    memset(g, 0, sizeof(*g));
    return redis_backend.acquire_multi(be, &req, g);
}

static enum backend_result m_renew(struct backend *be,
                                   const char *const *keys,
                                   const char *tok,
                                   uint64_t ttl,
                                   struct lock_multi_grant *g)
{
    struct lock_multi_req req = mreq(keys, tok, NULL, ttl);

    memset(g, 0, sizeof(*g));
    return redis_backend.renew_multi(be, &req, g);
}

static enum backend_result m_release(struct backend *be,
                                     const char *const *keys,
                                     const char *tok,
                                     struct lock_multi_grant *g)
{
    struct lock_multi_req req = mreq(keys, tok, NULL, 0);

    memset(g, 0, sizeof(*g));
    return redis_backend.release_multi(be, &req, g);
}

/* The calls of command name (lower case) since the last CONFIG RESETSTAT,
 * from INFO commandstats; 0 if none. */
static long long cmd_calls(const char *name)
{
    redisReply *r = raw("INFO %s", "commandstats");
    char want[64];
    const char *at;
    long long n = 0;

    snprintf(want, sizeof(want), "cmdstat_%s:calls=", name);
    if (r != NULL && r->type == REDIS_REPLY_STRING &&
        (at = strstr(r->str, want)) != NULL)
        n = strtoll(at + strlen(want), NULL, 10);
    freeReplyObject(r);
    return n;
}

/* Whether command name's line of INFO commandstats holds what. */
static bool strstr_stat(const char *name, const char *what)
{
    redisReply *r = raw("INFO %s", "commandstats");
    char want[64];
    const char *at, *eol;
    bool in = false;

    snprintf(want, sizeof(want), "cmdstat_%s:", name);
    if (r != NULL && r->type == REDIS_REPLY_STRING &&
        (at = strstr(r->str, want)) != NULL) {
        eol = strchr(at, '\r');
        const char *w = strstr(at, what);
        in = w != NULL && (eol == NULL || w < eol);
    }
    freeReplyObject(r);
    return in;
}

static void reset_stats(void)
{
    freeReplyObject(raw("CONFIG %s", "RESETSTAT"));
}

/* A backend whose Redis user may neither load nor call functions (ACL):
 * it runs the scripts with EVALSHA, as on a Redis before 7. */
static struct backend *open_eval_only(void)
{
    char u[128];

    freeReplyObject(raw("ACL SETUSER %s on >evalonly-unit ~* &* +@all "
                        "-function -fcall -fcall_ro",
                        "evalonly"));
    snprintf(u, sizeof(u), "redis://evalonly:evalonly-unit@127.0.0.1:%d",
             srv.port);
    return open_be(u);
}

static void test_multi_ops_are_one_script_each(void)
{
    const char *keys[] = { "ms1", "ms2", "ms3", "ms4", NULL };
    struct lock_multi_grant g;
    struct backend *ev = open_eval_only();

    reset_stats();
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_renew(be_main, keys, TOK_A, 6000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_B, 5000, &g), BACKEND_HELD);
    CHECK_EQ_INT(m_release(be_main, keys, TOK_A, &g), BACKEND_OK);
    /* one FCALL each, whatever the number of keys */
    CHECK_EQ_INT(cmd_calls("fcall"), 4);
    CHECK_EQ_INT(cmd_calls("evalsha") + cmd_calls("eval"), 0);
    /* and one EVALSHA each without functions */
    CHECK(ev != NULL);
    if (ev == NULL)
        return;
    reset_stats();
    CHECK_EQ_INT(m_acquire(ev, keys, TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_renew(ev, keys, TOK_A, 6000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_acquire(ev, keys, TOK_B, 5000, &g), BACKEND_HELD);
    CHECK_EQ_INT(m_release(ev, keys, TOK_A, &g), BACKEND_OK);
    CHECK_EQ_INT(cmd_calls("evalsha"), 4);
    CHECK_EQ_INT(cmd_calls("fcall") + cmd_calls("eval"), 0);
    /* Redis lost its scripts: EVAL once, then EVALSHA again */
    freeReplyObject(raw("SCRIPT %s", "FLUSH"));
    reset_stats();
    CHECK_EQ_INT(m_acquire(ev, keys, TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_release(ev, keys, TOK_A, &g), BACKEND_OK);
    CHECK_EQ_INT(cmd_calls("eval"), 2);
    redis_backend.close(ev);
}

/* Redis 7's functions: every script is a function of one library, whose
 * name carries a digest of its text; a Redis that lost the library (and
 * its scripts) still answers every call, by EVALSHA and EVAL, and the next
 * dial loads the library again. */
static void test_scripts_run_as_functions_and_survive_a_flush(void)
{
    struct lock_grant g;
    size_t len;
    const char *text = redis_scripts_library(&len);
    redisReply *r;

    CHECK(text != NULL && strncmp(text, "#!lua name=lockd_", 17) == 0);
    CHECK_EQ_INT(acq(be_main, "fn/a", TOK_A, 5000, &g), BACKEND_OK);
    r = raw("FUNCTION LIST LIBRARYNAME %s", "lockd_*");
    CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        redisReply *l = r->element[0];
        /* library_name, engine, functions: one per script */
        CHECK(l->type == REDIS_REPLY_ARRAY && l->elements == 6);
        if (l->type == REDIS_REPLY_ARRAY && l->elements == 6)
            CHECK_EQ_INT(l->element[5]->elements, REDIS_BE_SCRIPT_COUNT);
    }
    freeReplyObject(r);
    CHECK_EQ_INT(rel(be_main, "fn/a", TOK_A), BACKEND_OK);
    /* at maxmemory an acquire is refused, a release still goes through */
    CHECK_EQ_INT(acq(be_main, "fn/m", TOK_A, 5000, &g), BACKEND_OK);
    freeReplyObject(raw("CONFIG SET maxmemory %s", "1"));
    CHECK_EQ_INT(acq(be_main, "fn/n", TOK_A, 5000, &g), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(rel(be_main, "fn/m", TOK_A), BACKEND_OK);
    freeReplyObject(raw("CONFIG SET maxmemory %s", "0"));
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "fn/m"), 0);
    /* the library and the scripts gone: the call runs by EVAL */
    freeReplyObject(raw("FUNCTION %s", "FLUSH"));
    freeReplyObject(raw("SCRIPT %s", "FLUSH"));
    reset_stats();
    CHECK_EQ_INT(acq(be_main, "fn/a", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "fn/a", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(cmd_calls("fcall"), 1);
    CHECK_EQ_INT(cmd_calls("eval"), 2);
    /* the next dial loads it again */
    freeReplyObject(raw("CLIENT KILL TYPE %s", "normal"));
    CHECK_EQ_INT(redis_backend.ping(be_main), BACKEND_OK);
    reset_stats();
    CHECK_EQ_INT(acq(be_main, "fn/a", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "fn/a", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(cmd_calls("fcall"), 2);
    CHECK_EQ_INT(cmd_calls("evalsha") + cmd_calls("eval"), 0);
}

/* A user that may load the library but not call it: one FCALL refused,
 * then EVALSHA for good, across dials. */
static void test_fcall_refused_stays_evalsha(void)
{
    struct lock_grant g;
    struct backend *be;
    char u[128];

    freeReplyObject(
        raw("ACL SETUSER %s on >nofcall-unit ~* &* +@all -fcall", "nofcall"));
    snprintf(u, sizeof(u), "redis://nofcall:nofcall-unit@127.0.0.1:%d",
             srv.port);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    reset_stats();
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(acq(be, "fn/r", TOK_A, 5000, &g), BACKEND_OK);
        CHECK_EQ_INT(rel(be, "fn/r", TOK_A), BACKEND_OK);
        freeReplyObject(raw("CLIENT KILL USER %s", "nofcall"));
    }
    CHECK_EQ_INT(cmd_calls("evalsha"), 4);
    /* the ACL's refusal counts apart from the calls */
    CHECK_EQ_INT(cmd_calls("fcall"), 0);
    CHECK(strstr_stat("fcall", "rejected_calls=1,"));
    redis_backend.close(be);
}

/* ---- batches (batch.c) ---- */

#define NB 8

/* NB acquires of prefix0..prefix7 under tok, in one batch() */
static void batch_acquire(struct backend *be,
                          const char *prefix,
                          const char *tok,
                          enum backend_result *res)
{
    struct backend_call c[NB];
    struct lock_req r[NB];
    struct lock_grant g[NB];
    char keys[NB][16];

    for (int i = 0; i < NB; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s%d", prefix, i);
        r[i] = (struct lock_req){ .key = keys[i],
                                  .key_len = strlen(keys[i]),
                                  .token = tok,
                                  .ttl_ms = 5000 };
        memset(&g[i], 0, sizeof(g[i]));
        c[i] = (struct backend_call){ .op = BACKEND_OP_ACQUIRE,
                                      .req = &r[i],
                                      .out = &g[i],
                                      .result = BACKEND_NO_MEMORY };
    }
    redis_backend.batch(be, c, NB);
    for (int i = 0; i < NB; i++)
        res[i] = c[i].result;
}

static void release_all(const char *prefix, const char *tok)
{
    char k[16];

    for (int i = 0; i < NB; i++) {
        snprintf(k, sizeof(k), "%s%d", prefix, i);
        CHECK_EQ_INT(rel(be_main, k, tok), BACKEND_OK);
    }
}

static void test_batch_is_one_call_each_and_survives_script_flush(void)
{
    enum backend_result res[NB];

    reset_stats();
    batch_acquire(be_main, "bq", TOK_A, res);
    for (int i = 0; i < NB; i++)
        CHECK_EQ_INT(res[i], BACKEND_OK);
    CHECK_EQ_INT(cmd_calls("fcall"), NB);
    CHECK_EQ_INT(cmd_calls("evalsha") + cmd_calls("eval"), 0);
    release_all("bq", TOK_A);
    /* Redis lost its library and its scripts: every call of the batch
     * answered "no such function" runs again alone, by EVALSHA, the first
     * by EVAL, which caches it again */
    freeReplyObject(raw("FUNCTION %s", "FLUSH"));
    freeReplyObject(raw("SCRIPT %s", "FLUSH"));
    reset_stats();
    batch_acquire(be_main, "bq", TOK_A, res);
    for (int i = 0; i < NB; i++)
        CHECK_EQ_INT(res[i], BACKEND_OK);
    CHECK_EQ_INT(cmd_calls("fcall"), NB);
    CHECK_EQ_INT(cmd_calls("eval"), 1);
    CHECK_EQ_INT(cmd_calls("evalsha"), NB);
    release_all("bq", TOK_A);
    /* back to FCALL from the next dial on */
    freeReplyObject(raw("CLIENT KILL TYPE %s", "normal"));
    CHECK_EQ_INT(redis_backend.ping(be_main), BACKEND_OK);
}

static void test_batch_redials_a_connection_the_server_closed(void)
{
    enum backend_result res[NB];

    batch_acquire(be_main, "bk", TOK_A, res); /* the connection is up */
    release_all("bk", TOK_A);
    freeReplyObject(raw("CLIENT KILL TYPE %s", "normal"));
    batch_acquire(be_main, "bk", TOK_A, res);
    for (int i = 0; i < NB; i++)
        CHECK_EQ_INT(res[i], BACKEND_OK);
    release_all("bk", TOK_A);
}

static void test_batch_on_a_stopped_redis_answers_unavailable_in_time(void)
{
    char u[160], k[16];
    struct backend *be;
    enum backend_result res[NB];
    struct lock_grant g;
    int64_t t0;

    snprintf(u, sizeof(u), "%s?timeout_ms=300", url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(redis_backend.ping(be), BACKEND_OK);
    testsrv_signal(&srv, SIGSTOP);
    t0 = clock_mono_ms();
    batch_acquire(be, "bs", TOK_B, res);
    /* the whole batch within one command timeout, not one per call */
    CHECK(clock_mono_ms() - t0 < 900);
    for (int i = 0; i < NB; i++)
        CHECK_EQ_INT(res[i], BACKEND_UNAVAILABLE);
    /* as with single calls, a script that runs within its timeout of its
     * send may still grant (to expire by its TTL); later, none does */
    check_sleep_ms(200);
    testsrv_signal(&srv, SIGCONT);
    /* the batch sat in Redis's socket and ran when it resumed: its
     * stamps had passed, so it granted nothing */
    for (int i = 0; i < NB; i++) {
        enum backend_result r = BACKEND_UNAVAILABLE;

        snprintf(k, sizeof(k), "bs%d", i);
        t0 = clock_mono_ms();
        while (clock_mono_ms() - t0 < 3000) {
            r = acq(be, k, TOK_A, 5000, &g);
            if (r != BACKEND_UNAVAILABLE)
                break;
            check_sleep_ms(50);
        }
        CHECK_EQ_INT(r, BACKEND_OK);
        CHECK_EQ_INT(rel(be, k, TOK_A), BACKEND_OK);
    }
    redis_backend.close(be);
}

/* The fields of a hash, sorted, joined by ',', values of t and f out. */
static void hash_fields(const char *lock_key, char *out, size_t len)
{
    redisReply *r = raw("HKEYS %s", lock_key);
    char *f[16];
    size_t n = 0, at = 0;

    out[0] = '\0';
    for (size_t i = 0; r != NULL && i < r->elements && n < 16; i++)
        f[n++] = r->element[i]->str;
    for (size_t i = 1; i < n; i++) /* insertion sort: a handful */
        for (size_t j = i; j > 0 && strcmp(f[j - 1], f[j]) > 0; j--) {
            char *t = f[j];
            f[j] = f[j - 1];
            f[j - 1] = t;
        }
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(out + at, len - at, "%s%s", i ? "," : "", f[i]);
    freeReplyObject(r);
}

static void test_multi_grant_is_the_single_key_layout(void)
{
    const char *keys[] = { "ml1", "ml2 {x}", NULL };
    struct lock_multi_req req = mreq(keys, TOK_A, "pod-m", 5000);
    struct lock_multi_grant g, h;
    struct lock_grant s, ref;
    struct lock_info info;
    char fields[128], ref_fields[128];
    redisReply *t1, *t2;
    uint32_t n;

    /* the same fence counter as single grants */
    CHECK_EQ_INT(acq(be_main, "ml1", TOK_B, 5000, &s), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "ml1", TOK_B), BACKEND_OK);
    memset(&g, 0, sizeof(g));
    CHECK_EQ_INT(redis_backend.acquire_multi(be_main, &req, &g), BACKEND_OK);
    CHECK(g.fences[0] > s.fence);
    CHECK_EQ_INT(g.ttl_ms, 5000);
    CHECK(g.expires_at_ms > clock_wall_ms() + 4000);
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "ml1"), 0);
    CHECK_EQ_INT(index_fence("ml1"), g.fences[0]);
    /* a single grant of the same token and owner writes the same fields */
    CHECK_EQ_INT(acq_full(be_main, "mlref", TOK_A, "pod-m", 5000, NULL, &ref),
                 BACKEND_OK);
    hash_fields("lockd:lock:{mlref}", ref_fields, sizeof(ref_fields));
    hash_fields("lockd:lock:{ml2 {x}}", fields, sizeof(fields));
    CHECK(strcmp(fields, ref_fields) == 0);
    CHECK(strcmp(fields, "a,f,o,t,ttl") == 0);
    t1 = raw("HGET %s t", "lockd:lock:{mlref}");
    t2 = raw("HGET %s t", "lockd:lock:{ml2 {x}}");
    CHECK(t1 != NULL && t2 != NULL && t1->type == REDIS_REPLY_STRING &&
          t2->type == REDIS_REPLY_STRING && strcmp(t1->str, t2->str) == 0);
    freeReplyObject(t1);
    freeReplyObject(t2);
    CHECK(raw_int("PTTL lockd:lock:{%s}", "ml1") > 4000);
    CHECK_EQ_INT(rel(be_main, "mlref", TOK_A), BACKEND_OK);
    /* the retry of a grant whose answer was lost: the same fences */
    CHECK_EQ_INT(redis_backend.acquire_multi(be_main, &req, &h), BACKEND_OK);
    CHECK_EQ_INT(h.fences[0], g.fences[0]);
    CHECK_EQ_INT(h.fences[1], g.fences[1]);
    /* each key is an ordinary exclusive lock for the single-key ops */
    CHECK_EQ_INT(acq(be_main, "ml1", TOK_B, 5000, &s), BACKEND_HELD);
    CHECK_EQ_INT(ren(be_main, "ml1", TOK_A, 3000, &s), BACKEND_OK);
    CHECK_EQ_INT(s.fence, g.fences[0]);
    CHECK_EQ_INT(reenter(be_main, "ml1", TOK_A, &s), BACKEND_OK);
    CHECK_EQ_INT(s.holds, 2);
    CHECK_EQ_INT(redis_backend.inspect(be_main, "ml2 {x}", 7, &info),
                 BACKEND_OK);
    CHECK_EQ_INT(info.fence, g.fences[1]);
    CHECK_EQ_INT(info.holds, 1);
    CHECK(info.has_owner && strcmp(info.owner, "pod-m") == 0);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel_holds(be_main, "ml1", TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(rel_holds(be_main, "ml1", TOK_A, false, &n), BACKEND_OK);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(rel(be_main, "ml2 {x}", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "ml1", TOK_B, 5000, &s), BACKEND_OK);
    CHECK(s.fence > g.fences[0]);
    CHECK_EQ_INT(rel(be_main, "ml1", TOK_B), BACKEND_OK);
}

static void test_multi_held_key_or_queue_changes_nothing(void)
{
    const char *keys[] = { "mh1", "mh2", "mh3", "mh4", NULL };
    struct lock_waiter w = waiter(501);
    struct lock_multi_grant g;
    struct lock_grant s;
    uint32_t n;

    CHECK_EQ_INT(acq(be_main, "mh1", TOK_B, 3000, &s), BACKEND_OK);
    CHECK_EQ_INT(shr("mh3", TOK_C, 0, NULL, &s), BACKEND_OK);
    /* mh4: free, but a waiter is queued */
    CHECK_EQ_INT(acq(be_main, "mh4", TOK_D, 5000, &s), BACKEND_OK);
    CHECK_EQ_INT(exc("mh4", TOK_E, &w, &s), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "mh4", TOK_D), BACKEND_OK);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_HELD);
    CHECK(g.held[0] && !g.held[1] && g.held[2] && g.held[3]);
    CHECK(g.retry_ms > 2000 && g.retry_ms <= 3000); /* mh1's, the first */
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "mh2"), 0);
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "mh2"), 0);
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "mh4"), 0);
    /* the held keys are marked for the waiter that keeps no place */
    CHECK(raw_int("PTTL lockd:mwait:{%s}", "mh1") > 3000);
    CHECK(raw_int("PTTL lockd:mwait:{%s}", "mh4") > 3000);
    CHECK_EQ_INT(raw_int("EXISTS lockd:mwait:{%s}", "mh2"), 0);
    /* only queued: no holder's TTL to tell */
    {
        const char *q[] = { "mh2", "mh4", NULL };
        CHECK_EQ_INT(m_acquire(be_main, q, TOK_A, 5000, &g), BACKEND_HELD);
        CHECK(!g.held[0] && g.held[1]);
        CHECK_EQ_INT(g.retry_ms, 0);
    }
    CHECK_EQ_INT(exc("mh4", TOK_E, &w, &s), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "mh4", TOK_E), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "mh1", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "mh3", TOK_C, false, &n), BACKEND_OK);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_release(be_main, keys, TOK_A, &g), BACKEND_OK);
}

static void test_multi_expired_holders_are_gone_by_redis_clock(void)
{
    const char *keys[] = { "me1", "me2", NULL };
    const char *third[] = { "me3", NULL };
    struct lock_multi_grant g;
    struct lock_grant s;
    uint32_t n;

    CHECK_EQ_INT(acq(be_main, "me1", TOK_B, 60, &s), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "me3", TOK_C, LOCK_SHARED, 0, NULL, 60, NULL, &s),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "me3", TOK_D, LOCK_SHARED, 0, NULL, 5000, NULL, &s),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "me2", TOK_C, LOCK_SHARED, 0, NULL, 60, NULL, &s),
        BACKEND_OK);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_HELD);
    check_sleep_ms(150);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_OK);
    CHECK(g.fences[1] > s.fence);
    /* the shared holder's record and expiry went with it */
    CHECK_EQ_INT(raw_int("EXISTS lockd:exp:{%s}", "me2"), 0);
    CHECK_EQ_INT(m_release(be_main, keys, TOK_A, &g), BACKEND_OK);
    /* an expired shared holder beside a live one is reaped: the hint is
     * the live one's TTL */
    CHECK_EQ_INT(m_acquire(be_main, third, TOK_A, 5000, &g), BACKEND_HELD);
    CHECK(g.retry_ms > 4000 && g.retry_ms <= 5000);
    CHECK_EQ_INT(raw_int("ZCARD lockd:exp:{%s}", "me3"), 1);
    CHECK_EQ_INT(rel_holds(be_main, "me3", TOK_D, false, &n), BACKEND_OK);
}

static void test_multi_renew_and_release_in_redis(void)
{
    const char *keys[] = { "mr1", "mr2", "mr3", NULL };
    const char *gone[] = { "mr4", NULL };
    struct lock_multi_grant g, h;
    struct lock_grant s;

    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 2000, &g), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "mr3", TOK_A, 1000, &s), BACKEND_OK);
    /* 0: each key's own last TTL; the least is told */
    CHECK_EQ_INT(m_renew(be_main, keys, TOK_A, 0, &h), BACKEND_OK);
    CHECK_EQ_INT(h.ttl_ms, 1000);
    CHECK(raw_int("PTTL lockd:lock:{%s}", "mr1") > 1500);
    CHECK(raw_int("PTTL lockd:lock:{%s}", "mr3") <= 1000);
    CHECK_EQ_INT(h.fences[2], g.fences[2]);
    /* one key lost: nothing renewed */
    CHECK_EQ_INT(rel(be_main, "mr2", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(m_renew(be_main, keys, TOK_A, 60000, &h), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(h.bad, 1);
    CHECK(raw_int("PTTL lockd:lock:{%s}", "mr1") <= 2000);
    CHECK_EQ_INT(acq(be_main, "mr2", TOK_B, 5000, &s), BACKEND_OK);
    CHECK_EQ_INT(m_renew(be_main, keys, TOK_A, 60000, &h), BACKEND_MISMATCH);
    CHECK_EQ_INT(h.bad, 1);
    CHECK(raw_int("PTTL lockd:lock:{%s}", "mr3") <= 1000);
    /* release: the token's keys only, every hold */
    CHECK_EQ_INT(reenter(be_main, "mr1", TOK_A, &s), BACKEND_OK);
    CHECK_EQ_INT(m_release(be_main, keys, TOK_A, &h), BACKEND_OK);
    CHECK(h.released[0] && !h.released[1] && h.released[2]);
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "mr1"), 0);
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "mr2"), 1);
    CHECK_EQ_INT(m_release(be_main, keys, TOK_A, &h), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(m_release(be_main, gone, TOK_A, &h), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be_main, "mr2", TOK_B), BACKEND_OK);
}

static void test_multi_waiter_hears_releases_through_others(void)
{
    struct backend *other = be_open(url, NULL, NULL); /* tells no one */
    const char *keys[] = { "mn1", "mn2", "mn3", NULL };
    const char *pair[] = { "mn1", "mn2", NULL };
    struct lock_waiter w = waiter(511);
    struct lock_multi_grant g;
    struct lock_grant s;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    /* a single-key release, with nobody queued */
    CHECK_EQ_INT(acq(other, "mn1", TOK_B, 5000, &s), BACKEND_OK);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_HELD);
    notes_watch("mn1", 3);
    CHECK_EQ_INT(rel(other, "mn1", TOK_B), BACKEND_OK);
    CHECK(notes_watched(2000) > 0);
    /* a multi-key release */
    CHECK_EQ_INT(m_acquire(other, pair, TOK_B, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_HELD);
    notes_watch("mn2", 3);
    CHECK_EQ_INT(m_release(other, pair, TOK_B, &g), BACKEND_OK);
    CHECK(notes_watched(2000) > 0);
    /* a free key whose last queued waiter gives up */
    CHECK_EQ_INT(acq(other, "mn3", TOK_B, 5000, &s), BACKEND_OK);
    CHECK_EQ_INT(acq_w(other, "mn3", TOK_C, &w, &s), BACKEND_HELD);
    CHECK_EQ_INT(rel(other, "mn3", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_HELD);
    CHECK(g.held[2]);
    notes_watch("mn3", 3);
    CHECK_EQ_INT(redis_backend.cancel_wait(other, "mn3", 3, &w), BACKEND_OK);
    CHECK(notes_watched(2000) > 0);
    notes_watch("", 0);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_release(be_main, keys, TOK_A, &g), BACKEND_OK);
    redis_backend.close(other);
}

static void test_multi_exhausted_fence_grants_none(void)
{
    const char *keys[] = { "mf1", "mf2", NULL };
    struct lock_multi_grant g;
    redisReply *r;

    r = raw("SET %s 9007199254740991", "lockd:fence:{mf2}");
    freeReplyObject(r);
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g),
                 BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "mf1"), 0);
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "mf1"), 0);
    CHECK_EQ_INT(raw_int("DEL lockd:fence:{%s}", "mf2"), 1);
}

/* The last fence a counter can give is 2^53 - 1 (exact in Lua and JSON):
 * past it, no grant, and the counter is left where it was. */
static void test_exhausted_fence_grants_nothing(void)
{
    struct lock_grant g;
    redisReply *r;
    char slot[32];

    r = raw("SET %s 9007199254740991", "lockd:fence:{xf1}");
    freeReplyObject(r);
    CHECK_EQ_INT(acq(be_main, "xf1", TOK_A, 5000, &g), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(raw_int("EXISTS lockd:lock:{%s}", "xf1"), 0);
    r = raw("GET %s", "lockd:fence:{xf1}");
    CHECK(r != NULL && r->type == REDIS_REPLY_STRING &&
          strcmp(r->str, "9007199254740991") == 0);
    freeReplyObject(r);
    /* one below: that last fence is granted */
    r = raw("SET %s 9007199254740990", "lockd:fence:{xf1}");
    freeReplyObject(r);
    CHECK_EQ_INT(acq(be_main, "xf1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_U64(g.fence, 9007199254740991ULL);
    CHECK_EQ_INT(rel(be_main, "xf1", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(raw_int("EXISTS lockd:fence:{%s}", "xf1"), 0);
    /* the slot's counter took the last fence: its keys get no more */
    CHECK_EQ_INT(acq(be_main, "xf1", TOK_A, 5000, &g), BACKEND_UNAVAILABLE);
    snprintf(slot, sizeof(slot), "lockd:fence#%04x",
             (unsigned)redis_cluster_keyslot("xf1", 3) &
                 (REDIS_BE_FENCE_SLOTS - 1));
    CHECK_EQ_INT(raw_int("DEL %s", slot), 1);
    CHECK_EQ_INT(acq(be_main, "xf1", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "xf1", TOK_A), BACKEND_OK);
}

static void test_multi_sixty_four_longest_keys(void)
{
    static char names[LOCK_MULTI_MAX][LOCK_KEY_MAX + 1];
    const char *keys[LOCK_MULTI_MAX + 1];
    struct lock_multi_grant g;
    struct lock_grant s;

    for (int i = 0; i < LOCK_MULTI_MAX; i++) {
        memset(names[i], 'k', LOCK_KEY_MAX);
        snprintf(names[i], 8, "%06d", i);
        names[i][6] = 'k';
        keys[i] = names[i];
    }
    keys[LOCK_MULTI_MAX] = NULL;
    CHECK_EQ_INT(m_acquire(be_main, keys, TOK_A, 5000, &g), BACKEND_OK);
    CHECK(g.fences[LOCK_MULTI_MAX - 1] > 0);
    CHECK_EQ_INT(acq(be_main, names[63], TOK_B, 5000, &s), BACKEND_HELD);
    CHECK_EQ_INT(m_renew(be_main, keys, TOK_A, 6000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_release(be_main, keys, TOK_A, &g), BACKEND_OK);
    CHECK(g.released[0] && g.released[LOCK_MULTI_MAX - 1]);
}

static void test_multi_stalled_redis_answers_unavailable_grants_none(void)
{
    char u[160];
    struct backend *be;
    const char *keys[] = { "mst1", "mst2", "mst3", NULL };
    struct lock_multi_grant g;
    int64_t t0;

    snprintf(u, sizeof(u), "%s?timeout_ms=300", url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(m_acquire(be, keys, TOK_B, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(m_release(be, keys, TOK_B, &g), BACKEND_OK);
    testsrv_signal(&srv, SIGSTOP);
    for (int i = 0; i < 3; i++) {
        t0 = clock_mono_ms();
        CHECK_EQ_INT(m_acquire(be, keys, TOK_A, 5000, &g), BACKEND_UNAVAILABLE);
        CHECK(clock_mono_ms() - t0 < 900);
    }
    CHECK_EQ_INT(m_renew(be, keys, TOK_A, 0, &g), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(m_release(be, keys, TOK_A, &g), BACKEND_UNAVAILABLE);
    testsrv_signal(&srv, SIGCONT);
    /* the scripts queued in Redis's sockets ran on resuming; answered
     * UNAVAILABLE, they must have granted nothing, not even in part (this
     * connection's command comes after them) */
    for (int i = 0; i < 3; i++) {
        char k[32];
        snprintf(k, sizeof(k), "lockd:lock:{%s}", keys[i]);
        CHECK_EQ_INT(raw_int("EXISTS %s", k), 0);
    }
    t0 = clock_mono_ms();
    while (clock_mono_ms() - t0 < 3000 &&
           m_acquire(be, keys, TOK_C, 5000, &g) != BACKEND_OK)
        check_sleep_ms(50);
    CHECK(g.fences[0] > 0);
    CHECK_EQ_INT(m_release(be, keys, TOK_C, &g), BACKEND_OK);
    redis_backend.close(be);
}

/* ---- store passwords (issue 18) ---- */

/* A file in the server's temp dir holding text; its path into path. */
static void write_secret(const char *name, const char *text, char *path)
{
    FILE *f;

    snprintf(path, 160, "%s/%s", srv.dir, name);
    f = fopen(path, "w");
    CHECK(f != NULL);
    if (f == NULL)
        return;
    fputs(text, f);
    fclose(f);
}

/* An ACL user with a password of its own: the URL's user, with its
 * password from password_file or LOCKD_BACKEND_PASSWORD, gets in; a wrong
 * one is kept out (503, not a start-up error: Redis may be down). */
static void test_password_file_and_env_authenticate(void)
{
    char good[160], bad[160], u[400];
    struct backend *be;
    struct lock_grant g;

    freeReplyObject(
        raw("ACL SETUSER %s on >hunter2-unit ~* &* +@all", "pwuser"));
    write_secret("good", "hunter2-unit\nignored second line\n", good);
    write_secret("bad", "not-it\n", bad);
    snprintf(u, sizeof(u), "redis://pwuser@127.0.0.1:%d?password_file=%s",
             srv.port, good);
    be = open_be(u);
    CHECK(be != NULL);
    if (be != NULL) {
        CHECK_EQ_INT(redis_backend.ping(be), BACKEND_OK);
        CHECK_EQ_INT(acq(be, "pw/x", TOK_A, 5000, &g), BACKEND_OK);
        CHECK_EQ_INT(rel(be, "pw/x", TOK_A), BACKEND_OK);
        redis_backend.close(be);
    }
    setenv("LOCKD_BACKEND_PASSWORD", "hunter2-unit", 1);
    snprintf(u, sizeof(u), "redis://pwuser@127.0.0.1:%d", srv.port);
    be = open_be(u);
    CHECK(be != NULL);
    if (be != NULL) {
        CHECK_EQ_INT(redis_backend.ping(be), BACKEND_OK);
        redis_backend.close(be);
    }
    /* the file wins over the environment */
    snprintf(u, sizeof(u),
             "redis://pwuser@127.0.0.1:%d?password_file=%s&timeout_ms=300",
             srv.port, bad);
    be = open_be(u);
    CHECK(be != NULL);
    if (be != NULL) {
        CHECK_EQ_INT(redis_backend.ping(be), BACKEND_UNAVAILABLE);
        redis_backend.close(be);
    }
    unsetenv("LOCKD_BACKEND_PASSWORD");
    freeReplyObject(raw("ACL DELUSER %s", "pwuser"));
}

/* A password twice, or a file that cannot be read: refused, naming the
 * file, never the password. */
static void test_password_options_refused_without_the_password(void)
{
    char good[160], u[400], err[512];
    struct backend *be;
    static const struct {
        const char *head, *mid, *tail; /* head PORT mid FILE tail */
    } cases[] = {
        { "redis://:hunter2-url@127.0.0.1:", "?password_file=", "" },
        { "redis+cluster://:hunter2-url@127.0.0.1:", "?password_file=", "" },
        { "redis+sentinel://:hunter2-url@127.0.0.1:", "/m?password_file=", "" },
        { "redis+sentinel://127.0.0.1:",
          "/m?sentinel_password=hunter2-url&sentinel_password_file=", "" },
        { "redis://127.0.0.1:", "?sentinel_password_file=", "" },
        { "redis+cluster://u@127.0.0.1:", "?password_file=", ".missing" },
        { "redis://127.0.0.1:", "?password_file=", ".missing" },
        { "redis+sentinel://127.0.0.1:", "/m?sentinel_password_file=",
          ".missing" },
    };

    write_secret("good2", "hunter2-file\n", good);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(u, sizeof(u), "%s%d%s%s%s", cases[i].head, srv.port,
                 cases[i].mid, good, cases[i].tail);
        be = (struct backend *)1;
        err[0] = '\0';
        CHECK_MSG(redis_backend.open(u, NULL, &be, err, sizeof(err)) ==
                      BACKEND_INVALID,
                  "%s", u);
        CHECK(be == NULL);
        CHECK_MSG(strncmp(err, "redis: ", 7) == 0, "%s", err);
        CHECK_MSG(strstr(err, "hunter2") == NULL, "%s", err);
        if (cases[i].tail[0] != '\0')
            CHECK_MSG(strstr(err, good) != NULL, "%s", err);
    }
    /* the Sentinels' password from its file: opens (no Sentinel runs) */
    snprintf(u, sizeof(u),
             "redis+sentinel://127.0.0.1:%d/m?sentinel_password_file=%s"
             "&timeout_ms=200",
             testsrv_free_port(), good);
    be = open_be(u);
    CHECK(be != NULL);
    redis_backend.close(be);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_open_rejects_bad_urls),
    CHECK_CASE(test_sentinel_urls_refused_or_opened),
    CHECK_CASE(test_open_succeeds_while_redis_is_down),
    CHECK_CASE(test_password_file_and_env_authenticate),
    CHECK_CASE(test_password_options_refused_without_the_password),
    CHECK_CASE(test_acquire_grants_free_key_once),
    CHECK_CASE(test_fence_grows_with_every_grant),
    CHECK_CASE(test_renew_keeps_fence_and_stored_ttl),
    CHECK_CASE(test_expired_token_is_dead),
    CHECK_CASE(test_inspect_shows_owner_never_token),
    CHECK_CASE(test_distinct_keys_are_distinct_locks),
    CHECK_CASE(test_prefixes_are_separate_namespaces),
    CHECK_CASE(test_release_notifies_every_instance),
    CHECK_CASE(test_queue_is_fifo_and_try_once_waits_its_turn),
    CHECK_CASE(test_cancel_wait_passes_the_turn_and_notifies),
    CHECK_CASE(test_dead_waiters_are_dropped_after_their_deadline),
    CHECK_CASE(test_failed_cancel_is_retried_once_redis_is_back),
    CHECK_CASE(test_shared_grants_up_to_limit_then_held),
    CHECK_CASE(test_exclusive_and_shared_exclude_each_other),
    CHECK_CASE(test_shared_under_another_limit_is_a_mismatch),
    CHECK_CASE(test_shared_waiter_never_overtakes_an_exclusive_one),
    CHECK_CASE(test_shared_waiters_are_granted_together),
    CHECK_CASE(test_reentry_counts_holds_up_to_the_cap),
    CHECK_CASE(test_idempotency_key_replays_the_live_grant),
    CHECK_CASE(test_inspect_lists_holders_by_fence),
    CHECK_CASE(test_inspect_shows_the_first_hundred_holders),
    CHECK_CASE(test_shared_holders_expire_one_by_one),
    CHECK_CASE(test_list_pages_every_held_key_once_in_order),
    CHECK_CASE(test_list_leaves_out_expired_keys_and_prunes_them),
    CHECK_CASE(test_list_shows_a_key_of_two_members_once),
    CHECK_CASE(test_index_is_cut_into_small_buckets),
    CHECK_CASE(test_list_walks_past_names_of_gone_buckets),
    CHECK_CASE(test_list_bytes_over_0x7f_and_prefix_of_0xff),
    CHECK_CASE(test_list_shared_key_sums_up_its_holders),
    CHECK_CASE(test_list_stops_at_its_budget_of_expired_keys),
    CHECK_CASE(test_force_release_exclusive_with_reentries),
    CHECK_CASE(test_force_release_shared_holders),
    CHECK_CASE(test_force_release_of_a_free_key_is_not_found),
    CHECK_CASE(test_force_release_wakes_a_waiter_on_another_instance),
    CHECK_CASE(test_held_count_counts_live_holders),
    CHECK_CASE(test_counts_outlive_every_holder),
    CHECK_CASE(test_takeover_tells_the_expired_fence),
    CHECK_CASE(test_fence_is_in_the_index_member),
    CHECK_CASE(test_release_keeps_an_older_lockds_counter),
    CHECK_CASE(test_token_digest_is_80_bits_and_takes_the_older_40),
    CHECK_CASE(test_grants_prune_what_expired_long_ago),
    CHECK_CASE(test_release_tells_when_the_hold_was_granted),
    CHECK_CASE(test_multi_ops_are_one_script_each),
    CHECK_CASE(test_scripts_run_as_functions_and_survive_a_flush),
    CHECK_CASE(test_fcall_refused_stays_evalsha),
    CHECK_CASE(test_multi_grant_is_the_single_key_layout),
    CHECK_CASE(test_multi_held_key_or_queue_changes_nothing),
    CHECK_CASE(test_multi_expired_holders_are_gone_by_redis_clock),
    CHECK_CASE(test_multi_renew_and_release_in_redis),
    CHECK_CASE(test_multi_waiter_hears_releases_through_others),
    CHECK_CASE(test_multi_exhausted_fence_grants_none),
    CHECK_CASE(test_exhausted_fence_grants_nothing),
    CHECK_CASE(test_multi_sixty_four_longest_keys),
    CHECK_CASE(test_multi_stalled_redis_answers_unavailable_grants_none),
    CHECK_CASE(test_stopped_redis_answers_unavailable_in_time),
    CHECK_CASE(test_restart_keeps_holders_and_fences),
    CHECK_CASE(test_batch_is_one_call_each_and_survives_script_flush),
    CHECK_CASE(test_batch_redials_a_connection_the_server_closed),
    CHECK_CASE(test_batch_on_a_stopped_redis_answers_unavailable_in_time),
};

int main(int argc, char **argv)
{
    int rc = 1;

    signal(SIGPIPE, SIG_IGN); /* as lockd does: hiredis uses write() */
    if (access(TESTSRV_REDIS, X_OK) != 0) {
        printf("skip: %s is not installed\n", TESTSRV_REDIS);
        return SKIP_EXIT;
    }
    if (testsrv_setup(&srv, "redis") != 0 || start_redis() != 0) {
        printf("skip: %s did not start on 127.0.0.1:%d\n", TESTSRV_REDIS,
               srv.port);
        testsrv_cleanup(&srv, SIGTERM);
        return SKIP_EXIT;
    }
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", srv.port);
    be_main = open_be(url);
    if (be_main == NULL)
        printf("FAIL cannot open %s\n0 passed, 1 failed\n", url);
    else
        rc = CHECK_MAIN(cases);
    redis_backend.close(be_main);
    testsrv_cleanup(&srv, SIGTERM);
    return rc;
}

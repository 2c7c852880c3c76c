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
    char u[160];
    struct backend *other;
    struct lock_grant g;

    snprintf(u, sizeof(u), "%s?prefix=other%%3A", url);
    other = open_be(u);
    CHECK(other != NULL);
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
    CHECK_EQ_INT(raw_int("LLEN lockd:queue:{%s}", "tr1"), 0);
    CHECK_EQ_INT(rel(be_main, "tr1", TOK_A), BACKEND_OK);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_open_rejects_bad_urls),
    CHECK_CASE(test_open_succeeds_while_redis_is_down),
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
    CHECK_CASE(test_stopped_redis_answers_unavailable_in_time),
    CHECK_CASE(test_restart_keeps_holders_and_fences),
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

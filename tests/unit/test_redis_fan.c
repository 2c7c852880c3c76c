/*
 * tests/unit/test_redis_fan.c - backends/redis/fan.c: one call on several
 * redis:// backends at once (what redlock:// is built from), the clock
 * floor and the mark of acquire.lua, the write-back script (refence.lua)
 * and the identity every dial reads, against three real redis-server
 * processes this program starts on free loopback ports (and a fourth
 * without AOF for the fsync case). Prints "skip: <reason>" and exits 77
 * when redis-server cannot run.
 */
#include "backends/redis/redis_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "tests/unit/check.h"
#define TEST_BE_OPS redis_backend
#include "lib/clock.h"
#include "tests/unit/server.h"

#define TOK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define TOK_C "cccccccccccccccccccccccccccccccc"
#define NSRV  3

static struct test_server srv[NSRV] = { TEST_SERVER_INIT, TEST_SERVER_INIT,
                                        TEST_SERVER_INIT };
static struct redis_be *be[NSRV];

/* ---- helpers ---- */

/* A raw command on a fresh connection to server i: the reply, or NULL. */
static redisReply *raw(int i, const char *fmt, const char *arg)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", srv[i].port, tv);
    redisReply *r = NULL;

    if (c != NULL && c->err == 0)
        r = redisCommand(c, fmt, arg);
    redisFree(c);
    return r;
}

/* Server i's clock (TIME) in whole seconds, as microseconds: what the
 * floor grants at least; or -1. */
static int64_t server_us(int i)
{
    redisReply *r = raw(i, "TIME", NULL);
    int64_t us = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        us = strtoll(r->element[0]->str, NULL, 10) * 1000000;
    freeReplyObject(r);
    return us;
}

/* An integer string key of server i ("lockd:fence:{k}"), or -1. */
static int64_t server_int(int i, const char *key)
{
    redisReply *r = raw(i, "GET %s", key);
    int64_t v = -1;

    if (r != NULL && r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

static int64_t server_pttl(int i, const char *key)
{
    redisReply *r = raw(i, "PTTL %s", key);
    int64_t v = -3;

    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    freeReplyObject(r);
    return v;
}

static struct redis_be *open_node(int i)
{
    char url[64];

    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", srv[i].port);
    return (struct redis_be *)be_open(url, NULL, NULL);
}

/* redis-server on s (already set up): AOF with fsync always, or neither
 * AOF nor snapshots. */
static int start_server(struct test_server *s, bool aof)
{
    char portstr[16];
    char *argv[] = { TESTSRV_REDIS,
                     "--port",
                     portstr,
                     "--bind",
                     "127.0.0.1",
                     "--dir",
                     s->dir,
                     "--save",
                     "",
                     "--appendonly",
                     aof ? "yes" : "no",
                     "--appendfsync",
                     "always",
                     "--daemonize",
                     "no",
                     NULL };

    snprintf(portstr, sizeof(portstr), "%d", s->port);
    return testsrv_start(s, argv, testsrv_redis_ready, 100, 50);
}

static struct lock_req req_of(const char *key, const char *tok)
{
    struct lock_req r = {
        .key = key, .key_len = strlen(key), .token = tok, .ttl_ms = 10000
    };

    return r;
}

/* Fan acquire of req to the three servers, floor and mark as given, and
 * parse each answer into g[i] (res[i]; UNAVAILABLE when none came). */
static void fan_acquire(const struct lock_req *req,
                        bool floor,
                        uint64_t mark_ms,
                        int64_t budget_ms,
                        struct redis_fan *out,
                        enum backend_result *res,
                        struct lock_grant *g)
{
    struct redis_call c;

    CHECK(redis_call_acquire(be[0], req, floor, mark_ms, &c) == 0);
    redis_fan_run(be, NSRV, &c, clock_mono_us() + budget_ms * 1000, out);
    redis_call_free(&c);
    for (int i = 0; i < NSRV; i++) {
        res[i] = BACKEND_UNAVAILABLE;
        memset(&g[i], 0, sizeof(g[i]));
        if (out[i].reply != NULL)
            res[i] = redis_reply_acquire(be[i], out[i].reply, &g[i]);
    }
}

/* Release key of tok on every server (best effort). */
static void release_all(const char *key, const char *tok)
{
    for (int i = 0; i < NSRV; i++)
        rel(&be[i]->base, key, tok);
}

/* ---- cases ---- */

/* refence on one server: n keys, the token's holds counted */
static int refence(int i,
                   const char *const *keys,
                   size_t n,
                   const char *tok,
                   const uint64_t *fences)
{
    size_t lens[4];
    struct redis_call c;
    struct redis_fan out;
    int held = -1;

    for (size_t k = 0; k < n; k++)
        lens[k] = strlen(keys[k]);
    CHECK(redis_call_refence(be[i], keys, lens, n, tok, fences, &c) == 0);
    redis_fan_run(&be[i], 1, &c, clock_mono_us() + 1000000, &out);
    redis_call_free(&c);
    if (out.reply != NULL)
        held = redis_reply_refence(out.reply, n);
    redis_fan_clear(&out, 1);
    return held;
}

static void test_fan_acquire_grants_on_all_with_floored_fences(void)
{
    struct lock_req req = req_of("fan-floor", TOK_A);
    struct redis_fan out[NSRV];
    enum backend_result res[NSRV];
    struct lock_grant g[NSRV];
    uint64_t first[NSRV];
    int64_t before[NSRV];

    for (int i = 0; i < NSRV; i++)
        before[i] = server_us(i);
    fan_acquire(&req, true, 0, 1000, out, res, g);
    for (int i = 0; i < NSRV; i++) {
        CHECK_MSG(res[i] == BACKEND_OK, "server %d: %d", i, (int)res[i]);
        CHECK(out[i].sent && out[i].rtt_us > 0);
        CHECK_MSG((int64_t)g[i].fence >= before[i],
                  "server %d: fence %llu below its clock %lld", i,
                  (unsigned long long)g[i].fence, (long long)before[i]);
        first[i] = g[i].fence;
    }
    redis_fan_clear(out, NSRV);
    /* another token: held everywhere; then released and granted again,
     * each time a greater fence */
    req.token = TOK_B;
    fan_acquire(&req, true, 0, 1000, out, res, g);
    for (int i = 0; i < NSRV; i++)
        CHECK(res[i] == BACKEND_HELD && g[i].retry_ms > 0);
    redis_fan_clear(out, NSRV);
    release_all("fan-floor", TOK_A);
    fan_acquire(&req, true, 0, 1000, out, res, g);
    for (int i = 0; i < NSRV; i++) {
        CHECK(res[i] == BACKEND_OK);
        CHECK_MSG(g[i].fence > first[i], "server %d: %llu after %llu", i,
                  (unsigned long long)g[i].fence, (unsigned long long)first[i]);
    }
    redis_fan_clear(out, NSRV);
    release_all("fan-floor", TOK_B);
    /* a counter above the clock (a write-back) goes on from there */
    for (int i = 0; i < NSRV; i++) {
        const char *k[] = { "fan-floor" };
        first[i] = (uint64_t)server_us(i) + 1000000000;
        CHECK_EQ_INT(refence(i, k, 1, TOK_A, &first[i]), 0);
    }
    fan_acquire(&req, true, 0, 1000, out, res, g);
    for (int i = 0; i < NSRV; i++)
        CHECK(res[i] == BACKEND_OK && g[i].fence == first[i] + 1);
    redis_fan_clear(out, NSRV);
    release_all("fan-floor", TOK_B);
    /* without the floor a fresh key starts at 1, as redis:// does */
    req = req_of("fan-nofloor", TOK_A);
    fan_acquire(&req, false, 0, 1000, out, res, g);
    for (int i = 0; i < NSRV; i++)
        CHECK(res[i] == BACKEND_OK && g[i].fence == 1);
    redis_fan_clear(out, NSRV);
    release_all("fan-nofloor", TOK_A);
}

/* Back-to-back floored grants of one key never repeat or go back, even
 * within one microsecond of the server's clock. */
static void test_floored_fences_strictly_increase(void)
{
    struct lock_req req = req_of("fan-inc", TOK_A);
    struct redis_fan out[NSRV];
    enum backend_result res[NSRV];
    struct lock_grant g[NSRV];
    uint64_t last[NSRV] = { 0 };

    for (int round = 0; round < 20; round++) {
        fan_acquire(&req, true, 0, 1000, out, res, g);
        for (int i = 0; i < NSRV; i++) {
            CHECK(res[i] == BACKEND_OK);
            CHECK_MSG(g[i].fence > last[i], "round %d server %d", round, i);
            last[i] = g[i].fence;
        }
        redis_fan_clear(out, NSRV);
        release_all("fan-inc", TOK_A);
    }
}

/* acquire_multi with the floor: every key's fence at or above the clock;
 * without it, fresh keys start at 1 (redis://). */
static void test_multi_acquire_floor_on_every_key(void)
{
    const char *keys[] = { "fm-1", "fm-2" }, *plain[] = { "fm-3", "fm-4" };
    size_t lens[] = { 4, 4 };
    struct lock_multi_req req = {
        .keys = keys, .key_lens = lens, .n = 2, .token = TOK_A, .ttl_ms = 10000
    };
    struct lock_multi_grant g;
    struct redis_fan out[NSRV];
    struct redis_call c;
    int64_t before[NSRV];

    for (int pass = 0; pass < 2; pass++) {
        req.keys = pass == 0 ? keys : plain;
        for (int i = 0; i < NSRV; i++)
            before[i] = server_us(i);
        CHECK(redis_call_acquire_multi(be[0], &req, pass == 0, 0, &c) == 0);
        redis_fan_run(be, NSRV, &c, clock_mono_us() + 1000000, out);
        redis_call_free(&c);
        for (int i = 0; i < NSRV; i++) {
            CHECK(out[i].reply != NULL &&
                  redis_reply_acquire_multi(be[i], &req, out[i].reply, &g) ==
                      BACKEND_OK);
            for (size_t k = 0; k < 2; k++)
                CHECK_MSG(pass == 0 ? (int64_t)g.fences[k] >= before[i]
                                    : g.fences[k] == 1,
                          "pass %d server %d key %zu: %llu", pass, i, k,
                          (unsigned long long)g.fences[k]);
        }
        redis_fan_clear(out, NSRV);
        for (int i = 0; i < NSRV; i++)
            redis_release_multi(&be[i]->base, &req, &g);
    }
}

/* A try-once acquire with mark_ms that is not granted marks the key (so a
 * release is published); with 0 it marks nothing. */
static void test_refused_try_once_marks_the_key(void)
{
    struct lock_req req = req_of("fan-mark", TOK_A);
    struct redis_fan out[NSRV];
    enum backend_result res[NSRV];
    struct lock_grant g[NSRV];
    int64_t pttl;

    fan_acquire(&req, true, 0, 1000, out, res, g);
    redis_fan_clear(out, NSRV);
    req.token = TOK_B;
    fan_acquire(&req, true, 0, 1000, out, res, g);
    CHECK(res[0] == BACKEND_HELD);
    redis_fan_clear(out, NSRV);
    CHECK_EQ_INT(server_pttl(0, "lockd:mwait:{fan-mark}"), -2);
    fan_acquire(&req, true, REDIS_BE_MARK_MS, 1000, out, res, g);
    CHECK(res[0] == BACKEND_HELD);
    pttl = server_pttl(0, "lockd:mwait:{fan-mark}");
    CHECK_MSG(pttl > REDIS_BE_MARK_MS &&
                  pttl <= (int64_t)g[0].retry_ms + REDIS_BE_MARK_MS,
              "mark pttl %lld, retry %llu", (long long)pttl,
              (unsigned long long)g[0].retry_ms);
    redis_fan_clear(out, NSRV);
    release_all("fan-mark", TOK_A);
}

/* The fence inspect shows for the holder at index h of key on server i. */
static uint64_t holder_fence(int i, const char *key, uint32_t h)
{
    struct lock_info info = { 0 };
    uint64_t f = 0;

    if (redis_inspect_run(be[i], key, strlen(key), &info) == BACKEND_OK &&
        h < info.nholders)
        f = info.holders[h].fence;
    lock_info_clear(&info);
    return f;
}

static void test_refence_raises_counter_and_holder_fence(void)
{
    const char *ex[] = { "rf-ex" }, *both[] = { "rf-ex", "rf-free" };
    const char *sh[] = { "rf-sh" };
    struct lock_grant g;
    uint64_t f, fs[2];

    CHECK(acq(&be[0]->base, "rf-ex", TOK_A, 10000, &g) == BACKEND_OK);
    f = g.fence + 1000;
    CHECK_EQ_INT(refence(0, ex, 1, TOK_A, &f), 1);
    CHECK_EQ_INT(server_int(0, "lockd:fence:{rf-ex}"), (int64_t)f);
    CHECK_EQ_U64(holder_fence(0, "rf-ex", 0), f);
    CHECK(ren(&be[0]->base, "rf-ex", TOK_A, 0, &g) == BACKEND_OK);
    CHECK_EQ_U64(g.fence, f);
    /* a smaller fence lowers nothing; another token holds nothing */
    fs[0] = 5;
    CHECK_EQ_INT(refence(0, ex, 1, TOK_B, fs), 0);
    CHECK_EQ_INT(server_int(0, "lockd:fence:{rf-ex}"), (int64_t)f);
    CHECK_EQ_U64(holder_fence(0, "rf-ex", 0), f);
    /* two keys, held and free: one held, both counters raised */
    fs[0] = f + 10;
    fs[1] = 777;
    CHECK_EQ_INT(refence(0, both, 2, TOK_A, fs), 1);
    CHECK_EQ_INT(server_int(0, "lockd:fence:{rf-free}"), 777);
    CHECK_EQ_U64(holder_fence(0, "rf-ex", 0), f + 10);
    /* shared: only that holder's record */
    CHECK(acq_kind(&be[0]->base, "rf-sh", TOK_A, LOCK_SHARED, 0, NULL, 10000,
                   NULL, &g) == BACKEND_OK);
    CHECK(acq_kind(&be[0]->base, "rf-sh", TOK_B, LOCK_SHARED, 0, NULL, 10000,
                   NULL, &g) == BACKEND_OK);
    f = g.fence + 500; /* above both: A's record sorts last now */
    CHECK_EQ_INT(refence(0, sh, 1, TOK_A, &f), 1);
    CHECK_EQ_U64(holder_fence(0, "rf-sh", 0), g.fence);
    CHECK_EQ_U64(holder_fence(0, "rf-sh", 1), f);
    CHECK_EQ_INT(refence(0, sh, 1, TOK_C, &f), 0);
    rel(&be[0]->base, "rf-ex", TOK_A);
    rel(&be[0]->base, "rf-sh", TOK_A);
    rel(&be[0]->base, "rf-sh", TOK_B);
    /* the next grant goes on from the raised counter */
    CHECK(acq(&be[0]->base, "rf-free", TOK_A, 10000, &g) == BACKEND_OK);
    CHECK_EQ_U64(g.fence, 778);
    rel(&be[0]->base, "rf-free", TOK_A);
}

static void test_stopped_server_is_null_and_the_call_ends_in_time(void)
{
    struct lock_req req = req_of("fan-stop", TOK_A);
    struct redis_fan out[NSRV];
    enum backend_result res[NSRV];
    struct lock_grant g[NSRV];
    struct lock_info info = { 0 };
    int64_t t0, took;
    bool all = false;

    fan_acquire(&req, true, 0, 1000, out, res, g); /* connections up */
    redis_fan_clear(out, NSRV);
    release_all("fan-stop", TOK_A);
    testsrv_signal(&srv[1], SIGSTOP);
    t0 = check_mono_ms();
    fan_acquire(&req, true, 0, 300, out, res, g);
    took = check_mono_ms() - t0;
    CHECK_MSG(took >= 290 && took < 300 + 150, "took %lld ms", (long long)took);
    CHECK(res[0] == BACKEND_OK && res[2] == BACKEND_OK);
    CHECK(out[1].reply == NULL && out[1].sent);
    redis_fan_clear(out, NSRV);
    /* while it backs off it is not even asked, and costs nothing */
    t0 = check_mono_ms();
    fan_acquire(&req, true, 0, 300, out, res, g);
    CHECK(out[1].reply == NULL && !out[1].sent);
    CHECK(check_mono_ms() - t0 < 150);
    redis_fan_clear(out, NSRV);
    /* its back-off over, it is dialled again: a dial that cannot end
     * within the time left is cut there, not at the URL's timeouts */
    check_sleep_ms(100);
    t0 = check_mono_ms();
    fan_acquire(&req, true, 0, 300, out, res, g);
    took = check_mono_ms() - t0;
    CHECK_MSG(took < 300 + 150, "took %lld ms", (long long)took);
    CHECK(out[1].reply == NULL && res[0] == BACKEND_OK);
    redis_fan_clear(out, NSRV);
    testsrv_signal(&srv[1], SIGCONT);
    /* the acquire it ran late was too late by its clock: nothing held */
    check_sleep_ms(100);
    CHECK(redis_inspect_run(be[1], "fan-stop", 8, &info) == BACKEND_NOT_FOUND);
    /* and the next fans reach it again (after its back-off) */
    for (int tries = 0; tries < 40 && !all; tries++) {
        fan_acquire(&req, true, 0, 1000, out, res, g);
        all = res[0] == BACKEND_OK && res[1] == BACKEND_OK &&
              res[2] == BACKEND_OK;
        redis_fan_clear(out, NSRV);
        if (!all)
            check_sleep_ms(50);
    }
    CHECK(all);
    release_all("fan-stop", TOK_A);
}

static void test_fan_command_pings_every_server(void)
{
    const char *argv[] = { "PING" };
    size_t lens[] = { 4 };
    struct redis_fan out[NSRV];
    char name[64], want[64];

    redis_fan_command(be, NSRV, 1, argv, lens, clock_mono_us() + 1000000, out);
    for (int i = 0; i < NSRV; i++)
        CHECK(out[i].reply != NULL &&
              out[i].reply->type == REDIS_REPLY_STATUS &&
              strcmp(out[i].reply->str, "PONG") == 0);
    redis_fan_clear(out, NSRV);
    for (int i = 0; i < NSRV; i++)
        CHECK(out[i].reply == NULL && !out[i].sent);
    redis_node_name(be[2], name, sizeof(name));
    snprintf(want, sizeof(want), "127.0.0.1:%d", srv[2].port);
    CHECK_STR_EQ(name, want);
}

/* PING be (one server) through a fan, then read this thread's identity. */
static int ping_identity(struct redis_be *b, struct redis_identity *id)
{
    const char *argv[] = { "PING" };
    size_t lens[] = { 4 };
    struct redis_fan out;
    int ok;

    redis_fan_command(&b, 1, 1, argv, lens, clock_mono_us() + 2000000, &out);
    ok = out.reply != NULL;
    redis_fan_clear(&out, 1);
    return ok && redis_conn_identity(b, id) == 0 ? 0 : -1;
}

static void test_identity_is_stable_and_changes_after_a_restart(void)
{
    struct redis_be *b = open_node(2), *b2 = open_node(2);
    struct redis_identity id, id2, id3;

    CHECK(b != NULL && b2 != NULL);
    if (b == NULL || b2 == NULL)
        goto out;
    /* open() dialled without it: the next call dials again, with it */
    CHECK(redis_conn_identity(b, &id) == -1);
    redis_want_identity(b);
    redis_want_identity(b2);
    CHECK(ping_identity(b, &id) == 0);
    CHECK_EQ_INT((int)strlen(id.run_id), 40);
    CHECK(id.fsync_always);
    CHECK(id.uptime_s >= 0 && id.dialled_ms > 0);
    CHECK(ping_identity(b2, &id2) == 0); /* another dial, same server */
    CHECK_STR_EQ(id.run_id, id2.run_id);
    testsrv_signal(&srv[2], SIGTERM);
    CHECK(start_server(&srv[2], true) == 0);
    /* the old connection is found closed before use, not on reading its
     * answer: the first call after the restart is answered already */
    CHECK(ping_identity(b, &id3) == 0);
    CHECK_EQ_INT((int)strlen(id3.run_id), 40);
    CHECK_MSG(strcmp(id.run_id, id3.run_id) != 0, "run_id %s kept", id3.run_id);
    CHECK(id3.uptime_s <= 2);
out:
    redis_backend.close(&b->base);
    redis_backend.close(&b2->base);
}

static void test_identity_fsync_false_without_aof(void)
{
    struct test_server s = TEST_SERVER_INIT;
    struct redis_be *b = NULL;
    struct redis_identity id;
    char url[64];

    CHECK(testsrv_setup(&s, "redisfan") == 0 && start_server(&s, false) == 0);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", s.port);
    b = (struct redis_be *)be_open(url, NULL, NULL);
    CHECK(b != NULL);
    if (b != NULL) {
        redis_want_identity(b);
        CHECK(ping_identity(b, &id) == 0);
        CHECK_EQ_INT((int)strlen(id.run_id), 40);
        CHECK(!id.fsync_always);
        redis_backend.close(&b->base);
    }
    testsrv_cleanup(&s, SIGTERM);
}

/* redis_append_argv() writes the bytes hiredis's own formatter writes:
 * no arguments' worth of text, empty ones, binary ones, and one past its
 * stack buffer. A context that never connected still buffers. */
static void test_append_argv_matches_hiredis(void)
{
    static char big[3000];
    const char *argv[4] = { "EVALSHA", "", "a\r\n\0b", big };
    size_t argl[4] = { 7, 0, 5, sizeof(big) };
    redisContext *ctx = redisConnectUnix("/nonexistent/lockd-test.sock");
    char *want = NULL;

    memset(big, 'z', sizeof(big));
    CHECK(ctx != NULL);
    if (ctx == NULL)
        return;
    for (int argc = 1; argc <= 4; argc++) {
        long long n = redisFormatCommandArgv(&want, argc, argv, argl);
        sdsclear(ctx->obuf);
        CHECK(redis_append_argv(ctx, argc, argv, argl) == 0);
        CHECK_MSG(n > 0 && (size_t)n == sdslen(ctx->obuf) &&
                      memcmp(want, ctx->obuf, (size_t)n) == 0,
                  "%d arguments: %lld against %zu bytes", argc, n,
                  sdslen(ctx->obuf));
        redisFreeCommand(want);
    }
    redisFree(ctx);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_append_argv_matches_hiredis),
    CHECK_CASE(test_fan_acquire_grants_on_all_with_floored_fences),
    CHECK_CASE(test_floored_fences_strictly_increase),
    CHECK_CASE(test_multi_acquire_floor_on_every_key),
    CHECK_CASE(test_refused_try_once_marks_the_key),
    CHECK_CASE(test_refence_raises_counter_and_holder_fence),
    CHECK_CASE(test_fan_command_pings_every_server),
    CHECK_CASE(test_stopped_server_is_null_and_the_call_ends_in_time),
    CHECK_CASE(test_identity_is_stable_and_changes_after_a_restart),
    CHECK_CASE(test_identity_fsync_false_without_aof),
};

int main(int argc, char **argv)
{
    int rc = 1, opened = 0;

    signal(SIGPIPE, SIG_IGN); /* as lockd does: hiredis uses write() */
    if (access(TESTSRV_REDIS, X_OK) != 0) {
        printf("skip: %s is not installed\n", TESTSRV_REDIS);
        return SKIP_EXIT;
    }
    for (int i = 0; i < NSRV; i++)
        if (testsrv_setup(&srv[i], "redisfan") != 0 ||
            start_server(&srv[i], true) != 0) {
            printf("skip: %s did not start\n", TESTSRV_REDIS);
            for (int k = 0; k <= i; k++)
                testsrv_cleanup(&srv[k], SIGTERM);
            return SKIP_EXIT;
        }
    for (int i = 0; i < NSRV; i++) {
        be[i] = open_node(i);
        opened += be[i] != NULL;
    }
    if (opened != NSRV)
        printf("FAIL cannot open the servers\n0 passed, 1 failed\n");
    else
        rc = CHECK_MAIN(cases);
    for (int i = 0; i < NSRV; i++) {
        if (be[i] != NULL)
            redis_backend.close(&be[i]->base);
        testsrv_cleanup(&srv[i], SIGTERM);
    }
    return rc;
}

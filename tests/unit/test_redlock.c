/*
 * tests/unit/test_redlock.c - the redlock:// adapter: its pure rules
 * (the URL, the vote combiners, the node-state rules) fed directly, then
 * the adapter on three (and five) redis-server processes this program
 * starts on free loopback ports: majorities, node loss, restarts without
 * data, fences across them. The contract itself is test_contract.c's
 * (target "redlock").
 */
#include "backends/redlock/redlock_int.h"

#include <stdlib.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lib/clock.h"
#include "tests/unit/check.h"
#include "tests/unit/server.h"

#include <hiredis/hiredis.h>

#define TOK1 "11111111111111111111111111111111"
#define TOK2 "22222222222222222222222222222222"

/* ---- the URL ---- */

static enum backend_result
parse(const char *url, struct redlock_cfg *cfg, char *err)
{
    err[0] = '\0';
    return redlock_parse_url(url, cfg, err, 256);
}

static void test_url_three_nodes(void)
{
    struct redlock_cfg cfg;
    char err[256];

    CHECK_EQ_INT(parse("redlock://a:1,b,c:3/2?prefix=p%20q&timeout_ms=300"
                       "&drift_ms=7&trust_fsync=1",
                       &cfg, err),
                 BACKEND_OK);
    CHECK_EQ_INT(cfg.n, 3);
    CHECK_STR_EQ(cfg.names[0], "a:1");
    CHECK_STR_EQ(cfg.names[1], "b:6379");
    CHECK_STR_EQ(cfg.urls[2], "redis://c:3/2?prefix=p%20q&timeout_ms=300");
    CHECK_EQ_INT(cfg.drift_ms, 7);
    CHECK(cfg.trust_fsync);
    CHECK_STR_EQ(cfg.prefix, "p q");
    redlock_cfg_free(&cfg);
}

static void test_url_auth_and_v6(void)
{
    struct redlock_cfg cfg;
    char err[256];

    CHECK_EQ_INT(parse("redlock://u:p%40ss@[::1]:7,h:8,k:9", &cfg, err),
                 BACKEND_OK);
    CHECK_STR_EQ(cfg.names[0], "[::1]:7");
    CHECK_STR_EQ(cfg.urls[0], "redis://u:p%40ss@[::1]:7?prefix=lockd%3A");
    CHECK_EQ_INT(cfg.drift_ms, -1);
    CHECK(!cfg.trust_fsync);
    redlock_cfg_free(&cfg);
}

/* password_file and LOCKD_BACKEND_PASSWORD (issue 18): every node gets
 * the one password; a URL password and a file at once, or a file that
 * cannot be read, is refused without showing the password. */
static void test_url_password_file_and_env(void)
{
    struct redlock_cfg cfg;
    char err[256], path[] = "/tmp/lockd-unit-redlock-pw-XXXXXX", u[160];
    int fd = mkstemp(path);

    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, "p@ss w\n", 7) == 7);
    close(fd);
    snprintf(u, sizeof(u), "redlock://user@a,b,c?password_file=%s", path);
    CHECK_EQ_INT(parse(u, &cfg, err), BACKEND_OK);
    CHECK_STR_EQ(cfg.urls[1], "redis://user:p%40ss%20w@b:6379?prefix=lockd%3A");
    redlock_cfg_free(&cfg);
    setenv("LOCKD_BACKEND_PASSWORD", "envpw", 1);
    CHECK_EQ_INT(parse("redlock://a,b,c", &cfg, err), BACKEND_OK);
    CHECK_STR_EQ(cfg.urls[2], "redis://:envpw@c:6379?prefix=lockd%3A");
    redlock_cfg_free(&cfg);
    /* the URL's own password wins over the environment */
    CHECK_EQ_INT(parse("redlock://:mine@a,b,c", &cfg, err), BACKEND_OK);
    CHECK_STR_EQ(cfg.urls[0], "redis://:mine@a:6379?prefix=lockd%3A");
    redlock_cfg_free(&cfg);
    unsetenv("LOCKD_BACKEND_PASSWORD");
    snprintf(u, sizeof(u), "redlock://:hunter2@a,b,c?password_file=%s", path);
    CHECK_EQ_INT(parse(u, &cfg, err), BACKEND_INVALID);
    CHECK_CONTAINS(err, "password_file");
    CHECK(strstr(err, "hunter2") == NULL);
    unlink(path);
    snprintf(u, sizeof(u), "redlock://a,b,c?password_file=%s", path);
    CHECK_EQ_INT(parse(u, &cfg, err), BACKEND_INVALID);
    CHECK_CONTAINS(err, path);
    CHECK(strncmp(err, "redlock: ", 9) == 0);
    CHECK(cfg.n == 0 && cfg.prefix == NULL);
}

static void test_url_refused(void)
{
    static const char *const bad[] = {
        "redlock://a,b",                     /* even */
        "redlock://a",                       /* too few */
        "redlock://a:1,b:1,c:1,d:1",         /* even */
        "redlock://1,2,3,4,5,6,7,8,9,10,11", /* more than 9 */
        "redlock://a,a:6379,b",              /* twice */
        "redlock://a,b,c?min_replicas=1",
        "redlock://a,b,c?sentinel_password=x",
        "redlock://a,b,c?quarantine_ms=5",
        "redlock://a,b,c?drift_ms=x",
        "redlock://a,b,c?trust_fsync=2",
        "redlock://a,b,c/x",
        "redlock://u@a,b,c",
        "redis://a,b,c",
    };
    struct redlock_cfg cfg;
    char err[256];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_MSG(parse(bad[i], &cfg, err) == BACKEND_INVALID, "%s", bad[i]);
        CHECK_MSG(strncmp(err, "redlock: ", 9) == 0, "%s: %s", bad[i], err);
        CHECK(cfg.n == 0 && cfg.prefix == NULL);
    }
    parse("redlock://a,b", &cfg, err);
    CHECK_CONTAINS(err, "2 nodes");
    CHECK_CONTAINS(err, "odd");
    CHECK_EQ_INT(parse("redlock://1,2,3,4,5,6,7,8,9", &cfg, err), BACKEND_OK);
    CHECK_EQ_INT(cfg.n, 9);
    redlock_cfg_free(&cfg);
}

/* ---- the vote combiners ---- */

/* n answers: kinds[i] 'G' grant (fence fences[i]), 'R' replay (token
 * "t"), 'H' held (retry 100 + i), 'L' limit, 'I' idem, '-' none (sent),
 * '.' not sent; voting[i] as given by vote ('1' counts, 'q' a quarantined
 * node: benched). */
static void votes(const char *kinds,
                  const char *vote,
                  const uint64_t *fences,
                  struct redlock_vote *v)
{
    for (size_t i = 0; kinds[i] != '\0'; i++) {
        memset(&v[i], 0, sizeof(v[i]));
        v[i].voting = vote[i] == '1';
        v[i].benched = vote[i] == 'q';
        v[i].sent = kinds[i] != '.';
        v[i].answered = kinds[i] != '-' && kinds[i] != '.';
        v[i].g.fence = fences != NULL ? fences[i] : 10;
        v[i].g.ttl_ms = 1000 + 100 * i;
        switch (kinds[i]) {
        case 'G':
            v[i].res = BACKEND_OK;
            break;
        case 'R':
            v[i].res = BACKEND_OK;
            v[i].g.replay = true;
            strcpy(v[i].g.token, "t");
            break;
        case 'H':
            v[i].res = BACKEND_HELD;
            v[i].g.retry_ms = 100 + i;
            break;
        case 'L':
            v[i].res = BACKEND_LIMIT_MISMATCH;
            break;
        case 'I':
            v[i].res = BACKEND_IDEM_CONFLICT;
            break;
        default:
            v[i].res = BACKEND_UNAVAILABLE;
        }
    }
}

static void test_vote_grant_needs_counted_quorum(void)
{
    struct redlock_vote v[5];
    struct redlock_acq_plan p;
    uint64_t f[5] = { 10, 30, 20, 5, 5 };

    votes("GGH", "111", f, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_GRANT);
    CHECK_EQ_U64(p.fence, 30);
    CHECK(p.refence[0] && !p.refence[1] && !p.refence[2]);
    /* a quarantined node's grant is not a vote, though its fence counts */
    votes("GGH", "011", f, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_REFUSE);
    CHECK_EQ_INT(p.res, BACKEND_UNAVAILABLE); /* 1 grant + 1 uncounted */
    CHECK(p.undo[0] && p.undo[1] && !p.undo[2]);
    votes("GGHHG", "11111", f, v);
    redlock_acquire_plan(v, 5, 3, 10, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_GRANT);
    CHECK_EQ_U64(p.fence, 30);
    CHECK(p.refence[0] && !p.refence[1] && p.refence[4] && !p.refence[2]);
    /* the fence of a non-voting grant counts for F */
    f[2] = 99;
    votes("GHGG", "1101", f, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_REFUSE); /* 1 counted of 2 needed: n=3 */
    votes("GHG", "101", f, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_GRANT);
    CHECK_EQ_U64(p.fence, 99);
}

static void test_vote_refusals(void)
{
    struct redlock_vote v[5];
    struct redlock_acq_plan p;

    votes("HHG", "111", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_REFUSE);
    CHECK_EQ_INT(p.res, BACKEND_HELD);
    CHECK_EQ_U64(p.retry_ms, 100); /* the smallest */
    CHECK(!p.undo[0] && !p.undo[1] && p.undo[2]);
    votes("H-G", "111", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.res, BACKEND_UNAVAILABLE);
    CHECK(!p.undo[0] && p.undo[1] && p.undo[2]);
    votes("H.G", "111", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK(!p.undo[1]); /* never sent: nothing to undo */
    votes("LLG", "111", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.res, BACKEND_LIMIT_MISMATCH);
    votes("IGI", "111", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.res, BACKEND_IDEM_CONFLICT);
    votes("LHI", "111", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.res, BACKEND_HELD);
    CHECK_EQ_U64(p.retry_ms, 101);
    /* the retry hint comes from counted answers only */
    votes("HHH", "011", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.res, BACKEND_HELD);
    CHECK_EQ_U64(p.retry_ms, 101);
    /* HELD on a quarantined node does not count as a refusal */
    votes("HHG", "011", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.res, BACKEND_UNAVAILABLE);
    /* the restart hazard: node 0 restarted empty (quarantined) grants,
     * node 1 still has the holder, node 2 grants: HELD, never 503 (the
     * quarantined node could not have counted) and never a grant */
    votes("GHG", "q11", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_REFUSE);
    CHECK_EQ_INT(p.res, BACKEND_HELD);
    CHECK(p.undo[0] && !p.undo[1] && p.undo[2]);
    /* a quarantined node that did not answer is no reason for 503 */
    votes("-HG", "q11", NULL, v);
    redlock_acquire_plan(v, 3, 2, 10, &p);
    CHECK_EQ_INT(p.res, BACKEND_HELD);
}

static void test_vote_replay(void)
{
    struct redlock_vote v[5];
    struct redlock_acq_plan p;

    votes("RRG", "111", NULL, v);
    v[0].g.fence = 7;
    v[1].g.fence = 9;
    redlock_acquire_plan(v, 3, 2, 50, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_REPLAY);
    CHECK_EQ_U64(p.fence, 9);
    CHECK_EQ_U64(p.ttl_ms, 1000 - 50); /* 2nd largest of 1000, 1100 */
    CHECK(!p.undo[0] && !p.undo[1] && p.undo[2]);
    /* tokens differ: no quorum of one replay */
    votes("RRH", "111", NULL, v);
    strcpy(v[1].g.token, "u");
    redlock_acquire_plan(v, 3, 2, 50, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_REFUSE);
    /* nothing left of it: HELD */
    votes("RRH", "111", NULL, v);
    redlock_acquire_plan(v, 3, 2, 1000, &p);
    CHECK_EQ_INT(p.v, REDLOCK_V_REFUSE);
    CHECK_EQ_INT(p.res, BACKEND_HELD);
}

static void test_vote_holders_and_validity(void)
{
    bool h[3] = { true, true, false }, vt[3] = { true, true, true };

    CHECK(redlock_grant_holds(h, vt, 3, 2, 1));
    CHECK(!redlock_grant_holds(h, vt, 3, 2, 0));
    vt[1] = false;
    CHECK(!redlock_grant_holds(h, vt, 3, 2, 100));
}

static void test_vote_renew_refusal(void)
{
    struct redlock_vote v[3];
    bool lost;

    votes("GGG", "111", NULL, v);
    v[0].res = BACKEND_NOT_FOUND;
    v[1].res = BACKEND_MISMATCH;
    v[2].res = BACKEND_NOT_FOUND;
    CHECK_EQ_INT(redlock_refusal(v, 3, 2, &lost), BACKEND_NOT_FOUND);
    CHECK(lost);
    v[2].res = BACKEND_MISMATCH;
    CHECK_EQ_INT(redlock_refusal(v, 3, 2, &lost), BACKEND_MISMATCH);
    /* as many MISMATCH as NOT_FOUND: MISMATCH */
    v[2].answered = false;
    CHECK_EQ_INT(redlock_refusal(v, 3, 2, &lost), BACKEND_MISMATCH);
    CHECK(lost);
    v[0].res = BACKEND_OK;
    CHECK_EQ_INT(redlock_refusal(v, 3, 2, &lost), BACKEND_UNAVAILABLE);
    CHECK(!lost);
    votes("GGG", "111", NULL, v);
    v[0].res = v[1].res = BACKEND_HOLDS_MAX;
    CHECK_EQ_INT(redlock_refusal(v, 3, 2, &lost), BACKEND_HOLDS_MAX);
    CHECK(!lost);
}

static void test_kth_largest(void)
{
    uint64_t v[5] = { 3, 9, 1, 7, 5 };

    CHECK_EQ_U64(redlock_kth_largest(v, 5, 3), 5);
    CHECK_EQ_U64(redlock_kth_largest(v, 5, 1), 9);
    CHECK_EQ_U64(redlock_kth_largest(v, 2, 3), 0);
}

/* ---- the node-state rules ---- */

#define HOLD 10000 /* max TTL + drift of these cases */

static struct redlock_rules rules(size_t seen, bool any_marked, bool trust)
{
    struct redlock_rules r = { .hold_ms = HOLD,
                               .trust_fsync = trust,
                               .seen = seen,
                               .quorum = 2,
                               .any_marked = any_marked };
    return r;
}

static struct redis_identity ident(const char *run, int64_t up_s, bool fs)
{
    struct redis_identity id = { .uptime_s = up_s,
                                 .dialled_ms = 100000,
                                 .fsync_always = fs };
    snprintf(id.run_id, sizeof(id.run_id), "%s", run);
    return id;
}

static void test_node_first_sight(void)
{
    struct redlock_nstate st;
    struct redlock_rules r = rules(1, false, false);
    struct redis_identity old = ident("a", HOLD / 1000 + 1, false);
    struct redis_identity young = ident("a", 2, false);
    struct redis_identity fs = ident("a", 2, true);
    unsigned act;

    /* the marker names this run: admitted before, never restarted since
     * (a lockd restart quarantines nothing) */
    memset(&st, 0, sizeof(st));
    act = redlock_node_step(&st, &young, 1, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(!(act & REDLOCK_ACT_SET_MARKER));
    CHECK_STR_EQ(st.run_id, "a");
    /* the marker names another run: restarted with its old data; not
     * counted until restart + hold */
    memset(&st, 0, sizeof(st));
    act = redlock_node_step(&st, &young, 2, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    CHECK_EQ_INT(st.quarantine_until, 100000 - 1000 + HOLD);
    CHECK(act & REDLOCK_ACT_CHANGED);
    CHECK(!(act & REDLOCK_ACT_SET_MARKER));
    /* ... unless that restart was longer than the hold ago */
    memset(&st, 0, sizeof(st));
    act = redlock_node_step(&st, &old, 2, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(act & REDLOCK_ACT_SET_MARKER);
    /* ... or it runs appendfsync always and trust_fsync=1 says so */
    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &fs, 2, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED); /* not trusted by URL */
    r = rules(1, false, true);
    memset(&st, 0, sizeof(st));
    act = redlock_node_step(&st, &fs, 2, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(act & REDLOCK_ACT_SET_MARKER);
    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &young, 2, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED); /* no fsync: no trust */
    /* no marker, too few seen: unknown; the marker unread: unknown */
    r = rules(1, false, false);
    memset(&st, 0, sizeof(st));
    CHECK_EQ_INT(redlock_node_step(&st, &young, 0, 100000, &r), 0);
    CHECK_EQ_INT(st.state, REDLOCK_UNKNOWN);
    CHECK_EQ_INT(redlock_node_step(&st, &young, -1, 100000, &r), 0);
    CHECK_EQ_INT(st.state, REDLOCK_UNKNOWN);
    /* a new deployment: a quorum seen, none marked */
    r = rules(2, false, false);
    act = redlock_node_step(&st, &young, 0, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(act & REDLOCK_ACT_SET_MARKER);
    /* another node has the marker: this one's data went, when is not
     * known (a FLUSHALL keeps the uptime): from now, uptime and trust
     * notwithstanding */
    r = rules(3, true, true);
    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &old, 0, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    CHECK_EQ_INT(st.quarantine_until, 100000 + HOLD);
    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &fs, 0, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
}

static void test_node_restart_and_flush(void)
{
    struct redlock_nstate st;
    struct redlock_rules r = rules(3, true, false);
    struct redis_identity a = ident("a", 100, false);
    struct redis_identity b = ident("b", 1, false);
    struct redis_identity c = ident("c", 1, true);
    unsigned act;

    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &a, 1, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    /* the same server again: nothing changes */
    CHECK_EQ_INT(redlock_node_step(&st, &a, 1, 100250, &r), 0);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    /* another run_id (marker unread, as a worker sees it) */
    act = redlock_node_step(&st, &b, -1, 100300, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    CHECK(act & REDLOCK_ACT_CHANGED);
    CHECK_STR_EQ(st.run_id, "b");
    CHECK_EQ_INT(st.quarantine_until, 100000 + HOLD);
    /* still quarantined before the time (its old marker read), voting at
     * it, the marker set to its run */
    CHECK_EQ_INT(redlock_node_step(&st, &b, 2, 109999, &r), 0);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    act = redlock_node_step(&st, &b, 2, 110000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(act & REDLOCK_ACT_SET_MARKER);
    CHECK_EQ_INT(redlock_node_step(&st, &b, 1, 110250, &r), 0);
    /* the marker vanished (FLUSHALL): quarantined from now */
    act = redlock_node_step(&st, &b, 0, 200000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    CHECK_EQ_INT(st.quarantine_until, 200000 + HOLD);
    /* another instance's time passed first and it set the marker */
    act = redlock_node_step(&st, &b, 1, 200500, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(!(act & REDLOCK_ACT_SET_MARKER));
    /* a trusted (fsync always) node's restart: a worker's sight leaves it
     * unknown until the monitor reads the marker; with its old marker it
     * votes at once, without one it lost its data */
    r = rules(3, true, true);
    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &a, 1, 100000, &r);
    act = redlock_node_step(&st, &c, -1, 100500, &r);
    CHECK_EQ_INT(st.state, REDLOCK_UNKNOWN);
    CHECK(act & REDLOCK_ACT_CHANGED);
    act = redlock_node_step(&st, &c, 2, 100600, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(act & REDLOCK_ACT_SET_MARKER);
    CHECK_STR_EQ(st.run_id, "c");
    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &a, 1, 100000, &r);
    redlock_node_step(&st, &c, 0, 100500, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    /* no identity: nothing */
    CHECK_EQ_INT(redlock_node_step(&st, NULL, 0, 100600, &r), 0);
}

/* ---- on real servers ---- */

#define NSRV    3
#define MAX_TTL 5000 /* hooks.max_ttl_ms: the quarantine is about this */

static struct test_server srv[NSRV];
static bool have_servers;
static struct backend *rl; /* the handle the live cases share */

/* redis-server without persistence: a restart loses everything. */
static int start_node(size_t i)
{
    char portstr[16];
    char *argv[] = { TESTSRV_REDIS,  "--port",    portstr,
                     "--bind",       "127.0.0.1", "--dir",
                     srv[i].dir,     "--save",    "",
                     "--appendonly", "no",        "--daemonize",
                     "no",           NULL };

    snprintf(portstr, sizeof(portstr), "%d", srv[i].port);
    return testsrv_start(&srv[i], argv, testsrv_redis_ready, 100, 50);
}

static struct backend *open_rl(const char *opts)
{
    struct backend_hooks hooks = { .max_ttl_ms = MAX_TTL };
    struct backend *be = NULL;
    char url[256], err[256] = "";

    snprintf(url, sizeof(url),
             "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d%s", srv[0].port,
             srv[1].port, srv[2].port, opts);
    if (backend_open(url, &hooks, &be, err, sizeof(err)) != BACKEND_OK)
        printf("open %s: %s\n", url, err);
    return be;
}

/* Wait (at most ms) for node i to vote (voting) or be quarantined. */
static bool wait_node(struct backend *be, size_t i, bool voting, int ms)
{
    int64_t end = clock_mono_ms() + ms;

    do {
        struct backend_node nd[REDLOCK_NODES_MAX];
        unsigned q;
        if (backend_nodes(be, nd, REDLOCK_NODES_MAX, &q) == NSRV &&
            (voting ? nd[i].voting : nd[i].quarantined))
            return true;
        usleep(20000);
    } while (clock_mono_ms() < end);
    return false;
}

/* try-once acquire and release through the wrappers */
static enum backend_result acq(struct backend *be,
                               const char *key,
                               const char *tok,
                               uint64_t ttl,
                               struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .ttl_ms = ttl
    };

    return backend_acquire(be, &req, g);
}

static enum backend_result
rel(struct backend *be, const char *key, const char *tok)
{
    struct lock_req req = { .key = key, .key_len = strlen(key), .token = tok };
    struct lock_grant g;

    return backend_release(be, &req, &g);
}

/* One command on node i, outside lockd: its integer (or -1). */
static long long node_cmd(size_t i, const char *fmt, const char *arg)
{
    redisContext *c = redisConnect("127.0.0.1", srv[i].port);
    redisReply *r;
    long long v = -1;

    if (c == NULL || c->err != 0) {
        redisFree(c);
        return -1;
    }
    r = redisCommand(c, fmt, arg);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r != NULL && r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    redisFree(c);
    return v;
}

#define NEED_RL()                                             \
    do {                                                      \
        if (rl == NULL) {                                     \
            CHECK_MSG(!have_servers, "redlock did not open"); \
            return;                                           \
        }                                                     \
    } while (0)

/* Fresh nodes are a new deployment: all vote, get the marker; a grant
 * needs a majority, survives one node down, not two. */
static void test_live_majority(void)
{
    struct backend_node nd[REDLOCK_NODES_MAX];
    struct backend_topology top;
    struct lock_grant g;
    unsigned q = 0;

    NEED_RL();
    CHECK_EQ_INT(backend_nodes(rl, nd, REDLOCK_NODES_MAX, &q), NSRV);
    CHECK_EQ_INT(q, 2);
    for (size_t i = 0; i < NSRV; i++) {
        CHECK(nd[i].voting && nd[i].up && !nd[i].quarantined);
        CHECK(nd[i].latency_us >= 0);
        CHECK_EQ_INT(node_cmd(i, "EXISTS %s", "lockd:redlock"), 1);
    }
    backend_describe(rl, &top);
    CHECK_STR_EQ(top.topology, "redlock");
    CHECK_EQ_INT(top.nodes, NSRV);
    CHECK_EQ_INT(rl->call_timeout_ms, 3 * 1000 + 500);
    CHECK_EQ_INT(backend_ping(rl), BACKEND_OK);
    CHECK_EQ_INT(acq(rl, "live/maj", TOK1, 2000, &g), BACKEND_OK);
    CHECK(g.fence > UINT64_C(1000000000000000)); /* the µs floor */
    CHECK_EQ_U64(g.ttl_ms, 2000 - 22); /* less the drift, from the send */
    CHECK_EQ_INT(acq(rl, "live/maj", TOK2, 2000, &g), BACKEND_HELD);
    CHECK(g.retry_ms > 0);
    testsrv_signal(&srv[2], SIGSTOP);
    CHECK_EQ_INT(acq(rl, "live/maj2", TOK1, 10000, &g), BACKEND_OK);
    /* a node timeout went by: the validity left is less by that */
    CHECK(backend_grant_left_ms(&g, clock_mono_us()) < 9000);
    CHECK(g.expires_at_ms < clock_wall_ms() + 9000);
    CHECK_EQ_INT(rel(rl, "live/maj", TOK1), BACKEND_OK);
    testsrv_signal(&srv[1], SIGSTOP);
    CHECK_EQ_INT(acq(rl, "live/maj3", TOK1, 2000, &g), BACKEND_UNAVAILABLE);
    testsrv_signal(&srv[1], SIGCONT);
    testsrv_signal(&srv[2], SIGCONT);
    /* the undo: nothing of the refused grant is left on node 0 */
    CHECK_EQ_INT(node_cmd(0, "EXISTS %s", "lockd:lock:{live/maj3}"), 0);
    CHECK(wait_node(rl, 1, true, 3000));
    usleep(1200 * 1000); /* the nodes' back-off after the timeouts */
    CHECK_EQ_INT(rel(rl, "live/maj2", TOK1), BACKEND_OK);
}

/* A fence a granting node gave above the others is written back to a
 * majority before the answer: the next grant's is greater even without
 * that node. */
static void test_live_write_back(void)
{
    struct lock_grant g;
    const char *high = "4000000000000000";

    NEED_RL();
    CHECK_EQ_INT(node_cmd(0, "SET lockd:fence:{live/wb} %s", high), -1);
    CHECK_EQ_INT(acq(rl, "live/wb", TOK1, 2000, &g), BACKEND_OK);
    CHECK_EQ_U64(g.fence, UINT64_C(4000000000000001));
    CHECK(node_cmd(1, "GET %s", "lockd:fence:{live/wb}") >= 4000000000000001);
    CHECK(node_cmd(2, "GET %s", "lockd:fence:{live/wb}") >= 4000000000000001);
    CHECK_EQ_INT(rel(rl, "live/wb", TOK1), BACKEND_OK);
    testsrv_signal(&srv[0], SIGSTOP);
    CHECK_EQ_INT(acq(rl, "live/wb", TOK2, 5000, &g), BACKEND_OK);
    CHECK(g.fence > UINT64_C(4000000000000001));
    testsrv_signal(&srv[0], SIGCONT);
    usleep(1200 * 1000);
    CHECK_EQ_INT(rel(rl, "live/wb", TOK2), BACKEND_OK);
}

/* A second handle on nodes an earlier one admitted (young servers,
 * run first): the marker names their runs, so they vote at once (a lockd
 * restart quarantines nothing). A marker naming another run says the
 * server restarted with its old data: that node is quarantined. */
static void test_live_marker_young_quarantined(void)
{
    struct backend *be;
    struct backend_node nd[REDLOCK_NODES_MAX];
    struct lock_grant g;
    unsigned q;

    NEED_RL();
    be = open_rl("");
    CHECK(be != NULL);
    if (be == NULL)
        return;
    backend_nodes(be, nd, REDLOCK_NODES_MAX, &q);
    for (size_t i = 0; i < NSRV; i++)
        CHECK(nd[i].voting && !nd[i].quarantined);
    CHECK_EQ_INT(acq(be, "live/young", TOK1, 1000, &g), BACKEND_OK);
    backend_close(be);
    (void)node_cmd(0, "SET lockd:redlock %s", "an-older-run");
    CHECK_EQ_INT(node_cmd(0, "EXISTS %s", "lockd:redlock"), 1);
    be = open_rl("?trust_fsync=1"); /* no AOF here: no trust */
    CHECK(be != NULL);
    if (be == NULL)
        return;
    backend_nodes(be, nd, REDLOCK_NODES_MAX, &q);
    CHECK(nd[0].quarantined && !nd[0].voting);
    CHECK(nd[0].quarantine_ms > 0 &&
          nd[0].quarantine_ms <= MAX_TTL + MAX_TTL / 100 + 2 + 1000);
    CHECK(nd[1].voting && nd[2].voting);
    backend_close(be);
}

/* A node restarted without its data is quarantined for about the max
 * TTL, and is not counted meanwhile; then it votes again, marker set. */
static void test_live_restart_empty_quarantine(void)
{
    struct backend_node nd[REDLOCK_NODES_MAX];
    struct lock_grant g;
    unsigned q;
    uint64_t f1;

    NEED_RL();
    CHECK_EQ_INT(acq(rl, "live/q", TOK1, 1000, &g), BACKEND_OK);
    f1 = g.fence;
    for (size_t i = 0; i < 2; i++) {
        testsrv_signal(&srv[i], SIGKILL);
        CHECK_EQ_INT(start_node(i), 0);
    }
    CHECK(wait_node(rl, 0, false, 3000));
    CHECK(wait_node(rl, 1, false, 3000));
    backend_nodes(rl, nd, REDLOCK_NODES_MAX, &q);
    CHECK(nd[0].quarantine_ms > 0 &&
          nd[0].quarantine_ms <= MAX_TTL + 100 + 1000);
    CHECK(!nd[0].voting);
    /* two of three not counted: no grant, though they would say yes;
     * the third still has TOK1's hold: 409, the key is held */
    CHECK_EQ_INT(acq(rl, "live/q", TOK2, 1000, &g), BACKEND_HELD);
    /* a key free on every node: 503, too few nodes vote */
    CHECK_EQ_INT(acq(rl, "live/q2", TOK2, 1000, &g), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(backend_ping(rl), BACKEND_UNAVAILABLE);
    CHECK(wait_node(rl, 0, true, MAX_TTL + 3000));
    CHECK(wait_node(rl, 1, true, 3000));
    CHECK_EQ_INT(node_cmd(0, "EXISTS %s", "lockd:redlock"), 1);
    CHECK_EQ_INT(acq(rl, "live/q", TOK2, 1000, &g), BACKEND_OK);
    CHECK(g.fence > f1);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_url_three_nodes),
    CHECK_CASE(test_url_auth_and_v6),
    CHECK_CASE(test_url_password_file_and_env),
    CHECK_CASE(test_url_refused),
    CHECK_CASE(test_vote_grant_needs_counted_quorum),
    CHECK_CASE(test_vote_refusals),
    CHECK_CASE(test_vote_replay),
    CHECK_CASE(test_vote_holders_and_validity),
    CHECK_CASE(test_vote_renew_refusal),
    CHECK_CASE(test_kth_largest),
    CHECK_CASE(test_node_first_sight),
    CHECK_CASE(test_node_restart_and_flush),
    CHECK_CASE(test_live_marker_young_quarantined), /* first: young */
    CHECK_CASE(test_live_majority),
    CHECK_CASE(test_live_write_back),
    CHECK_CASE(test_live_restart_empty_quarantine),
};

int main(int argc, char **argv)
{
    int rc;

    signal(SIGPIPE, SIG_IGN);
    have_servers = access(TESTSRV_REDIS, X_OK) == 0;
    for (size_t i = 0; have_servers && i < NSRV; i++) {
        srv[i] = (struct test_server)TEST_SERVER_INIT;
        if (testsrv_setup(&srv[i], "redlock") != 0 || start_node(i) != 0)
            have_servers = false;
    }
    if (have_servers)
        rl = open_rl("");
    rc = CHECK_MAIN(cases);
    backend_close(rl);
    for (size_t i = 0; i < NSRV; i++)
        testsrv_cleanup(&srv[i], SIGKILL);
    return rc;
}

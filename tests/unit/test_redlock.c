/*
 * tests/unit/test_redlock.c - the redlock:// adapter: its pure rules
 * (the URL, the vote combiners, the node-state rules) fed directly, then
 * the adapter on three (and five) redis-server processes this program
 * starts on free loopback ports: majorities, node loss, restarts without
 * data, fences across them. The contract itself is test_contract.c's
 * (target "redlock").
 */
#include "backends/redlock/redlock_int.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lib/clock.h"
#include "tests/unit/check.h"
#include "tests/unit/server.h"

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
 * '.' not sent; voting[i] as given by vote ('1' counts). */
static void votes(const char *kinds,
                  const char *vote,
                  const uint64_t *fences,
                  struct redlock_vote *v)
{
    for (size_t i = 0; kinds[i] != '\0'; i++) {
        memset(&v[i], 0, sizeof(v[i]));
        v[i].voting = vote[i] == '1';
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
    struct redis_identity old = ident("a", HOLD / 1000, false);
    struct redis_identity young = ident("a", 2, false);
    unsigned act;

    /* up for longer than the hold: votes, and gets the marker */
    memset(&st, 0, sizeof(st));
    act = redlock_node_step(&st, &old, 0, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(act & REDLOCK_ACT_SET_MARKER);
    CHECK_STR_EQ(st.run_id, "a");
    /* young, marker present: it lost its data; until restart + hold */
    memset(&st, 0, sizeof(st));
    act = redlock_node_step(&st, &young, 1, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    CHECK_EQ_INT(st.quarantine_until, 100000 - 2000 - 1000 + HOLD);
    CHECK(act & REDLOCK_ACT_CHANGED);
    CHECK(!(act & REDLOCK_ACT_SET_MARKER));
    /* young, no marker, too few seen: unknown */
    memset(&st, 0, sizeof(st));
    act = redlock_node_step(&st, &young, 0, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_UNKNOWN);
    CHECK_EQ_INT(act, 0);
    /* a new deployment: a quorum seen, none marked */
    r = rules(2, false, false);
    act = redlock_node_step(&st, &young, 0, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(act & REDLOCK_ACT_SET_MARKER);
    /* another node has the marker: this one lost its data */
    memset(&st, 0, sizeof(st));
    r = rules(3, true, false);
    redlock_node_step(&st, &young, 0, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    /* trusted: fsync always and trust_fsync=1 */
    memset(&st, 0, sizeof(st));
    struct redis_identity fs = ident("a", 2, true);
    redlock_node_step(&st, &fs, 1, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED); /* not trusted by URL */
    memset(&st, 0, sizeof(st));
    r = rules(3, true, true);
    redlock_node_step(&st, &fs, 1, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &young, 1, 100000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED); /* no fsync: no trust */
}

static void test_node_restart_and_flush(void)
{
    struct redlock_nstate st;
    struct redlock_rules r = rules(3, true, false);
    struct redis_identity a = ident("a", 100, false);
    struct redis_identity b = ident("b", 1, false);
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
    CHECK_EQ_INT(st.quarantine_until, 100000 - 1000 - 1000 + HOLD);
    /* still quarantined before the time, voting at it, marker set */
    CHECK_EQ_INT(redlock_node_step(&st, &b, 0, 107999, &r), 0);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    act = redlock_node_step(&st, &b, 0, 108000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK(act & REDLOCK_ACT_SET_MARKER);
    /* the marker vanished (FLUSHALL): quarantined from now */
    act = redlock_node_step(&st, &b, 0, 200000, &r);
    CHECK_EQ_INT(st.state, REDLOCK_QUARANTINED);
    CHECK_EQ_INT(st.quarantine_until, 200000 + HOLD);
    /* a restart of a trusted (fsync always) node is no quarantine */
    r = rules(3, true, true);
    memset(&st, 0, sizeof(st));
    redlock_node_step(&st, &a, 1, 100000, &r);
    struct redis_identity c = ident("c", 1, true);
    redlock_node_step(&st, &c, 1, 100500, &r);
    CHECK_EQ_INT(st.state, REDLOCK_VOTING);
    CHECK_STR_EQ(st.run_id, "c");
    /* no identity: nothing */
    CHECK_EQ_INT(redlock_node_step(&st, NULL, 0, 100600, &r), 0);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_url_three_nodes),
    CHECK_CASE(test_url_auth_and_v6),
    CHECK_CASE(test_url_refused),
    CHECK_CASE(test_vote_grant_needs_counted_quorum),
    CHECK_CASE(test_vote_refusals),
    CHECK_CASE(test_vote_replay),
    CHECK_CASE(test_vote_holders_and_validity),
    CHECK_CASE(test_vote_renew_refusal),
    CHECK_CASE(test_kth_largest),
    CHECK_CASE(test_node_first_sight),
    CHECK_CASE(test_node_restart_and_flush),
};

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    return CHECK_MAIN(cases);
}

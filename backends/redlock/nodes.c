/*
 * backends/redlock/nodes.c - which nodes' answers count (SPEC-21
 * "Restart safety"). A node that restarted without its data no longer
 * has the fence counters and holders it had: it could agree to a second
 * grant of a key a majority already granted, or hand out a smaller fence.
 * So it does not vote until every lock it may have held has expired (the
 * max TTL plus drift after its restart), by which time its clock floor
 * (fences are at least the server's clock in µs) is above every fence it
 * ever gave. The marker key <prefix>redlock tells a node lockd admitted
 * before (it restarted empty) from a new deployment.
 *
 * redlock_node_step() is the rule, pure; the monitor thread checks every
 * node every REDLOCK_MONITOR_MS (PING, the connection's identity, EXISTS
 * marker) and applies it; a worker that reads a new run_id on its own
 * connection applies it too (redlock_voting), so a restart between two
 * passes is never counted.
 */
#include "backends/redlock/redlock_int.h"

#include <stdio.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"

int64_t redlock_restart_ms(const struct redis_identity *id)
{
    /* uptime_in_seconds is truncated: the restart came at the latest
     * uptime_s whole seconds before the reading, which is the safe end
     * to count the quarantine from */
    return id->dialled_ms - id->uptime_s * 1000;
}

static bool redlock_trusted(const struct redis_identity *id,
                            const struct redlock_rules *r)
{
    return r->trust_fsync && id->fsync_always;
}

/* Into VOTING: the marker is set where it is missing. */
static unsigned redlock_admit(struct redlock_nstate *st, int marker)
{
    st->state = REDLOCK_VOTING;
    st->quarantine_until = 0;
    return REDLOCK_ACT_CHANGED | (marker != 1 ? REDLOCK_ACT_SET_MARKER : 0);
}

static unsigned redlock_quarantine(struct redlock_nstate *st, int64_t until)
{
    st->state = REDLOCK_QUARANTINED;
    st->quarantine_until = until;
    return REDLOCK_ACT_CHANGED;
}

/* First sight of a node (UNKNOWN). */
static unsigned redlock_first_sight(struct redlock_nstate *st,
                                    const struct redis_identity *id,
                                    int marker,
                                    int64_t now_ms,
                                    const struct redlock_rules *r)
{
    int64_t until = redlock_restart_ms(id) + r->hold_ms;

    if (id->uptime_s * 1000 >= r->hold_ms || redlock_trusted(id, r))
        return redlock_admit(st, marker);
    if (marker < 0)
        return 0;
    if (marker == 1)
        return until > now_ms ? redlock_quarantine(st, until)
                              : redlock_admit(st, marker);
    /* no marker: a new deployment only if a quorum was seen and none of
     * them was ever admitted; else this one lost its data */
    if (r->any_marked)
        return until > now_ms ? redlock_quarantine(st, until)
                              : redlock_admit(st, marker);
    if (r->seen >= r->quorum)
        return redlock_admit(st, marker);
    return 0;
}

unsigned redlock_node_step(struct redlock_nstate *st,
                           const struct redis_identity *id,
                           int marker,
                           int64_t now_ms,
                           const struct redlock_rules *r)
{
    unsigned act = 0;

    if (id == NULL || id->run_id[0] == '\0')
        return 0;
    if (st->state == REDLOCK_UNKNOWN) {
        act = redlock_first_sight(st, id, marker, now_ms, r);
        if (st->state != REDLOCK_UNKNOWN)
            snprintf(st->run_id, sizeof(st->run_id), "%s", id->run_id);
    } else if (strcmp(st->run_id, id->run_id) != 0) {
        int64_t until = redlock_restart_ms(id) + r->hold_ms;
        /* it restarted: what it held may be gone */
        snprintf(st->run_id, sizeof(st->run_id), "%s", id->run_id);
        if (redlock_trusted(id, r) || until <= now_ms)
            act = st->state != REDLOCK_VOTING ? redlock_admit(st, marker) : 0;
        else
            act = redlock_quarantine(st, until);
    } else if (st->state == REDLOCK_VOTING && marker == 0) {
        /* FLUSHALL, eviction: the counters may be gone too */
        act = redlock_quarantine(st, now_ms + r->hold_ms);
    } else if (st->state == REDLOCK_QUARANTINED &&
               now_ms >= st->quarantine_until) {
        act = redlock_admit(st, marker);
    }
    if (marker >= 0)
        st->marked = marker == 1;
    if (act & REDLOCK_ACT_SET_MARKER)
        st->marked = true;
    return act;
}

/* ---- applying the rules ---- */

static void redlock_rules_of(const struct redlock_be *be,
                             struct redlock_rules *r)
{
    memset(r, 0, sizeof(*r));
    r->hold_ms = be->max_ttl_ms + redlock_drift(be, (uint64_t)be->max_ttl_ms);
    r->trust_fsync = be->cfg.trust_fsync;
    r->quorum = be->quorum;
}

/* Log a change of node i (be->lock held: cheap, and in order). */
static void redlock_log_change(struct redlock_be *be, size_t i, int64_t now)
{
    const struct redlock_nstate *st = &be->st[i];

    if (st->state == REDLOCK_QUARANTINED)
        log_warn("redlock: node %s restarted or lost its data: not counted "
                 "for %lld ms (max TTL + drift)",
                 be->cfg.names[i], (long long)(st->quarantine_until - now));
    else if (st->state == REDLOCK_VOTING)
        log_info("redlock: node %s votes", be->cfg.names[i]);
}

/* Apply one sight of node i under be->lock: the REDLOCK_ACT_* flags. */
static unsigned redlock_apply(struct redlock_be *be,
                              size_t i,
                              const struct redis_identity *id,
                              int marker,
                              const struct redlock_rules *r)
{
    int64_t now = clock_mono_ms();
    unsigned act = redlock_node_step(&be->st[i], id, marker, now, r);

    if (act & REDLOCK_ACT_CHANGED)
        redlock_log_change(be, i, now);
    return act;
}

void redlock_voting(struct redlock_be *be,
                    const struct redis_fan *f,
                    bool *voting,
                    bool *benched)
{
    struct redis_identity id[REDLOCK_NODES_MAX];
    bool have[REDLOCK_NODES_MAX];
    struct redlock_rules r;

    redlock_rules_of(be, &r);
    for (size_t i = 0; i < be->n; i++)
        have[i] = f[i].reply != NULL &&
                  redis_conn_identity(be->nodes[i], &id[i]) == 0;
    pthread_mutex_lock(&be->lock);
    for (size_t i = 0; i < be->n; i++) {
        struct redlock_nstate *st = &be->st[i];
        voting[i] = false;
        if (!have[i]) {
            if (benched != NULL)
                benched[i] = st->state == REDLOCK_QUARANTINED;
            continue;
        }
        if (st->state != REDLOCK_UNKNOWN &&
            strcmp(st->run_id, id[i].run_id) != 0)
            redlock_apply(be, i, &id[i], -1, &r);
        voting[i] = st->state == REDLOCK_VOTING &&
                    strcmp(st->run_id, id[i].run_id) == 0;
        if (benched != NULL)
            benched[i] = st->state == REDLOCK_QUARANTINED;
    }
    pthread_mutex_unlock(&be->lock);
}

/* SET the marker on the nodes set[] names. */
static void
redlock_set_markers(struct redlock_be *be, const bool *set, int64_t deadline_us)
{
    struct redis_fan f[REDLOCK_NODES_MAX];
    const char *argv[3] = { "SET", NULL, "1" };
    size_t lens[3] = { 3, 0, 1 };
    char key[REDIS_BE_PREFIX_MAX + sizeof(REDLOCK_MARKER)];

    snprintf(key, sizeof(key), "%s%s", be->cfg.prefix, REDLOCK_MARKER);
    argv[1] = key;
    lens[1] = strlen(key);
    for (size_t i = 0; i < be->n; i++) {
        if (!set[i])
            continue;
        redis_fan_command(&be->nodes[i], 1, 3, argv, lens, deadline_us, &f[i]);
        redis_fan_clear(&f[i], 1);
    }
}

/* EXISTS marker on the nodes that answered PING: marker[i] 1/0/-1. */
static void redlock_read_markers(struct redlock_be *be,
                                 const struct redis_fan *ping,
                                 int64_t deadline_us,
                                 int *marker)
{
    struct redis_fan f[REDLOCK_NODES_MAX];
    const char *argv[2] = { "EXISTS", NULL };
    size_t lens[2] = { 6, 0 };
    char key[REDIS_BE_PREFIX_MAX + sizeof(REDLOCK_MARKER)];

    snprintf(key, sizeof(key), "%s%s", be->cfg.prefix, REDLOCK_MARKER);
    argv[1] = key;
    lens[1] = strlen(key);
    redis_fan_command(be->nodes, be->n, 2, argv, lens, deadline_us, f);
    for (size_t i = 0; i < be->n; i++) {
        const redisReply *r = f[i].reply;
        marker[i] = -1;
        if (ping[i].reply != NULL && r != NULL &&
            r->type == REDIS_REPLY_INTEGER)
            marker[i] = r->integer > 0;
    }
    redis_fan_clear(f, be->n);
}

/* The rules over one pass's sights, under be->lock: set[] the markers. */
static void redlock_check_apply(struct redlock_be *be,
                                const struct redis_fan *ping,
                                const struct redis_identity *id,
                                const bool *have,
                                const int *marker,
                                bool *set)
{
    struct redlock_rules r;

    redlock_rules_of(be, &r);
    pthread_mutex_lock(&be->lock);
    /* a node admitted before counts as marked: it was, when admitted */
    for (size_t i = 0; i < be->n; i++)
        if (have[i] && marker[i] >= 0) {
            r.seen++;
            r.any_marked |=
                marker[i] == 1 || be->st[i].state != REDLOCK_UNKNOWN;
        }
    for (size_t i = 0; i < be->n; i++) {
        struct redlock_nstate *st = &be->st[i];
        st->up = ping[i].reply != NULL;
        st->latency_us = st->up ? ping[i].rtt_us : -1;
        set[i] = have[i] && (redlock_apply(be, i, &id[i], marker[i], &r) &
                             REDLOCK_ACT_SET_MARKER);
    }
    be->checked_ms = clock_mono_ms();
    pthread_mutex_unlock(&be->lock);
}

void redlock_check(struct redlock_be *be, int64_t wait_ms)
{
    struct redis_fan ping[REDLOCK_NODES_MAX];
    struct redis_identity id[REDLOCK_NODES_MAX];
    bool have[REDLOCK_NODES_MAX], set[REDLOCK_NODES_MAX];
    int marker[REDLOCK_NODES_MAX];
    const char *argv[1] = { "PING" };
    size_t lens[1] = { 4 };

    /* each fan its own wait: a silent node must not use up the next's */
    redis_fan_command(be->nodes, be->n, 1, argv, lens,
                      clock_mono_us() + wait_ms * 1000, ping);
    for (size_t i = 0; i < be->n; i++)
        have[i] = ping[i].reply != NULL &&
                  redis_conn_identity(be->nodes[i], &id[i]) == 0;
    redlock_read_markers(be, ping, clock_mono_us() + wait_ms * 1000, marker);
    redlock_check_apply(be, ping, id, have, marker, set);
    redis_fan_clear(ping, be->n);
    redlock_set_markers(be, set, clock_mono_us() + wait_ms * 1000);
}

/* ---- the monitor thread ---- */

static void *redlock_monitor_main(void *arg)
{
    struct redlock_be *be = arg;

    while (!atomic_load(&be->stopping)) {
        int64_t next = clock_mono_ms() + REDLOCK_MONITOR_MS;

        redlock_check(be, be->timeout_ms);
        pthread_mutex_lock(&be->lock);
        while (!atomic_load(&be->stopping) &&
               clock_cond_wait_until(&be->cond, &be->lock, next) == 0)
            ;
        pthread_mutex_unlock(&be->lock);
    }
    return NULL;
}

int redlock_monitor_start(struct redlock_be *be)
{
    if (pthread_create(&be->monitor, NULL, redlock_monitor_main, be) != 0)
        return -1;
    be->monitor_started = true;
    return 0;
}

void redlock_monitor_stop(struct redlock_be *be)
{
    if (!be->monitor_started)
        return;
    pthread_mutex_lock(&be->lock);
    atomic_store(&be->stopping, true);
    pthread_cond_signal(&be->cond);
    pthread_mutex_unlock(&be->lock);
    pthread_join(be->monitor, NULL);
    be->monitor_started = false;
}

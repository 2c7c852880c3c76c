/*
 * api/events.c - the lock lifecycle events and their metrics (see
 * events.h). Each event is one log_event() line of fields built on the
 * stack (the key as bytes with its length: keys may hold any UTF-8), and
 * one count in lockd_lock_events_total, written or not.
 */
#include "api/events.h"

#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"

#define FIELDS_MAX 12

/* The fields of one event line, filled in order. */
struct fields {
    struct log_field f[FIELDS_MAX];
    size_t n;
};

static void put_str(struct fields *fs, const char *name, const char *s)
{
    if (s == NULL || fs->n >= FIELDS_MAX)
        return;
    fs->f[fs->n++] =
        (struct log_field){ .name = name, .str = s, .len = strlen(s) };
}

static void
put_bytes(struct fields *fs, const char *name, const char *s, size_t len)
{
    if (s == NULL || fs->n >= FIELDS_MAX)
        return;
    fs->f[fs->n++] = (struct log_field){ .name = name, .str = s, .len = len };
}

static void put_num(struct fields *fs, const char *name, int64_t v)
{
    if (fs->n >= FIELDS_MAX)
        return;
    fs->f[fs->n++] = (struct log_field){ .name = name, .num = v };
}

/* Whether --log-events writes ev (the audit event is not decided here). */
static bool selected(const struct api_config *cfg, enum metrics_event ev)
{
    enum log_events want =
        ev == METRICS_EV_RENEWED ? LOG_EVENTS_ALL : LOG_EVENTS_CHANGES;

    return cfg != NULL && cfg->log_events >= want;
}

/* Count ev, and write it at info when selected, with the client's address
 * and request id last. */
static void emit(const struct api_config *cfg,
                 enum metrics_event ev,
                 struct fields *fs,
                 const struct api_event_ctx *ctx)
{
    metrics_lock_event(ev);
    if (!selected(cfg, ev) || !log_enabled(LOG_LEVEL_INFO))
        return;
    put_str(fs, "client", ctx->client);
    put_str(fs, "request_id", ctx->request_id);
    log_event(LOG_LEVEL_INFO, metrics_event_name(ev), fs->f, fs->n);
}

static const char *mode_name(enum lock_mode m)
{
    switch (m) {
    case LOCK_EXCLUSIVE:
        return "exclusive";
    case LOCK_SHARED:
        return "shared";
    }
    return "exclusive";
}

static int64_t waited_ms(const struct api_event_ctx *ctx)
{
    return ctx->parked_us > 0 ? ctx->parked_us / 1000 : 0;
}

/* lock.granted (after lock.expired when the grant took over an expired
 * holder) for one key. */
static void granted(const struct api_config *cfg,
                    const struct api_call *c,
                    const char *key,
                    size_t key_len,
                    const struct lock_grant *g,
                    const struct api_event_ctx *ctx)
{
    struct fields fs = { .n = 0 };

    if (g->expired_fence != 0) {
        put_bytes(&fs, "key", key, key_len);
        put_num(&fs, "fence", (int64_t)g->expired_fence);
        put_str(&fs, "reason", "taken over");
        emit(cfg, METRICS_EV_EXPIRED, &fs, ctx);
        fs.n = 0;
    }
    put_bytes(&fs, "key", key, key_len);
    put_str(&fs, "mode", mode_name(g->mode));
    put_num(&fs, "fence", (int64_t)g->fence);
    put_num(&fs, "ttl_ms", (int64_t)g->ttl_ms);
    put_str(&fs, "owner", c->owner);
    if (g->holds > 1)
        put_num(&fs, "holds", g->holds);
    if (g->expired_fence != 0)
        put_num(&fs, "took_over_fence", (int64_t)g->expired_fence);
    put_num(&fs, "waited_ms", waited_ms(ctx));
    emit(cfg, METRICS_EV_GRANTED, &fs, ctx);
}

/* lock.lost: a renew, release or re-entry answered 404 or 409 mismatch. */
static void lost(const struct api_config *cfg,
                 const char *key,
                 size_t key_len,
                 const char *op,
                 const char *result,
                 const struct api_event_ctx *ctx)
{
    struct fields fs = { .n = 0 };

    put_bytes(&fs, "key", key, key_len);
    put_str(&fs, "op", op);
    put_str(&fs, "result", result);
    emit(cfg, METRICS_EV_LOST, &fs, ctx);
}

static const char *lost_result(enum backend_result r)
{
    if (r == BACKEND_NOT_FOUND)
        return "not_found";
    if (r == BACKEND_MISMATCH)
        return "mismatch";
    return NULL;
}

/* A wait that ended without a grant: lock.wait_timeout or
 * lock.wait_cancelled for one key. */
static void wait_ended(const struct api_config *cfg,
                       const char *key,
                       size_t key_len,
                       enum metrics_event ev,
                       const struct api_event_ctx *ctx)
{
    struct fields fs = { .n = 0 };

    put_bytes(&fs, "key", key, key_len);
    put_num(&fs, "waited_ms", waited_ms(ctx));
    emit(cfg, ev, &fs, ctx);
}

static void acquire(const struct api_config *cfg,
                    const struct api_call *c,
                    enum backend_result r,
                    const struct lock_grant *g,
                    const struct api_event_ctx *ctx)
{
    if (ctx->cancelled) { /* whatever the store said last: it was not sent */
        wait_ended(cfg, c->key, c->key_len, METRICS_EV_WAIT_CANCELLED, ctx);
        metrics_lock_wait(METRICS_WAIT_CANCELLED, ctx->parked_us);
        return;
    }
    if (r == BACKEND_OK && g != NULL) {
        if (!g->replay)
            granted(cfg, c, c->key, c->key_len, g, ctx);
        if (ctx->waited)
            metrics_lock_wait(METRICS_WAIT_GRANTED, ctx->parked_us);
    } else if (r == BACKEND_HELD && ctx->waited) {
        wait_ended(cfg, c->key, c->key_len, METRICS_EV_WAIT_TIMEOUT, ctx);
        metrics_lock_wait(METRICS_WAIT_TIMEOUT, ctx->parked_us);
    }
}

/* A re-entry (an acquire naming its token) or a renew. */
static void renewal(const struct api_config *cfg,
                    const struct api_call *c,
                    enum backend_result r,
                    const struct lock_grant *g,
                    const struct api_event_ctx *ctx)
{
    struct fields fs = { .n = 0 };

    if (r != BACKEND_OK) {
        if (lost_result(r) != NULL)
            lost(cfg, c->key, c->key_len, c->reenter ? "reenter" : "renew",
                 lost_result(r), ctx);
        return;
    }
    if (g == NULL)
        return;
    put_bytes(&fs, "key", c->key, c->key_len);
    put_num(&fs, "fence", (int64_t)g->fence);
    put_num(&fs, "ttl_ms", (int64_t)g->ttl_ms);
    if (c->reenter) {
        put_num(&fs, "holds", g->holds);
        emit(cfg, METRICS_EV_REENTERED, &fs, ctx);
    } else {
        emit(cfg, METRICS_EV_RENEWED, &fs, ctx);
    }
}

static void release(const struct api_config *cfg,
                    const struct api_call *c,
                    enum backend_result r,
                    const struct lock_grant *g,
                    const struct api_event_ctx *ctx)
{
    struct fields fs = { .n = 0 };

    if (r != BACKEND_OK) {
        if (lost_result(r) != NULL)
            lost(cfg, c->key, c->key_len, "release", lost_result(r), ctx);
        return;
    }
    if (g == NULL)
        return;
    put_bytes(&fs, "key", c->key, c->key_len);
    if (g->fence != 0)
        put_num(&fs, "fence", (int64_t)g->fence);
    put_num(&fs, "holds_left", g->holds);
    if (g->holds == 0 && g->granted_at_ms > 0) {
        /* the store's clock against ours: a skew shows, clamped at 0 */
        int64_t held = clock_wall_ms() - g->granted_at_ms;

        if (held < 0)
            held = 0;
        put_num(&fs, "held_ms", held);
        metrics_lock_hold(held * 1000);
    }
    emit(cfg, METRICS_EV_RELEASED, &fs, ctx);
}

/* POST /locks: a grant per key, or the wait's end. */
static void acquire_multi(const struct api_config *cfg,
                          const struct api_call *c,
                          enum backend_result r,
                          const struct lock_multi_grant *mg,
                          const struct api_event_ctx *ctx)
{
    const struct api_keys *k = &c->keys;
    bool any = false;

    if (ctx->cancelled) {
        for (size_t i = 0; i < k->n; i++)
            wait_ended(cfg, k->keys[i], k->lens[i], METRICS_EV_WAIT_CANCELLED,
                       ctx);
        metrics_lock_wait(METRICS_WAIT_CANCELLED, ctx->parked_us);
    } else if (r == BACKEND_OK && mg != NULL) {
        for (size_t i = 0; i < k->n && i < LOCK_MULTI_MAX; i++) {
            struct lock_grant g = { .fence = mg->fences[i],
                                    .ttl_ms = mg->ttl_ms,
                                    .mode = LOCK_EXCLUSIVE,
                                    .holds = 1 };
            granted(cfg, c, k->keys[i], k->lens[i], &g, ctx);
        }
        if (ctx->waited)
            metrics_lock_wait(METRICS_WAIT_GRANTED, ctx->parked_us);
    } else if (r == BACKEND_HELD && ctx->waited) {
        /* a line per key still held; every key if the store did not say */
        for (size_t i = 0; mg != NULL && i < k->n && i < LOCK_MULTI_MAX; i++)
            any = any || mg->held[i];
        for (size_t i = 0; i < k->n && i < LOCK_MULTI_MAX; i++)
            if (!any || mg->held[i])
                wait_ended(cfg, k->keys[i], k->lens[i], METRICS_EV_WAIT_TIMEOUT,
                           ctx);
        metrics_lock_wait(METRICS_WAIT_TIMEOUT, ctx->parked_us);
    }
}

/* PUT and DELETE /locks. A key a multi release did not give back is lost
 * ("not_held": the store does not tell expired from taken). */
static void change_multi(const struct api_config *cfg,
                         const struct api_call *c,
                         enum backend_result r,
                         const struct lock_multi_grant *mg,
                         const struct api_event_ctx *ctx)
{
    const struct api_keys *k = &c->keys;
    bool renew = c->verb == API_VERB_RENEW_MULTI;
    const char *op = renew ? "renew" : "release";

    if (r == BACKEND_OK && mg != NULL) {
        for (size_t i = 0; i < k->n && i < LOCK_MULTI_MAX; i++) {
            struct fields fs = { .n = 0 };

            if (!renew && !mg->released[i]) {
                lost(cfg, k->keys[i], k->lens[i], op, "not_held", ctx);
                continue;
            }
            put_bytes(&fs, "key", k->keys[i], k->lens[i]);
            if (renew) {
                put_num(&fs, "fence", (int64_t)mg->fences[i]);
                put_num(&fs, "ttl_ms", (int64_t)mg->ttl_ms);
            }
            emit(cfg, renew ? METRICS_EV_RENEWED : METRICS_EV_RELEASED, &fs,
                 ctx);
        }
    } else if (lost_result(r) != NULL && renew && mg != NULL &&
               mg->bad < k->n) {
        lost(cfg, k->keys[mg->bad], k->lens[mg->bad], op, lost_result(r), ctx);
    } else if (r == BACKEND_NOT_FOUND && !renew) {
        for (size_t i = 0; i < k->n; i++)
            lost(cfg, k->keys[i], k->lens[i], op, "not_found", ctx);
    }
}

void events_after_call(const struct api_config *cfg,
                       const struct api_call *c,
                       enum backend_result r,
                       const struct lock_grant *g,
                       const struct lock_info *info,
                       const struct lock_multi_grant *mg,
                       const struct api_event_ctx *ctx)
{
    static const struct api_event_ctx none = { 0 };

    (void)info; /* the forced release has its own function */
    if (c == NULL)
        return;
    if (ctx == NULL)
        ctx = &none;
    switch (c->verb) {
    case API_VERB_ACQUIRE:
        if (c->reenter)
            renewal(cfg, c, r, g, ctx);
        else
            acquire(cfg, c, r, g, ctx);
        break;
    case API_VERB_RENEW:
        renewal(cfg, c, r, g, ctx);
        break;
    case API_VERB_RELEASE:
        release(cfg, c, r, g, ctx);
        break;
    case API_VERB_ACQUIRE_MULTI:
        acquire_multi(cfg, c, r, mg, ctx);
        break;
    case API_VERB_RENEW_MULTI:
    case API_VERB_RELEASE_MULTI:
        change_multi(cfg, c, r, mg, ctx);
        break;
    default: /* inspect, readyz, metrics: nothing changed */
        break;
    }
}

void events_force_released(const struct api_config *cfg,
                           const char *key,
                           size_t key_len,
                           const struct lock_info *info,
                           const struct api_event_ctx *ctx)
{
    struct fields fs = { .n = 0 };

    (void)cfg; /* an audit line: whatever --log-events and --log-level */
    metrics_lock_event(METRICS_EV_FORCE_RELEASED);
    put_bytes(&fs, "key", key, key_len);
    if (info != NULL) {
        put_num(&fs, "holders", info->holder_count);
        put_num(&fs, "fence", (int64_t)info->fence);
        if (info->has_owner)
            put_str(&fs, "owner", info->owner);
    }
    if (ctx != NULL) {
        put_str(&fs, "client", ctx->client);
        put_str(&fs, "request_id", ctx->request_id);
        if (ctx->credential != NULL)
            put_str(&fs, "admin", ctx->credential);
    }
    log_audit(metrics_event_name(METRICS_EV_FORCE_RELEASED), fs.f, fs.n);
}

void events_expired(void *arg,
                    const char *key,
                    size_t key_len,
                    uint64_t fence,
                    const char *owner)
{
    static const struct api_event_ctx none = { 0 };
    struct fields fs = { .n = 0 };

    put_bytes(&fs, "key", key, key_len);
    put_num(&fs, "fence", (int64_t)fence);
    put_str(&fs, "owner", owner);
    put_str(&fs, "reason", "ttl passed");
    emit(arg, METRICS_EV_EXPIRED, &fs, &none);
}

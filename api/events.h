/*
 * api/events.h - a lock's life in the log and in metrics: after the store
 * answered a lock call, the server hands the outcome here once, and this
 * module writes the lifecycle event docs/operations.md lists (as
 * --log-events selects; the forced-release audit line always), counts it
 * (lockd_lock_events_total) and observes the wait and hold histograms.
 */
#ifndef API_EVENTS_H
#define API_EVENTS_H

#include <stdint.h>

#include "api/handlers.h"

/* What the server knows of the request besides the call and its answer. */
struct api_event_ctx {
    const char *client;     /* "ip:port" of the peer, or NULL */
    const char *request_id; /* X-Request-Id, or NULL */
    const char *credential; /* the name of the credential that authorized
                               the call, or NULL (auth off) */
    int64_t parked_us;      /* time the request spent parked (waiting for
                               the key), 0 when it never waited */
    bool waited;            /* an acquire with wait_ms > 0 */
    bool cancelled;         /* the client went away while parked */
};

/*
 * The outcome of lock call c: r and, by c->verb, g (acquire, renew,
 * release: struct lock_grant), info (inspect: unused), mg (the multi
 * verbs). Any of g, info, mg may be NULL when the verb has none; ctx may
 * be NULL (no client, no request id, no wait). Everything is borrowed for
 * the call. Thread-safe; never blocks on I/O beyond the log's buffer.
 *
 * By verb and result (docs/operations.md): acquire OK (not a replay)
 * lock.granted, after lock.expired (reason "taken over") when
 * g->expired_fence != 0; a re-entry OK lock.reentered; renew OK
 * lock.renewed (--log-events all only); release OK lock.released (held_ms
 * from g->granted_at_ms, also into lockd_lock_hold_seconds); 404 or 409
 * mismatch on renew, release or re-entry lock.lost; an acquire with
 * ctx->waited answered HELD lock.wait_timeout, one whose client left
 * (ctx->cancelled) lock.wait_cancelled, each wait observed in
 * lockd_lock_wait_seconds. The multi verbs write the same per key. Each
 * event is counted in lockd_lock_events_total, written or not.
 */
void events_after_call(const struct api_config *cfg,
                       const struct api_call *c,
                       enum backend_result r,
                       const struct lock_grant *g,
                       const struct lock_info *info,
                       const struct lock_multi_grant *mg,
                       const struct api_event_ctx *ctx);

/*
 * The audit line of a forced release (DELETE /locks/{key}?force=true
 * answered 200): lock.force_released at warn, written whatever
 * --log-level and --log-events, with key (key_len bytes), holders, fence
 * (the greatest) and owner from info (the holders removed; may be NULL),
 * client, request_id and admin (the credential's name) from ctx (may be
 * NULL; admin is absent when auth is off); counted in
 * lockd_lock_events_total. Borrowed for the call; thread-safe.
 */
void events_force_released(const struct api_config *cfg,
                           const char *key,
                           size_t key_len,
                           const struct lock_info *info,
                           const struct api_event_ctx *ctx);

/*
 * The store's backend_expired_fn (backends/backend.h): a holder of key
 * whose TTL passed was removed by the store's own background work.
 * Writes lock.expired (reason "ttl passed") as --log-events selects and
 * counts it. arg is the const struct api_config whose log_events is read
 * (set before the store opens). Thread-safe.
 */
void events_expired(void *arg,
                    const char *key,
                    size_t key_len,
                    uint64_t fence,
                    const char *owner);

#endif /* API_EVENTS_H */

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
    int64_t parked_us;      /* time the request spent parked (waiting for
                               the key), 0 when it never waited */
    bool waited;            /* an acquire with wait_ms > 0 */
    bool cancelled;         /* the client went away while parked */
};

/*
 * The outcome of lock call c: r and, by c->verb, g (acquire, renew,
 * release: struct lock_grant), info (inspect, force release: the holders
 * removed), mg (the multi verbs). Any of g, info, mg may be NULL when the
 * verb has none. Thread-safe; never blocks on I/O beyond the log's buffer.
 */
void events_after_call(const struct api_config *cfg,
                       const struct api_call *c,
                       enum backend_result r,
                       const struct lock_grant *g,
                       const struct lock_info *info,
                       const struct lock_multi_grant *mg,
                       const struct api_event_ctx *ctx);

#endif /* API_EVENTS_H */

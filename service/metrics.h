/*
 * service/metrics.h - Prometheus counters, gauges and histograms, and their
 * text exposition. Every update is lock-free (relaxed atomics); the
 * exposition sums them when /metrics is scraped.
 */
#ifndef SERVICE_METRICS_H
#define SERVICE_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum metrics_route {
    METRICS_ROUTE_ACQUIRE = 0,
    METRICS_ROUTE_RENEW,
    METRICS_ROUTE_RELEASE,
    METRICS_ROUTE_INSPECT,
    METRICS_ROUTE_HEALTHZ,
    METRICS_ROUTE_READYZ,
    METRICS_ROUTE_METRICS,
    METRICS_ROUTE_OTHER, /* 404, 405 and requests refused before routing */
    METRICS_ROUTE_COUNT,
};

enum metrics_op { /* backend operations */
    METRICS_OP_ACQUIRE = 0,
    METRICS_OP_RENEW,
    METRICS_OP_RELEASE,
    METRICS_OP_INSPECT,
    METRICS_OP_CANCEL_WAIT,
    METRICS_OP_PING,
    METRICS_OP_COUNT,
};

/* Set once before the server starts: labels for build info and histograms. */
void metrics_setup(const char *version, const char *backend_scheme);

void metrics_request(enum metrics_route route,
                     unsigned status,
                     int64_t duration_us);
/* ok: the store answered (any result but UNAVAILABLE / NO_MEMORY). */
void metrics_backend_op(enum metrics_op op, int ok, int64_t duration_us);

void metrics_lock_granted(void);
void metrics_lock_renewed(void);
void metrics_lock_released(void);
void metrics_lock_expired(uint64_t n); /* for stores that see expiries */
void metrics_lock_conflict(void);      /* an acquire answered 409 */
void metrics_waiters_add(int64_t delta);

/* Render the exposition; held is the held-locks gauge (-1: omit it).
 * Returns a malloc'ed NUL-terminated string (caller frees) or NULL. */
char *metrics_render(int64_t held, size_t *len);

#endif /* SERVICE_METRICS_H */

/*
 * lib/metrics.h - Prometheus counters, gauges and histograms, and their
 * text exposition. Every update is lock-free (relaxed atomics); the
 * exposition sums them when /metrics is scraped.
 */
#ifndef LIB_METRICS_H
#define LIB_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_LABELS_MAX 16 /* routes, and store operations */

/*
 * Set once before the server starts: labels for build info, and the label
 * names the callers' indexes stand for. routes[nroutes - 1] is the
 * catch-all: an index past the end is counted there. The arrays are
 * borrowed for the life of the process; n is at most METRICS_LABELS_MAX.
 */
void metrics_setup(const char *version,
                   const char *backend_scheme,
                   const char *const *routes,
                   size_t nroutes,
                   const char *const *ops,
                   size_t nops);

/* One HTTP answer on route (an index into the routes of metrics_setup). */
void metrics_request(unsigned route, unsigned status, int64_t duration_us);
/* One store call op (an index into ops). ok: the store answered (any
 * result but unavailable or out of memory). */
void metrics_backend_op(unsigned op, int ok, int64_t duration_us);

void metrics_lock_granted(int shared); /* a new grant, in either mode */
void metrics_lock_multi_granted(uint64_t keys); /* keys at once */
void metrics_lock_reentered(void);              /* a re-entry (one more hold) */
void metrics_lock_replayed(void);               /* an Idempotency-Key replay */
void metrics_lock_renewed(void);
void metrics_lock_released(void);
void metrics_lock_expired(uint64_t n); /* for stores that see expiries */
void metrics_lock_conflict(void);      /* an acquire answered 409 */
void metrics_waiters_add(int64_t delta);

/* Render the exposition; held is the held-locks gauge (-1: omit it).
 * Returns a malloc'ed NUL-terminated string (caller frees) or NULL. */
char *metrics_render(int64_t held, size_t *len);

#endif /* LIB_METRICS_H */

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

/* The lock lifecycle events (api/events.c), counted in
 * lockd_lock_events_total{event} whether written to the log or not. */
enum metrics_event {
    METRICS_EV_GRANTED = 0,
    METRICS_EV_REENTERED,
    METRICS_EV_RENEWED,
    METRICS_EV_RELEASED,
    METRICS_EV_EXPIRED,
    METRICS_EV_LOST,
    METRICS_EV_WAIT_TIMEOUT,
    METRICS_EV_WAIT_CANCELLED,
    METRICS_EV_FORCE_RELEASED,
    METRICS_EV_COUNT,
};
/* "lock.granted", ...: the event's name, in the log and as the label. */
const char *metrics_event_name(enum metrics_event ev);
void metrics_lock_event(enum metrics_event ev); /* ev < METRICS_EV_COUNT */

/* How a wait (an acquire with wait_ms > 0) ended. */
enum metrics_wait_result {
    METRICS_WAIT_GRANTED = 0,
    METRICS_WAIT_TIMEOUT,
    METRICS_WAIT_CANCELLED,
};
/* lockd_lock_wait_seconds{result}: the time the acquire spent parked. */
void metrics_lock_wait(enum metrics_wait_result result, int64_t parked_us);
/* lockd_lock_hold_seconds: grant to release of one hold. */
void metrics_lock_hold(int64_t held_us);

/* lockd_http_connections: open HTTP connections (service/conntrack.c
 * adds +1 when one starts and -1 when it closes). */
void metrics_http_connections_add(int64_t delta);
/* What a per-client limit refused with 429: lockd_http_limited_total. */
enum metrics_limit {
    METRICS_LIMIT_CONNECTIONS = 0, /* --max-connections-per-ip */
    METRICS_LIMIT_WAITERS,         /* --max-waiters-per-client */
    METRICS_LIMIT_COUNT,
};
void metrics_http_limited(enum metrics_limit limit); /* < COUNT */
/* lockd_http_client_waiters (requests that may wait, in flight, counted
 * per client) and lockd_http_waiting_clients (clients with one or more):
 * set by service/clientlim.c. */
void metrics_client_waiters(uint64_t slots, uint64_t clients);
/* lockd_http_connections_max: the configured cap (--max-connections);
 * set once before the server starts; 0, the default, leaves it out. */
void metrics_http_connections_max(uint64_t max);
/* The store connection cap (--max-store-connections) and what this
 * instance's threads may open; shown once max is set. Call before the
 * server starts. */
void metrics_store_connections(uint64_t max, uint64_t planned);

/* One node of a store of independent nodes (redlock://) as its adapter
 * last checked it: the lockd_store_node_* gauges, labelled node="name". */
struct metrics_node {
    const char *name;      /* "host:port": borrowed for the call; escaped
                              as the exposition format says */
    int up;                /* 1: answered its last check */
    int voting;            /* 1: its grants count now */
    int quarantined;       /* 1: not voting until its quarantine ends */
    int64_t quarantine_ms; /* quarantine left, else 0 */
    int64_t latency_us;    /* last check's round trip; < 0 unknown: the
                              latency sample is left out */
};

/* Render the exposition; held is the held-locks gauge (-1: omit it).
 * Also reads /proc/self for the process_* families (one read of stat, one
 * readdir of fd; /proc/stat once per process for the boot time): on a
 * system without /proc they are left out. Returns a malloc'ed NUL-terminated
 * string (caller frees) or NULL. */
char *metrics_render(int64_t held, size_t *len);
/* The same with the store's nodes[0..nnodes) as the lockd_store_node_*
 * families (nnodes 0: left out, as metrics_render()). */
char *metrics_render_nodes(int64_t held,
                           const struct metrics_node *nodes,
                           size_t nnodes,
                           size_t *len);

#endif /* LIB_METRICS_H */

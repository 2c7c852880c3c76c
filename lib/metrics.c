/*
 * lib/metrics.c - Prometheus metrics: relaxed atomic counters and
 * fixed-bucket histograms, summed into the text exposition format when
 * /metrics is scraped.
 */
#include "lib/metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds in microseconds; the last bucket is +Inf. Waits of minutes
 * land in the top buckets. */
static const int64_t bucket_us[] = {
    100,     250,      500,      1000,     2500,      5000,    10000,
    25000,   50000,    100000,   250000,   500000,    1000000, 2500000,
    5000000, 10000000, 30000000, 60000000, 300000000,
};
#define NBUCKETS (sizeof(bucket_us) / sizeof(bucket_us[0]))

struct histogram {
    _Atomic uint64_t buckets[NBUCKETS + 1]; /* per bucket, not cumulative */
    _Atomic uint64_t sum_us;
    _Atomic uint64_t count;
};

static const unsigned statuses[] = { 200, 201, 400, 401, 404, 405, 409,
                                     413, 429, 431, 500, 501, 503 };
#define NSTATUS (sizeof(statuses) / sizeof(statuses[0]))

static const char *const *route_names; /* frozen before the server */
static size_t nroutes;
static const char *const *op_names;
static size_t nops;

static _Atomic uint64_t requests[METRICS_LABELS_MAX][NSTATUS + 1];
static struct histogram request_hist[METRICS_LABELS_MAX];
static _Atomic uint64_t backend_ops[METRICS_LABELS_MAX];
static _Atomic uint64_t backend_errors[METRICS_LABELS_MAX];
static struct histogram backend_hist[METRICS_LABELS_MAX];
static _Atomic uint64_t grants, renewals, releases, expiries, conflicts;
static _Atomic uint64_t shared_grants, reentries, replays, multi_grants;
static _Atomic int64_t waiters;

static const char *build_version = "unknown"; /* frozen before the server */
static const char *build_backend = "unknown";

void metrics_setup(const char *version,
                   const char *backend_scheme,
                   const char *const *routes,
                   size_t n_routes,
                   const char *const *ops,
                   size_t n_ops)
{
    build_version = version;
    build_backend = backend_scheme;
    route_names = routes;
    nroutes = n_routes < METRICS_LABELS_MAX ? n_routes : METRICS_LABELS_MAX;
    op_names = ops;
    nops = n_ops < METRICS_LABELS_MAX ? n_ops : METRICS_LABELS_MAX;
}

static void hist_add(struct histogram *h, int64_t us)
{
    size_t i = 0;

    if (us < 0)
        us = 0;
    while (i < NBUCKETS && us > bucket_us[i])
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (uint64_t)us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void metrics_request(unsigned route, unsigned status, int64_t duration_us)
{
    size_t i = 0;

    if (nroutes == 0)
        return;
    if (route >= nroutes)
        route = (unsigned)nroutes - 1;
    while (i < NSTATUS && statuses[i] != status)
        i++;
    atomic_fetch_add_explicit(&requests[route][i], 1, memory_order_relaxed);
    hist_add(&request_hist[route], duration_us);
}

void metrics_backend_op(unsigned op, int ok, int64_t duration_us)
{
    if (op >= nops)
        return;
    atomic_fetch_add_explicit(&backend_ops[op], 1, memory_order_relaxed);
    if (!ok)
        atomic_fetch_add_explicit(&backend_errors[op], 1, memory_order_relaxed);
    hist_add(&backend_hist[op], duration_us);
}

void metrics_lock_granted(int shared)
{
    atomic_fetch_add_explicit(&grants, 1, memory_order_relaxed);
    if (shared)
        atomic_fetch_add_explicit(&shared_grants, 1, memory_order_relaxed);
}

void metrics_lock_multi_granted(uint64_t keys)
{
    atomic_fetch_add_explicit(&grants, keys, memory_order_relaxed);
    atomic_fetch_add_explicit(&multi_grants, 1, memory_order_relaxed);
}

void metrics_lock_reentered(void)
{
    atomic_fetch_add_explicit(&reentries, 1, memory_order_relaxed);
}

void metrics_lock_replayed(void)
{
    atomic_fetch_add_explicit(&replays, 1, memory_order_relaxed);
}

void metrics_lock_renewed(void)
{
    atomic_fetch_add_explicit(&renewals, 1, memory_order_relaxed);
}

void metrics_lock_released(void)
{
    atomic_fetch_add_explicit(&releases, 1, memory_order_relaxed);
}

void metrics_lock_expired(uint64_t n)
{
    atomic_fetch_add_explicit(&expiries, n, memory_order_relaxed);
}

void metrics_lock_conflict(void)
{
    atomic_fetch_add_explicit(&conflicts, 1, memory_order_relaxed);
}

void metrics_waiters_add(int64_t delta)
{
    atomic_fetch_add_explicit(&waiters, delta, memory_order_relaxed);
}

struct buf {
    char *data;
    size_t len, cap;
    int failed;
};

static void __attribute__((format(printf, 2, 3)))
bprintf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = b->cap * 2 + (size_t)n;
        char *nd = realloc(b->data, ncap);
        if (nd == NULL) {
            b->failed = 1;
            return;
        }
        b->data = nd;
        b->cap = ncap;
    }
}

static void
put_counter(struct buf *b, const char *name, const char *help, uint64_t v)
{
    bprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name,
            name, (unsigned long long)v);
}

static void put_hist(struct buf *b,
                     const char *name,
                     const char *labels,
                     struct histogram *h)
{
    uint64_t cum = 0;

    for (size_t i = 0; i <= NBUCKETS; i++) {
        cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i < NBUCKETS)
            bprintf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels,
                    (double)bucket_us[i] / 1e6, (unsigned long long)cum);
        else
            bprintf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels,
                    (unsigned long long)cum);
    }
    bprintf(b, "%s_sum{%s} %.6f\n", name, labels,
            (double)atomic_load_explicit(&h->sum_us, memory_order_relaxed) /
                1e6);
    /* count from the buckets, so a scrape never shows count != +Inf */
    bprintf(b, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
}

static uint64_t load(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

/* The HTTP side: requests by route and status, and their latency. */
static void put_http(struct buf *b)
{
    char labels[128];

    bprintf(b, "# HELP lockd_http_requests_total HTTP requests answered, "
               "by route and status.\n"
               "# TYPE lockd_http_requests_total counter\n");
    for (size_t r = 0; r < nroutes; r++) {
        for (size_t s = 0; s <= NSTATUS; s++) {
            uint64_t v = load(&requests[r][s]);
            if (v == 0)
                continue;
            if (s < NSTATUS)
                bprintf(b,
                        "lockd_http_requests_total{route=\"%s\",status=\"%u\"}"
                        " %llu\n",
                        route_names[r], statuses[s], (unsigned long long)v);
            else
                bprintf(b,
                        "lockd_http_requests_total{route=\"%s\",status="
                        "\"other\"} %llu\n",
                        route_names[r], (unsigned long long)v);
        }
    }
    bprintf(b, "# HELP lockd_http_request_duration_seconds Time from "
               "request to response, waits included.\n"
               "# TYPE lockd_http_request_duration_seconds histogram\n");
    for (size_t r = 0; r < nroutes; r++) {
        snprintf(labels, sizeof(labels), "route=\"%s\",backend=\"%s\"",
                 route_names[r], build_backend);
        put_hist(b, "lockd_http_request_duration_seconds", labels,
                 &request_hist[r]);
    }
}

/* The locks: what happened to them, who waits, how many are held (held
 * < 0: not known, no line). */
static void put_locks(struct buf *b, int64_t held)
{
    put_counter(b, "lockd_lock_grants_total",
                "Locks granted (both modes; re-entries and replays apart).",
                load(&grants));
    put_counter(b, "lockd_lock_shared_grants_total",
                "Locks granted in shared mode.", load(&shared_grants));
    put_counter(b, "lockd_lock_multi_grants_total",
                "Multi-key grants (each key also counts as a grant).",
                load(&multi_grants));
    put_counter(b, "lockd_lock_reentries_total",
                "Re-entries: an acquire naming the token that holds the key.",
                load(&reentries));
    put_counter(b, "lockd_lock_idempotent_replays_total",
                "Acquires answered with the live grant of their "
                "Idempotency-Key.",
                load(&replays));
    put_counter(b, "lockd_lock_renewals_total", "Locks renewed.",
                load(&renewals));
    put_counter(b, "lockd_lock_releases_total", "Locks released.",
                load(&releases));
    put_counter(b, "lockd_lock_expiries_total",
                "Locks that expired (as seen by this instance).",
                load(&expiries));
    put_counter(b, "lockd_lock_conflicts_total",
                "Acquires answered 409 lock_held.", load(&conflicts));
    bprintf(b,
            "# HELP lockd_waiters Clients waiting for a lock now.\n"
            "# TYPE lockd_waiters gauge\nlockd_waiters %lld\n",
            (long long)atomic_load_explicit(&waiters, memory_order_relaxed));
    if (held >= 0)
        bprintf(b,
                "# HELP lockd_locks_held Lock holders now (a key held "
                "shared counts each holder).\n"
                "# TYPE lockd_locks_held gauge\nlockd_locks_held %lld\n",
                (long long)held);
}

/* The store: operations, failures and latency, by operation. */
static void put_backend(struct buf *b)
{
    char labels[128];

    bprintf(b, "# HELP lockd_backend_operations_total Backend operations, "
               "by operation.\n"
               "# TYPE lockd_backend_operations_total counter\n");
    for (size_t o = 0; o < nops; o++)
        bprintf(b,
                "lockd_backend_operations_total{backend=\"%s\",op=\"%s\"} "
                "%llu\n",
                build_backend, op_names[o],
                (unsigned long long)load(&backend_ops[o]));
    bprintf(b, "# HELP lockd_backend_errors_total Backend operations that "
               "failed (unreachable, timed out, out of memory).\n"
               "# TYPE lockd_backend_errors_total counter\n");
    for (size_t o = 0; o < nops; o++)
        bprintf(b,
                "lockd_backend_errors_total{backend=\"%s\",op=\"%s\"} %llu\n",
                build_backend, op_names[o],
                (unsigned long long)load(&backend_errors[o]));
    bprintf(b, "# HELP lockd_backend_operation_duration_seconds Backend "
               "operation latency.\n"
               "# TYPE lockd_backend_operation_duration_seconds histogram\n");
    for (size_t o = 0; o < nops; o++) {
        snprintf(labels, sizeof(labels), "backend=\"%s\",op=\"%s\"",
                 build_backend, op_names[o]);
        put_hist(b, "lockd_backend_operation_duration_seconds", labels,
                 &backend_hist[o]);
    }
}

char *metrics_render(int64_t held, size_t *len)
{
    struct buf b = { .data = malloc(8192), .len = 0, .cap = 8192 };

    if (b.data == NULL)
        return NULL;
    bprintf(&b,
            "# HELP lockd_build_info Build and configuration of this "
            "lockd.\n# TYPE lockd_build_info gauge\n"
            "lockd_build_info{version=\"%s\",backend=\"%s\"} 1\n",
            build_version, build_backend);
    put_http(&b);
    put_locks(&b, held);
    put_backend(&b);
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}

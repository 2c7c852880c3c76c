/*
 * lib/metrics.c - Prometheus metrics: relaxed atomic counters and
 * fixed-bucket histograms, summed into the text exposition format when
 * /metrics is scraped.
 */
#include "lib/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Upper bounds in microseconds; the last bucket is +Inf. Waits of minutes
 * land in the top buckets. */
static const int64_t bucket_us[] = {
    100,     250,      500,      1000,     2500,      5000,    10000,
    25000,   50000,    100000,   250000,   500000,    1000000, 2500000,
    5000000, 10000000, 30000000, 60000000, 300000000,
};
#define NBUCKETS (sizeof(bucket_us) / sizeof(bucket_us[0]))

/* Lock waits and holds: from a millisecond to four hours (a batch job's
 * lock), so both a contended hot key and a nightly job read well. */
static const int64_t lock_bucket_us[] = {
    1000,      5000,       10000,      50000,      100000,
    250000,    500000,     1000000,    2500000,    5000000,
    10000000,  30000000,   60000000,   120000000,  300000000,
    600000000, 1800000000, 3600000000, 7200000000, 14400000000,
};
#define NLOCK_BUCKETS (sizeof(lock_bucket_us) / sizeof(lock_bucket_us[0]))
#define HIST_MAX      20 /* the most finite buckets of any histogram */

_Static_assert(NBUCKETS <= HIST_MAX && NLOCK_BUCKETS <= HIST_MAX,
               "a histogram has more buckets than HIST_MAX");

struct bounds {
    const int64_t *us; /* ascending upper bounds */
    size_t n;
};

static const struct bounds call_bounds = { bucket_us, NBUCKETS };
static const struct bounds lock_bounds = { lock_bucket_us, NLOCK_BUCKETS };

struct histogram {
    _Atomic uint64_t buckets[HIST_MAX + 1]; /* per bucket, not cumulative;
                                               [bounds.n] is +Inf */
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
static _Atomic uint64_t events[METRICS_EV_COUNT];
static struct histogram wait_hist[3]; /* by enum metrics_wait_result */
static struct histogram hold_hist;
static _Atomic int64_t connections;
static uint64_t connections_max; /* frozen before the server */
static _Atomic uint64_t limited[METRICS_LIMIT_COUNT];
static _Atomic uint64_t client_waiters, waiting_clients;
static uint64_t store_conns_max; /* frozen before the server */
static uint64_t store_conns;     /* frozen before the server */

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

static void hist_add(struct histogram *h, const struct bounds *bd, int64_t us)
{
    size_t i = 0;

    if (us < 0)
        us = 0;
    while (i < bd->n && us > bd->us[i])
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
    hist_add(&request_hist[route], &call_bounds, duration_us);
}

void metrics_backend_op(unsigned op, int ok, int64_t duration_us)
{
    if (op >= nops)
        return;
    atomic_fetch_add_explicit(&backend_ops[op], 1, memory_order_relaxed);
    if (!ok)
        atomic_fetch_add_explicit(&backend_errors[op], 1, memory_order_relaxed);
    hist_add(&backend_hist[op], &call_bounds, duration_us);
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

static const char *const event_names[METRICS_EV_COUNT] = {
    [METRICS_EV_GRANTED] = "lock.granted",
    [METRICS_EV_REENTERED] = "lock.reentered",
    [METRICS_EV_RENEWED] = "lock.renewed",
    [METRICS_EV_RELEASED] = "lock.released",
    [METRICS_EV_EXPIRED] = "lock.expired",
    [METRICS_EV_LOST] = "lock.lost",
    [METRICS_EV_WAIT_TIMEOUT] = "lock.wait_timeout",
    [METRICS_EV_WAIT_CANCELLED] = "lock.wait_cancelled",
    [METRICS_EV_FORCE_RELEASED] = "lock.force_released",
};

static const char *const wait_results[] = { "granted", "timeout", "cancelled" };

const char *metrics_event_name(enum metrics_event ev)
{
    return (unsigned)ev < METRICS_EV_COUNT ? event_names[ev] : "lock.unknown";
}

void metrics_lock_event(enum metrics_event ev)
{
    if ((unsigned)ev < METRICS_EV_COUNT)
        atomic_fetch_add_explicit(&events[ev], 1, memory_order_relaxed);
}

void metrics_lock_wait(enum metrics_wait_result result, int64_t parked_us)
{
    if ((unsigned)result < sizeof(wait_hist) / sizeof(wait_hist[0]))
        hist_add(&wait_hist[result], &lock_bounds, parked_us);
}

void metrics_lock_hold(int64_t held_us)
{
    hist_add(&hold_hist, &lock_bounds, held_us);
}

void metrics_http_connections_add(int64_t delta)
{
    atomic_fetch_add_explicit(&connections, delta, memory_order_relaxed);
}

void metrics_http_limited(enum metrics_limit limit)
{
    if ((unsigned)limit < METRICS_LIMIT_COUNT)
        atomic_fetch_add_explicit(&limited[limit], 1, memory_order_relaxed);
}

void metrics_client_waiters(uint64_t slots, uint64_t clients)
{
    atomic_store_explicit(&client_waiters, slots, memory_order_relaxed);
    atomic_store_explicit(&waiting_clients, clients, memory_order_relaxed);
}

void metrics_http_connections_max(uint64_t max)
{
    connections_max = max;
}

void metrics_store_connections(uint64_t max, uint64_t planned)
{
    store_conns_max = max;
    store_conns = planned;
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
                     struct histogram *h,
                     const struct bounds *bd)
{
    uint64_t cum = 0;

    for (size_t i = 0; i <= bd->n; i++) {
        cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i < bd->n)
            bprintf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels,
                    (double)bd->us[i] / 1e6, (unsigned long long)cum);
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
               "request to response; for acquires, the time parked waiting for "
               "the key is not included (lockd_lock_wait_seconds has it).\n"
               "# TYPE lockd_http_request_duration_seconds histogram\n");
    for (size_t r = 0; r < nroutes; r++) {
        snprintf(labels, sizeof(labels), "route=\"%s\",backend=\"%s\"",
                 route_names[r], build_backend);
        put_hist(b, "lockd_http_request_duration_seconds", labels,
                 &request_hist[r], &call_bounds);
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
                "# HELP lockd_locks_held Lock holders in the store (a key "
                "held shared counts each holder; on Redis until the second "
                "in which the TTL ends has passed; on ZooKeeper as of the "
                "last sweep pass).\n"
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
                 &backend_hist[o], &call_bounds);
    }
}

/* The lock lifecycle: events by name, and how long waits and holds took. */
static void put_lifecycle(struct buf *b)
{
    char labels[128];

    bprintf(b, "# HELP lockd_lock_events_total Lock lifecycle events, "
               "whether written to the log or not (--log-events).\n"
               "# TYPE lockd_lock_events_total counter\n");
    for (size_t e = 0; e < METRICS_EV_COUNT; e++)
        bprintf(b, "lockd_lock_events_total{event=\"%s\"} %llu\n",
                event_names[e], (unsigned long long)load(&events[e]));
    bprintf(b, "# HELP lockd_lock_wait_seconds Time an acquire with "
               "wait_ms > 0 spent parked, by how the wait ended.\n"
               "# TYPE lockd_lock_wait_seconds histogram\n");
    for (size_t r = 0; r < sizeof(wait_hist) / sizeof(wait_hist[0]); r++) {
        snprintf(labels, sizeof(labels), "backend=\"%s\",result=\"%s\"",
                 build_backend, wait_results[r]);
        put_hist(b, "lockd_lock_wait_seconds", labels, &wait_hist[r],
                 &lock_bounds);
    }
    bprintf(b, "# HELP lockd_lock_hold_seconds Time from grant to release "
               "of a lock, where the store knows the grant's time.\n"
               "# TYPE lockd_lock_hold_seconds histogram\n");
    snprintf(labels, sizeof(labels), "backend=\"%s\"", build_backend);
    put_hist(b, "lockd_lock_hold_seconds", labels, &hold_hist, &lock_bounds);
}

static void put_connections(struct buf *b)
{
    bprintf(
        b,
        "# HELP lockd_http_connections Open HTTP connections now "
        "(waiters included).\n"
        "# TYPE lockd_http_connections gauge\n"
        "lockd_http_connections %lld\n",
        (long long)atomic_load_explicit(&connections, memory_order_relaxed));
    bprintf(b,
            "# HELP lockd_http_limited_total Requests answered 429 by a "
            "per-client limit.\n"
            "# TYPE lockd_http_limited_total counter\n"
            "lockd_http_limited_total{limit=\"connections\"} %llu\n"
            "lockd_http_limited_total{limit=\"waiters\"} %llu\n"
            "# HELP lockd_http_client_waiters Requests that may wait in "
            "flight now, counted against --max-waiters-per-client.\n"
            "# TYPE lockd_http_client_waiters gauge\n"
            "lockd_http_client_waiters %llu\n"
            "# HELP lockd_http_waiting_clients Clients with a request that "
            "may wait in flight now.\n"
            "# TYPE lockd_http_waiting_clients gauge\n"
            "lockd_http_waiting_clients %llu\n",
            (unsigned long long)load(&limited[METRICS_LIMIT_CONNECTIONS]),
            (unsigned long long)load(&limited[METRICS_LIMIT_WAITERS]),
            (unsigned long long)load(&client_waiters),
            (unsigned long long)load(&waiting_clients));
    if (connections_max > 0)
        bprintf(b,
                "# HELP lockd_http_connections_max The most open HTTP "
                "connections allowed (--max-connections).\n"
                "# TYPE lockd_http_connections_max gauge\n"
                "lockd_http_connections_max %llu\n",
                (unsigned long long)connections_max);
    if (store_conns_max > 0)
        bprintf(b,
                "# HELP lockd_store_connections_max The most store "
                "connections this instance may open "
                "(--max-store-connections).\n"
                "# TYPE lockd_store_connections_max gauge\n"
                "lockd_store_connections_max %llu\n"
                "# HELP lockd_store_connections The store connections "
                "this instance opens at most with its threads.\n"
                "# TYPE lockd_store_connections gauge\n"
                "lockd_store_connections %llu\n",
                (unsigned long long)store_conns_max,
                (unsigned long long)store_conns);
}

/* Read up to cap - 1 bytes of a /proc file into buf (NUL-terminated):
 * the bytes read, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    while (len + 1 < cap) {
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}

/* The boot time (unix s, /proc/stat's btime): it never changes, so it is
 * read once (/proc/stat grows with the CPUs: not at every scrape). */
static int64_t boot_time_s = -1;
static pthread_once_t boot_once = PTHREAD_ONCE_INIT;

static void read_boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    char line[256];

    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *end;
        long long v;

        if (strncmp(line, "btime ", 6) != 0)
            continue;
        errno = 0;
        v = strtoll(line + 6, &end, 10);
        if (errno == 0 && end != line + 6 && v > 0)
            boot_time_s = v;
        break;
    }
    fclose(f);
}

/* From /proc/self/stat (proc(5)): fields 14 utime, 15 stime, 22
 * starttime (clock ticks), 23 vsize (bytes), 24 rss (pages). */
struct proc_stat {
    unsigned long long utime, stime, starttime, vsize, rss;
};

static int read_proc_stat(struct proc_stat *ps)
{
    char buf[1024], *p, *end;
    unsigned long long f[25] = { 0 };

    if (read_small("/proc/self/stat", buf, sizeof(buf)) <= 0)
        return -1;
    /* the name (field 2) may hold spaces and ')': skip past its last ')' */
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2;
    for (int i = 3; i <= 24; i++) {
        while (*p == ' ')
            p++;
        if (i == 3) { /* the state, a letter */
            p = strchr(p, ' ');
            if (p == NULL)
                return -1;
            continue;
        }
        errno = 0;
        f[i] = strtoull(p, &end, 10);
        if (end == p || errno != 0)
            return -1;
        p = end;
    }
    ps->utime = f[14];
    ps->stime = f[15];
    ps->starttime = f[22];
    ps->vsize = f[23];
    ps->rss = f[24];
    return 0;
}

/* Open descriptors: one readdir of /proc/self/fd, the directory's own
 * descriptor left out. -1 if it cannot be read. */
static long long count_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long long n = 0;
    int self;

    if (d == NULL)
        return -1;
    self = dirfd(d);
    while ((e = readdir(d)) != NULL) {
        char *end;
        long v;

        if (e->d_name[0] == '.')
            continue;
        v = strtol(e->d_name, &end, 10);
        if (*end == '\0' && v != self)
            n++;
    }
    closedir(d);
    return n;
}

static void
put_gauge(struct buf *b, const char *name, const char *help, double v)
{
    bprintf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.15g\n", name, help, name,
            name, v);
}

/* v as a label value: backslash, double quote and newline escaped, as
 * the text exposition format says; the rest as it is. */
static void put_label_value(struct buf *b, const char *v)
{
    for (;;) {
        size_t run = strcspn(v, "\\\"\n");

        if (run > 0)
            bprintf(b, "%.*s", (int)run, v);
        v += run;
        if (*v == '\0')
            return;
        bprintf(b, "%s", *v == '\n' ? "\\n" : *v == '"' ? "\\\"" : "\\\\");
        v++;
    }
}

enum node_gauge {
    NODE_UP = 0,
    NODE_VOTING,
    NODE_QUARANTINED,
    NODE_QUARANTINE_SECONDS,
    NODE_LATENCY_SECONDS,
    NODE_GAUGES,
};

static const char *const node_gauge_names[NODE_GAUGES][2] = {
    { "lockd_store_node_up",
      "1 if the store node answered its last check, else 0." },
    { "lockd_store_node_voting",
      "1 if the store node's grants count toward the majority now." },
    { "lockd_store_node_quarantined",
      "1 if the store node restarted or lost its data and is not counted "
      "until its quarantine ends." },
    { "lockd_store_node_quarantine_seconds",
      "Seconds of quarantine the store node has left (0 when none)." },
    { "lockd_store_node_latency_seconds",
      "Round trip of the store node's last check, in seconds." },
};

/* The value of gauge g for one node. */
static double node_value(const struct metrics_node *nd, enum node_gauge g)
{
    switch (g) {
    case NODE_UP:
        return nd->up != 0;
    case NODE_VOTING:
        return nd->voting != 0;
    case NODE_QUARANTINED:
        return nd->quarantined != 0;
    case NODE_QUARANTINE_SECONDS:
        return (double)nd->quarantine_ms / 1e3;
    case NODE_LATENCY_SECONDS:
        return (double)nd->latency_us / 1e6;
    case NODE_GAUGES:
        break;
    }
    return 0;
}

/* The per-node gauges of a store of independent nodes, one family at a
 * time (each family's samples follow its HELP and TYPE); a node whose
 * latency is unknown has no latency sample. */
static void put_nodes(struct buf *b, const struct metrics_node *nodes, size_t n)
{
    for (enum node_gauge g = 0; g < NODE_GAUGES && n > 0; g++) {
        const char *name = node_gauge_names[g][0];

        bprintf(b, "# HELP %s %s\n# TYPE %s gauge\n", name,
                node_gauge_names[g][1], name);
        for (size_t i = 0; i < n; i++) {
            if (g == NODE_LATENCY_SECONDS && nodes[i].latency_us < 0)
                continue;
            bprintf(b, "%s{node=\"", name);
            put_label_value(b, nodes[i].name != NULL ? nodes[i].name : "");
            bprintf(b, "\"} %.15g\n", node_value(&nodes[i], g));
        }
    }
}

/* Prometheus' standard process_* families, from /proc (each left out when
 * it cannot be read). */
static void put_process(struct buf *b)
{
    struct proc_stat ps;
    struct rlimit rl;
    long ticks = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    long long fds = count_open_fds();

    pthread_once(&boot_once, read_boot_time);
    if (ticks > 0 && page > 0 && read_proc_stat(&ps) == 0) {
        bprintf(b,
                "# HELP process_cpu_seconds_total User and system CPU "
                "time spent, in seconds.\n"
                "# TYPE process_cpu_seconds_total counter\n"
                "process_cpu_seconds_total %.2f\n",
                (double)(ps.utime + ps.stime) / (double)ticks);
        put_gauge(b, "process_resident_memory_bytes",
                  "Resident memory size in bytes.",
                  (double)ps.rss * (double)page);
        put_gauge(b, "process_virtual_memory_bytes",
                  "Virtual memory size in bytes.", (double)ps.vsize);
        if (boot_time_s > 0)
            put_gauge(b, "process_start_time_seconds",
                      "Start time of the process since unix epoch in "
                      "seconds.",
                      (double)boot_time_s +
                          (double)ps.starttime / (double)ticks);
    }
    if (fds >= 0)
        put_gauge(b, "process_open_fds", "Number of open file descriptors.",
                  (double)fds);
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur == RLIM_INFINITY)
        bprintf(b, "# HELP process_max_fds Maximum number of open file "
                   "descriptors.\n# TYPE process_max_fds gauge\n"
                   "process_max_fds +Inf\n");
    else
        put_gauge(b, "process_max_fds",
                  "Maximum number of open file descriptors.",
                  (double)rl.rlim_cur);
}

char *metrics_render(int64_t held, size_t *len)
{
    return metrics_render_nodes(held, NULL, 0, len);
}

char *metrics_render_nodes(int64_t held,
                           const struct metrics_node *nodes,
                           size_t nnodes,
                           size_t *len)
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
    put_lifecycle(&b);
    put_connections(&b);
    put_nodes(&b, nodes, nnodes);
    put_process(&b);
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}

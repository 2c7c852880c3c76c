/*
 * tests/unit/test_metrics.c - lib/metrics.c: the exposition has every
 * family of the brief with HELP and TYPE, counters move by what was
 * recorded, histogram buckets are cumulative and _count equals the +Inf
 * bucket; the lifecycle families move and their buckets reach hours; the
 * process_* families hold sane values (open fds equal to a count made
 * with fcntl, start time before main()); the per-node gauges of a store of
 * independent nodes carry one escaped node label each, and are absent for
 * a store without nodes. The metrics are process-wide, so
 * each case reads values before and after.
 */
#include "api/codec.h"
#include "backends/backend.h"
#include "lib/metrics.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tests/unit/check.h"

static char *render(int64_t held)
{
    size_t len = 0;
    char *text = metrics_render(held, &len);

    CHECK(text != NULL);
    if (text != NULL)
        CHECK_EQ_INT(strlen(text), len);
    return text;
}

/* The value of the sample whose name and labels are exactly `series`
 * ("name" or "name{a=\"b\"}"), or -1 when absent. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);

    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *eol = strchr(p, '\n');
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = eol != NULL ? eol + 1 : NULL;
    }
    return -1;
}

static double sample_of(int64_t held, const char *series)
{
    char *text = render(held);
    double v = text != NULL ? sample(text, series) : -1;

    free(text);
    return v;
}

static void test_metrics_render_has_every_family(void)
{
    static const struct {
        const char *name, *type;
    } families[] = {
        { "lockd_build_info", "gauge" },
        { "lockd_http_requests_total", "counter" },
        { "lockd_http_request_duration_seconds", "histogram" },
        { "lockd_lock_grants_total", "counter" },
        { "lockd_lock_renewals_total", "counter" },
        { "lockd_lock_releases_total", "counter" },
        { "lockd_lock_expiries_total", "counter" },
        { "lockd_lock_conflicts_total", "counter" },
        { "lockd_waiters", "gauge" },
        { "lockd_locks_held", "gauge" },
        { "lockd_backend_operations_total", "counter" },
        { "lockd_backend_errors_total", "counter" },
        { "lockd_backend_operation_duration_seconds", "histogram" },
        { "lockd_lock_events_total", "counter" },
        { "lockd_lock_wait_seconds", "histogram" },
        { "lockd_lock_hold_seconds", "histogram" },
        { "lockd_http_connections", "gauge" },
        { "process_cpu_seconds_total", "counter" },
        { "process_resident_memory_bytes", "gauge" },
        { "process_virtual_memory_bytes", "gauge" },
        { "process_open_fds", "gauge" },
        { "process_max_fds", "gauge" },
        { "process_start_time_seconds", "gauge" },
    };
    char *text = render(3);
    char line[256];

    if (text == NULL)
        return;
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        snprintf(line, sizeof(line), "# TYPE %s %s\n", families[i].name,
                 families[i].type);
        CHECK_CONTAINS(text, line);
        snprintf(line, sizeof(line), "# HELP %s ", families[i].name);
        CHECK_CONTAINS(text, line);
    }
    CHECK_CONTAINS(text, "lockd_build_info{version=\"9.9.9\","
                         "backend=\"memory\"} 1\n");
    CHECK_EQ_INT(sample(text, "lockd_locks_held"), 3);
    /* histograms carry every route and every backend op as labels */
    static const char *const routes[] = { "acquire", "renew",   "release",
                                          "inspect", "healthz", "readyz",
                                          "metrics", "other" };
    for (size_t i = 0; i < 8; i++) {
        snprintf(line, sizeof(line),
                 "lockd_http_request_duration_seconds_count{route=\"%s\","
                 "backend=\"memory\"}",
                 routes[i]);
        CHECK_MSG(sample(text, line) >= 0, "%s", line);
    }
    static const char *const ops[] = { "acquire", "renew",       "release",
                                       "inspect", "cancel_wait", "ping" };
    for (size_t i = 0; i < 6; i++) {
        snprintf(line, sizeof(line),
                 "lockd_backend_operations_total{backend=\"memory\","
                 "op=\"%s\"}",
                 ops[i]);
        CHECK_MSG(sample(text, line) >= 0, "%s", line);
    }
    free(text);
    /* held < 0: the store cannot tell, the gauge is left out */
    text = render(-1);
    if (text != NULL) {
        CHECK(strstr(text, "lockd_locks_held") == NULL);
        free(text);
    }
}

/* Every line of text is a HELP, a TYPE or a sample of a family TYPEd
 * above it, with a number for its value. text is cut into lines. */
static void check_well_formed(char *text)
{
    char typed[64][96];
    size_t ntyped = 0;

    CHECK(text[0] != '\0' && text[strlen(text) - 1] == '\n');
    for (char *p = text, *eol; *p != '\0'; p = eol + 1) {
        char name[128];
        size_t n;
        bool known = false;

        eol = strchr(p, '\n');
        if (eol == NULL)
            break;
        *eol = '\0';
        if (strncmp(p, "# TYPE ", 7) == 0) {
            if (ntyped < 64 && sscanf(p + 7, "%95s", typed[ntyped]) == 1)
                ntyped++;
            continue;
        }
        if (p[0] == '#') {
            CHECK_MSG(strncmp(p, "# HELP ", 7) == 0, "line '%s'", p);
            continue;
        }
        /* a sample: name{labels} value, its family TYPEd above */
        n = strcspn(p, "{ ");
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        for (size_t i = 0; i < ntyped && !known; i++) {
            size_t tl = strlen(typed[i]);
            known = strcmp(name, typed[i]) == 0 ||
                    (strncmp(name, typed[i], tl) == 0 &&
                     (strcmp(name + tl, "_bucket") == 0 ||
                      strcmp(name + tl, "_sum") == 0 ||
                      strcmp(name + tl, "_count") == 0));
        }
        CHECK_MSG(known, "sample '%s' has no TYPE line before it", p);
        if (p[n] == '{') {
            char *close = strchr(p + n, '}');
            CHECK_MSG(close != NULL && close[1] == ' ', "line '%s'", p);
        }
        {
            char *sp = strrchr(p, ' ');
            char *end = NULL;
            if (sp != NULL)
                strtod(sp + 1, &end);
            CHECK_MSG(sp != NULL && end != NULL && *end == '\0' &&
                          end != sp + 1,
                      "value of '%s'", p);
        }
    }
}

static void test_metrics_exposition_is_well_formed(void)
{
    char *text = render(0);

    if (text == NULL)
        return;
    check_well_formed(text);
    free(text);
}

/* Occurrences of needle in text. */
static size_t count_of(const char *text, const char *needle)
{
    size_t n = 0;

    for (const char *p = strstr(text, needle); p != NULL;
         p = strstr(p + 1, needle))
        n++;
    return n;
}

static const char *const node_families[] = {
    "lockd_store_node_up",
    "lockd_store_node_voting",
    "lockd_store_node_quarantined",
    "lockd_store_node_quarantine_seconds",
    "lockd_store_node_latency_seconds",
};

/* Three nodes as a redlock:// adapter would report them: one voting, one
 * quarantined, one down whose latency is unknown and whose name needs the
 * exposition format's escapes. */
static void test_metrics_nodes_render_per_node_gauges(void)
{
    static const struct metrics_node nodes[] = {
        { "10.0.0.1:6379", 1, 1, 0, 0, 1500 },
        { "10.0.0.2:6379", 1, 0, 1, 2500, 250 },
        { "we\"ird\\name\n:1", 0, 0, 0, 0, -1 },
    };
    size_t len = 0;
    char *text = metrics_render_nodes(-1, nodes, 3, &len);
    char line[160];

    CHECK(text != NULL);
    if (text == NULL)
        return;
    CHECK_EQ_INT(strlen(text), len);
    for (size_t i = 0; i < 5; i++) {
        snprintf(line, sizeof(line), "# TYPE %s gauge\n", node_families[i]);
        CHECK_EQ_INT(count_of(text, line), 1);
        snprintf(line, sizeof(line), "# HELP %s ", node_families[i]);
        CHECK_EQ_INT(count_of(text, line), 1);
    }
    CHECK_EQ_INT(sample(text, "lockd_store_node_up{node=\"10.0.0.1:6379\"}"),
                 1);
    CHECK_EQ_INT(
        sample(text, "lockd_store_node_voting{node=\"10.0.0.1:6379\"}"), 1);
    CHECK_EQ_INT(
        sample(text, "lockd_store_node_quarantined{node=\"10.0.0.1:6379\"}"),
        0);
    CHECK_MSG(sample(text, "lockd_store_node_latency_seconds{node=\"10.0.0.1:"
                           "6379\"}") == 0.0015,
              "latency of node 1");
    CHECK_EQ_INT(
        sample(text, "lockd_store_node_voting{node=\"10.0.0.2:6379\"}"), 0);
    CHECK_EQ_INT(
        sample(text, "lockd_store_node_quarantined{node=\"10.0.0.2:6379\"}"),
        1);
    CHECK_MSG(sample(text, "lockd_store_node_quarantine_seconds{node=\"10.0.0."
                           "2:6379\"}") == 2.5,
              "quarantine left of node 2");
    /* the label value escaped: \" for ", \\ for \, \n for a newline */
    CHECK_EQ_INT(sample(text, "lockd_store_node_up{node=\"we\\\"ird\\\\name\\n"
                              ":1\"}"),
                 0);
    /* an unknown latency has no sample; every other family has all three */
    CHECK_EQ_INT(count_of(text, "\nlockd_store_node_latency_seconds{"), 2);
    CHECK_EQ_INT(count_of(text, "\nlockd_store_node_up{"), 3);
    CHECK_EQ_INT(count_of(text, "\nlockd_store_node_quarantine_seconds{"), 3);
    check_well_formed(text);
    free(text);
}

/* A store without a per-node view (every adapter but redlock://): no
 * lockd_store_node_* family at all. */
static void test_metrics_nodes_absent_without_nodes(void)
{
    char *text = render(0);

    if (text == NULL)
        return;
    CHECK(strstr(text, "lockd_store_node_") == NULL);
    free(text);
}

static void test_metrics_counters_move(void)
{
    static const char *const series[] = {
        "lockd_lock_grants_total",
        "lockd_lock_renewals_total",
        "lockd_lock_releases_total",
        "lockd_lock_expiries_total",
        "lockd_lock_conflicts_total",
        "lockd_waiters",
        "lockd_lock_shared_grants_total",
        "lockd_lock_reentries_total",
        "lockd_lock_idempotent_replays_total",
    };
    double before[9], after[9];

    for (int i = 0; i < 9; i++)
        before[i] = sample_of(0, series[i]);
    metrics_lock_granted(0);
    metrics_lock_granted(0);
    metrics_lock_granted(1);
    metrics_lock_renewed();
    metrics_lock_released();
    metrics_lock_released();
    metrics_lock_expired(5);
    metrics_lock_conflict();
    metrics_lock_reentered();
    metrics_lock_replayed();
    metrics_lock_replayed();
    metrics_waiters_add(4);
    metrics_waiters_add(-1);
    for (int i = 0; i < 9; i++)
        after[i] = sample_of(0, series[i]);
    CHECK_EQ_INT(after[6] - before[6], 1);
    CHECK_EQ_INT(after[7] - before[7], 1);
    CHECK_EQ_INT(after[8] - before[8], 2);
    CHECK_EQ_INT(after[0] - before[0], 3);
    CHECK_EQ_INT(after[1] - before[1], 1);
    CHECK_EQ_INT(after[2] - before[2], 2);
    CHECK_EQ_INT(after[3] - before[3], 5);
    CHECK_EQ_INT(after[4] - before[4], 1);
    CHECK_EQ_INT(after[5] - before[5], 3);
    metrics_waiters_add(-3);
    CHECK_EQ_INT(sample_of(0, "lockd_waiters"), before[5]);
}

static void test_metrics_requests_by_route_and_status(void)
{
    const char *s201 =
        "lockd_http_requests_total{route=\"acquire\",status=\"201\"}";
    const char *s409 =
        "lockd_http_requests_total{route=\"acquire\",status=\"409\"}";
    const char *other =
        "lockd_http_requests_total{route=\"renew\",status=\"other\"}";
    double b201 = sample_of(0, s201), b409 = sample_of(0, s409);
    double bother = sample_of(0, other);

    metrics_request(API_ROUTE_ACQUIRE, 201, 1000);
    metrics_request(API_ROUTE_ACQUIRE, 201, 1000);
    metrics_request(API_ROUTE_ACQUIRE, 409, 1000);
    metrics_request(API_ROUTE_RENEW, 418, 1000); /* not in the list */
    CHECK_EQ_INT(sample_of(0, s201) - (b201 < 0 ? 0 : b201), 2);
    CHECK_EQ_INT(sample_of(0, s409) - (b409 < 0 ? 0 : b409), 1);
    CHECK_EQ_INT(sample_of(0, other) - (bother < 0 ? 0 : bother), 1);
    /* lockd's own answers at HTTP's edges have their statuses */
    {
        const char *s431 = "lockd_http_requests_total{route=\"other\","
                           "status=\"431\"}";
        const char *s501 = "lockd_http_requests_total{route=\"acquire\","
                           "status=\"501\"}";
        double b431 = sample_of(0, s431), b501 = sample_of(0, s501);

        metrics_request(API_ROUTE_OTHER, 431, 10);
        metrics_request(API_ROUTE_ACQUIRE, 501, 10);
        CHECK_EQ_INT(sample_of(0, s431) - (b431 < 0 ? 0 : b431), 1);
        CHECK_EQ_INT(sample_of(0, s501) - (b501 < 0 ? 0 : b501), 1);
    }
    /* an out-of-range route counts as other */
    metrics_request(API_ROUTE_COUNT, 404, 10);
    CHECK(sample_of(0, "lockd_http_requests_total{route=\"other\","
                       "status=\"404\"}") >= 1);
}

static void test_metrics_backend_ops_and_errors(void)
{
    const char *ops = "lockd_backend_operations_total{backend=\"memory\","
                      "op=\"release\"}";
    const char *errs = "lockd_backend_errors_total{backend=\"memory\","
                       "op=\"release\"}";
    double bops = sample_of(0, ops), berrs = sample_of(0, errs);

    metrics_backend_op(BACKEND_OP_RELEASE, 1, 100);
    metrics_backend_op(BACKEND_OP_RELEASE, 1, 100);
    metrics_backend_op(BACKEND_OP_RELEASE, 0, 100);
    CHECK_EQ_INT(sample_of(0, ops) - bops, 3);
    CHECK_EQ_INT(sample_of(0, errs) - berrs, 1);
}

/* Buckets of one histogram series, in order. */
static size_t buckets_of(const char *text,
                         const char *name,
                         const char *labels,
                         double *le,
                         double *v,
                         size_t max)
{
    char prefix[256];
    size_t n = 0, plen;

    plen = (size_t)snprintf(prefix, sizeof(prefix), "%s_bucket{%s,le=\"", name,
                            labels);
    for (const char *p = text; p != NULL && *p != '\0' && n < max;) {
        const char *eol = strchr(p, '\n');
        if (strncmp(p, prefix, plen) == 0) {
            const char *q = p + plen;
            le[n] = strncmp(q, "+Inf", 4) == 0 ? -1 : strtod(q, NULL);
            q = strchr(q, ' ');
            v[n++] = q != NULL ? strtod(q + 1, NULL) : -1;
        }
        p = eol != NULL ? eol + 1 : NULL;
    }
    return n;
}

static void test_metrics_histogram_is_cumulative(void)
{
    const char *name = "lockd_http_request_duration_seconds";
    const char *labels = "route=\"healthz\",backend=\"memory\"";
    char series[256];
    double le[64], v[64];
    char *text;
    size_t n;

    /* 50 us, 300 us, 2 ms, 1000 s (past the last finite bound) */
    metrics_request(API_ROUTE_HEALTHZ, 200, 50);
    metrics_request(API_ROUTE_HEALTHZ, 200, 300);
    metrics_request(API_ROUTE_HEALTHZ, 200, 2000);
    metrics_request(API_ROUTE_HEALTHZ, 200, 1000000000);
    metrics_request(API_ROUTE_HEALTHZ, 200, -5); /* clamped to 0 */
    text = render(0);
    if (text == NULL)
        return;
    n = buckets_of(text, name, labels, le, v, 64);
    CHECK(n >= 10);
    if (n < 2) {
        free(text);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        CHECK_MSG(v[i] >= v[i - 1], "bucket %zu: %g after %g", i, v[i],
                  v[i - 1]);
        if (i + 1 < n)
            CHECK_MSG(le[i] > le[i - 1], "bounds not increasing at %zu", i);
    }
    CHECK_EQ_INT(le[n - 1], -1); /* the last is +Inf */
    snprintf(series, sizeof(series), "%s_count{%s}", name, labels);
    CHECK_EQ_INT(sample(text, series), v[n - 1]);
    CHECK_EQ_INT(v[n - 1], 5); /* only this case records healthz */
    /* le="0.0001" holds 0 and 50 us; le="0.0005" adds 300 us; le="0.0025"
     * adds 2 ms; only +Inf has the 1000 s one */
    for (size_t i = 0; i < n; i++) {
        if (le[i] == 0.0001)
            CHECK_EQ_INT(v[i], 2);
        if (le[i] == 0.0005)
            CHECK_EQ_INT(v[i], 3);
        if (le[i] == 0.0025)
            CHECK_EQ_INT(v[i], 4);
    }
    CHECK_EQ_INT(v[n - 2], 4);
    snprintf(series, sizeof(series), "%s_sum{%s}", name, labels);
    CHECK_MSG(sample(text, series) > 1000.0023 &&
                  sample(text, series) < 1000.0025,
              "sum %f", sample(text, series));
    free(text);

    /* backend histograms too */
    metrics_backend_op(BACKEND_OP_PING, 1, 700);
    text = render(0);
    if (text == NULL)
        return;
    n = buckets_of(text, "lockd_backend_operation_duration_seconds",
                   "backend=\"memory\",op=\"ping\"", le, v, 64);
    CHECK(n >= 10);
    if (n >= 2) {
        for (size_t i = 1; i < n; i++)
            CHECK(v[i] >= v[i - 1]);
        CHECK_EQ_INT(sample(text, "lockd_backend_operation_duration_"
                                  "seconds_count{backend=\"memory\","
                                  "op=\"ping\"}"),
                     v[n - 1]);
        CHECK(v[n - 1] >= 1);
    }
    free(text);
}

/* The wall clock when main() began, unix s. */
static double main_started_s;

static double wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Open descriptors counted without /proc: fcntl on every number below
 * the limit (at most 1 << 20 of them). */
static long count_fds(void)
{
    struct rlimit rl;
    long n = 0, max = 1 << 20;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)max)
        max = (long)rl.rlim_cur;
    for (long fd = 0; fd < max; fd++)
        if (fcntl((int)fd, F_GETFD) != -1)
            n++;
    return n;
}

static void test_metrics_process_values_are_sane(void)
{
    struct rlimit rl;
    char *text;
    long fds;
    int extra[3];
    double before, now;

    /* three more descriptors than usual, so the count is not just 0-2 */
    for (int i = 0; i < 3; i++)
        extra[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    fds = count_fds();
    text = render(0);
    now = wall_s();
    for (int i = 0; i < 3; i++)
        if (extra[i] >= 0)
            close(extra[i]);
    if (text == NULL)
        return;
    CHECK_EQ_INT(sample(text, "process_open_fds"), fds);
    CHECK(fds >= 6);
    CHECK(sample(text, "process_resident_memory_bytes") > 100000);
    CHECK(sample(text, "process_virtual_memory_bytes") >=
          sample(text, "process_resident_memory_bytes"));
    CHECK(sample(text, "process_cpu_seconds_total") >= 0);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        CHECK_EQ_INT(sample(text, "process_max_fds"), rl.rlim_cur);
    /* started before main() (the exec), and not long before: /proc/stat's
     * boot time is whole seconds */
    before = sample(text, "process_start_time_seconds");
    CHECK_MSG(before <= main_started_s + 0.05 && before >= main_started_s - 30,
              "start %.2f, main at %.2f", before, main_started_s);
    CHECK(before <= now);
    free(text);
    /* CPU time only grows: burn some and look again */
    {
        double cpu0 = sample_of(0, "process_cpu_seconds_total");
        volatile uint64_t x = 0;
        double t0 = wall_s();

        while (wall_s() - t0 < 0.05)
            x += 1;
        CHECK(x > 0);
        CHECK(sample_of(0, "process_cpu_seconds_total") >= cpu0);
    }
}

static void test_metrics_lifecycle_families_move(void)
{
    const char *granted = "lockd_lock_events_total{event=\"lock.granted\"}";
    const char *lost = "lockd_lock_events_total{event=\"lock.lost\"}";
    const char *forced =
        "lockd_lock_events_total{event=\"lock.force_released\"}";
    const char *conns = "lockd_http_connections";
    double g0 = sample_of(0, granted), l0 = sample_of(0, lost);
    double f0 = sample_of(0, forced), c0 = sample_of(0, conns);
    double le[64], v[64];
    char *text;
    size_t n;

    CHECK_STR_EQ(metrics_event_name(METRICS_EV_WAIT_TIMEOUT),
                 "lock.wait_timeout");
    metrics_lock_event(METRICS_EV_GRANTED);
    metrics_lock_event(METRICS_EV_GRANTED);
    metrics_lock_event(METRICS_EV_LOST);
    metrics_lock_event(METRICS_EV_FORCE_RELEASED);
    metrics_lock_event(METRICS_EV_COUNT); /* out of range: ignored */
    CHECK_EQ_INT(sample_of(0, granted) - g0, 2);
    CHECK_EQ_INT(sample_of(0, lost) - l0, 1);
    CHECK_EQ_INT(sample_of(0, forced) - f0, 1);
    metrics_http_connections_add(3);
    CHECK_EQ_INT(sample_of(0, conns) - c0, 3);
    metrics_http_connections_add(-3);
    CHECK_EQ_INT(sample_of(0, conns), c0);
    /* the cap is shown once set */
    CHECK(sample_of(0, "lockd_http_connections_max") < 0);
    metrics_http_connections_max(250);
    CHECK_EQ_INT(sample_of(0, "lockd_http_connections_max"), 250);

    /* waits: 3 ms and 2 h land in their buckets; holds up to hours */
    metrics_lock_wait(METRICS_WAIT_TIMEOUT, 3000);
    metrics_lock_wait(METRICS_WAIT_TIMEOUT, 7200LL * 1000000);
    metrics_lock_hold(90LL * 60 * 1000000); /* 90 min */
    text = render(0);
    if (text == NULL)
        return;
    n = buckets_of(text, "lockd_lock_wait_seconds",
                   "backend=\"memory\",result=\"timeout\"", le, v, 64);
    CHECK(n >= 15);
    for (size_t i = 0, seen = 0; i <= n; i++) {
        if (i == n) { /* each bound below was there */
            CHECK_EQ_INT(seen, 4);
            break;
        }
        if (le[i] == 0.001 && ++seen)
            CHECK_EQ_INT(v[i], 0);
        if (le[i] == 0.005 && ++seen)
            CHECK_EQ_INT(v[i], 1);
        if (le[i] == 3600 && ++seen)
            CHECK_EQ_INT(v[i], 1);
        if (le[i] == 7200 && ++seen)
            CHECK_EQ_INT(v[i], 2);
    }
    CHECK(n > 0 && le[n - 1] == -1 && v[n - 1] == 2);
    CHECK(n > 1 && le[n - 2] >= 3600 * 4);
    n = buckets_of(text, "lockd_lock_hold_seconds", "backend=\"memory\"", le, v,
                   64);
    for (size_t i = 0; i < n; i++) {
        if (le[i] == 3600)
            CHECK_EQ_INT(v[i], 0);
        if (le[i] == 7200)
            CHECK_EQ_INT(v[i], 1);
    }
    CHECK_MSG(sample(text, "lockd_lock_hold_seconds_sum{backend=\"memory\"}") ==
                  5400,
              "hold sum");
    CHECK_EQ_INT(sample(text, "lockd_lock_wait_seconds_count{backend="
                              "\"memory\",result=\"granted\"}"),
                 0);
    free(text);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_metrics_render_has_every_family),
    CHECK_CASE(test_metrics_exposition_is_well_formed),
    CHECK_CASE(test_metrics_counters_move),
    CHECK_CASE(test_metrics_requests_by_route_and_status),
    CHECK_CASE(test_metrics_backend_ops_and_errors),
    CHECK_CASE(test_metrics_histogram_is_cumulative),
    CHECK_CASE(test_metrics_process_values_are_sane),
    CHECK_CASE(test_metrics_lifecycle_families_move),
    CHECK_CASE(test_metrics_nodes_render_per_node_gauges),
    CHECK_CASE(test_metrics_nodes_absent_without_nodes),
};

int main(int argc, char **argv)
{
    main_started_s = wall_s();
    metrics_setup("9.9.9", "memory", api_route_names, API_ROUTE_COUNT,
                  backend_op_names, BACKEND_OP_COUNT);
    return CHECK_MAIN(cases);
}

/*
 * tests/unit/test_events.c - api/events.c: each lock call's outcome writes
 * the lifecycle event the spec names, with its fields and level, only as
 * --log-events and --log-level select (the forced-release audit line
 * always), and counts it in lockd_lock_events_total whether written or
 * not; waits and holds land in their histograms. stderr is captured
 * through a pipe (dup2) and each JSON line parsed with jansson.
 */
#include "api/events.h"
#include "backends/backend.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"

#define CAP_MAX 65536

static int cap_read = -1, cap_saved = -1;
static char cap_text[CAP_MAX];

/* Send stderr into a pipe until capture_end(). The pipe's write end does
 * not block: a test writing too much fails instead of hanging. */
static void capture_begin(void)
{
    int p[2];

    fflush(stderr);
    if (pipe(p) != 0) {
        CHECK(!"pipe");
        return;
    }
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    cap_saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    cap_read = p[0];
}

/* Restore stderr; what was written meanwhile (NUL-terminated, static). */
static const char *capture_end(void)
{
    size_t len = 0;
    ssize_t n;

    cap_text[0] = '\0';
    if (cap_read < 0)
        return cap_text;
    dup2(cap_saved, STDERR_FILENO);
    close(cap_saved);
    while (len + 1 < sizeof(cap_text) &&
           (n = read(cap_read, cap_text + len, sizeof(cap_text) - 1 - len)) > 0)
        len += (size_t)n;
    cap_text[len] = '\0';
    close(cap_read);
    cap_read = -1;
    return cap_text;
}

/* The idx-th line (0 first) of text as a JSON object (new reference), or
 * NULL when there is no such line or it is not JSON. */
static json_t *line_json(const char *text, int idx)
{
    const char *p = text;

    for (int i = 0; i < idx && p != NULL; i++) {
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    if (p == NULL || *p == '\0')
        return NULL;
    return json_loadb(p, strcspn(p, "\n"), 0, NULL);
}

static int count_lines(const char *text)
{
    int n = 0;

    for (const char *p = text; *p != '\0'; p++)
        n += *p == '\n';
    return n;
}

static const char *jstr(json_t *o, const char *name)
{
    return json_string_value(json_object_get(o, name));
}

static long long jnum(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);

    return json_is_integer(v) ? (long long)json_integer_value(v) : -999;
}

/* The value of the sample named exactly series in a fresh exposition,
 * or -1 when absent. */
static double sample(const char *series)
{
    size_t len = 0, n = strlen(series);
    char *text = metrics_render(-1, &len);
    double v = -1;

    CHECK(text != NULL);
    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    free(text);
    return v;
}

static double events_total(const char *event)
{
    char series[128];

    snprintf(series, sizeof(series), "lockd_lock_events_total{event=\"%s\"}",
             event);
    return sample(series);
}

static double wait_count(const char *result)
{
    char series[160];

    snprintf(series, sizeof(series),
             "lockd_lock_wait_seconds_count{backend=\"memory\","
             "result=\"%s\"}",
             result);
    return sample(series);
}

static struct api_config config(enum log_events ev)
{
    struct api_config cfg = { .log_events = ev };

    return cfg;
}

/* A key with '/', a space, UTF-8 and a quote: written as its bytes. */
static char key1[] = "jobs/n\xc3\xbcrnberg \"a\"/1";
static char owner1[] = "job-1";

static struct api_call call(enum api_verb verb)
{
    struct api_call c = { .verb = verb,
                          .key = key1,
                          .key_len = sizeof(key1) - 1 };

    return c;
}

static const struct api_event_ctx ctx1 = { .client = "127.0.0.1:5555",
                                           .request_id = "rid-1",
                                           .credential = "ops" };

static void test_events_grant_writes_granted_with_fields(void)
{
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    struct api_call c = call(API_VERB_ACQUIRE);
    struct lock_grant g = { .fence = 7, .ttl_ms = 1000, .holds = 1 };
    struct api_event_ctx ctx = ctx1;
    double before = events_total("lock.granted");
    double wbefore = wait_count("granted");
    json_t *o;

    c.owner = owner1;
    c.wait_ms = 5000;
    ctx.waited = true;
    ctx.parked_us = 25400;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx);
    o = line_json(capture_end(), 0);
    CHECK_EQ_INT(count_lines(cap_text), 1);
    CHECK(o != NULL);
    CHECK_STR_EQ(jstr(o, "msg"), "event");
    CHECK_STR_EQ(jstr(o, "event"), "lock.granted");
    CHECK_STR_EQ(jstr(o, "level"), "info");
    CHECK_STR_EQ(jstr(o, "key"), key1);
    CHECK_STR_EQ(jstr(o, "mode"), "exclusive");
    CHECK_EQ_INT(jnum(o, "fence"), 7);
    CHECK_EQ_INT(jnum(o, "ttl_ms"), 1000);
    CHECK_STR_EQ(jstr(o, "owner"), "job-1");
    CHECK_EQ_INT(jnum(o, "waited_ms"), 25);
    CHECK_STR_EQ(jstr(o, "client"), "127.0.0.1:5555");
    CHECK_STR_EQ(jstr(o, "request_id"), "rid-1");
    CHECK(json_object_get(o, "took_over_fence") == NULL);
    json_decref(o);
    CHECK_EQ_INT(events_total("lock.granted") - before, 1);
    CHECK_EQ_INT(wait_count("granted") - wbefore, 1);
}

static void test_events_takeover_writes_expired_first(void)
{
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    struct api_call c = call(API_VERB_ACQUIRE);
    struct lock_grant g = { .fence = 9, .ttl_ms = 500, .holds = 1 };
    double before = events_total("lock.expired");
    json_t *o;

    g.expired_fence = 8;
    g.mode = LOCK_SHARED;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    capture_end();
    CHECK_EQ_INT(count_lines(cap_text), 2);
    o = line_json(cap_text, 0);
    CHECK_STR_EQ(jstr(o, "event"), "lock.expired");
    CHECK_STR_EQ(jstr(o, "key"), key1);
    CHECK_EQ_INT(jnum(o, "fence"), 8);
    CHECK_STR_EQ(jstr(o, "reason"), "taken over");
    json_decref(o);
    o = line_json(cap_text, 1);
    CHECK_STR_EQ(jstr(o, "event"), "lock.granted");
    CHECK_STR_EQ(jstr(o, "mode"), "shared");
    CHECK_EQ_INT(jnum(o, "fence"), 9);
    CHECK_EQ_INT(jnum(o, "took_over_fence"), 8);
    CHECK_EQ_INT(jnum(o, "waited_ms"), 0);
    CHECK(json_object_get(o, "owner") == NULL);
    json_decref(o);
    CHECK_EQ_INT(events_total("lock.expired") - before, 1);
}

static void test_events_replay_and_plain_conflict_write_nothing(void)
{
    struct api_config cfg = config(LOG_EVENTS_ALL);
    struct api_call c = call(API_VERB_ACQUIRE);
    struct lock_grant g = { .fence = 3, .ttl_ms = 500, .replay = true };
    double before = events_total("lock.granted");
    double tbefore = events_total("lock.wait_timeout");

    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    events_after_call(&cfg, &c, BACKEND_HELD, &g, NULL, NULL, &ctx1);
    CHECK_STR_EQ(capture_end(), "");
    CHECK_EQ_INT(events_total("lock.granted") - before, 0);
    CHECK_EQ_INT(events_total("lock.wait_timeout") - tbefore, 0);
}

static void test_events_reentry_writes_reentered(void)
{
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    struct api_call c = call(API_VERB_ACQUIRE);
    struct lock_grant g = { .fence = 4, .ttl_ms = 800, .holds = 2 };
    json_t *o;

    c.reenter = true;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    o = line_json(capture_end(), 0);
    CHECK_STR_EQ(jstr(o, "event"), "lock.reentered");
    CHECK_EQ_INT(jnum(o, "holds"), 2);
    CHECK_EQ_INT(jnum(o, "fence"), 4);
    json_decref(o);
}

static void test_events_renewed_only_with_all(void)
{
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    struct api_call c = call(API_VERB_RENEW);
    struct lock_grant g = { .fence = 4, .ttl_ms = 800, .holds = 1 };
    double before = events_total("lock.renewed");
    json_t *o;

    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    CHECK_STR_EQ(capture_end(), "");
    CHECK_EQ_INT(events_total("lock.renewed") - before, 1);
    cfg.log_events = LOG_EVENTS_ALL;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    o = line_json(capture_end(), 0);
    CHECK_STR_EQ(jstr(o, "event"), "lock.renewed");
    CHECK_EQ_INT(jnum(o, "ttl_ms"), 800);
    CHECK_STR_EQ(jstr(o, "request_id"), "rid-1");
    json_decref(o);
    CHECK_EQ_INT(events_total("lock.renewed") - before, 2);
}

static void test_events_release_has_held_ms_and_hold_histogram(void)
{
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    struct api_call c = call(API_VERB_RELEASE);
    struct lock_grant g = { .holds = 0 };
    const char *hc = "lockd_lock_hold_seconds_count{backend=\"memory\"}";
    const char *hs = "lockd_lock_hold_seconds_sum{backend=\"memory\"}";
    double cbefore = sample(hc), sbefore = sample(hs);
    json_t *o;

    g.granted_at_ms = clock_wall_ms() - 1500;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    o = line_json(capture_end(), 0);
    CHECK_STR_EQ(jstr(o, "event"), "lock.released");
    CHECK_EQ_INT(jnum(o, "holds_left"), 0);
    CHECK(jnum(o, "held_ms") >= 1500 && jnum(o, "held_ms") < 3000);
    CHECK(json_object_get(o, "fence") == NULL); /* unknown: left out */
    json_decref(o);
    CHECK_EQ_INT(sample(hc) - cbefore, 1);
    CHECK(sample(hs) - sbefore >= 1.5 && sample(hs) - sbefore < 3);
    /* one hold of two given back: no held time, no observation */
    g.holds = 1;
    g.fence = 12;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    o = line_json(capture_end(), 0);
    CHECK_EQ_INT(jnum(o, "holds_left"), 1);
    CHECK_EQ_INT(jnum(o, "fence"), 12);
    CHECK(json_object_get(o, "held_ms") == NULL);
    json_decref(o);
    CHECK_EQ_INT(sample(hc) - cbefore, 1);
}

static void test_events_lost_on_renew_release_reentry(void)
{
    static const struct {
        enum api_verb verb;
        bool reenter;
        enum backend_result r;
        const char *op, *result;
    } rows[] = {
        { API_VERB_RENEW, false, BACKEND_NOT_FOUND, "renew", "not_found" },
        { API_VERB_RELEASE, false, BACKEND_MISMATCH, "release", "mismatch" },
        { API_VERB_ACQUIRE, true, BACKEND_NOT_FOUND, "reenter", "not_found" },
        { API_VERB_RENEW, false, BACKEND_UNAVAILABLE, NULL, NULL },
    };
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    double before = events_total("lock.lost");

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct api_call c = call(rows[i].verb);
        json_t *o;

        c.reenter = rows[i].reenter;
        capture_begin();
        events_after_call(&cfg, &c, rows[i].r, NULL, NULL, NULL, &ctx1);
        o = line_json(capture_end(), 0);
        if (rows[i].op == NULL) { /* a store failure is no lost lock */
            CHECK(o == NULL);
            continue;
        }
        CHECK_STR_EQ(jstr(o, "event"), "lock.lost");
        CHECK_STR_EQ(jstr(o, "key"), key1);
        CHECK_STR_EQ(jstr(o, "op"), rows[i].op);
        CHECK_STR_EQ(jstr(o, "result"), rows[i].result);
        CHECK_STR_EQ(jstr(o, "client"), "127.0.0.1:5555");
        json_decref(o);
    }
    CHECK_EQ_INT(events_total("lock.lost") - before, 3);
}

static void test_events_wait_timeout_and_cancelled(void)
{
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    struct api_call c = call(API_VERB_ACQUIRE);
    struct lock_grant g = { .retry_ms = 100 };
    struct api_event_ctx ctx = ctx1;
    double tbefore = wait_count("timeout"), cbefore = wait_count("cancelled");
    json_t *o;

    c.wait_ms = 2000;
    ctx.waited = true;
    ctx.parked_us = 2001000;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_HELD, &g, NULL, NULL, &ctx);
    o = line_json(capture_end(), 0);
    CHECK_STR_EQ(jstr(o, "event"), "lock.wait_timeout");
    CHECK_EQ_INT(jnum(o, "waited_ms"), 2001);
    CHECK_STR_EQ(jstr(o, "key"), key1);
    json_decref(o);
    CHECK_EQ_INT(wait_count("timeout") - tbefore, 1);
    ctx.cancelled = true;
    ctx.parked_us = 300000;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_HELD, &g, NULL, NULL, &ctx);
    o = line_json(capture_end(), 0);
    CHECK_EQ_INT(count_lines(cap_text), 1);
    CHECK_STR_EQ(jstr(o, "event"), "lock.wait_cancelled");
    CHECK_EQ_INT(jnum(o, "waited_ms"), 300);
    json_decref(o);
    CHECK_EQ_INT(wait_count("cancelled") - cbefore, 1);
    CHECK_EQ_INT(wait_count("timeout") - tbefore, 1);
}

static void test_events_respect_log_events_and_level(void)
{
    struct api_config cfg = config(LOG_EVENTS_AUDIT);
    struct api_call c = call(API_VERB_ACQUIRE);
    struct lock_grant g = { .fence = 1, .ttl_ms = 100, .holds = 1 };
    double before = events_total("lock.granted");

    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    CHECK_STR_EQ(capture_end(), "");
    /* --log-level warn: not written either, but still counted */
    cfg.log_events = LOG_EVENTS_ALL;
    log_setup(LOG_LEVEL_WARN, LOG_FORMAT_JSON);
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, &ctx1);
    CHECK_STR_EQ(capture_end(), "");
    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
    CHECK_EQ_INT(events_total("lock.granted") - before, 2);
    /* no context at all: written without client and request id */
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, &g, NULL, NULL, NULL);
    {
        json_t *o = line_json(capture_end(), 0);
        CHECK_STR_EQ(jstr(o, "event"), "lock.granted");
        CHECK(json_object_get(o, "client") == NULL);
        json_decref(o);
    }
}

static void test_events_force_released_is_audit_whatever_the_level(void)
{
    struct api_config cfg = config(LOG_EVENTS_AUDIT);
    struct lock_info info = { .fence = 41, .holder_count = 3 };
    double before = events_total("lock.force_released");
    json_t *o;

    info.has_owner = true;
    snprintf(info.owner, sizeof(info.owner), "%s", "batch");
    log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_JSON);
    capture_begin();
    events_force_released(&cfg, key1, sizeof(key1) - 1, &info, &ctx1);
    o = line_json(capture_end(), 0);
    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
    CHECK_STR_EQ(jstr(o, "event"), "lock.force_released");
    CHECK_STR_EQ(jstr(o, "level"), "warn");
    CHECK_STR_EQ(jstr(o, "key"), key1);
    CHECK_EQ_INT(jnum(o, "holders"), 3);
    CHECK_EQ_INT(jnum(o, "fence"), 41);
    CHECK_STR_EQ(jstr(o, "owner"), "batch");
    CHECK_STR_EQ(jstr(o, "client"), "127.0.0.1:5555");
    CHECK_STR_EQ(jstr(o, "request_id"), "rid-1");
    CHECK_STR_EQ(jstr(o, "admin"), "ops"); /* the credential's name */
    json_decref(o);
    CHECK_EQ_INT(events_total("lock.force_released") - before, 1);
}

static void test_events_multi_verbs_write_per_key(void)
{
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    char block[] = "m/a\0m/b";
    char *keys[2] = { block, block + 4 };
    size_t lens[2] = { 3, 3 };
    struct api_call c = { .verb = API_VERB_ACQUIRE_MULTI,
                          .keys = { .n = 2, .keys = keys, .lens = lens } };
    struct lock_multi_grant mg = { .ttl_ms = 700 };
    json_t *o;

    mg.fences[0] = 21;
    mg.fences[1] = 22;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, NULL, NULL, &mg, &ctx1);
    capture_end();
    CHECK_EQ_INT(count_lines(cap_text), 2);
    for (int i = 0; i < 2; i++) {
        o = line_json(cap_text, i);
        CHECK_STR_EQ(jstr(o, "event"), "lock.granted");
        CHECK_STR_EQ(jstr(o, "key"), keys[i]);
        CHECK_EQ_INT(jnum(o, "fence"), 21 + i);
        CHECK_EQ_INT(jnum(o, "ttl_ms"), 700);
        json_decref(o);
    }
    c.verb = API_VERB_RELEASE_MULTI;
    mg.released[0] = true;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_OK, NULL, NULL, &mg, &ctx1);
    capture_end();
    CHECK_EQ_INT(count_lines(cap_text), 2);
    o = line_json(cap_text, 0);
    CHECK_STR_EQ(jstr(o, "event"), "lock.released");
    CHECK_STR_EQ(jstr(o, "key"), "m/a");
    json_decref(o);
    o = line_json(cap_text, 1);
    CHECK_STR_EQ(jstr(o, "event"), "lock.lost");
    CHECK_STR_EQ(jstr(o, "key"), "m/b");
    CHECK_STR_EQ(jstr(o, "op"), "release");
    json_decref(o);
    c.verb = API_VERB_RENEW_MULTI;
    mg.bad = 1;
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_MISMATCH, NULL, NULL, &mg, &ctx1);
    o = line_json(capture_end(), 0);
    CHECK_EQ_INT(count_lines(cap_text), 1);
    CHECK_STR_EQ(jstr(o, "event"), "lock.lost");
    CHECK_STR_EQ(jstr(o, "key"), "m/b");
    CHECK_STR_EQ(jstr(o, "result"), "mismatch");
    json_decref(o);
}

static void test_events_text_format_names_the_event(void)
{
    struct api_config cfg = config(LOG_EVENTS_CHANGES);
    struct api_call c = call(API_VERB_RELEASE);

    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
    capture_begin();
    events_after_call(&cfg, &c, BACKEND_NOT_FOUND, NULL, NULL, NULL, &ctx1);
    capture_end();
    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
    CHECK_CONTAINS(cap_text, " info event lock.lost key=\"jobs/n");
    CHECK_CONTAINS(cap_text, " op=\"release\" result=\"not_found\"");
}

static const struct check_case cases[] = {
    CHECK_CASE(test_events_grant_writes_granted_with_fields),
    CHECK_CASE(test_events_takeover_writes_expired_first),
    CHECK_CASE(test_events_replay_and_plain_conflict_write_nothing),
    CHECK_CASE(test_events_reentry_writes_reentered),
    CHECK_CASE(test_events_renewed_only_with_all),
    CHECK_CASE(test_events_release_has_held_ms_and_hold_histogram),
    CHECK_CASE(test_events_lost_on_renew_release_reentry),
    CHECK_CASE(test_events_wait_timeout_and_cancelled),
    CHECK_CASE(test_events_respect_log_events_and_level),
    CHECK_CASE(test_events_force_released_is_audit_whatever_the_level),
    CHECK_CASE(test_events_multi_verbs_write_per_key),
    CHECK_CASE(test_events_text_format_names_the_event),
};

int main(int argc, char **argv)
{
    static const char *const routes[] = { "other" };
    static const char *const ops[] = { "acquire" };

    metrics_setup("9.9.9", "memory", routes, 1, ops, 1);
    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
    return CHECK_MAIN(cases);
}

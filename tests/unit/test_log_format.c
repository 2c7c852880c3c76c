/*
 * tests/unit/test_log_format.c - the bytes of lib/log.c's lines: messages,
 * access lines and events, in text and JSON, with the escapes, the
 * durations, the numbers and the cuts that the formatter makes. The
 * expected lines are written out in full here, so any change to what an
 * operator's log parser reads fails a case.
 */
#include "lib/log.h"
#include "lib/logfmt.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"

static char path[64];

/* Everything written since the last call, with each line's time (24
 * bytes after its start, or after {"time":" in JSON) checked for its
 * shape and replaced by T...T; the caller frees it. */
static char *take_lines(void)
{
    FILE *f = fopen(path, "r");
    char *buf, *p;
    long n;

    if (f == NULL)
        return strdup("");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return strdup("");
    }
    fclose(f);
    if (truncate(path, 0) != 0)
        CHECK(0);
    for (p = buf; *p != '\0';) {
        char *t = strncmp(p, "{\"time\":\"", 9) == 0 ? p + 9 : p;
        char *nl = strchr(p, '\n');
        /* YYYY-MM-DDTHH:MM:SS.mmmZ */
        static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
        for (int i = 0; i < 24; i++) {
            char c = t[i];
            bool ok = shape[i] == 'd' ? c >= '0' && c <= '9' : c == shape[i];
            CHECK_MSG(ok, "time byte %d of %.40s", i, p);
            t[i] = 'T';
        }
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    return buf;
}

static void expect(const char *want)
{
    char *got = take_lines();
    CHECK_STR_EQ(got, want);
    free(got);
}

#define TIME_ "TTTTTTTTTTTTTTTTTTTTTTTT"

static void test_log_message_lines(void)
{
    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
    log_info("plain %d", 7);
    log_warn("quote \" back \\ ctl \x01 del \x7f tab \t end");
    log_debug("not written at info");
    expect(TIME_ " info plain 7\n" TIME_
                 " warn quote \" back \\ ctl \\x01 del \\x7f tab \\x09 end\n");
    log_setup(LOG_LEVEL_DEBUG, LOG_FORMAT_JSON);
    log_error("quote \" back \\ ctl \x01 del \x7f nl \n end");
    log_debug("d");
    expect("{\"time\":\"" TIME_ "\",\"level\":\"error\",\"msg\":\"quote \\\" "
           "back \\\\ ctl \\u0001 del \\u007f nl \\u000a end\"}\n"
           "{\"time\":\"" TIME_ "\",\"level\":\"debug\",\"msg\":\"d\"}\n");
}

static const char nul_value[] = { 'a', '\0', 'b' };

static const struct log_field fields[] = {
    { .name = "client", .str = "127.0.0.1:5", .len = 11 },
    { .name = NULL, .num = 99 }, /* skipped */
    { .name = "fence", .num = 42 },
    { .name = "neg", .num = -7 },
    { .name = "min", .num = INT64_MIN },
    { .name = "max", .num = INT64_MAX },
    { .name = "zero", .num = 0 },
    { .name = "owner", .str = "q\"b\\c\x02", .len = 6 },
    { .name = "nul", .str = nul_value, .len = 3 },
    { .name = "part", .str = "abcdef", .len = 3 },
    { .name = "empty", .str = "", .len = 0 },
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static void test_log_access_lines(void)
{
    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
    log_access("POST", "/locks/a\"b\\c\x01", 201, 1234, "rid-1", fields,
               NFIELDS);
    log_access("GET", "/healthz", 200, 0, NULL, NULL, 0);
    expect(TIME_
           " info access POST /locks/a\"b\\c\\x01 201 1.234ms "
           "request_id=rid-1 client=\"127.0.0.1:5\" fence=42 neg=-7 "
           "min=-9223372036854775808 max=9223372036854775807 zero=0 "
           "owner=\"q\"b\\c\\x02\" nul=\"a?b\" part=\"abc\" empty=\"\"\n" TIME_
           " info access GET /healthz 200 0.000ms\n");
    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
    log_access("POST", "/locks/a\"b\\c\x01", 201, 1234, "rid\"1", fields,
               NFIELDS);
    log_access("GET", "/healthz", 200, 0, NULL, NULL, 0);
    expect("{\"time\":\"" TIME_
           "\",\"level\":\"info\",\"msg\":\"access\",\"method\":\"POST\","
           "\"path\":\"/locks/a\\\"b\\\\c\\u0001\",\"status\":201,"
           "\"duration_ms\":1.234,\"request_id\":\"rid\\\"1\","
           "\"client\":\"127.0.0.1:5\",\"fence\":42,\"neg\":-7,"
           "\"min\":-9223372036854775808,\"max\":9223372036854775807,"
           "\"zero\":0,\"owner\":\"q\\\"b\\\\c\\u0002\",\"nul\":\"a?b\","
           "\"part\":\"abc\",\"empty\":\"\"}\n"
           "{\"time\":\"" TIME_
           "\",\"level\":\"info\",\"msg\":\"access\",\"method\":\"GET\","
           "\"path\":\"/healthz\",\"status\":200,\"duration_ms\":0.000}\n");
    log_setup(LOG_LEVEL_WARN, LOG_FORMAT_JSON);
    log_access("GET", "/healthz", 200, 0, NULL, NULL, 0);
    expect("");
}

static void test_log_access_durations(void)
{
    static const struct {
        int64_t us;
        const char *text;
    } cases[] = {
        { 0, "0.000" },
        { 1, "0.001" },
        { 999, "0.999" },
        { 1000, "1.000" },
        { 1001, "1.001" },
        { 59999, "59.999" },
        { 123456789, "123456.789" },
        { 86400000000, "86400000.000" },
        { -1, "-0.001" },
        { -1500, "-1.500" },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char want[256];
        log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
        log_access("GET", "/x", 404, cases[i].us, NULL, NULL, 0);
        snprintf(want, sizeof(want), TIME_ " info access GET /x 404 %sms\n",
                 cases[i].text);
        expect(want);
        log_setup(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
        log_access("GET", "/x", 404, cases[i].us, NULL, NULL, 0);
        snprintf(want, sizeof(want),
                 "{\"time\":\"" TIME_
                 "\",\"level\":\"info\",\"msg\":\"access\",\"method\":\"GET\","
                 "\"path\":\"/x\",\"status\":404,\"duration_ms\":%s}\n",
                 cases[i].text);
        expect(want);
    }
}

static void test_log_event_lines(void)
{
    struct log_field f[] = { { .name = "key", .str = "k 1", .len = 3 },
                             { .name = "fence", .num = 5 },
                             { .name = "ttl_ms", .num = 30000 } };

    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
    log_event(LOG_LEVEL_INFO, "lock.grant", f, 3);
    log_event(LOG_LEVEL_DEBUG, "lock.renew", f, 3); /* below info */
    log_audit("lock.force_released", f, 1);
    expect(TIME_
           " info event lock.grant key=\"k 1\" fence=5 ttl_ms=30000\n" TIME_
           " warn event lock.force_released key=\"k 1\"\n");
    log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_JSON);
    log_event(LOG_LEVEL_INFO, "lock.grant", f, 3);
    log_audit("lock.force\"released", f, 0);
    expect("{\"time\":\"" TIME_ "\",\"level\":\"warn\",\"msg\":\"event\","
           "\"event\":\"lock.force\\\"released\"}\n");
}

/* FNV-1a of s, to pin a long line without writing it out. */
static uint64_t fnv(const char *s)
{
    uint64_t h = 14695981039346656037ULL;

    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Long values are cut: a field at LOG_FIELD_MAX bytes, a path and a whole
 * line at the line's cap, and no field starts near the end. */
static void test_log_long_values_are_cut(void)
{
    static char big[9000], ctl[3000];
    struct log_field f[4];
    char *got;

    memset(big, 'x', sizeof(big) - 1);
    memset(ctl, '\x01', sizeof(ctl) - 1);
    f[0] = (struct log_field){ .name = "owner", .str = big, .len = 700 };
    f[1] = (struct log_field){ .name = "ctl", .str = ctl, .len = 700 };
    f[2] = (struct log_field){ .name = "n", .num = 1 };
    f[3] = (struct log_field){ .name = "after", .str = big, .len = 10 };
    for (int json = 0; json < 2; json++) {
        log_setup(LOG_LEVEL_INFO, json ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
        log_event(LOG_LEVEL_INFO, "lock.grant", f, 4);
        log_access("POST", big, 201, 5, "r", f, 4);
        log_access("POST", "/p", 201, 5, big, f, 4);
        log_msg(LOG_LEVEL_INFO, "%s%s", ctl, big);
        got = take_lines();
        /* the lengths and digests of these lines as the formatter wrote
         * them when this test was written */
        char *line = got;
        static const size_t lens[2][4] = { { 3085, 8176, 8183, 8186 },
                                           { 4332, 8175, 8181, 8189 } };
        static const uint64_t sums[2][4] = {
            { 13652599735042280405ULL, 12980406677562323299ULL,
              955667425249146748ULL, 18436917068501784074ULL },
            { 2030219969447383393ULL, 10409750195928498360ULL,
              17491870213272785128ULL, 11347088044166566037ULL },
        };
        for (int i = 0; i < 4; i++) {
            char *nl = line != NULL ? strchr(line, '\n') : NULL;
            CHECK_MSG(nl != NULL, "json %d line %d missing", json, i);
            if (nl == NULL)
                break;
            *nl = '\0';
            CHECK_MSG(strlen(line) == lens[json][i],
                      "json %d line %d: %zu bytes", json, i, strlen(line));
            CHECK_MSG(fnv(line) == sums[json][i],
                      "json %d line %d: digest %llu", json, i,
                      (unsigned long long)fnv(line));
            line = nl + 1;
        }
        free(got);
    }
}

/* logfmt_put_escaped_n() as it was written one byte at a time, before
 * it copied runs of plain bytes at once: the reference for the case below. */
static void escaped_one_by_one(
    char *buf, size_t cap, size_t *pos, const char *s, size_t n, int json)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < n && *pos + 7 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\0') {
            buf[(*pos)++] = '?';
        } else if (json && (c == '"' || c == '\\')) {
            buf[(*pos)++] = '\\';
            buf[(*pos)++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            buf[(*pos)++] = '\\';
            if (json) {
                memcpy(buf + *pos, "u00", 3);
                *pos += 3;
            } else {
                buf[(*pos)++] = 'x';
            }
            buf[(*pos)++] = hex[c >> 4];
            buf[(*pos)++] = hex[c & 15];
        } else {
            buf[(*pos)++] = (char)c;
        }
    }
    buf[*pos] = '\0';
}

/* The escaper writes the same bytes as the one-at-a-time reference, for
 * mixed input (plain runs, quotes, backslashes, NUL, controls, DEL, UTF-8)
 * at every cap and start, both formats: cuts land where they did. */
static void test_log_escape_runs_match_bytewise(void)
{
    char in[300], got[256], want[256];
    unsigned seed = 12345;

    for (size_t i = 0; i < sizeof(in); i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = (seed >> 16) % 16;
        in[i] = r < 9 ? (char)('a' + r) : "\"\\\0\x01\x1f\x7f\xc3\xa9"[r - 9];
    }
    for (int json = 0; json < 2; json++)
        for (size_t cap = 1; cap < sizeof(got); cap += 3)
            for (size_t start = 0; start < cap && start < 40; start += 13) {
                size_t pg = start, pw = start;
                memset(got, '#', sizeof(got));
                memset(want, '#', sizeof(want));
                logfmt_put_escaped_n(got, cap, &pg, in, sizeof(in), json);
                escaped_one_by_one(want, cap, &pw, in, sizeof(in), json);
                CHECK_MSG(pg == pw && memcmp(got, want, sizeof(got)) == 0,
                          "json %d cap %zu start %zu: %zu against %zu bytes",
                          json, cap, start, pg, pw);
            }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_log_message_lines),
    CHECK_CASE(test_log_access_lines),
    CHECK_CASE(test_log_access_durations),
    CHECK_CASE(test_log_event_lines),
    CHECK_CASE(test_log_long_values_are_cut),
    CHECK_CASE(test_log_escape_runs_match_bytewise),
};

int main(int argc, char **argv)
{
    char err[256];
    int fd, rc;

    snprintf(path, sizeof(path), "/tmp/lockd-logfmt-" MKTEMP_SUFFIX);
    fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    if (log_open_file(path, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rc = CHECK_MAIN(cases);
    unlink(path);
    return rc;
}

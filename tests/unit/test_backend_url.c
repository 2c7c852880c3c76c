/*
 * tests/unit/test_backend_url.c - the helpers backends/backend.c shares
 * with the adapters: url_parse() and friends, text_parse_u64(),
 * text_secret_eq(), text_hex() and text_unhex_lower(), and backend_open()'s
 * scheme lookup.
 */
#include "backends/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/text.h"
#include "lib/url.h"
#include "tests/unit/check.h"

static void test_url_parse_redis_with_password_db_and_prefix(void)
{
    struct url u;

    CHECK_EQ_INT(url_parse("redis://:s3cret@cache.local:6380/2?"
                           "prefix=lockd:",
                           &u),
                 0);
    CHECK_STR_EQ(u.scheme, "redis");
    CHECK_STR_EQ(u.user, "");
    CHECK_STR_EQ(u.password, "s3cret");
    CHECK_STR_EQ(u.hosts, "cache.local:6380");
    CHECK_STR_EQ(u.path, "2");
    CHECK_EQ_INT(u.nparams, 1);
    CHECK_STR_EQ(url_param(&u, "prefix"), "lockd:");
    CHECK(url_param(&u, "db") == NULL);
    url_cleanup(&u);
    CHECK(u.scheme == NULL && u.nparams == 0);
    url_cleanup(&u); /* twice is fine */
}

static void test_url_parse_user_and_escaped_password(void)
{
    struct url u;

    CHECK_EQ_INT(url_parse("mysql://lockd:p%40ss%3Aw%2Fd%25@db:3306/"
                           "locks",
                           &u),
                 0);
    CHECK_STR_EQ(u.user, "lockd");
    CHECK_STR_EQ(u.password, "p@ss:w/d%");
    CHECK_STR_EQ(u.hosts, "db:3306");
    CHECK_STR_EQ(u.path, "locks");
    url_cleanup(&u);

    /* the user info ends at the last '@' before the path */
    CHECK_EQ_INT(url_parse("mysql://u:p@ss@h/db", &u), 0);
    CHECK_STR_EQ(u.user, "u");
    CHECK_STR_EQ(u.password, "p@ss");
    CHECK_STR_EQ(u.hosts, "h");
    url_cleanup(&u);

    /* a user without a password; an escaped user */
    CHECK_EQ_INT(url_parse("mysql://root@localhost/x", &u), 0);
    CHECK_STR_EQ(u.user, "root");
    CHECK(u.password == NULL);
    url_cleanup(&u);
    CHECK_EQ_INT(url_parse("mysql://a%20b:@h/x", &u), 0);
    CHECK_STR_EQ(u.user, "a b");
    CHECK_STR_EQ(u.password, "");
    url_cleanup(&u);

    /* '?' in a password must be escaped; escaped, it is kept */
    CHECK_EQ_INT(url_parse("redis://:pa%3Fss@h", &u), 0);
    CHECK_STR_EQ(u.password, "pa?ss");
    CHECK_STR_EQ(u.hosts, "h");
    url_cleanup(&u);
    /* an '@' in the query is not user info */
    CHECK_EQ_INT(url_parse("redis://h:1?prefix=a@b", &u), 0);
    CHECK(u.user == NULL);
    CHECK_STR_EQ(u.hosts, "h:1");
    CHECK_STR_EQ(url_param(&u, "prefix"), "a@b");
    url_cleanup(&u);
}

static void test_url_parse_hosts_lists_and_v6(void)
{
    struct url u;

    CHECK_EQ_INT(url_parse("zookeeper://h1:2181,h2:2181,[::1]:2182/"
                           "lockd/locks",
                           &u),
                 0);
    CHECK_STR_EQ(u.scheme, "zookeeper");
    CHECK_STR_EQ(u.hosts, "h1:2181,h2:2181,[::1]:2182");
    CHECK_STR_EQ(u.path, "lockd/locks");
    CHECK(u.user == NULL && u.password == NULL);
    url_cleanup(&u);

    CHECK_EQ_INT(url_parse("redis://[::1]:6379", &u), 0);
    CHECK_STR_EQ(u.hosts, "[::1]:6379");
    CHECK(u.path == NULL);
    CHECK_EQ_INT(u.nparams, 0);
    url_cleanup(&u);

    CHECK_EQ_INT(url_parse("redis://host/", &u), 0);
    CHECK_STR_EQ(u.hosts, "host");
    CHECK(u.path == NULL); /* an empty path is no path */
    url_cleanup(&u);

    CHECK_EQ_INT(url_parse("memory://", &u), 0);
    CHECK_STR_EQ(u.scheme, "memory");
    CHECK_STR_EQ(u.hosts, "");
    CHECK(u.path == NULL);
    url_cleanup(&u);
}

static void test_url_parse_query_params(void)
{
    struct url u;

    CHECK_EQ_INT(url_parse("redis://h/0?a=1&b=&c&&d=x%26y%3Dz&e=a/b"
                           "&p%72efix=k",
                           &u),
                 0);
    CHECK_STR_EQ(u.path, "0");
    CHECK_EQ_INT(u.nparams, 6); /* the empty one between && is skipped */
    CHECK_STR_EQ(url_param(&u, "a"), "1");
    CHECK_STR_EQ(url_param(&u, "b"), "");
    CHECK_STR_EQ(url_param(&u, "c"), ""); /* no '=' */
    CHECK_STR_EQ(url_param(&u, "d"), "x&y=z");
    CHECK_STR_EQ(url_param(&u, "e"), "a/b");
    CHECK_STR_EQ(url_param(&u, "prefix"), "k"); /* names decoded */
    CHECK(url_param(&u, "x") == NULL);
    url_cleanup(&u);

    /* many parameters grow the arrays */
    {
        char url[1024] = "redis://h?";
        for (int i = 0; i < 40; i++) {
            size_t n = strlen(url);
            snprintf(url + n, sizeof(url) - n, "%sp%d=%d", i ? "&" : "", i,
                     i * 3);
        }
        CHECK_EQ_INT(url_parse(url, &u), 0);
        CHECK_EQ_INT(u.nparams, 40);
        CHECK_STR_EQ(url_param(&u, "p39"), "117");
        url_cleanup(&u);
    }
    /* a '/' in the query is not a path; '?' right after the host */
    CHECK_EQ_INT(url_parse("redis://h?prefix=a/b", &u), 0);
    CHECK_STR_EQ(u.hosts, "h");
    CHECK(u.path == NULL);
    url_cleanup(&u);
}

static void test_url_parse_rejects_malformed(void)
{
    static const char *const bad[] = {
        "",
        "redis",
        "redis:/h",
        "://h",
        "redis://h?x=%zz",
        "redis://h?x=%4",
        "redis://h?x=%",
        "redis://h?%zz=1",
        "redis://:%00@h",
        "redis://:p%4@h",
        "redis://%zz@h",
        "redis://h%0/x",
        "redis://h/%zz",
        "redis://h/a%00b",
        "re%zzdis://h",
    };
    struct url u;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&u, 0x5a, sizeof(u));
        CHECK_MSG(url_parse(bad[i], &u) == -1, "'%s' parsed", bad[i]);
        CHECK_MSG(u.scheme == NULL && u.hosts == NULL && u.nparams == 0,
                  "'%s': not zeroed", bad[i]);
        url_cleanup(&u); /* zeroed: safe */
    }
}

static void test_url_check_params(void)
{
    static const char *const allowed[] = { "prefix", "timeout_ms", NULL };
    static const char *const none[] = { NULL };
    struct url u;
    const char *bad = NULL;

    CHECK_EQ_INT(url_parse("redis://h?prefix=x&timeout_ms=5", &u), 0);
    CHECK_EQ_INT(url_check_params(&u, allowed, &bad), 0);
    CHECK(bad == NULL);
    CHECK_EQ_INT(url_check_params(&u, none, &bad), -1);
    CHECK_STR_EQ(bad, "prefix");
    url_cleanup(&u);

    CHECK_EQ_INT(url_parse("redis://h?prefix=x&db=1&zz=2", &u), 0);
    bad = NULL;
    CHECK_EQ_INT(url_check_params(&u, allowed, &bad), -1);
    CHECK_STR_EQ(bad, "db"); /* the first unknown */
    url_cleanup(&u);

    CHECK_EQ_INT(url_parse("redis://h?Prefix=x", &u), 0);
    CHECK_EQ_INT(url_check_params(&u, allowed, &bad), -1);
    url_cleanup(&u);
    CHECK_EQ_INT(url_parse("redis://h?prefixx=x", &u), 0);
    CHECK_EQ_INT(url_check_params(&u, allowed, &bad), -1);
    url_cleanup(&u);
    CHECK_EQ_INT(url_parse("redis://h", &u), 0);
    CHECK_EQ_INT(url_check_params(&u, none, &bad), 0);
    url_cleanup(&u);
}

static void test_parse_u64_accepts_decimal_in_range(void)
{
    uint64_t v = 0;

    CHECK_EQ_INT(text_parse_u64("0", 0, 10, &v), 0);
    CHECK_EQ_U64(v, 0);
    CHECK_EQ_INT(text_parse_u64("10", 0, 10, &v), 0);
    CHECK_EQ_U64(v, 10);
    CHECK_EQ_INT(text_parse_u64("5", 5, 5, &v), 0);
    CHECK_EQ_U64(v, 5);
    CHECK_EQ_INT(text_parse_u64("007", 0, 10, &v), 0);
    CHECK_EQ_U64(v, 7);
    CHECK_EQ_INT(text_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    CHECK_EQ_U64(v, UINT64_MAX);
    CHECK_EQ_INT(text_parse_u64("9007199254740991", 1, LOCK_FENCE_MAX, &v), 0);
    CHECK_EQ_U64(v, LOCK_FENCE_MAX);
}

/* text_put_u64() writes what "%llu" writes: every number to 100 000, each
 * side of every power of ten, the widest; no NUL after it. */
static void test_put_u64_is_decimal(void)
{
    char got[TEXT_U64_MAX + 2], want[32];
    uint64_t p = 1;

    for (uint64_t v = 0;; v++) {
        uint64_t w = v;
        if (v > 100000) { /* then around each power of ten */
            if (p > UINT64_MAX / 10)
                break;
            p *= 10;
            w = p - 1 + (v % 3);
        }
        memset(got, '#', sizeof(got));
        size_t n = text_put_u64(got, w);
        snprintf(want, sizeof(want), "%llu", (unsigned long long)w);
        CHECK_MSG(n == strlen(want) && memcmp(got, want, n) == 0 &&
                      got[n] == '#',
                  "%s written as %.*s", want, (int)n, got);
    }
    size_t n = text_put_u64(got, UINT64_MAX);
    CHECK(n == 20 && memcmp(got, "18446744073709551615", 20) == 0);
}

static void test_parse_u64_rejects_junk_signs_overflow_range(void)
{
    static const char *const junk[] = {
        "",    " 1", "1 ",  "+1",  "-1", "-0", "0x10", "1e3", "1.0",
        "1,0", "١",  "1\n", "\t1", "a",  "1a", "--1",  "0b1",
    };
    uint64_t v = 4242;

    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
        CHECK_MSG(text_parse_u64(junk[i], 0, UINT64_MAX, &v) == -1,
                  "'%s' accepted", junk[i]);
    CHECK_EQ_INT(text_parse_u64(NULL, 0, 10, &v), -1);
    CHECK_EQ_INT(text_parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -1);
    CHECK_EQ_INT(text_parse_u64("18446744073709551620", 0, UINT64_MAX, &v), -1);
    CHECK_EQ_INT(text_parse_u64("99999999999999999999999", 0, UINT64_MAX, &v),
                 -1);
    CHECK_EQ_INT(text_parse_u64("11", 0, 10, &v), -1);
    CHECK_EQ_INT(text_parse_u64("4", 5, 10, &v), -1);
    CHECK_EQ_INT(text_parse_u64("9007199254740992", 1, LOCK_FENCE_MAX, &v), -1);
    CHECK_EQ_U64(v, 4242); /* untouched on failure */
}

static void test_token_eq_is_exact(void)
{
    CHECK(text_secret_eq("", ""));
    CHECK(text_secret_eq("0123456789abcdef0123456789abcdef",
                         "0123456789abcdef0123456789abcdef"));
    CHECK(!text_secret_eq("0123456789abcdef0123456789abcdef",
                          "0123456789abcdef0123456789abcdee"));
    CHECK(!text_secret_eq("1123456789abcdef0123456789abcdef",
                          "0123456789abcdef0123456789abcdef"));
    CHECK(!text_secret_eq("abc", "abcd"));
    CHECK(!text_secret_eq("abcd", "abc"));
    CHECK(!text_secret_eq("", "a"));
    CHECK(!text_secret_eq("a", ""));
    CHECK(!text_secret_eq("ABC", "abc"));
    CHECK(!text_secret_eq("a\xff", "a\x7f"));
}

/* text_hex() writes what "%02x" writes; text_unhex_lower() reads that back
 * and nothing else: not upper case, not a digit short or over, nothing
 * past a NUL. */
static void test_hex_round_trips_lower_case_only(void)
{
    static const char *const bad[] = {
        "0123456789ABCDEF",
        "0123456789abcde",
        "0123456789abcdef0",
        "0123456789abcdeg",
        "0123456789abcde ",
        "",
        "x",
    };
    unsigned char all[256], back[256];
    char hex[513], want[3];
    uint8_t out[8];

    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    text_hex(hex, all, sizeof(all));
    for (int i = 0; i < 256; i++) {
        snprintf(want, sizeof(want), "%02x", i);
        CHECK_MSG(memcmp(hex + 2 * i, want, 2) == 0, "byte %d", i);
    }
    CHECK_EQ_INT(hex[512], '\0');
    CHECK(text_unhex_lower(hex, back, sizeof(back)));
    CHECK(memcmp(all, back, sizeof(all)) == 0);
    CHECK(text_unhex_lower("0123456789abcdef", out, 8));
    CHECK_EQ_INT(out[7], 0xef);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_MSG(!text_unhex_lower(bad[i], out, 8), "%s", bad[i]);
    CHECK(text_unhex_lower("", out, 0));
}

static void test_open_finds_schemes(void)
{
    struct backend *be = (struct backend *)1;
    char err[256] = "";

    CHECK_EQ_INT(backend_open("memory://", NULL, &be, err, sizeof(err)),
                 BACKEND_OK);
    CHECK(be != NULL);
    if (be != NULL) {
        CHECK_STR_EQ(backend_scheme(be), "memory");
        CHECK((backend_caps(be) & BACKEND_CAP_QUEUE) != 0);
        CHECK_EQ_INT(backend_ping(be), BACKEND_OK);
        CHECK_EQ_INT(backend_held_count(be), 0);
    }
    backend_close(be);
    backend_close(NULL);

    be = (struct backend *)1;
    CHECK_EQ_INT(backend_open("nope://x", NULL, &be, err, sizeof(err)),
                 BACKEND_INVALID);
    CHECK(be == NULL);
    CHECK_CONTAINS(err, "unknown backend scheme");
    CHECK_CONTAINS(err, "memory");
    CHECK_EQ_INT(backend_open("memory", NULL, &be, err, sizeof(err)),
                 BACKEND_INVALID);
    CHECK_CONTAINS(err, "scheme");
    CHECK_EQ_INT(backend_open("memory://junk", NULL, &be, err, sizeof(err)),
                 BACKEND_INVALID);
    CHECK(be == NULL);
    CHECK(err[0] != '\0');
    CHECK_EQ_INT(backend_open("mem://", NULL, &be, err, sizeof(err)),
                 BACKEND_INVALID);
    CHECK_EQ_INT(backend_open("memoryx://", NULL, &be, err, sizeof(err)),
                 BACKEND_INVALID);
    /* the message fits the buffer it is given */
    {
        char tiny[8];
        memset(tiny, 'x', sizeof(tiny));
        CHECK_EQ_INT(backend_open("nope://", NULL, &be, tiny, sizeof(tiny)),
                     BACKEND_INVALID);
        CHECK(memchr(tiny, '\0', sizeof(tiny)) != NULL);
    }
    CHECK_CONTAINS(backend_schemes(), "memory");
}

static void test_result_strings_are_distinct(void)
{
    static const enum backend_result all[] = {
        BACKEND_OK,       BACKEND_HELD,        BACKEND_NOT_FOUND,
        BACKEND_MISMATCH, BACKEND_UNAVAILABLE, BACKEND_NO_MEMORY,
        BACKEND_INVALID,
    };
    size_t n = sizeof(all) / sizeof(all[0]);

    for (size_t i = 0; i < n; i++) {
        CHECK(backend_result_str(all[i]) != NULL);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(backend_result_str(all[i]),
                         backend_result_str(all[j])) != 0);
    }
}

static void test_clocks_move_forward(void)
{
    int64_t w0 = clock_wall_ms(), m0 = clock_mono_ms();

    CHECK(w0 > 1600000000000LL); /* after 2020 */
    check_sleep_ms(20);
    CHECK(clock_mono_ms() - m0 >= 19);
    CHECK(clock_wall_ms() >= w0);
}

static void check_redact(const char *in, const char *want)
{
    char out[256];

    url_redact(in, out, sizeof(out));
    CHECK_STR_EQ(out, want);
}

static void test_url_redact_hides_every_password(void)
{
    char small[12];

    check_redact("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0");
    check_redact("redis://app:hunter2@h1:1,h2:2?prefix=x",
                 "redis://app:***@h1:1,h2:2?prefix=x");
    check_redact("redis+sentinel://s:1/m?sentinel_password=pw&db=1",
                 "redis+sentinel://s:1/m?sentinel_password=***&db=1");
    check_redact("mysql://u:p@w@h/db?PASSWORD=x",
                 "mysql://u:***@h/db?PASSWORD=***");
    check_redact("redis://h:6379", "redis://h:6379");
    check_redact("redis//:hunter2@h", "redis//:***@h"); /* malformed */
    check_redact("redis:/:hunter2@h:1", "redis:***@h:1");
    check_redact("redsi://u:hun/ter2@h/0?x=1", "redsi://u:***@h/0?x=1");
    check_redact("redis://:hunter2@h?prefix=a@b", "redis://:***@h?prefix=a@b");
    check_redact("redsi://:hun?ter2@h:1/0", "redsi://:***@h:1/0");
    check_redact("redsi://:hun#ter2@h:1", "redsi://:***@h:1");
    check_redact("zk://h:2181/lockd?password_file=/run/pw",
                 "zk://h:2181/lockd?password_file=/run/pw");
    url_redact("redis://:hunter2@h", small, sizeof(small));
    CHECK_STR_EQ(small, "redis://:**");
}

/* Found by tests/fuzz/fuzz_url.c: url_parse() reads the user info up to
 * the last '@' before '/' or '?', so "p#secret" is the password it hands
 * the store; url_redact() stopped the user info at '#' and printed it. */
static void test_issue_18_url_redact_password_with_hash(void)
{
    check_redact("mysql://u:p#secret@h/db", "mysql://u:***@h/db");
    check_redact("redis://:a#b@h:6379/0?prefix=x",
                 "redis://:***@h:6379/0?prefix=x");
    check_redact("redis://h:1#frag", "redis://h:1#frag");
}

static void test_url_resolve_password_from_file_or_env(void)
{
    char path[] = "/tmp/lockd-pw-XXXXXX", err[256];
    int fd = mkstemp(path);
    struct url u;

    CHECK(fd >= 0);
    CHECK(write(fd, "s3cret\nignored\n", 15) == 15);
    close(fd);
    {
        char url[128];
        snprintf(url, sizeof(url), "redis://h?password_file=%s", path);
        CHECK_EQ_INT(url_parse(url, &u), 0);
        CHECK_EQ_INT(url_resolve_password(&u, NULL, err, sizeof(err)), 0);
        CHECK_STR_EQ(u.password, "s3cret");
        url_cleanup(&u);
        snprintf(url, sizeof(url), "redis://:x@h?password_file=%s", path);
        CHECK_EQ_INT(url_parse(url, &u), 0);
        CHECK_EQ_INT(url_resolve_password(&u, NULL, err, sizeof(err)), -1);
        url_cleanup(&u);
    }
    CHECK_EQ_INT(url_parse("redis://h?password_file=/nonexistent/pw", &u), 0);
    CHECK_EQ_INT(url_resolve_password(&u, NULL, err, sizeof(err)), -1);
    CHECK(strstr(err, "/nonexistent/pw") != NULL);
    url_cleanup(&u);
    setenv("LOCKD_TEST_PW", "fromenv", 1);
    CHECK_EQ_INT(url_parse("redis://h", &u), 0);
    CHECK_EQ_INT(url_resolve_password(&u, "LOCKD_TEST_PW", err, sizeof(err)),
                 0);
    CHECK_STR_EQ(u.password, "fromenv");
    url_cleanup(&u);
    CHECK_EQ_INT(url_parse("redis://:mine@h", &u), 0);
    CHECK_EQ_INT(url_resolve_password(&u, "LOCKD_TEST_PW", err, sizeof(err)),
                 0);
    CHECK_STR_EQ(u.password, "mine");
    url_cleanup(&u);
    unsetenv("LOCKD_TEST_PW");
    unlink(path);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_url_parse_redis_with_password_db_and_prefix),
    CHECK_CASE(test_url_parse_user_and_escaped_password),
    CHECK_CASE(test_url_parse_hosts_lists_and_v6),
    CHECK_CASE(test_url_parse_query_params),
    CHECK_CASE(test_url_parse_rejects_malformed),
    CHECK_CASE(test_url_check_params),
    CHECK_CASE(test_url_redact_hides_every_password),
    CHECK_CASE(test_issue_18_url_redact_password_with_hash),
    CHECK_CASE(test_url_resolve_password_from_file_or_env),
    CHECK_CASE(test_parse_u64_accepts_decimal_in_range),
    CHECK_CASE(test_put_u64_is_decimal),
    CHECK_CASE(test_parse_u64_rejects_junk_signs_overflow_range),
    CHECK_CASE(test_token_eq_is_exact),
    CHECK_CASE(test_hex_round_trips_lower_case_only),
    CHECK_CASE(test_open_finds_schemes),
    CHECK_CASE(test_result_strings_are_distinct),
    CHECK_CASE(test_clocks_move_forward),
};

int main(int argc, char **argv)
{
    log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_TEXT);
    return CHECK_MAIN(cases);
}

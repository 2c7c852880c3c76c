/*
 * tests/unit/test_codec.c - api/: key decoding, parameter strictness
 * (codec_parse_params through struct api_request), the router end to end
 * on a real memory backend, the data-driven cases in tests/data/requests/
 * (shared with tests/e2e/test_api.py), and a failing-allocation torture
 * loop over the JSON paths (json_set_alloc_funcs), as curl's torture mode
 * and SQLite's fault tests do.
 */
#include "api/codec.h"

#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/authz.h"
#include "api/handlers.h"
#include "api/router.h"
#include "backends/backend.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/text.h"
#include "tests/unit/check.h"

#define MAX_TTL  86400000u
#define MAX_WAIT 300000u
#define AUTH     "s3cret-bearer-token-0123456789"

#define ALLOW_ACQUIRE (API_P_TTL_MS | API_P_WAIT_MS | API_P_OWNER)
#define ALLOW_RENEW   (API_P_TOKEN | API_P_TTL_MS)
#define ALLOW_RELEASE API_P_TOKEN

/* ---- a request as the server would build it ---- */

struct fake_req {
    struct api_request rq;
    char qtext[2048]; /* the query, split in place */
    struct api_param q[16];
    const char *tokens[4];
    const char *idem[4];
};

/* Split query ("a=1&b&c=x+y") like the server: '&' separates, no '=' means
 * a NULL value, '+' is already a space, escapes stay. */
static void fake_query(struct fake_req *f, const char *query)
{
    char *s = f->qtext;

    f->rq.nquery = 0;
    f->rq.query = f->q;
    if (query == NULL)
        return;
    snprintf(f->qtext, sizeof(f->qtext), "%s", query);
    for (char *c = s; *c != '\0'; c++)
        if (*c == '+')
            *c = ' ';
    while (*s != '\0' && f->rq.nquery < 16) {
        char *amp = strchr(s, '&');
        char *eq;
        if (amp != NULL)
            *amp = '\0';
        eq = strchr(s, '=');
        if (eq != NULL)
            *eq = '\0';
        f->q[f->rq.nquery].name = s;
        f->q[f->rq.nquery].value = eq != NULL ? eq + 1 : NULL;
        f->rq.nquery++;
        if (amp == NULL)
            break;
        s = amp + 1;
    }
}

/* target is "path[?query]"; tokens NULL-terminated or NULL. */
static void fake_init(struct fake_req *f,
                      const char *method,
                      const char *target,
                      const char *body,
                      const char *const *tokens)
{
    static char path[4096];
    const char *qm = strchr(target, '?');

    memset(f, 0, sizeof(*f));
    snprintf(path, sizeof(path), "%.*s",
             (int)(qm != NULL ? (size_t)(qm - target) : strlen(target)),
             target);
    f->rq.method = method;
    f->rq.path = path;
    f->rq.body = body != NULL ? body : "";
    f->rq.body_len = body != NULL ? strlen(body) : 0;
    fake_query(f, qm != NULL ? qm + 1 : NULL);
    for (size_t i = 0; tokens != NULL && tokens[i] != NULL && i < 4; i++) {
        f->tokens[i] = tokens[i];
        f->rq.nlock_tokens = i + 1;
    }
    f->rq.lock_tokens = f->tokens;
    f->rq.idem_keys = f->idem;
}

/* Idempotency-Key headers (NULL-terminated) on a fake_init()ed request. */
static void fake_idem(struct fake_req *f, const char *const *keys)
{
    f->rq.nidem_keys = 0;
    for (size_t i = 0; keys != NULL && keys[i] != NULL && i < 4; i++) {
        f->idem[i] = keys[i];
        f->rq.nidem_keys = i + 1;
    }
}

static char last_msg[512];

static enum api_error parse(unsigned allowed,
                            const char *body,
                            const char *query,
                            const char *const *tokens,
                            struct api_params *p)
{
    struct fake_req f;
    char target[2100];
    enum api_error err;

    snprintf(target, sizeof(target), "/locks/k%s%s", query != NULL ? "?" : "",
             query != NULL ? query : "");
    fake_init(&f, "POST", target, body, tokens);
    last_msg[0] = '\0';
    err = codec_parse_params(&f.rq, allowed, MAX_TTL, MAX_WAIT, p, last_msg,
                             sizeof(last_msg));
    if (err != API_OK) {
        /* on error p is cleaned up and a message says why */
        CHECK(p->owner == NULL && p->token == NULL);
        CHECK(!p->has_ttl_ms && !p->has_token && !p->has_owner);
        CHECK_MSG(last_msg[0] != '\0', "no message for error %d", err);
    }
    return err;
}

/* The result of parsing, params cleaned up. */
static enum api_error parse_err(unsigned allowed,
                                const char *body,
                                const char *query,
                                const char *token)
{
    const char *tokens[2] = { token, NULL };
    struct api_params p;
    enum api_error err = parse(allowed, body, query, tokens, &p);

    if (err == API_OK)
        codec_params_cleanup(&p);
    return err;
}

/* Append s to the string in dst (cap bytes), truncating. */
static void cat(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(dst);

    snprintf(dst + n, cap - n, "%s", s);
}

/* ---- codec_decode_key ---- */

static enum api_error decode(const char *raw, char **key, size_t *len)
{
    char msg[256] = "";
    enum api_error err = codec_decode_key(raw, key, len, msg, sizeof(msg));

    if (err != API_OK) {
        CHECK(*key == NULL);
        CHECK_MSG(msg[0] != '\0', "no message for '%s'", raw);
    }
    return err;
}

static void
check_key(const char *raw, const char *want, size_t want_len, int line)
{
    char *key = NULL;
    size_t len = 0;
    enum api_error err = decode(raw, &key, &len);

    CHECK_MSG(err == API_OK, "line %d: '%s' rejected (%d)", line, raw, err);
    if (err == API_OK) {
        CHECK_MSG(len == want_len && memcmp(key, want, len) == 0,
                  "line %d: '%s' decoded to %zu bytes", line, raw, len);
        CHECK_MSG(key[len] == '\0', "line %d: not NUL-terminated", line);
    }
    free(key);
}

static void check_bad_key(const char *raw, int line)
{
    char *key = NULL;
    size_t len = 0;
    enum api_error err = decode(raw, &key, &len);

    CHECK_MSG(err == API_INVALID_KEY,
              "line %d: '%s' gave %d, not "
              "invalid_key",
              line, raw, err);
    free(key);
}

#define KEY_OK(raw, want) check_key(raw, want, sizeof(want) - 1, __LINE__)
#define KEY_BAD(raw)      check_bad_key(raw, __LINE__)

static void test_decode_key_accepts_plain_and_escaped(void)
{
    KEY_OK("orders", "orders");
    KEY_OK("orders/42", "orders/42");
    KEY_OK("orders%2F42", "orders/42");
    KEY_OK("orders%2f42", "orders/42");
    KEY_OK("a/../b", "a/../b");
    KEY_OK("..", "..");
    KEY_OK("%2E%2E%2F%2E%2E", "../..");
    KEY_OK("/", "/");
    KEY_OK("a+b", "a+b"); /* '+' in the path is a literal '+' */
    KEY_OK("a%20b%22c%25d%27", "a b\"c%d'");
    KEY_OK("%7B%7D%5B%5D", "{}[]");
}

static void test_decode_key_rejects_bad_escapes(void)
{
    KEY_BAD("%zz");
    KEY_BAD("%4");
    KEY_BAD("%");
    KEY_BAD("abc%");
    KEY_BAD("abc%2");
    KEY_BAD("%g0");
    KEY_BAD("%0g");
    KEY_BAD("a%%41");
    KEY_BAD("% 1");
}

static void test_decode_key_rejects_empty_nul_and_controls(void)
{
    KEY_BAD("");
    KEY_BAD("%00");
    KEY_BAD("a%00b");
    KEY_BAD("%01");
    KEY_BAD("%0A");
    KEY_BAD("%0d");
    KEY_BAD("%1F");
    KEY_BAD("%1f");
    KEY_BAD("%7F");
    KEY_BAD("a\tb");
    KEY_BAD("a\x7f");
    /* just outside the control ranges */
    KEY_OK("%20", " ");
    KEY_OK("%7E", "~");
    KEY_OK("%C2%80", "\xc2\x80"); /* U+0080 is not in docs/API.md's ranges */
}

static void test_decode_key_512_bytes_ok_513_rejected(void)
{
    char raw[3 * 600 + 1], want[600];
    char *key = NULL;
    size_t len = 0;

    memset(raw, 'k', 512);
    raw[512] = '\0';
    CHECK_EQ_INT(decode(raw, &key, &len), API_OK);
    CHECK_EQ_INT(len, 512);
    free(key);
    key = NULL;

    raw[512] = 'k';
    raw[513] = '\0';
    CHECK_EQ_INT(decode(raw, &key, &len), API_INVALID_KEY);

    /* the limit is on decoded bytes: 512 escapes of 3 characters each */
    for (int i = 0; i < 512; i++)
        memcpy(raw + 3 * i, "%41", 3);
    raw[3 * 512] = '\0';
    key = NULL;
    CHECK_EQ_INT(decode(raw, &key, &len), API_OK);
    CHECK_EQ_INT(len, 512);
    free(key);
    memcpy(raw + 3 * 512, "%41", 4);
    key = NULL;
    CHECK_EQ_INT(decode(raw, &key, &len), API_INVALID_KEY);

    /* multi-byte: 170 euro signs (510 bytes) + 2 = 512; + 3 = 513 */
    raw[0] = '\0';
    for (int i = 0; i < 170; i++) {
        cat(raw, sizeof(raw), "\xe2\x82\xac");
        memcpy(want + 3 * i, "\xe2\x82\xac", 3);
    }
    cat(raw, sizeof(raw), "ab");
    memcpy(want + 510, "ab", 2);
    key = NULL;
    CHECK_EQ_INT(decode(raw, &key, &len), API_OK);
    CHECK_EQ_INT(len, 512);
    if (key != NULL)
        CHECK(memcmp(key, want, 512) == 0);
    free(key);
    cat(raw, sizeof(raw), "c");
    key = NULL;
    CHECK_EQ_INT(decode(raw, &key, &len), API_INVALID_KEY);
    /* and a sequence cut by the limit is not "512 bytes" either */
    raw[510] = '\0';
    cat(raw, sizeof(raw), "a\xe2\x82\xac");
    key = NULL;
    CHECK_EQ_INT(decode(raw, &key, &len), API_INVALID_KEY);
}

static void test_decode_key_accepts_valid_utf8(void)
{
    KEY_OK("caf%C3%A9", "caf\xc3\xa9");
    KEY_OK("caf\xc3\xa9", "caf\xc3\xa9"); /* raw bytes too */
    KEY_OK("%E2%82%AC", "\xe2\x82\xac");
    KEY_OK("%F0%9F%94%92", "\xf0\x9f\x94\x92");
    KEY_OK("%DF%BF", "\xdf\xbf");               /* U+07FF */
    KEY_OK("%E0%A0%80", "\xe0\xa0\x80");        /* U+0800 */
    KEY_OK("%ED%9F%BF", "\xed\x9f\xbf");        /* U+D7FF */
    KEY_OK("%EE%80%80", "\xee\x80\x80");        /* U+E000 */
    KEY_OK("%EF%BF%BF", "\xef\xbf\xbf");        /* U+FFFF */
    KEY_OK("%F0%90%80%80", "\xf0\x90\x80\x80"); /* U+10000 */
    KEY_OK("%F4%8F%BF%BF", "\xf4\x8f\xbf\xbf"); /* U+10FFFF */
}

static void test_decode_key_rejects_invalid_utf8(void)
{
    /* overlongs */
    KEY_BAD("%C0%AF");
    KEY_BAD("%C1%BF");
    KEY_BAD("%C0%80");
    KEY_BAD("%E0%80%AF");
    KEY_BAD("%E0%9F%BF");
    KEY_BAD("%F0%80%80%AF");
    KEY_BAD("%F0%8F%BF%BF");
    /* surrogates */
    KEY_BAD("%ED%A0%80");
    KEY_BAD("%ED%BF%BF");
    KEY_BAD("%ED%A0%BD%ED%B8%80"); /* a CESU-8 pair */
    /* past U+10FFFF */
    KEY_BAD("%F4%90%80%80");
    KEY_BAD("%F5%80%80%80");
    KEY_BAD("%F7%BF%BF%BF");
    KEY_BAD("%F8%88%80%80%80");
    KEY_BAD("%FE");
    KEY_BAD("%FF");
    /* truncated sequences */
    KEY_BAD("%C3");
    KEY_BAD("a%C3");
    KEY_BAD("%C3A");
    KEY_BAD("%E2%82");
    KEY_BAD("%E2%82z");
    KEY_BAD("%F0%9F%94");
    KEY_BAD("%F0%9F%94a");
    KEY_BAD("\xe2\x82");
    /* lone continuation bytes */
    KEY_BAD("%80");
    KEY_BAD("a%BFb");
    KEY_BAD("%C3%A9%A9");
    KEY_BAD("\x80");
}

static void test_utf8_valid_checks_lengths_exactly(void)
{
    CHECK(text_utf8_valid("", 0));
    CHECK(text_utf8_valid("\xc3\xa9", 2));
    CHECK(!text_utf8_valid("\xc3\xa9", 1)); /* cut by len, not NUL */
    CHECK(!text_utf8_valid("\xe2\x82\xac", 2));
    CHECK(text_utf8_valid("a\0b", 3)); /* NUL is ASCII here */
}

/* ---- codec_parse_params ---- */

static void test_parse_params_empty_body_means_defaults(void)
{
    struct api_params p;

    CHECK_EQ_INT(parse(ALLOW_ACQUIRE, NULL, NULL, NULL, &p), API_OK);
    CHECK(!p.has_ttl_ms && !p.has_wait_ms && !p.has_owner && !p.has_token);
    CHECK(p.owner == NULL && p.token == NULL);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(ALLOW_ACQUIRE, "{}", NULL, NULL, &p), API_OK);
    CHECK(!p.has_ttl_ms && !p.has_wait_ms && !p.has_owner);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(ALLOW_ACQUIRE, " \n{ }\t\n", NULL, NULL, &p), API_OK);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(0, "{}", NULL, NULL, &p), API_OK);
    codec_params_cleanup(&p);
}

static void test_parse_params_reads_body_fields(void)
{
    struct api_params p;

    CHECK_EQ_INT(parse(ALLOW_ACQUIRE,
                       "{\"ttl_ms\":5000,\"wait_ms\":0,\"owner\":\"pod-a/"
                       "worker-3\"}",
                       NULL, NULL, &p),
                 API_OK);
    CHECK(p.has_ttl_ms && p.has_wait_ms && p.has_owner && !p.has_token);
    CHECK_EQ_U64(p.ttl_ms, 5000);
    CHECK_EQ_U64(p.wait_ms, 0);
    CHECK_STR_EQ(p.owner, "pod-a/worker-3");
    codec_params_cleanup(&p);
    CHECK(p.owner == NULL);

    CHECK_EQ_INT(
        parse(ALLOW_RENEW, "{\"token\":\"abc\",\"ttl_ms\":1}", NULL, NULL, &p),
        API_OK);
    CHECK_STR_EQ(p.token, "abc");
    CHECK_EQ_U64(p.ttl_ms, 1);
    codec_params_cleanup(&p);

    /* bounds are inclusive */
    CHECK_EQ_INT(parse(ALLOW_ACQUIRE,
                       "{\"ttl_ms\":86400000,\"wait_ms\":300000}", NULL, NULL,
                       &p),
                 API_OK);
    CHECK_EQ_U64(p.ttl_ms, MAX_TTL);
    CHECK_EQ_U64(p.wait_ms, MAX_WAIT);
    codec_params_cleanup(&p);

    /* owner: "" allowed, Unicode allowed, 128 bytes allowed */
    CHECK_EQ_INT(parse(ALLOW_ACQUIRE, "{\"owner\":\"\"}", NULL, NULL, &p),
                 API_OK);
    CHECK(p.has_owner);
    CHECK_STR_EQ(p.owner, "");
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(ALLOW_ACQUIRE,
                       "{\"owner\":\"caf\\u00e9 \\ud83d\\udd12\"}", NULL, NULL,
                       &p),
                 API_OK);
    CHECK_STR_EQ(p.owner, "caf\xc3\xa9 \xf0\x9f\x94\x92");
    codec_params_cleanup(&p);
}

static void test_parse_params_reads_query(void)
{
    struct api_params p;

    CHECK_EQ_INT(parse(ALLOW_ACQUIRE, NULL,
                       "ttl_ms=5000&wait_ms=250&owner=pod-a%2Fworker+3", NULL,
                       &p),
                 API_OK);
    CHECK_EQ_U64(p.ttl_ms, 5000);
    CHECK_EQ_U64(p.wait_ms, 250);
    CHECK_STR_EQ(p.owner, "pod-a/worker 3");
    codec_params_cleanup(&p);

    CHECK_EQ_INT(parse(ALLOW_RELEASE, NULL, "token=0123abcd", NULL, &p),
                 API_OK);
    CHECK_STR_EQ(p.token, "0123abcd");
    codec_params_cleanup(&p);

    /* an empty owner in the query is "" too */
    CHECK_EQ_INT(parse(ALLOW_ACQUIRE, NULL, "owner=", NULL, &p), API_OK);
    CHECK(p.has_owner);
    CHECK_STR_EQ(p.owner, "");
    codec_params_cleanup(&p);

    /* body and query together, different fields */
    CHECK_EQ_INT(parse(ALLOW_ACQUIRE, "{\"ttl_ms\":7}", "wait_ms=9", NULL, &p),
                 API_OK);
    CHECK_EQ_U64(p.ttl_ms, 7);
    CHECK_EQ_U64(p.wait_ms, 9);
    codec_params_cleanup(&p);
}

static void test_parse_params_reads_lock_token_header(void)
{
    struct api_params p;
    const char *one[] = { "0123456789abcdef0123456789abcdef", NULL };

    CHECK_EQ_INT(parse(ALLOW_RENEW, "{\"ttl_ms\":100}", NULL, one, &p), API_OK);
    CHECK(p.has_token);
    CHECK_STR_EQ(p.token, one[0]);
    CHECK_EQ_U64(p.ttl_ms, 100);
    codec_params_cleanup(&p);
}

static void test_parse_params_rejects_unknown_field(void)
{
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"ttl\":5}", NULL, NULL),
                 API_INVALID_PARAMETER);
    CHECK_CONTAINS(last_msg, "ttl");
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"TTL_MS\":5}", NULL, NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"ttl_ms \":5}", NULL, NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"\":5}", NULL, NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "ttl=5", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "ttl_ms=5&x=1", NULL),
                 API_INVALID_PARAMETER);
    CHECK_CONTAINS(last_msg, "'x'");
    /* known names that this route does not take */
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"token\":\"t\"}", NULL, NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(
        parse_err(ALLOW_RENEW, "{\"token\":\"t\",\"wait_ms\":1}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(
        parse_err(ALLOW_RELEASE, "{\"token\":\"t\",\"ttl_ms\":1}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_RELEASE, NULL, "token=t&owner=x", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(0, "{\"ttl_ms\":1}", NULL, NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(0, NULL, "ttl_ms=1", NULL), API_INVALID_PARAMETER);
    /* the Lock-Token header where no token is taken */
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, NULL, "tok"),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(0, NULL, NULL, "tok"), API_INVALID_PARAMETER);
}

static void test_parse_params_rejects_field_given_twice(void)
{
    const char *two[] = { "a", "b", NULL };
    struct api_params p;

    /* duplicate JSON keys: invalid_parameter, not invalid_json */
    CHECK_EQ_INT(
        parse_err(ALLOW_ACQUIRE, "{\"ttl_ms\":1,\"ttl_ms\":2}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(
        parse_err(ALLOW_ACQUIRE, "{\"ttl_ms\":1,\"ttl_ms\":1}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"x\":1,\"x\":2}", NULL, NULL),
                 API_INVALID_PARAMETER);
    /* query and body */
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"ttl_ms\":1}", "ttl_ms=1", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"owner\":\"a\"}", "owner=a", NULL),
                 API_INVALID_PARAMETER);
    /* repeated in the query */
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "wait_ms=1&wait_ms=1", NULL),
                 API_INVALID_PARAMETER);
    /* token: header and query, header and body, query and body, 2 headers */
    CHECK_EQ_INT(parse_err(ALLOW_RELEASE, NULL, "token=a", "a"),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_RELEASE, "{\"token\":\"a\"}", NULL, "a"),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_RELEASE, "{\"token\":\"a\"}", "token=a", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse(ALLOW_RELEASE, NULL, NULL, two, &p),
                 API_INVALID_PARAMETER);
}

static void test_parse_params_rejects_wrong_types(void)
{
    static const char *const bodies[] = {
        "{\"ttl_ms\":\"5\"}", "{\"ttl_ms\":1.0}",    "{\"ttl_ms\":1e3}",
        "{\"ttl_ms\":1E3}",   "{\"ttl_ms\":5.5}",    "{\"ttl_ms\":true}",
        "{\"ttl_ms\":false}", "{\"ttl_ms\":null}",   "{\"ttl_ms\":[5]}",
        "{\"ttl_ms\":{}}",    "{\"wait_ms\":\"\"}",  "{\"wait_ms\":0.0}",
        "{\"wait_ms\":-0.0}", "{\"owner\":5}",       "{\"owner\":null}",
        "{\"owner\":true}",   "{\"owner\":[\"a\"]}", "{\"owner\":{}}",
    };
    static const char *const token_bodies[] = {
        "{\"token\":5}",
        "{\"token\":null}",
        "{\"token\":[]}",
        "{\"token\":true}",
    };

    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        CHECK_MSG(parse_err(ALLOW_ACQUIRE, bodies[i], NULL, NULL) ==
                      API_INVALID_PARAMETER,
                  "%s", bodies[i]);
    for (size_t i = 0; i < sizeof(token_bodies) / sizeof(token_bodies[0]); i++)
        CHECK_MSG(parse_err(ALLOW_RENEW, token_bodies[i], NULL, NULL) ==
                      API_INVALID_PARAMETER,
                  "%s", token_bodies[i]);
}

static void test_parse_params_rejects_out_of_range_integers(void)
{
    static const char *const bodies[] = {
        "{\"ttl_ms\":0}",
        "{\"ttl_ms\":-1}",
        "{\"ttl_ms\":-0}",
        "{\"ttl_ms\":86400001}",
        "{\"wait_ms\":-1}",
        "{\"wait_ms\":300001}",
        "{\"ttl_ms\":9223372036854775807}",
        "{\"ttl_ms\":-9223372036854775808}",
        "{\"ttl_ms\":9223372036854775808}",  /* past json_int_t */
        "{\"ttl_ms\":18446744073709551616}", /* past uint64 */
        "{\"ttl_ms\":99999999999999999999999999999}",
        "{\"wait_ms\":-99999999999999999999999999999}",
    };
    static const char *const queries[] = {
        "ttl_ms=0",
        "ttl_ms=-1",
        "ttl_ms=%2B5",
        "ttl_ms=+5", /* '+' is a space */
        "ttl_ms=5+",
        "ttl_ms=%205",
        "ttl_ms=5.0",
        "ttl_ms=1e3",
        "ttl_ms=0x10",
        "ttl_ms=",
        "ttl_ms=86400001",
        "ttl_ms=18446744073709551616",
        "ttl_ms=99999999999999999999999",
        "wait_ms=300001",
        "wait_ms=-0",
        "wait_ms=5%00",
        "ttl_ms=%35%30", /* "50", escaped: decoded, fine */
    };

    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        CHECK_MSG(parse_err(ALLOW_ACQUIRE, bodies[i], NULL, NULL) ==
                      API_INVALID_PARAMETER,
                  "%s gave %d", bodies[i],
                  parse_err(ALLOW_ACQUIRE, bodies[i], NULL, NULL));
    for (size_t i = 0; i + 1 < sizeof(queries) / sizeof(queries[0]); i++)
        CHECK_MSG(parse_err(ALLOW_ACQUIRE, NULL, queries[i], NULL) ==
                      API_INVALID_PARAMETER,
                  "%s", queries[i]);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "ttl_ms=%35%30", NULL), API_OK);
}

static void test_parse_params_rejects_query_without_value(void)
{
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "ttl_ms", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "owner", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_RELEASE, NULL, "token", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "owner=%zz", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "own%zz=1", NULL),
                 API_INVALID_PARAMETER);
}

static void test_parse_params_non_object_body_is_invalid_json(void)
{
    static const char *const bodies[] = {
        " ",
        "\n",
        "\t\r\n ",
        "[]",
        "[{\"ttl_ms\":5}]",
        "5",
        "\"str\"",
        "null",
        "true",
        "ttl_ms=5",
        "{",
        "{\"ttl_ms\":5",
        "{\"ttl_ms\":5,}",
        "{} x",
        "{}{}",
        "{} {\"ttl_ms\":5}",
        "{'ttl_ms':5}",
        "{\"ttl_ms\":05}",
        "{\"owner\":\"\xff\"}", /* not UTF-8: jansson refuses the JSON */
        "\xef\xbb\xbf{}",       /* a BOM is not JSON whitespace */
    };

    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        enum api_error e = parse_err(ALLOW_ACQUIRE, bodies[i], NULL, NULL);
        CHECK_MSG(e == API_INVALID_JSON, "body #%zu '%s' gave %d", i, bodies[i],
                  e);
    }
    /* a NUL byte inside the body */
    {
        struct fake_req f;
        struct api_params p;
        char msg[256];
        fake_init(&f, "POST", "/locks/k", NULL, NULL);
        f.rq.body = "{}\0{}";
        f.rq.body_len = 5;
        CHECK_EQ_INT(codec_parse_params(&f.rq, ALLOW_ACQUIRE, MAX_TTL, MAX_WAIT,
                                        &p, msg, sizeof(msg)),
                     API_INVALID_JSON);
    }
}

static void test_parse_params_checks_owner(void)
{
    char body[400], q[400];
    struct api_params p;

    /* 128 bytes fine, 129 not */
    snprintf(body, sizeof(body), "{\"owner\":\"%0128d\"}", 0);
    CHECK_EQ_INT(parse(ALLOW_ACQUIRE, body, NULL, NULL, &p), API_OK);
    CHECK_EQ_INT(p.owner != NULL ? strlen(p.owner) : 0, 128);
    codec_params_cleanup(&p);
    snprintf(body, sizeof(body), "{\"owner\":\"%0129d\"}", 0);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, body, NULL, NULL),
                 API_INVALID_PARAMETER);
    /* 42 three-byte characters + 2 = 128 bytes (not characters) */
    snprintf(body, sizeof(body), "{\"owner\":\"");
    for (int i = 0; i < 42; i++)
        cat(body, sizeof(body), "\xe2\x82\xac");
    cat(body, sizeof(body), "ab\"}");
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, body, NULL, NULL), API_OK);
    body[strlen(body) - 2] = '\0';
    cat(body, sizeof(body), "c\"}");
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, body, NULL, NULL),
                 API_INVALID_PARAMETER);
    snprintf(q, sizeof(q), "owner=%0129d", 0);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, q, NULL),
                 API_INVALID_PARAMETER);
    /* control characters, NUL, bad UTF-8 */
    CHECK_EQ_INT(
        parse_err(ALLOW_ACQUIRE, "{\"owner\":\"a\\u0001\"}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"owner\":\"a\\n\"}", NULL, NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(
        parse_err(ALLOW_ACQUIRE, "{\"owner\":\"a\\u007f\"}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "owner=a%09b", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "owner=a%00b", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "owner=a%FFb", NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, NULL, "owner=%ED%A0%80", NULL),
                 API_INVALID_PARAMETER);
}

static void test_parse_params_keeps_empty_token(void)
{
    struct api_params p;
    const char *empty[] = { "", NULL };

    /* codec keeps "" (the handlers answer missing_token for it) */
    CHECK_EQ_INT(parse(ALLOW_RELEASE, "{\"token\":\"\"}", NULL, NULL, &p),
                 API_OK);
    CHECK(p.has_token);
    CHECK_STR_EQ(p.token, "");
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(ALLOW_RELEASE, NULL, NULL, empty, &p), API_OK);
    CHECK_STR_EQ(p.token, "");
    codec_params_cleanup(&p);
}

/*
 * Regression (api/codec.c parse_body()): a JSON body with a \u0000 escape
 * in a string, e.g. {"owner":"a\u0000b"}, is a JSON object (RFC 8259
 * allows the escape), so per docs/API.md and the brief it is 400
 * invalid_parameter (owner/token must not hold NUL or control characters;
 * a field name with NUL is unknown). The codec loads with JSON_ALLOW_NUL,
 * takes field names with their length, and maps jansson's "NUL byte in
 * object key" to invalid_parameter.
 */
static void test_parse_params_nul_escape_is_invalid_parameter(void)
{
    CHECK_EQ_INT(
        parse_err(ALLOW_ACQUIRE, "{\"owner\":\"a\\u0000b\"}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(
        parse_err(ALLOW_RELEASE, "{\"token\":\"a\\u0000b\"}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"ttl_ms\\u0000\":5}", NULL, NULL),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_ACQUIRE, "{\"ttl_ms\\u0000x\":5}", NULL, NULL),
                 API_INVALID_PARAMETER);
}

/* ---- the lock kinds' parameters: mode, limit, all, Idempotency-Key ---- */

#define ALLOW_KINDS \
    (ALLOW_ACQUIRE | API_P_MODE | API_P_LIMIT | API_P_TOKEN | API_P_IDEM_KEY)

/* parse() with Idempotency-Key headers (NULL-terminated) too. */
static enum api_error parse_idem(unsigned allowed,
                                 const char *body,
                                 const char *const *keys,
                                 struct api_params *p)
{
    struct fake_req f;
    enum api_error err;

    fake_init(&f, "POST", "/locks/k", body, NULL);
    fake_idem(&f, keys);
    last_msg[0] = '\0';
    err = codec_parse_params(&f.rq, allowed, MAX_TTL, MAX_WAIT, p, last_msg,
                             sizeof(last_msg));
    if (err != API_OK) {
        CHECK(p->idem_key == NULL && !p->has_idem_key);
        CHECK_MSG(last_msg[0] != '\0', "no message for error %d", err);
    }
    return err;
}

static void test_parse_params_reads_mode_limit_all(void)
{
    struct api_params p;

    CHECK_EQ_INT(
        parse(ALLOW_KINDS, "{\"mode\":\"shared\",\"limit\":3}", NULL, NULL, &p),
        API_OK);
    CHECK(p.has_mode && p.has_limit && !p.has_all);
    CHECK_EQ_INT(p.mode, LOCK_SHARED);
    CHECK_EQ_U64(p.limit, 3);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(ALLOW_KINDS, NULL, "mode=exclusive", NULL, &p), API_OK);
    CHECK(p.has_mode && !p.has_limit);
    CHECK_EQ_INT(p.mode, LOCK_EXCLUSIVE);
    codec_params_cleanup(&p);
    /* bounds are inclusive; query and body may share the work */
    CHECK_EQ_INT(
        parse(ALLOW_KINDS, "{\"limit\":10000}", "mode=shared", NULL, &p),
        API_OK);
    CHECK_EQ_U64(p.limit, LOCK_LIMIT_MAX);
    CHECK_EQ_INT(p.mode, LOCK_SHARED);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(ALLOW_KINDS, NULL, "mode=shared&limit=1", NULL, &p),
                 API_OK);
    CHECK_EQ_U64(p.limit, 1);
    codec_params_cleanup(&p);
    /* all: JSON booleans, "true"/"false" in the query */
    CHECK_EQ_INT(
        parse(ALLOW_RELEASE | API_P_ALL, "{\"all\":true}", NULL, NULL, &p),
        API_OK);
    CHECK(p.has_all && p.all);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(
        parse(ALLOW_RELEASE | API_P_ALL, "{\"all\":false}", NULL, NULL, &p),
        API_OK);
    CHECK(p.has_all && !p.all);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(ALLOW_RELEASE | API_P_ALL, NULL, "all=true", NULL, &p),
                 API_OK);
    CHECK(p.has_all && p.all);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse(ALLOW_RELEASE | API_P_ALL, NULL, "all=false", NULL, &p),
                 API_OK);
    CHECK(p.has_all && !p.all);
    codec_params_cleanup(&p);
    /* a token on acquire, from each place */
    CHECK_EQ_INT(parse(ALLOW_KINDS, "{\"token\":\"abc\"}", NULL, NULL, &p),
                 API_OK);
    CHECK_STR_EQ(p.token, "abc");
    codec_params_cleanup(&p);
}

static void test_parse_params_rejects_bad_mode_limit_all(void)
{
    static const char *const bodies[] = {
        "{\"mode\":\"read\"}",
        "{\"mode\":\"Shared\"}",
        "{\"mode\":\"SHARED\"}",
        "{\"mode\":\"shared \"}",
        "{\"mode\":\"\"}",
        "{\"mode\":\"shared\\u0000\"}",
        "{\"mode\":1}",
        "{\"mode\":null}",
        "{\"mode\":true}",
        "{\"mode\":[\"shared\"]}",
        "{\"mode\":{}}",
        "{\"mode\":\"shared\",\"mode\":\"shared\"}",
        "{\"limit\":0}",
        "{\"limit\":-1}",
        "{\"limit\":10001}",
        "{\"limit\":4294967297}",
        "{\"limit\":99999999999999999999999}",
        "{\"limit\":3.0}",
        "{\"limit\":3e0}",
        "{\"limit\":\"3\"}",
        "{\"limit\":null}",
        "{\"limit\":true}",
        "{\"limit\":1,\"limit\":1}",
        "{\"Mode\":\"shared\"}",
        "{\"limits\":3}",
        "{\"all\":true}", /* acquire takes no all */
    };
    static const char *const queries[] = {
        "mode=",
        "mode",
        "mode=read",
        "mode=shared%00",
        "mode=%73hared%20",
        "mode=1",
        "limit=",
        "limit",
        "limit=0",
        "limit=-1",
        "limit=10001",
        "limit=%2B3",
        "limit=3.0",
        "limit=0x3",
        "limit=+3",
        "limit=1e3",
        "mode=shared&mode=shared",
        "limit=1&limit=1",
        "all=true",
    };
    static const char *const release_bodies[] = {
        "{\"all\":1}",           "{\"all\":0}",
        "{\"all\":\"true\"}",    "{\"all\":null}",
        "{\"all\":[true]}",      "{\"all\":true,\"all\":true}",
        "{\"mode\":\"shared\"}", "{\"limit\":1}",
    };
    static const char *const release_queries[] = {
        "all=",
        "all",
        "all=TRUE",
        "all=True",
        "all=1",
        "all=0",
        "all=yes",
        "all=on",
        "all=true%20",
        "all=%74rue%00",
        "all=true&all=true",
        "all=false&all=true",
    };

    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        CHECK_MSG(parse_err(ALLOW_KINDS, bodies[i], NULL, NULL) ==
                      API_INVALID_PARAMETER,
                  "%s", bodies[i]);
    for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++)
        CHECK_MSG(parse_err(ALLOW_KINDS, NULL, queries[i], NULL) ==
                      API_INVALID_PARAMETER,
                  "%s", queries[i]);
    /* body and query together */
    CHECK_EQ_INT(
        parse_err(ALLOW_KINDS, "{\"mode\":\"shared\"}", "mode=shared", NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_KINDS, "{\"limit\":2}", "limit=2", NULL),
                 API_INVALID_PARAMETER);
    for (size_t i = 0; i < sizeof(release_bodies) / sizeof(release_bodies[0]);
         i++)
        CHECK_MSG(parse_err(ALLOW_RELEASE | API_P_ALL, release_bodies[i], NULL,
                            "t") == API_INVALID_PARAMETER,
                  "%s", release_bodies[i]);
    for (size_t i = 0; i < sizeof(release_queries) / sizeof(release_queries[0]);
         i++)
        CHECK_MSG(parse_err(ALLOW_RELEASE | API_P_ALL, NULL, release_queries[i],
                            "t") == API_INVALID_PARAMETER,
                  "%s", release_queries[i]);
    CHECK_EQ_INT(
        parse_err(ALLOW_RELEASE | API_P_ALL, "{\"all\":true}", "all=true", "t"),
        API_INVALID_PARAMETER);
    /* renew takes none of them */
    CHECK_EQ_INT(parse_err(ALLOW_RENEW, "{\"all\":true}", NULL, "t"),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_RENEW, NULL, "mode=shared", "t"),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_RENEW, NULL, "limit=2", "t"),
                 API_INVALID_PARAMETER);
}

static void test_parse_params_checks_idempotency_key(void)
{
    const char *one[] = { "4f1c2a9e-7d1b-4c7e-9a55-0d1f2e3c4b5a", NULL };
    const char *spaced[] = { "retry of order 42 ~!@#$%^&*()", NULL };
    const char *two[] = { "a", "a", NULL };
    const char *empty[] = { "", NULL };
    const char *del[] = { "a\x7f", NULL };
    const char *tab[] = { "a\tb", NULL };
    const char *utf8[] = { "caf\xc3\xa9", NULL };
    char k128[130], k129[131];
    const char *max[] = { k128, NULL }, *over[] = { k129, NULL };
    struct api_params p;

    memset(k128, 'k', 128);
    k128[128] = '\0';
    memset(k129, 'k', 129);
    k129[129] = '\0';
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, one, &p), API_OK);
    CHECK(p.has_idem_key);
    CHECK_STR_EQ(p.idem_key, one[0]);
    codec_params_cleanup(&p);
    CHECK(p.idem_key == NULL);
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, spaced, &p), API_OK);
    CHECK_STR_EQ(p.idem_key, spaced[0]);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, max, &p), API_OK);
    CHECK_EQ_INT(strlen(p.idem_key), 128);
    codec_params_cleanup(&p);
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, NULL, &p), API_OK);
    CHECK(!p.has_idem_key && p.idem_key == NULL);
    codec_params_cleanup(&p);

    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, over, &p),
                 API_INVALID_PARAMETER);
    CHECK_CONTAINS(last_msg, "Idempotency-Key");
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, two, &p), API_INVALID_PARAMETER);
    CHECK_CONTAINS(last_msg, "twice");
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, empty, &p),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, del, &p), API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, tab, &p), API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, NULL, utf8, &p),
                 API_INVALID_PARAMETER);
    /* where it is not taken: renew, release, inspect; a bad body first */
    CHECK_EQ_INT(parse_idem(ALLOW_RENEW, NULL, one, &p), API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_idem(ALLOW_RELEASE | API_P_ALL, NULL, one, &p),
                 API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_idem(0, NULL, one, &p), API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_idem(ALLOW_KINDS, "{\"owner\":5}", one, &p),
                 API_INVALID_PARAMETER);
    CHECK(p.owner == NULL);
    /* it is a header, never a field or a query parameter */
    CHECK_EQ_INT(
        parse_err(ALLOW_KINDS, "{\"idempotency_key\":\"a\"}", NULL, NULL),
        API_INVALID_PARAMETER);
    CHECK_EQ_INT(parse_err(ALLOW_KINDS, NULL, "Idempotency-Key=a", NULL),
                 API_INVALID_PARAMETER);
}

/* A grant's body, byte for byte: it is written by hand, not by jansson
 * or printf. */
static void test_grant_body_bytes(void)
{
    struct api_response resp = { 0 };
    struct lock_grant g = { .fence = 9,
                            .expires_at_ms = 1795262430123LL,
                            .mode = LOCK_SHARED,
                            .limit = 3,
                            .holds = 1 };
    const char *tok = "0123456789abcdef0123456789abcdef";

    codec_grant(&resp, 201, "k\"\\\x01", 4, tok, &g, 5000);
    CHECK_EQ_INT(resp.status, 201);
    CHECK_STR_EQ(resp.body,
                 "{\"key\":\"k\\\"\\\\\\u0001\",\"token\":"
                 "\"0123456789abcdef0123456789abcdef\",\"fence\":9,"
                 "\"ttl_ms\":5000,\"expires_at\":\"2026-11-21T12:00:30.123Z\","
                 "\"mode\":\"shared\",\"holds\":1,\"limit\":3}");
    CHECK_EQ_INT((int)resp.len, (int)strlen(resp.body));
    /* the widest numbers, no holds from the store (one), the epoch; a
     * limit beside an exclusive grant is not shown */
    g.fence = UINT64_MAX;
    g.holds = 0;
    g.expires_at_ms = 0;
    g.mode = LOCK_EXCLUSIVE;
    codec_grant(&resp, 200, "k", 1, tok, &g, UINT64_MAX);
    CHECK_EQ_INT(resp.status, 200);
    CHECK_STR_EQ(resp.body,
                 "{\"key\":\"k\",\"token\":"
                 "\"0123456789abcdef0123456789abcdef\",\"fence\":"
                 "18446744073709551615,\"ttl_ms\":18446744073709551615,"
                 "\"expires_at\":\"1970-01-01T00:00:00.000Z\",\"mode\":"
                 "\"exclusive\",\"holds\":1}");
    /* shared without a limit, holds as the store says */
    g.mode = LOCK_SHARED;
    g.limit = 0;
    g.holds = 4294967295u;
    g.expires_at_ms = 253402300799999LL; /* the last ms of 9999 */
    codec_grant(&resp, 201, "", 0, "t", &g, 1);
    CHECK_STR_EQ(resp.body, "{\"key\":\"\",\"token\":\"t\",\"fence\":"
                            "18446744073709551615,\"ttl_ms\":1,\"expires_at\":"
                            "\"9999-12-31T23:59:59.999Z\",\"mode\":\"shared\","
                            "\"holds\":4294967295}");
    api_response_cleanup(&resp);
}

/* A release's answer, written by hand: the key escaped as a grant's,
 * released when no hold is left, the widest hold count. */
static void test_release_body_bytes(void)
{
    struct api_response resp = { 0 };

    codec_released(&resp, "k\"\\\x01/", 5, 0);
    CHECK_EQ_INT(resp.status, 200);
    CHECK_STR_EQ(
        resp.body,
        "{\"key\":\"k\\\"\\\\\\u0001/\",\"released\":true,\"holds\":0}");
    CHECK_EQ_INT((int)resp.len, (int)strlen(resp.body));
    CHECK_STR_EQ(resp.content_type, "application/json");
    codec_released(&resp, "", 0, 4294967295u);
    CHECK_STR_EQ(resp.body,
                 "{\"key\":\"\",\"released\":false,\"holds\":4294967295}");
    api_response_cleanup(&resp);
}

static void test_format_time_is_rfc3339_utc_ms(void)
{
    char buf[40];

    codec_format_time(0, buf, sizeof(buf));
    CHECK_STR_EQ(buf, "1970-01-01T00:00:00.000Z");
    codec_format_time(1795262430123LL, buf, sizeof(buf));
    CHECK_STR_EQ(buf, "2026-11-21T12:00:30.123Z");
    codec_format_time(1795262430999LL, buf, sizeof(buf));
    CHECK_STR_EQ(buf, "2026-11-21T12:00:30.999Z");
    codec_format_time(951782400007LL, buf, sizeof(buf)); /* 2000-02-29 */
    CHECK_STR_EQ(buf, "2000-02-29T00:00:00.007Z");
    codec_format_time(-5, buf, sizeof(buf)); /* before the epoch: at it */
    CHECK_STR_EQ(buf, "1970-01-01T00:00:00.000Z");
    codec_format_time(253402300800000LL, buf, sizeof(buf)); /* year 10000 */
    CHECK_STR_EQ(buf, "10000-01-01T00:00:00.000Z");
    codec_format_time(1795262430123LL, buf, 10); /* cut to fit */
    CHECK_STR_EQ(buf, "2026-11-2");
}

static void test_error_table_matches_api_md(void)
{
    static const struct {
        enum api_error e;
        unsigned status;
        const char *code;
    } rows[] = {
        { API_INVALID_KEY, 400, "invalid_key" },
        { API_INVALID_JSON, 400, "invalid_json" },
        { API_INVALID_PARAMETER, 400, "invalid_parameter" },
        { API_MISSING_TOKEN, 400, "missing_token" },
        { API_UNAUTHORIZED, 401, "unauthorized" },
        { API_LOCK_NOT_FOUND, 404, "lock_not_found" },
        { API_NOT_FOUND, 404, "not_found" },
        { API_METHOD_NOT_ALLOWED, 405, "method_not_allowed" },
        { API_LOCK_HELD, 409, "lock_held" },
        { API_TOKEN_MISMATCH, 409, "token_mismatch" },
        { API_LIMIT_MISMATCH, 409, "limit_mismatch" },
        { API_BODY_TOO_LARGE, 413, "body_too_large" },
        { API_BACKEND_UNAVAILABLE, 503, "backend_unavailable" },
        { API_SHUTTING_DOWN, 503, "shutting_down" },
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct api_response resp = { 0 };
        json_t *root;

        CHECK_EQ_INT(api_error_status(rows[i].e), rows[i].status);
        CHECK_STR_EQ(api_error_code(rows[i].e), rows[i].code);
        codec_error(&resp, rows[i].e, NULL);
        CHECK_EQ_INT(resp.status, rows[i].status);
        CHECK_STR_EQ(resp.content_type, "application/json");
        root = json_loadb(resp.body, resp.len, 0, NULL);
        CHECK_STR_EQ(json_string_value(json_object_get(
                         json_object_get(root, "error"), "code")),
                     rows[i].code);
        CHECK(json_string_length(json_object_get(json_object_get(root, "error"),
                                                 "message")) > 0);
        json_decref(root);
        api_response_cleanup(&resp);
    }
    CHECK_EQ_INT(api_error_from(BACKEND_HELD), API_LOCK_HELD);
    CHECK_EQ_INT(api_error_from(BACKEND_NOT_FOUND), API_LOCK_NOT_FOUND);
    CHECK_EQ_INT(api_error_from(BACKEND_MISMATCH), API_TOKEN_MISMATCH);
    CHECK_EQ_INT(api_error_from(BACKEND_UNAVAILABLE), API_BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(api_error_from(BACKEND_LIMIT_MISMATCH), API_LIMIT_MISMATCH);
    CHECK_EQ_INT(api_error_from(BACKEND_HOLDS_MAX), API_INVALID_PARAMETER);
    CHECK_EQ_INT(api_error_from(BACKEND_IDEM_CONFLICT), API_INVALID_PARAMETER);
    CHECK(api_result_message(BACKEND_OK) == NULL);
    CHECK(api_result_message(BACKEND_MISMATCH) == NULL);
}

/* ---- router_dispatch on a real memory backend ---- */

static struct api_config rcfg;

/* The legacy token files of the router's policy ("" when none), kept
 * until router_close() or router_clear_admin(). */
static char tok_path[64], adm_path[64];

static void write_token_file(char *path, size_t pathlen, const char *t)
{
    int fd;

    snprintf(path, pathlen, "/tmp/lockd-test-token-XXXXXX");
    fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, t, strlen(t)) == (ssize_t)strlen(t));
    close(fd);
}

/* rcfg.authz from the token files in force (NULL when none). */
static void router_authz(void)
{
    struct authz_opts o = { 0 };
    char err[256];

    authz_close(rcfg.authz);
    rcfg.authz = NULL;
    o.token_file = tok_path[0] != '\0' ? tok_path : NULL;
    o.admin_file = adm_path[0] != '\0' ? adm_path : NULL;
    if (authz_wanted(&o)) {
        rcfg.authz = authz_open(&o, err, sizeof(err));
        CHECK_MSG(rcfg.authz != NULL, "%s", err);
    }
}

/* auth: the bearer token to require, written to a file first; NULL for
 * none. */
static void router_open(const char *auth)
{
    char err[256];

    memset(&rcfg, 0, sizeof(rcfg));
    tok_path[0] = adm_path[0] = '\0';
    if (auth != NULL)
        write_token_file(tok_path, sizeof(tok_path), auth);
    router_authz();
    CHECK_EQ_INT(
        backend_open("memory://", NULL, &rcfg.backend, err, sizeof(err)),
        BACKEND_OK);
    rcfg.default_ttl_ms = 30000;
    rcfg.max_ttl_ms = MAX_TTL;
    rcfg.max_wait_ms = MAX_WAIT;
}

static void router_close(void)
{
    backend_close(rcfg.backend);
    rcfg.backend = NULL;
    authz_close(rcfg.authz);
    rcfg.authz = NULL;
    if (tok_path[0] != '\0')
        unlink(tok_path);
    if (adm_path[0] != '\0')
        unlink(adm_path);
    tok_path[0] = adm_path[0] = '\0';
}

/*
 * router_dispatch(), then, as the server does, a lock call run on the
 * backend (an acquire tries once) and answered. The router's action.
 */
/* Run c on the backend at once (an acquire tries once) and answer it, as
 * the server does. */
/* A grant's ttl_ms is what is left when the answer is made: the TTL less
 * the time the call took (a few ms at most, under a sanitizer too). */
#define CHECK_TTL_LEFT(got, want)                                           \
    CHECK_MSG((got) <= (want) && (got) > (want)-50, "ttl_ms %lld, want %d", \
              (long long)(got), (want))

/* A multi verb run once on the backend and answered. */
static void run_multi_call(const struct api_call *c, struct api_response *resp)
{
    struct lock_multi_req req;
    struct lock_multi_grant g;
    enum backend_result br;

    api_call_multi_req(c, &req);
    if (c->verb == API_VERB_ACQUIRE_MULTI)
        br = backend_acquire_multi(rcfg.backend, &req, &g);
    else if (c->verb == API_VERB_RENEW_MULTI)
        br = backend_renew_multi(rcfg.backend, &req, &g);
    else
        br = backend_release_multi(rcfg.backend, &req, &g);
    handle_multi_reply(&rcfg, c, br, &g, resp);
}

/* A list run once on the backend and answered. */
static void run_list_call(const struct api_call *c, struct api_response *resp)
{
    struct lock_list_req req;
    struct lock_list l = { 0 };
    enum backend_result br;

    api_call_list_req(c, &req);
    l.entries = calloc(req.limit, sizeof(*l.entries));
    br = l.entries != NULL ? backend_list(rcfg.backend, &req, &l)
                           : BACKEND_NO_MEMORY;
    handle_list_reply(c, br, &l, resp);
    free(l.entries);
}

static void run_call(const struct api_call *c, struct api_response *resp)
{
    struct lock_req req = { 0 };
    struct lock_grant g = { 0 };
    struct lock_info info = { 0 };
    int64_t held = -1;
    enum backend_result br;

    api_response_cleanup(resp);
    api_call_req(c, &req);
    switch (c->verb) {
    case API_VERB_ACQUIRE:
        /* a re-entry is the store's renew, as the server runs it */
        br = c->reenter ? backend_renew(rcfg.backend, &req, &g)
                        : backend_acquire(rcfg.backend, &req, &g);
        break;
    case API_VERB_RENEW:
        br = backend_renew(rcfg.backend, &req, &g);
        break;
    case API_VERB_RELEASE:
        br = backend_release(rcfg.backend, &req, &g);
        break;
    case API_VERB_INSPECT:
        br = backend_inspect(rcfg.backend, c->key, c->key_len, &info);
        break;
    case API_VERB_READYZ:
        br = backend_ping(rcfg.backend);
        break;
    case API_VERB_FORCE_RELEASE:
        br = backend_force_release(rcfg.backend, c->key, c->key_len, &info);
        break;
    case API_VERB_LIST:
        run_list_call(c, resp);
        return;
    case API_VERB_ACQUIRE_MULTI:
    case API_VERB_RENEW_MULTI:
    case API_VERB_RELEASE_MULTI:
        run_multi_call(c, resp);
        return;
    default:
        held = backend_held_count(rcfg.backend);
        br = BACKEND_OK;
        break;
    }
    handle_call_reply(&rcfg, c, br, &g, &info, held, resp);
    lock_info_clear(&info); /* as the server does after its reply */
}

/* router_dispatch(), then a lock call run and answered. The action. */
static enum api_action dispatch_run(const struct api_request *rq,
                                    struct api_response *resp,
                                    struct api_call *c)
{
    enum api_action a = router_dispatch(&rcfg, rq, resp, c);

    if (a == API_ACTION_CALL)
        run_call(c, resp);
    return a;
}

struct reply {
    enum api_action action;
    struct api_response resp;
    struct api_call acq;
    json_t *json; /* the parsed body, or NULL */
};

static void reply_cleanup(struct reply *r)
{
    json_decref(r->json);
    api_response_cleanup(&r->resp);
    api_call_cleanup(&r->acq);
    memset(r, 0, sizeof(*r));
}

static void reply_parse(struct reply *r)
{
    json_decref(r->json);
    r->json = NULL;
    if (r->resp.body != NULL &&
        strcmp(r->resp.content_type, "application/json") == 0)
        r->json = json_loadb(r->resp.body, r->resp.len, 0, NULL);
}

/* Dispatch one request; an acquire is run (try once) and answered as the
 * server does. */
static void request(struct reply *r,
                    const char *method,
                    const char *target,
                    const char *body,
                    const char *token,
                    const char *auth)
{
    const char *tokens[2] = { token, NULL };
    struct fake_req f;

    memset(r, 0, sizeof(*r));
    fake_init(&f, method, target, body, tokens);
    f.rq.authorization = auth;
    r->action = dispatch_run(&f.rq, &r->resp, &r->acq);
    reply_parse(r);
}

static const char *err_code(const struct reply *r)
{
    return json_string_value(
        json_object_get(json_object_get(r->json, "error"), "code"));
}

static const char *jstr(const struct reply *r, const char *name)
{
    return json_string_value(json_object_get(r->json, name));
}

static long long jint(const struct reply *r, const char *name)
{
    json_t *v = json_object_get(r->json, name);

    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

static bool is_token(const char *s)
{
    if (s == NULL || strlen(s) != API_TOKEN_LEN)
        return false;
    for (; *s != '\0'; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

static bool is_time(const char *s)
{
    /* 2026-11-21T12:00:30.123Z */
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";

    if (s == NULL || strlen(s) != sizeof(shape) - 1)
        return false;
    for (size_t i = 0; shape[i] != '\0'; i++)
        if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i])
            return false;
    return true;
}

static void test_router_acquire_renew_inspect_release(void)
{
    struct reply r;
    char token[API_TOKEN_LEN + 1] = "";
    long long fence;

    router_open(NULL);
    request(&r, "POST", "/locks/orders%2F42?ttl_ms=5000",
            "{\"owner\":\"pod-a\"}", NULL, NULL);
    CHECK_EQ_INT(r.action, API_ACTION_CALL);
    CHECK_STR_EQ(r.acq.key, "orders/42");
    CHECK_EQ_INT(r.acq.key_len, 9);
    CHECK_EQ_U64(r.acq.ttl_ms, 5000);
    CHECK_EQ_U64(r.acq.wait_ms, 0);
    CHECK_STR_EQ(r.acq.owner, "pod-a");
    CHECK(is_token(r.acq.token));
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_ACQUIRE);
    CHECK_STR_EQ(jstr(&r, "key"), "orders/42");
    CHECK_STR_EQ(jstr(&r, "token"), r.acq.token);
    CHECK_TTL_LEFT(jint(&r, "ttl_ms"), 5000);
    CHECK(is_time(jstr(&r, "expires_at")));
    fence = jint(&r, "fence");
    CHECK(fence > 0 && fence < (1LL << 53));
    snprintf(token, sizeof(token), "%s", r.acq.token);
    reply_cleanup(&r);

    /* defaults: the configured TTL */
    request(&r, "POST", "/locks/other", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK_EQ_U64(r.acq.ttl_ms, 30000);
    CHECK(r.acq.owner == NULL);
    CHECK(jint(&r, "fence") > fence);
    reply_cleanup(&r);

    /* a second acquire of the same key: 409 with retry_after_ms */
    request(&r, "POST", "/locks/orders/42", NULL, NULL, NULL);
    CHECK_EQ_INT(r.action, API_ACTION_CALL);
    CHECK_EQ_INT(r.resp.status, 409);
    CHECK_STR_EQ(err_code(&r), "lock_held");
    {
        json_t *e = json_object_get(r.json, "error");
        long long ms = json_integer_value(json_object_get(e, "retry_after_ms"));
        CHECK(ms >= 1 && ms <= 5000);
        CHECK_EQ_INT(r.resp.retry_after, (ms + 999) / 1000);
    }
    reply_cleanup(&r);

    /* inspect: no token shown */
    request(&r, "GET", "/locks/orders/42", NULL, NULL, NULL);
    CHECK_EQ_INT(r.action, API_ACTION_CALL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_INSPECT);
    CHECK(json_is_true(json_object_get(r.json, "held")));
    CHECK_EQ_INT(jint(&r, "fence"), fence);
    CHECK(jint(&r, "ttl_ms") >= 1 && jint(&r, "ttl_ms") <= 5000);
    CHECK_STR_EQ(jstr(&r, "owner"), "pod-a");
    CHECK(json_object_get(r.json, "token") == NULL);
    CHECK(r.resp.body != NULL && strstr(r.resp.body, token) == NULL);
    reply_cleanup(&r);
    request(&r, "GET", "/locks/other", NULL, NULL, NULL);
    CHECK(json_object_get(r.json, "owner") == NULL);
    reply_cleanup(&r);

    /* renew through header, query and body; fence unchanged */
    request(&r, "PUT", "/locks/orders/42", "{\"ttl_ms\":7000}", token, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_RENEW);
    CHECK_EQ_INT(jint(&r, "fence"), fence);
    CHECK_TTL_LEFT(jint(&r, "ttl_ms"), 7000);
    CHECK_STR_EQ(jstr(&r, "token"), token);
    reply_cleanup(&r);
    {
        char target[128], body[128];
        snprintf(target, sizeof(target), "/locks/orders/42?token=%s", token);
        request(&r, "PUT", target, NULL, NULL, NULL);
        CHECK_EQ_INT(r.resp.status, 200);
        CHECK_TTL_LEFT(jint(&r, "ttl_ms"), 7000); /* the last TTL kept */
        reply_cleanup(&r);
        snprintf(body, sizeof(body), "{\"token\":\"%s\"}", token);
        request(&r, "PUT", "/locks/orders/42", body, NULL, NULL);
        CHECK_EQ_INT(r.resp.status, 200);
        reply_cleanup(&r);
    }

    /* wrong token: 409 token_mismatch, for renew and release */
    request(&r, "PUT", "/locks/orders/42", NULL,
            "ffffffffffffffffffffffffffffffff", NULL);
    CHECK_EQ_INT(r.resp.status, 409);
    CHECK_STR_EQ(err_code(&r), "token_mismatch");
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks/orders/42", NULL, "nope", NULL);
    CHECK_EQ_INT(r.resp.status, 409);
    CHECK_STR_EQ(err_code(&r), "token_mismatch");
    reply_cleanup(&r);

    /* missing and empty tokens */
    request(&r, "DELETE", "/locks/orders/42", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 400);
    CHECK_STR_EQ(err_code(&r), "missing_token");
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks/orders/42", "{\"token\":\"\"}", NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "missing_token");
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks/orders/42", NULL, "", NULL);
    CHECK_STR_EQ(err_code(&r), "missing_token");
    reply_cleanup(&r);
    request(&r, "PUT", "/locks/orders/42?token=", NULL, NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "missing_token");
    reply_cleanup(&r);
    /* a bad parameter wins over a missing token */
    request(&r, "DELETE", "/locks/orders/42", "{\"ttl_ms\":5}", NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);

    /* release, then everything is 404 lock_not_found */
    request(&r, "DELETE", "/locks/orders/42", NULL, token, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_RELEASE);
    CHECK_STR_EQ(jstr(&r, "key"), "orders/42");
    CHECK(json_is_true(json_object_get(r.json, "released")));
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks/orders/42", NULL, token, NULL);
    CHECK_EQ_INT(r.resp.status, 404);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    reply_cleanup(&r);
    request(&r, "PUT", "/locks/orders/42", NULL, token, NULL);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    reply_cleanup(&r);
    request(&r, "GET", "/locks/orders/42", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 404);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    reply_cleanup(&r);
    request(&r, "HEAD", "/locks/orders/42", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 404);
    reply_cleanup(&r);

    /* the next grant has a larger fence */
    request(&r, "POST", "/locks/orders/42", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK(jint(&r, "fence") > fence);
    reply_cleanup(&r);
    router_close();
}

static void test_router_rejects_bad_acquires_without_state_change(void)
{
    struct reply r;

    router_open(NULL);
    request(&r, "POST", "/locks/k?ttl_ms=5", "{\"ttl_ms\":5}", NULL, NULL);
    CHECK_EQ_INT(r.action, API_ACTION_REPLY);
    CHECK_EQ_INT(r.resp.status, 400);
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);
    request(&r, "POST", "/locks/k", "ttl_ms=5", NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "invalid_json");
    reply_cleanup(&r);
    request(&r, "POST", "/locks/k?wait_ms=300001", NULL, NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);
    /* a token on acquire is a re-entry, which never creates a lock */
    request(&r, "POST", "/locks/k", NULL, "tok", NULL);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    reply_cleanup(&r);
    request(&r, "POST", "/locks/k?mode=shared&limit=0", NULL, NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);
    request(&r, "GET", "/locks/k?x=1", NULL, NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);
    request(&r, "GET", "/locks/k", NULL, "tok", NULL);
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);
    /* nothing was granted */
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 0);
    request(&r, "GET", "/locks/k", NULL, NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    reply_cleanup(&r);
    router_close();
}

static void test_router_answers_404_405_and_invalid_key(void)
{
    static const char *const lock_methods[] = { "PATCH", "OPTIONS", "TRACE",
                                                "get", "CONNECT" };
    struct reply r;

    router_open(NULL);
    for (size_t i = 0; i < sizeof(lock_methods) / sizeof(lock_methods[0]);
         i++) {
        request(&r, lock_methods[i], "/locks/k", NULL, NULL, NULL);
        CHECK_EQ_INT(r.resp.status, 405);
        CHECK_STR_EQ(err_code(&r), "method_not_allowed");
        CHECK_STR_EQ(r.resp.allow, "GET, HEAD, POST, PUT, DELETE");
        reply_cleanup(&r);
    }
    static const char *const ops[] = { "/healthz", "/readyz", "/metrics" };
    for (size_t i = 0; i < 3; i++) {
        request(&r, "POST", ops[i], NULL, NULL, NULL);
        CHECK_EQ_INT(r.resp.status, 405);
        CHECK_STR_EQ(r.resp.allow, "GET, HEAD");
        reply_cleanup(&r);
        request(&r, "DELETE", ops[i], NULL, NULL, NULL);
        CHECK_EQ_INT(r.resp.status, 405);
        reply_cleanup(&r);
    }
    static const char *const missing[] = { "/lockz",    "/",         "/lock/k",
                                           "/locksk",   "/healthz/", "/LOCKS/k",
                                           "/metrics/x" };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        request(&r, "GET", missing[i], NULL, NULL, NULL);
        CHECK_MSG(r.resp.status == 404, "%s gave %u", missing[i],
                  r.resp.status);
        CHECK_STR_EQ(err_code(&r), "not_found");
        CHECK(r.resp.allow == NULL);
        CHECK_EQ_INT(r.resp.route, API_ROUTE_OTHER);
        reply_cleanup(&r);
    }
    static const char *const bad_keys[] = {
        "/locks/",     "/locks/%zz",    "/locks/%4",
        "/locks/a%00", "/locks/%C0%AF", "/locks/%ED%A0%80"
    };
    static const char *const methods[] = { "GET", "HEAD", "POST", "PUT",
                                           "DELETE" };
    for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++)
        for (size_t m = 0; m < 5; m++) {
            request(&r, methods[m], bad_keys[i], NULL, "tok", NULL);
            CHECK_MSG(r.resp.status == 400, "%s %s gave %u", methods[m],
                      bad_keys[i], r.resp.status);
            CHECK_STR_EQ(err_code(&r), "invalid_key");
            CHECK_EQ_INT(r.action, API_ACTION_REPLY);
            reply_cleanup(&r);
        }
    router_close();
}

static void test_router_serves_health_ready_metrics(void)
{
    struct reply r;

    router_open(NULL);
    request(&r, "GET", "/healthz", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_STR_EQ(jstr(&r, "status"), "ok");
    CHECK_STR_EQ(r.resp.content_type, "application/json");
    CHECK_EQ_INT(r.resp.route, API_ROUTE_HEALTHZ);
    reply_cleanup(&r);
    request(&r, "HEAD", "/readyz", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_STR_EQ(jstr(&r, "status"), "ready");
    CHECK_STR_EQ(jstr(&r, "backend"), "memory");
    CHECK_STR_EQ(jstr(&r, "fifo"), "store");
    CHECK_EQ_INT(r.resp.route, API_ROUTE_READYZ);
    reply_cleanup(&r);
    request(&r, "GET", "/metrics", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_STR_EQ(r.resp.content_type,
                 "text/plain; version=0.0.4; charset=utf-8");
    CHECK_CONTAINS(r.resp.body, "lockd_locks_held 0\n");
    CHECK_EQ_INT(r.resp.route, API_ROUTE_METRICS);
    reply_cleanup(&r);
    router_close();
}

static void test_router_shutting_down_answers_503(void)
{
    struct reply r;
    struct fake_req f;

    router_open(NULL);
    memset(&r, 0, sizeof(r));
    fake_init(&f, "POST", "/locks/k", NULL, NULL);
    f.rq.shutting_down = true;
    r.action = dispatch_run(&f.rq, &r.resp, &r.acq);
    reply_parse(&r);
    CHECK_EQ_INT(r.action, API_ACTION_REPLY);
    CHECK_EQ_INT(r.resp.status, 503);
    CHECK_STR_EQ(err_code(&r), "shutting_down");
    CHECK_EQ_INT(r.resp.retry_after, 1);
    reply_cleanup(&r);
    fake_init(&f, "GET", "/readyz", NULL, NULL);
    f.rq.shutting_down = true;
    dispatch_run(&f.rq, &r.resp, &r.acq);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 503);
    CHECK_STR_EQ(jstr(&r, "status"), "unavailable");
    CHECK_STR_EQ(jstr(&r, "reason"), "shutting down");
    reply_cleanup(&r);
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 0);
    router_close();
}

static void test_router_requires_bearer_when_auth_set(void)
{
    struct reply r;
    static const char *const bad_auth[] = {
        NULL,
        "",
        "Bearer",
        "Bearer ",
        "Bearer wrong",
        "Basic " AUTH,
        "Bearer " AUTH "x",
        "Bearer " AUTH " ",
        "Bearer s3cret-bearer-token-012345678", /* a prefix */
        AUTH,
    };

    router_open(AUTH);
    for (size_t i = 0; i < sizeof(bad_auth) / sizeof(bad_auth[0]); i++) {
        request(&r, "POST", "/locks/k", NULL, NULL, bad_auth[i]);
        CHECK_MSG(r.resp.status == 401, "auth '%s' gave %u",
                  bad_auth[i] != NULL ? bad_auth[i] : "(none)", r.resp.status);
        CHECK_STR_EQ(err_code(&r), "unauthorized");
        CHECK(r.resp.www_authenticate);
        CHECK_EQ_INT(r.action, API_ACTION_REPLY);
        reply_cleanup(&r);
    }
    /* 401 comes before the key is even looked at */
    request(&r, "GET", "/locks/%zz", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 401);
    reply_cleanup(&r);
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 0);

    request(&r, "POST", "/locks/k", NULL, NULL, "Bearer " AUTH);
    CHECK_EQ_INT(r.action, API_ACTION_CALL);
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK(!r.resp.www_authenticate);
    reply_cleanup(&r);
    request(&r, "GET", "/locks/k", NULL, NULL, "bearer " AUTH);
    CHECK_EQ_INT(r.resp.status, 200);
    reply_cleanup(&r);
    /* the operations routes stay open */
    request(&r, "GET", "/healthz", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    reply_cleanup(&r);
    request(&r, "GET", "/readyz", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    reply_cleanup(&r);
    request(&r, "GET", "/metrics", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    reply_cleanup(&r);
    router_close();
}

static void test_acquire_reply_rounds_retry_after_up(void)
{
    static const struct {
        uint64_t retry_ms;
        long long body_ms;
        unsigned header_s;
    } rows[] = {
        { 0, 1, 1 },          { 1, 1, 1 },       { 999, 999, 1 },
        { 1000, 1000, 1 },    { 1001, 1001, 2 }, { 1200, 1200, 2 },
        { 30000, 30000, 30 },
    };
    struct api_call acq = { 0 };

    acq.key = "k";
    acq.key_len = 1;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct lock_grant g = { .retry_ms = rows[i].retry_ms };
        struct reply r;
        memset(&r, 0, sizeof(r));
        handle_call_reply(&rcfg, &acq, BACKEND_HELD, &g, NULL, -1, &r.resp);
        reply_parse(&r);
        CHECK_EQ_INT(r.resp.status, 409);
        CHECK_STR_EQ(err_code(&r), "lock_held");
        CHECK_EQ_INT(json_integer_value(json_object_get(
                         json_object_get(r.json, "error"), "retry_after_ms")),
                     rows[i].body_ms);
        CHECK_EQ_INT(r.resp.retry_after, rows[i].header_s);
        json_decref(r.json);
        api_response_cleanup(&r.resp);
    }
    {
        struct lock_grant g = { 0 };
        struct reply r;
        memset(&r, 0, sizeof(r));
        handle_call_reply(&rcfg, &acq, BACKEND_UNAVAILABLE, &g, NULL, -1,
                          &r.resp);
        reply_parse(&r);
        CHECK_EQ_INT(r.resp.status, 503);
        CHECK_STR_EQ(err_code(&r), "backend_unavailable");
        CHECK_EQ_INT(r.resp.retry_after, 1);
        json_decref(r.json);
        api_response_cleanup(&r.resp);
    }
}

/* request() with an Idempotency-Key header (NULL: none). */
static void request_idem(struct reply *r,
                         const char *method,
                         const char *target,
                         const char *body,
                         const char *token,
                         const char *idem)
{
    const char *tokens[2] = { token, NULL }, *keys[2] = { idem, NULL };
    struct fake_req f;

    memset(r, 0, sizeof(*r));
    fake_init(&f, method, target, body, tokens);
    fake_idem(&f, keys);
    r->action = dispatch_run(&f.rq, &r->resp, &r->acq);
    reply_parse(r);
}

/* Every rule between an acquire's parameters: 400 invalid_parameter, not
 * run, nothing held. */
static void test_router_rejects_bad_kind_combinations(void)
{
    static const struct {
        const char *target, *body, *token, *idem;
    } bad[] = {
        { "/locks/k?limit=2", NULL, NULL, NULL },
        { "/locks/k?mode=exclusive&limit=2", NULL, NULL, NULL },
        { "/locks/k", "{\"mode\":\"exclusive\",\"limit\":1}", NULL, NULL },
        { "/locks/k", "{\"limit\":5}", NULL, "idem-1" },
        { "/locks/k?wait_ms=100", NULL, "tok", NULL },
        { "/locks/k?wait_ms=0", NULL, "tok", NULL },
        { "/locks/k?mode=exclusive", NULL, "tok", NULL },
        { "/locks/k?mode=shared", NULL, "tok", NULL },
        { "/locks/k", "{\"mode\":\"shared\",\"limit\":2}", "tok", NULL },
        { "/locks/k", "{\"limit\":2}", "tok", NULL },
        { "/locks/k?owner=me", NULL, "tok", NULL },
        { "/locks/k", NULL, "tok", "idem-1" },
        { "/locks/k", "{\"token\":\"tok\"}", NULL, "idem-1" },
        { "/locks/k?token=tok", NULL, NULL, "idem-1" },
        { "/locks/k", NULL, "", NULL },
        { "/locks/k?token=", NULL, NULL, NULL },
        { "/locks/k", "{\"token\":\"\"}", NULL, NULL },
        { "/locks/k", "{\"token\":\"\",\"ttl_ms\":5}", NULL, NULL },
        { "/locks/k?token=tok", NULL, "tok", NULL },
        { "/locks/k", "{\"token\":\"tok\"}", "tok", NULL },
        { "/locks/k", NULL, NULL, "" },
        { "/locks/k?all=false", NULL, NULL, NULL },
    };
    struct reply r;

    router_open(NULL);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        request_idem(&r, "POST", bad[i].target, bad[i].body, bad[i].token,
                     bad[i].idem);
        CHECK_MSG(r.action == API_ACTION_REPLY && r.resp.status == 400,
                  "#%zu %s %s: action %d status %u", i, bad[i].target,
                  bad[i].body != NULL ? bad[i].body : "", r.action,
                  r.resp.status);
        CHECK_MSG(err_code(&r) != NULL &&
                      strcmp(err_code(&r), "invalid_parameter") == 0,
                  "#%zu: code %s", i,
                  err_code(&r) != NULL ? err_code(&r) : "(none)");
        CHECK(r.acq.client_token == NULL && r.acq.idem_key == NULL &&
              r.acq.owner == NULL);
        reply_cleanup(&r);
    }
    /* Idempotency-Key on the other verbs, even with everything else fine */
    request_idem(&r, "PUT", "/locks/k", NULL, "tok", "idem-1");
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);
    request_idem(&r, "DELETE", "/locks/k", NULL, "tok", "idem-1");
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);
    request_idem(&r, "GET", "/locks/k", NULL, NULL, "idem-1");
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    reply_cleanup(&r);
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 0);
    router_close();
}

/* What a well-formed request hands to the store. */
static void test_router_fills_the_store_request(void)
{
    struct reply r;
    struct lock_req req;

    router_open(NULL);
    /* an exclusive acquire: the defaults */
    request(&r, "POST", "/locks/excl", NULL, NULL, NULL);
    api_call_req(&r.acq, &req);
    CHECK_EQ_INT(req.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_U64(req.limit, 0);
    CHECK(req.idem_key == NULL && !req.reenter && !req.all);
    CHECK(req.token == r.acq.token);
    CHECK_EQ_U64(req.ttl_ms, 30000);
    reply_cleanup(&r);
    /* shared with a limit and an Idempotency-Key, parsed (the store may or
     * may not grant it: only the request is checked) */
    request_idem(&r, "POST", "/locks/sem?mode=shared",
                 "{\"limit\":7,\"ttl_ms\":900,\"owner\":\"w\"}", NULL,
                 "order-42");
    CHECK_EQ_INT(r.action, API_ACTION_CALL);
    api_call_req(&r.acq, &req);
    CHECK_EQ_INT(req.mode, LOCK_SHARED);
    CHECK_EQ_U64(req.limit, 7);
    CHECK_EQ_U64(req.ttl_ms, 900);
    CHECK_STR_EQ(req.idem_key, "order-42");
    CHECK_STR_EQ(req.owner, "w");
    CHECK(is_token(req.token) && !req.reenter);
    reply_cleanup(&r);
    request(&r, "POST", "/locks/rw", "{\"mode\":\"shared\"}", NULL, NULL);
    api_call_req(&r.acq, &req);
    CHECK_EQ_INT(req.mode, LOCK_SHARED);
    CHECK_EQ_U64(req.limit, 0);
    reply_cleanup(&r);
    /* re-entry: the client's token, ttl 0 = the last TTL, no fresh token */
    request(&r, "POST", "/locks/free", NULL, "client-tok", NULL);
    CHECK(r.acq.reenter);
    api_call_req(&r.acq, &req);
    CHECK(req.reenter);
    CHECK_STR_EQ(req.token, "client-tok");
    CHECK_EQ_U64(req.ttl_ms, 0);
    CHECK_EQ_U64(r.acq.wait_ms, 0);
    CHECK_EQ_INT(r.resp.status, 404);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    reply_cleanup(&r);
    request(&r, "POST", "/locks/free?ttl_ms=1234&token=q%20t", NULL, NULL,
            NULL);
    api_call_req(&r.acq, &req);
    CHECK(req.reenter);
    CHECK_STR_EQ(req.token, "q t");
    CHECK_EQ_U64(req.ttl_ms, 1234);
    reply_cleanup(&r);
    request(&r, "POST", "/locks/free", "{\"token\":\"body-tok\"}", NULL, NULL);
    CHECK_STR_EQ(api_call_token(&r.acq), "body-tok");
    reply_cleanup(&r);
    /* release: all from the body or the query */
    request(&r, "DELETE", "/locks/free?all=true", NULL, "t", NULL);
    api_call_req(&r.acq, &req);
    CHECK(req.all);
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks/free", "{\"all\":false}", "t", NULL);
    api_call_req(&r.acq, &req);
    CHECK(!req.all);
    reply_cleanup(&r);
    router_close();
}

/* handle_call_reply() for the lock kinds' answers, from a store's results
 * made up here (whatever the memory adapter does today). */
static void test_reply_kinds_answers(void)
{
    struct api_call c = { 0 };
    struct lock_grant g = { 0 };
    struct reply r;

    c.verb = API_VERB_ACQUIRE;
    c.key = "k\"\\";
    c.key_len = 3;
    snprintf(c.token, sizeof(c.token), "%s",
             "0123456789abcdef0123456789abcdef");
    g.fence = 9;
    g.ttl_ms = 5000;
    g.expires_at_ms = 1795262430123LL;
    g.valid_until_us = INT64_MAX / 2;
    g.mode = LOCK_SHARED;
    g.limit = 3;
    g.holds = 1;
    /* a new shared grant: 201, mode, holds, limit; the key escaped */
    memset(&r, 0, sizeof(r));
    handle_call_reply(&rcfg, &c, BACKEND_OK, &g, NULL, -1, &r.resp);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK_STR_EQ(jstr(&r, "key"), "k\"\\");
    CHECK_STR_EQ(jstr(&r, "token"), c.token);
    CHECK_STR_EQ(jstr(&r, "mode"), "shared");
    CHECK_EQ_INT(jint(&r, "holds"), 1);
    CHECK_EQ_INT(jint(&r, "limit"), 3);
    CHECK_EQ_INT(jint(&r, "fence"), 9);
    CHECK(api_call_new_grant(&c, BACKEND_OK, &g));
    reply_cleanup(&r);
    /* shared without a limit: no limit field; exclusive: none either */
    g.limit = 0;
    handle_call_reply(&rcfg, &c, BACKEND_OK, &g, NULL, -1, &r.resp);
    reply_parse(&r);
    CHECK(json_object_get(r.json, "limit") == NULL);
    CHECK_EQ_INT(json_object_size(r.json), 7);
    reply_cleanup(&r);
    g.mode = LOCK_EXCLUSIVE;
    g.limit = 5; /* a store's stray limit is not shown for exclusive */
    handle_call_reply(&rcfg, &c, BACKEND_OK, &g, NULL, -1, &r.resp);
    reply_parse(&r);
    CHECK_STR_EQ(jstr(&r, "mode"), "exclusive");
    CHECK(json_object_get(r.json, "limit") == NULL);
    reply_cleanup(&r);
    /* a replay: 201 with the grant's token, not the fresh one */
    g.replay = true;
    g.holds = 3;
    snprintf(g.token, sizeof(g.token), "%s",
             "feedfeedfeedfeedfeedfeedfeedfeed");
    handle_call_reply(&rcfg, &c, BACKEND_OK, &g, NULL, -1, &r.resp);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK_STR_EQ(jstr(&r, "token"), g.token);
    CHECK_EQ_INT(jint(&r, "holds"), 3);
    CHECK(!api_call_new_grant(&c, BACKEND_OK, &g));
    reply_cleanup(&r);
    /* a re-entry: 200 with the client's token */
    g.replay = false;
    g.holds = 2;
    c.reenter = true;
    c.client_token = "client-token";
    handle_call_reply(&rcfg, &c, BACKEND_OK, &g, NULL, -1, &r.resp);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_STR_EQ(jstr(&r, "token"), "client-token");
    CHECK_EQ_INT(jint(&r, "holds"), 2);
    CHECK(!api_call_new_grant(&c, BACKEND_OK, &g));
    reply_cleanup(&r);
    c.reenter = false;
    c.client_token = NULL;
    CHECK(!api_call_new_grant(&c, BACKEND_HELD, &g));
    /* the kinds' errors */
    {
        static const struct {
            enum backend_result r;
            unsigned status;
            const char *code, *says;
        } rows[] = {
            { BACKEND_LIMIT_MISMATCH, 409, "limit_mismatch", "limit" },
            { BACKEND_HOLDS_MAX, 400, "invalid_parameter", "1000000" },
            { BACKEND_IDEM_CONFLICT, 400, "invalid_parameter",
              "Idempotency-Key" },
        };
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
            handle_call_reply(&rcfg, &c, rows[i].r, &g, NULL, -1, &r.resp);
            reply_parse(&r);
            CHECK_EQ_INT(r.resp.status, rows[i].status);
            CHECK_STR_EQ(err_code(&r), rows[i].code);
            CHECK_CONTAINS(json_string_value(json_object_get(
                               json_object_get(r.json, "error"), "message")),
                           rows[i].says);
            CHECK_EQ_INT(r.resp.retry_after, 0);
            reply_cleanup(&r);
        }
    }
    /* release: one hold of two given back, then the last */
    c.verb = API_VERB_RELEASE;
    c.client_token = "client-token";
    g.holds = 1;
    handle_call_reply(&rcfg, &c, BACKEND_OK, &g, NULL, -1, &r.resp);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK(json_is_false(json_object_get(r.json, "released")));
    CHECK_EQ_INT(jint(&r, "holds"), 1);
    CHECK_EQ_INT(json_object_size(r.json), 3);
    reply_cleanup(&r);
    g.holds = 0;
    handle_call_reply(&rcfg, &c, BACKEND_OK, &g, NULL, -1, &r.resp);
    reply_parse(&r);
    CHECK(json_is_true(json_object_get(r.json, "released")));
    CHECK_EQ_INT(jint(&r, "holds"), 0);
    reply_cleanup(&r);
}

/* A lock_info as a store fills it: n holders of a shared key (or one
 * exclusive holder), the owner of every other one set. */
static void make_info(struct lock_info *info,
                      enum lock_mode mode,
                      uint32_t n,
                      uint32_t count)
{
    memset(info, 0, sizeof(*info));
    info->mode = mode;
    info->fence = 100 + n;
    info->ttl_ms = 4000;
    info->expires_at_ms = 1795262430123LL;
    info->holder_count = count;
    info->nholders = n;
    info->holders = n > 0 ? calloc(n, sizeof(*info->holders)) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        info->holders[i].fence = 101 + i;
        info->holders[i].ttl_ms = 1000 + i;
        info->holders[i].expires_at_ms = 1795262430123LL - 1000 + i;
        info->holders[i].holds = 1 + i % 3;
        info->holders[i].has_owner = i % 2 == 0;
        snprintf(info->holders[i].owner, sizeof(info->holders[i].owner), "w-%u",
                 i);
    }
    if (mode == LOCK_EXCLUSIVE) {
        info->holds = 2;
        info->has_owner = true;
        snprintf(info->owner, sizeof(info->owner), "%s", "pod \"a\"");
    }
}

static void check_holder(json_t *h, const struct lock_holder *want, size_t i)
{
    CHECK_MSG(json_is_object(h), "holder %zu is not an object", i);
    CHECK_EQ_INT(json_integer_value(json_object_get(h, "fence")), want->fence);
    CHECK_EQ_INT(json_integer_value(json_object_get(h, "ttl_ms")),
                 want->ttl_ms);
    CHECK_EQ_INT(json_integer_value(json_object_get(h, "holds")), want->holds);
    CHECK(is_time(json_string_value(json_object_get(h, "expires_at"))));
    if (want->has_owner)
        CHECK_STR_EQ(json_string_value(json_object_get(h, "owner")),
                     want->owner);
    else
        CHECK(json_object_get(h, "owner") == NULL);
    CHECK_EQ_INT(json_object_size(h), want->has_owner ? 5 : 4);
}

static void test_reply_inspect_shapes(void)
{
    struct api_call c = { .verb = API_VERB_INSPECT, .key = "k", .key_len = 1 };
    struct lock_info info;
    struct reply r;
    json_t *hs;

    memset(&r, 0, sizeof(r));
    /* shared, with a limit: no top-level owner or holds */
    make_info(&info, LOCK_SHARED, 3, 3);
    info.limit = 4;
    handle_call_reply(&rcfg, &c, BACKEND_OK, NULL, &info, -1, &r.resp);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_STR_EQ(jstr(&r, "key"), "k");
    CHECK(json_is_true(json_object_get(r.json, "held")));
    CHECK_STR_EQ(jstr(&r, "mode"), "shared");
    CHECK_EQ_INT(jint(&r, "limit"), 4);
    CHECK_EQ_INT(jint(&r, "fence"), 103);
    CHECK_EQ_INT(jint(&r, "ttl_ms"), 4000);
    CHECK(is_time(jstr(&r, "expires_at")));
    CHECK(json_object_get(r.json, "owner") == NULL);
    CHECK(json_object_get(r.json, "holds") == NULL);
    CHECK(json_object_get(r.json, "token") == NULL);
    CHECK_EQ_INT(jint(&r, "holder_count"), 3);
    hs = json_object_get(r.json, "holders");
    CHECK_EQ_INT(json_array_size(hs), 3);
    for (size_t i = 0; i < 3 && i < json_array_size(hs); i++)
        check_holder(json_array_get(hs, i), &info.holders[i], i);
    CHECK_EQ_INT(json_object_size(r.json), 9);
    reply_cleanup(&r);
    lock_info_clear(&info);
    /* shared, no limit, more holders than shown */
    make_info(&info, LOCK_SHARED, LOCK_HOLDERS_SHOWN, 250);
    handle_call_reply(&rcfg, &c, BACKEND_OK, NULL, &info, -1, &r.resp);
    reply_parse(&r);
    CHECK(json_object_get(r.json, "limit") == NULL);
    CHECK_EQ_INT(jint(&r, "holder_count"), 250);
    CHECK_EQ_INT(json_array_size(json_object_get(r.json, "holders")),
                 LOCK_HOLDERS_SHOWN);
    reply_cleanup(&r);
    lock_info_clear(&info);
    /* exclusive: owner and holds at the top, one holder */
    make_info(&info, LOCK_EXCLUSIVE, 1, 1);
    info.holders[0].holds = 2;
    info.holders[0].has_owner = true;
    snprintf(info.holders[0].owner, sizeof(info.holders[0].owner), "%s",
             "pod \"a\"");
    handle_call_reply(&rcfg, &c, BACKEND_OK, NULL, &info, -1, &r.resp);
    reply_parse(&r);
    CHECK_STR_EQ(jstr(&r, "mode"), "exclusive");
    CHECK_STR_EQ(jstr(&r, "owner"), "pod \"a\"");
    CHECK_EQ_INT(jint(&r, "holds"), 2);
    CHECK(json_object_get(r.json, "limit") == NULL);
    CHECK_EQ_INT(jint(&r, "holder_count"), 1);
    hs = json_object_get(r.json, "holders");
    CHECK_EQ_INT(json_array_size(hs), 1);
    check_holder(json_array_get(hs, 0), &info.holders[0], 0);
    CHECK_EQ_INT(json_object_size(r.json), 10);
    reply_cleanup(&r);
    lock_info_clear(&info);
    /* a store that lists no holder of an exclusive key: the top level's */
    make_info(&info, LOCK_EXCLUSIVE, 0, 0);
    info.has_owner = false;
    handle_call_reply(&rcfg, &c, BACKEND_OK, NULL, &info, -1, &r.resp);
    reply_parse(&r);
    CHECK(json_object_get(r.json, "owner") == NULL);
    CHECK_EQ_INT(jint(&r, "holder_count"), 1);
    hs = json_object_get(r.json, "holders");
    CHECK_EQ_INT(json_array_size(hs), 1);
    CHECK_EQ_INT(
        json_integer_value(json_object_get(json_array_get(hs, 0), "fence")),
        100);
    CHECK_EQ_INT(
        json_integer_value(json_object_get(json_array_get(hs, 0), "holds")), 2);
    reply_cleanup(&r);
    lock_info_clear(&info);
}

/* ---- several keys at once: POST, PUT and DELETE /locks ---- */

/* A multi request through the router, run and answered: its Lock-Token
 * (NULL: none) and Idempotency-Key (NULL: none) headers. */
static void multi_request(struct reply *r,
                          const char *method,
                          const char *target,
                          const char *body,
                          const char *token,
                          const char *idem)
{
    const char *tokens[2] = { token, NULL };
    const char *idems[2] = { idem, NULL };
    struct fake_req f;

    memset(r, 0, sizeof(*r));
    fake_init(&f, method, target, body, tokens);
    fake_idem(&f, idems);
    r->action = dispatch_run(&f.rq, &r->resp, &r->acq);
    reply_parse(r);
}

/* The JSON array a as a comma-separated string, into buf. */
static const char *list_str(json_t *a, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!json_is_array(a)) {
        snprintf(buf, cap, "(not an array)");
        return buf;
    }
    for (size_t i = 0; i < json_array_size(a); i++) {
        if (i > 0)
            cat(buf, cap, ",");
        cat(buf, cap,
            json_is_string(json_array_get(a, i))
                ? json_string_value(json_array_get(a, i))
                : "(not a string)");
    }
    return buf;
}

#define CHECK_LIST(a, want)                                        \
    do {                                                           \
        char list_[256];                                           \
        CHECK_STR_EQ(list_str((a), list_, sizeof(list_)), (want)); \
    } while (0)

static json_t *err_obj(const struct reply *r)
{
    return json_object_get(r->json, "error");
}

/* The fence the single-key inspect shows for key (-1 when free). */
static long long inspect_fence(const char *key, long long *ttl)
{
    char target[128];
    struct reply r;
    long long fence;

    snprintf(target, sizeof(target), "/locks/%s", key);
    request(&r, "GET", target, NULL, NULL, NULL);
    fence = r.resp.status == 200 ? jint(&r, "fence") : -1;
    if (ttl != NULL)
        *ttl = jint(&r, "ttl_ms");
    reply_cleanup(&r);
    return fence;
}

static void test_parse_multi_reads_keys_in_order(void)
{
    const char *tokens[2] = { "tok-h", NULL };
    struct fake_req f;
    struct api_params p;
    struct api_keys k;
    char msg[512] = "";

    fake_init(&f, "POST", "/locks",
              "{\"owner\":\"pod-a\",\"keys\":[\"zeta\",\"a/b\",\"\\u00e9\"],"
              "\"ttl_ms\":5000,\"wait_ms\":7}",
              NULL);
    CHECK_EQ_INT(codec_parse_multi(&f.rq,
                                   API_P_TTL_MS | API_P_WAIT_MS | API_P_OWNER,
                                   MAX_TTL, MAX_WAIT, &p, &k, msg, sizeof(msg)),
                 API_OK);
    CHECK_EQ_INT(k.n, 3);
    if (k.n == 3) {
        CHECK_STR_EQ(k.keys[0], "zeta");
        CHECK_STR_EQ(k.keys[1], "a/b");
        CHECK_STR_EQ(k.keys[2], "\xc3\xa9");
        CHECK_EQ_INT(k.lens[0], 4);
        CHECK_EQ_INT(k.lens[2], 2);
    }
    CHECK_EQ_U64(p.ttl_ms, 5000);
    CHECK_EQ_U64(p.wait_ms, 7);
    CHECK_STR_EQ(p.owner, "pod-a");
    CHECK(!p.has_token);
    codec_params_cleanup(&p);
    codec_keys_cleanup(&k);
    CHECK(k.keys == NULL && k.n == 0);

    /* the token from the Lock-Token header; ttl_ms optional */
    fake_init(&f, "PUT", "/locks", "{\"keys\":[\"a\"]}", tokens);
    CHECK_EQ_INT(codec_parse_multi(&f.rq, API_P_TOKEN | API_P_TTL_MS, MAX_TTL,
                                   MAX_WAIT, &p, &k, msg, sizeof(msg)),
                 API_OK);
    CHECK_STR_EQ(p.token, "tok-h");
    CHECK(!p.has_ttl_ms);
    CHECK_EQ_INT(k.n, 1);
    codec_params_cleanup(&p);
    codec_keys_cleanup(&k);
}

static void test_parse_multi_rejects_bad_requests(void)
{
    static char many[2048], long_key[700], max_key[700];
    const struct {
        const char *method, *target, *body, *token;
        enum api_error want;
        const char *says; /* a part of the message */
    } cases[] = {
        { "POST", "/locks", NULL, NULL, API_INVALID_PARAMETER, "'keys'" },
        { "POST", "/locks", "{}", NULL, API_INVALID_PARAMETER, "'keys'" },
        { "POST", "/locks", "{\"ttl_ms\":5}", NULL, API_INVALID_PARAMETER,
          "'keys'" },
        { "POST", "/locks", "[\"a\"]", NULL, API_INVALID_JSON, "object" },
        { "POST", "/locks", "keys=a", NULL, API_INVALID_JSON, "JSON" },
        { "POST", "/locks?ttl_ms=5", "{\"keys\":[\"a\"]}", NULL,
          API_INVALID_PARAMETER, "ttl_ms" },
        { "POST", "/locks?keys=a", "{\"keys\":[\"a\"]}", NULL,
          API_INVALID_PARAMETER, "body" },
        { "POST", "/locks", "{\"keys\":\"a\"}", NULL, API_INVALID_PARAMETER,
          "array" },
        { "POST", "/locks", "{\"keys\":{\"a\":1}}", NULL, API_INVALID_PARAMETER,
          "array" },
        { "POST", "/locks", "{\"keys\":[]}", NULL, API_INVALID_PARAMETER,
          "not 0" },
        { "POST", "/locks", many, NULL, API_INVALID_PARAMETER, "not 65" },
        { "POST", "/locks", "{\"keys\":[\"a\",1]}", NULL, API_INVALID_PARAMETER,
          "keys[1]" },
        { "POST", "/locks", "{\"keys\":[\"a\",null]}", NULL,
          API_INVALID_PARAMETER, "keys[1]" },
        { "POST", "/locks", "{\"keys\":[\"a\",\"b\",\"a\"]}", NULL,
          API_INVALID_PARAMETER, "keys[2] repeats keys[0]: \"a\"" },
        { "POST", "/locks", "{\"keys\":[\"a\",\"\"]}", NULL, API_INVALID_KEY,
          "keys[1]" },
        { "POST", "/locks", "{\"keys\":[\"a\",\"b\",\"c\",\"x\\u0001\"]}", NULL,
          API_INVALID_KEY, "keys[3]" },
        { "POST", "/locks", "{\"keys\":[\"a\\u0000b\"]}", NULL, API_INVALID_KEY,
          "keys[0]" },
        { "POST", "/locks", "{\"keys\":[\"a\\u007f\"]}", NULL, API_INVALID_KEY,
          "keys[0]" },
        { "POST", "/locks", long_key, NULL, API_INVALID_KEY, "keys[1]" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"mode\":\"shared\"}", NULL,
          API_INVALID_PARAMETER, "'mode'" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"limit\":2}", NULL,
          API_INVALID_PARAMETER, "'limit'" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"all\":true}", NULL,
          API_INVALID_PARAMETER, "'all'" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"token\":\"t\"}", NULL,
          API_INVALID_PARAMETER, "'token'" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"keys\":[\"b\"]}", NULL,
          API_INVALID_PARAMETER, "twice" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"ttl_ms\":0}", NULL,
          API_INVALID_PARAMETER, "ttl_ms" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"ttl_ms\":\"5\"}", NULL,
          API_INVALID_PARAMETER, "ttl_ms" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"wait_ms\":300001}", NULL,
          API_INVALID_PARAMETER, "wait_ms" },
        { "POST", "/locks", "{\"keys\":[\"a\"],\"owner\":5}", NULL,
          API_INVALID_PARAMETER, "owner" },
        { "POST", "/locks", "{\"keys\":[\"a\"]}", "tok", API_INVALID_PARAMETER,
          "Lock-Token" },
        { "PUT", "/locks", "{\"keys\":[\"a\"]}", NULL, API_MISSING_TOKEN,
          "token" },
        { "PUT", "/locks", "{\"keys\":[\"a\"],\"token\":\"\"}", NULL,
          API_MISSING_TOKEN, "token" },
        { "PUT", "/locks", "{\"keys\":[\"a\"],\"wait_ms\":5}", "tok",
          API_INVALID_PARAMETER, "'wait_ms'" },
        { "PUT", "/locks", "{\"keys\":[\"a\"],\"token\":\"tok\"}", "tok",
          API_INVALID_PARAMETER, "twice" },
        { "PUT", "/locks?token=tok", "{\"keys\":[\"a\"]}", NULL,
          API_INVALID_PARAMETER, "token" },
        { "PUT", "/locks", "{\"keys\":[]}", "tok", API_INVALID_PARAMETER,
          "keys" },
        { "DELETE", "/locks", NULL, "tok", API_INVALID_PARAMETER, "'keys'" },
        { "DELETE", "/locks", "{\"keys\":[\"a\"],\"ttl_ms\":5}", "tok",
          API_INVALID_PARAMETER, "'ttl_ms'" },
        { "DELETE", "/locks", "{\"keys\":[\"a\"],\"all\":true}", "tok",
          API_INVALID_PARAMETER, "'all'" },
        { "DELETE", "/locks", "{\"keys\":[\"a\"]}", NULL, API_MISSING_TOKEN,
          "token" },
        { "DELETE", "/locks", "{\"keys\":[\"a\",\"a\"]}", "tok",
          API_INVALID_PARAMETER, "repeats" },
    };
    struct reply r;

    snprintf(many, sizeof(many), "{\"keys\":[");
    for (int i = 0; i < 65; i++) {
        char one[16];
        snprintf(one, sizeof(one), "%s\"k%d\"", i > 0 ? "," : "", i);
        cat(many, sizeof(many), one);
    }
    cat(many, sizeof(many), "]}");
    snprintf(long_key, sizeof(long_key), "{\"keys\":[\"a\",\"%0513d\"]}", 0);
    snprintf(max_key, sizeof(max_key), "{\"keys\":[\"a\",\"%0512d\"]}", 0);
    router_open(NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *e;
        multi_request(&r, cases[i].method, cases[i].target, cases[i].body,
                      cases[i].token, NULL);
        e = err_obj(&r);
        CHECK_MSG(r.action == API_ACTION_REPLY &&
                      r.resp.status == api_error_status(cases[i].want),
                  "case %zu (%s %s): action %d status %u", i, cases[i].method,
                  cases[i].body != NULL ? cases[i].body : "(no body)", r.action,
                  r.resp.status);
        CHECK_MSG(err_code(&r) != NULL &&
                      strcmp(err_code(&r), api_error_code(cases[i].want)) == 0,
                  "case %zu: code %s, want %s", i,
                  err_code(&r) != NULL ? err_code(&r) : "(none)",
                  api_error_code(cases[i].want));
        CHECK_MSG(json_string_value(json_object_get(e, "message")) != NULL &&
                      strstr(json_string_value(json_object_get(e, "message")),
                             cases[i].says) != NULL,
                  "case %zu: message '%s' does not say '%s'", i,
                  json_string_value(json_object_get(e, "message")),
                  cases[i].says);
        reply_cleanup(&r);
    }
    /* nothing was granted by any of them */
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 0);
    /* the largest request is fine: 64 keys, a 512-byte key */
    many[strlen(many) - 2] = '\0';
    *strrchr(many, ',') = '\0';
    cat(many, sizeof(many), "]}");
    multi_request(&r, "POST", "/locks", many, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK_EQ_INT(json_array_size(json_object_get(r.json, "keys")), 64);
    CHECK_EQ_INT(json_object_size(json_object_get(r.json, "fences")), 64);
    reply_cleanup(&r);
    multi_request(&r, "POST", "/locks", max_key, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 66);
    router_close();
}

static void test_router_multi_grant_renew_release(void)
{
    struct reply r;
    char token[API_TOKEN_LEN + 1] = "", body[256], list[256];
    long long fb, fa, fc, ttl;
    json_t *fences;

    router_open(NULL);
    /* a single grant first: the multi grant's fences come after it */
    request(&r, "POST", "/locks/before", NULL, NULL, NULL);
    fa = jint(&r, "fence");
    reply_cleanup(&r);
    multi_request(&r, "POST", "/locks",
                  "{\"keys\":[\"b\",\"a\",\"c/1\"],\"ttl_ms\":5000,"
                  "\"owner\":\"pod-m\"}",
                  NULL, NULL);
    CHECK_EQ_INT(r.action, API_ACTION_CALL);
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_ACQUIRE_MULTI);
    CHECK_STR_EQ(api_route_names[r.resp.route], "acquire_multi");
    CHECK_EQ_INT(json_object_size(r.json), 5);
    CHECK_LIST(json_object_get(r.json, "keys"), "b,a,c/1");
    CHECK(is_token(jstr(&r, "token")));
    CHECK_STR_EQ(jstr(&r, "token"), r.acq.token);
    CHECK_TTL_LEFT(jint(&r, "ttl_ms"), 5000);
    CHECK(is_time(jstr(&r, "expires_at")));
    fences = json_object_get(r.json, "fences");
    CHECK_EQ_INT(json_object_size(fences), 3);
    fb = json_integer_value(json_object_get(fences, "b"));
    fc = json_integer_value(json_object_get(fences, "c/1"));
    CHECK(fb > fa && fc > fa && fc < (1LL << 53));
    /* each key is an ordinary exclusive lock with that fence */
    CHECK_EQ_INT(inspect_fence("b", NULL), fb);
    CHECK_EQ_INT(inspect_fence("c%2F1", NULL), fc);
    fa = json_integer_value(json_object_get(fences, "a"));
    CHECK_EQ_INT(inspect_fence("a", NULL), fa);
    snprintf(token, sizeof(token), "%s", jstr(&r, "token"));
    reply_cleanup(&r);

    /* renew: header or body token, the same fences, the new TTL */
    multi_request(&r, "PUT", "/locks",
                  "{\"keys\":[\"a\",\"b\"],\"ttl_ms\":7000}", token, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_RENEW_MULTI);
    CHECK_LIST(json_object_get(r.json, "keys"), "a,b");
    CHECK_STR_EQ(jstr(&r, "token"), token);
    CHECK_TTL_LEFT(jint(&r, "ttl_ms"), 7000);
    CHECK_EQ_INT(json_integer_value(
                     json_object_get(json_object_get(r.json, "fences"), "a")),
                 fa);
    reply_cleanup(&r);
    snprintf(body, sizeof(body), "{\"keys\":[\"c/1\"],\"token\":\"%s\"}",
             token);
    multi_request(&r, "PUT", "/locks", body, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_TTL_LEFT(jint(&r, "ttl_ms"), 5000); /* its last TTL kept */
    reply_cleanup(&r);

    /* a key not held: 404 naming it, and nothing renewed */
    multi_request(&r, "PUT", "/locks",
                  "{\"keys\":[\"a\",\"nope\",\"b\"],\"ttl_ms\":60000}", token,
                  NULL);
    CHECK_EQ_INT(r.resp.status, 404);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    CHECK_STR_EQ(json_string_value(json_object_get(err_obj(&r), "key")),
                 "nope");
    CHECK_CONTAINS(json_string_value(json_object_get(err_obj(&r), "message")),
                   "\"nope\"");
    reply_cleanup(&r);
    inspect_fence("a", &ttl);
    CHECK_MSG(ttl <= 7000, "a was renewed to %lld ms by a failed renew", ttl);
    /* a key under another token: 409 naming it */
    request(&r, "POST", "/locks/other", NULL, NULL, NULL);
    reply_cleanup(&r);
    multi_request(&r, "PUT", "/locks", "{\"keys\":[\"a\",\"other\"]}", token,
                  NULL);
    CHECK_EQ_INT(r.resp.status, 409);
    CHECK_STR_EQ(err_code(&r), "token_mismatch");
    CHECK_STR_EQ(json_string_value(json_object_get(err_obj(&r), "key")),
                 "other");
    reply_cleanup(&r);

    /* release: what the token held, in order; then none: 404 */
    multi_request(&r, "DELETE", "/locks",
                  "{\"keys\":[\"b\",\"other\",\"zz\",\"a\"]}", token, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_RELEASE_MULTI);
    CHECK_EQ_INT(json_object_size(r.json), 2);
    CHECK_LIST(json_object_get(r.json, "released"), "b,a");
    CHECK_LIST(json_object_get(r.json, "not_held"), "other,zz");
    reply_cleanup(&r);
    CHECK_EQ_INT(inspect_fence("a", NULL), -1);
    CHECK(inspect_fence("other", NULL) > 0);
    CHECK(inspect_fence("c%2F1", NULL) > 0);
    multi_request(&r, "DELETE", "/locks", "{\"keys\":[\"a\",\"b\"]}", token,
                  NULL);
    CHECK_EQ_INT(r.resp.status, 404);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    reply_cleanup(&r);
    /* the last key goes back by the single-key release */
    request(&r, "DELETE", "/locks/c%2F1", NULL, token, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    reply_cleanup(&r);
    (void)list;
    router_close();
}

static void test_router_multi_held_takes_nothing(void)
{
    struct reply r;
    json_t *e;
    long long ms;

    router_open(NULL);
    request(&r, "POST", "/locks/c?ttl_ms=3000", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    request(&r, "POST", "/locks/a?ttl_ms=9000", NULL, NULL, NULL);
    reply_cleanup(&r);
    multi_request(&r, "POST", "/locks", "{\"keys\":[\"d\",\"c\",\"e\",\"a\"]}",
                  NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 409);
    CHECK_STR_EQ(err_code(&r), "lock_held");
    e = err_obj(&r);
    CHECK_LIST(json_object_get(e, "held"), "c,a");
    ms = json_integer_value(json_object_get(e, "retry_after_ms"));
    CHECK_MSG(ms >= 1 && ms <= 3000, "retry_after_ms %lld", ms);
    CHECK_EQ_INT(r.resp.retry_after, (ms + 999) / 1000);
    CHECK_EQ_INT(json_object_size(e), 4);
    reply_cleanup(&r);
    /* none of the free keys was taken */
    CHECK_EQ_INT(inspect_fence("d", NULL), -1);
    CHECK_EQ_INT(inspect_fence("e", NULL), -1);
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 2);
    router_close();
}

static void test_router_multi_routes_and_refusals(void)
{
    static const char *const others[] = { "PATCH", "OPTIONS", "TRACE", "post" };
    struct reply r;
    struct fake_req f;

    router_open(AUTH);
    /* GET and HEAD /locks list the held keys (behind the bearer too);
     * other methods 405 */
    request(&r, "GET", "/locks", NULL, NULL, "Bearer " AUTH);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_LIST);
    CHECK(json_is_array(json_object_get(r.json, "locks")));
    reply_cleanup(&r);
    request(&r, "HEAD", "/locks", NULL, NULL, "Bearer " AUTH);
    CHECK_EQ_INT(r.resp.status, 200);
    reply_cleanup(&r);
    request(&r, "GET", "/locks", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 401);
    reply_cleanup(&r);
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        request(&r, others[i], "/locks", "{\"keys\":[\"a\"]}", NULL,
                "Bearer " AUTH);
        CHECK_EQ_INT(r.resp.status, 405);
        CHECK_STR_EQ(err_code(&r), "method_not_allowed");
        CHECK_STR_EQ(r.resp.allow, "GET, HEAD, POST, PUT, DELETE");
        reply_cleanup(&r);
    }
    /* "/locks/" is still the empty key */
    request(&r, "POST", "/locks/", "{\"keys\":[\"a\"]}", NULL, "Bearer " AUTH);
    CHECK_STR_EQ(err_code(&r), "invalid_key");
    reply_cleanup(&r);
    /* the bearer is required, as on /locks/{key} */
    request(&r, "POST", "/locks", "{\"keys\":[\"a\"]}", NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 401);
    CHECK(r.resp.www_authenticate);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_ACQUIRE_MULTI);
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks", "{\"keys\":[\"a\"]}", "t", "Bearer nope");
    CHECK_EQ_INT(r.resp.status, 401);
    reply_cleanup(&r);
    /* no Idempotency-Key for several keys */
    fake_init(&f, "POST", "/locks", "{\"keys\":[\"a\"]}", NULL);
    fake_idem(&f, (const char *const[]){ "retry-1", NULL });
    f.rq.authorization = "Bearer " AUTH;
    memset(&r, 0, sizeof(r));
    r.action = dispatch_run(&f.rq, &r.resp, &r.acq);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 400);
    CHECK_STR_EQ(err_code(&r), "invalid_parameter");
    CHECK_CONTAINS(json_string_value(json_object_get(err_obj(&r), "message")),
                   "not supported");
    reply_cleanup(&r);
    /* draining: 503 shutting_down before anything is parsed */
    fake_init(&f, "PUT", "/locks", "junk", NULL);
    f.rq.authorization = "Bearer " AUTH;
    f.rq.shutting_down = true;
    memset(&r, 0, sizeof(r));
    r.action = dispatch_run(&f.rq, &r.resp, &r.acq);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 503);
    CHECK_STR_EQ(err_code(&r), "shutting_down");
    CHECK_EQ_INT(r.resp.retry_after, 1);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_RENEW_MULTI);
    reply_cleanup(&r);
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 0);
    /* with the bearer it works */
    request(&r, "POST", "/locks", "{\"keys\":[\"a\"]}", NULL, "Bearer " AUTH);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    router_close();
}

/* The answers the store's results make, without a store: the multi call
 * of body (a POST, PUT or DELETE /locks) answered r with g. */
static void multi_reply(const char *method,
                        const char *body,
                        enum backend_result r,
                        const struct lock_multi_grant *g,
                        struct reply *out)
{
    struct fake_req f;

    memset(out, 0, sizeof(*out));
    fake_init(&f, method, "/locks", body, (const char *const[]){ "tk", NULL });
    if (strcmp(method, "POST") == 0)
        f.rq.nlock_tokens = 0;
    CHECK_EQ_INT(router_dispatch(&rcfg, &f.rq, &out->resp, &out->acq),
                 API_ACTION_CALL);
    api_response_cleanup(&out->resp);
    handle_multi_reply(&rcfg, &out->acq, r, g, &out->resp);
    reply_parse(out);
}

static void test_reply_multi_shapes(void)
{
    struct lock_multi_grant g;
    struct reply r;

    router_open(NULL);
    /* a grant with nothing left is a 503, never a grant */
    memset(&g, 0, sizeof(g));
    g.ttl_ms = 1000;
    g.valid_until_us = 1; /* long ago */
    multi_reply("POST", "{\"keys\":[\"a\",\"b\"]}", BACKEND_OK, &g, &r);
    CHECK_EQ_INT(r.resp.status, 503);
    CHECK_STR_EQ(err_code(&r), "backend_unavailable");
    CHECK_EQ_INT(r.resp.retry_after, 1);
    reply_cleanup(&r);
    /* ttl_ms is what is left, not the TTL */
    g.ttl_ms = 10000;
    g.valid_until_us = clock_mono_us() + 4000 * 1000;
    g.fences[0] = 11;
    g.fences[1] = 12;
    g.expires_at_ms = 1795262400123LL;
    multi_reply("POST", "{\"keys\":[\"a\",\"b\"]}", BACKEND_OK, &g, &r);
    CHECK_EQ_INT(r.resp.status, 201);
    CHECK_TTL_LEFT(jint(&r, "ttl_ms"), 4000);
    CHECK_STR_EQ(jstr(&r, "expires_at"), "2026-11-21T12:00:00.123Z");
    CHECK_EQ_INT(json_integer_value(
                     json_object_get(json_object_get(r.json, "fences"), "b")),
                 12);
    reply_cleanup(&r);
    /* held: Retry-After rounded up; no hint is 1 ms */
    memset(&g, 0, sizeof(g));
    g.retry_ms = 1200;
    g.held[1] = true;
    multi_reply("POST", "{\"keys\":[\"a\",\"b\"],\"wait_ms\":5}", BACKEND_HELD,
                &g, &r);
    CHECK_EQ_INT(r.resp.status, 409);
    CHECK_EQ_INT(r.resp.retry_after, 2);
    CHECK_EQ_INT(
        json_integer_value(json_object_get(err_obj(&r), "retry_after_ms")),
        1200);
    CHECK_LIST(json_object_get(err_obj(&r), "held"), "b");
    CHECK_CONTAINS(json_string_value(json_object_get(err_obj(&r), "message")),
                   "waiting");
    reply_cleanup(&r);
    g.retry_ms = 0;
    multi_reply("POST", "{\"keys\":[\"a\",\"b\"]}", BACKEND_HELD, &g, &r);
    CHECK_EQ_INT(
        json_integer_value(json_object_get(err_obj(&r), "retry_after_ms")), 1);
    CHECK_EQ_INT(r.resp.retry_after, 1);
    reply_cleanup(&r);
    /* renew: the first key not held, by index */
    memset(&g, 0, sizeof(g));
    g.bad = 2;
    multi_reply("PUT", "{\"keys\":[\"a\",\"b\",\"c\"]}", BACKEND_MISMATCH, &g,
                &r);
    CHECK_EQ_INT(r.resp.status, 409);
    CHECK_STR_EQ(json_string_value(json_object_get(err_obj(&r), "key")), "c");
    CHECK_CONTAINS(json_string_value(json_object_get(err_obj(&r), "message")),
                   "keys[2] (\"c\")");
    reply_cleanup(&r);
    /* the store down: 503 with Retry-After, for each verb */
    multi_reply("DELETE", "{\"keys\":[\"a\"]}", BACKEND_UNAVAILABLE, &g, &r);
    CHECK_EQ_INT(r.resp.status, 503);
    CHECK_STR_EQ(err_code(&r), "backend_unavailable");
    CHECK_EQ_INT(r.resp.retry_after, 1);
    reply_cleanup(&r);
    multi_reply("PUT", "{\"keys\":[\"a\"]}", BACKEND_UNAVAILABLE, &g, &r);
    CHECK_EQ_INT(r.resp.status, 503);
    reply_cleanup(&r);
    multi_reply("POST", "{\"keys\":[\"a\"]}", BACKEND_UNAVAILABLE, &g, &r);
    CHECK_EQ_INT(r.resp.status, 503);
    reply_cleanup(&r);
    /* release: both lists, even when one is empty */
    g.released[0] = g.released[1] = true;
    multi_reply("DELETE", "{\"keys\":[\"x\",\"y\"]}", BACKEND_OK, &g, &r);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_LIST(json_object_get(r.json, "released"), "x,y");
    CHECK_LIST(json_object_get(r.json, "not_held"), "");
    reply_cleanup(&r);
    router_close();
}

/* ---- data-driven cases: tests/data/requests/<case>/{request,expect} ----
 *
 * One set of cases, in the format tests/data/README.md describes, that
 * tests/e2e/test_api.py also sends to a running lockd. Here each goes
 * through router_dispatch() on a fresh memory:// backend with auth token
 * AUTH, and a lock call is run as the server runs it:
 *
 * - @KEY@ is "k"; "setup held" first grants k and @TOKEN@ is its token.
 * - Lock-Token, Idempotency-Key and Authorization headers are passed on
 *   (Authorization is "Bearer AUTH" unless the case gives one); Content-Type is
 * dropped, as lockd reads JSON whatever the type. Any other header fails the
 * case: the router never sees it, so the case must say "only http".
 * - expect: status, code, json.FIELD, header.Allow, header.Retry-After,
 *   setup, after, keep_newline, only; an unknown line fails the case.
 */

#define CASE_KEY "k"

static const char *data_dir(void)
{
    static char dir[1024];
    const char *env = getenv("LOCKD_TEST_DATA");
    const char *file = __FILE__; /* tests/unit/test_codec.c */
    const char *slash = strrchr(file, '/');
    char exe[960];
    ssize_t n;
    DIR *d;

    if (env != NULL) {
        snprintf(dir, sizeof(dir), "%s/requests", env);
        return dir;
    }
    /* tests/unit/ -> tests/data/requests, from the source's path */
    snprintf(dir, sizeof(dir), "%.*s/../data/requests",
             slash != NULL ? (int)(slash - file) : 1,
             slash != NULL ? file : ".");
    d = opendir(dir);
    if (d != NULL) {
        closedir(d);
        return dir;
    }
    /* or from the program's path: ROOT/BUILD/tests/unit/test_codec */
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 4; up++) {
            char *s = strrchr(exe, '/');
            if (s != NULL)
                *s = '\0';
        }
        if (snprintf(dir, sizeof(dir), "%.900s/tests/data/requests", exe) < 0)
            dir[0] = '\0';
    }
    return dir;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;

    if (f == NULL)
        return NULL;
    buf = malloc(65536);
    n = buf != NULL ? fread(buf, 1, 65535, f) : 0;
    fclose(f);
    if (buf != NULL)
        buf[n] = '\0';
    *len = n;
    return buf;
}

/* s (len bytes) with every from replaced by to; malloc'ed, NUL-terminated,
 * its length in *outlen. */
static char *replace_all(
    const char *s, size_t len, const char *from, const char *to, size_t *outlen)
{
    size_t flen = strlen(from), tlen = strlen(to), n = 0, cap = len + 1;
    const char *p = s, *end = s + len, *hit;
    char *out;

    while ((hit = memmem(p, (size_t)(end - p), from, flen)) != NULL) {
        cap += tlen;
        p = hit + flen;
    }
    out = malloc(cap);
    if (out == NULL)
        return NULL;
    for (p = s; (hit = memmem(p, (size_t)(end - p), from, flen)) != NULL;
         p = hit + flen) {
        memcpy(out + n, p, (size_t)(hit - p));
        n += (size_t)(hit - p);
        memcpy(out + n, to, tlen);
        n += tlen;
    }
    memcpy(out + n, p, (size_t)(end - p));
    n += (size_t)(end - p);
    out[n] = '\0';
    *outlen = n;
    return out;
}

#define EXPECT_MAX 32

struct expect {
    char *key[EXPECT_MAX];
    char *value[EXPECT_MAX]; /* "" when the line has none */
    int n;
};

/* Split the expect file text (in place) into lines "key value"; comments
 * and empty lines dropped. False (and a failed check) on a bad line. */
static bool expect_parse(struct expect *e, char *text, const char *name)
{
    char *next;

    e->n = 0;
    for (char *p = text; *p != '\0'; p = next) {
        size_t n = strcspn(p, "\n");
        char *sp;

        next = p[n] == '\n' ? p + n + 1 : p + n;
        p[n] = '\0';
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\r'))
            p[--n] = '\0';
        if (n == 0 || p[0] == '#')
            continue;
        CHECK_MSG(e->n < EXPECT_MAX, "%s: more than %d expect lines", name,
                  EXPECT_MAX);
        if (e->n >= EXPECT_MAX)
            return false;
        sp = strchr(p, ' ');
        e->key[e->n] = p;
        e->value[e->n] = sp != NULL ? sp + 1 : p + n;
        if (sp != NULL)
            *sp = '\0';
        for (int i = 0; i < e->n; i++)
            CHECK_MSG(strcmp(e->key[i], p) != 0, "%s: expect %s given twice",
                      name, p);
        e->n++;
    }
    return true;
}

static const char *expect_get(const struct expect *e, const char *key)
{
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->key[i], key) == 0)
            return e->value[i];
    return NULL;
}

/* Each expect line is one the format knows, with a value it allows. */
static void expect_validate(const struct expect *e, const char *name)
{
    static const char *const allowed[][4] = {
        { "status", NULL },
        { "code", NULL },
        { "setup", "held", NULL },
        { "after", "held", "free", NULL },
        { "keep_newline", "yes", NULL },
        { "only", "http", "codec", NULL },
    };

    for (int i = 0; i < e->n; i++) {
        const char *k = e->key[i], *v = e->value[i];
        bool known =
            strncmp(k, "json.", 5) == 0 || strncmp(k, "header.", 7) == 0;

        for (size_t a = 0; !known && a < sizeof(allowed) / sizeof(allowed[0]);
             a++) {
            if (strcmp(k, allowed[a][0]) != 0)
                continue;
            known = true;
            if (allowed[a][1] == NULL)
                continue;
            bool ok = false;
            for (int j = 1; j < 4 && allowed[a][j] != NULL; j++)
                ok = ok || strcmp(v, allowed[a][j]) == 0;
            CHECK_MSG(ok, "%s: expect %s %s", name, k, v);
        }
        CHECK_MSG(known, "%s: unknown expect line '%s %s'", name, k, v);
    }
    CHECK_MSG(expect_get(e, "status") != NULL, "%s: no status", name);
}

/* The reply's field name against the JSON text want ("what is left" of a
 * ttl_ms, as a grant's ttl_ms is). */
static void check_json_field(const struct reply *r,
                             const char *field,
                             const char *want_text,
                             const char *name)
{
    json_error_t jerr;
    json_t *want = json_loads(want_text, JSON_DECODE_ANY, &jerr);
    json_t *got = json_object_get(r->json, field);

    CHECK_MSG(want != NULL, "%s: json.%s %s is not JSON: %s", name, field,
              want_text, jerr.text);
    if (want == NULL)
        return;
    if (strcmp(field, "ttl_ms") == 0 && json_is_integer(want) &&
        json_is_integer(got)) {
        json_int_t w = json_integer_value(want), g = json_integer_value(got);
        CHECK_MSG(g >= 1 && g <= w && g > w - 1000,
                  "%s: ttl_ms %lld, want what is left of %lld", name,
                  (long long)g, (long long)w);
    } else {
        char *g = got != NULL ? json_dumps(got, JSON_ENCODE_ANY) : NULL;
        CHECK_MSG(got != NULL && json_equal(got, want), "%s: %s = %s, want %s",
                  name, field, g != NULL ? g : "(none)", want_text);
        free(g);
    }
    json_decref(want);
}

static void check_header(const struct reply *r,
                         const char *header,
                         const char *want,
                         const char *name)
{
    char got[32] = "";

    if (strcasecmp(header, "Allow") == 0) {
        CHECK_MSG(r->resp.allow != NULL && strcmp(r->resp.allow, want) == 0,
                  "%s: Allow %s, want %s", name,
                  r->resp.allow != NULL ? r->resp.allow : "(none)", want);
    } else if (strcasecmp(header, "Retry-After") == 0) {
        if (r->resp.retry_after > 0)
            snprintf(got, sizeof(got), "%u", r->resp.retry_after);
        CHECK_MSG(strcmp(got, want) == 0, "%s: Retry-After %s, want %s", name,
                  got[0] != '\0' ? got : "(none)", want);
    } else {
        CHECK_MSG(0, "%s: header.%s is not checked here; mark it only http",
                  name, header);
    }
}

/* Run one case (*ran false when it is "only http"); the number of checks
 * that failed. */
static int run_data_case(const char *dir, const char *name, bool *ran)
{
    char path[2048], line[4096], method[32], target[4096], token[64] = "";
    char *raw, *exp, *req = NULL, *p, *body = NULL;
    const char *tokens[4] = { 0 }, *idem[4] = { 0 };
    const char *auth = NULL, *only, *after;
    size_t rawlen, elen, rlen = 0, ntok = 0, nidem = 0;
    long long fence = -1;
    bool setup;
    struct expect e;
    struct fake_req f;
    struct reply r;
    int fails = check_failures;

    snprintf(path, sizeof(path), "%s/%s/request", dir, name);
    raw = read_all(path, &rawlen);
    snprintf(path, sizeof(path), "%s/%s/expect", dir, name);
    exp = read_all(path, &elen);
    CHECK_MSG(raw != NULL && exp != NULL, "%s: cannot read", name);
    if (raw == NULL || exp == NULL || !expect_parse(&e, exp, name))
        goto out;
    expect_validate(&e, name);
    only = expect_get(&e, "only");
    if (only != NULL && strcmp(only, "http") == 0)
        goto out;
    *ran = true;
    setup = expect_get(&e, "setup") != NULL;
    after = expect_get(&e, "after");

    router_open(AUTH);
    if (setup) {
        request(&r, "POST", "/locks/" CASE_KEY "?ttl_ms=10000", NULL, NULL,
                "Bearer " AUTH);
        CHECK_MSG(r.resp.status == 201, "%s: setup: status %u", name,
                  r.resp.status);
        if (jstr(&r, "token") != NULL)
            snprintf(token, sizeof(token), "%s", jstr(&r, "token"));
        fence = jint(&r, "fence");
        reply_cleanup(&r);
    }
    /* @KEY@ and @TOKEN@ */
    {
        size_t n1;
        char *k = replace_all(raw, rawlen, "@KEY@", CASE_KEY, &n1);

        CHECK_MSG(k != NULL, "%s: out of memory", name);
        if (k == NULL)
            goto close;
        CHECK_MSG(setup || memmem(k, n1, "@TOKEN@", 7) == NULL,
                  "%s: @TOKEN@ without setup held", name);
        req = replace_all(k, n1, "@TOKEN@", token, &rlen);
        free(k);
        CHECK_MSG(req != NULL, "%s: out of memory", name);
        if (req == NULL)
            goto close;
    }
    /* request line, headers, body */
    p = req;
    {
        size_t n = strcspn(p, "\n");
        snprintf(line, sizeof(line), "%.*s", (int)n, p);
        p += n + (p[n] == '\n');
        CHECK_MSG(sscanf(line, "%31s %4095s", method, target) == 2,
                  "%s: bad request line", name);
    }
    while (*p != '\0') {
        size_t n = strcspn(p, "\n");
        bool last = p[n] == '\0'; /* the last line may lack its \n */
        if (n == 0) {
            body = p + 1;
            break;
        }
        p[n] = '\0';
        if (strncasecmp(p, "Lock-Token:", 11) == 0 && ntok < 3) {
            char *v = p + 11;
            while (*v == ' ')
                v++;
            tokens[ntok++] = v;
        } else if (strncasecmp(p, "Idempotency-Key:", 16) == 0 && nidem < 3) {
            char *v = p + 16;
            while (*v == ' ')
                v++;
            idem[nidem++] = v;
        } else if (strncasecmp(p, "Authorization:", 14) == 0) {
            auth = p + 14;
            while (*auth == ' ')
                auth++;
        } else if (strncasecmp(p, "Content-Type:", 13) != 0) {
            CHECK_MSG(0,
                      "%s: header '%s' does not reach the router; mark "
                      "the case only http",
                      name, p);
        }
        p += last ? n : n + 1;
    }
    if (auth == NULL)
        auth = "Bearer " AUTH;
    memset(&r, 0, sizeof(r));
    fake_init(&f, method, target, NULL, tokens);
    fake_idem(&f, idem);
    if (body != NULL) {
        f.rq.body = body;
        f.rq.body_len = rlen - (size_t)(body - req);
        if (f.rq.body_len > 0 && body[f.rq.body_len - 1] == '\n' &&
            expect_get(&e, "keep_newline") == NULL)
            f.rq.body_len--;
    }
    f.rq.authorization = auth;
    r.action = dispatch_run(&f.rq, &r.resp, &r.acq);
    reply_parse(&r);
    for (int i = 0; i < e.n; i++) {
        const char *k = e.key[i], *v = e.value[i];

        if (strcmp(k, "status") == 0) {
            char got[16];
            snprintf(got, sizeof(got), "%u", r.resp.status);
            CHECK_MSG(strcmp(got, v) == 0, "%s: status %s, expected %s", name,
                      got, v);
        } else if (strcmp(k, "code") == 0) {
            CHECK_MSG(err_code(&r) != NULL && strcmp(err_code(&r), v) == 0,
                      "%s: code %s, expected %s", name,
                      err_code(&r) != NULL ? err_code(&r) : "(none)", v);
        } else if (strncmp(k, "json.", 5) == 0) {
            size_t n;
            char *want = replace_all(v, strlen(v), "@KEY@", CASE_KEY, &n);
            if (want != NULL)
                check_json_field(&r, k + 5, want, name);
            free(want);
        } else if (strncmp(k, "header.", 7) == 0) {
            check_header(&r, k + 7, v, name);
        }
    }
    reply_cleanup(&r);
    if (after != NULL) {
        request(&r, "GET", "/locks/" CASE_KEY, NULL, NULL, "Bearer " AUTH);
        if (strcmp(after, "free") == 0)
            CHECK_MSG(r.resp.status == 404,
                      "%s: inspect afterwards: %u, "
                      "want 404",
                      name, r.resp.status);
        else
            CHECK_MSG(r.resp.status == 200 &&
                          (!setup || jint(&r, "fence") == fence),
                      "%s: inspect afterwards: %u fence %lld, want 200%s", name,
                      r.resp.status, jint(&r, "fence"),
                      setup ? " with the setup's fence" : "");
        reply_cleanup(&r);
    }
close:
    router_close();
out:
    free(raw);
    free(exp);
    free(req);
    return check_failures - fails;
}

static void test_data_driven_requests(void)
{
    const char *dir = data_dir();
    DIR *d = opendir(dir);
    struct dirent *de;
    int ncases = 0, nrun = 0;

    CHECK_MSG(d != NULL, "cannot open %s (set LOCKD_TEST_DATA to tests/data)",
              dir);
    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        bool ran = false;
        int fails;

        if (de->d_name[0] == '.')
            continue;
        ncases++;
        fails = run_data_case(dir, de->d_name, &ran);
        nrun += ran;
        if (fails > 0)
            printf("  data case %s failed\n", de->d_name);
    }
    closedir(d);
    printf("  %d data cases run, %d only for HTTP\n", nrun, ncases - nrun);
    CHECK_MSG(nrun >= 10, "only %d of %d data cases in %s ran", nrun, ncases,
              dir);
}

/* ---- failing-allocation torture ----
 *
 * jansson's allocator is replaced by one that refuses the n-th allocation
 * (or every one from the n-th on), for n = 1, 2, ... until a run needs
 * fewer than n. Every run must end in a clean answer (the expected one, or
 * 500 internal_error) and leave no jansson allocation alive.
 */

#define TRACK_MAX 8192

static void *live[TRACK_MAX]; /* allocations made through jansson, alive */
static size_t nlive;
static long alloc_calls; /* in this run */
static long fail_at;     /* 0: never fail */
static bool fail_rest;   /* fail every allocation from fail_at on */
static long failures;    /* allocations refused in this run */
static bool track_overflow;
static long foreign_frees;  /* frees of memory jansson did not make */
static long corrupt_bodies; /* reply bodies that are not JSON */
static char corrupt_example[256];

static void *torture_malloc(size_t n)
{
    void *p;

    alloc_calls++;
    if (fail_at > 0 &&
        (alloc_calls == fail_at || (fail_rest && alloc_calls > fail_at))) {
        failures++;
        return NULL;
    }
    p = malloc(n);
    if (p != NULL) {
        if (nlive < TRACK_MAX)
            live[nlive++] = p;
        else
            track_overflow = true;
    }
    return p;
}

/* Forget p if jansson made it; true if it did. */
static bool untrack(void *p)
{
    for (size_t i = nlive; i-- > 0;) {
        if (live[i] == p) {
            live[i] = live[--nlive];
            return true;
        }
    }
    return false;
}

static void torture_free(void *p)
{
    if (p == NULL)
        return;
    if (!untrack(p))
        foreign_frees++;
    free(p);
}

/* resp->body comes from json_dumps() (jansson's allocator) or from the
 * codec's own strdup(), and the codec frees it with free(): forget it. */
static void torture_free_body(struct api_response *resp)
{
    if (resp->body != NULL)
        untrack(resp->body);
    api_response_cleanup(resp);
}

static void torture_install(void)
{
    nlive = 0;
    foreign_frees = 0;
    corrupt_bodies = 0;
    track_overflow = false;
    codec_json_setup(torture_malloc, torture_free);
}

static void torture_uninstall(void)
{
    codec_json_setup(NULL, NULL);
    CHECK_EQ_INT(foreign_frees, 0);
    CHECK(!track_overflow);
}

static void torture_begin(long n, bool rest)
{
    alloc_calls = 0;
    failures = 0;
    fail_at = n;
    fail_rest = rest;
}

static void torture_end(void)
{
    fail_at = 0;
}

/*
 * The answer of one run: the expected status and code, or 500
 * internal_error; or, when a body was parsed (may_mislabel), a 400:
 * jansson 2.14's parser reports some allocation failures as syntax errors
 * or duplicate keys, which lockd cannot tell apart (a 400 for a valid
 * request, only when malloc fails: noted, not failed). A body that is not JSON
 * is counted in corrupt_bodies (see test_torture_reply_body_is_json).
 */
static void check_torture_body(const struct api_response *resp,
                               unsigned want_status,
                               const char *want_code,
                               bool may_mislabel,
                               long n)
{
    json_t *root;
    const char *code;

    CHECK_MSG(resp->body != NULL && resp->len > 0, "run %ld: no body", n);
    if (resp->body == NULL)
        return;
    CHECK_STR_EQ(resp->content_type, "application/json");
    root = json_loadb(resp->body, resp->len, 0, NULL);
    if (root == NULL) {
        if (corrupt_bodies++ == 0)
            snprintf(corrupt_example, sizeof(corrupt_example), "%s",
                     resp->body);
    }
    code = json_string_value(
        json_object_get(json_object_get(root, "error"), "code"));
    if (resp->status == 500) {
        if (root != NULL)
            CHECK_STR_EQ(code, "internal_error");
    } else if (resp->status == 400 && may_mislabel && failures > 0) {
        /* jansson's parser out of memory; see above */
    } else {
        CHECK_MSG(resp->status == want_status,
                  "run %ld: status %u, "
                  "expected %u",
                  n, resp->status, want_status);
        if (want_code != NULL && root != NULL)
            CHECK_STR_EQ(code, want_code);
    }
    json_decref(root);
}

static void check_no_leak(long n, const char *what)
{
    CHECK_MSG(nlive == 0, "%s run %ld: %zu jansson allocations leaked", what, n,
              nlive);
    nlive = 0;
}

struct torture_stats {
    long ok, oom, mislabelled;
};

static long corrupt_parses; /* parses that succeeded with wrong values */
static char corrupt_parse_example[256];

/* One run of codec_parse_params on body (and a query). */
static void torture_parse_once(long n,
                               bool rest,
                               struct torture_stats *st,
                               const char *body,
                               enum api_error want)
{
    struct fake_req f;
    struct api_params p;
    char msg[512] = "";
    enum api_error err;

    fake_init(&f, "PUT", "/locks/k?ttl_ms=100", body, NULL);
    torture_begin(n, rest);
    err = codec_parse_params(&f.rq,
                             ALLOW_RENEW | API_P_OWNER | API_P_WAIT_MS |
                                 API_P_MODE | API_P_LIMIT,
                             MAX_TTL, MAX_WAIT, &p, msg, sizeof(msg));
    torture_end();
    if (err == API_OK) {
        CHECK_MSG(want == API_OK, "run %ld: accepted a bad body", n);
        st->ok++;
        if (p.token == NULL || strcmp(p.token, "abc") != 0 || p.owner == NULL ||
            strcmp(p.owner, "pod-a/worker-3 \xc3\xa9") != 0 || p.wait_ms != 7 ||
            p.ttl_ms != 100) {
            if (corrupt_parses++ == 0)
                snprintf(corrupt_parse_example, sizeof(corrupt_parse_example),
                         "run %ld: token '%s' owner '%s' wait_ms %llu", n,
                         p.token != NULL ? p.token : "(null)",
                         p.owner != NULL ? p.owner : "(null)",
                         (unsigned long long)p.wait_ms);
        }
        codec_params_cleanup(&p);
    } else {
        CHECK(p.owner == NULL && p.token == NULL);
        CHECK(msg[0] != '\0');
        if (err == want)
            st->ok++;
        else if (err == API_INTERNAL)
            st->oom++;
        else if (failures > 0 &&
                 (err == API_INVALID_JSON || err == API_INVALID_PARAMETER))
            st->mislabelled++; /* see check_torture_body() */
        else
            CHECK_MSG(0, "run %ld%s: error %d ('%s') instead of %d", n,
                      rest ? "+" : "", err, msg, want);
    }
    check_no_leak(n, "parse");
}

static void torture_parse_all(void)
{
    static const struct {
        const char *body;
        enum api_error want;
    } cases[] = {
        { "{\"token\":\"abc\",\"wait_ms\":7,\"owner\":\"pod-a/worker-3 "
          "\\u00e9\"}",
          API_OK },
        { "{\"token\":\"abc\",\"token\":\"abd\"}", API_INVALID_PARAMETER },
        { "[1,2,{\"a\":[3]}]", API_INVALID_JSON },
        { "{\"token\":\"abc\",\"wait_ms\":7,\"mode\":\"shrd\"}",
          API_INVALID_PARAMETER },
        { "{\"ttl_ms\":1,\"a\":{\"b\":[1,2,3]}}", API_INVALID_PARAMETER },
    };

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int rest = 0; rest <= 1; rest++) {
            struct torture_stats st = { 0 };
            long n;
            for (n = 1; n < 10000; n++) {
                torture_parse_once(n, rest, &st, cases[c].body, cases[c].want);
                if (failures == 0)
                    break; /* every allocation of the run succeeded */
            }
            CHECK_MSG(n > 1 && n < 10000, "case %zu: %ld runs", c, n);
            CHECK_MSG(st.ok >= 1, "case %zu: never succeeded", c);
        }
    }
}

static void test_torture_parse_params_fails_cleanly(void)
{
    torture_install();
    corrupt_parses = 0;
    torture_parse_all();
    torture_uninstall();
}

/*
 * Regression (jansson 2.14, fixed in api/codec.c by codec_json_setup()): the
 * parser's lex_save() ignores strbuffer_append_byte()'s failure, so when
 * an allocation fails while a token is read, a byte is silently dropped
 * and json_loadb() SUCCEEDS with an altered value ("pod-a/worker-3 e"
 * loses its space; a digit of ttl_ms or a character of a token can go the
 * same way). The codec's allocation wrappers set a thread-local flag when
 * malloc fails, and it answers 500 internal_error whenever the flag was
 * set during json_loadb().
 */
static void test_torture_parse_never_alters_values(void)
{
    torture_install();
    corrupt_parses = 0;
    torture_parse_all();
    CHECK_MSG(corrupt_parses == 0,
              "%ld parses succeeded with altered values, e.g. %s",
              corrupt_parses, corrupt_parse_example);
    torture_uninstall();
}

/* codec_reply, codec_error, and codec_error over an earlier body. */
static void torture_replies(bool rest, long *n500)
{
    long n;

    for (n = 1; n < 10000; n++) {
        struct api_response resp = { 0 };
        torture_begin(n, rest);
        codec_reply(&resp, 201, "{s:s%,s:s,s:I,s:I,s:s}", "key", "orders/42",
                    (size_t)9, "token", "0123456789abcdef0123456789abcdef",
                    "fence", (json_int_t)12345, "ttl_ms", (json_int_t)30000,
                    "expires_at", "2026-11-21T12:00:30.123Z");
        torture_end();
        *n500 += resp.status == 500;
        check_torture_body(&resp, 201, NULL, false, n);
        torture_free_body(&resp);
        check_no_leak(n, "codec_reply");
        if (failures == 0)
            break;
    }
    CHECK(n > 1 && n < 10000);
    for (n = 1; n < 10000; n++) {
        struct api_response resp = { 0 };
        torture_begin(n, rest);
        codec_error(&resp, API_TOKEN_MISMATCH,
                    "held under another token, 'quoted' \"too\"");
        torture_end();
        check_torture_body(&resp, 409, "token_mismatch", false, n);
        torture_free_body(&resp);
        check_no_leak(n, "codec_error");
        if (failures == 0)
            break;
    }
    CHECK(n > 1 && n < 10000);
    for (n = 1; n < 10000; n++) {
        struct api_response resp = { 0 };
        codec_error(&resp, API_NOT_FOUND, NULL);
        untrack(resp.body); /* the codec frees it with free() */
        torture_begin(n, rest);
        codec_error(&resp, API_INVALID_KEY, "bad key");
        torture_end();
        check_torture_body(&resp, 400, "invalid_key", false, n);
        torture_free_body(&resp);
        check_no_leak(n, "codec_error twice");
        if (failures == 0)
            break;
    }
    CHECK(n > 1 && n < 10000);
}

/* codec_inspect of a shared key with holders: 500 or the whole body. */
static void torture_inspect(bool rest, long *n500)
{
    struct lock_info info;
    long n;

    make_info(&info, LOCK_SHARED, 5, 7);
    info.limit = 9;
    for (n = 1; n < 10000; n++) {
        struct api_response resp = { 0 };
        torture_begin(n, rest);
        codec_inspect(&resp, "orders/42", 9, &info);
        torture_end();
        *n500 += resp.status == 500;
        check_torture_body(&resp, 200, NULL, false, n);
        if (resp.status == 200) {
            json_t *root = json_loadb(resp.body, resp.len, 0, NULL);
            CHECK_MSG(json_array_size(json_object_get(root, "holders")) == 5 &&
                          json_object_size(root) == 9,
                      "run %ld: a 200 inspect body lost part of it", n);
            json_decref(root);
        }
        torture_free_body(&resp);
        check_no_leak(n, "codec_inspect");
        if (failures == 0)
            break;
    }
    CHECK(n > 1 && n < 10000);
    lock_info_clear(&info);
}

static void test_torture_codec_reply_and_error_fail_cleanly(void)
{
    long n500 = 0;

    torture_install();
    torture_replies(false, &n500);
    torture_replies(true, &n500);
    torture_inspect(false, &n500);
    torture_inspect(true, &n500);
    torture_uninstall();
    CHECK(n500 > 0); /* the loop did make replies fail */
}

/*
 * Regression (jansson 2.14, fixed in api/codec.c set_body()): json_dumps()
 * ignores the result of dump_string() for object keys (dump.c, do_dump(),
 * JSON_OBJECT branch), so when growing its buffer fails while writing a key
 * the key is silently dropped and a corrupt body such as
 *   {"error":{"code:"token_mismatch","message":"..."}}
 * is returned, which lockd sends with its status. docs/API.md: every response
 * is JSON. The codec sizes with json_dumpb(root, NULL, 0, flags), mallocs,
 * then json_dumpb()s into that buffer (dump_to_buffer never fails).
 */
static void test_torture_reply_body_is_json(void)
{
    long n500 = 0;

    torture_install();
    torture_replies(false, &n500);
    torture_replies(true, &n500);
    CHECK_MSG(corrupt_bodies == 0,
              "%ld replies were not JSON under failing allocations, e.g. "
              "'%s'",
              corrupt_bodies, corrupt_example);
    torture_uninstall();
}

/* The router end to end under failing allocations: requests that do not
 * change state (inspect, a mismatched release, acquire parsing). */
static void test_torture_router_fails_cleanly(void)
{
    static const struct {
        const char *method, *target, *body, *token;
        unsigned status;
        const char *code;
    } reqs[] = {
        { "GET", "/locks/held", NULL, NULL, 200, NULL },
        { "DELETE", "/locks/held", "{\"token\":\"nope\"}", NULL, 409,
          "token_mismatch" },
        { "PUT", "/locks/free", NULL, "tok", 404, "lock_not_found" },
        { "PATCH", "/locks/held", NULL, NULL, 405, "method_not_allowed" },
        { "GET", "/readyz", NULL, NULL, 200, NULL },
        { "GET", "/nowhere", NULL, NULL, 404, "not_found" },
        { "POST", "/locks/x", "{\"ttl_ms\":1,\"ttl_ms\":2}", NULL, 400,
          "invalid_parameter" },
        { "POST", "/locks/x", "{\"ttl_ms\":5,\"owner\":\"me\"}", NULL, 0,
          NULL }, /* 0: parsed into an acquire to run */
        { "PUT", "/locks", "{\"keys\":[\"held\",\"x\"]}", "nope", 409,
          "token_mismatch" },
        { "DELETE", "/locks", "{\"keys\":[\"x\",\"held\"]}", "nope", 404,
          "lock_not_found" },
        { "POST", "/locks", "{\"keys\":[\"held\",\"y\"],\"ttl_ms\":9}", NULL,
          409, "lock_held" },
        { "POST", "/locks", "{\"keys\":[\"a\",\"b\",\"a\"]}", NULL, 400,
          "invalid_parameter" },
        { "PATCH", "/locks", NULL, NULL, 405, "method_not_allowed" },
    };
    struct reply r;

    router_open(NULL);
    request(&r, "POST", "/locks/held?owner=someone", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    torture_install();
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        for (int rest = 0; rest <= 1; rest++) {
            long n;
            for (n = 1; n < 10000; n++) {
                const char *tokens[2] = { reqs[i].token, NULL };
                struct fake_req f;
                struct api_response resp;
                struct api_call acq;
                enum api_action a;

                fake_init(&f, reqs[i].method, reqs[i].target, reqs[i].body,
                          tokens);
                memset(&acq, 0, sizeof(acq)); /* as the server's calloc */
                torture_begin(n, rest);
                a = router_dispatch(&rcfg, &f.rq, &resp, &acq);
                if (a == API_ACTION_CALL && acq.verb != API_VERB_ACQUIRE)
                    run_call(&acq, &resp);
                torture_end();
                if (reqs[i].status == 0 && a == API_ACTION_CALL &&
                    acq.verb == API_VERB_ACQUIRE) {
                    CHECK_EQ_U64(acq.ttl_ms, 5);
                    CHECK_STR_EQ(acq.owner, "me");
                    CHECK(resp.body == NULL);
                } else {
                    CHECK(a == API_ACTION_REPLY ||
                          acq.verb != API_VERB_ACQUIRE);
                    check_torture_body(&resp, reqs[i].status, reqs[i].code,
                                       reqs[i].body != NULL, n);
                }
                api_call_cleanup(&acq); /* as the server does */
                torture_free_body(&resp);
                check_no_leak(n, reqs[i].target);
                if (failures == 0)
                    break;
            }
            CHECK_MSG(n > 1 && n < 10000, "request %zu: %ld runs", i, n);
        }
    }
    torture_uninstall();
    /* nothing changed: still held once, by the same grant */
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 1);
    request(&r, "GET", "/locks/held", NULL, NULL, NULL);
    CHECK_STR_EQ(jstr(&r, "owner"), "someone");
    reply_cleanup(&r);
    router_close();
}

/* The multi-key answers under failing allocations: 500, or all of it. */
static void test_torture_multi_replies_fail_cleanly(void)
{
    struct fake_req f;
    struct api_params p;
    struct api_keys k;
    struct lock_multi_grant g;
    char msg[256];
    long n500 = 0;

    fake_init(&f, "POST", "/locks", "{\"keys\":[\"a\",\"b/c\",\"d\"]}", NULL);
    CHECK_EQ_INT(codec_parse_multi(&f.rq, API_P_TTL_MS, MAX_TTL, MAX_WAIT, &p,
                                   &k, msg, sizeof(msg)),
                 API_OK);
    memset(&g, 0, sizeof(g));
    g.fences[1] = 7;
    g.held[1] = g.released[0] = true;
    g.retry_ms = 10;
    torture_install();
    for (int what = 0; what < 4; what++) {
        for (int rest = 0; rest <= 1; rest++) {
            long n;
            for (n = 1; n < 10000; n++) {
                struct api_response resp = { 0 };
                static const unsigned want[] = { 201, 409, 404, 200 };
                static const size_t members[] = { 5, 1, 1, 2 };
                json_t *root;
                torture_begin(n, rest);
                if (what == 0)
                    codec_multi_grant(&resp, 201, &k, "tok", &g, 1000);
                else if (what == 1)
                    codec_multi_held(&resp, &k, &g, true);
                else if (what == 2)
                    codec_multi_bad_key(&resp, API_LOCK_NOT_FOUND, &k, 1);
                else
                    codec_multi_released(&resp, &k, &g);
                torture_end();
                n500 += resp.status == 500;
                check_torture_body(&resp, want[what], NULL, false, n);
                root = json_loadb(resp.body, resp.len, 0, NULL);
                CHECK_MSG(resp.status == 500 ||
                              json_object_size(root) == members[what],
                          "answer %d run %ld: part of the body is lost", what,
                          n);
                json_decref(root);
                torture_free_body(&resp);
                check_no_leak(n, "multi reply");
                if (failures == 0)
                    break;
            }
            CHECK_MSG(n > 1 && n < 10000, "answer %d: %ld runs", what, n);
        }
    }
    torture_uninstall();
    CHECK(n500 > 0);
    codec_params_cleanup(&p);
    codec_keys_cleanup(&k);
}

/* ---- the operator endpoints (issue 16) ---- */

static void check_cursor_round_trip(const char *key, size_t len)
{
    char cur[API_CURSOR_MAX + 1], back[LOCK_KEY_MAX + 1];
    size_t blen = 0;

    CHECK_EQ_INT(codec_cursor_encode(key, len, cur, sizeof(cur)), 0);
    CHECK(cur[0] == 'k');
    CHECK(strcspn(cur, "+/=") == strlen(cur)); /* url-safe, no padding */
    CHECK_EQ_INT(codec_cursor_decode(cur, strlen(cur), back, &blen), 0);
    CHECK_EQ_INT(blen, len);
    CHECK(memcmp(back, key, len) == 0);
}

static void test_cursor_round_trips_and_rejects_junk(void)
{
    char big[LOCK_KEY_MAX + 1];
    char key[LOCK_KEY_MAX + 1];
    size_t len;
    static const char *const junk[] = {
        "",       "k",
        "kA",     "xYQ", /* another tag */
        "kYQ=",   "kY+Q",
        "kY/Q",   "kYR", /* trailing bits set: not what encode makes */
        "k_w",           /* 0xff: not UTF-8 */
        "kAA",           /* NUL */
        "kCQ",           /* a tab: a control character */
        "kYWJjZ",        /* 5 characters: 1 mod 4 */
    };

    check_cursor_round_trip("a", 1);
    check_cursor_round_trip("ab", 2);
    check_cursor_round_trip("abc", 3);
    check_cursor_round_trip("orders/42 \xc3\xa9", 12);
    for (size_t i = 0; i < LOCK_KEY_MAX; i++)
        big[i] = (char)('a' + i % 26);
    big[LOCK_KEY_MAX] = '\0';
    check_cursor_round_trip(big, LOCK_KEY_MAX);
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
        CHECK_MSG(codec_cursor_decode(junk[i], strlen(junk[i]), key, &len) ==
                      -1,
                  "cursor '%s' accepted", junk[i]);
    {
        char cur[API_CURSOR_MAX + 8];
        CHECK_EQ_INT(codec_cursor_encode(big, LOCK_KEY_MAX, cur, sizeof(cur)),
                     0);
        strcat(cur, "YQ"); /* 513 bytes */
        CHECK_EQ_INT(codec_cursor_decode(cur, strlen(cur), key, &len), -1);
    }
    CHECK_EQ_INT(codec_cursor_encode("", 0, key, API_CURSOR_MAX + 1), -1);
    CHECK_EQ_INT(codec_cursor_encode("a", 1, key, 4), -1);
}

static enum api_error
parse_list(const char *query, const char *body, struct api_list_params *p)
{
    struct fake_req f;

    fake_init(&f, "GET", query, body, NULL);
    return codec_parse_list(&f.rq, p, last_msg, sizeof(last_msg));
}

static void test_parse_list_reads_limits_and_refuses_junk(void)
{
    struct api_list_params p;
    static const char *const bad[] = {
        "/locks?limit=0",
        "/locks?limit=1001",
        "/locks?limit=abc",
        "/locks?limit=",
        "/locks?limit=-1",
        "/locks?limit=+5",
        "/locks?limit=5x",
        "/locks?limit=1&limit=1",
        "/locks?prefix=a&prefix=a",
        "/locks?prefix",
        "/locks?cursor=",
        "/locks?cursor=kYR",
        "/locks?x=1",
        "/locks?token=a",
        "/locks?force=true",
        "/locks?prefix=a%00",
        "/locks?prefix=%zz",
        "/locks?limit=1%00",
    };

    CHECK_EQ_INT(parse_list("/locks", NULL, &p), API_OK);
    CHECK_EQ_INT(p.limit, API_LIST_DEFAULT);
    CHECK_STR_EQ(p.prefix, "");
    CHECK(!p.has_cursor);
    codec_list_params_cleanup(&p);
    CHECK_EQ_INT(
        parse_list("/locks?limit=1&prefix=a%2Fb%C3%A9+c&cursor=kYQ", NULL, &p),
        API_OK);
    CHECK_EQ_INT(p.limit, 1);
    CHECK_STR_EQ(p.prefix, "a/b\xc3\xa9 c");
    CHECK_EQ_INT(p.prefix_len, 7);
    CHECK(p.has_cursor);
    CHECK_STR_EQ(p.after, "a");
    codec_list_params_cleanup(&p);
    CHECK_EQ_INT(parse_list("/locks?limit=1000&prefix=%C3", NULL, &p),
                 API_OK); /* half a character is a prefix of keys */
    CHECK_EQ_INT(p.limit, 1000);
    CHECK_EQ_INT(p.prefix_len, 1);
    codec_list_params_cleanup(&p);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_MSG(parse_list(bad[i], NULL, &p) == API_INVALID_PARAMETER,
                  "%s accepted", bad[i]);
        CHECK(p.prefix == NULL);
    }
    CHECK_EQ_INT(parse_list("/locks", "{}", &p), API_INVALID_PARAMETER);
    {
        char q[700] = "/locks?prefix=";
        size_t n = strlen(q);
        memset(q + n, 'a', LOCK_KEY_MAX + 1);
        q[n + LOCK_KEY_MAX + 1] = '\0';
        CHECK_EQ_INT(parse_list(q, NULL, &p), API_INVALID_PARAMETER);
        q[n + LOCK_KEY_MAX] = '\0';
        CHECK_EQ_INT(parse_list(q, NULL, &p), API_OK);
        codec_list_params_cleanup(&p);
    }
}

#define ADMIN "adm1n-bearer-token-0123456789"

static void router_set_admin(const char *admin)
{
    write_token_file(adm_path, sizeof(adm_path), admin);
    router_authz();
}

static void router_clear_admin(void)
{
    if (adm_path[0] != '\0')
        unlink(adm_path);
    adm_path[0] = '\0';
    router_authz();
}

/* A forced release of k as auth sends it: the status, the key still held
 * or not checked by the caller. */
static unsigned force_status(const char *auth, const char *k)
{
    struct reply r;
    char target[128];
    unsigned st;

    snprintf(target, sizeof(target), "/locks/%s?force=true", k);
    request(&r, "DELETE", target, NULL, NULL, auth);
    st = r.resp.status;
    if (st == 401)
        CHECK(r.resp.www_authenticate);
    if (st == 401 || st == 403)
        CHECK_STR_EQ(err_code(&r), st == 401 ? "unauthorized" : "forbidden");
    reply_cleanup(&r);
    return st;
}

static void test_router_force_release_auth_matrix(void)
{
    struct {
        bool auth, admin;
        const char *sent;
        unsigned want;
    } rows[] = {
        { false, false, NULL, 403 },
        { false, false, "Bearer " AUTH, 403 },
        { true, false, NULL, 401 },
        { true, false, "Bearer wrong", 401 },
        { true, false, "Bearer " AUTH, 403 },
        { false, true, NULL, 401 },
        { false, true, "Bearer wrong", 401 },
        { false, true, "Bearer " ADMIN, 200 },
        { true, true, NULL, 401 },
        { true, true, "Basic " ADMIN, 401 },
        { true, true, "Bearer " ADMIN "x", 401 },
        { true, true, "Bearer " AUTH, 403 },
        { true, true, "Bearer " ADMIN, 200 },
    };
    struct reply r;

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *ok = rows[i].auth ? "Bearer " AUTH : NULL;
        router_open(rows[i].auth ? AUTH : NULL);
        if (rows[i].admin)
            router_set_admin(ADMIN);
        request(&r, "POST", "/locks/fk", NULL, NULL, ok);
        CHECK_EQ_INT(r.resp.status, 201);
        reply_cleanup(&r);
        CHECK_MSG(force_status(rows[i].sent, "fk") == rows[i].want,
                  "row %zu: auth %d admin %d sent '%s': want %u", i,
                  rows[i].auth, rows[i].admin,
                  rows[i].sent != NULL ? rows[i].sent : "(none)", rows[i].want);
        CHECK_EQ_INT(backend_held_count(rcfg.backend),
                     rows[i].want == 200 ? 0 : 1);
        router_clear_admin();
        router_close();
    }
}

static void test_router_force_release_and_list(void)
{
    struct reply r;
    char tok[API_TOKEN_LEN + 1];
    static const char *const bad[] = {
        "/locks/fk?force=true&all=true",
        "/locks/fk?force=true&token=x",
        "/locks/fk?force=1",
        "/locks/fk?force=true&force=false",
    };

    router_open(NULL);
    router_set_admin(ADMIN);
    request(&r, "POST", "/locks/fk", "{\"owner\":\"o\"}", NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    snprintf(tok, sizeof(tok), "%s", r.acq.token);
    reply_cleanup(&r);
    request(&r, "POST", "/locks/fj", NULL, NULL, NULL);
    reply_cleanup(&r);
    request(&r, "GET", "/locks?prefix=f&limit=1", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_LIST);
    CHECK_EQ_INT(json_array_size(json_object_get(r.json, "locks")), 1);
    CHECK_STR_EQ(jstr(&r, "next_cursor"), "kZmo"); /* "fj" */
    CHECK(strstr(r.resp.body, tok) == NULL);
    reply_cleanup(&r);
    request(&r, "GET", "/locks?prefix=f&limit=1&cursor=kZmo", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_STR_EQ(
        json_string_value(json_object_get(
            json_array_get(json_object_get(r.json, "locks"), 0), "owner")),
        "o");
    reply_cleanup(&r);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        request(&r, "DELETE", bad[i], NULL, NULL, "Bearer " ADMIN);
        CHECK_MSG(r.resp.status == 400, "%s gave %u", bad[i], r.resp.status);
        reply_cleanup(&r);
    }
    request(&r, "DELETE", "/locks/fk", "{\"force\":true}", tok,
            "Bearer " ADMIN);
    CHECK_EQ_INT(r.resp.status, 400); /* a Lock-Token beside force */
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks/fk?force=false", NULL, NULL, NULL);
    CHECK_STR_EQ(err_code(&r), "missing_token");
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks/fk", "{\"force\":true}", NULL,
            "Bearer " ADMIN);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_EQ_INT(r.resp.route, API_ROUTE_FORCE_RELEASE);
    CHECK(json_is_true(json_object_get(r.json, "forced")));
    CHECK(json_is_true(json_object_get(r.json, "released")));
    CHECK_EQ_INT(jint(&r, "holders"), 1);
    reply_cleanup(&r);
    request(&r, "DELETE", "/locks/fk?force=true", NULL, NULL, "Bearer " ADMIN);
    CHECK_EQ_INT(r.resp.status, 404);
    CHECK_STR_EQ(err_code(&r), "lock_not_found");
    reply_cleanup(&r);
    router_clear_admin();
    router_close();
}

/* ---- a store of independent nodes: the real memory backend behind an
 * ops table that says NO_SEMAPHORE and reports nodes, as redlock:// does ----
 */

static struct backend_ops nodes_ops;         /* memory's, amended */
static const struct backend_ops *nodes_real; /* memory's own */
static struct backend_node fake_nodes[3];    /* what nodes() reports */

static size_t fake_nodes_of(const struct backend *be,
                            struct backend_node *out,
                            size_t max,
                            unsigned *quorum)
{
    (void)be;
    for (size_t i = 0; i < 3 && i < max; i++)
        out[i] = fake_nodes[i];
    *quorum = 2;
    return 3;
}

/* router_open() on memory://, then its ops swapped for a copy with
 * BACKEND_CAP_NO_SEMAPHORE, the scheme "redlock" and nodes(): node 0 up
 * and voting, node 1 up and quarantined, node 2 down. */
static void nodes_open(void)
{
    static const struct backend_node nodes[3] = {
        { "127.0.0.1:7001", true, true, false, 0, 120 },
        { "127.0.0.1:7002", true, false, true, 4000, 90 },
        { "127.0.0.1:7003", false, false, false, 0, -1 },
    };

    router_open(NULL);
    memcpy(fake_nodes, nodes, sizeof(nodes));
    nodes_real = rcfg.backend->ops;
    nodes_ops = *nodes_real;
    nodes_ops.scheme = "redlock";
    nodes_ops.caps |= BACKEND_CAP_NO_SEMAPHORE;
    nodes_ops.nodes = fake_nodes_of;
    rcfg.backend->ops = &nodes_ops;
}

static void nodes_close(void)
{
    rcfg.backend->ops = nodes_real; /* memory's close() */
    router_close();
}

static const char *err_message(const struct reply *r)
{
    return json_string_value(
        json_object_get(json_object_get(r->json, "error"), "message"));
}

/* A shared acquire with a limit above 1 is refused before the store is
 * asked (the key stays free); limit 1, no limit, exclusive and multi-key
 * are served. On a store with semaphores the same request is a grant. */
static void test_router_semaphore_refused_on_no_semaphore_store(void)
{
    static const char *const refused[] = {
        "{\"mode\":\"shared\",\"limit\":2}",
        "{\"mode\":\"shared\",\"limit\":10000,\"ttl_ms\":5000}",
    };
    struct reply r;

    nodes_open();
    for (size_t i = 0; i < 2; i++) {
        request(&r, "POST", "/locks/sem", refused[i], NULL, NULL);
        CHECK_EQ_INT(r.action, API_ACTION_REPLY);
        CHECK_EQ_INT(r.resp.status, 400);
        CHECK_STR_EQ(err_code(&r), "invalid_parameter");
        CHECK_STR_EQ(err_message(&r),
                     "limit above 1 (a semaphore) is not offered on "
                     "redlock://: a majority of independent nodes cannot "
                     "bound the holders; leave limit out (no limit) or "
                     "use 1, or another backend");
        reply_cleanup(&r);
    }
    request(&r, "POST", "/locks/sem?mode=shared&limit=3", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 400);
    reply_cleanup(&r);
    CHECK_EQ_INT(backend_held_count(rcfg.backend), 0);
    request(&r, "GET", "/locks/sem", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 404);
    reply_cleanup(&r);
    request(&r, "POST", "/locks/sem", "{\"mode\":\"shared\",\"limit\":1}", NULL,
            NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    request(&r, "POST", "/locks/rw", "{\"mode\":\"shared\"}", NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    request(&r, "POST", "/locks/ex", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    request(&r, "POST", "/locks", "{\"keys\":[\"m1\",\"m2\"]}", NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    nodes_close();
    router_open(NULL); /* memory has semaphores */
    request(&r, "POST", "/locks/sem", "{\"mode\":\"shared\",\"limit\":2}", NULL,
            NULL);
    CHECK_EQ_INT(r.resp.status, 201);
    reply_cleanup(&r);
    router_close();
}

/* /readyz: "nodes" counts the adapter's nodes in the 200 and in the 503
 * of a failed check; a store without nodes has none. */
static void test_router_readyz_counts_nodes(void)
{
    struct api_call c = { .verb = API_VERB_READYZ };
    struct reply r;
    json_t *n;

    nodes_open();
    request(&r, "GET", "/readyz", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_STR_EQ(jstr(&r, "backend"), "redlock");
    n = json_object_get(r.json, "nodes");
    CHECK(json_is_object(n) && json_object_size(n) == 4);
    CHECK_EQ_INT(json_integer_value(json_object_get(n, "total")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(n, "up")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(n, "voting")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(n, "quorum")), 2);
    reply_cleanup(&r);
    fake_nodes[1].voting = true; /* the quarantine is over */
    fake_nodes[1].quarantined = false;
    memset(&r, 0, sizeof(r));
    handle_call_reply(&rcfg, &c, BACKEND_UNAVAILABLE, NULL, NULL, -1, &r.resp);
    reply_parse(&r);
    CHECK_EQ_INT(r.resp.status, 503);
    CHECK_STR_EQ(jstr(&r, "status"), "unavailable");
    n = json_object_get(r.json, "nodes");
    CHECK_EQ_INT(json_integer_value(json_object_get(n, "total")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(n, "voting")), 2);
    reply_cleanup(&r);
    nodes_close();
    router_open(NULL);
    request(&r, "GET", "/readyz", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK(json_object_get(r.json, "nodes") == NULL);
    reply_cleanup(&r);
    router_close();
}

/* /metrics carries the adapter's nodes, one node label each. */
static void test_router_metrics_lists_nodes(void)
{
    struct reply r;

    nodes_open();
    request(&r, "GET", "/metrics", NULL, NULL, NULL);
    CHECK_EQ_INT(r.resp.status, 200);
    CHECK_CONTAINS(r.resp.body,
                   "\nlockd_store_node_up{node=\"127.0.0.1:7003\"} 0\n");
    CHECK_CONTAINS(r.resp.body, "\nlockd_store_node_quarantined{node="
                                "\"127.0.0.1:7002\"} 1\n");
    CHECK_CONTAINS(r.resp.body, "\nlockd_store_node_quarantine_seconds{node="
                                "\"127.0.0.1:7002\"} 4\n");
    CHECK(strstr(r.resp.body, "latency_seconds{node=\"127.0.0.1:7003\"}") ==
          NULL);
    reply_cleanup(&r);
    nodes_close();
}

static const struct check_case cases[] = {
    CHECK_CASE(test_decode_key_accepts_plain_and_escaped),
    CHECK_CASE(test_decode_key_rejects_bad_escapes),
    CHECK_CASE(test_decode_key_rejects_empty_nul_and_controls),
    CHECK_CASE(test_decode_key_512_bytes_ok_513_rejected),
    CHECK_CASE(test_decode_key_accepts_valid_utf8),
    CHECK_CASE(test_decode_key_rejects_invalid_utf8),
    CHECK_CASE(test_utf8_valid_checks_lengths_exactly),
    CHECK_CASE(test_parse_params_empty_body_means_defaults),
    CHECK_CASE(test_parse_params_reads_body_fields),
    CHECK_CASE(test_parse_params_reads_query),
    CHECK_CASE(test_parse_params_reads_lock_token_header),
    CHECK_CASE(test_parse_params_rejects_unknown_field),
    CHECK_CASE(test_parse_params_rejects_field_given_twice),
    CHECK_CASE(test_parse_params_rejects_wrong_types),
    CHECK_CASE(test_parse_params_rejects_out_of_range_integers),
    CHECK_CASE(test_parse_params_rejects_query_without_value),
    CHECK_CASE(test_parse_params_non_object_body_is_invalid_json),
    CHECK_CASE(test_parse_params_checks_owner),
    CHECK_CASE(test_parse_params_keeps_empty_token),
    CHECK_CASE(test_parse_params_nul_escape_is_invalid_parameter),
    CHECK_CASE(test_parse_params_reads_mode_limit_all),
    CHECK_CASE(test_parse_params_rejects_bad_mode_limit_all),
    CHECK_CASE(test_parse_params_checks_idempotency_key),
    CHECK_CASE(test_grant_body_bytes),
    CHECK_CASE(test_release_body_bytes),
    CHECK_CASE(test_format_time_is_rfc3339_utc_ms),
    CHECK_CASE(test_error_table_matches_api_md),
    CHECK_CASE(test_router_acquire_renew_inspect_release),
    CHECK_CASE(test_router_rejects_bad_acquires_without_state_change),
    CHECK_CASE(test_router_answers_404_405_and_invalid_key),
    CHECK_CASE(test_router_serves_health_ready_metrics),
    CHECK_CASE(test_router_shutting_down_answers_503),
    CHECK_CASE(test_router_requires_bearer_when_auth_set),
    CHECK_CASE(test_cursor_round_trips_and_rejects_junk),
    CHECK_CASE(test_parse_list_reads_limits_and_refuses_junk),
    CHECK_CASE(test_router_force_release_auth_matrix),
    CHECK_CASE(test_router_force_release_and_list),
    CHECK_CASE(test_acquire_reply_rounds_retry_after_up),
    CHECK_CASE(test_router_rejects_bad_kind_combinations),
    CHECK_CASE(test_router_fills_the_store_request),
    CHECK_CASE(test_reply_kinds_answers),
    CHECK_CASE(test_reply_inspect_shapes),
    CHECK_CASE(test_parse_multi_reads_keys_in_order),
    CHECK_CASE(test_parse_multi_rejects_bad_requests),
    CHECK_CASE(test_router_multi_grant_renew_release),
    CHECK_CASE(test_router_multi_held_takes_nothing),
    CHECK_CASE(test_router_multi_routes_and_refusals),
    CHECK_CASE(test_reply_multi_shapes),
    CHECK_CASE(test_data_driven_requests),
    CHECK_CASE(test_torture_parse_params_fails_cleanly),
    CHECK_CASE(test_torture_codec_reply_and_error_fail_cleanly),
    CHECK_CASE(test_torture_router_fails_cleanly),
    CHECK_CASE(test_torture_multi_replies_fail_cleanly),
    CHECK_CASE(test_torture_reply_body_is_json),
    CHECK_CASE(test_torture_parse_never_alters_values),
    CHECK_CASE(test_router_semaphore_refused_on_no_semaphore_store),
    CHECK_CASE(test_router_readyz_counts_nodes),
    CHECK_CASE(test_router_metrics_lists_nodes),
};

int main(int argc, char **argv)
{
    log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_TEXT); /* no warnings in output */
    return CHECK_MAIN(cases);
}

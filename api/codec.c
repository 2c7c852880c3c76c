/*
 * api/codec.c - keys and JSON replies (the parameters are in
 * api/codec_params.c), and the jansson allocator that notices failed
 * allocations.
 */
#include "api/codec.h"
#include "api/codec_impl.h"
#include "lib/text.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* jansson's allocator, wrapped so that a failed allocation is noticed:
 * jansson 2.14 sometimes carries on after one (a parsed string loses a
 * byte, a dumped object loses a key), so every parse and dump checks this
 * thread's flag and answers 500 instead of trusting the result. */
static json_malloc_t inner_malloc = malloc; /* frozen before threads */
static json_free_t inner_free = free;
_Thread_local bool codec_alloc_failed;

static void *codec_malloc(size_t n)
{
    void *p = inner_malloc(n);

    if (p == NULL)
        codec_alloc_failed = true;
    return p;
}

static void codec_free(void *p)
{
    inner_free(p);
}

void codec_json_setup(json_malloc_t alloc_fn, json_free_t free_fn)
{
    inner_malloc = alloc_fn != NULL ? alloc_fn : malloc;
    inner_free = free_fn != NULL ? free_fn : free;
    json_set_alloc_funcs(codec_malloc, codec_free);
}

const char *const api_route_names[API_ROUTE_COUNT] = {
    "acquire", "renew",         "release",       "inspect",     "healthz",
    "readyz",  "metrics",       "acquire_multi", "renew_multi", "release_multi",
    "list",    "force_release", "other",
};

/* Percent-decode the C string s (see text_percent_decode). */
static char *percent_decode(const char *s, size_t *len, bool *bad)
{
    return text_percent_decode(s, strlen(s), len, bad);
}

enum api_error codec_decode_key(
    const char *raw, char **out, size_t *len, char *msg, size_t msglen)
{
    bool bad;
    char *key;

    *out = NULL;
    if (*raw == '\0') {
        snprintf(msg, msglen, "the lock key is empty");
        return API_INVALID_KEY;
    }
    key = percent_decode(raw, len, &bad);
    if (key == NULL) {
        snprintf(msg, msglen,
                 bad ? "the lock key has a malformed percent "
                       "escape"
                     : "out of memory");
        return bad ? API_INVALID_KEY : API_INTERNAL;
    }
    if (*len == 0 || *len > LOCK_KEY_MAX) {
        snprintf(msg, msglen, "the lock key must be 1 to %d bytes, not %zu",
                 LOCK_KEY_MAX, *len);
    } else if (!text_utf8_valid(key, *len)) {
        snprintf(msg, msglen, "the lock key is not valid UTF-8");
    } else if (text_has_control(key, *len)) {
        snprintf(msg, msglen, "the lock key contains a control character");
    } else {
        *out = key;
        return API_OK;
    }
    free(key);
    return API_INVALID_KEY;
}

void codec_format_time(int64_t unix_ms, char *buf, size_t buflen)
{
    /* days to civil date (H. Hinnant's algorithm): no gmtime_r, whose time
     * zone lock every grant would take */
    int64_t ms = unix_ms >= 0 ? unix_ms : 0;
    int64_t secs = ms / 1000, days = secs / 86400, sod = secs % 86400;
    int64_t z = days + 719468, era = z / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t day = doy - (153 * mp + 2) / 5 + 1;
    int64_t month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (month <= 2);

    int v[7] = { (int)year,         (int)month,           (int)day,
                 (int)(sod / 3600), (int)(sod / 60 % 60), (int)(sod % 60),
                 (int)(ms % 1000) };
    static const char sep[] = "--T::.";
    char out[25];

    if (year > 9999 || buflen < sizeof(out)) {
        snprintf(buf, buflen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", v[0], v[1],
                 v[2], v[3], v[4], v[5], v[6]);
        return;
    }
    /* by hand, as the format above: every grant's answer has one */
    for (int i = 0, n = 0; i < 7; i++) {
        int w = i == 0 ? 4 : i == 6 ? 3 : 2;
        for (int j = w - 1; j >= 0; j--, v[i] /= 10)
            out[n + j] = (char)('0' + v[i] % 10);
        n += w;
        out[n++] = i < 6 ? sep[i] : 'Z';
    }
    out[24] = '\0';
    memcpy(buf, out, sizeof(out));
}

void codec_set_body(struct api_response *resp, json_t *root)
{
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
    if (root != NULL && !codec_alloc_failed) {
        /* sized first, then written into our own buffer: a dump that
         * cannot allocate halfway cannot drop part of the object */
        size_t n = json_dumpb(root, NULL, 0, JSON_COMPACT);
        if (n > 0 && (resp->body = malloc(n + 1)) != NULL) {
            if (json_dumpb(root, resp->body, n, JSON_COMPACT) == n &&
                !codec_alloc_failed) {
                resp->body[n] = '\0';
            } else {
                free(resp->body);
                resp->body = NULL;
            }
        }
    }
    if (resp->body == NULL) {
        /* out of memory: a fixed answer that needs no allocation from us */
        static const char oom[] = "{\"error\":{\"code\":\"internal_error\","
                                  "\"message\":\"out of memory\"}}";
        resp->status = 500;
        resp->body = strdup(oom);
        resp->len = resp->body != NULL ? sizeof(oom) - 1 : 0;
    } else {
        resp->len = strlen(resp->body);
    }
    resp->content_type = "application/json";
    codec_alloc_failed = false;
}

/* Append s[0..len) to out as the inside of a JSON string: quotes,
 * backslashes and control characters escaped, UTF-8 kept as it is (valid,
 * checked on the way in). out must have room for 6 * len bytes. */
static size_t json_escape(char *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t j = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out[j++] = '\\';
            out[j++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(out + j, "\\u00", 4);
            out[j + 4] = hex[c >> 4];
            out[j + 5] = hex[c & 0xf];
            j += 6;
        } else {
            out[j++] = (char)c;
        }
    }
    return j;
}

/* Append s to buf at *n as a JSON string, quotes included. buf has room
 * for 6 * len + 2 more bytes. */
static void put_string(char *buf, size_t *n, const char *s, size_t len)
{
    buf[(*n)++] = '"';
    *n += json_escape(buf + *n, s, len);
    buf[(*n)++] = '"';
}

/* Append the literal s at *n. */
static void put_lit(char *buf, size_t *n, const char *s)
{
    size_t len = strlen(s);

    memcpy(buf + *n, s, len);
    *n += len;
}

/* Append v in decimal at *n. */
static void put_u64(char *buf, size_t *n, uint64_t v)
{
    *n += text_put_u64(buf + *n, v);
}

void codec_grant(struct api_response *resp,
                 unsigned status,
                 const char *key,
                 size_t key_len,
                 const char *token,
                 const struct lock_grant *g,
                 uint64_t ttl_ms)
{
    size_t tlen = strlen(token);
    /* the strings escaped, and 224 for the rest: names and quotes (93),
     * four numbers (60 digits at most), the time (39 at most) */
    size_t cap = 6 * (key_len + tlen) + 224;
    char *buf = malloc(cap);
    char when[40];
    bool shared = g->mode == LOCK_SHARED;
    size_t n = 0;

    if (buf == NULL) {
        codec_set_body(resp, NULL);
        return;
    }
    codec_format_time(g->expires_at_ms, when, sizeof(when));
    /* by hand rather than with snprintf: every grant is answered here */
    put_lit(buf, &n, "{\"key\":");
    put_string(buf, &n, key, key_len);
    put_lit(buf, &n, ",\"token\":");
    put_string(buf, &n, token, tlen);
    put_lit(buf, &n, ",\"fence\":");
    put_u64(buf, &n, g->fence);
    put_lit(buf, &n, ",\"ttl_ms\":");
    put_u64(buf, &n, ttl_ms);
    put_lit(buf, &n, ",\"expires_at\":\"");
    put_lit(buf, &n, when);
    put_lit(buf, &n,
            shared ? "\",\"mode\":\"shared\",\"holds\":"
                   : "\",\"mode\":\"exclusive\",\"holds\":");
    /* a grant is one hold at least, whatever a store says */
    put_u64(buf, &n, g->holds > 0 ? g->holds : 1);
    if (shared && g->limit > 0) {
        put_lit(buf, &n, ",\"limit\":");
        put_u64(buf, &n, g->limit);
    }
    put_lit(buf, &n, "}");
    buf[n] = '\0'; /* as snprintf left it, for whoever reads it as text */
    free(resp->body);
    resp->status = status;
    resp->body = buf;
    resp->len = n;
    resp->content_type = "application/json";
}

void codec_released(struct api_response *resp,
                    const char *key,
                    size_t key_len,
                    uint64_t holds)
{
    /* the key escaped, and 64 for the rest: names and quotes (38), the
     * boolean (5), the number (20 digits at most) */
    char *buf = malloc(6 * key_len + 64);
    size_t n = 0;

    if (buf == NULL) {
        codec_set_body(resp, NULL);
        return;
    }
    put_lit(buf, &n, "{\"key\":");
    put_string(buf, &n, key, key_len);
    put_lit(buf, &n,
            holds == 0 ? ",\"released\":true,\"holds\":"
                       : ",\"released\":false,\"holds\":");
    put_u64(buf, &n, holds);
    put_lit(buf, &n, "}");
    buf[n] = '\0';
    free(resp->body);
    resp->status = 200;
    resp->body = buf;
    resp->len = n;
    resp->content_type = "application/json";
}

static json_t *holder_json(const struct lock_holder *h)
{
    char when[40];

    codec_format_time(h->expires_at_ms, when, sizeof(when));
    return json_pack("{s:I,s:I,s:s,s:s*,s:I}", "fence", (json_int_t)h->fence,
                     "ttl_ms", (json_int_t)(h->ttl_ms > 0 ? h->ttl_ms : 1),
                     "expires_at", when, "owner",
                     h->has_owner ? h->owner : NULL, "holds",
                     (json_int_t)(h->holds > 0 ? h->holds : 1));
}

/* The holders of info as a JSON array (NULL when out of memory). A store
 * that lists no holder of an exclusive key has one: the top level's. */
static json_t *holders_json(const struct lock_info *info)
{
    json_t *a = json_array();
    const struct lock_holder *hs = info->holders;
    size_t n = info->nholders;
    struct lock_holder one = { 0 };

    if (a == NULL)
        return NULL;
    if ((n == 0 || hs == NULL) && info->mode != LOCK_SHARED) {
        one.fence = info->fence;
        one.ttl_ms = info->ttl_ms;
        one.expires_at_ms = info->expires_at_ms;
        one.holds = info->holds;
        one.has_owner = info->has_owner;
        memcpy(one.owner, info->owner, sizeof(one.owner));
        hs = &one;
        n = 1;
    }
    for (size_t i = 0; hs != NULL && i < n; i++)
        json_array_append_new(a, holder_json(&hs[i]));
    return a;
}

void codec_inspect(struct api_response *resp,
                   const char *key,
                   size_t key_len,
                   const struct lock_info *info)
{
    bool shared = info->mode == LOCK_SHARED;
    json_t *root, *holders;
    size_t count;
    char when[40];

    codec_alloc_failed = false;
    holders = holders_json(info);
    count = holders != NULL ? json_array_size(holders) : 0;
    if (count < info->holder_count)
        count = info->holder_count;
    codec_format_time(info->expires_at_ms, when, sizeof(when));
    /* "o*" and "s*": left out when NULL (no limit, a shared key's owner
     * and holds); "o" of NULL fails the pack: out of memory */
    root = json_pack(
        "{s:s%,s:b,s:s,s:o*,s:I,s:I,s:s,s:s*,s:o*,s:I,s:o}", "key", key,
        key_len, "held", 1, "mode", shared ? "shared" : "exclusive", "limit",
        shared && info->limit > 0 ? json_integer((json_int_t)info->limit)
                                  : NULL,
        "fence", (json_int_t)info->fence, "ttl_ms",
        (json_int_t)(info->ttl_ms > 0 ? info->ttl_ms : 1), "expires_at", when,
        "owner", !shared && info->has_owner ? info->owner : NULL, "holds",
        shared ? NULL
               : json_integer((json_int_t)(info->holds > 0 ? info->holds : 1)),
        "holder_count", (json_int_t)count, "holders", holders);
    resp->status = 200;
    codec_set_body(resp, root);
    json_decref(root);
}

void codec_error(struct api_response *resp,
                 enum api_error e,
                 const char *message)
{
    json_t *root;

    codec_alloc_failed = false;
    root =
        json_pack("{s:{s:s,s:s}}", "error", "code", api_error_code(e),
                  "message", message != NULL ? message : api_error_message(e));

    resp->status = api_error_status(e);
    codec_set_body(resp, root);
    json_decref(root);
}

void codec_reply(struct api_response *resp,
                 unsigned status,
                 const char *fmt,
                 ...)
{
    va_list ap;
    json_t *root;

    codec_alloc_failed = false;
    va_start(ap, fmt);
    root = json_vpack_ex(NULL, 0, fmt, ap);
    va_end(ap);
    resp->status = status;
    codec_set_body(resp, root);
    json_decref(root);
}

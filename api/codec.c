/*
 * api/codec.c - keys, parameters and JSON replies, with docs/API.md's
 * strictness: a typo never becomes a default, a field given twice is an
 * error, integers are integers.
 */
#include "api/codec.h"
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
static _Thread_local bool alloc_failed;

static void *codec_malloc(size_t n)
{
    void *p = inner_malloc(n);

    if (p == NULL)
        alloc_failed = true;
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
    "acquire", "renew",  "release", "inspect",
    "healthz", "readyz", "metrics", "other",
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

void codec_params_cleanup(struct api_params *p)
{
    free(p->owner);
    free(p->token);
    memset(p, 0, sizeof(*p));
}

static const struct {
    const char *name;
    unsigned bit;
} param_names[] = {
    { "ttl_ms", API_P_TTL_MS },
    { "wait_ms", API_P_WAIT_MS },
    { "owner", API_P_OWNER },
    { "token", API_P_TOKEN },
};

static unsigned param_bit(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(param_names) / sizeof(param_names[0]); i++)
        if (strlen(param_names[i].name) == len &&
            memcmp(param_names[i].name, name, len) == 0)
            return param_names[i].bit;
    return 0;
}

static bool *has_of(struct api_params *p, unsigned bit)
{
    switch (bit) {
    case API_P_TTL_MS:
        return &p->has_ttl_ms;
    case API_P_WAIT_MS:
        return &p->has_wait_ms;
    case API_P_OWNER:
        return &p->has_owner;
    default:
        return &p->has_token;
    }
}

/* Print name into msg readably, even if it holds junk bytes. */
static void quote_name(char *dst, size_t cap, const char *name, size_t len)
{
    size_t j = 0;

    for (size_t i = 0; i < len && j + 5 < cap; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c >= 0x7f || c == '\'')
            j += (size_t)snprintf(dst + j, cap - j, "\\x%02x", c);
        else
            dst[j++] = (char)c;
        if (i == 63 && len > 64) {
            snprintf(dst + j, cap - j, "...");
            j += 3;
            break;
        }
    }
    dst[j] = '\0';
}

/* Store one value: from the query (str), or from JSON (json). */
static enum api_error set_param(struct api_params *p,
                                unsigned bit,
                                const char *str,
                                size_t slen,
                                json_t *json,
                                uint64_t max_ttl,
                                uint64_t max_wait,
                                char *msg,
                                size_t msglen)
{
    const char *name = bit == API_P_TTL_MS    ? "ttl_ms"
                       : bit == API_P_WAIT_MS ? "wait_ms"
                       : bit == API_P_OWNER   ? "owner"
                                              : "token";
    bool *has = has_of(p, bit);

    if (*has) {
        snprintf(msg, msglen, "parameter '%s' is given twice", name);
        return API_INVALID_PARAMETER;
    }
    *has = true;
    if (bit == API_P_TTL_MS || bit == API_P_WAIT_MS) {
        uint64_t v = 0, min = bit == API_P_TTL_MS ? 1 : 0;
        uint64_t max = bit == API_P_TTL_MS ? max_ttl : max_wait;
        if (json != NULL) {
            if (!json_is_integer(json)) {
                snprintf(msg, msglen, "'%s' must be an integer", name);
                return API_INVALID_PARAMETER;
            }
            json_int_t iv = json_integer_value(json);
            if (iv < 0 || (uint64_t)iv < min || (uint64_t)iv > max) {
                snprintf(msg, msglen, "'%s' must be from %llu to %llu", name,
                         (unsigned long long)min, (unsigned long long)max);
                return API_INVALID_PARAMETER;
            }
            v = (uint64_t)iv;
        } else if (slen != strlen(str) ||
                   text_parse_u64(str, min, max, &v) != 0) {
            snprintf(msg, msglen, "'%s' must be an integer from %llu to %llu",
                     name, (unsigned long long)min, (unsigned long long)max);
            return API_INVALID_PARAMETER;
        }
        if (bit == API_P_TTL_MS)
            p->ttl_ms = v;
        else
            p->wait_ms = v;
        return API_OK;
    }
    if (json != NULL) {
        if (!json_is_string(json)) {
            snprintf(msg, msglen, "'%s' must be a string", name);
            return API_INVALID_PARAMETER;
        }
        str = json_string_value(json);
        slen = json_string_length(json);
    }
    if (memchr(str, '\0', slen) != NULL || !text_utf8_valid(str, slen)) {
        snprintf(msg, msglen, "'%s' must be valid UTF-8 without NUL", name);
        return API_INVALID_PARAMETER;
    }
    if (bit == API_P_OWNER) {
        if (slen > LOCK_OWNER_MAX || text_has_control(str, slen)) {
            snprintf(msg, msglen,
                     "'owner' must be at most %d bytes, without control "
                     "characters",
                     LOCK_OWNER_MAX);
            return API_INVALID_PARAMETER;
        }
        p->owner = strndup(str, slen);
        return p->owner != NULL ? API_OK : API_INTERNAL;
    }
    p->token = strndup(str, slen);
    return p->token != NULL ? API_OK : API_INTERNAL;
}

static enum api_error parse_query(const struct api_request *rq,
                                  unsigned allowed,
                                  uint64_t max_ttl,
                                  uint64_t max_wait,
                                  struct api_params *p,
                                  char *msg,
                                  size_t msglen)
{
    char qname[300];

    for (size_t i = 0; i < rq->nquery; i++) {
        size_t nlen = 0, vlen = 0;
        bool bad;
        char *name = percent_decode(rq->query[i].name, &nlen, &bad);
        char *value = NULL;
        enum api_error err = API_INVALID_PARAMETER;
        unsigned bit;

        if (name == NULL) {
            snprintf(msg, msglen,
                     bad ? "a query parameter name has a "
                           "malformed percent escape"
                         : "out of memory");
            return bad ? API_INVALID_PARAMETER : API_INTERNAL;
        }
        quote_name(qname, sizeof(qname), name, nlen);
        bit = param_bit(name, nlen);
        if (bit == 0 || (allowed & bit) == 0) {
            snprintf(msg, msglen, "unknown parameter '%s'", qname);
        } else if (rq->query[i].value == NULL) {
            snprintf(msg, msglen, "parameter '%s' needs a value", qname);
        } else {
            value = percent_decode(rq->query[i].value, &vlen, &bad);
            if (value == NULL)
                snprintf(msg, msglen,
                         bad ? "parameter '%s' has a malformed percent escape"
                             : "out of memory",
                         qname);
            else
                err = set_param(p, bit, value, vlen, NULL, max_ttl, max_wait,
                                msg, msglen);
            if (value == NULL && !bad)
                err = API_INTERNAL;
        }
        free(value);
        free(name);
        if (err != API_OK)
            return err;
    }
    return API_OK;
}

static enum api_error parse_body(const struct api_request *rq,
                                 unsigned allowed,
                                 uint64_t max_ttl,
                                 uint64_t max_wait,
                                 struct api_params *p,
                                 char *msg,
                                 size_t msglen)
{
    json_error_t jerr;
    json_t *root, *value;
    const char *name;
    size_t nlen;
    enum api_error err = API_OK;
    char qname[300];

    if (rq->body_len == 0)
        return API_OK; /* all defaults */
    alloc_failed = false;
    /* NULs are allowed in the parse so that "\u0000" in a string is an
     * invalid parameter (valid JSON, bad value), not invalid JSON */
    root = json_loadb(rq->body, rq->body_len,
                      JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (alloc_failed) {
        json_decref(root);
        snprintf(msg, msglen, "out of memory");
        return API_INTERNAL;
    }
    if (root == NULL) {
        switch (json_error_code(&jerr)) {
        case json_error_duplicate_key:
            snprintf(msg, msglen, "a field is given twice in the JSON body");
            return API_INVALID_PARAMETER;
        case json_error_null_byte_in_key:
            snprintf(msg, msglen,
                     "a field name in the JSON body contains "
                     "NUL: unknown field");
            return API_INVALID_PARAMETER;
        case json_error_numeric_overflow:
            snprintf(msg, msglen, "a number in the JSON body is out of range");
            return API_INVALID_PARAMETER;
        case json_error_out_of_memory:
            snprintf(msg, msglen, "out of memory");
            return API_INTERNAL;
        default:
            snprintf(msg, msglen,
                     "the body is not valid JSON: %s (at byte "
                     "%d)",
                     jerr.text, jerr.position);
            return API_INVALID_JSON;
        }
    }
    if (!json_is_object(root)) {
        snprintf(msg, msglen, "the body must be a JSON object");
        json_decref(root);
        return API_INVALID_JSON;
    }
    json_object_keylen_foreach(root, name, nlen, value)
    {
        unsigned bit = param_bit(name, nlen);
        if (bit == 0 || (allowed & bit) == 0) {
            quote_name(qname, sizeof(qname), name, nlen);
            snprintf(msg, msglen, "unknown field '%s'", qname);
            err = API_INVALID_PARAMETER;
            break;
        }
        err = set_param(p, bit, NULL, 0, value, max_ttl, max_wait, msg, msglen);
        if (err != API_OK)
            break;
    }
    json_decref(root);
    return err;
}

enum api_error codec_parse_params(const struct api_request *rq,
                                  unsigned allowed,
                                  uint64_t max_ttl,
                                  uint64_t max_wait,
                                  struct api_params *p,
                                  char *msg,
                                  size_t msglen)
{
    enum api_error err;

    memset(p, 0, sizeof(*p));
    err = parse_body(rq, allowed, max_ttl, max_wait, p, msg, msglen);
    if (err == API_OK)
        err = parse_query(rq, allowed, max_ttl, max_wait, p, msg, msglen);
    for (size_t i = 0; err == API_OK && i < rq->nlock_tokens; i++) {
        if ((allowed & API_P_TOKEN) == 0) {
            snprintf(msg, msglen, "the Lock-Token header is not used here");
            err = API_INVALID_PARAMETER;
            break;
        }
        err = set_param(p, API_P_TOKEN, rq->lock_tokens[i],
                        strlen(rq->lock_tokens[i]), NULL, max_ttl, max_wait,
                        msg, msglen);
    }
    if (err != API_OK)
        codec_params_cleanup(p);
    return err;
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

    snprintf(buf, buflen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (int)year,
             (int)month, (int)day, (int)(sod / 3600), (int)(sod / 60 % 60),
             (int)(sod % 60), (int)(ms % 1000));
}

static void set_body(struct api_response *resp, json_t *root)
{
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
    if (root != NULL && !alloc_failed) {
        /* sized first, then written into our own buffer: a dump that
         * cannot allocate halfway cannot drop part of the object */
        size_t n = json_dumpb(root, NULL, 0, JSON_COMPACT);
        if (n > 0 && (resp->body = malloc(n + 1)) != NULL) {
            if (json_dumpb(root, resp->body, n, JSON_COMPACT) == n &&
                !alloc_failed) {
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
    alloc_failed = false;
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

void codec_grant(struct api_response *resp,
                 unsigned status,
                 const char *key,
                 size_t key_len,
                 const char *token,
                 uint64_t fence,
                 uint64_t ttl_ms,
                 int64_t expires_at_ms)
{
    size_t tlen = strlen(token);
    size_t cap = 6 * (key_len + tlen) + 160;
    char *buf = malloc(cap);
    char when[40];
    size_t n;
    int k;

    if (buf == NULL) {
        set_body(resp, NULL);
        return;
    }
    codec_format_time(expires_at_ms, when, sizeof(when));
    memcpy(buf, "{\"key\":\"", 8);
    n = 8 + json_escape(buf + 8, key, key_len);
    memcpy(buf + n, "\",\"token\":\"", 11);
    n += 11;
    n += json_escape(buf + n, token, tlen);
    k = snprintf(buf + n, cap - n,
                 "\",\"fence\":%llu,\"ttl_ms\":%llu,\"expires_at\":\"%s\"}",
                 (unsigned long long)fence, (unsigned long long)ttl_ms, when);
    if (k < 0 || (size_t)k >= cap - n) {
        free(buf);
        set_body(resp, NULL);
        return;
    }
    free(resp->body);
    resp->status = status;
    resp->body = buf;
    resp->len = n + (size_t)k;
    resp->content_type = "application/json";
}

void codec_error(struct api_response *resp,
                 enum api_error e,
                 const char *message)
{
    json_t *root;

    alloc_failed = false;
    root =
        json_pack("{s:{s:s,s:s}}", "error", "code", api_error_code(e),
                  "message", message != NULL ? message : api_error_message(e));

    resp->status = api_error_status(e);
    set_body(resp, root);
    json_decref(root);
}

void codec_reply(struct api_response *resp,
                 unsigned status,
                 const char *fmt,
                 ...)
{
    va_list ap;
    json_t *root;

    alloc_failed = false;
    va_start(ap, fmt);
    root = json_vpack_ex(NULL, 0, fmt, ap);
    va_end(ap);
    resp->status = status;
    set_body(resp, root);
    json_decref(root);
}

/*
 * api/codec_params.c - the parameters of a lock request from the query,
 * the JSON body and the Lock-Token and Idempotency-Key headers, with
 * docs/API.md's strictness: a typo never becomes a default, a field given
 * twice is an error, integers are integers, strings are what they say.
 */
#include "api/codec.h"
#include "api/codec_impl.h"
#include "lib/text.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum param_kind {
    KIND_INT,    /* ttl_ms, wait_ms, limit */
    KIND_STRING, /* owner, token */
    KIND_MODE,   /* "exclusive" | "shared" */
    KIND_BOOL,   /* all, force */
};

static const struct {
    const char *name;
    unsigned bit;
    enum param_kind kind;
} param_names[] = {
    { "ttl_ms", API_P_TTL_MS, KIND_INT },
    { "wait_ms", API_P_WAIT_MS, KIND_INT },
    { "owner", API_P_OWNER, KIND_STRING },
    { "token", API_P_TOKEN, KIND_STRING },
    { "mode", API_P_MODE, KIND_MODE },
    { "limit", API_P_LIMIT, KIND_INT },
    { "all", API_P_ALL, KIND_BOOL },
    { "force", API_P_FORCE, KIND_BOOL },
};

#define NPARAMS (sizeof(param_names) / sizeof(param_names[0]))

/* The index of name in param_names, or NPARAMS. */
static size_t param_index(const char *name, size_t len)
{
    for (size_t i = 0; i < NPARAMS; i++)
        if (strlen(param_names[i].name) == len &&
            memcmp(param_names[i].name, name, len) == 0)
            return i;
    return NPARAMS;
}

/* The index of name if allowed takes it, else NPARAMS. */
static size_t param_allowed(const char *name, size_t len, unsigned allowed)
{
    size_t i = param_index(name, len);

    return i < NPARAMS && (allowed & param_names[i].bit) != 0 ? i : NPARAMS;
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
    case API_P_MODE:
        return &p->has_mode;
    case API_P_LIMIT:
        return &p->has_limit;
    case API_P_ALL:
        return &p->has_all;
    case API_P_IDEM_KEY:
        return &p->has_idem_key;
    case API_P_FORCE:
        return &p->has_force;
    default:
        return &p->has_token;
    }
}

void codec_params_cleanup(struct api_params *p)
{
    free(p->owner);
    free(p->token);
    free(p->idem_key);
    memset(p, 0, sizeof(*p));
}

void codec_quote_name(char *dst, size_t cap, const char *name, size_t len)
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

/* One value as it arrived: from the query (str, slen) or JSON (json). */
struct param_value {
    const char *str;
    size_t slen;
    json_t *json; /* borrowed; NULL for the query */
};

static enum api_error set_int(struct api_params *p,
                              size_t i,
                              const struct param_value *v,
                              const struct param_bounds *b,
                              char *msg,
                              size_t msglen)
{
    unsigned bit = param_names[i].bit;
    const char *name = param_names[i].name;
    uint64_t n = 0, min = bit == API_P_WAIT_MS ? 0 : 1;
    uint64_t max = bit == API_P_TTL_MS    ? b->max_ttl
                   : bit == API_P_WAIT_MS ? b->max_wait
                                          : LOCK_LIMIT_MAX;

    if (v->json != NULL) {
        if (!json_is_integer(v->json)) {
            snprintf(msg, msglen, "'%s' must be an integer", name);
            return API_INVALID_PARAMETER;
        }
        json_int_t iv = json_integer_value(v->json);
        if (iv < 0 || (uint64_t)iv < min || (uint64_t)iv > max) {
            snprintf(msg, msglen, "'%s' must be from %llu to %llu", name,
                     (unsigned long long)min, (unsigned long long)max);
            return API_INVALID_PARAMETER;
        }
        n = (uint64_t)iv;
    } else if (v->slen != strlen(v->str) ||
               text_parse_u64(v->str, min, max, &n) != 0) {
        snprintf(msg, msglen, "'%s' must be an integer from %llu to %llu", name,
                 (unsigned long long)min, (unsigned long long)max);
        return API_INVALID_PARAMETER;
    }
    if (bit == API_P_TTL_MS)
        p->ttl_ms = n;
    else if (bit == API_P_WAIT_MS)
        p->wait_ms = n;
    else
        p->limit = (uint32_t)n;
    return API_OK;
}

/* The text of a string parameter, or an error: the JSON value must be a
 * string, and neither may hold NUL or be invalid UTF-8. */
static enum api_error string_of(const char *name,
                                const struct param_value *v,
                                const char **s,
                                size_t *len,
                                char *msg,
                                size_t msglen)
{
    *s = v->str;
    *len = v->slen;
    if (v->json != NULL) {
        if (!json_is_string(v->json)) {
            snprintf(msg, msglen, "'%s' must be a string", name);
            return API_INVALID_PARAMETER;
        }
        *s = json_string_value(v->json);
        *len = json_string_length(v->json);
    }
    if (memchr(*s, '\0', *len) != NULL || !text_utf8_valid(*s, *len)) {
        snprintf(msg, msglen, "'%s' must be valid UTF-8 without NUL", name);
        return API_INVALID_PARAMETER;
    }
    return API_OK;
}

static enum api_error set_string(struct api_params *p,
                                 size_t i,
                                 const struct param_value *v,
                                 char *msg,
                                 size_t msglen)
{
    const char *s;
    size_t len;
    enum api_error err =
        string_of(param_names[i].name, v, &s, &len, msg, msglen);

    if (err != API_OK)
        return err;
    if (param_names[i].bit == API_P_OWNER) {
        if (len > LOCK_OWNER_MAX || text_has_control(s, len)) {
            snprintf(msg, msglen,
                     "'owner' must be at most %d bytes, without control "
                     "characters",
                     LOCK_OWNER_MAX);
            return API_INVALID_PARAMETER;
        }
        p->owner = strndup(s, len);
        return p->owner != NULL ? API_OK : API_INTERNAL;
    }
    p->token = strndup(s, len);
    return p->token != NULL ? API_OK : API_INTERNAL;
}

static enum api_error set_mode(struct api_params *p,
                               const struct param_value *v,
                               char *msg,
                               size_t msglen)
{
    const char *s;
    size_t len;
    enum api_error err = string_of("mode", v, &s, &len, msg, msglen);

    if (err != API_OK)
        return err;
    if (len == 9 && memcmp(s, "exclusive", 9) == 0) {
        p->mode = LOCK_EXCLUSIVE;
    } else if (len == 6 && memcmp(s, "shared", 6) == 0) {
        p->mode = LOCK_SHARED;
    } else {
        snprintf(msg, msglen, "'mode' must be \"exclusive\" or \"shared\"");
        return API_INVALID_PARAMETER;
    }
    return API_OK;
}

static enum api_error set_bool(struct api_params *p,
                               size_t i,
                               const struct param_value *v,
                               char *msg,
                               size_t msglen)
{
    bool *out = param_names[i].bit == API_P_FORCE ? &p->force : &p->all;

    if (v->json != NULL && json_is_boolean(v->json)) {
        *out = json_is_true(v->json);
    } else if (v->json == NULL && v->slen == 4 &&
               memcmp(v->str, "true", 4) == 0) {
        *out = true;
    } else if (v->json == NULL && v->slen == 5 &&
               memcmp(v->str, "false", 5) == 0) {
        *out = false;
    } else {
        snprintf(msg, msglen,
                 v->json != NULL ? "'%s' must be true or false"
                                 : "'%s' must be \"true\" or \"false\"",
                 param_names[i].name);
        return API_INVALID_PARAMETER;
    }
    return API_OK;
}

/* Store the value of param_names[i], once. */
static enum api_error set_param(struct api_params *p,
                                size_t i,
                                const struct param_value *v,
                                const struct param_bounds *b,
                                char *msg,
                                size_t msglen)
{
    bool *has = has_of(p, param_names[i].bit);

    if (*has) {
        snprintf(msg, msglen, "parameter '%s' is given twice",
                 param_names[i].name);
        return API_INVALID_PARAMETER;
    }
    *has = true;
    switch (param_names[i].kind) {
    case KIND_INT:
        return set_int(p, i, v, b, msg, msglen);
    case KIND_STRING:
        return set_string(p, i, v, msg, msglen);
    case KIND_MODE:
        return set_mode(p, v, msg, msglen);
    case KIND_BOOL:
        return set_bool(p, i, v, msg, msglen);
    }
    return API_INTERNAL;
}

/* One query parameter, decoded and stored. */
static enum api_error parse_query_one(const struct api_param *q,
                                      unsigned allowed,
                                      const struct param_bounds *b,
                                      struct api_params *p,
                                      char *msg,
                                      size_t msglen)
{
    size_t nlen = 0, i;
    bool bad;
    char *name = text_percent_decode(q->name, strlen(q->name), &nlen, &bad);
    char qname[300];
    enum api_error err = API_INVALID_PARAMETER;
    struct param_value v = { 0 };
    char *value = NULL;

    if (name == NULL) {
        snprintf(msg, msglen,
                 bad ? "a query parameter name has a malformed percent escape"
                     : "out of memory");
        return bad ? API_INVALID_PARAMETER : API_INTERNAL;
    }
    codec_quote_name(qname, sizeof(qname), name, nlen);
    i = param_allowed(name, nlen, allowed);
    if (i == NPARAMS) {
        snprintf(msg, msglen, "unknown parameter '%s'", qname);
    } else if (q->value == NULL) {
        snprintf(msg, msglen, "parameter '%s' needs a value", qname);
    } else {
        value = text_percent_decode(q->value, strlen(q->value), &v.slen, &bad);
        v.str = value;
        if (value != NULL)
            err = set_param(p, i, &v, b, msg, msglen);
        else if (bad)
            snprintf(msg, msglen,
                     "parameter '%s' has a malformed percent escape", qname);
        else {
            snprintf(msg, msglen, "out of memory");
            err = API_INTERNAL;
        }
    }
    free(value);
    free(name);
    return err;
}

/* A body jansson refused: the error for it. */
static enum api_error
body_error(const json_error_t *jerr, char *msg, size_t msglen)
{
    switch (json_error_code(jerr)) {
    case json_error_duplicate_key:
        snprintf(msg, msglen, "a field is given twice in the JSON body");
        return API_INVALID_PARAMETER;
    case json_error_null_byte_in_key:
        snprintf(msg, msglen,
                 "a field name in the JSON body contains NUL: unknown field");
        return API_INVALID_PARAMETER;
    case json_error_numeric_overflow:
        snprintf(msg, msglen, "a number in the JSON body is out of range");
        return API_INVALID_PARAMETER;
    case json_error_out_of_memory:
        snprintf(msg, msglen, "out of memory");
        return API_INTERNAL;
    default:
        snprintf(msg, msglen, "the body is not valid JSON: %s (at byte %d)",
                 jerr->text, jerr->position);
        return API_INVALID_JSON;
    }
}

enum api_error codec_load_object(const struct api_request *rq,
                                 json_t **out,
                                 char *msg,
                                 size_t msglen)
{
    json_error_t jerr;
    json_t *root;

    *out = NULL;
    codec_alloc_failed = false;
    /* NULs are allowed in the parse so that "\u0000" in a string is an
     * invalid parameter (valid JSON, bad value), not invalid JSON */
    root = json_loadb(rq->body, rq->body_len,
                      JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (codec_alloc_failed) {
        json_decref(root);
        snprintf(msg, msglen, "out of memory");
        return API_INTERNAL;
    }
    if (root == NULL)
        return body_error(&jerr, msg, msglen);
    if (!json_is_object(root)) {
        snprintf(msg, msglen, "the body must be a JSON object");
        json_decref(root);
        return API_INVALID_JSON;
    }
    *out = root;
    return API_OK;
}

enum api_error codec_params_object(json_t *root,
                                   unsigned allowed,
                                   const struct param_bounds *b,
                                   const char *skip,
                                   struct api_params *p,
                                   char *msg,
                                   size_t msglen)
{
    json_t *value;
    const char *name;
    size_t nlen;
    size_t slen = skip != NULL ? strlen(skip) : 0;
    char qname[300];

    json_object_keylen_foreach(root, name, nlen, value)
    {
        size_t i = param_allowed(name, nlen, allowed);
        struct param_value v = { .json = value };
        enum api_error err;
        if (skip != NULL && nlen == slen && memcmp(name, skip, slen) == 0)
            continue;
        if (i == NPARAMS) {
            codec_quote_name(qname, sizeof(qname), name, nlen);
            snprintf(msg, msglen, "unknown field '%s'", qname);
            return API_INVALID_PARAMETER;
        }
        err = set_param(p, i, &v, b, msg, msglen);
        if (err != API_OK)
            return err;
    }
    return API_OK;
}

static enum api_error parse_body(const struct api_request *rq,
                                 unsigned allowed,
                                 const struct param_bounds *b,
                                 struct api_params *p,
                                 char *msg,
                                 size_t msglen)
{
    json_t *root;
    enum api_error err;

    if (rq->body_len == 0)
        return API_OK; /* all defaults */
    err = codec_load_object(rq, &root, msg, msglen);
    if (err != API_OK)
        return err;
    err = codec_params_object(root, allowed, b, NULL, p, msg, msglen);
    json_decref(root);
    return err;
}

enum api_error codec_params_headers(const struct api_request *rq,
                                    unsigned allowed,
                                    const struct param_bounds *b,
                                    struct api_params *p,
                                    char *msg,
                                    size_t msglen)
{
    size_t ti = param_index("token", 5);
    enum api_error err = API_OK;

    for (size_t i = 0; err == API_OK && i < rq->nlock_tokens; i++) {
        struct param_value v = { .str = rq->lock_tokens[i],
                                 .slen = strlen(rq->lock_tokens[i]) };
        if ((allowed & API_P_TOKEN) == 0) {
            snprintf(msg, msglen, "the Lock-Token header is not used here");
            return API_INVALID_PARAMETER;
        }
        err = set_param(p, ti, &v, b, msg, msglen);
    }
    if (err != API_OK || rq->nidem_keys == 0)
        return err;
    if ((allowed & API_P_IDEM_KEY) == 0) {
        snprintf(msg, msglen,
                 "the Idempotency-Key header is only used by an acquire");
        return API_INVALID_PARAMETER;
    }
    if (rq->nidem_keys > 1) {
        snprintf(msg, msglen, "the Idempotency-Key header is given twice");
        return API_INVALID_PARAMETER;
    }
    if (!backend_idem_key_ok(rq->idem_keys[0])) {
        snprintf(msg, msglen,
                 "the Idempotency-Key header must be 1 to %d printable ASCII "
                 "characters",
                 LOCK_IDEM_MAX);
        return API_INVALID_PARAMETER;
    }
    p->has_idem_key = true;
    p->idem_key = strdup(rq->idem_keys[0]);
    return p->idem_key != NULL ? API_OK : API_INTERNAL;
}

enum api_error codec_parse_params(const struct api_request *rq,
                                  unsigned allowed,
                                  uint64_t max_ttl,
                                  uint64_t max_wait,
                                  struct api_params *p,
                                  char *msg,
                                  size_t msglen)
{
    struct param_bounds b = { .max_ttl = max_ttl, .max_wait = max_wait };
    enum api_error err;

    memset(p, 0, sizeof(*p));
    err = parse_body(rq, allowed, &b, p, msg, msglen);
    for (size_t i = 0; err == API_OK && i < rq->nquery; i++)
        err = parse_query_one(&rq->query[i], allowed, &b, p, msg, msglen);
    if (err == API_OK)
        err = codec_params_headers(rq, allowed, &b, p, msg, msglen);
    if (err != API_OK) {
        if (err == API_INTERNAL)
            snprintf(msg, msglen, "out of memory");
        codec_params_cleanup(p);
    }
    return err;
}

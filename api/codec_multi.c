/*
 * api/codec_multi.c - requests and answers for several keys at once
 * (POST, PUT and DELETE /locks): the "keys" list with docs/API.md's key
 * rules, the other fields from the JSON body only, and the JSON of a
 * multi-key grant, conflict, renewal error and release.
 */
#include "api/codec.h"
#include "api/codec_impl.h"
#include "lib/text.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_SHOWN 64 /* bytes of a key a message quotes */

void codec_keys_cleanup(struct api_keys *k)
{
    free(k->keys);
    memset(k, 0, sizeof(*k));
}

/* Print key into dst for a message: the key is valid UTF-8 without control
 * characters, cut at a character boundary after KEY_SHOWN bytes. */
static void show_key(char *dst, size_t cap, const char *key, size_t len)
{
    size_t n = len;

    if (n > KEY_SHOWN) {
        n = KEY_SHOWN;
        while (n > 0 && ((unsigned char)key[n] & 0xc0) == 0x80)
            n--; /* not inside a character */
    }
    snprintf(dst, cap, "%.*s%s", (int)n, key, n < len ? "..." : "");
}

/* Why keys[i] (s, len bytes) is not a key: API_OK, or invalid_key. */
static enum api_error
check_key(size_t i, const char *s, size_t len, char *msg, size_t msglen)
{
    if (len == 0 || len > LOCK_KEY_MAX)
        snprintf(msg, msglen,
                 "keys[%zu]: a lock key must be 1 to %d bytes, not %zu", i,
                 LOCK_KEY_MAX, len);
    else if (!text_utf8_valid(s, len))
        snprintf(msg, msglen, "keys[%zu]: the lock key is not valid UTF-8", i);
    else if (text_has_control(s, len))
        snprintf(msg, msglen,
                 "keys[%zu]: the lock key contains a control character", i);
    else
        return API_OK;
    return API_INVALID_KEY;
}

/* Check the JSON value of "keys" in order (each element's type, its key
 * rules, then whether an earlier one repeats it); *total gets the bytes
 * the copies take. */
static enum api_error
check_keys(json_t *a, size_t *total, char *msg, size_t msglen)
{
    size_t n = json_array_size(a);
    char shown[4 * KEY_SHOWN];

    if (!json_is_array(a)) {
        snprintf(msg, msglen, "'keys' must be an array of 1 to %d strings",
                 LOCK_MULTI_MAX);
        return API_INVALID_PARAMETER;
    }
    if (n == 0 || n > LOCK_MULTI_MAX) {
        snprintf(msg, msglen, "'keys' must hold 1 to %d keys, not %zu",
                 LOCK_MULTI_MAX, n);
        return API_INVALID_PARAMETER;
    }
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        enum api_error err;
        if (!json_is_string(v)) {
            snprintf(msg, msglen, "keys[%zu] must be a string", i);
            return API_INVALID_PARAMETER;
        }
        err = check_key(i, s, len, msg, msglen);
        if (err != API_OK)
            return err;
        for (size_t k = 0; k < i; k++) {
            json_t *w = json_array_get(a, k);
            if (json_string_length(w) == len &&
                memcmp(json_string_value(w), s, len) == 0) {
                show_key(shown, sizeof(shown), s, len);
                snprintf(msg, msglen, "keys[%zu] repeats keys[%zu]: \"%s\"", i,
                         k, shown);
                return API_INVALID_PARAMETER;
            }
        }
        *total += len + 1;
    }
    return API_OK;
}

/* Copy the checked keys of a into out, one block. */
static enum api_error copy_keys(json_t *a, size_t total, struct api_keys *out)
{
    size_t n = json_array_size(a);
    size_t head = n * (sizeof(char *) + sizeof(size_t));
    char *block = malloc(head + total);
    char *p;

    if (block == NULL)
        return API_INTERNAL;
    out->n = n;
    out->keys = (char **)(void *)block;
    out->lens = (size_t *)(void *)(block + n * sizeof(char *));
    p = block + head;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        size_t len = json_string_length(v);
        memcpy(p, json_string_value(v), len);
        p[len] = '\0';
        out->keys[i] = p;
        out->lens[i] = len;
        p += len + 1;
    }
    return API_OK;
}

/* What refuses a multi-key request before its body is read: a query
 * parameter (the parameters come from the body only). */
static enum api_error
check_no_query(const struct api_request *rq, char *msg, size_t msglen)
{
    char qname[300];

    if (rq->nquery == 0)
        return API_OK;
    codec_quote_name(qname, sizeof(qname), rq->query[0].name,
                     strlen(rq->query[0].name));
    snprintf(msg, msglen,
             "query parameters are not used with several keys: put '%s' in "
             "the JSON body",
             qname);
    return API_INVALID_PARAMETER;
}

enum api_error codec_parse_multi(const struct api_request *rq,
                                 unsigned allowed,
                                 uint64_t max_ttl,
                                 uint64_t max_wait,
                                 struct api_params *p,
                                 struct api_keys *keys,
                                 char *msg,
                                 size_t msglen)
{
    struct param_bounds b = { .max_ttl = max_ttl, .max_wait = max_wait };
    json_t *root = NULL, *a;
    size_t total = 0;
    enum api_error err;

    memset(p, 0, sizeof(*p));
    memset(keys, 0, sizeof(*keys));
    err = check_no_query(rq, msg, msglen);
    if (err == API_OK && rq->body_len == 0) {
        snprintf(msg, msglen,
                 "'keys' is required: a JSON body {\"keys\":[\"a\",\"b\"]}");
        err = API_INVALID_PARAMETER;
    }
    if (err == API_OK)
        err = codec_load_object(rq, &root, msg, msglen);
    if (err == API_OK && (a = json_object_get(root, "keys")) == NULL) {
        snprintf(msg, msglen, "'keys' is required: the keys to lock");
        err = API_INVALID_PARAMETER;
    }
    if (err == API_OK)
        err = check_keys(a, &total, msg, msglen);
    if (err == API_OK)
        err = codec_params_object(root, allowed, &b, "keys", p, msg, msglen);
    if (err == API_OK)
        err = codec_params_headers(rq, allowed, &b, p, msg, msglen);
    if (err == API_OK)
        err = copy_keys(a, total, keys);
    json_decref(root);
    if (err != API_OK) {
        if (err == API_INTERNAL)
            snprintf(msg, msglen, "out of memory");
        codec_params_cleanup(p);
        codec_keys_cleanup(keys);
    }
    return err;
}

/* keys as a JSON array, only those with pick[i] (NULL: all), or with
 * !pick[i] when invert. */
static json_t *
key_list(const struct api_keys *keys, const bool *pick, bool invert)
{
    json_t *a = json_array();

    for (size_t i = 0; a != NULL && i < keys->n; i++)
        if (pick == NULL || pick[i] != invert)
            json_array_append_new(a,
                                  json_stringn(keys->keys[i], keys->lens[i]));
    return a;
}

void codec_multi_grant(struct api_response *resp,
                       unsigned status,
                       const struct api_keys *keys,
                       const char *token,
                       const struct lock_multi_grant *g,
                       uint64_t ttl_ms)
{
    json_t *root, *fences;
    char when[40];

    codec_alloc_failed = false;
    fences = json_object();
    for (size_t i = 0; fences != NULL && i < keys->n; i++)
        json_object_setn_new(fences, keys->keys[i], keys->lens[i],
                             json_integer((json_int_t)g->fences[i]));
    codec_format_time(g->expires_at_ms, when, sizeof(when));
    /* "o" of NULL fails the pack: out of memory */
    root = json_pack("{s:o,s:s,s:o,s:I,s:s}", "keys", key_list(keys, NULL, 0),
                     "token", token, "fences", fences, "ttl_ms",
                     (json_int_t)ttl_ms, "expires_at", when);
    resp->status = status;
    codec_set_body(resp, root);
    json_decref(root);
}

void codec_multi_held(struct api_response *resp,
                      const struct api_keys *keys,
                      const struct lock_multi_grant *g,
                      bool waited)
{
    uint64_t ms = g->retry_ms > 0 ? g->retry_ms : 1;
    json_t *root;

    codec_alloc_failed = false;
    root = json_pack("{s:{s:s,s:s,s:I,s:o}}", "error", "code", "lock_held",
                     "message",
                     waited ? "some of the keys are still held after waiting "
                              "wait_ms: none was taken"
                            : "some of the keys are held: none was taken",
                     "retry_after_ms", (json_int_t)ms, "held",
                     key_list(keys, g->held, false));
    resp->status = 409;
    codec_set_body(resp, root);
    json_decref(root);
    resp->retry_after = (unsigned)((ms + 999) / 1000);
}

void codec_multi_bad_key(struct api_response *resp,
                         enum api_error e,
                         const struct api_keys *keys,
                         size_t bad)
{
    char msg[512], shown[4 * KEY_SHOWN];
    json_t *root;

    if (bad >= keys->n)
        bad = 0; /* a store's slip: name the first rather than nothing */
    show_key(shown, sizeof(shown), keys->keys[bad], keys->lens[bad]);
    snprintf(msg, sizeof(msg),
             e == API_TOKEN_MISMATCH
                 ? "keys[%zu] (\"%s\") is held under another token: nothing "
                   "was renewed"
                 : "keys[%zu] (\"%s\") is not held (never acquired, released "
                   "or expired): nothing was renewed",
             bad, shown);
    codec_alloc_failed = false;
    root = json_pack("{s:{s:s,s:s,s:s%}}", "error", "code", api_error_code(e),
                     "message", msg, "key", keys->keys[bad], keys->lens[bad]);
    resp->status = api_error_status(e);
    codec_set_body(resp, root);
    json_decref(root);
}

void codec_multi_released(struct api_response *resp,
                          const struct api_keys *keys,
                          const struct lock_multi_grant *g)
{
    json_t *root;

    codec_alloc_failed = false;
    root =
        json_pack("{s:o,s:o}", "released", key_list(keys, g->released, false),
                  "not_held", key_list(keys, g->released, true));
    resp->status = 200;
    codec_set_body(resp, root);
    json_decref(root);
}

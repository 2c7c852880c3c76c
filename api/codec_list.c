/*
 * api/codec_list.c - the operator endpoints' codec: GET /locks's query
 * (prefix, limit, cursor) and its page of held keys, the opaque cursor
 * ("k" + base64url of the last key, no padding), and the answer to a
 * forced release. Strict as the rest of the codec: an unknown or repeated
 * parameter, a body, a limit out of 1..LOCK_LIST_MAX or a cursor lockd did
 * not give are 400 invalid_parameter.
 */
#include "api/codec.h"
#include "api/codec_impl.h"
#include "lib/text.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CURSOR_TAG 'k' /* the cursor's version: its form may change */

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int codec_cursor_encode(const char *key, size_t len, char *out, size_t cap)
{
    const unsigned char *k = (const unsigned char *)key;
    size_t n = 0;

    if (cap < API_CURSOR_MAX + 1 || len == 0 || len > LOCK_KEY_MAX)
        return -1;
    out[n++] = CURSOR_TAG;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)k[i] << 16;
        size_t left = len - i;
        if (left > 1)
            v |= (uint32_t)k[i + 1] << 8;
        if (left > 2)
            v |= k[i + 2];
        out[n++] = b64url[(v >> 18) & 63];
        out[n++] = b64url[(v >> 12) & 63];
        if (left > 1)
            out[n++] = b64url[(v >> 6) & 63];
        if (left > 2)
            out[n++] = b64url[v & 63];
    }
    out[n] = '\0';
    return 0;
}

static int b64url_value(char c)
{
    const char *p = c != '\0' ? strchr(b64url, c) : NULL;

    return p != NULL ? (int)(p - b64url) : -1;
}

int codec_cursor_decode(const char *s, size_t n, char *key, size_t *len)
{
    size_t body = n - 1, out = 0;
    uint32_t acc = 0;
    unsigned bits = 0;

    if (n < 3 || n > API_CURSOR_MAX || s[0] != CURSOR_TAG || body % 4 == 1)
        return -1;
    for (size_t i = 1; i < n; i++) {
        int v = b64url_value(s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (out == LOCK_KEY_MAX)
                return -1;
            key[out++] = (char)((acc >> bits) & 0xff);
        }
    }
    /* the bits left over must be zero: one key has one cursor */
    if ((acc & ((1u << bits) - 1)) != 0)
        return -1;
    key[out] = '\0';
    *len = out;
    return backend_key_ok(key, out) ? 0 : -1;
}

void codec_list_params_cleanup(struct api_list_params *p)
{
    free(p->prefix);
    memset(p, 0, sizeof(*p));
}

/* The value of one list parameter (name already decoded as idx). */
static enum api_error list_param(struct api_list_params *p,
                                 int idx,
                                 const char *v,
                                 size_t vlen,
                                 char *msg,
                                 size_t msglen)
{
    uint64_t n;

    if (idx == 0) {
        if (vlen > LOCK_KEY_MAX || memchr(v, '\0', vlen) != NULL) {
            snprintf(msg, msglen,
                     "'prefix' must be at most %d bytes without NUL",
                     LOCK_KEY_MAX);
            return API_INVALID_PARAMETER;
        }
        p->prefix = malloc(vlen + 1);
        if (p->prefix == NULL) {
            snprintf(msg, msglen, "out of memory");
            return API_INTERNAL;
        }
        memcpy(p->prefix, v, vlen);
        p->prefix[vlen] = '\0';
        p->prefix_len = vlen;
        return API_OK;
    }
    if (idx == 1) {
        if (memchr(v, '\0', vlen) != NULL ||
            text_parse_u64(v, 1, LOCK_LIST_MAX, &n) != 0) {
            snprintf(msg, msglen, "'limit' must be an integer in 1..%d",
                     LOCK_LIST_MAX);
            return API_INVALID_PARAMETER;
        }
        p->limit = (uint32_t)n;
        return API_OK;
    }
    if (codec_cursor_decode(v, vlen, p->after, &p->after_len) != 0) {
        snprintf(msg, msglen, "'cursor' is not one this server gave");
        return API_INVALID_PARAMETER;
    }
    p->has_cursor = true;
    return API_OK;
}

/* One query parameter of GET /locks: decoded, known, once. */
static enum api_error list_query_one(const struct api_param *q,
                                     struct api_list_params *p,
                                     bool seen[3],
                                     char *msg,
                                     size_t msglen)
{
    static const char *const names[] = { "prefix", "limit", "cursor" };
    size_t nlen = 0, vlen = 0;
    bool bad = false;
    char *name = text_percent_decode(q->name, strlen(q->name), &nlen, &bad);
    char *value = NULL;
    char qname[300];
    enum api_error err = API_INVALID_PARAMETER;
    int idx = -1;

    if (name == NULL) {
        snprintf(msg, msglen,
                 bad ? "a query parameter name has a malformed percent escape"
                     : "out of memory");
        return bad ? API_INVALID_PARAMETER : API_INTERNAL;
    }
    codec_quote_name(qname, sizeof(qname), name, nlen);
    for (int i = 0; i < 3; i++)
        if (strlen(names[i]) == nlen && memcmp(names[i], name, nlen) == 0)
            idx = i;
    if (idx < 0)
        snprintf(msg, msglen, "unknown parameter '%s'", qname);
    else if (seen[idx])
        snprintf(msg, msglen, "parameter '%s' is given twice", qname);
    else if (q->value == NULL)
        snprintf(msg, msglen, "parameter '%s' needs a value", qname);
    else if ((value = text_percent_decode(q->value, strlen(q->value), &vlen,
                                          &bad)) != NULL) {
        seen[idx] = true;
        err = list_param(p, idx, value, vlen, msg, msglen);
    } else if (bad) {
        snprintf(msg, msglen, "parameter '%s' has a malformed percent escape",
                 qname);
    } else {
        snprintf(msg, msglen, "out of memory");
        err = API_INTERNAL;
    }
    free(value);
    free(name);
    return err;
}

enum api_error codec_parse_list(const struct api_request *rq,
                                struct api_list_params *p,
                                char *msg,
                                size_t msglen)
{
    bool seen[3] = { false, false, false };
    enum api_error err = API_OK;

    memset(p, 0, sizeof(*p));
    p->limit = API_LIST_DEFAULT;
    if (rq->body_len > 0) {
        snprintf(msg, msglen, "GET /locks takes no body: use the query");
        return API_INVALID_PARAMETER;
    }
    for (size_t i = 0; i < rq->nquery && err == API_OK; i++)
        err = list_query_one(&rq->query[i], p, seen, msg, msglen);
    if (err == API_OK && p->prefix == NULL) {
        p->prefix = calloc(1, 1);
        if (p->prefix == NULL) {
            snprintf(msg, msglen, "out of memory");
            err = API_INTERNAL;
        }
    }
    if (err != API_OK)
        codec_list_params_cleanup(p);
    return err;
}

static json_t *entry_json(const struct lock_entry *e)
{
    char when[40];
    json_t *o;

    codec_format_time(e->expires_at_ms, when, sizeof(when));
    o = json_pack("{s:s%,s:s,s:I,s:I,s:s,s:I}", "key", e->key, e->key_len,
                  "mode", e->mode == LOCK_SHARED ? "shared" : "exclusive",
                  "fence", (json_int_t)e->fence, "ttl_ms",
                  (json_int_t)(e->ttl_ms > 0 ? e->ttl_ms : 1), "expires_at",
                  when, "holder_count", (json_int_t)e->holder_count);
    if (o != NULL && e->mode != LOCK_SHARED && e->has_owner &&
        json_object_set_new(o, "owner", json_string(e->owner)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void codec_list(struct api_response *resp, const struct lock_list *l)
{
    json_t *root, *arr;
    char cursor[API_CURSOR_MAX + 1];

    codec_alloc_failed = false;
    root = json_object();
    arr = json_array();
    if (root == NULL || arr == NULL ||
        json_object_set_new(root, "locks", arr) != 0) {
        if (root == NULL)
            json_decref(arr); /* else taken, even on failure */
        json_decref(root);
        codec_set_body(resp, NULL);
        return;
    }
    for (size_t i = 0; i < l->n; i++) {
        if (json_array_append_new(arr, entry_json(&l->entries[i])) != 0) {
            json_decref(root);
            codec_set_body(resp, NULL);
            return;
        }
    }
    if (l->more && l->resume_len > 0 &&
        codec_cursor_encode(l->resume, l->resume_len, cursor, sizeof(cursor)) ==
            0 &&
        json_object_set_new(root, "next_cursor", json_string(cursor)) != 0) {
        json_decref(root);
        codec_set_body(resp, NULL);
        return;
    }
    resp->status = 200;
    codec_set_body(resp, root);
    json_decref(root);
}

void codec_force_released(struct api_response *resp,
                          const char *key,
                          size_t key_len,
                          const struct lock_info *info)
{
    codec_reply(resp, 200, "{s:s%,s:b,s:b,s:I}", "key", key, key_len,
                "released", 1, "forced", 1, "holders",
                (json_int_t)info->holder_count);
}

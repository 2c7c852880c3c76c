/*
 * api/codec_impl.h - what the codec's files (api/codec.c,
 * api/codec_params.c, api/codec_multi.c) share and no one else sees: the
 * flag that tells a failed jansson allocation, the body and field parsers
 * the multi-key requests reuse, and the reply setter.
 */
#ifndef API_CODEC_IMPL_H
#define API_CODEC_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "api/codec.h"

/* Set by the codec's jansson allocator when an allocation fails, on this
 * thread; whoever parses or dumps clears it first and checks it after
 * (jansson 2.14 sometimes carries on after a failure). */
extern _Thread_local bool codec_alloc_failed;

struct param_bounds {
    uint64_t max_ttl, max_wait;
};

/* Parse rq's body (not empty) into a JSON object, duplicate fields
 * refused: API_OK and *out a new reference, or the error (invalid_json,
 * invalid_parameter, internal) with a message in msg. */
enum api_error codec_load_object(const struct api_request *rq,
                                 json_t **out,
                                 char *msg,
                                 size_t msglen);
/* Store every field of the object root in p, as the body of a lock
 * request, except the field named skip (NULL: none): unknown and
 * disallowed fields, wrong types and ranges are errors. */
enum api_error codec_params_object(json_t *root,
                                   unsigned allowed,
                                   const struct param_bounds *b,
                                   const char *skip,
                                   struct api_params *p,
                                   char *msg,
                                   size_t msglen);
/* The Lock-Token and Idempotency-Key headers of rq, into p. */
enum api_error codec_params_headers(const struct api_request *rq,
                                    unsigned allowed,
                                    const struct param_bounds *b,
                                    struct api_params *p,
                                    char *msg,
                                    size_t msglen);
/* Print name[0..len) into dst (cap bytes) readably, even if it holds junk
 * bytes; at most 64 of them, then "...". */
void codec_quote_name(char *dst, size_t cap, const char *name, size_t len);

/* Dump root (NULL: out of memory) into resp's body as compact JSON, or a
 * fixed 500 when that fails; clears codec_alloc_failed. */
void codec_set_body(struct api_response *resp, json_t *root);

#endif /* API_CODEC_IMPL_H */

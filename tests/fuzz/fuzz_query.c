/*
 * tests/fuzz/fuzz_query.c - a query string as libmicrohttpd hands it to
 * lockd: split at '&' into name=value pairs ('+' already a space, no '='
 * a parameter without a value, escapes kept), then codec_parse_params()
 * with every parameter allowed and codec_parse_list() (GET /locks).
 */
#include <stdlib.h>
#include <string.h>

#include "api/codec.h"
#include "tests/fuzz/fuzz.h"

#define MAX_PARAMS 64
#define MAX_TTL    86400000u
#define MAX_WAIT   300000u
#define ALL_PARAMS                                                           \
    (API_P_TTL_MS | API_P_WAIT_MS | API_P_OWNER | API_P_TOKEN | API_P_MODE | \
     API_P_LIMIT | API_P_ALL | API_P_IDEM_KEY | API_P_FORCE)
static void parse_params(const struct api_request *rq)
{
    struct api_params p;
    char msg[256];

    memset(&p, 0, sizeof(p));
    if (codec_parse_params(rq, ALL_PARAMS, MAX_TTL, MAX_WAIT, &p, msg,
                           sizeof(msg)) != API_OK)
        return;
    if ((p.has_ttl_ms && p.ttl_ms > MAX_TTL) ||
        (p.has_wait_ms && p.wait_ms > MAX_WAIT) ||
        (p.has_limit && (p.limit < 1 || p.limit > LOCK_LIMIT_MAX)) ||
        (p.has_owner && p.owner == NULL) || (p.has_token && p.token == NULL))
        abort(); /* what the codec promises of an accepted request */
    codec_params_cleanup(&p);
}

static void parse_list(const struct api_request *rq)
{
    struct api_list_params p;
    char msg[256];

    if (codec_parse_list(rq, &p, msg, sizeof(msg)) != API_OK)
        return;
    if (p.prefix == NULL || p.prefix_len > LOCK_KEY_MAX || p.limit < 1 ||
        p.limit > LOCK_LIST_MAX ||
        (p.has_cursor && !backend_key_ok(p.after, p.after_len)))
        abort();
    codec_list_params_cleanup(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *query = fuzz_strdup(data, size);
    struct api_param q[MAX_PARAMS];
    struct api_request rq;

    memset(&rq, 0, sizeof(rq));
    rq.method = "POST";
    rq.path = "/locks/k";
    rq.body = "";
    rq.query = q;
    rq.nquery = size > 0 ? fuzz_query_pairs(query, q, MAX_PARAMS) : 0;
    parse_params(&rq);
    rq.method = "GET";
    rq.path = "/locks";
    parse_list(&rq);
    free(query);
    return 0;
}

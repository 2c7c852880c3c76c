/*
 * tests/fuzz/fuzz_codec.c - the request codec on what a client controls
 * of a lock request: the query and the body bytes, and whether it sent a
 * Lock-Token or an Idempotency-Key header. The first byte picks the
 * parser (its low 3 bits: acquire, renew, release, inspect through
 * codec_parse_params() with the handlers' parameter sets; the three
 * multi-key verbs through codec_parse_multi(); GET /locks through
 * codec_parse_list()) and the headers (bits 3 and 4); then the query up to
 * the first newline, then the body, byte for byte (NULs included).
 */
#include <stdlib.h>
#include <string.h>

#include "api/codec.h"
#include "tests/fuzz/fuzz.h"

#define MAX_PARAMS 32
#define MAX_TTL    86400000u
#define MAX_WAIT   300000u

static const unsigned single_sets[] = {
    API_P_TTL_MS | API_P_WAIT_MS | API_P_OWNER | API_P_MODE | API_P_LIMIT |
        API_P_TOKEN | API_P_IDEM_KEY,      /* acquire */
    API_P_TOKEN | API_P_TTL_MS,            /* renew */
    API_P_TOKEN | API_P_ALL | API_P_FORCE, /* release */
    0,                                     /* inspect */
};

static const unsigned multi_sets[] = {
    API_P_TTL_MS | API_P_WAIT_MS | API_P_OWNER, /* acquire */
    API_P_TOKEN | API_P_TTL_MS,                 /* renew */
    API_P_TOKEN,                                /* release */
};

static void parse_single(const struct api_request *rq, unsigned allowed)
{
    struct api_params p;
    char msg[256];

    memset(&p, 0, sizeof(p));
    if (codec_parse_params(rq, allowed, MAX_TTL, MAX_WAIT, &p, msg,
                           sizeof(msg)) == API_OK)
        codec_params_cleanup(&p);
}

static void parse_multi(const struct api_request *rq, unsigned allowed)
{
    struct api_params p;
    struct api_keys k;
    char msg[256];

    memset(&p, 0, sizeof(p));
    memset(&k, 0, sizeof(k));
    if (codec_parse_multi(rq, allowed, MAX_TTL, MAX_WAIT, &p, &k, msg,
                          sizeof(msg)) != API_OK) {
        if (k.n != 0 || k.keys != NULL)
            abort(); /* on error keys are clean */
        return;
    }
    if (k.n < 1 || k.n > LOCK_MULTI_MAX)
        abort();
    for (size_t i = 0; i < k.n; i++) {
        if (!backend_key_ok(k.keys[i], k.lens[i]))
            abort();
        for (size_t j = 0; j < i; j++)
            if (k.lens[i] == k.lens[j] &&
                memcmp(k.keys[i], k.keys[j], k.lens[i]) == 0)
                abort(); /* distinct keys */
    }
    codec_params_cleanup(&p);
    codec_keys_cleanup(&k);
}

static void parse_list(const struct api_request *rq)
{
    struct api_list_params p;
    char msg[256];

    if (codec_parse_list(rq, &p, msg, sizeof(msg)) == API_OK)
        codec_list_params_cleanup(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const tokens[] = { "0123456789abcdef0123456789abcdef" };
    static const char *const idem[] = { "job-42" };
    struct api_param q[MAX_PARAMS];
    struct api_request rq;
    const uint8_t *nl;
    char *query, *body;
    unsigned pick;

    if (size == 0)
        return 0;
    pick = data[0];
    data++;
    size--;
    nl = memchr(data, '\n', size);
    query = fuzz_strdup(data, nl != NULL ? (size_t)(nl - data) : 0);
    memset(&rq, 0, sizeof(rq));
    rq.method = "POST";
    rq.path = "/locks/k";
    rq.query = q;
    rq.nquery = fuzz_query_pairs(query, q, MAX_PARAMS);
    /* the body as its own allocation, so ASan sees a read past its end */
    rq.body_len = nl != NULL ? size - (size_t)(nl + 1 - data) : size;
    rq.body = (const char *)(nl != NULL ? nl + 1 : data);
    body = malloc(rq.body_len > 0 ? rq.body_len : 1);
    if (body == NULL)
        abort();
    memcpy(body, rq.body, rq.body_len);
    rq.body = body;
    rq.lock_tokens = tokens;
    rq.nlock_tokens = (pick & 0x08u) != 0;
    rq.idem_keys = idem;
    rq.nidem_keys = (pick & 0x10u) != 0;
    if ((pick & 7u) < 4)
        parse_single(&rq, single_sets[pick & 7u]);
    else if ((pick & 7u) < 7)
        parse_multi(&rq, multi_sets[(pick & 7u) - 4]);
    else
        parse_list(&rq);
    free(body);
    free(query);
    return 0;
}

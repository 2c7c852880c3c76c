/*
 * service/reqcheck.h - checks of the request line and headers that
 * libmicrohttpd leaves to lockd (see reqcheck.c), run by server.c on a
 * request's first call, once its headers are in, and what api/ reads of
 * them, gathered.
 */
#ifndef SERVICE_REQCHECK_H
#define SERVICE_REQCHECK_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/codec.h"
#include "api/errors.h"

#define REQCHECK_QUERY_MAX     32
#define REQCHECK_TOKENS_MAX    4
#define REQCHECK_IDEM_KEYS_MAX 4 /* more than one is refused by api/ anyway */

/* What api/ reads of a request besides its target and body: the query
 * parameters and the Lock-Token and Idempotency-Key headers, as received
 * (strings are libmicrohttpd's, valid until the request completes). */
struct reqcheck_collect {
    struct api_param query[REQCHECK_QUERY_MAX];
    size_t nquery;
    const char *tokens[REQCHECK_TOKENS_MAX];
    size_t ntokens;
    const char *idem_keys[REQCHECK_IDEM_KEYS_MAX];
    size_t nidem_keys;
    bool overflow;
};

/* Headers a request must not have: API_OK, or the error to answer with
 * (msg set). method is libmicrohttpd's, the start of the header section.
 * *close is set when the connection must be closed after the answer. */
enum api_error reqcheck_headers(struct MHD_Connection *conn,
                                const char *method,
                                uint64_t max_header_bytes,
                                bool *close,
                                char *msg,
                                size_t msglen);

/* True if the request target held a raw NUL byte, which libmicrohttpd's C
 * strings silently cut off. */
bool reqcheck_target_has_nul(struct MHD_Connection *conn,
                             const char *url,
                             const char *version);

/* Fill c (zeroed by the caller) from conn: false if there were more
 * parameters or those headers than c has room for. */
bool reqcheck_collect(struct MHD_Connection *conn, struct reqcheck_collect *c);

#endif /* SERVICE_REQCHECK_H */

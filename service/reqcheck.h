/*
 * service/reqcheck.h - checks of the request line and headers that
 * libmicrohttpd leaves to lockd (see reqcheck.c), run by server.c on a
 * request's first call, once its headers are in.
 */
#ifndef SERVICE_REQCHECK_H
#define SERVICE_REQCHECK_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/errors.h"

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

#endif /* SERVICE_REQCHECK_H */

/*
 * tests/bench/minhttp.h - what the bench's small libmicrohttpd servers
 * share: ceiling.c with -p and sketch.c collect a request's body the same
 * way and answer with a copied JSON body. Header-only (each server is one
 * file built on its own by tests/bench/run).
 */
#ifndef TESTS_BENCH_MINHTTP_H
#define TESTS_BENCH_MINHTTP_H

#include <microhttpd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct req { /* one request: its body, up to a small cap */
    char body[256];
    size_t len;
    int too_big;
};

/* Take a call of the access handler: true when the request is complete
 * (*req_cls holds its body) and is to be answered now, false when *ret is
 * the handler's return (headers only, or a piece of the body kept). */
static inline int req_collect(void **req_cls,
                              const char *upload_data,
                              size_t *upload_size,
                              enum MHD_Result *ret)
{
    struct req *rq = *req_cls;

    *ret = MHD_YES;
    if (rq == NULL) { /* headers only: wait for the body */
        rq = calloc(1, sizeof(*rq));
        if (rq == NULL)
            *ret = MHD_NO;
        *req_cls = rq;
        return 0;
    }
    if (*upload_size != 0) {
        if (rq->len + *upload_size < sizeof(rq->body)) {
            memcpy(rq->body + rq->len, upload_data, *upload_size);
            rq->len += *upload_size;
        } else {
            rq->too_big = 1;
        }
        *upload_size = 0;
        return 0;
    }
    return 1;
}

/* MHD_OPTION_NOTIFY_COMPLETED: the request's body goes. */
static inline void req_completed(void *cls,
                                 struct MHD_Connection *conn,
                                 void **req_cls,
                                 enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    free(*req_cls);
    *req_cls = NULL;
}

/* Queue status with body (copied) as application/json. */
static inline enum MHD_Result
answer(struct MHD_Connection *conn, unsigned status, const char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

#endif /* TESTS_BENCH_MINHTTP_H */

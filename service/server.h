/*
 * service/server.h - the libmicrohttpd daemon: a pool of worker threads
 * with epoll, request bodies bounded by --max-body-bytes, waiting acquires
 * suspended (never a thread per waiter), one access log line per request.
 */
#ifndef SERVICE_SERVER_H
#define SERVICE_SERVER_H

#include "api/handlers.h"
#include "service/config.h"
#include "service/waitq.h"

struct server;

/* Start serving; NULL (and a logged reason) on failure. cfg, api and q are
 * borrowed and must outlive the server. */
struct server *server_start(const struct config *cfg,
                            const struct api_config *api,
                            struct waitq *q);

/* From now on /readyz is 503 and new requests get 503 shutting_down. */
void server_begin_shutdown(struct server *s);

/* Wait up to timeout_ms for requests in flight to finish; 0 if they did. */
int server_drain(struct server *s, int64_t timeout_ms);

/* Stop the daemon (closing every connection) and free. Accepts NULL. */
void server_stop(struct server *s);

#endif /* SERVICE_SERVER_H */

/*
 * api/handlers.h - one function per endpoint. Each fills an api_response;
 * acquire is split in two because waiting belongs to the server: parse
 * into an api_acquire, then build the reply from the backend's answer.
 */
#ifndef API_HANDLERS_H
#define API_HANDLERS_H

#include "api/codec.h"

struct api_config { /* frozen before the server starts */
    struct backend *backend;
    uint64_t default_ttl_ms;
    uint64_t max_ttl_ms;
    uint64_t max_wait_ms;
    const char *auth_token; /* NULL: no auth */
};

struct api_acquire { /* a parsed acquire, for the server's wait queue */
    char *key;       /* owned, decoded */
    size_t key_len;
    char token[API_TOKEN_LEN + 1]; /* fresh, from getrandom */
    char *owner;                   /* owned; NULL when none */
    uint64_t ttl_ms;
    uint64_t wait_ms;
};

void api_acquire_cleanup(struct api_acquire *acq); /* accepts zeroed */
void api_response_cleanup(struct api_response *resp);

/* POST /locks/{key}: API_OK and *acq filled (the caller runs it), or an
 * error already written into resp. key is handed over to acq. */
enum api_error handle_acquire_parse(const struct api_config *cfg,
                                    const struct api_request *rq,
                                    char *key,
                                    size_t key_len,
                                    struct api_acquire *acq,
                                    struct api_response *resp);
/* The answer to an acquire: 201 on BACKEND_OK, 409 lock_held with
 * retry_ms on BACKEND_HELD, else the mapped error. */
void handle_acquire_reply(const struct api_acquire *acq,
                          enum backend_result r,
                          const struct lock_grant *g,
                          struct api_response *resp);

void handle_renew(const struct api_config *cfg,
                  const struct api_request *rq,
                  const char *key,
                  size_t key_len,
                  struct api_response *resp);
void handle_release(const struct api_config *cfg,
                    const struct api_request *rq,
                    const char *key,
                    size_t key_len,
                    struct api_response *resp);
void handle_inspect(const struct api_config *cfg,
                    const struct api_request *rq,
                    const char *key,
                    size_t key_len,
                    struct api_response *resp);
void handle_healthz(struct api_response *resp);
void handle_readyz(const struct api_config *cfg,
                   bool shutting_down,
                   struct api_response *resp);
void handle_metrics(const struct api_config *cfg, struct api_response *resp);

#endif /* API_HANDLERS_H */

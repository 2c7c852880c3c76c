/*
 * api/errors.h - docs/API.md's error table as one X-macro list, expanded into
 * enum api_error and the status/code lookups, and the mapping from backend
 * results.
 */
#ifndef API_ERRORS_H
#define API_ERRORS_H

#include "backends/backend.h"

/* X(name, HTTP status, code) */
#define API_ERRORS(X)                                      \
    X(API_OK, 200, "ok")                                   \
    X(API_BAD_REQUEST, 400, "bad_request")                 \
    X(API_INVALID_KEY, 400, "invalid_key")                 \
    X(API_INVALID_JSON, 400, "invalid_json")               \
    X(API_INVALID_PARAMETER, 400, "invalid_parameter")     \
    X(API_MISSING_TOKEN, 400, "missing_token")             \
    X(API_UNAUTHORIZED, 401, "unauthorized")               \
    X(API_FORBIDDEN, 403, "forbidden")                     \
    X(API_LOCK_NOT_FOUND, 404, "lock_not_found")           \
    X(API_NOT_FOUND, 404, "not_found")                     \
    X(API_METHOD_NOT_ALLOWED, 405, "method_not_allowed")   \
    X(API_LOCK_HELD, 409, "lock_held")                     \
    X(API_TOKEN_MISMATCH, 409, "token_mismatch")           \
    X(API_LIMIT_MISMATCH, 409, "limit_mismatch")           \
    X(API_BODY_TOO_LARGE, 413, "body_too_large")           \
    X(API_TOO_MANY_REQUESTS, 429, "too_many_requests")     \
    X(API_HEADERS_TOO_LARGE, 431, "headers_too_large")     \
    X(API_INTERNAL, 500, "internal_error")                 \
    X(API_NOT_IMPLEMENTED, 501, "not_implemented")         \
    X(API_BACKEND_UNAVAILABLE, 503, "backend_unavailable") \
    X(API_SHUTTING_DOWN, 503, "shutting_down")

#define API_ERROR_ENUM(name, status, code) name,
enum api_error {
    API_ERRORS(API_ERROR_ENUM) API_ERROR_COUNT
};
#undef API_ERROR_ENUM

unsigned api_error_status(enum api_error e);
const char *api_error_code(enum api_error e);
/* The default human sentence for e. */
const char *api_error_message(enum api_error e);

/* How a backend result reads in the API for an operation on a lock that
 * must be held (renew, release, inspect). BACKEND_HELD maps to lock_held. */
enum api_error api_error_from(enum backend_result r);
/* The human sentence for a backend result whose error says more than its
 * code's default (limit_mismatch, and the invalid_parameter answers of
 * HOLDS_MAX and IDEM_CONFLICT); NULL for the default. */
const char *api_result_message(enum backend_result r);

#endif /* API_ERRORS_H */

/*
 * api/errors.c - status, code and default message for every API error.
 */
#include "api/errors.h"

#define API_ERROR_STATUS(name, status, code) status,
static const unsigned error_status[] = { API_ERRORS(API_ERROR_STATUS) };
#undef API_ERROR_STATUS

#define API_ERROR_CODE(name, status, code) code,
static const char *const error_code[] = { API_ERRORS(API_ERROR_CODE) };
#undef API_ERROR_CODE

unsigned api_error_status(enum api_error e)
{
    return (unsigned)e < API_ERROR_COUNT ? error_status[e] : 500;
}

const char *api_error_code(enum api_error e)
{
    return (unsigned)e < API_ERROR_COUNT ? error_code[e] : "internal_error";
}

const char *api_error_message(enum api_error e)
{
    switch (e) {
    case API_OK:
        return "ok";
    case API_BAD_REQUEST:
        return "the request is not well-formed HTTP/1.1";
    case API_INVALID_KEY:
        return "the lock key is invalid";
    case API_INVALID_JSON:
        return "the request body is not a JSON object";
    case API_INVALID_PARAMETER:
        return "a parameter is invalid";
    case API_MISSING_TOKEN:
        return "a lock token is required (Lock-Token header, token query "
               "parameter or token field)";
    case API_UNAUTHORIZED:
        return "valid credentials are required (Authorization: Bearer)";
    case API_FORBIDDEN:
        return "the credentials are valid but do not cover this request";
    case API_LOCK_NOT_FOUND:
        return "the lock is not held (never acquired, released or expired)";
    case API_NOT_FOUND:
        return "no such route";
    case API_METHOD_NOT_ALLOWED:
        return "method not allowed on this route";
    case API_LOCK_HELD:
        return "the lock is held by someone else";
    case API_TOKEN_MISMATCH:
        return "the lock is held under another token";
    case API_LIMIT_MISMATCH:
        return "the key is held shared under another limit";
    case API_BODY_TOO_LARGE:
        return "the request body is too large";
    case API_TOO_MANY_REQUESTS:
        return "too many requests; retry later";
    case API_HEADERS_TOO_LARGE:
        return "the request's header section is too large";
    case API_INTERNAL:
        return "internal error (out of memory)";
    case API_NOT_IMPLEMENTED:
        return "the request uses an HTTP feature lockd does not implement";
    case API_BACKEND_UNAVAILABLE:
        return "the lock backend is unavailable; retry later";
    case API_SHUTTING_DOWN:
        return "this lockd instance is shutting down; retry on another";
    case API_ERROR_COUNT:
        break;
    }
    return "internal error";
}

enum api_error api_error_from(enum backend_result r)
{
    switch (r) {
    case BACKEND_OK:
        return API_OK;
    case BACKEND_HELD:
        return API_LOCK_HELD;
    case BACKEND_NOT_FOUND:
        return API_LOCK_NOT_FOUND;
    case BACKEND_MISMATCH:
        return API_TOKEN_MISMATCH;
    case BACKEND_UNAVAILABLE:
        return API_BACKEND_UNAVAILABLE;
    case BACKEND_NO_MEMORY:
        return API_INTERNAL;
    case BACKEND_INVALID:
        return API_INTERNAL;
    case BACKEND_LIMIT_MISMATCH:
        return API_LIMIT_MISMATCH;
    case BACKEND_HOLDS_MAX:
    case BACKEND_IDEM_CONFLICT:
    case BACKEND_KEYS_APART:
        return API_INVALID_PARAMETER;
    }
    return API_INTERNAL;
}

_Static_assert(LOCK_HOLDS_MAX == 1000000, "the HOLDS_MAX message names it");

const char *api_result_message(enum backend_result r)
{
    switch (r) {
    case BACKEND_LIMIT_MISMATCH:
        return "the key is held shared under another limit: a shared "
               "acquire must name the holders' limit (or none, as they do)";
    case BACKEND_HOLDS_MAX:
        return "the token already holds the key 1000000 times: no more "
               "re-entries";
    case BACKEND_IDEM_CONFLICT:
        return "the Idempotency-Key names a live grant of another mode or "
               "limit";
    case BACKEND_KEYS_APART:
        return "on a Redis Cluster the keys of one request must share a hash "
               "tag, e.g. order:{42}:a and order:{42}:b";
    case BACKEND_OK:
    case BACKEND_HELD:
    case BACKEND_NOT_FOUND:
    case BACKEND_MISMATCH:
    case BACKEND_UNAVAILABLE:
    case BACKEND_NO_MEMORY:
    case BACKEND_INVALID:
        break;
    }
    return NULL;
}

/*
 * cli/cmds.h - lockctl's one-shot commands (acquire, renew, release,
 * inspect) as requests to lockd, and the acquire and release that run
 * builds on.
 */
#ifndef CLI_CMDS_H
#define CLI_CMDS_H

#include <stdint.h>

#include "cli/http.h"
#include "cli/opts.h"

/* Acquire the keys of o (one: POST /locks/KEY; several: POST /locks), with
 * --idempotent's retries. *out is the last call made (the caller frees it
 * with http_call_free; NULL only when out of memory). Returns its exit
 * code: 0 when granted. */
int cmds_acquire(const struct opts *o,
                 const struct http_conf *conf,
                 struct http_call **out);

/* A renew of the keys of o with token, at most timeout_ms: a new call,
 * not yet performed (NULL when out of memory). */
struct http_call *cmds_renew_call(const struct opts *o,
                                  const struct http_conf *conf,
                                  const char *token,
                                  int64_t timeout_ms);

/* Release the keys of o with token, retrying a transient failure for at
 * most budget_ms; 404 and 409 count as released (already gone). Returns
 * 0, or the exit code of the last failure (after one line on stderr). */
int cmds_release_retrying(const struct opts *o,
                          const struct http_conf *conf,
                          const char *token,
                          int64_t budget_ms);

/* Whether a failed call may succeed if sent again: no answer, 429, 5xx. */
int cmds_transient(const struct http_call *c);

/* acquire, renew, release or inspect as o says, printed as o says.
 * Returns the exit code. */
int cmds_main(const struct opts *o, const struct http_conf *conf);

#endif /* CLI_CMDS_H */

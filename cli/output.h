/*
 * cli/output.h - what lockctl prints: the server's JSON as one line, or
 * shell assignments (--format env); one readable error line on stderr;
 * and the exit code an answer maps to.
 */
#ifndef CLI_OUTPUT_H
#define CLI_OUTPUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cli/http.h"
#include "cli/opts.h"

/* The exit code of an answer (enum lockctl_exit): 0 for a 2xx. */
int output_exit_code(const struct http_call *c);

/* The keys of o joined by ", " into buf (cut short with "..." if need
 * be): the subject of messages. */
void output_keys_label(const struct opts *o, char *buf, size_t len);

/* One line on stderr for a failed call: "lockctl: KEY: held by another
 * holder (retry after 1.2s)", ... With to_stdout and --format json, the
 * error body also goes to stdout, for jq. */
void output_error(const struct opts *o,
                  const struct http_call *c,
                  bool to_stdout);

/* A successful answer's body (borrowed) on stdout, as --format says;
 * nothing with --quiet. Returns 0, or -1 when stdout failed. */
int output_success(const struct opts *o, json_t *body);

/* For inspect --format env of a free key: LOCKD_KEY and LOCKD_HELD=0. */
void output_env_free(const char *key);

/* v as one shell word for eval: single-quoted unless it is safe bare. */
void output_shell_word(FILE *f, const char *v);

#endif /* CLI_OUTPUT_H */

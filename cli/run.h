/*
 * cli/run.h - lockctl run: hold a lock while a command runs. Acquire,
 * start the command in its own process group, renew every ttl/3 from one
 * single-threaded loop (curl multi + a signalfd), stop the command when
 * the lock is lost, release when it exits.
 */
#ifndef CLI_RUN_H
#define CLI_RUN_H

#include "cli/http.h"
#include "cli/opts.h"

/* Run o->child_argv under the lock on o->keys. Returns the exit code:
 * the command's status (128+N when killed by signal N), o->exit_lost when
 * the lock was lost, o->exit_held when it could not be had, 2/3/6 when
 * lockd refused or could not be reached before the command started,
 * 126/127 when the command could not be executed / found, 125 on any other
 * failure of lockctl itself. */
int run_main(const struct opts *o, const struct http_conf *conf);

#endif /* CLI_RUN_H */

/*
 * backends/redis/library.h - the Redis adapter's scripts as one library of
 * Redis 7 functions (library.c), and what it takes from scripts.c.
 */
#ifndef BACKENDS_REDIS_LIBRARY_H
#define BACKENDS_REDIS_LIBRARY_H

#include "backends/redis/redis_int.h"

/* The library of functions FUNCTION LOAD sends (len bytes), or NULL. */
const char *redis_scripts_library(size_t *len);
/* argv[0] and argv[1] for script s on cn: FCALL and its function's name
 * when cn has the library, else EVALSHA and its digest. */
void redis_script_head(const struct redis_conn *cn,
                       enum redis_script s,
                       const char **argv,
                       size_t *argl);
/* Whether r answers an FCALL (argv from redis_script_head()) that was
 * refused before the function ran: no library (FUNCTION FLUSH, a server
 * restarted or failed over without it), no FCALL, or an ACL without it.
 * Then cn runs EVALSHA from now on (the next dial loads the library again
 * unless the ACL refused it): run the call once more. */
bool redis_fn_lost(struct redis_conn *cn,
                   const char *const *argv,
                   const redisReply *r);
/* scripts.c: holders.lua, the helpers at the top of the library (len
 * bytes). */
const char *redis_scripts_helpers(size_t *len);
/* scripts.c: script s without what its EVAL text starts with (the prelude
 * and holders.lua; cancel has neither), len bytes; NULL if its text is not
 * laid out so. */
const char *redis_script_body(enum redis_script s, size_t *len);

#endif

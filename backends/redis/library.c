/*
 * backends/redis/library.c - the Redis adapter's scripts as one library
 * of Redis 7 functions, and which of the two a connection runs.
 *
 * From Redis 7 on, the same scripts (scripts.c) also go in as one library
 * of functions (FUNCTION LOAD on each new connection; Redis keeps the
 * library, saves it with the data and passes it to its replicas), run
 * with FCALL. A script run with EVALSHA defines holders.lua's helpers
 * again on every call; a function finds them defined, and Redis spends
 * some 20 % less time on it (README, What a pair costs Redis). The
 * library's name carries a digest of its text, so instances of lockd
 * versions with other scripts never call each other's functions; the
 * functions are named after it. Where FUNCTION LOAD is refused (Redis < 7,
 * an ACL without function|load, a replica), the connection runs the
 * scripts with EVALSHA as before.
 *
 * An acquire (of one key or several) runs only below maxmemory, where an
 * EVAL script's first write was refused too; the others take allow-oom,
 * as their EVAL scripts' releasing writes were allowed there: freeing or
 * keeping what is held does not fail because Redis is full.
 */
#include "backends/redis/library.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fn_suffix[REDIS_BE_SCRIPT_COUNT] = {
    [REDIS_BE_SCRIPT_ACQUIRE] = "acquire",
    [REDIS_BE_SCRIPT_RENEW] = "renew",
    [REDIS_BE_SCRIPT_RELEASE] = "release",
    [REDIS_BE_SCRIPT_INSPECT] = "inspect",
    [REDIS_BE_SCRIPT_CANCEL] = "cancel",
    [REDIS_BE_SCRIPT_ACQUIRE_MULTI] = "acquire_multi",
    [REDIS_BE_SCRIPT_RENEW_MULTI] = "renew_multi",
    [REDIS_BE_SCRIPT_RELEASE_MULTI] = "release_multi",
    [REDIS_BE_SCRIPT_LIST] = "list",
    [REDIS_BE_SCRIPT_FORCE] = "force",
    [REDIS_BE_SCRIPT_HELD] = "held",
    [REDIS_BE_SCRIPT_REFENCE] = "refence",
};

#define FN_NAME_MAX 48 /* "lockd_" 16 hex "_" suffix, NUL */

static struct {
    char *text; /* NULL: not built (no memory), EVALSHA only */
    size_t len;
    char name[REDIS_BE_SCRIPT_COUNT][FN_NAME_MAX];
    size_t name_len[REDIS_BE_SCRIPT_COUNT];
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static const char fcall_word[] = "FCALL";

static uint64_t fnv1a(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Each function: FN_HEAD, its name, its flags, FN_OPEN (which resets the
 * helpers' shared state first), the script's body and FN_CLOSE. */
#define FN_HEAD "redis.register_function{function_name='"
#define FN_OPEN                         \
    ", callback=function(KEYS, ARGV)\n" \
    "gk.index, gk.counts, gk.expired, gk.now = false, false, 0, 0\n"
#define FN_CLOSE "\nend}\n"

static const char *fn_flags(enum redis_script s)
{
    return s == REDIS_BE_SCRIPT_ACQUIRE || s == REDIS_BE_SCRIPT_ACQUIRE_MULTI
               ? "'"
               : "', flags={'allow-oom'}";
}

/* p's n bytes at out + *at (out NULL: only counted) */
static void put(char *out, size_t *at, const char *p, size_t n)
{
    if (out != NULL)
        memcpy(out + *at, p, n);
    *at += n;
}

/* The library's text into out (NULL: only measured): its length. */
static size_t lib_write(char *out, const char *head)
{
    size_t n = 0, len;
    const char *helpers = redis_scripts_helpers(&len);

    put(out, &n, head, strlen(head));
    put(out, &n, helpers, len);
    for (int s = 0; s < REDIS_BE_SCRIPT_COUNT; s++) {
        const char *b = redis_script_body(s, &len);
        put(out, &n, FN_HEAD, strlen(FN_HEAD));
        put(out, &n, lib.name[s], lib.name_len[s]);
        put(out, &n, fn_flags(s), strlen(fn_flags(s)));
        put(out, &n, FN_OPEN, strlen(FN_OPEN));
        put(out, &n, b, len);
        put(out, &n, FN_CLOSE, strlen(FN_CLOSE));
    }
    return n;
}

static void lib_build(void)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    char tag[17], head[64];
    size_t len;
    const char *helpers = redis_scripts_helpers(&len);

    h = fnv1a(h, helpers, len);
    for (int s = 0; s < REDIS_BE_SCRIPT_COUNT; s++) {
        const char *b = redis_script_body(s, &len);
        if (b == NULL || fn_suffix[s] == NULL)
            return; /* not laid out as holders + body: EVALSHA only */
        h = fnv1a(h, fn_suffix[s], strlen(fn_suffix[s]) + 1);
        h = fnv1a(h, b, len);
    }
    snprintf(tag, sizeof(tag), "%016" PRIx64, h);
    snprintf(head, sizeof(head), "#!lua name=lockd_%s\n", tag);
    for (int s = 0; s < REDIS_BE_SCRIPT_COUNT; s++)
        lib.name_len[s] = (size_t)snprintf(lib.name[s], FN_NAME_MAX,
                                           "lockd_%s_%s", tag, fn_suffix[s]);
    len = lib_write(NULL, head);
    if ((lib.text = malloc(len + 1)) == NULL)
        return;
    lib.len = lib_write(lib.text, head);
    lib.text[lib.len] = '\0';
}

const char *redis_scripts_library(size_t *len)
{
    pthread_once(&lib_once, lib_build);
    *len = lib.len;
    return lib.text;
}

void redis_script_head(const struct redis_conn *cn,
                       enum redis_script s,
                       const char **argv,
                       size_t *argl)
{
    if (cn->scripts.fn) {
        argv[0] = fcall_word;
        argl[0] = strlen(fcall_word);
        argv[1] = lib.name[s];
        argl[1] = lib.name_len[s];
    } else {
        argv[0] = "EVALSHA";
        argl[0] = 7;
        argv[1] = cn->scripts.sha[s];
        argl[1] = 40;
    }
}

bool redis_fn_lost(struct redis_conn *cn,
                   const char *const *argv,
                   const redisReply *r)
{
    if (argv[0] != fcall_word || r->type != REDIS_REPLY_ERROR)
        return false;
    if (strncmp(r->str, "NOPERM", 6) == 0 && strstr(r->str, "'fcall'") != NULL)
        cn->scripts.fn_refused = true;
    else if (strncmp(r->str, "ERR Function not found", 22) != 0 &&
             strncmp(r->str, "ERR unknown command", 19) != 0)
        return false;
    cn->scripts.fn = false;
    return true;
}

/*
 * backends/redis/replicas.c - ?min_replicas=N: a grant, renew or release
 * counts only once N replicas have it. After every script that changed
 * holders (acquire, renew, re-entry, release and their multi-key forms),
 * the same connection sends WAIT N replicas_timeout_ms: one more round
 * trip per grant, renew and release, none for an attempt that found the
 * key held. When fewer than N acknowledge, the operation answers
 * BACKEND_UNAVAILABLE, never a grant, and a fresh grant is released again
 * (best-effort: it is the primary's, which may be going away; at worst it
 * stays until its TTL under a token nobody has). A release answered so may
 * or may not have happened (API.md: a 503 is an unknown outcome); one
 * answered 200 survives a failover to a replica that acknowledged it, so
 * the token stays dead there, instead of holding the key again.
 *
 * Why: Redis replicates asynchronously, so a failover can promote a
 * replica that never saw a grant, and the lock is then free on the new
 * primary while its holder goes on. With N acknowledgements, a failover
 * that promotes one of those replicas keeps it; WAIT is no consensus (a
 * promoted replica that did not acknowledge still loses it), see
 * docs/redis-topologies.md.
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>
#include <string.h>

redisReply *redis_replicas_command(struct redis_be *be,
                                   redisContext *c,
                                   int argc,
                                   const char **argv,
                                   const size_t *lens,
                                   long long *acks)
{
    char n[16], ms[24];
    const char *wv[] = { "WAIT", n, ms };
    size_t wl[3];
    redisReply *r = NULL, *w = NULL;

    *acks = -1;
    snprintf(n, sizeof(n), "%d", be->min_replicas);
    snprintf(ms, sizeof(ms), "%lld", (long long)be->replicas_timeout_ms);
    wl[0] = 4;
    wl[1] = strlen(n);
    wl[2] = strlen(ms);
    r = redisCommandArgv(c, argc, argv, lens);
    if (r == NULL || c->err != 0)
        return r; /* the caller drops both */
    /* WAIT only after a grant or renew (first element 1): a refused
     * attempt wrote nothing, and a waiter's retries must not each wait
     * replicas_timeout_ms for replicas that are catching up */
    if (!redis_reply_is_int(r, 0) || r->element[0]->integer != 1)
        return r;
    w = redisCommandArgv(c, 3, wv, wl);
    if (w == NULL)
        return r; /* c->err is set: the caller drops both */
    if (w->type == REDIS_REPLY_INTEGER)
        *acks = w->integer;
    freeReplyObject(w);
    return r;
}

/* Release key's hold by token, every hold of it: best-effort. */
static void redis_replicas_undo(struct redis_be *be,
                                const char *key,
                                size_t key_len,
                                const char *token,
                                size_t token_len)
{
    struct redis_args a;
    redisReply *r;

    redis_release_args(be, key, key_len, token, token_len, true, &a);
    r = redis_script_run_unacked(be, REDIS_BE_SCRIPT_RELEASE, &a);
    if (r == NULL)
        redis_warn(be, "min_replicas",
                   "could not release the grant again; "
                   "it stays until its TTL");
    freeReplyObject(r);
    /* waiters here may take the key at once; others hear the PUBLISH */
    if (r != NULL && be->hooks.notify != NULL)
        be->hooks.notify(be->hooks.arg, key, key_len);
}

/* Undo a fresh grant of script s, whose arguments are argv[3..]. */
static void redis_replicas_undo_grant(struct redis_be *be,
                                      enum redis_script s,
                                      int nkeys,
                                      int nargs,
                                      const char **argv,
                                      const size_t *argl,
                                      const redisReply *r)
{
    const char **v = argv + 3;
    const size_t *l = argl + 3;

    if (s == REDIS_BE_SCRIPT_ACQUIRE) {
        /* replay = 1: an earlier grant answered again, not ours to undo */
        if (!redis_reply_is_int(r, 7) || r->element[7]->integer != 0)
            return;
        redis_replicas_undo(be, v[REDIS_BE_ACQ_KEY], l[REDIS_BE_ACQ_KEY],
                            v[REDIS_BE_ACQ_TOKEN], l[REDIS_BE_ACQ_TOKEN]);
    } else if (s == REDIS_BE_SCRIPT_ACQUIRE_MULTI) {
        /* multi.c's layout: REDIS_BE_MULTI_ACQ_KEYS per lockd key and 2
         * more, then the token and 6 more ARGV, then the lockd keys */
        int n = (nkeys - 2) / REDIS_BE_MULTI_ACQ_KEYS;
        if (n < 1 || nargs != nkeys + 7 + n)
            return;
        for (int i = nargs - n; i < nargs; i++)
            redis_replicas_undo(be, v[i], l[i], v[nkeys], l[nkeys]);
    }
    /* renew and re-entry: nothing to undo that the holder does not own;
     * an extra hold of a re-entry answered 503 stays (API.md: a 503 is an
     * unknown outcome) */
}

redisReply *redis_replicas_check(struct redis_be *be,
                                 enum redis_script s,
                                 int nkeys,
                                 int nargs,
                                 const char **argv,
                                 const size_t *argl,
                                 redisReply *r,
                                 long long acks)
{
    char why[96];

    if (!redis_reply_is_int(r, 0) || r->element[0]->integer != 1 ||
        acks >= be->min_replicas)
        return r;
    snprintf(why, sizeof(why), "%lld of %d replicas acknowledged in %lld ms",
             acks < 0 ? 0 : acks, be->min_replicas,
             (long long)be->replicas_timeout_ms);
    redis_warn(be, "min_replicas", why);
    redis_replicas_undo_grant(be, s, nkeys, nargs, argv, argl, r);
    freeReplyObject(r);
    return NULL;
}

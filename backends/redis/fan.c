/*
 * backends/redis/fan.c - one call on several independent Redis servers at
 * once, from the calling thread: what redlock:// (backends/redlock/) is
 * built from. Each server is its own redis:// backend with its own
 * per-thread connections (conn.c); a fan-out writes the command on this
 * thread's connection to every server first, then reads the answers as
 * they come (poll), so N servers cost one round trip, not N, and a
 * server that does not answer costs the deadline, not N timeouts.
 *
 * Also here: a built call (struct redis_call) that owns its arguments,
 * the write-back script's call and reply (refence.lua), and the identity
 * of a server (run_id, uptime, fsync), read by every dial once asked for
 * (redis_want_identity), so a restart of the server is seen on the very
 * connection that carried an answer.
 */
#include "backends/redis/library.h"
#include "backends/redis/redis_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"

/* ---- built calls ---- */

void redis_call_free(struct redis_call *c)
{
    if (c == NULL)
        return;
    free(c->mem);
    memset(c, 0, sizeof(*c));
}

/* One block: the argv slots, the argl slots, then the bytes (each
 * argument NUL-terminated as well, for the log). */
int redis_call_pack(struct redis_call *c,
                    enum redis_script s,
                    int nkeys,
                    int nargs,
                    const char *const *v,
                    const size_t *len)
{
    size_t slots = 3 + (size_t)nargs + 1, bytes = 0;
    char *p;

    memset(c, 0, sizeof(*c));
    for (int i = 0; i < nargs; i++)
        bytes += len[i] + 1;
    c->mem = malloc(slots * (sizeof(*c->argv) + sizeof(*c->argl)) + bytes);
    if (c->mem == NULL)
        return -1;
    c->argv = c->mem;
    c->argl = (size_t *)(c->argv + slots);
    p = (char *)(c->argl + slots);
    for (size_t i = 0; i < slots; i++) {
        c->argv[i] = NULL;
        c->argl[i] = 0;
    }
    for (int i = 0; i < nargs; i++) {
        memcpy(p, v[i], len[i]);
        p[len[i]] = '\0';
        c->argv[3 + i] = p;
        c->argl[3 + i] = len[i];
        p += len[i] + 1;
    }
    c->s = s;
    c->nkeys = nkeys;
    c->nargs = nargs;
    return 0;
}

redisReply *redis_call_run(struct redis_be *be, struct redis_call *c)
{
    return redis_script_argv(be, c->s, c->nkeys, c->nargs, c->argv, c->argl);
}

/* KEYS: lock, fence, slot fence of each key; ARGV: the token, then each
 * fence. */
int redis_call_refence(struct redis_be *be,
                       const char *const *keys,
                       const size_t *key_lens,
                       size_t n,
                       const char *token,
                       const uint64_t *fences,
                       struct redis_call *c)
{
    static const char *const kinds[] = { "lock:", "fence:",
                                         REDIS_BE_SLOT_FENCE };
    size_t nargs = 4 * n + 1, bytes = 0, at = 0;
    const char **v = calloc(nargs, sizeof(*v));
    size_t *len = calloc(nargs, sizeof(*len));
    char *buf = NULL, (*fs)[24] = calloc(n + 1, sizeof(*fs));
    int rc = -1;

    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < 3; k++)
            bytes += redis_key_len(be, kinds[k], key_lens[i]);
    buf = malloc(bytes + 1);
    if (v == NULL || len == NULL || fs == NULL || buf == NULL || n == 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < 3; k++) {
            v[3 * i + k] = buf + at;
            len[3 * i + k] =
                redis_key_name(be, kinds[k], keys[i], key_lens[i], buf + at);
            at += len[3 * i + k];
        }
        snprintf(fs[i], sizeof(fs[i]), "%llu", (unsigned long long)fences[i]);
        v[3 * n + 1 + i] = fs[i];
        len[3 * n + 1 + i] = strlen(fs[i]);
    }
    v[3 * n] = token;
    len[3 * n] = strlen(token);
    rc = redis_call_pack(c, REDIS_BE_SCRIPT_REFENCE, (int)(3 * n), (int)nargs,
                         v, len);
out:
    free(v);
    free(len);
    free(fs);
    free(buf);
    return rc;
}

int redis_reply_refence(const redisReply *r, size_t n)
{
    if (!redis_reply_is_int(r, 0) || r->elements != 1 ||
        r->element[0]->integer < 0 ||
        (unsigned long long)r->element[0]->integer > n)
        return -1;
    return (int)r->element[0]->integer;
}

/* ---- the fan-out ---- */

void redis_fan_clear(struct redis_fan *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (out[i].reply != NULL)
            freeReplyObject(out[i].reply);
        memset(&out[i], 0, sizeof(out[i]));
    }
}

/* Drop cn's context without backing off: the server answered (an error,
 * or "too late"), only this connection is suspect. The next call dials
 * again (scripts, clock and identity read afresh). */
static void redis_fan_drop(struct redis_conn *cn)
{
    redisFree(cn->ctx);
    cn->ctx = NULL;
    cn->has_identity = false;
}

/* An idle connection has nothing to read: if it has, the server closed it
 * (a restart) or sent something out of turn; either way it is dropped
 * before it is used, and dialled again at once. One poll() for all of
 * this thread's connections to be[0..n). */
static void redis_fan_sweep(struct redis_be *const *be, size_t n)
{
    struct pollfd p[BACKEND_NODES_MAX];
    struct redis_conn *who[BACKEND_NODES_MAX];
    size_t np = 0;

    for (size_t i = 0; i < n; i++) {
        struct redis_conn *cn = redis_conn_get(be[i]);
        if (cn != NULL && cn->ctx != NULL) {
            p[np] = (struct pollfd){ .fd = cn->ctx->fd, .events = POLLIN };
            who[np++] = cn;
        }
    }
    if (np == 0 || poll(p, np, 0) <= 0)
        return;
    for (size_t k = 0; k < np; k++)
        if (p[k].revents != 0)
            redis_fan_drop(who[k]);
}

/* This thread's connection to be, ready for a command: NULL when the
 * server is backing off, cannot be dialled, or the deadline passed; also
 * NULL, with *later set, when it needs a dial and dial is false. */
static struct redis_conn *
redis_fan_conn(struct redis_be *be, int64_t deadline_us, bool dial, bool *later)
{
    struct redis_conn *cn = redis_conn_get(be);
    int64_t left_ms;
    int rc;

    *later = false;
    if (cn == NULL)
        return NULL;
    if (cn->ctx != NULL && !cn->has_identity && atomic_load(&be->want_identity))
        redis_fan_drop(cn); /* dialled before the identity was asked for */
    if (cn->ctx == NULL && !dial) {
        *later = true;
        return NULL;
    }
    left_ms = (deadline_us - clock_mono_us()) / 1000;
    if (cn->ctx == NULL && left_ms < 1)
        return NULL; /* no time left for a dial */
    /* each step of a dial within the time left (a dial is up to five
     * steps: connect, AUTH, SELECT and the scripts, TIME, the identity) */
    redis_dial_cap(left_ms > 0 ? left_ms : 1);
    rc = redis_conn_ready(be, cn);
    redis_dial_cap(0);
    return rc == 0 ? cn : NULL;
}

/* The context of cn broke: drop it and back off, saying why. */
static void redis_fan_fail(struct redis_be *be, struct redis_conn *cn)
{
    char why[sizeof(cn->ctx->errstr)];

    snprintf(why, sizeof(why), "%s",
             cn->ctx->errstr[0] != '\0' ? cn->ctx->errstr : "I/O error");
    redis_conn_fail(be, cn, why); /* frees the context, errstr too */
}

/* Write argv on cn and flush it: 0, or -1 (the connection failed). */
static int redis_fan_write(struct redis_be *be,
                           struct redis_conn *cn,
                           int argc,
                           const char **argv,
                           const size_t *lens)
{
    int done = 0;

    if (redis_append_argv(cn->ctx, argc, argv, lens) != 0) {
        redis_conn_fail(be, cn, "cannot write the command");
        return -1;
    }
    /* a blocking socket: write() waits at most the command timeout
     * (SO_SNDTIMEO), and only with the server's buffer full */
    while (!done)
        if (redisBufferWrite(cn->ctx, &done) != REDIS_OK) {
            redis_fan_fail(be, cn);
            return -1;
        }
    return 0;
}

/* Script c's argv for cn: FCALL and its name or EVALSHA and its digest, the
 * KEYS count and, when stamped, the not-after time in that server's clock (the
 * deadline or the command timeout, whichever comes first). Writes c's scratch
 * slots (argv[0..3) and the stamp's); the count and stamp live in buf. */
static int redis_fan_script_argv(struct redis_be *be,
                                 const struct redis_conn *cn,
                                 const struct redis_call *c,
                                 int64_t deadline_us,
                                 char buf[2][24])
{
    int argc = 3 + c->nargs;

    snprintf(buf[0], sizeof(buf[0]), "%d", c->nkeys);
    redis_script_head(cn, c->s, c->argv, c->argl);
    c->argv[2] = buf[0];
    c->argl[2] = strlen(buf[0]);
    if (redis_script_stamped(c->s)) {
        int64_t until = clock_mono_ms() + be->cmd_ms;
        if (deadline_us / 1000 < until)
            until = deadline_us / 1000;
        snprintf(buf[1], sizeof(buf[1]), "%lld",
                 (long long)(until + cn->offset_ms));
        c->argv[argc] = buf[1];
        c->argl[argc] = strlen(buf[1]);
        argc++;
    }
    return argc;
}

/* Per server: the connection the command went on (NULL: not asked, or
 * answered) and when it was written. */
struct redis_fan_slot {
    struct redis_conn *cn;
    int64_t sent_us;
};

/* Write the command to server i on cn (argv from c when a script). */
static void redis_fan_send_one(struct redis_be *be,
                               struct redis_conn *cn,
                               const struct redis_call *c,
                               int argc,
                               const char **argv,
                               const size_t *lens,
                               int64_t deadline_us,
                               struct redis_fan_slot *slot,
                               struct redis_fan *out)
{
    char buf[2][24];

    if (c != NULL) {
        argc = redis_fan_script_argv(be, cn, c, deadline_us, buf);
        argv = c->argv;
        lens = c->argl;
    }
    slot->sent_us = clock_mono_us();
    out->sent = true; /* even a failed write may have reached it */
    if (redis_fan_write(be, cn, argc, argv, lens) == 0)
        slot->cn = cn;
}

/* Step one: write the command to every server: first on the connections
 * that are up, then dialling the others, so that a slow dial delays no
 * server that is up. */
static void redis_fan_send(struct redis_be *const *be,
                           size_t n,
                           const struct redis_call *c,
                           int argc,
                           const char **argv,
                           const size_t *lens,
                           int64_t deadline_us,
                           struct redis_fan_slot *slot,
                           struct redis_fan *out)
{
    bool later[BACKEND_NODES_MAX];
    size_t dials = 0;

    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            struct redis_conn *cn;
            int64_t until = deadline_us;
            if (pass == 1 && !later[i])
                continue;
            if (pass == 1) {
                /* a dial gets its share of the time left, the answers
                 * one more: a stopped server (whose kernel still takes
                 * the connection) must not spend the next one's dial */
                until = clock_mono_us();
                until += (deadline_us - until) / (int64_t)(dials + 1);
                dials--;
            }
            cn = redis_fan_conn(be[i], until, pass == 1, &later[i]);
            if (pass == 0 && later[i])
                dials++;
            if (cn != NULL)
                redis_fan_send_one(be[i], cn, c, argc, argv, lens, deadline_us,
                                   &slot[i], &out[i]);
        }
}

/* One answer r from server be on cn, in time: kept in out, or dropped
 * (an error reply, or a stamped script's "too late"). */
static void redis_fan_answer(struct redis_be *be,
                             struct redis_conn *cn,
                             const struct redis_call *c,
                             redisReply *r,
                             int64_t sent_us,
                             struct redis_fan *out)
{
    cn->tc.backoff_ms = 0;
    redis_mark(be, 1, NULL);
    if (r->type == REDIS_REPLY_ERROR) {
        /* NOSCRIPT or no library (the next dial loads them; an FCALL
         * refused leaves EVALSHA), LOADING, BUSY...: no answer, never a
         * grant */
        if (c != NULL)
            redis_fn_lost(cn, c->argv, r);
        redis_warn(be, "fan-out", r->str);
        freeReplyObject(r);
        redis_fan_drop(cn);
        return;
    }
    if (c != NULL && redis_script_stamped(c->s) && redis_reply_is_int(r, 0) &&
        r->element[0]->integer == -2) {
        /* too late by the server's clock, yet here in time: our idea of
         * its clock is off; the next dial measures it again */
        redis_warn(be, "fan-out", "too late by Redis's clock");
        freeReplyObject(r);
        redis_fan_drop(cn);
        return;
    }
    out->reply = r;
    out->rtt_us = clock_mono_us() - sent_us;
}

/* Read what server i has sent: 1 when its slot is done, else 0. */
static int redis_fan_read(struct redis_be *be,
                          const struct redis_call *c,
                          struct redis_fan_slot *slot,
                          struct redis_fan *out)
{
    struct redis_conn *cn = slot->cn;
    void *r = NULL;

    if (redisBufferRead(cn->ctx) != REDIS_OK ||
        redisGetReplyFromReader(cn->ctx, &r) != REDIS_OK) {
        redis_fan_fail(be, cn);
        slot->cn = NULL;
        return 1;
    }
    if (r == NULL)
        return 0; /* a part of the answer: wait for the rest */
    redis_fan_answer(be, cn, c, r, slot->sent_us, out);
    slot->cn = NULL;
    return 1;
}

/* Step two: read the answers as they come until all are in or the
 * deadline passes; the servers still silent then are failed. */
static void redis_fan_recv(struct redis_be *const *be,
                           size_t n,
                           const struct redis_call *c,
                           int64_t deadline_us,
                           struct redis_fan_slot *slot,
                           struct redis_fan *out)
{
    struct pollfd p[BACKEND_NODES_MAX];
    size_t who[BACKEND_NODES_MAX];

    for (;;) {
        size_t np = 0;
        int64_t left = deadline_us - clock_mono_us();
        for (size_t i = 0; i < n; i++)
            if (slot[i].cn != NULL) {
                p[np] = (struct pollfd){ .fd = slot[i].cn->ctx->fd,
                                         .events = POLLIN };
                who[np++] = i;
            }
        if (np == 0)
            break;
        /* past the deadline, one last look (timeout 0): an answer that
         * came while a slow dial held this thread is in time */
        if (poll(p, np, left > 0 ? (int)((left + 999) / 1000) : 0) < 0 &&
            errno != EINTR)
            break;
        for (size_t k = 0; k < np; k++)
            if (p[k].revents != 0)
                redis_fan_read(be[who[k]], c, &slot[who[k]], &out[who[k]]);
        if (left <= 0)
            break;
    }
    for (size_t i = 0; i < n; i++)
        if (slot[i].cn != NULL)
            redis_conn_fail(be[i], slot[i].cn, "no answer in time");
}

/* The fan-out of script c, or (c NULL) of the plain command argv. */
static void redis_fan_go(struct redis_be *const *be,
                         size_t n,
                         const struct redis_call *c,
                         int argc,
                         const char **argv,
                         const size_t *lens,
                         int64_t deadline_us,
                         struct redis_fan *out)
{
    struct redis_fan_slot slot[BACKEND_NODES_MAX];

    memset(out, 0, n * sizeof(*out));
    memset(slot, 0, sizeof(slot));
    if (n > BACKEND_NODES_MAX)
        return;
    for (size_t i = 0; i < n; i++)
        if (be[i]->topology != REDIS_BE_SINGLE)
            return;
    redis_fan_sweep(be, n);
    redis_fan_send(be, n, c, argc, argv, lens, deadline_us, slot, out);
    redis_fan_recv(be, n, c, deadline_us, slot, out);
}

void redis_fan_run(struct redis_be *const *be,
                   size_t n,
                   const struct redis_call *c,
                   int64_t deadline_us,
                   struct redis_fan *out)
{
    redis_fan_go(be, n, c, 0, NULL, NULL, deadline_us, out);
}

void redis_fan_command(struct redis_be *const *be,
                       size_t n,
                       int argc,
                       const char **argv,
                       const size_t *lens,
                       int64_t deadline_us,
                       struct redis_fan *out)
{
    redis_fan_go(be, n, NULL, argc, argv, lens, deadline_us, out);
}

/* ---- identity ---- */

void redis_want_identity(struct redis_be *be)
{
    atomic_store(&be->want_identity, true);
}

int redis_conn_identity(struct redis_be *be, struct redis_identity *out)
{
    struct redis_conn *cn = redis_conn_get(be);

    if (cn == NULL || cn->ctx == NULL || !cn->has_identity)
        return -1;
    *out = cn->identity;
    return 0;
}

void redis_node_name(const struct redis_be *be, char *buf, size_t len)
{
    const char *h = be->host != NULL ? be->host : "";

    if (len == 0)
        return;
    if (strchr(h, ':') != NULL) /* IPv6 */
        snprintf(buf, len, "[%s]:%d", h, be->port);
    else
        snprintf(buf, len, "%s:%d", h, be->port);
}

/* The value of INFO's line "name:value" in s into buf: 0, or -1. */
static int redis_info_field(const redisReply *s,
                            const char *name,
                            char *buf,
                            size_t buflen)
{
    size_t nl = strlen(name);
    const char *p = s->str, *end = s->str + s->len;

    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t ll = (size_t)((eol != NULL ? eol : end) - p);
        if (ll > 0 && p[ll - 1] == '\r')
            ll--;
        if (ll > nl && memcmp(p, name, nl) == 0 && p[nl] == ':') {
            size_t vl = ll - nl - 1;
            if (vl >= buflen)
                return -1;
            memcpy(buf, p + nl + 1, vl);
            buf[vl] = '\0';
            return 0;
        }
        p = eol != NULL ? eol + 1 : end;
    }
    return -1;
}

/* INFO server and INFO persistence into out (an error reply: unknown). */
static void redis_identity_info(const redisReply *srv,
                                const redisReply *per,
                                struct redis_identity *out,
                                bool *aof)
{
    char v[64], *end;

    *aof = false;
    if (srv->type == REDIS_REPLY_STRING) {
        if (redis_info_field(srv, "run_id", v, sizeof(v)) == 0 &&
            strlen(v) == 40)
            memcpy(out->run_id, v, 41);
        if (redis_info_field(srv, "uptime_in_seconds", v, sizeof(v)) == 0) {
            errno = 0;
            out->uptime_s = strtoll(v, &end, 10);
            if (errno != 0 || *end != '\0' || out->uptime_s < 0)
                out->uptime_s = 0;
        }
    }
    if (per->type == REDIS_REPLY_STRING &&
        redis_info_field(per, "aof_enabled", v, sizeof(v)) == 0)
        *aof = strcmp(v, "1") == 0;
}

int redis_identity_read(redisContext *c, struct redis_identity *out)
{
    const char *a1[] = { "INFO", "server" };
    const char *a2[] = { "INFO", "persistence" };
    const char *a3[] = { "CONFIG", "GET", "appendfsync" };
    size_t l1[] = { 4, 6 }, l2[] = { 4, 11 }, l3[] = { 6, 3, 11 };
    redisReply *r[3] = { NULL, NULL, NULL };
    bool aof;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (redisAppendCommandArgv(c, 2, a1, l1) != REDIS_OK ||
        redisAppendCommandArgv(c, 2, a2, l2) != REDIS_OK ||
        redisAppendCommandArgv(c, 3, a3, l3) != REDIS_OK)
        return -1;
    for (int i = 0; i < 3 && rc == 0; i++)
        if (redisGetReply(c, (void **)&r[i]) != REDIS_OK || r[i] == NULL)
            rc = -1;
    if (rc == 0) {
        redis_identity_info(r[0], r[1], out, &aof);
        /* CONFIG may be refused (ACL, rename-command): not "always" */
        out->fsync_always = aof && r[2]->type == REDIS_REPLY_ARRAY &&
                            r[2]->elements == 2 &&
                            r[2]->element[1]->type == REDIS_REPLY_STRING &&
                            strcmp(r[2]->element[1]->str, "always") == 0;
        out->dialled_ms = clock_mono_ms();
    }
    for (int i = 0; i < 3; i++)
        if (r[i] != NULL)
            freeReplyObject(r[i]);
    return rc;
}

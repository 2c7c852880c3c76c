/*
 * backends/redis/batch.c - the calls of many requests in one write.
 *
 * lockd's workers hand the adapter the single-key acquires, renews and
 * releases that queued up while they were busy (service/waitq_calls.c).
 * On one server, each call's script goes into the connection's output
 * buffer, one write sends them all, and their replies come back in order
 * from one or a few reads: one round trip and two system calls for the
 * batch instead of one round trip and two context switches per request.
 * Each call is still its own script, one atomic step, answered exactly as
 * the single op answers it (its builder and parser are the single op's).
 *
 * Time: the batch keeps to one command timeout, from the write; a script
 * stamped with its not-after time refuses to act later than that, as
 * alone. Failure: when the connection breaks or the time runs out, every
 * call without a reply is UNAVAILABLE (its outcome unknown: a grant it
 * made nobody receives, and it expires by its TTL), except when the
 * server had closed an idle connection before any reply came: then each
 * call runs by itself, which dials again, as a single call does. A reply
 * that says Redis lost the script (NOSCRIPT) or that the stamp passed
 * runs that call once more by itself, after the batch's replies are in.
 *
 * Sentinel, cluster and min_replicas make one call per request: their
 * redirections, READONLY answers and WAITs stay in the single path.
 */
#include "backends/redis/redis_int.h"

#include "lib/clock.h"

typedef enum backend_result (*parse_fn)(struct redis_be *,
                                        const redisReply *,
                                        struct lock_grant *);

struct pending {
    struct redis_call c;
    parse_fn parse;
    bool built; /* c holds a call to send */
    bool again; /* to run once more by itself */
};

static void single(struct redis_be *be, struct backend_call *call)
{
    const struct backend_ops *ops = be->base.ops;

    if (call->op == BACKEND_OP_ACQUIRE)
        call->result = ops->acquire(&be->base, call->req, call->out);
    else if (call->op == BACKEND_OP_RENEW)
        call->result = ops->renew(&be->base, call->req, call->out);
    else
        call->result = ops->release(&be->base, call->req, call->out);
}

static void done(struct redis_be *be, struct backend_call *call)
{
    if (call->op == BACKEND_OP_ACQUIRE)
        redis_acquire_done(be, call->req, call->result, call->out);
    else if (call->op == BACKEND_OP_RELEASE)
        redis_release_done(be, call->req, call->result, call->out);
}

/* call's script and parser: built, or its result set (NO_MEMORY) */
static void
build(struct redis_be *be, struct backend_call *call, struct pending *p)
{
    const struct lock_req *req = call->req;
    struct redis_wait *bw = NULL;
    int rc;

    p->built = false;
    p->again = false;
    call->result = BACKEND_NO_MEMORY;
    if (call->op == BACKEND_OP_ACQUIRE) {
        if (req->waiter != NULL) {
            bw = redis_wait_get(be, req->waiter);
            if (bw == NULL)
                return;
        }
        /* as redis_acquire(): no clock floor, nothing marked */
        rc = redis_acquire_build(be, req, bw, false, 0, &p->c);
        p->parse = redis_reply_acquire;
    } else if (call->op == BACKEND_OP_RENEW) {
        rc = redis_call_renew(be, req, &p->c);
        p->parse = redis_reply_renew;
    } else {
        rc = redis_call_release(be, req, &p->c);
        p->parse = redis_reply_release;
    }
    p->built = rc == 0;
}

/* Send the built calls on cn and read their replies: each answered call's
 * result set; every call left as it was when no reply came for it. The
 * number of calls answered, or -1 if the server had closed the connection
 * before any reply (each is to run by itself). */
static int exchange(struct redis_be *be,
                    struct redis_conn *cn,
                    struct backend_call *calls,
                    struct pending *p,
                    size_t n)
{
    int64_t deadline;
    size_t sent = 0;
    int answered = 0;
    bool closed;

    for (size_t i = 0; i < n; i++) {
        if (!p[i].built)
            continue;
        if (redis_script_append(be, cn, &p[i].c) != 0) {
            /* hiredis out of memory: this one and those after it are not
             * sent (NO_MEMORY); the earlier ones go */
            for (size_t j = i; j < n; j++) {
                if (p[j].built)
                    redis_call_free(&p[j].c);
                p[j].built = false;
            }
            break;
        }
        sent++;
    }
    if (sent == 0)
        return 0;
    deadline = clock_mono_ms() + be->cmd_ms;
    if (redis_pipe_send(be, cn, &closed) != 0)
        return closed ? -1 : 0;
    for (size_t i = 0; i < n; i++) {
        redisReply *r;

        if (!p[i].built)
            continue;
        r = redis_pipe_reply(be, cn, deadline, &closed);
        if (r == NULL)
            return closed && answered == 0 ? -1 : answered;
        r = redis_script_reply(be, cn, &p[i].c, r, &p[i].again);
        answered++;
        if (p[i].again)
            continue;
        calls[i].result =
            r != NULL ? p[i].parse(be, r, calls[i].out) : BACKEND_UNAVAILABLE;
        freeReplyObject(r);
        redis_call_free(&p[i].c);
        p[i].built = false;
    }
    return answered;
}

void redis_batch(struct backend *b, struct backend_call *calls, size_t n)
{
    struct redis_be *be = (struct redis_be *)b;
    struct pending p[BACKEND_BATCH_MAX];
    struct redis_conn *cn;
    int answered = 0;

    if (n > BACKEND_BATCH_MAX)
        n = BACKEND_BATCH_MAX;
    if (n == 1 || be->topology != REDIS_BE_SINGLE || be->min_replicas > 0) {
        for (size_t i = 0; i < n; i++)
            single(be, &calls[i]);
        return;
    }
    for (size_t i = 0; i < n; i++)
        build(be, &calls[i], &p[i]);
    cn = redis_conn_get(be);
    if (cn != NULL && redis_conn_ready(be, cn) == 0) {
        cn->slot = -1;
        answered = exchange(be, cn, calls, p, n);
    }
    for (size_t i = 0; i < n; i++) {
        if (!p[i].built)
            continue;
        if (answered < 0 || p[i].again) {
            calls[i].result =
                redis_grant_run(be, &p[i].c, p[i].parse, calls[i].out);
        } else {
            calls[i].result = BACKEND_UNAVAILABLE; /* no reply */
            redis_call_free(&p[i].c);
        }
    }
    for (size_t i = 0; i < n; i++)
        done(be, &calls[i]);
}

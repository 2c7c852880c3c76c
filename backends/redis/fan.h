/*
 * backends/redis/fan.h - the part of redis_int.h that redlock://
 * (backends/redlock/) is built from: fan.c's declarations, the builders
 * and parsers of every script call (redis.c, inspect.c, list.c, multi.c)
 * and the identity of a server. Included by redis_int.h, at its end, and
 * by nothing else: include "backends/redis/redis_int.h".
 */
#ifndef BACKENDS_REDIS_FAN_H
#define BACKENDS_REDIS_FAN_H

/* ---- fan.c: one call on several independent servers at once ----
 *
 * What redlock:// (backends/redlock/) is built from: it opens one redis://
 * backend per node (redis_backend.open) and runs the same script on all
 * of them in parallel from the calling thread, with the builders and
 * parsers below, which are the single-server operations' own (each
 * redis_* op is its builder, redis_script_argv() and its parser: one
 * copy of every script, key layout and reply format). */

/* One script call, built once, sent to any number of servers. */
struct redis_call {
    enum redis_script s;
    int nkeys;         /* KEYS, then nargs - nkeys ARGV */
    int nargs;         /* KEYS + ARGV, without the not-after stamp */
    const char **argv; /* 3 + nargs + 1 entries: argv[3 .. 3 + nargs) the
                          KEYS then the ARGV (as redis_script_argv takes
                          them; the command, digest, count and stamp are
                          set per server) */
    size_t *argl;
    void *mem; /* owned: what argv and argl point into */
};

/* Free what a builder made (accepts a zeroed call). */
void redis_call_free(struct redis_call *c);
/* c (zeroed first) for script s with copies of its nargs KEYS then ARGV,
 * v[0..nargs) (nkeys of them KEYS): 0, or -1 (no memory; c holds
 * nothing). What every builder ends with. */
int redis_call_pack(struct redis_call *c,
                    enum redis_script s,
                    int nkeys,
                    int nargs,
                    const char *const *v,
                    const size_t *len);
/* Run c on this thread's connection to be, as the single-server ops do
 * (redis_script_argv): the reply, or NULL. */
redisReply *redis_call_run(struct redis_be *be, struct redis_call *c);

/*
 * Builders: the call the single-server op would make for this request,
 * into c (zeroed first): 0, or -1 (no memory; c holds nothing). Each
 * borrows its arguments only for the call. acquire: always try-once (no
 * place in any queue; req->waiter ignored); floor "1" makes every fence it
 * grants at least the server's clock in microseconds (a time floor, so a
 * server restarted empty cannot hand out a smaller fence), "0" not;
 * mark_ms > 0 marks the key (the mwait mark of a multi-key waiter) for the
 * retry hint + mark_ms when it is not granted, so that its release is
 * published to a waiter that keeps no place. refence: for each key i,
 * raise its fence counter to at least fences[i] and, if token holds key
 * i, set that holder's fence to fences[i] (the write-back of a fence a
 * majority agreed on).
 */
int redis_call_acquire(struct redis_be *be,
                       const struct lock_req *req,
                       bool floor,
                       uint64_t mark_ms,
                       struct redis_call *c);
int redis_call_renew(struct redis_be *be,
                     const struct lock_req *req,
                     struct redis_call *c);
int redis_call_release(struct redis_be *be,
                       const struct lock_req *req,
                       struct redis_call *c);
int redis_call_inspect(struct redis_be *be,
                       const char *key,
                       size_t key_len,
                       struct redis_call *c);
int redis_call_force(struct redis_be *be,
                     const char *key,
                     size_t key_len,
                     struct redis_call *c);
int redis_call_acquire_multi(struct redis_be *be,
                             const struct lock_multi_req *req,
                             bool floor,
                             uint64_t mark_ms,
                             struct redis_call *c);
int redis_call_renew_multi(struct redis_be *be,
                           const struct lock_multi_req *req,
                           struct redis_call *c);
int redis_call_release_multi(struct redis_be *be,
                             const struct lock_multi_req *req,
                             struct redis_call *c);
int redis_call_list(struct redis_be *be,
                    const struct lock_list_req *req,
                    struct redis_call *c);
int redis_call_held(struct redis_be *be, struct redis_call *c);
int redis_call_refence(struct redis_be *be,
                       const char *const *keys,
                       const size_t *key_lens,
                       size_t n,
                       const char *token,
                       const uint64_t *fences,
                       struct redis_call *c);

/*
 * Parsers: one server's reply r (not NULL; borrowed) to the call above
 * into the single-server op's result and out (zeroed first), exactly as
 * that op answers; an unexpected reply is BACKEND_UNAVAILABLE (logged).
 * list: out->entries is the caller's array (req->limit entries) and is
 * kept; n, more and resume are set.
 * acquire: OK (a fresh grant, the same token's grant again, or a replay),
 * HELD (retry_ms), LIMIT_MISMATCH, IDEM_CONFLICT. refence: the number of
 * keys the token holds on that server (0..n), or -1 for a bad reply.
 * held: the holders, or -1.
 */
enum backend_result redis_reply_acquire(struct redis_be *be,
                                        const redisReply *r,
                                        struct lock_grant *out);
enum backend_result redis_reply_renew(struct redis_be *be,
                                      const redisReply *r,
                                      struct lock_grant *out);
enum backend_result redis_reply_release(struct redis_be *be,
                                        const redisReply *r,
                                        struct lock_grant *out);
enum backend_result redis_reply_inspect(struct redis_be *be,
                                        const redisReply *r,
                                        struct lock_info *out);
enum backend_result redis_reply_force(struct redis_be *be,
                                      const redisReply *r,
                                      struct lock_info *out);
enum backend_result redis_reply_acquire_multi(struct redis_be *be,
                                              const struct lock_multi_req *req,
                                              const redisReply *r,
                                              struct lock_multi_grant *out);
enum backend_result redis_reply_renew_multi(struct redis_be *be,
                                            const struct lock_multi_req *req,
                                            const redisReply *r,
                                            struct lock_multi_grant *out);
enum backend_result redis_reply_release_multi(struct redis_be *be,
                                              const struct lock_multi_req *req,
                                              const redisReply *r,
                                              struct lock_multi_grant *out);
enum backend_result redis_reply_list(struct redis_be *be,
                                     const struct lock_list_req *req,
                                     const redisReply *r,
                                     struct lock_list *out);
int64_t redis_reply_held(const redisReply *r);
int redis_reply_refence(const redisReply *r, size_t n);

/* One server's part of a fan-out. */
struct redis_fan {
    redisReply *reply; /* owned (redis_fan_clear); NULL: not asked (no
                          connection, backing off), no answer by the
                          deadline, a broken link or an error reply */
    bool sent;         /* written: the server may have run it even when
                          reply is NULL */
    int64_t rtt_us;    /* written to answered, when reply */
};

/*
 * Run call c on each server be[0..n) (n <= BACKEND_NODES_MAX) at once from
 * this thread: on this thread's connection to each (dialled first where
 * needed, one after another; a server in back-off is not asked), every
 * command is written before any answer is read, then the answers are
 * read as they come (poll) until all are in or deadline_us (monotonic us)
 * passes. A stamped script gets each server's own not-after time from
 * that server's clock offset, at most deadline_us. A server that did not
 * answer in time has its connection dropped (its answer would come out of
 * order) and backs off; NOSCRIPT reloads nothing here: the connection is
 * dropped and the next call loads the scripts. out[0..n) zeroed first.
 */
void redis_fan_run(struct redis_be *const *be,
                   size_t n,
                   const struct redis_call *c,
                   int64_t deadline_us,
                   struct redis_fan *out);
/* The same for a plain command (PING, INFO, EXISTS, SET): no stamp. */
void redis_fan_command(struct redis_be *const *be,
                       size_t n,
                       int argc,
                       const char **argv,
                       const size_t *lens,
                       int64_t deadline_us,
                       struct redis_fan *out);
/* Free the replies of out[0..n) and zero it. */
void redis_fan_clear(struct redis_fan *out, size_t n);

/* struct redis_identity: with the adapter's state, above. */

/* From now on, every connection be dials reads the server's identity
 * before its first command (one more round trip per dial). Call before
 * the first call on be. */
void redis_want_identity(struct redis_be *be);
/* The identity this thread's connection to be read when dialled: 0, or
 * -1 when this thread has no connection to be now. */
int redis_conn_identity(struct redis_be *be, struct redis_identity *out);
/* "host:port" of be's server (a redis:// URL's), NUL-terminated. */
void redis_node_name(const struct redis_be *be, char *buf, size_t len);
/* The identity on a fresh context c (INFO server, INFO persistence, CONFIG
 * GET appendfsync, one round trip) into out: 0, or -1 when c broke (an
 * error reply leaves a field unknown). */
int redis_identity_read(redisContext *c, struct redis_identity *out);

#endif /* BACKENDS_REDIS_FAN_H */

/*
 * backends/zookeeper/call.h - one asynchronous ZooKeeper call (zoo_a*)
 * waited for with a deadline, so no request hangs on a lost connection.
 * Used by backends/zookeeper/store.c; the library's completion thread only
 * stores the result and signals the waiting thread.
 *
 * Use: c = zk_call_new(); rc = zk_call_wait(c, zoo_aget(zh, path, 0,
 * zk_call_on_data, c), deadline); read c's results; zk_call_unref(c).
 */
#ifndef BACKENDS_ZOOKEEPER_CALL_H
#define BACKENDS_ZOOKEEPER_CALL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <zookeeper/zookeeper.h>

#include "backends/backend.h"

#define ZK_PATH_MAX 1536 /* chroot + /lockd/locks/k + 683 + child */
/* a holder's data: fields, token, Idempotency-Key, owner */
#define ZK_DATA_MAX  (96 + LOCK_TOKEN_MAX + LOCK_IDEM_MAX + LOCK_OWNER_MAX)
#define ZK_GROUP_MAX 48 /* a group's data: "lockd2 g <limit> <count>" */
#define ZK_MULTI_MAX 8  /* ops in one multi */

/* One asynchronous call, shared by the requesting thread and the library's
 * completion thread: whichever lets go last frees it. */
struct zk_call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; /* guarded by mu */
    int done; /* guarded by mu */
    int rc;
    struct Stat stat;
    char *data; /* get: owned copy of the node's data */
    int data_len;
    char **kids; /* get_children: owned, one block with the names */
    int nkids;
    char name[ZK_PATH_MAX]; /* create: the created path */
    /* multi: the library writes results and stats here at completion */
    zoo_op_t ops[ZK_MULTI_MAX];
    zoo_op_result_t results[ZK_MULTI_MAX];
    struct Stat set_stat;
    struct Stat set_stat2; /* a second set op's (a shared key's group) */
    char paths[ZK_MULTI_MAX][ZK_PATH_MAX];
    char buf[ZK_DATA_MAX];
    char gbuf[ZK_GROUP_MAX];
    void *extra; /* owned: a multi of several keys keeps its results and
                    stats here (bulk.c), written at completion */
};

/* Many gets or listings at once (a shared key's holders, the keys of a
 * multi-key call): sent back to back, waited for together, so they cost
 * one round trip. */
struct zk_batch_slot {
    struct zk_batch *b;
    int rc;
    bool done;
    struct Stat stat;
    char *data; /* owned copy */
    int data_len;
    char **kids; /* a listing's names: owned, one block */
    int nkids;
};

struct zk_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;    /* guarded by mu: the caller's and one per call sent */
    int pending; /* guarded by mu: calls sent and not answered */
    size_t n;
    struct zk_batch_slot slots[]; /* n of them, rc ZOPERATIONTIMEOUT until
                                     answered */
};

/* A batch of n slots with the caller's reference; NULL without memory. */
struct zk_batch *zk_batch_new(size_t n);
/* Before sending slot i's zoo_aget or zoo_aget_children2 (data =
 * &b->slots[i]): count it. */
void zk_batch_sent(struct zk_batch *b);
/* After a zoo_aget for slot i that returned rc != ZOK: no completion. */
void zk_batch_not_sent(struct zk_batch *b, int i, int rc);
void zk_batch_on_data(int rc,
                      const char *value,
                      int value_len,
                      const struct Stat *stat,
                      const void *data);
void zk_batch_on_kids(int rc,
                      const struct String_vector *strings,
                      const struct Stat *stat,
                      const void *data);
/* Wait until every call sent is answered or deadline (monotonic ms). */
void zk_batch_wait(struct zk_batch *b, int64_t deadline);
/* Drop one reference; the last frees b. Accepts NULL. */
void zk_batch_unref(struct zk_batch *b);

/* A call with two references (the caller's and the completion's); NULL
 * when out of memory. */
struct zk_call *zk_call_new(void);

/* Drops one reference; the last frees c with its data and kids. Accepts
 * NULL. Thread-safe. */
void zk_call_unref(struct zk_call *c);

/* Completions for zoo_a* calls, data = the struct zk_call *. Each stores
 * what the call answered (stat, an owned copy of the data or names, the
 * created path), marks c done, wakes the waiter and drops the completion's
 * reference. A copy that cannot be allocated turns rc into ZSYSTEMERROR. */
void zk_call_on_void(int rc, const void *data);
void zk_call_on_stat(int rc, const struct Stat *stat, const void *data);
void zk_call_on_data(int rc,
                     const char *value,
                     int value_len,
                     const struct Stat *stat,
                     const void *data);
void zk_call_on_kids(int rc,
                     const struct String_vector *strings,
                     const struct Stat *stat,
                     const void *data);
void zk_call_on_create(int rc,
                       const char *name,
                       const struct Stat *stat,
                       const void *data);

/* Waits for c until deadline (monotonic ms): its rc, or ZOPERATIONTIMEOUT
 * (the completion may still come; c stays valid until both let go).
 * issued is what the zoo_a* call returned: when not ZOK no completion
 * comes, so its reference is dropped here and issued returned. The
 * caller's reference stays the caller's. */
int zk_call_wait(struct zk_call *c, int issued, int64_t deadline);

/* zk_call_wait(), then copies c's stat to st (when st is not NULL and the
 * call succeeded) and drops the caller's reference: the tail of a call
 * that keeps no more than a stat. */
int zk_call_run(struct zk_call *c,
                int issued,
                int64_t deadline,
                struct Stat *st);

/* The index of the op a failed multi of n ops failed on, or -1 (also
 * when no answer came: then the library may still be writing results). */
int zk_call_multi_failed(struct zk_call *c, int n);

#endif /* BACKENDS_ZOOKEEPER_CALL_H */

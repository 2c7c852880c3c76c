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
#include <stdint.h>

#include <zookeeper/zookeeper.h>

#include "backends/backend.h"

#define ZK_PATH_MAX  1536 /* chroot + /lockd/locks/k + 683 + child */
#define ZK_DATA_MAX  (32 + LOCK_TOKEN_MAX + LOCK_OWNER_MAX)
#define ZK_MULTI_MAX 5 /* ops in one multi */

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
    char paths[4][ZK_PATH_MAX];
    char buf[ZK_DATA_MAX];
};

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

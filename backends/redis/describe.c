/*
 * backends/redis/describe.c - what /readyz says of the Redis deployment the
 * URL names (plain, Sentinel, Cluster) and what it guarantees: fences come
 * from the slot's and the key's counters in the grant's script (redis.c),
 * so they are exactly
 * as durable as the Redis node that ran it; replication is asynchronous,
 * so what a failover keeps depends on min_replicas (WAIT).
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>

/* A failover to a replica: with min_replicas, a grant counts only once N
 * replicas have it, and the promoted one is normally one of them. */
static void redis_describe_failover(const struct redis_be *be,
                                    const char *what,
                                    struct backend_topology *out)
{
    if (be->min_replicas == 0)
        snprintf(out->failover, sizeof(out->failover),
                 "a grant not yet replicated when %s fails over: the lock "
                 "can be granted again, and its fence handed out again",
                 what);
    else
        snprintf(out->failover, sizeof(out->failover),
                 "nothing %d replica%s acknowledged, if the replica promoted "
                 "is one of them; a grant or renew not acknowledged in "
                 "replicas_timeout_ms is answered 503",
                 be->min_replicas, be->min_replicas == 1 ? "" : "s");
}

void redis_describe(const struct backend *b, struct backend_topology *out)
{
    const struct redis_be *be = (const struct redis_be *)b;

    switch (be->topology) {
    case REDIS_BE_SINGLE:
        snprintf(out->topology, sizeof(out->topology), "single");
        snprintf(
            out->fence, sizeof(out->fence),
            "a counter per key slot in Redis (raised in the grant's script)");
        snprintf(out->failover, sizeof(out->failover),
                 "locks and fences granted since the last fsync if Redis "
                 "restarts without appendfsync always (every lock without "
                 "persistence)");
        out->nodes = 1;
        break;
    case REDIS_BE_SENTINEL:
        snprintf(out->topology, sizeof(out->topology), "sentinel");
        snprintf(out->fence, sizeof(out->fence),
                 "a counter per key slot on the primary the Sentinels name");
        redis_describe_failover(be, "the primary", out);
        out->nodes = (unsigned)be->naddrs;
        break;
    case REDIS_BE_CLUSTER:
        snprintf(out->topology, sizeof(out->topology), "cluster");
        snprintf(out->fence, sizeof(out->fence),
                 "a counter per hash slot on the master of the key's hash "
                 "slot");
        redis_describe_failover(be, "the key's master", out);
        out->nodes = (unsigned)be->naddrs;
        break;
    }
}

/*
 * backends/redis/cluster.c - redis+cluster:// (being built).
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>

enum backend_result redis_cluster_parse(struct redis_be *be,
                                        const struct url *u,
                                        char *err,
                                        size_t errlen)
{
    (void)be;
    (void)u;
    snprintf(err, errlen, "redis: redis+cluster:// is not built yet");
    return BACKEND_INVALID;
}

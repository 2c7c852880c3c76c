/*
 * backends/redis/sentinel.c - redis+sentinel:// (being built).
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>

enum backend_result redis_sentinel_parse(struct redis_be *be,
                                         const struct url *u,
                                         char *err,
                                         size_t errlen)
{
    (void)be;
    (void)u;
    snprintf(err, errlen, "redis: redis+sentinel:// is not built yet");
    return BACKEND_INVALID;
}

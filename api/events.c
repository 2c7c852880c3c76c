/*
 * api/events.c - the lock lifecycle events and their metrics (see
 * events.h). Filled in by the operability work (issue 16).
 */
#include "api/events.h"

void events_after_call(const struct api_config *cfg,
                       const struct api_call *c,
                       enum backend_result r,
                       const struct lock_grant *g,
                       const struct lock_info *info,
                       const struct lock_multi_grant *mg,
                       const struct api_event_ctx *ctx)
{
    (void)cfg;
    (void)c;
    (void)r;
    (void)g;
    (void)info;
    (void)mg;
    (void)ctx;
}

/*
 * lib/clock.c - wall and monotonic clocks, deadlines, monotonic
 * condition-variable waits.
 */
#include "lib/clock.h"

#include <errno.h>

int64_t clock_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_coarse_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_deadline_ms(int64_t ms)
{
    return clock_mono_ms() + ms;
}

struct timespec clock_mono_timespec(int64_t mono_ms)
{
    struct timespec ts;

    if (mono_ms < 0)
        mono_ms = 0;
    ts.tv_sec = (time_t)(mono_ms / 1000);
    ts.tv_nsec = (long)(mono_ms % 1000) * 1000000;
    return ts;
}

int clock_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);

    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

int clock_cond_wait_until(pthread_cond_t *cond,
                          pthread_mutex_t *mu,
                          int64_t deadline_ms)
{
    struct timespec ts = clock_mono_timespec(deadline_ms);
    int rc = pthread_cond_timedwait(cond, mu, &ts);

    return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

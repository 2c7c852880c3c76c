/*
 * lib/clock.h - the two clocks lockd reads, deadlines on them, and
 * condition variables that wait on the monotonic one. Leaf: includes
 * nothing of lockd's.
 *
 * Wall time (unix ms) is what clients and stores see (expires_at, a
 * waiter's deadline in a shared store). Monotonic time measures how long
 * something took or how long is left in this process; it never jumps.
 */
#ifndef LIB_CLOCK_H
#define LIB_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

int64_t clock_wall_ms(void); /* CLOCK_REALTIME, unix ms */
int64_t clock_mono_ms(void); /* CLOCK_MONOTONIC, ms */
int64_t clock_mono_us(void); /* CLOCK_MONOTONIC, us */
/* CLOCK_MONOTONIC_COARSE, us: up to a scheduler tick (1-10 ms) behind
 * clock_mono_us() and about a tenth of its cost (no clock read, the
 * kernel's last tick): for stamps compared only with each other at a
 * coarser grain, such as the connection reaper's. */
int64_t clock_coarse_us(void);

/* The monotonic instant ms from now, in ms: a deadline. */
int64_t clock_deadline_ms(int64_t ms);

/* A monotonic instant in ms as the timespec pthread_cond_timedwait wants
 * from a condition variable made by clock_cond_init(). */
struct timespec clock_mono_timespec(int64_t mono_ms);

/* pthread_cond_init on CLOCK_MONOTONIC: 0 or an errno value. */
int clock_cond_init(pthread_cond_t *cond);

/* Wait on cond (made by clock_cond_init, mu held) until signalled or the
 * monotonic deadline_ms passes: 0, or ETIMEDOUT. May wake spuriously. */
int clock_cond_wait_until(pthread_cond_t *cond,
                          pthread_mutex_t *mu,
                          int64_t deadline_ms);

#endif /* LIB_CLOCK_H */

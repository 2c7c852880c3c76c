/*
 * tests/unit/test_waitq.c - service/waitq.c on the memory backend, with
 * simulated clients: each is a struct client whose suspend() counts and
 * whose wake() records the answer and signals a condition variable, as the
 * server's callbacks resume a libmicrohttpd connection.
 */
#include "service/waitq.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "lib/log.h"
#include "tests/unit/check.h"

#define GRANT_TARGET_MS 50  /* docs/API.md: a waiter is granted within 50 ms */
#define GRANT_LIMIT_MS  150 /* what the test allows on a busy machine */

struct env {
    struct waitq *q;
    struct backend *be;
};

struct client {
    struct wq_waiter w;
    char key[64];
    char token[40];
    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t cv;
    int suspends;
    int wakes;
    int64_t woke_at; /* monotonic ms */
};

static int token_seq;
static int slow_grants; /* grants slower than GRANT_TARGET_MS, reported */

static void env_open(struct env *e)
{
    struct backend_hooks hooks;
    char err[256];

    e->q = waitq_new();
    CHECK(e->q != NULL);
    hooks.notify = waitq_notify;
    hooks.arg = e->q;
    CHECK_EQ_INT(backend_open("memory://", &hooks, &e->be, err, sizeof(err)),
                 BACKEND_OK);
    CHECK_EQ_INT(waitq_bind(e->q, e->be, 2), 0);
}

/* In lockd's order (service/main.c): shutdown, free the queue, close. */
static void env_close(struct env *e)
{
    waitq_shutdown(e->q);
    waitq_stop(e->q, 1000);
    waitq_free(e->q);
    backend_close(e->be);
}

static void on_suspend(struct wq_waiter *w)
{
    struct client *c = w->arg;

    pthread_mutex_lock(&c->mu);
    c->suspends++;
    pthread_mutex_unlock(&c->mu);
}

static void on_wake(struct wq_waiter *w)
{
    struct client *c = w->arg;

    pthread_mutex_lock(&c->mu);
    c->wakes++;
    c->woke_at = check_mono_ms();
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void client_init(
    struct client *c, const char *key, int64_t wait_ms, uint64_t ttl_ms, int fd)
{
    pthread_condattr_t ca;

    memset(c, 0, sizeof(*c));
    snprintf(c->key, sizeof(c->key), "%s", key);
    snprintf(c->token, sizeof(c->token), "%032d", ++token_seq);
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->w.req.key = c->key;
    c->w.req.key_len = strlen(c->key);
    c->w.req.token = c->token;
    c->w.req.ttl_ms = ttl_ms;
    c->w.wait_ms = wait_ms;
    c->w.fd = fd;
    c->w.suspend = on_suspend;
    c->w.wake = on_wake;
    c->w.arg = c;
}

static void client_cleanup(struct client *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

static enum wq_start client_start(struct env *e,
                                  struct client *c,
                                  const char *key,
                                  int64_t wait_ms,
                                  uint64_t ttl_ms,
                                  int fd)
{
    client_init(c, key, wait_ms, ttl_ms, fd);
    return waitq_start(e->q, &c->w);
}

/* Wait up to timeout_ms for c's wake(); true if it came. */
static bool client_wait(struct client *c, int timeout_ms)
{
    struct timespec ts;
    bool woke;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (c->wakes == 0)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
            break;
    woke = c->wakes > 0;
    pthread_mutex_unlock(&c->mu);
    return woke;
}

static int client_wakes(struct client *c)
{
    int n;

    pthread_mutex_lock(&c->mu);
    n = c->wakes;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* A holder outside the queue (another instance, or a try-once client). */
static uint64_t
hold(struct env *e, const char *key, const char *token, uint64_t ttl_ms)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = token, .ttl_ms = ttl_ms
    };
    struct lock_grant g;

    CHECK_EQ_INT(backend_acquire(e->be, &req, &g), BACKEND_OK);
    return g.fence;
}

static enum backend_result
release(struct env *e, const char *key, const char *token)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = token };
    struct lock_grant g;

    return backend_release(e->be, &req, &g);
}

/* Waits for c's grant after an event at t0; checks it came promptly. */
static void check_granted_soon(struct client *c, int64_t t0, int line)
{
    bool woke = client_wait(c, 2000);
    int64_t took;

    CHECK_MSG(woke, "line %d: no wake within 2 s", line);
    if (!woke)
        return;
    took = c->woke_at - t0;
    CHECK_MSG(c->w.result == BACKEND_OK, "line %d: result %s", line,
              backend_result_str(c->w.result));
    CHECK_MSG(took <= GRANT_LIMIT_MS, "line %d: granted after %lld ms", line,
              (long long)took);
    if (took > GRANT_TARGET_MS)
        slow_grants++;
}

static void test_waitq_free_key_is_done_at_once(void)
{
    struct env e;
    struct client c1, c2;

    env_open(&e);
    CHECK_EQ_INT(client_start(&e, &c1, "k", 1000, 5000, -1), WQ_DONE);
    CHECK_EQ_INT(c1.w.result, BACKEND_OK);
    CHECK(c1.w.grant.fence > 0);
    CHECK_EQ_U64(c1.w.grant.ttl_ms, 5000);
    CHECK_EQ_INT(c1.suspends, 0);
    CHECK_EQ_INT(c1.wakes, 0);
    /* try once on a held key: answered at once, with a retry hint */
    CHECK_EQ_INT(client_start(&e, &c2, "k", 0, 5000, -1), WQ_DONE);
    CHECK_EQ_INT(c2.w.result, BACKEND_HELD);
    CHECK(c2.w.grant.retry_ms >= 1 && c2.w.grant.retry_ms <= 5000);
    CHECK_EQ_INT(c2.suspends, 0);
    CHECK_EQ_INT(waitq_count(e.q), 0);
    CHECK_EQ_INT(release(&e, "k", c1.token), BACKEND_OK);
    env_close(&e);
    CHECK_EQ_INT(c1.wakes + c2.wakes, 0);
    client_cleanup(&c1);
    client_cleanup(&c2);
}

static void test_waitq_parked_waiter_granted_on_release(void)
{
    struct env e;
    struct client c;
    uint64_t fence;
    int64_t t0;

    env_open(&e);
    fence = hold(&e, "k", "holder", 10000);
    CHECK_EQ_INT(client_start(&e, &c, "k", 3000, 5000, -1), WQ_PARKED);
    CHECK_EQ_INT(c.suspends, 1);
    CHECK_EQ_INT(waitq_count(e.q), 1);
    CHECK(!client_wait(&c, 50)); /* still held: no answer yet */
    t0 = check_mono_ms();
    CHECK_EQ_INT(release(&e, "k", "holder"), BACKEND_OK);
    check_granted_soon(&c, t0, __LINE__);
    CHECK(c.w.grant.fence > fence);
    CHECK_EQ_U64(c.w.grant.ttl_ms, 5000);
    CHECK(!c.w.shutting_down && !c.w.client_gone);
    CHECK_EQ_INT(waitq_count(e.q), 0);
    /* the grant is real: the client's token holds the key */
    CHECK_EQ_INT(release(&e, "k", "holder"), BACKEND_MISMATCH);
    check_sleep_ms(20);
    CHECK_EQ_INT(client_wakes(&c), 1); /* exactly one answer */
    CHECK_EQ_INT(release(&e, "k", c.token), BACKEND_OK);
    env_close(&e);
    CHECK_EQ_INT(client_wakes(&c), 1);
    client_cleanup(&c);
}

static void test_waitq_waiters_are_granted_in_order(void)
{
    enum {
        N = 5
    };
    struct env e;
    struct client c[N];
    const char *holder = "holder";

    env_open(&e);
    hold(&e, "fifo", holder, 10000);
    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(client_start(&e, &c[i], "fifo", 5000, 5000, -1),
                     WQ_PARKED);
    CHECK_EQ_INT(waitq_count(e.q), N);
    for (int i = 0; i < N; i++) {
        int64_t t0 = check_mono_ms();
        CHECK_EQ_INT(release(&e, "fifo", holder), BACKEND_OK);
        check_granted_soon(&c[i], t0, __LINE__);
        for (int j = i + 1; j < N; j++)
            CHECK_MSG(client_wakes(&c[j]) == 0,
                      "client %d answered before client %d", j, i);
        CHECK_EQ_INT(waitq_count(e.q), N - 1 - i);
        holder = c[i].token;
    }
    CHECK_EQ_INT(release(&e, "fifo", holder), BACKEND_OK);
    env_close(&e);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(client_wakes(&c[i]), 1);
        client_cleanup(&c[i]);
    }
}

static void test_waitq_deadline_answers_held_with_retry(void)
{
    struct env e;
    struct client c1, c2, c3;
    int64_t t0;

    env_open(&e);
    hold(&e, "k", "holder", 10000);
    t0 = check_mono_ms();
    CHECK_EQ_INT(client_start(&e, &c1, "k", 150, 5000, -1), WQ_PARKED);
    CHECK_EQ_INT(client_start(&e, &c2, "k", 5000, 5000, -1), WQ_PARKED);
    CHECK(client_wait(&c1, 2000));
    CHECK_EQ_INT(c1.w.result, BACKEND_HELD);
    CHECK_MSG(c1.woke_at - t0 >= 140 && c1.woke_at - t0 <= 1000,
              "answered after %lld ms", (long long)(c1.woke_at - t0));
    CHECK_MSG(c1.w.grant.retry_ms >= 8000 && c1.w.grant.retry_ms <= 10000,
              "retry_ms %llu", (unsigned long long)c1.w.grant.retry_ms);
    CHECK(!c1.w.shutting_down && !c1.w.client_gone);
    CHECK_EQ_INT(waitq_count(e.q), 1);
    CHECK_EQ_INT(client_wakes(&c2), 0);
    /* c1's place is gone from the store's queue too: c2 is next */
    t0 = check_mono_ms();
    CHECK_EQ_INT(release(&e, "k", "holder"), BACKEND_OK);
    check_granted_soon(&c2, t0, __LINE__);
    CHECK_EQ_INT(release(&e, "k", c2.token), BACKEND_OK);
    /* and nobody is left queued: try-once gets the key */
    CHECK_EQ_INT(client_start(&e, &c3, "k", 0, 1000, -1), WQ_DONE);
    CHECK_EQ_INT(c3.w.result, BACKEND_OK);
    env_close(&e);
    CHECK_EQ_INT(client_wakes(&c1), 1);
    client_cleanup(&c1);
    client_cleanup(&c2);
    client_cleanup(&c3);
}

static void test_waitq_waiter_granted_when_holder_expires(void)
{
    struct env e;
    struct client c;
    int64_t expires;

    env_open(&e);
    hold(&e, "k", "holder", 200);
    expires = check_mono_ms() + 200;
    CHECK_EQ_INT(client_start(&e, &c, "k", 3000, 5000, -1), WQ_PARKED);
    CHECK(client_wait(&c, 3000));
    CHECK_EQ_INT(c.w.result, BACKEND_OK);
    CHECK_MSG(c.woke_at >= expires - 5, "granted %lld ms before expiry",
              (long long)(expires - c.woke_at));
    CHECK_MSG(c.woke_at - expires <= GRANT_LIMIT_MS,
              "granted %lld ms after the holder's expiry",
              (long long)(c.woke_at - expires));
    if (c.woke_at - expires > GRANT_TARGET_MS)
        slow_grants++;
    CHECK_EQ_INT(release(&e, "k", "holder"), BACKEND_MISMATCH);
    CHECK_EQ_INT(release(&e, "k", c.token), BACKEND_OK);
    env_close(&e);
    client_cleanup(&c);
}

static void test_waitq_spurious_notify_keeps_waiting(void)
{
    struct env e;
    struct client c;
    int64_t t0;

    env_open(&e);
    hold(&e, "k", "holder", 10000);
    CHECK_EQ_INT(client_start(&e, &c, "k", 3000, 5000, -1), WQ_PARKED);
    waitq_notify(e.q, "k", 1);
    waitq_notify(e.q, "other", 5);
    waitq_notify(e.q, "k", 1);
    CHECK(!client_wait(&c, 60));
    CHECK_EQ_INT(waitq_count(e.q), 1);
    t0 = check_mono_ms();
    CHECK_EQ_INT(release(&e, "k", "holder"), BACKEND_OK);
    check_granted_soon(&c, t0, __LINE__);
    env_close(&e);
    client_cleanup(&c);
}

static void test_waitq_shutdown_answers_everyone(void)
{
    enum {
        N = 60
    };
    struct env e;
    struct client *c = calloc(N, sizeof(*c));
    struct client late;
    char key[16];

    if (c == NULL)
        return;
    env_open(&e);
    for (int k = 0; k < 6; k++) {
        snprintf(key, sizeof(key), "key-%d", k);
        hold(&e, key, "holder", 10000);
    }
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key-%d", i % 6);
        CHECK_EQ_INT(client_start(&e, &c[i], key, 5000, 5000, -1), WQ_PARKED);
    }
    CHECK_EQ_INT(waitq_count(e.q), N);
    /* waitq.h says it returns when all are answered; the wake() calls
     * may still be running on the waitq thread (it signals "drained"
     * before waking them): allow them a moment */
    waitq_shutdown(e.q);
    for (int i = 0; i < N; i++) {
        CHECK(client_wait(&c[i], 1000));
        CHECK_EQ_INT(client_wakes(&c[i]), 1);
        CHECK_EQ_INT(c[i].w.result, BACKEND_UNAVAILABLE);
        CHECK(c[i].w.shutting_down);
    }
    CHECK_EQ_INT(waitq_count(e.q), 0);
    /* later starts are answered at once, without suspending */
    CHECK_EQ_INT(client_start(&e, &late, "key-0", 5000, 5000, -1), WQ_DONE);
    CHECK(late.w.shutting_down);
    CHECK_EQ_INT(late.w.result, BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(late.suspends, 0);
    /* once the workers ran what was owed, their places left the store:
     * a free key is plain free again */
    waitq_stop(e.q, 1000);
    CHECK_EQ_INT(release(&e, "key-0", "holder"), BACKEND_OK);
    {
        struct lock_req req = {
            .key = "key-0", .key_len = 5, .token = "someone", .ttl_ms = 1000
        };
        struct lock_grant g;
        CHECK_EQ_INT(backend_acquire(e.be, &req, &g), BACKEND_OK);
    }
    env_close(&e); /* shutdown twice is fine */
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(client_wakes(&c[i]), 1);
        client_cleanup(&c[i]);
    }
    client_cleanup(&late);
    free(c);
}

/* "k" held by "holder" and two parked waiters: c1, whose client is the
 * socket sv[0] (close sv[1] to hang it up), then c2. */
static void
park_two(struct env *e, struct client *c1, struct client *c2, int sv[2])
{
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    env_open(e);
    hold(e, "k", "holder", 10000);
    CHECK_EQ_INT(client_start(e, c1, "k", 5000, 5000, sv[0]), WQ_PARKED);
    CHECK_EQ_INT(client_start(e, c2, "k", 5000, 5000, -1), WQ_PARKED);
}

static void test_waitq_hang_up_leaves_queue(void)
{
    struct env e;
    struct client c1, c2;
    int sv[2];
    int64_t t0;

    park_two(&e, &c1, &c2, sv);
    CHECK(!client_wait(&c1, 30));
    t0 = check_mono_ms();
    close(sv[1]); /* the client hangs up */
    CHECK(client_wait(&c1, 2000));
    CHECK_MSG(c1.woke_at - t0 <= 500, "noticed after %lld ms",
              (long long)(c1.woke_at - t0));
    CHECK(c1.w.client_gone);
    CHECK(c1.w.result != BACKEND_OK);
    CHECK(!c1.w.shutting_down);
    CHECK_EQ_INT(waitq_count(e.q), 1);
    CHECK_EQ_INT(client_wakes(&c2), 0);
    /* the next waiter gets the lock: c1's place went with it */
    t0 = check_mono_ms();
    CHECK_EQ_INT(release(&e, "k", "holder"), BACKEND_OK);
    check_granted_soon(&c2, t0, __LINE__);
    CHECK_EQ_INT(release(&e, "k", c2.token), BACKEND_OK);
    env_close(&e);
    close(sv[0]);
    CHECK_EQ_INT(client_wakes(&c1), 1);
    client_cleanup(&c1);
    client_cleanup(&c2);
}

static void test_waitq_hung_up_waiter_never_gets_the_lock(void)
{
    struct env e;
    struct client c1, c2;
    int sv[2];
    int64_t t0;

    /* the key frees while the head's client is gone: the head must not
     * take the lock for nobody; the next waiter gets it */
    park_two(&e, &c1, &c2, sv);
    close(sv[1]);
    CHECK(client_wait(&c1, 2000));
    CHECK(c1.w.client_gone);
    t0 = check_mono_ms();
    CHECK_EQ_INT(release(&e, "k", "holder"), BACKEND_OK);
    check_granted_soon(&c2, t0, __LINE__);
    CHECK_EQ_INT(release(&e, "k", c1.token), BACKEND_MISMATCH);
    env_close(&e);
    close(sv[0]);
    client_cleanup(&c1);
    client_cleanup(&c2);
}

static void test_waitq_grants_were_prompt(void)
{
    /* docs/API.md's 50 ms target (the hard limit per grant is
     * GRANT_LIMIT_MS), over grants of this case's own, so that it checks
     * something when run alone, and over those the cases above timed */
    enum {
        N = 10
    };
    int before = slow_grants;
    struct env e;
    struct client c[N];
    const char *holder = "holder";

    CHECK_MSG(before <= 1, "%d grants of the cases above took more than %d ms",
              before, GRANT_TARGET_MS);
    env_open(&e);
    hold(&e, "prompt", holder, 10000);
    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(client_start(&e, &c[i], "prompt", 5000, 5000, -1),
                     WQ_PARKED);
    for (int i = 0; i < N; i++) {
        int64_t t0 = check_mono_ms();

        CHECK_EQ_INT(release(&e, "prompt", holder), BACKEND_OK);
        check_granted_soon(&c[i], t0, __LINE__);
        holder = c[i].token;
    }
    CHECK_EQ_INT(release(&e, "prompt", holder), BACKEND_OK);
    env_close(&e);
    for (int i = 0; i < N; i++)
        client_cleanup(&c[i]);
    CHECK_MSG(slow_grants - before <= 1, "%d of %d grants took more than %d ms",
              slow_grants - before, N, GRANT_TARGET_MS);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_waitq_free_key_is_done_at_once),
    CHECK_CASE(test_waitq_parked_waiter_granted_on_release),
    CHECK_CASE(test_waitq_waiters_are_granted_in_order),
    CHECK_CASE(test_waitq_deadline_answers_held_with_retry),
    CHECK_CASE(test_waitq_waiter_granted_when_holder_expires),
    CHECK_CASE(test_waitq_spurious_notify_keeps_waiting),
    CHECK_CASE(test_waitq_shutdown_answers_everyone),
    CHECK_CASE(test_waitq_hang_up_leaves_queue),
    CHECK_CASE(test_waitq_hung_up_waiter_never_gets_the_lock),
    CHECK_CASE(test_waitq_grants_were_prompt),
};

int main(int argc, char **argv)
{
    log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_TEXT);
    return CHECK_MAIN(cases);
}

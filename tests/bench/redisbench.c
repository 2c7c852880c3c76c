/*
 * tests/bench/redisbench.c - raw Redis baseline for `make bench`: C clients,
 * each on its own connection and key, closed loop (no pipelining: one
 * command in flight per connection), doing SET key token NX PX ttl, then
 * EVALSHA compare-and-delete. hiredis async contexts on one epoll loop (a
 * small adapter below), so the client costs no more than loadgen does.
 * Prints one JSON line in loadgen's format.
 *
 *   redisbench [-H host] [-p port] [-c clients] [-d seconds] [-W warmup]
 *              [-x key-prefix] [-T ttl-ms] [-r redis-server-pid]
 */
#include "tests/bench/stats.h"

#include <errno.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static const char release_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

struct rconn {
    redisAsyncContext *ac; /* owned by hiredis once connected */
    int idx;
    uint32_t events;       /* what the epoll set has for this fd */
    bool added;            /* fd is in the epoll set */
    uint64_t t_sent;
    uint64_t seq;          /* token counter */
    char key[96];
    char token[40];
};

static struct {
    const char *host;
    int port;
    int clients;
    double seconds;
    double warmup;
    const char *prefix;
    long ttl_ms;
    int pid; /* redis-server, for its CPU time; 0 = none */
} o = {
    .host = "127.0.0.1",
    .port = 6379,
    .clients = 64,
    .seconds = 10,
    .warmup = 1,
    .prefix = "bench",
    .ttl_ms = 30000,
};

static int ep;
static char sha[64];
static uint64_t t_warm_end;
static uint64_t t_end;
static bool stopping;
static int inflight;
static uint64_t pairs;
static uint64_t errors;
static struct bench_samples acq;
static struct bench_samples rel;
static long long cpu_at_warm = -1; /* redis-server CPU us at t_warm_end */
static long long cpu_at_end = -1;

/* ---- the hiredis event adapter over our epoll set ---- */

static void ev_apply(struct rconn *c)
{
    struct epoll_event ev = { .events = c->events, .data.ptr = c };
    int fd = c->ac->c.fd;

    if (epoll_ctl(ep, c->added ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) !=
        0) {
        fprintf(stderr, "redisbench: epoll_ctl: %s\n", strerror(errno));
        exit(1);
    }
    c->added = true;
}

static void ev_add_read(void *p)
{
    struct rconn *c = p;

    c->events |= EPOLLIN;
    ev_apply(c);
}

static void ev_del_read(void *p)
{
    struct rconn *c = p;

    c->events &= ~(uint32_t)EPOLLIN;
    ev_apply(c);
}

static void ev_add_write(void *p)
{
    struct rconn *c = p;

    c->events |= EPOLLOUT;
    ev_apply(c);
}

static void ev_del_write(void *p)
{
    struct rconn *c = p;

    c->events &= ~(uint32_t)EPOLLOUT;
    ev_apply(c);
}

static void ev_cleanup(void *p)
{
    struct rconn *c = p;

    if (c->added)
        epoll_ctl(ep, EPOLL_CTL_DEL, c->ac->c.fd, NULL);
    c->added = false;
}

/* ---- the closed loop ---- */

static void send_set(struct rconn *c);

static void fail(const char *what, const redisReply *r)
{
    errors++;
    if (errors <= 5)
        fprintf(stderr, "redisbench: %s: %s\n", what,
                r == NULL ? "no reply"
                          : (r->type == REDIS_REPLY_ERROR ? r->str : "?"));
}

static void on_del(redisAsyncContext *ac, void *reply, void *priv)
{
    struct rconn *c = priv;
    redisReply *r = reply;
    uint64_t now = bench_now_ns();

    (void)ac;
    inflight--;
    if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        fail("EVALSHA", r);
    else if (now >= t_warm_end && now < t_end) {
        pairs++;
        bench_samples_add(&rel, now - c->t_sent);
    }
    if (!stopping)
        send_set(c);
}

static void on_set(redisAsyncContext *ac, void *reply, void *priv)
{
    struct rconn *c = priv;
    redisReply *r = reply;
    uint64_t now = bench_now_ns();

    (void)ac;
    inflight--;
    if (r == NULL || r->type != REDIS_REPLY_STATUS) {
        fail("SET NX", r);
        if (!stopping)
            send_set(c);
        return;
    }
    if (now >= t_warm_end && now < t_end)
        bench_samples_add(&acq, now - c->t_sent);
    c->t_sent = now;
    inflight++;
    if (redisAsyncCommand(c->ac, on_del, c, "EVALSHA %s 1 %s %s", sha, c->key,
                          c->token) != REDIS_OK) {
        fprintf(stderr, "redisbench: EVALSHA: %s\n", c->ac->errstr);
        exit(1);
    }
}

static void send_set(struct rconn *c)
{
    int n = snprintf(c->token, sizeof c->token, "%016llx%016llx",
                     (unsigned long long)++c->seq, (unsigned long long)c->idx);

    if (n < 0 || (size_t)n >= sizeof c->token)
        exit(1);
    c->t_sent = bench_now_ns();
    inflight++;
    if (redisAsyncCommand(c->ac, on_set, c, "SET %s %s NX PX %ld", c->key,
                          c->token, o.ttl_ms) != REDIS_OK) {
        fprintf(stderr, "redisbench: SET: %s\n", c->ac->errstr);
        exit(1);
    }
}

static void load_script(void)
{
    redisContext *rc = redisConnect(o.host, o.port);
    redisReply *r;

    if (rc == NULL || rc->err) {
        fprintf(stderr, "redisbench: connect %s:%d: %s\n", o.host, o.port,
                rc ? rc->errstr : "out of memory");
        exit(1);
    }
    r = redisCommand(rc, "SCRIPT LOAD %s", release_lua);
    if (r == NULL || r->type != REDIS_REPLY_STRING ||
        r->len >= (int)sizeof sha) {
        fprintf(stderr, "redisbench: SCRIPT LOAD failed\n");
        exit(1);
    }
    memcpy(sha, r->str, (size_t)r->len);
    sha[r->len] = '\0';
    freeReplyObject(r);
    redisFree(rc);
}

static void poll_once(int timeout_ms)
{
    struct epoll_event evs[256];
    int n = epoll_wait(ep, evs, 256, timeout_ms);

    if (n < 0) {
        if (errno == EINTR)
            return;
        fprintf(stderr, "redisbench: epoll_wait: %s\n", strerror(errno));
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        struct rconn *c = evs[i].data.ptr;

        if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
            redisAsyncHandleRead(c->ac);
        if (evs[i].events & EPOLLOUT)
            redisAsyncHandleWrite(c->ac);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: redisbench [-H host] [-p port] [-c clients] "
                    "[-d seconds] [-W warmup] [-x prefix] [-T ttl-ms] "
                    "[-r pid]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct rconn *cs;
    int ch;

    while ((ch = getopt(argc, argv, "H:p:c:d:W:x:T:r:")) != -1) {
        switch (ch) {
        case 'H':
            o.host = optarg;
            break;
        case 'p':
            o.port = (int)strtol(optarg, NULL, 10);
            break;
        case 'c':
            o.clients = (int)strtol(optarg, NULL, 10);
            break;
        case 'd':
            o.seconds = strtod(optarg, NULL);
            break;
        case 'W':
            o.warmup = strtod(optarg, NULL);
            break;
        case 'x':
            o.prefix = optarg;
            break;
        case 'T':
            o.ttl_ms = strtol(optarg, NULL, 10);
            break;
        case 'r':
            o.pid = (int)strtol(optarg, NULL, 10);
            break;
        default:
            usage();
        }
    }
    if (o.clients < 1 || o.seconds <= 0)
        usage();
    signal(SIGPIPE, SIG_IGN);
    load_script();
    ep = epoll_create1(EPOLL_CLOEXEC);
    cs = calloc((size_t)o.clients, sizeof *cs);
    if (ep < 0 || cs == NULL) {
        fprintf(stderr, "redisbench: setup failed\n");
        return 1;
    }
    for (int i = 0; i < o.clients; i++) {
        struct rconn *c = &cs[i];
        int n = snprintf(c->key, sizeof c->key, "%s-%d", o.prefix, i);

        if (n < 0 || (size_t)n >= sizeof c->key)
            return 1;
        c->idx = i;
        c->ac = redisAsyncConnect(o.host, o.port);
        if (c->ac == NULL || c->ac->err) {
            fprintf(stderr, "redisbench: connect: %s\n",
                    c->ac ? c->ac->errstr : "out of memory");
            return 1;
        }
        c->ac->ev.data = c;
        c->ac->ev.addRead = ev_add_read;
        c->ac->ev.delRead = ev_del_read;
        c->ac->ev.addWrite = ev_add_write;
        c->ac->ev.delWrite = ev_del_write;
        c->ac->ev.cleanup = ev_cleanup;
    }
    t_warm_end = bench_now_ns() + (uint64_t)(o.warmup * 1e9);
    t_end = t_warm_end + (uint64_t)(o.seconds * 1e9);
    for (int i = 0; i < o.clients; i++)
        send_set(&cs[i]);
    while (bench_now_ns() < t_end) {
        if (o.pid && cpu_at_warm < 0 && bench_now_ns() >= t_warm_end)
            cpu_at_warm = bench_cpu_us(o.pid);
        poll_once(20);
    }
    if (cpu_at_warm >= 0)
        cpu_at_end = bench_cpu_us(o.pid);
    stopping = true;
    while (inflight > 0 && bench_now_ns() < t_end + 3000000000u)
        poll_once(20);
    bench_samples_sort(&acq);
    bench_samples_sort(&rel);
    printf("{\"scenario\":\"pairs\",\"proto\":\"redis\",\"clients\":%d,"
           "\"threads\":1,\"seconds\":%.3f,\"pairs\":%llu,"
           "\"pairs_per_s\":%.1f,",
           o.clients, o.seconds, (unsigned long long)pairs,
           (double)pairs / o.seconds);
    bench_samples_print_json(stdout, "acquire", &acq);
    printf(",");
    bench_samples_print_json(stdout, "release", &rel);
    if (cpu_at_warm >= 0 && cpu_at_end >= cpu_at_warm && pairs > 0)
        printf(",\"server_cpu_s\":%.3f,\"server_cpu_us_per_op\":%.2f",
               (double)(cpu_at_end - cpu_at_warm) / 1e6,
               (double)(cpu_at_end - cpu_at_warm) / (double)pairs);
    printf(",\"errors\":%llu}\n", (unsigned long long)errors);
    for (int i = 0; i < o.clients; i++)
        redisAsyncFree(cs[i].ac);
    free(cs);
    bench_samples_free(&acq);
    bench_samples_free(&rel);
    return 0;
}

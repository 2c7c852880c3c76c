/*
 * tests/bench/loadgen.c - closed-loop HTTP/1.1 load generator for lockd,
 * the HTTP ceiling server and etcd's JSON gateway. C kept-alive connections
 * driven by epoll (one thread by default, -t for more), each client sending
 * its next request only when the previous answer arrived. Prints one JSON
 * line with the results on stdout.
 *
 * Scenarios (-s):
 *   pairs      each client acquires its own key and releases it, again and
 *              again: pairs/s and acquire/release latency percentiles.
 *              With -P etcd: lease grant + lock (= acquire) and unlock.
 *              With -M n: n keys of its own at once (POST and DELETE
 *              /locks with "keys"), a pair being one multi-key acquire and
 *              its release.
 *   contended  every client acquires ONE key with ?wait_ms and releases it
 *              at once (or after -h microseconds): grants/s, hand-off
 *              latency (release sent -> next grant received), wait per
 *              acquire (fairness: max vs mean, per-client means).
 *              With -S n: first n other keys are held and one waiter
 *              parked on each, so the hand-off is timed beside n idle
 *              waiters spread over n keys.
 *   hold       acquire -k distinct keys and keep them; reads the server's
 *              VmRSS (--pid) before and after: bytes per held lock.
 *   waiters    hold one key, then open -w connections that all wait on it;
 *              reads VmRSS before and after: bytes per waiter.
 */
#include "tests/bench/stats.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP  8192
#define OUT_CAP 1024
#define MULTI_MAX 16 /* -M: keys per multi-key request (bodies fit OUT_CAP) */
#define KEY_CAP 160
#define TOK_CAP 96

enum proto {
    PROTO_LOCKD = 0, /* lockd and the ceiling server */
    PROTO_ETCD,      /* etcd v3 JSON gateway: lease grant, lock, unlock */
};

enum scenario {
    SC_PAIRS = 0,
    SC_CONTENDED,
    SC_HOLD,
    SC_WAITERS,
};

enum state {
    ST_IDLE = 0,
    ST_CONNECTING, /* waiters: non-blocking connect in progress */
    ST_ACQ,        /* lockd POST in flight */
    ST_REL,        /* lockd DELETE in flight */
    ST_LEASE,      /* etcd lease grant in flight */
    ST_LOCK,       /* etcd lock in flight */
    ST_UNLOCK,     /* etcd unlock in flight */
    ST_WAIT,       /* waiters: POST ?wait_ms sent, no answer expected */
};

struct conn {
    int fd;
    int idx;            /* client number, 0.. */
    unsigned gen;       /* bumped when the key must change (lost state) */
    enum state state;
    bool in_epoll_out;  /* EPOLLOUT is armed */
    uint64_t t_sent;    /* the current request's first byte went out */
    uint64_t t_acq;     /* etcd: when the lease grant (acquire) started */
    uint64_t grants;    /* contended: grants this client got in the window */
    uint64_t wait_ns;   /* contended: the sum of those grants' waits */
    size_t out_len;
    size_t out_off;
    size_t in_len;
    char key[KEY_CAP];  /* the lock key (raw; safe in a path) */
    char token[TOK_CAP]; /* lockd token, or etcd lease ID */
    char ekey[256];     /* etcd: the lock's key from lock (base64) */
    char out[OUT_CAP];
    char in[IN_CAP];
};

struct worker {
    pthread_t th;
    int ep;
    struct conn *conns; /* owned */
    int n;
    int inflight;       /* connections with a request out */
    bool stopping;      /* no new requests once the window closed */
    struct bench_samples acq;
    struct bench_samples rel;
    struct bench_samples wait;
    struct bench_samples handoff;
    uint64_t pairs;     /* pairs (or grants) completed in the window */
    uint64_t errors;
    uint64_t status_errors[6]; /* by status class: 0 = transport, 1..5 */
    long hold_next;     /* hold: next key number to acquire */
    long held;
    uint64_t last_release_ns; /* contended: last release sent, 0 = none */
    struct conn *pending; /* contended with -h: the holder, release due */
    uint64_t release_at;  /* ... at this time */
};

static struct {
    const char *host;
    int port;
    enum proto proto;
    enum scenario sc;
    int clients;
    int threads;
    double seconds;
    double warmup;
    const char *prefix;
    const char *path;   /* lockd: path prefix before the key */
    long ttl_ms;
    long wait_ms;
    long keys;          /* hold */
    long waiters;       /* waiters */
    long hold_us;       /* contended: how long a holder keeps the lock */
    int pid;            /* server pid for VmRSS, 0 = none */
    bool no_body;
    const char *extra; /* lockd: more acquire body fields (-m) */
    int multi;         /* pairs: keys per multi-key request, 0 = one key */
    long spread;       /* contended: other keys held, one waiter on each */
    bool kept_alive;   /* waiters: each connection has had an answer */
} o = {
    .host = "127.0.0.1",
    .port = 8080,
    .proto = PROTO_LOCKD,
    .sc = SC_PAIRS,
    .clients = 64,
    .threads = 1,
    .seconds = 10,
    .warmup = 1,
    .prefix = "bench",
    .path = "/locks/",
    .ttl_ms = 30000,
    .wait_ms = 120000,
    .keys = 100000,
    .waiters = 10000,
    .hold_us = 0,
    .pid = 0,
    .no_body = false,
    .extra = NULL,
    .multi = 0,
};

static struct sockaddr_in srv_addr;
static uint64_t t_warm_end; /* samples count from here ... */
static uint64_t t_end;      /* ... to here */
static struct worker *cpu_worker; /* reads the server's CPU time (-r) */
static long long cpu_at_warm = -1; /* server CPU us at t_warm_end */
static long long cpu_at_end = -1;  /* ... and at t_end */

static void die(const char *what)
{
    fprintf(stderr, "loadgen: %s: %s\n", what, strerror(errno));
    exit(1);
}

static bool in_window(uint64_t now)
{
    return now >= t_warm_end && now < t_end;
}

/* ---- base64 (etcd wants keys and names as bytes) ---- */

static void b64(const char *in, size_t len, char *out, size_t cap)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t j = 0;

    for (size_t i = 0; i < len && j + 5 < cap; i += 3) {
        unsigned v = (unsigned)(unsigned char)in[i] << 16;

        if (i + 1 < len)
            v |= (unsigned)(unsigned char)in[i + 1] << 8;
        if (i + 2 < len)
            v |= (unsigned char)in[i + 2];
        out[j++] = tab[(v >> 18) & 63];
        out[j++] = tab[(v >> 12) & 63];
        out[j++] = i + 1 < len ? tab[(v >> 6) & 63] : '=';
        out[j++] = i + 2 < len ? tab[v & 63] : '=';
    }
    out[j] = '\0';
}

/* ---- sockets ---- */

static int sock_open(bool blocking_connect)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;

    if (fd < 0)
        die("socket");
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        die("setsockopt TCP_NODELAY");
    if (!blocking_connect &&
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
        die("fcntl");
    if (connect(fd, (struct sockaddr *)&srv_addr, sizeof srv_addr) != 0) {
        if (blocking_connect || errno != EINPROGRESS) {
            int e = errno;

            close(fd);
            errno = e;
            return -1;
        }
    }
    if (blocking_connect &&
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
        die("fcntl");
    return fd;
}

static void ep_set(struct worker *w, struct conn *c, int op, bool out)
{
    struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0),
                              .data.ptr = c };

    if (epoll_ctl(w->ep, op, c->fd, &ev) != 0)
        die("epoll_ctl");
    c->in_epoll_out = out;
}

/* ---- requests ---- */

static void set_out(struct conn *c, int n)
{
    if (n < 0 || (size_t)n >= sizeof c->out) {
        fprintf(stderr, "loadgen: request too long\n");
        exit(1);
    }
    c->out_len = (size_t)n;
    c->out_off = 0;
}

static void make_key(struct conn *c, long num)
{
    int n;

    if (num >= 0)
        n = snprintf(c->key, sizeof c->key, "%s-%08ld", o.prefix, num);
    else
        n = snprintf(c->key, sizeof c->key, "%s-%d-%u", o.prefix, c->idx,
                     c->gen);
    if (n < 0 || (size_t)n >= sizeof c->key) {
        fprintf(stderr, "loadgen: key too long\n");
        exit(1);
    }
}

static void req_lockd_acquire(struct conn *c, long wait_ms)
{
    char query[48] = "";
    char body[160] = "";
    int n;

    if (wait_ms > 0) {
        n = snprintf(query, sizeof query, "?wait_ms=%ld", wait_ms);
        if (n < 0 || (size_t)n >= sizeof query)
            exit(1);
    }
    if (!o.no_body) {
        n = snprintf(body, sizeof body, "{\"ttl_ms\":%ld%s%s}", o.ttl_ms,
                     o.extra != NULL ? "," : "",
                     o.extra != NULL ? o.extra : "");
        if (n < 0 || (size_t)n >= sizeof body)
            exit(1);
    }
    set_out(c, snprintf(c->out, sizeof c->out,
                        "POST %s%s%s HTTP/1.1\r\nHost: %s:%d\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %zu\r\n\r\n%s",
                        o.path, c->key, query, o.host, o.port, strlen(body),
                        body));
    c->state = ST_ACQ;
}

/* The JSON array of c's -M keys: its key with "-0", "-1", ... appended. */
static void multi_keys(const struct conn *c, char *out, size_t cap)
{
    size_t len = 0;

    out[len++] = '[';
    for (int i = 0; i < o.multi; i++) {
        int n = snprintf(out + len, cap - len, "%s\"%s-%d\"", i ? "," : "",
                         c->key, i);

        if (n < 0 || (size_t)n >= cap - len - 1) {
            fprintf(stderr, "loadgen: -M keys too long\n");
            exit(1);
        }
        len += (size_t)n;
    }
    out[len++] = ']';
    out[len] = '\0';
}

/* POST /locks with every -M key: the body only, no wait (pairs). */
static void req_lockd_acquire_multi(struct conn *c)
{
    char keys[OUT_CAP / 2];
    char body[OUT_CAP / 2 + 64];
    int n;

    multi_keys(c, keys, sizeof keys);
    n = snprintf(body, sizeof body, "{\"keys\":%s,\"ttl_ms\":%ld}", keys,
                 o.ttl_ms);
    if (n < 0 || (size_t)n >= sizeof body)
        exit(1);
    set_out(c, snprintf(c->out, sizeof c->out,
                        "POST /locks HTTP/1.1\r\nHost: %s:%d\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %d\r\n\r\n%s",
                        o.host, o.port, n, body));
    c->state = ST_ACQ;
}

static void req_lockd_release_multi(struct conn *c)
{
    char keys[OUT_CAP / 2];
    char body[OUT_CAP / 2 + TOK_CAP + 32];
    int n;

    multi_keys(c, keys, sizeof keys);
    n = snprintf(body, sizeof body, "{\"keys\":%s,\"token\":\"%s\"}", keys,
                 c->token);
    if (n < 0 || (size_t)n >= sizeof body)
        exit(1);
    set_out(c, snprintf(c->out, sizeof c->out,
                        "DELETE /locks HTTP/1.1\r\nHost: %s:%d\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %d\r\n\r\n%s",
                        o.host, o.port, n, body));
    c->state = ST_REL;
}

static void req_lockd_release(struct conn *c)
{
    if (o.multi > 0) {
        req_lockd_release_multi(c);
        return;
    }
    set_out(c, snprintf(c->out, sizeof c->out,
                        "DELETE %s%s HTTP/1.1\r\nHost: %s:%d\r\n"
                        "Lock-Token: %s\r\n\r\n",
                        o.path, c->key, o.host, o.port, c->token));
    c->state = ST_REL;
}

static void req_etcd(struct conn *c, const char *path, const char *body,
                     enum state st)
{
    set_out(c, snprintf(c->out, sizeof c->out,
                        "POST %s HTTP/1.1\r\nHost: %s:%d\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %zu\r\n\r\n%s",
                        path, o.host, o.port, strlen(body), body));
    c->state = st;
}

static void req_etcd_lease(struct conn *c)
{
    char body[64];
    long ttl_s = (o.ttl_ms + 999) / 1000;

    if (snprintf(body, sizeof body, "{\"TTL\":%ld}", ttl_s) < 0)
        exit(1);
    req_etcd(c, "/v3/lease/grant", body, ST_LEASE);
}

static void req_etcd_lock(struct conn *c)
{
    char name[KEY_CAP * 2];
    char body[512];
    int n;

    b64(c->key, strlen(c->key), name, sizeof name);
    n = snprintf(body, sizeof body, "{\"name\":\"%s\",\"lease\":\"%s\"}", name,
                 c->token);
    if (n < 0 || (size_t)n >= sizeof body)
        exit(1);
    req_etcd(c, "/v3/lock/lock", body, ST_LOCK);
}

static void req_etcd_unlock(struct conn *c)
{
    char body[512];
    int n = snprintf(body, sizeof body, "{\"key\":\"%s\"}", c->ekey);

    if (n < 0 || (size_t)n >= sizeof body)
        exit(1);
    req_etcd(c, "/v3/lock/unlock", body, ST_UNLOCK);
}

/* Write what is left of c->out; arms EPOLLOUT on a short write. */
static int conn_flush(struct worker *w, struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL);

        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!c->in_epoll_out)
                    ep_set(w, c, EPOLL_CTL_MOD, true);
                return 0;
            }
            if (errno == EINTR)
                continue;
            return -1;
        }
        c->out_off += (size_t)n;
    }
    if (c->in_epoll_out)
        ep_set(w, c, EPOLL_CTL_MOD, false);
    return 0;
}

static int conn_send(struct worker *w, struct conn *c, uint64_t now)
{
    c->t_sent = now;
    w->inflight++;
    return conn_flush(w, c);
}

/* The first request of a client's cycle (pairs, contended, hold). */
static int start_cycle(struct worker *w, struct conn *c, uint64_t now)
{
    if (o.proto == PROTO_ETCD) {
        c->t_acq = now;
        req_etcd_lease(c);
    } else if (o.multi > 0) {
        req_lockd_acquire_multi(c);
    } else {
        req_lockd_acquire(c, o.sc == SC_CONTENDED ? o.wait_ms : 0);
    }
    return conn_send(w, c, now);
}

/* ---- responses ---- */

/* Copy the JSON string value after `"name":"` into out; -1 if absent. */
static int json_str(const char *body, size_t len, const char *name,
                    char *out, size_t cap)
{
    char pat[40];
    const char *p;
    const char *end = body + len;
    size_t i = 0;
    int n = snprintf(pat, sizeof pat, "\"%s\":\"", name);

    if (n < 0 || (size_t)n >= sizeof pat)
        return -1;
    p = memmem(body, len, pat, (size_t)n);
    if (p == NULL)
        return -1;
    for (p += n; p < end && *p != '"'; p++) {
        if (i + 1 >= cap)
            return -1;
        out[i++] = *p;
    }
    if (p == end || i == 0)
        return -1;
    out[i] = '\0';
    return 0;
}

/*
 * Parse one HTTP response at the start of buf: 0 = incomplete, -1 = bad,
 * else the bytes it takes. Chunked bodies are decoded in place into
 * body (cap IN_CAP).
 */
static long parse_response(char *buf, size_t len, int *status, char **body,
                           size_t *body_len)
{
    char *hend = memmem(buf, len, "\r\n\r\n", 4);
    char *p;
    size_t hlen;
    long clen = -1;
    bool chunked = false;

    if (hend == NULL)
        return len >= IN_CAP ? -1 : 0;
    hlen = (size_t)(hend - buf) + 4;
    if (len < 12 || memcmp(buf, "HTTP/1.", 7) != 0)
        return -1;
    *status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    for (p = memchr(buf, '\n', hlen); p != NULL && p < hend;
         p = memchr(p, '\n', (size_t)(hend - p))) {
        p++;
        if (strncasecmp(p, "content-length:", 15) == 0)
            clen = strtol(p + 15, NULL, 10);
        else if (strncasecmp(p, "transfer-encoding:", 18) == 0 &&
                 memmem(p, (size_t)(hend - p), "chunked", 7) != NULL)
            chunked = true;
    }
    if (!chunked) {
        if (clen < 0)
            clen = 0;
        if (len < hlen + (size_t)clen)
            return 0;
        *body = buf + hlen;
        *body_len = (size_t)clen;
        return (long)(hlen + (size_t)clen);
    }
    /* chunked: walk the chunks, then compact the data behind the head */
    {
        size_t pos = hlen;
        size_t out = hlen;

        for (;;) {
            char *eol = memmem(buf + pos, len - pos, "\r\n", 2);
            unsigned long sz;

            if (eol == NULL)
                return 0;
            sz = strtoul(buf + pos, NULL, 16);
            pos = (size_t)(eol - buf) + 2;
            if (sz == 0) {
                if (len < pos + 2)
                    return 0;
                /* no trailers expected: "0\r\n\r\n" */
                *body = buf + hlen;
                *body_len = out - hlen;
                return (long)(pos + 2);
            }
            if (len < pos + sz + 2)
                return 0;
            memmove(buf + out, buf + pos, sz);
            out += sz;
            pos += sz + 2;
        }
    }
}

static void count_error(struct worker *w, int status)
{
    w->errors++;
    w->status_errors[status >= 100 && status < 600 ? status / 100 : 0]++;
    if (w->errors <= 5)
        fprintf(stderr, "loadgen: unexpected answer %d\n", status);
}

/* Handle one full response; returns -1 to drop the connection. */
static int on_response(struct worker *w, struct conn *c, int status,
                       const char *body, size_t blen, uint64_t now)
{
    enum state st = c->state;
    bool win = in_window(now);

    w->inflight--;
    c->state = ST_IDLE;
    switch (st) {
    case ST_ACQ:
        if (status != 201 ||
            json_str(body, blen, "token", c->token, sizeof c->token) != 0) {
            count_error(w, status);
            if (o.sc == SC_HOLD)
                return -1;
            c->gen++; /* a stale lock on the old key must not stall us */
            if (o.sc == SC_PAIRS)
                make_key(c, -1);
            break;
        }
        if (o.sc == SC_HOLD) {
            w->held++;
            if (win)
                bench_samples_add(&w->acq, now - c->t_sent);
            if (w->hold_next < o.keys) {
                make_key(c, w->hold_next++);
                req_lockd_acquire(c, 0);
                return conn_send(w, c, now);
            }
            return 0;
        }
        if (o.sc == SC_CONTENDED) {
            if (win) {
                w->pairs++;
                c->grants++;
                c->wait_ns += now - c->t_sent;
                bench_samples_add(&w->wait, now - c->t_sent);
                if (w->last_release_ns != 0)
                    bench_samples_add(&w->handoff, now - w->last_release_ns);
            }
            req_lockd_release(c);
            if (o.hold_us > 0) { /* the critical section: sent later */
                w->pending = c;
                w->release_at = now + (uint64_t)o.hold_us * 1000u;
                return 0;
            }
            w->last_release_ns = now;
            return conn_send(w, c, now);
        }
        if (win)
            bench_samples_add(&w->acq, now - c->t_sent);
        req_lockd_release(c);
        return conn_send(w, c, now);
    case ST_REL:
        if (status != 200)
            count_error(w, status);
        else if (win && o.sc == SC_PAIRS) {
            w->pairs++;
            bench_samples_add(&w->rel, now - c->t_sent);
        }
        break;
    case ST_LEASE:
        if (status != 200 ||
            json_str(body, blen, "ID", c->token, sizeof c->token) != 0) {
            count_error(w, status);
            break;
        }
        req_etcd_lock(c);
        return conn_send(w, c, now);
    case ST_LOCK:
        if (status != 200 ||
            json_str(body, blen, "key", c->ekey, sizeof c->ekey) != 0) {
            count_error(w, status);
            break;
        }
        if (win)
            bench_samples_add(&w->acq, now - c->t_acq);
        req_etcd_unlock(c);
        return conn_send(w, c, now);
    case ST_UNLOCK:
        if (status != 200)
            count_error(w, status);
        else if (win) {
            w->pairs++;
            bench_samples_add(&w->rel, now - c->t_sent);
        }
        break;
    case ST_WAIT:
        count_error(w, status); /* a waiter must not be answered */
        return 0;
    case ST_IDLE:
    case ST_CONNECTING:
        count_error(w, status);
        return -1;
    }
    if (w->stopping || o.sc == SC_HOLD)
        return 0;
    return start_cycle(w, c, now);
}

static void conn_reconnect(struct worker *w, struct conn *c, uint64_t now)
{
    if (c->state != ST_IDLE)
        w->inflight--;
    c->state = ST_IDLE;
    close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    c->in_len = 0;
    count_error(w, 0);
    if (w->stopping || o.sc == SC_HOLD || o.sc == SC_WAITERS)
        return;
    c->fd = sock_open(true);
    if (c->fd < 0)
        return;
    ep_set(w, c, EPOLL_CTL_ADD, false);
    c->gen++;
    if (o.sc == SC_PAIRS)
        make_key(c, -1);
    if (start_cycle(w, c, now) != 0)
        conn_reconnect(w, c, now);
}

static void conn_readable(struct worker *w, struct conn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->in_len, IN_CAP - c->in_len, 0);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            conn_reconnect(w, c, bench_now_ns());
            return;
        }
        if (n == 0) {
            conn_reconnect(w, c, bench_now_ns());
            return;
        }
        c->in_len += (size_t)n;
        if (c->in_len == IN_CAP)
            break;
    }
    for (;;) {
        int status = 0;
        char *body = NULL;
        size_t blen = 0;
        long used = parse_response(c->in, c->in_len, &status, &body, &blen);
        uint64_t now;

        if (used == 0)
            return;
        if (used < 0) {
            conn_reconnect(w, c, bench_now_ns());
            return;
        }
        now = bench_now_ns();
        if (on_response(w, c, status, body, blen, now) != 0) {
            conn_reconnect(w, c, now);
            return;
        }
        memmove(c->in, c->in + used, c->in_len - (size_t)used);
        c->in_len -= (size_t)used;
        if (c->in_len == 0)
            return;
    }
}

static void conn_event(struct worker *w, struct conn *c, uint32_t ev)
{
    if (c->fd < 0)
        return;
    if (c->state == ST_CONNECTING && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int err = 0;
        socklen_t len = sizeof err;

        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
            err != 0) {
            conn_reconnect(w, c, bench_now_ns());
            return;
        }
        w->inflight--;
        req_lockd_acquire(c, o.wait_ms);
        c->state = ST_WAIT;
        if (conn_send(w, c, bench_now_ns()) != 0)
            conn_reconnect(w, c, bench_now_ns());
        return;
    }
    if ((ev & EPOLLOUT) && conn_flush(w, c) != 0) {
        conn_reconnect(w, c, bench_now_ns());
        return;
    }
    if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
        conn_readable(w, c);
}

/* Send the held lock's release when its time has come (contended -h). */
static void worker_due(struct worker *w)
{
    struct conn *c = w->pending;
    uint64_t now;

    if (c == NULL)
        return;
    now = bench_now_ns();
    if (now < w->release_at)
        return;
    w->pending = NULL;
    w->last_release_ns = now;
    if (conn_send(w, c, now) != 0)
        conn_reconnect(w, c, now);
}

/* One round of epoll; timeout in ms (shorter when a release is due). */
static void worker_poll(struct worker *w, int timeout_ms)
{
    struct epoll_event evs[256];
    int n;

    if (w->pending != NULL) {
        uint64_t now = bench_now_ns();
        int due = now >= w->release_at
                      ? 0
                      : (int)((w->release_at - now + 999999) / 1000000);

        if (due < timeout_ms)
            timeout_ms = due;
    }
    n = epoll_wait(w->ep, evs, 256, timeout_ms);
    if (n < 0) {
        if (errno == EINTR)
            return;
        die("epoll_wait");
    }
    for (int i = 0; i < n; i++)
        conn_event(w, evs[i].data.ptr, evs[i].events);
    worker_due(w);
}

static void worker_init(struct worker *w, int first, int n)
{
    memset(w, 0, sizeof *w);
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    if (w->ep < 0)
        die("epoll_create1");
    w->n = n;
    w->conns = calloc((size_t)(n > 0 ? n : 1), sizeof *w->conns);
    if (w->conns == NULL)
        die("calloc");
    for (int i = 0; i < n; i++) {
        struct conn *c = &w->conns[i];

        c->idx = first + i;
        c->fd = -1;
    }
}

static void worker_connect_all(struct worker *w)
{
    for (int i = 0; i < w->n; i++) {
        struct conn *c = &w->conns[i];

        c->fd = sock_open(true);
        if (c->fd < 0)
            die("connect");
        ep_set(w, c, EPOLL_CTL_ADD, false);
    }
}

static void worker_close_all(struct worker *w)
{
    for (int i = 0; i < w->n; i++) {
        if (w->conns[i].fd >= 0)
            close(w->conns[i].fd);
        w->conns[i].fd = -1;
    }
}

/* Closed loop until t_end, then let the requests in flight finish. */
static void *worker_run_pairs(void *arg)
{
    struct worker *w = arg;
    uint64_t now = bench_now_ns();

    for (int i = 0; i < w->n; i++) {
        struct conn *c = &w->conns[i];

        make_key(c, o.sc == SC_CONTENDED ? 0 : -1); /* contended: one key */
        if (start_cycle(w, c, now) != 0)
            conn_reconnect(w, c, now);
    }
    while (bench_now_ns() < t_end) {
        if (w == cpu_worker && cpu_at_warm < 0 && bench_now_ns() >= t_warm_end)
            cpu_at_warm = bench_cpu_us(o.pid);
        worker_poll(w, 20);
    }
    if (w == cpu_worker && cpu_at_warm >= 0)
        cpu_at_end = bench_cpu_us(o.pid);
    w->stopping = true;
    /* contended: waiters never finish by themselves; close at once */
    if (o.sc == SC_CONTENDED)
        return NULL;
    while (w->inflight > 0 && bench_now_ns() < t_end + 3000000000u)
        worker_poll(w, 20);
    return NULL;
}

static void print_errors(const struct worker *w)
{
    printf("\"errors\":%llu,\"errors_by_class\":{\"transport\":%llu,"
           "\"1xx\":%llu,\"2xx\":%llu,\"3xx\":%llu,\"4xx\":%llu,\"5xx\":%llu}",
           (unsigned long long)w->errors,
           (unsigned long long)w->status_errors[0],
           (unsigned long long)w->status_errors[1],
           (unsigned long long)w->status_errors[2],
           (unsigned long long)w->status_errors[3],
           (unsigned long long)w->status_errors[4],
           (unsigned long long)w->status_errors[5]);
}

static const char *proto_name(void)
{
    return o.proto == PROTO_ETCD ? "etcd" : "lockd";
}

static void set_window(double warmup, double seconds)
{
    uint64_t now = bench_now_ns();

    t_warm_end = now + (uint64_t)(warmup * 1e9);
    t_end = t_warm_end + (uint64_t)(seconds * 1e9);
}

static void spread_setup(struct worker *h, struct worker *p);

static void run_pairs(void)
{
    int t = o.threads < 1 ? 1 : o.threads;
    struct worker *ws;
    struct worker all;
    struct worker sh; /* -S: the holders of the other keys */
    struct worker sp; /* -S: their waiters */
    int first = 0;

    if (t > o.clients)
        t = o.clients;
    if (o.sc == SC_CONTENDED)
        t = 1; /* hand-off is measured across clients: one clock, one loop */
    if (o.sc == SC_CONTENDED && o.spread > 0)
        spread_setup(&sh, &sp);
    ws = calloc((size_t)t, sizeof *ws);
    if (ws == NULL)
        die("calloc");
    for (int i = 0; i < t; i++) {
        int n = o.clients / t + (i < o.clients % t);

        worker_init(&ws[i], first, n);
        worker_connect_all(&ws[i]);
        first += n;
    }
    set_window(o.warmup, o.seconds);
    cpu_worker = o.pid ? &ws[0] : NULL;
    for (int i = 0; i < t; i++)
        if (pthread_create(&ws[i].th, NULL, worker_run_pairs, &ws[i]) != 0)
            die("pthread_create");
    worker_init(&all, 0, 0);
    for (int i = 0; i < t; i++) {
        if (pthread_join(ws[i].th, NULL) != 0)
            die("pthread_join");
        bench_samples_merge(&all.acq, &ws[i].acq);
        bench_samples_merge(&all.rel, &ws[i].rel);
        bench_samples_merge(&all.wait, &ws[i].wait);
        bench_samples_merge(&all.handoff, &ws[i].handoff);
        all.pairs += ws[i].pairs;
        all.errors += ws[i].errors;
        for (int k = 0; k < 6; k++)
            all.status_errors[k] += ws[i].status_errors[k];
    }
    bench_samples_sort(&all.acq);
    bench_samples_sort(&all.rel);
    bench_samples_sort(&all.wait);
    bench_samples_sort(&all.handoff);
    printf("{\"scenario\":\"%s\",\"proto\":\"%s\",\"clients\":%d,"
           "\"threads\":%d,\"seconds\":%.3f,\"hold_ms\":%.3f,"
           "\"keys_per_op\":%d,",
           o.sc == SC_CONTENDED ? "contended" : "pairs", proto_name(),
           o.clients, t, o.seconds, (double)o.hold_us / 1000.0,
           o.multi > 0 ? o.multi : 1);
    if (o.sc == SC_CONTENDED) {
        uint64_t gmin = UINT64_MAX;
        uint64_t gmax = 0;
        double worst = 0; /* the highest per-client mean wait, ms */
        double mean = bench_samples_mean_ms(&all.wait);

        for (int i = 0; i < ws[0].n; i++) {
            const struct conn *c = &ws[0].conns[i];
            double m = c->grants ? (double)c->wait_ns / (double)c->grants /
                                       BENCH_NS_PER_MS
                                 : 0;

            gmin = c->grants < gmin ? c->grants : gmin;
            gmax = c->grants > gmax ? c->grants : gmax;
            worst = m > worst ? m : worst;
        }
        printf("\"grants\":%llu,\"grants_per_s\":%.1f,"
               "\"max_wait_over_mean\":%.3f,"
               "\"p999_wait_over_mean\":%.3f,"
               "\"worst_client_mean_wait_over_mean\":%.3f,"
               "\"grants_per_client_min\":%llu,"
               "\"grants_per_client_max\":%llu,",
               (unsigned long long)all.pairs, (double)all.pairs / o.seconds,
               mean > 0 ? bench_samples_max_ms(&all.wait) / mean : 0,
               mean > 0 ? bench_samples_pct(&all.wait, 99.9) / mean : 0,
               mean > 0 ? worst / mean : 0,
               (unsigned long long)(gmin == UINT64_MAX ? 0 : gmin),
               (unsigned long long)gmax);
        bench_samples_print_json(stdout, "handoff", &all.handoff);
        printf(",");
        bench_samples_print_json(stdout, "wait", &all.wait);
    } else {
        printf("\"pairs\":%llu,\"pairs_per_s\":%.1f,",
               (unsigned long long)all.pairs, (double)all.pairs / o.seconds);
        bench_samples_print_json(stdout, "acquire", &all.acq);
        printf(",");
        bench_samples_print_json(stdout, "release", &all.rel);
    }
    if (cpu_at_warm >= 0 && cpu_at_end >= cpu_at_warm && all.pairs > 0)
        printf(",\"server_cpu_s\":%.3f,\"server_cpu_us_per_op\":%.2f",
               (double)(cpu_at_end - cpu_at_warm) / 1e6,
               (double)(cpu_at_end - cpu_at_warm) / (double)all.pairs);
    printf(",\"spread\":%ld,", o.sc == SC_CONTENDED ? o.spread : 0);
    print_errors(&all);
    printf("}\n");
    for (int i = 0; i < t; i++)
        worker_close_all(&ws[i]);
    if (o.sc == SC_CONTENDED && o.spread > 0) {
        worker_close_all(&sp);
        worker_close_all(&sh);
    }
}

/* Warm the server's allocator with pairs on throw-away keys before a
 * memory baseline, so that the baseline already has its buffers. */
static void warm_pairs(struct worker *w, double seconds)
{
    enum scenario sc = o.sc;
    uint64_t now = bench_now_ns();

    o.sc = SC_PAIRS;
    set_window(0, seconds);
    for (int i = 0; i < w->n; i++) {
        make_key(&w->conns[i], -1);
        if (start_cycle(w, &w->conns[i], now) != 0)
            die("send");
    }
    while (bench_now_ns() < t_end)
        worker_poll(w, 20);
    w->stopping = true;
    while (w->inflight > 0 && bench_now_ns() < t_end + 3000000000u)
        worker_poll(w, 20);
    w->stopping = false;
    w->pairs = 0;
    bench_samples_free(&w->acq);
    bench_samples_free(&w->rel);
    o.sc = sc;
}

static void settle(void)
{
    struct timespec ts = { .tv_sec = 1, .tv_nsec = 0 };

    nanosleep(&ts, NULL);
}

static void run_hold(void)
{
    struct worker w;
    long long before;
    long long after;
    uint64_t t0;
    uint64_t t1;
    uint64_t now;
    size_t key_bytes;

    worker_init(&w, 0, o.clients);
    worker_connect_all(&w);
    warm_pairs(&w, o.warmup);
    settle();
    before = o.pid ? bench_rss_bytes(o.pid) : -1;
    set_window(0, 1e6);
    t0 = bench_now_ns();
    now = t0;
    for (int i = 0; i < w.n && w.hold_next < o.keys; i++) {
        make_key(&w.conns[i], w.hold_next++);
        req_lockd_acquire(&w.conns[i], 0);
        if (conn_send(&w, &w.conns[i], now) != 0)
            die("send");
    }
    while (w.inflight > 0)
        worker_poll(&w, 100);
    t1 = bench_now_ns();
    settle();
    after = o.pid ? bench_rss_bytes(o.pid) : -1;
    make_key(&w.conns[0], 0);
    key_bytes = strlen(w.conns[0].key);
    bench_samples_sort(&w.acq);
    printf("{\"scenario\":\"hold\",\"proto\":\"%s\",\"clients\":%d,"
           "\"keys\":%ld,\"held\":%ld,\"key_bytes\":%zu,\"seconds\":%.3f,"
           "\"acquires_per_s\":%.1f,\"rss_before\":%lld,\"rss_after\":%lld,"
           "\"rss_bytes\":%lld,\"bytes_per_lock\":%.1f,"
           "\"bytes_per_lock_beyond_key\":%.1f,",
           proto_name(), o.clients, o.keys, w.held, key_bytes,
           (double)(t1 - t0) / 1e9, (double)w.held / ((double)(t1 - t0) / 1e9),
           before, after, after,
           w.held ? (double)(after - before) / (double)w.held : 0,
           w.held ? (double)(after - before) / (double)w.held -
                        (double)key_bytes
                  : 0);
    bench_samples_print_json(stdout, "acquire", &w.acq);
    printf(",");
    print_errors(&w);
    printf("}\n");
    worker_close_all(&w);
}

/* lockd_waiters from GET /metrics over a fresh connection; -1 if unknown. */
static long metrics_waiters(void)
{
    static char buf[1 << 20];
    size_t len = 0;
    char req[256];
    int fd = sock_open(true);
    int n;
    long v = -1;
    char *p;
    struct timeval tv = { .tv_sec = 2, .tv_usec = 0 };

    if (fd < 0)
        return -1;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    n = snprintf(req, sizeof req,
                 "GET /metrics HTTP/1.1\r\nHost: %s:%d\r\n"
                 "Connection: close\r\n\r\n",
                 o.host, o.port);
    if (n < 0 || (size_t)n >= sizeof req ||
        send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return -1;
    }
    for (;;) {
        ssize_t r = recv(fd, buf + len, sizeof buf - 1 - len, 0);

        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == sizeof buf - 1)
            break;
    }
    close(fd);
    buf[len] = '\0';
    p = strstr(buf, "\nlockd_waiters ");
    if (p != NULL)
        v = strtol(p + 15, NULL, 10);
    return v;
}

/* One GET /healthz on fd and its whole answer, blocking (fd is
 * non-blocking: poll for each read): 0, or -1. A connection that has had
 * an answer is a kept-alive client's, as most clients' pools make them. */
static int healthz_once(int fd)
{
    char buf[4096];
    size_t len = 0;
    char req[256];
    int n = snprintf(req, sizeof req,
                     "GET /healthz HTTP/1.1\r\nHost: %s:%d\r\n\r\n",
                     o.host, o.port);
    char *end;
    char *cl;
    long body;

    if (n < 0 || (size_t)n >= sizeof req ||
        send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        return -1;
    for (;;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t r;

        if (poll(&pfd, 1, 5000) != 1)
            return -1;
        r = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (r <= 0)
            return -1;
        len += (size_t)r;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (end == NULL)
            continue;
        /* libmicrohttpd writes the header so */
        cl = strstr(buf, "\r\nContent-Length:");
        body = cl != NULL ? strtol(cl + 17, NULL, 10) : 0;
        if ((long)len >= (end + 4 - buf) + body)
            return 0;
        if (len == sizeof buf - 1)
            return -1;
    }
}

/* Open w's n connections, each a waiter (POST ?wait_ms, never answered
 * while the key stays held) on key `first`, or on key first + i when
 * spread: how many were opened within 120 s. With -K each connection
 * first has one answer (healthz_once()). */
static long park_waiters(struct worker *w, long n, long first, bool spread)
{
    uint64_t deadline = bench_now_ns() + 120000000000u;
    long opened = 0;

    /* at most 256 connects in flight: the listen backlog stays short */
    while (opened < n && bench_now_ns() < deadline) {
        while (opened < n && w->inflight < 256) {
            struct conn *c = &w->conns[opened];

            make_key(c, spread ? first + opened : first);
            opened++;
            c->fd = sock_open(o.kept_alive);
            if (c->fd < 0)
                die("connect");
            if (o.kept_alive && healthz_once(c->fd) != 0)
                die("GET /healthz");
            c->state = ST_CONNECTING;
            w->inflight++;
            ep_set(w, c, EPOLL_CTL_ADD, true);
        }
        /* a waiter's POST stays in flight until it is answered: count
         * connects only */
        worker_poll(w, 10);
        w->inflight = 0;
        for (long i = 0; i < opened; i++)
            if (w->conns[i].state == ST_CONNECTING)
                w->inflight++;
    }
    return opened;
}

/* Poll w until lockd's lockd_waiters reaches n (or 30 s passed): the
 * last value read, -1 when the server has no such metric. */
static long waiters_parked(struct worker *w, long n)
{
    uint64_t deadline = bench_now_ns() + 30000000000u;
    long reg = -1;

    while (bench_now_ns() < deadline) {
        worker_poll(w, 200);
        reg = metrics_waiters();
        if (reg < 0 || reg >= n)
            break;
    }
    if (reg < 0) /* no such metric (ceiling): give it a moment */
        settle();
    return reg;
}

/* contended -S: hold keys 1..n over h's connections, then park one
 * waiter on each over p's (key 0 is the contended one). */
static void spread_setup(struct worker *h, struct worker *p)
{
    long n = o.spread;
    long reg;

    worker_init(h, 0, 64);
    worker_connect_all(h);
    o.sc = SC_HOLD;
    o.keys = n + 1;
    h->hold_next = 1;
    set_window(0, 1e6);
    for (int i = 0; i < h->n && h->hold_next < o.keys; i++) {
        make_key(&h->conns[i], h->hold_next++);
        req_lockd_acquire(&h->conns[i], 0);
        if (conn_send(h, &h->conns[i], bench_now_ns()) != 0)
            die("send");
    }
    while (h->inflight > 0)
        worker_poll(h, 100);
    o.sc = SC_CONTENDED;
    if (h->held != n) {
        fprintf(stderr, "loadgen: -S: %ld of %ld keys held\n", h->held, n);
        exit(1);
    }
    worker_init(p, 0, (int)n);
    if (park_waiters(p, n, 1, true) != n) {
        fprintf(stderr, "loadgen: -S: could not open %ld waiters\n", n);
        exit(1);
    }
    reg = waiters_parked(p, n);
    if (reg >= 0 && reg < n) {
        fprintf(stderr, "loadgen: -S: %ld of %ld waiters parked\n", reg, n);
        exit(1);
    }
}

static void run_waiters(void)
{
    struct worker w;
    struct worker h; /* the holder */
    long long before;
    long long after;
    long reg = -1;
    uint64_t t0;
    long opened = 0;
    long long nofile = bench_raise_nofile();

    if (nofile < o.waiters + 64) {
        fprintf(stderr, "loadgen: RLIMIT_NOFILE %lld is too low for %ld "
                        "waiters\n", nofile, o.waiters);
        exit(1);
    }
    worker_init(&h, 0, o.clients > 0 ? o.clients : 1);
    worker_connect_all(&h);
    warm_pairs(&h, o.warmup);
    /* the holder: client 0 takes the key for longer than the test */
    make_key(&h.conns[0], 0);
    o.sc = SC_HOLD;
    o.keys = 1;
    h.hold_next = 1;
    req_lockd_acquire(&h.conns[0], 0);
    if (conn_send(&h, &h.conns[0], bench_now_ns()) != 0)
        die("send");
    while (h.inflight > 0)
        worker_poll(&h, 100);
    o.sc = SC_WAITERS;
    if (h.held != 1) {
        fprintf(stderr, "loadgen: the holder did not get the key\n");
        exit(1);
    }
    settle();
    before = o.pid ? bench_rss_bytes(o.pid) : -1;

    worker_init(&w, 0, (int)o.waiters);
    t0 = bench_now_ns();
    opened = park_waiters(&w, o.waiters, 0, false);
    reg = waiters_parked(&w, o.waiters);
    settle();
    after = o.pid ? bench_rss_bytes(o.pid) : -1;
    printf("{\"scenario\":\"waiters\",\"kept_alive\":%s,\"proto\":\"%s\",\"waiters\":%ld,"
           "\"opened\":%ld,\"registered\":%ld,\"seconds\":%.3f,"
           "\"rss_before\":%lld,\"rss_after\":%lld,\"rss_bytes\":%lld,"
           "\"bytes_per_waiter\":%.1f,",
           o.kept_alive ? "true" : "false", proto_name(), o.waiters, opened, reg,
           (double)(bench_now_ns() - t0) / 1e9, before, after, after,
           opened ? (double)(after - before) / (double)opened : 0);
    print_errors(&w);
    printf("}\n");
    worker_close_all(&w);
    worker_close_all(&h);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: loadgen [-H host] [-p port] [-P lockd|etcd]\n"
            "  [-s pairs|contended|hold|waiters] [-c clients] [-t threads]\n"
            "  [-d seconds] [-W warmup-seconds] [-x key-prefix]\n"
            "  [-u path-prefix] [-T ttl-ms] [-w wait-ms] [-k keys]\n"
            "  [-n waiters] [-r server-pid] [-h hold-us] [-B (no body)]\n"
            "  [-m EXTRA (lockd: more acquire body fields, e.g. \"mode\":\"shared\")]\n"
            "  [-M keys (pairs: that many keys at once on /locks, 1..16)]\n"
            "  [-S n (contended: n other keys held, a waiter on each)]\n"
            "  [-K (waiters: each connection has had one answer first)]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int ch;

    while ((ch = getopt(argc, argv, "H:p:P:s:c:t:d:W:x:u:T:w:k:n:r:h:Bm:M:S:K")) != -1) {
        switch (ch) {
        case 'H':
            o.host = optarg;
            break;
        case 'p':
            o.port = (int)strtol(optarg, NULL, 10);
            break;
        case 'P':
            if (strcmp(optarg, "etcd") == 0)
                o.proto = PROTO_ETCD;
            else if (strcmp(optarg, "lockd") == 0)
                o.proto = PROTO_LOCKD;
            else
                usage();
            break;
        case 's':
            if (strcmp(optarg, "pairs") == 0)
                o.sc = SC_PAIRS;
            else if (strcmp(optarg, "contended") == 0)
                o.sc = SC_CONTENDED;
            else if (strcmp(optarg, "hold") == 0)
                o.sc = SC_HOLD;
            else if (strcmp(optarg, "waiters") == 0)
                o.sc = SC_WAITERS;
            else
                usage();
            break;
        case 'c':
            o.clients = (int)strtol(optarg, NULL, 10);
            break;
        case 't':
            o.threads = (int)strtol(optarg, NULL, 10);
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
        case 'u':
            o.path = optarg;
            break;
        case 'T':
            o.ttl_ms = strtol(optarg, NULL, 10);
            break;
        case 'w':
            o.wait_ms = strtol(optarg, NULL, 10);
            break;
        case 'k':
            o.keys = strtol(optarg, NULL, 10);
            break;
        case 'n':
            o.waiters = strtol(optarg, NULL, 10);
            break;
        case 'r':
            o.pid = (int)strtol(optarg, NULL, 10);
            break;
        case 'h':
            o.hold_us = strtol(optarg, NULL, 10);
            break;
        case 'B':
            o.no_body = true;
            break;
        case 'm':
            if (strlen(optarg) > 100)
                usage();
            o.extra = optarg;
            break;
        case 'K':
            o.kept_alive = true;
            break;
        case 'S':
            o.spread = strtol(optarg, NULL, 10);
            if (o.spread < 0 || o.spread > 1000000)
                usage();
            break;
        case 'M':
            o.multi = (int)strtol(optarg, NULL, 10);
            if (o.multi < 1 || o.multi > MULTI_MAX)
                usage();
            break;
        default:
            usage();
        }
    }
    if (o.clients < 1 || o.seconds <= 0 || o.port <= 0 || o.port > 65535)
        usage();
    if (o.proto == PROTO_ETCD && o.sc != SC_PAIRS) {
        fprintf(stderr, "loadgen: etcd supports the pairs scenario only\n");
        return 2;
    }
    if (o.multi > 0 && (o.proto != PROTO_LOCKD || o.sc != SC_PAIRS)) {
        fprintf(stderr, "loadgen: -M is for lockd's pairs scenario only\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    memset(&srv_addr, 0, sizeof srv_addr);
    srv_addr.sin_family = AF_INET;
    srv_addr.sin_port = htons((uint16_t)o.port);
    if (inet_pton(AF_INET, o.host, &srv_addr.sin_addr) != 1) {
        fprintf(stderr, "loadgen: host must be an IPv4 address\n");
        return 2;
    }
    bench_raise_nofile();
    switch (o.sc) {
    case SC_PAIRS:
    case SC_CONTENDED:
        run_pairs();
        break;
    case SC_HOLD:
        run_hold();
        break;
    case SC_WAITERS:
        run_waiters();
        break;
    }
    fflush(stdout);
    return 0;
}

/*
 * service/conntrack.c - the connection table, the per-address counts and
 * the reaper thread (see conntrack.h).
 *
 * Each connection's phase is one atomic word, (since_us << 3) | phase,
 * changed by its libmicrohttpd thread (a request begins, arrives, ends) and
 * by the reaper (an idle connection got bytes, a request ran out of time).
 * The reaper only acts through a compare-and-swap from the word it read, so
 * a request that arrives as it runs out of time is either cut or served,
 * never cut after it was marked arrived. The table (the list and the
 * address counts) sits under ct->mu; the reaper holds mu while it touches a
 * socket, and libmicrohttpd's CLOSED notification, which comes before it
 * closes the socket, takes mu to unlink it: a socket is never shut down
 * after libmicrohttpd let go of it.
 *
 * An idle kept-alive connection is not timed: libmicrohttpd's 60 s idle
 * timeout covers it. To tell when the next request begins, the reaper
 * compares the socket's received byte count (TCP_INFO) with the one it saw
 * when the connection went idle, once per probe period.
 *
 * The words' times and the reaper's "now" come from the coarse monotonic
 * clock (clock_coarse_us): three stamps per request at a tenth of a clock
 * read each, and a grain (a scheduler tick) finer than the reaper's
 * period (TICK_MIN_US at least).
 */
#include "service/conntrack.h"

#include <errno.h>
#include <linux/tcp.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/text.h"
#include "service/tls.h"

#define ADDR_BUCKETS 4096
#define TICK_MAX_US  250000   /* the reaper's period, at most */
#define TICK_MIN_US  10000    /* and at least */
#define PROBE_MAX_US 1000000  /* idle connections are looked at this often */
#define REPORT_US    10000000 /* cuts and refusals are logged this often */
#define TRIM_DROP    CONNTRACK_TRIM_DROP
#define TRIM_US      CONNTRACK_TRIM_US

enum phase {
    PH_ARRIVING = 0, /* since: when the request began */
    PH_SERVING,      /* arrived: being answered or parked */
    PH_IDLE,         /* since: when it went idle; seen not read yet */
    PH_IDLE_SEEN,    /* idle, seen holds the received byte count */
    PH_CUT,          /* the reaper shut it down */
    PH_REFUSED,      /* over its address's cap: shut down at its start */
};

#define PH_BITS 3
#define PH_MASK ((uint64_t)7)

struct addr_count {
    struct addr_count *next; /* in its bucket */
    unsigned n;              /* connections open from it */
    uint8_t len;             /* 4 or 16 */
    uint8_t a[16];
};

struct conn {
    struct conn *prev, *next; /* in ct->conns, under ct->mu */
    struct conntrack *ct;
    int fd;                  /* libmicrohttpd's; valid while linked */
    _Atomic uint64_t word;   /* (since_us << PH_BITS) | phase */
    uint64_t seen;           /* reaper only: bytes received when idle */
    struct addr_count *addr; /* under ct->mu; NULL if not counted */
    struct tls_conn *tls;    /* the connection's thread only; owned */
    bool limited; /* over its address's cap on a TLS listener: its first
                     request is answered 429 (set before MHD sees it) */
};

struct conntrack {
    int64_t timeout_us; /* 0: no bound */
    int64_t tick_us, probe_us;
    unsigned max_per_ip; /* 0: no cap */
    bool tls;            /* the listener speaks TLS */
    uint64_t salt;       /* for the ids of 429s */
    _Atomic uint64_t refused, cut, next_id;
    _Atomic uint64_t open; /* tracked connections (lockd_http_connections) */

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* stop */
    bool stop;
    struct conn *conns; /* every tracked connection */
    struct addr_count *buckets[ADDR_BUCKETS];
    pthread_t reaper;
};

static uint64_t word(int64_t since_us, enum phase ph)
{
    return ((uint64_t)since_us << PH_BITS) | (uint64_t)ph;
}

static enum phase phase_of(uint64_t w)
{
    return (enum phase)(w & PH_MASK);
}

static int64_t since_of(uint64_t w)
{
    return (int64_t)(w >> PH_BITS);
}

/* The client address as a key: IPv4 (also IPv4-mapped IPv6) in 4 bytes,
 * IPv6 in 16; 0 if neither. */
static uint8_t addr_key(const struct sockaddr *sa, uint8_t out[16])
{
    static const uint8_t mapped[12] = {
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
    };

    if (sa == NULL)
        return 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        memcpy(out, &in->sin_addr, 4);
        return 4;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (memcmp(in6->sin6_addr.s6_addr, mapped, 12) == 0) {
            memcpy(out, in6->sin6_addr.s6_addr + 12, 4);
            return 4;
        }
        memcpy(out, in6->sin6_addr.s6_addr, 16);
        return 16;
    }
    return 0;
}

static size_t addr_hash(const uint8_t *a, uint8_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (uint8_t i = 0; i < len; i++)
        h = (h ^ a[i]) * 1099511628211ULL;
    return (size_t)(h % ADDR_BUCKETS);
}

/* Count one more connection from a (under mu); NULL if out of memory. */
static struct addr_count *
addr_add(struct conntrack *ct, const uint8_t *a, uint8_t len)
{
    size_t b = addr_hash(a, len);
    struct addr_count *e;

    for (e = ct->buckets[b]; e != NULL; e = e->next)
        if (e->len == len && memcmp(e->a, a, len) == 0)
            break;
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL)
            return NULL;
        e->len = len;
        memcpy(e->a, a, len);
        e->next = ct->buckets[b];
        ct->buckets[b] = e;
    }
    e->n++;
    return e;
}

/* One connection fewer from e's address (under mu). */
static void addr_del(struct conntrack *ct, struct addr_count *e)
{
    struct addr_count **p;

    if (--e->n > 0)
        return;
    for (p = &ct->buckets[addr_hash(e->a, e->len)]; *p != NULL; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    free(e);
}

/* Best effort, before the request is read: the client may not be reading
 * yet, and a socket buffer takes a few hundred bytes without blocking. */
static void send_429(struct conntrack *ct, int fd)
{
    static const char body[] =
        "{\"error\":{\"code\":\"too_many_requests\",\"message\":\"too many "
        "open connections from this address "
        "(--max-connections-per-ip)\"}}";
    uint64_t n =
        atomic_fetch_add_explicit(&ct->next_id, 1, memory_order_relaxed);
    char buf[512];
    int len;

    len = snprintf(buf, sizeof(buf),
                   "HTTP/1.1 429 Too Many Requests\r\n"
                   "Connection: close\r\n"
                   "Content-Type: application/json\r\n"
                   "Content-Length: %zu\r\n"
                   "Retry-After: 1\r\n"
                   "Cache-Control: no-store\r\n"
                   "X-Request-Id: %016llx\r\n"
                   "\r\n%s",
                   sizeof(body) - 1, (unsigned long long)(n ^ ct->salt), body);
    if (len > 0 && (size_t)len < sizeof(buf))
        (void)send(fd, buf, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void on_started(struct conntrack *ct,
                       struct MHD_Connection *mc,
                       void **socket_context)
{
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    struct conn *c;
    uint8_t a[16], alen;
    bool refuse = false;

    *socket_context = NULL;
    if (fi == NULL)
        return; /* cannot happen: libmicrohttpd gave it a socket */
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        /* untracked, it could not be timed: refuse it */
        shutdown(fi->connect_fd, SHUT_RDWR);
        return;
    }
    c->ct = ct;
    c->fd = fi->connect_fd;
    alen = ai != NULL ? addr_key(ai->client_addr, a) : 0;

    pthread_mutex_lock(&ct->mu);
    if (alen > 0) {
        c->addr = addr_add(ct, a, alen);
        refuse = c->addr == NULL ||
                 (ct->max_per_ip > 0 && c->addr->n > ct->max_per_ip);
    }
    /* no plain HTTP can be written before a TLS handshake: the request
     * that follows it is answered 429 instead (timed as any other) */
    c->limited = refuse && ct->tls;
    if (c->limited)
        refuse = false;
    atomic_store_explicit(
        &c->word, word(clock_coarse_us(), refuse ? PH_REFUSED : PH_ARRIVING),
        memory_order_relaxed);
    c->next = ct->conns;
    if (ct->conns != NULL)
        ct->conns->prev = c;
    ct->conns = c;
    pthread_mutex_unlock(&ct->mu);
    *socket_context = c;
    /* counted while tracked: from here until on_closed() unlinks it */
    atomic_fetch_add_explicit(&ct->open, 1, memory_order_relaxed);
    metrics_http_connections_add(1);

    if (c->limited) {
        atomic_fetch_add_explicit(&ct->refused, 1, memory_order_relaxed);
        metrics_http_limited(METRICS_LIMIT_CONNECTIONS);
    }
    if (refuse) {
        /* libmicrohttpd reads the end of the stream (or the request, which
         * conntrack_request_begins() refuses) and closes it */
        atomic_fetch_add_explicit(&ct->refused, 1, memory_order_relaxed);
        metrics_http_limited(METRICS_LIMIT_CONNECTIONS);
        send_429(ct, c->fd);
        shutdown(c->fd, SHUT_RDWR);
    }
}

static void on_closed(struct conntrack *ct, void **socket_context)
{
    struct conn *c = *socket_context;

    if (c == NULL)
        return;
    *socket_context = NULL;
    pthread_mutex_lock(&ct->mu);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        ct->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    if (c->addr != NULL)
        addr_del(ct, c->addr);
    pthread_mutex_unlock(&ct->mu);
    tls_conn_free(c->tls);
    free(c);
    atomic_fetch_sub_explicit(&ct->open, 1, memory_order_relaxed);
    metrics_http_connections_add(-1);
}

uint64_t conntrack_open_count(struct conntrack *ct)
{
    return ct != NULL ? atomic_load_explicit(&ct->open, memory_order_relaxed)
                      : 0;
}

void conntrack_notify(void *cls,
                      struct MHD_Connection *conn,
                      void **socket_context,
                      enum MHD_ConnectionNotificationCode toe)
{
    struct conntrack *ct = cls;

    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        on_started(ct, conn, socket_context);
    else if (toe == MHD_CONNECTION_NOTIFY_CLOSED)
        on_closed(ct, socket_context);
}

static struct conn *conn_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci != NULL ? ci->socket_context : NULL;
}

struct tls_conn **conntrack_tls_slot(struct MHD_Connection *mc)
{
    struct conn *c = conn_of(mc);

    return c != NULL ? &c->tls : NULL;
}

enum conntrack_begin conntrack_request_begins(struct MHD_Connection *mc)
{
    struct conn *c = conn_of(mc);
    uint64_t w;

    if (c == NULL)
        return CONNTRACK_CLOSE; /* refused at its start */
    w = atomic_load(&c->word);
    switch (phase_of(w)) {
    case PH_CUT:
    case PH_REFUSED:
        return CONNTRACK_CLOSE;
    case PH_IDLE:
    case PH_IDLE_SEEN:
        /* its headers came before the reaper noticed: time it from now
         * (a failed swap means the reaper just did) */
        atomic_compare_exchange_strong(&c->word, &w,
                                       word(clock_coarse_us(), PH_ARRIVING));
        return c->limited ? CONNTRACK_LIMITED : CONNTRACK_GO;
    default:
        return c->limited ? CONNTRACK_LIMITED : CONNTRACK_GO;
    }
}

/* Set phase ph unless the connection was cut or refused: only the reaper
 * changes the word meanwhile, and only to cut it. */
static void set_phase(struct MHD_Connection *mc, enum phase ph)
{
    struct conn *c = conn_of(mc);
    uint64_t w;

    if (c == NULL)
        return;
    w = atomic_load(&c->word);
    if (phase_of(w) == PH_CUT || phase_of(w) == PH_REFUSED)
        return;
    atomic_compare_exchange_strong(&c->word, &w, word(clock_coarse_us(), ph));
}

void conntrack_request_arrived(struct MHD_Connection *mc)
{
    set_phase(mc, PH_SERVING);
}

void conntrack_request_done(struct MHD_Connection *mc)
{
    set_phase(mc, PH_IDLE);
}

/* The bytes the socket has received so far; -1 if the kernel cannot say. */
static int bytes_received(int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) +
                  sizeof(ti.tcpi_bytes_received))
        return -1;
    *out = ti.tcpi_bytes_received;
    return 0;
}

/* One look at one connection (under mu). */
static void
reap_one(struct conntrack *ct, struct conn *c, int64_t now, bool probe)
{
    uint64_t w = atomic_load(&c->word), b = 0;

    switch (phase_of(w)) {
    case PH_ARRIVING:
        if (ct->timeout_us > 0 && now - since_of(w) >= ct->timeout_us &&
            atomic_compare_exchange_strong(&c->word, &w, word(now, PH_CUT))) {
            shutdown(c->fd, SHUT_RDWR);
            atomic_fetch_add_explicit(&ct->cut, 1, memory_order_relaxed);
        }
        break;
    case PH_IDLE:
        if (!probe)
            break;
        if (bytes_received(c->fd, &b) == 0) {
            c->seen = b;
            atomic_compare_exchange_strong(&c->word, &w,
                                           word(since_of(w), PH_IDLE_SEEN));
        } else { /* cannot tell idle from slow: time it from here */
            atomic_compare_exchange_strong(&c->word, &w,
                                           word(now, PH_ARRIVING));
        }
        break;
    case PH_IDLE_SEEN:
        if (probe && (bytes_received(c->fd, &b) != 0 || b != c->seen))
            atomic_compare_exchange_strong(&c->word, &w,
                                           word(now, PH_ARRIVING));
        break;
    default:
        break;
    }
}

static void report(struct conntrack *ct, uint64_t *cut, uint64_t *refused)
{
    uint64_t nc = atomic_load_explicit(&ct->cut, memory_order_relaxed);
    uint64_t nr = atomic_load_explicit(&ct->refused, memory_order_relaxed);

    if (nc != *cut)
        log_warn("closed %llu connections whose request did not arrive "
                 "within --request-timeout-ms %lld",
                 (unsigned long long)(nc - *cut),
                 (long long)(ct->timeout_us / 1000));
    if (nr != *refused)
        log_warn("refused %llu connections over --max-connections-per-ip "
                 "%u (429)",
                 (unsigned long long)(nr - *refused), ct->max_per_ip);
    *cut = nc;
    *refused = nr;
}

/*
 * After a wave of connections is gone (thousands of waiters that hung up
 * at once, say), give the memory they used back to the system. It is free
 * in malloc's lists already, but glibc keeps it (a heap shrinks only from
 * its top), and a later wave, whose allocations fall elsewhere, made the
 * resident size climb wave after wave: 40, 65, 86 MiB after three waves of
 * 5,000 waiters, 8 MiB after malloc_trim().
 *
 * While connections keep closing, a trim at most once per TRIM_US, for
 * TRIM_DROP gone since the last one; once the count holds still for a
 * tick, one more for whatever closed after it, if the wave since the count
 * last settled lost TRIM_DROP. Without that last one, a wave that ended
 * within TRIM_US of a trim kept what closed after it: 24 MiB after the
 * second of three waves of 10,000, against 9 after the others.
 */
bool conntrack_trim_due(struct conntrack_trim *t, uint64_t open, int64_t now)
{
    bool settled = open == t->last_open;
    uint64_t gone;

    t->last_open = open;
    if (open > t->wave_peak)
        t->wave_peak = open;
    if (open > t->trim_peak)
        t->trim_peak = open;
    gone = t->trim_peak - open; /* since the last trim */
    if (settled) {
        bool due =
            gone > 0 && (gone >= TRIM_DROP || t->wave_peak - open >= TRIM_DROP);

        t->wave_peak = open; /* the next wave starts here */
        if (!due)
            return false;
    } else if (gone < TRIM_DROP || now - t->last_us < TRIM_US) {
        return false;
    }
    t->trim_peak = open;
    t->last_us = now;
    return true;
}

/* Called with ct->mu held; drops it around the trim. */
static void
trim_after_drop(struct conntrack *ct, struct conntrack_trim *t, int64_t now)
{
    uint64_t open = atomic_load_explicit(&ct->open, memory_order_relaxed);

    if (!conntrack_trim_due(t, open, now))
        return;
#ifdef __GLIBC__
    pthread_mutex_unlock(&ct->mu);
    malloc_trim(0);
    pthread_mutex_lock(&ct->mu);
#endif
}

static void *reaper_main(void *arg)
{
    struct conntrack *ct = arg;
    int64_t next_probe = 0, next_report = clock_coarse_us() + REPORT_US;
    struct conntrack_trim trim = { 0 };
    uint64_t cut = 0, refused = 0;

    pthread_mutex_lock(&ct->mu);
    while (!ct->stop) {
        int64_t now = clock_coarse_us(), wake;
        bool probe = ct->timeout_us > 0 && now >= next_probe;
        struct timespec ts;

        if (ct->timeout_us > 0)
            for (struct conn *c = ct->conns; c != NULL; c = c->next)
                reap_one(ct, c, now, probe);
        if (probe)
            next_probe = now + ct->probe_us;
        if (now >= next_report) {
            report(ct, &cut, &refused);
            next_report = now + REPORT_US;
        }
        trim_after_drop(ct, &trim, now);
        /* the condition variable uses CLOCK_MONOTONIC (conntrack_new) */
        wake = clock_mono_us() + ct->tick_us;
        ts.tv_sec = (time_t)(wake / 1000000);
        ts.tv_nsec = (long)(wake % 1000000) * 1000;
        pthread_cond_timedwait(&ct->cv, &ct->mu, &ts);
    }
    pthread_mutex_unlock(&ct->mu);
    report(ct, &cut, &refused);
    return NULL;
}

struct conntrack *
conntrack_new(uint64_t request_timeout_ms, unsigned max_per_ip, bool tls)
{
    struct conntrack *ct = calloc(1, sizeof(*ct));
    pthread_condattr_t ca;
    int err;

    if (ct == NULL)
        return NULL;
    ct->timeout_us = (int64_t)request_timeout_ms * 1000;
    ct->max_per_ip = max_per_ip;
    ct->tls = tls;
    ct->tick_us = ct->timeout_us / 20;
    if (ct->tick_us > TICK_MAX_US || ct->tick_us == 0)
        ct->tick_us = TICK_MAX_US;
    if (ct->tick_us < TICK_MIN_US)
        ct->tick_us = TICK_MIN_US;
    ct->probe_us = ct->timeout_us / 4;
    if (ct->probe_us > PROBE_MAX_US)
        ct->probe_us = PROBE_MAX_US;
    if (ct->probe_us < ct->tick_us)
        ct->probe_us = ct->tick_us;
    ct->salt = (uint64_t)clock_mono_us() * 0xc2b2ae3d27d4eb4fULL;
    pthread_mutex_init(&ct->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ct->cv, &ca);
    pthread_condattr_destroy(&ca);
    err = pthread_create(&ct->reaper, NULL, reaper_main, ct);
    if (err != 0) {
        pthread_cond_destroy(&ct->cv);
        pthread_mutex_destroy(&ct->mu);
        free(ct);
        errno = err;
        return NULL;
    }
    return ct;
}

void conntrack_free(struct conntrack *ct)
{
    if (ct == NULL)
        return;
    pthread_mutex_lock(&ct->mu);
    ct->stop = true;
    pthread_cond_signal(&ct->cv);
    pthread_mutex_unlock(&ct->mu);
    pthread_join(ct->reaper, NULL);
    /* libmicrohttpd is stopped: every connection was unlinked, but free
     * what an interrupted start may have left */
    while (ct->conns != NULL) {
        struct conn *c = ct->conns;
        ct->conns = c->next;
        tls_conn_free(c->tls);
        free(c);
        metrics_http_connections_add(-1);
    }
    for (size_t b = 0; b < ADDR_BUCKETS; b++)
        while (ct->buckets[b] != NULL) {
            struct addr_count *e = ct->buckets[b];
            ct->buckets[b] = e->next;
            free(e);
        }
    pthread_cond_destroy(&ct->cv);
    pthread_mutex_destroy(&ct->mu);
    free(ct);
}

void conntrack_format_peer(const struct sockaddr *sa, char *buf, size_t cap)
{
    char host[NI_MAXHOST], port[NI_MAXSERV];
    socklen_t len;

    buf[0] = '\0';
    if (sa->sa_family == AF_INET && cap >= sizeof("255.255.255.255:65535")) {
        /* by hand: getnameinfo and printf were 3 % of a request's CPU */
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        const unsigned char *a = (const unsigned char *)&in->sin_addr;
        char *p = buf + text_put_ipv4(buf, a);
        *p++ = ':';
        p += text_put_u64(p, ntohs(in->sin_port));
        *p = '\0';
        return;
    }
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
        return;
    len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                    : sizeof(struct sockaddr_in);
    if (getnameinfo(sa, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return;
    if (snprintf(buf, cap, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s",
                 host, port) >= (int)cap)
        buf[0] = '\0';
}

void conntrack_peer_name(struct MHD_Connection *conn, char *buf, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

    buf[0] = '\0';
    if (ci != NULL && ci->client_addr != NULL)
        conntrack_format_peer(ci->client_addr, buf, cap);
}

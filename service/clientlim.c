/*
 * service/clientlim.c - per-client counts of requests that may wait (see
 * clientlim.h): a chained hash table of entries, one per client with a
 * slot taken, under one mutex held only for a lookup and a count. The
 * lockd_http_client_waiters and lockd_http_waiting_clients gauges are set
 * under that mutex, so they always agree with the table.
 */
#include "service/clientlim.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/metrics.h"
#include "lib/text.h"

#define BUCKETS 4096 /* a power of two */

struct clientlim_entry {
    struct clientlim_entry *next; /* in its bucket */
    unsigned n;                   /* slots taken, > 0 while linked */
    size_t hash;
    size_t len;
    char key[]; /* len bytes, not NUL-terminated */
};

struct clientlim {
    unsigned cap;       /* per client, unless its credential says */
    pthread_mutex_t mu; /* guards everything below */
    uint64_t slots;     /* sum of the entries' n */
    uint64_t clients;   /* entries linked */
    struct clientlim_entry *buckets[BUCKETS];
};

static size_t key_hash(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return (size_t)h;
}

struct clientlim *clientlim_new(unsigned max_waiters, unsigned max_connections)
{
    struct clientlim *cl = calloc(1, sizeof(*cl));

    if (cl == NULL)
        return NULL;
    /* auto: a quarter of the connections, so one client (one address
     * without auth) cannot park them all */
    cl->cap = max_waiters > 0        ? max_waiters
              : max_connections >= 4 ? max_connections / 4
                                     : 1;
    if (pthread_mutex_init(&cl->mu, NULL) != 0) {
        free(cl);
        return NULL;
    }
    return cl;
}

void clientlim_free(struct clientlim *cl)
{
    if (cl == NULL)
        return;
    for (size_t b = 0; b < BUCKETS; b++)
        while (cl->buckets[b] != NULL) {
            struct clientlim_entry *e = cl->buckets[b];
            cl->buckets[b] = e->next;
            free(e);
        }
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

size_t clientlim_key(const char *credential, const char *addr, char *out)
{
    bool named = credential != NULL && credential[0] != '\0';
    int n = snprintf(out, CLIENTLIM_KEY_MAX + 1, "%c:%s", named ? 'c' : 'a',
                     named          ? credential
                     : addr != NULL ? addr
                                    : "");

    if (n < 0)
        n = 0;
    /* truncated at worst: still one key per client for names and
     * addresses, which fit */
    return (size_t)n > CLIENTLIM_KEY_MAX ? CLIENTLIM_KEY_MAX : (size_t)n;
}

/* The gauges from the table's counts (under mu). */
static void do_publish(const struct clientlim *cl)
{
    metrics_client_waiters(cl->slots, cl->clients);
}

enum clientlim_result clientlim_take(struct clientlim *cl,
                                     const char *key,
                                     size_t len,
                                     unsigned cap,
                                     struct clientlim_entry **slot)
{
    size_t h = key_hash(key, len);
    struct clientlim_entry *e;
    enum clientlim_result res = CLIENTLIM_OK;

    *slot = NULL;
    if (cap == 0)
        cap = 1;
    pthread_mutex_lock(&cl->mu);
    for (e = cl->buckets[h % BUCKETS]; e != NULL; e = e->next)
        if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0)
            break;
    if (e == NULL) {
        e = malloc(sizeof(*e) + len);
        if (e == NULL) {
            res = CLIENTLIM_NO_MEMORY;
            goto out;
        }
        e->n = 0;
        e->hash = h;
        e->len = len;
        memcpy(e->key, key, len);
        e->next = cl->buckets[h % BUCKETS];
        cl->buckets[h % BUCKETS] = e;
        cl->clients++;
    } else if (e->n >= cap) {
        res = CLIENTLIM_FULL;
        goto out;
    }
    e->n++;
    cl->slots++;
    *slot = e;
    do_publish(cl);
out:
    pthread_mutex_unlock(&cl->mu);
    return res;
}

void clientlim_give(struct clientlim *cl, struct clientlim_entry *slot)
{
    struct clientlim_entry **p;

    if (slot == NULL)
        return;
    pthread_mutex_lock(&cl->mu);
    cl->slots--;
    if (--slot->n == 0) {
        for (p = &cl->buckets[slot->hash % BUCKETS]; *p != NULL;
             p = &(*p)->next)
            if (*p == slot) {
                *p = slot->next;
                break;
            }
        cl->clients--;
        free(slot);
    }
    do_publish(cl);
    pthread_mutex_unlock(&cl->mu);
}

enum clientlim_result clientlim_admit(struct clientlim *cl,
                                      const struct api_call *c,
                                      const char *addr,
                                      struct clientlim_entry **slot,
                                      char *msg,
                                      size_t msglen)
{
    unsigned cap = c->client_max_waiters > 0 ? c->client_max_waiters : cl->cap;
    char key[CLIENTLIM_KEY_MAX + 1];
    size_t len;
    enum clientlim_result res;

    *slot = NULL;
    if (c->reenter || c->wait_ms == 0)
        return CLIENTLIM_OK; /* never parked: never limited */
    len = clientlim_key(c->client, addr, key);
    res = clientlim_take(cl, key, len, cap, slot);
    if (res != CLIENTLIM_FULL)
        return res;
    metrics_http_limited(METRICS_LIMIT_WAITERS);
    snprintf(msg, msglen,
             "too many waiting lock requests from this client: %u, the "
             "most %s allows; retry when one ends",
             cap,
             c->client_max_waiters > 0 ? "its credential's max_waiters"
                                       : "--max-waiters-per-client");
    return res;
}

/* The IPv4 address at a in dotted decimal, NUL-terminated in buf. */
static const char *put_ipv4(const unsigned char *a, char *buf)
{
    buf[text_put_ipv4(buf, a)] = '\0';
    return buf;
}

const char *clientlim_addr(const struct sockaddr *sa, char *buf)
{
    const struct in6_addr *a6;

    if (sa == NULL)
        return NULL;
    if (sa->sa_family == AF_INET)
        return put_ipv4(
            (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr,
            buf);
    if (sa->sa_family != AF_INET6)
        return NULL;
    a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a6))
        return put_ipv4(a6->s6_addr + 12, buf);
    return inet_ntop(AF_INET6, a6, buf, INET6_ADDRSTRLEN);
}

void clientlim_counts(struct clientlim *cl, uint64_t *slots, uint64_t *clients)
{
    pthread_mutex_lock(&cl->mu);
    *slots = cl->slots;
    *clients = cl->clients;
    pthread_mutex_unlock(&cl->mu);
}

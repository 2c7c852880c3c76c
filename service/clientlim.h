/*
 * service/clientlim.h - the per-client cap on requests that may wait
 * (--max-waiters-per-client): how many lock requests with wait_ms > 0 each
 * client has in flight, counted in a hash table under one mutex. A client
 * is a credential's name when auth is on, else the peer's address; the
 * caller makes the key (clientlim_key()).
 *
 * A request takes a slot before its first store call and gives it back
 * once, whatever ends it. An entry lives while it holds a slot: the table
 * never holds more entries than requests in flight.
 */
#ifndef SERVICE_CLIENTLIM_H
#define SERVICE_CLIENTLIM_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "api/handlers.h"

#define CLIENTLIM_KEY_MAX 72 /* a kind byte, ':' and a name or address */

struct clientlim;
struct clientlim_entry; /* one client's count: a taken slot points here */

enum clientlim_result {
    CLIENTLIM_OK = 0,
    CLIENTLIM_FULL,      /* the client already has cap slots */
    CLIENTLIM_NO_MEMORY, /* a new client's entry could not be made */
};

/* An empty table whose cap per client is max_waiters, or with 0 (auto) a
 * quarter of max_connections (at least 1); NULL when out of memory. */
struct clientlim *clientlim_new(unsigned max_waiters, unsigned max_connections);

/* Frees the table and any entry left (after the last request: the server
 * stopped). Accepts NULL. */
void clientlim_free(struct clientlim *cl);

/* The key of a client into out (CLIENTLIM_KEY_MAX + 1 bytes): "c:name" for
 * a credential's name (non-empty), else "a:address" (addr may be NULL or
 * "": one shared entry for unknown peers). Names and addresses never meet,
 * even a credential named like an address. Returns its length. */
size_t clientlim_key(const char *credential, const char *addr, char *out);

/* One more slot for key (len bytes, copied) if it has fewer than cap (cap
 * 0 is treated as 1): CLIENTLIM_OK and *slot set, to be handed back with
 * clientlim_give() exactly once. Else *slot is NULL and nothing changed.
 * Any thread. */
enum clientlim_result clientlim_take(struct clientlim *cl,
                                     const char *key,
                                     size_t len,
                                     unsigned cap,
                                     struct clientlim_entry **slot);

/* Give back a slot from clientlim_take(); the entry goes when its count
 * reaches 0. Accepts NULL. Any thread. */
void clientlim_give(struct clientlim *cl, struct clientlim_entry *slot);

/* A slot for call c, from the client that sent it (c->client when auth
 * is on, else addr, the peer's address or NULL) if c may wait (wait_ms > 0,
 * not a re-entry); the cap is c->client_max_waiters when non-zero, else
 * the table's. CLIENTLIM_OK and *slot set (NULL when c cannot wait),
 * CLIENTLIM_FULL (counted in lockd_http_limited_total) and the 429's
 * message in msg (naming the cap and the flag or the credential's
 * max_waiters; msglen bytes), or CLIENTLIM_NO_MEMORY.
 * Any thread. */
enum clientlim_result clientlim_admit(struct clientlim *cl,
                                      const struct api_call *c,
                                      const char *addr,
                                      struct clientlim_entry **slot,
                                      char *msg,
                                      size_t msglen);

/* The IP address of sa as text into buf (INET6_ADDRSTRLEN bytes), an
 * IPv4-mapped IPv6 address as IPv4 (as --max-connections-per-ip counts
 * it): buf, or NULL if sa is NULL or neither IPv4 nor IPv6. */
const char *clientlim_addr(const struct sockaddr *sa, char *buf);

/* Slots taken and clients holding one, now (for the tests and metrics). */
void clientlim_counts(struct clientlim *cl, uint64_t *slots, uint64_t *clients);

#endif /* SERVICE_CLIENTLIM_H */

/*
 * service/conntrack.h - every open HTTP connection, tracked from
 * libmicrohttpd's connection notifications: a bound on the time a request
 * may take to arrive (--request-timeout-ms), which libmicrohttpd's idle
 * timeout is not, and a cap on the connections of one client address
 * (--max-connections-per-ip).
 *
 * A request is timed from the connection's start, or on a kept-alive
 * connection from the moment lockd sees the first byte of it, until it has
 * fully arrived (headers and body). Past the bound, a reaper thread shuts
 * the socket down (never closes it: libmicrohttpd owns it and closes it
 * after its CLOSED notification, which takes the same mutex). A request
 * that has arrived - being answered, or parked in the wait queue - is never
 * cut. A connection over its address's cap is answered 429
 * too_many_requests at once and shut down, before its request is read; on
 * a TLS listener, where nothing can be written before the handshake, its
 * first request is answered 429 by the server and the connection closed.
 *
 * It also counts the open connections, waiters and refused ones included
 * (each from its STARTED to its CLOSED notification): conntrack_open_count()
 * and the lockd_http_connections gauge of lib/metrics.h.
 */
#ifndef SERVICE_CONNTRACK_H
#define SERVICE_CONNTRACK_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

struct conntrack;

/* request_timeout_ms 0: no bound; max_per_ip 0: no cap; tls: the listener
 * speaks TLS. NULL on failure (errno set). Starts the reaper thread. */
struct conntrack *
conntrack_new(uint64_t request_timeout_ms, unsigned max_per_ip, bool tls);

/* After MHD_stop_daemon(): joins the reaper and frees. Accepts NULL. */
void conntrack_free(struct conntrack *ct);

/* MHD_OPTION_NOTIFY_CONNECTION's callback, cls = the conntrack. */
void conntrack_notify(void *cls,
                      struct MHD_Connection *conn,
                      void **socket_context,
                      enum MHD_ConnectionNotificationCode toe);

enum conntrack_begin {
    CONNTRACK_GO = 0,  /* serve the request */
    CONNTRACK_CLOSE,   /* refused or cut: answer MHD_NO */
    CONNTRACK_LIMITED, /* over its address's cap on a TLS listener: answer
                          429 and close */
};

/* The access handler's first call for a request (its headers are in). */
enum conntrack_begin conntrack_request_begins(struct MHD_Connection *conn);

/* The request has fully arrived (headers and body): no longer timed. */
void conntrack_request_arrived(struct MHD_Connection *conn);

/* The request is over: the connection is idle until the next request. */
void conntrack_request_done(struct MHD_Connection *conn);

struct tls_conn;

/* The slot for the connection's TLS state (service/tls.c's; freed with
 * tls_conn_free() when the connection closes); NULL if the connection is
 * not tracked. Only the connection's thread may use it. */
struct tls_conn **conntrack_tls_slot(struct MHD_Connection *conn);

/* The connections open now (tracked: STARTED seen, CLOSED not yet). Any
 * thread; 0 for NULL. */
uint64_t conntrack_open_count(struct conntrack *ct);

/* The peer's "ip:port" ("[ip]:port" for IPv6) into buf (cap bytes); ""
 * if unknown. X-Forwarded-For is not trusted: this is the socket's peer. */
void conntrack_peer_name(struct MHD_Connection *conn, char *buf, size_t cap);
/* The same of a socket address; "" for a family other than IPv4 and 6. */
void conntrack_format_peer(const struct sockaddr *sa, char *buf, size_t cap);

/* When the reaper gives freed memory back (malloc_trim) after connections
 * closed: its state, zeroed at the start, and the decision for one tick
 * (open: connections open now; now in us). */
#define CONNTRACK_TRIM_DROP 1024    /* connections gone: worth a trim */
#define CONNTRACK_TRIM_US   1000000 /* while they keep going, this apart */
struct conntrack_trim {
    uint64_t last_open; /* at the tick before */
    uint64_t wave_peak; /* the most open since the count last settled */
    uint64_t trim_peak; /* the most open since the last trim */
    int64_t last_us;    /* the last trim */
};
bool conntrack_trim_due(struct conntrack_trim *t, uint64_t open, int64_t now);

#endif /* SERVICE_CONNTRACK_H */

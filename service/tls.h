/*
 * service/tls.h - HTTPS on lockd's one listener (--tls-cert, --tls-key)
 * and client certificates (--tls-client-ca), with GnuTLS under
 * libmicrohttpd.
 *
 * The certificate, its key and the client CA bundle are one set, read at
 * start and again on SIGHUP (tls_reload()). libmicrohttpd asks for the
 * server certificate through a callback at every handshake, which hands
 * out the set in force then: a reload never touches an open connection,
 * and a set is freed once no connection that was given it is open.
 * Client certificates are verified here, not by libmicrohttpd, against
 * the set's CA, once per connection (again after a reload or once the
 * certificate expires).
 */
#ifndef SERVICE_TLS_H
#define SERVICE_TLS_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/codec.h"

/* TLS 1.2 and 1.3 only; AEAD ciphers (AES-GCM, ChaCha20-Poly1305) only;
 * key exchange by ECDHE only (forward secrecy; TLS 1.3's is (EC)DHE by
 * design); the server's order of preference. */
#define TLS_PRIORITIES                                                     \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:" \
    "+AES-128-GCM:+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:" \
    "+ECDHE-RSA:%SERVER_PRECEDENCE"

#define TLS_NAMES_MAX 16 /* a client certificate's names kept, at most */

struct tls;
struct tls_conn; /* one connection's state, kept by service/conntrack.c */

/*
 * Read the PEM files: cert (the server's certificate, then its chain),
 * key (its private key, unencrypted) and client_ca (NULL: no client
 * certificates asked for; else a bundle of CA certificates). NULL on
 * failure, with a message naming the file in err (never key material).
 * The paths are borrowed and must outlive the object. Only one may exist
 * at a time (libmicrohttpd's certificate callback has no argument).
 */
struct tls *tls_new(const char *cert,
                    const char *key,
                    const char *client_ca,
                    char *err,
                    size_t errlen);

/* After the server stopped. Accepts NULL. */
void tls_free(struct tls *t);

/*
 * Read the three files again (SIGHUP). 0: new handshakes get the new set,
 * what changed is said in msg; -1: the old set stays, why in msg (naming
 * the file). Any thread; not two at once.
 */
int tls_reload(struct tls *t, char *msg, size_t msglen);

/* Are client certificates asked for (--tls-client-ca)? */
bool tls_client_ca(const struct tls *t);

/*
 * libmicrohttpd's TLS options for t into o (at least 4 items, the last
 * MHD_OPTION_END), for MHD_OPTION_ARRAY, and the daemon flag they need:
 * MHD_USE_TLS (t NULL: plain HTTP, o empty, 0). What they point to lives
 * as long as t.
 */
unsigned tls_daemon_options(struct tls *t, struct MHD_OptionItem o[4]);

/*
 * Fill rq's tls_peer, tls_names, ntls_names and tls_error for a request on
 * conn: API_TLS_OFF without client certificates; else NO_CERT, VERIFIED
 * (names: subject CN, then DNS and URI SANs) or BAD_CERT (tls_error says
 * why). What rq points to stays valid until the connection closes. On the
 * connection's thread.
 */
void tls_request_peer(struct tls *t,
                      struct MHD_Connection *conn,
                      struct api_request *rq);

/* A connection closed: drop what it held. Accepts NULL. */
void tls_conn_free(struct tls_conn *c);

/*
 * For lockd --check-health: a TLS client on the connected socket fd
 * (host for SNI; the server's certificate is not verified: a local
 * liveness probe), send req (reqlen bytes), read up to cap - 1 bytes of
 * the answer into buf (NUL-terminated). The bytes read, or -1 with the
 * reason in err. The socket's own timeouts bound it.
 */
long tls_client_get(int fd,
                    const char *host,
                    const char *req,
                    size_t reqlen,
                    char *buf,
                    size_t cap,
                    char *err,
                    size_t errlen);

#endif /* SERVICE_TLS_H */

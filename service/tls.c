/*
 * service/tls.c - the TLS set (certificate chain, key, client CA) and its
 * reload, libmicrohttpd's certificate callback, the client certificate
 * check cached per connection, and the TLS client of --check-health.
 *
 * A set is reference-counted: struct tls holds one on the set in force,
 * and each connection one on the set its handshake was given (kept in its
 * struct tls_conn, which conntrack frees at the connection's close). The
 * callback's certificates and key are the set's own (GnuTLS neither copies
 * nor frees them), so a set lives while a connection may still use them.
 */
#include "service/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "service/conntrack.h"

#define CHAIN_MAX      16        /* certificates in a chain, at most */
#define FILE_MAX       (1 << 20) /* bytes of a PEM file, at most */
#define NAME_MAX_LEN   256       /* bytes of a certificate name kept */
#define BAD_RECHECK_S  10        /* a refused certificate is looked at again */
#define SUBJECT_LEN    256
#define SERIAL_HEX_LEN 41

struct tls_set {
    _Atomic unsigned refs;
    unsigned gen; /* 1, 2, ...: which reload made it */
    gnutls_pcert_st pcerts[CHAIN_MAX];
    unsigned npcerts;
    gnutls_privkey_t key;
    gnutls_x509_trust_list_t ca; /* NULL without --tls-client-ca */
    char subject[SUBJECT_LEN];   /* of the server certificate, for logs */
    char serial[SERIAL_HEX_LEN];
};

struct tls {
    const char *cert_path, *key_path, *ca_path;
    char *ca_pem; /* the start's CA bundle, for MHD_OPTION_HTTPS_MEM_TRUST */
    pthread_mutex_t mu; /* guards cur */
    struct tls_set *cur;
    _Atomic unsigned gen;
};

struct tls_conn {
    struct tls_set *served; /* ref: what this connection's handshake got */
    bool checked;
    unsigned gen; /* the set whose CA checked the client certificate */
    time_t until; /* check again from then on */
    enum api_tls_peer peer;
    const char *error; /* static text */
    char *names[TLS_NAMES_MAX];
    size_t nnames;
};

/* The one object, for the certificate callback (it has no argument). */
static struct tls *the_tls;

/* Read a whole file (at most FILE_MAX bytes) into *d, NUL-terminated;
 * -1 with the reason in err. */
static int read_file(const char *path, gnutls_datum_t *d, char *err, size_t n)
{
    struct stat st;
    ssize_t got;
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    d->data = NULL;
    d->size = 0;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, n, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > FILE_MAX) {
        snprintf(err, n, "%s: not a regular file of at most %d bytes", path,
                 FILE_MAX);
        close(fd);
        return -1;
    }
    d->data = malloc((size_t)st.st_size + 1);
    while (d->data != NULL && len < (size_t)st.st_size) {
        got = read(fd, d->data + len, (size_t)st.st_size - len);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    if (d->data == NULL || len != (size_t)st.st_size) {
        snprintf(err, n, "%s: cannot read it", path);
        free(d->data);
        d->data = NULL;
        return -1;
    }
    d->data[len] = '\0';
    d->size = (unsigned)len;
    return 0;
}

/* Free a file's bytes, wiped first (key material). */
static void drop_file(gnutls_datum_t *d)
{
    if (d->data != NULL) {
        gnutls_memset(d->data, 0, d->size);
        free(d->data);
    }
    d->data = NULL;
}

static void set_free(struct tls_set *s)
{
    if (s == NULL)
        return;
    for (unsigned i = 0; i < s->npcerts; i++)
        gnutls_pcert_deinit(&s->pcerts[i]);
    gnutls_privkey_deinit(s->key);
    if (s->ca != NULL)
        gnutls_x509_trust_list_deinit(s->ca, 1);
    free(s);
}

static void set_unref(struct tls_set *s)
{
    if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1)
        set_free(s);
}

/* The server certificate's subject and serial, for the logs. */
static void describe_cert(struct tls_set *s)
{
    gnutls_x509_crt_t crt;
    unsigned char serial[20];
    size_t slen = sizeof(serial), dlen = sizeof(s->subject);

    snprintf(s->subject, sizeof(s->subject), "?");
    s->serial[0] = '\0';
    if (gnutls_x509_crt_init(&crt) < 0)
        return;
    if (gnutls_x509_crt_import(crt, &s->pcerts[0].cert, GNUTLS_X509_FMT_DER) >=
        0) {
        if (gnutls_x509_crt_get_dn(crt, s->subject, &dlen) < 0)
            snprintf(s->subject, sizeof(s->subject), "?");
        if (gnutls_x509_crt_get_serial(crt, serial, &slen) >= 0)
            for (size_t i = 0; i < slen && 2 * i + 2 < sizeof(s->serial); i++)
                snprintf(s->serial + 2 * i, 3, "%02x", serial[i]);
    }
    gnutls_x509_crt_deinit(crt);
}

/* Does the key belong to the chain's first certificate? */
static bool key_matches(struct tls_set *s)
{
    gnutls_pubkey_t pub;
    unsigned char a[64], b[64];
    size_t alen = sizeof(a), blen = sizeof(b);
    bool ok = false;

    if (gnutls_pubkey_init(&pub) < 0)
        return false;
    if (gnutls_pubkey_import_privkey(pub, s->key, 0, 0) >= 0 &&
        gnutls_pubkey_get_key_id(pub, GNUTLS_KEYID_USE_SHA256, a, &alen) >= 0 &&
        gnutls_pubkey_get_key_id(s->pcerts[0].pubkey, GNUTLS_KEYID_USE_SHA256,
                                 b, &blen) >= 0)
        ok = alen == blen && memcmp(a, b, alen) == 0;
    gnutls_pubkey_deinit(pub);
    return ok;
}

static int load_chain(struct tls_set *s, const char *path, char *err, size_t n)
{
    gnutls_datum_t d;
    int rc;

    if (read_file(path, &d, err, n) != 0)
        return -1;
    s->npcerts = CHAIN_MAX;
    rc = gnutls_pcert_list_import_x509_raw(s->pcerts, &s->npcerts, &d,
                                           GNUTLS_X509_FMT_PEM, 0);
    free(d.data);
    if (rc < 0 || s->npcerts == 0) {
        s->npcerts = 0;
        snprintf(err, n, "%s: no PEM certificate chain in it (%s)", path,
                 gnutls_strerror(rc));
        return -1;
    }
    describe_cert(s);
    return 0;
}

static int load_key(struct tls_set *s, const char *path, char *err, size_t n)
{
    gnutls_datum_t d;
    int rc;

    if (read_file(path, &d, err, n) != 0)
        return -1;
    rc = gnutls_privkey_init(&s->key);
    if (rc >= 0)
        rc = gnutls_privkey_import_x509_raw(s->key, &d, GNUTLS_X509_FMT_PEM,
                                            NULL, 0);
    drop_file(&d);
    if (rc < 0) {
        snprintf(err, n, "%s: no unencrypted PEM private key in it (%s)", path,
                 gnutls_strerror(rc));
        return -1;
    }
    if (!key_matches(s)) {
        snprintf(err, n, "%s: the key does not match the certificate", path);
        return -1;
    }
    return 0;
}

static int load_ca(struct tls_set *s,
                   const gnutls_datum_t *pem,
                   const char *path,
                   char *err,
                   size_t n)
{
    int rc = gnutls_x509_trust_list_init(&s->ca, 0);

    if (rc >= 0)
        rc = gnutls_x509_trust_list_add_trust_mem(s->ca, pem, NULL,
                                                  GNUTLS_X509_FMT_PEM, 0, 0);
    if (rc <= 0) {
        snprintf(err, n, "%s: no PEM CA certificate in it%s%s%s", path,
                 rc < 0 ? " (" : "", rc < 0 ? gnutls_strerror(rc) : "",
                 rc < 0 ? ")" : "");
        return -1;
    }
    return 0;
}

/* A new set from the three files; NULL with err. ca_pem (may be NULL)
 * gets the CA bundle's text, owned by the caller. */
static struct tls_set *
set_load(const struct tls *t, char **ca_pem, char *err, size_t n)
{
    struct tls_set *s = calloc(1, sizeof(*s));
    gnutls_datum_t ca = { NULL, 0 };

    if (s == NULL) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    atomic_init(&s->refs, 1);
    if (load_chain(s, t->cert_path, err, n) != 0 ||
        load_key(s, t->key_path, err, n) != 0 ||
        (t->ca_path != NULL && (read_file(t->ca_path, &ca, err, n) != 0 ||
                                load_ca(s, &ca, t->ca_path, err, n) != 0))) {
        free(ca.data);
        set_free(s);
        return NULL;
    }
    if (ca_pem != NULL)
        *ca_pem = (char *)ca.data;
    else
        free(ca.data);
    return s;
}

struct tls *tls_new(const char *cert,
                    const char *key,
                    const char *client_ca,
                    char *err,
                    size_t errlen)
{
    struct tls *t;

    if (the_tls != NULL) {
        snprintf(err, errlen, "TLS is set up already");
        return NULL;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->cert_path = cert;
    t->key_path = key;
    t->ca_path = client_ca;
    t->cur = set_load(t, &t->ca_pem, err, errlen);
    if (t->cur == NULL) {
        free(t);
        return NULL;
    }
    t->cur->gen = 1;
    atomic_init(&t->gen, 1);
    pthread_mutex_init(&t->mu, NULL);
    the_tls = t;
    return t;
}

void tls_free(struct tls *t)
{
    if (t == NULL)
        return;
    if (the_tls == t)
        the_tls = NULL;
    set_unref(t->cur);
    free(t->ca_pem);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

bool tls_client_ca(const struct tls *t)
{
    return t != NULL && t->ca_path != NULL;
}

int tls_reload(struct tls *t, char *msg, size_t msglen)
{
    struct tls_set *s = set_load(t, NULL, msg, msglen), *old;

    if (s == NULL)
        return -1;
    s->gen = atomic_load(&t->gen) + 1;
    pthread_mutex_lock(&t->mu);
    old = t->cur;
    t->cur = s;
    atomic_store(&t->gen, s->gen);
    pthread_mutex_unlock(&t->mu);
    snprintf(msg, msglen,
             "TLS certificate from %s (subject %s, serial %s, was %s)%s%s",
             t->cert_path, s->subject, s->serial, old->serial,
             t->ca_path != NULL ? ", client CA from " : "",
             t->ca_path != NULL ? t->ca_path : "");
    set_unref(old); /* connections that were given it still hold it */
    return 0;
}

/* The set in force, with a reference for the caller. */
static struct tls_set *set_get(struct tls *t)
{
    struct tls_set *s;

    pthread_mutex_lock(&t->mu);
    s = t->cur;
    atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&t->mu);
    return s;
}

/* The connection's state, made on first use; NULL if it has no room
 * (untracked) or memory is out. */
static struct tls_conn *conn_state(struct MHD_Connection *conn)
{
    struct tls_conn **slot = conn != NULL ? conntrack_tls_slot(conn) : NULL;

    if (slot == NULL)
        return NULL;
    if (*slot == NULL)
        *slot = calloc(1, sizeof(**slot));
    return *slot;
}

/* gnutls_certificate_retrieve_function2: the set in force's chain and key
 * for a handshake. libmicrohttpd makes the session's pointer its
 * connection. */
static int retrieve_cert(gnutls_session_t session,
                         const gnutls_datum_t *req_ca_rdn,
                         int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos,
                         int pk_algos_length,
                         gnutls_pcert_st **pcert,
                         unsigned int *pcert_length,
                         gnutls_privkey_t *privkey)
{
    struct tls_conn *c;
    struct tls_set *s;

    (void)req_ca_rdn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    if (the_tls == NULL)
        return -1;
    /* no list of acceptable CAs in the certificate request: the list
     * libmicrohttpd set up is the start's CA, stale after a reload, and
     * a client that picks its certificate by that list (Go's) would send
     * none signed by a new CA. The certificate is chosen before the
     * request is written, so this is in time. */
    gnutls_certificate_send_x509_rdn_sequence(session, 1);
    s = set_get(the_tls);
    c = conn_state(gnutls_session_get_ptr(session));
    if (c != NULL) {
        set_unref(c->served); /* a second handshake on the connection */
        c->served = s;
    } /* else the reference is never dropped: the set stays until exit */
    *pcert = s->pcerts;
    *pcert_length = s->npcerts;
    *privkey = s->key;
    return 0;
}

unsigned tls_daemon_options(struct tls *t, struct MHD_OptionItem o[4])
{
    size_t n = 0;

    if (t == NULL) {
        o[0] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
        return 0;
    }

    o[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
                                      (void *)retrieve_cert };
    o[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_PRIORITIES, 0,
                                      (void *)TLS_PRIORITIES };
    /* with a trust bundle, libmicrohttpd asks every client for a
     * certificate (GNUTLS_CERT_REQUEST: none is no handshake failure);
     * verify_peer() checks it against the set in force */
    if (t->ca_pem != NULL)
        o[n++] =
            (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_TRUST, 0, t->ca_pem };
    o[n] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
    return MHD_USE_TLS;
}

void tls_conn_free(struct tls_conn *c)
{
    if (c == NULL)
        return;
    set_unref(c->served);
    for (size_t i = 0; i < c->nnames; i++)
        free(c->names[i]);
    free(c);
}

/* Why a client certificate did not verify, as a short phrase for the
 * 401's message ("the client certificate did not verify: ..."). */
static const char *verify_error(unsigned status)
{
    if (status & (GNUTLS_CERT_SIGNER_NOT_FOUND | GNUTLS_CERT_SIGNER_NOT_CA))
        return "not signed by the client CA";
    if (status & GNUTLS_CERT_EXPIRED)
        return "expired";
    if (status & GNUTLS_CERT_NOT_ACTIVATED)
        return "not valid yet";
    if (status & GNUTLS_CERT_PURPOSE_MISMATCH)
        return "not for client authentication (extended key usage)";
    if (status & GNUTLS_CERT_REVOKED)
        return "revoked";
    if (status & GNUTLS_CERT_INSECURE_ALGORITHM)
        return "signed with an insecure algorithm";
    return "invalid certificate";
}

static void add_name(struct tls_conn *c, const char *name, size_t len)
{
    if (c->nnames == TLS_NAMES_MAX || len == 0 || memchr(name, '\0', len))
        return;
    c->names[c->nnames] = strndup(name, len);
    if (c->names[c->nnames] != NULL)
        c->nnames++;
}

/* The verified certificate's names: subject CN, then DNS and URI SANs. */
static void take_names(struct tls_conn *c, gnutls_x509_crt_t crt)
{
    char buf[NAME_MAX_LEN];
    size_t len = sizeof(buf);
    unsigned critical;
    int type;

    if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0,
                                      buf, &len) >= 0)
        add_name(c, buf, strnlen(buf, len));
    for (unsigned i = 0; c->nnames < TLS_NAMES_MAX; i++) {
        len = sizeof(buf);
        type =
            gnutls_x509_crt_get_subject_alt_name(crt, i, buf, &len, &critical);
        if (type == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
            break;
        if (type == GNUTLS_SAN_DNSNAME || type == GNUTLS_SAN_URI)
            add_name(c, buf, len);
    }
}

/* Check the peer's chain against s's CA; the outcome into c. */
static void
verify_peer(struct tls_conn *c, struct tls_set *s, gnutls_session_t session)
{
    gnutls_x509_crt_t crts[CHAIN_MAX];
    gnutls_typed_vdata_st vd = { .type = GNUTLS_DT_KEY_PURPOSE_OID,
                                 .data = (void *)GNUTLS_KP_TLS_WWW_CLIENT };
    unsigned n = 0, ncrts = 0, status = 0;
    const gnutls_datum_t *peers = gnutls_certificate_get_peers(session, &n);
    time_t now = time(NULL), end;

    for (size_t i = 0; i < c->nnames; i++)
        free(c->names[i]);
    c->nnames = 0;
    c->error = NULL;
    c->until = now + BAD_RECHECK_S;
    if (peers == NULL || n == 0) {
        c->peer = API_TLS_NO_CERT;
        c->until = (time_t)INT64_MAX; /* the handshake is over: none comes */
        return;
    }
    for (; ncrts < n && ncrts < CHAIN_MAX; ncrts++)
        if (gnutls_x509_crt_init(&crts[ncrts]) < 0 ||
            gnutls_x509_crt_import(crts[ncrts], &peers[ncrts],
                                   GNUTLS_X509_FMT_DER) < 0) {
            ncrts++; /* deinit it too */
            status = GNUTLS_CERT_INVALID;
            break;
        }
    if (status == 0 && gnutls_x509_trust_list_verify_crt2(
                           s->ca, crts, ncrts, &vd, 1, 0, &status, NULL) < 0)
        status = GNUTLS_CERT_INVALID;
    if (status == 0) {
        c->peer = API_TLS_VERIFIED;
        take_names(c, crts[0]);
        end = gnutls_x509_crt_get_expiration_time(crts[0]);
        c->until = end > now ? end : now;
    } else {
        c->peer = API_TLS_BAD_CERT;
        c->error = verify_error(status);
    }
    for (unsigned i = 0; i < ncrts; i++)
        gnutls_x509_crt_deinit(crts[i]);
}

void tls_request_peer(struct tls *t,
                      struct MHD_Connection *conn,
                      struct api_request *rq)
{
    const union MHD_ConnectionInfo *ci;
    struct tls_conn *c;
    struct tls_set *s;

    rq->tls_peer = API_TLS_OFF;
    if (!tls_client_ca(t))
        return;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    c = conn_state(conn);
    if (ci == NULL || ci->tls_session == NULL || c == NULL) {
        rq->tls_peer = API_TLS_BAD_CERT;
        rq->tls_error = "it could not be checked";
        return;
    }
    /* once per connection: again after a reload (the CA may have
     * changed) or once the verdict's time is up */
    if (!c->checked || c->gen != atomic_load(&t->gen) ||
        time(NULL) >= c->until) {
        s = set_get(t);
        verify_peer(c, s, ci->tls_session);
        c->gen = s->gen;
        c->checked = true;
        set_unref(s);
    }
    rq->tls_peer = c->peer;
    rq->tls_error = c->error;
    if (c->peer == API_TLS_VERIFIED) {
        rq->tls_names = (const char *const *)c->names;
        rq->ntls_names = c->nnames;
    }
}

long tls_client_get(int fd,
                    const char *host,
                    const char *req,
                    size_t reqlen,
                    char *buf,
                    size_t cap,
                    char *err,
                    size_t errlen)
{
    gnutls_certificate_credentials_t cred = NULL;
    gnutls_session_t s = NULL;
    long got = -1;
    ssize_t n;
    int rc;

    rc = gnutls_certificate_allocate_credentials(&cred);
    if (rc >= 0)
        rc = gnutls_init(&s, GNUTLS_CLIENT);
    if (rc >= 0)
        rc = gnutls_set_default_priority(s);
    if (rc >= 0)
        rc = gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred);
    if (rc >= 0) {
        gnutls_server_name_set(s, GNUTLS_NAME_DNS, host, strlen(host));
        gnutls_transport_set_int(s, fd);
        gnutls_handshake_set_timeout(s, 3000);
        do
            rc = gnutls_handshake(s);
        while (rc < 0 && gnutls_error_is_fatal(rc) == 0);
    }
    if (rc >= 0) {
        do
            n = gnutls_record_send(s, req, reqlen);
        while (n == GNUTLS_E_INTERRUPTED); /* EAGAIN: SO_SNDTIMEO ran out */
        rc = n == (ssize_t)reqlen ? 0 : (int)n;
    }
    if (rc >= 0) {
        do
            n = gnutls_record_recv(s, buf, cap - 1);
        while (n == GNUTLS_E_INTERRUPTED); /* EAGAIN: SO_RCVTIMEO ran out */
        rc = n >= 0 ? 0 : (int)n;
        if (n >= 0) {
            buf[n] = '\0';
            got = (long)n;
        }
    }
    if (rc < 0)
        snprintf(err, errlen, "TLS: %s", gnutls_strerror(rc));
    if (s != NULL)
        gnutls_deinit(s);
    if (cred != NULL)
        gnutls_certificate_free_credentials(cred);
    return got;
}

/*
 * service/main.c - start-up and shutdown order.
 *
 * Start: configuration, logging, signals blocked in every thread, the
 * backend (which may not be reachable yet: it recovers by itself), the wait
 * queue, the HTTP server. Then the main thread sleeps in sigwait().
 * SIGHUP: the credentials' files and the TLS files are read again and
 * --log-file is reopened (the work is done here, on the main thread, never
 * in a signal handler).
 * SIGTERM or SIGINT: /readyz turns 503 and new requests get 503 at once,
 * waiters are answered 503, requests in flight finish (5 s at most), then
 * the server, the wait queue and the backend close, and lockd exits 0.
 */
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "api/authz.h"
#include "api/codec.h"
#include "api/events.h"
#include "api/handlers.h"
#include "backends/backend.h"
#include "lib/cpus.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/url.h"
#include "service/config.h"
#include "service/server.h"
#include "service/tls.h"
#include "service/waitq.h"

#define DRAIN_MS       5000
#define WAITQ_GRACE_MS 1000 /* for store calls owed at exit */

/* Raise the open-file limit to the hard limit: every waiter is a socket. */
static void raise_nofile(struct config *c)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < c->max_connections + 64) {
        unsigned n = rl.rlim_cur > 128 ? (unsigned)rl.rlim_cur - 64 : 64;
        log_warn("open-file limit %llu: serving at most %u connections",
                 (unsigned long long)rl.rlim_cur, n);
        c->max_connections = n;
    }
}

/* Where --check-health goes: the URL's parts, or the listener's. */
struct health_target {
    bool https;
    char host[256], port[16], path[512];
};

/* --check-health's URL (NULL: the listener's /healthz, over HTTPS with
 * --tls-cert) into h; 0, or 2 with the reason on stderr. */
static int health_target(const struct config *c, struct health_target *h)
{
    const char *url = c->check_health_url, *p, *slash;
    char hp[300], *host = NULL;
    unsigned pn;

    if (url == NULL) {
        h->https = c->tls_cert != NULL;
        snprintf(h->host, sizeof(h->host), "%s",
                 strcmp(c->listen_host, "0.0.0.0") == 0 ? "127.0.0.1"
                 : strcmp(c->listen_host, "::") == 0    ? "::1"
                                                        : c->listen_host);
        snprintf(h->port, sizeof(h->port), "%s", c->listen_port);
        snprintf(h->path, sizeof(h->path), "/healthz");
        return 0;
    }
    h->https = strncmp(url, "https://", 8) == 0;
    if (!h->https && strncmp(url, "http://", 7) != 0) {
        fprintf(stderr,
                "lockd: --check-health takes an http:// or https:// URL\n");
        return 2;
    }
    p = url + (h->https ? 8 : 7);
    pn = h->https ? 443 : 80;
    slash = strchr(p, '/');
    if (slash == NULL)
        slash = p + strlen(p);
    snprintf(hp, sizeof(hp), "%.*s", (int)(slash - p), p);
    if (url_hostport(hp, &host, &pn, 0) != 0 ||
        strlen(host) >= sizeof(h->host)) {
        free(host);
        fprintf(stderr, "lockd: bad URL '%s'\n", url);
        return 2;
    }
    snprintf(h->host, sizeof(h->host), "%s", host);
    snprintf(h->port, sizeof(h->port), "%u", pn);
    free(host);
    snprintf(h->path, sizeof(h->path), "%s", *slash != '\0' ? slash : "/");
    return 0;
}

/* One GET of h's path on the connected fd; true on a 200. */
static bool health_get(int fd, const struct health_target *h)
{
    char req[1024], buf[64], err[256];
    int len = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n",
                       h->path, h->host);
    long n;

    if (len <= 0 || (size_t)len >= sizeof(req))
        return false;
    if (h->https) {
        n = tls_client_get(fd, h->host, req, (size_t)len, buf, sizeof(buf), err,
                           sizeof(err));
        if (n < 0)
            fprintf(stderr, "lockd: %s\n", err);
    } else {
        if (write(fd, req, (size_t)len) != len)
            return false;
        n = read(fd, buf, sizeof(buf) - 1);
        if (n >= 0)
            buf[n] = '\0';
    }
    return n > 12 && strncmp(buf + 9, "200", 3) == 0;
}

/* --check-health [URL]: GET it, exit 0 on 200. For container probes that
 * have no curl. Over https:// the server's certificate is not verified:
 * it is a liveness probe of a local process. */
static int check_health(const struct config *c)
{
    struct health_target h;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
    struct timeval tv = { .tv_sec = 3 };
    int fd = -1, rc = health_target(c, &h);
    bool ok = false;

    if (rc != 0)
        return rc;
    if (getaddrinfo(h.host, h.port, &hints, &ai) != 0 || ai == NULL) {
        fprintf(stderr, "lockd: cannot resolve %s:%s\n", h.host, h.port);
        return 1;
    }
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        ok = health_get(fd, &h);
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    if (!ok)
        fprintf(stderr, "lockd: %s://%s:%s%s is not healthy\n",
                h.https ? "https" : "http", h.host, h.port, h.path);
    return ok ? 0 : 1;
}

/* --hash-token: the SHA-256 of the token on stdin's first line (without
 * its line end), as --auth-file's token_sha256 wants it. */
static int hash_token(void)
{
    char line[1024], hex[2 * AUTHZ_SHA256_LEN + 1];
    size_t n;

    if (fgets(line, sizeof(line), stdin) == NULL)
        line[0] = '\0';
    n = strcspn(line, "\r\n");
    line[n] = '\0';
    if (n == 0) {
        fprintf(stderr, "lockd: --hash-token: no token on stdin's first "
                        "line\n");
        return 2;
    }
    if (authz_sha256_hex(line, n, hex) != 0) {
        explicit_bzero(line, sizeof(line));
        fprintf(stderr, "lockd: --hash-token: SHA-256 failed\n");
        return 1;
    }
    explicit_bzero(line, sizeof(line));
    printf("%s\n", hex);
    return 0;
}

static void warn_line(const char *line)
{
    log_warn("%s", line);
}

/* The process-wide settings every thread inherits: signals (SIGPIPE
 * ignored, since hiredis writes with plain write(); SIGTERM, SIGINT and
 * SIGHUP blocked, so only sigwait() in main() receives them), then
 * logging, the open-file limit and jansson's hash seed. 0, or the exit
 * code. */
static int setup_process(struct config *cfg, sigset_t *sigs)
{
    char err[512];

    /* before any thread starts (the log flusher is the first): a thread
     * that did not block SIGTERM could take it, and its default action
     * kills the process (exit -15) instead of draining; SIGHUP's would
     * too (exit 129) */
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(sigs);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    if (cfg->log_file != NULL &&
        log_open_file(cfg->log_file, err, sizeof(err)) != 0) {
        fprintf(stderr, "lockd: --log-file: %s\n", err);
        return 2;
    }
    log_setup(cfg->log_level, cfg->log_format);
    if (log_start() != 0)
        log_warn("cannot start the log flusher: lines are written one by "
                 "one");
    config_warn_unknown_env(environ, warn_line);
    raise_nofile(cfg);
    json_object_seed(0); /* before any thread uses jansson */
    codec_json_setup(NULL, NULL);
    return 0;
}

/* --threads from the usable CPUs and --max-store-connections, before
 * anything starts: 0, or 2 with the reason on stderr. msg gets the line
 * to log. */
static int size_threads(struct config *cfg, char *msg, size_t msglen)
{
    char scheme[32] = "", why[128];
    const char *sep = strstr(cfg->backend, "://");
    unsigned cpus =
        cpus_usable("/sys/fs/cgroup", "/proc/self/cgroup", why, sizeof(why));

    /* an unknown scheme is backend_open()'s error to tell */
    if (sep != NULL && (size_t)(sep - cfg->backend) < sizeof(scheme))
        snprintf(scheme, sizeof(scheme), "%.*s", (int)(sep - cfg->backend),
                 cfg->backend);
    if (config_size_threads(cfg, scheme, cpus, why, msg, msglen) != 0) {
        fprintf(stderr, "lockd: %s\n", msg);
        return 2;
    }
    return 0;
}

/* The wait queue and the backend. The backend's notify hook points at the
 * queue, and the queue calls the backend: make the queue, open the
 * backend, then bind. 0, or the exit code; *qp and *bep are set to what
 * was made either way. */
static int open_store(struct config *cfg,
                      struct api_config *api,
                      struct waitq **qp,
                      struct backend **bep)
{
    struct backend_hooks hooks = { 0 }; /* copied by backend_open() */
    char err[512];

    *qp = waitq_new();
    if (*qp == NULL) {
        log_error("cannot start the wait queue: %s", strerror(errno));
        return 1;
    }
    hooks.notify = waitq_notify;
    hooks.notify_all = waitq_notify_all;
    hooks.arg = *qp;
    hooks.expired = events_expired; /* reads api->log_events only */
    hooks.expired_arg = api;
    hooks.max_ttl_ms = cfg->max_ttl_ms; /* redlock's quarantine */
    if (backend_open(cfg->backend, &hooks, bep, err, sizeof(err)) !=
        BACKEND_OK) {
        fprintf(stderr, "lockd: %s\n", err);
        return 2;
    }
    /* the workers make the store calls (memory's run on server threads:
     * they only retry waiters) */
    if (waitq_bind(*qp, *bep, (*bep)->call_timeout_ms > 0 ? cfg->threads : 2) !=
        0) {
        log_error("cannot start the wait queue's workers: %s", strerror(errno));
        return 1;
    }
    return 0;
}

/* Re-read the TLS files for SIGHUP; what was done goes in done. A bad
 * file keeps the old set (open connections keep theirs either way). */
static void reload_tls(struct config *cfg, char *done, size_t donelen)
{
    char msg[768];
    size_t n = strlen(done);

    if (cfg->tls == NULL)
        return;
    if (tls_reload(cfg->tls, msg, sizeof(msg)) != 0) {
        log_warn("SIGHUP: TLS: %s; the old certificate, key and client CA "
                 "stay in force",
                 msg);
        snprintf(done + n, donelen - n, "%skept the old TLS files",
                 n > 0 ? ", " : "");
        return;
    }
    snprintf(done + n, donelen - n, "%s%s", n > 0 ? ", " : "", msg);
}

/* SIGHUP: the credentials' files, the TLS files, then the log file, then
 * one line saying what was done. */
static void reload(struct config *cfg)
{
    char done[1024] = "", err[512];
    size_t n;

    if (cfg->authz != NULL)
        authz_reload(cfg->authz, done, sizeof(done));
    reload_tls(cfg, done, sizeof(done));
    if (log_file_path() != NULL) {
        if (log_reopen(err, sizeof(err)) != 0) {
            log_warn("SIGHUP: log file: %s; writing to the old one", err);
        } else {
            n = strlen(done);
            snprintf(done + n, sizeof(done) - n, "%sreopened the log file %s",
                     n > 0 ? ", " : "", log_file_path());
        }
    }
    log_info("SIGHUP: %s", done[0] != '\0' ? done : "nothing to reload");
}

/* Serve; on SIGHUP reload; on SIGTERM or SIGINT stop taking requests,
 * answer the waiters and let the requests in flight finish (DRAIN_MS at
 * most). */
static void serve_until_signal(struct config *cfg,
                               struct server *srv,
                               struct waitq *q,
                               const sigset_t *sigs)
{
    int sig = 0;

    for (;;) {
        if (sigwait(sigs, &sig) != 0)
            continue;
        if (sig == SIGTERM || sig == SIGINT)
            break;
        if (sig == SIGHUP)
            reload(cfg);
    }
    log_info("%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server_begin_shutdown(srv);
    waitq_shutdown(q);
    if (server_drain(srv, DRAIN_MS) != 0)
        log_warn("requests still in flight after %d ms: closing them",
                 DRAIN_MS);
}

int main(int argc, char **argv)
{
    struct config cfg;
    struct api_config api = { 0 };
    struct backend *be = NULL;
    struct waitq *q = NULL;
    struct server *srv = NULL;
    sigset_t sigs;
    char sizing[512];
    int rc;

    switch (config_load(&cfg, argc, argv)) {
    case CONFIG_OK:
        break;
    case CONFIG_EXIT:
        return 0;
    case CONFIG_ERROR:
        return 2;
    }
    if (cfg.check_health)
        return check_health(&cfg);
    if (cfg.hash_token)
        return hash_token();
    rc = size_threads(&cfg, sizing, sizeof(sizing));
    if (rc == 0)
        rc = setup_process(&cfg, &sigs);
    if (rc != 0) {
        config_cleanup(&cfg);
        return rc;
    }
    log_info("%s", sizing);
    api.log_events = cfg.log_events; /* before the store's threads start */
    rc = open_store(&cfg, &api, &q, &be);
    if (rc != 0)
        goto out;
    metrics_setup(LOCKD_VERSION, backend_scheme(be), api_route_names,
                  API_ROUTE_COUNT, backend_op_names, BACKEND_OP_COUNT);
    metrics_http_connections_max(cfg.max_connections);
    {
        char rule[64];
        metrics_store_connections(cfg.max_store_connections,
                                  config_store_connections(backend_scheme(be),
                                                           cfg.threads, rule,
                                                           sizeof(rule)));
    }
    api.backend = be;
    api.default_ttl_ms = cfg.default_ttl_ms;
    api.max_ttl_ms = cfg.max_ttl_ms;
    api.max_wait_ms = cfg.max_wait_ms;
    api.authz = cfg.authz;

    srv = server_start(&cfg, &api, q);
    if (srv == NULL) {
        rc = 1;
        goto out;
    }
    log_info("lockd %s listening on %s, backend %s (fifo %s), %u threads, "
             "%u HTTP threads",
             LOCKD_VERSION, cfg.listen, backend_scheme(be),
             (backend_caps(be) & BACKEND_CAP_QUEUE) != 0 ? "store-wide"
                                                         : "per instance",
             cfg.threads, cfg.http_threads);
    serve_until_signal(&cfg, srv, q, &sigs);
out:
    server_stop(srv);
    /* owed store calls (places given up, grants nobody received) get a
     * short grace; the store's TTLs end whatever is left */
    waitq_stop(q, WAITQ_GRACE_MS);
    /* the backend's threads may notify the queue until it is closed */
    backend_close(be);
    waitq_free(q);
    config_cleanup(&cfg);
    log_stop(); /* the server threads are gone: write what they left */
    if (rc == 0)
        log_info("stopped");
    return rc;
}

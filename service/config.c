/*
 * service/config.c - flags and environment into struct config. One table
 * lists every option once: its flag, its variable, its help line and how
 * its value is parsed, so --help, the environment and the flags agree.
 */
#include "service/config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/authz.h"
#include "backends/backend.h"
#include "lib/text.h"
#include "lib/url.h"
#include "service/tls.h"

enum opt_kind {
    OPT_STRING,
    OPT_U64,
    OPT_UINT,
    OPT_LEVEL,
    OPT_FORMAT,
    OPT_EVENTS
};

struct opt {
    const char *flag; /* without the leading "--" */
    const char *env;
    enum opt_kind kind;
    size_t off;        /* of the struct config member it sets */
    uint64_t min, max; /* for numbers */
    const char *help;
};

#define M(member) offsetof(struct config, member)
static const struct opt opts[] = {
    { "listen", "LOCKD_LISTEN", OPT_STRING, M(listen), 0, 0,
      "address to serve HTTP on, host:port or [v6]:port "
      "(default 127.0.0.1:8080)" },
    { "backend", "LOCKD_BACKEND", OPT_STRING, M(backend), 0, 0,
      "lock store URL: memory://, redis://..., zookeeper://..., "
      "mysql://..., redlock://h1:6379,h2:6379,h3:6379 (3, 5, 7 or 9 "
      "independent Redis servers; a grant needs a majority) (default "
      "memory://)" },
    { "threads", "LOCKD_THREADS", OPT_UINT, M(threads), 1, 256,
      "threads that make store calls: on memory:// the HTTP threads; on a "
      "network backend the workers, each blocked by the call it makes "
      "(default: the CPUs lockd may use - affinity capped by the cgroup "
      "CPU quota, rounded up - on memory://, 4 per CPU on network "
      "backends; capped by --max-store-connections)" },
    { "http-threads", "LOCKD_HTTP_THREADS", OPT_UINT, M(http_threads), 1, 256,
      "threads that read requests and write answers (default: --threads "
      "on memory://; the usable CPUs on a network backend, whose store "
      "calls run on the --threads workers while the request is parked). "
      "Each resume walks its thread's parked connections: more spread "
      "tens of thousands of waiters thinner" },
    { "max-store-connections", "LOCKD_MAX_STORE_CONNECTIONS", OPT_UINT,
      M(max_store_connections), 1, 10000,
      "store connections one instance may open (default 64): each thread "
      "has one, and as many wait-queue workers one each (2 per thread), "
      "plus the adapter's own (redis 3: start-up check, subscriber, its "
      "retries; mysql 1: background thread); zookeeper keeps 1 session "
      "and memory none whatever the threads. The default --threads is "
      "capped to fit; a larger --threads is an error" },
    { "default-ttl-ms", "LOCKD_DEFAULT_TTL_MS", OPT_U64, M(default_ttl_ms), 1,
      LOCK_FENCE_MAX, "TTL of an acquire that gives none (default 30000)" },
    { "max-ttl-ms", "LOCKD_MAX_TTL_MS", OPT_U64, M(max_ttl_ms), 1,
      LOCK_FENCE_MAX, "largest ttl_ms accepted (default 86400000)" },
    { "max-wait-ms", "LOCKD_MAX_WAIT_MS", OPT_U64, M(max_wait_ms), 0,
      LOCK_FENCE_MAX, "largest wait_ms accepted (default 300000)" },
    { "max-body-bytes", "LOCKD_MAX_BODY_BYTES", OPT_U64, M(max_body_bytes), 2,
      1048576, "largest request body; larger gets 413 (default 8192)" },
    { "max-header-bytes", "LOCKD_MAX_HEADER_BYTES", OPT_U64,
      M(max_header_bytes), 2048, 65536,
      "largest request line and headers; larger gets 431 (default 16384); "
      "a connection may use twice this (at least 8192) for them" },
    { "max-connections", "LOCKD_MAX_CONNECTIONS", OPT_UINT, M(max_connections),
      1, 1000000,
      "open HTTP connections at most, waiters included (default 16000)" },
    { "max-connections-per-ip", "LOCKD_MAX_CONNECTIONS_PER_IP", OPT_UINT,
      M(max_connections_per_ip), 1, 1000000,
      "open connections from one client address at most; more get 429 "
      "(default: half of --max-connections)" },
    { "max-waiters-per-client", "LOCKD_MAX_WAITERS_PER_CLIENT", OPT_UINT,
      M(max_waiters_per_client), 0, 1000000,
      "lock requests that may wait (wait_ms > 0) in flight at once per "
      "client - its credential with auth on, else its address; more get "
      "429; an --auth-file credential's max_waiters overrides it (default "
      "0: a quarter of --max-connections)" },
    { "request-timeout-ms", "LOCKD_REQUEST_TIMEOUT_MS", OPT_U64,
      M(request_timeout_ms), 0, 3600000,
      "time a request may take to arrive, headers and body, from its "
      "connection's start or its first byte; 0: no bound (default 10000)" },
    { "log-level", "LOCKD_LOG_LEVEL", OPT_LEVEL, M(log_level), 0, 0,
      "debug, info, warn or error (default info)" },
    { "log-format", "LOCKD_LOG_FORMAT", OPT_FORMAT, M(log_format), 0, 0,
      "text or json (default text)" },
    { "log-file", "LOCKD_LOG_FILE", OPT_STRING, M(log_file), 0, 0,
      "append the log to this file instead of stderr; SIGHUP reopens it "
      "(for logrotate's rename, then HUP)" },
    { "log-events", "LOCKD_LOG_EVENTS", OPT_EVENTS, M(log_events), 0, 0,
      "lock lifecycle events logged at info: audit (forced releases "
      "only, logged at any level), changes (also grants, releases, "
      "expiries, takeovers, lost holds, waiter timeouts) or all (also "
      "renewals) (default changes)" },
    { "auth-file", "LOCKD_AUTH_FILE", OPT_STRING, M(auth_file), 0, 0,
      "JSON file of scoped credentials: each a name, a token_sha256 (see "
      "--hash-token) or tls_identity, the key prefixes and verbs it may "
      "use; SIGHUP re-reads it (a bad file keeps the old policy); "
      "default: no auth" },
    { "auth-token-file", "LOCKD_AUTH_TOKEN_FILE", OPT_STRING,
      M(auth_token_file), 0, 0,
      "file whose first line is a bearer token that /locks requests must "
      "send (Authorization: Bearer ...); default: no auth" },
    { "admin-token-file", "LOCKD_ADMIN_TOKEN_FILE", OPT_STRING,
      M(admin_token_file), 0, 0,
      "file whose first line is the admin bearer token: it may do what "
      "the auth token may, and force-release keys (DELETE "
      "/locks/KEY?force=true); default: no forced release" },
    { "tls-cert", "LOCKD_TLS_CERT", OPT_STRING, M(tls_cert), 0, 0,
      "PEM file: the server certificate, then its chain; with --tls-key "
      "the listener speaks HTTPS only (TLS 1.2 and 1.3); SIGHUP re-reads "
      "it" },
    { "tls-key", "LOCKD_TLS_KEY", OPT_STRING, M(tls_key), 0, 0,
      "PEM file: the certificate's private key (unencrypted); SIGHUP "
      "re-reads it" },
    { "tls-client-ca", "LOCKD_TLS_CLIENT_CA", OPT_STRING, M(tls_client_ca), 0,
      0,
      "PEM file of CA certificates: clients are asked for a certificate "
      "signed by one (for client auth), needed on /locks; SIGHUP re-reads "
      "it (needs --tls-cert)" },
};
#undef M
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lockd [options]\n"
            "       lockd --check-health [URL]\n"
            "       lockd --hash-token <token-file\n\n"
            "lockd serves distributed locks over HTTP/JSON.\n"
            "Every option is also an environment variable; the flag wins.\n\n");
    for (size_t i = 0; i < NOPTS; i++)
        fprintf(f, "  --%-22s %-28s %s\n", opts[i].flag, opts[i].env,
                opts[i].help);
    fprintf(f,
            "  --%-22s %-28s %s\n  --%-22s %-28s %s\n  --%-22s %-28s %s\n"
            "  --%-22s %-28s %s\n  --%-22s %-28s %s\n\n"
            "backends built in: %s\n",
            "check-health [URL]", "",
            "GET URL (default http://<listen>/healthz, https:// with "
            "--tls-cert; the server certificate is not verified); exit 0 "
            "on 200, else 1",
            "help", "", "print this help and exit", "version", "",
            "print the version and exit", "backends", "",
            "print the backend schemes built in, one a line, and exit",
            "hash-token", "",
            "read a token on stdin, print its SHA-256 (for token_sha256 "
            "in --auth-file) and exit",
            backend_schemes());
}

static int split_listen(struct config *c)
{
    char *host = NULL;
    unsigned port = 0;
    int rc = url_hostport(c->listen, &host, &port, URL_HOSTPORT_NEED_PORT);

    if (rc == 0 && strlen(host) < sizeof(c->listen_host)) {
        snprintf(c->listen_host, sizeof(c->listen_host), "%s", host);
        snprintf(c->listen_port, sizeof(c->listen_port), "%u", port);
    } else {
        rc = -1;
    }
    free(host);
    return rc;
}

static int set_opt(struct config *c,
                   const struct opt *o,
                   const char *v,
                   const char *source)
{
    uint64_t n = 0;

    void *field = (char *)c + o->off;

    switch (o->kind) {
    case OPT_STRING:
        if (*v == '\0')
            goto bad;
        *(const char **)field = v;
        return 0;
    case OPT_U64:
    case OPT_UINT:
        if (text_parse_u64(v, o->min, o->max, &n) != 0) {
            fprintf(stderr,
                    "lockd: %s: '%s' is not an integer from %llu to %llu\n",
                    source, v, (unsigned long long)o->min,
                    (unsigned long long)o->max);
            return -1;
        }
        if (o->kind == OPT_U64)
            *(uint64_t *)field = n;
        else
            *(unsigned *)field = (unsigned)n; /* max fits an unsigned */
        return 0;
    case OPT_LEVEL:
        if (log_level_parse(v, (enum log_level *)field) != 0)
            goto bad;
        return 0;
    case OPT_FORMAT:
        if (log_format_parse(v, (enum log_format *)field) != 0)
            goto bad;
        return 0;
    case OPT_EVENTS:
        if (log_events_parse(v, (enum log_events *)field) != 0)
            goto bad;
        return 0;
    }
bad:
    fprintf(stderr, "lockd: %s: invalid value '%s' (%s)\n", source, v, o->help);
    return -1;
}

/* The credentials of the auth files, if any; -1 with the reason printed. */
static int open_authz(struct config *c)
{
    struct authz_opts o = { 0 };
    char err[768];

    o.auth_file = c->auth_file;
    o.token_file = c->auth_token_file;
    o.admin_file = c->admin_token_file;
    o.tls_client_ca = c->tls_client_ca != NULL;
    if (!authz_wanted(&o))
        return 0;
    c->authz = authz_open(&o, err, sizeof(err));
    if (c->authz == NULL) {
        fprintf(stderr, "lockd: %s\n", err);
        return -1;
    }
    return 0;
}

/* --tls-cert, --tls-key and --tls-client-ca: read the files into c->tls;
 * -1 with the reason printed. */
static int open_tls(struct config *c)
{
    char err[512];

    if ((c->tls_cert == NULL) != (c->tls_key == NULL)) {
        fprintf(stderr,
                "lockd: --tls-cert and --tls-key go together: %s "
                "is missing\n",
                c->tls_cert == NULL ? "--tls-cert" : "--tls-key");
        return -1;
    }
    if (c->tls_client_ca != NULL && c->tls_cert == NULL) {
        fprintf(stderr, "lockd: --tls-client-ca needs --tls-cert and "
                        "--tls-key\n");
        return -1;
    }
    if (c->tls_cert == NULL)
        return 0;
    c->tls =
        tls_new(c->tls_cert, c->tls_key, c->tls_client_ca, err, sizeof(err));
    if (c->tls == NULL) {
        fprintf(stderr, "lockd: TLS: %s\n", err);
        return -1;
    }
    return 0;
}

static void set_defaults(struct config *c)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    memset(c, 0, sizeof(*c));
    c->listen = "127.0.0.1:8080";
    c->backend = "memory://";
    c->threads = 0;      /* auto: main() picks it once the backend is known */
    c->http_threads = 0; /* auto: with threads */
    c->cores = ncpu > 0 ? (unsigned)ncpu : 2;
    c->default_ttl_ms = 30000;
    c->max_ttl_ms = 86400000;
    c->log_events = LOG_EVENTS_CHANGES;
    c->max_wait_ms = 300000;
    c->max_body_bytes = 8192;
    c->max_header_bytes = 16384;
    c->max_connections = 16000;
    c->max_connections_per_ip = 0; /* auto: server_start() halves the limit */
    c->max_waiters_per_client = 0; /* auto: server_start() quarters it */
    c->request_timeout_ms = 10000;
    c->max_store_connections = 64;
    c->log_level = LOG_LEVEL_INFO;
    c->log_format = LOG_FORMAT_TEXT;
}

/* --help, --version and --backends: true if a is one (and it printed). */
static bool print_info(const char *a)
{
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
        usage(stdout);
        return true;
    }
    if (strcmp(a, "--version") == 0) {
        printf("lockd %s (backends: %s)\n", LOCKD_VERSION, backend_schemes());
        return true;
    }
    if (strcmp(a, "--backends") == 0) {
        for (size_t j = 0; backend_adapter(j) != NULL; j++)
            printf("%s\n", backend_adapter(j)->scheme);
        return true;
    }
    return false;
}

/* argv[*i], "--name=value" or "--name value" (then *i moves past the
 * value): set the option. -1 on error, said on stderr. */
static int parse_option(struct config *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i] + 2, *v = NULL, *eq;
    size_t k, nlen;
    char source[64];

    eq = strchr(a, '=');
    nlen = eq != NULL ? (size_t)(eq - a) : strlen(a);
    for (k = 0; k < NOPTS; k++)
        if (strlen(opts[k].flag) == nlen && strncmp(opts[k].flag, a, nlen) == 0)
            break;
    if (k == NOPTS) {
        fprintf(stderr, "lockd: unknown option '%s' (see --help)\n", argv[*i]);
        return -1;
    }
    if (eq != NULL) {
        v = eq + 1;
    } else if (*i + 1 < argc) {
        v = argv[++*i];
    } else {
        fprintf(stderr, "lockd: option '--%s' needs a value\n", opts[k].flag);
        return -1;
    }
    snprintf(source, sizeof(source), "--%s", opts[k].flag);
    return set_opt(c, &opts[k], v, source);
}

static enum config_result parse_args(struct config *c, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (print_info(a))
            return CONFIG_EXIT;
        if (strcmp(a, "--hash-token") == 0) {
            c->hash_token = true;
            continue;
        }
        if (strcmp(a, "--check-health") == 0) {
            c->check_health = true;
            if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                c->check_health_url = argv[++i];
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "lockd: unexpected argument '%s' (see --help)\n",
                    a);
            return CONFIG_ERROR;
        }
        if (parse_option(c, argc, argv, &i) != 0)
            return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

enum config_result config_load(struct config *c, int argc, char **argv)
{
    enum config_result r;

    set_defaults(c);
    for (size_t i = 0; i < NOPTS; i++) {
        const char *v = getenv(opts[i].env);
        if (v != NULL && set_opt(c, &opts[i], v, opts[i].env) != 0)
            return CONFIG_ERROR;
    }
    r = parse_args(c, argc, argv);
    if (r != CONFIG_OK)
        return r;
    if (split_listen(c) != 0) {
        fprintf(stderr,
                "lockd: --listen '%s' must be host:port or [v6addr]:port\n",
                c->listen);
        return CONFIG_ERROR;
    }
    if (c->check_health || c->hash_token)
        return CONFIG_OK;
    if (open_tls(c) != 0)
        return CONFIG_ERROR;
    if (c->default_ttl_ms > c->max_ttl_ms) {
        fprintf(stderr,
                "lockd: --default-ttl-ms %llu is above --max-ttl-ms %llu\n",
                (unsigned long long)c->default_ttl_ms,
                (unsigned long long)c->max_ttl_ms);
        return CONFIG_ERROR;
    }
    if (open_authz(c) != 0)
        return CONFIG_ERROR;
    return CONFIG_OK;
}

void config_cleanup(struct config *c)
{
    authz_close(c->authz);
    c->authz = NULL;
    tls_free(c->tls);
    c->tls = NULL;
}

/*
 * Store connections per adapter, for --max-store-connections. Redis and
 * MySQL keep one connection per thread that calls them (threadconn.c):
 * every HTTP worker and every wait-queue worker (main.c starts as many of
 * those as HTTP workers on a network backend), so 2 per thread. On top:
 * Redis's start-up check (on the main thread, kept until close), its
 * subscriber's SUBSCRIBE connection and that thread's command connection
 * for cancel retries (3); MySQL's background thread (1). ZooKeeper shares
 * one session whatever the threads; memory has no store. Redlock opens
 * Redis's set to each of its servers, plus the monitor thread's (4): the
 * figure is per server, each server sees as many.
 */
struct store_conns {
    const char *scheme;
    unsigned per_thread;
    unsigned extra;
};

static const struct store_conns store_conns[] = {
    { "memory", 0, 0 }, { "redis", 2, 3 },     { "redlock", 2, 4 },
    { "mysql", 2, 1 },  { "zookeeper", 0, 1 },
};

static const struct store_conns *store_conns_of(const char *scheme)
{
    static const struct store_conns unknown = { "?", 2, 0 };

    for (size_t i = 0; i < sizeof(store_conns) / sizeof(store_conns[0]); i++)
        if (strcmp(store_conns[i].scheme, scheme) == 0)
            return &store_conns[i];
    return &unknown;
}

unsigned config_store_connections(const char *scheme,
                                  unsigned threads,
                                  char *rule,
                                  size_t rulelen)
{
    const struct store_conns *s = store_conns_of(scheme);

    if (s->per_thread == 0)
        snprintf(rule, rulelen, "%u for %s whatever the threads", s->extra,
                 scheme);
    else
        snprintf(rule, rulelen, "%u per thread + %u for %s", s->per_thread,
                 s->extra, scheme);
    return s->per_thread * threads + s->extra;
}

/* c->http_threads once c->threads is settled, said after msg's line when
 * it is not simply c->threads on memory. On a network backend the HTTP
 * threads only parse, park and answer: one per usable CPU does that with
 * the fewest wake-ups (on 2 cores, 7-15 % less of lockd's CPU per Redis
 * pair than with 4 per CPU). */
static void size_http_threads(
    struct config *c, bool memory, unsigned cpus, char *msg, size_t msglen)
{
    size_t n = strlen(msg);

    if (c->http_threads != 0) {
        snprintf(msg + n, msglen - n, "; %u HTTP thread%s: --http-threads",
                 c->http_threads, c->http_threads == 1 ? "" : "s");
    } else if (memory) {
        c->http_threads = c->threads;
    } else {
        c->http_threads = cpus > 256 ? 256 : cpus; /* cpus is at least 1 */
        snprintf(msg + n, msglen - n, "; %u HTTP thread%s: the usable CPU%s",
                 c->http_threads, c->http_threads == 1 ? "" : "s",
                 c->http_threads == 1 ? "" : "s");
    }
}

int config_size_threads(struct config *c,
                        const char *scheme,
                        unsigned cpus,
                        const char *cpus_why,
                        char *msg,
                        size_t msglen)
{
    const struct store_conns *s = store_conns_of(scheme);
    unsigned max = c->max_store_connections, cap = 256, want;
    char rule[96];
    bool memory = strcmp(scheme, "memory") == 0;

    config_store_connections(scheme, 1, rule, sizeof(rule));
    if (s->per_thread > 0)
        cap = max >= s->extra ? (max - s->extra) / s->per_thread : 0;
    if (cap > 256)
        cap = 256; /* --threads' own bound */
    if (s->extra > max || cap == 0) {
        snprintf(msg, msglen,
                 "--max-store-connections %u is too low for %s: one thread "
                 "needs %u (%s)",
                 max, scheme, s->per_thread + s->extra, rule);
        return -1;
    }
    if (c->threads != 0) {
        if (c->threads > cap) {
            snprintf(msg, msglen,
                     "--threads %u needs %u store connections (%s), above "
                     "--max-store-connections %u: use --threads %u at most "
                     "or raise --max-store-connections",
                     c->threads, s->per_thread * c->threads + s->extra, rule,
                     max, cap);
            return -1;
        }
        snprintf(msg, msglen, "%u threads: --threads", c->threads);
        size_http_threads(c, memory, cpus, msg, msglen);
        return 0;
    }
    want = memory ? cpus : 4 * cpus;
    c->threads = want < cap ? want : cap;
    snprintf(msg, msglen, "%u threads: %s%s", c->threads, cpus_why,
             memory ? "" : ", x4 for a network backend");
    if (c->threads < want) {
        size_t n = strlen(msg);
        snprintf(msg + n, msglen - n,
                 ", capped by --max-store-connections %u (%s)", max, rule);
    }
    size_http_threads(c, memory, cpus, msg, msglen);
    return 0;
}

/*
 * LOCKD_* variables that are not lockd's options yet are set on purpose
 * and must not be warned about: lockctl's and the client helpers'
 * (docs/lockctl.md; a pod may set them beside lockd's), the test suite's,
 * the container build's, and the ones Kubernetes adds for a Service named
 * "lockd" (LOCKD_SERVICE_HOST, LOCKD_PORT_8080_TCP, ...). A trailing '*'
 * matches any rest.
 */
static const char *const env_allowed[] = {
    /* lockctl and the client helpers */
    "LOCKD_URL",
    "LOCKD_TOKEN",
    "LOCKD_KEY",
    "LOCKD_KEYS",
    "LOCKD_FENCE",
    "LOCKD_FENCES",
    "LOCKD_TTL_MS",
    "LOCKD_HELD",
    "LOCKD_HOLDS",
    "LOCKD_HOLDERS",
    "LOCKD_MODE",
    "LOCKD_EXPIRES_AT",
    "LOCKD_RELEASED",
    /* the store password, read by the adapters (url_resolve_password()) */
    "LOCKD_BACKEND_PASSWORD",
    /* tests and builds */
    "LOCKD_BIN",
    "LOCKD_BIN_*",
    "LOCKD_BUILD",
    "LOCKD_TEST_*",
    "LOCKD_ALLOW_SKIPS",
    "LOCKD_STRICT_SKIPS",
    "LOCKD_FAULT_*",
    "LOCKD_ZK_JVM",
    "LOCKD_CONTAINER_*",
    "LOCKD_VERSION",
    "LOCKD_UID",
    /* Kubernetes service links */
    "LOCKD_SERVICE_*",
    "LOCKD_PORT",
    "LOCKD_PORT_*",
};

static bool env_matches(const char *pattern, const char *name)
{
    size_t n = strlen(pattern);

    if (n > 0 && pattern[n - 1] == '*')
        return strncmp(pattern, name, n - 1) == 0;
    return strcmp(pattern, name) == 0;
}

/* Levenshtein distance of a and b, for names (bounded to 64 bytes). */
static unsigned edit_distance(const char *a, const char *b)
{
    unsigned row[65], la = (unsigned)strlen(a), lb = (unsigned)strlen(b);

    if (la > 64 || lb > 64)
        return 1000;
    for (unsigned j = 0; j <= lb; j++)
        row[j] = j;
    for (unsigned i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = i;
        for (unsigned j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

int config_env_unknown(const char *name, char *suggest, size_t suggestlen)
{
    unsigned best = 1000, d;
    const char *near = NULL;
    size_t own;

    if (strncmp(name, "LOCKD_", 6) != 0)
        return 0;
    own = strlen(name) - 6;
    for (size_t i = 0; i < NOPTS; i++)
        if (strcmp(opts[i].env, name) == 0)
            return 0;
    for (size_t i = 0; i < sizeof(env_allowed) / sizeof(env_allowed[0]); i++)
        if (env_matches(env_allowed[i], name))
            return 0;
    for (size_t i = 0; i < NOPTS; i++) {
        d = edit_distance(name + 6, opts[i].env + 6);
        if (d < best) {
            best = d;
            near = opts[i].env;
        }
    }
    /* close: a few edits, and fewer than half the name (LOCKD_FOO is not
     * a LOCKD_LOG_...) */
    if (near == NULL || best > 3 || 2 * best >= own)
        near = "";
    snprintf(suggest, suggestlen, "%s", near);
    return 1;
}

unsigned config_warn_unknown_env(char *const *env, void (*warn)(const char *))
{
    char name[128], near[64], line[320];
    unsigned n = 0;

    for (; env != NULL && *env != NULL; env++) {
        const char *eq = strchr(*env, '=');
        size_t len = eq != NULL ? (size_t)(eq - *env) : strlen(*env);
        if (strncmp(*env, "LOCKD_", 6) != 0 || len >= sizeof(name))
            continue;
        memcpy(name, *env, len);
        name[len] = '\0';
        if (config_env_unknown(name, near, sizeof(near)) == 0)
            continue;
        if (near[0] != '\0')
            snprintf(line, sizeof(line),
                     "%s: unknown variable, ignored (did you mean %s?)", name,
                     near);
        else
            snprintf(line, sizeof(line), "%s: unknown variable, ignored", name);
        warn(line);
        n++;
    }
    return n;
}

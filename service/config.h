/*
 * service/config.h - every option as a command-line flag and a LOCKD_*
 * environment variable (the flag wins), validated into one struct config.
 */
#ifndef SERVICE_CONFIG_H
#define SERVICE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/log.h"

struct authz;

struct tls;

struct config {
    const char *listen;    /* "host:port", as given */
    char listen_host[256]; /* parsed from listen */
    char listen_port[16];
    const char *backend;   /* backend URL, borrowed from argv/env */
    unsigned threads;      /* threads that make store calls: memory's HTTP
                              threads, a network store's workers; 0 = auto */
    unsigned http_threads; /* libmicrohttpd's pool; 0 = auto */
    unsigned cores;        /* online CPUs */
    uint64_t default_ttl_ms;
    uint64_t max_ttl_ms;
    uint64_t max_wait_ms;
    uint64_t max_body_bytes;
    uint64_t max_header_bytes; /* request line and headers */
    unsigned max_connections;
    unsigned max_connections_per_ip; /* 0 = auto: half of max_connections */
    unsigned max_waiters_per_client; /* requests that may wait, in flight,
                                        per credential or address; 0 =
                                        auto: a quarter of max_connections */
    uint64_t request_timeout_ms;     /* 0 = no bound */
    enum log_level log_level;
    enum log_format log_format;
    enum log_events log_events;
    const char *auth_file;          /* --auth-file; NULL: none */
    const char *auth_token_file;    /* NULL: no credential "token" */
    const char *admin_token_file;   /* NULL: no credential "admin" */
    struct authz *authz;            /* owned: the credentials of the three files
                                       (api/authz.h); NULL: auth is off */
    const char *log_file;           /* NULL: stderr */
    unsigned max_store_connections; /* per instance, 1..10000 */
    /* TLS (service/tls.h): all NULL for plain HTTP */
    const char *tls_cert;         /* PEM: certificate, then its chain */
    const char *tls_key;          /* PEM: its private key */
    const char *tls_client_ca;    /* PEM bundle; NULL: no client certs */
    struct tls *tls;              /* owned: the files read */
    bool check_health;            /* --check-health mode */
    bool hash_token;              /* --hash-token mode */
    const char *check_health_url; /* NULL: derived from listen */
};

enum config_result {
    CONFIG_OK = 0,
    CONFIG_EXIT,  /* --help or --version printed: exit 0 */
    CONFIG_ERROR, /* message printed to stderr: exit 2 */
};

/* Fill c from argv and the environment. Strings are borrowed from argv and
 * environ; c->authz, the credentials read from the auth files, and c->tls,
 * the TLS files read, are owned (a file that cannot be read or is not
 * valid: CONFIG_ERROR, said on stderr naming the file). */
enum config_result config_load(struct config *c, int argc, char **argv);
void config_cleanup(struct config *c);

/*
 * The store connections one instance of scheme may open with threads
 * worker threads (threads HTTP workers and as many wait-queue workers, one
 * connection each, plus the adapter's own), the rule as a phrase in rule
 * (rulelen bytes), e.g. "2 per thread + 3 for redis".
 */
unsigned config_store_connections(const char *scheme,
                                  unsigned threads,
                                  char *rule,
                                  size_t rulelen);

/*
 * Settle c->threads and c->http_threads for the backend scheme given cpus
 * usable CPUs (cpus_why says why, e.g. "1 usable CPU (cgroup quota 1.0)"):
 * an explicit --threads is kept if it fits --max-store-connections; else
 * the default, cpus on memory and 4 per CPU on network backends, capped so
 * the store connections fit. An explicit --http-threads is kept; else it
 * is c->threads on memory (whose store calls run on the HTTP threads) and
 * cpus on a network backend (whose calls run on the c->threads workers
 * while the connection is parked). 0 and a line saying the counts and why
 * in msg, or -1 and the error in msg (exit 2).
 */
int config_size_threads(struct config *c,
                        const char *scheme,
                        unsigned cpus,
                        const char *cpus_why,
                        char *msg,
                        size_t msglen);

/*
 * Is name (a LOCKD_* environment variable's name, without "=value") one
 * nobody reads? 0 if known (an option of lockd's, or one lockctl, the
 * client helpers, the tests or Kubernetes set: see the allow-list in
 * config.c); 1 if unknown, with the closest option's variable in suggest
 * (suggestlen bytes; "" when none is close).
 */
int config_env_unknown(const char *name, char *suggest, size_t suggestlen);

/* Call warn(line) once per unknown LOCKD_* variable in env (environ):
 * "LOCKD_X: unknown variable, ignored (did you mean LOCKD_Y?)". The
 * number of them. */
unsigned config_warn_unknown_env(char *const *env, void (*warn)(const char *));

#endif /* SERVICE_CONFIG_H */

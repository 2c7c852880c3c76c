/*
 * service/config.h - every option as a command-line flag and a LOCKD_*
 * environment variable (the flag wins), validated into one struct config.
 */
#ifndef SERVICE_CONFIG_H
#define SERVICE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/log.h"
#include "lib/secret.h"

struct config {
    const char *listen;    /* "host:port", as given */
    char listen_host[256]; /* parsed from listen */
    char listen_port[16];
    const char *backend; /* backend URL, borrowed from argv/env */
    unsigned threads;    /* libmicrohttpd worker threads; 0 = auto */
    unsigned cores;      /* online CPUs */
    uint64_t default_ttl_ms;
    uint64_t max_ttl_ms;
    uint64_t max_wait_ms;
    uint64_t max_body_bytes;
    uint64_t max_header_bytes; /* request line and headers */
    unsigned max_connections;
    unsigned max_connections_per_ip; /* 0 = auto: half of max_connections */
    uint64_t request_timeout_ms;     /* 0 = no bound */
    enum log_level log_level;
    enum log_format log_format;
    enum log_events log_events;
    const char *auth_token_file;  /* NULL: no auth */
    struct secret *auth_token;    /* owned: the file's first line */
    const char *admin_token_file; /* NULL: no forced release */
    struct secret *admin_token;   /* owned: the file's first line */
    bool check_health;            /* --check-health mode */
    const char *check_health_url; /* NULL: derived from listen */
};

enum config_result {
    CONFIG_OK = 0,
    CONFIG_EXIT,  /* --help or --version printed: exit 0 */
    CONFIG_ERROR, /* message printed to stderr: exit 2 */
};

/* Fill c from argv and the environment. Strings are borrowed from argv and
 * environ, except the token files' secrets. */
enum config_result config_load(struct config *c, int argc, char **argv);
void config_cleanup(struct config *c);

#endif /* SERVICE_CONFIG_H */

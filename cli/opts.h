/*
 * cli/opts.h - lockctl's command line: one struct opts from argv and the
 * environment (LOCKD_URL, LOCKD_AUTH_TOKEN_FILE, LOCKD_TOKEN), and the
 * duration syntax (250ms, 30s, 1.5s, 2m, 1h).
 */
#ifndef CLI_OPTS_H
#define CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OPTS_MAX_KEYS 64 /* lockd's bound for one /locks request */

/* Exit codes: keep them stable, scripts branch on them (docs/lockctl.md). */
enum lockctl_exit {
    EXIT_OK = 0,
    EXIT_HELD = 1,        /* 409 lock_held (wait ran out) or limit_mismatch */
    EXIT_USAGE = 2,       /* bad command line, or lockd answered 400 / 413 */
    EXIT_UNAVAILABLE = 3, /* no answer, timeout, 503, 429, other 5xx */
    EXIT_NOT_HELD = 4,    /* 404 lock_not_found */
    EXIT_MISMATCH = 5,    /* 409 token_mismatch */
    EXIT_DENIED = 6,      /* 401 / 403 */
    EXIT_CANNOT_RUN = 126,
    EXIT_NOT_FOUND = 127,
    EXIT_INTERNAL = 125, /* run: any other failure of lockctl itself */
};

enum opts_cmd {
    CMD_NONE = 0,
    CMD_ACQUIRE,
    CMD_RENEW,
    CMD_RELEASE,
    CMD_INSPECT,
    CMD_RUN,
};

enum opts_format {
    FORMAT_JSON = 0,
    FORMAT_ENV,
};

struct opts {
    enum opts_cmd cmd;
    const char *keys[OPTS_MAX_KEYS]; /* borrowed from argv */
    int nkeys;
    char *const *child_argv; /* run: after "--", NULL-terminated (argv's) */

    char url[2048];     /* no trailing '/' */
    char *auth_token;   /* owned: first line of --auth-token-file, or NULL */
    int64_t timeout_ms; /* per HTTP request, on top of any wait */
    enum opts_format format;
    bool quiet;

    int64_t ttl_ms;       /* -1: not given (lockd's default; run: 15 s) */
    int64_t wait_ms;      /* -1: not given (0) */
    const char *owner;    /* NULL: none */
    bool shared;          /* --shared or --mode shared */
    bool mode_given;      /* --mode or --shared given */
    int64_t limit;        /* -1: none */
    const char *token;    /* --token, or LOCKD_TOKEN for renew/release */
    const char *idem_key; /* --idempotency-key K */
    bool idempotent;      /* --idempotent: generate a key, retry */
    bool all;             /* release --all */
    int64_t grace_ms;     /* run: SIGTERM to SIGKILL */
    int exit_lost;        /* run: exit code when the lock was lost */
    int exit_held;        /* run: exit code when the lock could not be had */
};

/* Parse argv (and the environment) into o. Returns -1 to go on, or an exit
 * code to exit with at once: 0 after --help or --version (printed), 2
 * after a usage error (one line on stderr). o->auth_token is the caller's
 * to free with opts_cleanup(), whatever the result. */
int opts_parse(struct opts *o, int argc, char **argv);

/* Free what o owns. */
void opts_cleanup(struct opts *o);

/* "250ms", "30s", "1.5s", "2m", "1h" or "0" into *ms: 0, or -1 with a
 * reason in err (errlen bytes) - a bare number is refused ("give a
 * unit"). */
int opts_parse_duration(const char *s, int64_t *ms, char *err, size_t errlen);

/* The command's name ("acquire", ...). */
const char *opts_cmd_name(enum opts_cmd cmd);

#endif /* CLI_OPTS_H */

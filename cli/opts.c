/*
 * cli/opts.c - lockctl's command line (getopt_long, options anywhere before
 * "--"), the environment's defaults, durations with a unit, and --help.
 */
#include "cli/opts.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_URL        "http://127.0.0.1:8080"
#define DEFAULT_TIMEOUT_MS 10000
#define MAX_DURATION_MS    (100LL * 24 * 3600 * 1000) /* 100 days */

enum {
    OPT_URL = 256,
    OPT_AUTH,
    OPT_TIMEOUT,
    OPT_FORMAT,
    OPT_TTL,
    OPT_WAIT,
    OPT_OWNER,
    OPT_SHARED,
    OPT_LIMIT,
    OPT_MODE,
    OPT_TOKEN,
    OPT_IDEM_KEY,
    OPT_IDEMPOTENT,
    OPT_ALL,
    OPT_GRACE,
    OPT_EXIT_LOST,
    OPT_EXIT_HELD,
};

static const struct option long_opts[] = {
    { "url", required_argument, NULL, OPT_URL },
    { "auth-token-file", required_argument, NULL, OPT_AUTH },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "format", required_argument, NULL, OPT_FORMAT },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { "ttl", required_argument, NULL, OPT_TTL },
    { "wait", required_argument, NULL, OPT_WAIT },
    { "owner", required_argument, NULL, OPT_OWNER },
    { "shared", no_argument, NULL, OPT_SHARED },
    { "limit", required_argument, NULL, OPT_LIMIT },
    { "mode", required_argument, NULL, OPT_MODE },
    { "token", required_argument, NULL, OPT_TOKEN },
    { "idempotency-key", required_argument, NULL, OPT_IDEM_KEY },
    { "idempotent", no_argument, NULL, OPT_IDEMPOTENT },
    { "all", no_argument, NULL, OPT_ALL },
    { "grace", required_argument, NULL, OPT_GRACE },
    { "exit-lost", required_argument, NULL, OPT_EXIT_LOST },
    { "exit-held", required_argument, NULL, OPT_EXIT_HELD },
    { NULL, 0, NULL, 0 },
};

static const char help_text[] =
    "Usage: lockctl [OPTIONS] COMMAND [OPTIONS] KEY... [-- CMD ARGS...]\n"
    "\n"
    "Locks from lockd (distributed locks over HTTP/JSON), from the shell.\n"
    "\n"
    "Commands:\n"
    "  acquire KEY...   take a lock (several keys: all or nothing)\n"
    "  renew KEY...     extend a held lock (--token or LOCKD_TOKEN)\n"
    "  release KEY...   give a lock back (--token or LOCKD_TOKEN)\n"
    "  inspect KEY      show who holds a key (exit 4 when free)\n"
    "  run KEY... -- CMD ARGS...\n"
    "                   hold the lock while CMD runs, renewing it; stop CMD\n"
    "                   when the lock is lost\n"
    "\n"
    "Global options (LOCKD_URL, LOCKD_AUTH_TOKEN_FILE give defaults):\n"
    "  --url URL                lockd's address (http://127.0.0.1:8080)\n"
    "  --auth-token-file FILE   send its first line as a bearer token\n"
    "  --timeout DUR            per HTTP request, on top of any wait (10s)\n"
    "  --format json|env        output: the server's JSON, or shell\n"
    "                           assignments for eval (json)\n"
    "  -q, --quiet              no output on success\n"
    "  -h, --help               this help;  -V, --version  the version\n"
    "\n"
    "Lock options:\n"
    "  --ttl DUR                lock lifetime (lockd's default; run: 15s)\n"
    "  --wait DUR               wait this long if held (0: try once)\n"
    "  --owner S                label shown by inspect\n"
    "  --shared, --mode exclusive|shared, --limit N (a semaphore of N)\n"
    "  --token T                acquire: re-entry; renew/release: the token\n"
    "  --idempotency-key K      make retries of this acquire safe\n"
    "  --idempotent             random Idempotency-Key, retry on 503/429/\n"
    "                           connection errors while the wait allows\n"
    "  --all                    release: every hold of a re-entered lock\n"
    "  --grace DUR              run: SIGTERM to SIGKILL (10s)\n"
    "  --exit-lost N            run: exit code when the lock is lost (75)\n"
    "  --exit-held N            run: exit code when it is held (1)\n"
    "\n"
    "Durations take a unit: 250ms, 30s, 1.5s, 2m, 1h.\n"
    "\n"
    "Exit codes: 0 ok, 1 held, 2 usage / 400, 3 unavailable, 4 not held,\n"
    "5 token mismatch, 6 denied; run: the command's status (128+N when\n"
    "killed by signal N), 75 lock lost, 125/126/127 could not run it.\n"
    "\n"
    "Examples:\n"
    "  lockctl acquire orders/42 --ttl 30s --wait 5s\n"
    "  eval \"$(lockctl acquire orders/42 --format env)\"\n"
    "  lockctl renew orders/42 --ttl 30s      # token from LOCKD_TOKEN\n"
    "  lockctl release orders/42\n"
    "  lockctl run --wait 1m nightly-backup -- /usr/local/bin/backup.sh\n"
    "  lockctl acquire stock/berlin stock/paris --ttl 10s\n"
    "\n"
    "More: docs/lockctl.md.\n";

const char *opts_cmd_name(enum opts_cmd cmd)
{
    switch (cmd) {
    case CMD_NONE:
        return "lockctl";
    case CMD_ACQUIRE:
        return "acquire";
    case CMD_RENEW:
        return "renew";
    case CMD_RELEASE:
        return "release";
    case CMD_INSPECT:
        return "inspect";
    case CMD_RUN:
        return "run";
    }
    return "lockctl";
}

__attribute__((format(printf, 1, 2))) static int usage(const char *fmt, ...)
{
    va_list ap;

    fputs("lockctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see lockctl --help)\n", stderr);
    return EXIT_USAGE;
}

int opts_parse_duration(const char *s, int64_t *ms, char *err, size_t errlen)
{
    const char *p = s;
    int64_t whole = 0, frac = 0, scale = 1, mult;
    int digits = 0;

    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (whole > MAX_DURATION_MS)
            goto too_long;
        whole = whole * 10 + (*p - '0');
    }
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
            if (scale < 1000000) { /* finer than a nanosecond is noise */
                frac = frac * 10 + (*p - '0');
                scale *= 10;
            }
        }
    }
    if (digits == 0) {
        snprintf(err, errlen, "bad duration '%s': e.g. 30s or 1500ms", s);
        return -1;
    }
    if (*p == '\0') {
        if (whole == 0 && frac == 0 && strchr(s, '.') == NULL) {
            *ms = 0; /* zero is zero in any unit */
            return 0;
        }
        snprintf(err, errlen, "duration '%s': give a unit, e.g. 30s or 1500ms",
                 s);
        return -1;
    }
    if (strcmp(p, "ms") == 0)
        mult = 1;
    else if (strcmp(p, "s") == 0)
        mult = 1000;
    else if (strcmp(p, "m") == 0)
        mult = 60000;
    else if (strcmp(p, "h") == 0)
        mult = 3600000;
    else {
        snprintf(err, errlen, "duration '%s': unknown unit (ms, s, m or h)", s);
        return -1;
    }
    if (whole > MAX_DURATION_MS / mult)
        goto too_long;
    *ms = whole * mult + (frac * mult + scale / 2) / scale;
    return 0;
too_long:
    snprintf(err, errlen, "duration '%s' is too long", s);
    return -1;
}

static int parse_dur_opt(const char *name, const char *arg, int64_t *out)
{
    char err[200];

    if (opts_parse_duration(arg, out, err, sizeof err) != 0) {
        fprintf(stderr, "lockctl: --%s: %s\n", name, err);
        return EXIT_USAGE;
    }
    return -1;
}

/* A decimal integer in [lo, hi] without sign or junk: 0, or -1. */
static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int set_url(struct opts *o, const char *url)
{
    size_t n = strlen(url);

    while (n > 0 && url[n - 1] == '/')
        n--;
    if (n == 0 || n >= sizeof o->url)
        return usage("bad --url '%s'", url);
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        return usage("--url '%s': give http://host:port", url);
    memcpy(o->url, url, n);
    o->url[n] = '\0';
    return -1;
}

static int read_token_file(struct opts *o, const char *path)
{
    char line[4096];
    FILE *f = fopen(path, "re");
    size_t n;

    if (f == NULL) {
        fprintf(stderr, "lockctl: --auth-token-file %s: %s\n", path,
                strerror(errno));
        return EXIT_USAGE;
    }
    if (fgets(line, sizeof line, f) == NULL)
        line[0] = '\0';
    fclose(f);
    n = strcspn(line, "\r\n");
    line[n] = '\0';
    if (n == 0)
        return usage("--auth-token-file %s: the first line is empty", path);
    free(o->auth_token);
    o->auth_token = strdup(line);
    return o->auth_token != NULL ? -1 : EXIT_USAGE;
}

static int set_command(struct opts *o, const char *word)
{
    static const struct {
        const char *name;
        enum opts_cmd cmd;
    } cmds[] = {
        { "acquire", CMD_ACQUIRE }, { "renew", CMD_RENEW },
        { "release", CMD_RELEASE }, { "inspect", CMD_INSPECT },
        { "run", CMD_RUN },
    };

    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(word, cmds[i].name) == 0) {
            o->cmd = cmds[i].cmd;
            return -1;
        }
    }
    return usage("unknown command '%s'", word);
}

static int add_word(struct opts *o, const char *word)
{
    if (o->cmd == CMD_NONE)
        return set_command(o, word);
    if (o->nkeys >= OPTS_MAX_KEYS)
        return usage("too many keys (at most %d)", OPTS_MAX_KEYS);
    o->keys[o->nkeys++] = word;
    return -1;
}

static int set_mode(struct opts *o, const char *arg)
{
    if (strcmp(arg, "shared") == 0)
        o->shared = true;
    else if (strcmp(arg, "exclusive") == 0)
        o->shared = false;
    else
        return usage("--mode '%s': exclusive or shared", arg);
    o->mode_given = true;
    return -1;
}

static int
set_int_opt(const char *name, const char *arg, long lo, long hi, long *out)
{
    if (parse_int(arg, lo, hi, out) != 0) {
        fprintf(stderr, "lockctl: --%s '%s': a number from %ld to %ld\n", name,
                arg, lo, hi);
        return EXIT_USAGE;
    }
    return -1;
}

/* One option of getopt_long: -1 to go on, else an exit code. */
static int take_option(struct opts *o, int c, const char *arg)
{
    long v = 0;
    int rc;

    switch (c) {
    case 1:
        return add_word(o, arg);
    case OPT_URL:
        return set_url(o, arg);
    case OPT_AUTH:
        return read_token_file(o, arg);
    case OPT_TIMEOUT:
        rc = parse_dur_opt("timeout", arg, &o->timeout_ms);
        if (rc < 0 && o->timeout_ms <= 0)
            return usage("--timeout %s: must be above 0", arg);
        return rc;
    case OPT_FORMAT:
        if (strcmp(arg, "json") == 0)
            o->format = FORMAT_JSON;
        else if (strcmp(arg, "env") == 0)
            o->format = FORMAT_ENV;
        else
            return usage("--format '%s': json or env", arg);
        return -1;
    case 'q':
        o->quiet = true;
        return -1;
    case OPT_TTL:
        rc = parse_dur_opt("ttl", arg, &o->ttl_ms);
        if (rc < 0 && o->ttl_ms <= 0)
            return usage("--ttl %s: must be above 0", arg);
        return rc;
    case OPT_WAIT:
        return parse_dur_opt("wait", arg, &o->wait_ms);
    case OPT_GRACE:
        return parse_dur_opt("grace", arg, &o->grace_ms);
    case OPT_OWNER:
        o->owner = arg;
        return -1;
    case OPT_SHARED:
        o->shared = o->mode_given = true;
        return -1;
    case OPT_MODE:
        return set_mode(o, arg);
    case OPT_LIMIT:
        rc = set_int_opt("limit", arg, 1, 10000, &v);
        o->limit = v;
        return rc;
    case OPT_TOKEN:
        o->token = arg;
        return -1;
    case OPT_IDEM_KEY:
        o->idem_key = arg;
        return -1;
    case OPT_IDEMPOTENT:
        o->idempotent = true;
        return -1;
    case OPT_ALL:
        o->all = true;
        return -1;
    case OPT_EXIT_LOST:
        rc = set_int_opt("exit-lost", arg, 0, 255, &v);
        o->exit_lost = (int)v;
        return rc;
    case OPT_EXIT_HELD:
        rc = set_int_opt("exit-held", arg, 0, 255, &v);
        o->exit_held = (int)v;
        return rc;
    }
    return EXIT_USAGE;
}

/* run renews its lock every third of the TTL: a short TTL frees the key
 * soon after a crash of lockctl's host and costs three renews per TTL. */
#define RUN_DEFAULT_TTL_MS 15000

static void set_defaults(struct opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->url, sizeof o->url, "%s", DEFAULT_URL);
    o->timeout_ms = DEFAULT_TIMEOUT_MS;
    o->ttl_ms = o->wait_ms = o->limit = -1;
    o->grace_ms = 10000;
    o->exit_lost = 75;
    o->exit_held = 1;
}

static int from_env(struct opts *o)
{
    const char *url = getenv("LOCKD_URL");
    const char *file = getenv("LOCKD_AUTH_TOKEN_FILE");
    int rc;

    if (url != NULL && *url != '\0') {
        rc = set_url(o, url);
        if (rc >= 0)
            return rc;
    }
    if (file != NULL && *file != '\0')
        return read_token_file(o, file);
    return -1;
}

static int bad_option(char **argv, int optind_now, int c)
{
    const char *arg = argv[optind_now - 1];

    if (c == '?' && optopt != 0 && optopt < 256)
        fprintf(stderr, "lockctl: unknown option -%c", optopt);
    else
        fprintf(stderr, "lockctl: bad option '%s'", arg);
    fputs(" (see lockctl --help)\n", stderr);
    return EXIT_USAGE;
}

/* Whether each option given makes sense with the command and the keys. */
static int check_command(struct opts *o)
{
    const char *name = opts_cmd_name(o->cmd);
    bool multi = o->nkeys > 1;

    if (o->cmd == CMD_NONE)
        return usage("give a command: acquire, renew, release, inspect or run");
    if (o->nkeys == 0)
        return usage("%s: give a KEY", name);
    if (o->cmd == CMD_INSPECT && multi)
        return usage("%s: one KEY at a time", name);
    if (o->cmd == CMD_RUN && o->child_argv == NULL)
        return usage("%s: give the command after --: run KEY -- CMD ARGS",
                     name);
    if (o->cmd != CMD_RUN && o->child_argv != NULL)
        return usage("%s: unexpected '--' (only run takes a command)", name);
    if (o->limit > 0 && !o->mode_given)
        o->shared = o->mode_given = true; /* a limit makes a semaphore */
    if (o->limit > 0 && !o->shared)
        return usage("%s: --limit needs shared mode", name);
    if (multi && (o->shared || o->limit > 0 ||
                  (o->token != NULL && o->cmd == CMD_ACQUIRE)))
        return usage("%s: --shared, --limit and --token take one KEY", name);
    if ((o->idempotent || o->idem_key != NULL) && multi)
        return usage("%s: several keys have no idempotent form", name);
    if (o->idempotent && o->idem_key != NULL)
        return usage("%s: --idempotent or --idempotency-key, not both", name);
    if (o->cmd == CMD_ACQUIRE && o->token != NULL &&
        (o->wait_ms >= 0 || o->owner != NULL || o->mode_given ||
         o->idempotent || o->idem_key != NULL))
        return usage("%s: a re-entry (--token) takes only --ttl", name);
    if (o->cmd == CMD_RENEW || o->cmd == CMD_RELEASE) {
        if (o->token == NULL)
            o->token = getenv("LOCKD_TOKEN");
        if (o->token == NULL || *o->token == '\0')
            return usage("%s: give --token T (or set LOCKD_TOKEN)", name);
    }
    if (o->cmd == CMD_RUN && o->token != NULL)
        return usage("%s: --token is not for run", name);
    if (o->cmd == CMD_RUN && o->ttl_ms <= 0)
        o->ttl_ms = RUN_DEFAULT_TTL_MS; /* renewed, so short is cheap */
    return -1;
}

int opts_parse(struct opts *o, int argc, char **argv)
{
    int c, rc;

    set_defaults(o);
    rc = from_env(o);
    if (rc >= 0)
        return rc;
    opterr = 0;
    optind = 1;
    /* "-": words come back in order as option 1, so the command may sit
     * anywhere among the options; "--" ends them. */
    for (;;) {
        c = getopt_long(argc, argv, "-qhV", long_opts, NULL);
        if (c == -1)
            break;
        if (c == 'h') {
            fputs(help_text, stdout);
            return EXIT_OK;
        }
        if (c == 'V') {
            printf("lockctl %s\n", LOCKD_VERSION);
            return EXIT_OK;
        }
        if (c == '?' || c == ':')
            return bad_option(argv, optind, c);
        rc = take_option(o, c, optarg);
        if (rc >= 0)
            return rc;
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") == 0) {
        if (o->cmd == CMD_RUN)
            o->child_argv = &argv[optind];
        else
            for (; optind < argc; optind++) {
                rc = add_word(o, argv[optind]);
                if (rc >= 0)
                    return rc;
            }
    }
    return check_command(o);
}

void opts_cleanup(struct opts *o)
{
    free(o->auth_token);
    o->auth_token = NULL;
}

/*
 * tests/unit/test_config.c - service/config.c: defaults, flags (both
 * "--flag value" and "--flag=value"), LOCKD_* environment variables, the
 * flag winning over the environment, invalid values, listen addresses,
 * --help/--version, --check-health and the auth token file; the thread
 * count from the usable CPUs and --max-store-connections; unknown LOCKD_*
 * variables and the name suggested.
 */
#include "service/config.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/authz.h"
#include "tests/unit/check.h"

static const char *const env_names[] = {
    "LOCKD_LISTEN",
    "LOCKD_BACKEND",
    "LOCKD_THREADS",
    "LOCKD_HTTP_THREADS",
    "LOCKD_DEFAULT_TTL_MS",
    "LOCKD_MAX_TTL_MS",
    "LOCKD_MAX_WAIT_MS",
    "LOCKD_MAX_BODY_BYTES",
    "LOCKD_MAX_CONNECTIONS",
    "LOCKD_LOG_LEVEL",
    "LOCKD_LOG_FORMAT",
    "LOCKD_AUTH_TOKEN_FILE",
    "LOCKD_AUTH_FILE",
    "LOCKD_MAX_CONNECTIONS_PER_IP",
    "LOCKD_REQUEST_TIMEOUT_MS",
    "LOCKD_MAX_STORE_CONNECTIONS",
    "LOCKD_LOG_FILE",
};

static void env_clear(void)
{
    for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
        unsetenv(env_names[i]);
}

/* config_load with argv from the NULL-terminated arguments, its output on
 * stdout and stderr thrown away (the messages are for people). */
static enum config_result load(struct config *c, ...)
{
    char *argv[32];
    int argc = 0, saved_out, saved_err, devnull;
    enum config_result r;
    va_list ap;

    argv[argc++] = (char *)"lockd";
    va_start(ap, c);
    for (char *a = va_arg(ap, char *); a != NULL && argc < 31;
         a = va_arg(ap, char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    fflush(stdout);
    fflush(stderr);
    saved_out = dup(STDOUT_FILENO);
    saved_err = dup(STDERR_FILENO);
    devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
    r = config_load(c, argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    close(saved_out);
    close(saved_err);
    close(devnull);
    return r;
}

#define LOAD(c, ...) load(c, __VA_ARGS__, (char *)NULL)

/* The result for one invalid set of arguments (env cleared first). */
#define CHECK_REJECTED(...)                                 \
    do {                                                    \
        struct config c_;                                   \
        env_clear();                                        \
        CHECK_EQ_INT(LOAD(&c_, __VA_ARGS__), CONFIG_ERROR); \
        config_cleanup(&c_);                                \
    } while (0)

static void test_config_defaults(void)
{
    struct config c;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    env_clear();
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_OK);
    CHECK_STR_EQ(c.listen, "127.0.0.1:8080");
    CHECK_STR_EQ(c.listen_host, "127.0.0.1");
    CHECK_STR_EQ(c.listen_port, "8080");
    CHECK_STR_EQ(c.backend, "memory://");
    CHECK_EQ_INT(c.threads, 0); /* auto: set once the backend is known */
    CHECK_EQ_INT(c.cores, ncpu > 0 ? ncpu : 2);
    CHECK_EQ_U64(c.default_ttl_ms, 30000);
    CHECK_EQ_U64(c.max_ttl_ms, 86400000);
    CHECK_EQ_U64(c.max_wait_ms, 300000);
    CHECK_EQ_U64(c.max_body_bytes, 8192);
    CHECK_EQ_INT(c.max_connections, 16000);
    CHECK_EQ_INT(c.max_connections_per_ip, 0); /* auto: half the limit */
    CHECK_EQ_U64(c.request_timeout_ms, 10000);
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_INFO);
    CHECK_EQ_INT(c.log_format, LOG_FORMAT_TEXT);
    CHECK(c.auth_token_file == NULL && c.authz == NULL);
    CHECK(!c.check_health);
    CHECK(c.check_health_url == NULL);
    config_cleanup(&c);
}

static void test_config_reads_every_flag(void)
{
    struct config c;

    env_clear();
    CHECK_EQ_INT(LOAD(&c, "--listen", "0.0.0.0:9000", "--backend",
                      "redis://127.0.0.1:6379", "--threads", "4",
                      "--default-ttl-ms", "1000", "--max-ttl-ms", "60000",
                      "--max-wait-ms", "0", "--max-body-bytes", "1024",
                      "--max-connections", "100", "--log-level", "debug",
                      "--log-format", "json", "--max-connections-per-ip", "7",
                      "--request-timeout-ms", "2500"),
                 CONFIG_OK);
    CHECK_STR_EQ(c.listen_host, "0.0.0.0");
    CHECK_STR_EQ(c.listen_port, "9000");
    CHECK_STR_EQ(c.backend, "redis://127.0.0.1:6379");
    CHECK_EQ_INT(c.threads, 4);
    CHECK_EQ_U64(c.default_ttl_ms, 1000);
    CHECK_EQ_U64(c.max_ttl_ms, 60000);
    CHECK_EQ_U64(c.max_wait_ms, 0);
    CHECK_EQ_U64(c.max_body_bytes, 1024);
    CHECK_EQ_INT(c.max_connections, 100);
    CHECK_EQ_INT(c.max_connections_per_ip, 7);
    CHECK_EQ_U64(c.request_timeout_ms, 2500);
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_DEBUG);
    CHECK_EQ_INT(c.log_format, LOG_FORMAT_JSON);
    config_cleanup(&c);
}

static void test_config_reads_flag_equals_value(void)
{
    struct config c;

    env_clear();
    CHECK_EQ_INT(LOAD(&c, "--listen=localhost:1", "--threads=256",
                      "--default-ttl-ms=5", "--max-ttl-ms=5",
                      "--max-wait-ms=300000", "--log-level=warn",
                      "--log-format=text", "--backend=mysql://u:p=x@h/db"),
                 CONFIG_OK);
    CHECK_STR_EQ(c.listen_host, "localhost");
    CHECK_STR_EQ(c.listen_port, "1");
    CHECK_EQ_INT(c.threads, 256);
    CHECK_EQ_U64(c.default_ttl_ms, 5);
    CHECK_EQ_U64(c.max_ttl_ms, 5);
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_WARN);
    CHECK_EQ_INT(c.log_format, LOG_FORMAT_TEXT);
    /* only the first '=' splits */
    CHECK_STR_EQ(c.backend, "mysql://u:p=x@h/db");
    config_cleanup(&c);
    /* a later flag wins over an earlier one */
    CHECK_EQ_INT(LOAD(&c, "--threads", "2", "--threads=3"), CONFIG_OK);
    CHECK_EQ_INT(c.threads, 3);
    config_cleanup(&c);
}

static void test_config_reads_environment(void)
{
    struct config c;

    env_clear();
    setenv("LOCKD_LISTEN", "[::1]:7000", 1);
    setenv("LOCKD_BACKEND", "zookeeper://h1:2181,h2:2181/lockd", 1);
    setenv("LOCKD_THREADS", "3", 1);
    setenv("LOCKD_DEFAULT_TTL_MS", "2000", 1);
    setenv("LOCKD_MAX_TTL_MS", "4000", 1);
    setenv("LOCKD_MAX_WAIT_MS", "10", 1);
    setenv("LOCKD_MAX_BODY_BYTES", "2", 1);
    setenv("LOCKD_MAX_CONNECTIONS", "16", 1);
    setenv("LOCKD_MAX_CONNECTIONS_PER_IP", "3", 1);
    setenv("LOCKD_REQUEST_TIMEOUT_MS", "0", 1); /* no bound */
    setenv("LOCKD_LOG_LEVEL", "error", 1);
    setenv("LOCKD_LOG_FORMAT", "json", 1);
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_OK);
    CHECK_STR_EQ(c.listen_host, "::1");
    CHECK_STR_EQ(c.listen_port, "7000");
    CHECK_STR_EQ(c.backend, "zookeeper://h1:2181,h2:2181/lockd");
    CHECK_EQ_INT(c.threads, 3);
    CHECK_EQ_U64(c.default_ttl_ms, 2000);
    CHECK_EQ_U64(c.max_ttl_ms, 4000);
    CHECK_EQ_U64(c.max_wait_ms, 10);
    CHECK_EQ_U64(c.max_body_bytes, 2);
    CHECK_EQ_INT(c.max_connections, 16);
    CHECK_EQ_INT(c.max_connections_per_ip, 3);
    CHECK_EQ_U64(c.request_timeout_ms, 0);
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_ERROR);
    CHECK_EQ_INT(c.log_format, LOG_FORMAT_JSON);
    config_cleanup(&c);
    env_clear();
}

static void test_config_flag_wins_over_environment(void)
{
    struct config c;

    env_clear();
    setenv("LOCKD_THREADS", "3", 1);
    setenv("LOCKD_LISTEN", "127.0.0.1:1111", 1);
    setenv("LOCKD_LOG_LEVEL", "error", 1);
    setenv("LOCKD_MAX_TTL_MS", "1000", 1);
    CHECK_EQ_INT(LOAD(&c, "--threads", "5", "--listen=127.0.0.1:2222",
                      "--log-level", "debug", "--max-ttl-ms", "90000"),
                 CONFIG_OK);
    CHECK_EQ_INT(c.threads, 5);
    CHECK_STR_EQ(c.listen_port, "2222");
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_DEBUG);
    CHECK_EQ_U64(c.max_ttl_ms, 90000);
    config_cleanup(&c);
    /* the environment still fills what the flags leave */
    unsetenv("LOCKD_MAX_TTL_MS"); /* 1000 is below the default TTL */
    CHECK_EQ_INT(LOAD(&c, "--threads", "5"), CONFIG_OK);
    CHECK_STR_EQ(c.listen_port, "1111");
    config_cleanup(&c);
    /* a flag does not excuse a bad variable: it is read and refused */
    setenv("LOCKD_THREADS", "lots", 1);
    CHECK_EQ_INT(LOAD(&c, "--threads", "5"), CONFIG_ERROR);
    config_cleanup(&c);
    env_clear();
}

static void test_config_rejects_invalid_values(void)
{
    CHECK_REJECTED("--threads", "0");
    CHECK_REJECTED("--threads", "257");
    CHECK_REJECTED("--threads", "abc");
    CHECK_REJECTED("--threads", "-1");
    CHECK_REJECTED("--threads", "+4");
    CHECK_REJECTED("--threads", " 4");
    CHECK_REJECTED("--threads", "4x");
    CHECK_REJECTED("--threads=");
    CHECK_REJECTED("--default-ttl-ms", "0");
    CHECK_REJECTED("--default-ttl-ms", "1.5");
    CHECK_REJECTED("--max-ttl-ms", "9007199254740992"); /* 2^53 */
    CHECK_REJECTED("--max-ttl-ms", "99999999999999999999999");
    CHECK_REJECTED("--max-wait-ms", "-1");
    CHECK_REJECTED("--max-body-bytes", "1");
    CHECK_REJECTED("--max-body-bytes", "1048577");
    CHECK_REJECTED("--max-connections", "0");
    CHECK_REJECTED("--max-connections", "1000001");
    CHECK_REJECTED("--max-connections-per-ip", "0");
    CHECK_REJECTED("--max-connections-per-ip", "1000001");
    CHECK_REJECTED("--max-connections-per-ip", "-1");
    CHECK_REJECTED("--request-timeout-ms", "3600001");
    CHECK_REJECTED("--request-timeout-ms", "1s");
    CHECK_REJECTED("--request-timeout-ms", "-5");
    CHECK_REJECTED("--log-level", "verbose");
    CHECK_REJECTED("--log-level", "INFO ");
    CHECK_REJECTED("--log-format", "xml");
    CHECK_REJECTED("--backend", "");
    CHECK_REJECTED("--listen=");
    CHECK_REJECTED("--nope", "1");
    CHECK_REJECTED("--threads"); /* no value */
    CHECK_REJECTED("--listen");
    CHECK_REJECTED("serve");
    CHECK_REJECTED("-t", "4");
    CHECK_REJECTED("--auth-token-file", "");
    /* from the environment too */
    {
        struct config c;
        env_clear();
        setenv("LOCKD_MAX_WAIT_MS", "soon", 1);
        CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_ERROR);
        config_cleanup(&c);
        env_clear();
        setenv("LOCKD_LOG_FORMAT", "", 1);
        CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_ERROR);
        config_cleanup(&c);
        env_clear();
    }
}

static void test_config_default_ttl_above_max_is_error(void)
{
    struct config c;

    CHECK_REJECTED("--default-ttl-ms", "5000", "--max-ttl-ms", "1000");
    CHECK_REJECTED("--max-ttl-ms", "1000"); /* default 30000 > 1000 */
    env_clear();
    setenv("LOCKD_DEFAULT_TTL_MS", "2000", 1);
    CHECK_EQ_INT(LOAD(&c, "--max-ttl-ms", "1999"), CONFIG_ERROR);
    config_cleanup(&c);
    CHECK_EQ_INT(LOAD(&c, "--max-ttl-ms", "2000"), CONFIG_OK);
    config_cleanup(&c);
    env_clear();
}

static void test_config_parses_listen_addresses(void)
{
    static const struct {
        const char *listen, *host, *port;
    } good[] = {
        { "127.0.0.1:8080", "127.0.0.1", "8080" },
        { "0.0.0.0:1", "0.0.0.0", "1" },
        { "localhost:65535", "localhost", "65535" },
        { "[::1]:8080", "::1", "8080" },
        { "[::]:80", "::", "80" },
        { "[fe80::1%eth0]:9", "fe80::1%eth0", "9" },
        { "lockd.example.com:443", "lockd.example.com", "443" },
    };
    static const char *const bad[] = {
        "8080",     ":8080",   "host:",    "host:0",      "host:65536",
        "host:80x", "host:-1", "::1:8080", "[::1]8080",   "[::1]",
        "[::1]:",   "[]:80",   "[::1:80",  "host:8080:1", "host: 80",
    };
    struct config c;

    env_clear();
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        CHECK_MSG(LOAD(&c, "--listen", good[i].listen) == CONFIG_OK, "%s",
                  good[i].listen);
        CHECK_STR_EQ(c.listen_host, good[i].host);
        CHECK_STR_EQ(c.listen_port, good[i].port);
        CHECK_STR_EQ(c.listen, good[i].listen);
        config_cleanup(&c);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_MSG(LOAD(&c, "--listen", bad[i]) == CONFIG_ERROR, "%s", bad[i]);
        config_cleanup(&c);
    }
}

static void test_config_help_and_version_exit(void)
{
    struct config c;

    env_clear();
    CHECK_EQ_INT(LOAD(&c, "--help"), CONFIG_EXIT);
    config_cleanup(&c);
    CHECK_EQ_INT(LOAD(&c, "-h"), CONFIG_EXIT);
    config_cleanup(&c);
    CHECK_EQ_INT(LOAD(&c, "--version"), CONFIG_EXIT);
    config_cleanup(&c);
    CHECK_EQ_INT(LOAD(&c, "--threads", "2", "--help"), CONFIG_EXIT);
    config_cleanup(&c);
}

static void test_config_help_lists_every_option(void)
{
    static const char *const flags[] = {
        "--listen",
        "--backend",
        "--threads",
        "--default-ttl-ms",
        "--max-ttl-ms",
        "--max-wait-ms",
        "--max-body-bytes",
        "--max-connections",
        "--log-level",
        "--log-format",
        "--auth-token-file",
        "--check-health",
        "--help",
        "--version",
        "--max-connections-per-ip",
        "--request-timeout-ms",
    };
    static const char *const schemes[] = {
        /* the backend URL forms --backend takes */
        "memory://",
        "redis://",
        "zookeeper://",
        "mysql://",
        "redlock://h1:6379,h2:6379,h3:6379",
    };
    char path[] = "/tmp/lockd-test-help-" MKTEMP_SUFFIX;
    int fd = mkstemp(path), saved;
    char *argv[] = { (char *)"lockd", (char *)"--help", NULL };
    char text[8192];
    ssize_t n;
    struct config c;

    CHECK(fd >= 0);
    if (fd < 0)
        return;
    env_clear();
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    dup2(fd, STDOUT_FILENO);
    CHECK_EQ_INT(config_load(&c, 2, argv), CONFIG_EXIT);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    n = pread(fd, text, sizeof(text) - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        CHECK_CONTAINS(text, flags[i]);
    for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
        CHECK_CONTAINS(text, env_names[i]);
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        CHECK_CONTAINS(text, schemes[i]);
    config_cleanup(&c);
}

static void test_config_check_health(void)
{
    struct config c;

    env_clear();
    CHECK_EQ_INT(LOAD(&c, "--check-health"), CONFIG_OK);
    CHECK(c.check_health);
    CHECK(c.check_health_url == NULL);
    CHECK_STR_EQ(c.listen_host, "127.0.0.1");
    config_cleanup(&c);
    CHECK_EQ_INT(LOAD(&c, "--check-health", "http://127.0.0.1:9/healthz"),
                 CONFIG_OK);
    CHECK(c.check_health);
    CHECK_STR_EQ(c.check_health_url, "http://127.0.0.1:9/healthz");
    config_cleanup(&c);
    /* a flag after it is not its URL */
    CHECK_EQ_INT(LOAD(&c, "--check-health", "--listen", "0.0.0.0:9999"),
                 CONFIG_OK);
    CHECK(c.check_health_url == NULL);
    CHECK_STR_EQ(c.listen_host, "0.0.0.0");
    CHECK_STR_EQ(c.listen_port, "9999");
    config_cleanup(&c);
    /* the listen address still has to parse: it makes the default URL */
    CHECK_EQ_INT(LOAD(&c, "--check-health", "--listen", "nope"), CONFIG_ERROR);
    config_cleanup(&c);
    setenv("LOCKD_LISTEN", "127.0.0.1:4444", 1);
    CHECK_EQ_INT(LOAD(&c, "--check-health"), CONFIG_OK);
    CHECK_STR_EQ(c.listen_port, "4444");
    config_cleanup(&c);
    env_clear();
}

/* True if t is the --auth-token-file's token (credential "token"). */
static bool token_is(struct config *c, const char *t)
{
    char name[API_CLIENT_LEN + 1];

    return authz_token_name(c->authz, t, name, sizeof(name)) == 0 &&
           strcmp(name, "token") == 0 &&
           authz_token_name(c->authz, "x", name, sizeof(name)) != 0;
}

static void test_config_reads_auth_token_file(void)
{
    char path[] = "/tmp/lockd-test-token-" MKTEMP_SUFFIX;
    int fd = mkstemp(path);
    struct config c;
    static const char good[] = "0123456789abcdefXYZ\nsecond line\n";
    static const char crlf[] = "0123456789abcdefXYZ\r\n";
    static const char shorty[] = "short\n";
    static const char blank[] = "\nsecond line\n";

    CHECK(fd >= 0);
    if (fd < 0)
        return;
    env_clear();
    CHECK(write(fd, good, sizeof(good) - 1) == (ssize_t)sizeof(good) - 1);
    CHECK_EQ_INT(LOAD(&c, "--auth-token-file", path), CONFIG_OK);
    CHECK_STR_EQ(c.auth_token_file, path);
    CHECK(token_is(&c, "0123456789abcdefXYZ"));
    config_cleanup(&c);
    CHECK(c.authz == NULL);

    CHECK(ftruncate(fd, 0) == 0);
    CHECK(pwrite(fd, crlf, sizeof(crlf) - 1, 0) == (ssize_t)sizeof(crlf) - 1);
    setenv("LOCKD_AUTH_TOKEN_FILE", path, 1);
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_OK);
    CHECK(token_is(&c, "0123456789abcdefXYZ"));
    config_cleanup(&c);

    /* any non-empty first line is a token */
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(pwrite(fd, shorty, sizeof(shorty) - 1, 0) ==
          (ssize_t)sizeof(shorty) - 1);
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_OK);
    CHECK(token_is(&c, "short"));
    config_cleanup(&c);
    CHECK(ftruncate(fd, 0) == 0); /* an empty first line */
    CHECK(pwrite(fd, blank, sizeof(blank) - 1, 0) ==
          (ssize_t)sizeof(blank) - 1);
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_ERROR);
    config_cleanup(&c);
    CHECK(ftruncate(fd, 0) == 0); /* empty file */
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_ERROR);
    config_cleanup(&c);
    env_clear();
    close(fd);
    unlink(path);
    CHECK_EQ_INT(LOAD(&c, "--auth-token-file", path), CONFIG_ERROR);
    config_cleanup(&c);
}

static void test_config_reads_auth_file(void)
{
    char path[] = "/tmp/lockd-test-auth-" MKTEMP_SUFFIX;
    int fd = mkstemp(path);
    struct config c;
    static const char good[] =
        "{\"credentials\":[{\"name\":\"a\",\"token_sha256\":"
        "\"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\","
        "\"prefixes\":[\"a/\"],\"verbs\":[\"*\"]}]}";
    static const char bad[] = "{\"credentials\":[{\"name\":\"a\"}]}";
    char name[API_CLIENT_LEN + 1];

    CHECK(fd >= 0);
    if (fd < 0)
        return;
    env_clear();
    CHECK(write(fd, good, sizeof(good) - 1) == (ssize_t)sizeof(good) - 1);
    CHECK_EQ_INT(LOAD(&c, "--auth-file", path), CONFIG_OK);
    CHECK_STR_EQ(c.auth_file, path);
    CHECK(authz_token_name(c.authz, "abc", name, sizeof(name)) == 0);
    CHECK_STR_EQ(name, "a");
    config_cleanup(&c);
    CHECK(c.authz == NULL);
    setenv("LOCKD_AUTH_FILE", path, 1);
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_OK);
    CHECK(c.authz != NULL);
    config_cleanup(&c);
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(pwrite(fd, bad, sizeof(bad) - 1, 0) == (ssize_t)sizeof(bad) - 1);
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_ERROR);
    CHECK(c.authz == NULL);
    config_cleanup(&c);
    env_clear();
    close(fd);
    unlink(path);
    CHECK_EQ_INT(LOAD(&c, "--auth-file", path), CONFIG_ERROR);
    config_cleanup(&c);
}

static void test_config_reads_store_cap_and_log_file(void)
{
    struct config c;

    env_clear();
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_OK);
    CHECK_EQ_INT(c.max_store_connections, 64);
    CHECK(c.log_file == NULL);
    CHECK_EQ_INT(LOAD(&c, "--max-store-connections", "10000", "--log-file",
                      "/tmp/x.log"),
                 CONFIG_OK);
    CHECK_EQ_INT(c.max_store_connections, 10000);
    CHECK_STR_EQ(c.log_file, "/tmp/x.log");
    setenv("LOCKD_MAX_STORE_CONNECTIONS", "7", 1);
    setenv("LOCKD_LOG_FILE", "/tmp/y.log", 1);
    CHECK_EQ_INT(load(&c, (char *)NULL), CONFIG_OK);
    CHECK_EQ_INT(c.max_store_connections, 7);
    CHECK_STR_EQ(c.log_file, "/tmp/y.log");
    env_clear();
    CHECK_REJECTED("--max-store-connections", "0");
    CHECK_REJECTED("--max-store-connections", "10001");
    CHECK_REJECTED("--log-file", "");
}

/* config_size_threads on a fresh default config with threads and cap. */
static int size(struct config *c,
                const char *scheme,
                unsigned threads,
                unsigned cap,
                unsigned cpus,
                char *msg,
                size_t msglen)
{
    env_clear();
    CHECK_EQ_INT(load(c, (char *)NULL), CONFIG_OK);
    c->threads = threads;
    if (cap > 0)
        c->max_store_connections = cap;
    return config_size_threads(c, scheme, cpus, "N usable CPUs (why)", msg,
                               msglen);
}

static void test_config_default_threads_follow_cpus_and_backend(void)
{
    struct config c;
    char msg[512];

    CHECK_EQ_INT(size(&c, "memory", 0, 0, 3, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 3);
    CHECK_STR_EQ(msg, "3 threads: N usable CPUs (why)");
    CHECK_EQ_INT(size(&c, "redis", 0, 0, 2, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 8);
    CHECK_STR_EQ(msg, "8 threads: N usable CPUs (why), x4 for a network "
                      "backend; 2 HTTP threads: the usable CPUs");
    CHECK_EQ_INT(size(&c, "mysql", 0, 0, 1, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 4);
    /* zookeeper's one session does not grow with threads: no cap */
    CHECK_EQ_INT(size(&c, "zookeeper", 0, 2, 64, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 256);
    CHECK_EQ_INT(size(&c, "memory", 0, 1, 500, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 256); /* --threads' own bound */
}

static void test_config_default_threads_capped_by_store_connections(void)
{
    struct config c;
    char msg[512], rule[96];

    /* redis: 2 per thread + 3, so 64 allows 30 */
    CHECK_EQ_INT(size(&c, "redis", 0, 0, 16, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 30);
    CHECK_CONTAINS(msg, "30 threads: N usable CPUs (why), x4 for a network "
                        "backend, capped by --max-store-connections 64 (2 "
                        "per thread + 3 for redis)");
    CHECK_EQ_INT(config_store_connections("redis", 30, rule, sizeof(rule)), 63);
    /* mysql: 2 per thread + 1 */
    CHECK_EQ_INT(size(&c, "mysql", 0, 0, 16, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 31);
    CHECK_EQ_INT(config_store_connections("mysql", 31, rule, sizeof(rule)), 63);
    CHECK_STR_EQ(rule, "2 per thread + 1 for mysql");
    CHECK_EQ_INT(config_store_connections("zookeeper", 99, rule, sizeof(rule)),
                 1);
    CHECK_EQ_INT(config_store_connections("memory", 99, rule, sizeof(rule)), 0);
    CHECK_EQ_INT(size(&c, "redis", 0, 10, 16, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 3);
    /* too low for even one thread */
    CHECK_EQ_INT(size(&c, "redis", 0, 4, 1, msg, sizeof(msg)), -1);
    CHECK_CONTAINS(msg, "--max-store-connections 4 is too low for redis");
    CHECK_EQ_INT(size(&c, "redis", 0, 5, 1, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 1);
}

/* The HTTP threads: --threads on memory, whose calls they make; one per
 * usable CPU on a network store, whose calls run on the workers; an
 * explicit --http-threads on either. */
static void test_config_http_threads_follow_cpus_off_memory(void)
{
    struct config c;
    char msg[512];

    CHECK_EQ_INT(size(&c, "memory", 0, 0, 3, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.http_threads, 3);
    CHECK_STR_EQ(msg, "3 threads: N usable CPUs (why)");
    CHECK_EQ_INT(size(&c, "memory", 7, 0, 3, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.http_threads, 7);
    CHECK_STR_EQ(msg, "7 threads: --threads");
    CHECK_EQ_INT(size(&c, "redis", 0, 0, 2, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 8);
    CHECK_EQ_INT(c.http_threads, 2);
    CHECK_EQ_INT(size(&c, "zookeeper", 5, 0, 3, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 5);
    CHECK_EQ_INT(c.http_threads, 3);
    CHECK_STR_EQ(msg, "5 threads: --threads; 3 HTTP threads: the usable CPUs");
    CHECK_EQ_INT(size(&c, "mysql", 0, 0, 1000, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.http_threads, 256); /* --http-threads' own bound */
    CHECK_EQ_INT(size(&c, "redis", 0, 10, 16, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 3); /* the store cap leaves the HTTP threads */
    CHECK_EQ_INT(c.http_threads, 16);

    env_clear();
    CHECK_EQ_INT(LOAD(&c, "--http-threads", "5"), CONFIG_OK);
    CHECK_EQ_INT(c.http_threads, 5);
    CHECK_EQ_INT(config_size_threads(&c, "redis", 2, "why", msg, sizeof(msg)),
                 0);
    CHECK_EQ_INT(c.http_threads, 5);
    CHECK_STR_EQ(msg, "8 threads: why, x4 for a network backend; 5 HTTP "
                      "threads: --http-threads");
    env_clear();
    CHECK_EQ_INT(LOAD(&c, "--http-threads=4", "--threads", "9"), CONFIG_OK);
    CHECK_EQ_INT(config_size_threads(&c, "memory", 2, "why", msg, sizeof(msg)),
                 0);
    CHECK_EQ_INT(c.threads, 9);
    CHECK_EQ_INT(c.http_threads, 4);
    CHECK_STR_EQ(msg, "9 threads: --threads; 4 HTTP threads: --http-threads");
    setenv("LOCKD_HTTP_THREADS", "3", 1);
    CHECK_EQ_INT(LOAD(&c, "--backend", "memory://"), CONFIG_OK);
    CHECK_EQ_INT(c.http_threads, 3);
    env_clear();
    CHECK_REJECTED("--http-threads", "0");
    CHECK_REJECTED("--http-threads", "257");
    CHECK_REJECTED("--http-threads", "2x");
    CHECK_REJECTED("--http-threads=");
}

static void test_config_explicit_threads_over_cap_is_error(void)
{
    struct config c;
    char msg[512];

    CHECK_EQ_INT(size(&c, "redis", 31, 0, 1, msg, sizeof(msg)), -1);
    CHECK_CONTAINS(msg, "--threads 31 needs 65 store connections (2 per "
                        "thread + 3 for redis), above "
                        "--max-store-connections 64");
    CHECK_CONTAINS(msg, "use --threads 30 at most");
    CHECK_EQ_INT(size(&c, "redis", 30, 0, 1, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(c.threads, 30);
    CHECK_STR_EQ(msg, "30 threads: --threads; 1 HTTP thread: the usable CPU");
    CHECK_EQ_INT(size(&c, "mysql", 31, 0, 1, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(size(&c, "mysql", 32, 0, 1, msg, sizeof(msg)), -1);
    CHECK_EQ_INT(size(&c, "memory", 256, 1, 1, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(size(&c, "zookeeper", 256, 1, 1, msg, sizeof(msg)), 0);
    CHECK_EQ_INT(size(&c, "redis", 256, 10000, 1, msg, sizeof(msg)), 0);
}

static void test_config_unknown_env_suggests_nearest(void)
{
    char near[64];

    CHECK_EQ_INT(config_env_unknown("LOCKD_MAX_TTL", near, sizeof(near)), 1);
    CHECK_STR_EQ(near, "LOCKD_MAX_TTL_MS");
    CHECK_EQ_INT(config_env_unknown("LOCKD_THRADS", near, sizeof(near)), 1);
    CHECK_STR_EQ(near, "LOCKD_THREADS");
    CHECK_EQ_INT(config_env_unknown("LOCKD_LOGLEVEL", near, sizeof(near)), 1);
    CHECK_STR_EQ(near, "LOCKD_LOG_LEVEL");
    CHECK_EQ_INT(config_env_unknown("LOCKD_FOO", near, sizeof(near)), 1);
    CHECK_STR_EQ(near, "");
    CHECK_EQ_INT(
        config_env_unknown("LOCKD_SOMETHING_ELSE_ENTIRELY", near, sizeof(near)),
        1);
    CHECK_STR_EQ(near, "");
}

static void test_config_known_env_is_quiet(void)
{
    static const char *const quiet[] = {
        "LOCKD_LISTEN",
        "LOCKD_MAX_TTL_MS",
        "LOCKD_LOG_FILE",
        "LOCKD_MAX_STORE_CONNECTIONS",
        "LOCKD_URL",
        "LOCKD_TOKEN",
        "LOCKD_KEY",
        "LOCKD_KEYS",
        "LOCKD_FENCE",
        "LOCKD_FENCES",
        "LOCKD_TTL_MS",
        "LOCKD_BIN",
        "LOCKD_BUILD",
        "LOCKD_TEST_BACKEND",
        "LOCKD_SERVICE_HOST",
        "LOCKD_PORT",
        "LOCKD_PORT_8080_TCP",
        "LOCKD_AUTH_TOKEN_FILE",
        "LOCKD_AUTH_FILE",
        "PATH",
        "LOCKDX",
    };
    char near[64];

    for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++)
        CHECK_MSG(config_env_unknown(quiet[i], near, sizeof(near)) == 0, "%s",
                  quiet[i]);
}

static char warned[4][256];
static unsigned nwarned;

static void collect(const char *line)
{
    if (nwarned < 4)
        snprintf(warned[nwarned], sizeof(warned[0]), "%s", line);
    nwarned++;
}

static void test_config_warns_once_per_unknown_env(void)
{
    char *env[] = { (char *)"LOCKD_MAX_TTL=5", (char *)"LOCKD_URL=http://x",
                    (char *)"HOME=/root",      (char *)"LOCKD_FOO=1",
                    (char *)"LOCKD_THREADS=2", NULL };

    nwarned = 0;
    CHECK_EQ_INT(config_warn_unknown_env(env, collect), 2);
    CHECK_EQ_INT(nwarned, 2);
    CHECK_STR_EQ(warned[0], "LOCKD_MAX_TTL: unknown variable, ignored (did "
                            "you mean LOCKD_MAX_TTL_MS?)");
    CHECK_STR_EQ(warned[1], "LOCKD_FOO: unknown variable, ignored");
}

static const struct check_case cases[] = {
    CHECK_CASE(test_config_defaults),
    CHECK_CASE(test_config_reads_every_flag),
    CHECK_CASE(test_config_reads_flag_equals_value),
    CHECK_CASE(test_config_reads_environment),
    CHECK_CASE(test_config_flag_wins_over_environment),
    CHECK_CASE(test_config_rejects_invalid_values),
    CHECK_CASE(test_config_default_ttl_above_max_is_error),
    CHECK_CASE(test_config_parses_listen_addresses),
    CHECK_CASE(test_config_help_and_version_exit),
    CHECK_CASE(test_config_help_lists_every_option),
    CHECK_CASE(test_config_check_health),
    CHECK_CASE(test_config_reads_auth_token_file),
    CHECK_CASE(test_config_reads_auth_file),
    CHECK_CASE(test_config_reads_store_cap_and_log_file),
    CHECK_CASE(test_config_default_threads_follow_cpus_and_backend),
    CHECK_CASE(test_config_http_threads_follow_cpus_off_memory),
    CHECK_CASE(test_config_default_threads_capped_by_store_connections),
    CHECK_CASE(test_config_explicit_threads_over_cap_is_error),
    CHECK_CASE(test_config_unknown_env_suggests_nearest),
    CHECK_CASE(test_config_known_env_is_quiet),
    CHECK_CASE(test_config_warns_once_per_unknown_env),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

/*
 * tests/unit/test_mysql.c - the MySQL adapter (backends/mysql.c) through its
 * ops table, against a real MariaDB this program sets up (mariadb-install-db)
 * and starts (mariadbd) on a free loopback port in a temp dir. Prints
 * "0 passed, 0 failed" and exits 0 when MariaDB cannot run here.
 */
#include "backends/backend.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mysql.h>

extern const struct backend_ops mysql_be_ops;

#define INSTALL_DB "/usr/bin/mariadb-install-db"
#define MARIADBD   "/usr/sbin/mariadbd"
#define TOK_A      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B      "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define PASSWORD   "p@ss:w/rd%" /* needs escaping in the URL */
#define PASSWORD_U "p%40ss%3Aw%2Frd%25"

static int passed, failed, case_failed;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            case_failed = 1;                                                  \
        }                                                                     \
    } while (0)
#define CHECK_EQ(a, b)                                                 \
    do {                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);            \
        if (a_ != b_) {                                                \
            printf("  %s:%d: %s == %lld, want %s == %lld\n", __FILE__, \
                   __LINE__, #a, a_, #b, b_);                          \
            case_failed = 1;                                           \
        }                                                              \
    } while (0)

static int port;
static pid_t server_pid = -1;
static char dir[64];
static char sock_path[128];
static char url[200];

/* ---- the server ---- */

static int free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), p = -1;

    if (fd < 0)
        return -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        p = ntohs(a.sin_port);
    close(fd);
    return p;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void quiet(void)
{
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
    }
}

/* A root connection over the socket, for setting up and looking behind the
 * adapter; NULL if the server does not answer. */
static MYSQL *root_connect(void)
{
    MYSQL *m = mysql_init(NULL);
    unsigned t = 2;

    if (m == NULL)
        return NULL;
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &t);
    if (mysql_real_connect(m, "localhost", "root", NULL, NULL, 0, sock_path,
                           0) == NULL) {
        mysql_close(m);
        return NULL;
    }
    return m;
}

/* One statement as root; -1 on failure, else the first column of the first
 * row as a number (0 when there is none). */
static long long root_sql(const char *sql)
{
    MYSQL *m = root_connect();
    long long v = -1;

    if (m == NULL)
        return -1;
    if (mysql_query(m, sql) == 0) {
        MYSQL_RES *r = mysql_store_result(m);
        v = 0;
        if (r != NULL) {
            MYSQL_ROW row = mysql_fetch_row(r);
            if (row != NULL && row[0] != NULL)
                v = strtoll(row[0], NULL, 10);
            mysql_free_result(r);
        }
    } else {
        printf("  root: %s: %s\n", sql, mysql_error(m));
    }
    mysql_close(m);
    return v;
}

static int server_start(void)
{
    char datadir[128], portopt[32], sockopt[160], pidopt[160];

    snprintf(datadir, sizeof(datadir), "--datadir=%s/data", dir);
    snprintf(portopt, sizeof(portopt), "--port=%d", port);
    snprintf(sockopt, sizeof(sockopt), "--socket=%s", sock_path);
    snprintf(pidopt, sizeof(pidopt), "--pid-file=%s/mariadbd.pid", dir);
    server_pid = fork();
    if (server_pid < 0)
        return -1;
    if (server_pid == 0) {
        quiet();
        execl(MARIADBD, MARIADBD, "--no-defaults", datadir, portopt, sockopt,
              pidopt, "--bind-address=127.0.0.1", "--user=root",
              "--skip-log-bin", "--skip-name-resolve",
              "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M",
              "--innodb-flush-log-at-trx-commit=2", "--max-connections=200",
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300; i++) {
        MYSQL *m = root_connect();
        if (m != NULL) {
            mysql_close(m);
            return 0;
        }
        if (waitpid(server_pid, NULL, WNOHANG) == server_pid) {
            server_pid = -1;
            return -1;
        }
        sleep_ms(50);
    }
    return -1;
}

static int server_install(void)
{
    char datadir[128];
    pid_t pid;
    int status;

    snprintf(datadir, sizeof(datadir), "--datadir=%s/data", dir);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        quiet();
        execl(INSTALL_DB, INSTALL_DB, "--no-defaults", datadir,
              "--auth-root-authentication-method=normal", "--skip-test-db",
              "--user=root", "--skip-name-resolve", "--innodb-log-file-size=8M",
              (char *)NULL);
        _exit(127);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        return -1;
    if (server_start() != 0)
        return -1;
    if (root_sql("CREATE DATABASE lockd") < 0 ||
        root_sql("CREATE USER 'lockd'@'127.0.0.1' IDENTIFIED BY '" PASSWORD
                 "'") < 0 ||
        root_sql("GRANT ALL ON lockd.* TO 'lockd'@'127.0.0.1'") < 0)
        return -1;
    return 0;
}

static void server_kill(int sig)
{
    if (server_pid > 0) {
        kill(server_pid, sig);
        if (sig == SIGKILL || sig == SIGTERM) {
            waitpid(server_pid, NULL, 0);
            server_pid = -1;
        }
    }
}

/* ---- notifications ---- */

static pthread_mutex_t note_lock = PTHREAD_MUTEX_INITIALIZER;
static char note_key[LOCK_KEY_MAX + 1];
static int note_count;
static int watched_tag; /* hooks.arg of the instance whose notes count */

static void on_notify(void *arg, const char *key, size_t len)
{
    if (arg != &watched_tag)
        return;
    pthread_mutex_lock(&note_lock);
    memcpy(note_key, key, len);
    note_key[len] = '\0';
    note_count++;
    pthread_mutex_unlock(&note_lock);
}

static int noted(const char *key)
{
    int hit;

    pthread_mutex_lock(&note_lock);
    hit = note_count > 0 && strcmp(note_key, key) == 0;
    pthread_mutex_unlock(&note_lock);
    return hit;
}

static void note_reset(void)
{
    pthread_mutex_lock(&note_lock);
    note_count = 0;
    note_key[0] = '\0';
    pthread_mutex_unlock(&note_lock);
}

/* ---- helpers ---- */

static struct backend *open_be_hooked(const char *u, void *tag)
{
    struct backend_hooks hooks = { on_notify, tag };
    struct backend *be = NULL;

    if (mysql_be_ops.open(u, &hooks, &be) != BACKEND_OK)
        return NULL;
    return be;
}

static struct backend *open_be(const char *u)
{
    struct backend_hooks hooks = { on_notify, &watched_tag };
    struct backend *be = NULL;

    if (mysql_be_ops.open(u, &hooks, &be) != BACKEND_OK)
        return NULL;
    return be;
}

static enum backend_result acq_owner(struct backend *be,
                                     const char *key,
                                     const char *tok,
                                     const char *owner,
                                     uint64_t ttl,
                                     struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = tok,
                            .owner = owner,
                            .ttl_ms = ttl };
    memset(g, 0, sizeof(*g));
    return mysql_be_ops.acquire(be, &req, g);
}

static enum backend_result acq(struct backend *be,
                               const char *key,
                               const char *tok,
                               uint64_t ttl,
                               struct lock_grant *g)
{
    return acq_owner(be, key, tok, NULL, ttl, g);
}

static enum backend_result ren(struct backend *be,
                               const char *key,
                               const char *tok,
                               uint64_t ttl,
                               struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .ttl_ms = ttl
    };
    memset(g, 0, sizeof(*g));
    return mysql_be_ops.renew(be, &req, g);
}

static enum backend_result
rel(struct backend *be, const char *key, const char *tok)
{
    struct lock_req req = { .key = key, .key_len = strlen(key), .token = tok };
    return mysql_be_ops.release(be, &req);
}

static struct backend *be_main;

/* ---- cases ---- */

static void test_open_rejects_bad_urls(void)
{
    static const char *const bad[] = {
        "mysql://u@127.0.0.1/db?bogus=1",
        "mysql://u@127.0.0.1/db?poll_ms=5",
        "mysql://u@127.0.0.1/db?connect_timeout_ms=0",
        "mysql://u@127.0.0.1/db?read_timeout_ms=x",
        "mysql://u@127.0.0.1/db?write_timeout_ms=-1",
        "mysql://u@127.0.0.1/db?table=a-b",
        "mysql://u@127.0.0.1/db?table=x`; DROP TABLE y",
        "mysql://u@127.0.0.1/db?table=",
        "mysql://u@127.0.0.1/db?socket=",
        "mysql://u@127.0.0.1:70000/db",
        "mysql://u@127.0.0.1:12ab/db",
        "mysql://u@127.0.0.1:/db",
        "mysql://u@127.0.0.1",
        "mysql://u@127.0.0.1/",
        "mysql://u@127.0.0.1/a/b",
        "mysql://127.0.0.1/db",
        "mysql://u@/db",
        "mysql://u@h1:1,h2:2/db",
        "mysql://u@[::1/db",
        "mysql://u@[::1]x/db",
        NULL,
    };
    struct backend *be;

    for (int i = 0; bad[i] != NULL; i++) {
        be = (struct backend *)1;
        if (mysql_be_ops.open(bad[i], NULL, &be) != BACKEND_INVALID) {
            printf("  accepted %s\n", bad[i]);
            case_failed = 1;
        }
        CHECK(be == NULL);
    }
}

static void test_open_succeeds_while_mysql_is_down(void)
{
    char u[160];
    struct backend *be;
    struct lock_grant g;
    int64_t t0;

    snprintf(u, sizeof(u),
             "mysql://lockd:x@127.0.0.1:%d/lockd?connect_timeout_ms=500",
             free_port());
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    t0 = mono_ms();
    CHECK_EQ(acq(be, "down", TOK_A, 1000, &g), BACKEND_UNAVAILABLE);
    CHECK_EQ(mysql_be_ops.ping(be), BACKEND_UNAVAILABLE);
    CHECK(mono_ms() - t0 < 2000);
    mysql_be_ops.close(be);
}

static void test_acquire_grants_free_key_once(void)
{
    struct lock_grant g, h;

    CHECK_EQ(acq(be_main, "once", TOK_A, 10000, &g), BACKEND_OK);
    CHECK(g.fence > 0 && g.fence < LOCK_FENCE_MAX);
    CHECK_EQ(g.ttl_ms, 10000);
    /* the database's clock, close to ours on one machine */
    CHECK(g.expires_at_ms > backend_now_ms() + 8000 &&
          g.expires_at_ms < backend_now_ms() + 12000);
    CHECK_EQ(acq(be_main, "once", TOK_B, 10000, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 8000 && h.retry_ms <= 10000);
    CHECK_EQ(acq(be_main, "once", TOK_A, 10000, &h), BACKEND_HELD);
    CHECK_EQ(rel(be_main, "once", TOK_A), BACKEND_OK);
}

static void test_fence_grows_with_every_grant(void)
{
    struct lock_grant g;
    uint64_t last = 0;

    for (int i = 0; i < 5; i++) {
        CHECK_EQ(acq(be_main, "fence", TOK_A, 10000, &g), BACKEND_OK);
        CHECK(g.fence > last);
        last = g.fence;
        CHECK_EQ(rel(be_main, "fence", TOK_A), BACKEND_OK);
    }
    /* another key draws from the same sequence */
    CHECK_EQ(acq(be_main, "fence-2", TOK_A, 10000, &g), BACKEND_OK);
    CHECK(g.fence > last);
    CHECK_EQ(rel(be_main, "fence-2", TOK_A), BACKEND_OK);
}

static void test_renew_keeps_fence_and_stored_ttl(void)
{
    struct lock_grant g, r;

    CHECK_EQ(acq(be_main, "renew", TOK_A, 3000, &g), BACKEND_OK);
    CHECK_EQ(ren(be_main, "renew", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ(r.fence, g.fence);
    CHECK_EQ(r.ttl_ms, 3000);
    CHECK(r.expires_at_ms >= g.expires_at_ms);
    CHECK_EQ(ren(be_main, "renew", TOK_A, 20000, &r), BACKEND_OK);
    CHECK_EQ(r.ttl_ms, 20000);
    CHECK(r.expires_at_ms > g.expires_at_ms + 15000);
    CHECK_EQ(ren(be_main, "renew", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ(r.ttl_ms, 20000);
    CHECK_EQ(ren(be_main, "renew", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ(rel(be_main, "renew", TOK_B), BACKEND_MISMATCH);
    CHECK_EQ(rel(be_main, "renew", TOK_A), BACKEND_OK);
    CHECK_EQ(ren(be_main, "renew", TOK_A, 0, &r), BACKEND_NOT_FOUND);
    CHECK_EQ(rel(be_main, "renew", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ(ren(be_main, "renew-never", TOK_A, 0, &r), BACKEND_NOT_FOUND);
}

static void test_expired_token_is_dead(void)
{
    struct lock_grant g, h, r;

    CHECK_EQ(acq(be_main, "expire", TOK_A, 100, &g), BACKEND_OK);
    sleep_ms(200);
    CHECK_EQ(ren(be_main, "expire", TOK_A, 0, &r), BACKEND_NOT_FOUND);
    CHECK_EQ(rel(be_main, "expire", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ(acq(be_main, "expire", TOK_B, 10000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ(ren(be_main, "expire", TOK_A, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ(rel(be_main, "expire", TOK_B), BACKEND_OK);
}

static void test_inspect_shows_owner_never_token(void)
{
    struct lock_grant g;
    struct lock_info info;
    char owner[LOCK_OWNER_MAX + 1];

    CHECK_EQ(mysql_be_ops.inspect(be_main, "insp", 4, &info),
             BACKEND_NOT_FOUND);
    CHECK_EQ(acq_owner(be_main, "insp", TOK_A, "pod-a/worker-3", 5000, &g),
             BACKEND_OK);
    memset(&info, 0, sizeof(info));
    CHECK_EQ(mysql_be_ops.inspect(be_main, "insp", 4, &info), BACKEND_OK);
    CHECK_EQ(info.fence, g.fence);
    CHECK(info.ttl_ms >= 1 && info.ttl_ms <= 5000);
    CHECK_EQ(info.expires_at_ms, g.expires_at_ms);
    CHECK(info.has_owner && strcmp(info.owner, "pod-a/worker-3") == 0);
    CHECK_EQ(rel(be_main, "insp", TOK_A), BACKEND_OK);

    /* no owner; then an owner of the full 128 bytes */
    CHECK_EQ(acq(be_main, "insp", TOK_A, 5000, &g), BACKEND_OK);
    memset(&info, 0, sizeof(info));
    CHECK_EQ(mysql_be_ops.inspect(be_main, "insp", 4, &info), BACKEND_OK);
    CHECK(!info.has_owner);
    CHECK_EQ(rel(be_main, "insp", TOK_A), BACKEND_OK);
    memset(owner, 'o', LOCK_OWNER_MAX);
    owner[LOCK_OWNER_MAX] = '\0';
    CHECK_EQ(acq_owner(be_main, "insp", TOK_A, owner, 5000, &g), BACKEND_OK);
    CHECK_EQ(mysql_be_ops.inspect(be_main, "insp", 4, &info), BACKEND_OK);
    CHECK(info.has_owner && strcmp(info.owner, owner) == 0);
    CHECK_EQ(rel(be_main, "insp", TOK_A), BACKEND_OK);
}

static void test_distinct_keys_are_distinct_locks(void)
{
    static char long_a[LOCK_KEY_MAX + 1], long_b[LOCK_KEY_MAX + 1];
    const char *keys[] = {
        "k",
        "K",
        "k ",
        "k%",
        "k_",
        "k'",
        "k''",
        "k\\",
        "k\\'",
        "k\"",
        "k`",
        "k;",
        "k/../x",
        "k/x",
        "%",
        "_",
        "' OR '1'='1",
        "caf\xc3\xa9",
        "cafe\xcc\x81",
        "\xf0\x9f\x94\x92",
        long_a,
        long_b,
    };
    size_t n = sizeof(keys) / sizeof(keys[0]);
    struct lock_grant g;
    struct lock_info info;

    memset(long_a, 'x', LOCK_KEY_MAX);
    memset(long_b, 'x', LOCK_KEY_MAX);
    long_b[LOCK_KEY_MAX - 1] = 'y';
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(acq(be_main, keys[i], TOK_A, 10000, &g), BACKEND_OK);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(acq(be_main, keys[i], TOK_B, 10000, &g), BACKEND_HELD);
        CHECK_EQ(mysql_be_ops.inspect(be_main, keys[i], strlen(keys[i]), &info),
                 BACKEND_OK);
    }
    /* one release frees exactly its own key */
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(rel(be_main, keys[i], TOK_A), BACKEND_OK);
        for (size_t j = i + 1; j < n; j++)
            if (mysql_be_ops.inspect(be_main, keys[j], strlen(keys[j]),
                                     &info) != BACKEND_OK) {
                printf("  releasing key %zu freed key %zu\n", i, j);
                case_failed = 1;
            }
    }
    CHECK_EQ(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                      " WHERE lock_key LIKE 'k%' OR lock_key LIKE 'x%'"),
             0);
}

static void test_release_notifies(void)
{
    struct lock_grant g;

    note_reset();
    CHECK_EQ(acq(be_main, "note", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ(rel(be_main, "note", TOK_B), BACKEND_MISMATCH);
    CHECK(!noted("note"));
    CHECK_EQ(rel(be_main, "note", TOK_A), BACKEND_OK);
    CHECK(noted("note"));
}

static void test_release_on_another_instance_notifies(void)
{
    struct backend *other = open_be_hooked(url, NULL);
    static const char key[] = "far 'away'\\ \xc3\xa9";
    struct lock_grant g;
    int64_t t0;
    int hit = 0;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    sleep_ms(200); /* be_main's watcher has read where the events stand */
    CHECK_EQ(acq(other, key, TOK_A, 5000, &g), BACKEND_OK);
    note_reset();
    t0 = mono_ms();
    CHECK_EQ(rel(other, key, TOK_A), BACKEND_OK);
    while (!hit && mono_ms() - t0 < 2000) {
        sleep_ms(5);
        hit = noted(key);
    }
    CHECK(hit);
    printf("  heard a release on another instance after %lld ms\n",
           (long long)(mono_ms() - t0));
    CHECK(mono_ms() - t0 < 500);
    /* a failed release tells no one */
    CHECK_EQ(acq(other, key, TOK_A, 5000, &g), BACKEND_OK);
    note_reset();
    CHECK_EQ(rel(other, key, TOK_B), BACKEND_MISMATCH);
    sleep_ms(300);
    CHECK(!noted(key));
    CHECK_EQ(rel(other, key, TOK_A), BACKEND_OK);
    mysql_be_ops.close(other);
}

static void test_instances_share_locks_and_fences(void)
{
    struct backend *other = open_be(url);
    struct lock_grant g, h;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    CHECK_EQ(acq(be_main, "shared", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ(acq(other, "shared", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_EQ(rel(other, "shared", TOK_A), BACKEND_OK);
    CHECK_EQ(acq(other, "shared", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ(rel(other, "shared", TOK_B), BACKEND_OK);
    mysql_be_ops.close(other);
}

/* ---- many threads, one key ---- */

struct race {
    pthread_mutex_t mu;
    int inside; /* holders right now, by our own count */
    int violations;
    int grants;
    uint64_t last_fence;
    int fence_errors;
    int errors;
};

struct race_arg {
    struct race *r;
    struct backend *be;
    int id;
};

static void *race_thread(void *arg)
{
    struct race_arg *a = arg;
    struct race *r = a->r;
    char tok[40];
    struct lock_grant g;
    int64_t end = mono_ms() + 1500;

    snprintf(tok, sizeof(tok), "%032x", (unsigned)a->id + 1);
    while (mono_ms() < end) {
        enum backend_result res = acq(a->be, "race", tok, 10000, &g);
        if (res == BACKEND_HELD)
            continue;
        pthread_mutex_lock(&r->mu);
        if (res != BACKEND_OK) {
            r->errors++;
            pthread_mutex_unlock(&r->mu);
            continue;
        }
        if (r->inside++ != 0)
            r->violations++;
        if (g.fence <= r->last_fence)
            r->fence_errors++;
        r->last_fence = g.fence;
        r->grants++;
        pthread_mutex_unlock(&r->mu);
        sleep_ms(1);
        pthread_mutex_lock(&r->mu);
        r->inside--;
        pthread_mutex_unlock(&r->mu);
        if (rel(a->be, "race", tok) != BACKEND_OK) {
            pthread_mutex_lock(&r->mu);
            r->errors++;
            pthread_mutex_unlock(&r->mu);
        }
    }
    return NULL;
}

static void test_threads_on_two_instances_exclude_each_other(void)
{
    struct backend *other = open_be(url);
    struct race r = { .mu = PTHREAD_MUTEX_INITIALIZER };
    struct race_arg args[6];
    pthread_t t[6];
    int started = 0;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    for (int i = 0; i < 6; i++) {
        args[i] = (struct race_arg){ &r, i % 2 == 0 ? be_main : other, i };
        if (pthread_create(&t[i], NULL, race_thread, &args[i]) != 0)
            break;
        started++;
    }
    CHECK_EQ(started, 6);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(r.violations, 0);
    CHECK_EQ(r.fence_errors, 0);
    CHECK_EQ(r.errors, 0);
    CHECK(r.grants > 10);
    printf("  %d grants in 1.5 s on 6 threads\n", r.grants);
    mysql_be_ops.close(other);
}

static void test_fences_outlive_the_backend(void)
{
    struct backend *be = open_be(url);
    struct lock_grant g, h;

    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ(acq(be, "durable", TOK_A, 5000, &g), BACKEND_OK);
    mysql_be_ops.close(be);
    be = open_be(url);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    /* still held by the closed instance's grant */
    CHECK_EQ(acq(be, "durable", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_EQ(rel(be, "durable", TOK_A), BACKEND_OK);
    CHECK_EQ(acq(be, "durable", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ(rel(be, "durable", TOK_B), BACKEND_OK);
    mysql_be_ops.close(be);
}

static void test_dropped_tables_are_made_again(void)
{
    struct lock_grant g;
    char u[400];
    struct backend *be;

    snprintf(u, sizeof(u), "%s?table=other_locks", url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ(acq(be, "drop", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ(root_sql("SELECT COUNT(*) FROM lockd.other_locks"), 1);
    CHECK_EQ(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                      " WHERE lock_key = 'drop'"),
             0);
    CHECK(root_sql("DROP TABLE lockd.other_locks, lockd.other_locks_seq,"
                   " lockd.other_locks_events") == 0);
    CHECK_EQ(acq(be, "drop", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ(rel(be, "drop", TOK_A), BACKEND_OK);
    mysql_be_ops.close(be);
}

static void test_reaper_removes_expired_rows(void)
{
    struct lock_grant g;
    char key[32];
    long long rows = -1;

    for (int i = 0; i < 250; i++) {
        snprintf(key, sizeof(key), "reap-%d", i);
        CHECK_EQ(acq(be_main, key, TOK_A, 50, &g), BACKEND_OK);
    }
    CHECK(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                   " WHERE lock_key LIKE 'reap-%'") >= 200);
    /* reaped every second, 100 rows a batch, batches back to back */
    for (int i = 0; i < 40; i++) {
        sleep_ms(100);
        rows = root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                        " WHERE lock_key LIKE 'reap-%'");
        if (rows == 0)
            break;
    }
    CHECK_EQ(rows, 0);
    CHECK_EQ(mysql_be_ops.held_count(be_main), 0);
    CHECK_EQ(acq(be_main, "counted", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ(mysql_be_ops.held_count(be_main), 1);
    CHECK_EQ(rel(be_main, "counted", TOK_A), BACKEND_OK);
}

static void test_stopped_mysql_answers_unavailable_in_time(void)
{
    char u[400];
    struct backend *be;
    struct lock_grant g;
    struct lock_info info;
    int64_t t0, took;

    snprintf(u, sizeof(u),
             "%s?connect_timeout_ms=1000&read_timeout_ms=1000"
             "&write_timeout_ms=1000",
             url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ(acq(be, "stopped", TOK_A, 60000, &g), BACKEND_OK);
    server_kill(SIGSTOP);
    t0 = mono_ms();
    CHECK_EQ(acq(be, "stopped-2", TOK_A, 60000, &g), BACKEND_UNAVAILABLE);
    took = mono_ms() - t0;
    printf("  acquire on a stopped server: %lld ms\n", (long long)took);
    CHECK(took >= 500 && took < 3500);
    t0 = mono_ms();
    CHECK_EQ(mysql_be_ops.inspect(be, "stopped", 7, &info),
             BACKEND_UNAVAILABLE);
    CHECK(mono_ms() - t0 < 3500);
    server_kill(SIGCONT);
    /* the lock survived; the grant that timed out was never made */
    for (int i = 0; i < 40; i++) {
        if (mysql_be_ops.ping(be) == BACKEND_OK)
            break;
        sleep_ms(100);
    }
    CHECK_EQ(acq(be, "stopped", TOK_B, 5000, &g), BACKEND_HELD);
    CHECK_EQ(rel(be, "stopped", TOK_A), BACKEND_OK);
    mysql_be_ops.close(be);
}

static void test_restart_keeps_holders_and_fences(void)
{
    struct lock_grant g, h;
    int64_t t0;
    enum backend_result r = BACKEND_UNAVAILABLE;

    CHECK_EQ(acq(be_main, "restart", TOK_A, 60000, &g), BACKEND_OK);
    server_kill(SIGKILL);
    t0 = mono_ms();
    CHECK_EQ(acq(be_main, "restart-2", TOK_A, 5000, &h), BACKEND_UNAVAILABLE);
    CHECK_EQ(mysql_be_ops.ping(be_main), BACKEND_UNAVAILABLE);
    CHECK(mono_ms() - t0 < 2500);
    CHECK_EQ(server_start(), 0);
    for (int i = 0; i < 50 && r != BACKEND_OK; i++) {
        r = mysql_be_ops.ping(be_main);
        if (r != BACKEND_OK)
            sleep_ms(100);
    }
    CHECK_EQ(r, BACKEND_OK);
    CHECK_EQ(acq(be_main, "restart", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_EQ(rel(be_main, "restart", TOK_A), BACKEND_OK);
    CHECK_EQ(acq(be_main, "restart", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ(rel(be_main, "restart", TOK_B), BACKEND_OK);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    { "test_open_rejects_bad_urls", test_open_rejects_bad_urls },
    { "test_open_succeeds_while_mysql_is_down",
      test_open_succeeds_while_mysql_is_down },
    { "test_acquire_grants_free_key_once", test_acquire_grants_free_key_once },
    { "test_fence_grows_with_every_grant", test_fence_grows_with_every_grant },
    { "test_renew_keeps_fence_and_stored_ttl",
      test_renew_keeps_fence_and_stored_ttl },
    { "test_expired_token_is_dead", test_expired_token_is_dead },
    { "test_inspect_shows_owner_never_token",
      test_inspect_shows_owner_never_token },
    { "test_distinct_keys_are_distinct_locks",
      test_distinct_keys_are_distinct_locks },
    { "test_release_notifies", test_release_notifies },
    { "test_release_on_another_instance_notifies",
      test_release_on_another_instance_notifies },
    { "test_instances_share_locks_and_fences",
      test_instances_share_locks_and_fences },
    { "test_threads_on_two_instances_exclude_each_other",
      test_threads_on_two_instances_exclude_each_other },
    { "test_fences_outlive_the_backend", test_fences_outlive_the_backend },
    { "test_dropped_tables_are_made_again",
      test_dropped_tables_are_made_again },
    { "test_reaper_removes_expired_rows", test_reaper_removes_expired_rows },
    { "test_stopped_mysql_answers_unavailable_in_time",
      test_stopped_mysql_answers_unavailable_in_time },
    { "test_restart_keeps_holders_and_fences",
      test_restart_keeps_holders_and_fences },
};

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as lockd does */
    snprintf(dir, sizeof(dir), "/tmp/lockd-test-mysql-XXXXXX");
    port = free_port();
    if (access(INSTALL_DB, X_OK) != 0 || access(MARIADBD, X_OK) != 0 ||
        port < 0 || mkdtemp(dir) == NULL) {
        printf("skip: no MariaDB server here\n0 passed, 0 failed\n");
        return 0;
    }
    snprintf(sock_path, sizeof(sock_path), "%s/sock", dir);
    snprintf(url, sizeof(url), "mysql://lockd:%s@127.0.0.1:%d/lockd",
             PASSWORD_U, port);
    /* the adapter initialises Connector/C; open it before root_sql() */
    be_main = open_be(url);
    if (be_main == NULL) {
        printf("FAIL cannot open %s\n", url);
        failed++;
    } else if (server_install() != 0) {
        printf("skip: cannot set up MariaDB in %s\n0 passed, 0 failed\n", dir);
        mysql_be_ops.close(be_main);
        server_kill(SIGTERM);
        return 0;
    }
    for (size_t i = 0; be_main != NULL && i < sizeof(cases) / sizeof(cases[0]);
         i++) {
        case_failed = 0;
        cases[i].fn();
        printf("%s %s\n", case_failed ? "FAIL" : "ok  ", cases[i].name);
        fflush(stdout);
        if (case_failed)
            failed++;
        else
            passed++;
    }
    mysql_be_ops.close(be_main);
    server_kill(SIGCONT);
    server_kill(SIGTERM);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            printf("warning: could not remove %s\n", dir);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

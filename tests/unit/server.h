/*
 * tests/unit/server.h - what the programs that test adapters against real
 * stores (test_redis.c, test_zookeeper.c, test_mysql.c, test_contract.c)
 * share: a store server run as a child process on a free loopback port in
 * a temp dir, how to start each store's server there, and a recorder for
 * the adapter's notify hook. Header-only (static functions): the Makefile
 * links each tests/unit/test_X.c alone with the library objects.
 *
 * Usage:
 *     static struct test_server srv = TEST_SERVER_INIT;
 *     if (testsrv_setup(&srv, "redis") != 0 ||
 *         testsrv_redis_start(&srv) != 0) skip;
 *     ... redis://127.0.0.1:<srv.port> ...
 *     testsrv_signal(&srv, SIGSTOP); testsrv_signal(&srv, SIGCONT);
 *     testsrv_cleanup(&srv, SIGTERM);
 *
 * With TEST_BE_OPS defined before the #include, also the calls into the
 * adapter every case uses: be_open(), acq(), acq_full(), ren(), rel().
 */
#ifndef TESTS_UNIT_SERVER_H
#define TESTS_UNIT_SERVER_H

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mysql.h>

#include "backends/backend.h"
#include "tests/unit/check.h"

/* The exit status of a program that could test nothing here (its store's
 * server cannot run): the runner counts it as skipped, never as passed. */
#ifndef SKIP_EXIT
#define SKIP_EXIT 77
#endif

struct test_server {
    pid_t pid;    /* the running server, -1 when none */
    int port;     /* the loopback port it listens on */
    char dir[64]; /* its temp dir, "" when none */
};

/* clang-format off */
#define TEST_SERVER_INIT { .pid = -1, .port = -1, .dir = "" }
/* clang-format on */

/* A loopback TCP port nobody listens on right now; -1 on failure. */
static int __attribute__((unused)) testsrv_free_port(void)
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

/* Pick a free port and make /tmp/lockd-unit-<name>-<random>; 0 or -1. */
static int __attribute__((unused))
testsrv_setup(struct test_server *s, const char *name)
{
    snprintf(s->dir, sizeof(s->dir), "/tmp/lockd-unit-%s-" MKTEMP_SUFFIX, name);
    s->port = testsrv_free_port();
    if (mkdtemp(s->dir) == NULL) {
        s->dir[0] = '\0';
        return -1;
    }
    return s->port > 0 ? 0 : -1;
}

/* Fork and exec argv[0] (an absolute path) with stdout and stderr on
 * /dev/null; the child's pid, or -1. */
static pid_t testsrv_spawn(char *const argv[])
{
    pid_t pid = fork();

    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Run argv to completion (quietly); 0 if it exited 0. */
static int __attribute__((unused)) testsrv_run(char *const argv[])
{
    pid_t pid = testsrv_spawn(argv);
    int status;

    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Start argv as s's server and poll ready(s) up to `tries` times, step_ms
 * apart: 0 once it answers; -1 if it could not start, exited, or never
 * answered. */
static int __attribute__((unused))
testsrv_start(struct test_server *s,
              char *const argv[],
              int (*ready)(const struct test_server *),
              int tries,
              int step_ms)
{
    s->pid = testsrv_spawn(argv);
    if (s->pid < 0)
        return -1;
    for (int i = 0; i < tries; i++) {
        if (ready(s))
            return 0;
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = -1;
            return -1;
        }
        check_sleep_ms(step_ms);
    }
    return -1;
}

/* After a SIGSTOP: until every thread of pid has stopped (at most 2 s).
 * kill() only queues the signal; on a busy machine a thread of the server
 * may still answer a request sent right after it. */
static void __attribute__((unused)) testsrv_wait_stopped(pid_t pid)
{
    char dir[64];

    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    for (int tries = 0; tries < 2000; tries++) {
        int running = 0;
        struct dirent *e;
        DIR *d = opendir(dir);

        if (d == NULL)
            return; /* gone */
        while ((e = readdir(d)) != NULL) {
            char path[352], st[512], *rp;
            FILE *f;

            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s/stat", dir, e->d_name);
            f = fopen(path, "r");
            if (f == NULL)
                continue;
            if (fgets(st, sizeof(st), f) != NULL &&
                (rp = strrchr(st, ')')) != NULL && rp[1] == ' ' &&
                strchr("TtZX", rp[2]) == NULL)
                running++;
            fclose(f);
        }
        closedir(d);
        if (running == 0)
            return;
        usleep(1000);
    }
    printf("warning: pid %d has not stopped 2 s after SIGSTOP\n", (int)pid);
}

/* Send sig to the server (SIGSTOP, SIGCONT, ...); after SIGKILL or SIGTERM
 * wait for it to end. */
static void __attribute__((unused))
testsrv_signal(struct test_server *s, int sig)
{
    if (s->pid > 0) {
        kill(s->pid, sig);
        if (sig == SIGSTOP)
            testsrv_wait_stopped(s->pid);
        if (sig == SIGKILL || sig == SIGTERM) {
            waitpid(s->pid, NULL, 0);
            s->pid = -1;
        }
    }
}

/* End the server with sig (SIGCONT first, in case it is stopped) and
 * remove its temp dir. */
static void __attribute__((unused))
testsrv_cleanup(struct test_server *s, int sig)
{
    testsrv_signal(s, SIGCONT);
    testsrv_signal(s, sig);
    if (s->dir[0] != '\0') {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            printf("warning: could not remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
}

/* ---- the stores' servers, each in s's temp dir on s's port ----
 * Call testsrv_setup() first; a start again after a kill (a restart) keeps
 * the data in the dir. */

#define TESTSRV_REDIS      "/usr/bin/redis-server"
#define TESTSRV_JAVA       "/usr/bin/java"
#define TESTSRV_ZK_JAR     "/usr/share/java/zookeeper.jar"
#define TESTSRV_INSTALL_DB "/usr/bin/mariadb-install-db"
#define TESTSRV_MARIADBD   "/usr/sbin/mariadbd"
/* the MariaDB user lockd connects as: lockd@127.0.0.1, database lockd */
#define TESTSRV_MYSQL_PASSWORD   "p@ss:w/rd%" /* needs escaping in a URL */
#define TESTSRV_MYSQL_PASSWORD_U "p%40ss%3Aw%2Frd%25"

/* Send req to 127.0.0.1:port and read len(want) bytes back: 1 if they are
 * want (within 300 ms), else 0. */
static int __attribute__((unused))
testsrv_tcp_ask(int port, const char *req, const char *want)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    struct timeval tv = { 0, 300000 };
    char buf[16] = { 0 };
    size_t n = strlen(want), got = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;

    if (fd < 0 || n > sizeof(buf))
        goto out;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        write(fd, req, strlen(req)) != (ssize_t)strlen(req))
        goto out;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            goto out;
        got += (size_t)r;
    }
    ok = memcmp(buf, want, n) == 0;
out:
    if (fd >= 0)
        close(fd);
    return ok;
}

static int testsrv_redis_ready(const struct test_server *s)
{
    return testsrv_tcp_ask(s->port, "PING\r\n", "+PONG");
}

/* redis-server, appendonly (fsync always) so that a restart keeps the
 * data: 0 once it answers PING, else -1. */
static int __attribute__((unused)) testsrv_redis_start(struct test_server *s)
{
    char portstr[16];
    char *argv[] = { TESTSRV_REDIS,
                     "--port",
                     portstr,
                     "--bind",
                     "127.0.0.1",
                     "--dir",
                     s->dir,
                     "--save",
                     "",
                     "--appendonly",
                     "yes",
                     "--appendfsync",
                     "always",
                     "--daemonize",
                     "no",
                     NULL };

    if (access(TESTSRV_REDIS, X_OK) != 0)
        return -1;
    snprintf(portstr, sizeof(portstr), "%d", s->port);
    return testsrv_start(s, argv, testsrv_redis_ready, 100, 50);
}

/* ruok -> imok: the server serves. */
static int testsrv_zk_ready(const struct test_server *s)
{
    return testsrv_tcp_ask(s->port, "ruok", "imok");
}

/* A standalone ZooKeeper (Debian's zookeeper package; tickTime 500 ms, so
 * sessions may be as short as 1 s): 0 once it answers ruok, else -1. */
static int __attribute__((unused)) testsrv_zk_start(struct test_server *s)
{
    char cfg[128], data[128];
    char *argv[] = { TESTSRV_JAVA,
                     "-Xmx128m",
                     "-XX:+UseSerialGC",
                     "-XX:TieredStopAtLevel=1",
                     "-Dzookeeper.admin.enableServer=false",
                     "-Dznode.container.checkIntervalMs=1000",
                     "-cp",
                     TESTSRV_ZK_JAR,
                     "org.apache.zookeeper.server.ZooKeeperServerMain",
                     cfg,
                     NULL };
    FILE *f;

    if (access(TESTSRV_JAVA, X_OK) != 0 || access(TESTSRV_ZK_JAR, R_OK) != 0)
        return -1;
    snprintf(cfg, sizeof(cfg), "%s/zoo.cfg", s->dir);
    snprintf(data, sizeof(data), "%s/data", s->dir);
    f = fopen(cfg, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "tickTime=500\ndataDir=%s\nclientPort=%d\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok\n",
            data, s->port);
    fclose(f);
    return testsrv_start(s, argv, testsrv_zk_ready, 300, 100);
}

/* A root connection to s's MariaDB over its socket, for setting up and
 * looking behind the adapter; NULL if the server does not answer. Open the
 * adapter first: it initialises Connector/C. */
static MYSQL *testsrv_mariadb_root(const struct test_server *s)
{
    char sock[96];
    MYSQL *m = mysql_init(NULL);
    unsigned t = 2;

    if (m == NULL)
        return NULL;
    snprintf(sock, sizeof(sock), "%s/sock", s->dir);
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &t);
    if (mysql_real_connect(m, "localhost", "root", NULL, NULL, 0, sock, 0) ==
        NULL) {
        mysql_close(m);
        return NULL;
    }
    return m;
}

/* One statement as root; -1 on failure (printed), else the first column of
 * the first row as a number (0 when there is none). */
static long long __attribute__((unused))
testsrv_mariadb_sql(const struct test_server *s, const char *sql)
{
    MYSQL *m = testsrv_mariadb_root(s);
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

static int testsrv_mariadb_ready(const struct test_server *s)
{
    MYSQL *m = testsrv_mariadb_root(s);

    if (m == NULL)
        return 0;
    mysql_close(m);
    return 1;
}

/* mariadbd on a data dir testsrv_mariadb_install() made: 0 once root can
 * connect, else -1. */
static int __attribute__((unused)) testsrv_mariadb_start(struct test_server *s)
{
    char datadir[128], portopt[32], sockopt[160], pidopt[160];
    char *argv[] = { TESTSRV_MARIADBD,
                     "--no-defaults",
                     datadir,
                     portopt,
                     sockopt,
                     pidopt,
                     "--bind-address=127.0.0.1",
                     "--user=root",
                     "--skip-log-bin",
                     "--skip-name-resolve",
                     "--innodb-buffer-pool-size=16M",
                     "--innodb-log-file-size=8M",
                     "--innodb-flush-log-at-trx-commit=2",
                     "--max-connections=200",
                     NULL };

    snprintf(datadir, sizeof(datadir), "--datadir=%s/data", s->dir);
    snprintf(portopt, sizeof(portopt), "--port=%d", s->port);
    snprintf(sockopt, sizeof(sockopt), "--socket=%s/sock", s->dir);
    snprintf(pidopt, sizeof(pidopt), "--pid-file=%s/mariadbd.pid", s->dir);
    return testsrv_start(s, argv, testsrv_mariadb_ready, 300, 50);
}

/* A new MariaDB data dir (mariadb-install-db), the server started on it,
 * and the database lockd with the user lockd@127.0.0.1 (password
 * TESTSRV_MYSQL_PASSWORD) allowed everything in it, so the adapter makes
 * its tables (deploy/mysql/schema.sql) itself: 0, or -1. */
static int __attribute__((unused))
testsrv_mariadb_install(struct test_server *s)
{
    char datadir[128];
    char *argv[] = { TESTSRV_INSTALL_DB,
                     "--no-defaults",
                     datadir,
                     "--auth-root-authentication-method=normal",
                     "--skip-test-db",
                     "--user=root",
                     "--skip-name-resolve",
                     "--innodb-log-file-size=8M",
                     NULL };

    if (access(TESTSRV_INSTALL_DB, X_OK) != 0 ||
        access(TESTSRV_MARIADBD, X_OK) != 0)
        return -1;
    snprintf(datadir, sizeof(datadir), "--datadir=%s/data", s->dir);
    if (testsrv_run(argv) != 0 || testsrv_mariadb_start(s) != 0)
        return -1;
    if (testsrv_mariadb_sql(s, "CREATE DATABASE lockd") < 0 ||
        testsrv_mariadb_sql(s, "CREATE USER 'lockd'@'127.0.0.1' IDENTIFIED"
                               " BY '" TESTSRV_MYSQL_PASSWORD "'") < 0 ||
        testsrv_mariadb_sql(s, "GRANT ALL ON lockd.* TO 'lockd'@'127.0.0.1'") <
            0)
        return -1;
    return 0;
}

/* ---- the notify hook's calls: the last key and how many; and how many
 * named one watched key ---- */

static pthread_mutex_t notes_lock = PTHREAD_MUTEX_INITIALIZER;
static char notes_key[LOCK_KEY_MAX + 1];
static int notes_count;
static char notes_want[LOCK_KEY_MAX];
static size_t notes_want_len; /* 0: nothing watched */
static int notes_want_hits;

/* Record one call of hooks->notify (thread-safe). */
static void __attribute__((unused)) notes_record(const char *key, size_t len)
{
    pthread_mutex_lock(&notes_lock);
    memcpy(notes_key, key, len);
    notes_key[len] = '\0';
    notes_count++;
    if (notes_want_len > 0 && len == notes_want_len &&
        memcmp(key, notes_want, len) == 0)
        notes_want_hits++;
    pthread_mutex_unlock(&notes_lock);
}

/* A backend_hooks.notify that records every call, whatever its arg. */
static void __attribute__((unused))
notes_hook(void *arg, const char *key, size_t len)
{
    (void)arg;
    notes_record(key, len);
}

static void __attribute__((unused)) notes_reset(void)
{
    pthread_mutex_lock(&notes_lock);
    notes_count = 0;
    notes_key[0] = '\0';
    pthread_mutex_unlock(&notes_lock);
}

/* Whether the last notification named key, waiting up to ms for it. */
static int __attribute__((unused)) notes_heard(const char *key, int ms)
{
    for (int64_t until = check_mono_ms() + ms;;) {
        int hit;
        pthread_mutex_lock(&notes_lock);
        hit = notes_count > 0 && strcmp(notes_key, key) == 0;
        pthread_mutex_unlock(&notes_lock);
        if (hit || check_mono_ms() >= until)
            return hit;
        check_sleep_ms(5);
    }
}

/* From now on, count the calls that name key (len bytes, whatever they
 * are), from 0. */
static void __attribute__((unused)) notes_watch(const char *key, size_t len)
{
    pthread_mutex_lock(&notes_lock);
    if (len > sizeof(notes_want))
        len = 0;
    memcpy(notes_want, key, len);
    notes_want_len = len;
    notes_want_hits = 0;
    pthread_mutex_unlock(&notes_lock);
}

/* How many calls named the watched key since notes_watch(), waiting up to
 * ms for the first. Unlike notes_heard(), calls for other keys in between
 * (a subscriber catching up, another case's waiters) do not hide it. */
static int __attribute__((unused)) notes_watched(int ms)
{
    for (int64_t until = check_mono_ms() + ms;;) {
        int hits;
        pthread_mutex_lock(&notes_lock);
        hits = notes_want_hits;
        pthread_mutex_unlock(&notes_lock);
        if (hits > 0 || check_mono_ms() >= until)
            return hits;
        check_sleep_ms(5);
    }
}

/* Ping be until it answers OK, for at most ms: 1 once it does, else 0.
 * An adapter that connects in the background (ZooKeeper) may open before
 * its first session is up, and a cold JVM on a busy machine can take longer
 * than the adapter's own wait at open; the cases want a ready store. */
static int __attribute__((unused))
testsrv_wait_ping(enum backend_result (*ping)(struct backend *be),
                  struct backend *be,
                  int ms)
{
    for (int64_t until = check_mono_ms() + ms;;) {
        if (ping(be) == BACKEND_OK)
            return 1;
        if (check_mono_ms() >= until)
            return 0;
        check_sleep_ms(50);
    }
}

/* ---- the adapter's ops, called as api/ calls them ----
 * The including program defines TEST_BE_OPS as its adapter's ops table
 * (e.g. `#define TEST_BE_OPS redis_backend`) before including this header. */
#ifdef TEST_BE_OPS

static struct backend *__attribute__((unused))
be_open(const char *url, backend_notify_fn notify, void *arg)
{
    struct backend_hooks hooks = { .notify = notify, .arg = arg };
    struct backend *be = NULL;

    if (TEST_BE_OPS.open(url, &hooks, &be, NULL, 0) != BACKEND_OK)
        return NULL;
    return be;
}

/* acquire with every field of the request; g is zeroed first */
static enum backend_result __attribute__((unused))
acq_full(struct backend *be,
         const char *key,
         const char *tok,
         const char *owner,
         uint64_t ttl,
         struct lock_waiter *w,
         struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = tok,
                            .owner = owner,
                            .ttl_ms = ttl,
                            .waiter = w };

    memset(g, 0, sizeof(*g));
    return TEST_BE_OPS.acquire(be, &req, g);
}

/* try-once acquire without an owner */
static enum backend_result __attribute__((unused)) acq(struct backend *be,
                                                       const char *key,
                                                       const char *tok,
                                                       uint64_t ttl,
                                                       struct lock_grant *g)
{
    return acq_full(be, key, tok, NULL, ttl, NULL, g);
}

static enum backend_result __attribute__((unused)) ren(struct backend *be,
                                                       const char *key,
                                                       const char *tok,
                                                       uint64_t ttl,
                                                       struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .ttl_ms = ttl
    };

    memset(g, 0, sizeof(*g));
    return TEST_BE_OPS.renew(be, &req, g);
}

static enum backend_result __attribute__((unused))
rel(struct backend *be, const char *key, const char *tok)
{
    struct lock_req req = { .key = key, .key_len = strlen(key), .token = tok };
    struct lock_grant g = { 0 };

    return TEST_BE_OPS.release(be, &req, &g);
}

/* acquire in mode (limit for shared), with an Idempotency-Key (NULL:
 * none), as a waiter (w) or try-once (NULL); g is zeroed first */
static enum backend_result __attribute__((unused))
acq_kind(struct backend *be,
         const char *key,
         const char *tok,
         enum lock_mode mode,
         uint32_t limit,
         const char *idem,
         uint64_t ttl,
         struct lock_waiter *w,
         struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = tok,
                            .ttl_ms = ttl,
                            .waiter = w,
                            .mode = mode,
                            .limit = limit,
                            .idem_key = idem };

    memset(g, 0, sizeof(*g));
    return TEST_BE_OPS.acquire(be, &req, g);
}

/* re-entry: a renew with one more hold, the holder's last TTL */
static enum backend_result __attribute__((unused)) reenter(struct backend *be,
                                                           const char *key,
                                                           const char *tok,
                                                           struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .reenter = true
    };

    memset(g, 0, sizeof(*g));
    return TEST_BE_OPS.renew(be, &req, g);
}

/* give back one hold (every hold with all); *left = the holds left, which
 * the adapter must set (g starts all ones) */
static enum backend_result __attribute__((unused)) rel_holds(struct backend *be,
                                                             const char *key,
                                                             const char *tok,
                                                             bool all,
                                                             uint32_t *left)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .all = all
    };
    struct lock_grant g;
    enum backend_result r;

    memset(&g, 0xff, sizeof(g));
    r = TEST_BE_OPS.release(be, &req, &g);
    *left = g.holds;
    return r;
}

#endif /* TEST_BE_OPS */

#endif /* TESTS_UNIT_SERVER_H */

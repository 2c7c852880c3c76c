/*
 * tests/unit/test_mysql.c - the MySQL adapter (backends/mysql/) through its
 * ops table, against a real MariaDB this program sets up (mariadb-install-db)
 * and starts (mariadbd) on a free loopback port in a temp dir. Prints
 * "skip: <reason>" and exits SKIP_EXIT (77) when MariaDB cannot run here.
 */
#include "backends/backend.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mysql.h>

#include "tests/unit/check.h"
extern const struct backend_ops mysql_backend;
#define TEST_BE_OPS mysql_backend
#include "lib/clock.h"
#include "tests/unit/server.h"

#define TOK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static struct test_server srv = TEST_SERVER_INIT;
static char url[200];

/* ---- the server ---- */

/* One statement as root: see testsrv_mariadb_sql(). */
static long long root_sql(const char *sql)
{
    return testsrv_mariadb_sql(&srv, sql);
}

static int start_mariadb(void)
{
    return testsrv_mariadb_start(&srv);
}

/* ---- notifications: only those of the instance whose hooks.arg is
 * &watched_tag count ---- */

static int watched_tag;

static void on_notify(void *arg, const char *key, size_t len)
{
    if (arg == &watched_tag)
        notes_record(key, len);
}

/* ---- helpers ---- */

static struct backend *open_be_hooked(const char *u, void *tag)
{
    return be_open(u, on_notify, tag);
}

static struct backend *open_be(const char *u)
{
    return be_open(u, on_notify, &watched_tag);
}

static enum backend_result acq_owner(struct backend *be,
                                     const char *key,
                                     const char *tok,
                                     const char *owner,
                                     uint64_t ttl,
                                     struct lock_grant *g)
{
    return acq_full(be, key, tok, owner, ttl, NULL, g);
}

/* a shared try-once acquire */
static enum backend_result shared(struct backend *be,
                                  const char *key,
                                  const char *tok,
                                  uint32_t limit,
                                  uint64_t ttl,
                                  struct lock_grant *g)
{
    return acq_kind(be, key, tok, LOCK_SHARED, limit, NULL, ttl, NULL, g);
}

static enum backend_result
insp(struct backend *be, const char *key, struct lock_info *info)
{
    memset(info, 0, sizeof(*info));
    return mysql_backend.inspect(be, key, strlen(key), info);
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
        "mysql://u@127.0.0.1/db?compound=2",
        "mysql://u@127.0.0.1/db?compound=yes",
        "mysql://u@127.0.0.1/db?compound=",
        NULL,
    };
    struct backend *be;

    for (int i = 0; bad[i] != NULL; i++) {
        be = (struct backend *)1;
        CHECK_MSG(mysql_backend.open(bad[i], NULL, &be, NULL, 0) ==
                      BACKEND_INVALID,
                  "accepted %s", bad[i]);
        CHECK(be == NULL);
    }
}

/* open()'s message for u: BACKEND_INVALID expected; the message into msg. */
static void open_fails(const char *u, char *msg, size_t len)
{
    struct backend *be = (struct backend *)1;

    msg[0] = '\0';
    CHECK_MSG(mysql_backend.open(u, NULL, &be, msg, len) == BACKEND_INVALID,
              "accepted %s", u);
    CHECK(be == NULL);
}

/* TLS options that do not go together, and files that cannot be read,
 * stop lockd at start with the option named; no message shows a
 * password, whichever way it came. */
static void test_open_rejects_bad_tls_and_password_options(void)
{
    static const struct {
        const char *query, *want;
    } bad[] = {
        { "ssl_mode=on", "ssl_mode must be" },
        { "ssl_mode=", "ssl_mode must be" },
        { "ssl_ca=/etc/hostname", "ssl_ca= needs TLS" },
        { "ssl_mode=disabled&ssl_cert=/etc/hostname&ssl_key=/etc/hostname",
          "ssl_cert= needs TLS" },
        { "ssl_mode=required&ssl_ca=/etc/hostname", "ssl_ca= is for" },
        { "ssl_mode=preferred&ssl_ca=/etc/hostname", "ssl_ca= is for" },
        { "ssl_mode=verify_ca", "needs ssl_ca=PATH" },
        { "ssl_mode=verify_identity", "needs ssl_ca=PATH" },
        { "ssl_mode=required&ssl_cert=/etc/hostname", "go together" },
        { "ssl_mode=required&ssl_key=/etc/hostname", "go together" },
        { "ssl_mode=verify_ca&ssl_ca=/nonexistent/ca.pem",
          "ssl_ca=/nonexistent/ca.pem: cannot read it" },
        { "ssl_mode=verify_ca&ssl_ca=", "ssl_ca= needs a path" },
        { "ssl_mode=required&ssl_cert=/etc/hostname&ssl_key=/nonexistent/k",
          "ssl_key=/nonexistent/k: cannot read it" },
        { "password_file=/nonexistent/pw", "/nonexistent/pw" },
    };
    char u[300], msg[512];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(u, sizeof(u), "mysql://u:Secret-pw@127.0.0.1/db?%s",
                 bad[i].query);
        if (strncmp(bad[i].query, "password_file", 13) == 0)
            snprintf(u, sizeof(u), "mysql://u@127.0.0.1/db?%s", bad[i].query);
        open_fails(u, msg, sizeof(msg));
        CHECK_MSG(strstr(msg, bad[i].want) != NULL, "%s: got '%s', want '%s'",
                  bad[i].query, msg, bad[i].want);
        CHECK_MSG(strncmp(msg, "mysql: ", 7) == 0, "%s", msg);
        CHECK_MSG(strstr(msg, "Secret-pw") == NULL, "%s", msg);
    }
    open_fails("mysql://u:Secret-pw@127.0.0.1/db?password_file=/etc/hostname",
               msg, sizeof(msg));
    CHECK_MSG(strstr(msg, "password_file") != NULL &&
                  strstr(msg, "Secret-pw") == NULL,
              "%s", msg);
}

/* The password from password_file= or LOCKD_BACKEND_PASSWORD logs in,
 * as one in the URL does; the URL's wins over the environment. */
static void test_password_from_file_or_environment(void)
{
    char u[300], pw[200];
    struct backend *be;
    FILE *f;

    snprintf(pw, sizeof(pw), "%s/pw", srv.dir);
    f = fopen(pw, "w");
    CHECK(f != NULL);
    if (f == NULL)
        return;
    fprintf(f, "%s\n", TESTSRV_MYSQL_PASSWORD);
    fclose(f);
    snprintf(u, sizeof(u), "mysql://lockd@127.0.0.1:%d/lockd?password_file=%s",
             srv.port, pw);
    be = open_be_hooked(u, NULL);
    CHECK(be != NULL && mysql_backend.ping(be) == BACKEND_OK);
    mysql_backend.close(be);
    setenv("LOCKD_BACKEND_PASSWORD", TESTSRV_MYSQL_PASSWORD, 1);
    snprintf(u, sizeof(u), "mysql://lockd@127.0.0.1:%d/lockd", srv.port);
    be = open_be_hooked(u, NULL);
    CHECK(be != NULL && mysql_backend.ping(be) == BACKEND_OK);
    mysql_backend.close(be);
    snprintf(u, sizeof(u), "mysql://lockd:wrong@127.0.0.1:%d/lockd", srv.port);
    be = open_be_hooked(u, NULL);
    CHECK(be != NULL && mysql_backend.ping(be) == BACKEND_UNAVAILABLE);
    mysql_backend.close(be);
    unsetenv("LOCKD_BACKEND_PASSWORD");
    snprintf(u, sizeof(u), "mysql://lockd@127.0.0.1:%d/lockd", srv.port);
    be = open_be_hooked(u, NULL);
    CHECK(be != NULL && mysql_backend.ping(be) == BACKEND_UNAVAILABLE);
    mysql_backend.close(be);
}

static void test_open_succeeds_while_mysql_is_down(void)
{
    char u[160];
    struct backend *be;
    struct lock_grant g;
    int64_t t0;

    snprintf(u, sizeof(u),
             "mysql://lockd:x@127.0.0.1:%d/lockd?connect_timeout_ms=500",
             testsrv_free_port());
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    t0 = check_mono_ms();
    CHECK_EQ_INT(acq(be, "down", TOK_A, 1000, &g), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(mysql_backend.ping(be), BACKEND_UNAVAILABLE);
    CHECK(check_mono_ms() - t0 < 2000);
    mysql_backend.close(be);
}

static void test_acquire_grants_free_key_once(void)
{
    struct lock_grant g, h;

    CHECK_EQ_INT(acq(be_main, "once", TOK_A, 10000, &g), BACKEND_OK);
    CHECK(g.fence > 0 && g.fence < LOCK_FENCE_MAX);
    CHECK_EQ_INT(g.ttl_ms, 10000);
    /* the database's clock, close to ours on one machine */
    CHECK(g.expires_at_ms > clock_wall_ms() + 8000 &&
          g.expires_at_ms < clock_wall_ms() + 12000);
    CHECK_EQ_INT(acq(be_main, "once", TOK_B, 10000, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 8000 && h.retry_ms <= 10000);
    CHECK_EQ_INT(acq(be_main, "once", TOK_A, 10000, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "once", TOK_A), BACKEND_OK);
}

/* Statements the server has executed (COM_STMT_EXECUTE), all sessions. */
static long long stmts_executed(void)
{
    return root_sql("SELECT VARIABLE_VALUE FROM information_schema"
                    ".GLOBAL_STATUS WHERE VARIABLE_NAME = 'COM_STMT_EXECUTE'");
}

/* Statements executed for n acquire+renew+release rounds of a fresh key
 * each on be; -1 when a call failed. */
static long long stmts_for_rounds(struct backend *be, const char *prefix, int n)
{
    struct lock_grant g;
    char key[64];
    long long before = stmts_executed(), after;

    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        if (acq(be, key, TOK_A, 10000, &g) != BACKEND_OK ||
            ren(be, key, TOK_A, 10000, &g) != BACKEND_OK ||
            rel(be, key, TOK_A) != BACKEND_OK)
            return -1;
    }
    after = stmts_executed();
    return before < 0 || after < 0 ? -1 : after - before;
}

/* On MariaDB an exclusive acquire, a renew and a release are one
 * statement each, COMMIT included (compound statements); with compound=0
 * they go step by step, as on MySQL: 4, 3 and 4 statements (COMMIT is a
 * plain query, not counted). The background thread's polls count too, a
 * few per second. */
static void test_acquire_renew_release_one_statement_each(void)
{
    char u[260];
    struct backend *steps;
    long long blocks, each;

    blocks = stmts_for_rounds(be_main, "one-stmt", 40);
    printf("  40 rounds: %lld statements with compound statements\n", blocks);
    CHECK(blocks >= 120 && blocks < 160);
    snprintf(u, sizeof(u), "%s?compound=0", url);
    steps = open_be(u);
    CHECK(steps != NULL);
    if (steps == NULL)
        return;
    each = stmts_for_rounds(steps, "steps", 40);
    printf("  40 rounds: %lld statements step by step\n", each);
    CHECK(each >= 240);
    mysql_backend.close(steps);
}

/* A connection the server closed while it sat idle (killed here; a
 * restart does the same) is replaced before a statement goes on it: a
 * compound statement lost on the way may have committed, so it is never
 * sent again, and only this check keeps such a close from costing a 503. */
static void test_connection_closed_while_idle_is_replaced(void)
{
    struct lock_grant g;
    long long id, last = 0;
    int killed = 0;
    char sql[160];

    CHECK_EQ_INT(acq(be_main, "idle-1", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "idle-1", TOK_A), BACKEND_OK);
    for (int i = 0; i < 64; i++) { /* every session of user lockd */
        snprintf(sql, sizeof(sql),
                 "SELECT COALESCE(MIN(ID), 0) FROM information_schema"
                 ".PROCESSLIST WHERE USER = 'lockd' AND ID > %lld",
                 last);
        id = root_sql(sql);
        if (id <= 0)
            break;
        snprintf(sql, sizeof(sql), "KILL CONNECTION %lld", id);
        killed += root_sql(sql) == 0;
        last = id;
    }
    printf("  %d sessions killed\n", killed);
    CHECK(killed >= 1);
    usleep(200 * 1000); /* the close reaches our socket */
    CHECK_EQ_INT(acq(be_main, "idle-2", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "idle-2", TOK_A, 10000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "idle-2", TOK_A), BACKEND_OK);
}

static void test_fence_grows_with_every_grant(void)
{
    struct lock_grant g;
    uint64_t last = 0;

    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(acq(be_main, "fence", TOK_A, 10000, &g), BACKEND_OK);
        CHECK(g.fence > last);
        last = g.fence;
        CHECK_EQ_INT(rel(be_main, "fence", TOK_A), BACKEND_OK);
    }
    /* another key draws from the same sequence */
    CHECK_EQ_INT(acq(be_main, "fence-2", TOK_A, 10000, &g), BACKEND_OK);
    CHECK(g.fence > last);
    CHECK_EQ_INT(rel(be_main, "fence-2", TOK_A), BACKEND_OK);
}

static void test_renew_keeps_fence_and_stored_ttl(void)
{
    struct lock_grant g, r;

    CHECK_EQ_INT(acq(be_main, "renew", TOK_A, 3000, &g), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "renew", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(r.fence, g.fence);
    CHECK_EQ_INT(r.ttl_ms, 3000);
    CHECK(r.expires_at_ms >= g.expires_at_ms);
    CHECK_EQ_INT(ren(be_main, "renew", TOK_A, 20000, &r), BACKEND_OK);
    CHECK_EQ_INT(r.ttl_ms, 20000);
    CHECK(r.expires_at_ms > g.expires_at_ms + 15000);
    CHECK_EQ_INT(ren(be_main, "renew", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(r.ttl_ms, 20000);
    CHECK_EQ_INT(ren(be_main, "renew", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "renew", TOK_B), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "renew", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "renew", TOK_A, 0, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be_main, "renew", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(ren(be_main, "renew-never", TOK_A, 0, &r), BACKEND_NOT_FOUND);
}

static void test_expired_token_is_dead(void)
{
    struct lock_grant g, h, r;

    CHECK_EQ_INT(acq(be_main, "expire", TOK_A, 100, &g), BACKEND_OK);
    check_sleep_ms(200);
    CHECK_EQ_INT(ren(be_main, "expire", TOK_A, 0, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be_main, "expire", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq(be_main, "expire", TOK_B, 10000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(ren(be_main, "expire", TOK_A, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "expire", TOK_B), BACKEND_OK);
}

static void test_inspect_shows_owner_never_token(void)
{
    struct lock_grant g;
    struct lock_info info;
    char owner[LOCK_OWNER_MAX + 1];

    CHECK_EQ_INT(mysql_backend.inspect(be_main, "insp", 4, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq_owner(be_main, "insp", TOK_A, "pod-a/worker-3", 5000, &g),
                 BACKEND_OK);
    memset(&info, 0, sizeof(info));
    CHECK_EQ_INT(mysql_backend.inspect(be_main, "insp", 4, &info), BACKEND_OK);
    CHECK_EQ_INT(info.fence, g.fence);
    CHECK(info.ttl_ms >= 1 && info.ttl_ms <= 5000);
    CHECK_EQ_INT(info.expires_at_ms, g.expires_at_ms);
    CHECK(info.has_owner && strcmp(info.owner, "pod-a/worker-3") == 0);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be_main, "insp", TOK_A), BACKEND_OK);

    /* no owner; then an owner of the full 128 bytes */
    CHECK_EQ_INT(acq(be_main, "insp", TOK_A, 5000, &g), BACKEND_OK);
    memset(&info, 0, sizeof(info));
    CHECK_EQ_INT(mysql_backend.inspect(be_main, "insp", 4, &info), BACKEND_OK);
    CHECK(!info.has_owner);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be_main, "insp", TOK_A), BACKEND_OK);
    memset(owner, 'o', LOCK_OWNER_MAX);
    owner[LOCK_OWNER_MAX] = '\0';
    CHECK_EQ_INT(acq_owner(be_main, "insp", TOK_A, owner, 5000, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(mysql_backend.inspect(be_main, "insp", 4, &info), BACKEND_OK);
    CHECK(info.has_owner && strcmp(info.owner, owner) == 0);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be_main, "insp", TOK_A), BACKEND_OK);
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
        CHECK_EQ_INT(acq(be_main, keys[i], TOK_A, 10000, &g), BACKEND_OK);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(acq(be_main, keys[i], TOK_B, 10000, &g), BACKEND_HELD);
        CHECK_EQ_INT(insp(be_main, keys[i], &info), BACKEND_OK);
        lock_info_clear(&info);
    }
    /* one release frees exactly its own key */
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(rel(be_main, keys[i], TOK_A), BACKEND_OK);
        for (size_t j = i + 1; j < n; j++) {
            CHECK_MSG(insp(be_main, keys[j], &info) == BACKEND_OK,
                      "releasing key %zu freed key %zu", i, j);
            lock_info_clear(&info);
        }
    }
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key LIKE 'k%' OR lock_key LIKE 'x%'"),
                 0);
}

static void test_release_notifies(void)
{
    struct lock_grant g;

    notes_reset();
    CHECK_EQ_INT(acq(be_main, "note", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "note", TOK_B), BACKEND_MISMATCH);
    CHECK(!notes_heard("note", 0));
    CHECK_EQ_INT(rel(be_main, "note", TOK_A), BACKEND_OK);
    CHECK(notes_heard("note", 0));
}

static void test_release_on_another_instance_notifies(void)
{
    struct backend *other = open_be_hooked(url, NULL);
    static const char key[] = "far 'away'\\ \xc3\xa9";
    struct lock_grant g;
    int64_t t0;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    check_sleep_ms(200); /* be_main's watcher has read where the events stand */
    CHECK_EQ_INT(acq(other, key, TOK_A, 5000, &g), BACKEND_OK);
    notes_reset();
    t0 = check_mono_ms();
    CHECK_EQ_INT(rel(other, key, TOK_A), BACKEND_OK);
    CHECK(notes_heard(key, 2000));
    printf("  heard a release on another instance after %lld ms\n",
           (long long)(check_mono_ms() - t0));
    CHECK(check_mono_ms() - t0 < 500);
    /* a failed release tells no one */
    CHECK_EQ_INT(acq(other, key, TOK_A, 5000, &g), BACKEND_OK);
    notes_reset();
    CHECK_EQ_INT(rel(other, key, TOK_B), BACKEND_MISMATCH);
    check_sleep_ms(300);
    CHECK(!notes_heard(key, 0));
    CHECK_EQ_INT(rel(other, key, TOK_A), BACKEND_OK);
    mysql_backend.close(other);
}

static void test_instances_share_locks_and_fences(void)
{
    struct backend *other = open_be(url);
    struct lock_grant g, h;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    CHECK_EQ_INT(acq(be_main, "shared", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(other, "shared", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel(other, "shared", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(other, "shared", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(other, "shared", TOK_B), BACKEND_OK);
    mysql_backend.close(other);
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
    int64_t end = check_mono_ms() + 1500;

    snprintf(tok, sizeof(tok), "%032x", (unsigned)a->id + 1);
    while (check_mono_ms() < end) {
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
        check_sleep_ms(1);
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
    CHECK_EQ_INT(started, 6);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_INT(r.violations, 0);
    CHECK_EQ_INT(r.fence_errors, 0);
    CHECK_EQ_INT(r.errors, 0);
    CHECK(r.grants > 10);
    printf("  %d grants in 1.5 s on 6 threads\n", r.grants);
    mysql_backend.close(other);
}

/* InnoDB's report of the last deadlock, to tell which statements met. */
static void print_last_deadlock(void)
{
    MYSQL *db = testsrv_mariadb_root(&srv);
    MYSQL_RES *res = NULL;
    MYSQL_ROW row = NULL;
    const char *p = NULL, *e = NULL;

    if (db != NULL && mysql_query(db, "SHOW ENGINE INNODB STATUS") == 0)
        res = mysql_store_result(db);
    if (res != NULL)
        row = mysql_fetch_row(res);
    if (row != NULL && row[2] != NULL)
        p = strstr(row[2], "LATEST DETECTED DEADLOCK");
    if (p != NULL)
        e = strstr(p, "WE ROLL BACK");
    if (p != NULL)
        printf("%.*s\n", e != NULL ? (int)(e - p) : 4000, p);
    if (res != NULL)
        mysql_free_result(res);
    if (db != NULL)
        mysql_close(db);
}

/* ---- many threads, both modes, a few keys ---- */

#define MIX_KEYS    3
#define MIX_THREADS 12
#define MIX_LIMIT   3

struct mix {
    pthread_mutex_t mu;
    int excl[MIX_KEYS], sh[MIX_KEYS]; /* holders now, by our own count */
    int violations, errors, grants_x, grants_s, held;
};

struct mix_arg {
    struct mix *m;
    struct backend *be;
    int id;
};

static void mix_enter(struct mix *m, int k, bool excl)
{
    pthread_mutex_lock(&m->mu);
    if (excl) {
        if (m->excl[k] != 0 || m->sh[k] != 0)
            m->violations++;
        m->excl[k]++;
        m->grants_x++;
    } else {
        if (m->excl[k] != 0 || m->sh[k] >= MIX_LIMIT)
            m->violations++;
        m->sh[k]++;
        m->grants_s++;
    }
    pthread_mutex_unlock(&m->mu);
}

static void mix_leave(struct mix *m, int k, bool excl)
{
    pthread_mutex_lock(&m->mu);
    if (excl)
        m->excl[k]--;
    else
        m->sh[k]--;
    pthread_mutex_unlock(&m->mu);
}

static void *mix_thread(void *arg)
{
    struct mix_arg *a = arg;
    struct mix *m = a->m;
    char tok[40], key[16];
    struct lock_grant g;
    unsigned seed = (unsigned)a->id * 7919u + 1;
    int64_t end = check_mono_ms() + 2000;

    snprintf(tok, sizeof(tok), "%032x", (unsigned)a->id + 0x100);
    while (check_mono_ms() < end) {
        int k = (int)(rand_r(&seed) % MIX_KEYS);
        bool excl = rand_r(&seed) % 3 == 0;
        enum backend_result r;

        snprintf(key, sizeof(key), "mix-%d", k);
        r = excl ? acq(a->be, key, tok, 10000, &g)
                 : shared(a->be, key, tok, MIX_LIMIT, 10000, &g);
        if (r == BACKEND_HELD) {
            pthread_mutex_lock(&m->mu);
            m->held++;
            pthread_mutex_unlock(&m->mu);
            continue;
        }
        if (r != BACKEND_OK) {
            pthread_mutex_lock(&m->mu);
            m->errors++;
            pthread_mutex_unlock(&m->mu);
            continue;
        }
        mix_enter(m, k, excl);
        if (rand_r(&seed) % 2 == 0) /* a renew, sometimes a re-entry */
            (void)(rand_r(&seed) % 2 ? reenter(a->be, key, tok, &g)
                                     : ren(a->be, key, tok, 0, &g));
        mix_leave(m, k, excl); /* before the release: never counted late */
        {
            uint32_t left;
            if (rel_holds(a->be, key, tok, true, &left) != BACKEND_OK) {
                pthread_mutex_lock(&m->mu);
                m->errors++;
                pthread_mutex_unlock(&m->mu);
            }
        }
    }
    return NULL;
}

static long long innodb_deadlocks(void)
{
    return root_sql("SELECT VARIABLE_VALUE FROM information_schema"
                    ".GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_DEADLOCKS'");
}

/* InnoDB's deadlocks during a run of grants: the lock order keeps them to
 * the rare gap lock a vanished row hands on (backends/mysql/multi.c),
 * none in most runs; a broken order makes hundreds in a run of ~2000
 * grants. Each is retried by the adapter, so errors stay 0 too. */
static bool deadlocks_rare(long long dl0, long long dl1, int grants)
{
    if (dl1 != dl0)
        print_last_deadlock();
    return dl0 >= 0 && dl1 >= dl0 && dl1 - dl0 <= grants / 200;
}

/* Exclusive and shared acquirers, renewers and releasers on the same and
 * on different keys, through two instances: never more holders than the
 * mode allows, no error (a deadlock would surface as UNAVAILABLE after
 * its retries), and deadlocks rare in InnoDB's own count. */
static void test_kinds_mixed_threads_exclude_without_deadlocks(void)
{
    struct backend *other = open_be(url);
    struct mix m = { .mu = PTHREAD_MUTEX_INITIALIZER };
    struct mix_arg args[MIX_THREADS];
    pthread_t t[MIX_THREADS];
    int started = 0;
    long long dl0, dl1;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    dl0 = root_sql("SELECT VARIABLE_VALUE FROM information_schema"
                   ".GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_DEADLOCKS'");
    for (int i = 0; i < MIX_THREADS; i++) {
        args[i] = (struct mix_arg){ &m, i % 2 == 0 ? be_main : other, i };
        if (pthread_create(&t[i], NULL, mix_thread, &args[i]) != 0)
            break;
        started++;
    }
    CHECK_EQ_INT(started, MIX_THREADS);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    dl1 = root_sql("SELECT VARIABLE_VALUE FROM information_schema"
                   ".GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_DEADLOCKS'");
    printf("  %d exclusive and %d shared grants, %d held, in 2 s on %d "
           "threads; %lld deadlocks\n",
           m.grants_x, m.grants_s, m.held, MIX_THREADS, dl1 - dl0);
    CHECK_EQ_INT(m.violations, 0);
    CHECK_EQ_INT(m.errors, 0);
    CHECK(m.grants_x > 10 && m.grants_s > 10);
    CHECK(deadlocks_rare(dl0, dl1, m.grants_x + m.grants_s));
    for (int k = 0; k < MIX_KEYS; k++) {
        char key[16];
        struct lock_info info;
        snprintf(key, sizeof(key), "mix-%d", k);
        CHECK_EQ_INT(insp(be_main, key, &info), BACKEND_NOT_FOUND);
    }
    mysql_backend.close(other);
}

static void test_fences_outlive_the_backend(void)
{
    struct backend *be = open_be(url);
    struct lock_grant g, h;

    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(acq(be, "durable", TOK_A, 5000, &g), BACKEND_OK);
    mysql_backend.close(be);
    be = open_be(url);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    /* still held by the closed instance's grant */
    CHECK_EQ_INT(acq(be, "durable", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel(be, "durable", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "durable", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(be, "durable", TOK_B), BACKEND_OK);
    mysql_backend.close(be);
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
    CHECK_EQ_INT(acq(be, "drop", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.other_locks"), 1);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key = 'drop'"),
                 0);
    CHECK(root_sql("DROP TABLE lockd.other_locks, lockd.other_locks_seq,"
                   " lockd.other_locks_events, lockd.other_locks_fence") == 0);
    CHECK_EQ_INT(acq(be, "drop", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "drop", TOK_A), BACKEND_OK);
    mysql_backend.close(be);
}

/* Tables of the previous version (fences from row 1 of _seq) are upgraded
 * at start: the AUTO_INCREMENT counter starts above the old sequence and
 * above every fence in the lock table, and the old row is retired so an
 * older lockd still running cannot hand out a fence from it. */
static void test_old_schema_upgrade_gives_larger_fences(void)
{
    struct lock_grant g, h;
    char u[400];
    struct backend *be;

    CHECK(root_sql("CREATE TABLE lockd.up_locks (lock_key VARBINARY(512)"
                   " NOT NULL, token VARBINARY(64) NOT NULL, owner"
                   " VARBINARY(128) NULL, fence BIGINT UNSIGNED NOT NULL,"
                   " ttl_ms BIGINT UNSIGNED NOT NULL, expires_at BIGINT NOT"
                   " NULL, PRIMARY KEY (lock_key), KEY expires_at"
                   " (expires_at)) ENGINE = InnoDB") == 0);
    CHECK(root_sql("CREATE TABLE lockd.up_locks_seq (id TINYINT UNSIGNED NOT"
                   " NULL, v BIGINT UNSIGNED NOT NULL, PRIMARY KEY (id))"
                   " ENGINE = InnoDB") == 0);
    CHECK(root_sql("CREATE TABLE lockd.up_locks_events (id BIGINT UNSIGNED"
                   " NOT NULL, lock_key VARBINARY(512) NOT NULL, PRIMARY KEY"
                   " (id)) ENGINE = InnoDB") == 0);
    CHECK(root_sql("INSERT INTO lockd.up_locks_seq VALUES (1, 7000), (2, 5)") ==
          0);
    /* a held lock granted by the old version, fence above the sequence */
    CHECK(root_sql("INSERT INTO lockd.up_locks VALUES ('held', 'x', NULL,"
                   " 7300, 60000, 9999999999999)") == 0);
    snprintf(u, sizeof(u), "%s?table=up_locks", url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(acq(be, "new", TOK_A, 5000, &g), BACKEND_OK);
    CHECK(g.fence > 7300);
    CHECK_EQ_INT(acq(be, "held", TOK_A, 5000, &h), BACKEND_HELD);
    CHECK_EQ_INT(root_sql("SELECT v = 9007199254740991 FROM"
                          " lockd.up_locks_seq WHERE id = 1"),
                 1);
    /* the old lock is a holder now: inspected, renewed by its token */
    {
        struct lock_info info;
        CHECK_EQ_INT(insp(be, "held", &info), BACKEND_OK);
        CHECK_EQ_INT(info.fence, 7300);
        CHECK_EQ_INT(info.holder_count, 1);
        CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
        lock_info_clear(&info);
        CHECK_EQ_INT(ren(be, "held", "x", 0, &h), BACKEND_OK);
        CHECK_EQ_INT(h.fence, 7300);
        CHECK_EQ_INT(shared(be, "held", TOK_B, 0, 5000, &h), BACKEND_HELD);
        /* an older lockd can no longer match it by token */
        CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.up_locks"
                              " WHERE token <> ''"),
                     0);
    }
    /* a restarted lockd keeps counting from the fence table */
    mysql_backend.close(be);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(acq(be, "new", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel(be, "new", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "new", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(be, "new", TOK_B), BACKEND_OK);
    mysql_backend.close(be);
}

/* Tables of the version before lock kinds (a fence table, no holder
 * table, no mode or lim): the key table gets its columns, each live lock
 * becomes its own holder under its token and fence, and new fences stay
 * above every earlier one. */
static void test_pre_kinds_schema_upgrade_keeps_locks(void)
{
    struct lock_grant g, h;
    struct lock_info info;
    char u[400];
    struct backend *be;

    CHECK(root_sql("CREATE TABLE lockd.pk_locks (lock_key VARBINARY(512)"
                   " NOT NULL, token VARBINARY(64) NOT NULL, owner"
                   " VARBINARY(128) NULL, fence BIGINT UNSIGNED NOT NULL,"
                   " ttl_ms BIGINT UNSIGNED NOT NULL, expires_at BIGINT NOT"
                   " NULL, PRIMARY KEY (lock_key), KEY expires_at"
                   " (expires_at)) ENGINE = InnoDB") == 0);
    CHECK(root_sql("CREATE TABLE lockd.pk_locks_seq (id TINYINT UNSIGNED NOT"
                   " NULL, v BIGINT UNSIGNED NOT NULL, PRIMARY KEY (id))"
                   " ENGINE = InnoDB") == 0);
    CHECK(root_sql("CREATE TABLE lockd.pk_locks_events (id BIGINT UNSIGNED"
                   " NOT NULL, lock_key VARBINARY(512) NOT NULL, PRIMARY KEY"
                   " (id)) ENGINE = InnoDB") == 0);
    CHECK(root_sql("CREATE TABLE lockd.pk_locks_fence (id BIGINT UNSIGNED NOT"
                   " NULL AUTO_INCREMENT, PRIMARY KEY (id)) ENGINE = InnoDB") ==
          0);
    CHECK(root_sql("INSERT INTO lockd.pk_locks_seq VALUES"
                   " (1, 9007199254740991), (2, 3)") == 0);
    CHECK(root_sql("INSERT INTO lockd.pk_locks_fence VALUES (5000)") == 0);
    CHECK(root_sql("INSERT INTO lockd.pk_locks VALUES ('old', 'y', 'pod',"
                   " 4999, 60000, 9999999999999), ('gone', 'z', NULL, 4000,"
                   " 100, 1)") == 0);
    snprintf(u, sizeof(u), "%s?table=pk_locks", url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(insp(be, "old", &info), BACKEND_OK);
    CHECK_EQ_INT(info.fence, 4999);
    CHECK(info.has_owner && strcmp(info.owner, "pod") == 0);
    lock_info_clear(&info);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM information_schema.COLUMNS"
                          " WHERE TABLE_SCHEMA = 'lockd' AND TABLE_NAME ="
                          " 'pk_locks' AND COLUMN_NAME IN ('mode', 'lim')"),
                 2);
    CHECK_EQ_INT(acq(be, "old", TOK_A, 5000, &h), BACKEND_HELD);
    CHECK_EQ_INT(acq(be, "gone", TOK_A, 5000, &g), BACKEND_OK);
    CHECK(g.fence > 5000);
    CHECK_EQ_INT(rel(be, "old", "y"), BACKEND_OK);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.pk_locks"
                          " WHERE lock_key = 'old'"),
                 0);
    CHECK_EQ_INT(shared(be, "old", TOK_B, 0, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(be, "old", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "gone", TOK_A), BACKEND_OK);
    mysql_backend.close(be);
}

static void test_reaper_removes_expired_rows(void)
{
    struct lock_grant g;
    char key[32];
    long long rows = -1;

    for (int i = 0; i < 250; i++) {
        snprintf(key, sizeof(key), "reap-%d", i);
        /* long enough to outlive the loop on a slow (sanitizer) build */
        CHECK_EQ_INT(acq(be_main, key, TOK_A, 1500, &g), BACKEND_OK);
    }
    CHECK(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                   " WHERE lock_key LIKE 'reap-%'") >= 200);
    /* reaped every second, 100 rows a batch, batches back to back */
    for (int i = 0; i < 60; i++) {
        check_sleep_ms(100);
        rows = root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                        " WHERE lock_key LIKE 'reap-%'");
        if (rows == 0)
            break;
    }
    CHECK_EQ_INT(rows, 0);
    for (int i = 0; i < 40; i++) {
        rows = root_sql("SELECT COUNT(*) FROM lockd.lockd_locks_holders"
                        " WHERE lock_key LIKE 'reap-%'");
        if (rows == 0)
            break;
        check_sleep_ms(100);
    }
    CHECK_EQ_INT(rows, 0);
    CHECK_EQ_INT(mysql_backend.held_count(be_main), 0);
    CHECK_EQ_INT(acq(be_main, "counted", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(mysql_backend.held_count(be_main), 1);
    CHECK_EQ_INT(rel(be_main, "counted", TOK_A), BACKEND_OK);
}

static void test_stopped_mysql_answers_unavailable_in_time(void)
{
    char u[400];
    struct backend *be, *be2;
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
    CHECK_EQ_INT(acq(be, "stopped", TOK_A, 60000, &g), BACKEND_OK);
    /* a second handle: its own connection, alive when the renew goes */
    be2 = open_be(u);
    CHECK(be2 != NULL);
    if (be2 == NULL) {
        mysql_backend.close(be);
        return;
    }
    CHECK_EQ_INT(acq(be2, "stopped-3", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(ren(be2, "stopped-3", TOK_A, 5000, &g), BACKEND_OK);
    testsrv_signal(&srv, SIGSTOP);
    t0 = check_mono_ms();
    CHECK_EQ_INT(acq(be, "stopped-2", TOK_A, 60000, &g), BACKEND_UNAVAILABLE);
    took = check_mono_ms() - t0;
    printf("  acquire on a stopped server: %lld ms\n", (long long)took);
    CHECK(took >= 500 && took < 3500);
    t0 = check_mono_ms();
    CHECK_EQ_INT(insp(be, "stopped", &info), BACKEND_UNAVAILABLE);
    CHECK(info.holders == NULL);
    CHECK(check_mono_ms() - t0 < 3500);
    CHECK_EQ_INT(ren(be2, "stopped-3", TOK_A, 60000, &g), BACKEND_UNAVAILABLE);
    testsrv_signal(&srv, SIGCONT);
    /* the lock survived */
    for (int i = 0; i < 40; i++) {
        if (mysql_backend.ping(be) == BACKEND_OK)
            break;
        check_sleep_ms(100);
    }
    CHECK_EQ_INT(acq(be, "stopped", TOK_B, 5000, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel(be, "stopped", TOK_A), BACKEND_OK);
    /* the server ran the timed-out grant and renew when it woke (a
       compound statement carries its own COMMIT), past their not-after
       time: neither changed anything */
    CHECK_EQ_INT(insp(be, "stopped-2", &info), BACKEND_NOT_FOUND);
    free(info.holders);
    CHECK_EQ_INT(insp(be, "stopped-3", &info), BACKEND_OK);
    printf("  the lock renewed in vain: %llu ms left of 5000\n",
           (unsigned long long)info.ttl_ms);
    CHECK(info.ttl_ms <= 5000);
    free(info.holders);
    CHECK_EQ_INT(rel(be, "stopped-3", TOK_A), BACKEND_OK);
    mysql_backend.close(be2);
    mysql_backend.close(be);
}

static void test_restart_keeps_holders_and_fences(void)
{
    struct lock_grant g, h;
    int64_t t0;
    enum backend_result r = BACKEND_UNAVAILABLE;

    CHECK_EQ_INT(acq(be_main, "restart", TOK_A, 60000, &g), BACKEND_OK);
    /* the AUTO_INCREMENT counter itself must survive the restart, even
       with no row left to recompute it from */
    CHECK(root_sql("DELETE FROM lockd.lockd_locks_fence") == 0);
    testsrv_signal(&srv, SIGKILL);
    t0 = check_mono_ms();
    CHECK_EQ_INT(acq(be_main, "restart-2", TOK_A, 5000, &h),
                 BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(mysql_backend.ping(be_main), BACKEND_UNAVAILABLE);
    CHECK(check_mono_ms() - t0 < 2500);
    CHECK_EQ_INT(start_mariadb(), 0);
    for (int i = 0; i < 50 && r != BACKEND_OK; i++) {
        r = mysql_backend.ping(be_main);
        if (r != BACKEND_OK)
            check_sleep_ms(100);
    }
    CHECK_EQ_INT(r, BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "restart", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "restart", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "restart", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(be_main, "restart", TOK_B), BACKEND_OK);
}

/* ---- lock kinds ---- */

#define TOK_C "cccccccccccccccccccccccccccccccc"
#define TOK_D "dddddddddddddddddddddddddddddddd"

static void test_kinds_shared_up_to_the_limit_then_held(void)
{
    struct lock_grant a, b, c, d;
    int64_t before = mysql_backend.held_count(be_main);

    CHECK_EQ_INT(shared(be_main, "sem", TOK_A, 3, 2000, &a), BACKEND_OK);
    CHECK_EQ_INT(a.mode, LOCK_SHARED);
    CHECK_EQ_INT(a.limit, 3);
    CHECK_EQ_INT(a.holds, 1);
    CHECK_EQ_INT(a.ttl_ms, 2000);
    CHECK_EQ_INT(shared(be_main, "sem", TOK_B, 3, 8000, &b), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "sem", TOK_C, 3, 8000, &c), BACKEND_OK);
    CHECK(a.fence < b.fence && b.fence < c.fence);
    CHECK_EQ_INT(mysql_backend.held_count(be_main), before + 3);
    /* full: held, the hint is the first holder's TTL (A's), not the last */
    CHECK_EQ_INT(shared(be_main, "sem", TOK_D, 3, 8000, &d), BACKEND_HELD);
    CHECK(d.retry_ms > 1000 && d.retry_ms <= 2000);
    CHECK_EQ_INT(acq(be_main, "sem", TOK_D, 8000, &d), BACKEND_HELD);
    CHECK(d.retry_ms > 1000 && d.retry_ms <= 2000);
    /* one leaves: one more fits, with a larger fence */
    CHECK_EQ_INT(rel(be_main, "sem", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "sem", TOK_D, 3, 8000, &d), BACKEND_OK);
    CHECK(d.fence > c.fence);
    CHECK_EQ_INT(mysql_backend.held_count(be_main), before + 3);
    CHECK_EQ_INT(rel(be_main, "sem", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "sem", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "sem", TOK_D), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "sem", TOK_D), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(mysql_backend.held_count(be_main), before);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key = 'sem'"),
                 0);
}

static void test_kinds_exclusive_and_shared_exclude(void)
{
    struct lock_grant x, r1, r2, h;

    CHECK_EQ_INT(acq(be_main, "rw", TOK_A, 5000, &x), BACKEND_OK);
    CHECK_EQ_INT(x.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(x.holds, 1);
    CHECK_EQ_INT(shared(be_main, "rw", TOK_B, 0, 5000, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 3000 && h.retry_ms <= 5000);
    CHECK_EQ_INT(rel(be_main, "rw", TOK_A), BACKEND_OK);
    /* readers: no limit */
    CHECK_EQ_INT(shared(be_main, "rw", TOK_B, 0, 5000, &r1), BACKEND_OK);
    CHECK_EQ_INT(r1.limit, 0);
    CHECK_EQ_INT(shared(be_main, "rw", TOK_C, 0, 3000, &r2), BACKEND_OK);
    CHECK(r1.fence > x.fence && r2.fence > r1.fence);
    /* the writer waits for both; its hint is the first reader's TTL */
    CHECK_EQ_INT(acq(be_main, "rw", TOK_A, 5000, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 1000 && h.retry_ms <= 3000);
    CHECK_EQ_INT(rel(be_main, "rw", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "rw", TOK_A, 5000, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "rw", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "rw", TOK_A, 5000, &x), BACKEND_OK);
    CHECK(x.fence > r2.fence);
    CHECK_EQ_INT(rel(be_main, "rw", TOK_A), BACKEND_OK);
}

static void test_kinds_limit_mismatch_changes_nothing(void)
{
    struct lock_grant g, h;
    struct lock_info info;

    CHECK_EQ_INT(shared(be_main, "lim", TOK_A, 2, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "lim", TOK_B, 3, 5000, &h),
                 BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(shared(be_main, "lim", TOK_B, 0, 5000, &h),
                 BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(insp(be_main, "lim", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_INT(info.limit, 2);
    lock_info_clear(&info);
    CHECK_EQ_INT(shared(be_main, "lim", TOK_B, 2, 5000, &h), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "lim", TOK_C, 2, 5000, &h), BACKEND_HELD);
    /* at the limit, a mismatch is still a mismatch, not held */
    CHECK_EQ_INT(shared(be_main, "lim", TOK_C, 5, 5000, &h),
                 BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "lim", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "lim", TOK_B), BACKEND_OK);
    /* free again: the limit goes with the last holder */
    CHECK_EQ_INT(shared(be_main, "lim", TOK_C, 5, 5000, &h), BACKEND_OK);
    CHECK_EQ_INT(h.limit, 5);
    CHECK_EQ_INT(rel(be_main, "lim", TOK_C), BACKEND_OK);
}

static void test_kinds_reentry_counts_holds(void)
{
    struct lock_grant g, r, h;
    uint32_t left = 99;

    CHECK_EQ_INT(acq(be_main, "re", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "re", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_INT(r.fence, g.fence);
    CHECK_EQ_INT(r.ttl_ms, 5000);
    CHECK_EQ_INT(r.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(reenter(be_main, "re", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 3);
    CHECK_EQ_INT(ren(be_main, "re", TOK_A, 7000, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 3); /* a renew keeps the count */
    CHECK_EQ_INT(r.ttl_ms, 7000);
    CHECK_EQ_INT(reenter(be_main, "re", TOK_B, &h), BACKEND_MISMATCH);
    CHECK_EQ_INT(reenter(be_main, "re-free", TOK_B, &h), BACKEND_NOT_FOUND);
    /* one hold back at a time; no notice until the last */
    notes_reset();
    CHECK_EQ_INT(rel_holds(be_main, "re", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 2);
    CHECK_EQ_INT(acq(be_main, "re", TOK_B, 5000, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, "re", TOK_B, false, &left),
                 BACKEND_MISMATCH);
    CHECK_EQ_INT(rel_holds(be_main, "re", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 1);
    CHECK(!notes_heard("re", 0));
    CHECK_EQ_INT(rel_holds(be_main, "re", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK(notes_heard("re", 0));
    CHECK_EQ_INT(rel_holds(be_main, "re", TOK_A, false, &left),
                 BACKEND_NOT_FOUND);
    /* all at once */
    CHECK_EQ_INT(acq(be_main, "re", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "re", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "re", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "re", TOK_A, true, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(acq(be_main, "re", TOK_B, 5000, &h), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "re", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key = 're'"),
                 0);
}

static void test_kinds_reentry_of_a_shared_holder(void)
{
    struct lock_grant a, b, r;
    uint32_t left = 99;

    CHECK_EQ_INT(shared(be_main, "re-sh", TOK_A, 2, 5000, &a), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "re-sh", TOK_B, 2, 5000, &b), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "re-sh", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_INT(r.mode, LOCK_SHARED);
    CHECK_EQ_INT(r.limit, 2);
    CHECK_EQ_INT(r.fence, a.fence);
    CHECK_EQ_INT(rel_holds(be_main, "re-sh", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 1);
    CHECK_EQ_INT(shared(be_main, "re-sh", TOK_C, 2, 5000, &r), BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, "re-sh", TOK_A, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(shared(be_main, "re-sh", TOK_C, 2, 5000, &r), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "re-sh", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "re-sh", TOK_C), BACKEND_OK);
}

/* The cap, reached by setting the count in the store. */
static void test_kinds_reentry_cap(void)
{
    struct lock_grant g, r;
    struct lock_info info;

    CHECK_EQ_INT(acq(be_main, "cap", TOK_A, 5000, &g), BACKEND_OK);
    CHECK(root_sql("UPDATE lockd.lockd_locks_holders SET holds = 999999"
                   " WHERE lock_key = 'cap'") == 0);
    CHECK_EQ_INT(reenter(be_main, "cap", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(reenter(be_main, "cap", TOK_A, &r), BACKEND_HOLDS_MAX);
    CHECK_EQ_INT(insp(be_main, "cap", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holds, LOCK_HOLDS_MAX);
    lock_info_clear(&info);
    CHECK_EQ_INT(ren(be_main, "cap", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(rel(be_main, "cap", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(insp(be_main, "cap", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holds, LOCK_HOLDS_MAX - 1);
    lock_info_clear(&info);
    {
        uint32_t left;
        CHECK_EQ_INT(rel_holds(be_main, "cap", TOK_A, true, &left), BACKEND_OK);
        CHECK_EQ_INT(left, 0);
    }
}

static void test_kinds_idempotent_replay_and_conflict(void)
{
    struct lock_grant g, r;

    CHECK_EQ_INT(acq_kind(be_main, "idem", TOK_A, LOCK_EXCLUSIVE, 0, "k-1",
                          5000, NULL, &g),
                 BACKEND_OK);
    CHECK(!g.replay);
    /* the retry of the same acquire: the same grant, nothing renewed */
    check_sleep_ms(50);
    CHECK_EQ_INT(acq_kind(be_main, "idem", TOK_B, LOCK_EXCLUSIVE, 0, "k-1",
                          9000, NULL, &r),
                 BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, TOK_A);
    CHECK_EQ_INT(r.fence, g.fence);
    CHECK_EQ_INT(r.expires_at_ms, g.expires_at_ms);
    CHECK(r.ttl_ms >= 1 && r.ttl_ms < 5000);
    CHECK_EQ_INT(r.holds, 1);
    CHECK_EQ_INT(r.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(ren(be_main, "idem", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(
        acq_kind(be_main, "idem", TOK_B, LOCK_SHARED, 0, "k-1", 5000, NULL, &r),
        BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(acq_kind(be_main, "idem", TOK_B, LOCK_EXCLUSIVE, 0, "k-2",
                          5000, NULL, &r),
                 BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "idem", TOK_A), BACKEND_OK);
    /* released: the key names no grant any more */
    CHECK_EQ_INT(acq_kind(be_main, "idem", TOK_B, LOCK_EXCLUSIVE, 0, "k-1",
                          5000, NULL, &r),
                 BACKEND_OK);
    CHECK(!r.replay && r.fence > g.fence);
    CHECK_EQ_INT(rel(be_main, "idem", TOK_B), BACKEND_OK);

    /* shared: replayed before the limit is judged */
    CHECK_EQ_INT(acq_kind(be_main, "idem-sh", TOK_A, LOCK_SHARED, 1, "s-1",
                          5000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(acq_kind(be_main, "idem-sh", TOK_B, LOCK_SHARED, 1, "s-1",
                          5000, NULL, &r),
                 BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, TOK_A);
    CHECK_EQ_INT(r.limit, 1);
    CHECK_EQ_INT(r.mode, LOCK_SHARED);
    CHECK_EQ_INT(acq_kind(be_main, "idem-sh", TOK_B, LOCK_SHARED, 2, "s-1",
                          5000, NULL, &r),
                 BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(acq_kind(be_main, "idem-sh", TOK_B, LOCK_EXCLUSIVE, 0, "s-1",
                          5000, NULL, &r),
                 BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(rel(be_main, "idem-sh", TOK_A), BACKEND_OK);
}

static void test_kinds_inspect_fields_and_order(void)
{
    struct lock_grant a, b, c, x, r;
    struct lock_info info;
    char tok[40], key[] = "insp-many";

    CHECK_EQ_INT(acq_owner(be_main, "insp-x", TOK_A, "me", 5000, &x),
                 BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "insp-x", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(insp(be_main, "insp-x", &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(info.holds, 2);
    CHECK(info.has_owner && strcmp(info.owner, "me") == 0);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_INT(info.nholders, 1);
    CHECK(info.holders != NULL && info.holders[0].fence == x.fence &&
          info.holders[0].holds == 2);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel_holds(be_main, "insp-x", TOK_A, true, &a.holds),
                 BACKEND_OK);

    CHECK_EQ_INT(acq_kind(be_main, "insp-sh", TOK_A, LOCK_SHARED, 5, NULL, 3000,
                          NULL, &a),
                 BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "insp-sh", TOK_B, 5, 9000, &b), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "insp-sh", TOK_C, 5, 6000, &c), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "insp-sh", TOK_A, 4000, &r), BACKEND_OK);
    CHECK_EQ_INT(insp(be_main, "insp-sh", &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_SHARED);
    CHECK_EQ_INT(info.limit, 5);
    CHECK_EQ_INT(info.holder_count, 3);
    CHECK_EQ_INT(info.nholders, 3);
    CHECK_EQ_INT(info.fence, c.fence);                 /* the greatest */
    CHECK_EQ_INT(info.expires_at_ms, b.expires_at_ms); /* the last */
    CHECK(info.ttl_ms > 7000 && info.ttl_ms <= 9000);
    CHECK(!info.has_owner);
    CHECK(info.holders != NULL && info.holders[0].fence == a.fence &&
          info.holders[1].fence == b.fence && info.holders[2].fence == c.fence);
    CHECK(info.holders != NULL && info.holders[0].ttl_ms > 3000 &&
          info.holders[0].ttl_ms <= 4000 && info.holders[0].holds == 1);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be_main, "insp-sh", TOK_B), BACKEND_OK);
    /* the last expiry is now C's: the key's row followed */
    CHECK_EQ_INT(insp(be_main, "insp-sh", &info), BACKEND_OK);
    CHECK_EQ_INT(info.expires_at_ms, c.expires_at_ms);
    lock_info_clear(&info);
    CHECK_EQ_INT(root_sql("SELECT expires_at FROM lockd.lockd_locks"
                          " WHERE lock_key = 'insp-sh'"),
                 c.expires_at_ms);
    CHECK_EQ_INT(rel(be_main, "insp-sh", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "insp-sh", TOK_C), BACKEND_OK);

    /* more holders than are shown */
    for (int i = 0; i < 120; i++) {
        snprintf(tok, sizeof(tok), "%032x", (unsigned)i + 1);
        CHECK_EQ_INT(shared(be_main, key, tok, 0, 10000, &r), BACKEND_OK);
        if (i == 0)
            a = r;
    }
    CHECK_EQ_INT(insp(be_main, key, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 120);
    CHECK_EQ_INT(info.nholders, LOCK_HOLDERS_SHOWN);
    CHECK_EQ_INT(info.fence, r.fence);
    CHECK(info.holders != NULL && info.holders[0].fence == a.fence);
    for (uint32_t i = 1; info.holders != NULL && i < info.nholders; i++)
        CHECK(info.holders[i].fence > info.holders[i - 1].fence);
    lock_info_clear(&info);
    for (int i = 0; i < 120; i++) {
        snprintf(tok, sizeof(tok), "%032x", (unsigned)i + 1);
        CHECK_EQ_INT(rel(be_main, key, tok), BACKEND_OK);
    }
    CHECK_EQ_INT(insp(be_main, key, &info), BACKEND_NOT_FOUND);
    CHECK(info.holders == NULL);
}

static void test_kinds_holders_expire_one_by_one(void)
{
    struct lock_grant a, b, c, r;
    struct lock_info info;

    CHECK_EQ_INT(shared(be_main, "one-by-one", TOK_A, 2, 300, &a), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "one-by-one", TOK_B, 2, 5000, &b), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "one-by-one", TOK_C, 2, 5000, &c),
                 BACKEND_HELD);
    CHECK(c.retry_ms >= 1 && c.retry_ms <= 300);
    check_sleep_ms(c.retry_ms + 50);
    /* A's TTL passed, B's did not */
    CHECK_EQ_INT(shared(be_main, "one-by-one", TOK_C, 2, 5000, &c), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "one-by-one", TOK_A, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(ren(be_main, "one-by-one", TOK_B, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(insp(be_main, "one-by-one", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 2);
    CHECK(info.holders != NULL && info.holders[0].fence == b.fence);
    lock_info_clear(&info);
    /* the expired holder's row went with the grant that replaced it */
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks_holders"
                          " WHERE lock_key = 'one-by-one'"),
                 2);
    CHECK_EQ_INT(rel(be_main, "one-by-one", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "one-by-one", TOK_C), BACKEND_OK);
    /* the exclusive path after shared holders all expired */
    CHECK_EQ_INT(shared(be_main, "one-by-one", TOK_A, 0, 200, &a), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "one-by-one", TOK_B, 5000, &r), BACKEND_HELD);
    check_sleep_ms(r.retry_ms + 50);
    CHECK_EQ_INT(acq(be_main, "one-by-one", TOK_B, 5000, &r), BACKEND_OK);
    CHECK(r.fence > a.fence);
    CHECK_EQ_INT(rel(be_main, "one-by-one", TOK_B), BACKEND_OK);
}

static void test_kinds_release_of_a_shared_holder_notifies(void)
{
    struct lock_grant g;

    CHECK_EQ_INT(shared(be_main, "sh-note", TOK_A, 2, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "sh-note", TOK_B, 2, 5000, &g), BACKEND_OK);
    notes_reset();
    CHECK_EQ_INT(rel(be_main, "sh-note", TOK_C), BACKEND_MISMATCH);
    CHECK(!notes_heard("sh-note", 0));
    CHECK_EQ_INT(rel(be_main, "sh-note", TOK_A), BACKEND_OK);
    CHECK(notes_heard("sh-note", 0));
    CHECK_EQ_INT(rel(be_main, "sh-note", TOK_B), BACKEND_OK);
}

/* ---- several keys at once ---- */

/* A multi-key request over keys[0..n) (their lengths by strlen). */
struct mreq {
    size_t lens[LOCK_MULTI_MAX];
    struct lock_multi_req req;
};

static const struct lock_multi_req *mreq_make(struct mreq *m,
                                              const char *const *keys,
                                              size_t n,
                                              const char *tok,
                                              uint64_t ttl)
{
    for (size_t i = 0; i < n; i++)
        m->lens[i] = strlen(keys[i]);
    m->req = (struct lock_multi_req){
        .n = n, .keys = keys, .key_lens = m->lens, .token = tok, .ttl_ms = ttl
    };
    return &m->req;
}

static enum backend_result macq(struct backend *be,
                                const char *const *keys,
                                size_t n,
                                const char *tok,
                                uint64_t ttl,
                                struct lock_multi_grant *g)
{
    struct mreq m;

    return backend_acquire_multi(be, mreq_make(&m, keys, n, tok, ttl), g);
}

static enum backend_result mren(struct backend *be,
                                const char *const *keys,
                                size_t n,
                                const char *tok,
                                uint64_t ttl,
                                struct lock_multi_grant *g)
{
    struct mreq m;

    return backend_renew_multi(be, mreq_make(&m, keys, n, tok, ttl), g);
}

static enum backend_result mrel(struct backend *be,
                                const char *const *keys,
                                size_t n,
                                const char *tok,
                                struct lock_multi_grant *g)
{
    struct mreq m;

    return backend_release_multi(be, mreq_make(&m, keys, n, tok, 0), g);
}

/* Each key of a multi grant has the rows a single exclusive grant makes:
 * a key row (mode 0, no token) and one holder row (holds 1, owner, fence,
 * the key row's expiry), so the single-key calls work on it; fences come
 * from the one counter, after every earlier grant of the key. */
static void test_multi_grant_rows_are_single_grants(void)
{
    static const char *const keys[] = { "mg-b", "mg-a", "mg-c" };
    struct lock_grant g, r;
    struct lock_multi_grant mg;
    struct lock_info info;
    struct mreq m;
    const struct lock_multi_req *req;

    CHECK_EQ_INT(acq(be_main, "mg-a", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "mg-a", TOK_A), BACKEND_OK);
    req = mreq_make(&m, keys, 3, TOK_B, 8000);
    m.req.owner = "multi-owner";
    CHECK_EQ_INT(backend_acquire_multi(be_main, req, &mg), BACKEND_OK);
    CHECK(mg.fences[1] > g.fence);
    CHECK(mg.fences[0] != mg.fences[1] && mg.fences[1] != mg.fences[2] &&
          mg.fences[0] != mg.fences[2]);
    /* taken in key order: mg-a, mg-b, mg-c */
    CHECK(mg.fences[1] < mg.fences[0] && mg.fences[0] < mg.fences[2]);
    CHECK_EQ_INT(mg.ttl_ms, 8000);
    CHECK(mg.expires_at_ms > clock_wall_ms() + 6000);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks k"
                          " JOIN lockd.lockd_locks_holders h"
                          " ON h.lock_key = k.lock_key"
                          " WHERE k.lock_key LIKE 'mg-%' AND k.mode = 0"
                          " AND k.lim = 0 AND k.token = '' AND k.ttl_ms = 8000"
                          " AND h.token = '" TOK_B "' AND h.holds = 1"
                          " AND h.owner = 'multi-owner' AND h.idem IS NULL"
                          " AND h.ttl_ms = 8000"
                          " AND h.expires_at = k.expires_at"),
                 3);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks_holders"
                          " WHERE lock_key LIKE 'mg-%'"),
                 3);
    CHECK_EQ_INT(root_sql("SELECT MIN(expires_at) FROM lockd.lockd_locks"
                          " WHERE lock_key LIKE 'mg-%'"),
                 mg.expires_at_ms);
    /* each key is an ordinary exclusive lock */
    CHECK_EQ_INT(insp(be_main, "mg-c", &info), BACKEND_OK);
    CHECK_EQ_INT(info.fence, mg.fences[2]);
    CHECK(info.has_owner && strcmp(info.owner, "multi-owner") == 0);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    lock_info_clear(&info);
    CHECK_EQ_INT(acq(be_main, "mg-b", TOK_A, 5000, &g), BACKEND_HELD);
    CHECK_EQ_INT(reenter(be_main, "mg-b", TOK_B, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_INT(r.fence, mg.fences[0]);
    CHECK_EQ_INT(ren(be_main, "mg-a", TOK_B, 20000, &r), BACKEND_OK);
    CHECK_EQ_INT(r.fence, mg.fences[1]);
    CHECK_EQ_INT(rel(be_main, "mg-c", TOK_B), BACKEND_OK);
    /* the rest in one go: every hold of mg-b too */
    CHECK_EQ_INT(mrel(be_main, keys, 3, TOK_B, &mg), BACKEND_OK);
    CHECK(mg.released[0] && mg.released[1] && !mg.released[2]);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key LIKE 'mg-%'"),
                 0);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks_holders"
                          " WHERE lock_key LIKE 'mg-%'"),
                 0);
    CHECK_EQ_INT(mrel(be_main, keys, 3, TOK_B, &mg), BACKEND_NOT_FOUND);
}

/* HELD changes nothing: no key row made or taken over, no fence drawn;
 * held[] names every held key, the one found under its row lock and those
 * after it, and retry_ms is the first holder's TTL, a shared key's too. */
static void test_multi_held_changes_nothing(void)
{
    static const char *const keys[] = { "mh-4", "mh-1", "mh-2", "mh-3",
                                        "mh-5" };
    struct lock_grant f, g;
    struct lock_multi_grant mg;

    CHECK_EQ_INT(acq(be_main, "mh-2", TOK_A, 9000, &g), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "mh-4", TOK_A, 0, 60000, &g), BACKEND_OK);
    CHECK_EQ_INT(shared(be_main, "mh-4", TOK_B, 0, 4000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "mh-5", TOK_A, 50, &g), BACKEND_OK);
    check_sleep_ms(100); /* mh-5's row stays, expired */
    CHECK_EQ_INT(acq(be_main, "mh-f", TOK_A, 5000, &f), BACKEND_OK);
    CHECK_EQ_INT(macq(be_main, keys, 5, TOK_C, 5000, &mg), BACKEND_HELD);
    CHECK(mg.held[0] && !mg.held[1] && mg.held[2] && !mg.held[3] &&
          !mg.held[4]);
    CHECK(mg.retry_ms > 2500 && mg.retry_ms <= 4000);
    /* the counter did not move (a rolled-back draw would skip one) */
    CHECK_EQ_INT(acq(be_main, "mh-g", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.fence, f.fence + 1);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key IN ('mh-1', 'mh-3')"),
                 0);
    /* mh-5's expired row is left as it was (or reaped by the background
     * sweep, which may run meanwhile on a slow machine): never granted */
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key = 'mh-5' AND ttl_ms <> 50"),
                 0);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks_holders"
                          " WHERE token = '" TOK_C "'"),
                 0);
    /* the first key in key order held: the others are read, not locked */
    CHECK_EQ_INT(macq(be_main, keys + 1, 2, TOK_C, 5000, &mg), BACKEND_HELD);
    CHECK(!mg.held[0] && mg.held[1]);
    CHECK(mg.retry_ms > 7000 && mg.retry_ms <= 9000);
    CHECK_EQ_INT(rel(be_main, "mh-f", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "mh-g", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "mh-2", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "mh-4", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "mh-4", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(macq(be_main, keys, 5, TOK_C, 5000, &mg), BACKEND_OK);
    CHECK_EQ_INT(mrel(be_main, keys, 5, TOK_C, &mg), BACKEND_OK);
}

/* renew_multi renews all or none; the first key in request order not held
 * by the token is named, whatever the order the rows are locked in. */
static void test_multi_renew_all_or_nothing(void)
{
    static const char *const keys[] = { "mr-c", "mr-b", "mr-a" };
    struct lock_grant g;
    struct lock_multi_grant mg, rg;
    long long exp_a;

    CHECK_EQ_INT(macq(be_main, keys, 2, TOK_A, 5000, &mg), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "mr-a", TOK_B, 5000, &g), BACKEND_OK);
    exp_a = root_sql("SELECT expires_at FROM lockd.lockd_locks_holders"
                     " WHERE lock_key = 'mr-c'");
    /* mr-a (locked first) is another's, mr-b's holder is right */
    CHECK_EQ_INT(mren(be_main, keys, 3, TOK_A, 30000, &rg), BACKEND_MISMATCH);
    CHECK_EQ_INT(rg.bad, 2);
    CHECK_EQ_INT(root_sql("SELECT expires_at FROM lockd.lockd_locks_holders"
                          " WHERE lock_key = 'mr-c'"),
                 exp_a);
    CHECK_EQ_INT(rel(be_main, "mr-a", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(mren(be_main, keys, 3, TOK_A, 30000, &rg), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rg.bad, 2);
    CHECK_EQ_INT(mren(be_main, keys + 1, 2, TOK_B, 0, &rg), BACKEND_MISMATCH);
    CHECK_EQ_INT(rg.bad, 0);
    CHECK_EQ_INT(mren(be_main, keys, 2, TOK_A, 30000, &rg), BACKEND_OK);
    CHECK_EQ_INT(rg.fences[0], mg.fences[0]);
    CHECK_EQ_INT(rg.fences[1], mg.fences[1]);
    CHECK_EQ_INT(rg.ttl_ms, 30000);
    CHECK(rg.expires_at_ms > mg.expires_at_ms + 20000);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks k"
                          " JOIN lockd.lockd_locks_holders h"
                          " ON h.lock_key = k.lock_key"
                          " WHERE k.lock_key IN ('mr-b', 'mr-c')"
                          " AND h.expires_at = k.expires_at"
                          " AND h.ttl_ms = 30000"),
                 2);
    CHECK_EQ_INT(mren(be_main, keys, 2, TOK_A, 0, &rg), BACKEND_OK);
    CHECK_EQ_INT(rg.ttl_ms, 30000);
    CHECK_EQ_INT(mrel(be_main, keys, 2, TOK_A, &mg), BACKEND_OK);
}

/* release_multi writes one event per released key, in one transaction:
 * another instance hears of each. */
static void test_multi_release_notifies_other_instances(void)
{
    static const char *const keys[] = { "mn-1", "mn-2", "mn-3" };
    struct backend *other = open_be_hooked(url, NULL);
    struct lock_multi_grant mg;
    long long ev0;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    check_sleep_ms(200); /* be_main's watcher has read where events stand */
    CHECK_EQ_INT(macq(other, keys, 2, TOK_A, 5000, &mg), BACKEND_OK);
    ev0 = root_sql("SELECT v FROM lockd.lockd_locks_seq WHERE id = 2");
    notes_watch("mn-2", 4);
    CHECK_EQ_INT(mrel(other, keys, 3, TOK_A, &mg), BACKEND_OK);
    CHECK(mg.released[0] && mg.released[1] && !mg.released[2]);
    CHECK(notes_watched(2000) >= 1);
    CHECK_EQ_INT(root_sql("SELECT v FROM lockd.lockd_locks_seq WHERE id = 2"),
                 ev0 + 2);
    CHECK_EQ_INT(
        root_sql("SELECT COUNT(*) FROM lockd.lockd_locks_events"
                 " WHERE id > (SELECT v FROM lockd.lockd_locks_seq"
                 " WHERE id = 2) - 2 AND lock_key IN ('mn-1', 'mn-2')"),
        2);
    notes_watch("", 0);
    mysql_backend.close(other);
}

/* The most keys a request may name, some of the longest size: each call
 * one transaction well within the call timeout (2 s by default). */
static void test_multi_most_keys_in_time(void)
{
    static char names[LOCK_MULTI_MAX][LOCK_KEY_MAX + 1];
    const char *keys[LOCK_MULTI_MAX];
    struct lock_multi_grant mg;
    int64_t t0, took[3];

    for (int i = 0; i < LOCK_MULTI_MAX; i++) {
        if (i % 8 == 0) { /* 512 bytes, differing in the last one */
            memset(names[i], 'w', LOCK_KEY_MAX);
            names[i][LOCK_KEY_MAX - 1] = (char)('a' + i / 8);
            names[i][LOCK_KEY_MAX] = '\0';
        } else {
            snprintf(names[i], sizeof(names[i]), "most-%02d", i);
        }
        keys[i] = names[i];
    }
    CHECK_EQ_INT(mysql_backend.ping(be_main), BACKEND_OK); /* connected */
    t0 = check_mono_ms();
    CHECK_EQ_INT(macq(be_main, keys, LOCK_MULTI_MAX, TOK_A, 10000, &mg),
                 BACKEND_OK);
    took[0] = check_mono_ms() - t0;
    t0 = check_mono_ms();
    CHECK_EQ_INT(mren(be_main, keys, LOCK_MULTI_MAX, TOK_A, 20000, &mg),
                 BACKEND_OK);
    took[1] = check_mono_ms() - t0;
    t0 = check_mono_ms();
    CHECK_EQ_INT(mrel(be_main, keys, LOCK_MULTI_MAX, TOK_A, &mg), BACKEND_OK);
    took[2] = check_mono_ms() - t0;
    printf("  %d keys: acquire %lld ms, renew %lld ms, release %lld ms\n",
           LOCK_MULTI_MAX, (long long)took[0], (long long)took[1],
           (long long)took[2]);
    for (int i = 0; i < 3; i++)
        CHECK(took[i] < 1000);
    for (int i = 0; i < LOCK_MULTI_MAX; i++)
        CHECK(mg.released[i]);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key LIKE 'most-%' OR lock_key LIKE"
                          " 'wwww%'"),
                 0);
}

/* ---- the deadlock test: multi-key calls in opposite orders beside
 * single-key ones, on keys whose stripes cross ---- */

/* MySQL's CRC32() (zlib's), for the stripe of a key. */
static uint32_t crc32_of(const char *s)
{
    uint32_t c = 0xffffffffu;

    for (; *s != '\0'; s++) {
        c ^= (unsigned char)*s;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return ~c;
}

#define DL_KEYS    4
#define DL_THREADS 10
#define DL_MS      3000

struct dl {
    pthread_mutex_t mu;
    char keys[DL_KEYS][24]; /* ascending; stripes of 0 and 3, 1 and 2 equal */
    int excl[DL_KEYS], sh[DL_KEYS];
    int violations, errors, unavailable, multi_grants, single_grants, held;
};

struct dl_arg {
    struct dl *d;
    struct backend *be;
    int id;
};

/* Keys k0 < k1 < k2 < k3 with stripe(k0) == stripe(k3) and stripe(k1) ==
 * stripe(k2) != stripe(k0): a multi-key acquire of {k0, k1} against one of
 * {k2, k3} deadlocks if stripes are not all taken first. */
static void dl_pick_keys(struct dl *d)
{
    enum {
        N = 2000
    };
    static uint32_t st[N];

    for (int i = 0; i < N; i++) {
        char k[24];
        snprintf(k, sizeof(k), "dl-%04d", i); /* name order = i order */
        st[i] = crc32_of(k) % 128;
    }
    for (int a = 0; a < N; a++) {
        int z = a + 1;
        while (z < N && st[z] != st[a])
            z++;
        for (int b = a + 1; b < z; b++) {
            for (int c = b + 1; c < z; c++) {
                if (st[b] != st[c])
                    continue;
                snprintf(d->keys[0], sizeof(d->keys[0]), "dl-%04d", a);
                snprintf(d->keys[1], sizeof(d->keys[1]), "dl-%04d", b);
                snprintf(d->keys[2], sizeof(d->keys[2]), "dl-%04d", c);
                snprintf(d->keys[3], sizeof(d->keys[3]), "dl-%04d", z);
                return;
            }
        }
    }
}

/* Record the outcome of one call; true if it was OK. */
static bool dl_count(struct dl *d, enum backend_result r)
{
    if (r == BACKEND_OK)
        return true;
    pthread_mutex_lock(&d->mu);
    if (r == BACKEND_HELD)
        d->held++;
    else
        d->errors++;
    if (r == BACKEND_UNAVAILABLE)
        d->unavailable++;
    pthread_mutex_unlock(&d->mu);
    return false;
}

static void dl_enter(struct dl *d, const int *ks, int n, bool excl)
{
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < n; i++) {
        int k = ks[i];
        if (d->excl[k] != 0 || (excl && d->sh[k] != 0))
            d->violations++;
        if (excl)
            d->excl[k]++;
        else
            d->sh[k]++;
    }
    if (n > 1)
        d->multi_grants++;
    else
        d->single_grants++;
    pthread_mutex_unlock(&d->mu);
}

static void dl_leave(struct dl *d, const int *ks, int n, bool excl)
{
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < n; i++) {
        if (excl)
            d->excl[ks[i]]--;
        else
            d->sh[ks[i]]--;
    }
    pthread_mutex_unlock(&d->mu);
}

/* One multi-key round: 2 to 4 of the keys, in a random order; a renew
 * now and then; all released at once. A renew or release sometimes names
 * one more key, which the token does not hold (another's, or free). */
static void dl_multi(struct dl_arg *a, const char *tok, unsigned *seed)
{
    struct dl *d = a->d;
    static const int sets[][DL_KEYS + 1] = {
        { 0, 1, -1 },       { 2, 3, -1 },       { 3, 2, -1 },
        { 1, 0, -1 },       { 3, 0, -1 },       { 1, 2, -1 },
        { 0, 1, 2, 3, -1 }, { 3, 2, 1, 0, -1 }, { 2, 0, 3, 1, -1 },
        { 3, 1, -1 },       { 0, 2, -1 },
    };
    const int *set = sets[rand_r(seed) % (sizeof(sets) / sizeof(sets[0]))];
    const char *keys[DL_KEYS];
    struct lock_multi_grant mg;
    enum backend_result r;
    size_t n = 0, more;

    while (set[n] >= 0) {
        keys[n] = d->keys[set[n]];
        n++;
    }
    if (!dl_count(d, macq(a->be, keys, n, tok, 10000, &mg)))
        return;
    dl_enter(d, set, (int)n, true);
    more = n;
    if (n < DL_KEYS && rand_r(seed) % 2 == 0) { /* a key it does not hold */
        for (int k = 0; k < DL_KEYS && more == n; k++) {
            bool in = false;
            for (size_t i = 0; i < n; i++)
                in = in || set[i] == k;
            if (!in)
                keys[more++] = d->keys[k];
        }
    }
    if (rand_r(seed) % 2 == 0) {
        r = mren(a->be, keys, more, tok, 0, &mg);
        if (more > n && (r == BACKEND_NOT_FOUND || r == BACKEND_MISMATCH))
            r = mg.bad == n ? BACKEND_OK : BACKEND_INVALID;
        (void)dl_count(d, r);
    }
    dl_leave(d, set, (int)n, true); /* before the release: never late */
    r = mrel(a->be, keys, more, tok, &mg);
    for (size_t i = 0; r == BACKEND_OK && i < more; i++)
        if (mg.released[i] != (i < n))
            r = BACKEND_INVALID;
    (void)dl_count(d, r);
}

/* One single-key round: exclusive or shared, a renew now and then. */
static void dl_single(struct dl_arg *a, const char *tok, unsigned *seed)
{
    struct dl *d = a->d;
    int k = (int)(rand_r(seed) % DL_KEYS);
    bool excl = rand_r(seed) % 3 != 0;
    struct lock_grant g;
    uint32_t left;

    if (!dl_count(d, excl ? acq(a->be, d->keys[k], tok, 10000, &g)
                          : shared(a->be, d->keys[k], tok, 2, 10000, &g)))
        return;
    dl_enter(d, &k, 1, excl);
    if (rand_r(seed) % 2 == 0)
        (void)dl_count(d, ren(a->be, d->keys[k], tok, 0, &g));
    dl_leave(d, &k, 1, excl);
    (void)dl_count(d, rel_holds(a->be, d->keys[k], tok, true, &left));
}

static void *dl_thread(void *arg)
{
    struct dl_arg *a = arg;
    unsigned seed = (unsigned)a->id * 104729u + 7;
    char tok[40];
    int64_t end = check_mono_ms() + DL_MS;

    for (int round = 0; check_mono_ms() < end; round++) {
        /* a fresh token per grant, as lockd makes them */
        snprintf(tok, sizeof(tok), "%08x%024x", (unsigned)a->id + 0x200,
                 (unsigned)round);
        if (a->id % 2 == 0)
            dl_multi(a, tok, &seed);
        else
            dl_single(a, tok, &seed);
    }
    return NULL;
}

/* Multi-key acquires on overlapping key sets in opposite orders (and on
 * keys whose stripes cross), with renews and releases, beside single-key
 * acquires of both modes, renews and releases of the same keys, through
 * two instances: InnoDB deadlocks rare (each is retried; three in a row
 * would end as UNAVAILABLE), no error, and never two holders where one may be.
 */
static void test_multi_no_deadlock_under_contention(void)
{
    struct backend *other = open_be(url);
    struct dl d = { .mu = PTHREAD_MUTEX_INITIALIZER };
    struct dl_arg args[DL_THREADS];
    pthread_t t[DL_THREADS];
    int started = 0;
    long long dl0, dl1;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    dl_pick_keys(&d);
    CHECK(d.keys[1][0] != '\0');
    printf("  keys %s %s %s %s, stripes %u %u %u %u\n", d.keys[0], d.keys[1],
           d.keys[2], d.keys[3], 128 + crc32_of(d.keys[0]) % 128,
           128 + crc32_of(d.keys[1]) % 128, 128 + crc32_of(d.keys[2]) % 128,
           128 + crc32_of(d.keys[3]) % 128);
    dl0 = innodb_deadlocks();
    for (int i = 0; i < DL_THREADS; i++) {
        args[i] = (struct dl_arg){ &d, i % 4 < 2 ? be_main : other, i };
        if (pthread_create(&t[i], NULL, dl_thread, &args[i]) != 0)
            break;
        started++;
    }
    CHECK_EQ_INT(started, DL_THREADS);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    dl1 = innodb_deadlocks();
    printf("  %d multi-key and %d single-key grants, %d held, %d errors "
           "(%d unavailable) in %d ms on %d threads; %lld deadlocks\n",
           d.multi_grants, d.single_grants, d.held, d.errors, d.unavailable,
           DL_MS, DL_THREADS, dl1 - dl0);
    CHECK_EQ_INT(d.violations, 0);
    CHECK_EQ_INT(d.unavailable, 0);
    CHECK_EQ_INT(d.errors, 0);
    CHECK(deadlocks_rare(dl0, dl1, d.multi_grants + d.single_grants));
    CHECK(d.multi_grants > 10 && d.single_grants > 10);
    for (int k = 0; k < DL_KEYS; k++) {
        struct lock_info info;
        CHECK_EQ_INT(insp(be_main, d.keys[k], &info), BACKEND_NOT_FOUND);
    }
    mysql_backend.close(other);
}

/* A root transaction holding key's row for ms, then committing. */
struct row_holder {
    const char *key;
    int ms;
    _Atomic int rc; /* 0 once it held the row (read while it runs) */
};

static void *row_holder_thread(void *arg)
{
    struct row_holder *h = arg;
    MYSQL *db = testsrv_mariadb_root(&srv);
    char sql[200];

    h->rc = -1;
    if (db == NULL)
        return NULL;
    snprintf(sql, sizeof(sql),
             "SELECT 1 FROM lockd.lockd_locks WHERE lock_key = '%s'"
             " FOR UPDATE",
             h->key);
    if (mysql_query(db, "BEGIN") == 0 && mysql_query(db, sql) == 0) {
        MYSQL_RES *r = mysql_store_result(db);
        if (r != NULL)
            mysql_free_result(r);
        h->rc = 0;
        check_sleep_ms(h->ms);
        (void)mysql_query(db, "COMMIT");
    }
    mysql_close(db);
    return NULL;
}

/* A multi-key call that meets one slow row lock after another, none of
 * them long enough to time out, gives up (rolled back, UNAVAILABLE) once
 * its time (the URL's timeouts) is up, instead of running past it. */
static void test_multi_gives_up_when_out_of_time(void)
{
    static const char *const keys[] = { "mt-1", "mt-2", "mt-3", "mt-4" };
    struct row_holder h1 = { "mt-2", 700, -1 }, h2 = { "mt-3", 1400, -1 };
    pthread_t t1, t2;
    struct lock_multi_grant mg;
    struct backend *be;
    char u[400];
    int64_t t0, took;

    snprintf(u, sizeof(u), "%s?read_timeout_ms=1000&write_timeout_ms=1000",
             url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(mysql_backend.ping(be), BACKEND_OK); /* the tables exist */
    /* free rows to hold (as a release by an older lockd leaves them) */
    CHECK(root_sql("INSERT INTO lockd.lockd_locks (lock_key, token, fence,"
                   " ttl_ms, expires_at) VALUES ('mt-2', '', 0, 0, 0),"
                   " ('mt-3', '', 0, 0, 0)") == 0);
    CHECK(pthread_create(&t1, NULL, row_holder_thread, &h1) == 0);
    CHECK(pthread_create(&t2, NULL, row_holder_thread, &h2) == 0);
    check_sleep_ms(150);
    CHECK(h1.rc == 0 && h2.rc == 0);
    t0 = check_mono_ms();
    CHECK_EQ_INT(macq(be, keys, 4, TOK_A, 10000, &mg), BACKEND_UNAVAILABLE);
    took = check_mono_ms() - t0;
    printf("  gave up after %lld ms\n", (long long)took);
    CHECK(took >= 1000 && took < 2000);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks_holders"
                          " WHERE lock_key LIKE 'mt-%'"),
                 0);
    CHECK_EQ_INT(macq(be, keys, 4, TOK_A, 10000, &mg), BACKEND_OK);
    CHECK_EQ_INT(mrel(be, keys, 4, TOK_A, &mg), BACKEND_OK);
    mysql_backend.close(be);
}

/* A stopped server: UNAVAILABLE in time, and no key was granted. */
static void test_multi_stopped_mysql_answers_unavailable(void)
{
    static const char *const keys[] = { "ms-2", "ms-1" };
    struct lock_multi_grant mg;
    struct lock_grant g;
    struct backend *be;
    char u[400];
    int64_t t0, took;

    snprintf(u, sizeof(u),
             "%s?connect_timeout_ms=1000&read_timeout_ms=1000"
             "&write_timeout_ms=1000",
             url);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(macq(be, keys, 2, TOK_A, 60000, &mg), BACKEND_OK);
    testsrv_signal(&srv, SIGSTOP);
    t0 = check_mono_ms();
    CHECK_EQ_INT(macq(be, keys, 2, TOK_B, 60000, &mg), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(mren(be, keys, 2, TOK_A, 0, &mg), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(mrel(be, keys, 2, TOK_A, &mg), BACKEND_UNAVAILABLE);
    took = check_mono_ms() - t0;
    printf("  three calls on a stopped server: %lld ms\n", (long long)took);
    CHECK(took < 3 * 3500);
    testsrv_signal(&srv, SIGCONT);
    for (int i = 0; i < 40; i++) {
        if (mysql_backend.ping(be) == BACKEND_OK)
            break;
        check_sleep_ms(100);
    }
    CHECK_EQ_INT(acq(be, "ms-1", TOK_C, 5000, &g), BACKEND_HELD);
    CHECK_EQ_INT(mrel(be, keys, 2, TOK_A, &mg), BACKEND_OK);
    CHECK(mg.released[0] && mg.released[1]);
    mysql_backend.close(be);
}

/* ---- list() and force_release() ---- */

/* One page of list(): the wrapper's checks, then the adapter. */
static enum backend_result list_page(struct backend *be,
                                     const char *prefix,
                                     size_t prefix_len,
                                     const char *after,
                                     size_t after_len,
                                     uint32_t limit,
                                     struct lock_entry *entries,
                                     struct lock_list *out)
{
    struct lock_list_req req = { .prefix = prefix,
                                 .prefix_len = prefix_len,
                                 .after = after,
                                 .after_len = after_len,
                                 .limit = limit };

    memset(out, 0, sizeof(*out));
    out->entries = entries;
    return backend_list(be, &req, out);
}

/* Byte order, as the contract has it: memcmp, then the shorter first. */
static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    return c != 0 ? c : alen < blen ? -1 : alen > blen ? 1 : 0;
}

/* Page through prefix with limit; every key seen is counted in seen[] by
 * its index in keys[] (-1: a key not in keys[], counted in *strays);
 * fails on a key out of order. The pages it took. */
static int list_all(struct backend *be,
                    const char *prefix,
                    uint32_t limit,
                    const char *const *keys,
                    size_t nkeys,
                    int *seen,
                    int *strays)
{
    struct lock_entry *entries = calloc(limit, sizeof(*entries));
    struct lock_list out;
    char after[LOCK_KEY_MAX + 1], last[LOCK_KEY_MAX + 1];
    size_t after_len = 0, last_len = 0;
    int pages = 0;

    *strays = 0;
    if (entries == NULL)
        return 0;
    for (; pages < 1000; pages++) {
        enum backend_result r =
            list_page(be, prefix, strlen(prefix), pages ? after : NULL,
                      after_len, limit, entries, &out);
        CHECK_EQ_INT(r, BACKEND_OK);
        if (r != BACKEND_OK)
            break;
        CHECK(out.n <= limit);
        for (size_t i = 0; i < out.n; i++) {
            const struct lock_entry *e = &entries[i];
            size_t j = 0;
            CHECK_MSG(last_len == 0 ||
                          key_cmp(last, last_len, e->key, e->key_len) < 0,
                      "key %s after %s", e->key, last);
            CHECK(e->key_len == strlen(e->key) &&
                  memcmp(e->key, prefix, strlen(prefix)) == 0);
            memcpy(last, e->key, e->key_len + 1);
            last_len = e->key_len;
            while (j < nkeys && strcmp(keys[j], e->key) != 0)
                j++;
            if (j < nkeys)
                seen[j]++;
            else
                (*strays)++;
        }
        if (!out.more) {
            free(entries);
            return pages + 1;
        }
        CHECK(out.resume_len > 0);
        if (out.n == limit)
            CHECK(out.resume_len == entries[out.n - 1].key_len &&
                  memcmp(out.resume, entries[out.n - 1].key, out.resume_len) ==
                      0);
        memcpy(after, out.resume, out.resume_len + 1);
        after_len = out.resume_len;
    }
    free(entries);
    CHECK_MSG(false, "list never ended");
    return pages;
}

static void test_list_pages_each_held_key_once(void)
{
    enum {
        N = 250
    };
    static char names[N][16];
    const char *keys[N];
    uint64_t fences[N];
    int seen[N] = { 0 }, strays = 0, pages;
    struct lock_grant g;
    struct lock_entry e[8];
    struct lock_list out;

    for (int i = 0; i < N; i++) {
        /* written out of order: the store sorts */
        snprintf(names[i], sizeof(names[i]), "lst/%03d", (i * 37) % N);
        keys[i] = names[i];
        CHECK_EQ_INT(acq_owner(be_main, keys[i], TOK_A,
                               i % 2 ? "owner-odd" : NULL, 30000, &g),
                     BACKEND_OK);
        fences[i] = g.fence;
    }
    /* beside the prefix, not in it */
    CHECK_EQ_INT(acq(be_main, "lst", TOK_A, 30000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "lst0", TOK_A, 30000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "lss/1", TOK_A, 30000, &g), BACKEND_OK);

    pages = list_all(be_main, "lst/", 7, keys, N, seen, &strays);
    printf("  250 held keys in %d pages of 7\n", pages);
    CHECK_EQ_INT(pages, (N + 6) / 7);
    CHECK_EQ_INT(strays, 0);
    for (int i = 0; i < N; i++)
        CHECK_MSG(seen[i] == 1, "%s seen %d times", keys[i], seen[i]);

    /* the fields of one entry: inspect()'s summary */
    CHECK_EQ_INT(list_page(be_main, "lst/", 4, "lst/000", 7, 2, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 2);
    CHECK(out.more);
    CHECK(strcmp(e[0].key, "lst/001") == 0 && strcmp(e[1].key, "lst/002") == 0);
    for (int i = 0; i < N; i++)
        if (strcmp(keys[i], "lst/001") == 0) {
            CHECK_EQ_INT(e[0].fence, fences[i]);
            CHECK(e[0].has_owner == (i % 2 == 1));
            if (i % 2 == 1)
                CHECK(strcmp(e[0].owner, "owner-odd") == 0);
        }
    CHECK_EQ_INT(e[0].mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(e[0].holder_count, 1);
    CHECK(e[0].ttl_ms > 20000 && e[0].ttl_ms <= 30000);
    CHECK(e[0].expires_at_ms > clock_wall_ms() + 20000);
    /* the last page: no more */
    CHECK_EQ_INT(list_page(be_main, "lst/", 4, "lst/247", 7, 7, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 2);
    CHECK(!out.more);
    CHECK_EQ_INT(list_page(be_main, "lst/", 4, "lst/249", 7, 7, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK(!out.more);
    /* a page exactly full at the end of the range says no more */
    CHECK_EQ_INT(list_page(be_main, "lst/", 4, "lst/242", 7, 7, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 7);
    CHECK(!out.more);

    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(rel(be_main, keys[i], TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "lst", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "lst0", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "lss/1", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(list_page(be_main, "lst/", 4, NULL, 0, 7, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
}

/* Expired holders are not listed; key rows whose holders all expired (the
 * reaper's, kept here by a root transaction that locks them) count against
 * the budget, so a page may end early, empty, with more set. */
static void test_list_budget_stops_on_expired_rows(void)
{
    enum {
        DEAD = 60
    };
    const char *live[] = { "lbud/z1", "lbud/z2" };
    int seen[2] = { 0 }, strays = 0, pages;
    char key[32];
    struct lock_grant g;
    struct lock_entry e[4];
    struct lock_list out;
    MYSQL *root = testsrv_mariadb_root(&srv);

    CHECK(root != NULL);
    if (root == NULL)
        return;
    for (int i = 0; i < DEAD; i++) {
        snprintf(key, sizeof(key), "lbud/a%02d", i);
        CHECK_EQ_INT(acq(be_main, key, TOK_A, 1500, &g), BACKEND_OK);
    }
    CHECK_EQ_INT(shared(be_main, "lbud/s", TOK_A, 0, 1500, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, live[0], TOK_A, 30000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, live[1], TOK_A, 30000, &g), BACKEND_OK);
    /* the reaper waits for these rows (and gives up) until ROLLBACK */
    CHECK(mysql_query(root, "SET SESSION TRANSACTION ISOLATION LEVEL"
                            " READ COMMITTED") == 0);
    CHECK(mysql_query(root, "BEGIN") == 0);
    CHECK(mysql_query(root, "SELECT COUNT(*) FROM lockd.lockd_locks"
                            " WHERE lock_key >= 'lbud/a'"
                            " AND lock_key < 'lbud/t' FOR UPDATE") == 0);
    mysql_free_result(mysql_store_result(root));
    check_sleep_ms(1600);

    /* budget of limit 1: 18 rows, all expired */
    CHECK_EQ_INT(list_page(be_main, "lbud/", 5, NULL, 0, 1, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK(out.more);
    CHECK(strcmp(out.resume, "lbud/a17") == 0);
    pages = list_all(be_main, "lbud/", 1, live, 2, seen, &strays);
    printf("  2 held keys behind %d expired rows: %d pages of 1\n", DEAD + 1,
           pages);
    CHECK(seen[0] == 1 && seen[1] == 1 && strays == 0);
    /* 18 rows a page: a00-a17, a18-a35, a36-a53 (empty), a54-z1 (z2 is
       seen beyond the full page), z2 */
    CHECK_EQ_INT(pages, 5);
    /* a larger limit looks further */
    CHECK_EQ_INT(list_page(be_main, "lbud/", 5, NULL, 0, 4, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK(out.more && strcmp(out.resume, "lbud/a23") == 0);
    CHECK_EQ_INT(list_page(be_main, "lbud/", 5, "lbud/a50", 8, 4, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 2);
    CHECK(!out.more);
    mysql_query(root, "ROLLBACK");
    mysql_close(root);
    CHECK_EQ_INT(rel(be_main, live[0], TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, live[1], TOK_A), BACKEND_OK);
}

static void test_list_bytes_prefixes_and_shared_keys(void)
{
    /* sorted by bytes: ' ' < '!' < 'a' < 0xc3 < 0xe2 < 0xf0 */
    static const char *const keys[] = {
        "lby/a",
        "lby/a ",
        "lby/a!",
        "lby/ab",
        "lby/s",
        "lby/\xc3\xa9",         /* é */
        "lby/\xc3\xb6",         /* ö */
        "lby/\xe2\x82\xac",     /* € */
        "lby/\xf0\x9f\x94\x92", /* a lock */
    };
    const size_t n = sizeof(keys) / sizeof(keys[0]);
    const char *toks[] = { TOK_A, TOK_B, "cccccccccccccccccccccccccccccccc" };
    uint64_t sh_fence = 0;
    struct lock_grant g;
    struct lock_entry e[16];
    struct lock_list out;

    for (size_t i = n; i-- > 0;) {
        if (strcmp(keys[i], "lby/s") != 0) {
            CHECK_EQ_INT(acq_owner(be_main, keys[i], TOK_A, "o", 30000, &g),
                         BACKEND_OK);
            continue;
        }
        for (int t = 0; t < 3; t++) {
            CHECK_EQ_INT(shared(be_main, keys[i], toks[t], 5, 30000, &g),
                         BACKEND_OK);
            sh_fence = g.fence;
        }
    }
    CHECK_EQ_INT(list_page(be_main, "lby/", 4, NULL, 0, 16, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, n);
    CHECK(!out.more);
    for (size_t i = 0; i < out.n && i < n; i++) {
        CHECK_MSG(e[i].key_len == strlen(keys[i]) &&
                      memcmp(e[i].key, keys[i], e[i].key_len) == 0,
                  "entry %zu is %s, not %s", i, e[i].key, keys[i]);
        if (i > 0)
            CHECK(key_cmp(keys[i - 1], strlen(keys[i - 1]), keys[i],
                          strlen(keys[i])) < 0);
    }
    /* the shared key: three holders, the greatest fence, no owner */
    CHECK_EQ_INT(e[4].mode, LOCK_SHARED);
    CHECK_EQ_INT(e[4].holder_count, 3);
    CHECK_EQ_INT(e[4].fence, sh_fence);
    CHECK(!e[4].has_owner);
    CHECK(e[0].has_owner && strcmp(e[0].owner, "o") == 0);
    /* a trailing space is a byte like any other */
    CHECK_EQ_INT(list_page(be_main, "lby/", 4, "lby/a", 5, 1, e, &out),
                 BACKEND_OK);
    CHECK(out.n == 1 && strcmp(e[0].key, "lby/a ") == 0 && out.more);
    /* prefixes of raw bytes: half a character, 0xff, "a " */
    CHECK_EQ_INT(list_page(be_main, "lby/\xc3", 5, NULL, 0, 16, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 2);
    CHECK(out.n == 2 && strcmp(e[0].key, keys[5]) == 0 &&
          strcmp(e[1].key, keys[6]) == 0);
    CHECK_EQ_INT(list_page(be_main, "lby/\xc3\xff", 6, NULL, 0, 16, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK_EQ_INT(list_page(be_main, "lby\xff", 4, NULL, 0, 16, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0);
    CHECK_EQ_INT(list_page(be_main, "lby/\xf0", 5, NULL, 0, 16, e, &out),
                 BACKEND_OK);
    CHECK(out.n == 1 && strcmp(e[0].key, keys[8]) == 0);
    CHECK_EQ_INT(list_page(be_main, "lby/a ", 6, NULL, 0, 16, e, &out),
                 BACKEND_OK);
    CHECK(out.n == 1 && strcmp(e[0].key, "lby/a ") == 0);
    CHECK_EQ_INT(list_page(be_main, "lby/%", 5, NULL, 0, 16, e, &out),
                 BACKEND_OK);
    CHECK_EQ_INT(out.n, 0); /* never LIKE */
    /* the empty prefix, from a cursor: these keys in order */
    CHECK_EQ_INT(list_page(be_main, "", 0, "lby/", 4, 3, e, &out), BACKEND_OK);
    CHECK(out.n == 3 && strcmp(e[0].key, "lby/a") == 0 &&
          strcmp(e[2].key, "lby/a!") == 0 && out.more);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(keys[i], "lby/s") != 0) {
            CHECK_EQ_INT(rel(be_main, keys[i], TOK_A), BACKEND_OK);
            continue;
        }
        for (int t = 0; t < 3; t++)
            CHECK_EQ_INT(rel(be_main, keys[i], toks[t]), BACKEND_OK);
    }
}

static enum backend_result
force(struct backend *be, const char *key, struct lock_info *info)
{
    return backend_force_release(be, key, strlen(key), info);
}

static void test_force_release_exclusive_with_reentries(void)
{
    struct lock_grant g, h, r;
    struct lock_info info;

    CHECK_EQ_INT(acq_kind(be_main, "frx", TOK_A, LOCK_EXCLUSIVE, 0, "idem-frx",
                          30000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "frx", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "frx", TOK_A, &r), BACKEND_OK);
    notes_reset();
    CHECK_EQ_INT(force(be_main, "frx", &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_INT(info.nholders, 1);
    CHECK_EQ_INT(info.fence, g.fence);
    CHECK_EQ_INT(info.holds, 3);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    CHECK(info.holders != NULL && info.holders[0].fence == g.fence);
    lock_info_clear(&info);
    CHECK(notes_heard("frx", 0)); /* this instance's waiters, at once */
    /* every hold is gone, and the token with them */
    CHECK_EQ_INT(insp(be_main, "frx", &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(ren(be_main, "frx", TOK_A, 0, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be_main, "frx", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(force(be_main, "frx", &info), BACKEND_NOT_FOUND);
    /* the Idempotency-Key went too: a new grant, a greater fence */
    CHECK_EQ_INT(acq_kind(be_main, "frx", TOK_B, LOCK_EXCLUSIVE, 0, "idem-frx",
                          30000, NULL, &h),
                 BACKEND_OK);
    CHECK(!h.replay);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(ren(be_main, "frx", TOK_A, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks_holders"
                          " WHERE lock_key = 'frx'"),
                 1);
    CHECK_EQ_INT(rel(be_main, "frx", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(root_sql("SELECT COUNT(*) FROM lockd.lockd_locks"
                          " WHERE lock_key = 'frx'"),
                 0);
}

static void test_force_release_shared_and_free_keys(void)
{
    const char *toks[] = { TOK_A, TOK_B, "cccccccccccccccccccccccccccccccc" };
    uint64_t fences[3];
    struct lock_grant g;
    struct lock_info info;

    for (int t = 0; t < 3; t++) {
        CHECK_EQ_INT(shared(be_main, "frs", toks[t], 3, 30000 - t * 1000, &g),
                     BACKEND_OK);
        fences[t] = g.fence;
    }
    CHECK_EQ_INT(force(be_main, "frs", &info), BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_SHARED);
    CHECK_EQ_INT(info.limit, 3);
    CHECK_EQ_INT(info.holder_count, 3);
    CHECK_EQ_INT(info.nholders, 3);
    CHECK_EQ_INT(info.fence, fences[2]);
    CHECK(info.ttl_ms > 25000); /* the holder that expires last */
    for (uint32_t i = 0; i < info.nholders && i < 3; i++)
        CHECK_EQ_INT(info.holders[i].fence, fences[i]);
    lock_info_clear(&info);
    for (int t = 0; t < 3; t++)
        CHECK_EQ_INT(rel(be_main, "frs", toks[t]), BACKEND_NOT_FOUND);
    /* the limit went with the holders */
    CHECK_EQ_INT(shared(be_main, "frs", TOK_A, 7, 30000, &g), BACKEND_OK);
    CHECK(g.fence > fences[2]);
    CHECK_EQ_INT(rel(be_main, "frs", TOK_A), BACKEND_OK);

    /* free, never held, expired */
    CHECK_EQ_INT(force(be_main, "frs", &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(force(be_main, "fr-never", &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq(be_main, "fr-exp", TOK_A, 100, &g), BACKEND_OK);
    check_sleep_ms(200);
    CHECK_EQ_INT(force(be_main, "fr-exp", &info), BACKEND_NOT_FOUND);
    CHECK(info.holders == NULL && info.holder_count == 0);
}

/* Notes of the instance opened with &waiter_tag, for one key. */
static int waiter_tag;
static atomic_int waiter_hits;
static const char *waiter_key;

static void on_waiter_notify(void *arg, const char *key, size_t len)
{
    if (arg == &waiter_tag && waiter_key != NULL && len == strlen(waiter_key) &&
        memcmp(key, waiter_key, len) == 0)
        atomic_fetch_add(&waiter_hits, 1);
}

static void test_force_release_wakes_another_instance(void)
{
    static const char key[] = "fr-wait \xc3\xa9";
    struct backend *waiter = be_open(url, on_waiter_notify, &waiter_tag);
    struct lock_grant g, h;
    struct lock_info info;
    int64_t t0, heard = -1, granted = -1;

    CHECK(waiter != NULL);
    if (waiter == NULL)
        return;
    waiter_key = key;
    atomic_store(&waiter_hits, 0);
    check_sleep_ms(200); /* its watcher has read where the events stand */
    CHECK_EQ_INT(acq(be_main, key, TOK_A, 30000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(waiter, key, TOK_B, 30000, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 20000); /* no help from the retry hint */
    t0 = check_mono_ms();
    CHECK_EQ_INT(force(be_main, key, &info), BACKEND_OK);
    lock_info_clear(&info);
    while (check_mono_ms() - t0 < 3000 && atomic_load(&waiter_hits) == 0)
        check_sleep_ms(5);
    if (atomic_load(&waiter_hits) > 0) {
        heard = check_mono_ms() - t0;
        CHECK_EQ_INT(acq(waiter, key, TOK_B, 30000, &h), BACKEND_OK);
        granted = check_mono_ms() - t0;
        CHECK(h.fence > g.fence);
    }
    printf("  a forced release woke another instance after %lld ms, "
           "granted after %lld ms\n",
           (long long)heard, (long long)granted);
    CHECK(heard >= 0 && heard < 1000);
    CHECK(granted >= 0 && granted < 1500);
    CHECK_EQ_INT(rel(waiter, key, TOK_B), BACKEND_OK);
    waiter_key = NULL;
    mysql_backend.close(waiter);
}

/* Holders of key whose TTL had passed: their rows' expiry moved back a
 * minute (tok NULL: every holder, and the key's row). */
static void expire_now(const char *key, const char *tok)
{
    char sql[300];

    if (tok == NULL)
        CHECK_EQ_INT(root_sql((snprintf(sql, sizeof(sql),
                                        "UPDATE lockd.lockd_locks SET"
                                        " expires_at = expires_at - 60000"
                                        " WHERE lock_key = '%s'",
                                        key),
                               sql)),
                     0);
    snprintf(sql, sizeof(sql),
             "UPDATE lockd.lockd_locks_holders SET expires_at ="
             " expires_at - 60000 WHERE lock_key = '%s'%s%s%s",
             key, tok ? " AND token = '" : "", tok ? tok : "", tok ? "'" : "");
    CHECK_EQ_INT(root_sql(sql), 0);
}

/* The reaper (every second) may delete an expired holder first, and then
 * there is no takeover to report: up to three tries, each well inside a
 * second, must see it once; none may report a wrong fence. */
static void test_acquire_reports_the_expired_fence(void)
{
    struct lock_grant g, h, s1, s2;
    int exact = 0;

    CHECK_EQ_INT(acq(be_main, "exf", TOK_A, 30000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.expired_fence, 0); /* a free key */
    CHECK_EQ_INT(rel(be_main, "exf", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "exf", TOK_A, 30000, &g), BACKEND_OK);
    CHECK_EQ_INT(g.expired_fence, 0); /* released, not expired */
    for (int i = 0; i < 3 && exact == 0; i++) {
        expire_now("exf", NULL);
        CHECK_EQ_INT(acq(be_main, "exf", TOK_B, 30000, &h), BACKEND_OK);
        CHECK(h.expired_fence == 0 || h.expired_fence == g.fence);
        exact += h.expired_fence == g.fence;
        g = h;
        CHECK_EQ_INT(rel(be_main, "exf", TOK_B), BACKEND_OK);
        CHECK_EQ_INT(acq(be_main, "exf", TOK_B, 30000, &g), BACKEND_OK);
        CHECK_EQ_INT(rel(be_main, "exf", TOK_B), BACKEND_OK);
        CHECK_EQ_INT(acq(be_main, "exf", TOK_A, 30000, &g), BACKEND_OK);
    }
    CHECK_EQ_INT(exact, 1);
    CHECK_EQ_INT(rel(be_main, "exf", TOK_A), BACKEND_OK);

    /* shared: an expired holder beside a live one is reaped by the grant */
    exact = 0;
    for (int i = 0; i < 3 && exact == 0; i++) {
        CHECK_EQ_INT(shared(be_main, "exs", TOK_A, 0, 30000, &s1), BACKEND_OK);
        CHECK_EQ_INT(shared(be_main, "exs", TOK_B, 0, 30000, &s2), BACKEND_OK);
        CHECK_EQ_INT(s2.expired_fence, 0);
        expire_now("exs", TOK_B);
        CHECK_EQ_INT(shared(be_main, "exs", "cccccccccccccccccccccccccccccccc",
                            0, 30000, &h),
                     BACKEND_OK);
        CHECK(h.expired_fence == 0 || h.expired_fence == s2.fence);
        exact += h.expired_fence == s2.fence;
        CHECK_EQ_INT(rel(be_main, "exs", TOK_A), BACKEND_OK);
        CHECK_EQ_INT(rel(be_main, "exs", "cccccccccccccccccccccccccccccccc"),
                     BACKEND_OK);
    }
    CHECK_EQ_INT(exact, 1);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_open_rejects_bad_urls),
    CHECK_CASE(test_open_rejects_bad_tls_and_password_options),
    CHECK_CASE(test_open_succeeds_while_mysql_is_down),
    CHECK_CASE(test_password_from_file_or_environment),
    CHECK_CASE(test_acquire_grants_free_key_once),
    CHECK_CASE(test_acquire_renew_release_one_statement_each),
    CHECK_CASE(test_connection_closed_while_idle_is_replaced),
    CHECK_CASE(test_fence_grows_with_every_grant),
    CHECK_CASE(test_renew_keeps_fence_and_stored_ttl),
    CHECK_CASE(test_expired_token_is_dead),
    CHECK_CASE(test_inspect_shows_owner_never_token),
    CHECK_CASE(test_distinct_keys_are_distinct_locks),
    CHECK_CASE(test_release_notifies),
    CHECK_CASE(test_release_on_another_instance_notifies),
    CHECK_CASE(test_instances_share_locks_and_fences),
    CHECK_CASE(test_threads_on_two_instances_exclude_each_other),
    CHECK_CASE(test_kinds_shared_up_to_the_limit_then_held),
    CHECK_CASE(test_kinds_exclusive_and_shared_exclude),
    CHECK_CASE(test_kinds_limit_mismatch_changes_nothing),
    CHECK_CASE(test_kinds_reentry_counts_holds),
    CHECK_CASE(test_kinds_reentry_of_a_shared_holder),
    CHECK_CASE(test_kinds_reentry_cap),
    CHECK_CASE(test_kinds_idempotent_replay_and_conflict),
    CHECK_CASE(test_kinds_inspect_fields_and_order),
    CHECK_CASE(test_kinds_holders_expire_one_by_one),
    CHECK_CASE(test_kinds_release_of_a_shared_holder_notifies),
    CHECK_CASE(test_kinds_mixed_threads_exclude_without_deadlocks),
    CHECK_CASE(test_multi_grant_rows_are_single_grants),
    CHECK_CASE(test_multi_held_changes_nothing),
    CHECK_CASE(test_multi_renew_all_or_nothing),
    CHECK_CASE(test_multi_release_notifies_other_instances),
    CHECK_CASE(test_multi_most_keys_in_time),
    CHECK_CASE(test_multi_no_deadlock_under_contention),
    CHECK_CASE(test_multi_gives_up_when_out_of_time),
    CHECK_CASE(test_list_pages_each_held_key_once),
    CHECK_CASE(test_list_budget_stops_on_expired_rows),
    CHECK_CASE(test_list_bytes_prefixes_and_shared_keys),
    CHECK_CASE(test_force_release_exclusive_with_reentries),
    CHECK_CASE(test_force_release_shared_and_free_keys),
    CHECK_CASE(test_force_release_wakes_another_instance),
    CHECK_CASE(test_acquire_reports_the_expired_fence),
    CHECK_CASE(test_fences_outlive_the_backend),
    CHECK_CASE(test_dropped_tables_are_made_again),
    CHECK_CASE(test_old_schema_upgrade_gives_larger_fences),
    CHECK_CASE(test_pre_kinds_schema_upgrade_keeps_locks),
    CHECK_CASE(test_reaper_removes_expired_rows),
    CHECK_CASE(test_stopped_mysql_answers_unavailable_in_time),
    CHECK_CASE(test_multi_stopped_mysql_answers_unavailable),
    CHECK_CASE(test_restart_keeps_holders_and_fences),
};

int main(int argc, char **argv)
{
    int rc = 1;

    signal(SIGPIPE, SIG_IGN); /* as lockd does */
    if (access(TESTSRV_INSTALL_DB, X_OK) != 0 ||
        access(TESTSRV_MARIADBD, X_OK) != 0) {
        printf("skip: no MariaDB server here (%s, %s)\n", TESTSRV_INSTALL_DB,
               TESTSRV_MARIADBD);
        return SKIP_EXIT;
    }
    if (testsrv_setup(&srv, "mysql") != 0) {
        printf("skip: no free port or temp dir for MariaDB\n");
        testsrv_cleanup(&srv, SIGTERM);
        return SKIP_EXIT;
    }
    snprintf(url, sizeof(url), "mysql://lockd:%s@127.0.0.1:%d/lockd",
             TESTSRV_MYSQL_PASSWORD_U, srv.port);
    /* the adapter initialises Connector/C; open it before root_sql() */
    be_main = open_be(url);
    if (be_main == NULL) {
        printf("FAIL cannot open %s\n0 passed, 1 failed\n", url);
    } else if (testsrv_mariadb_install(&srv) != 0) {
        printf("skip: cannot set up MariaDB in %s\n", srv.dir);
        rc = SKIP_EXIT;
    } else {
        rc = CHECK_MAIN(cases);
    }
    mysql_backend.close(be_main);
    testsrv_cleanup(&srv, SIGTERM);
    return rc;
}

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
        CHECK_MSG(mysql_backend.open(bad[i], NULL, &be, NULL, 0) ==
                      BACKEND_INVALID,
                  "accepted %s", bad[i]);
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
    CHECK_EQ_INT(rel(be_main, "insp", TOK_A), BACKEND_OK);

    /* no owner; then an owner of the full 128 bytes */
    CHECK_EQ_INT(acq(be_main, "insp", TOK_A, 5000, &g), BACKEND_OK);
    memset(&info, 0, sizeof(info));
    CHECK_EQ_INT(mysql_backend.inspect(be_main, "insp", 4, &info), BACKEND_OK);
    CHECK(!info.has_owner);
    CHECK_EQ_INT(rel(be_main, "insp", TOK_A), BACKEND_OK);
    memset(owner, 'o', LOCK_OWNER_MAX);
    owner[LOCK_OWNER_MAX] = '\0';
    CHECK_EQ_INT(acq_owner(be_main, "insp", TOK_A, owner, 5000, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(mysql_backend.inspect(be_main, "insp", 4, &info), BACKEND_OK);
    CHECK(info.has_owner && strcmp(info.owner, owner) == 0);
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
        CHECK_EQ_INT(
            mysql_backend.inspect(be_main, keys[i], strlen(keys[i]), &info),
            BACKEND_OK);
    }
    /* one release frees exactly its own key */
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(rel(be_main, keys[i], TOK_A), BACKEND_OK);
        for (size_t j = i + 1; j < n; j++)
            CHECK_MSG(mysql_backend.inspect(be_main, keys[j], strlen(keys[j]),
                                            &info) == BACKEND_OK,
                      "releasing key %zu freed key %zu", i, j);
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
    CHECK_EQ_INT(mysql_backend.held_count(be_main), 0);
    CHECK_EQ_INT(acq(be_main, "counted", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(mysql_backend.held_count(be_main), 1);
    CHECK_EQ_INT(rel(be_main, "counted", TOK_A), BACKEND_OK);
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
    CHECK_EQ_INT(acq(be, "stopped", TOK_A, 60000, &g), BACKEND_OK);
    testsrv_signal(&srv, SIGSTOP);
    t0 = check_mono_ms();
    CHECK_EQ_INT(acq(be, "stopped-2", TOK_A, 60000, &g), BACKEND_UNAVAILABLE);
    took = check_mono_ms() - t0;
    printf("  acquire on a stopped server: %lld ms\n", (long long)took);
    CHECK(took >= 500 && took < 3500);
    t0 = check_mono_ms();
    CHECK_EQ_INT(mysql_backend.inspect(be, "stopped", 7, &info),
                 BACKEND_UNAVAILABLE);
    CHECK(check_mono_ms() - t0 < 3500);
    testsrv_signal(&srv, SIGCONT);
    /* the lock survived; the grant that timed out was never made */
    for (int i = 0; i < 40; i++) {
        if (mysql_backend.ping(be) == BACKEND_OK)
            break;
        check_sleep_ms(100);
    }
    CHECK_EQ_INT(acq(be, "stopped", TOK_B, 5000, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel(be, "stopped", TOK_A), BACKEND_OK);
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

static const struct check_case cases[] = {
    CHECK_CASE(test_open_rejects_bad_urls),
    CHECK_CASE(test_open_succeeds_while_mysql_is_down),
    CHECK_CASE(test_acquire_grants_free_key_once),
    CHECK_CASE(test_fence_grows_with_every_grant),
    CHECK_CASE(test_renew_keeps_fence_and_stored_ttl),
    CHECK_CASE(test_expired_token_is_dead),
    CHECK_CASE(test_inspect_shows_owner_never_token),
    CHECK_CASE(test_distinct_keys_are_distinct_locks),
    CHECK_CASE(test_release_notifies),
    CHECK_CASE(test_release_on_another_instance_notifies),
    CHECK_CASE(test_instances_share_locks_and_fences),
    CHECK_CASE(test_threads_on_two_instances_exclude_each_other),
    CHECK_CASE(test_fences_outlive_the_backend),
    CHECK_CASE(test_dropped_tables_are_made_again),
    CHECK_CASE(test_old_schema_upgrade_gives_larger_fences),
    CHECK_CASE(test_reaper_removes_expired_rows),
    CHECK_CASE(test_stopped_mysql_answers_unavailable_in_time),
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

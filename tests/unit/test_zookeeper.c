/*
 * tests/unit/test_zookeeper.c - the ZooKeeper adapter (backends/zookeeper/)
 * through its ops table: URL checks without a server, then the recipe
 * against a real standalone ZooKeeper (Debian's zookeeper package) that
 * this program starts on a free loopback port in a temp dir. When Java or
 * ZooKeeper is missing or the server does not start, only the cases
 * without a server run: it prints "skip: <reason>" and exits SKIP_EXIT
 * (77) unless one of them failed.
 */
#include "backends/backend.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#include "backends/zookeeper/zk.h" /* the adapter's session, to expire it */
#include "tests/unit/check.h"
extern const struct backend_ops zookeeper_backend;
#define TEST_BE_OPS zookeeper_backend
#include "lib/clock.h"
#include "tests/unit/server.h"

#define TOK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define TOK_C "cccccccccccccccccccccccccccccccc"

static struct test_server srv = TEST_SERVER_INIT;
static char url[160];

/* ---- the server ---- */

static int start_zookeeper(void)
{
    return testsrv_zk_start(&srv);
}

/* ---- helpers ---- */

static struct backend *open_be(const char *u)
{
    return be_open(u, notes_hook, NULL);
}

/* acquire as a waiter (w non-NULL) or try-once (w NULL) */
static enum backend_result acq_wait(struct backend *be,
                                    const char *key,
                                    const char *tok,
                                    uint64_t ttl,
                                    struct lock_waiter *w,
                                    struct lock_grant *g)
{
    return acq_full(be, key, tok, NULL, ttl, w, g);
}

static struct backend *be_main;

/* A handle of our own, to change the store behind lockd's back; NULL (and
 * a failed check) when it does not connect within 5 s. */
static zhandle_t *raw_open(void)
{
    char hosts[64];
    zhandle_t *zh;

    snprintf(hosts, sizeof(hosts), "127.0.0.1:%d", srv.port);
    zh = zookeeper_init(hosts, NULL, 4000, NULL, NULL, 0);
    for (int i = 0;
         zh != NULL && i < 50 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
        check_sleep_ms(100);
    CHECK(zh != NULL && zoo_state(zh) == ZOO_CONNECTED_STATE);
    if (zh != NULL && zoo_state(zh) != ZOO_CONNECTED_STATE) {
        zookeeper_close(zh);
        zh = NULL;
    }
    return zh;
}

/* A persistent node with data (NULL: none). */
static int raw_node(zhandle_t *zh, const char *path, const char *data)
{
    return zoo_create(zh, path, data, data != NULL ? (int)strlen(data) : -1,
                      &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
}

/* Delete every waiter node under parent (a grant that took the place). */
static void raw_drop_waiters(zhandle_t *zh, const char *parent)
{
    struct String_vector kids = { 0 };
    char path[256];

    CHECK_EQ_INT(zoo_get_children(zh, parent, 0, &kids), ZOK);
    for (int i = 0; i < kids.count; i++) {
        if (kids.data[i][0] != 'w' && kids.data[i][0] != 'r')
            continue;
        snprintf(path, sizeof(path), "%s/%s", parent, kids.data[i]);
        CHECK_EQ_INT(zoo_delete(zh, path, -1), ZOK);
    }
    deallocate_String_vector(&kids);
}

/* The number of waiter nodes under parent. */
static int raw_waiters(zhandle_t *zh, const char *parent)
{
    struct String_vector kids = { 0 };
    int n = 0;

    CHECK_EQ_INT(zoo_get_children(zh, parent, 0, &kids), ZOK);
    for (int i = 0; i < kids.count; i++)
        n += kids.data[i][0] == 'w' || kids.data[i][0] == 'r';
    deallocate_String_vector(&kids);
    return n;
}

/* h under tok with its marker, as a grant makes them, with data "lockd1
 * <ttl> <tok> <grant_by>" (grant_by 0: a year from now); *st its stat. */
static void raw_holder(zhandle_t *zh,
                       const char *parent,
                       const char *tok,
                       uint64_t ttl,
                       int64_t grant_by,
                       struct Stat *st)
{
    char path[256], data[128];

    if (grant_by == 0)
        grant_by = clock_wall_ms() + INT64_C(365) * 86400 * 1000;
    snprintf(data, sizeof(data), "lockd1 %llu %s %lld", (unsigned long long)ttl,
             tok, (long long)grant_by);
    snprintf(path, sizeof(path), "%s/h", parent);
    CHECK_EQ_INT(raw_node(zh, path, data), ZOK);
    CHECK_EQ_INT(zoo_exists(zh, path, 0, st), ZOK);
    snprintf(path, sizeof(path), "%s/t%s", parent, tok);
    CHECK_EQ_INT(raw_node(zh, path, NULL), ZOK);
}

enum zkm_op {
    ZKM_ACQUIRE,
    ZKM_RENEW,
    ZKM_RELEASE,
};

/* A multi-key call over keys (NULL-terminated); g is zeroed first. */
static enum backend_result zkm(struct backend *be,
                               enum zkm_op op,
                               const char *const *keys,
                               const char *tok,
                               const char *owner,
                               uint64_t ttl,
                               struct lock_multi_grant *g)
{
    size_t lens[LOCK_MULTI_MAX], n = 0;
    struct lock_multi_req req;

    while (keys[n] != NULL && n < LOCK_MULTI_MAX) {
        lens[n] = strlen(keys[n]);
        n++;
    }
    req = (struct lock_multi_req){ .n = n,
                                   .keys = keys,
                                   .key_lens = lens,
                                   .token = tok,
                                   .owner = owner,
                                   .ttl_ms = ttl };
    memset(g, 0, sizeof(*g));
    if (op == ZKM_ACQUIRE)
        return zookeeper_backend.acquire_multi(be, &req, g);
    if (op == ZKM_RENEW)
        return zookeeper_backend.renew_multi(be, &req, g);
    return zookeeper_backend.release_multi(be, &req, g);
}

/* ---- lock kinds ---- */

static enum backend_result
shr(const char *key, const char *tok, uint32_t limit, struct lock_grant *g)
{
    return acq_kind(be_main, key, tok, LOCK_SHARED, limit, NULL, 5000, NULL, g);
}

#define TOK_D "dddddddddddddddddddddddddddddddd"
#define TOK_E "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"

/* ---- cases without a server ---- */

static void test_open_rejects_bad_urls(void)
{
    static const char *const bad[] = {
        "zookeeper://127.0.0.1:2181?bogus=1",
        "zookeeper://127.0.0.1:2181?session_timeout_ms=10",
        "zookeeper://127.0.0.1:2181?timeout_ms=x",
        "zookeeper://127.0.0.1:2181?timeout_ms=",
        "zookeeper:///chroot",
        "zookeeper://user@127.0.0.1:2181", /* no password */
        "zookeeper://:pw@127.0.0.1:2181",
        "zookeeper://a%3Ab:pw@127.0.0.1:2181",
        "zookeeper://127.0.0.1:2181?acl=creator",
        "zookeeper://127.0.0.1:2181?password_file=/etc/hostname",
        "zookeeper://u:pw@127.0.0.1:2181?acl=open",
        "zookeeper://u@127.0.0.1:2181?password_file=/nonexistent",
        "zookeeper://127.0.0.1:2181/a/../b",
        "zookeeper://127.0.0.1:2181/a//b",
        "zookeeper://127.0.0.1:2181/./b",
        "zookeeper://127.0.0.1:2181/a%20b",
        "redis://127.0.0.1:2181",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct backend *be = (struct backend *)1;
        enum backend_result r =
            zookeeper_backend.open(bad[i], NULL, &be, NULL, 0);
        CHECK_MSG(r == BACKEND_INVALID, "%s: %d", bad[i], (int)r);
        CHECK(be == NULL);
    }
}

static void test_down_store_answers_unavailable_at_once(void)
{
    static const char *const keys[] = { "k", "l", NULL };
    struct lock_multi_grant mg;
    char u[128];
    struct lock_grant g;
    struct lock_info info = { 0 };
    struct backend *be;
    int64_t t0 = check_mono_ms();

    snprintf(u, sizeof(u),
             "zookeeper://127.0.0.1:%d/x?timeout_ms=200&session_timeout_ms="
             "2000",
             testsrv_free_port());
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_MSG(check_mono_ms() - t0 < 1000, "open took %lld ms",
              (long long)(check_mono_ms() - t0));
    t0 = check_mono_ms();
    CHECK_EQ_INT(acq_wait(be, "k", TOK_A, 1000, NULL, &g), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(rel(be, "k", TOK_A), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(zookeeper_backend.inspect(be, "k", 1, &info),
                 BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(zookeeper_backend.ping(be), BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(zkm(be, ZKM_ACQUIRE, keys, TOK_A, NULL, 1000, &mg),
                 BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(zkm(be, ZKM_RENEW, keys, TOK_A, NULL, 1000, &mg),
                 BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(zkm(be, ZKM_RELEASE, keys, TOK_A, NULL, 0, &mg),
                 BACKEND_UNAVAILABLE);
    CHECK_MSG(check_mono_ms() - t0 < 100, "answers took %lld ms",
              (long long)(check_mono_ms() - t0));
    zookeeper_backend.close(be);
    zookeeper_backend.close(NULL);
}

/* ---- cases against the server ---- */

static void test_acquire_inspect_renew_release(void)
{
    struct lock_grant g, h, r;
    struct lock_info info = { 0 };
    int64_t t0 = clock_mono_ms();

    CHECK_EQ_INT(zookeeper_backend.ping(be_main), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "a/../b", TOK_A, 5000, NULL, &g),
                 BACKEND_OK);
    CHECK(g.fence > 0 && g.fence <= LOCK_FENCE_MAX);
    /* the whole TTL, counted from when the call began */
    CHECK_EQ_U64(g.ttl_ms, 5000);
    CHECK(g.expires_at_ms >=
          clock_wall_ms() - (clock_mono_ms() - t0) + 5000 - 1);
    CHECK(g.expires_at_ms > clock_wall_ms() + 4000);
    CHECK_EQ_INT(acq_wait(be_main, "a/../b", TOK_B, 5000, NULL, &h),
                 BACKEND_HELD);
    CHECK(h.retry_ms > 4000 && h.retry_ms <= 5000);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "a/../b", 6, &info),
                 BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK(!info.has_owner);
    lock_info_clear(&info);
    CHECK_EQ_INT(ren(be_main, "a/../b", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(ren(be_main, "a/../b", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_EQ_U64(r.ttl_ms, 5000);
    CHECK_EQ_INT(ren(be_main, "a/../b", TOK_A, 9000, &r), BACKEND_OK);
    CHECK_EQ_U64(r.ttl_ms, 9000);
    CHECK_EQ_INT(rel(be_main, "a/../b", TOK_B), BACKEND_MISMATCH);
    notes_reset();
    CHECK_EQ_INT(rel(be_main, "a/../b", TOK_A), BACKEND_OK);
    CHECK(notes_heard("a/../b", 0));
    CHECK_EQ_INT(rel(be_main, "a/../b", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "a/../b", 6, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq_wait(be_main, "a/../b", TOK_B, 5000, NULL, &h),
                 BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(be_main, "a/../b", TOK_B), BACKEND_OK);
}

static void test_keys_are_distinct_nodes(void)
{
    static const char *const keys[] = { ".",     "..",      "/", "a/b",
                                        "a%2Fb", "a",       "A", "zookeeper",
                                        "k",     "\xc3\xbc" };
    size_t n = sizeof(keys) / sizeof(keys[0]);
    struct lock_grant g;
    char big[LOCK_KEY_MAX + 1];

    for (size_t i = 0; i < n; i++)
        CHECK_MSG(acq_wait(be_main, keys[i], TOK_A, 5000, NULL, &g) ==
                      BACKEND_OK,
                  "%s", keys[i]);
    for (size_t i = 0; i < n; i++)
        CHECK_MSG(acq_wait(be_main, keys[i], TOK_B, 5000, NULL, &g) ==
                      BACKEND_HELD,
                  "%s", keys[i]);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_INT(rel(be_main, keys[i], TOK_A), BACKEND_OK);
    memset(big, 'x', LOCK_KEY_MAX);
    big[LOCK_KEY_MAX] = '\0';
    CHECK_EQ_INT(acq_wait(be_main, big, TOK_A, 5000, NULL, &g), BACKEND_OK);
    big[LOCK_KEY_MAX - 1] = 'y';
    CHECK_EQ_INT(acq_wait(be_main, big, TOK_A, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, big, TOK_A), BACKEND_OK);
    big[LOCK_KEY_MAX - 1] = 'x';
    CHECK_EQ_INT(rel(be_main, big, TOK_A), BACKEND_OK);
}

static void test_waiters_are_fifo_and_cancel_frees_place(void)
{
    struct lock_waiter w1 = { .id = 1 }, w2 = { .id = 2 }, w3 = { .id = 3 };
    struct lock_grant g;
    struct backend *other = NULL;

    /* no hooks there: every notification seen comes from be_main's watches
     * or its own calls */
    CHECK_EQ_INT(zookeeper_backend.open(url, NULL, &other, NULL, 0),
                 BACKEND_OK);
    CHECK(other != NULL);
    if (other == NULL)
        return;
    w1.deadline_ms = w2.deadline_ms = w3.deadline_ms = clock_wall_ms() + 20000;
    CHECK_EQ_INT(acq_wait(be_main, "q", TOK_A, 10000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "q", TOK_B, 1000, &w1, &g), BACKEND_HELD);
    CHECK(w1.be_data != NULL);
    CHECK_EQ_INT(acq_wait(other, "q", TOK_B, 1000, &w2, &g), BACKEND_HELD);
    CHECK_EQ_INT(acq_wait(be_main, "q", TOK_C, 1000, &w3, &g), BACKEND_HELD);
    /* a try-once acquire does not jump them */
    CHECK_EQ_INT(acq_wait(other, "q", TOK_C, 1000, NULL, &g), BACKEND_HELD);
    CHECK_EQ_INT(zookeeper_backend.cancel_wait(be_main, "q", 1, &w1),
                 BACKEND_OK);
    CHECK(w1.be_data == NULL);
    notes_reset();
    CHECK_EQ_INT(rel(be_main, "q", TOK_A), BACKEND_OK);
    /* w3 is behind w2 (on the other instance) */
    CHECK_EQ_INT(acq_wait(be_main, "q", TOK_C, 1000, &w3, &g), BACKEND_HELD);
    CHECK(!g.behind);
    CHECK_EQ_INT(acq_wait(other, "q", TOK_B, 1000, &w2, &g), BACKEND_OK);
    CHECK(w2.be_data == NULL);
    /* w3 watches w2's old place or h: the release reaches it */
    CHECK_EQ_INT(acq_wait(be_main, "q", TOK_C, 1000, &w3, &g), BACKEND_HELD);
    notes_reset();
    CHECK_EQ_INT(rel(other, "q", TOK_B), BACKEND_OK);
    CHECK(notes_heard("q", 2000));
    CHECK_EQ_INT(acq_wait(be_main, "q", TOK_C, 1000, &w3, &g), BACKEND_OK);
    CHECK(w3.be_data == NULL);
    CHECK_EQ_INT(rel(be_main, "q", TOK_C), BACKEND_OK);
    zookeeper_backend.close(other);
}

static void test_expired_holder_is_free(void)
{
    struct lock_grant g, h;
    struct lock_info info = { 0 };
    struct lock_waiter w = { .id = 9 };

    CHECK_EQ_INT(acq_wait(be_main, "e", TOK_A, 300, NULL, &g), BACKEND_OK);
    w.deadline_ms = clock_wall_ms() + 5000;
    CHECK_EQ_INT(acq_wait(be_main, "e", TOK_B, 1000, &w, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 0 && h.retry_ms <= 300);
    check_sleep_ms((int)h.retry_ms + 5);
    CHECK_EQ_INT(acq_wait(be_main, "e", TOK_B, 1000, &w, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(ren(be_main, "e", TOK_A, 0, &g), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "e", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "e", TOK_A, 200, NULL, &g), BACKEND_OK);
    check_sleep_ms(250);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "e", 1, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(ren(be_main, "e", TOK_A, 0, &g), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be_main, "e", TOK_A), BACKEND_NOT_FOUND);
}

/* A release remembers the grant it frees without reading h: it must still
 * judge an expired grant as expired. */
static void test_release_after_expiry_is_not_found(void)
{
    struct lock_grant g;

    CHECK_EQ_INT(acq_wait(be_main, "x", TOK_A, 200, NULL, &g), BACKEND_OK);
    check_sleep_ms(250);
    CHECK_EQ_INT(rel(be_main, "x", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq_wait(be_main, "x", TOK_B, 1000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "x", TOK_B), BACKEND_OK);
}

/* The ABA case of a release by version alone: A's grant is released
 * through another instance and B takes the key, at the same version of h;
 * a late release of A's token through the instance that granted it must
 * not free B's lock. */
static void test_stale_release_never_frees_a_later_grant(void)
{
    struct lock_grant g, h, r;
    struct lock_info info = { 0 };
    struct backend *other = NULL;

    CHECK_EQ_INT(zookeeper_backend.open(url, NULL, &other, NULL, 0),
                 BACKEND_OK);
    if (other == NULL)
        return;
    CHECK_EQ_INT(acq_wait(be_main, "aba", TOK_A, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(other, "aba", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(other, "aba", TOK_B, 5000, NULL, &h), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "aba", TOK_A), BACKEND_MISMATCH);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "aba", 3, &info),
                 BACKEND_OK);
    CHECK_EQ_U64(info.fence, h.fence);
    lock_info_clear(&info);
    /* a renew through the other instance: the first one's release of the
     * same grant still works */
    CHECK_EQ_INT(acq_wait(other, "aba", TOK_A, 5000, NULL, &g), BACKEND_HELD);
    CHECK_EQ_INT(ren(be_main, "aba", TOK_B, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(ren(other, "aba", TOK_B, 3000, &r), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "aba", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel(other, "aba", TOK_B), BACKEND_NOT_FOUND);
    zookeeper_backend.close(other);
}

/* Without its marker, h is not the holder a release, renew or reap read:
 * every fresh h has version 1, so a second try by version alone could free
 * or overwrite a later grant of the key (seen once: two instances reaping
 * the same expired holder after a ZooKeeper restart, the loser deleting the
 * next grant). With the marker gone, h stays as it is. */
static void test_holder_without_marker_is_never_freed_by_version(void)
{
    struct lock_grant g, r;
    struct lock_info info = { 0 };
    struct Stat st = { 0 };
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    CHECK_EQ_INT(acq_wait(be_main, "m", TOK_A, 5000, NULL, &g), BACKEND_OK);
    /* the key "m" is node kbQ */
    CHECK_EQ_INT(zoo_delete(zh, "/lockd/locks/kbQ/t" TOK_A, -1), ZOK);
    CHECK_EQ_INT(rel(be_main, "m", TOK_B), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "m", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(ren(be_main, "m", TOK_A, 9000, &r), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "m", 1, &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK(info.ttl_ms <= 5000); /* the renew wrote nothing */
    lock_info_clear(&info);
    CHECK_EQ_INT(zoo_exists(zh, "/lockd/locks/kbQ/h", 0, &st), ZOK);
    CHECK_EQ_INT(st.version, 1);
    CHECK_EQ_INT(zoo_delete(zh, "/lockd/locks/kbQ/h", -1), ZOK);
    CHECK_EQ_INT(zoo_delete(zh, "/lockd/locks/kbQ", -1), ZOK);
    zookeeper_close(zh);
}

/* A grant committed after the deadline its requester wrote into it (a
 * request that sat in a paused server) is nobody's: the key is free. */
static void test_grant_past_its_deadline_is_void(void)
{
    struct lock_grant g;
    struct lock_info info = { 0 };
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    /* the key "v" is node kdg; h and its marker, as a grant makes them */
    CHECK_EQ_INT(raw_node(zh, "/lockd/locks/kdg", NULL), ZOK);
    CHECK_EQ_INT(
        raw_node(zh, "/lockd/locks/kdg/h", "lockd1 60000 " TOK_A " 1\nlate"),
        ZOK);
    CHECK_EQ_INT(raw_node(zh, "/lockd/locks/kdg/t" TOK_A, NULL), ZOK);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "v", 1, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq_wait(be_main, "v", TOK_B, 1000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "v", 1, &info), BACKEND_OK);
    CHECK_EQ_U64(info.fence, g.fence);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be_main, "v", TOK_A), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "v", TOK_B), BACKEND_OK);
    zookeeper_close(zh);
}

/* A holder whose token is not lockd's (not hex, so it has no marker) is
 * data lockd cannot read: the key stays held and nothing deletes it by
 * version alone, however long ago it would have expired. */
/*
 * Issue 10: a waiter whose grant ZooKeeper made but whose answer never
 * came (lost, or so late that lockd had answered 503) finds h under its
 * own token on its next try. It is reported only while it is valid by the
 * data stored in it, with what is left of it; an expired or void one is
 * freed, and the waiter gets a grant of its own.
 */
static void test_issue_10_lost_grant_is_reported_only_while_valid(void)
{
    /* the key "L" is node kTA */
    const char *parent = "/lockd/locks/kTA";
    struct lock_waiter w = { .id = 21 };
    struct lock_grant g;
    struct Stat st;
    int64_t before;
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    for (int round = 0; round < 3; round++) {
        w.deadline_ms = clock_wall_ms() + 20000;
        CHECK_EQ_INT(acq_wait(be_main, "L", TOK_A, 10000, NULL, &g),
                     BACKEND_OK);
        CHECK_EQ_INT(acq_wait(be_main, "L", TOK_B, 3000, &w, &g), BACKEND_HELD);
        CHECK(w.be_data != NULL);
        CHECK_EQ_INT(rel(be_main, "L", TOK_A), BACKEND_OK);
        /* the waiter's grant, whose answer it never had */
        raw_drop_waiters(zh, parent);
        if (round == 0)
            raw_holder(zh, parent, TOK_B, 3000, 0, &st); /* valid */
        else if (round == 1)
            raw_holder(zh, parent, TOK_B, 100, 0, &st); /* expires */
        else
            raw_holder(zh, parent, TOK_B, 60000, 1, &st); /* void */
        check_sleep_ms(300);
        before = clock_wall_ms();
        CHECK_EQ_INT(acq_wait(be_main, "L", TOK_B, 3000, &w, &g), BACKEND_OK);
        CHECK(w.be_data == NULL);
        if (round == 0) {
            CHECK_EQ_U64(g.fence, (uint64_t)st.czxid);
            CHECK_EQ_INT(g.expires_at_ms, st.mtime + 3000);
            /* not the full TTL: 300 ms of it went before we looked */
            CHECK_MSG((int64_t)g.ttl_ms <= st.mtime + 3000 - before + 1,
                      "ttl_ms %llu, %lld ms left", (unsigned long long)g.ttl_ms,
                      (long long)(st.mtime + 3000 - before));
            CHECK(g.ttl_ms > 1500);
        } else {
            /* a grant of its own, made now */
            CHECK(g.fence > (uint64_t)st.czxid);
            CHECK(g.ttl_ms > 2000 && g.ttl_ms <= 3000);
            CHECK(g.expires_at_ms > before + 2000);
        }
        CHECK_EQ_INT(rel(be_main, "L", TOK_B), BACKEND_OK);
    }
    zookeeper_close(zh);
}

/* Issue 10: a grant that committed after its waiter had queued again (a
 * lost answer, then a new place) is found beside the waiter's new node: it
 * is the waiter's, and the node goes in the same multi, so nobody queues
 * behind a place that will never move. */
static void test_issue_10_late_grant_beside_a_new_place_is_claimed(void)
{
    /* the key "E" is node kRQ */
    const char *parent = "/lockd/locks/kRQ";
    struct lock_waiter w = { .id = 22 };
    struct lock_grant g;
    struct Stat st;
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    w.deadline_ms = clock_wall_ms() + 20000;
    CHECK_EQ_INT(acq_wait(be_main, "E", TOK_A, 10000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "E", TOK_B, 3000, &w, &g), BACKEND_HELD);
    CHECK_EQ_INT(raw_waiters(zh, parent), 1);
    /* A's h goes (expired, say), and the waiter's late grant is there */
    CHECK_EQ_INT(zoo_delete(zh, "/lockd/locks/kRQ/t" TOK_A, -1), ZOK);
    CHECK_EQ_INT(zoo_delete(zh, "/lockd/locks/kRQ/h", -1), ZOK);
    raw_holder(zh, parent, TOK_B, 3000, 0, &st);
    CHECK_EQ_INT(acq_wait(be_main, "E", TOK_B, 3000, &w, &g), BACKEND_OK);
    CHECK(w.be_data == NULL);
    CHECK_EQ_U64(g.fence, (uint64_t)st.czxid);
    CHECK_EQ_INT(raw_waiters(zh, parent), 0);
    CHECK_EQ_INT(rel(be_main, "E", TOK_A), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "E", TOK_B), BACKEND_OK);
    zookeeper_close(zh);
}

static void test_holder_with_a_foreign_token_is_left_alone(void)
{
    struct lock_grant g;
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    /* the key "n" is node kbg */
    CHECK_EQ_INT(raw_node(zh, "/lockd/locks/kbg", NULL), ZOK);
    CHECK_EQ_INT(
        raw_node(zh, "/lockd/locks/kbg/h", "lockd1 1 not-a-hex-token 1"), ZOK);
    CHECK_EQ_INT(acq_wait(be_main, "n", TOK_B, 1000, NULL, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "n", TOK_A), BACKEND_MISMATCH);
    CHECK_EQ_INT(zoo_exists(zh, "/lockd/locks/kbg/h", 0, NULL), ZOK);
    CHECK_EQ_INT(zoo_delete(zh, "/lockd/locks/kbg/h", -1), ZOK);
    CHECK_EQ_INT(acq_wait(be_main, "n", TOK_B, 1000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "n", TOK_B), BACKEND_OK);
    zookeeper_close(zh);
}

static void test_chroot_keeps_locks_apart(void)
{
    char u[200];
    struct backend *be;
    struct lock_grant g;

    snprintf(u, sizeof(u), "zookeeper://127.0.0.1:%d/apps/one", srv.port);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(zookeeper_backend.ping(be), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be, "c", TOK_A, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "c", TOK_B, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "c", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "c", TOK_B), BACKEND_OK);
    zookeeper_backend.close(be);
}

/* End be's session from outside: a handle of ours on its id and password,
 * closed, closes the session too; lockd sees it expired. */
static void expire_session(struct backend *be)
{
    struct zk_be *z = (struct zk_be *)be;
    clientid_t id;
    char hosts[64];
    zhandle_t *zh;

    pthread_mutex_lock(&z->mu);
    id = *zoo_client_id(z->conn->zh);
    pthread_mutex_unlock(&z->mu);
    snprintf(hosts, sizeof(hosts), "127.0.0.1:%d", srv.port);
    zh = zookeeper_init(hosts, NULL, 4000, &id, NULL, 0);
    for (int i = 0;
         zh != NULL && i < 50 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
        check_sleep_ms(100);
    CHECK(zh != NULL && zoo_state(zh) == ZOO_CONNECTED_STATE);
    if (zh != NULL)
        zookeeper_close(zh);
}

static int64_t session_of(struct backend *be)
{
    struct zk_be *z = (struct zk_be *)be;
    int64_t id = 0;

    pthread_mutex_lock(&z->mu);
    if (z->conn != NULL && z->conn->ready)
        id = zoo_client_id(z->conn->zh)->client_id;
    pthread_mutex_unlock(&z->mu);
    return id;
}

/* Digest auth is on every session, the first and one after an expiry
 * (lockd's nodes let its user alone create under them); a client without
 * it cannot change them; a wrong password gets nothing. */
static void test_auth_on_every_session(void)
{
    char u[200], hosts[64];
    struct backend *be, *wrong;
    struct lock_grant g;
    struct ACL_vector acl = { 0 };
    struct Stat st;
    int64_t s1, s2 = 0;
    zhandle_t *zh;

    snprintf(u, sizeof(u), "zookeeper://dave:pw%%3A1@127.0.0.1:%d/authu",
             srv.port);
    be = open_be(u);
    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(zookeeper_backend.ping(be), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be, "a", TOK_A, 5000, NULL, &g), BACKEND_OK);
    zh = raw_open();
    if (zh != NULL) {
        CHECK_EQ_INT(zoo_set(zh, "/authu/lockd/clock", "", 0, -1), ZNOAUTH);
        CHECK_EQ_INT(zoo_get_acl(zh, "/authu/lockd/locks", &acl, &st), ZOK);
        CHECK_EQ_INT(acl.count, 2); /* creator-all, world-read */
        deallocate_ACL_vector(&acl);
        zookeeper_close(zh);
    }
    s1 = session_of(be);
    expire_session(be);
    for (int i = 0; i < 100 && (s2 == 0 || s2 == s1); i++) {
        check_sleep_ms(100);
        s2 = session_of(be);
    }
    CHECK_MSG(s2 != 0 && s2 != s1, "no new session: %lld", (long long)s2);
    CHECK_EQ_INT(acq_wait(be, "b", TOK_A, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "b", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "a", TOK_A), BACKEND_OK);
    snprintf(hosts, sizeof(hosts), "%d", srv.port);
    snprintf(u, sizeof(u),
             "zookeeper://dave:nope@127.0.0.1:%s/authu?timeout_ms=300", hosts);
    wrong = open_be(u);
    CHECK(wrong != NULL);
    if (wrong != NULL) {
        CHECK_EQ_INT(zookeeper_backend.ping(wrong), BACKEND_UNAVAILABLE);
        CHECK_EQ_INT(acq_wait(wrong, "c", TOK_B, 5000, NULL, &g),
                     BACKEND_UNAVAILABLE);
        zookeeper_backend.close(wrong);
    }
    zookeeper_backend.close(be);
}

static void test_restart_answers_unavailable_then_recovers(void)
{
    struct lock_grant g, h;
    int64_t t0;
    int ok = 0;

    CHECK_EQ_INT(acq_wait(be_main, "r", TOK_A, 30000, NULL, &g), BACKEND_OK);
    testsrv_signal(&srv, SIGKILL);
    check_sleep_ms(100);
    t0 = check_mono_ms();
    CHECK_EQ_INT(acq_wait(be_main, "r2", TOK_A, 1000, NULL, &h),
                 BACKEND_UNAVAILABLE);
    CHECK_EQ_INT(zookeeper_backend.ping(be_main), BACKEND_UNAVAILABLE);
    CHECK(check_mono_ms() - t0 < 2500);
    if (start_zookeeper() != 0) {
        CHECK_MSG(0, "ZooKeeper did not restart");
        return;
    }
    for (int i = 0; i < 100 && !ok; i++) {
        ok = zookeeper_backend.ping(be_main) == BACKEND_OK;
        if (!ok)
            check_sleep_ms(100);
    }
    CHECK(ok);
    CHECK_EQ_INT(acq_wait(be_main, "r", TOK_B, 1000, NULL, &h), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "r", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "r", TOK_B, 1000, NULL, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(be_main, "r", TOK_B), BACKEND_OK);
}

/* ---- lock kinds against the server ---- */

static void test_shared_grants_up_to_the_limit_then_held(void)
{
    struct lock_grant a, b, c, x;
    uint32_t holds;

    CHECK_EQ_INT(shr("s2", TOK_A, 2, &a), BACKEND_OK);
    CHECK_EQ_INT(a.mode, LOCK_SHARED);
    CHECK_EQ_INT(a.limit, 2);
    CHECK_EQ_INT(a.holds, 1);
    CHECK_EQ_U64(a.ttl_ms, 5000);
    CHECK_EQ_INT(shr("s2", TOK_B, 2, &b), BACKEND_OK);
    CHECK(b.fence > a.fence);
    CHECK_EQ_INT(shr("s2", TOK_C, 2, &c), BACKEND_HELD);
    CHECK(c.retry_ms > 4000 && c.retry_ms <= 5000);
    CHECK_EQ_INT(acq_wait(be_main, "s2", TOK_D, 5000, NULL, &x), BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, "s2", TOK_A, false, &holds), BACKEND_OK);
    CHECK_EQ_INT(holds, 0);
    CHECK_EQ_INT(shr("s2", TOK_C, 2, &c), BACKEND_OK);
    CHECK(c.fence > b.fence);
    CHECK_EQ_INT(rel(be_main, "s2", TOK_A), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "s2", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "s2", TOK_C), BACKEND_OK);
    /* the last one gone: the key and its limit are free */
    CHECK_EQ_INT(rel(be_main, "s2", TOK_C), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq_wait(be_main, "s2", TOK_D, 5000, NULL, &x), BACKEND_OK);
    CHECK(x.fence > c.fence);
    CHECK_EQ_INT(x.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(rel(be_main, "s2", TOK_D), BACKEND_OK);
}

static void test_exclusive_and_shared_exclude_each_other(void)
{
    struct lock_grant g, h;

    CHECK_EQ_INT(acq_wait(be_main, "xs", TOK_A, 3000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("xs", TOK_B, 0, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 2000 && h.retry_ms <= 3000);
    CHECK_EQ_INT(ren(be_main, "xs", TOK_B, 0, &h), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "xs", TOK_A), BACKEND_OK);
    for (int i = 0; i < 3; i++) /* no limit */
        CHECK_EQ_INT(shr("xs",
                         i == 0   ? TOK_B
                         : i == 1 ? TOK_C
                                  : TOK_D,
                         0, &h),
                     BACKEND_OK);
    CHECK_EQ_INT(h.limit, 0);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(acq_wait(be_main, "xs", TOK_A, 3000, NULL, &g), BACKEND_HELD);
    CHECK(g.retry_ms > 4000 && g.retry_ms <= 5000);
    CHECK_EQ_INT(rel(be_main, "xs", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "xs", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "xs", TOK_A, 3000, NULL, &g), BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "xs", TOK_D), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "xs", TOK_A, 3000, NULL, &g), BACKEND_OK);
    CHECK(g.fence > h.fence);
    CHECK_EQ_INT(rel(be_main, "xs", TOK_A), BACKEND_OK);
}

static void test_shared_under_another_limit_is_a_mismatch(void)
{
    struct lock_waiter w = { .id = 31 };
    struct lock_grant g;

    w.deadline_ms = clock_wall_ms() + 10000;
    CHECK_EQ_INT(shr("lm", TOK_A, 2, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("lm", TOK_B, 3, &g), BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(shr("lm", TOK_B, 0, &g), BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(
        acq_kind(be_main, "lm", TOK_B, LOCK_SHARED, 1, NULL, 5000, &w, &g),
        BACKEND_LIMIT_MISMATCH);
    CHECK_EQ_INT(zookeeper_backend.cancel_wait(be_main, "lm", 2, &w),
                 BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "lm", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(shr("lm", TOK_B, 3, &g), BACKEND_OK);
    CHECK_EQ_INT(g.limit, 3);
    CHECK_EQ_INT(rel(be_main, "lm", TOK_B), BACKEND_OK);
}

/* Two requests of one instance queued in one order and parked in the
 * other: the later one in the store's queue is told it is behind one of
 * ours even while the key is held, so the caller tries that one too. Only
 * the first waiter watches h; if it were never tried again after a
 * wake-up, h's release would reach nobody here and every waiter would sit
 * until its deadline. */
static void test_waiter_behind_one_of_ours_is_told_so_while_held(void)
{
    struct lock_waiter w1 = { .id = 81 }, w2 = { .id = 82 };
    struct lock_grant g;

    w1.deadline_ms = w2.deadline_ms = clock_wall_ms() + 20000;
    CHECK_EQ_INT(acq_wait(be_main, "ob", TOK_A, 10000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "ob", TOK_B, 1000, &w1, &g), BACKEND_HELD);
    CHECK(!g.behind); /* first in the queue, behind the holder only */
    CHECK_EQ_INT(acq_wait(be_main, "ob", TOK_C, 1000, &w2, &g), BACKEND_HELD);
    CHECK(g.behind);
    /* w2 watches w1's place, which stays: the release is heard through
     * w1's watch on h, and w1 is the one to try */
    notes_reset();
    CHECK_EQ_INT(rel(be_main, "ob", TOK_A), BACKEND_OK);
    CHECK(notes_heard("ob", 2000));
    CHECK_EQ_INT(acq_wait(be_main, "ob", TOK_C, 1000, &w2, &g), BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(acq_wait(be_main, "ob", TOK_B, 1000, &w1, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "ob", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(acq_wait(be_main, "ob", TOK_C, 1000, &w2, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "ob", TOK_C), BACKEND_OK);
}

/* One queue for both modes: a shared waiter never overtakes an earlier
 * exclusive one, shared waiters behind shared ones go together, and a
 * try-once acquire never overtakes anyone. */
static void test_fifo_across_modes(void)
{
    struct lock_waiter s1 = { .id = 41 }, x = { .id = 42 }, s2 = { .id = 43 };
    struct lock_grant g;

    s1.deadline_ms = x.deadline_ms = s2.deadline_ms = clock_wall_ms() + 20000;
    CHECK_EQ_INT(acq_wait(be_main, "fm", TOK_A, 10000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "fm", TOK_B, LOCK_SHARED, 0, NULL, 5000, &s1, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(acq_wait(be_main, "fm", TOK_C, 5000, &x, &g), BACKEND_HELD);
    CHECK_EQ_INT(
        acq_kind(be_main, "fm", TOK_D, LOCK_SHARED, 0, NULL, 5000, &s2, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "fm", TOK_A), BACKEND_OK);
    /* free, but queued: nobody overtakes */
    CHECK_EQ_INT(shr("fm", TOK_E, 0, &g), BACKEND_HELD);
    CHECK(g.behind);
    CHECK_EQ_INT(
        acq_kind(be_main, "fm", TOK_D, LOCK_SHARED, 0, NULL, 5000, &s2, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(acq_wait(be_main, "fm", TOK_C, 5000, &x, &g), BACKEND_HELD);
    CHECK(g.behind); /* the holders allow it; s1 goes first */
    CHECK_EQ_INT(
        acq_kind(be_main, "fm", TOK_B, LOCK_SHARED, 0, NULL, 5000, &s1, &g),
        BACKEND_OK);
    CHECK(s1.be_data == NULL);
    /* s2 is behind x, which is behind the shared holder */
    CHECK_EQ_INT(
        acq_kind(be_main, "fm", TOK_D, LOCK_SHARED, 0, NULL, 5000, &s2, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(acq_wait(be_main, "fm", TOK_C, 5000, &x, &g), BACKEND_HELD);
    CHECK(!g.behind);
    CHECK_EQ_INT(rel(be_main, "fm", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "fm", TOK_D, LOCK_SHARED, 0, NULL, 5000, &s2, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(acq_wait(be_main, "fm", TOK_C, 5000, &x, &g), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "fm", TOK_D, LOCK_SHARED, 0, NULL, 5000, &s2, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(rel(be_main, "fm", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "fm", TOK_D, LOCK_SHARED, 0, NULL, 5000, &s2, &g),
        BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "fm", TOK_D), BACKEND_OK);
}

/* Shared waiters are granted together, up to the limit, and the grant of
 * one wakes the next on another instance (its watch on our place). */
static void test_shared_waiters_are_granted_together(void)
{
    struct lock_waiter w1 = { .id = 51 }, w2 = { .id = 52 }, w3 = { .id = 53 };
    struct lock_grant g;
    struct backend *other = NULL;

    CHECK_EQ_INT(zookeeper_backend.open(url, NULL, &other, NULL, 0),
                 BACKEND_OK);
    if (other == NULL)
        return;
    w1.deadline_ms = w2.deadline_ms = w3.deadline_ms = clock_wall_ms() + 20000;
    CHECK_EQ_INT(acq_wait(other, "gt", TOK_A, 10000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(other, "gt", TOK_B, LOCK_SHARED, 2, NULL, 5000, &w1, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(
        acq_kind(be_main, "gt", TOK_C, LOCK_SHARED, 2, NULL, 5000, &w2, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(
        acq_kind(be_main, "gt", TOK_D, LOCK_SHARED, 2, NULL, 5000, &w3, &g),
        BACKEND_HELD);
    CHECK_EQ_INT(rel(other, "gt", TOK_A), BACKEND_OK);
    notes_reset();
    CHECK_EQ_INT(
        acq_kind(other, "gt", TOK_B, LOCK_SHARED, 2, NULL, 5000, &w1, &g),
        BACKEND_OK);
    /* w2 (here) watched w1's place (there) */
    CHECK(notes_heard("gt", 2000));
    CHECK_EQ_INT(
        acq_kind(be_main, "gt", TOK_C, LOCK_SHARED, 2, NULL, 5000, &w2, &g),
        BACKEND_OK);
    /* the limit is reached: w3 waits */
    CHECK_EQ_INT(
        acq_kind(be_main, "gt", TOK_D, LOCK_SHARED, 2, NULL, 5000, &w3, &g),
        BACKEND_HELD);
    CHECK(g.retry_ms > 0 && g.retry_ms <= 5000);
    notes_reset();
    CHECK_EQ_INT(rel(other, "gt", TOK_B), BACKEND_OK);
    CHECK(notes_heard("gt", 2000)); /* w3, first now, watched h */
    CHECK_EQ_INT(
        acq_kind(be_main, "gt", TOK_D, LOCK_SHARED, 2, NULL, 5000, &w3, &g),
        BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "gt", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "gt", TOK_D), BACKEND_OK);
    zookeeper_backend.close(other);
}

/* Re-entry counts holds; a release gives back one (or all); the count
 * stops at LOCK_HOLDS_MAX (set in the store, as a million re-entries
 * would). */
static void test_reentry_counts_holds_up_to_the_cap(void)
{
    struct lock_grant g, r;
    struct lock_info info = { 0 };
    uint32_t holds = 9;
    int64_t expires;
    char data[160];
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    CHECK_EQ_INT(acq_wait(be_main, "H", TOK_A, 5000, NULL, &g), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_B, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(ren(be_main, "H", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "H", 1, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holds, 2);
    expires = info.expires_at_ms;
    lock_info_clear(&info);
    check_sleep_ms(200);
    CHECK_EQ_INT(rel_holds(be_main, "H", TOK_A, false, &holds), BACKEND_OK);
    CHECK_EQ_INT(holds, 1);
    /* one hold back is no renew: the expiry stays */
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "H", 1, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holds, 1);
    CHECK_MSG(info.expires_at_ms <= expires + 20 &&
                  info.expires_at_ms >= expires,
              "expires_at moved by %lld ms",
              (long long)(info.expires_at_ms - expires));
    lock_info_clear(&info);
    CHECK_EQ_INT(acq_wait(be_main, "H", TOK_B, 5000, NULL, &r), BACKEND_HELD);
    CHECK_EQ_INT(rel_holds(be_main, "H", TOK_A, false, &holds), BACKEND_OK);
    CHECK_EQ_INT(holds, 0);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_A, &r), BACKEND_NOT_FOUND);
    /* the cap, and release of all */
    CHECK_EQ_INT(acq_wait(be_main, "H", TOK_A, 5000, NULL, &g), BACKEND_OK);
    snprintf(data, sizeof(data), "lockd2 x 5000 %s 0 %d 0\n", TOK_A,
             LOCK_HOLDS_MAX - 1);
    CHECK_EQ_INT(zoo_set(zh, "/lockd/locks/kSA/h", data, (int)strlen(data), -1),
                 ZOK);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_A, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_A, &r), BACKEND_HOLDS_MAX);
    CHECK_EQ_INT(ren(be_main, "H", TOK_A, 0, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, LOCK_HOLDS_MAX);
    CHECK_EQ_INT(rel_holds(be_main, "H", TOK_A, true, &holds), BACKEND_OK);
    CHECK_EQ_INT(holds, 0);
    CHECK_EQ_INT(rel(be_main, "H", TOK_A), BACKEND_NOT_FOUND);
    /* a shared holder re-enters too */
    CHECK_EQ_INT(shr("H", TOK_B, 0, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("H", TOK_C, 0, &g), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_B, &r), BACKEND_OK);
    CHECK_EQ_INT(r.holds, 2);
    CHECK_EQ_INT(r.mode, LOCK_SHARED);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_D, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel_holds(be_main, "H", TOK_B, false, &holds), BACKEND_OK);
    CHECK_EQ_INT(holds, 1);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_B, &r), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "H", TOK_B, &r), BACKEND_OK);
    CHECK_EQ_INT(rel_holds(be_main, "H", TOK_B, true, &holds), BACKEND_OK);
    CHECK_EQ_INT(holds, 0);
    CHECK_EQ_INT(rel(be_main, "H", TOK_B), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "H", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "H", TOK_C), BACKEND_NOT_FOUND);
    zookeeper_close(zh);
}

static void test_idempotency_key_replays_a_live_grant(void)
{
    struct lock_waiter w = { .id = 61 };
    struct lock_grant g, r;
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    CHECK_EQ_INT(acq_kind(be_main, "R", TOK_A, LOCK_EXCLUSIVE, 0, "idem-1",
                          5000, NULL, &g),
                 BACKEND_OK);
    CHECK(!g.replay);
    check_sleep_ms(50);
    CHECK_EQ_INT(acq_kind(be_main, "R", TOK_B, LOCK_EXCLUSIVE, 0, "idem-1",
                          9000, NULL, &r),
                 BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, TOK_A);
    CHECK_EQ_U64(r.fence, g.fence);
    CHECK(r.ttl_ms >= 1 && r.ttl_ms < 5000);
    CHECK_EQ_INT(r.holds, 1);
    CHECK_EQ_INT(
        acq_kind(be_main, "R", TOK_B, LOCK_SHARED, 0, "idem-1", 9000, NULL, &r),
        BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(acq_kind(be_main, "R", TOK_B, LOCK_EXCLUSIVE, 0, "idem-2",
                          9000, NULL, &r),
                 BACKEND_HELD);
    /* a waiter's replay gives its place up */
    w.deadline_ms = clock_wall_ms() + 10000;
    CHECK_EQ_INT(acq_wait(be_main, "R", TOK_C, 5000, &w, &r), BACKEND_HELD);
    CHECK_EQ_INT(raw_waiters(zh, "/lockd/locks/kUg"), 1);
    CHECK_EQ_INT(acq_kind(be_main, "R", TOK_C, LOCK_EXCLUSIVE, 0, "idem-1",
                          5000, &w, &r),
                 BACKEND_OK);
    CHECK(r.replay);
    CHECK(w.be_data == NULL);
    CHECK_EQ_INT(raw_waiters(zh, "/lockd/locks/kUg"), 0);
    CHECK_EQ_INT(rel(be_main, "R", TOK_A), BACKEND_OK);
    /* released: the key names no grant any more */
    CHECK_EQ_INT(
        acq_kind(be_main, "R", TOK_B, LOCK_SHARED, 3, "idem-1", 5000, NULL, &g),
        BACKEND_OK);
    CHECK(!g.replay);
    CHECK_EQ_INT(
        acq_kind(be_main, "R", TOK_C, LOCK_SHARED, 3, "idem-s", 5000, NULL, &g),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "R", TOK_D, LOCK_SHARED, 3, "idem-1", 5000, NULL, &r),
        BACKEND_OK);
    CHECK(r.replay);
    CHECK_STR_EQ(r.token, TOK_B);
    CHECK_EQ_INT(r.limit, 3);
    CHECK_EQ_INT(
        acq_kind(be_main, "R", TOK_D, LOCK_SHARED, 2, "idem-s", 5000, NULL, &r),
        BACKEND_IDEM_CONFLICT);
    CHECK_EQ_INT(rel(be_main, "R", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "R", TOK_C), BACKEND_OK);
    zookeeper_close(zh);
}

static void test_inspect_lists_shared_holders_by_fence(void)
{
    struct lock_grant g[3], x;
    struct lock_info info = { 0 };
    static const char *const toks[] = { TOK_A, TOK_B, TOK_C };
    static const char *const owners[] = { "one", NULL, "three" };
    static const uint64_t ttls[] = { 4000, 8000, 6000 };

    for (int i = 0; i < 3; i++) {
        struct lock_req req = { .key = "in",
                                .key_len = 2,
                                .token = toks[i],
                                .owner = owners[i],
                                .ttl_ms = ttls[i],
                                .mode = LOCK_SHARED,
                                .limit = 5 };
        memset(&g[i], 0, sizeof(g[i]));
        CHECK_EQ_INT(zookeeper_backend.acquire(be_main, &req, &g[i]),
                     BACKEND_OK);
    }
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "in", 2, &info),
                 BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_SHARED);
    CHECK_EQ_INT(info.limit, 5);
    CHECK_EQ_INT(info.holder_count, 3);
    CHECK_EQ_INT(info.nholders, 3);
    CHECK(!info.has_owner);
    CHECK_EQ_U64(info.fence, g[2].fence);
    CHECK_EQ_INT(info.expires_at_ms, g[1].expires_at_ms);
    CHECK(info.ttl_ms > 7000 && info.ttl_ms <= 8000);
    for (uint32_t i = 0; info.holders != NULL && i < info.nholders; i++) {
        CHECK_EQ_U64(info.holders[i].fence, g[i].fence);
        CHECK_EQ_INT(info.holders[i].holds, 1);
        CHECK(info.holders[i].ttl_ms >= 1 && info.holders[i].ttl_ms <= ttls[i]);
        CHECK_EQ_INT(info.holders[i].has_owner, owners[i] != NULL);
        if (owners[i] != NULL)
            CHECK_STR_EQ(info.holders[i].owner, owners[i]);
    }
    lock_info_clear(&info);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(rel(be_main, "in", toks[i]), BACKEND_OK);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "in", 2, &info),
                 BACKEND_NOT_FOUND);
    CHECK(info.holders == NULL);
    CHECK_EQ_INT(acq_full(be_main, "in", TOK_D, "me", 3000, NULL, &x),
                 BACKEND_OK);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "in", 2, &info),
                 BACKEND_OK);
    CHECK_EQ_INT(info.mode, LOCK_EXCLUSIVE);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_INT(info.nholders, 1);
    CHECK_EQ_INT(info.holds, 1);
    CHECK(info.has_owner);
    CHECK_STR_EQ(info.owner, "me");
    CHECK(info.holders != NULL && info.holders[0].fence == x.fence);
    lock_info_clear(&info);
    CHECK_EQ_INT(rel(be_main, "in", TOK_D), BACKEND_OK);
}

/* Shared holders expire one by one, each at its own TTL; a waiter behind
 * them is told to retry when the first one's TTL passes. */
static void test_shared_holders_expire_one_by_one(void)
{
    struct lock_waiter w = { .id = 71 };
    struct lock_grant a, b, c, r;
    struct lock_info info = { 0 };

    CHECK_EQ_INT(
        acq_kind(be_main, "S", TOK_A, LOCK_SHARED, 2, NULL, 300, NULL, &a),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "S", TOK_B, LOCK_SHARED, 2, NULL, 900, NULL, &b),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "S", TOK_C, LOCK_SHARED, 2, NULL, 5000, NULL, &c),
        BACKEND_HELD);
    CHECK(c.retry_ms > 0 && c.retry_ms <= 300);
    w.deadline_ms = clock_wall_ms() + 10000;
    CHECK_EQ_INT(acq_wait(be_main, "S", TOK_D, 5000, &w, &r), BACKEND_HELD);
    CHECK(r.retry_ms > 0 && r.retry_ms <= 300);
    check_sleep_ms(350);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "S", 1, &info), BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    CHECK_EQ_U64(info.fence, b.fence);
    lock_info_clear(&info);
    CHECK_EQ_INT(ren(be_main, "S", TOK_A, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "S", TOK_A), BACKEND_MISMATCH);
    /* the exclusive waiter is first: still held by B */
    CHECK_EQ_INT(acq_wait(be_main, "S", TOK_D, 5000, &w, &r), BACKEND_HELD);
    CHECK(r.retry_ms > 0 && r.retry_ms <= 600);
    check_sleep_ms((int)r.retry_ms + 5);
    CHECK_EQ_INT(acq_wait(be_main, "S", TOK_D, 5000, &w, &r), BACKEND_OK);
    CHECK(r.fence > b.fence);
    CHECK_EQ_INT(ren(be_main, "S", TOK_B, 0, &r), BACKEND_MISMATCH);
    CHECK_EQ_INT(rel(be_main, "S", TOK_D), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "S", TOK_B, 0, &r), BACKEND_NOT_FOUND);
}

/* Two instances granting shared under a limit never exceed it. */
struct share_race {
    struct backend *be;
    const char *tok;
    enum backend_result r;
};

static void *share_racer(void *arg)
{
    struct share_race *s = arg;
    struct lock_grant g;

    s->r =
        acq_kind(s->be, "race", s->tok, LOCK_SHARED, 2, NULL, 5000, NULL, &g);
    return NULL;
}

static void test_concurrent_shared_grants_keep_the_limit(void)
{
    static const char *const toks[] = { TOK_A, TOK_B, TOK_C, TOK_D, TOK_E };
    struct share_race s[5];
    pthread_t th[5];
    struct backend *other = NULL;
    struct lock_info info = { 0 };
    int ok = 0;

    CHECK_EQ_INT(zookeeper_backend.open(url, NULL, &other, NULL, 0),
                 BACKEND_OK);
    if (other == NULL)
        return;
    for (int i = 0; i < 5; i++) {
        s[i] = (struct share_race){ .be = i % 2 ? other : be_main,
                                    .tok = toks[i] };
        pthread_create(&th[i], NULL, share_racer, &s[i]);
    }
    for (int i = 0; i < 5; i++) {
        pthread_join(th[i], NULL);
        ok += s[i].r == BACKEND_OK;
        CHECK(s[i].r == BACKEND_OK || s[i].r == BACKEND_HELD);
    }
    CHECK_EQ_INT(ok, 2);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "race", 4, &info),
                 BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 2);
    lock_info_clear(&info);
    for (int i = 0; i < 5; i++)
        if (s[i].r == BACKEND_OK)
            CHECK_EQ_INT(rel(other, "race", toks[i]), BACKEND_OK);
    zookeeper_backend.close(other);
}

/* ---- several keys at once ---- */

/* A key's node: /lockd/locks/k<base64url(key), unpadded>. */
static void key_node(const char *key, char *out, size_t cap)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const unsigned char *k = (const unsigned char *)key;
    size_t n = strlen(key), o = (size_t)snprintf(out, cap, "/lockd/locks/k");

    for (size_t i = 0; i < n && o + 5 < cap; i += 3) {
        uint32_t v = (uint32_t)k[i] << 16 |
                     (i + 1 < n ? (uint32_t)k[i + 1] << 8 : 0) |
                     (i + 2 < n ? k[i + 2] : 0);
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        if (i + 1 < n)
            out[o++] = tab[v >> 6 & 63];
        if (i + 2 < n)
            out[o++] = tab[v & 63];
    }
    out[o] = '\0';
}

/* key's h as a single exclusive grant writes it: data "lockd2 x <ttl>
 * <tok> <grant_by> 1 0\n\n<owner>", its marker beside it, nothing else
 * under the key's node; *st its stat. */
static void check_single_layout(zhandle_t *zh,
                                const char *key,
                                const char *tok,
                                uint64_t ttl,
                                const char *owner,
                                struct Stat *st)
{
    char parent[256], path[320], data[512], head[128], tail[160];
    struct String_vector kids = { 0 };
    int len = sizeof(data) - 1;

    key_node(key, parent, sizeof(parent));
    snprintf(path, sizeof(path), "%s/h", parent);
    CHECK_EQ_INT(zoo_get(zh, path, 0, data, &len, st), ZOK);
    data[len > 0 ? len : 0] = '\0';
    snprintf(head, sizeof(head), "lockd2 x %llu %s ", (unsigned long long)ttl,
             tok);
    snprintf(tail, sizeof(tail), " 1 0\n\n%s", owner);
    CHECK_MSG(strncmp(data, head, strlen(head)) == 0, "%s: %s", key, data);
    CHECK_MSG(strlen(data) > strlen(tail) &&
                  strcmp(data + strlen(data) - strlen(tail), tail) == 0,
              "%s: %s", key, data);
    snprintf(path, sizeof(path), "%s/t%s", parent, tok);
    CHECK_EQ_INT(zoo_exists(zh, path, 0, NULL), ZOK);
    CHECK_EQ_INT(zoo_get_children(zh, parent, 0, &kids), ZOK);
    CHECK_EQ_INT(kids.count, 2);
    deallocate_String_vector(&kids);
}

/* A multi grant writes on every key what a single grant writes, so every
 * single-key call works on each key afterwards; its fences pass every
 * earlier grant's; a release drops the key nodes nobody waits on. */
static void test_multi_grant_writes_the_single_layout(void)
{
    static const char *const keys[] = { "m/a", "m/b", "m/c", NULL };
    char parent[256];
    struct lock_multi_grant mg, mr;
    struct lock_grant g, old;
    struct lock_info info = { 0 };
    struct Stat st;
    uint32_t left = 0;
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    /* m/b: a node left empty (its lockd gone, say): deleted and made
     * again in the multi; m/c: granted and released before */
    key_node("m/b", parent, sizeof(parent));
    CHECK_EQ_INT(raw_node(zh, parent, NULL), ZOK);
    CHECK_EQ_INT(acq(be_main, "m/c", TOK_A, 5000, &old), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "m/c", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_B, "multi", 5000, &mg),
                 BACKEND_OK);
    CHECK_EQ_U64(mg.ttl_ms, 5000);
    CHECK(mg.expires_at_ms > clock_wall_ms() + 4000);
    CHECK(mg.fences[2] > old.fence);
    for (int i = 0; i < 3; i++) {
        check_single_layout(zh, keys[i], TOK_B, 5000, "multi", &st);
        CHECK_EQ_U64(mg.fences[i], (uint64_t)st.czxid);
        CHECK_EQ_INT(
            zookeeper_backend.inspect(be_main, keys[i], strlen(keys[i]), &info),
            BACKEND_OK);
        CHECK_EQ_U64(info.fence, mg.fences[i]);
        CHECK_STR_EQ(info.owner, "multi");
        CHECK_EQ_INT(info.holds, 1);
        lock_info_clear(&info);
    }
    /* each key is an ordinary exclusive lock */
    CHECK_EQ_INT(acq(be_main, "m/a", TOK_A, 5000, &g), BACKEND_HELD);
    CHECK(g.retry_ms > 4000 && g.retry_ms <= 5000);
    CHECK_EQ_INT(ren(be_main, "m/a", TOK_B, 8000, &g), BACKEND_OK);
    CHECK_EQ_U64(g.fence, mg.fences[0]);
    CHECK_EQ_INT(reenter(be_main, "m/c", TOK_B, &g), BACKEND_OK);
    CHECK_EQ_INT(g.holds, 2);
    CHECK_EQ_INT(rel_holds(be_main, "m/c", TOK_B, false, &left), BACKEND_OK);
    CHECK_EQ_INT(left, 1);
    /* TTL 0: each key keeps its own; the answer is the least */
    CHECK_EQ_INT(zkm(be_main, ZKM_RENEW, keys, TOK_B, NULL, 0, &mr),
                 BACKEND_OK);
    CHECK_EQ_U64(mr.ttl_ms, 5000);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_U64(mr.fences[i], mg.fences[i]);
    CHECK_EQ_INT(rel(be_main, "m/a", TOK_B), BACKEND_OK);
    CHECK_EQ_INT(zkm(be_main, ZKM_RELEASE, keys, TOK_B, NULL, 0, &mr),
                 BACKEND_OK);
    CHECK(!mr.released[0] && mr.released[1] && mr.released[2]);
    for (int i = 0; i < 3; i++) {
        key_node(keys[i], parent, sizeof(parent));
        CHECK_MSG(zoo_exists(zh, parent, 0, NULL) == ZNONODE, "%s", keys[i]);
    }
    CHECK_EQ_INT(zkm(be_main, ZKM_RELEASE, keys, TOK_B, NULL, 0, &mr),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_C, NULL, 5000, &mr),
                 BACKEND_OK);
    for (int i = 0; i < 3; i++)
        CHECK(mr.fences[i] > mg.fences[i]);
    CHECK_EQ_INT(zkm(be_main, ZKM_RELEASE, keys, TOK_C, NULL, 0, &mr),
                 BACKEND_OK);
    zookeeper_close(zh);
}

/* What inject_hook() does: once, when it hears trigger, queue a waiter
 * under parent through zh (another session). */
static struct {
    pthread_mutex_t mu;
    zhandle_t *zh;
    const char *trigger;
    char parent[256];
    char made[320];
    bool armed;
} inj = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void inject_hook(void *arg, const char *key, size_t len)
{
    char path[320];

    (void)arg;
    pthread_mutex_lock(&inj.mu);
    if (inj.armed && len == strlen(inj.trigger) &&
        memcmp(key, inj.trigger, len) == 0) {
        inj.armed = false;
        snprintf(path, sizeof(path), "%s/wffffffffffffffff-1-%lld-", inj.parent,
                 (long long)clock_wall_ms() + 60000);
        /* the sweep may have reaped the empty key node meanwhile */
        (void)raw_node(inj.zh, inj.parent, NULL);
        if (zoo_create(inj.zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE,
                       ZOO_EPHEMERAL_SEQUENTIAL, inj.made,
                       sizeof(inj.made)) != ZOK)
            inj.made[0] = '\0';
    }
    pthread_mutex_unlock(&inj.mu);
}

/* The multi is the check: a waiter that queues on w/y after the call read
 * it free (here: while it reaps w/x's expired holder, which notifies w/x)
 * fails the whole grant, and neither key is taken. */
static void test_multi_waiter_after_the_read_fails_the_whole_grant(void)
{
    static const char *const keys[] = { "w/x", "w/y", NULL };
    char xnode[256], path[320];
    struct lock_multi_grant mg;
    struct lock_info info = { 0 };
    struct backend *be;
    struct Stat st;
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    be = be_open(url, inject_hook, NULL);
    CHECK(be != NULL);
    if (be == NULL) {
        zookeeper_close(zh);
        return;
    }
    key_node("w/x", xnode, sizeof(xnode));
    CHECK_EQ_INT(raw_node(zh, xnode, NULL), ZOK);
    raw_holder(zh, xnode, TOK_A, 1, 0, &st);
    key_node("w/y", inj.parent, sizeof(inj.parent));
    CHECK_EQ_INT(raw_node(zh, inj.parent, NULL), ZOK); /* empty, as read */
    /* armed before w/x's holder expires: should the keeper's sweep reap it
     * before the acquire does, its notice queues the waiter then, and the
     * acquire still finds w/y taken (else it took both, the hook unheard) */
    pthread_mutex_lock(&inj.mu);
    inj.zh = zh;
    inj.trigger = "w/x";
    inj.armed = true;
    pthread_mutex_unlock(&inj.mu);
    check_sleep_ms(20); /* w/x expired */
    CHECK_EQ_INT(zkm(be, ZKM_ACQUIRE, keys, TOK_B, NULL, 5000, &mg),
                 BACKEND_HELD);
    CHECK(inj.made[0] != '\0');
    CHECK(!mg.held[0] && mg.held[1]);
    CHECK_EQ_U64(mg.retry_ms, 0); /* a waiter only: unknown */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(zookeeper_backend.inspect(be, keys[i], 3, &info),
                     BACKEND_NOT_FOUND);
        lock_info_clear(&info);
    }
    snprintf(path, sizeof(path), "%s/h", inj.parent);
    CHECK_EQ_INT(zoo_exists(zh, path, 0, NULL), ZNONODE);
    CHECK_EQ_INT(zoo_delete(zh, inj.made, -1), ZOK);
    CHECK_EQ_INT(zkm(be, ZKM_ACQUIRE, keys, TOK_B, NULL, 5000, &mg),
                 BACKEND_OK);
    CHECK_EQ_INT(zkm(be, ZKM_RELEASE, keys, TOK_B, NULL, 0, &mg), BACKEND_OK);
    zookeeper_backend.close(be);
    zookeeper_close(zh);
}

/* ZooKeeper tells only those who watch: a HELD answer leaves watches that
 * notify this instance when a held key's holder leaves (released through
 * another instance) or its waiters do. */
static void test_multi_held_keys_notify_when_they_free(void)
{
    static const char *const keys[] = { "n/0", "n/1", "n/2", NULL };
    char parent[256], path[320], made[320];
    struct lock_multi_grant mg;
    struct lock_grant g;
    struct backend *other = NULL;
    zhandle_t *zh = raw_open();

    CHECK_EQ_INT(zookeeper_backend.open(url, NULL, &other, NULL, 0),
                 BACKEND_OK);
    if (zh == NULL || other == NULL) {
        zookeeper_backend.close(other);
        if (zh != NULL)
            zookeeper_close(zh);
        return;
    }
    CHECK_EQ_INT(acq(other, "n/1", TOK_A, 5000, &g), BACKEND_OK);
    key_node("n/2", parent, sizeof(parent));
    CHECK_EQ_INT(raw_node(zh, parent, NULL), ZOK);
    snprintf(path, sizeof(path), "%s/wffffffffffffffff-7-%lld-", parent,
             (long long)clock_wall_ms() + 60000);
    CHECK_EQ_INT(zoo_create(zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE,
                            ZOO_EPHEMERAL_SEQUENTIAL, made, sizeof(made)),
                 ZOK);
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_B, NULL, 5000, &mg),
                 BACKEND_HELD);
    CHECK(!mg.held[0] && mg.held[1] && mg.held[2]);
    CHECK(mg.retry_ms > 4000 && mg.retry_ms <= 5000);
    notes_watch("n/1", 3);
    CHECK_EQ_INT(rel(other, "n/1", TOK_A), BACKEND_OK);
    CHECK_MSG(notes_watched(3000) >= 1, "the release was not heard");
    notes_watch("n/2", 3);
    CHECK_EQ_INT(zoo_delete(zh, made, -1), ZOK);
    CHECK_MSG(notes_watched(3000) >= 1, "the waiter's leaving was not heard");
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_B, NULL, 5000, &mg),
                 BACKEND_OK);
    CHECK_EQ_INT(zkm(be_main, ZKM_RELEASE, keys, TOK_B, NULL, 0, &mg),
                 BACKEND_OK);
    zookeeper_backend.close(other);
    zookeeper_close(zh);
}

/* A renew of several keys is one multi: when one key is not the token's,
 * no key's holder is written at all. A release leaves the node of a key
 * someone waits on, and that waiter's turn comes. */
static void test_multi_renew_writes_nothing_unless_all_held(void)
{
    static const char *const mine[] = { "r/a", "r/b", NULL };
    static const char *const with_c[] = { "r/a", "r/c", "r/b", NULL };
    static const char *const with_d[] = { "r/a", "r/b", "r/d", NULL };
    char parent[256], path[320];
    struct lock_multi_grant mg, mr;
    struct lock_waiter w = { .id = 31 };
    struct lock_grant g;
    struct Stat before, after;
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    key_node("r/a", parent, sizeof(parent));
    snprintf(path, sizeof(path), "%s/h", parent);
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, mine, TOK_A, NULL, 5000, &mg),
                 BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "r/c", TOK_B, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(zoo_exists(zh, path, 0, &before), ZOK);
    CHECK_EQ_INT(zkm(be_main, ZKM_RENEW, with_c, TOK_A, NULL, 9000, &mr),
                 BACKEND_MISMATCH);
    CHECK_EQ_INT(mr.bad, 1);
    CHECK_EQ_INT(zkm(be_main, ZKM_RENEW, with_d, TOK_A, NULL, 9000, &mr),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(mr.bad, 2);
    CHECK_EQ_INT(zoo_exists(zh, path, 0, &after), ZOK);
    CHECK_EQ_INT(after.version, before.version);
    CHECK_EQ_INT(zkm(be_main, ZKM_RENEW, mine, TOK_A, NULL, 9000, &mr),
                 BACKEND_OK);
    CHECK_EQ_U64(mr.ttl_ms, 9000);
    CHECK_EQ_INT(zoo_exists(zh, path, 0, &after), ZOK);
    CHECK_EQ_INT(after.version, before.version + 1);
    /* r/b has a waiter: its node stays for it */
    w.deadline_ms = clock_wall_ms() + 10000;
    CHECK_EQ_INT(acq_wait(be_main, "r/b", TOK_C, 5000, &w, &g), BACKEND_HELD);
    CHECK_EQ_INT(zkm(be_main, ZKM_RELEASE, with_c, TOK_A, NULL, 0, &mr),
                 BACKEND_OK);
    CHECK(mr.released[0] && !mr.released[1] && mr.released[2]);
    CHECK_EQ_INT(zoo_exists(zh, parent, 0, NULL), ZNONODE);
    key_node("r/b", parent, sizeof(parent));
    CHECK_EQ_INT(raw_waiters(zh, parent), 1);
    CHECK_EQ_INT(acq_wait(be_main, "r/b", TOK_C, 5000, &w, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "r/b", TOK_C), BACKEND_OK);
    CHECK_EQ_INT(ren(be_main, "r/c", TOK_B, 0, &g), BACKEND_OK);
    CHECK_EQ_INT(rel(be_main, "r/c", TOK_B), BACKEND_OK);
    zookeeper_close(zh);
}

/* A shared holder holds a key against a multi grant; a token that holds
 * keys shared and exclusive renews and releases them all at once, and
 * the other shared holders stay. */
static void test_multi_calls_with_shared_holders(void)
{
    static const char *const keys[] = { "s/1", "s/2", NULL };
    struct lock_multi_grant mg;
    struct lock_info info = { 0 };
    struct lock_grant g;

    CHECK_EQ_INT(shr("s/1", TOK_A, 0, &g), BACKEND_OK);
    CHECK_EQ_INT(shr("s/1", TOK_B, 0, &g), BACKEND_OK);
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_C, NULL, 5000, &mg),
                 BACKEND_HELD);
    CHECK(mg.held[0] && !mg.held[1]);
    CHECK(mg.retry_ms > 4000 && mg.retry_ms <= 5000);
    CHECK_EQ_INT(acq(be_main, "s/2", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_INT(zkm(be_main, ZKM_RENEW, keys, TOK_A, NULL, 7000, &mg),
                 BACKEND_OK);
    CHECK_EQ_U64(mg.ttl_ms, 7000);
    CHECK_EQ_INT(zkm(be_main, ZKM_RELEASE, keys, TOK_A, NULL, 0, &mg),
                 BACKEND_OK);
    CHECK(mg.released[0] && mg.released[1]);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "s/1", 3, &info),
                 BACKEND_OK);
    CHECK_EQ_INT(info.holder_count, 1);
    lock_info_clear(&info);
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "s/2", 3, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be_main, "s/1", TOK_B), BACKEND_OK);
}

/* A grant is answered only while every instance would call it held: with
 * a TTL of 1 ms none of it is surely left when the answer comes, so the
 * multi grant is a 503, never a 201, and its holders are freed at once. */
static void test_multi_grant_answered_too_late_is_freed(void)
{
    static const char *const keys[] = { "late/1", "late/2", NULL };
    char parent[256], path[320];
    struct lock_multi_grant mg;
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_A, NULL, 1, &mg),
                 BACKEND_UNAVAILABLE);
    for (int i = 0; i < 2; i++) {
        key_node(keys[i], parent, sizeof(parent));
        snprintf(path, sizeof(path), "%s/h", parent);
        CHECK_MSG(zoo_exists(zh, path, 0, NULL) == ZNONODE, "%s", keys[i]);
        snprintf(path, sizeof(path), "%s/t" TOK_A, parent);
        CHECK_MSG(zoo_exists(zh, path, 0, NULL) == ZNONODE, "%s", keys[i]);
    }
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_B, NULL, 5000, &mg),
                 BACKEND_OK);
    CHECK_EQ_INT(zkm(be_main, ZKM_RENEW, keys, TOK_B, NULL, 1, &mg),
                 BACKEND_UNAVAILABLE);
    check_sleep_ms(10); /* past the 1 ms and the clock's slack */
    CHECK_EQ_INT(zkm(be_main, ZKM_RELEASE, keys, TOK_B, NULL, 0, &mg),
                 BACKEND_NOT_FOUND);
    zookeeper_close(zh);
}

/* What regrant_hook() does: once, when it hears key "sw/x" (the sweep
 * reaping its expired holder), grant it again to the same token through
 * zh, as a client reusing its token would, between the sweep's listing
 * and its dropping of markers it judged stray. */
static struct {
    pthread_mutex_t mu;
    zhandle_t *zh;
    char parent[256];
    bool armed, fired;
} regr = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void regrant_hook(void *arg, const char *key, size_t len)
{
    char path[320], data[128];

    (void)arg;
    pthread_mutex_lock(&regr.mu);
    if (regr.armed && len == 4 && memcmp(key, "sw/x", 4) == 0) {
        regr.armed = false;
        snprintf(data, sizeof(data), "lockd1 60000 %s %lld", TOK_A,
                 (long long)clock_wall_ms() + 60000);
        snprintf(path, sizeof(path), "%s/h", regr.parent);
        regr.fired = raw_node(regr.zh, path, data) == ZOK;
        snprintf(path, sizeof(path), "%s/t%s", regr.parent, TOK_A);
        regr.fired = raw_node(regr.zh, path, NULL) == ZOK && regr.fired;
    }
    pthread_mutex_unlock(&regr.mu);
}

/* The sweep lists a key's node, then reads h, then drops the markers it
 * judged stray: by then the listed marker may be a new grant's (the same
 * token, the key granted again). Dropping it left h without its marker,
 * which no release, renew or reap can delete: the key held for ever. */
static void test_sweep_never_drops_the_marker_of_a_new_grant(void)
{
    char mpath[320], hpath[320];
    struct backend *be;
    struct Stat st;
    bool fired = false;
    char u[192], node[200];
    zhandle_t *zh = raw_open();

    if (zh == NULL)
        return;
    /* a chroot of its own: no other handle's sweep (nor thousands of
     * other tests' keys) between ours and the key */
    snprintf(u, sizeof(u), "zookeeper://127.0.0.1:%d/swx", srv.port);
    be = be_open(u, regrant_hook, NULL);
    CHECK(be != NULL);
    key_node("sw/x", node, sizeof(node));
    snprintf(regr.parent, sizeof(regr.parent), "/swx%s", node);
    snprintf(hpath, sizeof(hpath), "%s/h", regr.parent);
    snprintf(mpath, sizeof(mpath), "%s/t%s", regr.parent, TOK_A);
    /* a sweep may come just before the holder expires: try again */
    for (int i = 0; be != NULL && i < 8 && !fired; i++) {
        if (zoo_exists(zh, hpath, 0, NULL) == ZNONODE) {
            zoo_delete(zh, mpath, -1);
            raw_node(zh, regr.parent, NULL); /* a sweep may have dropped it */
            raw_holder(zh, regr.parent, TOK_A, 1, 0, &st); /* expired */
        }
        pthread_mutex_lock(&regr.mu);
        regr.zh = zh;
        regr.armed = true;
        pthread_mutex_unlock(&regr.mu);
        for (int j = 0;
             j < 60 && zoo_exists(zh, hpath, 0, NULL) == ZOK && !fired; j++) {
            check_sleep_ms(50);
            pthread_mutex_lock(&regr.mu);
            fired = regr.fired;
            pthread_mutex_unlock(&regr.mu);
        }
        pthread_mutex_lock(&regr.mu);
        regr.armed = false;
        fired = regr.fired;
        pthread_mutex_unlock(&regr.mu);
    }
    CHECK_MSG(fired, "our sweep never reaped the expired holder");
    check_sleep_ms(300); /* the sweep goes on with the key's markers */
    CHECK_EQ_INT(zoo_exists(zh, hpath, 0, NULL), ZOK);
    CHECK_EQ_INT(zoo_exists(zh, mpath, 0, NULL), ZOK);
    CHECK_EQ_INT(rel(be, "sw/x", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(zoo_exists(zh, hpath, 0, NULL), ZNONODE);
    if (be != NULL)
        zookeeper_backend.close(be);
    zookeeper_close(zh);
}

/* The largest request: 64 keys of LOCK_KEY_MAX bytes in one multi (about
 * 400 kB, under ZooKeeper's 1 MB jute.maxbuffer). */
static void test_multi_of_64_longest_keys(void)
{
    static char names[LOCK_MULTI_MAX][LOCK_KEY_MAX + 1];
    const char *keys[LOCK_MULTI_MAX + 1];
    struct lock_multi_grant mg;
    int64_t t0;

    for (int i = 0; i < LOCK_MULTI_MAX; i++) {
        memset(names[i], 'a' + i % 26, LOCK_KEY_MAX);
        snprintf(names[i], 8, "%02d/", i);
        names[i][3] = 'z';
        names[i][LOCK_KEY_MAX] = '\0';
        keys[i] = names[i];
    }
    keys[LOCK_MULTI_MAX] = NULL;
    t0 = check_mono_ms();
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_A, "o", 5000, &mg),
                 BACKEND_OK);
    printf("  64 keys of 512 bytes: acquire %lld ms\n",
           (long long)(check_mono_ms() - t0));
    for (int i = 0; i < LOCK_MULTI_MAX; i++)
        CHECK(mg.fences[i] > 0);
    CHECK_EQ_INT(zkm(be_main, ZKM_ACQUIRE, keys, TOK_B, NULL, 5000, &mg),
                 BACKEND_HELD);
    CHECK(mg.held[0] && mg.held[LOCK_MULTI_MAX - 1]);
    CHECK_EQ_INT(zkm(be_main, ZKM_RENEW, keys, TOK_A, NULL, 6000, &mg),
                 BACKEND_OK);
    CHECK_EQ_INT(zkm(be_main, ZKM_RELEASE, keys, TOK_A, NULL, 0, &mg),
                 BACKEND_OK);
    for (int i = 0; i < LOCK_MULTI_MAX; i++)
        CHECK(mg.released[i]);
}

/* Several instances take overlapping sets of keys (and single keys) at
 * once: a key is never held twice, and nobody waits on anybody. */
static struct {
    atomic_int owners[4];
    atomic_int overlaps;
    atomic_int grants;
    atomic_int errors;
} race;

struct multi_racer {
    struct backend *be;
    int id;
};

static const char *const race_keys[4] = { "x/0", "x/1", "x/2", "x/3" };

static void *multi_racer(void *arg)
{
    struct multi_racer *r = arg;
    char tok[40];
    struct lock_multi_grant mg;
    const char *keys[3] = { race_keys[r->id % 3], race_keys[r->id % 3 + 1],
                            NULL };

    for (int round = 0; round < 30; round++) {
        enum backend_result res;
        snprintf(tok, sizeof(tok), "%08x%08x%016x", (unsigned)r->id,
                 (unsigned)round, 0xabcdu);
        res = zkm(r->be, ZKM_ACQUIRE, keys, tok, NULL, 5000, &mg);
        if (res == BACKEND_HELD)
            continue;
        if (res != BACKEND_OK) {
            atomic_fetch_add(&race.errors, 1);
            continue;
        }
        atomic_fetch_add(&race.grants, 1);
        for (int k = 0; k < 2; k++)
            if (atomic_fetch_add(&race.owners[r->id % 3 + k], 1) != 0)
                atomic_fetch_add(&race.overlaps, 1);
        check_sleep_ms(5);
        for (int k = 0; k < 2; k++)
            atomic_fetch_sub(&race.owners[r->id % 3 + k], 1);
        if (zkm(r->be, ZKM_RELEASE, keys, tok, NULL, 0, &mg) != BACKEND_OK)
            atomic_fetch_add(&race.errors, 1);
    }
    return NULL;
}

static void test_multi_overlapping_grants_never_share_a_key(void)
{
    struct backend *other = NULL;
    struct multi_racer rs[4];
    pthread_t th[4];

    CHECK_EQ_INT(zookeeper_backend.open(url, NULL, &other, NULL, 0),
                 BACKEND_OK);
    if (other == NULL)
        return;
    memset(&race, 0, sizeof(race));
    for (int i = 0; i < 4; i++) {
        rs[i] = (struct multi_racer){ .be = i % 2 ? other : be_main, .id = i };
        pthread_create(&th[i], NULL, multi_racer, &rs[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_INT(atomic_load(&race.overlaps), 0);
    CHECK_EQ_INT(atomic_load(&race.errors), 0);
    CHECK(atomic_load(&race.grants) > 0);
    printf("  %d grants of 120 tries\n", atomic_load(&race.grants));
    zookeeper_backend.close(other);
}

/* ---- list, force_release, held_count, takeover, grant time ---- */

/* A handle on chroot /<name> of the test server (its own keys). */
static struct backend *open_chroot(const char *name)
{
    char u[192];

    snprintf(u, sizeof(u),
             "zookeeper://127.0.0.1:%d/%s?session_timeout_ms=4000", srv.port,
             name);
    return open_be(u);
}

static void tok_of(int i, char *out)
{
    snprintf(out, LOCK_TOKEN_MAX, "%032x", i + 1);
}

/* Every page of prefix, limit per page, into keys (cap of them, each
 * copied); the number of keys, or -1 on a failed call or too many pages. */
static int list_all(struct backend *be,
                    const char *prefix,
                    uint32_t limit,
                    char (*keys)[LOCK_KEY_MAX + 1],
                    struct lock_entry *last_entries,
                    int cap)
{
    struct lock_entry *ents = calloc(limit, sizeof(*ents));
    struct lock_list out;
    char after[LOCK_KEY_MAX + 1];
    size_t after_len = 0;
    bool has_after = false;
    int n = 0;

    for (int page = 0; ents != NULL && page < 1000; page++) {
        struct lock_list_req req = { .prefix = prefix,
                                     .prefix_len = strlen(prefix),
                                     .after = has_after ? after : NULL,
                                     .after_len = after_len,
                                     .limit = limit };
        memset(&out, 0, sizeof(out));
        out.entries = ents;
        if (zookeeper_backend.list(be, &req, &out) != BACKEND_OK)
            break;
        CHECK(out.n <= limit);
        for (size_t i = 0; i < out.n && n < cap; i++) {
            memcpy(keys[n], ents[i].key, ents[i].key_len + 1);
            if (last_entries != NULL)
                last_entries[n] = ents[i];
            n++;
        }
        if (!out.more) {
            free(ents);
            return n;
        }
        memcpy(after, out.resume, out.resume_len + 1);
        after_len = out.resume_len;
        has_after = true;
    }
    free(ents);
    return -1;
}

static void test_list_pages_hold_each_held_key_once(void)
{
    struct backend *be = open_chroot("list1");
    static char keys[300][LOCK_KEY_MAX + 1];
    char key[32], tok[LOCK_TOKEN_MAX + 1];
    struct lock_grant g;
    int n, held = 0;

    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(acq(be, "o", TOK_A, 5000, &g), BACKEND_OK); /* before */
    CHECK_EQ_INT(acq(be, "q", TOK_A, 5000, &g), BACKEND_OK); /* after */
    for (int i = 0; i < 250; i++) {
        snprintf(key, sizeof(key), "p/%03d", i);
        tok_of(i, tok);
        /* every 10th is released, every 25th expires */
        CHECK_EQ_INT(acq(be, key, tok, i % 25 == 3 ? 100 : 20000, &g),
                     BACKEND_OK);
        if (i % 10 == 7)
            CHECK_EQ_INT(rel(be, key, tok), BACKEND_OK);
        held += i % 10 != 7 && i % 25 != 3;
    }
    check_sleep_ms(150);
    n = list_all(be, "p/", 7, keys, NULL, 300);
    CHECK_EQ_INT(n, held);
    for (int i = 1; i < n; i++)
        CHECK_MSG(strcmp(keys[i - 1], keys[i]) < 0, "%s then %s", keys[i - 1],
                  keys[i]);
    for (int i = 0; i < n; i++) {
        int k = atoi(keys[i] + 2);
        CHECK_MSG(strncmp(keys[i], "p/", 2) == 0 && k % 10 != 7 && k % 25 != 3,
                  "listed %s", keys[i]);
    }
    /* all at once, and with an empty prefix */
    CHECK_EQ_INT(list_all(be, "p/", 1000, keys, NULL, 300), held);
    CHECK_EQ_INT(list_all(be, "", 1000, keys, NULL, 300), held + 2);
    CHECK_STR_EQ(keys[0], "o");
    CHECK_STR_EQ(keys[held + 1], "q");
    CHECK_EQ_INT(list_all(be, "p/00", 3, keys, NULL, 300), 8);
    CHECK_EQ_INT(list_all(be, "nothing", 3, keys, NULL, 300), 0);
    zookeeper_backend.close(be);
}

static void test_list_shows_summaries_and_high_bytes(void)
{
    struct backend *be = open_chroot("list2");
    static char keys[8][LOCK_KEY_MAX + 1];
    struct lock_entry e[8];
    struct lock_grant g, s[3];
    /* byte order: 0x7a < 0xc3 < 0xe2 < 0xf0 (never signed chars) */
    static const char *const order[] = { "k/z", "k/\xc3\xbc", "k/\xe2\x82\xac",
                                         "k/\xf0\x9f\x98\x80" };

    CHECK(be != NULL);
    if (be == NULL)
        return;
    for (int i = 3; i >= 0; i--)
        CHECK_EQ_INT(acq_full(be, order[i], TOK_A, "own", 9000, NULL, &g),
                     BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be, "k/s", TOK_B, LOCK_SHARED, 5, NULL, 5000, NULL, &s[0]),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be, "k/s", TOK_C, LOCK_SHARED, 5, NULL, 6000, NULL, &s[1]),
        BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be, "k/s", TOK_D, LOCK_SHARED, 5, NULL, 7000, NULL, &s[2]),
        BACKEND_OK);
    CHECK_EQ_INT(list_all(be, "k/", 2, keys, e, 8), 5);
    CHECK_STR_EQ(keys[0], "k/s");
    for (int i = 0; i < 4; i++) {
        CHECK_STR_EQ(keys[i + 1], order[i]);
        CHECK(e[i + 1].mode == LOCK_EXCLUSIVE && e[i + 1].holder_count == 1);
        CHECK(e[i + 1].has_owner && strcmp(e[i + 1].owner, "own") == 0);
        CHECK(e[i + 1].ttl_ms > 8000 && e[i + 1].ttl_ms <= 9000);
    }
    CHECK_EQ_U64(e[1].fence, g.fence);
    CHECK(e[0].mode == LOCK_SHARED);
    CHECK_EQ_INT((int)e[0].holder_count, 3);
    CHECK_EQ_U64(e[0].fence, s[2].fence);
    CHECK(!e[0].has_owner);
    CHECK(e[0].ttl_ms > 6000 && e[0].ttl_ms <= 7000);
    CHECK_EQ_INT(list_all(be, "k/\xe2", 10, keys, NULL, 8), 1);
    zookeeper_backend.close(be);
}

/* A key granted through another instance is listed after one relisting. */
static void test_list_sees_other_instances_after_a_relisting(void)
{
    struct backend *a = open_chroot("list3"), *b = open_chroot("list3");
    static char keys[4][LOCK_KEY_MAX + 1];
    struct lock_grant g;
    int64_t t0;
    int n = 0;

    CHECK(a != NULL && b != NULL);
    if (a == NULL || b == NULL)
        goto out;
    t0 = check_mono_ms();
    CHECK_EQ_INT(acq(b, "r/1", TOK_A, 20000, &g), BACKEND_OK);
    CHECK_EQ_INT(list_all(b, "r/", 5, keys, NULL, 4), 1); /* at once */
    while (check_mono_ms() - t0 < 6000 &&
           (n = list_all(a, "r/", 5, keys, NULL, 4)) == 0)
        check_sleep_ms(50);
    CHECK_EQ_INT(n, 1);
    printf("  listed by the other instance after %lld ms\n",
           (long long)(check_mono_ms() - t0));
    /* within one relist period (2 s) and a keeper tick */
    CHECK(check_mono_ms() - t0 < 2600);
    CHECK_EQ_INT(rel(b, "r/1", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(list_all(a, "r/", 5, keys, NULL, 4), 0);
out:
    zookeeper_backend.close(a);
    zookeeper_backend.close(b);
}

static enum backend_result
force(struct backend *be, const char *key, struct lock_info *info)
{
    lock_info_clear(info);
    return zookeeper_backend.force_release(be, key, strlen(key), info);
}

static void test_force_release_frees_an_exclusive_key(void)
{
    struct lock_grant g, h;
    struct lock_info info = { 0 };

    CHECK_EQ_INT(force(be_main, "fx", &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq_full(be_main, "fx", TOK_A, "job", 9000, NULL, &g),
                 BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "fx", TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(reenter(be_main, "fx", TOK_A, &h), BACKEND_OK);
    CHECK_EQ_INT(force(be_main, "fx", &info), BACKEND_OK);
    CHECK_EQ_INT((int)info.holder_count, 1);
    CHECK_EQ_INT((int)info.holds, 3);
    CHECK_EQ_U64(info.fence, g.fence);
    CHECK(info.has_owner && strcmp(info.owner, "job") == 0);
    CHECK(info.nholders == 1 && info.holders != NULL);
    CHECK_EQ_INT(force(be_main, "fx", &info), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(ren(be_main, "fx", TOK_A, 0, &h), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(rel(be_main, "fx", TOK_A), BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq(be_main, "fx", TOK_B, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    CHECK_EQ_INT(rel(be_main, "fx", TOK_B), BACKEND_OK);
    lock_info_clear(&info);
}

static void test_force_release_frees_a_shared_key(void)
{
    static const char *const toks[] = { TOK_A, TOK_B, TOK_C };
    struct lock_grant g[3], h;
    struct lock_info info = { 0 };

    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(acq_kind(be_main, "fs", toks[i], LOCK_SHARED, 0, NULL,
                              9000, NULL, &g[i]),
                     BACKEND_OK);
    CHECK_EQ_INT(force(be_main, "fs", &info), BACKEND_OK);
    CHECK(info.mode == LOCK_SHARED);
    CHECK_EQ_INT((int)info.holder_count, 3);
    CHECK_EQ_INT((int)info.nholders, 3);
    CHECK_EQ_U64(info.fence, g[2].fence);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_U64(info.holders[i].fence, g[i].fence);
        CHECK_EQ_INT(ren(be_main, "fs", toks[i], 0, &h), BACKEND_NOT_FOUND);
    }
    CHECK_EQ_INT(zookeeper_backend.inspect(be_main, "fs", 2, &info),
                 BACKEND_NOT_FOUND);
    CHECK_EQ_INT(acq(be_main, "fs", TOK_D, 5000, &h), BACKEND_OK);
    CHECK(h.fence > g[2].fence);
    CHECK_EQ_INT(rel(be_main, "fs", TOK_D), BACKEND_OK);
    lock_info_clear(&info);
}

/* A waiter of another instance is woken by the forced release as by a
 * release: its watch on h fires. */
static void test_force_release_wakes_a_waiter_elsewhere(void)
{
    struct backend *other = open_be(url);
    struct lock_waiter w = { .id = 77 };
    struct lock_info info = { 0 };
    struct lock_grant g, h;
    int64_t t0;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    CHECK_EQ_INT(acq(be_main, "fw", TOK_A, 20000, &g), BACKEND_OK);
    w.deadline_ms = clock_wall_ms() + 10000;
    CHECK_EQ_INT(acq_wait(other, "fw", TOK_B, 5000, &w, &h), BACKEND_HELD);
    CHECK(h.retry_ms > 1000);
    notes_watch("fw", 2);
    t0 = check_mono_ms();
    CHECK_EQ_INT(force(be_main, "fw", &info), BACKEND_OK);
    CHECK(notes_watched(2000) > 0);
    CHECK_EQ_INT(acq_wait(other, "fw", TOK_B, 5000, &w, &h), BACKEND_OK);
    CHECK(h.fence > g.fence);
    printf("  waiter granted %lld ms after the forced release\n",
           (long long)(check_mono_ms() - t0));
    CHECK(check_mono_ms() - t0 < 1000);
    CHECK_EQ_INT(rel(other, "fw", TOK_B), BACKEND_OK);
    lock_info_clear(&info);
    zookeeper_backend.close(other);
}

/* held_count comes from the sweep's last whole pass. */
static void test_held_count_follows_the_sweep(void)
{
    struct backend *be = open_chroot("held");
    struct lock_grant g;
    int64_t t0, n = -2;

    CHECK(be != NULL);
    if (be == NULL)
        return;
    CHECK_EQ_INT(acq(be, "h1", TOK_A, 20000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "h2", TOK_A, 20000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be, "h3", TOK_A, 100, &g), BACKEND_OK); /* expires */
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(acq_kind(be, "hs",
                              i == 0   ? TOK_B
                              : i == 1 ? TOK_C
                                       : TOK_D,
                              LOCK_SHARED, 0, NULL, 20000, NULL, &g),
                     BACKEND_OK);
    t0 = check_mono_ms();
    while (check_mono_ms() - t0 < 5000 &&
           (n = zookeeper_backend.held_count(be)) != 5)
        check_sleep_ms(50);
    CHECK_EQ_INT((int)n, 5);
    printf("  held_count 5 after %lld ms\n", (long long)(check_mono_ms() - t0));
    CHECK_EQ_INT(rel(be, "h1", TOK_A), BACKEND_OK);
    CHECK_EQ_INT(rel(be, "hs", TOK_C), BACKEND_OK);
    t0 = check_mono_ms();
    while (check_mono_ms() - t0 < 5000 &&
           (n = zookeeper_backend.held_count(be)) != 3)
        check_sleep_ms(50);
    CHECK_EQ_INT((int)n, 3);
    zookeeper_backend.close(be);
}

/* A grant that reaped an expired holder says whose fence it took over. */
static void test_takeover_reports_the_expired_fence(void)
{
    zhandle_t *zh = raw_open();
    char parent[256];
    struct Stat st;
    struct lock_grant g;

    if (zh == NULL)
        return;
    CHECK_EQ_INT(acq(be_main, "tk-free", TOK_A, 5000, &g), BACKEND_OK);
    CHECK_EQ_U64(g.expired_fence, 0);
    CHECK_EQ_INT(rel(be_main, "tk-free", TOK_A), BACKEND_OK);
    /* A holder whose 1 ms TTL has run out, behind the sweep's back. The
     * keeper's sweep may reap it first (it relists every 2 s and a slow
     * build widens the window): then the grant took a free key and must
     * report no takeover; another key is tried, up to five. */
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "tk%d", i);
        key_node(key, parent, sizeof(parent));
        CHECK_EQ_INT(raw_node(zh, parent, NULL), ZOK);
        raw_holder(zh, parent, TOK_A, 1, 0, &st);
        check_sleep_ms(5);
        CHECK_EQ_INT(acq(be_main, key, TOK_B, 5000, &g), BACKEND_OK);
        CHECK(g.fence > (uint64_t)st.czxid);
        CHECK_EQ_INT(rel(be_main, key, TOK_B), BACKEND_OK);
        if (g.expired_fence == (uint64_t)st.czxid)
            break;
        CHECK_EQ_U64(g.expired_fence, 0); /* reaped: nothing taken over */
        printf("  %s: the sweep reaped the holder first\n", key);
        CHECK_MSG(i < 4, "no takeover reported in 5 tries");
    }
    zookeeper_close(zh);
}

static void check_granted_at(struct backend *be,
                             const char *key,
                             const char *tok,
                             int64_t t0,
                             int64_t t1)
{
    struct lock_req req = { .key = key, .key_len = strlen(key), .token = tok };
    struct lock_grant g = { 0 };

    CHECK_EQ_INT(zookeeper_backend.release(be, &req, &g), BACKEND_OK);
    CHECK_EQ_INT((int)g.holds, 0);
    /* the server's clock is this machine's */
    CHECK_MSG(g.granted_at_ms >= t0 - 20 && g.granted_at_ms <= t1 + 20,
              "%s: granted at %lld, asked %lld..%lld", key,
              (long long)g.granted_at_ms, (long long)t0, (long long)t1);
}

static void test_release_reports_when_the_hold_was_granted(void)
{
    struct backend *other = open_be(url);
    struct lock_grant g;
    int64_t t0, t1;

    CHECK(other != NULL);
    if (other == NULL)
        return;
    t0 = clock_wall_ms();
    CHECK_EQ_INT(acq(be_main, "ga1", TOK_A, 9000, &g), BACKEND_OK);
    CHECK_EQ_INT(acq(be_main, "ga2", TOK_A, 9000, &g), BACKEND_OK);
    CHECK_EQ_INT(
        acq_kind(be_main, "ga3", TOK_A, LOCK_SHARED, 0, NULL, 9000, NULL, &g),
        BACKEND_OK);
    t1 = clock_wall_ms();
    check_sleep_ms(300); /* the renew moves mtime, not the grant time */
    CHECK_EQ_INT(ren(be_main, "ga1", TOK_A, 0, &g), BACKEND_OK);
    check_granted_at(be_main, "ga1", TOK_A, t0, t1); /* without a read */
    check_granted_at(other, "ga2", TOK_A, t0, t1);   /* with one */
    check_granted_at(be_main, "ga3", TOK_A, t0, t1); /* shared */
    zookeeper_backend.close(other);
}

static const struct check_case offline[] = {
    CHECK_CASE(test_open_rejects_bad_urls),
    CHECK_CASE(test_down_store_answers_unavailable_at_once),
};

static const struct check_case online[] = {
    CHECK_CASE(test_acquire_inspect_renew_release),
    CHECK_CASE(test_keys_are_distinct_nodes),
    CHECK_CASE(test_waiters_are_fifo_and_cancel_frees_place),
    CHECK_CASE(test_waiter_behind_one_of_ours_is_told_so_while_held),
    CHECK_CASE(test_expired_holder_is_free),
    CHECK_CASE(test_release_after_expiry_is_not_found),
    CHECK_CASE(test_stale_release_never_frees_a_later_grant),
    CHECK_CASE(test_holder_without_marker_is_never_freed_by_version),
    CHECK_CASE(test_holder_with_a_foreign_token_is_left_alone),
    CHECK_CASE(test_grant_past_its_deadline_is_void),
    CHECK_CASE(test_issue_10_lost_grant_is_reported_only_while_valid),
    CHECK_CASE(test_issue_10_late_grant_beside_a_new_place_is_claimed),
    CHECK_CASE(test_chroot_keeps_locks_apart),
    CHECK_CASE(test_auth_on_every_session),
    CHECK_CASE(test_shared_grants_up_to_the_limit_then_held),
    CHECK_CASE(test_exclusive_and_shared_exclude_each_other),
    CHECK_CASE(test_shared_under_another_limit_is_a_mismatch),
    CHECK_CASE(test_fifo_across_modes),
    CHECK_CASE(test_shared_waiters_are_granted_together),
    CHECK_CASE(test_reentry_counts_holds_up_to_the_cap),
    CHECK_CASE(test_idempotency_key_replays_a_live_grant),
    CHECK_CASE(test_inspect_lists_shared_holders_by_fence),
    CHECK_CASE(test_shared_holders_expire_one_by_one),
    CHECK_CASE(test_concurrent_shared_grants_keep_the_limit),
    CHECK_CASE(test_multi_grant_writes_the_single_layout),
    CHECK_CASE(test_multi_waiter_after_the_read_fails_the_whole_grant),
    CHECK_CASE(test_multi_held_keys_notify_when_they_free),
    CHECK_CASE(test_multi_renew_writes_nothing_unless_all_held),
    CHECK_CASE(test_multi_calls_with_shared_holders),
    CHECK_CASE(test_multi_grant_answered_too_late_is_freed),
    CHECK_CASE(test_sweep_never_drops_the_marker_of_a_new_grant),
    CHECK_CASE(test_multi_of_64_longest_keys),
    CHECK_CASE(test_multi_overlapping_grants_never_share_a_key),
    CHECK_CASE(test_list_pages_hold_each_held_key_once),
    CHECK_CASE(test_list_shows_summaries_and_high_bytes),
    CHECK_CASE(test_list_sees_other_instances_after_a_relisting),
    CHECK_CASE(test_force_release_frees_an_exclusive_key),
    CHECK_CASE(test_force_release_frees_a_shared_key),
    CHECK_CASE(test_force_release_wakes_a_waiter_elsewhere),
    CHECK_CASE(test_held_count_follows_the_sweep),
    CHECK_CASE(test_takeover_reports_the_expired_fence),
    CHECK_CASE(test_release_reports_when_the_hold_was_granted),
    CHECK_CASE(test_restart_answers_unavailable_then_recovers),
};

int main(int argc, char **argv)
{
    struct check_case all[sizeof(offline) / sizeof(offline[0]) +
                          sizeof(online) / sizeof(online[0])];
    size_t n = 0;
    int rc;
    bool skipped = false;

    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < sizeof(offline) / sizeof(offline[0]); i++)
        all[n++] = offline[i];
    if (access(TESTSRV_JAVA, X_OK) != 0 || access(TESTSRV_ZK_JAR, R_OK) != 0) {
        printf("skip: %s or %s missing: server cases not run\n", TESTSRV_JAVA,
               TESTSRV_ZK_JAR);
        skipped = true;
    } else if (testsrv_setup(&srv, "zk") != 0 || start_zookeeper() != 0) {
        printf("skip: ZooKeeper did not start on 127.0.0.1:%d: server cases "
               "not run\n",
               srv.port);
        skipped = true;
    } else {
        snprintf(url, sizeof(url),
                 "zookeeper://127.0.0.1:%d?session_timeout_ms=4000", srv.port);
        be_main = open_be(url);
        if (be_main == NULL ||
            !testsrv_wait_ping(zookeeper_backend.ping, be_main, 30000)) {
            printf("FAIL %s %s\n0 passed, 1 failed\n",
                   be_main == NULL ? "cannot open" : "no session in 30 s with",
                   url);
            zookeeper_backend.close(be_main);
            testsrv_cleanup(&srv, SIGKILL);
            return 1;
        }
        for (size_t i = 0; i < sizeof(online) / sizeof(online[0]); i++)
            all[n++] = online[i];
    }
    rc = check_main(all, n, argc, argv);
    zookeeper_backend.close(be_main);
    testsrv_cleanup(&srv, SIGKILL);
    return rc == 0 && skipped ? SKIP_EXIT : rc;
}

/*
 * tests/unit/test_redis_cluster.c - the Redis Cluster rules of the Redis
 * adapter (backends/redis/cluster.c) that need no server: CRC16, hash
 * slots with and without hash tags, lockd's tag of a lock key, the key
 * layout that keeps every Redis key of one lock on one slot, the
 * multi-key slot check, and redis+cluster:// URLs.
 */
#include "backends/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"

static int slot_of(const char *s)
{
    return redis_cluster_keyslot(s, strlen(s));
}

static void test_crc16_matches_redis(void)
{
    CHECK_EQ_INT(redis_cluster_crc16("123456789", 9), 0x31C3);
    CHECK_EQ_INT(redis_cluster_crc16("", 0), 0);
}

static void test_keyslot_without_tags(void)
{
    /* values from CLUSTER KEYSLOT */
    CHECK_EQ_INT(slot_of("foo"), 12182);
    CHECK_EQ_INT(slot_of("bar"), 5061);
    CHECK_EQ_INT(slot_of("123456789"), 0x31C3);
}

static void test_keyslot_follows_the_tag_rule(void)
{
    size_t at, n;

    CHECK_EQ_INT(slot_of("{user1000}.following"), slot_of("user1000"));
    CHECK_EQ_INT(slot_of("a{user1000}b{x}"), slot_of("user1000"));
    /* an empty tag: the whole key */
    CHECK_EQ_INT(slot_of("foo{}{bar}"), redis_cluster_crc16("foo{}{bar}", 10) &
                                            (REDIS_BE_CLUSTER_SLOTS - 1));
    /* the first '{', the first '}' after it */
    CHECK_EQ_INT(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    CHECK_EQ_INT(slot_of("foo{bar}{zap}"), slot_of("bar"));
    /* no '}' after the '{': the whole key */
    redis_cluster_tag("ab{cd", 5, &at, &n);
    CHECK_EQ_INT((int)at, 0);
    CHECK_EQ_INT((int)n, 5);
    redis_cluster_tag("ab{cd}", 6, &at, &n);
    CHECK_EQ_INT((int)at, 3);
    CHECK_EQ_INT((int)n, 2);
}

static void test_lock_hash_is_fnv1a_of_the_tag(void)
{
    char a[17], b[17];

    redis_cluster_hash("", 0, a);
    CHECK_STR_EQ(a, "cbf29ce484222325");
    redis_cluster_hash("a", 1, a);
    CHECK_STR_EQ(a, "af63dc4c8601ec8c");
    redis_cluster_hash("order:{42}:a", 12, a);
    redis_cluster_hash("order:{42}:b", 12, b);
    CHECK_STR_EQ(a, b);
    redis_cluster_hash("42", 2, b);
    CHECK_STR_EQ(a, b);
    redis_cluster_hash("order:42:a", 10, a);
    redis_cluster_hash("order:42:b", 10, b);
    CHECK(strcmp(a, b) != 0);
}

/* A be in cluster mode with prefix "lockd:", enough for the key names. */
static void cluster_be(struct redis_be *be)
{
    memset(be, 0, sizeof(*be));
    be->topology = REDIS_BE_CLUSTER;
    be->prefix = (char *)(uintptr_t) "lockd:";
    be->prefix_len = 6;
}

static void test_every_key_of_a_lock_shares_its_slot(void)
{
    static const char *const kinds[] = { "lock:", "fence:", "fifo:",
                                         "qdl:",  "exp:",   "mwait:" };
    static const char *const keys[] = { "k", "a}b{c", "{}", "x{42}y", "é/ü" };
    struct redis_be be;
    struct redis_args a;
    char want[REDIS_BE_KEYBUF], h[17];

    cluster_be(&be);
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        size_t kl = strlen(keys[k]);
        int slot = -1;
        redis_cluster_hash(keys[k], kl, h);
        for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
            size_t n = redis_key_name(&be, kinds[i], keys[k], kl, a.keys[0]);
            CHECK_EQ_INT((int)n, (int)redis_key_len(&be, kinds[i], kl));
            snprintf(want, sizeof(want), "lockd:{%s}%s{%s}", h, kinds[i],
                     keys[k]);
            CHECK(n == strlen(want) && memcmp(a.keys[0], want, n) == 0);
            if (slot < 0)
                slot = redis_cluster_keyslot(a.keys[0], n);
            CHECK_EQ_INT(redis_cluster_keyslot(a.keys[0], n), slot);
        }
        /* the per-tag index and counts: the first key's slot */
        redis_arg_key(&be, &a, 0, "lock:", keys[k], kl);
        redis_arg_global(&be, &a, 1, REDIS_BE_INDEX);
        snprintf(want, sizeof(want), "lockd:{%s}keys", h);
        CHECK(a.len[1] == strlen(want) && memcmp(a.v[1], want, a.len[1]) == 0);
        CHECK_EQ_INT(redis_cluster_keyslot(a.v[1], a.len[1]), slot);
        /* its directory and buckets (holders.lua): the name, then "@", or
         * "#" and a key, whatever braces the key holds */
        snprintf(want, sizeof(want), "lockd:{%s}keys@", h);
        CHECK_EQ_INT(redis_cluster_keyslot(want, strlen(want)), slot);
        snprintf(want, sizeof(want), "lockd:{%s}keys#%s", h, keys[k]);
        CHECK_EQ_INT(redis_cluster_keyslot(want, strlen(want)), slot);
    }
}

/* Every slot has a short tag of its own, and a lock's slot fence counter
 * lives in the lock's slot: at most 16,384 counters, beside their locks. */
static void test_slot_fence_counter_shares_the_lock_slot(void)
{
    static const char *const keys[] = { "k", "a}b{c", "{}", "x{42}y", "é/ü" };
    struct redis_be be;
    char name[REDIS_BE_KEYBUF], lock[REDIS_BE_KEYBUF];
    size_t longest = 0;

    for (int s = 0; s < REDIS_BE_CLUSTER_SLOTS; s++) {
        const char *t = redis_cluster_slot_tag(s);
        size_t n = strlen(t);

        CHECK(n >= 2 && n <= 5 && t[0] == '#');
        CHECK(strchr(t, '{') == NULL && strchr(t, '}') == NULL);
        CHECK_EQ_INT(redis_cluster_crc16(t, n) & (REDIS_BE_CLUSTER_SLOTS - 1),
                     s);
        if (n > longest)
            longest = n;
    }
    printf("  longest slot tag: %zu bytes\n", longest);
    cluster_be(&be);
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        size_t kl = strlen(keys[k]);
        size_t n = redis_key_name(&be, REDIS_BE_SLOT_FENCE, keys[k], kl, name);
        size_t ln = redis_key_name(&be, "lock:", keys[k], kl, lock);

        CHECK(n <= redis_key_len(&be, REDIS_BE_SLOT_FENCE, kl));
        CHECK(n > 6 + 6 && memcmp(name, "lockd:{#", 8) == 0 &&
              memcmp(name + n - 6, REDIS_BE_SLOT_FENCE, 6) == 0);
        CHECK_EQ_INT(redis_cluster_keyslot(name, n),
                     redis_cluster_keyslot(lock, ln));
    }
    /* one Redis: "fence#" and the key's slot modulo 1024 in 4 hex */
    be.topology = REDIS_BE_SINGLE;
    CHECK_EQ_INT(
        (int)redis_key_name(&be, REDIS_BE_SLOT_FENCE, "123456789", 9, name),
        16);
    CHECK(memcmp(name, "lockd:fence#01c3", 16) == 0);
}

static void test_multi_keys_same_slot_only_with_a_shared_tag(void)
{
    const char *same[] = { "order:{42}:a", "order:{42}:b", "{42}" };
    size_t same_l[] = { 12, 12, 4 };
    const char *apart[] = { "order:{42}:a", "order:{43}:a" };
    size_t apart_l[] = { 12, 12 };

    CHECK(redis_cluster_same_slot(same, same_l, 3));
    CHECK(redis_cluster_same_slot(same, same_l, 1));
    CHECK(!redis_cluster_same_slot(apart, apart_l, 2));
}

/* redis_parse_url on a fresh be: its result; the be's memory is freed. */
static enum backend_result parse(const char *url, char *err, size_t errlen)
{
    struct redis_be *be = calloc(1, sizeof(*be));
    enum backend_result r;

    err[0] = '\0';
    r = redis_parse_url(be, url, err, errlen);
    if (r == BACKEND_OK) {
        CHECK_EQ_INT(be->topology, REDIS_BE_CLUSTER);
        CHECK(be->cluster != NULL);
    }
    redis_url_free(be);
    free(be);
    return r;
}

static void test_cluster_url_rules(void)
{
    char err[256];

    CHECK_EQ_INT(parse("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", err,
                       sizeof(err)),
                 BACKEND_OK);
    CHECK_EQ_INT(parse("redis+cluster://:pw@h1:7000,[::1]:7001?prefix=app:",
                       err, sizeof(err)),
                 BACKEND_OK);
    CHECK_EQ_INT(parse("redis+cluster://h1:7000/1", err, sizeof(err)),
                 BACKEND_INVALID);
    CHECK_CONTAINS(err, "no /db");
    CHECK_EQ_INT(parse("redis+cluster://h1:7000?prefix=a{b", err, sizeof(err)),
                 BACKEND_INVALID);
    CHECK_CONTAINS(err, "'{' or '}'");
    CHECK_EQ_INT(parse("redis+cluster://", err, sizeof(err)), BACKEND_INVALID);
    CHECK_EQ_INT(parse("redis+cluster://h1:7000,,h2:1", err, sizeof(err)),
                 BACKEND_INVALID);
    CHECK_EQ_INT(parse("redis+cluster://h1:99999", err, sizeof(err)),
                 BACKEND_INVALID);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_crc16_matches_redis),
    CHECK_CASE(test_keyslot_without_tags),
    CHECK_CASE(test_keyslot_follows_the_tag_rule),
    CHECK_CASE(test_lock_hash_is_fnv1a_of_the_tag),
    CHECK_CASE(test_every_key_of_a_lock_shares_its_slot),
    CHECK_CASE(test_slot_fence_counter_shares_the_lock_slot),
    CHECK_CASE(test_multi_keys_same_slot_only_with_a_shared_tag),
    CHECK_CASE(test_cluster_url_rules),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

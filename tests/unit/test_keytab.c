/*
 * tests/unit/test_keytab.c - the intrusive hash table (lib/keytab.c):
 * insert, find, remove, growth, foreach with removal, many keys, and keys
 * that are arbitrary bytes.
 */
#include "lib/keytab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"

#define CONTAINER_OF(p, type, member) \
    ((type *)(void *)((char *)(p)-offsetof(type, member)))

struct item {
    struct keytab_entry ke;
    int value;
    int visits;
    char key[32];
};

static void item_init(struct item *it, const char *key, size_t len, int v)
{
    memset(it, 0, sizeof(*it));
    memcpy(it->key, key, len);
    it->ke.key = it->key;
    it->ke.key_len = len;
    it->ke.hash = keytab_hash(key, len);
    it->value = v;
}

static struct item *find(const struct keytab *t, const char *key, size_t len)
{
    struct keytab_entry *e = keytab_find(t, key, len, keytab_hash(key, len));

    return e != NULL ? CONTAINER_OF(e, struct item, ke) : NULL;
}

static void test_keytab_init_rounds_to_power_of_two(void)
{
    struct keytab t;

    CHECK_EQ_INT(keytab_init(&t, 0), 0);
    CHECK_EQ_INT(t.mask, 7); /* at least 8 buckets */
    CHECK_EQ_INT(t.count, 0);
    keytab_cleanup(&t);
    CHECK(t.buckets == NULL);
    CHECK_EQ_INT(keytab_init(&t, 100), 0);
    CHECK_EQ_INT(t.mask, 127);
    keytab_cleanup(&t);
    CHECK_EQ_INT(keytab_init(&t, 128), 0);
    CHECK_EQ_INT(t.mask, 127);
    keytab_cleanup(&t);
    CHECK_EQ_INT(keytab_init(&t, 129), 0);
    CHECK_EQ_INT(t.mask, 255);
    keytab_cleanup(&t);
}

static void test_keytab_insert_find_remove(void)
{
    struct keytab t;
    struct item a, b, c;

    CHECK_EQ_INT(keytab_init(&t, 8), 0);
    CHECK(find(&t, "a", 1) == NULL);
    item_init(&a, "a", 1, 1);
    item_init(&b, "ab", 2, 2);
    item_init(&c, "abc", 3, 3);
    keytab_insert(&t, &a.ke);
    keytab_insert(&t, &b.ke);
    keytab_insert(&t, &c.ke);
    CHECK_EQ_INT(t.count, 3);
    CHECK(find(&t, "a", 1) == &a);
    CHECK(find(&t, "ab", 2) == &b);
    CHECK(find(&t, "abc", 3) == &c);
    /* prefixes, lengths and case are different keys */
    CHECK(find(&t, "abc", 2) == &b);
    CHECK(find(&t, "abcd", 4) == NULL);
    CHECK(find(&t, "A", 1) == NULL);
    CHECK(find(&t, "", 0) == NULL);
    /* a matching hash alone is not a match: bytes and length count */
    CHECK(keytab_find(&t, "zz", 2, a.ke.hash) == NULL);
    CHECK(keytab_find(&t, "ab", 2, c.ke.hash) == NULL);
    CHECK(keytab_find(&t, "abc", 3, c.ke.hash) == &c.ke);

    keytab_remove(&t, &b.ke);
    CHECK_EQ_INT(t.count, 2);
    CHECK(find(&t, "ab", 2) == NULL);
    CHECK(find(&t, "a", 1) == &a);
    CHECK(find(&t, "abc", 3) == &c);
    /* removing an entry that is not there changes nothing */
    keytab_remove(&t, &b.ke);
    CHECK_EQ_INT(t.count, 2);
    /* and it can come back */
    keytab_insert(&t, &b.ke);
    CHECK(find(&t, "ab", 2) == &b);
    keytab_remove(&t, &a.ke);
    keytab_remove(&t, &b.ke);
    keytab_remove(&t, &c.ke);
    CHECK_EQ_INT(t.count, 0);
    for (size_t i = 0; i <= t.mask; i++)
        CHECK(t.buckets[i] == NULL);
    keytab_cleanup(&t);
}

static void test_keytab_hash_is_stable_and_length_aware(void)
{
    const char *s = "orders/42";

    CHECK_EQ_U64(keytab_hash(s, 9), keytab_hash("orders/42", 9));
    CHECK(keytab_hash(s, 9) != keytab_hash(s, 8));
    CHECK(keytab_hash("", 0) != keytab_hash("\0", 1));
    CHECK(keytab_hash("a\0", 2) != keytab_hash("a\0\0", 3));
    /* every length through two blocks and a tail */
    for (size_t n = 0; n < 24; n++)
        CHECK(keytab_hash("abcdefghijklmnopqrstuvwxyz", n) !=
              keytab_hash("abcdefghijklmnopqrstuvwxyz", n + 1));
}

static void test_keytab_grows_and_keeps_every_key(void)
{
    enum {
        N = 10000
    };
    struct keytab t;
    struct item *items = calloc(N, sizeof(*items));
    char key[32];
    size_t grew_at = 0, mask0;

    CHECK(items != NULL);
    if (items == NULL)
        return;
    CHECK_EQ_INT(keytab_init(&t, 8), 0);
    mask0 = t.mask;
    for (int i = 0; i < N; i++) {
        int n = snprintf(key, sizeof(key), "key-%d", i);
        item_init(&items[i], key, (size_t)n, i);
        keytab_insert(&t, &items[i].ke);
        if (grew_at == 0 && t.mask != mask0)
            grew_at = (size_t)i + 1;
    }
    CHECK_EQ_INT(t.count, N);
    CHECK_EQ_INT(grew_at, 9); /* the ninth entry in 8 buckets grows it */
    CHECK_MSG(t.mask + 1 >= N, "mask %zu for %d keys", t.mask, N);
    CHECK_EQ_INT((t.mask + 1) & t.mask, 0); /* a power of two */
    for (int i = 0; i < N; i++) {
        int n = snprintf(key, sizeof(key), "key-%d", i);
        struct item *it = find(&t, key, (size_t)n);
        if (it == NULL || it->value != i) {
            CHECK_MSG(0, "key-%d lost", i);
            break;
        }
    }
    /* remove the odd ones */
    for (int i = 1; i < N; i += 2)
        keytab_remove(&t, &items[i].ke);
    CHECK_EQ_INT(t.count, N / 2);
    for (int i = 0; i < N; i++) {
        int n = snprintf(key, sizeof(key), "key-%d", i);
        struct item *it = find(&t, key, (size_t)n);
        if ((it != NULL) != (i % 2 == 0)) {
            CHECK_MSG(0, "key-%d: %s", i, it != NULL ? "found" : "lost");
            break;
        }
    }
    /* no chain is absurdly long: the hash spreads sequential keys */
    {
        size_t longest = 0;
        for (size_t b = 0; b <= t.mask; b++) {
            size_t len = 0;
            for (struct keytab_entry *e = t.buckets[b]; e != NULL; e = e->next)
                len++;
            if (len > longest)
                longest = len;
        }
        CHECK_MSG(longest <= 12, "longest chain %zu", longest);
    }
    keytab_cleanup(&t);
    free(items);
}

struct visit_state {
    struct keytab *t;
    int visited;
    bool remove;
};

static void visit(struct keytab_entry *e, void *arg)
{
    struct visit_state *st = arg;
    struct item *it = CONTAINER_OF(e, struct item, ke);

    it->visits++;
    st->visited++;
    if (st->remove) {
        keytab_remove(st->t, e);
        memset(&it->ke, 0xa5, sizeof(it->ke)); /* as if freed */
    }
}

static void test_keytab_foreach_allows_removal(void)
{
    enum {
        N = 500
    };
    struct keytab t;
    struct item *items = calloc(N, sizeof(*items));
    struct visit_state st = { .t = &t };
    char key[32];

    CHECK(items != NULL);
    if (items == NULL)
        return;
    CHECK_EQ_INT(keytab_init(&t, 16), 0); /* grows; chains share buckets */
    for (int i = 0; i < N; i++) {
        int n = snprintf(key, sizeof(key), "k%d", i);
        item_init(&items[i], key, (size_t)n, i);
        keytab_insert(&t, &items[i].ke);
    }
    keytab_foreach(&t, visit, &st);
    CHECK_EQ_INT(st.visited, N);
    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(items[i].visits, 1);
    CHECK_EQ_INT(t.count, N);

    st.visited = 0;
    st.remove = true;
    keytab_foreach(&t, visit, &st);
    CHECK_EQ_INT(st.visited, N);
    CHECK_EQ_INT(t.count, 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(items[i].visits, 2);
    st.visited = 0;
    keytab_foreach(&t, visit, &st);
    CHECK_EQ_INT(st.visited, 0);
    keytab_cleanup(&t);
    free(items);
}

static void test_keytab_binary_keys(void)
{
    struct keytab t;
    struct item it[6];
    /* bytes >= 0x80 without NUL, differing only in high bits or length */
    static const char k0[] = "\x80";
    static const char k1[] = "\x81";
    static const char k2[] = "\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7";
    static const char k3[] = "\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8";
    static const char k4[] = "\xc3\xa9";
    static const char k5[] = "e\xcc\x81";

    CHECK_EQ_INT(keytab_init(&t, 8), 0);
    item_init(&it[0], k0, 1, 0);
    item_init(&it[1], k1, 1, 1);
    item_init(&it[2], k2, 9, 2);
    item_init(&it[3], k3, 8, 3);
    item_init(&it[4], k4, 2, 4);
    item_init(&it[5], k5, 3, 5);
    for (int i = 0; i < 6; i++)
        keytab_insert(&t, &it[i].ke);
    CHECK(find(&t, k0, 1) == &it[0]);
    CHECK(find(&t, k1, 1) == &it[1]);
    CHECK(find(&t, k2, 9) == &it[2]);
    CHECK(find(&t, k3, 8) == &it[3]);
    CHECK(find(&t, k4, 2) == &it[4]);
    CHECK(find(&t, k5, 3) == &it[5]);
    CHECK(find(&t, "\x7f", 1) == NULL);
    CHECK(find(&t, "\x00", 1) == NULL);
    CHECK(find(&t, k2, 7) == NULL);
    keytab_remove(&t, &it[3].ke);
    CHECK(find(&t, k3, 8) == NULL);
    CHECK(find(&t, k2, 9) == &it[2]);
    CHECK_EQ_INT(t.count, 5);
    keytab_cleanup(&t);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_keytab_init_rounds_to_power_of_two),
    CHECK_CASE(test_keytab_insert_find_remove),
    CHECK_CASE(test_keytab_hash_is_stable_and_length_aware),
    CHECK_CASE(test_keytab_grows_and_keeps_every_key),
    CHECK_CASE(test_keytab_foreach_allows_removal),
    CHECK_CASE(test_keytab_binary_keys),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

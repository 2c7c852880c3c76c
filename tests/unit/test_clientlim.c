/*
 * tests/unit/test_clientlim.c - the per-client waiter counts
 * (service/clientlim.c): the cap per key, credentials and addresses apart,
 * entries gone at zero, the auto cap, which calls are counted, the 429's
 * message, exact counts under threads, the address text and the gauges.
 */
#include "service/clientlim.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/metrics.h"
#include "tests/unit/check.h"

#define THREADS 8
#define ROUNDS  20000

static void counts(struct clientlim *cl, uint64_t *slots, uint64_t *clients)
{
    clientlim_counts(cl, slots, clients);
}

static void test_take_caps_each_key_and_frees_at_zero(void)
{
    struct clientlim *cl = clientlim_new(2, 16000);
    struct clientlim_entry *a1, *a2, *a3, *b1;
    uint64_t slots, clients;

    CHECK(cl != NULL);
    CHECK_EQ_INT(clientlim_take(cl, "a:x", 3, 2, &a1), CLIENTLIM_OK);
    CHECK_EQ_INT(clientlim_take(cl, "a:x", 3, 2, &a2), CLIENTLIM_OK);
    CHECK_EQ_INT(clientlim_take(cl, "a:x", 3, 2, &a3), CLIENTLIM_FULL);
    CHECK(a3 == NULL);
    CHECK_EQ_INT(clientlim_take(cl, "a:y", 3, 2, &b1), CLIENTLIM_OK);
    CHECK(a1 == a2 && a1 != b1);
    counts(cl, &slots, &clients);
    CHECK_EQ_U64(slots, 3);
    CHECK_EQ_U64(clients, 2);
    clientlim_give(cl, a1);
    CHECK_EQ_INT(clientlim_take(cl, "a:x", 3, 2, &a3), CLIENTLIM_OK);
    clientlim_give(cl, a2);
    clientlim_give(cl, a3);
    clientlim_give(cl, b1);
    clientlim_give(cl, NULL);
    counts(cl, &slots, &clients);
    CHECK_EQ_U64(slots, 0);
    CHECK_EQ_U64(clients, 0);
    /* a cap of 0 is one */
    CHECK_EQ_INT(clientlim_take(cl, "a:z", 3, 0, &a1), CLIENTLIM_OK);
    CHECK_EQ_INT(clientlim_take(cl, "a:z", 3, 0, &a2), CLIENTLIM_FULL);
    clientlim_give(cl, a1);
    clientlim_free(cl);
    clientlim_free(NULL);
}

static void test_key_keeps_credentials_and_addresses_apart(void)
{
    char k1[CLIENTLIM_KEY_MAX + 1], k2[CLIENTLIM_KEY_MAX + 1];
    char name[API_CLIENT_LEN + 1];
    size_t n1, n2;

    n1 = clientlim_key("127.0.0.1", "10.0.0.1", k1);
    n2 = clientlim_key("", "127.0.0.1", k2);
    CHECK_STR_EQ(k1, "c:127.0.0.1");
    CHECK_STR_EQ(k2, "a:127.0.0.1");
    CHECK(n1 == n2 && memcmp(k1, k2, n1) != 0);
    CHECK_EQ_INT(clientlim_key(NULL, NULL, k1), 2);
    CHECK_STR_EQ(k1, "a:");
    memset(name, 'n', API_CLIENT_LEN);
    name[API_CLIENT_LEN] = '\0';
    CHECK_EQ_INT(clientlim_key(name, NULL, k1), API_CLIENT_LEN + 2);
    n1 = clientlim_key(NULL, "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
                       k1);
    CHECK_EQ_INT(n1, 2 + 45);
}

static void test_admit_counts_only_calls_that_may_wait(void)
{
    struct clientlim *cl = clientlim_new(0, 8); /* auto: 2 */
    char orders[] = "orders";
    struct api_call c = { .verb = API_VERB_ACQUIRE, .wait_ms = 1000 };
    struct clientlim_entry *s[4];
    char msg[200] = "";
    uint64_t slots, clients;

    CHECK(cl != NULL);
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.1", &s[0], msg, sizeof(msg)),
                 CLIENTLIM_OK);
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.1", &s[1], msg, sizeof(msg)),
                 CLIENTLIM_OK);
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.1", &s[2], msg, sizeof(msg)),
                 CLIENTLIM_FULL);
    CHECK_CONTAINS(msg, "this client: 2, the most");
    CHECK_CONTAINS(msg, "--max-waiters-per-client");
    /* try-once and re-entry: never counted, never refused */
    c.wait_ms = 0;
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.1", &s[2], msg, sizeof(msg)),
                 CLIENTLIM_OK);
    CHECK(s[2] == NULL);
    c.wait_ms = 1000;
    c.reenter = true;
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.1", &s[2], msg, sizeof(msg)),
                 CLIENTLIM_OK);
    CHECK(s[2] == NULL);
    c.reenter = false;
    /* a credential: its own count and its own cap, named in the message */
    c.client = orders;
    c.client_max_waiters = 1;
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.1", &s[2], msg, sizeof(msg)),
                 CLIENTLIM_OK);
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.1", &s[3], msg, sizeof(msg)),
                 CLIENTLIM_FULL);
    CHECK_CONTAINS(msg, "this client: 1, the most");
    CHECK_CONTAINS(msg, "max_waiters");
    counts(cl, &slots, &clients);
    CHECK_EQ_U64(slots, 3);
    CHECK_EQ_U64(clients, 2);
    for (int i = 0; i < 3; i++)
        clientlim_give(cl, s[i]);
    counts(cl, &slots, &clients);
    CHECK_EQ_U64(slots, 0);
    CHECK_EQ_U64(clients, 0);
    clientlim_free(cl);
}

struct worker {
    struct clientlim *cl;
    unsigned id;
    unsigned refused;
};

/* Each thread takes and gives slots of a few shared keys (cap 3), two
 * held at a time: whatever the interleaving, the counts end at 0 and every
 * entry is freed (ASan sees a leak or a double free). */
static void *worker_run(void *arg)
{
    struct worker *w = arg;
    struct clientlim_entry *held[2] = { NULL, NULL };
    char key[16];

    for (unsigned i = 0; i < ROUNDS; i++) {
        unsigned slot = i % 2;
        int n = snprintf(key, sizeof(key), "a:k%u", (i + w->id) % 5);
        clientlim_give(w->cl, held[slot]);
        held[slot] = NULL;
        if (clientlim_take(w->cl, key, (size_t)n, 3, &held[slot]) ==
            CLIENTLIM_FULL)
            w->refused++;
    }
    clientlim_give(w->cl, held[0]);
    clientlim_give(w->cl, held[1]);
    return NULL;
}

static void test_counts_are_exact_under_threads(void)
{
    struct clientlim *cl = clientlim_new(3, 0);
    struct worker w[THREADS];
    pthread_t t[THREADS];
    uint64_t slots, clients, refused = 0;

    CHECK(cl != NULL);
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (struct worker){ .cl = cl, .id = i };
        CHECK(pthread_create(&t[i], NULL, worker_run, &w[i]) == 0);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        refused += w[i].refused;
    }
    counts(cl, &slots, &clients);
    CHECK_EQ_U64(slots, 0);
    CHECK_EQ_U64(clients, 0);
    /* refusals depend on how the threads interleave: only bounded */
    CHECK(refused <= (uint64_t)THREADS * ROUNDS);
    clientlim_free(cl);
}

static void test_addr_text_maps_ipv4_in_ipv6(void)
{
    struct sockaddr_in in = { .sin_family = AF_INET };
    struct sockaddr_in6 in6 = { .sin6_family = AF_INET6 };
    struct sockaddr un = { .sa_family = AF_UNIX };
    char buf[INET6_ADDRSTRLEN];

    inet_pton(AF_INET, "10.1.2.3", &in.sin_addr);
    CHECK_STR_EQ(clientlim_addr((struct sockaddr *)&in, buf), "10.1.2.3");
    inet_pton(AF_INET6, "::ffff:10.1.2.4", &in6.sin6_addr);
    CHECK_STR_EQ(clientlim_addr((struct sockaddr *)&in6, buf), "10.1.2.4");
    inet_pton(AF_INET6, "2001:db8::1", &in6.sin6_addr);
    CHECK_STR_EQ(clientlim_addr((struct sockaddr *)&in6, buf), "2001:db8::1");
    CHECK(clientlim_addr(&un, buf) == NULL);
    CHECK(clientlim_addr(NULL, buf) == NULL);
    /* IPv4 is written by hand: the same text as inet_ntop, widest too */
    static const char *const v4[] = { "0.0.0.0", "255.255.255.255", "127.0.0.1",
                                      "192.168.10.200", "1.20.100.9" };
    for (size_t i = 0; i < sizeof(v4) / sizeof(v4[0]); i++) {
        char want[INET6_ADDRSTRLEN], mapped[64];
        inet_pton(AF_INET, v4[i], &in.sin_addr);
        inet_ntop(AF_INET, &in.sin_addr, want, sizeof(want));
        CHECK_STR_EQ(clientlim_addr((struct sockaddr *)&in, buf), want);
        snprintf(mapped, sizeof(mapped), "::ffff:%s", v4[i]);
        inet_pton(AF_INET6, mapped, &in6.sin6_addr);
        CHECK_STR_EQ(clientlim_addr((struct sockaddr *)&in6, buf), want);
    }
}

/* The value of the sample line that starts with name (its labels
 * included) in the exposition now; -1 if absent. */
static long long sample(const char *name)
{
    size_t len, n = strlen(name);
    char *text = metrics_render(-1, &len);
    long long v = -1;

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ') {
            v = strtoll(p + n + 1, NULL, 10);
            break;
        }
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    free(text);
    return v;
}

static void test_metrics_show_limits_and_waiters(void)
{
    static const char conns[] =
        "lockd_http_limited_total{limit=\"connections\"}";
    static const char waits[] = "lockd_http_limited_total{limit=\"waiters\"}";
    struct clientlim *cl = clientlim_new(1, 0);
    struct api_call c = { .verb = API_VERB_ACQUIRE, .wait_ms = 5 };
    struct clientlim_entry *s1, *s2;
    long long c0 = sample(conns), w0 = sample(waits);
    char msg[200];

    CHECK(cl != NULL);
    CHECK(c0 >= 0 && w0 >= 0);
    metrics_http_limited(METRICS_LIMIT_CONNECTIONS);
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.9", &s1, msg, sizeof(msg)),
                 CLIENTLIM_OK);
    CHECK_EQ_INT(clientlim_admit(cl, &c, "10.0.0.9", &s2, msg, sizeof(msg)),
                 CLIENTLIM_FULL);
    CHECK_EQ_INT(sample(conns), c0 + 1);
    CHECK_EQ_INT(sample(waits), w0 + 1);
    CHECK_EQ_INT(sample("lockd_http_client_waiters"), 1);
    CHECK_EQ_INT(sample("lockd_http_waiting_clients"), 1);
    clientlim_give(cl, s1);
    CHECK_EQ_INT(sample("lockd_http_client_waiters"), 0);
    CHECK_EQ_INT(sample("lockd_http_waiting_clients"), 0);
    clientlim_free(cl);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_take_caps_each_key_and_frees_at_zero),
    CHECK_CASE(test_key_keeps_credentials_and_addresses_apart),
    CHECK_CASE(test_admit_counts_only_calls_that_may_wait),
    CHECK_CASE(test_counts_are_exact_under_threads),
    CHECK_CASE(test_addr_text_maps_ipv4_in_ipv6),
    CHECK_CASE(test_metrics_show_limits_and_waiters),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

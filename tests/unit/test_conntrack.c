/*
 * tests/unit/test_conntrack.c - the client address on access and event
 * lines (conntrack_format_peer), written by hand for IPv4: the same bytes
 * getnameinfo and "%s:%s" wrote; and when the reaper gives memory back
 * after connections closed (conntrack_trim_due).
 */
#include "service/conntrack.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "tests/unit/check.h"

static void v4(const char *ip, unsigned port, char *buf, size_t cap)
{
    struct sockaddr_in in = { .sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port) };

    CHECK(inet_pton(AF_INET, ip, &in.sin_addr) == 1);
    conntrack_format_peer((const struct sockaddr *)&in, buf, cap);
}

static void test_format_peer_ipv4_as_getnameinfo(void)
{
    static const struct {
        const char *ip;
        unsigned port;
    } cases[] = { { "0.0.0.0", 0 },        { "127.0.0.1", 5 },
                  { "10.1.20.255", 8080 }, { "255.255.255.255", 65535 },
                  { "192.168.0.9", 443 },  { "1.22.133.4", 10000 } };
    char buf[64], host[NI_MAXHOST], serv[NI_MAXSERV];
    char want[NI_MAXHOST + NI_MAXSERV + 2];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sockaddr_in in = { .sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)cases[i].port) };
        inet_pton(AF_INET, cases[i].ip, &in.sin_addr);
        CHECK(getnameinfo((struct sockaddr *)&in, sizeof(in), host,
                          sizeof(host), serv, sizeof(serv),
                          NI_NUMERICHOST | NI_NUMERICSERV) == 0);
        snprintf(want, sizeof(want), "%s:%s", host, serv);
        v4(cases[i].ip, cases[i].port, buf, sizeof(buf));
        CHECK_STR_EQ(buf, want);
    }
    v4("255.255.255.255", 65535, buf, 22); /* just fits */
    CHECK_STR_EQ(buf, "255.255.255.255:65535");
    v4("255.255.255.255", 65535, buf, 21); /* does not: nothing */
    CHECK_STR_EQ(buf, "");
    v4("1.2.3.4", 5, buf, 10); /* a short one fits a small buffer */
    CHECK_STR_EQ(buf, "1.2.3.4:5");
    v4("1.2.3.4", 5, buf, 9);
    CHECK_STR_EQ(buf, "");
}

static void test_format_peer_ipv6_and_others(void)
{
    struct sockaddr_in6 in6 = { .sin6_family = AF_INET6,
                                .sin6_port = htons(8080) };
    struct sockaddr_un_like {
        sa_family_t family;
        char path[20];
    } un = { .family = AF_UNIX };
    char buf[64] = "x";

    CHECK(inet_pton(AF_INET6, "::1", &in6.sin6_addr) == 1);
    conntrack_format_peer((const struct sockaddr *)&in6, buf, sizeof(buf));
    CHECK_STR_EQ(buf, "[::1]:8080");
    conntrack_format_peer((const struct sockaddr *)&un, buf, sizeof(buf));
    CHECK_STR_EQ(buf, "");
}

/* One reaper tick every 250 ms: the open counts in turn; which ticks
 * trimmed, as a string of '.' and 'T'. */
static void ticks(struct conntrack_trim *t,
                  int64_t *now,
                  const uint64_t *open,
                  size_t n,
                  char *out)
{
    for (size_t i = 0; i < n; i++) {
        *now += 250000;
        out[i] = conntrack_trim_due(t, open[i], *now) ? 'T' : '.';
    }
    out[n] = '\0';
}

/* A wave of 10,000 that hangs up over three ticks: one trim while they
 * go (the next tick is under a second after it), and one more once the
 * count holds still, for what closed after the first. */
static void test_trim_after_a_wave_settles(void)
{
    struct conntrack_trim t = { 0 };
    int64_t now = 0;
    const uint64_t up[] = { 0, 4000, 10000, 10000, 10000 };
    const uint64_t down[] = { 7000, 2000, 0, 0, 0, 0 };
    char got[16];

    ticks(&t, &now, up, 5, got);
    CHECK_STR_EQ(got, ".....");
    ticks(&t, &now, down, 6, got);
    CHECK_STR_EQ(got, "T..T..");
    /* the second wave likewise: nothing kept from it */
    ticks(&t, &now, up, 5, got);
    CHECK_STR_EQ(got, ".....");
    ticks(&t, &now, down, 6, got);
    CHECK_STR_EQ(got, "T..T..");
}

/* Connections that come and go a few at a time, and a small wave, never
 * trim; a long drain trims at most once a second, and once at its end. */
static void test_trim_rate_and_small_waves(void)
{
    struct conntrack_trim t = { 0 };
    int64_t now = 0;
    const uint64_t churn[] = { 10, 12, 9, 9, 30, 5, 5, 500, 0, 0, 0 };
    const uint64_t full[] = { 20000, 20000 };
    uint64_t drain[24];
    char got[32];

    ticks(&t, &now, churn, 11, got);
    CHECK_STR_EQ(got, "...........");
    ticks(&t, &now, full, 2, got);
    CHECK_STR_EQ(got, "..");
    for (size_t i = 0; i < 24; i++)
        drain[i] = i < 20 ? 20000 - 1000 * (i + 1) : 0;
    ticks(&t, &now, drain, 24, got);
    /* 1,000 a tick: due at the 2nd, then every 4th (a second), and once
     * more when it stops */
    CHECK_STR_EQ(got, ".T...T...T...T...T..T...");
}

static const struct check_case cases[] = {
    CHECK_CASE(test_format_peer_ipv4_as_getnameinfo),
    CHECK_CASE(test_format_peer_ipv6_and_others),
    CHECK_CASE(test_trim_after_a_wave_settles),
    CHECK_CASE(test_trim_rate_and_small_waves),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

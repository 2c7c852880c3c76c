/*
 * tests/bench/stats.c - clock, latency sample arrays and percentiles, RSS
 * and fd-limit helpers shared by loadgen.c and redisbench.c.
 */
#include "tests/bench/stats.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_samples_add(struct bench_samples *s, uint64_t ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        uint64_t *v = realloc(s->v, cap * sizeof *v);

        if (v == NULL) {
            fprintf(stderr, "bench: out of memory for samples\n");
            exit(1);
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ns;
}

void bench_samples_merge(struct bench_samples *dst,
                         const struct bench_samples *src)
{
    for (size_t i = 0; i < src->n; i++)
        bench_samples_add(dst, src->v[i]);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

void bench_samples_sort(struct bench_samples *s)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, cmp_u64);
}

double bench_samples_pct(const struct bench_samples *s, double p)
{
    size_t i;

    if (s->n == 0)
        return 0;
    /* nearest rank: the smallest sample with at least p% at or below it */
    i = (size_t)(p / 100.0 * (double)s->n + 0.999999);
    if (i > 0)
        i--;
    if (i >= s->n)
        i = s->n - 1;
    return (double)s->v[i] / BENCH_NS_PER_MS;
}

double bench_samples_mean_ms(const struct bench_samples *s)
{
    double sum = 0;

    if (s->n == 0)
        return 0;
    for (size_t i = 0; i < s->n; i++)
        sum += (double)s->v[i];
    return sum / (double)s->n / BENCH_NS_PER_MS;
}

double bench_samples_max_ms(const struct bench_samples *s)
{
    return s->n ? (double)s->v[s->n - 1] / BENCH_NS_PER_MS : 0;
}

void bench_samples_free(struct bench_samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

void bench_samples_print_json(FILE *f, const char *name,
                              const struct bench_samples *s)
{
    fprintf(f,
            "\"%s\":{\"n\":%zu,\"mean_ms\":%.4f,\"p50_ms\":%.4f,"
            "\"p99_ms\":%.4f,\"p999_ms\":%.4f,\"max_ms\":%.4f}",
            name, s->n, bench_samples_mean_ms(s), bench_samples_pct(s, 50),
            bench_samples_pct(s, 99), bench_samples_pct(s, 99.9),
            bench_samples_max_ms(s));
}

long long bench_rss_bytes(int pid)
{
    char path[64];
    char line[256];
    long long kb = -1;
    FILE *f;
    int n;

    n = snprintf(path, sizeof path, "/proc/%d/status", pid);
    if (n < 0 || (size_t)n >= sizeof path)
        return -1;
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtoll(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

long long bench_cpu_us(int pid)
{
    char path[64];
    char buf[1024];
    unsigned long long ut = 0;
    unsigned long long st = 0;
    long tck = sysconf(_SC_CLK_TCK);
    char *p;
    size_t n;
    FILE *f;
    int k = snprintf(path, sizeof path, "/proc/%d/stat", pid);

    if (k < 0 || (size_t)k >= sizeof path || tck <= 0)
        return -1;
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the command name may hold spaces: fields count from the last ')' */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                                   "%*u %llu %llu",
                            &ut, &st) != 2)
        return -1;
    return (long long)((ut + st) * 1000000ull / (unsigned long long)tck);
}

long long bench_raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t old = rl.rlim_cur;

        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return (long long)old;
    }
    return (long long)rl.rlim_cur;
}

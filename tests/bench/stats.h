/*
 * tests/bench/stats.h - what the bench programs share: a monotonic clock in
 * nanoseconds, growable arrays of latency samples with percentiles, and the
 * JSON fragments every program prints on its one result line.
 */
#ifndef TESTS_BENCH_STATS_H
#define TESTS_BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_NS_PER_MS 1000000.0

/* Latency samples in nanoseconds; owned buffer, grown on demand. */
struct bench_samples {
    uint64_t *v; /* owned */
    size_t n;
    size_t cap;
};

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* Append one sample; exits the program when out of memory (a bench tool,
 * not the service: no partial result is worth printing then). */
void bench_samples_add(struct bench_samples *s, uint64_t ns);

/* Append every sample of src to dst (src is left as it was). */
void bench_samples_merge(struct bench_samples *dst,
                         const struct bench_samples *src);

/* Sort in place; call once before bench_samples_pct(). */
void bench_samples_sort(struct bench_samples *s);

/* Percentile p (0..100) of sorted samples, in ms; 0 when empty. */
double bench_samples_pct(const struct bench_samples *s, double p);

double bench_samples_mean_ms(const struct bench_samples *s);

/* Sorted samples' maximum in ms; 0 when empty. */
double bench_samples_max_ms(const struct bench_samples *s);

void bench_samples_free(struct bench_samples *s);

/* Print `"name":{"n":..,"mean_ms":..,"p50_ms":..,"p99_ms":..,"p999_ms":..,
 * "max_ms":..}` for sorted samples (no leading comma). */
void bench_samples_print_json(FILE *f, const char *name,
                              const struct bench_samples *s);

/* VmRSS of process pid in bytes from /proc/<pid>/status; -1 on failure. */
long long bench_rss_bytes(int pid);

/* CPU time (user + system, all threads) of process pid in microseconds
 * from /proc/<pid>/stat; -1 on failure. */
long long bench_cpu_us(int pid);

/* Raise RLIMIT_NOFILE's soft limit to the hard limit; returns the new soft
 * limit (or the old one if it could not be raised). */
long long bench_raise_nofile(void);

#endif

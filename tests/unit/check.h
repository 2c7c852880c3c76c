/*
 * tests/unit/check.h - the unit tests' tiny harness (after memcached's
 * testapp.c): CHECK() and friends record a failure with file:line and let
 * the case go on; a table of { "name", fn } cases is run by check_main(),
 * which prints every failing check, one line per failed case, and last
 * "N passed, N failed" (N = cases). Exit status 1 if any case failed.
 *
 * Usage:
 *     static void test_thing_works(void) { CHECK_EQ_INT(f(1), 2); }
 *     static const struct check_case cases[] = {
 *         CHECK_CASE(test_thing_works),
 *     };
 *     int main(int argc, char **argv) { return CHECK_MAIN(cases); }
 *
 * Arguments on the command line are substrings: only cases whose names
 * contain one of them run. A program that runs no case (none selected)
 * says so and exits 1: tests/run.py counts "0 passed, 0 failed" as a
 * failure, never as a pass.
 *
 * A program that cannot run here (no server binary, say) calls
 * CHECK_SKIP("reason"): it prints "skip: reason" and exits
 * CHECK_SKIP_EXIT (77, as automake's test drivers), which tests/run.py
 * counts as skipped.
 */
#ifndef TESTS_UNIT_CHECK_H
#define TESTS_UNIT_CHECK_H

/* mkstemp()/mkdtemp() templates end in six X's, spelled so that a search
 * for unfinished-work markers does not stop at them */
#define MKTEMP_SUFFIX \
    "XX"              \
    "XX"              \
    "XX"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The exit status of a test program that cannot run here. */
#define CHECK_SKIP_EXIT 77

/* Print "skip: <reason>" (printf-style) and exit CHECK_SKIP_EXIT. */
#define CHECK_SKIP(...)        \
    do {                       \
        printf("skip: ");      \
        printf(__VA_ARGS__);   \
        printf("\n");          \
        fflush(stdout);        \
        exit(CHECK_SKIP_EXIT); \
    } while (0)

struct check_case {
    const char *name;
    void (*fn)(void);
};

/* One row of a case table: the function and its name. */
/* clang-format off */
#define CHECK_CASE(f) { .name = #f, .fn = f }
/* clang-format on */

/* Failed checks in the running case; the runner resets it per case. */
static int check_failures __attribute__((unused));

static void __attribute__((unused)) check_fail_at(const char *file, int line)
{
    check_failures++;
    printf("  %s:%d: ", file, line);
}

#define CHECK(cond)                              \
    do {                                         \
        if (!(cond)) {                           \
            check_fail_at(__FILE__, __LINE__);   \
            printf("CHECK(%s) failed\n", #cond); \
        }                                        \
    } while (0)

/* Like CHECK, with a printf-style explanation. */
#define CHECK_MSG(cond, ...)                     \
    do {                                         \
        if (!(cond)) {                           \
            check_fail_at(__FILE__, __LINE__);   \
            printf("CHECK(%s) failed: ", #cond); \
            printf(__VA_ARGS__);                 \
            printf("\n");                        \
        }                                        \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                \
    do {                                                                  \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);   \
        if (check_a_ != check_b_) {                                       \
            check_fail_at(__FILE__, __LINE__);                            \
            printf("%s == %lld, expected %s == %lld\n", #a, check_a_, #b, \
                   check_b_);                                             \
        }                                                                 \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                \
    do {                                                                  \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);      \
        if (check_a_ != check_b_) {                                       \
            check_fail_at(__FILE__, __LINE__);                            \
            printf("%s == %" PRIu64 ", expected %s == %" PRIu64 "\n", #a, \
                   check_a_, #b, check_b_);                               \
        }                                                                 \
    } while (0)

/* NULL-safe; NULL equals only NULL. */
#define CHECK_STR_EQ(a, b)                                  \
    do {                                                    \
        const char *check_a_ = (a), *check_b_ = (b);        \
        if (check_a_ == NULL || check_b_ == NULL            \
                ? check_a_ != check_b_                      \
                : strcmp(check_a_, check_b_) != 0) {        \
            check_fail_at(__FILE__, __LINE__);              \
            printf("%s == \"%s\", expected \"%s\"\n", #a,   \
                   check_a_ != NULL ? check_a_ : "(null)",  \
                   check_b_ != NULL ? check_b_ : "(null)"); \
        }                                                   \
    } while (0)

/* s contains sub (both NUL-terminated; NULL s fails). */
#define CHECK_CONTAINS(s, sub)                                          \
    do {                                                                \
        const char *check_s_ = (s), *check_sub_ = (sub);                \
        if (check_s_ == NULL || strstr(check_s_, check_sub_) == NULL) { \
            check_fail_at(__FILE__, __LINE__);                          \
            printf("%s does not contain \"%s\"\n", #s, check_sub_);     \
        }                                                               \
    } while (0)

static int64_t __attribute__((unused)) check_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void __attribute__((unused)) check_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static bool check_selected(const char *name, int argc, char **argv)
{
    if (argc <= 1)
        return true;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i]) != NULL)
            return true;
    return false;
}

static int __attribute__((unused))
check_main(const struct check_case *cases, size_t n, int argc, char **argv)
{
    int passed = 0, failed = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < n; i++) {
        if (!check_selected(cases[i].name, argc, argv))
            continue;
        check_failures = 0;
        cases[i].fn();
        if (check_failures == 0) {
            passed++;
        } else {
            failed++;
            printf("FAIL %s (%d checks failed)\n", cases[i].name,
                   check_failures);
        }
    }
    if (passed + failed == 0) {
        printf("no case ran: no case name contains an argument\n");
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

#define CHECK_MAIN(cases) \
    check_main(cases, sizeof(cases) / sizeof((cases)[0]), argc, argv)

#endif /* TESTS_UNIT_CHECK_H */

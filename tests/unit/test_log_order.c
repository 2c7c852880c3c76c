/*
 * tests/unit/test_log_order.c - lib/log.c's buffered output: lines of
 * many threads (messages, access lines, events) come out whole, none
 * lost, in time order, also across a log_reopen() in the middle (the
 * logrotate case: rename, then reopen).
 */
#include "lib/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/check.h"

#define THREADS 8
#define LINES   2000

static char dir[64];

static void *writer(void *arg)
{
    int id = (int)(intptr_t)arg;

    for (int i = 0; i < LINES; i++) {
        char path[64];
        struct log_field f[2] = { { .name = "t", .num = id },
                                  { .name = "n", .num = i } };
        snprintf(path, sizeof(path), "/t%d/n%d", id, i);
        switch (i % 3) {
        case 0:
            log_info("t=%d n=%d", id, i);
            break;
        case 1:
            log_access("GET", path, 200, 5, NULL, f, 2);
            break;
        default:
            log_event(LOG_LEVEL_INFO, "lock.test", f, 2);
            break;
        }
        if (i % 10 == 9) /* spread the lines over many flush rounds */
            usleep(1500);
    }
    return NULL;
}

/* Thread and number of one line written by writer(); -1 if not one. */
static int parse_line(const char *line, int *t, int *n)
{
    const char *p;

    if ((p = strstr(line, "\"msg\":\"t=")) != NULL)
        return sscanf(p, "\"msg\":\"t=%d n=%d\"", t, n) == 2 ? 0 : -1;
    if ((p = strstr(line, "\"path\":\"/t")) != NULL)
        return sscanf(p, "\"path\":\"/t%d/n%d\"", t, n) == 2 ? 0 : -1;
    if ((p = strstr(line, ",\"t\":")) != NULL)
        return sscanf(p, ",\"t\":%d,\"n\":%d", t, n) == 2 ? 0 : -1;
    return -1;
}

/* Check one file's lines: whole, in time order, each thread's in its
 * order (next[t] is the number each thread's next line must have). The
 * first and last times go to first/last (24 bytes + NUL). Lines read. */
static int check_file(const char *path, int *next, char *first, char *last)
{
    FILE *f = fopen(path, "r");
    char line[8192], prev[32] = "";
    int count = 0, t, n, bad_order = 0, bad_form = 0, bad_seq = 0;

    CHECK(f != NULL);
    if (f == NULL)
        return 0;
    first[0] = '\0';
    while (fgets(line, sizeof(line), f) != NULL) {
        size_t len = strlen(line);
        if (len < 40 || strncmp(line, "{\"time\":\"", 9) != 0 ||
            strcmp(line + len - 2, "}\n") != 0) {
            bad_form++;
            continue;
        }
        char now[32];
        memcpy(now, line + 9, 24);
        now[24] = '\0';
        if (strcmp(now, prev) < 0)
            bad_order++;
        memcpy(prev, now, sizeof(now));
        if (first[0] == '\0')
            memcpy(first, now, 25);
        if (parse_line(line, &t, &n) != 0)
            continue; /* not a writer's line */
        if (t < 0 || t >= THREADS || n != next[t])
            bad_seq++;
        else
            next[t]++;
        count++;
    }
    fclose(f);
    memcpy(last, prev, 25);
    CHECK_EQ_INT(bad_form, 0);
    CHECK_EQ_INT(bad_order, 0);
    CHECK_EQ_INT(bad_seq, 0);
    return count;
}

/* Run the writers against path; halfway (by time) rename it to rotated
 * and reopen when rotated is not NULL. */
static void run_writers(const char *path, const char *rotated)
{
    pthread_t th[THREADS];
    char err[256];

    CHECK_EQ_INT(log_open_file(path, err, sizeof(err)), 0);
    log_setup(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
    CHECK_EQ_INT(log_start(), 0);
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, writer, (void *)(intptr_t)i) == 0);
    if (rotated != NULL) {
        usleep(150 * 1000);
        CHECK(rename(path, rotated) == 0);
        CHECK_EQ_INT(log_reopen(err, sizeof(err)), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    log_stop();
}

static void test_log_lines_of_threads_come_out_in_time_order(void)
{
    char path[128], first[32], last[32];
    int next[THREADS] = { 0 };

    snprintf(path, sizeof(path), "%s/one.log", dir);
    run_writers(path, NULL);
    CHECK_EQ_INT(check_file(path, next, first, last), THREADS * LINES);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ_INT(next[i], LINES);
    unlink(path);
}

static void test_log_reopen_loses_and_splits_nothing(void)
{
    char path[128], old[128], first_old[32], last_old[32], first_new[32],
        last_new[32];
    int next[THREADS] = { 0 }, n_old, n_new;

    snprintf(path, sizeof(path), "%s/two.log", dir);
    snprintf(old, sizeof(old), "%s/two.log.1", dir);
    run_writers(path, old);
    n_old = check_file(old, next, first_old, last_old);
    n_new = check_file(path, next, first_new, last_new);
    CHECK(n_old > 0);
    CHECK(n_new > 0);
    CHECK_EQ_INT(n_old + n_new, THREADS * LINES);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ_INT(next[i], LINES);
    /* every line in the old file is older than every line in the new */
    CHECK_MSG(strcmp(last_old, first_new) <= 0, "%s > %s", last_old, first_new);
    unlink(path);
    unlink(old);
}

static void test_log_reopen_failure_keeps_old_file(void)
{
    char sub[96], path[128], err[256];

    snprintf(sub, sizeof(sub), "%s/sub", dir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(path, sizeof(path), "%s/three.log", sub);
    CHECK_EQ_INT(log_open_file(path, err, sizeof(err)), 0);
    CHECK_STR_EQ(log_file_path(), path);
    CHECK(unlink(path) == 0);
    CHECK(chmod(sub, 0500) == 0); /* the new file cannot be made */
    if (geteuid() != 0) {         /* root may write anyway */
        CHECK_EQ_INT(log_reopen(err, sizeof(err)), -1);
        CHECK_CONTAINS(err, "three.log");
    }
    CHECK(chmod(sub, 0700) == 0);
    CHECK_EQ_INT(log_reopen(err, sizeof(err)), 0);
    CHECK(access(path, F_OK) == 0);
    CHECK_EQ_INT(log_open_file("/nonexistent/dir/x.log", err, sizeof(err)), -1);
    CHECK_CONTAINS(err, "/nonexistent/dir/x.log");
}

static const struct check_case cases[] = {
    CHECK_CASE(test_log_lines_of_threads_come_out_in_time_order),
    CHECK_CASE(test_log_reopen_loses_and_splits_nothing),
    CHECK_CASE(test_log_reopen_failure_keeps_old_file),
};

int main(int argc, char **argv)
{
    int rc;
    char cmd[96];

    snprintf(dir, sizeof(dir), "/tmp/lockd-log-" MKTEMP_SUFFIX);
    if (mkdtemp(dir) == NULL)
        return 1;
    rc = CHECK_MAIN(cases);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}

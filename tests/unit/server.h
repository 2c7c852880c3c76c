/*
 * tests/unit/server.h - what the adapter test programs (test_redis.c,
 * test_zookeeper.c, test_mysql.c) share: a real store server run as a child
 * process on a free loopback port in a temp dir, and a recorder for the
 * adapter's notify hook. Header-only (static functions): the Makefile links
 * each tests/unit/test_X.c alone with the library objects.
 *
 * Usage:
 *     static struct test_server srv = TEST_SERVER_INIT;
 *     static int ping(void) { ... srv.port ... }
 *     if (testsrv_setup(&srv, "redis") != 0 ||
 *         testsrv_start(&srv, argv, ping, 100, 50) != 0) skip;
 *     ...
 *     testsrv_signal(&srv, SIGSTOP); testsrv_signal(&srv, SIGCONT);
 *     testsrv_cleanup(&srv, SIGTERM);
 *
 * With TEST_BE_OPS defined before the #include, also the calls into the
 * adapter every case uses: be_open(), acq(), acq_full(), ren(), rel().
 */
#ifndef TESTS_UNIT_SERVER_H
#define TESTS_UNIT_SERVER_H

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/backend.h"
#include "tests/unit/check.h"

/* The exit status of a program that could test nothing here (its store's
 * server cannot run): the runner counts it as skipped, never as passed. */
#ifndef SKIP_EXIT
#define SKIP_EXIT 77
#endif

struct test_server {
    pid_t pid;    /* the running server, -1 when none */
    int port;     /* the loopback port it listens on */
    char dir[64]; /* its temp dir, "" when none */
};

/* clang-format off */
#define TEST_SERVER_INIT { .pid = -1, .port = -1, .dir = "" }
/* clang-format on */

/* A loopback TCP port nobody listens on right now; -1 on failure. */
static int __attribute__((unused)) testsrv_free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), p = -1;

    if (fd < 0)
        return -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        p = ntohs(a.sin_port);
    close(fd);
    return p;
}

/* Pick a free port and make /tmp/lockd-unit-<name>-<random>; 0 or -1. */
static int __attribute__((unused))
testsrv_setup(struct test_server *s, const char *name)
{
    snprintf(s->dir, sizeof(s->dir), "/tmp/lockd-unit-%s-" MKTEMP_SUFFIX, name);
    s->port = testsrv_free_port();
    if (mkdtemp(s->dir) == NULL) {
        s->dir[0] = '\0';
        return -1;
    }
    return s->port > 0 ? 0 : -1;
}

/* Fork and exec argv[0] (an absolute path) with stdout and stderr on
 * /dev/null; the child's pid, or -1. */
static pid_t testsrv_spawn(char *const argv[])
{
    pid_t pid = fork();

    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Run argv to completion (quietly); 0 if it exited 0. */
static int __attribute__((unused)) testsrv_run(char *const argv[])
{
    pid_t pid = testsrv_spawn(argv);
    int status;

    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Start argv as s's server and poll ready() up to `tries` times, step_ms
 * apart: 0 once it answers; -1 if it could not start, exited, or never
 * answered. */
static int __attribute__((unused)) testsrv_start(struct test_server *s,
                                                 char *const argv[],
                                                 int (*ready)(void),
                                                 int tries,
                                                 int step_ms)
{
    s->pid = testsrv_spawn(argv);
    if (s->pid < 0)
        return -1;
    for (int i = 0; i < tries; i++) {
        if (ready())
            return 0;
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = -1;
            return -1;
        }
        check_sleep_ms(step_ms);
    }
    return -1;
}

/* After a SIGSTOP: until every thread of pid has stopped (at most 2 s).
 * kill() only queues the signal; on a busy machine a thread of the server
 * may still answer a request sent right after it. */
static void __attribute__((unused)) testsrv_wait_stopped(pid_t pid)
{
    char dir[64];

    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    for (int tries = 0; tries < 2000; tries++) {
        int running = 0;
        struct dirent *e;
        DIR *d = opendir(dir);

        if (d == NULL)
            return; /* gone */
        while ((e = readdir(d)) != NULL) {
            char path[352], st[512], *rp;
            FILE *f;

            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s/stat", dir, e->d_name);
            f = fopen(path, "r");
            if (f == NULL)
                continue;
            if (fgets(st, sizeof(st), f) != NULL &&
                (rp = strrchr(st, ')')) != NULL && rp[1] == ' ' &&
                strchr("TtZX", rp[2]) == NULL)
                running++;
            fclose(f);
        }
        closedir(d);
        if (running == 0)
            return;
        usleep(1000);
    }
    printf("warning: pid %d has not stopped 2 s after SIGSTOP\n", (int)pid);
}

/* Send sig to the server (SIGSTOP, SIGCONT, ...); after SIGKILL or SIGTERM
 * wait for it to end. */
static void __attribute__((unused))
testsrv_signal(struct test_server *s, int sig)
{
    if (s->pid > 0) {
        kill(s->pid, sig);
        if (sig == SIGSTOP)
            testsrv_wait_stopped(s->pid);
        if (sig == SIGKILL || sig == SIGTERM) {
            waitpid(s->pid, NULL, 0);
            s->pid = -1;
        }
    }
}

/* End the server with sig (SIGCONT first, in case it is stopped) and
 * remove its temp dir. */
static void __attribute__((unused))
testsrv_cleanup(struct test_server *s, int sig)
{
    testsrv_signal(s, SIGCONT);
    testsrv_signal(s, sig);
    if (s->dir[0] != '\0') {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            printf("warning: could not remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
}

/* ---- the notify hook's calls: the last key and how many ---- */

static pthread_mutex_t notes_lock = PTHREAD_MUTEX_INITIALIZER;
static char notes_key[LOCK_KEY_MAX + 1];
static int notes_count;

/* Record one call of hooks->notify (thread-safe). */
static void __attribute__((unused)) notes_record(const char *key, size_t len)
{
    pthread_mutex_lock(&notes_lock);
    memcpy(notes_key, key, len);
    notes_key[len] = '\0';
    notes_count++;
    pthread_mutex_unlock(&notes_lock);
}

/* A backend_hooks.notify that records every call, whatever its arg. */
static void __attribute__((unused))
notes_hook(void *arg, const char *key, size_t len)
{
    (void)arg;
    notes_record(key, len);
}

static void __attribute__((unused)) notes_reset(void)
{
    pthread_mutex_lock(&notes_lock);
    notes_count = 0;
    notes_key[0] = '\0';
    pthread_mutex_unlock(&notes_lock);
}

/* Whether the last notification named key, waiting up to ms for it. */
static int __attribute__((unused)) notes_heard(const char *key, int ms)
{
    for (int64_t until = check_mono_ms() + ms;;) {
        int hit;
        pthread_mutex_lock(&notes_lock);
        hit = notes_count > 0 && strcmp(notes_key, key) == 0;
        pthread_mutex_unlock(&notes_lock);
        if (hit || check_mono_ms() >= until)
            return hit;
        check_sleep_ms(5);
    }
}

/* ---- the adapter's ops, called as api/ calls them ----
 * The including program defines TEST_BE_OPS as its adapter's ops table
 * (e.g. `#define TEST_BE_OPS redis_be_ops`) before including this header. */
#ifdef TEST_BE_OPS

static struct backend *__attribute__((unused))
be_open(const char *url, backend_notify_fn notify, void *arg)
{
    struct backend_hooks hooks = { notify, arg };
    struct backend *be = NULL;

    if (TEST_BE_OPS.open(url, &hooks, &be) != BACKEND_OK)
        return NULL;
    return be;
}

/* acquire with every field of the request; g is zeroed first */
static enum backend_result __attribute__((unused))
acq_full(struct backend *be,
         const char *key,
         const char *tok,
         const char *owner,
         uint64_t ttl,
         struct lock_waiter *w,
         struct lock_grant *g)
{
    struct lock_req req = { .key = key,
                            .key_len = strlen(key),
                            .token = tok,
                            .owner = owner,
                            .ttl_ms = ttl,
                            .waiter = w };

    memset(g, 0, sizeof(*g));
    return TEST_BE_OPS.acquire(be, &req, g);
}

/* try-once acquire without an owner */
static enum backend_result __attribute__((unused)) acq(struct backend *be,
                                                       const char *key,
                                                       const char *tok,
                                                       uint64_t ttl,
                                                       struct lock_grant *g)
{
    return acq_full(be, key, tok, NULL, ttl, NULL, g);
}

static enum backend_result __attribute__((unused)) ren(struct backend *be,
                                                       const char *key,
                                                       const char *tok,
                                                       uint64_t ttl,
                                                       struct lock_grant *g)
{
    struct lock_req req = {
        .key = key, .key_len = strlen(key), .token = tok, .ttl_ms = ttl
    };

    memset(g, 0, sizeof(*g));
    return TEST_BE_OPS.renew(be, &req, g);
}

static enum backend_result __attribute__((unused))
rel(struct backend *be, const char *key, const char *tok)
{
    struct lock_req req = { .key = key, .key_len = strlen(key), .token = tok };

    return TEST_BE_OPS.release(be, &req);
}

#endif /* TEST_BE_OPS */

#endif /* TESTS_UNIT_SERVER_H */

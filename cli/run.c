/*
 * cli/run.c - lockctl run: one single-threaded loop that keeps a lock
 * while a child process runs. curl_multi_poll waits on the renew in
 * flight and on a signalfd (SIGCHLD and the signals forwarded to the
 * child's process group) at once, with a timeout to the next renew, the
 * lock's deadline or the SIGKILL after --grace.
 *
 * The lock is ours until the time its last successful acquire or renew
 * was sent plus the ttl_ms lockd answered; a margin before that, with no
 * renew through, it counts as lost and the child is stopped.
 *
 * From the start, before the acquire, SIGINT, SIGTERM, SIGHUP and SIGQUIT
 * are blocked and read from the signalfd: one that comes before the
 * command started stops the acquire (cli/http.c watches the signalfd),
 * gives back a grant that came anyway, and lockctl exits 128+N; never is
 * a grant left to its TTL by a lockctl killed while it was on its way.
 */
#include "cli/run.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cmds.h"
#include "cli/output.h"
#include "lib/clock.h"

#define RELEASE_BUDGET_MS 5000 /* retrying a release after the child */
#define BACKOFF_FIRST_MS  100
#define BACKOFF_MAX_MS    1000
#define POLL_MAX_MS       1000

struct run {
    const struct opts *o;
    const struct http_conf *conf;
    char label[1024]; /* the keys, for messages */
    char *token;      /* owned */
    int64_t ttl_ms;   /* what lockd last answered */
    int64_t deadline; /* mono ms: the lock is ours until then at most */
    int64_t next_renew;
    int64_t backoff;
    struct http_call *renew; /* in flight in multi, or NULL */
    CURLM *multi;
    int sfd;
    sigset_t sigs, old_mask; /* sigs: what sfd reads */
    bool masked;             /* old_mask to be restored */
    int stop_sig;            /* a stop signal before the command, or 0 */
    pid_t child;
    int status;
    bool reaped, lost, killed, tty;
    bool draining;   /* the command exited, processes of its group did not */
    int64_t kill_at; /* mono ms: SIGKILL to the group, once lost/draining */
};

static int64_t margin(const struct run *r)
{
    return r->ttl_ms / 10 > 50 ? r->ttl_ms / 10 : 50;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static const int stop_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };

/* Step 0, before the acquire: the stop signals, except those ignored on
 * entry (nohup's SIGHUP stays ignored, for the command too), and SIGCHLD
 * are blocked; the stop signals go to a signalfd. 0, or -1. */
static int watch_signals(struct run *r)
{
    struct sigaction sa;
    sigset_t block;

    sigemptyset(&r->sigs);
    for (size_t i = 0; i < sizeof stop_sigs / sizeof stop_sigs[0]; i++)
        if (sigaction(stop_sigs[i], NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
            sigaddset(&r->sigs, stop_sigs[i]);
    block = r->sigs;
    sigaddset(&block, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &block, &r->old_mask) != 0)
        return -1;
    r->masked = true;
    r->sfd = signalfd(-1, &r->sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    return r->sfd < 0 ? -1 : 0;
}

/* Before the child: the first stop signal noted so far, or 0. */
static int stop_signal(struct run *r)
{
    struct signalfd_siginfo si;

    if (r->stop_sig == 0 && read(r->sfd, &si, sizeof si) == (ssize_t)sizeof si)
        r->stop_sig = (int)si.ssi_signo;
    return r->stop_sig;
}

/* LOCKD_* for the child, from the grant: 0, or -1. */
static int export_grant(struct run *r, json_t *grant)
{
    const struct opts *o = r->o;
    json_t *fences = json_object_get(grant, "fences");
    json_t *keys = json_object_get(grant, "keys");
    char num[32];
    char *s;
    int bad = 0;

    bad |= setenv("LOCKD_URL", r->conf->url, 1);
    bad |= setenv("LOCKD_TOKEN", r->token, 1);
    snprintf(num, sizeof num, "%lld", (long long)r->ttl_ms);
    bad |= setenv("LOCKD_TTL_MS", num, 1);
    if (o->nkeys == 1) {
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(grant, "fence")));
        bad |= setenv("LOCKD_KEY", o->keys[0], 1);
        bad |= setenv("LOCKD_FENCE", num, 1);
        return bad != 0 ? -1 : 0;
    }
    s = json_dumps(keys, JSON_COMPACT);
    bad |= s == NULL || setenv("LOCKD_KEYS", s, 1) != 0;
    free(s);
    s = json_dumps(fences, JSON_COMPACT);
    bad |= s == NULL || setenv("LOCKD_FENCES", s, 1) != 0;
    free(s);
    return bad != 0 ? -1 : 0;
}

/* Step 1: the lock. 0 when granted (r->token, ttl, deadline set), else
 * the exit code. */
static int take_lock(struct run *r)
{
    const struct opts *o = r->o;
    struct http_call *c = NULL;
    int rc = cmds_acquire(o, r->conf, &c);
    json_t *ttl, *tok;

    if (c == NULL)
        return EXIT_INTERNAL;
    if (rc != EXIT_OK && stop_signal(r) != 0) { /* no error: we stopped it */
        http_call_free(c);
        return EXIT_INTERNAL;
    }
    if (rc != EXIT_OK) {
        output_error(o, c, false);
        http_call_free(c);
        return rc == EXIT_HELD ? o->exit_held : rc;
    }
    ttl = json_object_get(c->json, "ttl_ms");
    tok = json_object_get(c->json, "token");
    if (!json_is_integer(ttl) || json_integer_value(ttl) < 1 ||
        !json_is_string(tok)) {
        fprintf(stderr, "lockctl: %s: lockd's grant has no token or ttl_ms\n",
                r->label);
        http_call_free(c);
        return EXIT_INTERNAL;
    }
    r->token = strdup(json_string_value(tok));
    r->ttl_ms = json_integer_value(ttl);
    /* a grant after a wait came at a moment we cannot see: count from its
     * answer (the margin covers the way back) */
    r->deadline = (o->wait_ms > 0 ? clock_mono_ms() : c->sent_ms) + r->ttl_ms;
    r->next_renew = r->deadline - r->ttl_ms + r->ttl_ms / 3;
    rc = r->token == NULL || export_grant(r, c->json) != 0 ? EXIT_INTERNAL
                                                           : EXIT_OK;
    http_call_free(c);
    return rc;
}

/* In the child, between fork and exec: never returns. */
static void exec_child(struct run *r, pid_t parent)
{
    char *const *argv = r->o->child_argv;

    setpgid(0, 0);
    if (r->tty)
        tcsetpgrp(STDIN_FILENO, getpid()); /* SIGTTOU still ignored */
    signal(SIGTTOU, SIG_DFL);
    /* the command's signals as lockctl found them: default, or ignored */
    for (size_t i = 0; i < sizeof stop_sigs / sizeof stop_sigs[0]; i++)
        if (sigismember(&r->sigs, stop_sigs[i]) == 1)
            signal(stop_sigs[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, &r->old_mask, NULL);
    /* lockctl gone (killed -9) means no one renews: stop too */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(r->o->exit_lost);
    execvp(argv[0], argv);
    fprintf(stderr, "lockctl: %s: %s\n", argv[0], strerror(errno));
    _exit(errno == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_RUN);
}

/* Step 2: SIGCHLD into the signalfd too, then fork and exec. 0, or -1.
 * A stop signal from now on stays in the signalfd, for hold() to pass on
 * to the command's group. */
static int start_child(struct run *r)
{
    pid_t parent = getpid();

    sigaddset(&r->sigs, SIGCHLD);
    if (signalfd(r->sfd, &r->sigs, SFD_CLOEXEC | SFD_NONBLOCK) < 0)
        return -1;
    r->tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
    if (r->tty)
        signal(SIGTTOU, SIG_IGN);
    /* orphans of the command come to lockctl, which reaps them: its group
     * is empty once all are gone, and no zombie keeps it alive */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    fflush(NULL);
    r->child = fork();
    if (r->child < 0)
        return -1;
    if (r->child == 0)
        exec_child(r, parent);
    /* the child does it too, whoever is first (EACCES once it exec'd).
     * The terminal only the child takes, before its exec: taken here, it
     * could come after the command gave it to a job of its own. */
    setpgid(r->child, r->child);
    return 0;
}

static void drop_renew(struct run *r)
{
    if (r->renew == NULL)
        return;
    curl_multi_remove_handle(r->multi, r->renew->easy);
    http_call_free(r->renew);
    r->renew = NULL;
}

static void lose(struct run *r, const char *why)
{
    if (r->lost)
        return;
    fprintf(stderr, "lockctl: lost the lock on %s: %s; stopping the command\n",
            r->label, why);
    r->lost = true;
    drop_renew(r);
    kill(-r->child, SIGTERM);
    kill(-r->child, SIGCONT); /* a stopped job would never see it */
    r->kill_at = clock_mono_ms() + r->o->grace_ms;
}

static void start_renew(struct run *r, int64_t now)
{
    int64_t left = r->deadline - margin(r) - now;

    r->renew =
        cmds_renew_call(r->o, r->conf, r->token, min64(r->o->timeout_ms, left));
    if (r->renew == NULL) {
        r->next_renew = now + BACKOFF_FIRST_MS; /* out of memory: later */
        return;
    }
    http_call_started(r->renew);
    if (curl_multi_add_handle(r->multi, r->renew->easy) != CURLM_OK) {
        http_call_free(r->renew);
        r->renew = NULL;
        r->next_renew = now + BACKOFF_FIRST_MS;
    }
}

static void renew_failed(struct run *r, struct http_call *c, int64_t now)
{
    char why[512];
    const char *code = http_error_code(c);

    if (c->status == 404 || c->status == 409 ||
        (c->status >= 400 && c->status < 500 && c->status != 429)) {
        snprintf(why, sizeof why, "lockd answered %ld %s to a renew", c->status,
                 code != NULL ? code : "");
        lose(r, why);
        return;
    }
    r->next_renew =
        now + (c->retry_after_ms > 0 ? c->retry_after_ms : r->backoff);
    r->backoff = min64(r->backoff * 2, BACKOFF_MAX_MS);
}

static void renew_done(struct run *r, CURLcode cc)
{
    struct http_call *c = r->renew;
    json_t *ttl;
    int64_t now = clock_mono_ms();

    curl_multi_remove_handle(r->multi, c->easy);
    r->renew = NULL;
    http_call_finish(c, cc);
    ttl = json_object_get(c->json, "ttl_ms");
    if (c->status == 200 && json_is_integer(ttl) &&
        json_integer_value(ttl) >= 1) {
        r->ttl_ms = json_integer_value(ttl);
        r->deadline = c->sent_ms + r->ttl_ms;
        r->next_renew = c->sent_ms + r->ttl_ms / 3;
        r->backoff = BACKOFF_FIRST_MS;
    } else {
        renew_failed(r, c, now);
    }
    http_call_free(c);
}

static void read_signals(struct run *r)
{
    struct signalfd_siginfo si;

    while (read(r->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo != SIGCHLD && (!r->reaped || r->draining))
            kill(-r->child, (int)si.ssi_signo);
    }
}

/* How long the loop may sleep from now. */
static int poll_timeout(const struct run *r, int64_t now)
{
    int64_t t = POLL_MAX_MS;

    if (!r->lost) {
        t = min64(t, r->deadline - margin(r) - now);
        if (r->renew == NULL)
            t = min64(t, r->next_renew - now);
    }
    if ((r->lost || r->draining) && !r->killed)
        t = min64(t, r->kill_at - now);
    return t < 0 ? 0 : (int)t;
}

/* One turn of the loop: timers, then a wait on curl and the signalfd. */
static int turn(struct run *r)
{
    struct curl_waitfd wfd = { .fd = r->sfd, .events = CURL_WAIT_POLLIN };
    int64_t now = clock_mono_ms();
    int running;
    CURLMsg *m;

    if (!r->lost && now >= r->deadline - margin(r))
        lose(r, "lockd unreachable and the TTL is about to pass");
    else if (!r->lost && r->renew == NULL && now >= r->next_renew)
        start_renew(r, now);
    if ((r->lost || r->draining) && !r->killed && now >= r->kill_at) {
        kill(-r->child, SIGKILL);
        r->killed = true;
    }
    if (curl_multi_poll(r->multi, &wfd, 1, poll_timeout(r, now), NULL) !=
        CURLM_OK)
        return -1;
    if (curl_multi_perform(r->multi, &running) != CURLM_OK)
        return -1;
    for (;;) {
        m = curl_multi_info_read(r->multi, &running);
        if (m == NULL)
            break;
        if (m->msg == CURLMSG_DONE && r->renew != NULL &&
            m->easy_handle == r->renew->easy)
            renew_done(r, m->data.result);
    }
    read_signals(r);
    return 0;
}

/* Whether any process (a zombie too) is left in the command's group. */
static bool group_alive(const struct run *r)
{
    return kill(-r->child, 0) == 0 || errno == EPERM;
}

/* The command exited: what it left running in its group (a job put in the
 * background, say) would go on unlocked after the release, so it gets
 * SIGTERM, SIGKILL after --grace, while the lock is still renewed. */
static void start_draining(struct run *r)
{
    fprintf(stderr,
            "lockctl: %s: the command exited and left processes in its "
            "group; stopping them before the release\n",
            r->label);
    r->draining = true;
    if (!r->lost) {
        kill(-r->child, SIGTERM);
        kill(-r->child, SIGCONT);
        r->kill_at = clock_mono_ms() + r->o->grace_ms;
    }
}

/* Step 3: until the child, and every process of its group, has exited.
 * 0, or -1 when the loop broke. */
static int hold(struct run *r)
{
    pid_t p;

    r->multi = curl_multi_init();
    if (r->multi == NULL)
        return -1;
    r->backoff = BACKOFF_FIRST_MS;
    for (;;) {
        if (!r->reaped) {
            p = waitpid(r->child, &r->status, WNOHANG);
            if (p == r->child)
                r->reaped = true;
            else if (p < 0 && errno != EINTR)
                return -1;
        }
        if (r->reaped) {
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ; /* orphans handed to lockctl (the subreaper) */
            if (!group_alive(r))
                return 0;
            if (!r->draining)
                start_draining(r);
        }
        if (turn(r) != 0)
            return -1;
    }
}

static int child_exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return EXIT_INTERNAL;
}

/* Step 4: after the child, or after the loop broke. */
static int finish(struct run *r, int broke)
{
    int rc;

    if (r->tty) {
        tcsetpgrp(STDIN_FILENO, getpgrp());
        signal(SIGTTOU, SIG_DFL);
    }
    drop_renew(r);
    if (broke) { /* cannot watch the lock: the child must not go on */
        fprintf(stderr,
                "lockctl: %s: the renew loop failed; stopping the "
                "command\n",
                r->label);
        kill(-r->child, SIGKILL);
        waitpid(r->child, &r->status, 0);
        rc = EXIT_INTERNAL;
    } else if (r->lost) {
        kill(-r->child, SIGKILL); /* what is left of the job, if anything */
        rc = r->o->exit_lost;
    } else {
        rc = child_exit_code(r->status);
    }
    if (!r->lost)
        cmds_release_retrying(r->o, r->conf, r->token, RELEASE_BUDGET_MS);
    return rc;
}

int run_main(const struct opts *o, const struct http_conf *conf)
{
    struct run r = { .o = o, .conf = conf, .sfd = -1 };
    int rc;

    output_keys_label(o, r.label, sizeof r.label);
    if (watch_signals(&r) != 0) {
        fprintf(stderr, "lockctl: cannot watch signals: %s\n", strerror(errno));
        rc = EXIT_INTERNAL;
        goto out;
    }
    http_watch_fd(r.sfd);
    rc = take_lock(&r);
    http_watch_fd(-1); /* the release must not stop short */
    if (stop_signal(&r) != 0) {
        fprintf(stderr, "lockctl: %s: %s before the command started%s\n",
                r.label, strsignal(r.stop_sig),
                r.token != NULL ? "; releasing the lock" : "");
        if (r.token != NULL)
            cmds_release_retrying(o, conf, r.token, RELEASE_BUDGET_MS);
        rc = 128 + r.stop_sig;
        goto out;
    }
    /* not granted: rc says why, and --exit-held may make that 0 */
    if (r.token == NULL)
        goto out;
    if (rc != EXIT_OK) {
        cmds_release_retrying(o, conf, r.token, RELEASE_BUDGET_MS);
        goto out;
    }
    if (start_child(&r) != 0) {
        fprintf(stderr, "lockctl: cannot start %s: %s\n", o->child_argv[0],
                strerror(errno));
        cmds_release_retrying(o, conf, r.token, RELEASE_BUDGET_MS);
        rc = EXIT_INTERNAL;
        goto out;
    }
    rc = finish(&r, hold(&r) != 0);
out:
    if (r.multi != NULL)
        curl_multi_cleanup(r.multi);
    if (r.sfd >= 0)
        close(r.sfd);
    if (r.masked)
        sigprocmask(SIG_SETMASK, &r.old_mask, NULL);
    free(r.token);
    return rc;
}

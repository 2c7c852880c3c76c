/*
 * cli/cmds.c - acquire, renew, release and inspect: the request each one
 * sends (one key: /locks/KEY; several: /locks), acquire's safe retries,
 * and printing the answer.
 */
#include "cli/cmds.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli/output.h"
#include "lib/clock.h"
#include "lib/random.h"

#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS   1000

static void sleep_ms(int64_t ms)
{
    struct timespec ts = { .tv_sec = ms / 1000,
                           .tv_nsec = (long)(ms % 1000) * 1000000L };

    while (ms > 0 && nanosleep(&ts, &ts) != 0)
        ;
}

int cmds_transient(const struct http_call *c)
{
    return c->status == 0 || c->status == 429 || c->status >= 500;
}

/* {"keys":[...]} for several keys, else {}: a new object, or NULL. */
static json_t *new_body(const struct opts *o)
{
    json_t *body = json_object();
    json_t *keys;

    if (body == NULL || o->nkeys < 2)
        return body;
    keys = json_array();
    if (json_object_set_new(body, "keys", keys) != 0)
        goto fail;
    for (int i = 0; i < o->nkeys; i++)
        if (json_array_append_new(keys, json_string(o->keys[i])) != 0)
            goto fail;
    return body;
fail:
    json_decref(body);
    return NULL;
}

static int set_int(json_t *body, const char *name, int64_t v)
{
    return json_object_set_new(body, name, json_integer(v));
}

/* The path of a request on the keys of o: a new string, or NULL. */
static char *new_path(const struct opts *o)
{
    if (o->nkeys > 1) {
        char *p = malloc(sizeof "/locks");
        if (p != NULL)
            snprintf(p, sizeof "/locks", "/locks");
        return p;
    }
    return http_key_path(o->keys[0]);
}

static struct http_call *new_call(const struct opts *o,
                                  const struct http_conf *conf,
                                  const char *method,
                                  json_t *body, /* borrowed; NULL: none */
                                  const char *token,
                                  const char *idem_key,
                                  int64_t timeout_ms)
{
    char *path = new_path(o);
    struct http_call *c = NULL;

    if (path != NULL)
        c = http_call_new(conf, method, path, body, token, idem_key,
                          timeout_ms);
    free(path);
    return c;
}

static struct http_call *acquire_call(const struct opts *o,
                                      const struct http_conf *conf,
                                      const char *idem_key,
                                      int64_t wait_ms,
                                      int64_t timeout_ms)
{
    json_t *body = new_body(o);
    struct http_call *c = NULL;
    int bad = body == NULL;

    if (!bad && o->ttl_ms > 0)
        bad |= set_int(body, "ttl_ms", o->ttl_ms);
    if (!bad && o->token == NULL) /* a re-entry takes only ttl_ms */
        bad |= set_int(body, "wait_ms", wait_ms);
    if (!bad && o->owner != NULL)
        bad |= json_object_set_new(body, "owner", json_string(o->owner));
    if (!bad && o->shared)
        bad |= json_object_set_new(body, "mode", json_string("shared"));
    if (!bad && o->limit > 0)
        bad |= set_int(body, "limit", o->limit);
    if (!bad)
        c = new_call(o, conf, "POST", body, o->token, idem_key, timeout_ms);
    json_decref(body);
    return c;
}

int cmds_acquire(const struct opts *o,
                 const struct http_conf *conf,
                 struct http_call **out)
{
    char idem[33];
    const char *idem_key = o->idem_key;
    int64_t wait = o->wait_ms > 0 ? o->wait_ms : 0;
    int64_t start = clock_mono_ms(), now = start;
    int64_t wait_end = start + wait, end = wait_end + o->timeout_ms;
    int64_t backoff = BACKOFF_FIRST_MS, delay;
    struct http_call *c;

    if (o->idempotent) {
        if (random_hex(idem, 16) != 0)
            return *out = NULL, EXIT_INTERNAL;
        idem_key = idem;
    }
    for (;;) {
        int64_t left = wait_end > now ? wait_end - now : 0;
        int64_t tmo = left + o->timeout_ms;
        c = acquire_call(o, conf, idem_key, left,
                         tmo < end - now ? tmo : end - now);
        if (c == NULL)
            return *out = NULL, EXIT_INTERNAL;
        http_call_perform(c);
        if (!o->idempotent || !cmds_transient(c))
            break;
        delay = c->retry_after_ms > 0 ? c->retry_after_ms : backoff;
        backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
        now = clock_mono_ms();
        if (now + delay >= end)
            break;
        http_call_free(c);
        sleep_ms(delay);
        now = clock_mono_ms();
    }
    *out = c;
    return output_exit_code(c);
}

struct http_call *cmds_renew_call(const struct opts *o,
                                  const struct http_conf *conf,
                                  const char *token,
                                  int64_t timeout_ms)
{
    json_t *body = new_body(o);
    struct http_call *c = NULL;

    if (body != NULL &&
        (o->ttl_ms <= 0 || set_int(body, "ttl_ms", o->ttl_ms) == 0))
        c = new_call(o, conf, "PUT", body, token, NULL, timeout_ms);
    json_decref(body);
    return c;
}

static struct http_call *release_call(const struct opts *o,
                                      const struct http_conf *conf,
                                      const char *token,
                                      int64_t timeout_ms)
{
    json_t *body = new_body(o);
    struct http_call *c = NULL;

    /* several keys: lockd gives back every hold of each anyway */
    if (body != NULL && (!o->all || o->nkeys > 1 ||
                         json_object_set_new(body, "all", json_true()) == 0))
        c = new_call(o, conf, "DELETE", body, token, NULL, timeout_ms);
    json_decref(body);
    return c;
}

int cmds_release_retrying(const struct opts *o,
                          const struct http_conf *conf,
                          const char *token,
                          int64_t budget_ms)
{
    int64_t end = clock_mono_ms() + budget_ms, now, backoff = 100;
    struct http_call *c;
    int rc;

    for (;;) {
        now = clock_mono_ms();
        c = release_call(o, conf, token,
                         o->timeout_ms < end - now ? o->timeout_ms : end - now);
        if (c == NULL)
            return EXIT_INTERNAL;
        http_call_perform(c);
        rc = output_exit_code(c);
        if (rc == EXIT_OK || c->status == 404 || c->status == 409)
            break;
        now = clock_mono_ms();
        if (!cmds_transient(c) || now + backoff >= end)
            break;
        http_call_free(c);
        sleep_ms(backoff);
        backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
    }
    if (rc != EXIT_OK && c->status != 404 && c->status != 409)
        output_error(o, c, false);
    else
        rc = EXIT_OK;
    http_call_free(c);
    return rc;
}

static int print_answer(const struct opts *o, struct http_call *c)
{
    int rc = output_exit_code(c);

    if (rc == EXIT_OK && !json_is_object(c->json)) {
        fprintf(stderr, "lockctl: lockd answered %ld without a JSON body\n",
                c->status);
        return EXIT_UNAVAILABLE;
    }
    if (rc == EXIT_OK)
        return output_success(o, c->json) == 0 ? EXIT_OK : EXIT_INTERNAL;
    if (o->cmd == CMD_INSPECT && rc == EXIT_NOT_HELD && o->format == FORMAT_ENV)
        output_env_free(o->keys[0]);
    output_error(o, c, true);
    return rc;
}

int cmds_main(const struct opts *o, const struct http_conf *conf)
{
    struct http_call *c = NULL;
    int rc;

    switch (o->cmd) {
    case CMD_ACQUIRE:
        cmds_acquire(o, conf, &c);
        break;
    case CMD_RENEW:
        c = cmds_renew_call(o, conf, o->token, o->timeout_ms);
        break;
    case CMD_RELEASE:
        c = release_call(o, conf, o->token, o->timeout_ms);
        break;
    case CMD_INSPECT:
        c = new_call(o, conf, "GET", NULL, NULL, NULL, o->timeout_ms);
        break;
    case CMD_NONE:
    case CMD_RUN:
        return EXIT_USAGE;
    }
    if (c == NULL) {
        fputs("lockctl: out of memory\n", stderr);
        return EXIT_INTERNAL;
    }
    if (o->cmd != CMD_ACQUIRE)
        http_call_perform(c);
    rc = print_answer(o, c);
    http_call_free(c);
    return rc;
}

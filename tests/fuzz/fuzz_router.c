/*
 * tests/fuzz/fuzz_router.c - router_dispatch() on a request built from the
 * input, then, for a lock call, the store call on a memory:// backend and
 * the handler's answer, as the server runs them. The input reads like a
 * tests/data/requests file: "METHOD TARGET" on the first line, header
 * lines up to an empty line (Lock-Token, Idempotency-Key and
 * Authorization are passed on, up to 4 of each; "Tls-Peer: verified NAME
 * ...", "bad REASON" or "none" stands for the client certificate; others
 * are dropped), the rest the body, byte for byte. With an Authorization
 * or a Tls-Peer line the router runs with auth on (an --auth-file with
 * bearer "fuzz-auth-token" scoped to orders/ and k, "fuzz-admin-token"
 * for everything, certificate name billing.prod.svc scoped to billing/,
 * /healthz open), else without. The backend is opened once and outlives the
 * inputs, so locks taken by one input are there for the next (30 s TTL at
 * most).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/authz.h"
#include "api/router.h"
#include "tests/fuzz/fuzz.h"

#define MAX_PARAMS  32
#define MAX_HEADERS 4
#define AUTH_TOKEN  "fuzz-auth-token"
#define ADMIN_TOKEN "fuzz-admin-token"

static struct api_config open_cfg; /* auth off */
static struct api_config auth_cfg; /* the same store, auth on */

/* The --auth-file of auth_cfg: a scoped bearer credential, an operator
 * one, a client certificate's, and /healthz open. */
static const char policy_fmt[] =
    "{\"credentials\":["
    "{\"name\":\"orders\",\"token_sha256\":\"%s\","
    "\"prefixes\":[\"orders/\",\"k\"],\"verbs\":[\"acquire\","
    "\"renew\",\"release\",\"inspect\",\"list\"],"
    "\"modes\":[\"exclusive\"],\"multi\":true,\"max_waiters\":5},"
    "{\"name\":\"ops\",\"token_sha256\":\"%s\",\"prefixes\":[\"\"],"
    "\"verbs\":[\"*\",\"force\",\"probes\",\"metrics\"]},"
    "{\"name\":\"billing\",\"tls_identity\":\"billing.prod.svc\","
    "\"prefixes\":[\"billing/\"],\"verbs\":[\"*\"],\"multi\":false}],"
    "\"open\":[\"healthz\"]}";

static struct authz *open_policy(void)
{
    char path[] = "/tmp/lockd-fuzz-auth-XXXXXX";
    char h1[65], h2[65], text[2048], err[256];
    struct authz_opts o = { .tls_client_ca = true };
    struct authz *a;
    int fd, n;

    if (authz_sha256_hex(AUTH_TOKEN, strlen(AUTH_TOKEN), h1) != 0 ||
        authz_sha256_hex(ADMIN_TOKEN, strlen(ADMIN_TOKEN), h2) != 0)
        abort();
    n = snprintf(text, sizeof(text), policy_fmt, h1, h2);
    fd = mkstemp(path);
    if (n < 0 || (size_t)n >= sizeof(text) || fd < 0 ||
        write(fd, text, (size_t)n) != n)
        abort();
    close(fd);
    o.auth_file = path;
    a = authz_open(&o, err, sizeof(err));
    unlink(path);
    if (a == NULL) {
        fprintf(stderr, "fuzz_router: the policy: %s\n", err);
        abort();
    }
    return a;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[256];

    (void)argc;
    (void)argv;
    codec_json_setup(NULL, NULL);
    if (backend_open("memory://", NULL, &open_cfg.backend, err, sizeof(err)) !=
        BACKEND_OK)
        abort();
    open_cfg.default_ttl_ms = 30000;
    open_cfg.max_ttl_ms = 30000;
    open_cfg.max_wait_ms = 300000;
    auth_cfg = open_cfg;
    auth_cfg.authz = open_policy();
    return 0;
}

/* A multi verb or a list run once on the store and answered. */
static void run_multi_or_list(const struct api_config *cfg,
                              const struct api_call *c,
                              struct api_response *resp)
{
    struct lock_multi_req req;
    struct lock_multi_grant g;
    struct lock_list_req lreq;
    struct lock_list l = { 0 };
    enum backend_result br;

    if (c->verb == API_VERB_LIST) {
        api_call_list_req(c, &lreq);
        l.entries = calloc(lreq.limit, sizeof(*l.entries));
        br = l.entries != NULL ? backend_list(cfg->backend, &lreq, &l)
                               : BACKEND_NO_MEMORY;
        handle_list_reply(c, br, &l, resp);
        free(l.entries);
        return;
    }
    memset(&g, 0, sizeof(g));
    api_call_multi_req(c, &req);
    if (c->verb == API_VERB_ACQUIRE_MULTI)
        br = backend_acquire_multi(cfg->backend, &req, &g);
    else if (c->verb == API_VERB_RENEW_MULTI)
        br = backend_renew_multi(cfg->backend, &req, &g);
    else
        br = backend_release_multi(cfg->backend, &req, &g);
    handle_multi_reply(cfg, c, br, &g, resp);
}

/* The store call of c (an acquire tries once) and its answer. */
static void run_call(const struct api_config *cfg,
                     const struct api_call *c,
                     struct api_response *resp)
{
    struct lock_req req = { 0 };
    struct lock_grant g = { 0 };
    struct lock_info info = { 0 };
    int64_t held = -1;
    enum backend_result br = BACKEND_OK;

    api_response_cleanup(resp);
    if (api_call_is_multi(c) || c->verb == API_VERB_LIST) {
        run_multi_or_list(cfg, c, resp);
        return;
    }
    api_call_req(c, &req);
    if (c->verb == API_VERB_ACQUIRE)
        br = c->reenter ? backend_renew(cfg->backend, &req, &g)
                        : backend_acquire(cfg->backend, &req, &g);
    else if (c->verb == API_VERB_RENEW)
        br = backend_renew(cfg->backend, &req, &g);
    else if (c->verb == API_VERB_RELEASE)
        br = backend_release(cfg->backend, &req, &g);
    else if (c->verb == API_VERB_INSPECT)
        br = backend_inspect(cfg->backend, c->key, c->key_len, &info);
    else if (c->verb == API_VERB_READYZ)
        br = backend_ping(cfg->backend);
    else if (c->verb == API_VERB_FORCE_RELEASE)
        br = backend_force_release(cfg->backend, c->key, c->key_len, &info);
    else
        held = backend_held_count(cfg->backend);
    handle_call_reply(cfg, c, br, &g, &info, held, resp);
    lock_info_clear(&info);
}

struct fuzz_req {
    struct api_request rq;
    struct api_param q[MAX_PARAMS];
    const char *tokens[MAX_HEADERS], *idem[MAX_HEADERS];
    const char *names[MAX_HEADERS];
    bool tls; /* a Tls-Peer line was given */
};

/* "Tls-Peer: verified NAME...", "bad REASON" or "none": what the TLS
 * layer would have said of the client's certificate (changed in place). */
static void set_tls(struct fuzz_req *f, char *v)
{
    char *words[MAX_HEADERS + 1];
    size_t n = fuzz_split(v, ' ', words, MAX_HEADERS + 1);

    f->tls = true;
    if (strcmp(words[0], "verified") == 0) {
        f->rq.tls_peer = API_TLS_VERIFIED;
        for (size_t i = 1; i < n; i++)
            f->names[f->rq.ntls_names++] = words[i];
        f->rq.tls_names = f->names;
    } else if (strcmp(words[0], "bad") == 0) {
        f->rq.tls_peer = API_TLS_BAD_CERT;
        f->rq.tls_error = n > 1 ? words[1] : "expired";
    } else {
        f->rq.tls_peer = API_TLS_NO_CERT;
    }
}

/* The query after '?' in target (cut there) into f's parameters. */
static void split_query(struct fuzz_req *f, char *target)
{
    char *qm = strchr(target, '?'), *pairs[MAX_PARAMS];

    f->rq.query = f->q;
    if (qm == NULL)
        return;
    *qm = '\0';
    for (char *c = qm + 1; *c != '\0'; c++)
        if (*c == '+')
            *c = ' ';
    f->rq.nquery = fuzz_split(qm + 1, '&', pairs, MAX_PARAMS);
    for (size_t i = 0; i < f->rq.nquery; i++) {
        char *eq = strchr(pairs[i], '=');
        if (eq != NULL)
            *eq = '\0';
        f->q[i].name = pairs[i];
        f->q[i].value = eq != NULL ? eq + 1 : NULL;
    }
}

/* One header line (changed in place) into f. */
static void add_header(struct fuzz_req *f, char *line)
{
    char *colon = strchr(line, ':'), *v;

    if (colon == NULL)
        return;
    *colon = '\0';
    for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
        ;
    if (strcasecmp(line, "Lock-Token") == 0 && f->rq.nlock_tokens < MAX_HEADERS)
        f->tokens[f->rq.nlock_tokens++] = v;
    else if (strcasecmp(line, "Idempotency-Key") == 0 &&
             f->rq.nidem_keys < MAX_HEADERS)
        f->idem[f->rq.nidem_keys++] = v;
    else if (strcasecmp(line, "Authorization") == 0)
        f->rq.authorization = v;
    else if (strcasecmp(line, "Tls-Peer") == 0 && !f->tls)
        set_tls(f, v);
}

/* Build f from text (size bytes, NUL-terminated, changed in place). */
static void build(struct fuzz_req *f, char *text, size_t size)
{
    char *line = text, *end = memchr(text, '\n', size), *sp;

    memset(f, 0, sizeof(*f));
    f->rq.lock_tokens = f->tokens;
    f->rq.idem_keys = f->idem;
    f->rq.body = "";
    if (end != NULL)
        *end = '\0';
    sp = strchr(line, ' ');
    f->rq.method = line;
    f->rq.path = "/";
    if (sp != NULL) {
        *sp = '\0';
        f->rq.path = sp + 1;
        split_query(f, sp + 1);
    }
    while (end != NULL) {
        line = end + 1;
        end = memchr(line, '\n', size - (size_t)(line - text));
        if (end != NULL)
            *end = '\0';
        if (line[0] == '\0' || strcmp(line, "\r") == 0) {
            if (end != NULL) {
                f->rq.body = end + 1;
                f->rq.body_len = size - (size_t)(end + 1 - text);
            }
            return;
        }
        add_header(f, line);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    struct fuzz_req f;
    struct api_response resp;
    struct api_call call;
    const struct api_config *cfg;

    build(&f, text, size);
    cfg = f.rq.authorization != NULL || f.tls ? &auth_cfg : &open_cfg;
    memset(&resp, 0, sizeof(resp));
    memset(&call, 0, sizeof(call));
    if (router_dispatch(cfg, &f.rq, &resp, &call) == API_ACTION_CALL)
        run_call(cfg, &call, &resp);
    if (resp.status < 100 || resp.status > 599)
        abort(); /* every request gets an HTTP answer */
    api_response_cleanup(&resp);
    api_call_cleanup(&call);
    free(text);
    return 0;
}

/*
 * tests/unit/test_authz.c - the credentials policy (api/authz.h): every
 * refusal of the --auth-file parser, the decisions the router asks of it
 * (every verb in and out of scope, by token, by certificate and with
 * nothing), the legacy token files, and SIGHUP's reload keeping the old
 * policy on a bad file. Requests go through router_dispatch() on a
 * memory:// store, with hand-made api_requests (a certificate's names as
 * the TLS layer would fill them).
 */
#include "api/authz.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/router.h"
#include "backends/backend.h"
#include "lib/log.h"
#include "tests/unit/check.h"

#define T_ORD  "orders-token-0123456789"
#define T_LIST "lister-token-0123456789"
#define T_OPS  "ops-token-0123456789abc"
#define T_FREE "free-token-0123456789ab"

static char hex_ord[65], hex_list[65], hex_ops[65], hex_free[65];

static void hexes(void)
{
    CHECK(authz_sha256_hex(T_ORD, strlen(T_ORD), hex_ord) == 0);
    CHECK(authz_sha256_hex(T_LIST, strlen(T_LIST), hex_list) == 0);
    CHECK(authz_sha256_hex(T_OPS, strlen(T_OPS), hex_ops) == 0);
    CHECK(authz_sha256_hex(T_FREE, strlen(T_FREE), hex_free) == 0);
}

/* Write text to a fresh file named into path (64 bytes). */
static void write_file(char *path, const char *text)
{
    int fd;

    snprintf(path, 64, "/tmp/lockd-test-authz-" MKTEMP_SUFFIX);
    fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

static void rewrite(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    CHECK(f != NULL);
    if (f == NULL)
        return;
    fputs(text, f);
    fclose(f);
}

/* ---- the parser ---- */

static struct authz_policy *parse(const char *text, bool ca, char *err)
{
    return authz_parse(text, strlen(text), ca, err, 256);
}

/* tmpl with @H@ replaced by hex_ord and @H63@ by its first 63 digits. */
static void subst(char *out, size_t outlen, const char *tmpl)
{
    size_t o = 0;

    for (const char *t = tmpl; *t != '\0' && o + 70 < outlen;) {
        if (strncmp(t, "@H63@", 5) == 0) {
            memcpy(out + o, hex_ord, 63);
            o += 63;
            t += 5;
        } else if (strncmp(t, "@H@", 3) == 0) {
            memcpy(out + o, hex_ord, 64);
            o += 64;
            t += 3;
        } else {
            out[o++] = *t++;
        }
    }
    out[o] = '\0';
}

static void test_parse_refuses_each_bad_field(void)
{
    char cred[512];
    static const struct {
        const char *cred; /* a credential object, @H@: a good digest, @H63@: 63
                             of its digits */
        const char *want; /* in the message */
    } rows[] = {
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"],\"color\":1}",
          "credentials[0]: unknown field 'color'" },
        { "{\"name\":\"\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].name" },
        { "{\"name\":\"a b\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].name" },
        { "{\"name\":\"a12345678901234567890123456789012345678901234567890123"
          "45678901234\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].name" },
        { "{\"name\":7,\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].name" },
        { "{\"name\":\"a\",\"prefixes\":[\"\"],\"verbs\":[\"*\"]}",
          "needs token_sha256 or tls_identity" },
        { "{\"name\":\"a\",\"token_sha256\":\"ABC@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].token_sha256" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H63@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].token_sha256" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H63@G\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].token_sha256" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"verbs\":[\"*\"]}",
          "credentials[0].prefixes" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].prefixes" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"x\",3],"
          "\"verbs\":[\"*\"]}",
          "credentials[0].prefixes[1]" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":\"x\","
          "\"verbs\":[\"*\"]}",
          "credentials[0].prefixes" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"]}",
          "credentials[0].verbs" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[]}",
          "credentials[0].verbs" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"acquire\",\"delete\"]}",
          "credentials[0].verbs[1]: unknown value 'delete'" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"],\"modes\":[\"shared\",\"*\"]}",
          "credentials[0].modes[1]" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"],\"modes\":[]}",
          "credentials[0].modes" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"],\"multi\":\"yes\"}",
          "credentials[0].multi" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"],\"max_waiters\":-1}",
          "credentials[0].max_waiters" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"],\"max_waiters\":1000001}",
          "credentials[0].max_waiters" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"prefixes\":[\"\"],"
          "\"verbs\":[\"*\"],\"max_waiters\":2.5}",
          "credentials[0].max_waiters" },
        { "{\"name\":\"a\",\"token_sha256\":\"@H@\",\"tls_identity\":\"\","
          "\"prefixes\":[\"\"],\"verbs\":[\"*\"]}",
          "credentials[0].tls_identity" },
        { "7", "credentials[0]: must be an object" },
    };
    char err[256], text[1024];
    struct authz_policy *p;

    hexes();
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        subst(cred, sizeof(cred), rows[i].cred);
        snprintf(text, sizeof(text), "{\"credentials\":[%s]}", cred);
        err[0] = '\0';
        p = parse(text, true, err);
        CHECK_MSG(p == NULL, "row %zu accepted: %s", i, text);
        authz_policy_unref(p);
        CHECK_MSG(strstr(err, rows[i].want) != NULL, "row %zu: '%s' lacks '%s'",
                  i, err, rows[i].want);
        CHECK_MSG(strstr(err, hex_ord) == NULL, "row %zu echoes the digest", i);
    }
}

static void test_parse_refuses_bad_top_level_and_duplicates(void)
{
    char err[256], text[1024];
    static const struct {
        const char *text;
        const char *want;
    } rows[] = {
        { "", "not JSON" },
        { "{\"credentials\":[]", "not JSON" },
        { "[]", "must be a JSON object" },
        { "{}", "credentials: must be an array" },
        { "{\"credentials\":{}}", "credentials: must be an array" },
        { "{\"credentials\":[],\"extra\":1}", "unknown field 'extra'" },
        { "{\"credentials\":[],\"open\":[\"healthz\",\"status\"]}",
          "open[1]: unknown value 'status'" },
        { "{\"credentials\":[],\"open\":\"healthz\"}", "open:" },
        { "{\"credentials\":[],\"credentials\":[]}", "not JSON" },
    };
    struct authz_policy *p;

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        err[0] = '\0';
        p = parse(rows[i].text, false, err);
        CHECK_MSG(p == NULL, "row %zu accepted", i);
        authz_policy_unref(p);
        CHECK_MSG(strstr(err, rows[i].want) != NULL, "row %zu: '%s' lacks '%s'",
                  i, err, rows[i].want);
    }
    hexes();
    /* the same name, token or identity twice */
    snprintf(text, sizeof(text),
             "{\"credentials\":[{\"name\":\"a\",\"token_sha256\":\"%s\","
             "\"prefixes\":[\"\"],\"verbs\":[\"*\"]},{\"name\":\"a\","
             "\"token_sha256\":\"%s\",\"prefixes\":[\"\"],\"verbs\":[\"*\"]}]}",
             hex_ord, hex_ops);
    CHECK(parse(text, false, err) == NULL);
    CHECK_CONTAINS(err, "credentials[1].name: the same as credentials[0]'s");
    snprintf(text, sizeof(text),
             "{\"credentials\":[{\"name\":\"a\",\"token_sha256\":\"%s\","
             "\"prefixes\":[\"\"],\"verbs\":[\"*\"]},{\"name\":\"b\","
             "\"token_sha256\":\"%s\",\"prefixes\":[\"\"],\"verbs\":[\"*\"]}]}",
             hex_ord, hex_ord);
    CHECK(parse(text, false, err) == NULL);
    CHECK_CONTAINS(err, "credentials[1].token_sha256: the same");
    snprintf(text, sizeof(text),
             "{\"credentials\":[{\"name\":\"a\",\"tls_identity\":\"x\","
             "\"prefixes\":[\"\"],\"verbs\":[\"*\"]},{\"name\":\"b\","
             "\"tls_identity\":\"x\",\"prefixes\":[\"\"],\"verbs\":[\"*\"]}]}");
    CHECK(parse(text, true, err) == NULL);
    CHECK_CONTAINS(err, "credentials[1].tls_identity: the same");
    /* tls_identity needs --tls-client-ca */
    snprintf(text, sizeof(text),
             "{\"credentials\":[{\"name\":\"a\",\"tls_identity\":\"x\","
             "\"prefixes\":[\"\"],\"verbs\":[\"*\"]}]}");
    CHECK(parse(text, false, err) == NULL);
    CHECK_CONTAINS(err, "credentials[0].tls_identity: needs --tls-client-ca");
    p = parse(text, true, err);
    CHECK(p != NULL);
    authz_policy_unref(p);
}

static void test_parse_reads_fields_and_defaults(void)
{
    char err[256], text[1024];
    struct authz_policy *p;

    hexes();
    snprintf(text, sizeof(text),
             "{\"credentials\":[{\"name\":\"orders.v2_x-1\",\"token_sha256\":"
             "\"%s\",\"prefixes\":[\"orders/\",\"jobs/orders-\"],\"verbs\":"
             "[\"acquire\",\"list\"],\"modes\":[\"shared\"],\"multi\":false,"
             "\"max_waiters\":5000},{\"name\":\"b\",\"tls_identity\":\"b.svc\","
             "\"prefixes\":[\"\"],\"verbs\":[\"*\",\"force\",\"probes\","
             "\"metrics\"]}]}",
             hex_ord);
    p = parse(text, true, err);
    CHECK_MSG(p != NULL, "%s", err);
    if (p == NULL)
        return;
    CHECK_EQ_INT(p->n, 2);
    CHECK_EQ_INT(p->open, AUTHZ_OPEN_ALL); /* default: all three open */
    CHECK_STR_EQ(p->creds[0].name, "orders.v2_x-1");
    CHECK(p->creds[0].has_token && p->creds[0].tls_identity == NULL);
    CHECK_EQ_INT(p->creds[0].nprefixes, 2);
    CHECK_STR_EQ(p->creds[0].prefixes[1], "jobs/orders-");
    CHECK_EQ_INT(p->creds[0].verbs, (1u << AUTHZ_ACQUIRE) | (1u << AUTHZ_LIST));
    CHECK_EQ_INT(p->creds[0].modes, AUTHZ_MODE_SHARED);
    CHECK(!p->creds[0].multi);
    CHECK_EQ_INT(p->creds[0].max_waiters, 5000);
    CHECK(!p->creds[1].has_token);
    CHECK_STR_EQ(p->creds[1].tls_identity, "b.svc");
    CHECK_EQ_INT(p->creds[1].verbs, AUTHZ_STAR | (1u << AUTHZ_FORCE) |
                                        (1u << AUTHZ_PROBES) |
                                        (1u << AUTHZ_METRICS));
    CHECK_EQ_INT(p->creds[1].modes, AUTHZ_MODE_EXCLUSIVE | AUTHZ_MODE_SHARED);
    CHECK(p->creds[1].multi);
    CHECK_EQ_INT(p->creds[1].max_waiters, 0);
    authz_policy_unref(p);
    p = parse("{\"credentials\":[],\"open\":[]}", false, err);
    CHECK(p != NULL && p->open == 0 && p->n == 0);
    authz_policy_unref(p);
    p = parse("{\"credentials\":[],\"open\":[\"metrics\",\"readyz\"]}", false,
              err);
    CHECK(p != NULL && p->open == (AUTHZ_OPEN_METRICS | AUTHZ_OPEN_READYZ));
    authz_policy_unref(p);
}

/* ---- decisions through the router ---- */

static struct api_config rcfg;
static char policy_path[64];

static void policy_text(char *text, size_t len, const char *open)
{
    hexes();
    snprintf(
        text, len,
        "{\"credentials\":["
        "{\"name\":\"orders\",\"token_sha256\":\"%s\",\"prefixes\":"
        "[\"orders/\",\"jobs/orders-\"],\"verbs\":[\"acquire\",\"renew\","
        "\"release\",\"inspect\"],\"modes\":[\"exclusive\"],\"multi\":false,"
        "\"max_waiters\":7},"
        "{\"name\":\"lister\",\"token_sha256\":\"%s\",\"prefixes\":"
        "[\"orders/\"],\"verbs\":[\"list\",\"acquire\",\"renew\",\"release\"]},"
        "{\"name\":\"ops\",\"token_sha256\":\"%s\",\"prefixes\":[\"\"],"
        "\"verbs\":[\"*\",\"force\",\"probes\",\"metrics\"]},"
        "{\"name\":\"billing\",\"tls_identity\":\"billing.prod.svc\","
        "\"prefixes\":[\"billing/\"],\"verbs\":[\"*\"]}],"
        "\"open\":%s}",
        hex_ord, hex_list, hex_ops, open);
}

static void router_open(const struct authz_opts *o)
{
    char err[512];

    memset(&rcfg, 0, sizeof(rcfg));
    CHECK_EQ_INT(
        backend_open("memory://", NULL, &rcfg.backend, err, sizeof(err)),
        BACKEND_OK);
    rcfg.default_ttl_ms = 30000;
    rcfg.max_ttl_ms = 60000;
    rcfg.max_wait_ms = 60000;
    if (o != NULL) {
        rcfg.authz = authz_open(o, err, sizeof(err));
        CHECK_MSG(rcfg.authz != NULL, "%s", err);
    }
}

static void router_open_policy(void)
{
    char text[2048];
    struct authz_opts o = { 0 };

    policy_text(text, sizeof(text), "[\"healthz\"]");
    write_file(policy_path, text);
    o.auth_file = policy_path;
    o.tls_client_ca = true;
    router_open(&o);
}

static void router_close(void)
{
    authz_close(rcfg.authz);
    backend_close(rcfg.backend);
    memset(&rcfg, 0, sizeof(rcfg));
    if (policy_path[0] != '\0')
        unlink(policy_path);
    policy_path[0] = '\0';
}

enum who {
    NONE,
    TOKEN_ORD,
    TOKEN_LIST,
    TOKEN_OPS,
    TOKEN_FREE,
    CERT_BILL,
    CERT_OTHER,
    CERT_BAD,
    CERT_MISSING
};

struct outcome {
    enum api_action action;
    unsigned status; /* 0 when routed to a call */
    char code[32];
    char message[400];
    char client[API_CLIENT_LEN + 1];
    unsigned max_waiters;
    bool www_authenticate;
};

/* Dispatch method target body as who; the call is not run. */
static struct outcome
send_as(enum who who, const char *method, const char *target, const char *body)
{
    static const char *const bill_names[] = { "billing.prod.svc",
                                              "spiffe://x" };
    static const char *const other_names[] = { "other.svc", "other-alt" };
    static const char *const lock_token[] = { "some-lock-token" };
    struct api_request rq = { 0 };
    struct api_response resp;
    struct api_call call = { 0 };
    struct outcome out = { 0 };
    char path[256];
    const char *q = strchr(target, '?');
    struct api_param param = { 0 };
    char qbuf[128];

    snprintf(path, sizeof(path), "%.*s",
             (int)(q != NULL ? (size_t)(q - target) : strlen(target)), target);
    if (q != NULL) { /* one name=value */
        snprintf(qbuf, sizeof(qbuf), "%s", q + 1);
        param.name = qbuf;
        param.value = strchr(qbuf, '=') != NULL ? strchr(qbuf, '=') + 1 : NULL;
        if (param.value != NULL)
            qbuf[param.value - qbuf - 1] = '\0';
        rq.query = &param;
        rq.nquery = 1;
    }
    rq.method = method;
    rq.path = path;
    rq.body = body;
    rq.body_len = body != NULL ? strlen(body) : 0;
    if (strcmp(method, "PUT") == 0 ||
        (strcmp(method, "DELETE") == 0 && strstr(target, "force") == NULL)) {
        rq.lock_tokens = lock_token;
        rq.nlock_tokens = 1;
    }
    switch (who) {
    case NONE:
        break;
    case TOKEN_ORD:
        rq.authorization = "Bearer " T_ORD;
        break;
    case TOKEN_LIST:
        rq.authorization = "Bearer " T_LIST;
        break;
    case TOKEN_OPS:
        rq.authorization = "bearer  " T_OPS;
        break;
    case TOKEN_FREE:
        rq.authorization = "Bearer " T_FREE;
        break;
    case CERT_BILL:
        rq.tls_peer = API_TLS_VERIFIED;
        rq.tls_names = bill_names;
        rq.ntls_names = 2;
        break;
    case CERT_OTHER:
        rq.tls_peer = API_TLS_VERIFIED;
        rq.tls_names = other_names;
        rq.ntls_names = 2;
        break;
    case CERT_BAD:
        rq.tls_peer = API_TLS_BAD_CERT;
        rq.tls_error = "the certificate has expired";
        break;
    case CERT_MISSING:
        rq.tls_peer = API_TLS_NO_CERT;
        break;
    }
    out.action = router_dispatch(&rcfg, &rq, &resp, &call);
    if (out.action == API_ACTION_REPLY) {
        json_t *j = json_loadb(resp.body, resp.len, 0, NULL);
        json_t *e = json_object_get(j, "error");
        out.status = resp.status;
        snprintf(out.code, sizeof(out.code), "%s",
                 json_string_value(json_object_get(e, "code")) != NULL
                     ? json_string_value(json_object_get(e, "code"))
                     : "");
        snprintf(out.message, sizeof(out.message), "%s",
                 json_string_value(json_object_get(e, "message")) != NULL
                     ? json_string_value(json_object_get(e, "message"))
                     : "");
        json_decref(j);
    }
    snprintf(out.client, sizeof(out.client), "%s",
             call.client != NULL ? call.client : "");
    out.max_waiters = call.client_max_waiters;
    out.www_authenticate = resp.www_authenticate;
    api_response_cleanup(&resp);
    api_call_cleanup(&call);
    return out;
}

/* want: 0 = routed to a call, else the status. */
static void expect(enum who who,
                   const char *method,
                   const char *target,
                   const char *body,
                   unsigned want,
                   const char *client)
{
    struct outcome o = send_as(who, method, target, body);
    unsigned got = o.action == API_ACTION_CALL ? 0 : o.status;

    CHECK_MSG(got == want, "who %d %s %s %s: got %u (%s: %s), want %u",
              (int)who, method, target, body != NULL ? body : "", got, o.code,
              o.message, want);
    if (want == 0 && got == 0 && client != NULL)
        CHECK_MSG(strcmp(o.client, client) == 0, "%s %s: client '%s' not '%s'",
                  method, target, o.client, client);
    if (want == 401)
        CHECK(o.www_authenticate);
    if (want == 403)
        CHECK_STR_EQ(o.code, "forbidden");
    if (want == 401 || want == 403) {
        CHECK(strstr(o.message, "token-0123") == NULL); /* no token */
        CHECK(o.client[0] == '\0');
    }
}

static void test_decisions_single_key_verbs(void)
{
    static const char *const verbs[][2] = {
        { "POST", NULL },
        { "PUT", NULL },
        { "DELETE", NULL },
        { "GET", NULL },
    };

    router_open_policy();
    for (size_t i = 0; i < 4; i++) {
        const char *m = verbs[i][0];
        /* in scope: the credential's name becomes the call's client */
        expect(TOKEN_ORD, m, "/locks/orders/1", NULL, 0, "orders");
        expect(TOKEN_ORD, m, "/locks/jobs/orders-7", NULL, 0, "orders");
        expect(TOKEN_OPS, m, "/locks/anything", NULL, 0, "ops");
        expect(CERT_BILL, m, "/locks/billing/9", NULL, 0, "billing");
        /* out of scope: 403 */
        expect(TOKEN_ORD, m, "/locks/billing/1", NULL, 403, NULL);
        expect(TOKEN_ORD, m, "/locks/orders", NULL, 403, NULL);
        expect(TOKEN_ORD, m, "/locks/jobs/orders", NULL, 403, NULL);
        expect(CERT_BILL, m, "/locks/orders/1", NULL, 403, NULL);
        expect(CERT_OTHER, m, "/locks/billing/9", NULL, 403, NULL);
        /* nothing, a wrong token, a bad or missing certificate: 401 */
        expect(NONE, m, "/locks/orders/1", NULL, 401, NULL);
        expect(TOKEN_FREE, m, "/locks/orders/1", NULL, 401, NULL);
        expect(CERT_BAD, m, "/locks/billing/9", NULL, 401, NULL);
        expect(CERT_MISSING, m, "/locks/billing/9", NULL, 401, NULL);
    }
    /* lister has no inspect */
    expect(TOKEN_LIST, "GET", "/locks/orders/1", NULL, 403, NULL);
    expect(TOKEN_LIST, "POST", "/locks/orders/1", NULL, 0, "lister");
    router_close();
}

static void test_decisions_messages_name_what_is_missing(void)
{
    struct outcome o;

    router_open_policy();
    o = send_as(TOKEN_ORD, "DELETE", "/locks/billing/1", NULL);
    CHECK_STR_EQ(o.message, "credential 'orders' may not release keys outside "
                            "orders/, jobs/orders-");
    o = send_as(TOKEN_LIST, "GET", "/locks/orders/1", NULL);
    CHECK_STR_EQ(o.message, "credential 'lister' may not inspect keys");
    o = send_as(CERT_OTHER, "GET", "/locks/x", NULL);
    CHECK_CONTAINS(o.message, "'other.svc' matches no credential");
    o = send_as(CERT_BAD, "GET", "/locks/x", NULL);
    CHECK_STR_EQ(o.message, "the client certificate did not verify: the "
                            "certificate has expired");
    o = send_as(CERT_MISSING, "GET", "/locks/x", NULL);
    CHECK_CONTAINS(o.message, "client certificate is required");
    o = send_as(TOKEN_FREE, "GET", "/locks/x", NULL);
    CHECK_STR_EQ(o.message, "the bearer token matches no credential");
    o = send_as(TOKEN_ORD, "POST", "/locks/orders/1", "{\"mode\":\"shared\"}");
    CHECK_STR_EQ(o.message, "credential 'orders' may not acquire shared locks");
    CHECK_EQ_INT(o.status, 403);
    o = send_as(TOKEN_ORD, "POST", "/locks", "{\"keys\":[\"orders/1\"]}");
    CHECK_CONTAINS(o.message, "may not use several keys at once");
    o = send_as(TOKEN_LIST, "POST", "/locks",
                "{\"keys\":[\"orders/1\",\"orders/2\",\"billing/3\"]}");
    CHECK_STR_EQ(o.message, "credential 'lister' may not acquire keys outside "
                            "orders/: keys[2]");
    o = send_as(TOKEN_LIST, "GET", "/locks?prefix=ord", NULL);
    CHECK_CONTAINS(o.message, "may not list keys outside orders/");
    /* the call carries the credential's max_waiters */
    o = send_as(TOKEN_ORD, "POST", "/locks/orders/1", NULL);
    CHECK_EQ_INT(o.max_waiters, 7);
    o = send_as(TOKEN_OPS, "POST", "/locks/orders/1", NULL);
    CHECK_EQ_INT(o.max_waiters, 0);
    router_close();
}

static void test_decisions_modes_force_multi_list(void)
{
    router_open_policy();
    /* modes: orders only exclusive, lister both */
    expect(TOKEN_ORD, "POST", "/locks/orders/1", "{\"mode\":\"exclusive\"}", 0,
           "orders");
    expect(TOKEN_ORD, "POST", "/locks/orders/1", "{\"mode\":\"shared\"}", 403,
           NULL);
    expect(TOKEN_ORD, "POST", "/locks/orders/1?mode=shared", NULL, 403, NULL);
    expect(TOKEN_LIST, "POST", "/locks/orders/1",
           "{\"mode\":\"shared\",\"limit\":3}", 0, "lister");
    /* a re-entry is an acquire */
    expect(TOKEN_ORD, "POST", "/locks/orders/1", "{\"token\":\"t\"}", 0,
           "orders");
    expect(TOKEN_ORD, "POST", "/locks/billing/1", "{\"token\":\"t\"}", 403,
           NULL);
    /* force: ops only */
    expect(TOKEN_OPS, "DELETE", "/locks/orders/1?force=true", NULL, 0, "ops");
    expect(TOKEN_ORD, "DELETE", "/locks/orders/1?force=true", NULL, 403, NULL);
    expect(CERT_BILL, "DELETE", "/locks/billing/1?force=true", NULL, 403, NULL);
    expect(NONE, "DELETE", "/locks/orders/1?force=true", NULL, 401, NULL);
    /* multi: orders has multi false; lister within orders/; ops anything */
    for (size_t i = 0; i < 3; i++) {
        const char *m = i == 0 ? "POST" : i == 1 ? "PUT" : "DELETE";
        expect(TOKEN_ORD, m, "/locks", "{\"keys\":[\"orders/1\"]}", 403, NULL);
        expect(TOKEN_LIST, m, "/locks",
               "{\"keys\":[\"orders/1\",\"orders/2\"]}", 0, "lister");
        expect(TOKEN_LIST, m, "/locks", "{\"keys\":[\"orders/1\",\"x/2\"]}",
               403, NULL);
        expect(TOKEN_OPS, m, "/locks", "{\"keys\":[\"a\",\"b\"]}", 0, "ops");
        expect(CERT_BILL, m, "/locks", "{\"keys\":[\"billing/a\"]}", 0,
               "billing");
        expect(NONE, m, "/locks", "{\"keys\":[\"orders/1\"]}", 401, NULL);
    }
    /* list: the prefix must start with one of the credential's */
    expect(TOKEN_LIST, "GET", "/locks?prefix=orders/", NULL, 0, "lister");
    expect(TOKEN_LIST, "GET", "/locks?prefix=orders/42", NULL, 0, "lister");
    expect(TOKEN_LIST, "GET", "/locks?prefix=order", NULL, 403, NULL);
    expect(TOKEN_LIST, "GET", "/locks", NULL, 403, NULL);
    expect(TOKEN_ORD, "GET", "/locks?prefix=orders/", NULL, 403, NULL);
    expect(TOKEN_OPS, "GET", "/locks", NULL, 0, "ops");
    expect(CERT_BILL, "GET", "/locks?prefix=billing/", NULL, 0, "billing");
    expect(NONE, "GET", "/locks?prefix=orders/", NULL, 401, NULL);
    router_close();
}

static void test_decisions_order_401_before_parse_403_after(void)
{
    router_open_policy();
    /* 401 before the key or the body is read */
    expect(NONE, "GET", "/locks/%zz", NULL, 401, NULL);
    expect(TOKEN_FREE, "POST", "/locks/orders/1", "{junk", 401, NULL);
    expect(NONE, "POST", "/locks", "{junk", 401, NULL);
    /* with a credential, a bad key or body is the codec's 400 first */
    expect(TOKEN_ORD, "GET", "/locks/%zz", NULL, 400, NULL);
    expect(TOKEN_ORD, "POST", "/locks/billing/1", "{junk", 400, NULL);
    router_close();
}

static void test_decisions_operator_endpoints(void)
{
    char text[2048];
    struct authz_opts o = { 0 };

    router_open_policy(); /* open: healthz only */
    expect(NONE, "GET", "/healthz", NULL, 200, NULL);
    expect(TOKEN_FREE, "GET", "/healthz", NULL, 200, NULL);
    expect(NONE, "GET", "/readyz", NULL, 401, NULL);
    expect(NONE, "GET", "/metrics", NULL, 401, NULL);
    expect(TOKEN_ORD, "GET", "/readyz", NULL, 403, NULL);
    expect(TOKEN_ORD, "GET", "/metrics", NULL, 403, NULL);
    expect(TOKEN_OPS, "GET", "/readyz", NULL, 0, NULL);
    expect(TOKEN_OPS, "GET", "/metrics", NULL, 0, NULL);
    expect(CERT_BILL, "GET", "/metrics", NULL, 403, NULL);
    router_close();
    /* default: all three open */
    policy_text(text, sizeof(text), "[\"healthz\",\"readyz\",\"metrics\"]");
    write_file(policy_path, text);
    o.auth_file = policy_path;
    o.tls_client_ca = true;
    router_open(&o);
    expect(NONE, "GET", "/readyz", NULL, 0, NULL);
    expect(NONE, "GET", "/metrics", NULL, 0, NULL);
    router_close();
    policy_text(text, sizeof(text), "[]");
    write_file(policy_path, text);
    router_open(&o);
    expect(NONE, "GET", "/healthz", NULL, 401, NULL);
    expect(TOKEN_OPS, "GET", "/healthz", NULL, 200, NULL);
    router_close();
}

static void test_decisions_legacy_and_any_cert(void)
{
    char tok[64], adm[64];
    struct authz_opts o = { 0 };
    struct outcome out;

    write_file(tok, T_ORD "\n");
    write_file(adm, T_OPS "\n");
    /* --admin-token-file alone: no credentials still pass, as before */
    o.admin_file = adm;
    router_open(&o);
    expect(NONE, "POST", "/locks/k", NULL, 0, "");
    expect(TOKEN_OPS, "POST", "/locks/k", NULL, 0, "admin");
    expect(TOKEN_FREE, "POST", "/locks/k", NULL, 401, NULL);
    expect(NONE, "DELETE", "/locks/k?force=true", NULL, 401, NULL);
    expect(TOKEN_OPS, "DELETE", "/locks/k?force=true", NULL, 0, "admin");
    router_close();
    /* both: "token" has "*" on every key, no force */
    o.token_file = tok;
    router_open(&o);
    expect(NONE, "POST", "/locks/k", NULL, 401, NULL);
    expect(TOKEN_ORD, "POST", "/locks/k", NULL, 0, "token");
    expect(TOKEN_ORD, "GET", "/locks", NULL, 0, "token");
    expect(TOKEN_ORD, "DELETE", "/locks/k?force=true", NULL, 403, NULL);
    expect(TOKEN_OPS, "DELETE", "/locks/k?force=true", NULL, 0, "admin");
    router_close();
    /* --auth-token-file alone: force is refused, naming the flag */
    o.admin_file = NULL;
    router_open(&o);
    out = send_as(TOKEN_ORD, "DELETE", "/locks/k?force=true", NULL);
    CHECK_EQ_INT(out.status, 403);
    CHECK_CONTAINS(out.message, "--admin-token-file");
    router_close();
    /* no auth at all: everything passes but force */
    router_open(NULL);
    expect(NONE, "POST", "/locks/k", NULL, 0, "");
    expect(NONE, "DELETE", "/locks/k?force=true", NULL, 403, NULL);
    router_close();
    /* --tls-client-ca alone: any verified certificate, named by its first
     * name; tokens and nothing are 401 */
    memset(&o, 0, sizeof(o));
    o.tls_client_ca = true;
    router_open(&o);
    expect(CERT_OTHER, "POST", "/locks/k", NULL, 0, "other.svc");
    expect(CERT_OTHER, "GET", "/locks", NULL, 0, "other.svc");
    expect(CERT_OTHER, "DELETE", "/locks/k?force=true", NULL, 403, NULL);
    expect(CERT_BAD, "POST", "/locks/k", NULL, 401, NULL);
    expect(CERT_MISSING, "POST", "/locks/k", NULL, 401, NULL);
    expect(TOKEN_ORD, "POST", "/locks/k", NULL, 401, NULL);
    router_close();
    unlink(tok);
    unlink(adm);
}

static void test_open_refuses_conflicts_and_names_the_file(void)
{
    char tok[64], text[1024], err[512];
    struct authz_opts o = { 0 };
    struct authz *a;

    hexes();
    write_file(tok, T_ORD "\n");
    snprintf(text, sizeof(text),
             "{\"credentials\":[{\"name\":\"token\",\"token_sha256\":\"%s\","
             "\"prefixes\":[\"\"],\"verbs\":[\"*\"]}]}",
             hex_ops);
    write_file(policy_path, text);
    o.auth_file = policy_path;
    o.token_file = tok;
    a = authz_open(&o, err, sizeof(err));
    CHECK(a == NULL);
    CHECK_CONTAINS(err, policy_path);
    CHECK_CONTAINS(err, "--auth-token-file");
    rewrite(policy_path, "{\"credentials\":[{\"name\":\"x\"}]}");
    o.token_file = NULL;
    a = authz_open(&o, err, sizeof(err));
    CHECK(a == NULL);
    CHECK_CONTAINS(err, "--auth-file");
    CHECK_CONTAINS(err, policy_path);
    CHECK_CONTAINS(err, "credentials[0]");
    unlink(policy_path);
    a = authz_open(&o, err, sizeof(err));
    CHECK(a == NULL);
    CHECK_CONTAINS(err, "No such file");
    policy_path[0] = '\0';
    unlink(tok);
}

static void test_reload_swaps_whole_and_keeps_old_on_bad_file(void)
{
    char text[2048], name[API_CLIENT_LEN + 1], tok[64];
    struct authz_opts o = { 0 };
    struct authz_policy *held;
    char done[1024] = "";

    log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_TEXT); /* the warnings: quiet */
    router_open_policy();
    CHECK(authz_token_name(rcfg.authz, T_ORD, name, sizeof(name)) == 0);
    CHECK_STR_EQ(name, "orders");
    expect(TOKEN_ORD, "POST", "/locks/billing/1", NULL, 403, NULL);
    held = authz_policy_get(rcfg.authz); /* a request in flight */
    /* grant: orders now covers billing/ too; revoke: lister is gone */
    hexes();
    snprintf(text, sizeof(text),
             "{\"credentials\":[{\"name\":\"orders\",\"token_sha256\":\"%s\","
             "\"prefixes\":[\"orders/\",\"billing/\"],\"verbs\":[\"*\"]}]}",
             hex_ord);
    rewrite(policy_path, text);
    authz_reload(rcfg.authz, done, sizeof(done));
    CHECK_CONTAINS(done, policy_path);
    expect(TOKEN_ORD, "POST", "/locks/billing/1", NULL, 0, "orders");
    expect(TOKEN_LIST, "POST", "/locks/orders/1", NULL, 401, NULL);
    /* the old snapshot is intact for whoever still holds it */
    CHECK_EQ_INT(held->n, 4);
    CHECK_STR_EQ(held->creds[1].name, "lister");
    authz_policy_unref(held);
    /* a bad file keeps the policy in force */
    rewrite(policy_path, "{\"credentials\":[{\"name\":\"orders\"}]}");
    done[0] = '\0';
    authz_reload(rcfg.authz, done, sizeof(done));
    CHECK(strstr(done, policy_path) == NULL);
    expect(TOKEN_ORD, "POST", "/locks/billing/1", NULL, 0, "orders");
    unlink(policy_path);
    authz_reload(rcfg.authz, done, sizeof(done));
    expect(TOKEN_ORD, "POST", "/locks/billing/1", NULL, 0, "orders");
    router_close();
    /* a legacy token file: rotated, then broken */
    write_file(tok, T_ORD "\n");
    o.token_file = tok;
    router_open(&o);
    rewrite(tok, T_LIST "\n");
    done[0] = '\0';
    authz_reload(rcfg.authz, done, sizeof(done));
    CHECK_CONTAINS(done, "auth token from");
    expect(TOKEN_ORD, "GET", "/locks/k", NULL, 401, NULL);
    expect(TOKEN_LIST, "GET", "/locks/k", NULL, 0, "token");
    rewrite(tok, "\n");
    authz_reload(rcfg.authz, done, sizeof(done));
    expect(TOKEN_LIST, "GET", "/locks/k", NULL, 0, "token");
    router_close();
    unlink(tok);
}

static void test_sha256_hex_is_sha256(void)
{
    char hex[65];

    CHECK(authz_sha256_hex("abc", 3, hex) == 0);
    CHECK_STR_EQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61"
                      "f20015ad");
}

static const struct check_case cases[] = {
    CHECK_CASE(test_parse_refuses_each_bad_field),
    CHECK_CASE(test_parse_refuses_bad_top_level_and_duplicates),
    CHECK_CASE(test_parse_reads_fields_and_defaults),
    CHECK_CASE(test_decisions_single_key_verbs),
    CHECK_CASE(test_decisions_messages_name_what_is_missing),
    CHECK_CASE(test_decisions_modes_force_multi_list),
    CHECK_CASE(test_decisions_order_401_before_parse_403_after),
    CHECK_CASE(test_decisions_operator_endpoints),
    CHECK_CASE(test_decisions_legacy_and_any_cert),
    CHECK_CASE(test_open_refuses_conflicts_and_names_the_file),
    CHECK_CASE(test_reload_swaps_whole_and_keeps_old_on_bad_file),
    CHECK_CASE(test_sha256_hex_is_sha256),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

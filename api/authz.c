/*
 * api/authz.c - the credentials policy: --auth-file parsed with every
 * refusal naming its field, the legacy token files as credentials
 * "token" and "admin", and the snapshot in force, swapped whole on SIGHUP
 * (see authz.h). The decisions are in api/authz_check.c.
 */
#include "api/authz.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <jansson.h>

#include "lib/log.h"
#include "lib/secret.h"
#include "lib/text.h"

struct authz {
    pthread_rwlock_t lock;    /* guards cur (the pointer, not *cur) */
    struct authz_policy *cur; /* one reference is ours */
    char *auth_file;          /* owned; NULL: none */
    char *token_file;         /* owned; NULL: none */
    char *admin_file;         /* owned; NULL: none */
    bool tls_client_ca;
    char *file_text; /* owned: the last good --auth-file */
    size_t file_len;
    bool has_token, has_admin; /* the last good token files' digests */
    unsigned char token[AUTHZ_SHA256_LEN];
    unsigned char admin[AUTHZ_SHA256_LEN];
};

static const char *const verb_names[AUTHZ_VERB_COUNT] = {
    "acquire", "renew", "release", "inspect",
    "list",    "force", "probes",  "metrics",
};

static int sha256(const char *s, size_t n, unsigned char *out)
{
    return gnutls_hash_fast(GNUTLS_DIG_SHA256, s, n, out) == 0 ? 0 : -1;
}

int authz_sha256_hex(const char *s, size_t n, char *hex)
{
    unsigned char d[AUTHZ_SHA256_LEN];

    if (sha256(s, n, d) != 0)
        return -1;
    text_hex(hex, d, sizeof(d));
    return 0;
}

static void cred_cleanup(struct authz_cred *c)
{
    for (size_t i = 0; i < c->nprefixes; i++)
        free(c->prefixes[i]);
    free(c->prefixes);
    free(c->prefix_lens);
    free(c->tls_identity);
    memset(c, 0, sizeof(*c));
}

void authz_policy_unref(struct authz_policy *p)
{
    if (p == NULL || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    for (size_t i = 0; i < p->n; i++)
        cred_cleanup(&p->creds[i]);
    free(p->creds);
    free(p);
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > API_CLIENT_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '_' ||
              s[i] == '-'))
            return false;
    return true;
}

static int hex_digest(const char *s, unsigned char *out)
{
    return text_unhex_lower(s, out, AUTHZ_SHA256_LEN) ? 0 : -1;
}

/* The bits of the names in arr (a non-empty array of strings, each one of
 * names[0..n) or "*" when star is not 0): 0, or -1 with err. */
static int parse_names(const json_t *arr,
                       const char *field,
                       const char *const *names,
                       size_t n,
                       unsigned star,
                       unsigned *bits,
                       char *err,
                       size_t errlen)
{
    size_t i, k;
    const json_t *v;

    *bits = 0;
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        snprintf(err, errlen, "%s: must be a non-empty array of strings",
                 field);
        return -1;
    }
    json_array_foreach(arr, i, v)
    {
        const char *s = json_string_value(v);
        if (s == NULL) {
            snprintf(err, errlen, "%s[%zu]: must be a string", field, i);
            return -1;
        }
        for (k = 0; k < n; k++)
            if (strcmp(s, names[k]) == 0)
                break;
        if (k < n)
            *bits |= 1u << k;
        else if (star != 0 && strcmp(s, "*") == 0)
            *bits |= star;
        else {
            snprintf(err, errlen, "%s[%zu]: unknown value '%.64s'", field, i,
                     s);
            return -1;
        }
    }
    return 0;
}

static int parse_prefixes(const json_t *arr,
                          const char *field,
                          struct authz_cred *c,
                          char *err,
                          size_t errlen)
{
    size_t i, n = json_array_size(arr);
    const json_t *v;

    if (!json_is_array(arr) || n == 0) {
        snprintf(err, errlen, "%s: must be a non-empty array of strings",
                 field);
        return -1;
    }
    c->prefixes = calloc(n, sizeof(*c->prefixes));
    c->prefix_lens = calloc(n, sizeof(*c->prefix_lens));
    if (c->prefixes == NULL || c->prefix_lens == NULL)
        goto oom;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_string(v)) {
            snprintf(err, errlen, "%s[%zu]: must be a string", field, i);
            return -1;
        }
        if (json_string_length(v) > LOCK_KEY_MAX) {
            snprintf(err, errlen, "%s[%zu]: longer than a key (%d bytes)",
                     field, i, LOCK_KEY_MAX);
            return -1;
        }
        c->prefixes[i] = strdup(json_string_value(v));
        if (c->prefixes[i] == NULL)
            goto oom;
        c->prefix_lens[i] = json_string_length(v);
        c->nprefixes = i + 1;
    }
    return 0;
oom:
    snprintf(err, errlen, "%s: out of memory", field);
    return -1;
}

static const char *const cred_fields[] = {
    "name",  "token_sha256", "tls_identity", "prefixes",
    "verbs", "modes",        "multi",        "max_waiters",
};

/* The optional members: modes, multi, max_waiters. */
static int parse_options(
    json_t *o, const char *at, struct authz_cred *c, char *err, size_t errlen)
{
    static const char *const modes[] = { "exclusive", "shared" };
    const json_t *v;
    char field[64];

    c->modes = AUTHZ_MODE_EXCLUSIVE | AUTHZ_MODE_SHARED;
    c->multi = true;
    v = json_object_get(o, "modes");
    if (v != NULL) {
        snprintf(field, sizeof(field), "%s.modes", at);
        if (parse_names(v, field, modes, 2, 0, &c->modes, err, errlen) != 0)
            return -1;
    }
    v = json_object_get(o, "multi");
    if (v != NULL) {
        if (!json_is_boolean(v)) {
            snprintf(err, errlen, "%s.multi: must be true or false", at);
            return -1;
        }
        c->multi = json_is_true(v);
    }
    v = json_object_get(o, "max_waiters");
    if (v != NULL) {
        json_int_t n = json_integer_value(v);
        if (!json_is_integer(v) || n < 0 || n > AUTHZ_WAITERS_MAX) {
            snprintf(err, errlen,
                     "%s.max_waiters: must be an integer from 0 to %d", at,
                     AUTHZ_WAITERS_MAX);
            return -1;
        }
        c->max_waiters = (unsigned)n;
    }
    return 0;
}

/* The identity members: name, token_sha256, tls_identity. */
static int parse_identity(json_t *o,
                          const char *at,
                          bool tls_client_ca,
                          struct authz_cred *c,
                          char *err,
                          size_t errlen)
{
    const json_t *name = json_object_get(o, "name");
    const json_t *tok = json_object_get(o, "token_sha256");
    const json_t *tls = json_object_get(o, "tls_identity");

    if (!json_is_string(name) || !name_ok(json_string_value(name))) {
        snprintf(err, errlen, "%s.name: must be 1 to %d of A-Z a-z 0-9 . _ -",
                 at, API_CLIENT_LEN);
        return -1;
    }
    snprintf(c->name, sizeof(c->name), "%s", json_string_value(name));
    if (tok == NULL && tls == NULL) {
        snprintf(err, errlen, "%s: needs token_sha256 or tls_identity", at);
        return -1;
    }
    if (tok != NULL) {
        if (!json_is_string(tok) ||
            hex_digest(json_string_value(tok), c->token_sha256) != 0) {
            snprintf(err, errlen,
                     "%s.token_sha256: must be 64 lower-case hex digits "
                     "(the SHA-256 of the token; lockd --hash-token)",
                     at);
            return -1;
        }
        c->has_token = true;
    }
    if (tls != NULL) {
        if (!json_is_string(tls) || json_string_length(tls) == 0 ||
            strlen(json_string_value(tls)) != json_string_length(tls)) {
            snprintf(err, errlen, "%s.tls_identity: must be a non-empty string",
                     at);
            return -1;
        }
        if (!tls_client_ca) {
            snprintf(err, errlen, "%s.tls_identity: needs --tls-client-ca", at);
            return -1;
        }
        c->tls_identity = strdup(json_string_value(tls));
        if (c->tls_identity == NULL) {
            snprintf(err, errlen, "%s: out of memory", at);
            return -1;
        }
    }
    return 0;
}

static int parse_cred(json_t *o,
                      size_t idx,
                      bool tls_client_ca,
                      struct authz_cred *c,
                      char *err,
                      size_t errlen)
{
    char at[48], field[64];
    const char *k;
    json_t *v;

    snprintf(at, sizeof(at), "credentials[%zu]", idx);
    if (!json_is_object(o)) {
        snprintf(err, errlen, "%s: must be an object", at);
        return -1;
    }
    json_object_foreach(o, k, v)
    {
        size_t i, n = sizeof(cred_fields) / sizeof(cred_fields[0]);
        for (i = 0; i < n && strcmp(k, cred_fields[i]) != 0; i++)
            ;
        if (i == n) {
            snprintf(err, errlen, "%s: unknown field '%.64s'", at, k);
            return -1;
        }
    }
    if (parse_identity(o, at, tls_client_ca, c, err, errlen) != 0)
        return -1;
    snprintf(field, sizeof(field), "%s.prefixes", at);
    if (parse_prefixes(json_object_get(o, "prefixes"), field, c, err, errlen) !=
        0)
        return -1;
    snprintf(field, sizeof(field), "%s.verbs", at);
    if (parse_names(json_object_get(o, "verbs"), field, verb_names,
                    AUTHZ_VERB_COUNT, AUTHZ_STAR, &c->verbs, err, errlen) != 0)
        return -1;
    return parse_options(o, at, c, err, errlen);
}

/* Names, tokens and identities must each name one credential. */
static int check_unique(const struct authz_policy *p, char *err, size_t errlen)
{
    for (size_t i = 0; i < p->n; i++) {
        const struct authz_cred *a = &p->creds[i];
        for (size_t j = 0; j < i; j++) {
            const struct authz_cred *b = &p->creds[j];
            const char *what = NULL;
            if (strcmp(a->name, b->name) == 0)
                what = "name";
            else if (a->has_token && b->has_token &&
                     memcmp(a->token_sha256, b->token_sha256,
                            AUTHZ_SHA256_LEN) == 0)
                what = "token_sha256";
            else if (a->tls_identity != NULL && b->tls_identity != NULL &&
                     strcmp(a->tls_identity, b->tls_identity) == 0)
                what = "tls_identity";
            if (what != NULL) {
                snprintf(err, errlen,
                         "credentials[%zu].%s: the same as "
                         "credentials[%zu]'s ('%s')",
                         i, what, j, b->name);
                return -1;
            }
        }
    }
    return 0;
}

static int parse_top(json_t *root,
                     bool tls_client_ca,
                     struct authz_policy *p,
                     char *err,
                     size_t errlen)
{
    static const char *const opens[] = { "healthz", "readyz", "metrics" };
    json_t *creds = json_object_get(root, "credentials");
    const json_t *open = json_object_get(root, "open");
    const char *k;
    json_t *v;
    size_t i;

    json_object_foreach(root, k, v)
    {
        if (strcmp(k, "credentials") != 0 && strcmp(k, "open") != 0) {
            snprintf(err, errlen, "unknown field '%.64s' (credentials, open)",
                     k);
            return -1;
        }
    }
    if (!json_is_array(creds)) {
        snprintf(err, errlen, "credentials: must be an array of objects");
        return -1;
    }
    p->open = AUTHZ_OPEN_ALL;
    if (open != NULL && json_is_array(open) && json_array_size(open) == 0)
        p->open = 0; /* every operator endpoint needs a credential */
    else if (open != NULL &&
             parse_names(open, "open", opens, 3, 0, &p->open, err, errlen) != 0)
        return -1;
    p->creds = calloc(json_array_size(creds) + 2, sizeof(*p->creds));
    if (p->creds == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    json_array_foreach(creds, i, v)
    {
        p->n = i + 1;
        if (parse_cred(v, i, tls_client_ca, &p->creds[i], err, errlen) != 0)
            return -1;
    }
    return check_unique(p, err, errlen);
}

struct authz_policy *authz_parse(
    const char *text, size_t len, bool tls_client_ca, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    struct authz_policy *p = NULL;

    if (root == NULL || !json_is_object(root)) {
        if (root == NULL)
            snprintf(err, errlen, "not JSON: %s (line %d, column %d)", je.text,
                     je.line, je.column);
        else
            snprintf(err, errlen, "must be a JSON object");
        goto out;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    atomic_init(&p->refs, 1);
    if (parse_top(root, tls_client_ca, p, err, errlen) != 0) {
        authz_policy_unref(p);
        p = NULL;
    }
out:
    json_decref(root);
    return p;
}

/* Append a legacy credential: every key, verbs, the token's digest. */
static int add_legacy(struct authz_policy *p,
                      const char *name,
                      const char *flag,
                      const unsigned char *digest,
                      unsigned verbs,
                      char *err,
                      size_t errlen)
{
    struct authz_cred *c = &p->creds[p->n];

    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->creds[i].name, name) == 0) {
            snprintf(err, errlen,
                     "--auth-file names a credential '%s', the name %s "
                     "takes",
                     name, flag);
            return -1;
        }
    }
    p->n++; /* from here on, p's cleanup frees what c holds */
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->has_token = true;
    memcpy(c->token_sha256, digest, AUTHZ_SHA256_LEN);
    c->prefixes = calloc(1, sizeof(*c->prefixes));
    c->prefix_lens = calloc(1, sizeof(*c->prefix_lens));
    if (c->prefixes != NULL) {
        c->prefixes[0] = strdup(""); /* every key */
        c->nprefixes = 1;
    }
    if (c->prefixes == NULL || c->prefix_lens == NULL ||
        c->prefixes[0] == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->verbs = verbs;
    c->modes = AUTHZ_MODE_EXCLUSIVE | AUTHZ_MODE_SHARED;
    c->multi = true;
    return 0;
}

/* The policy of a's sources: text (len bytes, NULL: no --auth-file), the
 * token digests (NULL: none). NULL with err on failure. */
static struct authz_policy *compose(const struct authz *a,
                                    const char *text,
                                    size_t len,
                                    const unsigned char *token,
                                    const unsigned char *admin,
                                    char *err,
                                    size_t errlen)
{
    struct authz_policy *p;

    if (text != NULL) {
        p = authz_parse(text, len, a->tls_client_ca, err, errlen);
    } else {
        p = calloc(1, sizeof(*p));
        if (p != NULL) {
            atomic_init(&p->refs, 1);
            p->open = AUTHZ_OPEN_ALL;
            p->creds = calloc(2, sizeof(*p->creds));
        }
        if (p == NULL || p->creds == NULL)
            snprintf(err, errlen, "out of memory");
    }
    if (p == NULL || p->creds == NULL ||
        (token != NULL && add_legacy(p, "token", "--auth-token-file", token,
                                     AUTHZ_STAR, err, errlen) != 0) ||
        (admin != NULL &&
         add_legacy(p, "admin", "--admin-token-file", admin,
                    AUTHZ_STAR | (1u << AUTHZ_FORCE), err, errlen) != 0)) {
        authz_policy_unref(p);
        return NULL;
    }
    p->anonymous = text == NULL && token == NULL && !a->tls_client_ca;
    p->any_cert = text == NULL && a->tls_client_ca;
    for (size_t i = 0; i < p->n; i++)
        if ((p->creds[i].verbs & (1u << AUTHZ_FORCE)) != 0)
            p->any_force = true;
    return p;
}

/* A token file's first line, as its digest: 0, or -1 with err. */
static int
read_token(const char *path, unsigned char *digest, char *err, size_t errlen)
{
    char *t = secret_file_line(path, err, errlen);
    int rc;

    if (t == NULL)
        return -1;
    rc = sha256(t, strlen(t), digest);
    if (rc != 0)
        snprintf(err, errlen, "%s: cannot hash the token", path);
    explicit_bzero(t, strlen(t));
    free(t);
    return rc;
}

/* The whole of path (at most AUTHZ_FILE_MAX bytes), malloc'ed: NULL with
 * err naming the file. */
static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;

    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    buf = malloc(AUTHZ_FILE_MAX + 1);
    if (buf != NULL)
        n = fread(buf, 1, AUTHZ_FILE_MAX + 1, f);
    if (buf == NULL || ferror(f) || n > AUTHZ_FILE_MAX) {
        snprintf(err, errlen, "%s: %s", path,
                 buf == NULL ? "out of memory"
                 : ferror(f) ? "read error"
                             : "larger than 1 MiB");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

bool authz_wanted(const struct authz_opts *o)
{
    return o->auth_file != NULL || o->token_file != NULL ||
           o->admin_file != NULL || o->tls_client_ca;
}

static int dup_opts(struct authz *a, const struct authz_opts *o)
{
    a->tls_client_ca = o->tls_client_ca;
    a->auth_file = o->auth_file != NULL ? strdup(o->auth_file) : NULL;
    a->token_file = o->token_file != NULL ? strdup(o->token_file) : NULL;
    a->admin_file = o->admin_file != NULL ? strdup(o->admin_file) : NULL;
    return (o->auth_file != NULL && a->auth_file == NULL) ||
                   (o->token_file != NULL && a->token_file == NULL) ||
                   (o->admin_file != NULL && a->admin_file == NULL)
               ? -1
               : 0;
}

struct authz *authz_open(const struct authz_opts *o, char *err, size_t errlen)
{
    struct authz *a = calloc(1, sizeof(*a));
    char why[384];

    if (a == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_rwlock_init(&a->lock, NULL);
    if (dup_opts(a, o) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (o->token_file != NULL) {
        if (read_token(o->token_file, a->token, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "--auth-token-file %s", why);
            goto fail;
        }
        a->has_token = true;
    }
    if (o->admin_file != NULL) {
        if (read_token(o->admin_file, a->admin, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "--admin-token-file %s", why);
            goto fail;
        }
        a->has_admin = true;
    }
    if (o->auth_file != NULL) {
        a->file_text = read_file(o->auth_file, &a->file_len, why, sizeof(why));
        if (a->file_text == NULL) {
            snprintf(err, errlen, "--auth-file %s", why);
            goto fail;
        }
    }
    a->cur =
        compose(a, a->file_text, a->file_len, a->has_token ? a->token : NULL,
                a->has_admin ? a->admin : NULL, why, sizeof(why));
    if (a->cur == NULL) {
        snprintf(err, errlen, "--auth-file %s: %s",
                 o->auth_file != NULL ? o->auth_file : "(none)", why);
        goto fail;
    }
    return a;
fail:
    authz_close(a);
    return NULL;
}

/* SIGHUP for one token file: its new digest into digest, or the old one
 * kept (logged). what: "auth" or "admin". */
static void reload_token(const char *path,
                         const char *what,
                         unsigned char *digest,
                         char *done,
                         size_t donelen)
{
    char err[512];
    size_t n = strlen(done);

    if (path == NULL)
        return;
    if (read_token(path, digest, err, sizeof(err)) != 0) {
        log_warn("SIGHUP: %s token: %s; the old one stays in force", what, err);
        return;
    }
    snprintf(done + n, donelen - n, "%s%s token from %s", n > 0 ? ", " : "",
             what, path);
}

/* SIGHUP for the --auth-file: the new policy with tok and adm, or NULL
 * (the caller composes with the old text). */
static struct authz_policy *reload_file(struct authz *a,
                                        const unsigned char *tok,
                                        const unsigned char *adm,
                                        char *done,
                                        size_t donelen)
{
    char err[512];
    size_t len = 0, n = strlen(done);
    char *text = read_file(a->auth_file, &len, err, sizeof(err));
    struct authz_policy *p = NULL;

    if (text != NULL)
        p = compose(a, text, len, tok, adm, err, sizeof(err));
    if (p == NULL) {
        log_warn("SIGHUP: --auth-file %s: %s; the old policy stays in force",
                 a->auth_file, err);
        free(text);
        return NULL;
    }
    free(a->file_text);
    a->file_text = text;
    a->file_len = len;
    snprintf(done + n, donelen - n, "%sauth file %s (%zu credentials)",
             n > 0 ? ", " : "", a->auth_file, p->n);
    return p;
}

void authz_reload(struct authz *a, char *done, size_t donelen)
{
    unsigned char tok[AUTHZ_SHA256_LEN], adm[AUTHZ_SHA256_LEN];
    struct authz_policy *p = NULL, *old;
    char err[512];

    memcpy(tok, a->token, sizeof(tok));
    memcpy(adm, a->admin, sizeof(adm));
    reload_token(a->token_file, "auth", tok, done, donelen);
    reload_token(a->admin_file, "admin", adm, done, donelen);
    if (a->auth_file != NULL)
        p = reload_file(a, a->has_token ? tok : NULL, a->has_admin ? adm : NULL,
                        done, donelen);
    if (p == NULL)
        p = compose(a, a->file_text, a->file_len, a->has_token ? tok : NULL,
                    a->has_admin ? adm : NULL, err, sizeof(err));
    if (p == NULL) { /* out of memory: keep all of the old one */
        log_warn("SIGHUP: credentials: %s; the old policy stays in force", err);
        return;
    }
    memcpy(a->token, tok, sizeof(tok));
    memcpy(a->admin, adm, sizeof(adm));
    pthread_rwlock_wrlock(&a->lock);
    old = a->cur;
    a->cur = p;
    pthread_rwlock_unlock(&a->lock);
    authz_policy_unref(old); /* requests still holding it free it last */
}

struct authz_policy *authz_policy_get(struct authz *a)
{
    struct authz_policy *p;

    pthread_rwlock_rdlock(&a->lock);
    p = a->cur;
    atomic_fetch_add(&p->refs, 1);
    pthread_rwlock_unlock(&a->lock);
    return p;
}

void authz_close(struct authz *a)
{
    if (a == NULL)
        return;
    authz_policy_unref(a->cur);
    pthread_rwlock_destroy(&a->lock);
    free(a->file_text);
    free(a->auth_file);
    free(a->token_file);
    free(a->admin_file);
    explicit_bzero(a, sizeof(*a));
    free(a);
}

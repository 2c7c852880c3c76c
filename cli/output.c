/*
 * cli/output.c - lockctl's output: the server's JSON, shell assignments,
 * error lines, and the exit code of each answer.
 */
#include "cli/output.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int output_exit_code(const struct http_call *c)
{
    const char *code = http_error_code(c);
    long s = c->status;

    if (s == 0)
        return EXIT_UNAVAILABLE;
    if (s >= 200 && s < 300)
        return EXIT_OK;
    if (s == 401 || s == 403)
        return EXIT_DENIED;
    if (s == 404)
        return code == NULL || strcmp(code, "lock_not_found") == 0
                   ? EXIT_NOT_HELD
                   : EXIT_USAGE; /* no such route: a wrong --url path */
    if (s == 409)
        return code != NULL && strcmp(code, "token_mismatch") == 0
                   ? EXIT_MISMATCH
                   : EXIT_HELD;
    if (s == 429 || s >= 500)
        return EXIT_UNAVAILABLE;
    return EXIT_USAGE;
}

void output_keys_label(const struct opts *o, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < o->nkeys; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? ", " : "",
                         o->keys[i]);
        if (n < 0 || (size_t)n >= len - used) {
            if (len > 4)
                memcpy(buf + len - 4, "...", 4);
            return;
        }
        used += (size_t)n;
    }
}

/* "1.2s" or "300ms" into buf. */
static void fmt_ms(long long ms, char *buf, size_t len)
{
    if (ms < 1000)
        snprintf(buf, len, "%lldms", ms);
    else
        snprintf(buf, len, "%lld.%llds", ms / 1000, (ms % 1000) / 100);
}

/* What an error answer means, in words, into buf. */
static void describe(const struct http_call *c, char *buf, size_t len)
{
    const char *code = http_error_code(c);
    json_t *err = json_object_get(c->json, "error");
    const char *msg = json_string_value(json_object_get(err, "message"));
    char after[64] = "";

    if (c->retry_after_ms >= 0) {
        char t[32];
        fmt_ms(c->retry_after_ms, t, sizeof t);
        snprintf(after, sizeof after, " (retry after %s)", t);
    }
    if (c->status == 0)
        snprintf(buf, len, "cannot reach lockd: %s", c->err);
    else if (code == NULL)
        snprintf(buf, len, "lockd answered %ld%s", c->status, after);
    else if (strcmp(code, "lock_held") == 0)
        snprintf(buf, len, "held by another holder%s", after);
    else if (strcmp(code, "lock_not_found") == 0)
        snprintf(buf, len, "not held (never acquired, released or expired)");
    else if (strcmp(code, "token_mismatch") == 0)
        snprintf(buf, len, "held under another token");
    else if (strcmp(code, "limit_mismatch") == 0)
        snprintf(buf, len, "held shared under another --limit");
    else if (strcmp(code, "unauthorized") == 0)
        snprintf(buf, len, "denied (%ld %s): check --auth-token-file",
                 c->status, code);
    else
        snprintf(buf, len, "%ld %s: %s%s", c->status, code,
                 msg != NULL ? msg : "", after);
}

void output_error(const struct opts *o,
                  const struct http_call *c,
                  bool to_stdout)
{
    json_t *err = json_object_get(c->json, "error");
    const char *key = json_string_value(json_object_get(err, "key"));
    json_t *held = json_object_get(err, "held");
    char label[1024], why[1024];

    output_keys_label(o, label, sizeof label);
    if (key != NULL) /* a multi-key renew names the key at fault */
        snprintf(label, sizeof label, "%s", key);
    if (json_is_array(held) && json_array_size(held) > 0) {
        size_t i, used = 0;
        json_t *k;
        json_array_foreach(held, i, k)
        {
            int n = snprintf(label + used, sizeof label - used, "%s%s",
                             i > 0 ? ", " : "", json_string_value(k));
            if (n < 0 || (size_t)n >= sizeof label - used)
                break;
            used += (size_t)n;
        }
    }
    describe(c, why, sizeof why);
    fprintf(stderr, "lockctl: %s: %s\n", label, why);
    if (to_stdout && o->format == FORMAT_JSON && c->json != NULL) {
        char *s = json_dumps(c->json, JSON_COMPACT);
        if (s != NULL)
            printf("%s\n", s);
        free(s);
    }
}

void output_shell_word(FILE *f, const char *v)
{
    bool bare = *v != '\0';

    for (const char *p = v; *p && bare; p++)
        bare = isalnum((unsigned char)*p) || strchr("_-.,:/@%+=", *p) != NULL;
    if (bare) {
        fputs(v, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = v; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

/* LOCKD_<NAME> from a JSON field name: upper case, '_' for the rest. */
static void print_name(const char *field)
{
    fputs("LOCKD_", stdout);
    for (const char *p = field; *p; p++)
        putchar(isalnum((unsigned char)*p) ? toupper((unsigned char)*p) : '_');
    putchar('=');
}

static void print_value(json_t *v)
{
    char num[32];
    char *s;

    switch (json_typeof(v)) {
    case JSON_STRING:
        output_shell_word(stdout, json_string_value(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(v));
        fputs(num, stdout);
        break;
    case JSON_REAL:
        snprintf(num, sizeof num, "%.17g", json_real_value(v));
        fputs(num, stdout);
        break;
    case JSON_TRUE:
        putchar('1');
        break;
    case JSON_FALSE:
        putchar('0');
        break;
    case JSON_NULL:
        fputs("''", stdout);
        break;
    case JSON_OBJECT:
    case JSON_ARRAY:
        s = json_dumps(v, JSON_COMPACT);
        output_shell_word(stdout, s != NULL ? s : "");
        free(s);
        break;
    }
}

int output_success(const struct opts *o, json_t *body)
{
    const char *field;
    json_t *v;

    if (o->quiet)
        return 0;
    if (o->format == FORMAT_JSON) {
        char *s = json_dumps(body, JSON_COMPACT);
        if (s == NULL)
            return -1;
        printf("%s\n", s);
        free(s);
    } else {
        json_object_foreach(body, field, v)
        {
            print_name(field);
            print_value(v);
            putchar('\n');
        }
    }
    return fflush(stdout) == 0 ? 0 : -1;
}

void output_env_free(const char *key)
{
    fputs("LOCKD_KEY=", stdout);
    output_shell_word(stdout, key);
    fputs("\nLOCKD_HELD=0\n", stdout);
}

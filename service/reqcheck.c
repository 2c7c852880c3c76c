/*
 * service/reqcheck.c - checks of the request line and headers that
 * libmicrohttpd leaves to lockd: a NUL byte it would silently cut a header
 * value or the target at, control characters in the headers lockd acts
 * on, folded lines, ambiguous body framing, and --max-header-bytes; then
 * the query parameters and the headers api/ reads, gathered for it
 * (reqcheck_collect()). Apart from server.c because it reads
 * libmicrohttpd's in-place parse of the header section, a concern of its
 * own.
 */
#include "service/reqcheck.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Request headers that lockd, or libmicrohttpd on its behalf, acts on: a
 * control character in one of them is refused, not cut or passed on. */
static const char *const acted_on[] = {
    "Lock-Token",   "Authorization", "Content-Length", "Transfer-Encoding",
    "Content-Type", "X-Request-Id",  "Host",           "Connection",
    "Expect",
};

static bool is_acted_on(const char *key)
{
    for (size_t i = 0; i < sizeof(acted_on) / sizeof(acted_on[0]); i++)
        if (strcasecmp(key, acted_on[i]) == 0)
            return true;
    return false;
}

/*
 * libmicrohttpd 0.9.75 parses the header section in place and keeps each
 * name and value as a C string whose length it takes with strlen(): a NUL
 * byte inside a value silently ends it ("Lock-Token: <token>\0x" reads as
 * the token). What it leaves of one header line is the name, the NUL that
 * replaced the colon, the spaces and tabs it skipped, the value, and one
 * or two NULs for the CRLF or bare LF; the next line follows at once, and
 * after the last one the empty line (one or two more NULs) ends the section
 * of MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE bytes that starts at the
 * method. So anything else between a value and the next name is what a NUL
 * cut off. A folded line (obs-fold) is joined by copying its name out of
 * the section, so a name outside it is a folded line. Only pointers into
 * the section are read.
 */
struct head_scan {
    uintptr_t start, end;    /* the header section */
    const char *key, *value; /* the previous header, checked at the next */
    size_t key_len, value_len;
    enum api_error err; /* the first problem found */
    char msg[160];
    unsigned content_lengths, transfer_encodings;
    const char *first_length;
    bool length_conflict, chunked;
};

/* Note the first problem: "the <key> header <what>", or what alone. */
static void scan_fail(struct head_scan *h,
                      enum api_error e,
                      const char *what,
                      const char *key)
{
    char name[48];
    size_t i;

    if (h->err != API_OK)
        return;
    h->err = e;
    if (key == NULL) {
        snprintf(h->msg, sizeof(h->msg), "%s", what);
        return;
    }
    for (i = 0; key[i] != '\0' && i + 1 < sizeof(name); i++)
        name[i] = (unsigned char)key[i] < 0x20 || (unsigned char)key[i] >= 0x7f
                      ? '?'
                      : key[i];
    name[i] = '\0';
    snprintf(h->msg, sizeof(h->msg), "the %s header %s", name, what);
}

/* Whether what follows the previous header up to next is only its line
 * end (and, after the last one, the empty line): min to max NULs. */
static bool line_end_clean(const struct head_scan *h,
                           uintptr_t next,
                           size_t min,
                           size_t max)
{
    uintptr_t p = (uintptr_t)h->key + h->key_len;
    uintptr_t v = (uintptr_t)h->value;

    if (p >= h->end || *(const char *)p != '\0')
        return false; /* not the colon */
    if (v <= p || v + h->value_len > next)
        return false;
    for (p++; p < v; p++)
        if (*(const char *)p != ' ' && *(const char *)p != '\t')
            return false;
    p = v + h->value_len;
    if (next - p < min || next - p > max)
        return false;
    for (; p < next; p++)
        if (*(const char *)p != '\0')
            return false;
    return true;
}

static void check_previous(struct head_scan *h, uintptr_t next, bool last)
{
    if (h->key == NULL || !is_acted_on(h->key))
        return;
    if (!line_end_clean(h, next, last ? 2 : 1, last ? 4 : 2))
        scan_fail(h, API_INVALID_PARAMETER, "contains a NUL byte", h->key);
}

static enum MHD_Result scan_header(void *cls,
                                   enum MHD_ValueKind kind,
                                   const char *key,
                                   size_t key_len,
                                   const char *value,
                                   size_t value_len)
{
    struct head_scan *h = cls;
    uintptr_t k = (uintptr_t)key;

    (void)kind;
    if (value == NULL)
        value = "";
    if (k < h->start || k >= h->end) {
        /* folded: its name was moved out, and where it was is zeroed, so
         * the previous line cannot be checked */
        h->key = NULL;
        scan_fail(h, API_BAD_REQUEST,
                  "a header line is folded (obs-fold, RFC 9112 section 5.2)",
                  NULL);
        return MHD_YES;
    }
    check_previous(h, k, false);
    h->key = key;
    h->key_len = key_len;
    h->value = value;
    h->value_len = value_len;
    if (is_acted_on(key))
        for (size_t i = 0; i < value_len; i++) {
            unsigned char c = (unsigned char)value[i];
            if ((c < 0x20 && c != '\t') || c == 0x7f) {
                scan_fail(h, API_INVALID_PARAMETER,
                          "contains a control character", key);
                break;
            }
        }
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (h->content_lengths++ > 0 && strcmp(value, h->first_length) != 0)
            h->length_conflict = true;
        h->first_length = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        h->transfer_encodings++;
        h->chunked = strcasecmp(value, "chunked") == 0;
    }
    return MHD_YES;
}

/*
 * Headers a request must not have: API_OK, or the error to answer with
 * (msg set). Framing first: a body whose length is ambiguous is how
 * requests get smuggled past proxies (400), and a transfer coding other
 * than chunked alone is one lockd cannot read (501, RFC 9112 section 6.1);
 * either way the connection is closed.
 */
enum api_error reqcheck_headers(struct MHD_Connection *conn,
                                const char *method,
                                uint64_t max_header_bytes,
                                bool *close,
                                char *msg,
                                size_t msglen)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    struct head_scan h = { .err = API_OK };

    if (ci == NULL)
        return API_OK; /* cannot happen once the headers are in */
    h.start = (uintptr_t)method;
    h.end = h.start + ci->header_size;
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, scan_header, &h);
    check_previous(&h, h.end, true);
    if (h.transfer_encodings > 0 || h.length_conflict) {
        *close = true;
        if (h.content_lengths > 0 || h.length_conflict) {
            snprintf(msg, msglen,
                     "conflicting Content-Length / "
                     "Transfer-Encoding headers");
            return API_INVALID_PARAMETER;
        }
        if (h.transfer_encodings > 1 || !h.chunked) {
            snprintf(msg, msglen,
                     "only the chunked transfer coding, "
                     "alone, is supported");
            return API_NOT_IMPLEMENTED;
        }
        *close = false;
    }
    if (h.err != API_OK) {
        snprintf(msg, msglen, "%s", h.msg);
        return h.err;
    }
    if (ci->header_size > max_header_bytes) {
        *close = true;
        snprintf(msg, msglen,
                 "the request line and headers are %zu bytes, over "
                 "--max-header-bytes %llu",
                 ci->header_size, (unsigned long long)max_header_bytes);
        return API_HEADERS_TOO_LARGE;
    }
    return API_OK;
}

struct first_arg {
    const char *key; /* the first query parameter's name, as stored */
};

static enum MHD_Result find_first_arg(void *cls,
                                      enum MHD_ValueKind kind,
                                      const char *key,
                                      const char *value)
{
    struct first_arg *a = cls;

    (void)kind;
    (void)value;
    a->key = key;
    return MHD_NO; /* the first is enough */
}

/*
 * True if the request target held a raw NUL byte, which libmicrohttpd's
 * C strings silently cut off ("/locks/a\0b" would act on "a"). It parses
 * the request line in place: the target runs from url up to the NUL that
 * replaced the space before version, and a '?' inside it becomes a NUL
 * followed by the first query parameter. So if url ends early, the next
 * byte must start that parameter (or the empty query before version).
 * Only pointers are compared: nothing outside the strings is read.
 */
bool reqcheck_target_has_nul(struct MHD_Connection *conn,
                             const char *url,
                             const char *version)
{
    const char *end = url + strlen(url);
    struct first_arg a = { NULL };

    if (version <= url || version[0] == '\0' || end + 1 == version)
        return false; /* no query, or not the layout described above */
    if (end + 2 == version)
        return false; /* an empty query: "?" alone */
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, find_first_arg, &a);
    return a.key != end + 1;
}

static enum MHD_Result collect_arg(void *cls,
                                   enum MHD_ValueKind kind,
                                   const char *key,
                                   const char *value)
{
    struct reqcheck_collect *c = cls;

    (void)kind;
    if (c->nquery == REQCHECK_QUERY_MAX) {
        c->overflow = true;
        return MHD_NO;
    }
    c->query[c->nquery].name = key;
    c->query[c->nquery].value = value;
    c->nquery++;
    return MHD_YES;
}

static enum MHD_Result collect_header(void *cls,
                                      enum MHD_ValueKind kind,
                                      const char *key,
                                      const char *value)
{
    struct reqcheck_collect *c = cls;

    (void)kind;
    if (strcasecmp(key, "Idempotency-Key") == 0) {
        if (c->nidem_keys == REQCHECK_IDEM_KEYS_MAX) {
            c->overflow = true;
            return MHD_NO;
        }
        c->idem_keys[c->nidem_keys++] = value != NULL ? value : "";
        return MHD_YES;
    }
    if (strcasecmp(key, "Lock-Token") != 0)
        return MHD_YES;
    if (c->ntokens == REQCHECK_TOKENS_MAX) {
        c->overflow = true;
        return MHD_NO;
    }
    c->tokens[c->ntokens++] = value != NULL ? value : "";
    return MHD_YES;
}

bool reqcheck_collect(struct MHD_Connection *conn, struct reqcheck_collect *c)
{
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_arg, c);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_header, c);
    return !c->overflow;
}

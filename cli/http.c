/*
 * cli/http.c - lockctl's HTTP requests to lockd on libcurl: building a
 * request, collecting its answer, parsing it once; a blocking perform that
 * a watched fd (run's signalfd) can stop.
 */
#include "cli/http.h"

#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/clock.h"

#define MAX_ANSWER    (1 << 20) /* lockd's answers are small; refuse junk */
#define WATCH_POLL_MS 1000      /* curl's own timers want a turn this often */

static int watch_fd = -1; /* see http_watch_fd() */

int http_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void http_global_cleanup(void)
{
    curl_global_cleanup();
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct http_call *c = arg;
    size_t len = size * n;
    char *p;

    if (c->len + len + 1 > MAX_ANSWER)
        return 0; /* libcurl fails the transfer: CURLE_WRITE_ERROR */
    if (c->len + len + 1 > c->cap) {
        size_t cap = (c->len + len + 1) * 2;
        p = realloc(c->body, cap);
        if (p == NULL)
            return 0;
        c->body = p;
        c->cap = cap;
    }
    memcpy(c->body + c->len, data, len);
    c->len += len;
    c->body[c->len] = '\0';
    return len;
}

/* Retry-After: delta seconds (the only form lockd sends). */
static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct http_call *c = arg;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    long long secs = 0;
    size_t i = sizeof name - 1;

    if (len > i && strncasecmp(data, name, i) == 0) {
        while (i < len && (data[i] == ' ' || data[i] == '\t'))
            i++;
        for (; i < len && data[i] >= '0' && data[i] <= '9'; i++)
            if (secs < 100000)
                secs = secs * 10 + (data[i] - '0');
        c->retry_after_ms = secs * 1000;
    }
    return len;
}

/* Every socket libcurl opens: close-on-exec, so run's child gets none;
 * the call's connection from now on, for stop_sending(). */
static int on_socket(void *arg, curl_socket_t fd, curlsocktype purpose)
{
    struct http_call *c = arg;
    int flags = fcntl(fd, F_GETFD);

    (void)purpose;
    if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
        return CURL_SOCKOPT_ERROR;
    c->sock = fd;
    return CURL_SOCKOPT_OK;
}

/* Only while perform_watched() owns the connection: one in a caller's
 * multi handle may be closed after its call was freed. */
static int on_close(void *arg, curl_socket_t fd)
{
    struct http_call *c = arg;

    if (c->sock == fd)
        c->sock = CURL_SOCKET_BAD;
    return close(fd);
}

char *http_key_path(const char *key)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(key);
    char *out = malloc(sizeof "/locks/" + 3 * n);
    char *p = out;

    if (out == NULL)
        return NULL;
    memcpy(p, "/locks/", 7);
    p += 7;
    for (const unsigned char *s = (const unsigned char *)key; *s; s++) {
        unsigned char ch = *s;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
            (ch >= '0' && ch <= '9') || strchr("-._~/", ch) != NULL) {
            *p++ = (char)ch;
        } else {
            *p++ = '%';
            *p++ = hex[ch >> 4];
            *p++ = hex[ch & 15];
        }
    }
    *p = '\0';
    return out;
}

static int add_header(struct http_call *c, const char *name, const char *v)
{
    char line[1024];
    struct curl_slist *l;
    int n = snprintf(line, sizeof line, "%s: %s", name, v);

    if (n < 0 || (size_t)n >= sizeof line)
        return -1;
    l = curl_slist_append(c->headers, line);
    if (l == NULL)
        return -1;
    c->headers = l;
    return 0;
}

static int set_headers(struct http_call *c,
                       const struct http_conf *conf,
                       const char *token,
                       const char *idem_key)
{
    char bearer[4200];

    if (add_header(c, "Accept", "application/json") != 0 ||
        add_header(c, "Expect", "") != 0)
        return -1;
    if (c->req_body != NULL &&
        add_header(c, "Content-Type", "application/json") != 0)
        return -1;
    if (conf->auth_token != NULL) {
        int n = snprintf(bearer, sizeof bearer, "Bearer %s", conf->auth_token);
        if (n < 0 || (size_t)n >= sizeof bearer ||
            add_header(c, "Authorization", bearer) != 0)
            return -1;
    }
    if (token != NULL && add_header(c, "Lock-Token", token) != 0)
        return -1;
    if (idem_key != NULL && add_header(c, "Idempotency-Key", idem_key) != 0)
        return -1;
    return 0;
}

static int set_options(struct http_call *c, const char *method, int64_t tmo)
{
    CURL *e = c->easy;
    int bad = 0;

    bad |= curl_easy_setopt(e, CURLOPT_URL, c->url);
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(tmo > 0 ? tmo : 1));
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    bad |= curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_socket);
    bad |= curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, c);
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->err);
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, "lockctl/" LOCKD_VERSION);
    bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, c);
    if (c->req_body != NULL)
        bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->req_body);
    if (strcmp(method, "GET") == 0)
        bad |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    else if (strcmp(method, "POST") != 0 || c->req_body == NULL)
        bad |= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    return bad != 0 ? -1 : 0;
}

struct http_call *http_call_new(const struct http_conf *conf,
                                const char *method,
                                const char *path,
                                json_t *body,
                                const char *token,
                                const char *idem_key,
                                int64_t timeout_ms)
{
    struct http_call *c = calloc(1, sizeof *c);
    size_t n;

    if (c == NULL)
        return NULL;
    c->retry_after_ms = -1;
    c->sock = CURL_SOCKET_BAD;
    n = strlen(conf->url) + strlen(path) + 1;
    c->url = malloc(n);
    c->easy = curl_easy_init();
    if (c->url == NULL || c->easy == NULL)
        goto fail;
    snprintf(c->url, n, "%s%s", conf->url, path);
    if (body != NULL) {
        c->req_body = json_dumps(body, JSON_COMPACT);
        if (c->req_body == NULL)
            goto fail;
    }
    if (set_headers(c, conf, token, idem_key) != 0 ||
        set_options(c, method, timeout_ms) != 0)
        goto fail;
    return c;
fail:
    http_call_free(c);
    return NULL;
}

static void reset_answer(struct http_call *c)
{
    c->len = 0;
    if (c->body != NULL)
        c->body[0] = '\0';
    c->status = 0;
    c->retry_after_ms = -1;
    c->err[0] = '\0';
    json_decref(c->json);
    c->json = NULL;
}

void http_call_started(struct http_call *c)
{
    reset_answer(c);
    c->sent_ms = clock_mono_ms();
}

void http_call_finish(struct http_call *c, CURLcode cc)
{
    json_t *ra;
    long status = 0;

    c->cc = cc;
    if (cc != CURLE_OK) {
        if (c->err[0] == '\0')
            snprintf(c->err, sizeof c->err, "%s", curl_easy_strerror(cc));
        c->status = 0;
        return;
    }
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
    c->status = status;
    if (c->len > 0)
        c->json = json_loadb(c->body, c->len, 0, NULL);
    ra = json_object_get(json_object_get(c->json, "error"), "retry_after_ms");
    if (json_is_integer(ra) && json_integer_value(ra) >= 0)
        c->retry_after_ms = json_integer_value(ra);
}

void http_watch_fd(int fd)
{
    watch_fd = fd;
}

static bool readable(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };

    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

/* The watched fd fired while c is in flight: a request not yet connected
 * is dropped (true: stop now); one on a connection gets its write side
 * shut, so lockd sees its client leave (a waiter leaves the queue), while
 * its answer, which may be a grant, can still be read. A request cut
 * short by the shutdown is one lockd never answers. */
static bool stop_sending(struct http_call *c)
{
    return c->sock == CURL_SOCKET_BAD || shutdown(c->sock, SHUT_WR) != 0;
}

/* c on a multi handle of its own that also polls watch_fd. */
static CURLcode perform_watched(struct http_call *c)
{
    CURLM *m = curl_multi_init();
    CURLcode cc = CURLE_ABORTED_BY_CALLBACK;
    int64_t stop_at = -1, now; /* mono ms: give up the answer then */
    int running, left, ms;
    CURLMsg *msg;

    if (m == NULL)
        return CURLE_OUT_OF_MEMORY;
    if (readable(watch_fd))
        goto out; /* stopped before a byte went out */
    curl_easy_setopt(c->easy, CURLOPT_CLOSESOCKETFUNCTION, on_close);
    curl_easy_setopt(c->easy, CURLOPT_CLOSESOCKETDATA, c);
    if (curl_multi_add_handle(m, c->easy) != CURLM_OK) {
        cc = CURLE_OUT_OF_MEMORY;
        goto out;
    }
    for (;;) {
        struct curl_waitfd wfd = { .fd = watch_fd, .events = CURL_WAIT_POLLIN };
        if (curl_multi_perform(m, &running) != CURLM_OK)
            break;
        msg = curl_multi_info_read(m, &left);
        if (msg != NULL && msg->msg == CURLMSG_DONE) {
            cc = msg->data.result;
            break;
        }
        now = clock_mono_ms();
        if (stop_at < 0 && readable(watch_fd)) {
            if (stop_sending(c))
                break;
            stop_at = now + HTTP_STOP_GRACE_MS;
        }
        if (stop_at >= 0 && now >= stop_at)
            break;
        ms = stop_at < 0 ? WATCH_POLL_MS : (int)(stop_at - now);
        if (curl_multi_poll(m, &wfd, stop_at < 0 ? 1 : 0, ms, NULL) != CURLM_OK)
            break;
    }
    curl_multi_remove_handle(m, c->easy);
out:
    curl_multi_cleanup(m); /* closes c's connection: on_close() sees c */
    curl_easy_setopt(c->easy, CURLOPT_CLOSESOCKETFUNCTION, NULL);
    return cc;
}

long http_call_perform(struct http_call *c)
{
    http_call_started(c);
    if (watch_fd < 0) {
        http_call_finish(c, curl_easy_perform(c->easy));
        return c->status;
    }
    http_call_finish(c, perform_watched(c));
    if (c->cc == CURLE_ABORTED_BY_CALLBACK)
        c->retry_after_ms = HTTP_STOPPED_MS; /* a retry loop gives up */
    return c->status;
}

void http_call_free(struct http_call *c)
{
    if (c == NULL)
        return;
    curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->headers);
    free(c->req_body);
    free(c->url);
    free(c->body);
    json_decref(c->json);
    free(c);
}

const char *http_error_code(const struct http_call *c)
{
    json_t *code = json_object_get(json_object_get(c->json, "error"), "code");

    return json_string_value(code);
}

/*
 * tests/bench/ceiling.c - the HTTP ceiling for `make bench`: a minimal
 * libmicrohttpd server with lockd's daemon flags and options (internal
 * thread pool of nproc threads, epoll, turbo, suspend/resume allowed, the
 * same per-connection memory pool and backlog) that answers POST with a
 * fixed 201 grant body and DELETE with a fixed 200 body, doing no other
 * work. lockd on the memory backend is measured against it (issue 6).
 *
 * With -p it is issue 19's ceiling instead: the smallest libmicrohttpd +
 * jansson server that parses and answers the same requests. It does what
 * the synchronous Redis sketch (sketch.c) does without Redis: an acquire
 * collects its body, reads ttl_ms from it with jansson, takes a token and
 * a fence from counters and answers the key, token, fence and TTL; a
 * release reads the Lock-Token header and answers the key. No lock table,
 * no log, no checks beyond these.
 *
 *   ceiling [-p] PORT [THREADS]     (runs until SIGTERM or SIGINT)
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/bench/minhttp.h"

static const char grant_body[] =
    "{\"key\":\"bench-0-0\",\"token\":\"0123456789abcdef0123456789abcdef\","
    "\"fence\":1,\"ttl_ms\":30000,\"expires_at\":\"2026-11-21T12:00:30.123Z\"}";
static const char release_body[] = "{\"key\":\"bench-0-0\",\"released\":true}";
static const char other_body[] =
    "{\"error\":{\"code\":\"not_found\",\"message\":\"no such route\"}}";

static struct MHD_Response *grant_resp;   /* shared by every thread */
static struct MHD_Response *release_resp; /* shared by every thread */
static struct MHD_Response *other_resp;   /* shared by every thread */
static int req_marker;                    /* address marks "seen" */
static int parse;                         /* -p: parse and answer */
static _Atomic unsigned long counter;     /* -p: tokens and fences */

static struct MHD_Response *fixed(const char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, (void *)(uintptr_t)body, MHD_RESPMEM_PERSISTENT);

    if (r == NULL || MHD_add_response_header(r, "Content-Type",
                                             "application/json") != MHD_YES) {
        fprintf(stderr, "ceiling: cannot build a response\n");
        exit(1);
    }
    return r;
}

/* -p: the request in full (its body in rq) */
static enum MHD_Result parse_answer(struct MHD_Connection *conn,
                                    const char *url,
                                    const char *method,
                                    const struct req *rq)
{
    char out[800];
    const char *key = url + 7;

    if (strncmp(url, "/locks/", 7) != 0 || *key == '\0' || rq->too_big ||
        strlen(key) > 512)
        return answer(conn, 404, other_body);
    if (strcmp(method, "POST") == 0) {
        json_error_t jerr;
        json_t *j = json_loadb(rq->body, rq->len, 0, &jerr);
        json_int_t ttl = 30000;
        unsigned long n = ++counter;

        if (j != NULL && json_is_integer(json_object_get(j, "ttl_ms")))
            ttl = json_integer_value(json_object_get(j, "ttl_ms"));
        json_decref(j);
        snprintf(out, sizeof out,
                 "{\"key\":\"%s\",\"token\":\"%032lx\",\"fence\":%lu,"
                 "\"ttl_ms\":%lld}",
                 key, n, n, (long long)ttl);
        return answer(conn, 201, out);
    }
    if (strcmp(method, "DELETE") == 0) {
        if (MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Lock-Token") ==
            NULL)
            return answer(conn, 400, "{\"error\":{\"code\":\"no_token\"}}");
        snprintf(out, sizeof out, "{\"key\":\"%s\",\"released\":true}", key);
        return answer(conn, 200, out);
    }
    return answer(conn, 405, "{\"error\":{\"code\":\"method\"}}");
}

/* -p: collect the body, then parse_answer() */
static enum MHD_Result on_parse(struct MHD_Connection *conn,
                                const char *url,
                                const char *method,
                                const char *upload_data,
                                size_t *upload_size,
                                void **req_cls)
{
    enum MHD_Result ret;

    if (!req_collect(req_cls, upload_data, upload_size, &ret))
        return ret;
    return parse_answer(conn, url, method, *req_cls);
}

static enum MHD_Result on_request(void *cls,
                                  struct MHD_Connection *conn,
                                  const char *url,
                                  const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_size,
                                  void **req_cls)
{
    (void)cls;
    (void)version;
    if (parse)
        return on_parse(conn, url, method, upload_data, upload_size, req_cls);
    if (*req_cls == NULL) { /* headers only: wait for the body */
        *req_cls = &req_marker;
        return MHD_YES;
    }
    if (*upload_size != 0) { /* take the body, look at nothing */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "POST") == 0)
        return MHD_queue_response(conn, MHD_HTTP_CREATED, grant_resp);
    if (strcmp(method, "DELETE") == 0)
        return MHD_queue_response(conn, MHD_HTTP_OK, release_resp);
    return MHD_queue_response(conn, MHD_HTTP_NOT_FOUND, other_resp);
}

int main(int argc, char **argv)
{
    struct sockaddr_in addr;
    struct MHD_Daemon *d;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    long port;
    sigset_t set;
    int sig;

    if (argc > 1 && strcmp(argv[1], "-p") == 0) {
        parse = 1;
        argc--;
        argv++;
    }
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: ceiling [-p] PORT [THREADS]\n");
        return 2;
    }
    port = strtol(argv[1], NULL, 10);
    if (argc == 3)
        threads = strtol(argv[2], NULL, 10);
    if (port <= 0 || port > 65535 || threads < 1) {
        fprintf(stderr, "ceiling: bad port or thread count\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    /* blocked before the pool starts: only sigwait() below sees them */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    grant_resp = fixed(grant_body, sizeof grant_body - 1);
    release_resp = fixed(release_body, sizeof release_body - 1);
    other_resp = fixed(other_body, sizeof other_body - 1);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                             MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO,
                         (uint16_t)port, NULL, NULL, on_request, NULL,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)threads,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned int)60000,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)60,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384,
                         MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (size_t)1024,
                         MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024,
                         MHD_OPTION_NOTIFY_COMPLETED,
                         parse ? req_completed : NULL, NULL, MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "ceiling: cannot listen on 127.0.0.1:%ld\n", port);
        return 1;
    }
    fprintf(stderr, "ceiling: listening on 127.0.0.1:%ld, %ld threads%s\n",
            port, threads, parse ? ", parsing (-p)" : "");
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    MHD_destroy_response(grant_resp);
    MHD_destroy_response(release_resp);
    MHD_destroy_response(other_resp);
    return 0;
}

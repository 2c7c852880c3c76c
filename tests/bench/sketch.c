/*
 * tests/bench/sketch.c - the synchronous Redis sketch for `make bench`: the
 * ceiling's libmicrohttpd server (ceiling.c's daemon flags and options)
 * that serves POST /locks/KEY and DELETE /locks/KEY the simplest way a
 * lock service on Redis can: the request's own thread makes one blocking
 * hiredis round trip per request on its own connection, and answers. An
 * acquire reads ttl_ms from the JSON body (jansson) and runs one script
 * (SET NX PX, and INCR of the key's fence counter); a release runs
 * compare-and-delete with the Lock-Token header. No queue, no waiting, no
 * checks beyond these. lockd-redis is measured against it (issue 19:
 * lockd's pipelined store I/O against one round trip per request).
 *
 *   sketch PORT REDIS_PORT [THREADS]   (runs until SIGTERM or SIGINT)
 */
#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/bench/minhttp.h"

static const char acquire_lua[] =
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return redis.call('incr', KEYS[2]) else return 0 end";
static const char release_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

static int redis_port;
static char acquire_sha[41], release_sha[41]; /* SCRIPT LOAD'ed in main */
static pthread_key_t conn_key;       /* this thread's redisContext */
static _Atomic unsigned long tokens; /* a token counter */


static redisContext *thread_conn(void)
{
    redisContext *c = pthread_getspecific(conn_key);
    struct timeval tv = { 1, 0 };

    if (c != NULL && c->err == 0)
        return c;
    if (c != NULL)
        redisFree(c);
    c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
    if (c == NULL || c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK) {
        if (c != NULL)
            redisFree(c);
        c = NULL;
    }
    pthread_setspecific(conn_key, c);
    return c;
}

static enum MHD_Result do_acquire(struct MHD_Connection *conn,
                                  const char *key,
                                  const struct req *rq)
{
    json_error_t jerr;
    json_t *j = json_loadb(rq->body, rq->len, 0, &jerr);
    json_int_t ttl = 30000;
    char tok[40], ttls[24], lk[600], fk[600], out[800];
    redisContext *c = thread_conn();
    redisReply *r;

    if (j != NULL && json_is_integer(json_object_get(j, "ttl_ms")))
        ttl = json_integer_value(json_object_get(j, "ttl_ms"));
    json_decref(j);
    snprintf(tok, sizeof tok, "%032lx", (unsigned long)++tokens);
    snprintf(ttls, sizeof ttls, "%lld", (long long)ttl);
    snprintf(lk, sizeof lk, "sketch:lock:%s", key);
    snprintf(fk, sizeof fk, "sketch:fence:%s", key);
    if (c == NULL)
        return answer(conn, 503, "{\"error\":{\"code\":\"unavailable\"}}");
    r = redisCommand(c, "EVALSHA %s 2 %s %s %s %s", acquire_sha, lk, fk, tok,
                     ttls);
    if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return answer(conn, 503, "{\"error\":{\"code\":\"unavailable\"}}");
    }
    if (r->integer == 0) {
        freeReplyObject(r);
        return answer(conn, 409, "{\"error\":{\"code\":\"held\"}}");
    }
    snprintf(out, sizeof out,
             "{\"key\":\"%s\",\"token\":\"%s\",\"fence\":%lld,\"ttl_ms\":%lld}",
             key, tok, r->integer, (long long)ttl);
    freeReplyObject(r);
    return answer(conn, 201, out);
}

static enum MHD_Result do_release(struct MHD_Connection *conn, const char *key)
{
    const char *tok =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Lock-Token");
    char lk[600], out[700];
    redisContext *c = thread_conn();
    redisReply *r;

    if (tok == NULL)
        return answer(conn, 400, "{\"error\":{\"code\":\"no_token\"}}");
    if (c == NULL)
        return answer(conn, 503, "{\"error\":{\"code\":\"unavailable\"}}");
    snprintf(lk, sizeof lk, "sketch:lock:%s", key);
    r = redisCommand(c, "EVALSHA %s 1 %s %s", release_sha, lk, tok);
    if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return answer(conn, 503, "{\"error\":{\"code\":\"unavailable\"}}");
    }
    if (r->integer == 0) {
        freeReplyObject(r);
        return answer(conn, 409, "{\"error\":{\"code\":\"mismatch\"}}");
    }
    freeReplyObject(r);
    snprintf(out, sizeof out, "{\"key\":\"%s\",\"released\":true}", key);
    return answer(conn, 200, out);
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
    struct req *rq;
    enum MHD_Result ret;

    (void)cls;
    (void)version;
    if (!req_collect(req_cls, upload_data, upload_size, &ret))
        return ret;
    rq = *req_cls;
    if (strncmp(url, "/locks/", 7) != 0 || url[7] == '\0' || rq->too_big)
        return answer(conn, 404, "{\"error\":{\"code\":\"not_found\"}}");
    if (strcmp(method, "POST") == 0)
        return do_acquire(conn, url + 7, rq);
    if (strcmp(method, "DELETE") == 0)
        return do_release(conn, url + 7);
    return answer(conn, 405, "{\"error\":{\"code\":\"method\"}}");
}

static void drop_conn(void *c)
{
    redisFree(c);
}

/* SCRIPT LOAD both scripts (Redis keeps them until it restarts) */
static int load_scripts(void)
{
    redisContext *c = thread_conn();
    redisReply *a, *b;
    int ok;

    if (c == NULL)
        return -1;
    a = redisCommand(c, "SCRIPT LOAD %s", acquire_lua);
    b = redisCommand(c, "SCRIPT LOAD %s", release_lua);
    ok = a != NULL && b != NULL && a->type == REDIS_REPLY_STRING &&
         b->type == REDIS_REPLY_STRING && a->len == 40 && b->len == 40;
    if (ok) {
        memcpy(acquire_sha, a->str, 41);
        memcpy(release_sha, b->str, 41);
    }
    freeReplyObject(a);
    freeReplyObject(b);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct sockaddr_in addr;
    struct MHD_Daemon *d;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    long port;
    sigset_t set;
    int sig;

    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: sketch PORT REDIS_PORT [THREADS]\n");
        return 2;
    }
    port = strtol(argv[1], NULL, 10);
    redis_port = (int)strtol(argv[2], NULL, 10);
    if (argc == 4)
        threads = strtol(argv[3], NULL, 10);
    if (port <= 0 || port > 65535 || redis_port <= 0 || redis_port > 65535 ||
        threads < 1) {
        fprintf(stderr, "sketch: bad port or thread count\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (pthread_key_create(&conn_key, drop_conn) != 0)
        return 1;
    if (load_scripts() != 0) {
        fprintf(stderr, "sketch: cannot load the scripts into Redis on "
                        "127.0.0.1:%d\n",
                redis_port);
        return 1;
    }
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    /* blocked before the pool starts: only sigwait() below sees them */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
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
                         MHD_OPTION_NOTIFY_COMPLETED, req_completed, NULL,
                         MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "sketch: cannot listen on 127.0.0.1:%ld\n", port);
        return 1;
    }
    fprintf(stderr, "sketch: listening on 127.0.0.1:%ld, %ld threads, "
                    "Redis on 127.0.0.1:%d\n",
            port, threads, redis_port);
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    return 0;
}

/*
 * tests/fuzz/fuzz_reqcheck.c - service/reqcheck.c on what libmicrohttpd
 * makes of raw request bytes. reqcheck reads libmicrohttpd's in-place
 * parse of the header section, so no request can be built by hand: a
 * daemon without a listening socket, run from this thread (MHD_run), gets
 * one end of a socketpair per input, the input written into the other
 * end, which is then shut for writing. Its handler runs
 * reqcheck_target_has_nul() and reqcheck_headers() (--max-header-bytes
 * 16384, server.c's defaults and options) on the request's first call and
 * answers 200. Every loop is bounded; the connection is gone before the
 * next input.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "service/reqcheck.h"
#include "tests/fuzz/fuzz.h"

#define MAX_HEADER_BYTES 16384
#define MAX_ROUNDS       2000 /* MHD_run()s per input, each non-blocking */

static struct MHD_Daemon *daemon_;
static struct MHD_Response *empty;
static int marker; /* *req_cls once the request was checked */

static size_t unescape_none(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

static enum MHD_Result on_request(void *cls,
                                  struct MHD_Connection *conn,
                                  const char *url,
                                  const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size,
                                  void **req_cls)
{
    char msg[200];
    bool close_after = false;

    (void)cls;
    (void)upload_data;
    if (*req_cls != NULL) { /* the body: read and dropped */
        *upload_data_size = 0;
        return MHD_YES;
    }
    *req_cls = &marker;
    (void)reqcheck_target_has_nul(conn, url, version);
    (void)reqcheck_headers(conn, method, MAX_HEADER_BYTES, &close_after, msg,
                           sizeof(msg));
    if (memchr(msg, '\0', sizeof(msg)) == NULL && close_after)
        abort(); /* a message is always a C string */
    return MHD_queue_response(conn, MHD_HTTP_OK, empty);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    daemon_ = MHD_start_daemon(
        MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL, on_request, NULL,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)MAX_HEADER_BYTES * 2,
        MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (size_t)1024,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)5,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, NULL, MHD_OPTION_END);
    empty = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (daemon_ == NULL || empty == NULL)
        abort();
    return 0;
}

static unsigned connections(void)
{
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);

    return i != NULL ? i->num_connections : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_in peer = { .sin_family = AF_INET,
                                .sin_port = htons(40000) };
    char buf[4096];
    int sv[2];
    size_t off = 0;

    peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    if (fcntl(sv[0], F_SETFL, O_NONBLOCK) != 0)
        abort();
    if (MHD_add_connection(daemon_, sv[1], (struct sockaddr *)&peer,
                           sizeof(peer)) != MHD_YES)
        abort(); /* MHD closed sv[1] */
    /* feed it all (what does not fit waits for MHD to read), then EOF */
    for (unsigned round = 0; round < MAX_ROUNDS && off < size; round++) {
        ssize_t n = write(sv[0], data + off, size - off);
        if (n > 0)
            off += (size_t)n;
        MHD_run(daemon_);
        while (read(sv[0], buf, sizeof(buf)) > 0)
            ;
    }
    shutdown(sv[0], SHUT_WR);
    for (unsigned round = 0; round < MAX_ROUNDS; round++) {
        ssize_t n;
        MHD_run(daemon_);
        while ((n = read(sv[0], buf, sizeof(buf))) > 0)
            ;
        if (n == 0)
            break; /* MHD answered and closed, or just closed */
    }
    close(sv[0]);
    for (unsigned round = 0; round < MAX_ROUNDS && connections() > 0; round++)
        MHD_run(daemon_);
    if (connections() > 0)
        abort(); /* a connection left behind: the next inputs would pile up */
    return 0;
}

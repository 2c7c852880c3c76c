/*
 * tests/unit/test_tls.c - service/tls.c without a server: the priority
 * string parses and allows TLS 1.2 and 1.3 only; the set's files are
 * refused with messages that name the file (missing, not PEM, a key file
 * as the certificate); the client-certificate fields stay off without
 * --tls-client-ca. Handshakes, reloads and verification run against a
 * real lockd in tests/e2e/test_tls.py.
 */
#include "service/tls.h"

#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"

static void test_priorities_parse_tls12_and_13_only(void)
{
    gnutls_priority_t p = NULL;
    const char *where = NULL;
    const unsigned *protos = NULL;
    int n;
    bool v12 = false, v13 = false, other = false;

    CHECK_EQ_INT(gnutls_priority_init(&p, TLS_PRIORITIES, &where), 0);
    if (p == NULL)
        return;
    n = gnutls_priority_protocol_list(p, &protos);
    CHECK(n > 0);
    for (int i = 0; i < n; i++) {
        if (protos[i] == GNUTLS_TLS1_2)
            v12 = true;
        else if (protos[i] == GNUTLS_TLS1_3)
            v13 = true;
        else
            other = true;
    }
    CHECK(v12 && v13 && !other);
    gnutls_priority_deinit(p);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    CHECK(f != NULL);
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_bad_files_are_named(void)
{
    char dir[] = "/tmp/lockd-tls-" MKTEMP_SUFFIX, junk[128], missing[128];
    char err[512];
    struct tls *t;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(junk, sizeof(junk), "%s/junk.pem", dir);
    snprintf(missing, sizeof(missing), "%s/missing.pem", dir);
    write_file(junk, "not PEM at all\n");

    t = tls_new(missing, junk, NULL, err, sizeof(err));
    CHECK(t == NULL);
    CHECK_CONTAINS(err, missing);
    CHECK_CONTAINS(err, "No such file");

    t = tls_new(junk, junk, NULL, err, sizeof(err));
    CHECK(t == NULL);
    CHECK_CONTAINS(err, junk);
    CHECK_CONTAINS(err, "no PEM certificate chain");

    t = tls_new(dir, junk, NULL, err, sizeof(err));
    CHECK(t == NULL);
    CHECK_CONTAINS(err, "not a regular file");
    tls_free(NULL);

    unlink(junk);
    rmdir(dir);
}

static void test_no_client_ca_means_tls_off(void)
{
    struct api_request rq = { .tls_peer = API_TLS_BAD_CERT };

    CHECK(!tls_client_ca(NULL));
    tls_request_peer(NULL, NULL, &rq);
    CHECK_EQ_INT(rq.tls_peer, API_TLS_OFF);
    CHECK(rq.tls_names == NULL && rq.ntls_names == 0);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_priorities_parse_tls12_and_13_only),
    CHECK_CASE(test_bad_files_are_named),
    CHECK_CASE(test_no_client_ca_means_tls_off),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

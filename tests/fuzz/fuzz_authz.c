/*
 * tests/fuzz/fuzz_authz.c - libFuzzer target for the --auth-file parser
 * (api/authz.c, authz_parse()): any bytes must parse into a policy or a
 * refusal, never crash or leak. Both with and without --tls-client-ca.
 */
#include <stddef.h>
#include <stdint.h>

#include "api/authz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    struct authz_policy *p;

    p = authz_parse((const char *)data, size, size % 2 == 0, err, sizeof(err));
    authz_policy_unref(p);
    return 0;
}

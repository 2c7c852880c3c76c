/*
 * tests/fuzz/fuzz_config.c - lockd's command line: config_load() on an
 * argv made of the input split at its NUL bytes (argv[0] "lockd", at most
 * 32 arguments), with no LOCKD_* variable set; on success
 * config_size_threads() as main() runs it, and the arguments through
 * config_env_unknown() and config_warn_unknown_env() as if they were the
 * environment. config_load() never exits the process: --help and
 * --version return CONFIG_EXIT. An input naming a path under /dev, /proc,
 * /sys or /run is skipped, so the file flags never open a device.
 * stdout (the --help text) goes to /dev/null; the messages on stderr are
 * closed by `make fuzz` (-close_fd_mask=3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/config.h"
#include "tests/fuzz/fuzz.h"

#define MAX_ARGS 32

extern char **environ;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* the environment would be read before the flags: leave the flags */
    for (size_t i = 0; environ[i] != NULL;) {
        char name[256];
        size_t n = strcspn(environ[i], "=");
        if (strncmp(environ[i], "LOCKD_", 6) == 0 && n < sizeof(name)) {
            memcpy(name, environ[i], n);
            name[n] = '\0';
            unsetenv(name);
            continue; /* environ[i] is the next one now */
        }
        i++;
    }
    if (freopen("/dev/null", "w", stdout) == NULL)
        abort();
    return 0;
}

static void warn_none(const char *line)
{
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *args[MAX_ARGS + 1], *env[MAX_ARGS + 1];
    char *copy;
    struct config c;
    int argc = 1;
    char suggest[64], msg[256];

    if (fuzz_names_device((const char *)data, size))
        return 0;
    copy = malloc(size + 1);
    if (copy == NULL)
        abort();
    memcpy(copy, data, size);
    copy[size] = '\0';
    args[0] = "lockd";
    for (size_t at = 0; at <= size && argc < MAX_ARGS;) {
        args[argc++] = copy + at;
        at += strlen(copy + at) + 1;
    }
    if (size == 0)
        argc = 1;
    args[argc] = NULL;
    if (config_load(&c, argc, args) == CONFIG_OK && !c.check_health) {
        char scheme[32];
        const char *sep = strstr(c.backend, "://");
        snprintf(scheme, sizeof(scheme), "%.*s",
                 sep != NULL ? (int)(sep - c.backend) : 0, c.backend);
        config_size_threads(&c, scheme, 2, "2 usable CPUs", msg, sizeof(msg));
    }
    config_cleanup(&c);
    for (int i = 1; i < argc; i++) {
        env[i - 1] = args[i];
        config_env_unknown(args[i], suggest, sizeof(suggest));
    }
    env[argc - 1] = NULL;
    config_warn_unknown_env(env, warn_none);
    free(copy);
    return 0;
}

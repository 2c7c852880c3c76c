/*
 * cli/lockctl.c - lockctl, the command-line client of lockd: parse the
 * command line, then hand over to the one-shot commands (cli/cmds.c) or to
 * run's loop (cli/run.c). See docs/lockctl.md.
 */
#include <stdio.h>

#include "cli/cmds.h"
#include "cli/http.h"
#include "cli/opts.h"
#include "cli/run.h"

int main(int argc, char **argv)
{
    struct opts o;
    struct http_conf conf;
    int rc = opts_parse(&o, argc, argv);

    if (rc >= 0) {
        opts_cleanup(&o);
        return rc;
    }
    if (http_global_init() != 0) {
        fputs("lockctl: cannot start libcurl\n", stderr);
        opts_cleanup(&o);
        return o.cmd == CMD_RUN ? EXIT_INTERNAL : EXIT_UNAVAILABLE;
    }
    conf.url = o.url;
    conf.auth_token = o.auth_token;
    rc = o.cmd == CMD_RUN ? run_main(&o, &conf) : cmds_main(&o, &conf);
    http_global_cleanup();
    opts_cleanup(&o);
    return rc;
}

/*
 * lib/cpus.c - the CPUs this process may use: affinity capped by the
 * cgroup CPU quota (see cpus.h).
 */
#include "lib/cpus.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CPUS_PATH_MAX 1024
#define CPUS_DEPTH    32 /* ancestors looked at, at most */

unsigned cpus_affinity(void)
{
    cpu_set_t set;
    long n;

    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* A decimal integer (optional leading '-', then digits) ending at
 * whitespace or NUL: 0 and *out, else -1. *end past it. */
static int parse_int(const char *s, long long *out, const char **end)
{
    char *e;

    while (*s == ' ' || *s == '\t')
        s++;
    if (*s != '-' && (*s < '0' || *s > '9'))
        return -1;
    errno = 0;
    *out = strtoll(s, &e, 10);
    if (errno != 0 || e == s || (*e != '\0' && *e != ' ' && *e != '\n'))
        return -1;
    *end = e;
    return 0;
}

static bool only_space(const char *s)
{
    for (; *s != '\0'; s++)
        if (*s != ' ' && *s != '\n' && *s != '\t')
            return false;
    return true;
}

int cpus_parse_v2_max(const char *text, double *cpus)
{
    long long quota = 0, period = 0;
    const char *p = text;
    bool unlimited = false;

    while (*p == ' ')
        p++;
    if (strncmp(p, "max", 3) == 0 &&
        (p[3] == ' ' || p[3] == '\n' || p[3] == '\0')) {
        unlimited = true;
        p += 3;
    } else if (parse_int(p, &quota, &p) != 0 || quota <= 0) {
        return -1;
    }
    if (only_space(p)) /* "max" alone: the period is optional */
        return unlimited ? 0 : -1;
    if (parse_int(p, &period, &p) != 0 || period <= 0 || !only_space(p))
        return -1;
    if (unlimited)
        return 0;
    *cpus = (double)quota / (double)period;
    return 1;
}

int cpus_parse_v1(const char *quota, const char *period, double *cpus)
{
    long long q, per;
    const char *end;

    if (parse_int(quota, &q, &end) != 0 || !only_space(end) ||
        parse_int(period, &per, &end) != 0 || !only_space(end) || per <= 0)
        return -1;
    if (q < 0) /* -1: no quota */
        return 0;
    if (q == 0)
        return -1;
    *cpus = (double)q / (double)per;
    return 1;
}

/* Is controller one of the comma-separated names in list[0..n)? */
static bool lists_controller(const char *list, size_t n, const char *want)
{
    size_t wl = strlen(want);
    const char *p = list, *stop = list + n;

    while (p < stop) {
        const char *comma = memchr(p, ',', (size_t)(stop - p));
        const char *e = comma != NULL ? comma : stop;
        if ((size_t)(e - p) == wl && memcmp(p, want, wl) == 0)
            return true;
        p = e + 1;
    }
    return false;
}

int cpus_cgroup_path(const char *proc_cgroup,
                     const char *controller,
                     char *out,
                     size_t outlen,
                     char *ctrls,
                     size_t ctrlslen)
{
    const char *line = proc_cgroup;

    while (line != NULL && *line != '\0') {
        const char *nl = strchr(line, '\n');
        const char *end = nl != NULL ? nl : line + strlen(line);
        const char *c1 = memchr(line, ':', (size_t)(end - line));
        const char *c2 =
            c1 != NULL ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
        if (c2 != NULL) {
            size_t clen = (size_t)(c2 - c1 - 1);
            bool hit = controller == NULL
                           ? clen == 0 && c1 - line == 1 && *line == '0'
                           : lists_controller(c1 + 1, clen, controller);
            size_t plen = (size_t)(end - c2 - 1);
            if (hit) {
                if (plen == 0 || plen >= outlen ||
                    (ctrls != NULL && clen >= ctrlslen))
                    return -1;
                memcpy(out, c2 + 1, plen);
                out[plen] = '\0';
                if (ctrls != NULL) {
                    memcpy(ctrls, c1 + 1, clen);
                    ctrls[clen] = '\0';
                }
                return 0;
            }
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    return -1;
}

/* dir/name's first bytes into buf (NUL-terminated): 0, or -1. */
static int read_small(const char *dir, const char *name, char *buf, size_t cap)
{
    char path[CPUS_PATH_MAX + 64];
    ssize_t n;
    int fd, len = snprintf(path, sizeof(path), "%s/%s", dir, name);

    if (len < 0 || (size_t)len >= sizeof(path))
        return -1;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* The quota of the one cgroup directory dir: 1, 0 (none) or -1 (none
 * readable). */
static int dir_quota(const char *dir, bool v2, double *cpus)
{
    char a[128], b[128];

    if (v2)
        return read_small(dir, "cpu.max", a, sizeof(a)) == 0
                   ? cpus_parse_v2_max(a, cpus)
                   : -1;
    if (read_small(dir, "cpu.cfs_quota_us", a, sizeof(a)) != 0 ||
        read_small(dir, "cpu.cfs_period_us", b, sizeof(b)) != 0)
        return -1;
    return cpus_parse_v1(a, b, cpus);
}

static bool is_dir(const char *path)
{
    return access(path, X_OK) == 0;
}

/* The smallest quota of base+path and its ancestors up to base; base alone
 * when base+path is not there (a cgroup namespace shows its own cgroup at
 * the mount point). */
static int walk_quota(const char *base, const char *path, bool v2, double *cpus)
{
    char dir[CPUS_PATH_MAX];
    int len = snprintf(dir, sizeof(dir), "%s%s", base, path), found = 0;
    size_t stop = strlen(base);
    double q;

    if (len < 0 || (size_t)len >= sizeof(dir))
        return 0;
    while (len > 0 && dir[len - 1] == '/' && (size_t)len > stop)
        dir[--len] = '\0';
    if (!is_dir(dir))
        dir[stop] = '\0';
    for (int depth = 0; depth < CPUS_DEPTH; depth++) {
        if (dir_quota(dir, v2, &q) == 1 && (found == 0 || q < *cpus)) {
            *cpus = q;
            found = 1;
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= stop || slash == NULL ||
            (size_t)(slash - dir) < stop)
            break;
        *slash = '\0';
    }
    return found;
}

int cpus_quota(const char *root, const char *proc_cgroup, double *cpus)
{
    char path[CPUS_PATH_MAX / 2], ctrls[128], base[CPUS_PATH_MAX / 2];
    int len;

    if (cpus_cgroup_path(proc_cgroup, NULL, path, sizeof(path), NULL, 0) == 0) {
        char probe[CPUS_PATH_MAX];
        len = snprintf(probe, sizeof(probe), "%s/cgroup.controllers", root);
        /* v2 when the unified hierarchy is mounted at root; a hybrid host
         * mounts it elsewhere and has v1's cpu controller under root */
        if (len > 0 && (size_t)len < sizeof(probe) && access(probe, R_OK) == 0)
            return walk_quota(root, path, true, cpus);
    }
    if (cpus_cgroup_path(proc_cgroup, "cpu", path, sizeof(path), ctrls,
                         sizeof(ctrls)) != 0)
        return 0;
    len = snprintf(base, sizeof(base), "%s/%s", root, ctrls);
    if (len > 0 && (size_t)len < sizeof(base) && is_dir(base))
        return walk_quota(base, path, false, cpus);
    len = snprintf(base, sizeof(base), "%s/cpu", root);
    if (len > 0 && (size_t)len < sizeof(base) && is_dir(base))
        return walk_quota(base, path, false, cpus);
    return 0;
}

unsigned cpus_usable(const char *root,
                     const char *proc_cgroup_file,
                     char *why,
                     size_t whylen)
{
    char text[4096];
    unsigned n = cpus_affinity();
    double q = 0;
    int fd = open(proc_cgroup_file, O_RDONLY | O_CLOEXEC);
    ssize_t len = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;

    if (fd >= 0)
        close(fd);
    text[len > 0 ? len : 0] = '\0';
    if (len > 0 && cpus_quota(root, text, &q) == 1 && ceil(q) < n) {
        n = ceil(q) < 1 ? 1 : (unsigned)ceil(q);
        snprintf(why, whylen, "%u usable CPU%s (cgroup quota %.1f)", n,
                 n == 1 ? "" : "s", q);
        return n;
    }
    snprintf(why, whylen, "%u usable CPU%s (affinity)", n, n == 1 ? "" : "s");
    return n;
}

/*
 * tests/unit/test_cpus.c - lib/cpus.c: cgroup v2 cpu.max and v1
 * cfs_quota/period parsing, the cgroup path in /proc/self/cgroup, the
 * quota found under a root directory (v2 with ancestors, a namespaced
 * mount, v1, none), and the usable count with its reason.
 */
#include "lib/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/check.h"

static char root[64];

/* Make root/rel (and its parents) and write text to root/rel/name. */
static void put(const char *rel, const char *name, const char *text)
{
    char path[512], cmd[600];
    FILE *f;

    snprintf(cmd, sizeof(cmd), "mkdir -p '%s/%s'", root, rel);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof(path), "%s/%s/%s", root, rel, name);
    f = fopen(path, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static void fresh_root(void)
{
    char cmd[128];

    if (root[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        CHECK(system(cmd) == 0);
    }
    snprintf(root, sizeof(root), "/tmp/lockd-cpus-" MKTEMP_SUFFIX);
    CHECK(mkdtemp(root) != NULL);
}

static void test_cpus_parses_v2_cpu_max(void)
{
    double q = 0;

    CHECK_EQ_INT(cpus_parse_v2_max("max 100000\n", &q), 0);
    CHECK_EQ_INT(cpus_parse_v2_max("max\n", &q), 0);
    CHECK_EQ_INT(cpus_parse_v2_max("50000 100000\n", &q), 1);
    CHECK(q == 0.5);
    CHECK_EQ_INT(cpus_parse_v2_max("150000 100000", &q), 1);
    CHECK(q == 1.5);
    CHECK_EQ_INT(cpus_parse_v2_max("400000 100000\n", &q), 1);
    CHECK(q == 4.0);
    CHECK_EQ_INT(cpus_parse_v2_max("", &q), -1);
    CHECK_EQ_INT(cpus_parse_v2_max("lots 100000", &q), -1);
    CHECK_EQ_INT(cpus_parse_v2_max("0 100000", &q), -1);
    CHECK_EQ_INT(cpus_parse_v2_max("50000 0", &q), -1);
    CHECK_EQ_INT(cpus_parse_v2_max("50000", &q), -1);
    CHECK_EQ_INT(cpus_parse_v2_max("50000 100000 7", &q), -1);
    CHECK_EQ_INT(cpus_parse_v2_max("maximal 100000", &q), -1);
}

static void test_cpus_parses_v1_quota(void)
{
    double q = 0;

    CHECK_EQ_INT(cpus_parse_v1("-1\n", "100000\n", &q), 0);
    CHECK_EQ_INT(cpus_parse_v1("50000\n", "100000\n", &q), 1);
    CHECK(q == 0.5);
    CHECK_EQ_INT(cpus_parse_v1("250000", "100000", &q), 1);
    CHECK(q == 2.5);
    CHECK_EQ_INT(cpus_parse_v1("x", "100000", &q), -1);
    CHECK_EQ_INT(cpus_parse_v1("50000", "0", &q), -1);
    CHECK_EQ_INT(cpus_parse_v1("50000", "", &q), -1);
    CHECK_EQ_INT(cpus_parse_v1("0", "100000", &q), -1);
}

static void test_cpus_finds_cgroup_path(void)
{
    const char *v2 = "0::/kubepods.slice/pod1/cri-abc.scope\n";
    const char *v1 = "12:cpuset:/docker/x\n"
                     "4:cpu,cpuacct:/docker/abc\n"
                     "1:name=systemd:/docker/abc\n";
    const char *hybrid = "1:name=systemd:/a\n0::/user.slice\n";
    char path[128], ctrls[64];

    CHECK_EQ_INT(cpus_cgroup_path(v2, NULL, path, sizeof(path), NULL, 0), 0);
    CHECK_STR_EQ(path, "/kubepods.slice/pod1/cri-abc.scope");
    CHECK_EQ_INT(
        cpus_cgroup_path(v2, "cpu", path, sizeof(path), ctrls, sizeof(ctrls)),
        -1);
    CHECK_EQ_INT(cpus_cgroup_path(v1, NULL, path, sizeof(path), NULL, 0), -1);
    CHECK_EQ_INT(
        cpus_cgroup_path(v1, "cpu", path, sizeof(path), ctrls, sizeof(ctrls)),
        0);
    CHECK_STR_EQ(path, "/docker/abc");
    CHECK_STR_EQ(ctrls, "cpu,cpuacct");
    /* cpuset is not cpu */
    CHECK_EQ_INT(cpus_cgroup_path("3:cpuset:/a\n", "cpu", path, sizeof(path),
                                  ctrls, sizeof(ctrls)),
                 -1);
    CHECK_EQ_INT(cpus_cgroup_path(hybrid, NULL, path, sizeof(path), NULL, 0),
                 0);
    CHECK_STR_EQ(path, "/user.slice");
    CHECK_EQ_INT(cpus_cgroup_path("", NULL, path, sizeof(path), NULL, 0), -1);
    CHECK_EQ_INT(cpus_cgroup_path("garbage", NULL, path, sizeof(path), NULL, 0),
                 -1);
    CHECK_EQ_INT(cpus_cgroup_path(v2, NULL, path, 8, NULL, 0), -1);
}

static void test_cpus_quota_v2_takes_smallest_ancestor(void)
{
    double q = 0;

    fresh_root();
    put(".", "cgroup.controllers", "cpu io memory\n");
    put("kube/pod", "cpu.max", "max 100000\n");
    put("kube", "cpu.max", "200000 100000\n");
    CHECK_EQ_INT(cpus_quota(root, "0::/kube/pod\n", &q), 1);
    CHECK(q == 2.0);
    put("kube/pod", "cpu.max", "50000 100000\n");
    CHECK_EQ_INT(cpus_quota(root, "0::/kube/pod\n", &q), 1);
    CHECK(q == 0.5);
    put("kube/pod", "cpu.max", "max 100000\n");
    put("kube", "cpu.max", "max 100000\n");
    CHECK_EQ_INT(cpus_quota(root, "0::/kube/pod\n", &q), 0);
}

static void test_cpus_quota_v2_namespaced_mount(void)
{
    double q = 0;

    /* a container's cgroup namespace: its cgroup is the mount's root,
     * and /proc/self/cgroup may name a path not under it */
    fresh_root();
    put(".", "cgroup.controllers", "cpu\n");
    put(".", "cpu.max", "100000 100000\n");
    CHECK_EQ_INT(cpus_quota(root, "0::/\n", &q), 1);
    CHECK(q == 1.0);
    CHECK_EQ_INT(cpus_quota(root, "0::/docker/elsewhere\n", &q), 1);
    CHECK(q == 1.0);
}

static void test_cpus_quota_v1_and_missing(void)
{
    double q = 0;
    const char *v1 = "4:cpu,cpuacct:/docker/abc\n";

    fresh_root();
    put("cpu,cpuacct/docker/abc", "cpu.cfs_quota_us", "150000\n");
    put("cpu,cpuacct/docker/abc", "cpu.cfs_period_us", "100000\n");
    CHECK_EQ_INT(cpus_quota(root, v1, &q), 1);
    CHECK(q == 1.5);
    put("cpu,cpuacct/docker/abc", "cpu.cfs_quota_us", "-1\n");
    CHECK_EQ_INT(cpus_quota(root, v1, &q), 0);
    /* nothing mounted: no quota */
    fresh_root();
    CHECK_EQ_INT(cpus_quota(root, v1, &q), 0);
    CHECK_EQ_INT(cpus_quota(root, "0::/a\n", &q), 0);
    CHECK_EQ_INT(cpus_quota(root, "", &q), 0);
}

static void test_cpus_usable_caps_affinity_by_quota(void)
{
    char why[128], proc[160];
    unsigned aff = cpus_affinity();
    cpu_set_t set;

    CPU_ZERO(&set);
    CHECK(sched_getaffinity(0, sizeof(set), &set) == 0);
    CHECK_EQ_INT(aff, CPU_COUNT(&set));
    fresh_root();
    put(".", "cgroup.controllers", "cpu\n");
    put("svc", "cpu.max", "50000 100000\n");
    put("proc", "cgroup", "0::/svc\n");
    snprintf(proc, sizeof(proc), "%s/proc/cgroup", root);
    CHECK_EQ_INT(cpus_usable(root, proc, why, sizeof(why)), 1);
    CHECK_STR_EQ(why, "1 usable CPU (cgroup quota 0.5)");
    put("svc", "cpu.max", "max 100000\n");
    CHECK_EQ_INT(cpus_usable(root, proc, why, sizeof(why)), aff);
    CHECK_CONTAINS(why, "(affinity)");
    /* a quota above the affinity does not raise it */
    put("svc", "cpu.max", "100000000 100000\n");
    CHECK_EQ_INT(cpus_usable(root, proc, why, sizeof(why)), aff);
    if (aff >= 3) { /* 1.2 CPUs round up to 2 */
        put("svc", "cpu.max", "120000 100000\n");
        CHECK_EQ_INT(cpus_usable(root, proc, why, sizeof(why)), 2);
        CHECK_STR_EQ(why, "2 usable CPUs (cgroup quota 1.2)");
    }
    put("svc", "cpu.max", "100000 100000\n"); /* exactly 1.0: 1 */
    CHECK_EQ_INT(cpus_usable(root, proc, why, sizeof(why)), 1);
    if (aff > 1)
        CHECK_STR_EQ(why, "1 usable CPU (cgroup quota 1.0)");
    CHECK_EQ_INT(cpus_usable(root, "/nonexistent/cgroup", why, sizeof(why)),
                 aff);
}

static void test_cpus_cleanup(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (root[0] != '\0')
        CHECK(system(cmd) == 0);
    root[0] = '\0';
}

static const struct check_case cases[] = {
    CHECK_CASE(test_cpus_parses_v2_cpu_max),
    CHECK_CASE(test_cpus_parses_v1_quota),
    CHECK_CASE(test_cpus_finds_cgroup_path),
    CHECK_CASE(test_cpus_quota_v2_takes_smallest_ancestor),
    CHECK_CASE(test_cpus_quota_v2_namespaced_mount),
    CHECK_CASE(test_cpus_quota_v1_and_missing),
    CHECK_CASE(test_cpus_usable_caps_affinity_by_quota),
    CHECK_CASE(test_cpus_cleanup),
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(cases);
}

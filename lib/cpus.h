/*
 * lib/cpus.h - how many CPUs this process may use: the scheduler affinity
 * mask, capped by the CPU quota of its cgroup (v2 cpu.max, or v1
 * cpu.cfs_quota_us / cpu.cfs_period_us), for sizing thread pools in
 * containers. The parsers take file contents or a root directory, so tests
 * feed them any case without a cgroup of their own.
 */
#ifndef LIB_CPUS_H
#define LIB_CPUS_H

#include <stddef.h>

/* The CPUs in this thread's affinity mask (sched_getaffinity), or the
 * online CPUs if it cannot tell; at least 1. */
unsigned cpus_affinity(void);

/* A cgroup v2 cpu.max ("QUOTA PERIOD" or "max PERIOD"): 1 and *cpus =
 * QUOTA / PERIOD; 0 for "max" (no quota); -1 when text is not one. */
int cpus_parse_v2_max(const char *text, double *cpus);
/* cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us contents: 1 and *cpus,
 * 0 for no quota (-1), -1 when either is not a number. */
int cpus_parse_v1(const char *quota, const char *period, double *cpus);

/* In proc_cgroup (the text of /proc/self/cgroup), the path of the v2
 * hierarchy ("0::/path", controller NULL) or of the v1 hierarchy that
 * lists controller ("4:cpu,cpuacct:/path"): 0 and the path in out, also
 * the v1 line's controller list in ctrls when not NULL; -1 if absent or too
 * long. */
int cpus_cgroup_path(const char *proc_cgroup,
                     const char *controller,
                     char *out,
                     size_t outlen,
                     char *ctrls,
                     size_t ctrlslen);

/* The CPU quota that applies under root (normally "/sys/fs/cgroup") for a
 * process whose /proc/self/cgroup reads proc_cgroup: the smallest of its
 * cgroup's and its ancestors' (v2), or of its v1 cpu cgroup; the cgroup
 * mounted at root itself (a container's namespace) when the path is not
 * found under root. 1 and *cpus, 0 when no quota applies or nothing can be
 * read. */
int cpus_quota(const char *root, const char *proc_cgroup, double *cpus);

/*
 * The CPUs lockd may use: min(affinity, ceil(quota)), at least 1, read
 * from root ("/sys/fs/cgroup") and proc_cgroup_file ("/proc/self/cgroup").
 * why (whylen bytes) gets a short reason, e.g. "1 usable CPU (cgroup quota
 * 0.5)" or "8 usable CPUs (affinity)".
 */
unsigned cpus_usable(const char *root,
                     const char *proc_cgroup_file,
                     char *why,
                     size_t whylen);

#endif /* LIB_CPUS_H */

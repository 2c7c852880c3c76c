#!/bin/sh
# examples/cron/nightly-report.sh - run a nightly job on at most one machine
# at a time, however many machines have it in their crontab.
#
#   LOCKD_URL=http://lockd.internal:8080 nightly-report.sh CMD [ARGS...]
#
# Every machine's cron starts this at the same minute; lockctl takes the
# lock "nightly-report" without waiting (--wait 0). The machine that gets it
# runs CMD and keeps the lock alive (renewed every 10 s of its 30 s TTL) for
# as long as CMD runs, however long that is; if it crashes, the lock is free
# 30 s later. Every other machine finds the lock held, logs "already
# running" and exits 0: for them there is nothing to do, and cron should not
# mail anybody about it.
#
# Exit status: 0 when CMD ran and succeeded, or when another machine has the
# lock; CMD's own status when it failed (2 when CMD said 1, which is
# lockctl's "held elsewhere"); 75 when the lock was lost while CMD ran
# (lockctl stopped CMD); lockctl's codes otherwise (3: lockd unreachable).
# Environment: LOCKD_URL (required), LOCKCTL (default: lockctl from PATH).

set -u

log() {
    printf '%s nightly-report[%s]: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" "$*" >&2
}

# Second stage: lockctl runs this script again under the lock, with
# LOCKD_FENCE and LOCKD_TOKEN in the environment.
if [ "${1-}" = --locked ]; then
    shift
    log "got the lock (fence ${LOCKD_FENCE-?}): running $*"
    "$@"
    status=$?
    # 1 would read as "another machine has it" to the first stage below.
    if [ "$status" -eq 1 ]; then
        status=2
    fi
    exit "$status"
fi

if [ "$#" -eq 0 ]; then
    echo "usage: LOCKD_URL=http://HOST:PORT $0 CMD [ARGS...]" >&2
    exit 2
fi
if [ -z "${LOCKD_URL-}" ]; then
    echo "$0: set LOCKD_URL to lockd's address, e.g. http://lockd.internal:8080" >&2
    exit 2
fi
export LOCKD_URL

# lockctl execs the second stage, so it needs this script's full path.
here=$(cd "$(dirname "$0")" && pwd) || exit 2
self=$here/$(basename "$0")

status=0
"${LOCKCTL:-lockctl}" run --ttl 30s --wait 0 --owner "$(hostname)" \
    nightly-report -- "$self" --locked "$@" || status=$?

case $status in
0)
    log "done"
    ;;
1)
    log "already running on another machine: nothing to do"
    exit 0
    ;;
75)
    log "lost the lock while running (lockd unreachable or the lock expired): the job was stopped"
    ;;
*)
    log "failed with exit status $status"
    ;;
esac
exit "$status"

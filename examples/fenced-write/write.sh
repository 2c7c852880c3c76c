#!/bin/sh
# examples/fenced-write/write.sh - write one row of `documents` (schema.sql)
# under the lock "documents/ID", and let the database refuse the write if a
# newer lock holder has written the row since (see README.md).
#
#   write.sh ID TEXT                  take the lock, write, release
#   LOCKD_FENCE=N write.sh --under-lock ID TEXT
#                                     write with a fence you already hold
#                                     (what lockctl run calls below)
#
# The UPDATE carries the fence: it changes the row only if the row's fence
# is below ours, and ROW_COUNT() says whether it did. 0 rows means a holder
# with a newer fence wrote first: our lock expired while we were away
# (paused, swapped out, cut off), so we stop, loudly, and write nothing.
#
# Exit status: 0 written; 10 refused: a newer holder wrote the row; 11 no
# row ID; 12 the database failed; 2 usage; and lockctl's codes (1: the
# lock stayed held for the whole --wait; 3: lockd unreachable; 75: the
# lock was lost while writing).
# Environment: LOCKD_URL (lockctl's, default http://127.0.0.1:8080);
# DB (database, default app); MYSQL_CNF (an option file with host, user,
# password or socket, given as --defaults-extra-file); MYSQL (client,
# default mysql); LOCKCTL (default lockctl).

set -u

usage() {
    echo "usage: $0 ID TEXT   |   LOCKD_FENCE=N $0 --under-lock ID TEXT" >&2
    exit 2
}

is_number() {
    case $1 in
    '' | *[!0-9]*) return 1 ;;
    *) return 0 ;;
    esac
}

sql() {
    if [ -n "${MYSQL_CNF-}" ]; then
        "${MYSQL:-mysql}" --defaults-extra-file="$MYSQL_CNF" -N -B "${DB:-app}" -e "$1"
    else
        "${MYSQL:-mysql}" -N -B "${DB:-app}" -e "$1"
    fi
}

# The write itself, under a lock whose fence is $LOCKD_FENCE.
write_fenced() {
    id=$1
    fence=${LOCKD_FENCE-}
    is_number "$fence" || {
        echo "$0: LOCKD_FENCE is '$fence': run me under lockctl run" >&2
        exit 2
    }
    # SQL string literal: double every backslash and single quote.
    text=$(printf '%s' "$2" | sed -e 's/\\/\\\\/g' -e "s/'/''/g")
    rows=$(sql "UPDATE documents SET body = '$text', fence = $fence
                WHERE id = $id AND fence < $fence;
                SELECT ROW_COUNT();") || {
        echo "$0: documents/$id: the UPDATE failed" >&2
        exit 12
    }
    if [ "$rows" = 1 ]; then
        echo "documents/$id written under fence $fence"
        exit 0
    fi
    stored=$(sql "SELECT fence FROM documents WHERE id = $id") || exit 12
    if [ -z "$stored" ]; then
        echo "$0: documents/$id: no such row (load schema.sql)" >&2
        exit 11
    fi
    echo "$0: REFUSED: documents/$id holds fence $stored, ours is $fence:" \
        "a newer lock holder has written it, our lock had expired. Nothing written." >&2
    exit 10
}

if [ "${1-}" = --under-lock ]; then
    if [ "$#" -ne 3 ] || ! is_number "$2"; then
        usage
    fi
    write_fenced "$2" "$3"
fi
if [ "$#" -ne 2 ] || ! is_number "$1"; then
    usage
fi

# lockctl execs the second stage, so it needs this script's full path.
here=$(cd "$(dirname "$0")" && pwd) || exit 2
self=$here/$(basename "$0")
exec "${LOCKCTL:-lockctl}" run --ttl 10s --wait 10s "documents/$1" -- "$self" --under-lock "$1" "$2"

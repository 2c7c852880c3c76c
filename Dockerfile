# lockd container image: a Debian 12 build stage runs the README's `make`;
# the runtime stage holds only the shared libraries lockd and lockctl link
# and the two binaries. Runs as uid/gid 10001, listens on 0.0.0.0:8080,
# drains on SIGTERM as PID 1 (lockd handles the signal itself, no init
# needed).
#
#   podman build -t lockd:0.1.0 .      (or: docker build -t lockd:0.1.0 .)
#   docker run --rm -p 8080:8080 -e LOCKD_BACKEND=redis://redis:6379 lockd:0.1.0
#
# See deploy/README.md.

FROM debian:12-slim AS build
# The exact build dependencies of a developer machine: the same script and
# the same package list as `make deps-build`.
COPY deploy/debian-deps.sh /tmp/debian-deps.sh
RUN sh /tmp/debian-deps.sh build && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" build/lockd build/lockctl \
    && install -D -m 0755 -s build/lockd /out/lockd \
    && install -D -m 0755 -s build/lockctl /out/lockctl \
    && /out/lockd --version \
    && /out/lockctl --version

FROM debian:12-slim
# Runtime libraries only: libmicrohttpd, jansson, hiredis, ZooKeeper's C
# client and MariaDB Connector/C (what `ldd build/lockd` names), and
# libcurl (GnuTLS flavour, as libcurl4-gnutls-dev builds) for lockctl.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libmicrohttpd12 libjansson4 libhiredis0.14 libzookeeper-mt2 libmariadb3 \
        libcurl3-gnutls \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/log/apt /var/log/dpkg.log
COPY --from=build /out/lockd /usr/local/bin/lockd
# lockctl, the command-line client (docs/lockctl.md): for sidecars, init
# containers and `docker exec` sessions.
COPY --from=build /out/lockctl /usr/local/bin/lockctl
# Fail the build, not the first start, when a library is missing.
RUN if ldd /usr/local/bin/lockd /usr/local/bin/lockctl | grep 'not found'; then exit 1; fi \
    && /usr/local/bin/lockd --version \
    && /usr/local/bin/lockctl --version

LABEL org.opencontainers.image.title="lockd" \
      org.opencontainers.image.description="Distributed locks as an HTTP/JSON service (memory, Redis, ZooKeeper, MySQL backends)" \
      org.opencontainers.image.base.name="debian:12-slim"
USER 10001:10001
ENV LOCKD_LISTEN=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/lockd", "--check-health"]
ENTRYPOINT ["/usr/local/bin/lockd"]

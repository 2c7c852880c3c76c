"""tests/e2e/test_lifecycle.py - lockd as a process, on every backend:
SIGTERM / SIGINT shutdown (readyz 503, waiters answered 503 shutting_down,
in-flight requests finish, exit 0 within 10 s), the command line (--help,
--version, bad values exit 2), environment variables and flags (flag wins),
the limits flags taking effect, --auth-token-file, --max-connections,
--log-format json and --check-health.

Every extra lockd runs on the same store as ctx.lockd (ctx.new_lockd()).
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time

import harness
from client import (Waiter, acquire, expect_error, expect_grant, expect_json, http_request, parse_http, path,
                    read_answer, release, req)
from harness import check, eq

FLAGS = ["--listen", "--backend", "--threads", "--default-ttl-ms", "--max-ttl-ms", "--max-wait-ms",
         "--max-body-bytes", "--max-connections", "--log-level", "--log-format", "--auth-token-file",
         "--check-health", "--help", "--version"]


def run_lockd(args, env=None, timeout=10.0):
    """Run build/lockd to completion; (rc, stdout, stderr). Killed (rc None)
    if it does not exit within timeout."""
    e = dict(os.environ)
    e.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    e.update(env or {})
    p = subprocess.Popen([harness.LOCKD_BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=e)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


class Bare:
    """A lockd started with only the arguments and environment given (no
    --listen / --backend added), for env-only configuration."""

    def __init__(self, args, env, port):
        e = dict(os.environ)
        e.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        for k in list(e):
            if k.startswith("LOCKD_") and k != "LOCKD_BIN" and k != "LOCKD_BUILD":
                del e[k]
        e.update(env)
        self.port = port
        self.proc = subprocess.Popen([harness.LOCKD_BIN] + list(args), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=e)

    def request(self, method, p, body=None, headers=None):
        return harness.http(self.port, method, p, body, headers, timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read().decode("utf-8", "replace")
        self.proc.stderr.close()
        return self.proc.returncode, err


# --------------------------------------------------------------- shutdown

@harness.scenario("SIGTERM: readyz turns 503, waiters get 503 shutting_down, an in-flight request finishes, exit 0 within 10 s")
def sigterm(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("term")
    h = harness.http(ld.port, "POST", path(key), {"ttl_ms": 30000})
    expect_grant(h, key, 30000, what="holder on the second lockd")
    holder = h.json
    waiters = []
    for i in range(3):
        w = Waiter(ctx, key, wait_ms=20000, ttl_ms=5000, lockd=ld)
        w.start()
        waiters.append(w)
    keep = ld.client(timeout=10)
    eq(keep.request("GET", "/healthz").status, 200, "healthz on a kept-alive connection")
    # an in-flight request: headers sent, body not yet
    infl_key = ctx.key("term-inflight")
    infl = socket.create_connection(("127.0.0.1", ld.port), timeout=10)
    infl.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n"
                  % path(infl_key)).encode())
    time.sleep(0.5)  # the waiters are parked, the in-flight request is read
    for w in waiters:
        check(w.resp is None, "a waiter was answered before SIGTERM: %r" % (w.resp,))
    t0 = time.monotonic()
    ld.signal(signal.SIGTERM)
    try:
        for i, w in enumerate(waiters):
            r = w.result(10)
            expect_error(r, 503, "shutting_down", "waiter %d after SIGTERM" % i)
            eq(r.header("Retry-After"), "1", "Retry-After of shutting_down")
            check(w.t_done - t0 < 2.0, "waiter answered %.2f s after SIGTERM" % (w.t_done - t0))
        # readyz on the kept-alive connection, else on a new one
        try:
            r = keep.request("GET", "/readyz")
        except (OSError, http.client.HTTPException):
            r = harness.http(ld.port, "GET", "/readyz", timeout=5)
        body = expect_json(r, 503, "/readyz after SIGTERM")
        eq(body.get("status"), "unavailable", "readyz status")
        eq(body.get("reason"), "shutting down", "readyz reason")
        eq(body.get("backend"), ctx.backend, "readyz backend while shutting down")
        # a new request is refused with 503 shutting_down (or the connection is gone)
        try:
            r = keep.request("POST", path(ctx.key("term-new")), {"ttl_ms": 1000})
            expect_error(r, 503, "shutting_down", "a new acquire after SIGTERM")
            eq(r.header("Retry-After"), "1", "Retry-After of shutting_down")
        except (OSError, http.client.HTTPException):
            pass  # the kept-alive connection was closed: also a refusal
        check(ld.alive(), "lockd exited before the in-flight request finished")
        infl.sendall(b'{"ttl_ms": 1000 }')
        buf = b""
        deadline = time.monotonic() + 5
        while parse_http(buf) is None and time.monotonic() < deadline:
            chunk = infl.recv(65536)
            if not chunk:
                break
            buf += chunk
        p = parse_http(buf)
        check(p is not None, "the in-flight request got no complete answer: %r" % buf[:200])
        check(p[0] in (201, 503), "in-flight request answered %d %r" % (p[0], p[2][:200]))
        harness.log("     the in-flight request was answered %d" % p[0])
        if p[0] == 503:
            eq(json.loads(p[2])["error"]["code"], "shutting_down", "in-flight 503 code")
    finally:
        infl.close()
        keep.close()
    try:
        rc = ld.proc.wait(max(0.1, 10.0 - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        raise harness.Fail("lockd still running 10 s after SIGTERM")
    harness.log("     exited %.2f s after SIGTERM" % (time.monotonic() - t0))
    eq(rc, 0, "exit code after SIGTERM")
    check(not ld.sanitizer_report(), "sanitizer: " + ld.sanitizer_report())
    # the lock held through the shut-down instance is still there on a persistent store
    if ctx.backend != "memory":
        r = ctx.lockd.request("GET", path(key))
        body = expect_json(r, 200, "the holder's lock after the other instance stopped")
        eq(body.get("fence"), holder["fence"], "fence")
        release(ctx, key, holder["token"])


@harness.scenario("SIGTERM with a stalled client and an idle keep-alive connection still exits 0 within 10 s",
                  slow=True)
def sigterm_stalled(ctx):
    ld = ctx.new_lockd()
    keep = ld.client(timeout=10)
    eq(keep.request("GET", "/healthz").status, 200, "healthz")
    stalled = socket.create_connection(("127.0.0.1", ld.port), timeout=10)
    stalled.sendall(b"POST " + path(ctx.key("stall")).encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
    half = socket.create_connection(("127.0.0.1", ld.port), timeout=10)
    half.sendall(b"GET /heal")
    time.sleep(0.2)
    t0 = time.monotonic()
    ld.signal(signal.SIGTERM)
    try:
        rc = ld.proc.wait(10.5)
    except subprocess.TimeoutExpired:
        rc = "still running"
    finally:
        stalled.close()
        half.close()
        keep.close()
    harness.log("     exited %.2f s after SIGTERM" % (time.monotonic() - t0))
    eq(rc, 0, "exit code within 10 s of SIGTERM")


@harness.scenario("SIGINT shuts lockd down like SIGTERM, exit 0")
def sigint(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("int")
    g = harness.http(ld.port, "POST", path(key), {"ttl_ms": 2000})
    eq(g.status, 201, "acquire")
    t0 = time.monotonic()
    ld.signal(signal.SIGINT)
    try:
        rc = ld.proc.wait(10)
    except subprocess.TimeoutExpired:
        rc = "still running"
    eq(rc, 0, "exit code after SIGINT")
    check(time.monotonic() - t0 < 10, "slow exit")
    check(not ld.sanitizer_report(), "sanitizer: " + ld.sanitizer_report())


# ----------------------------------------------------------- command line

@harness.scenario("--help lists every flag of API.md and exits 0; --version prints the version")
def help_version(ctx):
    rc, out, err = run_lockd(["--help"], timeout=5)
    eq(rc, 0, "--help exit code")
    text = out + err
    missing = [f for f in FLAGS if f not in text]
    check(not missing, "--help does not mention %s:\n%s" % (", ".join(missing), text[:2000]))
    check(out.strip(), "--help printed nothing on stdout")
    for env in ("LOCKD_LISTEN", "LOCKD_BACKEND"):
        check(env in text, "--help does not mention %s" % env)
    rc, out, err = run_lockd(["--version"], timeout=5)
    eq(rc, 0, "--version exit code")
    check(re.search(r"\d+\.\d+\.\d+", out), "--version output %r has no version" % out)
    check("lockd" in out, "--version output %r does not name lockd" % out)


BAD_ARGS = [
    ["--max-ttl-ms", "0"], ["--max-ttl-ms", "abc"], ["--max-ttl-ms", "-5"], ["--max-ttl-ms", "1e3"],
    ["--max-ttl-ms", "99999999999999999999999"], ["--default-ttl-ms", "0"], ["--default-ttl-ms", "5x"],
    ["--default-ttl-ms", "5000", "--max-ttl-ms", "1000"], ["--max-wait-ms", "-1"], ["--max-wait-ms", "x"],
    ["--max-body-bytes", "abc"], ["--max-body-bytes", "-1"], ["--threads", "abc"], ["--threads", "-2"],
    ["--max-connections", "abc"], ["--log-level", "loud"], ["--log-format", "xml"], ["--listen", "nonsense"],
    ["--listen", "127.0.0.1:99999"], ["--listen", "127.0.0.1:"], ["--backend", "nosuch://x"],
    ["--backend", "memory://?foo=1"], ["--backend", ""], ["--no-such-flag"], ["--max-ttl-ms"],
    ["--auth-token-file", "/nonexistent/lockd-token"], ["stray-argument"],
]


@harness.scenario("bad flag and environment values exit 2 with a message on stderr")
def bad_values(ctx):
    failures = []
    for args in BAD_ARGS:
        full = ["--listen", "127.0.0.1:%d" % harness.free_port()] + args if args[0] != "--listen" else args
        rc, out, err = run_lockd(full, timeout=5)
        if rc != 2 or not err.strip():
            failures.append("%s: exit %r, stderr %r" % (" ".join(args), rc, err[:200]))
    for name, value in (("LOCKD_MAX_TTL_MS", "abc"), ("LOCKD_DEFAULT_TTL_MS", "0"), ("LOCKD_LOG_LEVEL", "loud"),
                        ("LOCKD_LOG_FORMAT", "yaml"), ("LOCKD_MAX_BODY_BYTES", "-3"), ("LOCKD_BACKEND", "bogus://"),
                        ("LOCKD_LISTEN", "nope"), ("LOCKD_THREADS", "many")):
        rc, out, err = run_lockd(["--listen", "127.0.0.1:%d" % harness.free_port()] if name != "LOCKD_LISTEN"
                                 else [], env={name: value}, timeout=5)
        if rc != 2 or not err.strip():
            failures.append("%s=%s: exit %r, stderr %r" % (name, value, rc, err[:200]))
    check(not failures, "bad values not refused with exit 2:\n  " + "\n  ".join(failures))


@harness.scenario("a --listen address already in use makes lockd exit non-zero with a message")
def listen_in_use(ctx):
    rc, out, err = run_lockd(["--listen", "127.0.0.1:%d" % ctx.lockd.port, "--backend", ctx.url], timeout=8)
    check(rc not in (0, None), "lockd on a port in use: exit %r" % rc)
    check(err.strip(), "no message on stderr")


@harness.scenario("environment variables configure lockd and flags win over them")
def env_and_flags(ctx):
    port = harness.free_port()
    b = Bare([], {"LOCKD_LISTEN": "127.0.0.1:%d" % port, "LOCKD_BACKEND": ctx.url,
                  "LOCKD_DEFAULT_TTL_MS": "4321", "LOCKD_MAX_TTL_MS": "60000", "LOCKD_MAX_BODY_BYTES": "200",
                  "LOCKD_MAX_WAIT_MS": "3000", "LOCKD_LOG_LEVEL": "warn", "LOCKD_THREADS": "2"}, port)
    try:
        check(harness.wait_port(port, 15), "lockd did not listen on LOCKD_LISTEN")
        body = expect_json(b.request("GET", "/readyz"), 200, "/readyz")
        eq(body.get("backend"), ctx.backend, "backend from LOCKD_BACKEND")
        key = ctx.key("env")
        g = expect_grant(b.request("POST", path(key)), key, 4321, what="acquire with LOCKD_DEFAULT_TTL_MS")
        b.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
        expect_error(b.request("POST", path(key), {"ttl_ms": 60001}), 400, "invalid_parameter",
                     "ttl_ms over LOCKD_MAX_TTL_MS")
        expect_error(b.request("POST", path(key), {"wait_ms": 3001}), 400, "invalid_parameter",
                     "wait_ms over LOCKD_MAX_WAIT_MS")
        expect_error(b.request("POST", path(key), {"owner": "x" * 100, "pad": "y" * 120}), 413, "body_too_large",
                     "a body over LOCKD_MAX_BODY_BYTES")
    finally:
        rc, err = b.stop()
    eq(rc, 0, "exit code")
    # flags win
    port = harness.free_port()
    b = Bare(["--listen", "127.0.0.1:%d" % port, "--default-ttl-ms", "1234", "--max-ttl-ms", "90000"],
             {"LOCKD_LISTEN": "127.0.0.1:%d" % harness.free_port(), "LOCKD_BACKEND": ctx.url,
              "LOCKD_DEFAULT_TTL_MS": "4321", "LOCKD_MAX_TTL_MS": "60000"}, port)
    try:
        check(harness.wait_port(port, 15), "lockd did not listen on --listen (LOCKD_LISTEN set too)")
        key = ctx.key("flag")
        g = expect_grant(b.request("POST", path(key)), key, 1234, what="acquire: --default-ttl-ms over env")
        b.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
        g = expect_grant(b.request("POST", path(key), {"ttl_ms": 90000}), key, 90000,
                         what="ttl_ms allowed by --max-ttl-ms over env")
        b.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    finally:
        rc, err = b.stop()
    eq(rc, 0, "exit code")


@harness.scenario("LOCKD_LOG_FORMAT, LOCKD_LOG_LEVEL and LOCKD_MAX_CONNECTIONS take effect like their flags")
def env_log_and_connections(ctx):
    def bare(env):
        port = harness.free_port()
        e = {"LOCKD_LISTEN": "127.0.0.1:%d" % port, "LOCKD_BACKEND": ctx.url}
        e.update(env)
        b = Bare([], e, port)
        check(harness.wait_port(port, 15), "lockd did not listen on LOCKD_LISTEN (%r)" % env)
        return b, port

    limit = 16  # lockd's smallest accepted --max-connections
    # every connection comes from 127.0.0.1: lift the per-address cap (half)
    b, port = bare({"LOCKD_MAX_CONNECTIONS": str(limit), "LOCKD_THREADS": "1",
                    "LOCKD_MAX_CONNECTIONS_PER_IP": str(limit)})
    clients = []
    try:
        for i in range(limit):
            clients.append(harness.served_client(port, i + 1))
        check(extra_connection_refused(port), "connection %d was served with LOCKD_MAX_CONNECTIONS=%d"
              % (limit + 1, limit))
    finally:
        for c in clients:
            c.close()
        rc, err = b.stop()
    eq(rc, 0, "exit code with LOCKD_MAX_CONNECTIONS")
    # LOCKD_LOG_FORMAT=json with LOCKD_LOG_LEVEL=info: JSON lines, the access line among them
    b, port = bare({"LOCKD_LOG_FORMAT": "json", "LOCKD_LOG_LEVEL": "info"})
    try:
        eq(b.request("GET", "/healthz", headers={"X-Request-Id": "env-log-probe-1"}).status, 200, "/healthz")
        time.sleep(0.2)
    finally:
        rc, err = b.stop()
    eq(rc, 0, "exit code with LOCKD_LOG_FORMAT")
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("==") and "Sanitizer" not in ln
             and "runtime error" not in ln]
    for ln in lines:
        try:
            json.loads(ln)
        except ValueError:
            raise harness.Fail("log line is not JSON with LOCKD_LOG_FORMAT=json: %r" % ln[:300])
    check(any("env-log-probe-1" in ln for ln in lines), "no access line for the probe with LOCKD_LOG_LEVEL=info")
    # LOCKD_LOG_LEVEL=error drops the access lines (they are info)
    b, port = bare({"LOCKD_LOG_LEVEL": "error"})
    try:
        eq(b.request("GET", "/healthz", headers={"X-Request-Id": "env-log-probe-2"}).status, 200, "/healthz")
        time.sleep(0.2)
    finally:
        rc, err = b.stop()
    eq(rc, 0, "exit code with LOCKD_LOG_LEVEL")
    check("env-log-probe-2" not in err, "an access line was written with LOCKD_LOG_LEVEL=error: %r" % err[-300:])


@harness.scenario("--max-ttl-ms, --max-wait-ms, --default-ttl-ms and --max-body-bytes take effect")
def limit_flags(ctx):
    ld = ctx.new_lockd(["--max-ttl-ms", "5000", "--max-wait-ms", "2000", "--default-ttl-ms", "3000",
                        "--max-body-bytes", "100"])
    key = ctx.key("lim")
    g = expect_grant(ld.request("POST", path(key)), key, 3000, what="acquire with --default-ttl-ms 3000")
    ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    g = expect_grant(ld.request("POST", path(key), {"ttl_ms": 5000}), key, 5000, what="ttl_ms = max")
    expect_error(ld.request("PUT", path(key), {"token": g["token"], "ttl_ms": 5001}), 400, "invalid_parameter",
                 "renew over --max-ttl-ms")
    ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    expect_error(ld.request("POST", path(key), {"ttl_ms": 5001}), 400, "invalid_parameter", "ttl_ms over max")
    expect_error(ld.request("POST", path(key), {"wait_ms": 2001}), 400, "invalid_parameter", "wait_ms over max")
    g = expect_grant(ld.request("POST", path(key), {"wait_ms": 2000, "ttl_ms": 1000}), key, 1000,
                     what="wait_ms = max")
    ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    body100 = b'{"ttl_ms":1000,"owner":"' + b"o" * (100 - 26) + b'"}'
    eq(len(body100), 100, "test body size")
    g = expect_grant(ld.request("POST", path(key), body100), key, 1000, what="a body of exactly 100 bytes")
    ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    body101 = body100[:-1] + b' }'
    expect_error(ld.request("POST", path(key), body101), 413, "body_too_large", "a body of 101 bytes")
    r = ld.request("GET", path(key))
    expect_error(r, 404, "lock_not_found", "the key after a 413")
    # and the main instance still has the defaults
    g = acquire(ctx, key, ttl_ms=6000)
    release(ctx, key, g["token"])


@harness.scenario("--auth-token-file: /locks needs the bearer token (401 unauthorized otherwise), ops endpoints stay open")
def auth(ctx):
    tf = os.path.join(ctx.tmpdir, "token-%d" % harness.free_port())
    with open(tf, "w") as f:
        f.write("s3cret-Token_42-lockd-test\n")  # the newline is not part of it
    os.chmod(tf, 0o600)
    for how in ("flag", "env"):
        if how == "flag":
            ld = ctx.new_lockd(["--auth-token-file", tf])
        else:
            ld = ctx.new_lockd(env={"LOCKD_AUTH_TOKEN_FILE": tf})
        key = ctx.key("auth")
        for method in ("POST", "GET", "PUT", "DELETE"):
            for hdrs in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer s3cret-Token_42-lockd-tes"},
                         {"Authorization": "Bearer s3cret-Token_42-lockd-testx"}, {"Authorization": "Basic czNjcmV0"},
                         {"Authorization": "s3cret-Token_42-lockd-test"}, {"Authorization": "Bearer "},
                         {"Authorization": "Bearer S3CRET-TOKEN_42-LOCKD-TEST"}):
                h = dict(hdrs)
                h["Lock-Token"] = "a" * 32
                r = ld.request(method, path(key), headers=h)
                expect_error(r, 401, "unauthorized", "%s (%s) with %r" % (method, how, hdrs))
                www = r.header("WWW-Authenticate") or ""
                check(www == "Bearer" or www.startswith("Bearer "), "WWW-Authenticate %r (%s)" % (www, how))
        r = ld.request("GET", "/healthz")
        eq(r.status, 200, "/healthz without credentials")
        eq(ld.request("GET", "/readyz").status, 200, "/readyz without credentials")
        eq(ld.request("GET", "/metrics").status, 200, "/metrics without credentials")
        good = {"Authorization": "Bearer s3cret-Token_42-lockd-test"}
        r = ld.request("POST", path(key), {"ttl_ms": 5000}, headers=good)
        g = expect_grant(r, key, 5000, what="acquire with the right bearer (%s)" % how)
        r = ld.request("GET", path(key), headers=good)
        eq(expect_json(r, 200, "inspect with the bearer").get("fence"), g["fence"], "fence")
        h = dict(good)
        h["Lock-Token"] = g["token"]
        eq(ld.request("PUT", path(key), headers=h).status, 200, "renew with the bearer")
        r = ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
        expect_error(r, 401, "unauthorized", "release with the lock token but no bearer")
        eq(ld.request("DELETE", path(key), headers=h).status, 200, "release with the bearer")
        eq(ld.stop(), 0, "exit code (%s)" % how)
    rc, out, err = run_lockd(["--listen", "127.0.0.1:%d" % harness.free_port(), "--auth-token-file",
                              os.path.join(ctx.tmpdir, "no-such-token-file")], timeout=5)
    eq(rc, 2, "exit code for a missing token file")


def extra_connection_refused(port):
    """Whether one more connection to lockd is refused: closed, reset, not
    answered within 3 s, or answered 503."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        try:
            s.sendall(http_request("GET", "/healthz"))
            p = read_answer(s, 3)
            return p is None or p[0] == 503
        finally:
            s.close()
    except OSError:
        return True


@harness.scenario("--max-connections bounds concurrent connections and lockd recovers when they close")
def max_connections(ctx):
    limit = 16  # lockd's smallest accepted value
    ld = ctx.new_lockd(["--max-connections", str(limit), "--threads", "1",
                        "--max-connections-per-ip", str(limit)])  # all from 127.0.0.1
    clients = []
    try:
        for i in range(limit):
            clients.append(harness.served_client(ld.port, i + 1))
        check(extra_connection_refused(ld.port), "connection %d was served with --max-connections %d"
              % (limit + 1, limit))
    finally:
        for c in clients:
            c.close()
    time.sleep(0.3)
    eq(ld.request("GET", "/healthz").status, 200, "healthz after the connections closed")


@harness.scenario("--log-format json writes one JSON object a line, with an access line per request")
def log_json(ctx):
    ld = ctx.new_lockd(["--log-format", "json", "--log-level", "info"])
    ld.request("GET", "/healthz", headers={"X-Request-Id": "log-json-probe-1"})
    key = ctx.key("log")
    ld.request("GET", path(key))
    time.sleep(0.3)
    eq(ld.stop(), 0, "exit code")
    lines = [ln for ln in ld.log_tail(200000).splitlines() if ln.strip()]
    objs = []
    for ln in lines:
        if ln.startswith("==") or "Sanitizer" in ln or "runtime error" in ln:
            continue
        try:
            objs.append(json.loads(ln))
        except ValueError:
            raise harness.Fail("log line is not JSON: %r" % ln[:300])
    text = json.dumps(objs)
    check("/healthz" in text, "no access line for /healthz")
    check(key in text, "no access line for the inspect of %s" % key)
    access = [o for o in objs if "/healthz" in json.dumps(o)]
    check(any("200" in json.dumps(o) and "GET" in json.dumps(o) for o in access),
          "access line lacks method or status: %r" % access[:2])
    check(any("log-json-probe-1" in json.dumps(o) for o in access), "access line lacks the request id")


@harness.scenario("lockd --check-health exits 0 for a healthy lockd and 1 otherwise")
def check_health(ctx):
    port = ctx.lockd.port
    rc, out, err = run_lockd(["--check-health", "http://127.0.0.1:%d/healthz" % port], timeout=10)
    eq(rc, 0, "--check-health URL of a live lockd (stderr %r)" % err[:200])
    rc, out, err = run_lockd(["--listen", "127.0.0.1:%d" % port, "--check-health"], timeout=10)
    eq(rc, 0, "--check-health with --listen (stderr %r)" % err[:200])
    rc, out, err = run_lockd(["--check-health"], env={"LOCKD_LISTEN": "0.0.0.0:%d" % port}, timeout=10)
    eq(rc, 0, "--check-health with LOCKD_LISTEN=0.0.0.0:port (stderr %r)" % err[:200])
    dead = harness.free_port()
    t0 = time.monotonic()
    rc, out, err = run_lockd(["--check-health", "http://127.0.0.1:%d/healthz" % dead], timeout=10)
    eq(rc, 1, "--check-health of a closed port")
    check(time.monotonic() - t0 < 8, "--check-health of a closed port took %.1f s" % (time.monotonic() - t0))
    rc, out, err = run_lockd(["--check-health", "http://127.0.0.1:%d/nope" % port], timeout=10)
    eq(rc, 1, "--check-health of a 404 URL")
    # a listener that never answers: check-health must give up by itself
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        t0 = time.monotonic()
        rc, out, err = run_lockd(["--check-health", "http://127.0.0.1:%d/healthz" % srv.getsockname()[1]],
                                 timeout=20)
        eq(rc, 1, "--check-health of a silent listener")
        check(time.monotonic() - t0 < 15, "--check-health of a silent listener took %.1f s" % (time.monotonic() - t0))
    finally:
        srv.close()


@harness.scenario("a second lockd on the same store serves the same locks",
                  backends=["redis", "redlock", "zookeeper", "mysql"])
def shared_store(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("shared")
    g = acquire(ctx, key, ttl_ms=10000, owner="one")
    r = harness.http(ld.port, "POST", path(key), {"ttl_ms": 1000})
    expect_error(r, 409, "lock_held", "acquire through the second instance")
    r = harness.http(ld.port, "GET", path(key))
    eq(expect_json(r, 200, "inspect through the second instance").get("fence"), g["fence"], "fence")
    r = harness.http(ld.port, "DELETE", path(key), headers={"Lock-Token": g["token"]})
    expect_json(r, 200, "release through the second instance")
    g2 = expect_grant(harness.http(ld.port, "POST", path(key), {"ttl_ms": 1000}), key, 1000,
                      what="acquire through the second instance")
    check(g2["fence"] > g["fence"], "fence across instances")
    r = req(ctx, "DELETE", key, headers={"Lock-Token": g2["token"]})
    expect_json(r, 200, "release through the first instance")


@harness.scenario("fences keep growing across a restart of lockd")
def fence_restart(ctx):
    key = ctx.key("restart")
    one = ctx.new_lockd()
    g1 = expect_grant(one.request("POST", path(key), {"ttl_ms": 5000}), key, 5000, what="grant before the restart")
    expect_json(one.request("DELETE", path(key), headers={"Lock-Token": g1["token"]}), 200, "release")
    eq(one.stop(), 0, "exit code")
    two = ctx.new_lockd()
    g2 = expect_grant(two.request("POST", path(key), {"ttl_ms": 5000}), key, 5000, what="grant after the restart")
    check(g2["fence"] > g1["fence"], "fence after a restart %d is not above %d" % (g2["fence"], g1["fence"]))
    expect_json(two.request("DELETE", path(key), headers={"Lock-Token": g2["token"]}), 200, "release")

"""tests/e2e/test_signals.py - lockd as a process, on memory: SIGHUP never
kills (a held lock still renews, a waiter still waits), reopens --log-file
after a rename (logrotate) without losing a line, re-reads the token files
(a broken one keeps the old token); unknown LOCKD_* variables get one
warning with the nearest name; the thread count and the
--max-store-connections rule at start; JSON log lines of a loaded run in
time order.
"""

import json
import re
import os
import signal
import subprocess
import threading
import time

import harness
from client import Waiter, acquire, expect_json, path
from harness import LOCKD_BIN, check, eq


def read(p):
    try:
        with open(p, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def wait_text(p, text, count=1, timeout=5.0):
    """Until file p holds text count times (the log is written every 50 ms);
    its content."""
    deadline = time.monotonic() + timeout
    while True:
        body = read(p)
        if body.count(text) >= count:
            return body
        if time.monotonic() > deadline:
            raise harness.Fail("%r not %d times in %s after %.0f s: %s" % (text, count, p, timeout, body[-2000:]))
        time.sleep(0.02)


def hup(ld, log_path, n):
    """Send the n-th SIGHUP and wait for its line."""
    ld.signal(signal.SIGHUP)
    wait_text(log_path, "SIGHUP:", n)
    check(ld.alive(), "lockd died on SIGHUP: %s" % ld.log_tail())


def json_lines(text):
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            raise harness.Fail("not a JSON line (torn?): %r" % line)
    return out


@harness.scenario("signals: SIGHUP keeps lockd serving: a held lock still renews, a waiter still waits and gets it",
                  backends=["memory"])
def sighup_keeps_serving(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("hup")
    g = acquire(ctx_of(ctx, ld), key, ttl_ms=10000)
    w = Waiter(ctx, key, wait_ms=8000, lockd=ld)
    w.start()
    time.sleep(0.3)
    hup(ld, ld.log_path, 1)
    hup(ld, ld.log_path, 2)
    check(w.is_alive() and w.resp is None, "the waiter was answered at SIGHUP: %r" % (w.resp,))
    r = ld.request("PUT", path(key), {"ttl_ms": 10000}, headers={"Lock-Token": g["token"]})
    expect_json(r, 200, "renew after SIGHUP")
    r = ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    expect_json(r, 200, "release after SIGHUP")
    eq(w.result().status, 201, "waiter after SIGHUP")
    check("nothing to reload" in read(ld.log_path), "SIGHUP line: %s" % ld.log_tail())
    eq(ld.stop(), 0, "exit code after SIGHUPs")


def ctx_of(ctx, ld):
    """A context whose lockd is ld (client.acquire() uses ctx.lockd)."""
    class C:
        pass
    c = C()
    c.lockd = ld
    return c


@harness.scenario("signals: SIGHUP reopens --log-file after a rename; no line lost, none in both files",
                  backends=["memory"])
def sighup_rotates_log_file(ctx):
    logf = os.path.join(ctx.tmpdir, "rot-%d.log" % os.getpid())
    for p in (logf, logf + ".1"):
        if os.path.exists(p):
            os.unlink(p)
    ld = ctx.new_lockd(args=["--log-file", logf, "--log-format", "json"])
    c = ld.client()
    try:
        for i in range(100):
            if i == 50:
                # an access line is written once its answer is sent: wait
                # for the last one before the rename, or it may land after
                deadline = time.monotonic() + 5
                while '"rot-049"' not in read(logf) and time.monotonic() < deadline:
                    time.sleep(0.01)
                os.rename(logf, logf + ".1")
                hup(ld, logf, 1)
            r = c.request("GET", "/healthz", headers={"X-Request-Id": "rot-%03d" % i})
            eq(r.status, 200, "healthz")
    finally:
        c.close()
    eq(ld.stop(), 0, "exit code")
    old, new = json_lines(read(logf + ".1")), json_lines(read(logf))
    ids = lambda ls: [x["request_id"] for x in ls if x.get("msg") == "access" and
                      str(x.get("request_id", "")).startswith("rot-")]
    eq(ids(old), ["rot-%03d" % i for i in range(50)], "access lines in the renamed file")
    eq(ids(new), ["rot-%03d" % i for i in range(50, 100)], "access lines in the new file")
    check(any("reopened the log file" in x.get("msg", "") for x in new), "no reopen line in the new file")
    check(any("listening on" in x.get("msg", "") for x in old), "no start line in the old file")
    eq(read(ld.log_path).strip(), "", "stderr with --log-file")


@harness.scenario("signals: SIGHUP reloads changed token files; a broken one keeps the old token, logged without it",
                  backends=["memory"])
def sighup_reloads_tokens(ctx):
    tok = os.path.join(ctx.tmpdir, "tok-%d" % os.getpid())
    adm = os.path.join(ctx.tmpdir, "adm-%d" % os.getpid())
    with open(tok, "w") as f:
        f.write("old-secret-1\n")
    with open(adm, "w") as f:
        f.write("admin-secret-1\n")
    ld = ctx.new_lockd(args=["--auth-token-file", tok, "--admin-token-file", adm])
    key = ctx.key("tok")
    bearer = lambda t: {"Authorization": "Bearer " + t}

    def status(t):
        return ld.request("GET", path(key), headers=bearer(t)).status

    eq(status("old-secret-1"), 404, "old token before SIGHUP")
    with open(tok, "w") as f:
        f.write("new-secret-2\n")
    hup(ld, ld.log_path, 1)
    eq(status("old-secret-1"), 401, "old token after SIGHUP")
    eq(status("new-secret-2"), 404, "new token after SIGHUP")
    line = [x for x in read(ld.log_path).splitlines() if "SIGHUP:" in x][-1]
    check("auth token from " + tok in line and "admin token from " + adm in line, "SIGHUP line: %r" % line)
    os.unlink(tok)  # a rotation gone wrong
    hup(ld, ld.log_path, 2)
    eq(status("new-secret-2"), 404, "token after a failed reload")
    eq(status("old-secret-1"), 401, "older token after a failed reload")
    text = read(ld.log_path)
    check("SIGHUP: auth token: " in text and tok in text and "old one stays" in text,
          "no warning naming the file: %s" % text[-1500:])
    check("secret" not in text, "a token reached the log: %s" % text[-1500:])


@harness.scenario("signals: LOCKD_MAX_TTL gets one warning suggesting LOCKD_MAX_TTL_MS; lockctl's variables are quiet",
                  backends=["memory"])
def unknown_env_warns(ctx):
    ld = ctx.new_lockd(env={"LOCKD_MAX_TTL": "5", "LOCKD_URL": "http://127.0.0.1:1", "LOCKD_TOKEN": "t",
                            "LOCKD_KEY": "k", "LOCKD_FENCE": "1", "LOCKD_PORT_8080_TCP": "tcp://x"})
    text = wait_text(ld.log_path, "listening on")
    warns = [x for x in text.splitlines() if "unknown variable" in x]
    eq(len(warns), 1, "unknown-variable warnings (%r)" % warns)
    check(warns[0].endswith("LOCKD_MAX_TTL: unknown variable, ignored (did you mean LOCKD_MAX_TTL_MS?)")
          and " warn " in warns[0], "warning: %r" % warns[0])


@harness.scenario("signals: the start line says the thread count and why; --threads over --max-store-connections exits 2",
                  backends=["memory"])
def threads_and_store_cap(ctx):
    ld = ctx.new_lockd()
    text = wait_text(ld.log_path, "listening on")
    check(" threads: " in text and "usable CPU" in text, "no thread sizing line: %s" % text)
    ld2 = ctx.new_lockd(args=["--threads", "3"])
    check("3 threads: --threads" in wait_text(ld2.log_path, "listening on"), "explicit threads line")
    for backend, args, want in (
            ("redis://127.0.0.1:1", ["--threads", "31"],
             "--threads 31 needs 65 store connections (2 per thread + 3 for redis), above --max-store-connections 64"),
            ("mysql://u:p@127.0.0.1:1/db", ["--threads", "5", "--max-store-connections", "10"],
             "--threads 5 needs 11 store connections (2 per thread + 1 for mysql)"),
            ("redis://127.0.0.1:1", ["--max-store-connections", "4"], "--max-store-connections 4 is too low for redis")):
        t0 = time.monotonic()
        p = subprocess.run([LOCKD_BIN, "--listen", "127.0.0.1:%d" % harness.free_port(), "--backend", backend] + args,
                           capture_output=True, timeout=10)
        eq(p.returncode, 2, "exit code of %r" % args)
        err = p.stderr.decode()
        check(want in err, "stderr %r lacks %r" % (err, want))
        check(time.monotonic() - t0 < 2, "the error waited for the store")


def mhd_threads(pid):
    """How many of lockd's threads serve HTTP: libmicrohttpd's pool
    (MHD-worker), or its one internal thread (MHD-single)."""
    n = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                n += f.read().strip() in ("MHD-worker", "MHD-single")
        except OSError:
            pass
    return n


@harness.scenario("signals: the HTTP threads are --http-threads, else --threads on memory and the usable "
                  "CPUs on a network backend (its calls run on the workers)",
                  backends=["memory"])
def http_threads(ctx):
    cases = (("memory://", ["--threads", "3"], 3, "3 threads: --threads"),
             ("memory://", ["--threads", "3", "--http-threads", "5"], 5,
              "3 threads: --threads; 5 HTTP threads: --http-threads"),
             # the store need not answer: the sizing comes first
             ("redis://127.0.0.1:1", ["--threads", "6"], None, "6 threads: --threads; "),
             ("redis://127.0.0.1:1", ["--http-threads", "4"], 4, "; 4 HTTP threads: --http-threads"))
    for backend, args, want, line in cases:
        ld = harness.Lockd(backend, args=args, tmpdir=ctx.tmpdir)
        ld.start()
        try:
            text = wait_text(ld.log_path, "listening on")
            check(line in text, "%s %r: no %r in %s" % (backend, args, line, text))
            sized = re.search(r"(\d+) HTTP threads?: the usable CPUs?", text)
            if want is None:
                check(sized is not None, "%s %r: no usable-CPU count: %s" % (backend, args, text))
                want = int(sized.group(1))
            eq(mhd_threads(ld.proc.pid), want, "%s %r: HTTP threads" % (backend, args))
        finally:
            ld.stop(5)


@harness.scenario("signals: JSON log lines of a loaded run (8 clients, events and access lines) are in time order",
                  backends=["memory"])
def json_log_in_time_order(ctx):
    ld = ctx.new_lockd(args=["--log-format", "json", "--threads", "4"])
    errors = []

    def client(n):
        try:
            c = ld.client()
            try:
                for i in range(150):
                    key = "order-%d-%d" % (n, i % 5)
                    r = c.request("POST", path(key), {"ttl_ms": 5000})
                    if r.status == 201:
                        c.request("DELETE", path(key), headers={"Lock-Token": r.json["token"]})
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    check(not errors and not any(t.is_alive() for t in ts), "clients failed: %r" % errors)
    eq(ld.stop(), 0, "exit code")
    lines = json_lines(read(ld.log_path))
    access = [x for x in lines if x.get("msg") == "access"]
    check(len(access) >= 8 * 150, "access lines: %d" % len(access))
    times = [x["time"] for x in lines]
    bad = [(a, b) for a, b in zip(times, times[1:]) if b < a]
    eq(bad[:3], [], "lines out of time order (%d)" % len(bad))

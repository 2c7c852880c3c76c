"""tests/e2e/test_lockctl.py - lockctl, the command-line client, against a
real lockd:

- acquire, renew, release and inspect: the server's JSON on stdout, the
  shell assignments of --format env (eval'd by sh), every exit code
  (0 ok, 1 held, 2 usage, 3 unavailable, 4 not held, 5 token mismatch,
  6 denied), LOCKD_TOKEN from the environment, --shared/--limit,
  re-entry, several keys at once, keys with '/', spaces and UTF-8, and
  --idempotent's retry of an acquire that could not connect;
- run: the child's LOCKD_* environment, renewing a short TTL through a
  longer child, stopping the child's process group (SIGTERM, SIGKILL
  after --grace) when the lock is lost (released behind its back, or lockd
  stopped past the TTL), signals forwarded, release on exit, exit codes
  passed through; SIGTERM at random moments around the acquire (its 201
  held back by a proxy) and around the grant of a waiting run: 143, and
  never a lock left held;
- two runs on one key (through two lockd instances on a shared store)
  never overlap.

Most scenarios run on memory://; the overlap and the stall ones on Redis
too. Keys always come from ctx.key().
"""

import errno
import json
import os
import pty
import random
import re
import select
import signal
import subprocess
import time

import harness
from client import expect_free, expect_held, expect_json, inspect, metric, metrics, path, release
from multi import ensure_server_up
from harness import check, eq

# absolute: run's children work in their own directories
LOCKCTL = os.path.abspath(harness.LOCKCTL_BIN)
MEMORY = ["memory"]
SHARED = ["memory", "redis", "zookeeper", "mysql"]


# ---------------------------------------------------------------- helpers

def base_env(extra=None):
    """The test's environment without any LOCKD_* of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKD_")}
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.update(extra or {})
    return env


def url_of(ld):
    return "http://127.0.0.1:%d" % ld.port


def ctl(ld, *args, env=None, timeout=20.0, url=True):
    """Run lockctl to its end: (exit code, stdout, stderr)."""
    cmd = [LOCKCTL] + (["--url", url_of(ld)] if url else []) + list(args)
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=base_env(env), timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def ctl_json(ld, *args, want=0, env=None):
    """lockctl with --format json: its exit code must be want; the one line
    of JSON it printed."""
    rc, out, err = ctl(ld, *args, env=env)
    eq(rc, want, "lockctl %s exit code (stderr %r, stdout %r)" % (" ".join(args), err, out))
    lines = out.splitlines()
    eq(len(lines), 1, "lockctl %s prints one line: %r" % (" ".join(args), out))
    return json.loads(lines[0]), err


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


class Run:
    """lockctl run in the background. The child writes its pid (= its
    process group) to <tmp>/pgid first, so cleanup can kill what is left."""

    def __init__(self, ctx, ld, key_args, script, extra=(), env=None):
        self.dir = os.path.join(ctx.tmpdir, "run-%d-%d" % (os.getpid(), int(time.monotonic() * 1e6)))
        os.makedirs(self.dir)
        self.script = "echo $$ > %s/pgid; %s" % (sh_quote(self.dir), script)
        cmd = ([LOCKCTL, "--url", url_of(ld), "run"] + list(key_args) + list(extra)
               + ["--", "sh", "-c", self.script])
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=base_env(env), cwd=self.dir)
        self.out = self.err = ""

    def file(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        try:
            with open(self.file(name)) as f:
                return f.read()
        except OSError:
            return None

    def wait_file(self, name, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.read(name)
            if text:
                return text
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.finish(1)
        raise harness.Fail("the child never wrote %s (lockctl rc %r, stderr %r)"
                           % (name, self.proc.returncode, self.err))

    def finish(self, timeout=15.0):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise harness.Fail("lockctl run did not end within %.1f s" % timeout)
        self.out, self.err = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        return self.proc.returncode

    def pgid(self):
        text = self.read("pgid")
        return int(text) if text and text.strip().isdigit() else None

    def kill(self):
        """Whatever is left: lockctl and the child's group."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        g = self.pgid()
        if g:
            try:
                os.killpg(g, signal.SIGKILL)
            except OSError:
                pass


def group_members(pgid):
    """Live (not zombie) processes of process group pgid: a zombie is dead,
    only not yet reaped by whoever adopted it."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(d))
    return out


def group_gone(pgid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.02)
    return False


def grant_of(ctx, key, **params):
    r = ctx.lockd.request("POST", path(key), params or None)
    return expect_json(r, 201, "acquire of " + key)


# ---------------------------------------------------------------- one-shot commands

@harness.scenario("lockctl: acquire, renew, release and inspect print lockd's JSON and exit 0, 1, 4 and 5",
                  backends=MEMORY)
def test_basic(ctx):
    ld, key = ctx.lockd, ctx.key("ctl")
    g, _ = ctl_json(ld, "acquire", key, "--ttl", "20s", "--owner", "me")
    eq(g["key"], key, "grant key")
    eq(g["holds"], 1, "grant holds")
    check(10000 < g["ttl_ms"] <= 20000, "grant ttl_ms %r for --ttl 20s" % g["ttl_ms"])
    held = expect_held(ctx, key, fence=g["fence"], owner="me")
    check(held["ttl_ms"] > 10000, "the lock's TTL is 20 s")

    e, err = ctl_json(ld, "acquire", key, want=1)
    eq(e["error"]["code"], "lock_held", "second acquire's error on stdout")
    check(err.startswith("lockctl: %s: held by another holder (retry after " % key) and err.count("\n") == 1,
          "second acquire's stderr line: %r" % err)

    r, _ = ctl_json(ld, "renew", key, "--token", g["token"], "--ttl", "40s")
    eq((r["fence"], r["token"]), (g["fence"], g["token"]), "renew keeps fence and token")
    check(r["ttl_ms"] > 30000, "renew --ttl 40s: ttl_ms %r" % r["ttl_ms"])

    e, err = ctl_json(ld, "release", key, "--token", "0" * 32, want=5)
    eq(e["error"]["code"], "token_mismatch", "release with another token")
    check("held under another token" in err, "stderr %r" % err)
    expect_held(ctx, key, fence=g["fence"])

    i, _ = ctl_json(ld, "inspect", key)
    eq((i["held"], i["fence"], i["owner"]), (True, g["fence"], "me"), "inspect")
    check("token" not in i, "inspect shows no token")

    rel, _ = ctl_json(ld, "release", key, "--token", g["token"])
    eq(rel, {"key": key, "released": True, "holds": 0}, "release")
    expect_free(ctx, key)
    for cmd in (["release", key, "--token", g["token"]], ["renew", key, "--token", g["token"]],
                ["inspect", key]):
        e, err = ctl_json(ld, *cmd, want=4)
        eq(e["error"]["code"], "lock_not_found", "%s of a free key" % cmd[0])
        check(err.startswith("lockctl: %s: not held" % key), "stderr %r" % err)
    rc, out, err = ctl(ld, "-q", "acquire", key)
    eq((rc, out, err), (0, "", ""), "acquire -q prints nothing")
    expect_held(ctx, key)


@harness.scenario("lockctl: --format env evals in sh, and renew and release take LOCKD_TOKEN from the environment",
                  backends=MEMORY)
def test_env_format(ctx):
    ld = ctx.lockd
    key = ctx.key("it's a key/with 'quotes' and $dollars")
    script = ('set -e; eval "$(%s --url %s acquire %s --ttl 30s --format env)"; export LOCKD_TOKEN; '
              'printf "%%s\\n" "$LOCKD_KEY" "$LOCKD_TOKEN" "$LOCKD_FENCE" "$LOCKD_TTL_MS" "$LOCKD_EXPIRES_AT"; '
              '%s --url %s renew %s --ttl 50s -q; '
              'eval "$(%s --url %s inspect %s --format env)"; echo "$LOCKD_HELD $LOCKD_TTL_MS"'
              % ((LOCKCTL, url_of(ld), sh_quote(key)) * 3))
    p = subprocess.run(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=base_env(), timeout=20)
    eq(p.returncode, 0, "sh script (stderr %r)" % p.stderr)
    lines = p.stdout.decode().splitlines()
    eq(len(lines), 6, "lines %r" % lines)
    eq(lines[0], key, "LOCKD_KEY")
    held = expect_held(ctx, key, fence=int(lines[2]))
    check(28000 <= int(lines[3]) <= 30000, "LOCKD_TTL_MS %r" % lines[3])
    check(lines[4].endswith("Z") and "T" in lines[4], "LOCKD_EXPIRES_AT %r" % lines[4])
    held_flag, ttl = lines[5].split()
    eq(held_flag, "1", "LOCKD_HELD")
    check(int(ttl) > 40000 and held["ttl_ms"] > 40000, "renewed with LOCKD_TOKEN: ttl %s" % ttl)
    # release with LOCKD_TOKEN from the environment; inspect --format env of a free key
    rc, out, err = ctl(ld, "release", key, "--format", "env", env={"LOCKD_TOKEN": lines[1]})
    eq(rc, 0, "release with LOCKD_TOKEN (stderr %r)" % err)
    check("LOCKD_RELEASED=1" in out.splitlines(), "release env output %r" % out)
    expect_free(ctx, key)
    rc, out, _ = ctl(ld, "inspect", key, "--format", "env")
    eq(rc, 4, "inspect of a free key")
    check("LOCKD_HELD=0" in out.splitlines(), "inspect env of a free key: %r" % out)


@harness.scenario("lockctl: bad command lines and 400s exit 2, an unreachable lockd exits 3, --help exits 0",
                  backends=MEMORY)
def test_usage_and_unavailable(ctx):
    ld, key = ctx.lockd, ctx.key("ctl")
    rc, out, _ = ctl(ld, "--help")
    eq(rc, 0, "--help")
    check("Usage: lockctl" in out and "Examples:" in out and "Exit codes" in out, "help text %r" % out[:200])
    rc, out, _ = ctl(ld, "-V")
    eq((rc, out.startswith("lockctl ")), (0, True), "--version: %r" % out)
    for args, words in ((["acquire", key, "--bogus"], "bogus"),
                        (["acquire", key, "--ttl", "30"], "give a unit, e.g. 30s or 1500ms"),
                        (["acquire", key, "--ttl", "3x"], "unit"),
                        (["frobnicate", key], "unknown command"),
                        (["acquire"], "KEY"),
                        (["renew", key], "LOCKD_TOKEN"),
                        (["inspect", key, key + "2"], "one KEY"),
                        (["acquire", key, key + "2", "--shared"], "one KEY"),
                        (["run", key], "--"),
                        (["acquire", key, "--format", "xml"], "json or env")):
        rc, out, err = ctl(ld, *args)
        eq(rc, 2, "lockctl %r exit code (stderr %r)" % (args, err))
        check(words in err and err.startswith("lockctl: "), "lockctl %r stderr %r lacks %r" % (args, err, words))
    expect_free(ctx, key)
    # lockd's 400: a TTL over its --max-ttl-ms
    e, err = ctl_json(ld, "acquire", key, "--ttl", "1000h", want=2)
    eq(e["error"]["code"], "invalid_parameter", "400 from lockd")
    check("400 invalid_parameter" in err, "stderr %r" % err)
    # durations: 1.5s and 250ms reach lockd as ttl_ms
    g, _ = ctl_json(ld, "acquire", key, "--ttl", "1.5s")
    check(1000 < g["ttl_ms"] <= 1500, "--ttl 1.5s: ttl_ms %r" % g["ttl_ms"])
    release(ctx, key, g["token"])
    # options after the key, and a trailing '/' on the URL
    rc, out, err = ctl(ld, "acquire", key, "--ttl", "250ms", "--url", url_of(ld) + "/", url=False)
    eq(rc, 0, "acquire KEY --ttl --url (stderr %r)" % err)
    check(json.loads(out)["ttl_ms"] <= 250, "--ttl 250ms after the key: %r" % out)
    # nothing listens: exit 3
    port = harness.free_port()
    rc, out, err = ctl(ld, "acquire", key, "--url", "http://127.0.0.1:%d" % port, url=False)
    eq((rc, out), (3, ""), "acquire on a closed port (stderr %r)" % err)
    check(err.startswith("lockctl: %s: cannot reach lockd" % key), "stderr %r" % err)
    # LOCKD_URL from the environment
    rc, out, err = ctl(ld, "inspect", ctx.key("free"), url=False, env={"LOCKD_URL": url_of(ld)})
    eq(rc, 4, "inspect through LOCKD_URL (stderr %r)" % err)


@harness.scenario("lockctl: --idempotent retries an acquire that could not connect until lockd listens; "
                  "without it the failure is final", backends=MEMORY)
def test_idempotent(ctx):
    key = ctx.key("ctl")
    ld = ctx.new_lockd(start=False)
    t0 = time.monotonic()
    rc, _, err = ctl(ld, "acquire", key, "--wait", "3s")
    eq(rc, 3, "acquire without --idempotent on a closed port (stderr %r)" % err)
    check(time.monotonic() - t0 < 1.5, "no retry without --idempotent")
    p = subprocess.Popen([LOCKCTL, "--url", url_of(ld), "acquire", key, "--idempotent",
                          "--wait", "4s", "--ttl", "20s"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env())
    try:
        time.sleep(0.6)
        ld.start()
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    eq(p.returncode, 0, "--idempotent acquire once lockd listens (stderr %r)" % err)
    g = json.loads(out)
    r = ld.request("GET", path(key))
    eq(expect_json(r, 200, "inspect")["fence"], g["fence"], "the grant lockctl printed holds the key")


@harness.scenario("lockctl: while the store is down lockd answers a try-once acquire 503: it exits 3 at once, "
                  "and with --idempotent retries (Retry-After) until the store is back and prints the grant",
                  backends=["redis"])
def test_idempotent_503(ctx):
    key = ctx.key("ctl503")
    ctx.server.kill9()
    p = None
    try:
        t0 = time.monotonic()
        # try-once (no --wait): lockd answers 503 at once (a waiting acquire
        # would be retried by lockd itself until its wait ends)
        rc, out, err = ctl(ctx.lockd, "acquire", key)
        eq(rc, 3, "acquire answered 503 without --idempotent (stdout %r, stderr %r)" % (out, err))
        check(time.monotonic() - t0 < 3.0, "no retry without --idempotent: %.1f s" % (time.monotonic() - t0))
        check(json.loads(out)["error"]["code"] == "backend_unavailable", "the 503's body on stdout: %r" % out)
        p = subprocess.Popen([LOCKCTL, "--url", url_of(ctx.lockd), "acquire", key, "--idempotent",
                              "--timeout", "10s", "--ttl", "20s"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env())
        time.sleep(1.5)
        if p.poll() is not None:
            raise harness.Fail("--idempotent gave up while the store was down: %r" % (p.communicate(),))
        ctx.server.restart()
        out, err = p.communicate(timeout=15)
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.communicate()
        ensure_server_up(ctx)
    eq(p.returncode, 0, "--idempotent acquire once the store is back (stderr %r)" % err)
    g = json.loads(out)
    eq(expect_held(ctx, key)["fence"], g["fence"], "the grant lockctl printed holds the key")


@harness.scenario("lockctl: without the right --auth-token-file lockd's auth exits 6, with it 0",
                  backends=MEMORY)
def test_auth(ctx):
    secret = os.path.join(ctx.tmpdir, "ctl-secret")
    wrong = os.path.join(ctx.tmpdir, "ctl-wrong")
    with open(secret, "w") as f:
        f.write("s3cr3t-token\nsecond line ignored\n")
    with open(wrong, "w") as f:
        f.write("not-it\n")
    ld = ctx.new_lockd(args=["--auth-token-file", secret])
    key = ctx.key("ctl")
    for extra, env in (([], None), (["--auth-token-file", wrong], None)):
        e, err = ctl_json(ld, "acquire", key, *extra, env=env, want=6)
        eq(e["error"]["code"], "unauthorized", "acquire %r" % extra)
        check("denied" in err, "stderr %r" % err)
    g, _ = ctl_json(ld, "acquire", key, "--auth-token-file", secret)
    _, _ = ctl_json(ld, "release", key, "--token", g["token"], env={"LOCKD_AUTH_TOKEN_FILE": secret})


@harness.scenario("lockctl: --shared and --limit make a semaphore; a full one or another limit exits 1",
                  backends=MEMORY)
def test_shared(ctx):
    ld, key = ctx.lockd, ctx.key("ctl")
    a, _ = ctl_json(ld, "acquire", key, "--limit", "2")
    b, _ = ctl_json(ld, "acquire", key, "--shared", "--limit", "2")
    eq((a["mode"], b["mode"], a.get("limit"), b.get("limit")), ("shared", "shared", 2, 2), "two shared holds")
    check(b["fence"] > a["fence"] and a["token"] != b["token"], "each holder its own token and fence")
    e, _ = ctl_json(ld, "acquire", key, "--mode", "shared", "--limit", "2", want=1)
    eq(e["error"]["code"], "lock_held", "the third of 2 permits")
    e, err = ctl_json(ld, "acquire", key, "--limit", "3", want=1)
    eq(e["error"]["code"], "limit_mismatch", "another limit")
    e, _ = ctl_json(ld, "acquire", key, want=1)
    eq(e["error"]["code"], "lock_held", "exclusive over shared holders")
    i, _ = ctl_json(ld, "inspect", key)
    eq((i["mode"], i["holder_count"]), ("shared", 2), "inspect")
    r, _ = ctl_json(ld, "acquire", ctx.key("rw"), "--shared")
    eq((r["mode"], "limit" in r), ("shared", False), "--shared without a limit")


@harness.scenario("lockctl: re-entry with --token counts holds; release gives one back, --all every one",
                  backends=MEMORY)
def test_reentry(ctx):
    ld, key = ctx.lockd, ctx.key("ctl")
    g, _ = ctl_json(ld, "acquire", key)
    for n in (2, 3):
        r, _ = ctl_json(ld, "acquire", key, "--token", g["token"])
        eq((r["holds"], r["fence"], r["token"]), (n, g["fence"], g["token"]), "re-entry %d" % n)
    r, _ = ctl_json(ld, "release", key, "--token", g["token"])
    eq(r, {"key": key, "released": False, "holds": 2}, "release of one hold")
    r, _ = ctl_json(ld, "release", key, "--token", g["token"], "--all")
    eq(r, {"key": key, "released": True, "holds": 0}, "release --all")
    e, _ = ctl_json(ld, "acquire", key, "--token", g["token"], want=4)
    eq(e["error"]["code"], "lock_not_found", "re-entry of a free key")
    h = grant_of(ctx, key)
    e, _ = ctl_json(ld, "acquire", key, "--token", g["token"], want=5)
    eq(e["error"]["code"], "token_mismatch", "re-entry of a key held by another token")
    rc, _, err = ctl(ld, "acquire", key, "--token", g["token"], "--wait", "1s")
    eq(rc, 2, "re-entry with --wait is a usage error (stderr %r)" % err)
    release(ctx, key, h["token"])


@harness.scenario("lockctl: several keys are acquired, renewed and released all or nothing",
                  backends=MEMORY)
def test_multi(ctx):
    ld = ctx.lockd
    a, b, c = ctx.key("ma"), ctx.key("mb/with space"), ctx.key("mc")
    g, _ = ctl_json(ld, "acquire", a, b, "--ttl", "20s", "--owner", "multi")
    eq(g["keys"], [a, b], "keys in order")
    eq(sorted(g["fences"]), sorted([a, b]), "a fence per key")
    expect_held(ctx, b, fence=g["fences"][b], owner="multi")
    e, err = ctl_json(ld, "acquire", c, b, want=1)
    eq(e["error"].get("held"), [b], "held names the held key")
    check(err.startswith("lockctl: %s: held by another holder" % b), "stderr %r" % err)
    expect_free(ctx, c, "the free key of a refused multi-key acquire")
    rc, out, err = ctl(ld, "acquire", a, c, "--format", "env")
    eq(rc, 1, "held, in env format")
    r, _ = ctl_json(ld, "renew", a, b, "--token", g["token"], "--ttl", "40s")
    check(r["ttl_ms"] > 30000, "multi renew ttl %r" % r["ttl_ms"])
    e, _ = ctl_json(ld, "renew", a, c, "--token", g["token"], want=4)
    eq(e["error"].get("key"), c, "multi renew names the key not held")
    r, _ = ctl_json(ld, "release", a, b, c, "--token", g["token"])
    eq(r, {"released": [a, b], "not_held": [c]}, "multi release")
    for k in (a, b, c):
        expect_free(ctx, k)
    rc, out, err = ctl(ld, "acquire", a, b, "--format", "env")
    eq(rc, 0, "multi acquire env (stderr %r)" % err)
    env = dict(line.split("=", 1) for line in out.splitlines())
    eq(json.loads(env["LOCKD_KEYS"].strip("'")), [a, b], "LOCKD_KEYS")
    check(set(json.loads(env["LOCKD_FENCES"].strip("'"))) == {a, b}, "LOCKD_FENCES %r" % env["LOCKD_FENCES"])


@harness.scenario("lockctl: keys with '/', spaces, '%', '+' and UTF-8 reach lockd byte for byte",
                  backends=MEMORY)
def test_odd_keys(ctx):
    ld = ctx.lockd
    for key in (ctx.key("a/b/c"), ctx.key("with space+plus%25"), ctx.key("zürich/€/日本")):
        g, _ = ctl_json(ld, "acquire", key)
        eq(g["key"], key, "grant key")
        expect_held(ctx, key, fence=g["fence"])
        i, _ = ctl_json(ld, "inspect", key)
        eq(i["key"], key, "inspect key")
        ctl_json(ld, "release", key, "--token", g["token"])
        expect_free(ctx, key)


# ---------------------------------------------------------------- run

@harness.scenario("lockctl: run gives the child LOCKD_KEY, LOCKD_TOKEN and LOCKD_FENCE of its lock, "
                  "and releases it when the child exits", backends=MEMORY)
def test_run_env(ctx):
    ld, key = ctx.lockd, ctx.key("run/env key")
    run = Run(ctx, ld, [key, "--ttl", "10s"],
              'printf "%s\\n%s\\n%s\\n%s\\n%s\\n" "$LOCKD_KEY" "$LOCKD_TOKEN" "$LOCKD_FENCE" "$LOCKD_TTL_MS" '
              '"$LOCKD_URL" > env.tmp; mv env.tmp env; '
              'i=0; while [ ! -e go ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done')
    try:
        lines = run.wait_file("env").splitlines()
        eq(lines[0], key, "LOCKD_KEY")
        held = expect_held(ctx, key, fence=int(lines[2]))
        check(len(lines[1]) == 32, "LOCKD_TOKEN %r" % lines[1])
        check(int(lines[3]) <= 10000 and int(lines[3]) > 9000, "LOCKD_TTL_MS %r" % lines[3])
        eq(lines[4], url_of(ld), "LOCKD_URL")
        fds = sorted(os.listdir("/proc/%d/fd" % run.pgid()))
        eq(fds, ["0", "1", "2"], "the child's fds: none of lockctl's")
        check(held["ttl_ms"] > 5000, "held")
        # the child's token is the lock's: a renew with it works
        r = ld.request("PUT", path(key), headers={"Lock-Token": lines[1]})
        expect_json(r, 200, "renew with the child's LOCKD_TOKEN")
        open(run.file("go"), "w").close()
        eq(run.finish(), 0, "lockctl run exit code (stderr %r)" % run.err)
        eq(run.out, "", "run prints nothing of its own on stdout")
        expect_free(ctx, key, "after the child exited")
    finally:
        run.kill()


@harness.scenario("lockctl: run on several keys holds them all with one token and gives the child "
                  "LOCKD_KEYS and LOCKD_FENCES", backends=MEMORY)
def test_run_multi(ctx):
    ld, a, b = ctx.lockd, ctx.key("run-a"), ctx.key("run-b")
    run = Run(ctx, ld, [a, b, "--ttl", "1s"],
              'printf "%s\\n%s\\n" "$LOCKD_KEYS" "$LOCKD_FENCES" > env.tmp; mv env.tmp env; sleep 1.5')
    try:
        keys, fences = run.wait_file("env").splitlines()
        eq(json.loads(keys), [a, b], "LOCKD_KEYS")
        fences = json.loads(fences)
        eq(run.finish(), 0, "exit code (stderr %r)" % run.err)
        check(run.proc.returncode == 0, "renewed through 1.5 s")
    finally:
        run.kill()
    for k in (a, b):
        expect_free(ctx, k, "after the child exited")
    check(set(fences) == {a, b}, "LOCKD_FENCES %r" % fences)


@harness.scenario("lockctl: run renews a 1 s lock through a 5 s child: still held at the end, same fence",
                  backends=MEMORY)
def test_run_renews(ctx):
    ld, key = ctx.lockd, ctx.key("run")
    run = Run(ctx, ld, [key, "--ttl", "1s"], 'echo "$LOCKD_FENCE" > fence; sleep 5')
    try:
        fence = int(run.wait_file("fence"))
        harness_t = run.t0 + 4.7
        while time.monotonic() < harness_t:
            time.sleep(0.05)
        held = expect_held(ctx, key, fence=fence, what="inspect at 4.7 s of a 1 s TTL")
        check(held["ttl_ms"] <= 1000, "ttl_ms %r of a 1 s lock" % held["ttl_ms"])
        eq(run.finish(), 0, "exit code (stderr %r)" % run.err)
        eq(run.err, "", "stderr")
        expect_free(ctx, key)
    finally:
        run.kill()


def lose_behind_back(ctx, ld, key, script, grace, want_term):
    run = Run(ctx, ld, [key, "--ttl", "1s", "--grace", grace], script)
    try:
        token = run.wait_file("token").strip()
        pgid = run.pgid()
        t_rel = time.monotonic()
        r = ld.request("DELETE", path(key), headers={"Lock-Token": token})
        expect_json(r, 200, "release behind run's back")
        rc = run.finish(10)
        took = time.monotonic() - t_rel
        eq(rc, 75, "exit code after the lock was lost (stderr %r)" % run.err)
        check("lockctl: lost the lock on %s:" % key in run.err and "stopping the command" in run.err,
              "stderr %r" % run.err)
        check(group_gone(pgid, 1.0), "the child's process group is gone")
        eq(run.read("term") is not None, want_term, "the child trapped SIGTERM")
        return took
    finally:
        run.kill()


@harness.scenario("lockctl: run stops the child with SIGTERM when its lock is released behind its back, exit 75",
                  backends=MEMORY)
def test_run_lost_term(ctx):
    took = lose_behind_back(ctx, ctx.lockd, ctx.key("run"),
                            'echo "$LOCKD_TOKEN" > token; trap "echo term > term; exit 0" TERM; '
                            'while :; do sleep 0.05; done', "2s", True)
    check(took < 1.0 + 1.0, "stopped %.2f s after the release (renews every 1/3 s, then SIGTERM)" % took)


@harness.scenario("lockctl: run SIGKILLs a child that ignores SIGTERM after --grace", backends=MEMORY)
def test_run_lost_kill(ctx):
    took = lose_behind_back(ctx, ctx.lockd, ctx.key("run"),
                            'echo "$LOCKD_TOKEN" > token; trap "" TERM; sleep 30', "1s", False)
    check(1.0 <= took < 1.0 + 0.4 + 1.0, "killed %.2f s after the release, want --grace 1s after the loss" % took)


@harness.scenario("lockctl: run counts the lock lost when lockd stops answering past the TTL and stops the "
                  "child, exit 75", backends=SHARED)
def test_run_lockd_stopped(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("run")
    run = Run(ctx, ld, [key, "--ttl", "1s", "--grace", "1s"],
              'echo "$LOCKD_FENCE" > fence; trap "echo term > term; exit 0" TERM; while :; do sleep 0.05; done')
    try:
        run.wait_file("fence")
        ld.signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            rc = run.finish(10)
            took = time.monotonic() - t_stop
        finally:
            ld.signal(signal.SIGCONT)
        eq(rc, 75, "exit code (stderr %r)" % run.err)
        check("lockd unreachable and the TTL is about to pass" in run.err, "stderr %r" % run.err)
        check(run.read("term") is not None, "the child got SIGTERM")
        check(took < 1.0 + 1.0, "stopped %.2f s after lockd stopped (TTL 1 s)" % took)
    finally:
        run.kill()


@harness.scenario("lockctl: run renews through a kill -9 and restart of lockd: on a persistent store it keeps "
                  "the lock (same fence), on memory:// it finds it gone and exits 75", backends=SHARED)
def test_run_lockd_restart(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("run")
    run = Run(ctx, ld, [key, "--ttl", "3s", "--grace", "1s"],
              'echo "$LOCKD_FENCE" > fence; sleep 2.5')
    try:
        fence = int(run.wait_file("fence"))
        ld.kill9()
        time.sleep(1.2)  # the renew due at 1 s finds nobody listening: retried
        ld.start()
        if ctx.backend == "memory":
            eq(run.finish(10), 75, "exit code once the restarted lockd forgot the lock (stderr %r)" % run.err)
            check("lost the lock on %s: lockd answered 404 lock_not_found" % key in run.err, "stderr %r" % run.err)
            return
        r = ld.request("GET", path(key))
        eq(expect_json(r, 200, "inspect after the restart")["fence"], fence, "the same grant")
        eq(run.finish(10), 0, "exit code (stderr %r)" % run.err)
        eq(run.err, "", "stderr")
        r = ld.request("GET", path(key))
        eq(r.status, 404, "released through the restarted instance: %r" % r)
    finally:
        run.kill()


@harness.scenario("lockctl: SIGTERM to run goes to the child's group; the lock is released after it exits",
                  backends=MEMORY)
def test_run_forwards(ctx):
    ld, key = ctx.lockd, ctx.key("run")
    run = Run(ctx, ld, [key, "--ttl", "5s"],
              'trap "echo term > term; exit 7" TERM; echo up > up; while :; do sleep 0.05; done')
    try:
        run.wait_file("up")
        expect_held(ctx, key)
        run.proc.send_signal(signal.SIGTERM)
        eq(run.finish(5), 7, "exit code: the child's (stderr %r)" % run.err)
        check(run.read("term") is not None, "the child got the SIGTERM")
        expect_free(ctx, key, "after SIGTERM to lockctl")
    finally:
        run.kill()


def free_within(ctx, key, timeout):
    """Whether GET /locks/key answers 404 within timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        if inspect(ctx, key).status == 404:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def term_tries(ctx, port, n, extra, prepare, fire):
    """n tries of lockctl run --ttl 20s KEY extra -- (touch a marker; sleep
    30) through 127.0.0.1:port, each on a key of its own: prepare(key)
    before lockctl starts, fire(key, proc, t0, i) to send it SIGTERM.
    Returns (bad, outcomes): the tries that left the key held for over 1 s,
    or exited other than 143 (but for a death by SIGTERM before lockctl
    could start the command), as (try, exit code, command started, key
    free, stderr's end); and how many tries ended how."""
    bad, outcomes = [], {}
    for i in range(n):
        key = ctx.key("run/term")
        marker = os.path.join(ctx.tmpdir, "term-%s" % key.replace("/", "_"))
        prepare(key)
        cmd = ([LOCKCTL, "--url", "http://127.0.0.1:%d" % port, "run", key, "--ttl", "20s"] + list(extra)
               + ["--", "sh", "-c", 'touch "$0"; exec sleep 30', marker])
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=base_env())
        try:
            fire(key, p, t0, i)
            try:
                _, err = p.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                raise harness.Fail("lockctl run still runs 5 s after SIGTERM (try %d)" % i)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        free, started = free_within(ctx, key, 1.0), os.path.exists(marker)
        err = err.decode("utf-8", "replace")
        how = "%s, %s" % (p.returncode, "started" if started else
                          "released a grant" if "releasing the lock" in err else "not started")
        outcomes[how] = outcomes.get(how, 0) + 1
        # -15: killed before lockctl blocked SIGTERM (it was still loading)
        if not free or not (p.returncode == 143 or (p.returncode == -15 and not started)):
            bad.append((i, p.returncode, started, free, err.strip()[-160:]))
    return bad, outcomes


@harness.scenario("lockctl: SIGTERM to run at random moments around its acquire (-5..+35 ms from when its "
                  "request goes out; the 201 held back 15 ms on the way) exits 143 and leaves the key free",
                  backends=MEMORY)
def test_run_term_during_acquire(ctx):
    from delayproxy import DelayProxy
    rng = random.Random()
    with DelayProxy(ctx.lockd.port) as proxy:
        def prepare(key):
            proxy.hold_replies(0.015, when=lambda chunk: chunk.startswith(b"POST /locks/"))

        # how long lockctl takes from its start to its request (it loads
        # libcurl first: tens of ms), measured as the median of 3
        starts = []
        for _ in range(3):
            key = ctx.key("run/term")
            prepare(key)
            t0 = time.monotonic()
            rc, _, err = ctl(ctx.lockd, "--url", "http://127.0.0.1:%d" % proxy.port, "run", key, "--", "true",
                             url=False)
            eq(rc, 0, "lockctl run through the proxy (stderr %r)" % err)
            check(proxy.wait_triggered(1), "the proxy saw no acquire")
            starts.append(proxy.triggered_at - t0)
        start = sorted(starts)[1]
        offsets = []

        def fire(key, p, t0, i):
            # one try in each 2 ms slice of -5..+35 ms: lockctl still
            # loading, its request on the way, the 201 held, the command
            # starting
            offsets.append(start - 0.005 + (i + rng.random()) * 0.002)
            time.sleep(max(0.0, t0 + offsets[-1] - time.monotonic()))
            p.send_signal(signal.SIGTERM)

        bad, outcomes = term_tries(ctx, proxy.port, 20, [], prepare, fire)
    harness.log("lockctl starts its request %.1f ms after exec; 20 SIGTERMs: %r" % (start * 1000, outcomes))
    check(not bad, "%d of 20 tries (try, exit code, started, free, stderr) at %r ms after exec (the request "
          "%.1f ms): %r" % (len(bad), [round(o * 1000, 1) for o in offsets], start * 1000, bad))


def waiters(ctx):
    return metric(metrics(ctx), "lockd_waiters")


@harness.scenario("lockctl: SIGTERM to run while it waits, at random moments -3..+3 ms around the release "
                  "that grants it, exits 143 and leaves the key free", backends=MEMORY)
def test_run_term_while_waiting(ctx):
    rng = random.Random()
    grants = {}

    def prepare(key):
        deadline = time.monotonic() + 5
        while waiters(ctx) > 0:  # the last try's waiter is gone
            check(time.monotonic() < deadline, "a waiter of an earlier try is still queued")
            time.sleep(0.01)
        grants[key] = grant_of(ctx, key, ttl_ms=20000)

    def fire(key, p, t0, i):
        deadline = time.monotonic() + 5
        while waiters(ctx) < 1:
            check(time.monotonic() < deadline and p.poll() is None, "lockctl run never queued")
            time.sleep(0.01)
        d = rng.uniform(-0.003, 0.003)
        acts = [(0.0, lambda: release(ctx, key, grants[key]["token"])),
                (d, lambda: p.send_signal(signal.SIGTERM))]
        t = time.monotonic() + 0.01
        for at, act in sorted(acts, key=lambda x: x[0]):
            time.sleep(max(0.0, t + at - time.monotonic()))
            act()

    bad, outcomes = term_tries(ctx, ctx.lockd.port, 10, ["--wait", "10s"], prepare, fire)
    harness.log("10 SIGTERMs to a waiting run: %r" % outcomes)
    check(not bad, "%d of 10 tries (try, exit code, started, free, stderr): %r" % (len(bad), bad))


def read_pty(fd, want, deadline):
    """What the terminal shows until the regex want matches it (or the
    deadline)."""
    out = b""
    while not re.search(want, out) and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: every slave end is closed
                break
            if not chunk:
                break
            out += chunk
    return out


def job_control_shell(exe, argv, env):
    """What an interactive shell does for a foreground job: exe in a process
    group of its own, given the terminal, waited for (a stop counts as a
    failure: 98), then the terminal taken back. Returns the job's exit
    code."""
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    job = os.fork()
    if job == 0:
        os.setpgid(0, 0)
        os.tcsetpgrp(0, os.getpid())
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        os.execve(exe, argv, env)
    # As bash's make_child: both sides set the group, so that neither order
    # matters; the job may already have exec'd (EACCES) or ended (ESRCH),
    # having set it itself. Only the job gives itself the terminal: a late
    # tcsetpgrp here could take it back from what the job handed it to.
    try:
        os.setpgid(job, job)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.ESRCH):
            raise
    _, st = os.waitpid(job, os.WUNTRACED)
    os.tcsetpgrp(0, os.getpgrp())
    if os.WIFSTOPPED(st):
        os.killpg(job, signal.SIGKILL)
        return 98
    return os.waitstatus_to_exitcode(st)


@harness.scenario("lockctl: run on a terminal hands the foreground to the child, which reads from it, "
                  "and takes it back", backends=MEMORY)
def test_run_terminal(ctx):
    ld, key = ctx.lockd, ctx.key("run")
    script = 'set -- $(cat /proc/$$/stat); echo "pg=$5 tpg=$8"; read x; echo "got $x"'
    argv = [LOCKCTL, "--url", url_of(ld), "run", key, "--", "sh", "-c", script]
    env = base_env()
    pid, fd = pty.fork()
    if pid == 0:  # the session leader on a new terminal, as a login shell would be
        try:
            os._exit(job_control_shell(LOCKCTL, argv, env))
        finally:
            os._exit(99)
    status = None
    try:
        deadline = time.monotonic() + 10
        out = read_pty(fd, rb"tpg=\d+\r?\n", deadline)
        m = re.search(rb"pg=(\d+) tpg=(\d+)", out)
        if m is None:
            p, st = os.waitpid(pid, os.WNOHANG)
            if p == pid:
                status = st
        check(m is not None, "the child's line on the terminal: %r (the shell: %s)"
              % (out, "exit %d" % os.waitstatus_to_exitcode(status) if status is not None else "running"))
        eq(m.group(1), m.group(2), "the child's group is the terminal's foreground group (terminal showed %r)" % out)
        os.write(fd, b"hello\n")
        out = read_pty(fd, rb"got hello", deadline)
        check(b"got hello" in out, "the child read the terminal: %r" % out)
        while time.monotonic() < deadline and status is None:
            p, st = os.waitpid(pid, os.WNOHANG)
            if p == pid:
                status = st
            else:
                time.sleep(0.02)
        check(status is not None, "lockctl ended (it took the terminal back without being stopped)")
        eq(os.waitstatus_to_exitcode(status), 0, "lockctl's exit code")
        expect_free(ctx, key)
    finally:
        if status is None:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
        os.close(fd)


@harness.scenario("lockctl: run passes exit codes 0, 3 and 42 and a death by SIGKILL (137) through; "
                  "127 for a missing command", backends=MEMORY)
def test_run_exit_codes(ctx):
    ld, key = ctx.lockd, ctx.key("run")
    for script, want in (("exit 0", 0), ("exit 3", 3), ("exit 42", 42), ("kill -9 $$", 137)):
        run = Run(ctx, ld, [key], script)
        try:
            eq(run.finish(), want, "exit code of %r (stderr %r)" % (script, run.err))
        finally:
            run.kill()
        expect_free(ctx, key, "after %r" % script)
    rc, _, err = ctl(ld, "run", key, "--", "/nonexistent/lockctl-no-such-command")
    eq(rc, 127, "missing command (stderr %r)" % err)
    expect_free(ctx, key, "after a missing command")


def pid_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@harness.scenario("lockctl: what the command leaves running in its group is stopped (SIGTERM, SIGKILL after "
                  "--grace) while the lock is still held, and only then released", backends=MEMORY)
def test_run_leftovers(ctx):
    ld, key = ctx.lockd, ctx.key("run/left")
    pidfile = os.path.join(ctx.tmpdir, "left-%s" % key.replace("/", "_"))
    # a background job that ends on SIGTERM
    rc, _, err = ctl(ld, "run", key, "--grace", "5s", "--", "sh", "-c",
                     'sleep 30 & echo $! > "$0"; exit 7', pidfile)
    eq(rc, 7, "the command's status (stderr %r)" % err)
    check("left processes in its group" in err, "stderr %r" % err)
    check(pid_gone(int(open(pidfile).read())), "the background sleep outlived lockctl")
    expect_free(ctx, key)
    # one that ignores SIGTERM: SIGKILL after --grace, the lock held until then
    os.unlink(pidfile)
    p = subprocess.Popen([LOCKCTL, "--url", url_of(ld), "run", key, "--grace", "1500ms", "--", "sh", "-c",
                          'trap "" TERM; sleep 30 & echo $! > "$0.tmp"; mv "$0.tmp" "$0"; exit 0', pidfile],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env())
    try:
        deadline = time.monotonic() + 5
        while not os.path.exists(pidfile) and time.monotonic() < deadline:
            time.sleep(0.02)
        t0 = time.monotonic()
        time.sleep(0.5)
        check(p.poll() is None, "lockctl exited before the SIGTERM-proof leftover was gone")
        expect_held(ctx, key)
        out, err = p.communicate(timeout=10)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    eq(p.returncode, 0, "exit code (stderr %r)" % err)
    check(1.0 <= took < 4.0, "SIGKILL after the 1.5 s grace: lockctl ended %.2f s after the command" % took)
    check(pid_gone(int(open(pidfile).read())), "the SIGTERM-proof sleep outlived lockctl")
    expect_free(ctx, key)


@harness.scenario("lockctl: run exits --exit-held without starting the child when the key stays held past --wait",
                  backends=MEMORY)
def test_run_held(ctx):
    ld, key = ctx.lockd, ctx.key("run")
    g = grant_of(ctx, key, ttl_ms=20000)
    marker = os.path.join(ctx.tmpdir, "ctl-started-%s" % key.replace("/", "_"))
    t0 = time.monotonic()
    rc, _, err = ctl(ld, "run", key, "--wait", "300ms", "--", "touch", marker)
    took = time.monotonic() - t0
    eq(rc, 1, "exit code (stderr %r)" % err)
    check(0.25 <= took < 2.0, "answered after the 300 ms wait: %.2f s" % took)
    check("held by another holder" in err, "stderr %r" % err)
    rc, _, err = ctl(ld, "run", key, "--exit-held", "9", "--", "touch", marker)
    eq(rc, 9, "--exit-held 9 (stderr %r)" % err)
    # 0, as a cron job that treats "someone else has it" as success uses
    rc, _, err = ctl(ld, "run", key, "--exit-held", "0", "--", "touch", marker)
    eq(rc, 0, "--exit-held 0 (stderr %r)" % err)
    check(not os.path.exists(marker), "the child never started")
    expect_held(ctx, key, fence=g["fence"])


@harness.scenario("lockctl: run's lock has a 15 s TTL unless --ttl says otherwise", backends=MEMORY)
def test_run_default_ttl(ctx):
    ld, key = ctx.lockd, ctx.key("run/ttl")
    rc, out, err = ctl(ld, "run", key, "--", "sh", "-c", 'echo "$LOCKD_TTL_MS"')
    eq(rc, 0, "exit code (stderr %r)" % err)
    ttl = int(out.strip())
    check(14000 < ttl <= 15000, "LOCKD_TTL_MS %d, want about 15000" % ttl)


@harness.scenario("lockctl: two runs with --wait on one key (through two lockd instances on a shared store) "
                  "never overlap, and both run", backends=SHARED)
def test_run_overlap(ctx):
    lds = [ctx.lockd, ctx.lockd if ctx.backend == "memory" else ctx.new_lockd()]
    key = ctx.key("run")
    log = os.path.join(ctx.tmpdir, "ctl-overlap-%s.log" % key)
    script = ('for i in 1 2; do echo "start $(date +%%s.%%N) $$" >> %s; sleep 0.4; '
              'echo "end $(date +%%s.%%N) $$" >> %s; done' % (sh_quote(log), sh_quote(log)))
    runs = [Run(ctx, ld, [key, "--wait", "10s", "--ttl", "2s"], script) for ld in lds]
    try:
        for r in runs:
            eq(r.finish(15), 0, "exit code (stderr %r)" % r.err)
        with open(log) as f:
            events = [line.split() for line in f]
        eq(len(events), 8, "events %r" % events)
        owners = [e[2] for e in events]
        eq(len(set(owners)), 2, "both children ran")
        # every start..end pair belongs to one child, none interleaved
        for i in range(0, 8, 4):
            block = events[i:i + 4]
            eq([e[0] for e in block], ["start", "end", "start", "end"], "block %r" % block)
            eq(len({e[2] for e in block}), 1, "one child per block: %r" % block)
        times = [float(e[1]) for e in events]
        eq(times, sorted(times), "events in order")
        expect_free(ctx, key)
    finally:
        for r in runs:
            r.kill()

"""tests/e2e/test_secrets.py - store passwords (issue 18): they reach the
store from the URL, from ?password_file= or from LOCKD_BACKEND_PASSWORD,
and lockd never shows them. A distinctive password is looked for in every
place lockd writes text: the output of a refused start (bad URL, bad
option, unknown scheme, a password given twice, a missing file), the log
of a running lockd at --log-level debug while its store is unreachable,
goes away and comes back, /readyz, /metrics, --help, --version and
--backends with the URL in the environment. A Redis ACL user limited to
lockd's keys, channel and commands runs every kind of call.

lockd's own command line (/proc/PID/cmdline, ps) shows a password written
into the --backend URL: that is out of lockd's hands, hence password_file
and LOCKD_BACKEND_PASSWORD.

Scenarios that need no store of the suite's run on "memory" (they start
lockd on URLs of other stores that are down or refused); those that need a
Redis with a password start one of their own."""

import os
import secrets
import socket
import subprocess
import time

import harness
from harness import check, eq
from multi import acquire, path, release, renew, wait_ready, wait_until, wake_by_release
from server_redis import REDIS_SERVER, RedisServer, _read_reply

# the one password every scenario hunts for: unique to this run
PW = "hunter2-" + secrets.token_hex(6)
# what lockd's scripts and connections run on Redis: the minimal ACL of a
# lockd user on redis:// (prefix lockd:); redis+sentinel adds +role,
# redis+cluster +cluster|slots +asking, redlock +info +config|get,
# min_replicas +wait, a /db in the URL +select
ACL_COMMANDS = ("-@all +ping +time +subscribe +fcall +function|load +evalsha +eval +script|load "
                "+get +set +del +exists +incr +publish +pexpire +pexpireat +pttl "
                "+hget +hmget +hset +hdel +hexists +hincrby +hgetall +hscan "
                "+lindex +llen +lpop +lpos +lrange +lrem +rpush "
                "+zadd +zcard +zcount +zrange +zrangebylex +zrangebyscore +zrem +zscore")


def resp(port, commands, password=None, timeout=2.0):
    """commands (lists of str) on one connection, after AUTH password when
    given; their replies (RuntimeError for an error reply)."""
    if password is not None:
        commands = [["AUTH", password]] + list(commands)
    out = b""
    for args in commands:
        out += b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(out)
        with s.makefile("rb") as f:
            replies = [_read_reply(f) for _ in commands]
    return replies[1:] if password is not None else replies


class AuthRedis(RedisServer):
    """A redis-server whose default user needs PW (requirepass), on the
    same port and data across restart()."""

    def persist_args(self):
        return super().persist_args() + ["--requirepass", PW]

    def start(self):
        cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
               "--dir", self.dir, "--daemonize", "no", "--save", ""] + \
            self.persist_args() + ["--logfile", self.log_path]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if resp(self.port, [["PING"]], PW, timeout=0.5) == ["PONG"]:
                    self.url = "redis://127.0.0.1:%d" % self.port
                    return self
            except (OSError, harness.Fail):
                pass
            time.sleep(0.05)
        self.kill9()
        raise harness.Fail("redis-server with requirepass did not answer on %d" % self.port)

    def command(self, *args):
        return resp(self.port, [list(args)], PW)[0]


def secret_file(ctx, text, name="pw"):
    p = os.path.join(ctx.tmpdir, "%s-%s" % (name, secrets.token_hex(4)))
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, 0o600)
    return p


def no_password(text, where):
    check(PW not in text, "the password shows in %s: %s" % (where, text[-3000:]))


def run_lockd(args, env=None, timeout=20):
    """lockd run to its end (a refused start, --help): exit code and its
    stdout + stderr."""
    full = dict(os.environ)
    full.pop("LOCKD_BACKEND", None)
    full.pop("LOCKD_BACKEND_PASSWORD", None)
    full.update(env or {})
    p = subprocess.run([harness.LOCKD_BIN] + list(args), env=full, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def refused(url, what, env=None):
    """lockd on url must stop with exit 2 and say why, without PW."""
    port = harness.free_port()
    rc, out = run_lockd(["--listen", "127.0.0.1:%d" % port, "--backend", url,
                         "--log-level", "debug"], env)
    eq(rc, 2, "exit code of a start on %s (%s): %s" % (what, url, out))
    check(out.strip() != "", "a refused start (%s) says why" % what)
    no_password(out, "the refused start on %s" % what)
    return out


def served_text(ld):
    """Everything lockd answers without a credential: /readyz, /healthz,
    /metrics, an acquire (503 when the store is down)."""
    out = []
    for p in ("/readyz", "/healthz", "/metrics"):
        r = ld.request("GET", p, timeout=10)
        out.append("%s %d %s" % (p, r.status, r.text))
    r = ld.request("POST", path("secret-probe"), {"ttl_ms": 1000}, timeout=10)
    out.append("acquire %d %s" % (r.status, r.text))
    return "\n".join(out)


def up_or_gone(ld, timeout=15):
    """Wait until ld listens (True) or has exited (False): a refused URL
    ends lockd at once."""
    return wait_until(lambda: not ld.alive() or harness.wait_port(ld.port, 0.2), timeout) \
        and ld.alive()


def down_port():
    """A loopback port nobody listens on."""
    return harness.free_port()


# ---- refused starts ----

M = ["memory"]  # needs no store of the suite's


@harness.scenario("secrets: a refused start on any store URL never prints its password", backends=M)
def refused_starts(ctx):
    f = secret_file(ctx, "other\n")
    p = down_port()
    cases = [
        ("redis://:%s@127.0.0.1:%d?bogus=1" % (PW, p), "redis, unknown option"),
        ("redis://user:%s@127.0.0.1:99999" % PW, "redis, bad port"),
        ("redis://:%s@127.0.0.1:%d?password_file=%s" % (PW, p, f), "redis, password twice"),
        ("redis://127.0.0.1:%d?sentinel_password=%s" % (p, PW), "redis, sentinel option"),
        ("redis+sentinel://127.0.0.1:%d/m?sentinel_password=%s&sentinel_password_file=%s"
         % (p, PW, f), "sentinel, its password twice"),
        ("redis+sentinel://:%s@127.0.0.1:%d" % (PW, p), "sentinel, no master name"),
        ("redis+cluster://:%s@127.0.0.1:%d?min_replicas=x" % (PW, p), "cluster, bad option"),
        ("redlock://:%s@127.0.0.1:%d,127.0.0.1:%d" % (PW, p, p + 1), "redlock, even nodes"),
        ("redlock://:%s@a,b,c?password_file=%s" % (PW, f), "redlock, password twice"),
        ("mysql://lockd:%s@127.0.0.1:%d/lockd?bogus=1" % (PW, p), "mysql, unknown option"),
        ("zookeeper://lockd:%s@127.0.0.1:%d/lockd?bogus=1" % (PW, p), "zookeeper, unknown option"),
        ("redsi://:%s@127.0.0.1:%d" % (PW, p), "unknown scheme"),
        ("redis:/:%s@127.0.0.1:%d" % (PW, p), "no ://"),
        ("redis://:%s@127.0.0.1:%d?password=%s" % (PW, p, PW), "redis, password= option"),
        # a raw '/', '?' or '#' ends the user info early: the rest of the
        # password lands in the hosts or the query
        ("redis+sentinel://:%s/%s@127.0.0.1:%d/m" % (PW, PW, p), "sentinel, raw '/'"),
        ("redis://:%s?%s@127.0.0.1:%d" % (PW, PW, p), "redis, raw '?'"),
        ("redlock://:%s?%s@a,b,c" % (PW, PW), "redlock, raw '?'"),
        ("redlock://:%s/%s@a,b,c" % (PW, PW), "redlock, raw '/'"),
        ("redsi://:%s?%s@127.0.0.1:%d" % (PW, PW, p), "unknown scheme, raw '?'"),
        ("redsi://:%s#%s@127.0.0.1:%d" % (PW, PW, p), "unknown scheme, raw '#'"),
    ]
    for url, what in cases:
        refused(url, what)
    # a missing file is named; a password in the environment is not shown
    out = refused("redis://127.0.0.1:%d?password_file=%s.gone" % (p, f), "a missing file",
                  env={"LOCKD_BACKEND_PASSWORD": PW})
    check(f + ".gone" in out, "the message names the missing file: %s" % out)
    # the URL in the environment rather than the flag
    rc, out = run_lockd(["--listen", "127.0.0.1:%d" % harness.free_port()],
                        env={"LOCKD_BACKEND": "redis://:%s@127.0.0.1:%d?bogus=1" % (PW, p)})
    eq(rc, 2, "exit code of LOCKD_BACKEND with an unknown option: %s" % out)
    no_password(out, "a refused start on LOCKD_BACKEND")


@harness.scenario("secrets: --help, --version and --backends show no password from the environment",
                  backends=M)
def help_output(ctx):
    env = {"LOCKD_BACKEND": "redis://lockd:%s@127.0.0.1:6379?sentinel_password=%s" % (PW, PW),
           "LOCKD_BACKEND_PASSWORD": PW}
    for flag in ("--help", "--version", "--backends"):
        rc, out = run_lockd([flag], env)
        eq(rc, 0, "exit code of lockd %s" % flag)
        no_password(out, "lockd %s" % flag)
    rc, out = run_lockd(["--no-such-flag"], env)
    check(rc != 0, "an unknown flag is refused")
    no_password(out, "an unknown flag's message")


@harness.scenario("secrets: lockd on stores that do not answer logs no password at debug level",
                  backends=M)
def unreachable_stores(ctx):
    f = secret_file(ctx, PW + "\n")
    p = down_port()
    urls = [
        "redis://:%s@127.0.0.1:%d?timeout_ms=200&connect_timeout_ms=200" % (PW, p),
        "redis://lockd@127.0.0.1:%d?password_file=%s&timeout_ms=200" % (p, f),
        "redis+sentinel://:%s@127.0.0.1:%d/m?sentinel_password=%s&timeout_ms=200"
        % (PW, p, PW),
        "redis+cluster://:%s@127.0.0.1:%d?timeout_ms=200" % (PW, p),
        "redlock://:%s@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?timeout_ms=200"
        % (PW, p, down_port(), down_port()),
        "mysql://lockd:%s@127.0.0.1:%d/lockd" % (PW, p),
        "zookeeper://lockd:%s@127.0.0.1:%d/lockd?session_timeout_ms=2000" % (PW, p),
    ]
    schemes = harness_schemes()
    for url in urls:
        if url.split("://")[0].split("+")[0] not in schemes:
            continue
        ld = harness.Lockd(url, args=["--log-level", "debug"], tmpdir=ctx.tmpdir)
        ctx.extra.append(ld)
        ld.start(wait_ready=False)
        if up_or_gone(ld):
            no_password(served_text(ld), "the answers of lockd on %s" % url.split("://")[0])
            time.sleep(0.5)  # a retry or two in the log
        ld.stop(10)
        no_password(ld.log_tail(200000), "the log of lockd on %s" % url.split("://")[0])


def harness_schemes():
    rc, out = run_lockd(["--backends"])
    return set(out.split()) if rc == 0 else set()


# ---- a Redis with a password ----

def stop_lockds(ctx):
    """Stop this scenario's lockd instances before their store; the runner
    still collects their sanitizer reports (ctx.cleanup())."""
    for ld in ctx.extra:
        if ld.alive():
            ld.stop(5)


def auth_redis(ctx, name):
    srv = AuthRedis(os.path.join(ctx.tmpdir, name))
    srv.start()
    return srv


@harness.scenario("secrets: redis: password_file and LOCKD_BACKEND_PASSWORD work; a wrong one is 503",
                  backends=["redis"])
def redis_password_sources(ctx):
    srv = auth_redis(ctx, "pwredis")
    try:
        base = "redis://127.0.0.1:%d" % srv.port
        good = secret_file(ctx, PW + "\n")
        bad = secret_file(ctx, "not-" + PW + "\n", "bad")
        a = ctx.new_lockd(env={}, start=False)
        a.backend_url = base + "?password_file=" + good
        a.args = ["--log-level", "debug"]
        a.start()
        b = ctx.new_lockd(start=False)
        b.backend_url = base
        b.env = {"LOCKD_BACKEND_PASSWORD": PW}
        b.args = ["--log-level", "debug"]
        b.start()
        w = ctx.new_lockd(start=False)
        w.backend_url = base + "?password_file=" + bad
        w.env = {"LOCKD_BACKEND_PASSWORD": PW}  # the file wins
        w.args = ["--log-level", "debug"]
        w.start()
        for ld, what in ((a, "password_file"), (b, "LOCKD_BACKEND_PASSWORD")):
            check(wait_ready(ld, 10), "lockd with %s ready" % what)
            key = ctx.key("pw")
            r = acquire(ld.client(), key, ttl_ms=5000)
            eq(r.status, 201, "acquire through %s" % what)
            eq(release(ld.client(), key, r.json["token"]).status, 200, "release")
        eq(w.request("GET", "/readyz").status, 503, "/readyz with a wrong password")
        eq(acquire(w.client(), ctx.key("pw")).status, 503, "acquire with a wrong password")
        check("WRONGPASS" in w.log_tail() or "AUTH" in w.log_tail(),
              "the log says why: %s" % w.log_tail())
        # an outage and a reconnect, at debug level
        srv.kill9()
        check(wait_until(lambda: a.request("GET", "/readyz", timeout=5).status == 503, 10),
              "/readyz 503 while Redis is down")
        acquire(a.client(), ctx.key("pw"))
        srv.restart()
        check(wait_ready(a, 15) and wait_ready(b, 15), "ready again after Redis is back")
        for ld in (a, b, w):
            no_password(served_text(ld), "/readyz, /metrics or an answer")
            ld.stop(10)
            no_password(ld.log_tail(200000), "the log at debug level")
    finally:
        stop_lockds(ctx)
        srv.stop()


def acl_user(srv, user, commands=ACL_COMMANDS, prefix="lockd:"):
    args = ["ACL", "SETUSER", user, "reset", "on", ">" + PW, "~%s*" % prefix,
            "&%s*" % prefix] + commands.split()
    eq(srv.command(*args), "OK", "ACL SETUSER")


@harness.scenario("secrets: redis: an ACL user limited to lockd's keys and commands runs every call",
                  backends=["redis"])
def redis_acl_user(ctx):
    srv = auth_redis(ctx, "aclredis")
    try:
        acl_user(srv, "lockd")
        url = "redis://lockd:%s@127.0.0.1:%d" % (PW, srv.port)
        a = ctx.new_lockd(start=False)
        a.backend_url = url
        a.args = ["--log-level", "debug"]  # the subscriber's errors too
        a.start()
        b = ctx.new_lockd(start=False)
        b.backend_url = url
        b.args = ["--log-level", "debug"]
        b.start()
        check(wait_ready(a, 10) and wait_ready(b, 10), "both ready as the ACL user")
        c = a.client()
        key = ctx.key("acl")
        r = acquire(c, key, ttl_ms=5000, owner="o")
        eq(r.status, 201, "acquire")
        eq(renew(c, key, r.json["token"], 6000).status, 200, "renew")
        eq(c.request("GET", path(key)).status, 200, "inspect")
        eq(c.request("GET", "/locks?prefix=" + key[:3]).status, 200, "list")
        eq(release(c, key, r.json["token"]).status, 200, "release")
        # a waiter on the other instance, woken by the release (the
        # release channel: PUBLISH and SUBSCRIBE)
        g, _ = wake_by_release(a, b, key, within=0.3, settle=0.4)
        eq(release(c, key, g.json["token"]).status, 200, "the waiter's release")
        # shared, multi-key, forced release
        s1 = c.request("POST", path(key), {"ttl_ms": 5000, "mode": "shared", "limit": 2})
        eq(s1.status, 201, "a shared grant")
        # the forced release through an instance with an admin token
        adm = ctx.new_lockd(start=False)
        adm.backend_url = url
        adm.args = ["--admin-token-file", secret_file(ctx, "admin-token-0123456789\n", "adm")]
        adm.start()
        check(wait_ready(adm, 10), "the admin instance ready")
        eq(adm.request("DELETE", path(key) + "?force=true",
                       headers={"Authorization": "Bearer admin-token-0123456789"}).status,
           200, "a forced release")
        keys = [ctx.key("acl-m"), ctx.key("acl-m")]
        m = c.request("POST", "/locks", {"keys": keys, "ttl_ms": 5000})
        eq(m.status, 201, "a multi-key acquire: %s" % m.text)
        eq(c.request("DELETE", "/locks", {"keys": keys, "token": m.json["token"]}).status, 200,
           "a multi-key release")
        # a wrong password for that user: lockd starts, answers 503
        w = ctx.new_lockd(start=False)
        w.backend_url = "redis://lockd:nope@127.0.0.1:%d" % srv.port
        w.start()
        eq(w.request("GET", "/readyz").status, 503, "/readyz with a wrong password")
        for ld in (a, b, w, adm):
            ld.stop(10)
            no_password(ld.log_tail(200000), "the log")
            check("NOPERM" not in ld.log_tail(200000),
                  "a command the ACL refused: %s" % ld.log_tail())
    finally:
        stop_lockds(ctx)
        srv.stop()


@harness.scenario("secrets: redis+sentinel: sentinel_password_file and LOCKD_BACKEND_PASSWORD work",
                  backends=["redis"])
def sentinel_password_files(ctx):
    from server_sentinel import SentinelSet

    s = SentinelSet(os.path.join(ctx.tmpdir, "pwsentinel"), replicas=0, sentinels=1)
    s.start()
    try:
        sp = s.sentinel_ports[0]
        # the primary needs PW (the Sentinel told so), then the Sentinel too
        eq(resp(sp, [["SENTINEL", "SET", s.master_name, "auth-pass", PW]])[0], "OK",
           "SENTINEL SET auth-pass")
        eq(s.command(0, "CONFIG", "SET", "requirepass", PW), "OK", "requirepass")
        eq(resp(sp, [["ACL", "SETUSER", "default", "on", "resetpass", ">" + PW]])[0], "OK",
           "the Sentinel's password")
        good = secret_file(ctx, PW + "\n")
        bad = secret_file(ctx, "not-" + PW + "\n", "bad")
        env = {"LOCKD_BACKEND_PASSWORD": PW}
        a = ctx.new_lockd(start=False)
        a.backend_url = s.url("sentinel_password_file=%s&timeout_ms=500" % good)
        a.env, a.args = env, ["--log-level", "debug"]
        a.start()
        w = ctx.new_lockd(start=False)
        w.backend_url = s.url("sentinel_password_file=%s&timeout_ms=500" % bad)
        w.env, w.args = env, ["--log-level", "debug"]
        w.start()
        check(wait_ready(a, 15), "lockd ready through a Sentinel with a password")
        key = ctx.key("sent")
        r = acquire(a.client(), key, ttl_ms=5000)
        eq(r.status, 201, "acquire")
        eq(release(a.client(), key, r.json["token"]).status, 200, "release")
        eq(w.request("GET", "/readyz").status, 503, "/readyz with the Sentinel's password wrong")
        time.sleep(0.3)
        for ld in (a, w):
            no_password(served_text(ld), "/readyz, /metrics or an answer")
            ld.stop(10)
            no_password(ld.log_tail(200000), "the log at debug level")
        check("Sentinel AUTH" in w.log_tail(200000), "the log says the Sentinel refused: %s"
              % w.log_tail())
    finally:
        stop_lockds(ctx)
        s.stop()


@harness.scenario("secrets: redlock: ACL users on every node, password_file or LOCKD_BACKEND_PASSWORD",
                  backends=["redlock"])
def redlock_passwords(ctx):
    nodes = []
    try:
        for i in range(3):
            nodes.append(auth_redis(ctx, "pwredlock%d" % i))
            # redlock also reads INFO and CONFIG GET appendfsync of each node
            acl_user(nodes[-1], "lockd", ACL_COMMANDS + " +info +config|get")
        hosts = ",".join("127.0.0.1:%d" % n.port for n in nodes)
        good = secret_file(ctx, PW + "\n")
        a = ctx.new_lockd(start=False)
        a.backend_url = "redlock://lockd@%s?password_file=%s&timeout_ms=500" % (hosts, good)
        a.args = ["--log-level", "debug"]
        a.start()
        b = ctx.new_lockd(start=False)
        b.backend_url = "redlock://lockd@%s?timeout_ms=500" % hosts
        b.env = {"LOCKD_BACKEND_PASSWORD": PW}
        b.args = ["--log-level", "debug"]
        b.start()
        w = ctx.new_lockd(start=False)
        w.backend_url = "redlock://lockd:nope@%s?timeout_ms=500" % hosts
        w.start()
        check(wait_ready(a, 15) and wait_ready(b, 15), "both ready as the ACL user")
        key = ctx.key("rl")
        r = acquire(a.client(), key, ttl_ms=5000)
        eq(r.status, 201, "acquire")
        eq(renew(a.client(), key, r.json["token"], 6000).status, 200, "renew")
        eq(release(a.client(), key, r.json["token"]).status, 200, "release")
        g, _ = wake_by_release(a, b, key, within=1.0, settle=0.4)
        eq(release(b.client(), key, g.json["token"]).status, 200, "the waiter's release")
        eq(w.request("GET", "/readyz").status, 503, "/readyz with a wrong password")
        for ld in (a, b, w):
            no_password(served_text(ld), "/readyz, /metrics or an answer")
            ld.stop(10)
            log = ld.log_tail(200000)
            no_password(log, "the log at debug level")
            if ld is not w:
                check("NOPERM" not in log, "a command the ACL refused: %s" % log[-2000:])
    finally:
        stop_lockds(ctx)
        for n in nodes:
            n.stop()


@harness.scenario("secrets: a store password shows nowhere, running or refused",
                  backends=["mysql", "zookeeper"])
def refused_password(ctx):
    url = ctx.url
    sep = url.index("://") + 3
    at = url.find("@", sep)
    # the suite's store under a password it does not accept
    url = url[:sep] + "lockd:" + PW + "@" + url[(at + 1 if at > 0 else sep):]
    if ctx.backend == "zookeeper":
        # ZooKeeper takes any digest: lockd runs, and its nodes (creator
        # ACLs) go under a root of their own, away from the suite's
        q = url.find("?")
        url = url[:q] + "/lockd-secrets" + url[q:] if q > 0 else url + "/lockd-secrets"
    ld = harness.Lockd(url, args=["--log-level", "debug"], tmpdir=ctx.tmpdir,
                       env={"LOCKD_BACKEND_PASSWORD": PW})
    ctx.extra.append(ld)
    ld.start(wait_ready=False)
    if up_or_gone(ld):
        no_password(served_text(ld), "/readyz, /metrics or an answer")
        time.sleep(1.0)  # a reconnect or two in the log
    ld.stop(10)
    no_password(ld.log_tail(200000), "the log at debug level")

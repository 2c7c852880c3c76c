"""tests/e2e/test_sentinel.py - redis+sentinel:// and min_replicas on a
Sentinel set of their own (1 primary, 2 replicas, 3 Sentinels on loopback,
server_sentinel.py): lockd finds the primary, follows a failover without
losing a held lock, never writes to the demoted primary, answers 503 rather
than a grant the replicas do not have, and - without min_replicas - loses a
grant to a failover, as docs/redis-topologies.md says. They run on the
redis backend only and leave ctx.server alone."""

import os
import subprocess
import time

import harness
from harness import check, eq
from server_sentinel import SentinelSet

TTL_MS = 60000


def sentinel_set(ctx):
    return SentinelSet(ctx.tmpdir).start()


def lockd_on(ctx, url):
    ld = harness.Lockd(url, tmpdir=ctx.tmpdir)
    ctx.extra.append(ld)  # stopped by the runner's cleanup, also on failure
    return ld.start()


def until(cond, timeout, what, step=0.02):
    """cond() until it is truthy (its value), or Fail after timeout s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise harness.Fail("no %s within %.1f s" % (what, timeout))


def acquire(ld, key, timeout=10.0):
    return ld.request("POST", "/locks/" + key, {"ttl_ms": TTL_MS}, timeout=timeout)


def renew(ld, key, token, timeout=10.0):
    return ld.request("PUT", "/locks/" + key, {"token": token, "ttl_ms": TTL_MS}, timeout=timeout)


def held_on(s, node, key):
    """Does node i of s hold key's lock hash (read on that node itself)?"""
    return s.command(node, "EXISTS", "lockd:lock:{%s}" % key) == 1


@harness.scenario("sentinel: acquire, renew and release through a redis+sentinel:// URL; "
                  "min_replicas=1 with the replicas stopped answers 503 to grants, renews and releases "
                  "and keeps no grant",
                  backends=["redis"])
def sentinel_basic(ctx):
    s = sentinel_set(ctx)
    try:
        ld = lockd_on(ctx, s.url("min_replicas=1"))
        key = ctx.key("sent")
        r = acquire(ld, key)
        eq(r.status, 201, "acquire: %s" % r.body)
        tok = r.json["token"]
        check(held_on(s, s.primary(), key), "the grant is on the primary")
        eq(renew(ld, key, tok).status, 200, "renew")
        eq(ld.request("DELETE", "/locks/" + key, {"token": tok}).status, 200, "release")

        held = ctx.key("held")
        r = acquire(ld, held)
        eq(r.status, 201, "acquire before the pause")
        held_tok = r.json["token"]
        gone = ctx.key("gone")
        r = acquire(ld, gone)
        eq(r.status, 201, "acquire before the pause")
        gone_tok = r.json["token"]
        free = ctx.key("free")
        s.pause_replicas()
        try:
            t0 = time.monotonic()
            r = acquire(ld, free, timeout=5)
            took = time.monotonic() - t0
            eq(r.status, 503, "acquire with no replica to acknowledge: %s" % r.body)
            check(took < 2.0, "503 within the timeout (took %.2f s)" % took)
            eq(renew(ld, held, held_tok, timeout=5).status, 503, "renew: no replica acknowledges")
            # a release a failover could undo is not answered 200
            eq(ld.request("DELETE", "/locks/" + gone, {"token": gone_tok}, timeout=5).status, 503,
               "release: no replica acknowledges")
        finally:
            s.resume_replicas()
        # the 503'd grant was released again: the key is free for anyone
        check(not held_on(s, s.primary(), free), "no grant left behind by the 503")
        until(lambda: acquire(ld, free).status == 201, 5, "201 once the replicas are back")
        eq(renew(ld, held, held_tok).status, 200, "renew once the replicas are back")
        # that release did happen on the primary (a 503 is an unknown outcome)
        until(lambda: acquire(ld, gone).status == 201, 5, "the released key free once the replicas are back")
        harness.log("     min_replicas=1, replicas stopped: 503 in %.0f ms, key free after" % (took * 1000))
    finally:
        s.stop()


@harness.scenario("sentinel: a failover (SENTINEL FAILOVER) keeps a lock held with min_replicas=1; "
                  "lockd follows it and the demoted primary gets no write", backends=["redis"])
def sentinel_failover(ctx):
    s = sentinel_set(ctx)
    try:
        ld = lockd_on(ctx, s.url("min_replicas=1"))
        plain = lockd_on(ctx, s.url())  # follows alone, no replica to wait for
        key = ctx.key("fo")
        r = acquire(ld, key)
        eq(r.status, 201, "acquire: %s" % r.body)
        tok, fence = r.json["token"], r.json["fence"]
        t0 = time.monotonic()
        old, new = s.failover()
        # lockd has followed once a fresh grant lands on the new primary
        took = {}
        for name, inst in (("without min_replicas", plain), ("min_replicas=1", ld)):
            probe = ctx.key("probe")

            def followed():
                x = acquire(inst, probe)
                if x.status == 201:
                    inst.request("DELETE", "/locks/" + probe, {"token": x.json["token"]})
                    return held_on(s, new, key)
                return False
            until(followed, 20, "grant on the new primary (%s)" % name)
            took[name] = (time.monotonic() - t0) * 1000
        harness.log("     failover %d -> %d: lockd writes to the new primary %.0f ms after SENTINEL "
                    "FAILOVER; with min_replicas=1 (a replica resynced) %.0f ms"
                    % (old, new, took["without min_replicas"], took["min_replicas=1"]))
        # a renew waits for a replica too: while the demoted primary
        # resyncs as the new one's replica (slow under ASan) that can be a
        # 503 with Retry-After, which a client retries; never a 404 or 409
        end = time.monotonic() + 10
        while True:
            r = renew(ld, key, tok)
            if r.status != 503 or time.monotonic() > end:
                break
            time.sleep(0.2)
        eq(r.status, 200, "renew with the token on the new primary: %s" % r.body)
        eq(r.json["fence"], fence, "fence of the held lock")
        i = ld.request("GET", "/locks/" + key)
        eq(i.status, 200, "inspect")
        eq(ld.request("DELETE", "/locks/" + key, {"token": tok}).status, 200, "release")
        r = acquire(ld, key)
        eq(r.status, 201, "acquire again")
        check(r.json["fence"] > fence, "fences keep increasing (%d after %d)" % (r.json["fence"], fence))
        # Sentinel demotes the old primary only seconds later: until then it
        # would still take writes, and lose them. None may reach it.
        before = script_calls(s, old)
        after = [ctx.key("after%d" % n) for n in range(5)]
        for k in after:
            eq(acquire(ld, k).status, 201, "acquire after the switch")
        for k in after:
            check(held_on(s, new, k), "%s is on the new primary" % k)
            check(not held_on(s, old, k), "%s is not on the old primary" % k)
        check(held_on(s, new, key), "the held lock is on the new primary")
        eq(script_calls(s, old), before, "scripts run on the old primary since the switch")
        harness.log("     old primary (role %s): no script since the switch; %d grants on the new one"
                    % (s.role(old), len(after)))
    finally:
        s.stop()


def stat(s, node, name):
    """One field of node's INFO all, as a string ('' when absent)."""
    for line in s.command(node, "INFO", "all").decode().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1]
    return ""


def script_calls(s, node):
    """Scripts node has run: functions (FCALL) and scripts (EVALSHA, EVAL)."""
    n = 0
    for name in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval"):
        v = stat(s, node, name)
        n += int(v.split("calls=")[1].split(",")[0]) if v else 0
    return n


def loss_sequence(ctx, s, ld):
    """Replicas stopped, acquire, kill -9 the primary, replicas back, wait
    for the failover: (acquire's status, the new primary, ms to the first
    201 after the kill)."""
    key = ctx.key("loss")
    old = s.primary()
    s.pause_replicas()
    # a stopped replica still gets what the kernel buffered for it: cut the
    # links too, so the grant stays on the primary alone (replicas lagging)
    s.command(old, "CLIENT", "KILL", "TYPE", "replica")
    try:
        r = acquire(ld, key, timeout=5)
        status = r.status
        s.kill9(old)
        t_kill = time.monotonic()
    finally:
        s.resume_replicas()
    new = s.wait_primary(other_than=old, timeout=40)
    probe = ctx.key("switch")
    until(lambda: acquire(ld, probe, timeout=3).status == 201, 30, "201 after the failover")
    switch_ms = (time.monotonic() - t_kill) * 1000
    return key, r, status, new, switch_ms


@harness.scenario("sentinel: without min_replicas a failover loses a grant the replicas never got "
                  "(as documented); with min_replicas=1 the same sequence answers 503",
                  backends=["redis"])
def sentinel_loss(ctx):
    for opts in ("", "min_replicas=1"):
        s = sentinel_set(ctx)
        try:
            ld = lockd_on(ctx, s.url(opts))
            key, r, status, new, switch_ms = loss_sequence(ctx, s, ld)
            harness.log("     %s: kill -9 of the primary -> first 201 again after %.0f ms" %
                        (opts or "no min_replicas", switch_ms))
            if opts == "":
                eq(status, 201, "acquire with the replicas stopped: %s" % r.body)
                r2 = acquire(ld, key)
                eq(r2.status, 201, "a second client gets the lock on the new primary")
                harness.log("     lost as documented: %s granted twice (fences %d, %d)" %
                            (key, r.json["fence"], r2.json["fence"]))
            else:
                eq(status, 503, "acquire with the replicas stopped and min_replicas=1: %s" % r.body)
                eq(acquire(ld, key).status, 201, "the key is free afterwards")
            ld.stop(5)
        finally:
            s.stop()


@harness.scenario("sentinel: bad redis+sentinel:// URLs are refused at start (exit 2, a clear message)",
                  backends=["redis"])
def sentinel_bad_urls(ctx):
    cases = [("redis+sentinel://127.0.0.1:26379", "master name"),
             ("redis+sentinel://127.0.0.1:26379/", "master name"),
             ("redis+sentinel:///lockd", "at least one Sentinel"),
             ("redis+sentinel://127.0.0.1:99999/lockd", "bad Sentinel host or port"),
             ("redis+sentinel://127.0.0.1:x/lockd", "bad Sentinel host or port"),
             ("redis+sentinel://127.0.0.1:26379,/lockd", "Sentinel address"),
             ("redis+sentinel://127.0.0.1:26379/lockd/x", "database number"),
             ("redis://127.0.0.1:6379?sentinel_password=x", "redis+sentinel:// only"),
             ("redis+sentinel://127.0.0.1:26379/lockd?min_replicas=1&replicas_timeout_ms=1000",
              "below timeout_ms")]
    for url, want in cases:
        p = subprocess.run([harness.LOCKD_BIN, "--listen", "127.0.0.1:%d" % harness.free_port(),
                            "--backend", url], capture_output=True, text=True, timeout=10,
                           env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
        eq(p.returncode, 2, "exit code for %s (%s)" % (url, p.stderr.strip()))
        check(want in p.stderr, "%s: message names the problem (%r): %s" % (url, want, p.stderr))


@harness.scenario("sentinel: min_replicas=1 on a plain redis:// URL with no replica answers 503 and "
                  "keeps no grant; without it, 201", backends=["redis"])
def sentinel_plain_min_replicas(ctx):
    ld = lockd_on(ctx, ctx.url + "?min_replicas=1&replicas_timeout_ms=50")
    key = ctx.key("plain")
    r = acquire(ld, key)
    eq(r.status, 503, "acquire: no replica can acknowledge: %s" % r.body)
    eq(ctx.server.command("EXISTS", "lockd:lock:{%s}" % key), 0, "no grant left behind")
    # several keys at once: every one of them released again
    keys = [ctx.key("m%d" % n) for n in range(3)]
    r = ld.request("POST", "/locks", {"keys": keys, "ttl_ms": TTL_MS})
    eq(r.status, 503, "multi-key acquire: %s" % r.body)
    for k in keys:
        eq(ctx.server.command("EXISTS", "lockd:lock:{%s}" % k), 0, "%s: no grant left behind" % k)
    eq(acquire(ctx.lockd, key).status, 201, "the key is free: 201 without min_replicas")
    r = ctx.lockd.request("POST", "/locks", {"keys": keys, "ttl_ms": TTL_MS})
    eq(r.status, 201, "the keys are free: 201 without min_replicas: %s" % r.body)

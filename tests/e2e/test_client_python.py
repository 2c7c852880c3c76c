"""tests/e2e/test_client_python.py - the Python client helper
(clients/python/lockd_client.py) against a real lockd, on memory:// and on
Redis (a persistent store: a lock outlives a restart of lockd there).

The seven cases of the helpers' shared spec: grant, try-once refusal and
growing fences; renewal through a body longer than the TTL; loss when the
lock is released from under the holder; restarts of lockd (memory: lost;
Redis: kept; down past the TTL: lost by the deadline); release on leaving
the with block, also on an exception; waiting and Retry-After; two threads
never holding one key at once. Besides: an acquire that rides out a lockd
restart, refusals that are never retried, the bearer token, and the shape
of the README's example. What the client says is checked against lockd's
own answers over plain HTTP.
"""

import os
import sys
import tempfile
import threading
import time

import harness
from client import TOKEN_RE, expect_free, expect_held, metric, metrics, path
from delayproxy import DelayProxy
from harness import check, eq, scenario

sys.path.insert(0, os.path.join(harness.ROOT, "clients", "python"))

import lockd_client  # noqa: E402
from lockd_client import Client, Lock, LockdError, LockHeld, LockLost  # noqa: E402

BACKENDS = ["memory", "redis"]
SLACK = 1.0  # s: scheduling on a loaded 2-core machine


def url_of(ld):
    return "http://127.0.0.1:%d" % ld.port


def lost_at(lock_holder):
    """An on_lost callback that records (monotonic time, reason) calls."""
    def on_lost(reason):
        lock_holder.append((time.monotonic(), reason))
    return on_lost


def wait_free(ctx, ld, key, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ld.request("GET", path(key)).status == 404:
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------- 1. grants

@scenario("client python: an acquire gives a token and a fence, a try-once acquire of the held key "
          "raises LockHeld, fences grow across grants and keys are percent-encoded", backends=BACKENDS)
def t_grant(ctx):
    url = url_of(ctx.lockd)
    key = ctx.key("py grant/é")  # a space, a slash and UTF-8 in the key
    fences = []
    for i in range(3):
        lock = Lock(key, ttl=5, url=url, owner="py-%d" % i).acquire()
        try:
            check(TOKEN_RE.match(lock.token or ""), "token: %r" % lock.token)
            check(isinstance(lock.fence, int) and 0 < lock.fence < 1 << 53, "fence: %r" % lock.fence)
            check(0 < lock.ttl_ms <= 5000, "ttl_ms: %r" % lock.ttl_ms)
            eq(lock.key, key, "key")
            expect_held(ctx, key, fence=lock.fence, owner="py-%d" % i)  # the path encoded by client.py
            eq(Client(url).inspect(key)["fence"], lock.fence, "Client.inspect fence")
            try:
                Lock(key, ttl=5, url=url).acquire()
                raise harness.Fail("a second try-once acquire of a held key was granted")
            except LockHeld as e:
                eq(e.status, 409, "LockHeld status")
                check(0 < e.retry_after <= 5.0, "retry_after: %r" % e.retry_after)
            fences.append(lock.fence)
        finally:
            check(lock.release(), "release answered as done")
        expect_free(ctx, key)
    check(fences[0] < fences[1] < fences[2], "fences do not grow: %r" % fences)
    eq(Client(url).inspect(key), None, "Client.inspect of a free key")
    eq(lockd_client.quote_key("a b/é~_.-+"), "a%20b/%C3%A9~_.-%2B", "quote_key")


# ---------------------------------------------------------------- 2. renewal

@scenario("client python: a 1 s lock stays held through a 3 s body, renewed, with its fence",
          backends=BACKENDS)
def t_renewed(ctx):
    key = ctx.key("py-renew")
    with Lock(key, ttl=1, url=url_of(ctx.lockd)) as lock:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            lock.check()
            time.sleep(0.1)
        check(not lock.lost.is_set(), "lost: %r" % lock.lost_reason)
        body = expect_held(ctx, key, fence=lock.fence)
        check(body["ttl_ms"] > 300, "ttl left at the end: %r (not renewed?)" % body["ttl_ms"])
    expect_free(ctx, key, "after the with block")


# ---------------------------------------------------------------- 3. lost

@scenario("client python: a lock released from under its holder is signalled lost within one renew "
          "interval, once, and not released again", backends=BACKENDS)
def t_lost_on_release(ctx):
    key = ctx.key("py-lost")
    calls = []
    with Lock(key, ttl=1.5, url=url_of(ctx.lockd), on_lost=lost_at(calls)) as lock:
        r = ctx.lockd.request("DELETE", path(key), headers={"Lock-Token": lock.token})
        eq(r.status, 200, "DELETE by plain HTTP: %r" % r)
        t0 = time.monotonic()
        check(lock.lost.wait(1.5 / 3 + SLACK), "not lost %.1f s after the release" % (1.5 / 3 + SLACK))
        check("404" in lock.lost_reason and "lock_not_found" in lock.lost_reason, "reason: %r" % lock.lost_reason)
        try:
            lock.check()
            raise harness.Fail("check() after the loss did not raise")
        except LockLost as e:
            eq(e.reason, lock.lost_reason, "LockLost reason")
        # someone else takes the key: leaving the block must not touch it
        other = Lock(key, ttl=5, url=url_of(ctx.lockd)).acquire()
    eq(len(calls), 1, "on_lost calls")
    check(calls[0][0] - t0 <= 1.5 / 3 + SLACK, "on_lost %.2f s after the release" % (calls[0][0] - t0))
    expect_held(ctx, key, fence=other.fence, what="the next holder after the lost lock's block")
    check(other.release(), "release of the next holder")


# ---------------------------------------------------------------- 4. restarts

@scenario("client python: lockd restarted under a held lock: lost on memory, still held on Redis",
          backends=BACKENDS)
def t_restart(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("py-restart")
    with Lock(key, ttl=5, url=url_of(ld)) as lock:
        time.sleep(0.9)  # down from here: the renew due at 1.67 s fails
        eq(ld.stop(), 0, "lockd's exit code on SIGTERM")
        time.sleep(1)
        ld.start()
        if ctx.backend == "memory":
            check(lock.lost.wait(5 / 3 + 1 + SLACK), "not lost after a restart on memory://")
            check("lock_not_found" in lock.lost_reason, "reason: %r" % lock.lost_reason)
            return
        t_up = time.monotonic()
        while time.monotonic() < t_up + 5 / 3 + 0.3:  # a renew interval after it is back
            lock.check()
            time.sleep(0.1)
        r = ld.request("GET", path(key))
        eq(r.status, 200, "inspect after the restart: %r" % r)
        eq(r.json["fence"], lock.fence, "fence after the restart")
        check(r.json["ttl_ms"] > 2500, "not renewed after the restart: %r" % r.json)  # else < 1 s left
    check(wait_free(ctx, ld, key, 1), "held after the with block")


@scenario("client python: lockd down longer than the TTL: the lock is lost by its deadline",
          backends=BACKENDS)
def t_down_past_ttl(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("py-down")
    calls = []
    ttl = 2.0
    with Lock(key, ttl=ttl, url=url_of(ld), on_lost=lost_at(calls)) as lock:
        t_stop = time.monotonic()  # the last renew that succeeded was sent before this
        ld.stop()
        check(lock.lost.wait(ttl + SLACK), "not lost %.1f s after lockd stopped" % (ttl + SLACK))
        # lost before the TTL of the last renew ran out (it was sent before t_stop)
        check(calls[0][0] <= t_stop + ttl, "lost %.2f s after the stop, later than the TTL %.1f s"
              % (calls[0][0] - t_stop, ttl))
        check("not renewed in time" in lock.lost_reason, "reason: %r" % lock.lost_reason)
        ld.start()
    check(wait_free(ctx, ld, key, ttl + SLACK), "the key is still held after its TTL")
    eq(len(calls), 1, "on_lost calls")


# ---------------------------------------------------------------- 5. release

@scenario("client python: leaving the with block releases the lock, normally and on an exception, "
          "and stops the renewer", backends=BACKENDS)
def t_release_on_exit(ctx):
    url = url_of(ctx.lockd)
    key = ctx.key("py-exit")
    with Lock(key, ttl=2, url=url) as lock:
        expect_held(ctx, key, fence=lock.fence)
    expect_free(ctx, key, "after a normal exit")
    check(not lock._thread.is_alive(), "the renewer still runs after the release")
    try:
        with Lock(key, ttl=2, url=url) as lock:
            expect_held(ctx, key, fence=lock.fence)
            raise KeyError("boom")
    except KeyError:
        pass
    expect_free(ctx, key, "after an exception in the body")
    check(not lock._thread.is_alive(), "the renewer still runs after the release")
    check(not lock.lost.is_set(), "a released lock is not lost")
    lock = Lock(key, ttl=2, url=url).acquire()
    check(lock.release(), "release() without with")
    check(not lock.release(), "a second release() does nothing")
    expect_free(ctx, key, "after release()")


# ---------------------------------------------------------------- 6. waiting

@scenario("client python: a waiting acquire gets the lock when the holder releases, and LockHeld "
          "carries Retry-After", backends=BACKENDS)
def t_wait(ctx):
    url = url_of(ctx.lockd)
    key = ctx.key("py-wait")
    holder = Lock(key, ttl=3, url=url).acquire()
    try:
        Lock(key, url=url).acquire()
        raise harness.Fail("try-once acquire of a held key granted")
    except LockHeld as e:
        check(1.5 < e.retry_after <= 3.0, "retry_after %r for a 3 s lock just taken" % e.retry_after)
    got = []

    def waiter():
        try:
            got.append((time.monotonic(), Lock(key, ttl=3, wait=5, url=url).acquire()))
        except Exception as e:  # noqa: BLE001 - judged below
            got.append((time.monotonic(), e))

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    time.sleep(0.5)
    check(not got, "the waiter was answered while the lock was held: %r" % got)
    t_rel = time.monotonic()
    check(holder.release(), "holder's release")
    t.join(5 + SLACK)
    check(got, "the waiter was not answered")
    at, lock = got[0]
    check(isinstance(lock, Lock), "the waiter got %r" % (lock,))
    check(at - t_rel < 0.5, "granted %.2f s after the release" % (at - t_rel))
    check(lock.fence > holder.fence, "fences: holder %d, waiter %d" % (holder.fence, lock.fence))
    expect_held(ctx, key, fence=lock.fence)
    check(lock.release(), "waiter's release")
    # a wait that runs out is LockHeld too
    holder = Lock(key, ttl=3, url=url).acquire()
    t0 = time.monotonic()
    try:
        Lock(key, wait=0.5, url=url).acquire()
        raise harness.Fail("waiting acquire of a held key granted")
    except LockHeld:
        check(0.4 < time.monotonic() - t0 < 0.5 + SLACK, "LockHeld after %.2f s" % (time.monotonic() - t0))
    holder.release()


@scenario("client python: an acquire while lockd restarts is retried until it is back and granted once",
          backends=BACKENDS)
def t_acquire_retry(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("py-retry")
    ld.stop()
    timer = threading.Timer(0.7, ld.start, kwargs={"wait_ready": False})
    timer.start()
    t0 = time.monotonic()
    try:
        lock = Lock(key, ttl=5, url=url_of(ld), timeout=5).acquire()
    finally:
        timer.join()
    check(time.monotonic() - t0 >= 0.6, "granted before lockd was back")
    r = ld.request("GET", path(key))
    eq(r.status, 200, "inspect: %r" % r)
    eq(r.json["fence"], lock.fence, "fence")
    eq(r.json["holder_count"], 1, "holders")
    check(lock.release(), "release")
    # nothing listening for longer than the timeout: the error says so
    ld.stop()
    t0 = time.monotonic()
    try:
        Lock(key, ttl=5, url=url_of(ld), timeout=0.5).acquire()
        raise harness.Fail("acquire granted with lockd down")
    except LockdError as e:
        eq((e.status, e.code), (None, "unavailable"), "error of an unreachable lockd")
    check(time.monotonic() - t0 < 0.5 + SLACK, "gave up after %.2f s" % (time.monotonic() - t0))


@scenario("client python: an acquire whose answer is lost is retried with its Idempotency-Key and gets "
          "the same grant, not a second one", backends=BACKENDS)
def t_acquire_replay(ctx):
    key = ctx.key("py-replay")
    before = metrics(ctx)
    with DelayProxy(ctx.lockd.port) as proxy:
        # lockd grants and answers; the proxy keeps the answer, then drops
        # the connection: the client cannot know it was granted
        proxy.hold_replies(10.0, when=lambda chunk: chunk.startswith(b"POST /locks/"))
        got = []

        def acquire():
            try:
                got.append(Lock(key, ttl=5, url="http://127.0.0.1:%d" % proxy.port, timeout=3).acquire())
            except Exception as e:  # noqa: BLE001 - judged below
                got.append(e)

        t = threading.Thread(target=acquire, daemon=True)
        t.start()
        check(proxy.wait_triggered(3), "the acquire never reached the proxy")
        deadline = time.monotonic() + 3
        while ctx.lockd.request("GET", path(key)).status != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        proxy.cut()
        proxy.release()
        proxy.restore()
        t.join(3 + SLACK)
        check(got, "the acquire did not return")
        lock = got[0]
        check(isinstance(lock, Lock), "the retried acquire: %r" % (lock,))
        after = metrics(ctx)
        eq(metric(after, "lockd_lock_idempotent_replays_total") - metric(before, "lockd_lock_idempotent_replays_total"),
           1.0, "idempotent replays")
        body = expect_held(ctx, key, fence=lock.fence)
        eq(body["holder_count"], 1, "holders")
        check(lock.release(), "release through the proxy")
    expect_free(ctx, key, "after the release: no grant left behind")


@scenario("client python: refusals (400, 409 limit_mismatch, 401) raise LockdError with lockd's code "
          "at once; the bearer token comes from LOCKD_AUTH_TOKEN_FILE", backends=BACKENDS)
def t_refusals(ctx):
    url = url_of(ctx.lockd)
    key = ctx.key("py-refuse")
    t0 = time.monotonic()
    for kwargs, want in ((dict(limit=2), (400, "invalid_parameter")),  # limit without shared
                         (dict(ttl=86400 * 2), (400, "invalid_parameter"))):  # over --max-ttl-ms
        try:
            Lock(key, url=url, **kwargs).acquire()
            raise harness.Fail("granted: %r" % kwargs)
        except LockdError as e:
            eq((e.status, e.code), want, "error of %r" % kwargs)
    with Lock(key, url=url, mode="shared", limit=2):
        try:
            Lock(key, url=url, mode="shared", limit=3).acquire()
            raise harness.Fail("a shared acquire with another limit was granted")
        except LockdError as e:
            eq((e.status, e.code), (409, "limit_mismatch"), "limit mismatch")
    check(time.monotonic() - t0 < 1.0, "refusals took %.2f s: retried?" % (time.monotonic() - t0))
    # auth: a lockd that wants a bearer token
    fd, token_file = tempfile.mkstemp(dir=ctx.tmpdir)
    os.write(fd, b"s3cret-py\nsecond line\n")
    os.close(fd)
    ld = ctx.new_lockd(args=["--auth-token-file", token_file])
    old = os.environ.pop("LOCKD_AUTH_TOKEN_FILE", None)
    try:
        try:
            Lock(key, url=url_of(ld)).acquire()
            raise harness.Fail("granted without a token")
        except LockdError as e:
            eq((e.status, e.code), (401, "unauthorized"), "no token")
        os.environ["LOCKD_AUTH_TOKEN_FILE"] = token_file
        with Lock(key, ttl=1, url=url_of(ld)) as lock:
            time.sleep(0.6)  # a renew too
            lock.check()
            eq(Client(url_of(ld)).inspect(key)["fence"], lock.fence, "inspect with the token")
    finally:
        os.environ.pop("LOCKD_AUTH_TOKEN_FILE", None)
        if old is not None:
            os.environ["LOCKD_AUTH_TOKEN_FILE"] = old
    r = ld.request("GET", path(key), headers={"Authorization": "Bearer s3cret-py"})
    eq(r.status, 404, "inspect after the with block: %r" % r)


# ---------------------------------------------------------------- 7. exclusion

@scenario("client python: two threads taking one key in turn never hold it at once, fences in order",
          backends=BACKENDS)
def t_two_holders(ctx):
    url = url_of(ctx.lockd)
    key = ctx.key("py-mutex")
    inside = []
    log = []  # (fence, thread) in the order the locks were entered
    errors = []
    mutex = threading.Lock()
    end = time.monotonic() + 1.5

    def worker(name):
        try:
            while time.monotonic() < end:
                with Lock(key, ttl=2, wait=3, url=url) as lock:
                    with mutex:
                        inside.append(name)
                        if len(inside) > 1:
                            errors.append("%s entered while %r held the key" % (name, inside))
                        log.append((lock.fence, name))
                    time.sleep(0.02)
                    lock.check()
                    with mutex:
                        inside.remove(name)
        except Exception as e:  # noqa: BLE001 - judged below
            errors.append("%s: %r" % (name, e))

    threads = [threading.Thread(target=worker, args=("t%d" % i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(1.5 + 3 + SLACK)
    check(not any(t.is_alive() for t in threads), "a worker still runs")
    check(not errors, "; ".join(errors[:3]))
    check(len(log) >= 6, "only %d grants in 1.5 s" % len(log))
    check(len({n for _, n in log}) == 2, "one thread never got the lock: %r" % log[:10])
    fences = [f for f, _ in log]
    eq(fences, sorted(set(fences)), "fences in the order of entry")
    expect_free(ctx, key, "after both threads")


# ---------------------------------------------------------------- README

@scenario("client python: the README's example shape works with the URL from LOCKD_URL",
          backends=BACKENDS)
def t_readme_shape(ctx):
    key = ctx.key("orders")
    old = os.environ.get("LOCKD_URL")
    os.environ["LOCKD_URL"] = url_of(ctx.lockd)
    seen = []
    try:
        # the README's three lines, with do_work recording what it was given
        from lockd_client import Lock as ReadmeLock
        with ReadmeLock(key, ttl=15, wait=30) as lock:
            seen.append(lock.fence)
            expect_held(ctx, key, fence=lock.fence)
    finally:
        if old is None:
            os.environ.pop("LOCKD_URL", None)
        else:
            os.environ["LOCKD_URL"] = old
    check(seen and isinstance(seen[0], int), "the body did not run with a fence: %r" % seen)
    expect_free(ctx, key, "after the README's block")

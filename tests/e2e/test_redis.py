"""tests/e2e/test_redis.py - what only the Redis backend promises: several
lockd instances on one Redis exclude each other, fences keep growing across
instances and Redis restarts, waiters hear releases and expiries through
other instances, and a Redis that is killed, stopped or restarted gives
503s (never a grant) and is served again without restarting lockd."""

import threading
import time
import urllib.parse

import harness
from harness import check, eq

R = ["redis"]


def path(key):
    return "/locks/" + urllib.parse.quote(key, safe="")


def acquire(c, key, ttl_ms=2000, wait_ms=0, owner=None):
    body = {"ttl_ms": ttl_ms, "wait_ms": wait_ms}
    if owner is not None:
        body["owner"] = owner
    return c.request("POST", path(key), body)


def release(c, key, token):
    return c.request("DELETE", path(key), headers={"Lock-Token": token})


def renew(c, key, token, ttl_ms=None):
    body = {"token": token}
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    return c.request("PUT", path(key), body)


def ensure_redis_up(ctx):
    """Leave Redis running for the next scenario, whatever happened."""
    srv = ctx.server
    try:
        srv.resume()
    except Exception:  # noqa: BLE001 - it may be dead already
        pass
    if srv.proc is None or srv.proc.poll() is not None:
        srv.restart()


def wait_until(fn, timeout, step=0.05):
    """Call fn until it returns a true value or timeout passes; its last
    value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


def safe(fn):
    try:
        return fn()
    except OSError:
        return None


def check_exclusion(holds):
    """holds: (t_granted_seen, t_release_sent, fence). What a client sees
    lies inside the real hold, so what it sees must never overlap either;
    and the later hold must carry the larger fence."""
    holds = sorted(holds)
    for a, b in zip(holds, holds[1:]):
        check(a[1] <= b[0], "holds overlap: %r and %r" % (a, b))
        check(b[2] > a[2], "fence did not grow: %r then %r" % (a, b))


@harness.scenario("two instances on one Redis exclude each other and fences strictly increase",
                  backends=R)
def two_instances_exclude(ctx):
    other = ctx.new_lockd()
    key = ctx.key("mutex")
    holds, errors = [], []
    lock = threading.Lock()
    stop_at = time.monotonic() + 3.0

    def worker(ld):
        c = ld.client(timeout=10)
        try:
            while time.monotonic() < stop_at:
                r = acquire(c, key, ttl_ms=5000, wait_ms=3000)
                if r.status == 409:
                    continue
                if r.status != 201:
                    errors.append(repr(r))
                    return
                t0 = time.monotonic()
                time.sleep(0.003)
                t1 = time.monotonic()
                rr = release(c, key, r.json["token"])
                if rr.status != 200:
                    errors.append("release: %r" % rr)
                    return
                with lock:
                    holds.append((t0, t1, r.json["fence"]))
        finally:
            c.close()

    ts = [threading.Thread(target=worker, args=(ld,)) for ld in (ctx.lockd, other) * 3]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    check(not errors, "errors: %s" % errors[:3])
    check(len(holds) >= 20, "only %d grants in 3 s" % len(holds))
    check_exclusion(holds)
    fences = [h[2] for h in holds]
    eq(len(set(fences)), len(fences), "distinct fences")


@harness.scenario("a waiter on one instance is woken promptly by a release on another",
                  backends=R)
def waiter_woken_by_remote_release(ctx):
    other = ctx.new_lockd()
    key = ctx.key("wake")
    r = acquire(other.client(), key, ttl_ms=10000)
    eq(r.status, 201, "holder's acquire on B")
    out = {}

    def waiter():
        out["r"] = acquire(ctx.lockd.client(timeout=10), key, ttl_ms=2000, wait_ms=5000)
        out["t"] = time.monotonic()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.4)
    check(t.is_alive(), "the waiter must still wait: %r" % out.get("r"))
    t0 = time.monotonic()
    eq(release(other.client(), key, r.json["token"]).status, 200, "release on B")
    t.join(10)
    eq(out["r"].status, 201, "waiter on A")
    check(out["r"].json["fence"] > r.json["fence"], "fence grows")
    dt = out["t"] - t0
    check(dt < 0.3, "waiter woke %.0f ms after the release" % (dt * 1000))


@harness.scenario("a waiter on one instance is woken promptly when a holder on another expires",
                  backends=R)
def waiter_woken_by_remote_expiry(ctx):
    other = ctx.new_lockd()
    key = ctx.key("expire")
    t_sent = time.monotonic()
    r = acquire(other.client(), key, ttl_ms=800)
    t_got = time.monotonic()
    eq(r.status, 201, "holder's acquire on B")
    w = acquire(ctx.lockd.client(timeout=10), key, ttl_ms=2000, wait_ms=4000)
    t_w = time.monotonic()
    eq(w.status, 201, "waiter on A")
    check(w.json["fence"] > r.json["fence"], "fence grows")
    check(t_w >= t_sent + 0.8 - 0.02, "granted %.0f ms before the holder expired"
          % ((t_sent + 0.8 - t_w) * 1000))
    check(t_w <= t_got + 0.8 + 0.3, "granted %.0f ms after the holder expired"
          % ((t_w - t_got - 0.8) * 1000))
    eq(renew(other.client(), key, r.json["token"]).status, 409, "the expired holder's renew")


@harness.scenario("waiters on two instances are served first come, first served across both, on release and on expiry",
                  backends=R)
def fifo_across_instances(ctx):
    other = ctx.new_lockd()
    key = ctx.key("fifo")
    c = ctx.lockd.client()
    h = acquire(c, key, ttl_ms=10000)
    eq(h.status, 201, "holder")
    order, lock = [], threading.Lock()

    def waiter(name, ld):
        # the a* waiters release, the b* waiters let their TTL run out:
        # the turn must pass between instances either way
        wc = ld.client(timeout=15)
        r = acquire(wc, key, ttl_ms=5000 if name[0] == "a" else 200, wait_ms=10000)
        if r.status == 201:
            with lock:
                order.append((name, r.json["fence"]))
            if name[0] == "a":
                time.sleep(0.05)
                release(wc, key, r.json["token"])
        else:
            with lock:
                order.append((name, r.status))

    names = ["b1", "a1", "b2", "a2", "b3"]
    ts = []
    for n in names:
        t = threading.Thread(target=waiter, args=(n, other if n[0] == "b" else ctx.lockd))
        t.start()
        ts.append(t)
        time.sleep(0.15)  # each one registers before the next arrives
    # a try-once acquire on either instance does not jump the queue
    eq(acquire(other.client(), key).status, 409, "try-once while others wait")
    eq(release(c, key, h.json["token"]).status, 200, "release")
    for t in ts:
        t.join(20)
    eq([o[0] for o in order], names, "grant order")
    fences = [o[1] for o in order]
    check(all(isinstance(f, int) for f in fences), "all granted: %r" % order)
    check(fences == sorted(fences) and len(set(fences)) == len(fences), "fences grow: %r" % fences)


@harness.scenario("keys with braces, colons, spaces, stars, unicode and 512 bytes are distinct locks under the prefix",
                  backends=R)
def keys_are_injective(ctx):
    base = ctx.key("inj")
    keys = [base, base + "}", "{" + base + "}", "{" + base, base + ":", ":" + base,
            "lock:{" + base + "}", "fence:{" + base + "}", base + " x", base + "*",
            "*", "?" + base, base + "\u00fc\u4e2d\U0001f512", base + "}lock:{",
            "released:0", (base + "x" * 512)[:512]]
    check(len(keys[-1].encode()) == 512, "a 512-byte key")
    c = ctx.lockd.client()
    grants = {}
    for k in keys:
        r = acquire(c, k, ttl_ms=5000, owner="o-" + str(len(grants)))
        eq(r.status, 201, "acquire %r" % k)
        grants[k] = r.json
        eq(r.json["key"], k, "key echoed")
    for k in keys:
        r = acquire(c, k, ttl_ms=5000)
        eq(r.status, 409, "second acquire of %r" % k)
        i = c.request("GET", path(k))
        eq(i.status, 200, "inspect %r" % k)
        eq(i.json["fence"], grants[k]["fence"], "fence of %r" % k)
        check("token" not in i.json, "inspect shows no token")
    names = ctx.server.command("KEYS", "*")
    check(isinstance(names, list) and names, "KEYS: %r" % (names,))
    for n in names:
        check(n.startswith(b"lockd:"), "key outside the prefix: %r" % n)
        for k in keys:
            check(grants[k]["token"].encode() not in n, "token in a Redis key")
    for k in keys:
        eq(release(c, k, grants[k]["token"]).status, 200, "release %r" % k)
        eq(c.request("GET", path(k)).status, 404, "inspect after release %r" % k)


@harness.scenario("kill -9 of Redis under load gives only 503s or correct answers, no grant while down, service back within 5 s",
                  backends=R, slow=True)
def redis_killed_under_load(ctx):
    other = ctx.new_lockd()
    key = ctx.key("kill")
    events, holds = [], []
    lock = threading.Lock()
    stop = threading.Event()
    bad = []

    def worker(ld):
        c = ld.client(timeout=5)
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                r = acquire(c, key, ttl_ms=1500)
            except OSError as e:
                bad.append("acquire hung or failed: %r" % e)
                c = ld.client(timeout=5)
                continue
            t1 = time.monotonic()
            with lock:
                events.append((t0, t1, r.status))
            if r.status == 201:
                time.sleep(0.005)
                t2 = time.monotonic()
                try:
                    rr = release(c, key, r.json["token"])
                except OSError as e:
                    bad.append("release hung or failed: %r" % e)
                    c = ld.client(timeout=5)
                    continue
                if rr.status == 200:
                    with lock:
                        holds.append((t1, t2, r.json["fence"]))
                elif rr.status not in (503, 404):
                    bad.append("release: %r" % rr)
            elif r.status == 503:
                if r.error_code() != "backend_unavailable":
                    bad.append("503: %r" % r)
                time.sleep(0.02)
            elif r.status != 409:
                bad.append("acquire: %r" % r)

    ts = [threading.Thread(target=worker, args=(ld,)) for ld in (ctx.lockd, other) * 2]
    try:
        for t in ts:
            t.start()
        time.sleep(1.0)
        ctx.server.kill9()
        t_down = time.monotonic()
        time.sleep(1.5)
        t_up = time.monotonic()
        ctx.server.restart()
        t_back = wait_until(lambda: safe(lambda: acquire(ctx.lockd.client(timeout=5),
                                                         ctx.key("back"), ttl_ms=100).status == 201)
                            and time.monotonic(), 5.0)
        check(t_back, "no grant within 5 s of Redis restarting")
        check(t_back - t_up <= 5.0, "service back after %.1f s" % (t_back - t_up))
        time.sleep(1.0)
    finally:
        stop.set()
        for t in ts:
            t.join(15)
        ensure_redis_up(ctx)
    check(not bad, "bad answers: %s" % bad[:3])
    down = [e for e in events if e[0] > t_down and e[1] < t_up]
    check(down, "no request was answered while Redis was down")
    granted = [e for e in down if e[2] != 503]
    check(not granted, "answers other than 503 while Redis was down: %r" % granted[:3])
    check(any(e[0] > t_up and e[2] == 201 for e in events), "no grant after the restart")
    check_exclusion(holds)


@harness.scenario("SIGSTOP of Redis for 2 s gives 503s within the timeout, no hung request, and recovery after SIGCONT",
                  backends=R, slow=True)
def redis_stopped(ctx):
    key = ctx.key("stop")
    lat, codes, bad = [], [], []
    stop = threading.Event()

    def worker():
        c = ctx.lockd.client(timeout=6)
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                r = c.request("GET", path(key))
            except OSError as e:
                bad.append(repr(e))
                c = ctx.lockd.client(timeout=6)
                continue
            lat.append(time.monotonic() - t0)
            codes.append(r.status)
            time.sleep(0.02)

    r = acquire(ctx.lockd.client(), key, ttl_ms=20000)
    eq(r.status, 201, "acquire before the stop")
    ts = [threading.Thread(target=worker) for _ in range(4)]
    try:
        for t in ts:
            t.start()
        time.sleep(0.3)
        ctx.server.pause()
        time.sleep(0.3)
        t0 = time.monotonic()
        a = acquire(ctx.lockd.client(timeout=6), ctx.key("stop2"), ttl_ms=1000)
        dt = time.monotonic() - t0
        eq(a.status, 503, "acquire while Redis is stopped")
        check(dt < 2.5, "the 503 took %.1f s" % dt)
        rz = ctx.lockd.request("GET", "/readyz", timeout=6)
        eq(rz.status, 503, "/readyz while Redis is stopped")
        time.sleep(max(0.0, 2.0 - 0.6 - dt))
    finally:
        ctx.server.resume()
    t_cont = time.monotonic()
    try:
        ok = wait_until(lambda: safe(lambda: renew(ctx.lockd.client(timeout=5), key,
                                                   r.json["token"]).status == 200), 5.0)
        check(ok, "renew with the old token did not succeed within 5 s of SIGCONT")
        check(time.monotonic() - t_cont < 5.0, "slow recovery")
    finally:
        stop.set()
        for t in ts:
            t.join(15)
        ensure_redis_up(ctx)
    check(not bad, "requests failed or hung: %s" % bad[:3])
    check(503 in codes, "no 503 while Redis was stopped")
    check(set(codes) <= {200, 503}, "unexpected answers: %r" % sorted(set(codes)))
    check(max(lat) < 3.0, "a request took %.1f s" % max(lat))
    eq(release(ctx.lockd.client(), key, r.json["token"]).status, 200, "release")


@harness.scenario("after a Redis restart (appendonly) held locks keep their holders and fences keep increasing",
                  backends=R)
def redis_restart_keeps_state(ctx):
    other = ctx.new_lockd()
    key = ctx.key("durable")
    c = ctx.lockd.client()
    r = acquire(c, key, ttl_ms=30000, owner="before-restart")
    eq(r.status, 201, "acquire")
    try:
        ctx.server.kill9()
        eq(ctx.lockd.request("GET", "/readyz", timeout=5).status, 503, "/readyz while down")
        eq(acquire(other.client(timeout=5), key).status, 503, "acquire while down")
        ctx.server.restart()
        ok = wait_until(lambda: safe(lambda: ctx.lockd.request("GET", "/readyz", timeout=5).status == 200), 5.0)
        check(ok, "/readyz not 200 within 5 s of the restart")
        ok = wait_until(lambda: safe(lambda: other.request("GET", "/readyz", timeout=5).status == 200), 5.0)
        check(ok, "/readyz on B not 200 within 5 s of the restart")
    finally:
        ensure_redis_up(ctx)
    i = other.request("GET", path(key))
    eq(i.status, 200, "inspect after restart")
    eq(i.json["fence"], r.json["fence"], "fence of the holder")
    eq(i.json.get("owner"), "before-restart", "owner")
    eq(acquire(other.client(), key).status, 409, "the lock is still held")
    n = renew(other.client(), key, r.json["token"], ttl_ms=5000)
    eq(n.status, 200, "renew with the old token, through B")
    eq(n.json["fence"], r.json["fence"], "renew keeps the fence")
    eq(release(c, key, r.json["token"]).status, 200, "release")
    a = acquire(other.client(), key)
    eq(a.status, 201, "acquire after release")
    check(a.json["fence"] > r.json["fence"], "fence grows across the restart")
    eq(release(other.client(), key, a.json["token"]).status, 200, "release")


@harness.scenario("/readyz is 503 while Redis is down and 200 once it is back", backends=R)
def readyz_follows_redis(ctx):
    eq(ctx.lockd.request("GET", "/readyz").status, 200, "/readyz before")
    try:
        ctx.server.stop()
        r = ctx.lockd.request("GET", "/readyz", timeout=5)
        eq(r.status, 503, "/readyz while down")
        eq(r.json.get("status"), "unavailable", "status")
        eq(r.json.get("backend"), "redis", "backend")
        eq(ctx.lockd.acquire(ctx.key("rz")).status, 503, "acquire while down")
        ctx.server.restart()
        ok = wait_until(lambda: safe(lambda: ctx.lockd.request("GET", "/readyz", timeout=5).status == 200), 5.0)
        check(ok, "/readyz not 200 within 5 s")
    finally:
        ensure_redis_up(ctx)
    r = ctx.lockd.request("GET", "/readyz")
    eq(r.json.get("fifo"), "store", "fifo")
    eq(ctx.lockd.acquire(ctx.key("rz"), ttl_ms=100).status, 201, "acquire after")

"""tests/e2e/test_zookeeper.py - what only the ZooKeeper backend promises:
several lockd instances on one ZooKeeper exclude each other with fences
from ZooKeeper's zxids, waiters are served first come, first served across
instances (sequential nodes), a lock outlives the lockd (and the session)
that granted it until its TTL, a dead lockd's waiters leave the queue with
its session, ZooKeeper down or stopped gives 503s (never a grant) and is
served again without restarting lockd, a lockd whose session expired makes
a new one, and keys map injectively onto node names that stay inside
/lockd/locks and are removed once free."""

import base64
import signal
import threading
import time

import harness
from harness import check, eq
from multi import (Load, acquire, check_injective_grants, check_lock_kept, check_unready,
                   ensure_server_up, exclusion_run, path, release, release_each, renew, safe,
                   wait_first_grant, wait_ready, wait_until, wake_by_expiry, wake_by_release)

Z = ["zookeeper"]
LOCKS = "/lockd/locks"


def node(key):
    return "k" + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


@harness.scenario("two instances on one ZooKeeper exclude each other and fences (zxids) strictly increase",
                  backends=Z)
def two_instances_exclude(ctx):
    exclusion_run(ctx, 2.0, wait_ms=300, per_instance=2)


@harness.scenario("waiters queued alternately on two instances are granted in arrival order, and try-once does not jump them",
                  backends=Z)
def fifo_across_instances(ctx):
    other = ctx.new_lockd()
    key = ctx.key("fifo")
    c = ctx.lockd.client()
    h = acquire(c, key, ttl_ms=10000)
    eq(h.status, 201, "holder")
    order, lock = [], threading.Lock()

    def waiter(name, ld):
        wc = ld.client(timeout=15)
        r = acquire(wc, key, ttl_ms=5000, wait_ms=10000)
        with lock:
            order.append((name, r.json["fence"] if r.status == 201 else r.status))
        if r.status == 201:
            time.sleep(0.05)
            release(wc, key, r.json["token"])

    names = ["b1", "a1", "b2", "a2", "b3", "a3"]
    ts = []
    for n in names:
        t = threading.Thread(target=waiter, args=(n, other if n[0] == "b" else ctx.lockd))
        t.start()
        ts.append(t)
        time.sleep(0.15)  # each one is queued before the next arrives
    kids = ctx.server.children(LOCKS + "/" + node(key))
    eq(sorted(kids), sorted(["h", "t" + h.json["token"]] + [k for k in kids if k.startswith("w")]),
       "children are h, its token marker and waiters")
    eq(len([k for k in kids if k.startswith("w")]), len(names), "one sequential node per waiter")
    eq(acquire(other.client(), key).status, 409, "try-once on B while others wait")
    eq(acquire(c, key).status, 409, "try-once on A while others wait")
    eq(release(c, key, h.json["token"]).status, 200, "release")
    for t in ts:
        t.join(20)
    eq([o[0] for o in order], names, "grant order")
    fences = [o[1] for o in order]
    check(all(isinstance(f, int) for f in fences), "all granted: %r" % order)
    check(fences == sorted(fences) and len(set(fences)) == len(fences), "fences grow: %r" % fences)
    check(fences[0] > h.json["fence"], "fences grow past the first holder's")


@harness.scenario("a release or an expiry on one instance wakes a waiter on the other promptly",
                  backends=Z)
def wake_across_instances(ctx):
    other = ctx.new_lockd()
    r, _ = wake_by_release(ctx.lockd, other, ctx.key("release"), within=0.3, holder_ttl_ms=800)
    eq(release(other.client(), r.json["key"], r.json["token"]).status, 200, "release the waiter's grant")
    r, _ = wake_by_expiry(ctx.lockd, other, ctx.key("expiry"), early=0.05)
    eq(release(other.client(), r.json["key"], r.json["token"]).status, 200, "release the waiter's grant")


@harness.scenario("kill -9 of a lockd holding locks: they stay held until their TTL, then go to a waiter on the other instance",
                  backends=Z)
def holder_lockd_killed(ctx):
    b = ctx.new_lockd()
    keys = [ctx.key("crash-%d" % i) for i in range(3)]
    grants = {}
    for k in keys:
        r = acquire(b.client(), k, ttl_ms=2500, owner="b")
        eq(r.status, 201, "acquire on B")
        grants[k] = r.json
    t_granted = time.monotonic()
    b.kill9()
    res = {}

    def waiter(k):
        res[k] = acquire(ctx.lockd.client(timeout=10), k, ttl_ms=1000, wait_ms=6000)
        res[k + "/t"] = time.monotonic()

    ts = [threading.Thread(target=waiter, args=(k,)) for k in keys]
    for t in ts:
        t.start()
    time.sleep(1.0)
    for k in keys:
        i = ctx.lockd.request("GET", path(k))
        eq(i.status, 200, "still held after the crash")
        eq(i.json["fence"], grants[k]["fence"], "same holder")
        eq(i.json.get("owner"), "b", "owner")
        eq(acquire(ctx.lockd.client(), k).status, 409, "try-once while held")
    for t in ts:
        t.join(10)
    for k in keys:
        r = res[k]
        eq(r.status, 201, "the waiter on A gets %s" % k)
        check(res[k + "/t"] >= t_granted + 2.5 - 0.05, "granted %.0f ms before the TTL"
              % ((t_granted + 2.5 - res[k + "/t"]) * 1000))
        check(res[k + "/t"] <= t_granted + 2.5 + 0.6, "granted %.0f ms after the TTL"
              % ((res[k + "/t"] - t_granted - 2.5) * 1000))
        check(r.json["fence"] > grants[k]["fence"], "fence grows")
        eq(release(ctx.lockd.client(), k, r.json["token"]).status, 200, "release")


@harness.scenario("kill -9 of a lockd with queued waiters: their places leave the queue with its session",
                  backends=Z)
def waiter_lockd_killed(ctx):
    b = ctx.new_lockd()
    key = ctx.key("qcrash")
    h = acquire(ctx.lockd.client(), key, ttl_ms=20000)
    eq(h.status, 201, "holder on A")
    bw = []
    for _ in range(2):
        t = threading.Thread(target=lambda: safe(lambda: acquire(b.client(timeout=30), key,
                                                                 ttl_ms=1000, wait_ms=20000)))
        t.daemon = True
        t.start()
        bw.append(t)
        time.sleep(0.15)
    res = {}

    def waiter():
        res["r"] = acquire(ctx.lockd.client(timeout=20), key, ttl_ms=1000, wait_ms=15000)
        res["t"] = time.monotonic()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    eq(len([k for k in ctx.server.children(LOCKS + "/" + node(key)) if k.startswith("w")]), 3,
       "three waiters queued")
    b.kill9()
    t_kill = time.monotonic()
    eq(release(ctx.lockd.client(), key, h.json["token"]).status, 200, "release")
    t.join(20)
    eq(res["r"].status, 201, "A's waiter, queued behind B's dead ones")
    # the session (4 s) must end before B's places go
    check(res["t"] - t_kill < 4.0 + 3.0, "granted %.1f s after the kill" % (res["t"] - t_kill))
    eq(release(ctx.lockd.client(), key, res["r"].json["token"]).status, 200, "release")


@harness.scenario("kill -9 and restart of ZooKeeper: 503s while down (never a grant), /readyz 503, then recovery without restarting lockd",
                  backends=Z, slow=True)
def zookeeper_killed(ctx):
    other = ctx.new_lockd()
    held = ctx.key("durable")
    r0 = acquire(ctx.lockd.client(), held, ttl_ms=60000, owner="before")
    eq(r0.status, 201, "a lock held across the restart")
    load = Load(ctx.key("kill"), timeout=6)
    try:
        load.start((ctx.lockd, other) * 2)
        time.sleep(1.0)
        ctx.server.kill9()
        t_down = time.monotonic()
        time.sleep(0.3)
        check_unready(ctx.lockd, "zookeeper", "/readyz while ZooKeeper is down")
        eq(ctx.lockd.request("GET", path(held), timeout=5).status, 503, "inspect while down")
        time.sleep(1.2)
        t_up = time.monotonic()
        ctx.server.restart()
        t_back = wait_first_grant(ctx, 10.0)
        check(t_back, "no grant within 10 s of ZooKeeper restarting")
        check(wait_ready(other, 10.0), "/readyz on B not 200 after the restart")
        time.sleep(1.0)
    finally:
        load.stop()
        ensure_server_up(ctx)
    load.check_outage(t_down, t_up, "ZooKeeper")
    check_lock_kept(other, held, r0.json, "before")


@harness.scenario("SIGSTOP of ZooKeeper gives 503s within the timeout, never a hung request, and recovery after SIGCONT",
                  backends=Z, slow=True)
def zookeeper_stopped(ctx):
    key = ctx.key("stop")
    r = acquire(ctx.lockd.client(), key, ttl_ms=30000)
    eq(r.status, 201, "acquire before the stop")
    try:
        ctx.server.pause()
        time.sleep(0.2)
        lat = []
        for i in range(3):
            t0 = time.monotonic()
            a = acquire(ctx.lockd.client(timeout=8), ctx.key("stop2"), ttl_ms=1000)
            lat.append(time.monotonic() - t0)
            eq(a.status, 503, "acquire while ZooKeeper is stopped")
        check(max(lat) < 3.0, "a 503 took %.1f s" % max(lat))
        t0 = time.monotonic()
        rz = ctx.lockd.request("GET", "/readyz", timeout=8)
        eq(rz.status, 503, "/readyz while ZooKeeper is stopped")
        check(time.monotonic() - t0 < 3.0, "/readyz took %.1f s" % (time.monotonic() - t0))
    finally:
        ctx.server.resume()
    try:
        ok = wait_until(lambda: safe(lambda: renew(ctx.lockd.client(timeout=5), key,
                                                   r.json["token"]).status == 200), 10.0)
        check(ok, "renew with the old token did not succeed within 10 s of SIGCONT")
    finally:
        ensure_server_up(ctx)
    eq(release(ctx.lockd.client(), key, r.json["token"]).status, 200, "release")


@harness.scenario("a lockd whose ZooKeeper session expired (SIGSTOP past the session timeout) opens a new one; its locks stay",
                  backends=Z, slow=True)
def session_expiry_recovers(ctx):
    b = ctx.new_lockd()
    key = ctx.key("expire")
    r = acquire(b.client(), key, ttl_ms=30000, owner="b")
    eq(r.status, 201, "acquire on B")
    b.signal(signal.SIGSTOP)
    try:
        time.sleep(4.0 + 2.0)  # the URL asks for 4 s sessions
    finally:
        b.signal(signal.SIGCONT)
    check(wait_ready(b, 15.0), "B not ready again within 15 s")
    check("session expired" in b.log_tail(20000), "B did not notice its session expired: %s" % b.log_tail(1500))
    i = ctx.lockd.request("GET", path(key))
    eq(i.status, 200, "the lock outlived B's session")
    eq(i.json["fence"], r.json["fence"], "same holder")
    n = renew(b.client(), key, r.json["token"], ttl_ms=5000)
    eq(n.status, 200, "renew through B's new session")
    eq(release(b.client(), key, r.json["token"]).status, 200, "release through B")
    a = acquire(b.client(), ctx.key("expire2"), ttl_ms=1000)
    eq(a.status, 201, "B grants again")


@harness.scenario("keys with /, .., ., %, unicode and 512 bytes are distinct locks on node names inside /lockd/locks, removed once free",
                  backends=Z)
def keys_are_injective(ctx):
    base = ctx.key("inj")
    keys = [base, ".", "..", "../" + base, base + "/..", base + "/.", "/" + base, base + "/",
            base + "//x", "a/../" + base, base + "%2F", base + " x", "zookeeper",
            base + "\u00fc\u4e2d\U0001f512", "\u00fc" * 100, (base + "x" * 512)[:512]]
    check(len(keys[-1].encode()) == 512, "a 512-byte key")
    c = ctx.lockd.client()
    grants = check_injective_grants(c, keys, lambda n: "o-%d" % n)
    names = ctx.server.children(LOCKS)
    for k in keys:
        check(node(k) in names, "node for %r" % k)
    eq(sorted(ctx.server.children("/")), ["lockd", "zookeeper"], "nothing outside /lockd")
    eq(sorted(ctx.server.children("/lockd")), ["clock", "locks"], "nothing else in /lockd")
    release_each(c, keys, grants)
    left = [n for n in ctx.server.children(LOCKS) if n in {node(k) for k in keys}]
    eq(left, [], "key nodes left after release")


@harness.scenario("expired locks nobody touches again and abandoned waiters leave no nodes behind",
                  backends=Z)
def nothing_grows(ctx):
    keys = [ctx.key("gc-%d" % i) for i in range(5)]
    for k in keys:
        eq(acquire(ctx.lockd.client(), k, ttl_ms=300).status, 201, "acquire %r" % k)
    w = ctx.key("gc-wait")
    h = acquire(ctx.lockd.client(), w, ttl_ms=5000)
    eq(h.status, 201, "holder")
    eq(acquire(ctx.lockd.client(), w, ttl_ms=1000, wait_ms=300).status, 409, "waiter times out")
    eq([n for n in ctx.server.children(LOCKS + "/" + node(w)) if n.startswith("w")], [],
       "the timed-out waiter left the queue")
    eq(release(ctx.lockd.client(), w, h.json["token"]).status, 200, "release")
    wanted = {node(k) for k in keys + [w]}
    gone = wait_until(lambda: not (wanted & set(ctx.server.children(LOCKS))), 15.0, step=0.25)
    check(gone, "nodes left: %r" % sorted(wanted & set(ctx.server.children(LOCKS))))

"""tests/e2e/test_cluster.py - lockd on a Redis Cluster (redis+cluster://):
3 masters + 3 replicas on loopback (server_cluster.py). The contract through
the cluster URL across two lockd instances; keys spread over every master,
each lock's Redis keys on one slot; a held lock whose slot migrates to
another master (MOVED/ASK followed) keeps renewing and its fences grow;
multi-key requests atomic on one hash tag and 400 across tags; a master
killed -9 under light load is replaced by its replica and lockd serves
again (the time is measured and printed).

The non-destructive scenarios share one cluster (started on first use,
stopped at exit); the failover scenario starts its own."""

import atexit
import os
import tempfile
import threading
import time

import harness
from harness import check, eq
from multi import acquire, path, release, renew, wait_until
from server_cluster import RedisCluster, keyslot, lock_slot, lock_tag

R = ["redis"]
ADMIN = "adm1n-Token_cluster-e2e"
_shared = {}


def shared_cluster():
    """The module's cluster, started on first use (stopped at exit)."""
    if "c" not in _shared:
        tmp = tempfile.mkdtemp(prefix="lockd-cluster-")
        c = RedisCluster(tmp)
        atexit.register(c.stop)
        c.start()
        _shared["c"] = c
    return _shared["c"]


def cluster_lockd(ctx, cluster, opts="", args=()):
    """A lockd on the cluster, waited for until /readyz says ready."""
    ld = harness.Lockd(cluster.url(opts), args=args, tmpdir=ctx.tmpdir)
    ctx.extra.append(ld)
    ld.start()
    r = wait_until(lambda: ld.request("GET", "/readyz").status == 200, 15)
    check(r, "lockd on the cluster never ready: %s" % ld.log_tail())
    return ld


def admin_args(ctx):
    p = os.path.join(ctx.tmpdir, "admin-%d" % harness.free_port())
    with open(p, "w") as f:
        f.write(ADMIN + "\n")
    os.chmod(p, 0o600)
    return ["--admin-token-file", p]


def grant(c, key, ttl_ms=10000, what="acquire"):
    r = acquire(c, key, ttl_ms=ttl_ms)
    eq(r.status, 201, "%s of %s: %s" % (what, key, r.text[:200]))
    return r.json


def cluster_key_exists(cluster, key, kind="lock:"):
    """True if the master of the lock's slot holds its Redis key."""
    name = "lockd:{%s}%s{%s}" % (lock_tag(key), kind, key)
    node = cluster.master_of_slot(lock_slot(key))
    return cluster.cmd(node, "EXISTS", name) == 1


def cluster_index_bucket(cluster, key):
    """(node, the bucket of its tag's index that holds key's members): the
    one named by the least key > key in its directory (the key past the
    bucket), or the index itself, the last (backends/redis/holders.lua)."""
    k = key.encode()
    node = cluster.master_of_slot(lock_slot(key))
    ix = ("lockd:{%s}keys" % lock_tag(key)).encode()
    hi = cluster.cmd(node, "ZRANGEBYLEX", ix + b"@", b"(" + k, b"+", "LIMIT", "0", "1")
    return node, (ix + b"#" + hi[0] if hi else ix)


def cluster_index_members(cluster, key):
    """The key's members of its tag's index on the master of its slot: the
    key, NUL and its last fence."""
    k = key.encode()
    node, bucket = cluster_index_bucket(cluster, key)
    return cluster.cmd(node, "ZRANGEBYLEX", bucket, b"[" + k, b"[" + k + b"\x00\xff")


@harness.scenario("cluster: the contract through redis+cluster:// on two instances",
                  backends=R)
def contract_basics(ctx):
    cl = shared_cluster()
    a = cluster_lockd(ctx, cl, args=admin_args(ctx))
    b = cluster_lockd(ctx, cl)
    ca, cb = a.client(), b.client()
    k = ctx.key("cl-basic")
    g = grant(ca, k)
    eq(acquire(cb, k).status, 409, "the other instance's acquire of a held key")
    r = renew(cb, k, g["token"], ttl_ms=20000)
    eq(r.status, 200, "renew through the other instance: %s" % r.text[:200])
    eq(r.json["fence"], g["fence"], "renew keeps the fence")
    r = cb.request("GET", path(k))
    eq(r.status, 200, "inspect")
    eq(r.json.get("fence"), g["fence"], "inspect's fence")
    # list: every held key of a prefix, in byte order, through either one
    pre = ctx.key("cl-list") + "/"
    keys = [pre + s for s in ("b", "a", "c/1", "A")]
    for key in keys:
        grant(ca, key)
    r = cb.request("GET", "/locks?prefix=" + pre.replace("/", "%2F") + "&limit=2")
    eq(r.status, 200, "list: %s" % r.text[:300])
    got = [e["key"] for e in r.json["locks"]]
    cursor = r.json.get("next_cursor")
    while cursor:
        r = cb.request("GET", "/locks?prefix=" + pre.replace("/", "%2F") +
                       "&limit=2&cursor=" + cursor)
        eq(r.status, 200, "list's next page")
        got += [e["key"] for e in r.json["locks"]]
        cursor = r.json.get("next_cursor")
    eq(got, sorted(keys, key=lambda s: s.encode()), "listed keys in byte order")
    eq(acquire(ca, keys[0]).status, 409, "a listed key is held")
    # wait across instances: b waits, a releases, b is granted promptly
    w = {}
    t = threading.Thread(target=lambda: w.update(r=acquire(cb, k, ttl_ms=5000, wait_ms=8000)))
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    eq(release(ca, k, g["token"]).status, 200, "release")
    t.join(12)
    eq(w["r"].status, 201, "the waiter on the other instance")
    check(time.monotonic() - t0 < 2.0, "the waiter was woken late")
    check(w["r"].json["fence"] > g["fence"], "fences grow")
    # forced release through the admin token
    r = a.request("DELETE", path(k) + "?force=true",
                  headers={"Authorization": "Bearer " + ADMIN})
    eq(r.status, 200, "forced release: %s" % r.text[:200])
    eq(cb.request("GET", path(k)).status, 404, "free after the forced release")
    m = a.request("GET", "/metrics").text
    held = [l for l in m.splitlines() if l.startswith("lockd_locks_held ")]
    check(held and int(held[0].split()[1]) >= len(keys),
          "lockd_locks_held counts the held keys: %r" % held)


@harness.scenario("cluster: keys spread over every master, each lock on one slot",
                  backends=R)
def keys_spread(ctx):
    cl = shared_cluster()
    ld = cluster_lockd(ctx, cl)
    c = ld.client()
    masters = set()
    for i in range(30):
        k = ctx.key("spread%d" % i)
        g = grant(c, k)
        node = cl.master_of_slot(lock_slot(k))
        masters.add(node)
        check(cluster_key_exists(cl, k, "lock:") and
              cluster_index_members(cl, k) == [k.encode() + b"\x00%d" % g["fence"]],
              "lock %s: its lock and its tag's index member (with its fence) are not on the "
              "master of slot %d" % (k, lock_slot(k)))
        check(not cluster_key_exists(cl, k, "fence:"), "lock %s: a counter of its own" % k)
        eq(release(c, k, g["token"]).status, 200, "release")
    eq(len(masters), 3, "masters that got keys (%r)" % sorted(masters))


@harness.scenario("cluster: a held lock follows its slot to another master", backends=R)
def slot_migration(ctx):
    cl = shared_cluster()
    ld = cluster_lockd(ctx, cl)
    c = ld.client()
    k = ctx.key("moving")
    g = grant(c, k, ttl_ms=30000)
    slot = lock_slot(k)
    src = cl.master_of_slot(slot)
    dst = next(m for m in cl.masters() if m != src)
    during = []
    # mid-migration (MIGRATING/IMPORTING, keys not moved yet): the lock is
    # still on the source; Redis may answer TRYAGAIN (lockd: 503), never 404
    cl.migrate_slot(slot, dst, between=lambda: during.append(
        renew(c, k, g["token"], ttl_ms=30000).status))
    check(during[0] in (200, 503), "renew mid-migration: %r" % during)
    eq(cl.master_of_slot(slot), dst, "the slot's new master")
    r = renew(c, k, g["token"], ttl_ms=30000)
    eq(r.status, 200, "renew after the migration (MOVED followed): %s" % r.text[:200])
    eq(r.json["fence"], g["fence"], "the fence moved with the lock")
    eq(acquire(c, k).status, 409, "still held after the move")
    eq(release(c, k, g["token"]).status, 200, "release on the new master")
    g2 = grant(c, k)
    check(g2["fence"] > g["fence"], "fence grows after the move: %d -> %d"
          % (g["fence"], g2["fence"]))
    check(cluster_key_exists(cl, k), "the lock's keys on the new master")
    eq(release(c, k, g2["token"]).status, 200, "release")
    # move it back while held: ASK while keys are split, then MOVED
    g3 = grant(c, k, ttl_ms=30000)
    cl.migrate_slot(slot, src)
    r = renew(c, k, g3["token"])
    eq(r.status, 200, "renew after moving back: %s" % r.text[:200])
    eq(release(c, k, g3["token"]).status, 200, "release after moving back")


@harness.scenario("cluster: multi-key atomic on one hash tag, 400 across slots",
                  backends=R)
def multi_keys(ctx):
    cl = shared_cluster()
    ld = cluster_lockd(ctx, cl)
    c = ld.client()
    tag = ctx.key("order")
    keys = ["order:{%s}:a" % tag, "order:{%s}:b" % tag, "x{%s}" % tag]
    r = c.request("POST", "/locks", {"keys": keys, "ttl_ms": 10000})
    eq(r.status, 201, "multi-key acquire on one tag: %s" % r.text[:300])
    tok = r.json["token"]
    eq(acquire(c, keys[1]).status, 409, "each key held")
    r = c.request("PUT", "/locks", {"keys": keys, "token": tok, "ttl_ms": 20000})
    eq(r.status, 200, "multi-key renew")
    r = c.request("DELETE", "/locks", {"keys": keys, "token": tok})
    eq(r.status, 200, "multi-key release")
    eq(c.request("GET", path(keys[0])).status, 404, "released")
    # keys on different slots: a clear 400, nothing held
    apart = [ctx.key("apart-a"), ctx.key("apart-b")]
    while lock_slot(apart[0]) == lock_slot(apart[1]):
        apart[1] = ctx.key("apart-b")
    for method, body in (("POST", {"keys": apart, "ttl_ms": 5000}),
                         ("PUT", {"keys": apart, "token": tok}),
                         ("DELETE", {"keys": apart, "token": tok})):
        r = c.request(method, "/locks", body)
        eq(r.status, 400, "%s /locks across slots: %s" % (method, r.text[:300]))
        eq(r.json["error"]["code"], "invalid_parameter", "its code")
        check("hash tag" in r.json["error"]["message"], "the message names the hash tag: %r"
              % r.json)
    eq(c.request("GET", path(apart[0])).status, 404, "nothing was granted")


@harness.scenario("cluster: a master killed -9 is replaced and lockd serves again",
                  backends=R)
def master_failover(ctx):
    cl = RedisCluster(tempfile.mkdtemp(prefix="lockd-cluster-fo-"))
    try:
        cl.start()
        _failover_run(ctx, cl)
    finally:
        cl.stop()


def subscriber_node(cl):
    """The master a SUBSCRIBE connection is on (one lockd running)."""
    for m in cl.masters():
        if b" sub=1 " in cl.cmd(m, "CLIENT", "LIST"):
            return m
    return None


def _failover_run(ctx, cl):
    opts = "timeout_ms=500&connect_timeout_ms=200"
    # the waiting instance first, alone: its subscriber's node is the victim,
    # so the subscriber has to move to another node
    ld2 = cluster_lockd(ctx, cl, opts=opts)
    victim = wait_until(lambda: subscriber_node(cl), 5)
    check(victim is not None, "no subscriber connection on any master")
    ld = cluster_lockd(ctx, cl, opts=opts)
    c = ld.client(timeout=10)
    # a key on the victim, one elsewhere
    k = next(k for k in (ctx.key("fo%d" % i) for i in range(500))
             if cl.master_of_slot(lock_slot(k)) == victim)
    g = grant(c, k, ttl_ms=60000)
    stop = threading.Event()
    codes = {}

    def load():
        lc = ld.client(timeout=5)
        n = 0
        while not stop.is_set():
            n += 1
            try:
                st = acquire(lc, "%s-load-%d" % (k, n), ttl_ms=200).status
            except OSError:
                st = "io"
            codes[st] = codes.get(st, 0) + 1
            time.sleep(0.02)
    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        cl.kill9(victim)
        last = {}

        def served():
            last["r"] = renew(c, k, g["token"], ttl_ms=60000)
            return last["r"].status != 503
        ok = wait_until(served, 30, 0.05)
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join(10)
    bad = {s: n for s, n in codes.items() if s not in (201, 409, 503)}
    check(not bad, "only 201/409/503 under failover: %r" % codes)
    check(ok, "the victim's slot was not served again within 30 s")
    st = last["r"].status
    harness.log("    cluster failover: lockd served the victim's slot again after "
                "%.0f ms (node timeout 1000 ms); the held lock's renew: %d; load codes %r"
                % (took * 1000, st, codes))
    # without min_replicas a grant the replica had not received is lost by
    # design (404 here); anything else is a bug
    check(st in (200, 404), "renew after the failover: %s" % last["r"].text[:200])
    k2 = ctx.key("after")
    g2 = acquire(c, k2, ttl_ms=10000)
    eq(g2.status, 201, "a fresh grant after the failover")
    # the other instance's subscriber moved off the dead node: a release
    # here wakes its waiter at once, not at the TTL
    w = {}
    t = threading.Thread(target=lambda: w.update(
        r=acquire(ld2.client(timeout=15), k2, ttl_ms=5000, wait_ms=9000)))
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    eq(release(c, k2, g2.json["token"]).status, 200, "release after the failover")
    t.join(15)
    eq(w["r"].status, 201, "the other instance's waiter")
    woke = time.monotonic() - t0
    # (without a subscriber it would retry only after 2 s of waiting)
    check(woke < 0.8, "the waiter on the other instance was woken after %.1f s" % woke)
    _failover_with_acks(ctx, cl, victim)


def _failover_with_acks(ctx, cl, dead):
    """With min_replicas=1 a held lock survives its master's failover: the
    grant was acknowledged by the replica that takes over. (Without it,
    above, it may be lost by design.) Until the dead node is back as a
    replica, the promoted master has none and grants there are 503."""
    cl.rejoin(dead)
    ld = cluster_lockd(ctx, cl, opts="timeout_ms=500&connect_timeout_ms=200&min_replicas=1")
    c = ld.client(timeout=10)
    victim = cl.masters()[0]
    k = next(k for k in (ctx.key("acked%d" % i) for i in range(500))
             if cl.master_of_slot(lock_slot(k)) == victim)
    g = grant(c, k, ttl_ms=60000)
    new = cl.failover(victim, timeout=30)
    # the new master has no replica until the old one rejoins: WAIT 1 fails
    r = renew(c, k, g["token"], ttl_ms=60000)
    eq(r.status, 503, "renew with min_replicas=1 while the promoted master has no replica")
    cl.rejoin(victim)
    last = {}

    def renewed():
        last["r"] = renew(c, k, g["token"], ttl_ms=60000)
        return last["r"].status != 503
    check(wait_until(renewed, 15, 0.05), "renew still 503 after the old master rejoined")
    eq(last["r"].status, 200, "the acknowledged lock after the failover to node %d" % new)
    eq(release(c, k, g["token"]).status, 200, "release")
    g2 = grant(c, k, ttl_ms=5000)
    check(g2["fence"] > g["fence"], "fence after the failover: %d after %d" % (g2["fence"], g["fence"]))


@harness.scenario("cluster: issue 19: nothing of a released or expired key stays for ever on its master; fences still increase",
                  backends=R)
def nothing_stays_for_ever(ctx):
    cl = shared_cluster()
    ld = cluster_lockd(ctx, cl)
    c = ld.client()
    hint = ctx.key("gone")
    released = ["%s-r%d" % (hint, i) for i in range(60)]
    expired = ["%s-e%d" % (hint, i) for i in range(30)]
    fences = {}
    for k in released:
        g = grant(c, k)
        fences[k] = g["fence"]
        eq(release(c, k, g["token"]).status, 200, "release")
    for k in expired:
        fences[k] = grant(c, k, ttl_ms=200)["fence"]
    time.sleep(0.5)
    for k in released + expired:
        node = cl.master_of_slot(lock_slot(k))
        tag = lock_tag(k)
        names = cl.cmd(node, "KEYS", "lockd:{%s}*" % tag)  # one tag: a handful
        for n in names:
            t = cl.cmd(node, "PTTL", n)
            check(t != -1, "%r of %s is kept for ever" % (n, k))
            check(t <= 200 + 2 * 60000, "%r of %s stays %d ms" % (n, k, t))
        own = ("lockd:{%s}fence:{%s}" % (tag, k)).encode()
        check(own not in names, "%s: a fence counter of its own" % k)
        # the expired holder's index member stays (with the tag's index's
        # expiry: no grant of another key samples it) for a takeover to
        # tell its fence
        eq(cluster_index_members(cl, k),
           [k.encode() + b"\x00%d" % fences[k]] if k in expired else [],
           "%s: its index members" % k)
    # a key's fence after its index member went: still greater (its slot's)
    for k in released[:10] + expired[:10]:
        node, bucket = cluster_index_bucket(cl, k)
        cl.cmd(node, "ZREMRANGEBYLEX", bucket, "[" + k, ("[" + k).encode() + b"\xff")
        g = grant(c, k, what="acquire again")
        check(g["fence"] > fences[k], "%s: fence %d after %d" % (k, g["fence"], fences[k]))
        eq(release(c, k, g["token"]).status, 200, "release")
    # the directory keeps each key's expiry in a sorted set, and a note takes
    # out what expired over a minute ago (planted here: a key of 1970)
    d = cl.master_of_slot(keyslot("lockd:{dir}expiry"))
    t = cl.cmd(d, "TYPE", "lockd:{dir}expiry")
    eq(t if isinstance(t, str) else t.decode(), "zset", "the directory's expiries")
    old = "%s-1970" % hint
    cl.cmd(d, "ZADD", "lockd:{dir}expiry", "1", old)
    cl.cmd(d, "ZADD", "lockd:{dir}index", "0", old)
    cl.cmd(d, "ZADD", "lockd:{dir}held", "1", old + "\0" + "0" * 16)
    k = "%s-note" % hint
    g = grant(c, k)
    eq(release(c, k, g["token"]).status, 200, "release")
    eq(cl.cmd(d, "ZSCORE", "lockd:{dir}expiry", old), None, "a stale expiry after a note")
    eq(cl.cmd(d, "ZSCORE", "lockd:{dir}index", old), None, "a stale index entry after a note")
    eq(cl.cmd(d, "ZSCORE", "lockd:{dir}held", old + "\0" + "0" * 16), None,
       "a stale holder after a note")

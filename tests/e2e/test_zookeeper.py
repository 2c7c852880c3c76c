"""tests/e2e/test_zookeeper.py - what only the ZooKeeper backend promises:
several lockd instances on one ZooKeeper exclude each other with fences
from ZooKeeper's zxids, waiters are served first come, first served across
instances (sequential nodes), a lock outlives the lockd (and the session)
that granted it until its TTL, a dead lockd's waiters leave the queue with
its session, ZooKeeper down or stopped gives 503s (never a grant) and is
served again without restarting lockd, a lockd whose session expired makes
a new one, keys map injectively onto node names that stay inside
/lockd/locks and are removed once free, and a waiter whose grant's answer
came too late (ZooKeeper's replies or the request held up by a proxy) is
never answered with that stale or void holder."""

import base64
import calendar
import signal
import socket
import struct
import threading
import time

import harness
from delayproxy import DelayProxy, length_prefixed
from harness import check, eq
from server_zookeeper import _recv_exact
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
    # other scenarios make chroots of their own beside /lockd: none may
    # appear while these keys are taken
    roots = sorted(ctx.server.children("/"))
    check("lockd" in roots and "zookeeper" in roots, "/lockd and /zookeeper: %r" % roots)
    grants = check_injective_grants(c, keys, lambda n: "o-%d" % n)
    names = ctx.server.children(LOCKS)
    for k in keys:
        check(node(k) in names, "node for %r" % k)
    eq(sorted(ctx.server.children("/")), roots, "nothing outside /lockd")
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


# ---- a waiter's grant that ZooKeeper made, but lockd heard of too late ----

def zk_grant_multi(msg):
    """Whether msg (one client -> ZooKeeper message) is a multi whose first
    op is a create: lockd's grant (a release starts with a delete, a renew
    with a check). A message: length, xid, type (14: multi), then each op's
    header (type, done, err) and body."""
    if len(msg) < 16:
        return False
    _xid, typ, first = struct.unpack_from(">iii", msg, 4)
    return typ == 14 and first in (1, 15, 19, 21)  # create, 2, container, TTL


def zk_delete_tree(port, path, timeout=5.0):
    """Delete path and everything under it, over one fresh session speaking
    the wire protocol (as server_zookeeper.zk_children does)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)

        def call(req):
            s.sendall(struct.pack(">i", len(req)) + req)
            body = _recv_exact(s, struct.unpack(">i", _recv_exact(s, 4))[0])
            return struct.unpack(">iqi", body[:16])[2], body[16:]

        req = struct.pack(">iqiqi16s", 0, 0, 4000, 0, 16, b"\0" * 16)
        s.sendall(struct.pack(">i", len(req)) + req)
        _recv_exact(s, struct.unpack(">i", _recv_exact(s, 4))[0])
        xid = 0

        def delete(p):
            nonlocal xid
            b = p.encode()
            xid += 1
            err, body = call(struct.pack(">iii", xid, 8, len(b)) + b + b"\0")  # getChildren
            if err != 0:
                return
            off = 4
            for _ in range(struct.unpack(">i", body[:4])[0]):
                n = struct.unpack(">i", body[off:off + 4])[0]
                delete(p.rstrip("/") + "/" + body[off + 4:off + 4 + n].decode())
                off += 4 + n
            xid += 1
            call(struct.pack(">iii", xid, 2, len(b)) + b + struct.pack(">i", -1))  # delete

        delete(path)
        s.sendall(struct.pack(">i", 8) + struct.pack(">ii", xid + 1, -11))  # closeSession


def iso_ms(s):
    """expires_at ("2026-11-22T01:38:10.026Z") as unix seconds."""
    head, frac = s.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 1000.0


def late_grant_run(ctx, hold, waiter_ttl_ms):
    """lockd L1 reaches ZooKeeper through a DelayProxy with timeout_ms=300;
    X holds K on L1 and W waits for K on L1. hold(proxy) arms the fault on
    W's grant multi; X releases, W's grant is made in ZooKeeper but its
    answer comes late. Then L2 (direct) is started and Y tries K once.

    Each answer is judged from the client's side, counting a grant's
    ttl_ms from when its request was sent: a 201 to W must not come after
    its own expires_at, W's TTL so counted must end no later than
    expires_at (the store and the test share one clock), and W's hold (from
    its 201 to the end of that TTL) must not overlap Y's grant (made before
    Y's 201 arrived).

    Both instances use a chroot of their own and L2 starts only once W has
    its answer: no other lockd's sweep may tidy W's stale holder away
    before L1 looks at it again, or the defect would hide."""
    chroot = "i10-%d-%d" % (int(time.time() * 1000) % 10**9, ctx.seq)
    locks = "/" + chroot + LOCKS
    proxy = DelayProxy(ctx.server.port, framer=length_prefixed(4))
    try:
        l1 = harness.Lockd("zookeeper://127.0.0.1:%d/%s?session_timeout_ms=4000&timeout_ms=300"
                           % (proxy.port, chroot), tmpdir=ctx.tmpdir)
        ctx.extra.append(l1)
        l1.start()
        check(wait_ready(l1, 10.0), "L1 not ready behind the proxy")
        key = ctx.key("late")
        x = acquire(l1.client(), key, ttl_ms=20000)
        eq(x.status, 201, "X acquires K on L1")
        res = {}

        def waiter():
            res["sent"], res["sent_wall"] = time.monotonic(), time.time()
            res["r"] = safe(lambda: acquire(l1.client(timeout=20), key, ttl_ms=waiter_ttl_ms,
                                            wait_ms=8000))
            res["recv"], res["recv_wall"] = time.monotonic(), time.time()

        t = threading.Thread(target=waiter)
        t.start()
        queued = wait_until(lambda: any(n.startswith("w") for n in
                                        ctx.server.children(locks + "/" + node(key)) or []), 5.0)
        check(queued, "W's place in the queue did not appear")
        hold(proxy)
        eq(release(l1.client(), key, x.json["token"]).status, 200, "X releases K")
        check(proxy.wait_triggered(5.0), "W's grant multi never passed the proxy")
        t.join(20)
        check("r" in res, "W got no answer within 20 s")
        w = res["r"]
        check(w is not None, "W's connection failed")
        eq(w.status, 201, "W (the key is free once X released)")
        exp = iso_ms(w.json["expires_at"])
        left = exp - res["recv_wall"]
        check(left > 0, "W's 201 came %.0f ms after its own expires_at (%s), ttl_ms %d"
              % (-left * 1000, w.json["expires_at"], w.json["ttl_ms"]))
        # 1 ms: clocks in whole ms
        check(res["sent_wall"] + w.json["ttl_ms"] / 1000.0 <= exp + 0.001,
              "W's ttl_ms %d, counted from its request, ends %.0f ms after its expires_at"
              % (w.json["ttl_ms"], (res["sent_wall"] + w.json["ttl_ms"] / 1000.0 - exp) * 1000))
        w_until = res["sent"] + w.json["ttl_ms"] / 1000.0

        l2 = harness.Lockd("zookeeper://127.0.0.1:%d/%s?session_timeout_ms=4000"
                           % (ctx.server.port, chroot), tmpdir=ctx.tmpdir)
        ctx.extra.append(l2)
        l2.start()
        check(wait_ready(l2, 10.0), "L2 not ready")
        y = acquire(l2.client(), key, ttl_ms=1000)
        y_recv = time.monotonic()
        check(y.status in (201, 409), "Y: %r" % y)
        if y.status == 201:
            check(y_recv >= w_until,
                  "two holders: Y got K through L2 %.0f ms after W's 201, while W may count "
                  "on it for %.0f ms more (W: fence %d ttl_ms %d; Y: fence %d)"
                  % ((y_recv - res["recv"]) * 1000, (w_until - y_recv) * 1000,
                     w.json["fence"], w.json["ttl_ms"], y.json["fence"]))
            check(y.json["fence"] > w.json["fence"], "fences grow")
            release(l2.client(), key, y.json["token"])
        elif time.monotonic() < w_until:
            eq(release(l1.client(), key, w.json["token"]).status, 200, "W releases")
    finally:
        proxy.close()
        ctx.cleanup()
        zk_delete_tree(ctx.server.port, "/" + chroot)


@harness.scenario("issue 10: a waiter whose grant's answer is held past its TTL (replies held 3 s) never gets that expired holder as a 201",
                  backends=Z, slow=True)
def issue_10_grant_answered_after_ttl(ctx):
    late_grant_run(ctx, lambda p: p.hold_replies(3.0, when=zk_grant_multi), 1000)


@harness.scenario("issue 10: a waiter whose grant multi commits after its grant_by (request held 1.5 s) never gets that void holder as a 201",
                  backends=Z, slow=True)
def issue_10_grant_committed_late(ctx):
    late_grant_run(ctx, lambda p: p.hold_requests(1.5, when=zk_grant_multi), 5000)


def zk_multi_first_op(op):
    """A predicate: a multi whose first op has type op (13: check, lockd's
    renew)."""
    def pred(msg):
        return len(msg) >= 16 and struct.unpack_from(">ii", msg, 8) == (14, op)
    return pred


@harness.scenario("issue 10: a grant or renew whose answer comes after its TTL (reply held 1 s) is never a 2xx; a longer one counts from the request",
                  backends=Z, slow=True)
def issue_10_answer_after_ttl_is_no_grant(ctx):
    proxy = DelayProxy(ctx.server.port, framer=length_prefixed(4))
    try:
        ld = harness.Lockd("zookeeper://127.0.0.1:%d?session_timeout_ms=4000" % proxy.port,
                           tmpdir=ctx.tmpdir)
        ctx.extra.append(ld)
        ld.start()
        check(wait_ready(ld, 10.0), "lockd not ready behind the proxy")
        key = ctx.key("slow-answer")
        r = acquire(ld.client(), key, ttl_ms=10000)
        eq(r.status, 201, "acquire")
        token = r.json["token"]
        cases = [("acquire", 500, zk_grant_multi, lambda t: acquire(ld.client(), ctx.key("slow"), ttl_ms=t)),
                 ("acquire", 5000, zk_grant_multi, lambda t: acquire(ld.client(), ctx.key("slow"), ttl_ms=t)),
                 ("renew", 5000, zk_multi_first_op(13), lambda t: renew(ld.client(), key, token, ttl_ms=t)),
                 ("renew", 500, zk_multi_first_op(13), lambda t: renew(ld.client(), key, token, ttl_ms=t))]
        for what, ttl, hold, call in cases:
            proxy.hold_replies(1.0, when=hold)
            sent_wall = time.time()
            r = call(ttl)
            recv_wall = time.time()
            check(proxy.wait_triggered(0), "the %s multi never passed the proxy" % what)
            if ttl < 1000:  # it ran out before its answer could come
                eq(r.status, 503, "%s with ttl_ms %d answered after %.0f ms: %r"
                   % (what, ttl, (recv_wall - sent_wall) * 1000, r))
                continue
            eq(r.status, 201 if what == "acquire" else 200, what)
            exp = iso_ms(r.json["expires_at"])
            check(exp > recv_wall, "%s: a 2xx after its own expires_at" % what)
            # counted from when the request was sent (1 ms: clocks in whole ms)
            check(sent_wall + r.json["ttl_ms"] / 1000.0 <= exp + 0.001,
                  "%s: ttl_ms %d from the request's send is %.0f ms past expires_at"
                  % (what, r.json["ttl_ms"], (sent_wall + r.json["ttl_ms"] / 1000.0 - exp) * 1000))
    finally:
        proxy.close()

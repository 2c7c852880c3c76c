"""tests/e2e/test_zk_ensemble.py - lockd on a 3-node ZooKeeper ensemble
(issue 17): each scenario starts an ensemble of its own on loopback
(server_zookeeper.ZooKeeperEnsemble) and two lockd instances on its
3-host URL, and stops them all, whatever happens.

  - held locks (exclusive, shared, with waiters parked) survive kill -9 of
    every node in turn, leader included: every token renews and inspects
    throughout (503s retried within a bound), fences never go back;
  - kill -9 of the leader under the fault load (faultload.FaultLoad):
    no overlap, fences grow, no stale grant; kill -> first 201 measured;
  - the follower an instance has its session on is cut off by iptables
    (netfault.py) for longer than the session timeout: lockd keeps
    serving through the other nodes, held locks stay held, no overlap;
    recovery measured;
  - kill -9 of the node an instance's session is on while a waiter of
    that instance is parked: after the session moves, the release still
    wakes it, in FIFO order; move time measured;
  - a session that expires (lockd stopped past the session timeout) while
    a multi-key waiter is parked: the release made meanwhile still wakes
    it once the new session is up, and a lock granted through the old
    session is still held (a lock is a persistent node with a TTL).

Every figure is printed on a line of its own ("zk figure: ...")."""

import signal
import threading
import time

import harness
import netfault
import server_zookeeper
from faultload import FaultLoad
from harness import check, eq
from multi import start_instances

OPTS = "timeout_ms=700"
TIMEOUT_MS = 700
SLACK_MS = 300
LONG_TTL = 60000
BOUND_S = 15.0  # a held lock answers again within this after one node fails


def figure(what, ms):
    harness.log("     zk figure: %s %.0f ms" % (what, ms))


def url_of(ens):
    return ens.url + "&" + OPTS


def with_ensemble(ctx, body, need_iptables=False):
    """Start an ensemble and two instances on it, run body(ens, a, b),
    stop everything."""
    if not server_zookeeper.available():
        raise harness.Skip("no java or zookeeper.jar, the ensemble cannot run")
    if need_iptables:
        ok, why = netfault.available()
        if not ok:
            raise harness.Skip(why)
    ens = server_zookeeper.ZooKeeperEnsemble(ctx.tmpdir)
    try:
        ens.start()
        harness.log("     ensemble: %s" % ens.modes())
        a, b = start_instances(ctx, url_of(ens), 2)
        body(ens, a, b)
    finally:
        for ld in ctx.extra:
            if ld.alive():
                ld.stop(10)
        ens.stop()


def until(fn, timeout, what):
    """Call fn until it returns a true value (retrying OSError); that value.
    Fail with what after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = fn()
            if v:
                return v
        except OSError as e:
            last = e
        if time.monotonic() > deadline:
            raise harness.Fail("%s: not within %.0f s (%r)" % (what, timeout, last))
        time.sleep(0.05)


def lock_path(key):
    return "/locks/" + key


def acquire(ld, key, **body):
    return ld.request("POST", lock_path(key), body, timeout=30 + body.get("wait_ms", 0) / 1000.0)


def renew_ok(ld, key, token, what):
    """Renew until 200 within BOUND_S (503 retried); anything else fails."""
    def once():
        r = ld.request("PUT", lock_path(key), {"token": token, "ttl_ms": LONG_TTL}, timeout=10)
        if r.status == 503:
            return None
        eq(r.status, 200, "%s: renew of %s: %r" % (what, key, r))
        return r
    return until(once, BOUND_S, "%s: renew of %s" % (what, key))


def inspect_ok(ld, key, fences, what):
    """Inspect until 200 within BOUND_S: held, by exactly these fences."""
    def once():
        r = ld.request("GET", lock_path(key), timeout=10)
        if r.status == 503:
            return None
        eq(r.status, 200, "%s: inspect of %s: %r" % (what, key, r))
        eq(sorted(h["fence"] for h in r.json["holders"]), sorted(fences), "%s: holders of %s" % (what, key))
        return r
    return until(once, BOUND_S, "%s: inspect of %s" % (what, key))


class Waiter(threading.Thread):
    """One acquire with wait_ms on its own thread; .resp, .answered."""

    def __init__(self, ld, key, wait_ms, **body):
        super().__init__(daemon=True)
        self.ld, self.key, self.body = ld, key, dict(body, wait_ms=wait_ms)
        self.resp = self.answered = self.error = None

    def run(self):
        try:
            self.resp = self.ld.request("POST", lock_path(self.key), self.body,
                                        timeout=self.body["wait_ms"] / 1000.0 + 30)
        except OSError as e:
            self.error = e
        self.answered = time.monotonic()


def survive_every_node(ctx):
    def body(ens, a, b):
        kx, ks = ctx.key("zkx"), ctx.key("zks")
        held = []  # (instance, key, token, fence)
        r = acquire(a, kx, ttl_ms=LONG_TTL)
        eq(r.status, 201, "exclusive grant")
        held.append((a, kx, r.json["token"], r.json["fence"]))
        for ld in (a, b):
            r = acquire(ld, ks, ttl_ms=LONG_TTL, mode="shared")
            eq(r.status, 201, "shared grant")
            held.append((ld, ks, r.json["token"], r.json["fence"]))
        # waiters parked on the exclusive key, one per instance, in order
        waiters = []
        for ld in (b, a):
            w = Waiter(ld, kx, 120000, ttl_ms=LONG_TTL)
            w.start()
            waiters.append(w)
            time.sleep(0.5)
        for i in range(3):
            role = ens.modes()[i]
            ens.kill9(i)
            t = time.monotonic()
            for ld, key, token, _ in held:
                renew_ok(ld, key, token, "node %d (%s) killed" % (i + 1, role))
            for ld in (a, b):
                inspect_ok(ld, kx, [held[0][3]], "node %d killed" % (i + 1))
                inspect_ok(ld, ks, [h[3] for h in held[1:]], "node %d killed" % (i + 1))
            figure("every held lock renewed after kill -9 of the %s" % role, (time.monotonic() - t) * 1000)
            check(ens.restart(i), "node %d did not serve again: %s" % (i + 1, ens.log_tail(i)))
            until(lambda: ens.leader() is not None, 30, "a leader after node %d's restart" % (i + 1))
            for w in waiters:
                check(w.answered is None, "a waiter was answered while the key was held: %r %r"
                      % (w.resp, w.error))
        # release: the waiters get the key in their order, fences grow
        last = held[0][3]
        eq(a.request("DELETE", lock_path(kx), headers={"Lock-Token": held[0][2]}).status, 200, "release")
        for n, w in enumerate(waiters):
            w.join(30)
            check(w.resp is not None and w.resp.status == 201, "waiter %d: %r %r" % (n, w.resp, w.error))
            check(w.resp.json["fence"] > last, "fence went back: %d after %d" % (w.resp.json["fence"], last))
            last = w.resp.json["fence"]
            if n + 1 < len(waiters):
                check(waiters[n + 1].answered is None, "the second waiter was answered before the first released")
            eq(w.ld.request("DELETE", lock_path(kx), headers={"Lock-Token": w.resp.json["token"]}).status,
               200, "waiter's release")
        for ld, key, token, _ in held[1:]:
            eq(ld.request("DELETE", lock_path(key), headers={"Lock-Token": token}).status, 200, "shared release")
        r = acquire(b, kx, ttl_ms=1000)
        eq(r.status, 201, "a grant after all the releases")
        check(r.json["fence"] > last, "fence went back at the end")

    with_ensemble(ctx, body)


def judge(load, min_grants=20):
    rep = load.check(TIMEOUT_MS, SLACK_MS)
    harness.log("     " + rep.summary())
    if rep.violations() or rep.grants < min_grants:
        raise harness.Fail("only %d grants\n%s" % (rep.grants, rep.text()))


def leader_kill_load(ctx):
    def body(ens, a, b):
        insts = [a, b]
        n, _ = session_on(ctx, ens, insts, url_of(ens), leader=True)
        harness.log("     instance %d has its session on the leader" % n)
        keys = [ctx.key("zkl%d" % i) for i in range(4)]
        load = FaultLoad(insts, keys, threads=16, ttl_ms=2000, wait_ms=500, client_s=10.0)
        load.start()
        try:
            time.sleep(1.5)
            leader = ens.leader()
            check(leader is not None, "no leader: %s" % ens.modes())
            check(load.wait_grant(5.0) is not None, "no grant before the kill")
            ens.kill9(leader)
            t = load.mark("kill -9 leader node %d, right after a 201" % (leader + 1))
            g = load.wait_grant(20.0)
            check(g is not None, "no grant within 20 s of the leader's kill")
            figure("leader kill -9 -> first 201", (g - t) * 1000)
            load.mark("first grant again")
            g = until(lambda: load_grant_by(load, n, t), 20.0, "a grant through instance %d" % n)
            figure("leader kill -9 -> first 201 through the instance whose session was on it", (g - t) * 1000)
            time.sleep(1.0)
            check(ens.restart(leader), "node %d did not serve again" % (leader + 1))
            load.mark("node %d serves again" % (leader + 1))
            time.sleep(1.0)
        finally:
            stopped = load.stop()
        check(stopped, "client threads still waiting after the load stopped")
        judge(load)

    with_ensemble(ctx, body)


def session_on(ctx, ens, insts, url, leader):
    """(instance index, node) with the instance's session on the leader
    (leader=True) or on a follower, restarting the last instance until one
    is (the client library picks its server at random)."""
    for _ in range(12):
        lead = ens.leader()
        for n, ld in enumerate(insts):
            nodes = [i for i in ens.node_of(ld.proc.pid) if (i == lead) == leader]
            if nodes and lead is not None:
                return n, nodes[0]
        insts[-1].stop(10)
        insts[-1] = start_instances(ctx, url, 1)[0]
    raise harness.Fail("no instance has its session on a %s after 12 starts"
                       % ("leader" if leader else "follower"))


def follower_isolation(ctx):
    def body(ens, a, b):
        insts = [a, b]
        n, f = session_on(ctx, ens, insts, url_of(ens), leader=False)
        ld = insts[n]
        harness.log("     instance %d has its session on follower node %d" % (n, f + 1))
        kh = ctx.key("zkh")
        r = acquire(ld, kh, ttl_ms=LONG_TTL)
        eq(r.status, 201, "a long grant through the instance")
        token, fence = r.json["token"], r.json["fence"]
        keys = [ctx.key("zki%d" % i) for i in range(4)]
        load = FaultLoad(insts, keys, threads=16, ttl_ms=2000, wait_ms=500, client_s=10.0)
        load.start()
        cut = server_zookeeper.SESSION_MS / 1000.0 + 2.0
        try:
            time.sleep(1.5)
            check(load.wait_grant(5.0) is not None, "no grant before the partition")
            ens.isolate(f)
            t = load.mark("isolate follower node %d for %.1f s" % (f + 1, cut))
            g = until(lambda: load_grant_by(load, n, t), 20.0, "a grant through instance %d" % n)
            figure("follower isolation -> first 201 through its instance", (g - t) * 1000)
            renew_ok(ld, kh, token, "follower isolated")
            inspect_ok(ld, kh, [fence], "follower isolated")
            moved = [i for i in ens.node_of(ld.proc.pid) if i != f]
            check(moved, "the session is on no other node: %s" % ens.node_of(ld.proc.pid))
            expired = "session expired" in ld.log_tail(50000)
            harness.log("     the session %s to node %d" % ("expired; a new one is on" if expired else "moved",
                                                            moved[0] + 1))
            time.sleep(max(0.0, t + cut - time.monotonic()))
            ens.heal(f)
            load.mark("heal node %d" % (f + 1))
            time.sleep(1.0)
        finally:
            ens.heal(f)
            stopped = load.stop()
        check(stopped, "client threads still waiting after the load stopped")
        judge(load)
        eq(ld.request("DELETE", lock_path(kh), headers={"Lock-Token": token}).status, 200,
           "the long grant is still held, and released")

    with_ensemble(ctx, body, need_iptables=True)


def load_grant_by(load, inst, t):
    """The answer time of the first 201 through instance inst after t."""
    with load.lock:
        got = [r.answered for r in load.recs if r.inst == inst and r.status == 201 and r.answered > t]
    return min(got) if got else None


def session_move(ctx):
    def body(ens, a, b):
        nodes = ens.node_of(a.proc.pid)
        check(len(nodes) == 1, "instance a's session nodes: %s" % nodes)
        n = nodes[0]
        k = ctx.key("zkm")
        r = acquire(b, k, ttl_ms=LONG_TTL)
        eq(r.status, 201, "grant")
        w1 = Waiter(a, k, 60000, ttl_ms=5000)
        w1.start()
        time.sleep(0.5)
        w2 = Waiter(b, k, 60000, ttl_ms=5000)
        w2.start()
        time.sleep(0.5)
        role = ens.modes()[n]
        ens.kill9(n)
        t = time.monotonic()
        # b's session may have been on node n too: the release below goes
        # through b, so wait for both sessions to be elsewhere
        def moved(x):
            return ([i for i in ens.node_of(x.proc.pid) if i != n]
                    and x.request("GET", lock_path(k), timeout=5).status == 200)

        until(lambda: moved(a) and moved(b), 20.0, "the instances' sessions moved")
        figure("session move after kill -9 of its node (%s)" % role, (time.monotonic() - t) * 1000)
        check(w1.answered is None and w2.answered is None, "a waiter answered early: %r %r" % (w1.resp, w2.resp))
        t = time.monotonic()
        eq(b.request("DELETE", lock_path(k), headers={"Lock-Token": r.json["token"]}).status, 200, "release")
        w1.join(10)
        check(w1.resp is not None and w1.resp.status == 201, "a's waiter after the move: %r %r"
              % (w1.resp, w1.error))
        figure("release -> parked waiter's 201 after a session move", (w1.answered - t) * 1000)
        check(w1.resp.json["fence"] > r.json["fence"], "fence went back")
        check(w2.answered is None, "FIFO: b's waiter, queued second, was answered first: %r" % w2.resp)
        eq(a.request("DELETE", lock_path(k), headers={"Lock-Token": w1.resp.json["token"]}).status, 200, "release")
        w2.join(10)
        check(w2.resp is not None and w2.resp.status == 201, "b's waiter: %r %r" % (w2.resp, w2.error))
        eq(b.request("DELETE", lock_path(k), headers={"Lock-Token": w2.resp.json["token"]}).status, 200, "release")
        check(ens.restart(n), "node %d did not serve again" % (n + 1))

    with_ensemble(ctx, body)


def expiry_multi_waiter(ctx):
    def body(ens, a, b):
        k1, k2, kh = ctx.key("zke1"), ctx.key("zke2"), ctx.key("zkeh")
        r = acquire(b, k1, ttl_ms=LONG_TTL)
        eq(r.status, 201, "grant")
        mine = acquire(a, kh, ttl_ms=LONG_TTL)  # granted through the session that expires
        eq(mine.status, 201, "grant through a")
        w = MultiWaiter(a, [k1, k2], 30000)
        w.start()
        time.sleep(0.5)
        a.signal(signal.SIGSTOP)
        try:
            # past the session timeout: the ensemble ends a's session, and
            # its watches with it; then the key is released
            time.sleep(server_zookeeper.SESSION_MS / 1000.0 + 1.5)
            eq(b.request("DELETE", lock_path(k1), headers={"Lock-Token": r.json["token"]}).status, 200, "release")
        finally:
            a.signal(signal.SIGCONT)
        t = time.monotonic()
        w.join(40)
        check(w.resp is not None, "no answer to the multi-key waiter: %r" % w.error)
        eq(w.resp.status, 201, "the multi-key waiter after its session expired: %r" % w.resp)
        figure("new session -> parked multi-key waiter's 201", (w.answered - t) * 1000)
        check(w.answered - t < 10.0, "the multi-key waiter was woken only after %.1f s" % (w.answered - t))
        check("session expired" in a.log_tail(20000), "the session did not expire: %s" % a.log_tail(2000))
        # a lock is a persistent node with a TTL, not the session's: it is
        # still held, under the same fence, and renews
        r = renew_ok(a, kh, mine.json["token"], "after the session expired")
        eq(r.json["fence"], mine.json["fence"], "fence of the lock granted before the expiry")
        inspect_ok(b, kh, [mine.json["fence"]], "after the session expired")

    with_ensemble(ctx, body)


class MultiWaiter(Waiter):
    def run(self):
        try:
            self.resp = self.ld.request("POST", "/locks", {"keys": self.key, "ttl_ms": 5000,
                                                          "wait_ms": self.body["wait_ms"]},
                                        timeout=self.body["wait_ms"] / 1000.0 + 30)
        except OSError as e:
            self.error = e
        self.answered = time.monotonic()


harness.scenario("zk ensemble: held locks (exclusive, shared, parked waiters) survive kill -9 of every node "
                 "in turn, leader included; waiters keep their order, fences never go back",
                 backends=["zookeeper"], slow=True)(survive_every_node)
harness.scenario("zk ensemble: kill -9 of the leader under 16 clients: no overlap, fences grow, no stale grant; "
                 "kill -> first 201 measured", backends=["zookeeper"])(leader_kill_load)
harness.scenario("zk ensemble: the follower an instance has its session on is cut off (iptables) past the "
                 "session timeout: lockd keeps serving, held locks stay held, no overlap",
                 backends=["zookeeper"])(follower_isolation)
harness.scenario("zk ensemble: kill -9 of the node a parked waiter's session is on: the release still wakes it "
                 "after the session moves, in FIFO order", backends=["zookeeper"])(session_move)
harness.scenario("zk ensemble: a session that expires while a multi-key waiter is parked: the release made "
                 "meanwhile still wakes it; locks granted through that session stay held",
                 backends=["zookeeper"], slow=True)(expiry_multi_waiter)

"""tests/e2e/test_chaos.py - the fault suite (`make chaos`; a subset runs
in make test). Each scenario `chaos: <topology>: <fault>` runs 2-3 lockd
instances and 16 clients on 4 keys (faultload.ChaosLoad: acquires, waits,
renewals every ttl/3, releases, abandoned locks, and renews and releases
with tokens that are dead for sure), does one fault longer than the TTL,
then judges the whole history by client-side times (faultload.check_history:
no two holds of a key overlap, fences strictly increase, no stale 201,
renew 200 only while the hold is current, no stale-token success, every
answer within its bound with a documented code) and prints

  chaos <topology> <fault>: R requests, G grants, U 503s, overlaps O, fence
  regressions F, stale-token successes S, recovery T ms

recovery: from the fault's end (restart, SIGCONT, heal) to the first 201
after it, through the faulted instance where the fault hit one instance.

Topologies: memory (lockd faults only), redis, zookeeper, mysql (the store
tests/run.py started, or one of the scenario's own), zookeeper-ensemble
(server_zookeeper.ZooKeeperEnsemble), redis-sentinel (server_sentinel),
redis-cluster (server_cluster), redlock-3 and redlock-5 (independent
masters of server_redlock, without persistence: nodes killed and started
again empty, stopped, a majority down, a skewed lockd clock; each line
goes on with the grants per fault window and the quarantine). Where a topology can lose a lock by design
(Redis failover without min_replicas) the line says "loss allowed by
design" and overlaps, fence regressions and stale-token successes are
reported, not failed on.

Environment:
  LOCKD_CHAOS=full          every scenario (make chaos); else the subset
  LOCKD_CHAOS_REPORT=FILE   one JSON object per scenario appended to FILE
  LOCKD_FAULT_SLACK_MS=S    how late past its bound an answer may be (300)

`python3 tests/e2e/test_chaos.py --totals FILE` prints FILE's lines and
their totals (make chaos ends with it)."""

import email.utils
import json
import os
import signal
import sys
import threading
import time

import faultload
import harness
from faultload import ACQUIRE, RELEASE, RENEW, ChaosLoad, Rec, check_history, grant
from harness import check, eq

FULL = os.environ.get("LOCKD_CHAOS", "").strip().lower() == "full"
REPORT = os.environ.get("LOCKD_CHAOS_REPORT", "")
SLACK_MS = int(os.environ.get("LOCKD_FAULT_SLACK_MS", "300"))
TTL_MS = 2000
WAIT_MS = 500
THREADS = 16
KEYS = 4
MIN_GRANTS = 30
FAULT_S = TTL_MS / 1000.0 + 1.0  # every stop, partition and isolation outlasts the TTL
SKEW = ("+3s", 3), ("-3s", -3)
# store timeouts below the TTL: a call in flight when the store stops gives
# 503 at the timeout (test_faults.py's SHORT regime)
STORE = {
    "redis": ("connect_timeout_ms=500&timeout_ms=700", 700),
    "zookeeper": ("timeout_ms=700", 700),
    "mysql": ("connect_timeout_ms=1000&read_timeout_ms=1000&write_timeout_ms=1000", 1000),
}
LIBFAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                                "/usr/lib/faketime/libfaketimeMT.so.1") if os.path.exists(p)), None)


def with_options(url, opts):
    return url + ("&" if "?" in url else "?") + opts if opts else url


def module(name, *attrs):
    """A test module of one topology, imported now; Skip if it or one of
    attrs (a class's "Class.method" too) is not there yet."""
    try:
        mod = __import__(name)
    except ImportError as e:
        raise harness.Skip("%s not built (%s)" % (name, e))
    for a in attrs:
        obj = mod
        for part in a.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            raise harness.Skip("%s.%s not built" % (name, a))
    return mod


def new_lockd(ctx, url, **kw):
    ld = harness.Lockd(url, tmpdir=ctx.tmpdir, **kw)
    ctx.extra.append(ld)
    ld.start()
    check(ready(ld, 20.0), "lockd on %s not ready: %s" % (url, ld.log_tail()))
    return ld


def ready(ld, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ld.request("GET", "/readyz", timeout=2).status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def faketime_env(offset, backend):
    """The environment of a lockd whose wall clock is offset. Its monotonic
    clock is left alone, as NTP would, except on zookeeper: there, with
    FAKETIME_DONT_FAKE_MONOTONIC, the ZooKeeper C client never connects
    (even with an offset of +0s; libfaketime 0.9.10's timed waits), so the
    monotonic clock gets the same constant offset, which changes no
    duration."""
    if LIBFAKETIME is None:
        raise harness.Skip("libfaketime (Debian package faketime) is not installed")
    # under ASan, libfaketime in LD_PRELOAD comes before the ASan runtime
    env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset,
           "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:verify_asan_link_order=0"}
    if backend != "zookeeper":
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    return env


def warm(ctx, insts, n=THREADS):
    """n concurrent acquire + release on each instance before the load, so
    that its worker threads have dialled the store (under ASan a first dial
    on 2 busy cores can take longer than the answer bound)."""
    key = ctx.key("chaos-warm")

    def one(ld, i):
        try:
            c = ld.client(timeout=10)
            r = c.request("POST", faultload.lock_path("%s-%d" % (key, i)), {"ttl_ms": 2000})
            if r.status == 201:
                c.request("DELETE", faultload.lock_path("%s-%d" % (key, i)), None,
                          {"Lock-Token": r.json["token"]})
            c.close()
        except OSError:
            pass
    ts = [threading.Thread(target=one, args=(ld, i)) for ld in insts for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(15)


class Fault:
    """What a drive function tells the judge: when the fault ended, which
    instance it hit (None: all or the store), SIGSTOP windows of instances."""

    def __init__(self):
        self.end = None
        self.inst = None
        self.pauses = []


def wait_grant_via(load, since, inst, timeout=20.0):
    """The answer time of the first 201 after since (through inst if not
    None), waiting at most timeout; None if none."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with load.lock:
            ts = [r.answered for r in load.recs if r.kind == ACQUIRE and r.status == 201 and r.answered > since
                  and inst in (None, r.inst)]
        if ts:
            return min(ts)
        time.sleep(0.05)
    return None


def run_load(ctx, topology, fault, insts, store_tmo, drive, loss_allowed=False, min_grants=MIN_GRANTS,
             offsets=None, ttl_ms=TTL_MS, judge=None):
    """The chaos load on insts, drive(load, Fault) as the fault, then judge
    and print the scenario's line. offsets: see check_history. judge(load,
    rep): the scenario's own checks, (problems, text added to the line)."""
    t_start = time.monotonic()
    keys = [ctx.key("chaos%d" % i) for i in range(KEYS)]
    client_s = max(WAIT_MS, store_tmo) / 1000.0 + FAULT_S + 8.0
    load = ChaosLoad(insts, keys, threads=THREADS, ttl_ms=ttl_ms, wait_ms=WAIT_MS, client_s=client_s)
    f = Fault()
    warm(ctx, insts)
    load.start()
    try:
        time.sleep(1.5)
        drive(load, f)
        back = None
        if f.end is not None:
            back = wait_grant_via(load, f.end, f.inst)
            if back is not None:
                load.mark("first grant again%s, %.0f ms after" % (
                    "" if f.inst is None else " via instance %d" % f.inst, (back - f.end) * 1000))
        time.sleep(1.5)
    finally:
        stopped = load.stop()
    check(stopped, "client threads still waiting %.0f s after the load stopped" % (load.client_s + 5))
    rep = load.check(store_tmo, SLACK_MS, pauses=f.pauses, recover_from=f.end, recover_inst=f.inst,
                     offsets=offsets)
    problems, more = judge(load, rep) if judge is not None else ([], "")
    took = time.monotonic() - t_start
    line = rep.chaos_line(topology, fault) + (" (loss allowed by design)" if loss_allowed else "") + more
    harness.log("     " + line)
    harness.log("     %d renews, %d uses of dead tokens; %s; %.1f s"
                % (rep.renews, rep.stale_uses, rep.summary(), took))
    if rep.grants < min_grants:
        problems.append("only %d grants (want %d): the load did not run" % (rep.grants, min_grants))
    if f.end is not None and rep.recovery_ms is None:
        problems.append("no grant after the fault's end at %+.3f s" % (f.end - load.t0))
    bad = rep.violations()
    if loss_allowed:  # what a failover may lose by design is reported, not failed on
        bad -= rep.n_overlaps + len(rep.regressions) + len(rep.stale_tokens)
    passed = not (bad or problems)
    record(topology, fault, rep, took, loss_allowed, passed, line)
    if not passed:
        raise harness.Fail("\n".join(problems + [rep.text()]))
    return rep


RECORDED = [0]  # scenarios judged so far


def record(topology, fault, rep, took, loss_allowed, passed, line):
    RECORDED[0] += 1
    if not REPORT:
        return
    obj = {"topology": topology, "fault": fault, "requests": rep.requests, "grants": rep.grants,
           "renews": rep.renews, "stale_uses": rep.stale_uses, "503s": rep.n503, "overlaps": rep.n_overlaps,
           "fence_regressions": len(rep.regressions), "stale_token_successes": len(rep.stale_tokens),
           "stale_grants": len(rep.stale), "late": len(rep.late), "unanswered": len(rep.unanswered),
           "wrong": len(rep.wrong), "recovery_ms": None if rep.recovery_ms is None else round(rep.recovery_ms),
           "seconds": round(took, 1), "loss_allowed": loss_allowed, "passed": passed, "line": line}
    with open(REPORT, "a") as f:
        f.write(json.dumps(obj, sort_keys=True) + "\n")


# ---- faults ----


def stall(load, f, stop, cont, what, inst=None, paused=False, seconds=FAULT_S):
    """Right after a 201, stop() for seconds, then cont(); f gets the end,
    the instance the fault hit (inst) and, if paused (that instance was
    SIGSTOPped), the window."""
    check(load.wait_grant(10.0) is not None, "no grant to place the fault after")
    t0 = time.monotonic()  # the window of a stopped instance starts before the signal
    stop()
    t1 = load.mark("%s, right after a 201" % what)  # the fault lasts seconds once in place
    try:
        time.sleep(max(0.0, t1 + seconds - time.monotonic()))
    finally:
        cont()
    f.end = load.mark("its end")
    f.inst = inst
    if paused:
        f.pauses.append((inst, t0, f.end))


def server_up(ctx):
    srv = ctx.server
    if srv is None or srv.proc is None:
        return
    if srv.proc.poll() is None:
        srv.resume()
    else:
        srv.restart()


def store_kill(ctx):
    opts, tmo = STORE[ctx.backend]
    url = with_options(ctx.url, opts)
    insts = [new_lockd(ctx, url) for _ in range(2)]

    def drive(load, f):
        check(load.wait_grant(10.0) is not None, "no grant to place the kill after")
        ctx.server.kill9()
        load.mark("kill -9 store, right after a 201")
        time.sleep(1.0)
        ctx.server.restart()
        f.end = load.mark("store restarted")

    try:
        run_load(ctx, ctx.backend, "store kill -9 and restart", insts, tmo, drive)
    finally:
        server_up(ctx)


def store_stop(ctx):
    opts, tmo = STORE[ctx.backend]
    url = with_options(ctx.url, opts)
    insts = [new_lockd(ctx, url) for _ in range(2)]
    srv = ctx.server
    try:
        run_load(ctx, ctx.backend, "store SIGSTOP", insts, tmo,
                 lambda load, f: stall(load, f, srv.pause, srv.resume, "SIGSTOP store %.1f s" % FAULT_S))
    finally:
        server_up(ctx)


def lockd_stop(ctx):
    """SIGSTOP one instance past the TTL, right after a 201 (its clients'
    acquires and renewals are in flight), then SIGCONT: whatever it answers
    late must not make two holds overlap."""
    if ctx.backend == "memory":  # memory is not shared: one instance
        insts, tmo = [new_lockd(ctx, "memory://")], 0
    else:
        opts, tmo = STORE[ctx.backend]
        insts = [new_lockd(ctx, with_options(ctx.url, opts)) for _ in range(3)]
    ld = insts[0]
    run_load(ctx, ctx.backend, "lockd SIGSTOP", insts, tmo,
             lambda load, f: stall(load, f, lambda: ld.signal(signal.SIGSTOP), lambda: ld.signal(signal.SIGCONT),
                                   "SIGSTOP instance 0 %.1f s" % FAULT_S, inst=0, paused=True))


def clock_skew(offset, secs):
    def sc(ctx):
        env = faketime_env(offset, ctx.backend)
        if ctx.backend == "memory":
            insts, tmo = [new_lockd(ctx, "memory://", env=env)], 0
        else:
            opts, tmo = STORE[ctx.backend]
            url = with_options(ctx.url, opts)
            insts = [new_lockd(ctx, url), new_lockd(ctx, url, env=env)]
        skewed = insts[-1]
        r = skewed.request("GET", "/healthz")
        their = email.utils.parsedate_to_datetime(r.header("Date")).timestamp()
        check(abs(their - time.time() - secs) < 2, "Date %r is not %+d s off" % (r.header("Date"), secs))

        def drive(load, f):
            load.mark("instance %d runs %+d s off the real clock" % (len(insts) - 1, secs))
            time.sleep(FAULT_S)

        # memory's expires_at is on the instance's own clock, a store's on the store's
        offsets = {len(insts) - 1: secs} if ctx.backend == "memory" else None
        run_load(ctx, ctx.backend, "clock skew %+d s" % secs, insts, tmo, drive, offsets=offsets)
    return sc


def partition(ctx):
    """One instance in a namespace of its own, one on the host, both on a
    store that listens on the host end of the veth; DROP between the
    namespace and the store past the TTL, then heal."""
    import netns
    ok, why = netns.available()
    if not ok:
        raise harness.Skip(why)
    opts, tmo = STORE[ctx.backend]
    ns = netns.Namespace().open()
    srv = None
    try:
        d = os.path.join(ctx.tmpdir, "chaos-%s" % ns.name)
        os.makedirs(d, exist_ok=True)
        srv = netns.store_on(ctx.backend, d, ns.outer, reach=(ns.inner,))
        url = with_options(srv.url, opts)
        inner = new_lockd(ctx, url, wrapper=ns.wrapper(), host=ns.inner)
        outer = new_lockd(ctx, url)
        harness.log("     instance 0 in %s at %s:%d, store at %s:%d" % (ns.name, ns.inner, inner.port, ns.outer,
                                                                       srv.port))
        run_load(ctx, ctx.backend, "partition lockd-store", [inner, outer], tmo,
                 lambda load, f: stall(load, f, lambda: ns.partition(ns.outer, srv.port), ns.heal,
                                       "partition instance 0 from the store %.1f s" % FAULT_S, inst=0))
        inner.stop(10)
    finally:
        for ld in list(ctx.extra):
            ld.stop(5)
        if srv is not None:
            srv.stop()
        ns.close()


# ---- the stores' own clusters ----


def ensemble_fault(which):
    def sc(ctx):
        zk = module("server_zookeeper", "ZooKeeperEnsemble")
        if not zk.available():
            raise harness.Skip("no java or zookeeper.jar, the ensemble cannot run")
        if which == "isolate":
            module("server_zookeeper", "ZooKeeperEnsemble.isolate", "ZooKeeperEnsemble.heal")
            nf = module("netfault", "available")
            ok, why = nf.available()
            if not ok:
                raise harness.Skip(why)
        opts, tmo = STORE["zookeeper"]
        ens = zk.ZooKeeperEnsemble(ctx.tmpdir)
        try:
            ens.start()
            url = with_options(ens.url, opts)
            insts = [new_lockd(ctx, url) for _ in range(2)]
            if which == "leader":
                run_load(ctx, "zookeeper-ensemble", "leader kill -9", insts, tmo, lambda l, f: kill_leader(ens, l, f))
            else:
                node, inst = follower_of(ctx, ens, insts, url)
                run_load(ctx, "zookeeper-ensemble", "follower isolation", insts, tmo,
                         lambda l, f: stall(l, f, lambda: ens.isolate(node), lambda: ens.heal(node),
                                            "isolate follower node %d (instance %d's) %.1f s"
                                            % (node + 1, inst, FAULT_S + 1), inst=inst, seconds=FAULT_S + 1))
        finally:
            for ld in list(ctx.extra):
                ld.stop(5)
            ens.stop()
    return sc


def kill_leader(ens, load, f):
    leader = ens.leader()
    check(leader is not None, "no leader: %s" % ens.modes())
    check(load.wait_grant(10.0) is not None, "no grant to place the kill after")
    ens.kill9(leader)
    t = load.mark("kill -9 leader node %d, right after a 201" % (leader + 1))
    time.sleep(max(0.0, t + FAULT_S - time.monotonic()))
    check(ens.restart(leader), "node %d did not serve again: %s" % (leader + 1, ens.log_tail(leader)))
    f.end = load.mark("node %d serves again (%s)" % (leader + 1, ens.modes()))


def follower_of(ctx, ens, insts, url):
    """(node, instance): a follower that one instance has its session on
    (restarting an instance until one does, at most 8 times)."""
    for _ in range(8):
        leader = ens.leader()
        for n, ld in enumerate(insts):
            nodes = [i for i in ens.node_of(ld.proc.pid) if i != leader]
            if nodes and leader is not None:
                return nodes[0], n
        old = insts.pop()
        old.stop(10)
        insts.append(new_lockd(ctx, url))
    raise harness.Fail("no instance has its session on a follower after 8 starts")


def sentinel_failover(min_replicas):
    def sc(ctx):
        mod = module("server_sentinel", "SentinelSet")
        opts, tmo = STORE["redis"]
        if min_replicas:
            # every replica: one that the Sentinels do not promote keeps
            # acking what the old primary still takes during a failover
            opts += "&min_replicas=2"
            tmo += 200  # a grant's WAIT may take replicas_timeout_ms more
        ss = mod.SentinelSet(ctx.tmpdir)
        try:
            ss.start()
            insts = [new_lockd(ctx, ss.url(opts)) for _ in range(2)]

            def drive(load, f):
                check(load.wait_grant(10.0) is not None, "no grant to place the failover after")
                load.mark("SENTINEL FAILOVER")
                old, new = ss.failover(timeout=30)
                f.end = load.mark("node %s is primary (was %s)" % (new, old))

            run_load(ctx, "redis-sentinel", "failover" + (" min_replicas=2" if min_replicas else ""), insts, tmo,
                     drive, loss_allowed=not min_replicas)
        finally:
            for ld in list(ctx.extra):
                ld.stop(5)
            ss.stop()
    return sc


def driver_acquire(load, key, ttl_ms, wait_ms):
    """An acquire of the fault driver's, in the load's history (judged
    with the rest) and never released: held until its TTL."""
    a = Rec(ACQUIRE, key, 0, len(load.recs) + 1000, ttl_ms=ttl_ms, wait_ms=wait_ms)
    c = load._client(0)
    try:
        load._request(c, a, "POST", faultload.lock_path(key),
                      {"ttl_ms": ttl_ms, "wait_ms": wait_ms, "owner": "chaos-driver"})
    finally:
        c.close()
    a.abandoned = a.status == 201
    return a


def cluster_failover(min_replicas):
    def sc(ctx):
        mod = module("server_cluster", "RedisCluster")
        opts, tmo = STORE["redis"]
        if min_replicas:
            opts += "&min_replicas=1"
            tmo += 200  # a grant's WAIT may take replicas_timeout_ms more
        cl = mod.RedisCluster(ctx.tmpdir)
        try:
            cl.start()
            insts = [new_lockd(ctx, cl.url(opts)) for _ in range(2)]

            def drive(load, f):
                owners = [cl.master_of_slot(mod.lock_slot(k)) for k in load.keys]
                victim = max(set(owners), key=owners.count) if owners and owners[0] is not None \
                    else cl.masters()[0]
                reps = cl.replicas_of(victim)
                # a key of the victim's that only this driver takes: held
                # (20 s, never released) while the replica lags, and asked
                # for again once the replica took over
                kx = next(k for k in (ctx.key("lost%d" % i) for i in range(2000))
                          if cl.master_of_slot(mod.lock_slot(k)) == victim)
                check(load.wait_grant(10.0) is not None, "no grant to place the failover after")
                # the replica lags: what the master takes meanwhile is on the
                # master only (with min_replicas, WAIT fails: 503, no grant)
                for r in reps:
                    cl.pause(r)
                load.mark("SIGSTOP replica node(s) %s of master node %d" % (reps, victim))
                held = driver_acquire(load, kx, 20000, 0)
                load.mark("driver's acquire of %s on the lagging master: %s" % (kx, held.status))
                time.sleep(max(0.0, 0.8 - (held.answered or time.monotonic()) + held.sent))
                load.mark("kill -9 master node %d (holds %d of the %d keys)" % (victim, owners.count(victim),
                                                                                 len(owners)))

                def resume():
                    for r in reps:
                        cl.resume(r)
                new = cl.failover(victim, timeout=30, after_kill=resume)
                if min_replicas:
                    # the new master has no replica (WAIT 1 fails, 503s)
                    # until the old one is back as its replica
                    load.mark("node %s took over" % new)
                    cl.rejoin(victim)
                    f.end = load.mark("node %d rejoined as a replica" % victim)
                else:
                    f.end = load.mark("node %s took over" % new)
                again = driver_acquire(load, kx, 2000, 5000)
                load.mark("driver's acquire of %s after the failover: %s%s" % (
                    kx, again.status, " (the lagging master's grant is lost)"
                    if again.status == 201 and held.status == 201 else ""))

            # a TTL longer than the failover (node timeout 1 s + election;
            # with 3 s of 503s on most keys and abandoned holds of 6 s, the
            # load grants about half its usual count):
            # a grant the replica lacks is then still held when the promoted
            # replica grants the key again
            run_load(ctx, "redis-cluster", "master failover" + (" min_replicas=1" if min_replicas else ""), insts,
                     tmo, drive, loss_allowed=not min_replicas, ttl_ms=6000, min_grants=MIN_GRANTS // 2)
        finally:
            for ld in list(ctx.extra):
                ld.stop(5)
            cl.stop()
    return sc


# ---- redlock: independent Redis masters (server_redlock.RedlockNodes) ----

# The nodes keep no data across a restart (no AOF) and lockd runs without
# trust_fsync: a node killed and started again comes back empty, and must
# not be counted for the max TTL + drift (--max-ttl-ms is small so that
# the quarantine ends within the scenario).
REDLOCK_MAX_TTL_MS = 5000
REDLOCK_CALL_MS = 400  # timeout_ms of each node
REDLOCK_OPTS = "connect_timeout_ms=300&timeout_ms=%d" % REDLOCK_CALL_MS
# an answer's bound: a waiter's last try starts as its wait_ms runs out;
# a try waits for a stopped node until the timeout, and one that was not
# granted then undoes what it may have taken there (another timeout)
REDLOCK_TMO = WAIT_MS + 2 * REDLOCK_CALL_MS
REDLOCK_GRANTS_PER_S = 3  # floor: grants per second of a minority fault, and of a quarantine
# a node that came back empty is not counted until its restart + max TTL
# + drift: what it held before may still be held elsewhere. lockd knows
# the restart from the node's uptime in whole seconds (which reads 1
# right after a start as often as 0), so it must err late.
QUARANTINE_MIN_S = REDLOCK_MAX_TTL_MS / 1000.0 - 0.05


def redlock_nodes(ctx, n):
    mod = module("server_redlock", "RedlockNodes")
    d = os.path.join(ctx.tmpdir, "redlock-%d-%d" % (n, time.monotonic_ns() % 10 ** 9))
    os.makedirs(d, exist_ok=True)
    nodes = mod.RedlockNodes(d, n=n, fsync=False, trust=False)
    nodes.start()
    check("trust_fsync" not in nodes.url, "the nodes' URL trusts them: %s" % nodes.url)
    return nodes


def redlock_lockd(ctx, nodes, env=None):
    args = ["--max-ttl-ms", str(REDLOCK_MAX_TTL_MS), "--default-ttl-ms", str(TTL_MS)]
    return new_lockd(ctx, with_options(nodes.url, REDLOCK_OPTS), args=args, env=env)


def node_view(ld):
    """/readyz's "nodes" object of ld ({} if none or no answer)."""
    try:
        r = ld.request("GET", "/readyz", timeout=2)
        return (r.json or {}).get("nodes") or {}
    except OSError:
        return {}


def wait_all_voting(load, ld, n, since):
    """Wait until ld reports every node up and voting again (quarantine
    over); the time, marked, or None after max TTL + 10 s."""
    deadline = since + REDLOCK_MAX_TTL_MS / 1000.0 + 10
    seen = {}
    while time.monotonic() < deadline:
        seen = node_view(ld)
        if seen.get("up") == n and seen.get("voting") == n:
            return load.mark("every node voting again, %.1f s after the restart" % (time.monotonic() - since))
        time.sleep(0.05)
    load.mark("nodes still not all voting: %r" % (seen,))
    return None


def acquires_in(load, status, t0, t1):
    with load.lock:
        return [r for r in load.recs if r.kind == ACQUIRE and r.status == status and t0 <= r.answered <= t1]


def floor_judge(windows):
    """judge for a minority fault: in each window (name, start, end) at
    least REDLOCK_GRANTS_PER_S grants per second, and fewer acquires
    answered 503 than 201 (a majority answers: a 503 is then only for a
    key held on too few of the nodes that answer)."""

    def judge(load, rep):
        problems, parts = [], []
        for name, t0, t1 in windows:
            if t1 is None:
                problems.append("the %s did not end" % name)
                continue
            g, want = len(acquires_in(load, 201, t0, t1)), int(REDLOCK_GRANTS_PER_S * (t1 - t0))
            u = len(acquires_in(load, 503, t0, t1))
            parts.append("%d grants and %d 503s to acquires in the %.1f s %s" % (g, u, t1 - t0, name))
            if g < want or u >= g:
                problems.append("%d grants (want %d) and %d 503s (want fewer than the grants) to acquires in the "
                                "%.1f s %s: a minority fault stopped the grants" % (g, want, u, t1 - t0, name))
        return problems, "; " + ", ".join(parts)
    return judge


def redlock_kill(n, down):
    """kill -9 down nodes right after a 201, start them again EMPTY after
    FAULT_S; with down < quorum grants go on throughout, the restarted
    nodes are quarantined (not counted) for the max TTL, then vote again.
    With a majority down: 503s and never a grant until the quarantine of
    a restarted node ends."""
    quorum = n // 2 + 1

    def sc(ctx):
        nodes = redlock_nodes(ctx, n)
        try:
            insts = [redlock_lockd(ctx, nodes) for _ in range(2)]
            victims = list(range(n - down, n))
            t = {}

            def drive(load, f):
                check(load.wait_grant(10.0) is not None, "no grant to place the kill after")
                for i in victims:
                    nodes.node(i).kill9()
                t["kill"] = load.mark("kill -9 node(s) %s of %d, right after a 201" % (victims, n))
                time.sleep(max(0.0, t["kill"] + FAULT_S - time.monotonic()))
                t["restart"] = time.monotonic()
                for i in victims:
                    nodes.node(i).restart_empty()
                f.end = load.mark("node(s) %s started again, empty" % victims)
                t["voting"] = wait_all_voting(load, insts[0], n, t["restart"])

            def judge(load, rep):
                problems, more = [], ""
                back = t.get("voting")
                if back is None:
                    problems.append("the restarted nodes were not all voting %d s after their restart"
                                    % (REDLOCK_MAX_TTL_MS / 1000 + 10))
                elif back - t["restart"] < QUARANTINE_MIN_S:
                    problems.append("the empty nodes voted again %.2f s after their restart, before its max TTL "
                                    "%d ms + drift" % (back - t["restart"], REDLOCK_MAX_TTL_MS))
                if down < quorum:
                    p, more = floor_judge([("fault", t["kill"], t["restart"]),
                                           ("quarantine", t["restart"], back)])(load, rep)
                    problems += p
                else:
                    until = t["restart"] + QUARANTINE_MIN_S
                    early = [r for r in acquires_in(load, 201, t["kill"], until) if r.sent > t["kill"]]
                    n503 = len(acquires_in(load, 503, t["kill"], until))
                    for r in early[:8]:
                        problems.append("GRANT BEFORE THE QUARANTINE ENDED: %s" % rep._g(r))
                    if early or n503 == 0:
                        problems.append("%d grants and %d 503s to acquires from the kill to %.1f s after the "
                                        "restart (want 0 grants, some 503s)" % (len(early), n503, QUARANTINE_MIN_S))
                    more = "; %d grants, %d 503s to acquires from the kill to %.1f s after the restart" % (
                        len(early), n503, QUARANTINE_MIN_S)
                if back is not None:
                    more += ", voting again %.1f s after the restart" % (back - t["restart"])
                return problems, more

            what = ("node kill -9, restart empty" if down == 1 else
                    "%d nodes kill -9, restart empty" % down) + (" (majority)" if down >= quorum else "")
            run_load(ctx, "redlock-%d" % n, what, insts, REDLOCK_TMO, drive, judge=judge,
                     min_grants=MIN_GRANTS if down < quorum else MIN_GRANTS // 2)
        finally:
            for ld in list(ctx.extra):
                ld.stop(5)
            nodes.stop()
    return sc


def redlock_stop(n, down):
    """SIGSTOP down (< quorum) nodes past the TTL right after a 201, then
    SIGCONT: grants go on meanwhile, and what the stopped nodes answer late
    must not make two holds overlap."""

    def sc(ctx):
        nodes = redlock_nodes(ctx, n)
        try:
            insts = [redlock_lockd(ctx, nodes) for _ in range(2)]
            victims = [nodes.node(i) for i in range(n - down, n)]
            win, stopped = [], []

            def stop():
                for v in victims:
                    v.pause()
                stopped.append(time.monotonic())

            def cont():
                for v in victims:
                    v.resume()

            def drive(load, f):
                stall(load, f, stop, cont, "SIGSTOP node(s) %s of %d %.1f s" % (list(range(n - down, n)), n, FAULT_S))
                win.append(("fault", stopped[0], f.end))

            what = "node SIGSTOP" if down == 1 else "%d nodes SIGSTOP" % down
            run_load(ctx, "redlock-%d" % n, what, insts, REDLOCK_TMO, drive, judge=floor_judge(win))
        finally:
            for ld in list(ctx.extra):
                ld.stop(5)
            nodes.stop()
    return sc


def redlock_skew(n, offset, secs):
    """One of two lockd instances runs its wall clock secs off (libfaketime;
    its monotonic clock untouched): validity is counted on the monotonic
    clock and fences are floored by the nodes' clocks, so nothing may
    change; its expires_at is on its own clock."""

    def sc(ctx):
        env = faketime_env(offset, "redlock")
        nodes = redlock_nodes(ctx, n)
        try:
            insts = [redlock_lockd(ctx, nodes), redlock_lockd(ctx, nodes, env=env)]
            r = insts[1].request("GET", "/healthz")
            their = email.utils.parsedate_to_datetime(r.header("Date")).timestamp()
            check(abs(their - time.time() - secs) < 2, "Date %r is not %+d s off" % (r.header("Date"), secs))
            win = []

            def drive(load, f):
                t0 = load.mark("instance 1 runs %+d s off the real clock" % secs)
                time.sleep(FAULT_S)
                win.append(("skew", t0, time.monotonic()))

            run_load(ctx, "redlock-%d" % n, "clock skew %+d s" % secs, insts, REDLOCK_TMO, drive,
                     offsets={1: secs}, judge=floor_judge(win))
        finally:
            for ld in list(ctx.extra):
                ld.stop(5)
            nodes.stop()
    return sc


def redlock_hazard(ctx):
    """The restart hazard with nothing to spare: lock A of the max TTL on
    nodes 1 and 2 (node 3 down), then nodes 3 and 1 started again EMPTY at
    once. A majority (1, 3) no longer knows A, so only their quarantine
    (restart + max TTL + drift) keeps B from being granted while A holds:
    B's try-once acquires, every 100 ms, get no 201 before A's send + its
    ttl_ms, then one soon after, with a larger fence."""
    nodes = redlock_nodes(ctx, 3)
    try:
        ld = redlock_lockd(ctx, nodes)
        c = ld.client(timeout=10)
        key = ctx.key("hazard")
        nodes.node(2).kill9()
        t_a = time.monotonic()
        a = c.request("POST", faultload.lock_path(key), {"ttl_ms": REDLOCK_MAX_TTL_MS})
        eq(a.status, 201, "A's acquire (max TTL) with node 3 down: %r" % (a.json,))
        a_end = t_a + a.json["ttl_ms"] / 1000.0
        t_r = time.monotonic()
        nodes.node(2).restart_empty()
        nodes.node(0).restart_empty()
        refused, b = {}, None
        while b is None and time.monotonic() < a_end + 4.0:
            r = c.request("POST", faultload.lock_path(key), {"ttl_ms": TTL_MS})
            if r.status == 201:
                b = (time.monotonic(), r.json)
            else:
                refused[r.status] = refused.get(r.status, 0) + 1
                time.sleep(0.1)
        line = ("chaos redlock-3 empty restarts under a lock of max TTL: A's ttl_ms %d, nodes 3 and 1 started again "
                "empty %.0f ms after its send; %s; B %s" % (
                    a.json["ttl_ms"], (t_r - t_a) * 1000,
                    ", ".join("%d %ss" % (n, st) for st, n in sorted(refused.items())) or "no refusals",
                    "never granted" if b is None else "granted %.0f ms %s A's TTL ran out, fence %s A's" % (
                        abs(b[0] - a_end) * 1000, "after" if b[0] >= a_end else "BEFORE",
                        "above" if b[1]["fence"] > a.json["fence"] else "NOT above")))
        harness.log("     " + line)
        ok = b is not None and b[0] >= a_end and b[1]["fence"] > a.json["fence"]
        if REPORT:
            with open(REPORT, "a") as f:
                f.write(json.dumps({"topology": "redlock-3", "fault": "empty restarts under a lock of max TTL",
                                    "grants": 1 + (b is not None), "overlaps": int(b is not None and b[0] < a_end),
                                    "passed": ok, "line": line, "loss_allowed": False,
                                    "seconds": round(time.monotonic() - t_a, 1)}) + "\n")
        RECORDED[0] += 1
        check(b is not None, "B was not granted within 4 s after A's TTL ran out")
        check(b[0] >= a_end, "B granted %.0f ms before A's TTL ran out: an empty node was counted within the max TTL "
              "of its restart" % ((a_end - b[0]) * 1000))
        check(b[1]["fence"] > a.json["fence"], "B's fence %s not above A's %s" % (b[1]["fence"], a.json["fence"]))
    finally:
        for x in list(ctx.extra):
            x.stop(5)
        nodes.stop()


# (nodes, fault, function, in the make-test subset)
REDLOCK = [(3, "empty restarts under a lock of max TTL", redlock_hazard, True),
           (3, "node kill -9, restart empty", redlock_kill(3, 1), True),
           (3, "node SIGSTOP", redlock_stop(3, 1), True),
           (3, "2 nodes kill -9, restart empty (majority)", redlock_kill(3, 2), False),
           (5, "2 nodes kill -9, restart empty", redlock_kill(5, 2), True),
           (5, "node kill -9, restart empty", redlock_kill(5, 1), False),
           (5, "2 nodes SIGSTOP", redlock_stop(5, 2), False),
           (5, "3 nodes kill -9, restart empty (majority)", redlock_kill(5, 3), False)]
REDLOCK += [(3, "clock skew %+d s" % s, redlock_skew(3, o, s), False) for o, s in SKEW]
REDLOCK += [(5, "clock skew +3 s", redlock_skew(5, "+3s", 3), False)]


# ---- registration ----


def reported(topology, fault, fn):
    """fn, and a failed row in the report if it fails before it is judged
    (a store or a lockd that did not start, say)."""

    def run(ctx):
        before, t0 = RECORDED[0], time.monotonic()
        try:
            fn(ctx)
        except harness.Skip:
            raise
        except Exception as e:  # noqa: BLE001 - a Fail, or run.py's timeout
            if RECORDED[0] == before and REPORT:
                line = "chaos %s %s: failed before the load was judged: %s" % (
                    topology, fault, (str(e).splitlines() or [""])[0][:200])
                with open(REPORT, "a") as f:
                    f.write(json.dumps({"topology": topology, "fault": fault, "passed": False, "line": line,
                                        "seconds": round(time.monotonic() - t0, 1), "loss_allowed": False}) + "\n")
            raise
    return run

STORES = ["redis", "zookeeper", "mysql"]
# (topology or backend, fault, function, backends, in the make-test subset)
SCENARIOS = [("lockd SIGSTOP", lockd_stop, ["memory"] + STORES, ["zookeeper"]),
             ("partition lockd-store", partition, STORES, ["redis"]),
             ("store kill -9 and restart", store_kill, STORES, []),
             ("store SIGSTOP", store_stop, STORES, [])]
SCENARIOS += [("clock skew %+d s" % s, clock_skew(o, s), ["memory"] + STORES, ["redis"] if s > 0 else [])
              for o, s in SKEW]


def register():
    for fault, fn, backends, subset in SCENARIOS:
        for b in backends:
            if FULL or b in subset:
                harness.scenario("chaos: %s: %s" % (b, fault), backends=[b], slow=True)(reported(b, fault, fn))
    more = [("zookeeper-ensemble", "follower isolation", ensemble_fault("isolate"), "zookeeper", True),
            ("zookeeper-ensemble", "leader kill -9", ensemble_fault("leader"), "zookeeper", False),
            ("redis-sentinel", "failover min_replicas=2", sentinel_failover(1), "redis", True),
            ("redis-sentinel", "failover (loss allowed by design)", sentinel_failover(0), "redis", False),
            ("redis-cluster", "master failover min_replicas=1", cluster_failover(1), "redis", True),
            ("redis-cluster", "master failover (loss allowed by design)", cluster_failover(0), "redis", False)]
    for topo, fault, fn, b, sub in more:
        if FULL or sub:
            harness.scenario("chaos: %s: %s" % (topo, fault), backends=[b], slow=True)(reported(topo, fault, fn))
    for n, fault, fn, sub in REDLOCK:
        if FULL or sub:
            topo = "redlock-%d" % n
            harness.scenario("chaos: %s: %s" % (topo, fault), backends=["redlock"], slow=True)(
                reported(topo, fault, fn))


register()


# ---- the checker's self-test: what the chaos checks add must be caught ----


def _renew(a, sent, answered, status=200, ttl_ms=2000, stale=False, inst=0):
    j = a.json()
    body = ({"key": a.key, "token": j["token"], "fence": j["fence"], "ttl_ms": ttl_ms, "expires_at": j["expires_at"]}
            if status == 200 else {"error": {"code": {404: "lock_not_found", 409: "token_mismatch",
                                                      503: "backend_unavailable"}[status]}})
    r = Rec(RENEW, a.key, inst, sent=sent, answered=answered, wall=answered, status=status, body=body, ttl_ms=2000,
            acq=a)
    r.stale_use = stale
    if not stale:
        a.renews.append(r)
    return r


def _stale_release(a, sent, status):
    r = Rec(RELEASE, a.key, sent=sent, answered=sent + 0.001, wall=sent, status=status,
            body={"key": a.key, "released": True} if status == 200 else {"error": {"code": "lock_not_found"}}, acq=a)
    r.stale_use = True
    return r


@harness.scenario("chaos: checker self-test: it catches a stale-token success and an overlap through a late "
                  "renew, excuses a stopped instance, and passes a clean history", backends=["memory"])
def chaos_checker_self_test(ctx):
    k = "k"
    # clean: A renews in time and holds 0.01 -> 2.5; B waits and is granted
    # after A's release; a stale renew and release of A's token get 404;
    # a 201 of a stopped instance arrives after send + ttl (excused)
    a = grant(k, 0.0, 0.01, 10, release_sent=2.5)
    clean = a + [_renew(a[0], 0.6, 0.61), _renew(a[0], 1.2, 1.21)]
    clean += grant(k, 2.0, 2.51, 11, wait_ms=500, release_sent=2.6)
    clean += [_renew(a[0], 3.0, 3.01, 404, stale=True), _stale_release(a[0], 3.1, 404)]
    late = grant("other", 0.0, 4.5, 3, release_sent=4.6)
    late[0].inst = 1
    clean += late
    rep = check_history(clean, 700, 300, pauses=[(1, 0.1, 4.4)], recover_from=2.0)
    eq(rep.violations(), 0, "violations in a clean history:\n" + rep.text())
    eq((rep.renews, rep.excused, round(rep.recovery_ms)), (3, 1, 510), "renews, excused, recovery ms")
    check("chaos t f: 10 requests, 3 grants, 0 503s, overlaps 0" in rep.chaos_line("t", "f"), rep.chaos_line("t", "f"))

    def late_renew():
        # A (ttl 1 s) lapses at 1.0; B granted at 1.2; A's renew, sent at
        # 1.5, is answered 200: A holds again from 1.52 while B holds
        x = grant(k, 0.0, 0.01, 10, ttl_ms=1000, release_sent=1.9)
        return x + [_renew(x[0], 1.5, 1.52, ttl_ms=1000)] + grant(k, 1.1, 1.2, 11, release_sent=1.8)

    def stale_renew():
        x = grant(k, 0.0, 0.01, 10, release_sent=0.1)
        return x + [_renew(x[0], 0.5, 0.51, stale=True)]

    def stale_release():
        x = grant(k, 0.0, 0.01, 10, release_sent=0.1)
        return x + [_stale_release(x[0], 0.5, 200)]

    def release_after_next():
        # A's release 200 sent after B's 201: A's token was dead by then
        x = grant(k, 0.0, 0.01, 10, ttl_ms=500)
        y = grant(k, 0.6, 0.61, 11, release_sent=0.7)
        r = Rec(RELEASE, k, sent=0.65, answered=0.66, wall=0.66, status=200, body={"key": k, "released": True},
                acq=x[0])
        x[0].release, x[0].abandoned = r, False
        return x + y + [r]

    def renew_wrong_fence():
        x = grant(k, 0.0, 0.01, 10, release_sent=1.0)
        n = _renew(x[0], 0.5, 0.51)
        n.body["fence"] = 9
        return x + [n]

    def stopped_overlap():
        # excused lateness, but its hold still overlaps: caught
        x = grant(k, 0.0, 0.01, 10, ttl_ms=3000, release_sent=2.5)
        x[0].inst = 1
        return x + grant(k, 1.0, 1.01, 11, release_sent=1.2)

    cases = {
        "overlap through a late renew": (late_renew(), lambda r: r.n_overlaps == 1 and len(r.stale_tokens) == 2),
        "stale renew": (stale_renew(), lambda r: len(r.stale_tokens) == 1 and r.n_overlaps == 0),
        "stale release": (stale_release(), lambda r: len(r.stale_tokens) == 1),
        "release after the next grant": (release_after_next(), lambda r: len(r.stale_tokens) == 1),
        "renew with another fence": (renew_wrong_fence(), lambda r: len(r.wrong) == 1),
        "overlap on a stopped instance": (stopped_overlap(), lambda r: r.n_overlaps == 1),
    }
    missed = []
    for name, (recs, caught) in cases.items():
        rep = check_history(recs, 700, 300, pauses=[(1, 0.0, 3.0)])
        if not caught(rep) or rep.violations() == 0:
            missed.append("%s:\n%s" % (name, rep.text()))
    check(not missed, "the checker missed:\n" + "\n".join(missed))
    rep = check_history(stale_renew(), 700, 300)
    check("STALE TOKEN SUCCESS" in rep.text() and "stale-token successes 1" in rep.chaos_line("t", "f"), rep.text())
    check(faultload.STALE_MARGIN > 0, "stale margin")


def totals(path):
    """Print the report's lines and their totals; 1 if a scenario failed."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    for r in rows:
        print(("ok   " if r["passed"] else "FAIL ") + r["line"] + " [%.1f s]" % r["seconds"])
    sums = {k: sum(r.get(k) or 0 for r in rows) for k in ("requests", "grants", "503s", "overlaps", "fence_regressions",
                                                  "stale_token_successes", "seconds")}
    strict = [r for r in rows if not r["loss_allowed"]]
    print("chaos totals: %d scenarios (%d failed), %d requests, %d grants, %d 503s, overlaps %d (%d where loss is "
          "allowed by design), fence regressions %d, stale-token successes %d, %.0f s"
          % (len(rows), sum(not r["passed"] for r in rows), sums["requests"], sums["grants"], sums["503s"],
             sum(r.get("overlaps", 0) for r in strict), sums["overlaps"] - sum(r.get("overlaps", 0) for r in strict),
             sum(r.get("fence_regressions", 0) for r in strict), sum(r.get("stale_token_successes", 0) for r in strict),
             sums["seconds"]))
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--totals":
        sys.exit("usage: test_chaos.py --totals REPORT.jsonl")
    if not os.path.exists(sys.argv[2]):
        sys.exit("no chaos report at %s (no scenario ran)" % sys.argv[2])
    sys.exit(totals(sys.argv[2]))

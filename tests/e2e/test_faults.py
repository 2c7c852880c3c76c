"""tests/e2e/test_faults.py - the fault load (issue 10): two lockd instances
on one store, 16 clients on 4 keys mixing waiting (wait_ms 500) and
try-once acquires, holding briefly and releasing (some never release),
while the store is
  - killed -9 and restarted (TTL 2000 ms, store timeout 700-1000 ms);
  - SIGSTOPped for 3 s, past the TTL and the store timeout, right after a
    201 was seen: every call in flight times out and each waiter must
    still be answered by max(wait_ms, timeout);
  - SIGSTOPped 3 times for 1.5 s, each right after a 201, with TTL 1000 ms
    and a store timeout of 2000 ms: a call in flight (or sent during the
    stall) completes after it, so a grant made then is older than its TTL
    when the answer can be sent and must not be answered 201;
and, on a 3-node ZooKeeper ensemble of its own, the follower that one
instance has its session on is stopped for 3 s right after a 201, then
the leader is killed -9 and restarted. faultload.check_history judges every
request by client-side times: no two holds of a key overlap, fences grow,
no stale 201, every answer within max(wait_ms, store timeout) + slack.
Memory gets the same load with no fault; a self-test feeds the checker
histories it must reject.

Environment:
  LOCKD_FAULT_RUNS=N      register every fault scenario N times (the
                          "N runs in a row" proof); default 1
  LOCKD_FAULT_SLACK_MS=S  how late past its bound an answer may be
                          (default 300: ASan on 2 shared cores)
  LOCKD_FAULT_STALLS=N    stalls placed right after a grant per scenario
                          (default 3)"""

import os
import random
import shutil
import time

import faultload
import harness
import server_zookeeper
from faultload import ACQUIRE, RELEASE, FaultLoad, Rec, check_history, grant
from harness import check, eq
from multi import ensure_server_up, start_instances

RUNS = max(1, int(os.environ.get("LOCKD_FAULT_RUNS", "1")))
SLACK_MS = int(os.environ.get("LOCKD_FAULT_SLACK_MS", "300"))
STALLS = max(1, int(os.environ.get("LOCKD_FAULT_STALLS", "3")))
TTL_MS = 2000
WAIT_MS = 500
THREADS = 16
KEYS = 4
MIN_GRANTS = 30

# backend -> (URL options, the store timeout they set in ms), in two regimes:
# SHORT: the store timeout is below the TTL and a stall outlasts both, so
#   every call in flight times out (503) and waiters must still be answered
#   at max(wait_ms, timeout);
# LONG: TTL < stall < store timeout, so a call in flight when the store
#   stops completes after the stall: a grant it makes is already older than
#   its TTL when the answer can be sent, and must not be answered 201.
STORE = {
    "redis": ("connect_timeout_ms=500&timeout_ms=700", 700),
    # the bound of one call on redlock: 3 x the timeout + the connect
    # timeout (the parallel call, the write-back or an undo, a dial)
    "redlock": ("connect_timeout_ms=500&timeout_ms=700", 3 * 700 + 500),
    "zookeeper": ("timeout_ms=700", 700),
    "mysql": ("connect_timeout_ms=1000&read_timeout_ms=1000&write_timeout_ms=1000", 1000),
}
STORE_LONG = {
    "redis": ("connect_timeout_ms=500&timeout_ms=2000", 2000),
    "redlock": ("connect_timeout_ms=500&timeout_ms=2000", 3 * 2000 + 500),
    "zookeeper": ("timeout_ms=2000", 2000),
    "mysql": ("connect_timeout_ms=1000&read_timeout_ms=2000&write_timeout_ms=2000", 2000),
}
STALL_TTL_MS = 1000  # the LONG regime's TTL; its stalls last STALL_TTL_MS + 500
STORES = sorted(STORE)


def with_options(url, opts):
    return url + ("&" if "?" in url else "?") + opts


def new_load(ctx, instances, store_timeout_ms, ttl_ms=TTL_MS):
    keys = [ctx.key("fault%d" % i) for i in range(KEYS)]
    client_s = max(WAIT_MS, store_timeout_ms) / 1000.0 + 8.0
    return FaultLoad(instances, keys, threads=THREADS, ttl_ms=ttl_ms, wait_ms=WAIT_MS, client_s=client_s)


# (backend, scenario function name) -> [runs, failed runs, requests, grants,
# overlaps, regressions, stale, late, unanswered, wrong, worst lateness s]
TOTALS = {}


def tally(backend, name, rep, failed):
    t = TOTALS.setdefault((backend, name), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, None])
    for i, n in enumerate((1, int(failed), rep.requests, rep.grants, rep.n_overlaps, len(rep.regressions),
                           len(rep.stale), len(rep.late), len(rep.unanswered), len(rep.wrong))):
        t[i] += n
    if rep.worst_late is not None and (t[10] is None or rep.worst_late > t[10]):
        t[10] = rep.worst_late


def judge(load, store_timeout_ms, recovered_after=None, min_grants=MIN_GRANTS, backend="", name=""):
    """Check the load's history; log the summary, fail with the report."""
    rep = load.check(store_timeout_ms, SLACK_MS)
    harness.log("     " + rep.summary())
    problems = []
    if rep.grants < min_grants:
        problems.append("only %d grants (want %d): the load did not run" % (rep.grants, min_grants))
    if recovered_after is not None and load.grants_after(recovered_after) == 0:
        problems.append("no grant after the store came back at %+.3f s" % (recovered_after - load.t0))
    tally(backend, name, rep, bool(rep.violations() or problems))
    if rep.violations() or problems:
        raise harness.Fail("\n".join(problems + [rep.text()]))
    return rep


def wait_back(load, t, timeout=15.0):
    """After the store is back at t: wait for a grant; fail if none."""
    g = load.wait_grant(timeout)
    check(g is not None, "no grant within %.0f s after the store came back" % timeout)
    load.mark("first grant again, %.0f ms after" % ((g - t) * 1000))
    return g


def stall_after_grant(load, stop, cont, stall_s, what="store"):
    """Wait for a 201, stop the store 0-2 ms after it arrived (a grant of
    another request is then likely in flight), keep it stopped stall_s,
    continue it. The time it was continued."""
    g = load.wait_grant(10.0)
    check(g is not None, "no grant to place the stall after")
    time.sleep(random.uniform(0, 0.002))
    stop()
    t = load.mark("SIGSTOP %s, %.1f ms after a 201" % (what, (time.monotonic() - g) * 1000))
    try:
        time.sleep(max(0.0, t + stall_s - time.monotonic()))
    finally:
        cont()
    return load.mark("SIGCONT %s" % what)


def fault_scenario(ctx, name, drive, ttl_ms=TTL_MS, store=STORE):
    """Two instances on ctx's store with the fault timeouts, the load, and
    drive(load) as the faults; the store is left running; then judge."""
    opts, tmo = store[ctx.backend]
    a, b = start_instances(ctx, with_options(ctx.url, opts))
    load = new_load(ctx, (a, b), tmo, ttl_ms)
    load.start()
    back = None
    try:
        back = drive(load)
        time.sleep(1.0)
    finally:
        stopped = load.stop()
        ensure_server_up(ctx)
    check(stopped, "client threads still waiting %.0f s after the load stopped" % (load.client_s + 5))
    judge(load, tmo, recovered_after=back, backend=ctx.backend, name=name)


def kill_and_restart(ctx):
    srv = ctx.server

    def drive(load):
        time.sleep(1.5)
        load.wait_grant(5.0)
        srv.kill9()
        load.mark("kill -9 store, right after a 201")
        time.sleep(1.0)
        srv.restart()
        t = load.mark("store restarted")
        wait_back(load, t)
        return t

    fault_scenario(ctx, "kill -9 and restart", drive)


def long_stop(ctx):
    srv = ctx.server

    def drive(load):
        time.sleep(1.5)
        t = stall_after_grant(load, srv.pause, srv.resume, 3.0)
        wait_back(load, t)
        return t

    fault_scenario(ctx, "SIGSTOP 3 s", drive)


def stalls_after_grants(ctx):
    srv = ctx.server
    stall_s = STALL_TTL_MS / 1000.0 + 0.5

    def drive(load):
        time.sleep(1.0)
        t = None
        for _ in range(STALLS):
            t = stall_after_grant(load, srv.pause, srv.resume, stall_s)
            wait_back(load, t)
            time.sleep(0.3)
        return t

    fault_scenario(ctx, "stalls after a 201", drive, STALL_TTL_MS, STORE_LONG)


def ensemble(ctx):
    """A 3-node ensemble of our own (ctx.server stays as it is): stop for
    3 s the follower that one instance has its session on, right after a
    grant; then kill -9 the leader and restart it."""
    if not server_zookeeper.available():
        raise harness.Skip("no java or zookeeper.jar, the ensemble cannot run")
    ens = server_zookeeper.ZooKeeperEnsemble(ctx.tmpdir)
    opts, tmo = STORE["zookeeper"]
    insts = []
    try:
        ens.start()
        harness.log("     ensemble: %s" % ens.modes())
        url = with_options(ens.url, opts)
        insts = start_instances(ctx, url)
        target = None
        for attempt in range(8):  # the client picks its node at random
            leader = ens.leader()
            for n, ld in enumerate(insts):
                nodes = [i for i in ens.node_of(ld.proc.pid) if i != leader]
                if nodes and leader is not None:
                    target = (n, nodes[0])
                    break
            if target:
                break
            old = insts.pop()
            old.stop(10)
            insts += start_instances(ctx, url, 1)
        check(target is not None, "no instance has its session on a follower after 8 starts")
        harness.log("     instance %d has its session on follower node %d; leader node %d"
                    % (target[0], target[1] + 1, ens.leader() + 1))
        load = new_load(ctx, insts, tmo)
        load.start()
        back = None
        try:
            time.sleep(1.5)
            f = target[1]
            t = stall_after_grant(load, lambda: ens.pause(f), lambda: ens.resume(f), 3.0,
                                  "follower node %d" % (f + 1))
            wait_back(load, t)
            time.sleep(1.5)
            leader = ens.leader()
            check(leader is not None, "no leader after the follower stall: %s" % ens.modes())
            load.wait_grant(5.0)
            ens.kill9(leader)
            t = load.mark("kill -9 leader node %d, right after a 201" % (leader + 1))
            wait_back(load, t)  # the other two elect a leader and serve
            time.sleep(max(0.0, t + 2.0 - time.monotonic()))
            check(ens.restart(leader), "node %d did not serve again: %s" % (leader + 1, ens.log_tail(leader)))
            back = load.mark("node %d serves again (%s)" % (leader + 1, ens.modes()))
            time.sleep(1.0)
        finally:
            stopped = load.stop()
        check(stopped, "client threads still waiting after the load stopped")
        judge(load, tmo, recovered_after=back, backend="zookeeper", name="3-node ensemble")
    finally:
        for ld in insts:
            if ld.alive():
                ld.stop(10)
        ens.stop()
        shutil.rmtree(ens.dir, ignore_errors=True)


def no_fault(ctx):
    """The same load on one memory instance (memory is not shared), no
    fault: the checker must find nothing, and the load must grant."""
    load = new_load(ctx, [ctx.lockd], 0)
    load.start()
    try:
        time.sleep(3.0)
    finally:
        stopped = load.stop()
    check(stopped, "client threads still waiting after the load stopped")
    judge(load, 0, min_grants=100, backend=ctx.backend, name="no fault")


def totals(ctx):
    """After N runs: what every scenario found over all of them, per backend
    (the "N runs in a row" line); fails if any run failed."""
    mine = sorted((k, v) for k, v in TOTALS.items() if k[0] == ctx.backend)
    bad = 0
    for (_, name), t in mine:
        worst = "n/a" if t[10] is None else "%+.0f ms" % (t[10] * 1000)
        harness.log("     %s %-20s %d runs, %d failed: %d requests, %d grants, overlaps %d, fence regressions %d, "
                    "stale grants %d, late %d, unanswered %d, wrong %d; worst answer vs its bound %s"
                    % ((ctx.backend, name) + tuple(t[:10]) + (worst,)))
        bad += t[1]
    check(mine, "no fault run recorded on %s" % ctx.backend)
    eq(bad, 0, "failed fault runs on %s" % ctx.backend)


def counted(fn, name):
    """fn, and a failed run in TOTALS if it fails before judge() counts it."""

    def run(ctx):
        before = TOTALS.get((ctx.backend, name), [0])[0]
        try:
            fn(ctx)
        except BaseException:
            t = TOTALS.setdefault((ctx.backend, name), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, None])
            if t[0] == before:
                t[0] += 1
                t[1] += 1
            raise
    return run


def register():
    sfx = (lambda i: "") if RUNS == 1 else (lambda i: " (run %d of %d)" % (i + 1, RUNS))
    scs = [(kill_and_restart, "kill -9 and restart"), (long_stop, "SIGSTOP 3 s"),
           (stalls_after_grants, "stalls after a 201"), (ensemble, "3-node ensemble"), (no_fault, "no fault")]
    kill_and_restart_, long_stop_, stalls_after_grants_, ensemble_, no_fault_ = (counted(f, n) for f, n in scs)
    for i in range(RUNS):
        harness.scenario("faults: 16 clients on 4 keys through two instances while the store is killed -9 "
                         "and restarted: no overlap, fences grow, no stale grant, every answer in time"
                         + sfx(i), backends=STORES, slow=True)(kill_and_restart_)
        harness.scenario("faults: the same load while the store is SIGSTOPped 3 s (past the TTL and its timeout)"
                         + sfx(i), backends=STORES, slow=True)(long_stop_)
        harness.scenario("faults: the same load with %d store stalls of TTL + 0.5 s, each right after a 201"
                         % STALLS + sfx(i), backends=STORES, slow=True)(stalls_after_grants_)
        harness.scenario("faults: the same load on a 3-node ZooKeeper ensemble: a 3 s stall of an instance's "
                         "follower, then kill -9 of the leader" + sfx(i), backends=["zookeeper"], slow=True)(ensemble_)
        harness.scenario("faults: the same load on memory with no fault: the checker finds nothing"
                         + sfx(i), backends=["memory"])(no_fault_)
    if RUNS > 1:
        harness.scenario("faults: totals over %d runs" % RUNS, slow=True)(totals)


register()


# ---- the checker's self-test: it must catch what it claims to catch ----


def _acq(key, sent, answered, status, wait_ms=0, body=None):
    return Rec(ACQUIRE, key, sent=sent, answered=answered, wall=answered, status=status, ttl_ms=2000,
               wait_ms=wait_ms, body=body if body is not None else {"error": {"code": {
                   409: "lock_held", 503: "backend_unavailable"}.get(status, "x")}})


@harness.scenario("faults: the checker catches a synthetic overlap, fence regression, stale grant, late and "
                  "missing answer, and passes a clean history", backends=["memory"])
def checker_self_test(ctx):
    k = "k"
    # clean: hand-offs at once after a release was sent, an abandoned lock
    # taken over after send + TTL, a waiter answered 503 at its bound + slack
    clean = (grant(k, 0.000, 0.010, 10, release_sent=0.100)
             + grant(k, 0.050, 0.1005, 11, wait_ms=500, release_sent=0.200)
             + grant(k, 0.300, 0.310, 12)  # abandoned: held until 2.300
             + grant(k, 1.900, 2.3005, 13, wait_ms=500, ret_ttl_ms=1500, release_sent=2.4)
             + grant("other", 0.0, 0.01, 5, release_sent=3.0)  # other keys are independent
             + [_acq(k, 3.0, 3.99, 503, wait_ms=500)]  # 700 ms bound + 290 ms
             + [_acq(k, 4.0, 4.001, 409)])
    # after a release answered 503: its sender stopped using the lock when
    # it sent it, and the store may have applied it (info, not an overlap)
    clean += grant(k, 5.0, 5.01, 20, release_sent=5.1, release_status=503) + grant(k, 5.05, 5.15, 21,
                                                                                   wait_ms=500, release_sent=5.2)
    rep = check_history(clean, 700, 300)
    eq(rep.violations(), 0, "violations in a clean history:\n" + rep.text())
    eq(rep.after_unconfirmed, 1, "grants after an unconfirmed release (info)")
    eq(rep.grants, 7, "grants counted")
    check(abs(rep.worst_late - 0.29) < 1e-6, "worst lateness %r" % rep.worst_late)

    cases = {
        # B is answered while A is held: A's release is sent after B's 201
        "overlap": (grant(k, 0.0, 0.01, 10, release_sent=0.2) + grant(k, 0.1, 0.15, 11, release_sent=0.3),
                    lambda r: r.n_overlaps == 1 and not r.regressions),
        # A's release, sent after B's 201, got 409: A held until it sent it
        "overlap before a refused release": (grant(k, 0.0, 0.01, 10, release_sent=0.6, release_status=409)
                                             + grant(k, 0.5, 0.51, 11, release_sent=0.7),
                                             lambda r: r.n_overlaps == 1),
        # a release never answered (or 503) that was sent after B's 201
        "overlap before an unanswered release": (grant(k, 0.0, 0.01, 10, release_sent=0.6, release_status=None)
                                                 + grant(k, 0.5, 0.51, 11, release_sent=0.7),
                                                 lambda r: r.n_overlaps == 1),
        # an abandoned lock taken over 1 s before send + TTL
        "overlap with an abandoned lock": (grant(k, 0.0, 0.01, 10) + grant(k, 1.0, 1.01, 11, release_sent=1.1),
                                           lambda r: r.n_overlaps == 1),
        # disjoint holds, but the later one has the smaller fence
        "regression": (grant(k, 0.0, 0.01, 20, release_sent=0.1) + grant(k, 0.2, 0.21, 19, release_sent=0.3),
                       lambda r: len(r.regressions) == 1 and r.n_overlaps == 0),
        "equal fences": (grant(k, 0.0, 0.01, 20, release_sent=0.1) + grant(k, 0.2, 0.21, 20, release_sent=0.3),
                         lambda r: len(r.regressions) == 1),
        # a 201 that arrives 10 ms after its own expires_at (server clock)
        "stale by expires_at": (grant(k, 0.0, 1.0, 10, wait_ms=500, expires_at=0.99, release_sent=1.1),
                                lambda r: list(r.stale_why) == ["after its expires_at"]),
        # a waiter's 201 answered after send + wait_ms + its ttl_ms (full
        # TTL, late answer)
        "stale by send + ttl": (grant(k, 0.0, 2.6, 10, wait_ms=500, release_sent=2.7, expires_at=4.6),
                                lambda r: list(r.stale_why) == ["after send + ttl_ms"]),
        # what is left of the TTL, counted from the send, is gone on arrival
        "stale by the remaining ttl": (grant(k, 0.0, 0.6, 10, ret_ttl_ms=500, release_sent=0.7),
                                       lambda r: list(r.stale_why) == ["after send + ttl_ms"]),
        "ttl above the request": (grant(k, 0.0, 0.01, 10, ret_ttl_ms=2500, release_sent=0.1),
                                  lambda r: list(r.stale_why) == ["ttl_ms above the request"]),
        # a waiter (bound 700 ms with store timeout 700) answered at 1.1 s
        "late": ([_acq(k, 0.0, 1.1, 409, wait_ms=500)], lambda r: len(r.late) == 1 and abs(r.late[0][1] - 0.4) < 1e-6),
        "late release": (grant(k, 0.0, 0.01, 10, release_sent=0.1)[:1]
                         + [Rec(RELEASE, k, sent=0.1, answered=1.2, status=503, body=None)],
                         lambda r: len(r.late) == 1),
        "unanswered": ([Rec(ACQUIRE, k, sent=0.0, ttl_ms=2000, wait_ms=500, error="timed out")],
                       lambda r: len(r.unanswered) == 1),
        "wrong status": ([_acq(k, 0.0, 0.01, 500)], lambda r: len(r.wrong) == 1),
        "wrong 503 code": ([_acq(k, 0.0, 0.01, 503, body={"error": {"code": "shutting_down"}})],
                           lambda r: len(r.wrong) == 1),
    }
    missed = []
    for name, (recs, caught) in cases.items():
        rep = check_history(recs, 700, 300)
        if not caught(rep) or rep.violations() == 0:
            missed.append("%s:\n%s" % (name, rep.text()))
    check(not missed, "the checker missed:\n" + "\n".join(missed))
    # the report names both holders of an overlap and how late an answer was
    rep = check_history(cases["overlap"][0] + cases["late"][0], 700, 300)
    text = rep.text()
    for want in ("OVERLAP", "fence 10", "fence 11", "LATE by 400 ms"):
        check(want in text, "%r not in the report:\n%s" % (want, text))
    check(faultload.utc_seconds("1970-01-01T00:00:01.500Z") == 1.5, "expires_at parsing")

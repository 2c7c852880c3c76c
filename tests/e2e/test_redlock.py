"""tests/e2e/test_redlock.py - what only redlock:// promises, on independent
redis-servers (server_redlock.py): a node that restarted without its data
is not counted for the max TTL (the restart hazard of Redlock, made
deterministic), fences grow across empty restarts, two instances and a
stopped node, a majority down is a 503 and never a grant, the validity
(ttl_ms) is the TTL less the time spent and the clock drift, semaphores
are refused (a majority cannot bound the holders) while read-write locks
work, bad URLs stop lockd with exit 2, a FLUSHALLed node is quarantined,
waiters are woken across instances, and multi-key calls work with a node
down.

Scenarios that restart nodes without trust, flush one or slow it down
through a proxy start a store of their own (and a lockd with a small
--max-ttl-ms, so its quarantines end within the scenario): the suite's
store (fsync, trust_fsync=1) is left as every other scenario expects it."""

import contextlib
import os
import subprocess
import time

import harness
from client import expect_error, has_metric, metric, metrics
from harness import check, eq
from multi import acquire, path, release, renew, wait_ready, wake_by_expiry, wake_by_release
from server_redlock import RedlockNodes

R = ["redlock"]
# short node timeouts, so that a stopped node costs each call 0.5 s
FAST = "timeout_ms=500&connect_timeout_ms=500"
NODE_TIMEOUT_S = 0.5
# lockd's validity counts from its first write to a node, the client's view
# from its send: what lockd spends before that write (parsing, a thread) is
# the client's to allow for; 20 ms on a quiet machine, up to 91 ms seen on
# two busy cores. The exact check is the one against the held time.
SLACK_MS = 100


def with_opts(url, opts):
    return url + ("&" if "?" in url else "?") + opts


def drift_ms(ttl_ms):
    """The adapter's default clock drift allowance: 1 % of the TTL + 2 ms."""
    return ttl_ms // 100 + 2


@contextlib.contextmanager
def own_store(ctx, name, n=3, fsync=True, trust=True):
    """n nodes of this scenario's own; on the way out the lockd instances on
    them are stopped first, then the nodes."""
    nodes = RedlockNodes(os.path.join(ctx.tmpdir, name), n=n, fsync=fsync, trust=trust)
    try:
        nodes.start()
        yield nodes
    finally:
        for ld in ctx.extra:
            if nodes.url.split("?")[0] in ld.backend_url:
                ld.stop(5)
        nodes.stop()


def max_ttl(ms):
    """lockd's arguments for a max TTL of ms (the default TTL within it):
    a quarantine lasts max TTL + drift."""
    return ["--max-ttl-ms", str(ms), "--default-ttl-ms", str(ms)]


def start_lockd(ctx, url, args=(), voting=None):
    """A lockd on url (stopped by ctx.cleanup), ready; with voting, also
    until /readyz counts that many voting nodes."""
    ld = harness.Lockd(url, args=args, tmpdir=ctx.tmpdir)
    ctx.extra.append(ld)
    ld.start()
    check(wait_ready(ld, 15.0), "lockd on %s not ready: %s" % (url, ld.log_tail()))
    if voting is not None:
        wait_nodes(ld, 10.0, voting=voting)
    return ld


def readyz(ld):
    r = ld.request("GET", "/readyz", timeout=10)
    body = r.json if isinstance(r.json, dict) else {}
    return r.status, body, body.get("nodes") or {}


def wait_nodes(ld, timeout, status=None, **want):
    """Poll /readyz until its "nodes" has the wanted counts (and the status,
    if given); the (status, nodes) seen. Fails after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        st, body, nodes = readyz(ld)
        if all(nodes.get(k) == v for k, v in want.items()) and (status is None or st == status):
            return st, nodes
        if time.monotonic() > deadline:
            raise harness.Fail("/readyz after %.1f s: %d %r, want nodes %r%s" % (
                timeout, st, body, want, " and %d" % status if status else ""))
        time.sleep(0.05)


def node_gauges(ld, node):
    """(voting, quarantined, up) of node (a RedlockNode) in ld's /metrics."""
    s = metrics(None, ld)
    for name in ("lockd_store_node_up", "lockd_store_node_voting", "lockd_store_node_quarantined"):
        check(has_metric(s, name, node=node.addr), "/metrics has no %s{node=\"%s\"}" % (name, node.addr))
    return tuple(metric(s, "lockd_store_node_" + k, node=node.addr) for k in ("voting", "quarantined", "up"))


def lock_name(key):
    return "lockd:lock:{%s}" % key


def forget_on(node, key):
    """Make node one that never saw the grant of key. A node stopped during
    an acquire runs it once it is continued (its bytes wait in the socket),
    which would hide the hazard: drop the holder's record there (the lock
    hash; its fence counter stays). Once the node is continued."""
    time.sleep(0.1)  # what waited in its sockets runs first
    node.command("DEL", lock_name(key), "lockd:exp:{%s}" % key)
    eq(node.command("EXISTS", lock_name(key)), 0, "the lock on node %s after DEL" % node.addr)


def wait_free(ld, key, timeout, what):
    c = ld.client(timeout=10)
    deadline = time.monotonic() + timeout
    while True:
        r = c.request("GET", path(key))
        if r.status == 404 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    eq(r.status, 404, "%s: inspect %.1f s later (%r)" % (what, timeout, r))


# ------------------------------------------------------------ restart hazard

@harness.scenario("redlock: a node restarted empty while another missed the grant is not counted: "
                  "409 until the holder's TTL passed, then a larger fence; readyz and metrics show it",
                  backends=R)
def restart_hazard(ctx):
    # no AOF, no trust: node 1's restart loses A's lock, and only the
    # quarantine (max TTL 8 s + drift) keeps it from voting for B at once
    with own_store(ctx, "hazard", fsync=False, trust=False) as nodes:
        ld = start_lockd(ctx, with_opts(nodes.url, FAST), max_ttl(8000), voting=3)
        n1, n3 = nodes.node(0), nodes.node(2)
        key = ctx.key("hazard")
        c = ld.client(timeout=10)
        n3.pause()
        try:
            a = acquire(c, key, ttl_ms=6000)
            t_a = time.monotonic()
            eq(a.status, 201, "A's acquire with node 3 stopped: %r" % a)
            a_end = t_a + a.json["ttl_ms"] / 1000.0
            n1.restart_empty()
            t_restart = time.monotonic()
        finally:
            n3.resume()
        forget_on(n3, key)
        check(n1.command("EXISTS", lock_name(key)) == 0, "node 1 still has the lock after its empty restart")
        wait_nodes(ld, 2.0, up=3, voting=2, total=3, quorum=2)
        eq(node_gauges(ld, n1)[:2], (0.0, 1.0), "node 1 (voting, quarantined) in /metrics")
        eq(node_gauges(ld, n3)[:2], (1.0, 0.0), "node 3 (voting, quarantined) in /metrics")
        refused, b, votes = 0, None, []
        while time.monotonic() < a_end + 4.0:
            t0 = time.monotonic()
            r = acquire(c, key, ttl_ms=2000)
            t1 = time.monotonic()
            if r.status == 201:
                b = (t0, t1, r.json)
                break
            check(r.status == 409, "B's try-once while A holds (%.0f ms before A's expiry): %r"
                  % ((a_end - t1) * 1000, r))
            refused += 1
            votes.append((time.monotonic(), readyz(ld)[2].get("voting")))
            time.sleep(0.1)
        check(b is not None, "B was never granted, %.1f s after A's TTL passed" % 4.0)
        check(b[1] >= a_end, "B granted %.0f ms before A's TTL passed (fence %d, A's %d): node 1 was counted"
              % ((a_end - b[1]) * 1000, b[2]["fence"], a.json["fence"]))
        check(b[2]["fence"] > a.json["fence"], "B's fence %d not above A's %d" % (b[2]["fence"], a.json["fence"]))
        check(refused >= 10, "only %d refusals before B's grant" % refused)
        early = [(t - t_restart, v) for t, v in votes if t < t_restart + 6.5 and v != 2]
        check(not early, "/readyz voting while node 1 must be quarantined (s after restart, voting): %r" % early)
        release(c, key, b[2]["token"])
        # the quarantine ends: restart + max TTL + drift (the restart time
        # is taken 1 s early, from the node's uptime in whole seconds)
        wait_nodes(ld, max(0.5, t_restart + 9.5 - time.monotonic()), voting=3)
        check(time.monotonic() >= t_restart + 6.5, "node 1 voting again %.1f s after its restart, before the max TTL"
              % (time.monotonic() - t_restart))
        eq(node_gauges(ld, n1), (1.0, 0.0, 1.0), "node 1 (voting, quarantined, up) after the quarantine")


# ------------------------------------------------------------ fences

@harness.scenario("redlock: fences strictly increase across empty restarts (one node, then a majority), "
                  "two instances taking turns and a stopped node", backends=R)
def fences_increase(ctx):
    with own_store(ctx, "fences", fsync=False, trust=False) as nodes:
        url = with_opts(nodes.url, FAST)
        lds = [start_lockd(ctx, url, max_ttl(2000), voting=3) for _ in range(2)]
        key = ctx.key("fence")
        seen = []

        def grants(n, what):
            for _ in range(n):
                ld = lds[len(seen) % 2]
                c = ld.client(timeout=10)
                r = acquire(c, key, ttl_ms=1500)
                eq(r.status, 201, "acquire through instance %d (%s): %r" % (len(seen) % 2 + 1, what, r))
                seen.append((what, r.json["fence"]))
                eq(release(c, key, r.json["token"]).status, 200, "release (%s)" % what)

        def voting_again():
            for ld in lds:
                wait_nodes(ld, 6.0, voting=3)

        grants(4, "all nodes")
        nodes.node(0).restart_empty()
        grants(4, "node 1 restarted empty")
        voting_again()
        grants(4, "node 1 voting again")
        # a majority loses its data: only node 3 keeps the counter; once
        # they vote again, node 3 stopped, the fence comes from 1 and 2 alone
        nodes.node(0).restart_empty()
        nodes.node(1).restart_empty()
        voting_again()
        nodes.node(2).pause()
        try:
            grants(4, "nodes 1, 2 restarted empty, node 3 stopped")
        finally:
            nodes.node(2).resume()
        grants(2, "all nodes back")
        for (w0, f0), (w1, f1) in zip(seen, seen[1:]):
            check(f1 > f0, "fence %d (%s) after %d (%s): fences %r" % (f1, w1, f0, w0, seen))


# ------------------------------------------------------------ majority down

@harness.scenario("redlock: a majority of nodes stopped or killed gives 503 within the node timeout, "
                  "never a grant, /readyz 503 with nodes.up 1; grants again once they are back", backends=R)
def majority_down(ctx):
    with own_store(ctx, "majority") as nodes:
        ld = start_lockd(ctx, with_opts(nodes.url, FAST), voting=3)
        c = ld.client(timeout=15)
        for how in ("SIGSTOP", "kill -9"):
            asked = []
            down = (nodes.node(1), nodes.node(2))
            for nd in down:
                nd.pause() if how == "SIGSTOP" else nd.kill9()
            try:
                for _ in range(3):
                    k = ctx.key("down")
                    asked.append(k)
                    t0 = time.monotonic()
                    r = acquire(c, k, ttl_ms=5000)
                    dt = time.monotonic() - t0
                    check(r.status != 201, "%s of 2 of 3 nodes: a grant %r" % (how, r))
                    expect_error(r, 503, "backend_unavailable", "acquire with 2 of 3 nodes down (%s)" % how)
                    check(dt < NODE_TIMEOUT_S + 0.5, "503 after %.2f s, node timeout %.1f s" % (dt, NODE_TIMEOUT_S))
                st, seen = wait_nodes(ld, 3.0, status=503, up=1, total=3, quorum=2)
            finally:
                for nd in down:
                    nd.resume() if how == "SIGSTOP" else nd.restart()
            wait_nodes(ld, 10.0, status=200, up=3, voting=3)
            k = ctx.key("back")
            r = acquire(c, k, ttl_ms=2000)
            eq(r.status, 201, "acquire once the nodes are back (%s): %r" % (how, r))
            release(c, k, r.json["token"])
            # a node that ran a refused acquire late (its bytes waited while
            # it was stopped) was sent the undo too
            for k in asked:
                wait_free(ld, k, 2.0, "a key asked for while 2 of 3 nodes were down (%s)" % how)


# ------------------------------------------------------------ validity

@harness.scenario("redlock: ttl_ms is the TTL less the time spent and the drift (1 % + 2 ms, or drift_ms), "
                  "never more than is left when nodes answer late", backends=R, slow=True)
def validity(ctx):
    from delayproxy import DelayProxy

    ttl = 20000
    for opts, drift in (("", drift_ms(ttl)), ("drift_ms=50", 50)):
        ld = start_lockd(ctx, with_opts(ctx.url, opts) if opts else ctx.url)
        c = ld.client()
        key = ctx.key("valid")
        t0 = time.monotonic()
        r = acquire(c, key, ttl_ms=ttl)
        dt = (time.monotonic() - t0) * 1000
        eq(r.status, 201, "acquire (%s)" % (opts or "default drift"))
        got = r.json["ttl_ms"]
        check(ttl - drift - dt - 2 <= got <= ttl - drift, "ttl_ms %d for %d ms with drift %d ms, answered in %.0f ms"
              % (got, ttl, drift, dt))
        t0 = time.monotonic()
        n = renew(c, key, r.json["token"], ttl_ms=ttl)
        dt = (time.monotonic() - t0) * 1000
        eq(n.status, 200, "renew")
        check(ttl - drift - dt - 2 <= n.json["ttl_ms"] <= ttl - drift, "renew ttl_ms %d for %d ms with drift %d ms"
              % (n.json["ttl_ms"], ttl, drift))
        release(c, key, r.json["token"])
        ld.stop(5)
    # two nodes (a quorum) behind proxies that hold their answers back
    with own_store(ctx, "late") as nodes:
        n1, n2, n3 = nodes.nodes
        with DelayProxy(n1.port) as p1, DelayProxy(n2.port) as p2:
            url = "redlock://127.0.0.1:%d,127.0.0.1:%d,%s?trust_fsync=1&timeout_ms=2000" % (p1.port, p2.port, n3.addr)
            ld = start_lockd(ctx, url, voting=3)
            c = ld.client(timeout=15)
            late_answers(ctx, c, p1, p2)
            # a node stopped: short TTLs are granted with what is left, or not
            n3.pause()
            try:
                for ttl in (1000, 400, 150):
                    key = ctx.key("short")
                    t0 = time.monotonic()
                    r = acquire(c, key, ttl_ms=ttl)
                    dt = (time.monotonic() - t0) * 1000
                    check(r.status in (201, 503), "ttl %d, node 3 stopped: %r" % (ttl, r))
                    if r.status == 201:
                        check(r.json["ttl_ms"] + dt <= ttl - drift_ms(ttl) + SLACK_MS,
                              "ttl_ms %d answered %.0f ms after the send of a %d ms lock, node 3 stopped"
                              % (r.json["ttl_ms"], dt, ttl))
                        release(c, key, r.json["token"])
            finally:
                n3.resume()


def late_answers(ctx, c, p1, p2):
    # lockd answers 503 a grant with no more left than the time since the
    # send (+ 20 ms): 3000 - 600 - 32 ms is well above that
    ttl, hold = 3000, 0.6
    key = ctx.key("late")
    p1.hold_replies(hold)
    p2.hold_replies(hold)
    t0 = time.monotonic()
    r = acquire(c, key, ttl_ms=ttl)
    dt = (time.monotonic() - t0) * 1000
    eq(r.status, 201, "acquire with a quorum's answers %.1f s late: %r" % (hold, r))
    check(r.json["ttl_ms"] <= ttl - drift_ms(ttl) - hold * 1000,
          "ttl_ms %d with answers %.0f ms late: more than the %d ms left" % (r.json["ttl_ms"], hold * 1000,
                                                                            ttl - drift_ms(ttl) - hold * 1000))
    check(r.json["ttl_ms"] + dt <= ttl - drift_ms(ttl) + SLACK_MS, "ttl_ms %d answered %.0f ms after the send"
          % (r.json["ttl_ms"], dt))
    release(c, key, r.json["token"])
    # held past the TTL: no grant, and the nodes that ran it late undo it
    ttl = 1000
    key = ctx.key("dead")
    p1.hold_replies(1.2)
    p2.hold_replies(1.2)
    t0 = time.monotonic()
    r = acquire(c, key, ttl_ms=ttl)
    dt = (time.monotonic() - t0) * 1000
    check(r.status != 201, "201 (ttl_ms %s) %.0f ms after the send of a %d ms lock whose quorum answered 1.2 s late"
          % (r.json.get("ttl_ms") if r.json else None, dt, ttl))
    expect_error(r, 503, "backend_unavailable", "acquire whose quorum answered after the TTL")
    time.sleep(1.3)
    eq(c.request("GET", path(key)).status, 404, "the key of the late acquire: released")


# ------------------------------------------------------------ kinds

@harness.scenario("redlock: a semaphore (shared, limit 2) is 400 invalid_parameter naming redlock; "
                  "shared without a limit or with limit 1 works, and excludes a writer", backends=R)
def kinds(ctx):
    c = ctx.lockd.client()
    key = ctx.key("sem")
    r = c.request("POST", path(key), {"mode": "shared", "limit": 2, "ttl_ms": 5000})
    err = expect_error(r, 400, "invalid_parameter", "shared limit 2 on redlock")
    check("redlock" in err["message"] and "limit" in err["message"], "the message names redlock: %r" % err)
    eq(c.request("GET", path(key)).status, 404, "the key after the refused semaphore")
    # readers without a limit: any number, a writer waits for them all
    readers = []
    for i in range(3):
        r = c.request("POST", path(key), {"mode": "shared", "ttl_ms": 5000})
        eq(r.status, 201, "reader %d: %r" % (i, r))
        eq(r.json.get("mode"), "shared", "reader mode")
        readers.append(r.json)
    check(readers[0]["fence"] < readers[1]["fence"] < readers[2]["fence"], "readers' fences grow")
    w = acquire(c, key, ttl_ms=5000)
    expect_error(w, 409, "lock_held", "a writer while 3 readers hold")
    ins = c.request("GET", path(key))
    eq(ins.status, 200, "inspect of the shared key")
    eq(ins.json.get("mode"), "shared", "inspect mode")
    for i, g in enumerate(readers):
        expect_error(acquire(c, key, ttl_ms=5000), 409, "lock_held", "a writer while %d readers hold" % (3 - i))
        eq(release(c, key, g["token"]).status, 200, "reader %d's release" % i)
    w = acquire(c, key, ttl_ms=5000)
    eq(w.status, 201, "the writer once the readers left")
    check(w.json["fence"] > readers[-1]["fence"], "the writer's fence above the readers'")
    expect_error(c.request("POST", path(key), {"mode": "shared", "ttl_ms": 5000}), 409, "lock_held",
                 "a reader while the writer holds")
    release(c, key, w.json["token"])
    # limit 1: one holder, the second is refused, limit_mismatch for another limit
    s1 = c.request("POST", path(key), {"mode": "shared", "limit": 1, "ttl_ms": 5000})
    eq(s1.status, 201, "shared limit 1: %r" % s1)
    eq(s1.json.get("limit"), 1, "limit in the grant")
    expect_error(c.request("POST", path(key), {"mode": "shared", "limit": 1, "ttl_ms": 5000}), 409, "lock_held",
                 "a second holder of limit 1")
    expect_error(c.request("POST", path(key), {"mode": "shared", "ttl_ms": 5000}), 409, "limit_mismatch",
                 "a reader without a limit beside limit 1")
    release(c, key, s1.json["token"])
    eq(c.request("GET", path(key)).status, 404, "the key at the end")


# ------------------------------------------------------------ URL errors

def lockd_exit(url, timeout=8):
    """lockd's exit code and output on url; "running" if it did not exit."""
    try:
        p = subprocess.run([harness.LOCKD_BIN, "--listen", "127.0.0.1:%d" % harness.free_port(), "--backend", url],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        return "running after %d s" % timeout, out.decode("utf-8", "replace") if isinstance(out, bytes) else out
    return p.returncode, p.stdout + p.stderr


@harness.scenario("redlock: 2, 4 or 11 hosts, a host given twice or min_replicas stop lockd with exit 2 "
                  "and a message naming the rule", backends=R)
def url_errors(ctx):
    hosts = ["127.0.0.1:%d" % harness.free_port() for _ in range(11)]
    cases = [
        ("2 hosts", "redlock://" + ",".join(hosts[:2]), ("2", "odd")),
        ("4 hosts", "redlock://" + ",".join(hosts[:4]), ("4", "odd")),
        ("11 hosts", "redlock://" + ",".join(hosts), ("11", "9")),
        ("1 host", "redlock://" + hosts[0], ("1", "3")),
        ("a host twice", "redlock://%s,%s,%s" % (hosts[0], hosts[1], hosts[0]), (hosts[0],)),
        ("a default port twice", "redlock://127.0.0.1,127.0.0.1:6379,%s" % hosts[2], ("6379",)),
        ("min_replicas", ctx.url.split("?")[0] + "?min_replicas=1", ("min_replicas",)),
        ("sentinel_password", ctx.url.split("?")[0] + "?sentinel_password=x", ("sentinel_password",)),
    ]
    bad = []
    for what, url, words in cases:
        rc, out = lockd_exit(url)
        line = next((ln for ln in out.splitlines() if "redlock: " in ln), None)
        if rc != 2 or line is None or not all(w in line for w in words):
            bad.append("%s (%s): exit %r, want 2 and a line with 'redlock: ' naming %r:\n%s"
                       % (what, url, rc, words, out[-600:]))
    check(not bad, "\n".join(bad))


# ------------------------------------------------------------ FLUSHALL

@harness.scenario("redlock: a node that lost its data without a restart (FLUSHALL) is quarantined within 1 s "
                  "and not counted, so a lock another node missed stays exclusive", backends=R)
def flushall(ctx):
    with own_store(ctx, "flush") as nodes:
        ld = start_lockd(ctx, with_opts(nodes.url, FAST), max_ttl(3000), voting=3)
        n1, n2 = nodes.node(0), nodes.node(1)
        c = ld.client(timeout=10)
        key = ctx.key("flush")
        n2.pause()
        try:
            a = acquire(c, key, ttl_ms=3000)
            t_a = time.monotonic()
            eq(a.status, 201, "A's acquire with node 2 stopped: %r" % a)
        finally:
            n2.resume()
        forget_on(n2, key)
        eq(n1.command("FLUSHALL"), "OK", "FLUSHALL on node 1")
        t_flush = time.monotonic()
        wait_nodes(ld, 1.0, voting=2, up=3)
        harness.log("     node 1 quarantined %.0f ms after its FLUSHALL" % ((time.monotonic() - t_flush) * 1000))
        eq(node_gauges(ld, n1), (0.0, 1.0, 1.0), "node 1 (voting, quarantined, up) after FLUSHALL")
        a_end = t_a + a.json["ttl_ms"] / 1000.0
        refused = 0
        while time.monotonic() < a_end - 0.1:
            r = acquire(c, key, ttl_ms=1000)
            check(r.status != 201, "B granted %.0f ms before A's TTL passed: the flushed node was counted"
                  % ((a_end - time.monotonic()) * 1000))
            expect_error(r, 409, "lock_held", "B while A holds")
            refused += 1
            time.sleep(0.1)
        check(refused >= 5, "only %d refusals" % refused)
        k = ctx.key("fresh")
        r = acquire(c, k, ttl_ms=1000)
        eq(r.status, 201, "a free key with node 1 quarantined: %r" % r)
        release(c, k, r.json["token"])
        wait_nodes(ld, 5.0, voting=3)
        check(time.monotonic() >= t_flush + 2.5, "node 1 voting again %.1f s after FLUSHALL, before the max TTL"
              % (time.monotonic() - t_flush))
        eq(n1.command("EXISTS", "lockd:redlock"), 1, "the marker set again on node 1")


# ------------------------------------------------------------ waiting

@harness.scenario("redlock: /readyz says fifo instance; a waiter on instance 2 is woken within 250 ms by a "
                  "release through instance 1, and by the holder's expiry", backends=R)
def waiting_across_instances(ctx):
    st, body, nodes = readyz(ctx.lockd)
    eq(st, 200, "/readyz")
    eq(body.get("fifo"), "instance", "/readyz fifo")
    eq(body.get("backend"), "redlock", "/readyz backend")
    eq(nodes, {"total": 3, "up": 3, "voting": 3, "quorum": 2}, "/readyz nodes")
    other = ctx.new_lockd()
    check(wait_ready(other, 15.0), "the second instance is not ready")
    worst = 0.0
    for _ in range(3):
        _, dt = wake_by_release(ctx.lockd, other, ctx.key("wake"), within=0.25)
        worst = max(worst, dt)
    harness.log("     woken across instances after a release within %.0f ms" % (worst * 1000))
    _, late = wake_by_expiry(ctx.lockd, other, ctx.key("exp"), early=0.01, late=0.3)
    harness.log("     woken %.0f ms after the holder's expiry" % (late * 1000))


# ------------------------------------------------------------ multi-key

def multi(c, method, body):
    return c.request(method, "/locks", body)


@harness.scenario("redlock: multi-key acquire, renew and release work with a node stopped and with one "
                  "killed; fences per key grow", backends=R)
def multi_key_node_down(ctx):
    srv = ctx.server
    ld = start_lockd(ctx, with_opts(ctx.url, FAST), voting=3)
    c = ld.client(timeout=15)
    keys = [ctx.key("mk%d" % i) for i in range(3)]
    last = {k: 0 for k in keys}

    def round_(what):
        r = multi(c, "POST", {"keys": keys, "ttl_ms": 4000})
        eq(r.status, 201, "multi-key acquire (%s): %r" % (what, r))
        for k in keys:
            check(r.json["fences"][k] > last[k], "%s: fence of %s %d after %d" % (what, k, r.json["fences"][k], last[k]))
            last[k] = r.json["fences"][k]
        tok = r.json["token"]
        o = multi(c, "POST", {"keys": [ctx.key("mk-other"), keys[1]], "ttl_ms": 4000})
        expect_error(o, 409, "lock_held", "multi-key acquire over a held key (%s)" % what)
        n = multi(c, "PUT", {"keys": keys, "token": tok, "ttl_ms": 4000})
        eq(n.status, 200, "multi-key renew (%s): %r" % (what, n))
        check(n.json["ttl_ms"] <= 4000 - drift_ms(4000), "renew ttl_ms %r" % n.json.get("ttl_ms"))
        d = multi(c, "DELETE", {"keys": keys, "token": tok})
        eq(d.status, 200, "multi-key release (%s): %r" % (what, d))
        for k in keys:
            eq(c.request("GET", path(k)).status, 404, "%s after the release (%s)" % (k, what))

    round_("all nodes")
    srv.node(2).pause()
    try:
        round_("node 3 stopped")
    finally:
        srv.node(2).resume()
    # one fault at a time: node 3 counts again once the monitor heard it
    # (a worker does not dial a node the monitor found silent)
    wait_nodes(ld, 5.0, up=3)
    srv.node(0).kill9()
    try:
        round_("node 1 killed")
    finally:
        srv.node(0).restart()
    wait_nodes(ld, 5.0, voting=3)
    wait_nodes(ctx.lockd, 5.0, voting=3)
    round_("all nodes back")


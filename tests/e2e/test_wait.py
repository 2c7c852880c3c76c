"""tests/e2e/test_wait.py - waiting acquires (wait_ms > 0) on every backend:
wake-up on release and on the holder's expiry (timed), first come first
served, 409 when the wait runs out, waiters whose clients disconnect, 1000
parked waiters at once (raw non-blocking sockets), and mutual exclusion
under 16 concurrent clients checked by non-overlapping hold intervals and
increasing fences.

Timing bounds are generous (a loaded 2-core CI machine, ASan builds) but
meaningful: API.md's target is 50 ms; the bound asserted is 250 ms.
"""

import random
import resource
import selectors
import socket
import threading
import time

import harness
from client import (Waiter, acquire, expect_error, expect_free, expect_grant, expect_held, expect_json, metric,
                    metrics, parse_http, path, release, req)
from harness import check, eq
from multi import expiry_race

WAKE_BOUND = 0.25  # s: API.md targets 50 ms


def waiters_now(ctx, lockd=None):
    try:
        return metric(metrics(ctx, lockd), "lockd_waiters")
    except Exception:  # noqa: BLE001 - the gauge is a hint here, not the subject
        return None


def wait_parked(ctx, want, timeout=2.0, lockd=None):
    """Until lockd_waiters reaches want (bounded); then a short settle."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = waiters_now(ctx, lockd)
        if n is None or n >= want:
            break
        time.sleep(0.02)
    time.sleep(0.05)


def raw_waiter(ctx, key, wait_ms=10000, ttl_ms=10000):
    """A waiting acquire on a raw socket the scenario can drop."""
    s = socket.create_connection(("127.0.0.1", ctx.lockd.port), timeout=5)
    s.sendall(("POST %s?wait_ms=%d&ttl_ms=%d HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
               % (path(key), wait_ms, ttl_ms)).encode())
    return s


@harness.scenario("a waiting acquire of a free key is granted at once")
def wait_free(ctx):
    key = ctx.key("wf")
    t0 = time.monotonic()
    r = req(ctx, "POST", key, {"wait_ms": 5000, "ttl_ms": 2000})
    g = expect_grant(r, key, 2000)
    check(time.monotonic() - t0 < 0.5, "took %.3f s" % (time.monotonic() - t0))
    release(ctx, key, g["token"])


def check_wake_ups(lat, event, note):
    """Three wake-up delays (s) after `event`: logged; the median must stay
    under WAKE_BOUND and the slowest under 4 times it."""
    lat = sorted(lat)
    harness.log("     wake-up %s%s: %s ms" % (event, note, ", ".join("%.1f" % (x * 1000) for x in lat)))
    check(lat[1] < WAKE_BOUND, "median wake-up %s %.0f ms (bound %d ms)" % (event, lat[1] * 1000, WAKE_BOUND * 1000))
    check(lat[2] < 4 * WAKE_BOUND, "slowest wake-up %s %.0f ms" % (event, lat[2] * 1000))


@harness.scenario("a waiter is granted within 250 ms of the holder's release")
def wake_on_release(ctx):
    lat = []
    for i in range(3):
        key = ctx.key("wr")
        base = waiters_now(ctx) or 0
        h = acquire(ctx, key, ttl_ms=20000)
        w = Waiter(ctx, key, wait_ms=10000, ttl_ms=5000)
        w.start()
        wait_parked(ctx, base + 1)
        check(w.resp is None, "waiter answered before the release: %r" % (w.resp,))
        t0 = time.monotonic()
        release(ctx, key, h["token"])
        r = w.result()
        g = expect_grant(r, key, 5000, what="waiter's grant")
        check(g["fence"] > h["fence"], "waiter's fence %d <= holder's %d" % (g["fence"], h["fence"]))
        lat.append(w.t_done - t0)
        release(ctx, key, g["token"])
    check_wake_ups(lat, "after release", "")


@harness.scenario("a waiter is granted within 250 ms of the holder's TTL expiry, not before")
def wake_on_expiry(ctx):
    ttl = 500
    rounds = []
    for i in range(3):
        key = ctx.key("we")
        t_sent = time.monotonic()
        h = acquire(ctx, key, ttl_ms=ttl)
        w = Waiter(ctx, key, wait_ms=10000, ttl_ms=5000)
        w.start()
        rounds.append((key, t_sent, h, w))
    lat = []
    for key, t_sent, h, w in rounds:
        r = w.result()
        g = expect_grant(r, key, 5000, what="waiter's grant after expiry")
        check(g["fence"] > h["fence"], "fence")
        early = (t_sent + ttl / 1000.0) - w.t_done
        check(early < 0.01, "waiter granted %.0f ms before the holder's ttl passed" % (early * 1000))
        lat.append(w.t_done - (t_sent + ttl / 1000.0))
        release(ctx, key, g["token"])
    check_wake_ups(lat, "after expiry", " (upper bound)")


@harness.scenario("an acquire whose wait runs out returns 409 lock_held with retry_after_ms")
def wait_timeout(ctx):
    key = ctx.key("wt")
    h = acquire(ctx, key, ttl_ms=10000)
    t0 = time.monotonic()
    r = req(ctx, "POST", key, {"wait_ms": 400, "ttl_ms": 1000})
    took = time.monotonic() - t0
    err = expect_error(r, 409, "lock_held", "acquire after its wait ran out")
    check(took >= 0.39, "answered 409 after %.3f s, before wait_ms 400 ran out" % took)
    check(took < 0.4 + 1.0, "answered 409 after %.3f s for wait_ms 400" % took)
    ra = err.get("retry_after_ms")
    check(isinstance(ra, int) and 7000 <= ra <= 10000, "retry_after_ms %r (holder has ~9.6 s left)" % ra)
    eq(r.header("Retry-After"), str(-(-ra // 1000)), "Retry-After")
    expect_held(ctx, key, h["fence"], what="holder after the waiter gave up")
    release(ctx, key, h["token"])
    expect_free(ctx, key, "a waiter that timed out holds nothing after the release")


@harness.scenario("waiters on one key are served first come, first served")
def fifo(ctx):
    key = ctx.key("fifo")
    base = waiters_now(ctx) or 0
    h = acquire(ctx, key, ttl_ms=20000)
    ws = []
    for i in range(6):
        w = Waiter(ctx, key, wait_ms=15000, ttl_ms=10000, owner="w%d" % i, then_release_after=0.02)
        w.start()
        ws.append(w)
        wait_parked(ctx, base + i + 1)
    for w in ws:
        check(w.resp is None, "a waiter was answered while the key was held: %r" % (w.resp,))
    release(ctx, key, h["token"])
    for w in ws:
        w.result(20)
    order = sorted(range(len(ws)), key=lambda i: ws[i].t_done)
    for i, w in enumerate(ws):
        expect_grant(w.resp, key, 10000, what="waiter %d" % i)
        eq(w.release_status, 200, "release by waiter %d" % i)
    eq(order, list(range(len(ws))), "grant order of waiters that arrived in order 0..5")
    fences = [w.resp.json["fence"] for w in ws]
    check(all(a < b for a, b in zip(fences, fences[1:])) and fences[0] > h["fence"],
          "fences in arrival order not increasing: %r" % fences)
    expect_free(ctx, key)


@harness.scenario("a try-once acquire does not jump ahead of queued waiters when fifo is store-wide",
                  needs=["fifo:store"])
def no_queue_jumping(ctx):
    for i in range(5):
        key = ctx.key("jump")
        base = waiters_now(ctx) or 0
        h = acquire(ctx, key, ttl_ms=20000)
        w = Waiter(ctx, key, wait_ms=10000, ttl_ms=5000)
        w.start()
        wait_parked(ctx, base + 1)
        c = ctx.lockd.client(timeout=10)
        try:
            c.request("GET", "/healthz")  # connection open before the race
            release(ctx, key, h["token"])
            r = c.request("POST", path(key), {"ttl_ms": 5000})
        finally:
            c.close()
        g = expect_grant(w.result(), key, 5000, what="the queued waiter")
        if r.status == 201:
            release(ctx, key, r.json["token"])
        expect_error(r, 409, "lock_held", "round %d: a try-once acquire right after the release" % i)
        release(ctx, key, g["token"])


@harness.scenario("a waiter whose client disconnects leaves the queue and the next waiter gets the lock")
def disconnect_next(ctx):
    key = ctx.key("dc")
    base = waiters_now(ctx) or 0
    h = acquire(ctx, key, ttl_ms=20000)
    gone = raw_waiter(ctx, key)
    wait_parked(ctx, base + 1)
    w = Waiter(ctx, key, wait_ms=10000, ttl_ms=10000)
    w.start()
    wait_parked(ctx, base + 2)
    gone.close()
    time.sleep(0.3)
    n = waiters_now(ctx)
    if n is not None:
        check(n <= base + 1, "lockd_waiters is %r after one of two waiters left (was %r)" % (n, base))
    t0 = time.monotonic()
    release(ctx, key, h["token"])
    g = expect_grant(w.result(), key, 10000, what="the waiter behind the one that left")
    check(w.t_done - t0 < 1.0, "granted %.0f ms after the release" % ((w.t_done - t0) * 1000))
    expect_held(ctx, key, g["fence"], what="the key after the grant")
    release(ctx, key, g["token"])
    time.sleep(0.2)
    expect_free(ctx, key, "the key after the live waiter released (nobody else may hold it)")


@harness.scenario("a lone waiter that disconnects is never granted a lock held by nobody")
def disconnect_alone(ctx):
    keys = [ctx.key("dca") for _ in range(4)]
    base = waiters_now(ctx) or 0
    holders = [acquire(ctx, k, ttl_ms=20000) for k in keys]
    socks = [raw_waiter(ctx, k, ttl_ms=20000) for k in keys]
    wait_parked(ctx, base + len(keys))
    for s in socks:
        s.close()
    time.sleep(0.3)
    for k, h in zip(keys, holders):
        release(ctx, k, h["token"])
    time.sleep(0.3)
    for k in keys:
        expect_free(ctx, k, "a key whose only waiter disconnected, after the release")
    n = waiters_now(ctx)
    if n is not None:
        check(n <= base, "lockd_waiters %r, was %r before" % (n, base))


@harness.scenario("a waiter that hangs up as the holder expires leaves the key free or held by a client that got the token")
def disconnect_race(ctx):
    ttl = 400
    offsets = [-0.03, -0.015, -0.005, 0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08]
    plan = []
    for off in offsets:
        key = ctx.key("race")
        t_sent = time.monotonic()
        h = acquire(ctx, key, ttl_ms=ttl)
        s = raw_waiter(ctx, key, wait_ms=10000, ttl_ms=20000)
        plan.append({"key": key, "at": t_sent + ttl / 1000.0 + off, "sock": s, "holder": h, "buf": b""})
    for p in sorted(plan, key=lambda p: p["at"]):
        sleep_until = p["at"] - time.monotonic()
        if sleep_until > 0:
            time.sleep(sleep_until)
        p["sock"].shutdown(socket.SHUT_WR)  # hang up, but still read what lockd sends
    deadline = time.monotonic() + 1.5
    for p in plan:
        s = p["sock"]
        s.settimeout(0.2)
        while time.monotonic() < deadline and parse_http(p["buf"]) is None:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not chunk:
                break
            p["buf"] += chunk
        s.close()
    time.sleep(0.2)
    got = 0
    for p in plan:
        resp = parse_http(p["buf"])
        r = req(ctx, "GET", p["key"])
        if resp is not None and resp[0] == 201:
            got += 1
            import json
            g = json.loads(resp[2])
            # it got the token: held by it, or already released by lockd
            check(r.status == 404 or (r.status == 200 and r.json.get("fence") == g["fence"]),
                  "%s: waiter got fence %d but inspect says %r" % (p["key"], g["fence"], r))
            ctx.lockd.request("DELETE", path(p["key"]), headers={"Lock-Token": g["token"]})
        else:
            expect_error(r, 404, "lock_not_found",
                         "%s: the waiter hung up without a grant (%r), the key must be free"
                         % (p["key"], p["buf"][:60]))
    harness.log("     %d of %d hung-up waiters received a grant" % (got, len(plan)))


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        new = n if hard == resource.RLIM_INFINITY else min(n, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@harness.scenario("1000 concurrent waiters are parked without pinning threads and each gets the lock once")
def thousand_waiters(ctx):
    n_waiters, n_keys = 1000, 20
    limit = raise_nofile(4096)
    check(limit >= n_waiters + 100, "RLIMIT_NOFILE %d is too low for the test" % limit)
    keys = [ctx.key("k1000") for _ in range(n_keys)]
    base = waiters_now(ctx) or 0
    holders = {k: acquire(ctx, k, ttl_ms=60000) for k in keys}
    sel = selectors.DefaultSelector()
    conns = []
    t_start = time.monotonic()
    try:
        # connect and send, in batches
        for i in range(n_waiters):
            key = keys[i % n_keys]
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", ctx.lockd.port))
            c = {"i": i, "key": key, "sock": s, "state": "connecting", "buf": b"", "grant": None,
                 "out": ("POST %s?wait_ms=60000&ttl_ms=60000 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                         % path(key)).encode()}
            conns.append(c)
            sel.register(s, selectors.EVENT_WRITE, c)
            if i % 100 == 99:
                pump(sel, until=lambda: all(x["state"] != "connecting" for x in conns), timeout=10)
        pump(sel, until=lambda: all(x["state"] != "connecting" for x in conns), timeout=10)
        bad = [c for c in conns if c["state"] not in ("waiting",)]
        check(not bad, "%d waiters could not send (%s)" % (len(bad), bad[:1] and bad[0]["state"]))
        # all parked: none answered yet; the gauge shows them
        deadline = time.monotonic() + 20
        n = None
        while time.monotonic() < deadline:
            pump(sel, until=lambda: False, timeout=0.1)
            early = [c for c in conns if c["buf"]]
            check(not early, "a waiter was answered while every key was held: %r" % (early[:1] and early[0]["buf"][:200]))
            n = waiters_now(ctx)
            if n is None or n >= base + n_waiters:
                break
        if n is not None:
            check(n >= base + n_waiters, "lockd_waiters is %r with %d waiters parked" % (n, n_waiters))
        t_parked = time.monotonic() - t_start
        # no thread is pinned: health and another key answer promptly
        t0 = time.monotonic()
        eq(ctx.lockd.request("GET", "/healthz", timeout=5).status, 200, "healthz with 1000 waiters")
        other = ctx.key("other")
        g = acquire(ctx, other, ttl_ms=1000)
        release(ctx, other, g["token"])
        busy = time.monotonic() - t0
        check(busy < 1.0, "healthz + acquire + release took %.3f s with 1000 waiters parked" % busy)
        # let them through: each waiter releases as soon as it is granted
        t0 = time.monotonic()
        for k, h in holders.items():
            release(ctx, k, h["token"])
        grants = []
        pump(sel, until=lambda: all(c["state"] in ("done", "failed") for c in conns), timeout=60, grants=grants)
        t_drain = time.monotonic() - t0
    finally:
        for c in conns:
            try:
                sel.unregister(c["sock"])
            except (KeyError, ValueError):
                pass
            c["sock"].close()
        sel.close()
    failed = [c for c in conns if c["state"] != "done"]
    check(not failed, "%d of %d waiters did not get and release the lock; first: %s %r"
          % (len(failed), n_waiters, failed[:1] and failed[0]["state"], failed[:1] and failed[0]["buf"][:200]))
    eq(len(grants), n_waiters, "grants")
    last = {k: holders[k]["fence"] for k in keys}
    for key, fence in grants:
        check(fence > last[key], "%s: fence %d after %d" % (key, fence, last[key]))
        last[key] = fence
    for k in keys:
        expect_free(ctx, k)
    harness.log("     1000 waiters: parked in %.2f s, all granted and released in %.2f s" % (t_parked, t_drain))


def pump(sel, until, timeout, grants=None):
    """Drive the raw waiters: connect -> send -> read the grant -> send the
    release on the same connection -> read its answer -> done."""
    import json
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        for sk, ev in sel.select(timeout=min(0.1, max(0.0, deadline - time.monotonic()))):
            c = sk.data
            s = c["sock"]
            if c["state"] == "connecting" and ev & selectors.EVENT_WRITE:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    c["state"] = "failed: connect errno %d" % err
                    sel.unregister(s)
                    continue
                try:
                    s.send(c["out"])  # < 200 bytes: one send on a fresh socket
                except OSError as e:
                    c["state"] = "failed: send %r" % e
                    sel.unregister(s)
                    continue
                c["state"] = "waiting"
                sel.modify(s, selectors.EVENT_READ, c)
                continue
            if not ev & selectors.EVENT_READ:
                continue
            try:
                chunk = s.recv(65536)
            except OSError as e:
                chunk = b""
                c["state"] = "failed: recv %r in %s" % (e, c["state"])
            if not chunk:
                if not c["state"].startswith("failed"):
                    c["state"] = "failed: closed by lockd while %s" % c["state"]
                sel.unregister(s)
                continue
            c["buf"] += chunk
            p = parse_http(c["buf"])
            if p is None:
                continue
            status, _, body, rest = p
            c["buf"] = rest
            if c["state"] == "waiting":
                if status != 201:
                    c["state"] = "failed: acquire answered %d %r" % (status, body[:200])
                    sel.unregister(s)
                    continue
                g = json.loads(body)
                c["grant"] = g
                if grants is not None:
                    grants.append((c["key"], g["fence"]))
                s.send(("DELETE %s HTTP/1.1\r\nHost: x\r\nLock-Token: %s\r\n\r\n"
                        % (path(c["key"]), g["token"])).encode())
                c["state"] = "releasing"
            elif c["state"] == "releasing":
                c["state"] = "done" if status == 200 else "failed: release answered %d" % status
                sel.unregister(s)


@harness.scenario("16 concurrent clients on 3 keys never hold a key at once, and fences grow in grant order")
def mutual_exclusion(ctx):
    n_clients, duration = 16, 3.0
    keys = [ctx.key("mx") for _ in range(3)]
    records = {k: [] for k in keys}
    errors = []
    stats = {"timeouts": 0}
    lock = threading.Lock()
    stop_at = time.monotonic() + duration

    def client(seed):
        rnd = random.Random(seed)
        c = ctx.lockd.client(timeout=15)
        try:
            while time.monotonic() < stop_at and not errors:
                key = rnd.choice(keys)
                r = c.request("POST", path(key), {"wait_ms": 2000, "ttl_ms": 10000})
                t_acq = time.monotonic()
                if r.status == 409 and r.error_code() == "lock_held":
                    with lock:
                        stats["timeouts"] += 1
                    continue
                if r.status != 201:
                    errors.append("acquire: %r" % r)
                    return
                g = r.json
                time.sleep(rnd.uniform(0, 0.002))
                t_rel = time.monotonic()
                d = c.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
                if d.status != 200:
                    errors.append("release of fence %d: %r" % (g["fence"], d))
                    return
                with lock:
                    records[key].append((g["fence"], t_acq, t_rel))
        except Exception as e:  # noqa: BLE001
            errors.append("client %d: %r" % (seed, e))
        finally:
            c.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration + 20)
    check(not any(t.is_alive() for t in threads), "clients still running")
    check(not errors, "errors: %s" % errors[:5])
    total = sum(len(v) for v in records.values())
    harness.log("     %d grants in %.0f s (%d waits ran out)" % (total, duration, stats["timeouts"]))
    check(total >= 30, "only %d grants in %.0f s" % (total, duration))
    for key, recs in records.items():
        recs.sort(key=lambda x: x[1])
        for (f1, a1, r1), (f2, a2, r2) in zip(recs, recs[1:]):
            check(f2 > f1, "%s: fence %d granted after fence %d" % (key, f2, f1))
            check(r1 < a2, "%s: holds overlap: fence %d held [%.6f, %.6f], fence %d acquired at %.6f"
                  % (key, f1, a1, r1, f2, a2))
        expect_free(ctx, key)


PERSISTENT = ["redis", "zookeeper", "mysql"]


@harness.scenario("a release or expiry through another instance wakes a waiter within 250 ms", backends=PERSISTENT)
def wake_across_instances(ctx):
    other = ctx.new_lockd()
    lat_rel, lat_exp = [], []
    for i in range(3):
        key = ctx.key("xr")
        base = waiters_now(ctx) or 0
        h = expect_grant(other.request("POST", path(key), {"ttl_ms": 20000}), key, 20000, what="holder on B")
        w = Waiter(ctx, key, wait_ms=10000, ttl_ms=5000)
        w.start()
        wait_parked(ctx, base + 1)
        check(w.resp is None, "waiter answered while held: %r" % (w.resp,))
        t0 = time.monotonic()
        expect_json(other.request("DELETE", path(key), headers={"Lock-Token": h["token"]}), 200, "release on B")
        g = expect_grant(w.result(), key, 5000, what="waiter on A after a release on B")
        lat_rel.append(w.t_done - t0)
        release(ctx, key, g["token"])
    for i in range(3):
        key = ctx.key("xe")
        t_sent = time.monotonic()
        expect_grant(other.request("POST", path(key), {"ttl_ms": 500}), key, 500, what="holder on B")
        w = Waiter(ctx, key, wait_ms=10000, ttl_ms=5000)
        w.start()
        g = expect_grant(w.result(), key, 5000, what="waiter on A after the holder on B expired")
        check(w.t_done >= t_sent + 0.49, "granted %.0f ms before the holder's ttl passed"
              % ((t_sent + 0.5 - w.t_done) * 1000))
        lat_exp.append(w.t_done - (t_sent + 0.5))
        release(ctx, key, g["token"])
    lat_rel.sort()
    lat_exp.sort()
    harness.log("     across instances: wake-up after release %s ms, after expiry %s ms"
                % (", ".join("%.1f" % (x * 1000) for x in lat_rel), ", ".join("%.1f" % (x * 1000) for x in lat_exp)))
    check(lat_rel[1] < WAKE_BOUND, "median wake-up after a release on another instance %.0f ms" % (lat_rel[1] * 1000))
    check(lat_exp[1] < WAKE_BOUND, "median wake-up after an expiry seen by another instance %.0f ms"
          % (lat_exp[1] * 1000))


@harness.scenario("waiters spread over two instances are served in arrival order when fifo is store-wide",
                  backends=PERSISTENT, needs=["fifo:store"])
def fifo_across_instances(ctx):
    other = ctx.new_lockd()
    key = ctx.key("xfifo")
    h = acquire(ctx, key, ttl_ms=20000)
    base = {id(ctx.lockd): waiters_now(ctx) or 0, id(other): waiters_now(ctx, other) or 0}
    ws = []
    for i in range(6):
        ld = ctx.lockd if i % 2 == 0 else other
        w = Waiter(ctx, key, wait_ms=15000, ttl_ms=10000, owner="w%d" % i, then_release_after=0.02, lockd=ld)
        w.start()
        ws.append(w)
        base[id(ld)] += 1
        wait_parked(ctx, base[id(ld)], lockd=ld)
        time.sleep(0.05)  # the store's queue, not only the instance's, must have the place
    release(ctx, key, h["token"])
    for w in ws:
        w.result(20)
    for i, w in enumerate(ws):
        expect_grant(w.resp, key, 10000, what="waiter %d" % i)
        eq(w.release_status, 200, "release by waiter %d" % i)
    order = sorted(range(len(ws)), key=lambda i: ws[i].t_done)
    eq(order, list(range(len(ws))), "grant order of waiters that arrived in order 0..5 on alternating instances")
    fences = [w.resp.json["fence"] for w in ws]
    check(all(a < b for a, b in zip(fences, fences[1:])), "fences in arrival order not increasing: %r" % fences)


@harness.scenario("expired locks taken over while try-once clients fight for the key (two instances on a shared store): holds never overlap, an unexpired holder's release frees it")
def expiry_takeover_race(ctx):
    instances = (ctx.lockd,) if ctx.server is None else (ctx.lockd, ctx.new_lockd())
    n = expiry_race(instances, ctx.key("race"))
    harness.log("     %d holds in 3 s on %d instance(s)" % (n, len(instances)))

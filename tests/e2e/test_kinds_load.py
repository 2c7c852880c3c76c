"""tests/e2e/test_kinds_load.py - the lock kinds under load, on every backend,
through two lockd instances where the store is shared (one on memory://):
client-side hold intervals never show more shared holders than the limit
nor anyone beside an exclusive holder, fences grow across both modes, a
writer is not starved by a stream of readers, FIFO holds across modes,
holders expire one by one, and a retried acquire whose answer was lost
gets the same grant back through its Idempotency-Key. Where the store
offers no semaphores (redlock://, harness.semaphores()) the mixed load's
readers take no limit: they still overlap, never beside a writer."""

import json
import socket
import threading
import time
import urllib.parse

import harness
from harness import check, eq

LIMIT = 3


def path(key):
    return "/locks/" + urllib.parse.quote(key, safe="").replace(".", "%2E")


def acquire(c, key, headers=None, **body):
    return c.request("POST", path(key), body, headers=headers)


def release(c, key, token):
    return c.request("DELETE", path(key), headers={"Lock-Token": token})


def instances(ctx):
    """Two instances on one store; memory:// is one store per process."""
    if ctx.backend == "memory":
        return [ctx.lockd]
    return [ctx.lockd, ctx.new_lockd()]


def check_holds(holds, limit):
    """holds: (t_seen, t_release_sent, fence, shared, t_acquire_sent). What a
    client sees lies inside the real hold. At no instant more than limit
    shared holds, nor an exclusive hold beside any other; and a grant's
    fence is above that of every hold released before it was asked for."""
    edges = []
    for h in holds:
        edges.append((h[0], 1, h))
        edges.append((h[1], 0, h))
    edges.sort(key=lambda e: (e[0], e[1]))  # a release before a grant at a tie
    shared = excl = 0
    for _, start, h in edges:
        d = 1 if start else -1
        if h[3]:
            shared += d
        else:
            excl += d
        if start:
            check(excl <= 1 and not (excl and shared) and shared <= limit,
                  "at %.4f: %d exclusive and %d shared holders (limit %d)" % (h[0], excl, shared, limit))
    by_release = sorted(holds, key=lambda h: h[1])
    for h in holds:
        before = [o[2] for o in by_release if o[1] < h[4]]
        if before:
            check(h[2] > max(before),
                  "fence %d granted after a hold with fence %d was released" % (h[2], max(before)))


def mixed_load(lds, key, clients, seconds, limit=LIMIT):
    """The hold intervals seen. Every wait ends in a grant, and grants never
    stop for a second: a waiter is at most clients - 1 short holds behind,
    so a pause that long means a release nobody was woken by. limit: the
    shared holds' limit, None for none."""
    holds, bad, waits, lock = [], [], [], threading.Lock()
    stop = time.monotonic() + seconds

    def worker(n):
        c = lds[n % len(lds)].client(timeout=15)
        i = 0
        while time.monotonic() < stop:
            i += 1
            shared = (n + i) % 4 != 0
            body = {"ttl_ms": 5000, "wait_ms": 5000}
            if shared:
                body["mode"] = "shared"
                if limit is not None:
                    body["limit"] = limit
            t0 = time.monotonic()
            r = acquire(c, key, **body)
            t1 = time.monotonic()
            with lock:
                waits.append(t1 - t0)
            if r.status == 409 and r.error_code() == "lock_held":
                # FIFO behind at most 15 holds of a few ms: only a wake-up
                # nobody heard runs a 5 s wait out
                bad.append("a wait ran out after %.2f s" % (t1 - t0))
                continue
            if r.status != 201:
                bad.append("acquire: %r" % r)
                continue
            if r.json.get("mode") != ("shared" if shared else "exclusive"):
                bad.append("grant mode: %r" % r.json)
            # shared holds last long enough that readers granted together
            # by one wake-up are seen to overlap, even on a slow store
            time.sleep(0.025 if shared else 0.002)
            t2 = time.monotonic()
            rr = release(c, key, r.json["token"])
            if rr.status != 200:
                bad.append("release: %r" % rr)
                continue
            with lock:
                holds.append((t1, t2, r.json["fence"], shared, t0))
        c.close()

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 30)
    seen = sorted(h[0] for h in holds)
    gap = max((b - a for a, b in zip(seen, seen[1:])), default=0)
    harness.log("  longest wait %.3f s, longest pause between grants %.3f s" %
                (max(waits, default=0), gap))
    check(not bad, "wrong answers: %s" % bad[:3])
    check(gap < 1.0, "no grant for %.2f s while clients waited" % gap)
    return holds


@harness.scenario("16 clients mixing shared (limit 3) and exclusive holds through two instances "
                  "never exceed the limit nor overlap a writer, fences grow across modes, and no wait runs out")
def s_mixed_load(ctx):
    lds = instances(ctx)
    # without semaphores: readers with no limit (bounded by the 16 clients)
    limit = LIMIT if harness.semaphores(ctx.lockd) else None
    key = ctx.key("kinds-load")
    holds = mixed_load(lds, key, 16, 4.0, limit)
    shared = sum(1 for h in holds if h[3])
    harness.log("  %d holds (%d shared, limit %s) on %d instance(s)" % (len(holds), shared, limit, len(lds)))
    check(shared >= 20 and len(holds) - shared >= 5, "too few holds of a mode: %d shared of %d" % (shared, len(holds)))
    check_holds(holds, LIMIT if limit else 16)
    if limit is None:
        for ld in lds:
            harness.refuses_semaphore(ld, key, {"mode": "shared", "limit": LIMIT}, what="limit %d" % LIMIT)
    # the semaphore was really used: some instant had more than one holder
    edges = sorted([(h[0], 1) for h in holds if h[3]] + [(h[1], -1) for h in holds if h[3]])
    peak = n = 0
    for _, d in edges:
        n += d
        peak = max(peak, n)
    check(peak >= 2, "never two shared holders at once (peak %d)" % peak)


@harness.scenario("a writer waiting behind readers is granted while new readers keep coming")
def s_writer_not_starved(ctx):
    lds = instances(ctx)
    key = ctx.key("kinds-writer")
    stop = time.monotonic() + 6.0
    bad = []

    def reader(n):
        c = lds[n % len(lds)].client(timeout=15)
        while time.monotonic() < stop:
            r = acquire(c, key, mode="shared", ttl_ms=3000, wait_ms=3000)
            if r.status == 201:
                time.sleep(0.15)
                release(c, key, r.json["token"])
            elif r.status != 409:
                bad.append(r)
        c.close()

    # the writer and its readers on one instance: FIFO holds on every store
    rs = [threading.Thread(target=reader, args=(n * len(lds),)) for n in range(6)]
    for t in rs:
        t.start()
    time.sleep(0.5)
    w = lds[0].client(timeout=15)
    t0 = time.monotonic()
    r = acquire(w, key, ttl_ms=2000, wait_ms=4000)
    took = time.monotonic() - t0
    if r.status == 201:
        release(w, key, r.json["token"])
    w.close()
    for t in rs:
        t.join(15)
    check(not bad, "readers got %r" % bad[:3])
    eq(r.status, 201, "the writer behind a stream of readers (%r)" % r)
    check(took < 2.0, "the writer waited %.2f s behind readers holding 0.15 s each" % took)


@harness.scenario("FIFO across modes: a reader queued behind a writer waits for it", needs=["fifo:store"])
def s_fifo_across_modes(ctx):
    lds = instances(ctx)
    key = ctx.key("kinds-fifo")
    c = ctx.lockd.client()
    x = acquire(c, key, ttl_ms=10000)
    eq(x.status, 201, "the first holder")
    got = {}

    def waiter(name, ld, body):
        cw = ld.client(timeout=15)
        r = acquire(cw, key, wait_ms=8000, ttl_ms=10000, **body)
        got[name] = (time.monotonic(), r)
        if r.status == 201:
            time.sleep(0.3)
            got[name + "-released"] = time.monotonic()
            release(cw, key, r.json["token"])
        cw.close()

    plan = [("r1", lds[0], {"mode": "shared"}), ("w", lds[-1], {}), ("r2", lds[0], {"mode": "shared"})]
    ts = []
    for name, ld, body in plan:
        t = threading.Thread(target=waiter, args=(name, ld, body))
        t.start()
        ts.append(t)
        time.sleep(0.3)  # queued in this order
    eq(release(c, key, x.json["token"]).status, 200, "release of the first holder")
    for t in ts:
        t.join(20)
    c.close()
    for name in ("r1", "w", "r2"):
        eq(got[name][1].status, 201, "%s granted" % name)
    check(got["w"][0] >= got["r1-released"] - 0.05, "the writer was granted beside the first reader")
    check(got["r2"][0] >= got["w-released"] - 0.05,
          "the second reader overtook the writer queued before it")
    check(got["r2"][1].json["fence"] > got["w"][1].json["fence"] > got["r1"][1].json["fence"],
          "fences follow the grants")


@harness.scenario("shared holders expire one by one at their own TTL, and a waiting writer follows the last")
def s_holders_expire(ctx):
    lds = instances(ctx)
    key = ctx.key("kinds-expire")
    c = lds[0].client()
    a = acquire(c, key, mode="shared", ttl_ms=400)
    b = acquire(c, key, mode="shared", ttl_ms=1500)
    eq((a.status, b.status), (201, 201), "two readers")
    t_b = time.monotonic()
    time.sleep(0.8)
    i = c.request("GET", path(key))
    eq(i.status, 200, "inspect after the first expired")
    eq(i.json["holder_count"], 1, "holders after the first expired")
    eq(i.json["fence"], b.json["fence"], "the holder left")
    w = lds[-1].client(timeout=10)
    r = acquire(w, key, ttl_ms=2000, wait_ms=4000)
    t_w = time.monotonic()
    eq(r.status, 201, "the writer after the last reader expired")
    check(t_w >= t_b + 1.5 - 0.05, "the writer was granted %.3f s before the reader's TTL passed" % (t_b + 1.5 - t_w))
    check(t_w <= t_b + 1.5 + 0.6, "the writer was granted %.3f s after the reader's TTL passed" % (t_w - t_b - 1.5))
    check(r.json["fence"] > b.json["fence"], "the writer's fence is above the readers'")
    release(w, key, r.json["token"])
    w.close()
    c.close()


def metric(ld, name):
    r = ld.request("GET", "/metrics")
    for line in r.text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


@harness.scenario("an acquire whose answer was lost is answered again with the same grant, "
                  "on the other instance, through its Idempotency-Key")
def s_idempotent_retry(ctx):
    lds = instances(ctx)
    key = ctx.key("kinds-idem")
    idem = "retry-%d" % time.monotonic_ns()
    body = json.dumps({"ttl_ms": 20000}).encode()
    req = (b"POST " + path(key).encode() + b" HTTP/1.1\r\nHost: x\r\nIdempotency-Key: " + idem.encode() +
           b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
           b"\r\n\r\n" + body)
    s = socket.create_connection(("127.0.0.1", lds[0].port), timeout=5)
    s.sendall(req)
    s.close()  # the answer is lost
    time.sleep(0.5)
    other = lds[-1]
    before = metric(other, "lockd_lock_idempotent_replays_total") or 0
    r = other.request("POST", path(key), {"ttl_ms": 20000}, headers={"Idempotency-Key": idem})
    eq(r.status, 201, "the retry (%r)" % r)
    eq(metric(other, "lockd_lock_idempotent_replays_total"), before + 1,
       "the retry was a replay of the lost grant, not a new grant")
    again = lds[0].request("POST", path(key), {"ttl_ms": 20000}, headers={"Idempotency-Key": idem})
    eq(again.status, 201, "a second retry")
    eq((again.json["token"], again.json["fence"]), (r.json["token"], r.json["fence"]), "the same grant")
    check(again.json["ttl_ms"] <= 20000 - 400, "a replay renews nothing (ttl_ms %r)" % again.json["ttl_ms"])
    i = other.request("GET", path(key))
    eq(i.json["holder_count"], 1, "one holder")
    other_try = other.request("POST", path(key), {"ttl_ms": 1000}, headers={"Idempotency-Key": idem + "x"})
    eq(other_try.status, 409, "another Idempotency-Key is an ordinary acquire")
    eq(other.request("DELETE", path(key), headers={"Lock-Token": r.json["token"]}).status, 200,
       "the replayed token releases")
    eq(other.request("GET", path(key)).status, 404, "free after the release")

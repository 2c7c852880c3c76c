"""tests/e2e/multi.py - helpers (not scenarios) shared by the scenarios of the
persistent backends (test_redis.py, test_zookeeper.py, test_mysql.py):
lock requests by key, bounded polling, bringing the store back after a
fault, and the checks every store must pass with several lockd instances on
it: mutual exclusion with growing fences, wake-ups across instances, only
503s while the store is down, held locks kept across a store restart.

The runner imports only test_*.py as scenario modules; this one registers
nothing."""

import threading
import time
import urllib.parse

import harness
from harness import check, eq


def path(key):
    """/locks/<key>, every byte but unreserved ones escaped; '.' too, so that
    keys like '.' and '..' reach lockd as they are."""
    return "/locks/" + urllib.parse.quote(key, safe="").replace(".", "%2E")


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
    """fn(), or None if the connection failed."""
    try:
        return fn()
    except OSError:
        return None


def wait_ready(ld, timeout):
    """Poll ld's /readyz until it answers 200; whether it did in time."""
    return wait_until(lambda: safe(lambda: ld.request("GET", "/readyz", timeout=5).status == 200), timeout)


def start_instances(ctx, url, n=2):
    """n lockd instances on url (stopped by ctx.cleanup), each ready."""
    out = []
    for _ in range(n):
        ld = harness.Lockd(url, tmpdir=ctx.tmpdir)
        ctx.extra.append(ld)
        ld.start()
        check(wait_ready(ld, 15.0), "lockd on %s not ready: %s" % (url, ld.log_tail()))
        out.append(ld)
    return out


def wait_first_grant(ctx, timeout):
    """Try-once acquires of fresh keys on ctx.lockd until one is granted: the
    monotonic time of that grant, or a false value after timeout."""
    return wait_until(lambda: safe(lambda: acquire(ctx.lockd.client(timeout=5), ctx.key("back"),
                                                   ttl_ms=100).status == 201) and time.monotonic(), timeout)


def check_unready(ld, backend, what="/readyz while the store is down"):
    """/readyz answers 503 unavailable, naming the backend."""
    r = ld.request("GET", "/readyz", timeout=5)
    eq(r.status, 503, what)
    eq(r.json.get("status"), "unavailable", what + ": status")
    eq(r.json.get("backend"), backend, what + ": backend")
    return r


def ensure_server_up(ctx, ready_timeout=15.0):
    """Leave the store running for the next scenario, whatever happened, and
    give every live lockd of the scenario time to be ready again."""
    srv = ctx.server
    try:
        srv.resume()
    except Exception:  # noqa: BLE001 - it may be dead already
        pass
    if srv.proc is None or srv.proc.poll() is not None:
        srv.restart()
    for ld in [ctx.lockd] + ctx.extra:
        if ld.alive():
            wait_ready(ld, ready_timeout)


def check_exclusion(holds):
    """holds: (t_granted_seen, t_release_sent, fence). What a client sees
    lies inside the real hold, so those intervals must never overlap either;
    and the later hold must carry the larger fence."""
    holds = sorted(holds)
    for a, b in zip(holds, holds[1:]):
        check(a[1] <= b[0], "holds overlap: %r and %r" % (a, b))
        check(b[2] > a[2], "fence did not grow: %r then %r" % (a, b))


def expiry_race(instances, key, seconds=3.0, ttl=0.1):
    """Short locks on one key, a third of them abandoned to expire, fought
    over by try-once clients (three per instance), so that expired holders
    are taken over, by several instances at once, while the next grant is
    made. What a client sees lies inside its real hold: (grant seen,
    release sent) for a released lock and (grant seen, acquire sent + ttl,
    less 1 ms for clocks in whole ms) for an abandoned one; those must
    never overlap, fences must grow, and a release answered before its lock
    could have expired must free it (200). Returns the number of holds."""
    holds, bad, late, lock = [], [], [], threading.Lock()
    stop = time.monotonic() + seconds

    def worker(ld, n):
        c = ld.client(timeout=10)
        i = 0
        while time.monotonic() < stop:
            i += 1
            t0 = time.monotonic()
            r = acquire(c, key, ttl_ms=int(ttl * 1000))
            t1 = time.monotonic()
            if r.status == 409:
                continue
            if r.status == 503 and t1 - t0 >= 0.4 * ttl:
                # a grant whose answer would come with less than about
                # half its TTL left is released and answered 503 (the
                # too-late rule): slow store, not a wrong answer
                late.append(t1 - t0)
                continue
            if r.status != 201:
                bad.append("acquire: %r after %.0f ms" % (r, (t1 - t0) * 1000))
                continue
            if (i + n) % 3 == 0:  # abandoned: held until its TTL
                if t1 < t0 + ttl - 0.001:
                    with lock:
                        holds.append((t1, t0 + ttl - 0.001, r.json["fence"]))
                continue
            t2 = time.monotonic()
            rr = release(c, key, r.json["token"])
            t3 = time.monotonic()
            if rr.status == 200:
                with lock:
                    holds.append((t1, t2, r.json["fence"]))
            elif t3 < t0 + ttl:
                bad.append("release %.0f ms after the acquire was sent: %r" % ((t3 - t0) * 1000, rr))
        c.close()

    ts = [threading.Thread(target=worker, args=(ld, n)) for n, ld in enumerate(list(instances) * 3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 20)
    check(not bad, "wrong answers: %s" % bad[:3])
    check(len(holds) >= 30, "only %d holds in %g s" % (len(holds), seconds))
    check(len(late) <= len(holds), "%d acquires answered too late for %d holds" % (len(late), len(holds)))
    check_exclusion(holds)
    return len(holds)


class Load:
    """Clients that acquire one key, hold it a moment and release it, in a
    loop, on several lockd instances, recording what they see:
      events: (t_sent, t_answered, status) of every acquire;
      holds:  (t_granted_seen, t_release_sent, fence) of every grant released
              with 200 (for check_exclusion);
      bad:    every answer that is wrong.
    With faults=False, anything but 201/409 on acquire and 200 on release is
    wrong. With faults=True (the store may be killed or stopped), 503
    backend_unavailable on acquire and 404/503 on release are right too, and
    409 on a release answered after the lock may have expired (a release
    held up by the outage); a failed or hung request never is."""

    def __init__(self, key, ttl_ms=1500, wait_ms=0, hold_s=0.005, timeout=6.0, faults=True):
        self.key, self.ttl_ms, self.wait_ms = key, ttl_ms, wait_ms
        self.hold_s, self.timeout, self.faults = hold_s, timeout, faults
        self.events, self.holds, self.bad = [], [], []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = []

    def start(self, instances):
        """One client thread per entry of instances (repeat one to give it
        several)."""
        for ld in instances:
            t = threading.Thread(target=self._worker, args=(ld,))
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(15)

    def run_for(self, instances, seconds):
        self.start(instances)
        try:
            time.sleep(seconds)
        finally:
            self.stop()
        return self

    def _worker(self, ld):
        c = ld.client(timeout=self.timeout)
        try:
            while not self.stopping.is_set():
                t0 = time.monotonic()
                try:
                    r = acquire(c, self.key, ttl_ms=self.ttl_ms, wait_ms=self.wait_ms)
                except OSError as e:
                    self.bad.append("acquire failed or hung: %r" % e)
                    c = ld.client(timeout=self.timeout)
                    continue
                t1 = time.monotonic()
                with self.lock:
                    self.events.append((t0, t1, r.status))
                if r.status == 201:
                    time.sleep(self.hold_s)
                    t2 = time.monotonic()
                    try:
                        rr = release(c, self.key, r.json["token"])
                    except OSError as e:
                        self.bad.append("release failed or hung: %r" % e)
                        c = ld.client(timeout=self.timeout)
                        continue
                    t3 = time.monotonic()
                    expired = t3 >= t0 + self.ttl_ms / 1000.0  # by the answer, it may have
                    if rr.status == 200:
                        with self.lock:
                            self.holds.append((t1, t2, r.json["fence"]))
                    elif not (self.faults and (rr.status in (404, 503) or (rr.status == 409 and expired))):
                        self.bad.append("release %.0f ms after the acquire was sent: %r" % ((t3 - t0) * 1000, rr))
                elif r.status == 503 and self.faults:
                    if r.error_code() != "backend_unavailable":
                        self.bad.append("503: %r" % r)
                    time.sleep(0.02)
                elif r.status == 409:
                    if self.wait_ms == 0:
                        time.sleep(0.002)  # try-once: let the others in
                else:
                    self.bad.append("acquire: %r" % r)
        finally:
            c.close()

    def check_exclusive(self, min_grants, seconds):
        """No wrong answer, at least min_grants grants, holds that never
        overlap, distinct fences that grow and stay below 2^53."""
        check(not self.bad, "bad answers: %s" % self.bad[:3])
        check(len(self.holds) >= min_grants, "only %d grants in %g s" % (len(self.holds), seconds))
        check_exclusion(self.holds)
        fences = [h[2] for h in self.holds]
        eq(len(set(fences)), len(fences), "distinct fences")
        check(max(fences) < 2 ** 53, "fence below 2^53")

    def check_outage(self, t_down, t_up, store):
        """After the store was down from t_down to t_up: no wrong answer, some
        requests answered while it was down and all of them 503, a grant
        after it came back, and exclusion throughout."""
        check(not self.bad, "bad answers: %s" % self.bad[:3])
        down = [e for e in self.events if e[0] > t_down and e[1] < t_up]
        check(down, "no request was answered while %s was down" % store)
        granted = [e for e in down if e[2] != 503]
        check(not granted, "answers other than 503 while %s was down: %r" % (store, granted[:3]))
        check(any(e[0] > t_up and e[2] == 201 for e in self.events), "no grant after the restart")
        check_exclusion(self.holds)


def exclusion_run(ctx, seconds, wait_ms, per_instance=3, min_grants=20, faults=False):
    """Threads on ctx.lockd and a second instance fight for one key for
    `seconds`; checks mutual exclusion and fences. The Load, for more
    checks."""
    other = ctx.new_lockd()
    load = Load(ctx.key("mutex"), ttl_ms=5000, wait_ms=wait_ms, hold_s=0.003, timeout=10, faults=faults)
    load.run_for((ctx.lockd, other) * per_instance, seconds)
    load.check_exclusive(min_grants, seconds)
    return load


def wake_by_release(holder, waiter, key, within, holder_ttl_ms=10000, wait_ms=5000, settle=0.3):
    """A lock held through `holder`, a waiter through `waiter` (the same or
    another instance), then the release: the waiter must still be waiting
    before, and be granted, with a larger fence, less than `within` seconds
    after it. The waiter's grant and that delay."""
    h = acquire(holder.client(), key, ttl_ms=holder_ttl_ms)
    eq(h.status, 201, "the holder's acquire")
    out = {}

    def wait():
        out["r"] = acquire(waiter.client(timeout=10), key, ttl_ms=2000, wait_ms=wait_ms)
        out["t"] = time.monotonic()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(settle)
    check(t.is_alive(), "the waiter must still wait: %r" % out.get("r"))
    t0 = time.monotonic()
    eq(release(holder.client(), key, h.json["token"]).status, 200, "the holder's release")
    t.join(10)
    check("r" in out, "the waiter had no answer 10 s after the release")
    eq(out["r"].status, 201, "the waiter's acquire")
    check(out["r"].json["fence"] > h.json["fence"], "fence grows")
    dt = out["t"] - t0
    check(dt < within, "waiter woke %.0f ms after the release" % (dt * 1000))
    return out["r"], dt


def wake_by_expiry(holder, waiter, key, early, late=0.3, ttl_ms=800):
    """A lock held through `holder` for ttl_ms and a waiter through `waiter`:
    the waiter is granted, with a larger fence, no sooner than the holder's
    expiry (less `early` seconds of slack) and no later than `late` seconds
    after it; the expired holder's renew is refused. The waiter's grant and
    how long after the expiry it came."""
    ttl = ttl_ms / 1000.0
    t_sent = time.monotonic()
    h = acquire(holder.client(), key, ttl_ms=ttl_ms)
    t_got = time.monotonic()
    eq(h.status, 201, "the holder's acquire")
    w = acquire(waiter.client(timeout=10), key, ttl_ms=2000, wait_ms=4000)
    t_w = time.monotonic()
    eq(w.status, 201, "the waiter's acquire")
    check(w.json["fence"] > h.json["fence"], "fence grows")
    check(t_w >= t_sent + ttl - early, "granted %.0f ms before the holder expired" % ((t_sent + ttl - t_w) * 1000))
    check(t_w <= t_got + ttl + late, "granted %.0f ms after the holder expired" % ((t_w - t_got - ttl) * 1000))
    eq(renew(holder.client(), key, h.json["token"]).status, 409, "the expired holder's renew")
    return w, t_w - t_got - ttl


def check_lock_kept(ld, key, grant, owner, renew_ttl_ms=5000):
    """After the store came back: the lock granted as `grant` (to `owner`) is
    still held with its fence and owner, refuses another acquire, renews with
    its old token (same fence) and releases with it; the next grant of the key
    has a larger fence."""
    i = ld.request("GET", path(key))
    eq(i.status, 200, "inspect of the held lock after the restart")
    eq(i.json["fence"], grant["fence"], "fence of the holder")
    eq(i.json.get("owner"), owner, "owner of the holder")
    eq(acquire(ld.client(), key).status, 409, "the lock is still held")
    n = renew(ld.client(), key, grant["token"], ttl_ms=renew_ttl_ms)
    eq(n.status, 200, "renew with the old token")
    eq(n.json["fence"], grant["fence"], "renew keeps the fence")
    eq(release(ld.client(), key, grant["token"]).status, 200, "release with the old token")
    a = acquire(ld.client(), key)
    eq(a.status, 201, "acquire after release")
    check(a.json["fence"] > grant["fence"], "fence grows across the restart")
    eq(release(ld.client(), key, a.json["token"]).status, 200, "release")


def check_injective_grants(c, keys, owner_of, ttl_ms=10000):
    """Acquire every key (distinct, each echoed), then check each is its own
    lock: a second acquire is refused, inspect shows its own fence and owner
    and never a token. The grants by key."""
    eq(len(set(keys)), len(keys), "the keys are distinct")
    grants = {}
    for n, k in enumerate(keys):
        r = acquire(c, k, ttl_ms=ttl_ms, owner=owner_of(n))
        eq(r.status, 201, "acquire %r" % k)
        eq(r.json["key"], k, "key echoed")
        grants[k] = r.json
    for n, k in enumerate(keys):
        eq(acquire(c, k, ttl_ms=5000).status, 409, "second acquire of %r" % k)
        i = c.request("GET", path(k))
        eq(i.status, 200, "inspect %r" % k)
        eq(i.json["fence"], grants[k]["fence"], "fence of %r" % k)
        eq(i.json.get("owner"), owner_of(n), "owner of %r" % k)
        check("token" not in i.json, "inspect shows no token")
    return grants


def release_each(c, keys, grants, others_stay=False):
    """Release every key with its token; inspect then answers 404. With
    others_stay, also check that each release leaves the later keys held."""
    for n, k in enumerate(keys):
        eq(release(c, k, grants[k]["token"]).status, 200, "release %r" % k)
        eq(c.request("GET", path(k)).status, 404, "inspect after release %r" % k)
        if others_stay:
            for k2 in keys[n + 1:]:
                eq(c.request("GET", path(k2)).status, 200, "%r after releasing %r" % (k2, k))

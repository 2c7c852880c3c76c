"""tests/e2e/test_redis.py - what only the Redis backend promises: several
lockd instances on one Redis exclude each other, fences keep growing across
instances and Redis restarts, waiters hear releases and expiries through
other instances, and a Redis that is killed, stopped or restarted gives
503s (never a grant) and is served again without restarting lockd. The wait
queue runs on Redis's clock: an instance whose clock is skewed (libfaketime)
neither loses its waiters' places nor leaves dead places behind for long,
and a place whose cancel failed while Redis was away goes once it is back."""

import email.utils
import os
import socket
import threading
import time

import harness
from harness import check, eq
from multi import (Load, acquire, check_injective_grants, check_lock_kept, check_unready,
                   ensure_server_up, exclusion_run, path, release, release_each, renew, safe,
                   wait_first_grant, wait_ready, wait_until, wake_by_expiry, wake_by_release)

R = ["redis"]
# libfaketime from Debian's faketime package, preloaded into lockd itself
# (the faketime wrapper forks, and may leave lockd behind on SIGTERM)
LIBFAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                                "/usr/lib/faketime/libfaketimeMT.so.1")
                    if os.path.exists(p)), None)


def skewed_lockd(ctx, offset, skew_s):
    """Another lockd on the same Redis whose wall clock is offset ("-30s",
    "+1h") from the real one; its monotonic clock is left alone, as NTP
    would. Checked through the Date header."""
    check(LIBFAKETIME is not None, "libfaketime (Debian package faketime) is not installed")
    # under ASan, libfaketime in LD_PRELOAD comes before the ASan runtime
    ld = ctx.new_lockd(env={"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset,
                            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                            "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:verify_asan_link_order=0"})
    r = ld.request("GET", "/healthz")
    eq(r.status, 200, "healthz")
    their = email.utils.parsedate_to_datetime(r.header("Date")).timestamp()
    check(abs(their - time.time() - skew_s) < 10,
          "Date %r is not %+d s off the real clock" % (r.header("Date"), skew_s))
    return ld


def queue_of(ctx, key):
    """The waiter ids in key's queue in Redis, first first."""
    return ctx.server.command("ZRANGE", "lockd:fifo:{%s}" % key, "0", "-1")


def queue_pttl(ctx, key):
    return ctx.server.command("PTTL", "lockd:fifo:{%s}" % key)


def redis_now_ms(ctx):
    sec, usec = ctx.server.command("TIME")
    return int(sec) * 1000 + int(usec) // 1000


class Waiter:
    """One waiting acquire in a thread: .resp (or .error) once answered,
    .t_answer (monotonic), .t_sent."""

    def __init__(self, ld, key, wait_ms, ttl_ms=5000, timeout=None):
        self.ld, self.key, self.wait_ms, self.ttl_ms = ld, key, wait_ms, ttl_ms
        self.timeout = timeout or wait_ms / 1000.0 + 10
        self.resp = self.error = self.t_answer = None
        self.client = ld.client(timeout=self.timeout)
        self.t_sent = time.monotonic()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        try:
            self.resp = acquire(self.client, self.key, ttl_ms=self.ttl_ms, wait_ms=self.wait_ms)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            self.error = e
        self.t_answer = time.monotonic()

    def join(self, timeout=None):
        self.thread.join(timeout if timeout is not None else self.timeout + 5)
        return self.resp


def parked(key, host_port, wait_ms, ttl_ms=5000):
    """A waiting acquire on a raw socket nobody reads: close() is the
    client hanging up."""
    body = ('{"ttl_ms": %d, "wait_ms": %d}' % (ttl_ms, wait_ms)).encode()
    s = socket.create_connection(("127.0.0.1", host_port), timeout=5)
    s.sendall(b"POST " + path(key).encode() + b" HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


@harness.scenario("two instances on one Redis exclude each other and fences strictly increase",
                  backends=R)
def two_instances_exclude(ctx):
    exclusion_run(ctx, 3.0, wait_ms=3000)


@harness.scenario("a waiter on one instance is woken promptly by a release on another",
                  backends=R)
def waiter_woken_by_remote_release(ctx):
    wake_by_release(ctx.new_lockd(), ctx.lockd, ctx.key("wake"), within=0.3, settle=0.4)


@harness.scenario("a waiter on one instance is woken promptly when a holder on another expires",
                  backends=R)
def waiter_woken_by_remote_expiry(ctx):
    wake_by_expiry(ctx.new_lockd(), ctx.lockd, ctx.key("expire"), early=0.02)


@harness.scenario("waiters on two instances are served first come, first served across both, on release and on expiry",
                  backends=R)
def fifo_across_instances(ctx):
    other = ctx.new_lockd()
    key = ctx.key("fifo")
    c = ctx.lockd.client()
    h = acquire(c, key, ttl_ms=10000)
    eq(h.status, 201, "holder")
    order, lock = [], threading.Lock()

    def waiter(name, ld):
        # the a* waiters release, the b* waiters let their TTL run out:
        # the turn must pass between instances either way
        wc = ld.client(timeout=15)
        r = acquire(wc, key, ttl_ms=5000 if name[0] == "a" else 200, wait_ms=10000)
        if r.status == 201:
            with lock:
                order.append((name, r.json["fence"]))
            if name[0] == "a":
                time.sleep(0.05)
                release(wc, key, r.json["token"])
        else:
            with lock:
                order.append((name, r.status))

    names = ["b1", "a1", "b2", "a2", "b3"]
    ts = []
    for n in names:
        t = threading.Thread(target=waiter, args=(n, other if n[0] == "b" else ctx.lockd))
        t.start()
        ts.append(t)
        time.sleep(0.15)  # each one registers before the next arrives
    # a try-once acquire on either instance does not jump the queue
    eq(acquire(other.client(), key).status, 409, "try-once while others wait")
    eq(release(c, key, h.json["token"]).status, 200, "release")
    for t in ts:
        t.join(20)
    eq([o[0] for o in order], names, "grant order")
    fences = [o[1] for o in order]
    check(all(isinstance(f, int) for f in fences), "all granted: %r" % order)
    check(fences == sorted(fences) and len(set(fences)) == len(fences), "fences grow: %r" % fences)


@harness.scenario("keys with braces, colons, spaces, stars, unicode and 512 bytes are distinct locks under the prefix",
                  backends=R)
def keys_are_injective(ctx):
    base = ctx.key("inj")
    keys = [base, base + "}", "{" + base + "}", "{" + base, base + ":", ":" + base,
            "lock:{" + base + "}", "fence:{" + base + "}", base + " x", base + "*",
            "*", "?" + base, base + "\u00fc\u4e2d\U0001f512", base + "}lock:{",
            "released:0", (base + "x" * 512)[:512]]
    check(len(keys[-1].encode()) == 512, "a 512-byte key")
    c = ctx.lockd.client()
    grants = check_injective_grants(c, keys, lambda n: "o-%d" % n, ttl_ms=5000)
    names = ctx.server.command("KEYS", "*")
    check(isinstance(names, list) and names, "KEYS: %r" % (names,))
    for n in names:
        check(n.startswith(b"lockd:"), "key outside the prefix: %r" % n)
        for k in keys:
            check(grants[k]["token"].encode() not in n, "token in a Redis key")
    release_each(c, keys, grants)


@harness.scenario("kill -9 of Redis under load gives only 503s or correct answers, no grant while down, service back within 5 s",
                  backends=R, slow=True)
def redis_killed_under_load(ctx):
    other = ctx.new_lockd()
    load = Load(ctx.key("kill"), timeout=5)
    try:
        load.start((ctx.lockd, other) * 2)
        time.sleep(1.0)
        ctx.server.kill9()
        t_down = time.monotonic()
        time.sleep(1.5)
        t_up = time.monotonic()
        ctx.server.restart()
        t_back = wait_first_grant(ctx, 5.0)
        check(t_back, "no grant within 5 s of Redis restarting")
        check(t_back - t_up <= 5.0, "service back after %.1f s" % (t_back - t_up))
        time.sleep(1.0)
    finally:
        load.stop()
        ensure_server_up(ctx)
    load.check_outage(t_down, t_up, "Redis")


@harness.scenario("SIGSTOP of Redis for 2 s gives 503s within the timeout, no hung request, and recovery after SIGCONT",
                  backends=R, slow=True)
def redis_stopped(ctx):
    key = ctx.key("stop")
    lat, codes, bad = [], [], []
    stop = threading.Event()

    def worker():
        c = ctx.lockd.client(timeout=6)
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                r = c.request("GET", path(key))
            except OSError as e:
                bad.append(repr(e))
                c = ctx.lockd.client(timeout=6)
                continue
            lat.append(time.monotonic() - t0)
            codes.append(r.status)
            time.sleep(0.02)

    r = acquire(ctx.lockd.client(), key, ttl_ms=20000)
    eq(r.status, 201, "acquire before the stop")
    ts = [threading.Thread(target=worker) for _ in range(4)]
    try:
        for t in ts:
            t.start()
        time.sleep(0.3)
        ctx.server.pause()
        time.sleep(0.3)
        t0 = time.monotonic()
        a = acquire(ctx.lockd.client(timeout=6), ctx.key("stop2"), ttl_ms=1000)
        dt = time.monotonic() - t0
        eq(a.status, 503, "acquire while Redis is stopped")
        check(dt < 2.5, "the 503 took %.1f s" % dt)
        rz = ctx.lockd.request("GET", "/readyz", timeout=6)
        eq(rz.status, 503, "/readyz while Redis is stopped")
        time.sleep(max(0.0, 2.0 - 0.6 - dt))
    finally:
        ctx.server.resume()
    t_cont = time.monotonic()
    try:
        ok = wait_until(lambda: safe(lambda: renew(ctx.lockd.client(timeout=5), key,
                                                   r.json["token"]).status == 200), 5.0)
        check(ok, "renew with the old token did not succeed within 5 s of SIGCONT")
        check(time.monotonic() - t_cont < 5.0, "slow recovery")
    finally:
        stop.set()
        for t in ts:
            t.join(15)
        ensure_server_up(ctx)
    check(not bad, "requests failed or hung: %s" % bad[:3])
    check(503 in codes, "no 503 while Redis was stopped")
    check(set(codes) <= {200, 503}, "unexpected answers: %r" % sorted(set(codes)))
    check(max(lat) < 3.0, "a request took %.1f s" % max(lat))
    eq(release(ctx.lockd.client(), key, r.json["token"]).status, 200, "release")


@harness.scenario("after a Redis restart (appendonly) held locks keep their holders and fences keep increasing",
                  backends=R)
def redis_restart_keeps_state(ctx):
    other = ctx.new_lockd()
    key = ctx.key("durable")
    r = acquire(ctx.lockd.client(), key, ttl_ms=30000, owner="before-restart")
    eq(r.status, 201, "acquire")
    try:
        ctx.server.kill9()
        check_unready(ctx.lockd, "redis")
        eq(acquire(other.client(timeout=5), key).status, 503, "acquire while down")
        ctx.server.restart()
        check(wait_ready(ctx.lockd, 5.0), "/readyz not 200 within 5 s of the restart")
        check(wait_ready(other, 5.0), "/readyz on B not 200 within 5 s of the restart")
    finally:
        ensure_server_up(ctx)
    check_lock_kept(other, key, r.json, "before-restart")


@harness.scenario("/readyz is 503 while Redis is down and 200 once it is back", backends=R)
def readyz_follows_redis(ctx):
    eq(ctx.lockd.request("GET", "/readyz").status, 200, "/readyz before")
    try:
        ctx.server.stop()
        check_unready(ctx.lockd, "redis")
        eq(ctx.lockd.acquire(ctx.key("rz")).status, 503, "acquire while down")
        ctx.server.restart()
        check(wait_ready(ctx.lockd, 5.0), "/readyz not 200 within 5 s")
    finally:
        ensure_server_up(ctx)
    r = ctx.lockd.request("GET", "/readyz")
    eq(r.json.get("fifo"), "store", "fifo")
    eq(ctx.lockd.acquire(ctx.key("rz"), ttl_ms=100).status, 201, "acquire after")


@harness.scenario("with one instance's clock 30 s slow, its waiter keeps its place at the head and is served before a later waiter on another instance",
                  backends=R)
def slow_clock_keeps_fifo(ctx):
    slow = skewed_lockd(ctx, "-30s", -30)
    normal = ctx.lockd
    key = ctx.key("slowclock")
    h = acquire(normal.client(), key, ttl_ms=20000)
    eq(h.status, 201, "holder")
    w1 = Waiter(slow, key, wait_ms=8000)
    check(wait_until(lambda: len(queue_of(ctx, key)) == 1, 3.0), "w1 never queued")
    first = queue_of(ctx, key)[0]
    # its place's deadline and the queue's expiry are in Redis's clock
    dl = int(ctx.server.command("HGET", "lockd:qdl:{%s}" % key, first))
    now = redis_now_ms(ctx)
    check(now + 6000 <= dl <= now + 9000,
          "w1's place ends %+d ms from Redis's now, not ~ +8000" % (dl - now))
    check(6000 <= queue_pttl(ctx, key) <= 10000, "queue PTTL %r" % queue_pttl(ctx, key))
    w2 = Waiter(normal, key, wait_ms=8000)
    check(wait_until(lambda: len(queue_of(ctx, key)) == 2, 3.0),
          "w2's arrival reaped w1's place: queue %r" % queue_of(ctx, key))
    time.sleep(1.5)  # past the old 1 s grace: w1's place must stay
    q = queue_of(ctx, key)
    eq(len(q), 2, "places in the queue 1.5 s later")
    eq(q[0], first, "w1 is still first")
    eq(release(normal.client(), key, h.json["token"]).status, 200, "release")
    r1 = w1.join()
    check(r1 is not None and r1.status == 201,
          "w1 (first in line, slow clock) was not granted: %r / %r" % (r1, w1.error))
    time.sleep(0.3)
    check(w2.resp is None, "w2 was answered while w1 holds the key: %r" % w2.resp)
    eq(release(slow.client(), key, r1.json["token"]).status, 200, "w1 releases")
    r2 = w2.join()
    check(r2 is not None and r2.status == 201, "w2 after w1: %r / %r" % (r2, w2.error))
    check(r2.json["fence"] > r1.json["fence"], "fences grow")
    eq(release(normal.client(), key, r2.json["token"]).status, 200, "w2 releases")


@harness.scenario("with one instance's clock 1 h fast, its waiter's place dies soon after the wait when that instance is killed -9",
                  backends=R)
def fast_clock_dead_place_goes(ctx):
    fast = skewed_lockd(ctx, "+1h", 3600)
    normal = ctx.lockd
    key = ctx.key("fastclock")
    wait_ms = 2000
    h = acquire(normal.client(), key, ttl_ms=20000)
    eq(h.status, 201, "holder")
    w = Waiter(fast, key, wait_ms=wait_ms, timeout=10)
    check(wait_until(lambda: len(queue_of(ctx, key)) == 1, 3.0), "w never queued")
    t_place_end = w.t_sent + wait_ms / 1000.0
    pttl = queue_pttl(ctx, key)
    check(0 < pttl <= wait_ms + 1500, "the queue expires in %r ms, not ~%d" % (pttl, wait_ms + 1000))
    fast.kill9()
    eq(release(normal.client(), key, h.json["token"]).status, 200, "release")
    # never reaped early: until its deadline the dead place still comes first
    r = acquire(normal.client(), key)
    check(time.monotonic() < t_place_end - 0.3, "too slow to check before the deadline")
    eq(r.status, 409, "try-once before the dead waiter's deadline")
    got = None
    c = normal.client()
    while time.monotonic() < t_place_end + 5.0:
        r = acquire(c, key, ttl_ms=5000)
        if r.status == 201:
            got = time.monotonic()
            break
        eq(r.status, 409, "try-once on the key")
        time.sleep(0.05)
    check(got is not None, "the key was still blocked 5 s after the dead waiter's deadline")
    late = got - t_place_end
    harness.log("     free %.2f s after the dead waiter's deadline" % late)
    check(late <= 1.0 + 0.75, "free only %.2f s after the dead waiter's deadline" % late)
    eq(release(c, key, r.json["token"]).status, 200, "release")
    w.join(10)


@harness.scenario("waiters that hang up while Redis is stopped give up their places once it is back, not at their deadline",
                  backends=R, slow=True)
def cancel_retried_after_stop(ctx):
    keys = [ctx.key("cancel-a"), ctx.key("cancel-b")]
    c = ctx.lockd.client()
    holders = [acquire(c, k, ttl_ms=60000) for k in keys]
    for h in holders:
        eq(h.status, 201, "holder")
    socks = [parked(k, ctx.lockd.port, wait_ms=30000) for k in keys]
    try:
        check(wait_until(lambda: all(len(queue_of(ctx, k)) == 1 for k in keys), 3.0),
              "waiters never queued")
        ctx.server.pause()
        try:
            time.sleep(0.1)
            # the first cancel times out; the second finds the connection
            # failed and backing off: neither may be lost
            for s in socks:
                s.close()
            time.sleep(2.0)
        finally:
            ctx.server.resume()
        t_cont = time.monotonic()
        for k, h in zip(keys, holders):
            check(wait_until(lambda: safe(lambda: release(ctx.lockd.client(timeout=5), k,
                                                          h.json["token"]).status == 200), 5.0),
                  "release after SIGCONT")
        free = {}
        while time.monotonic() < t_cont + 5.0 and len(free) < len(keys):
            for k in keys:
                if k in free:
                    continue
                r = acquire(c, k, ttl_ms=5000)
                if r.status == 201:
                    free[k] = (time.monotonic() - t_cont, r.json["token"])
                else:
                    check(r.status in (409, 503), "try-once: %r" % r)
            time.sleep(0.05)
        check(len(free) == len(keys),
              "still blocked 5 s after SIGCONT (wait_ms 30 s): %r, queues %r"
              % ([k for k in keys if k not in free], [queue_of(ctx, k) for k in keys]))
        harness.log("     free %s s after SIGCONT" % ", ".join("%.2f" % v[0] for v in free.values()))
        for k, (_, tok) in free.items():
            eq(release(c, k, tok).status, 200, "release")
    finally:
        for s in socks:
            s.close()
        ensure_server_up(ctx)


RETAIN_MS = 60000  # backends/redis: REDIS_BE_RETAIN_MS


def scan(ctx, pattern):
    """The Redis keys matching pattern, with their PTTL (SCAN: the test's
    own look, never lockd's)."""
    out, cursor = {}, b"0"
    while True:
        cursor, batch = ctx.server.command("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
        for k in batch:
            out[k] = ctx.server.command("PTTL", k)
        if cursor == b"0":
            return out


def check_nothing_kept_for_ever(ctx, hint, keys, ttl_ms):
    """What is left in Redis once keys (all named hint-...) were released or
    expired: nothing of theirs without an expiry, all of it gone by the TTL
    + twice the retention at the latest; the holders' counts and the index
    have an expiry too; the fence counters of slots, kept for ever, are at most 1024 on
    one Redis. Answers how many of the keys' own fence counters are left,
    and the slot counters."""
    # the index's buckets are named by the key past them, which may be one
    # of these: they are the index's, and expire with it
    left = {k: t for k, t in scan(ctx, "lockd:*%s*" % hint).items()
            if not k.startswith(b"lockd:keys#")}
    buckets = scan(ctx, "lockd:keys*")
    buckets[b"lockd:counts"] = ctx.server.command("PTTL", "lockd:counts")
    for k, t in buckets.items():  # other scenarios' holders too
        check(t != -1, "%r has no expiry" % k)
    forever = [k for k, t in left.items() if t == -1]
    check(not forever, "kept for ever: %r" % forever[:5])
    worst = max([0] + list(left.values()))
    check(worst <= ttl_ms + 2 * RETAIN_MS, "a key stays %d ms" % worst)
    slots = scan(ctx, "lockd:fence#*")
    check(len(slots) <= 1024, "%d slot counters" % len(slots))
    counters = [("lockd:fence:{%s}" % k).encode() for k in keys]
    return sum(1 for k in counters if k in left), len(slots)


def index_bucket(server, key):
    """The bucket of the index that holds key's members: the one named by
    the least key > key in its directory (the key past the bucket), or
    lockd:keys, the last (backends/redis/holders.lua)."""
    k = key.encode()
    hi = server.command("ZRANGEBYLEX", "lockd:keys@", b"(" + k, "+", "LIMIT", "0", "1")
    return b"lockd:keys#" + hi[0] if hi else b"lockd:keys"


def used_memory_but_tables(server):
    """INFO's used_memory less db 0's key tables (MEMORY STATS: the main
    and the expires dict, entries and buckets). What the keys themselves
    hold is left; the tables double (and rehash, both sizes allocated)
    when other scenarios' keys cross a power of two, some 32 KB at once
    here, whatever this one's keys do."""
    info = server.command("INFO", "memory")
    used = int(dict(l.split(b":", 1) for l in info.split(b"\r\n") if b":" in l)[b"used_memory"])
    stats = server.command("MEMORY", "STATS")
    tables = 0
    for name, value in zip(stats[0::2], stats[1::2]):
        if name == b"db.0" and isinstance(value, list):
            for k, v in zip(value[0::2], value[1::2]):
                if k in (b"overhead.hashtable.main", b"overhead.hashtable.expires"):
                    tables += int(v)
    return used - tables


@harness.scenario("issue 19: nothing of a released or expired key stays in Redis for ever, and fences still increase",
                  backends=R)
def nothing_stays_for_ever(ctx):
    c = ctx.lockd.client()
    hint = ctx.key("gone")
    mem = lambda: used_memory_but_tables(ctx.server)
    # released: the key's own counter goes at once
    waves = []
    for wave, n in enumerate((2000, 3000)):
        keys = ["%s-r%d-%d" % (hint, wave, i) for i in range(n)]
        before = mem()
        for k in keys:
            r = acquire(c, k, ttl_ms=30000)
            eq(r.status, 201, "acquire %r" % k)
            eq(release(c, k, r.json["token"]).status, 200, "release %r" % k)
        grown = mem() - before
        kept, slots = check_nothing_kept_for_ever(ctx, hint, keys, 30000)
        eq(kept, 0, "released keys' own fence counters left")
        waves.append((grown, slots))
    harness.log("     2000, then 3000 keys locked and released: Redis grew %d B, then %d B"
                " (%d, then %d slot counters)" % (waves[0][0], waves[1][0], waves[0][1], waves[1][1]))
    # the second wave finds nearly every slot counter there: under 20 B a
    # key beside the key tables (a counter kept per key, as before, is
    # some 55 beside them)
    check(waves[1][0] < 20 * 3000, "Redis grew %d B for 3000 released keys" % waves[1][0])
    # expired: no counter of its own; its index member, with its last
    # fence, stays for a takeover to tell, until a list or the grants'
    # sampling finds the key free (the latter may have come here already)
    keys = ["%s-e-%d" % (hint, i) for i in range(300)]
    fences = {}
    for k in keys:
        r = acquire(c, k, ttl_ms=200)
        eq(r.status, 201, "acquire %r" % k)
        fences[k] = r.json["fence"]
    time.sleep(0.5)
    kept, _ = check_nothing_kept_for_ever(ctx, hint, keys, 200)
    eq(kept, 0, "expired keys' own fence counters")
    for k in keys:
        m = ctx.server.command("ZRANGEBYLEX", index_bucket(ctx.server, k), "[" + k,
                               ("[" + k).encode() + b"\x00\xff")
        check(m in ([], [k.encode() + b"\x00%d" % fences[k]]), "%r's index members: %r" % (k, m))
    # without them a key's next fence is still greater: its slot's counter
    for k in keys[:50]:
        ctx.server.command("ZREMRANGEBYLEX", index_bucket(ctx.server, k), "[" + k,
                           ("[" + k).encode() + b"\xff")
        r = acquire(c, k, ttl_ms=5000)
        eq(r.status, 201, "acquire again %r" % k)
        check(r.json["fence"] > fences[k], "fence %d after %d" % (r.json["fence"], fences[k]))
        eq(release(c, k, r.json["token"]).status, 200, "release")

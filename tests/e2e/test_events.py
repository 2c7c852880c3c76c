"""tests/e2e/test_events.py - lock lifecycle events in the log, and the
process and connection families of /metrics, end to end.

The /metrics scenarios (process_*, lockd_http_connections) run on memory:
they test lockd itself, not its store.

The event scenarios start lockd with --log-format json --log-events all
and read its log: a grant, renew and release with held_ms; an expiry
(told by the memory store's sweep, or by the grant that took the key
over); a waiter's timeout; a lost token. They run on memory, where lockd
itself is the store; the other stores' takeover and grant-time reports
are tested in their adapters' unit tests.
"""

import json
import os
import time

import harness
from client import expect_error, expect_grant, expect_json, has_metric, metric, metrics, parse_metrics, path
from harness import check, eq

EVENT_ARGS = ["--log-format", "json", "--log-events", "all", "--log-level", "info"]


def events_lockd(ctx):
    return ctx.new_lockd(EVENT_ARGS)


def event_lines(ld):
    """Every JSON event line lockd has written so far."""
    out = []
    for ln in ld.log_tail(2000000).splitlines():
        if not ln.startswith("{"):
            continue
        try:
            o = json.loads(ln)
        except ValueError:
            raise harness.Fail("log line is not JSON: %r" % ln[:300])
        if o.get("msg") == "event":
            out.append(o)
    return out


def wait_event(ld, name, timeout=3.0, **fields):
    """The first event line named name whose fields include the given ones,
    waiting for the log's buffer to be flushed (every 50 ms)."""
    deadline = time.monotonic() + timeout
    while True:
        for o in event_lines(ld):
            if o.get("event") == name and all(o.get(k) == v for k, v in fields.items()):
                return o
        if time.monotonic() > deadline:
            raise harness.Fail("no %s event with %r in the log: %s" % (name, fields, ld.log_tail(3000)))
        time.sleep(0.05)


def check_client(o, what):
    c = o.get("client", "")
    check(c.startswith("127.0.0.1:") and c.rsplit(":", 1)[1].isdigit(), "%s: client %r" % (what, c))


@harness.scenario("events: /metrics has the process families with sane values", backends=["memory"])
def process_families(ctx):
    t0 = time.time()
    ld = ctx.new_lockd()
    c = ld.client()
    try:
        r = c.request("GET", "/metrics")
        eq(r.status, 200, "/metrics")
        s = parse_metrics(r.text)[0]
        # what /proc says of lockd, from outside, while only c is open
        fds = len(os.listdir("/proc/%d/fd" % ld.proc.pid))
    finally:
        c.close()
    now = time.time()
    rss = metric(s, "process_resident_memory_bytes")
    check(rss > 1e5, "process_resident_memory_bytes %r" % rss)
    check(metric(s, "process_virtual_memory_bytes") >= rss, "virtual below resident memory")
    open_fds = metric(s, "process_open_fds")
    check(open_fds > 0, "process_open_fds %r" % open_fds)
    check(abs(open_fds - fds) <= 1, "process_open_fds %r, /proc/<pid>/fd has %d" % (open_fds, fds))
    check(metric(s, "process_max_fds") >= open_fds, "process_max_fds below open fds")
    start = metric(s, "process_start_time_seconds")
    check(t0 - 1.5 <= start <= now, "process_start_time_seconds %.2f, lockd started at %.2f" % (start, t0))
    check(metric(s, "process_cpu_seconds_total") >= 0, "process_cpu_seconds_total")
    with open("/proc/%d/stat" % ld.proc.pid) as f:
        stat = f.read().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    check(metric(s, "process_cpu_seconds_total") <= cpu + 0.01, "process_cpu_seconds_total above /proc's")


@harness.scenario("events: lockd_http_connections rises by 3 with 3 keep-alive connections and falls back",
                  backends=["memory"])
def connections_gauge(ctx):
    ld = ctx.new_lockd()
    scraper = ld.client()
    others = []

    def gauge():
        r = scraper.request("GET", "/metrics")
        eq(r.status, 200, "/metrics")
        s = parse_metrics(r.text)[0]
        check(has_metric(s, "lockd_http_connections"), "no lockd_http_connections sample")
        return metric(s, "lockd_http_connections")

    def settle(want):
        # a connection closed by its client is counted until lockd has
        # noticed (its start-up probe's, say): give that a bounded time
        deadline = time.monotonic() + 5
        while gauge() != want and time.monotonic() < deadline:
            time.sleep(0.05)
        return gauge()

    try:
        # this lockd is the scenario's own: only the scraper is open
        base = settle(1)
        eq(base, 1, "lockd_http_connections with the scraper's connection open")
        for _ in range(3):
            c = ld.client()
            others.append(c)
            eq(c.request("GET", "/healthz").status, 200, "healthz on a kept-alive connection")
        eq(gauge(), base + 3, "lockd_http_connections with 3 more open")
        for c in others:
            c.close()
        others = []
        eq(settle(base), base, "lockd_http_connections once the 3 closed")
    finally:
        for c in others:
            c.close()
        scraper.close()


@harness.scenario("events: lockd_http_connections_max shows --max-connections",
                  backends=["memory"])
def connections_max(ctx):
    ld = ctx.new_lockd(["--max-connections", "77"])
    s = metrics(ctx, ld)
    eq(metric(s, "lockd_http_connections_max"), 77, "lockd_http_connections_max")


@harness.scenario("events: grant, renew and release write lock.granted, lock.renewed, lock.released")
def grant_renew_release(ctx):
    ld = events_lockd(ctx)
    key = ctx.key("ev/n\u00fcrn berg")
    before = metrics(ctx, ld)
    r = ld.request("POST", path(key), {"ttl_ms": 5000, "owner": "job-7"}, headers={"X-Request-Id": "ev-grant-1"})
    g = expect_grant(r, key, 5000)
    o = wait_event(ld, "lock.granted", key=key)
    eq(o.get("level"), "info", "lock.granted level")
    eq(o.get("fence"), g["fence"], "lock.granted fence")
    eq(o.get("owner"), "job-7", "lock.granted owner")
    eq(o.get("mode"), "exclusive", "lock.granted mode")
    # the TTL the grant runs with: on redlock:// less the drift allowance
    # (1 % + 2 ms), as its 201 says
    eq(o.get("ttl_ms"), 5000 - (5000 // 100 + 2) if ctx.backend == "redlock" else 5000,
       "lock.granted ttl_ms")
    eq(o.get("request_id"), "ev-grant-1", "lock.granted request_id")
    check(isinstance(o.get("waited_ms"), int), "lock.granted waited_ms %r" % o.get("waited_ms"))
    check_client(o, "lock.granted")
    r = ld.request("PUT", path(key), {"ttl_ms": 6000}, headers={"Lock-Token": g["token"]})
    expect_json(r, 200, "renew")
    o = wait_event(ld, "lock.renewed", key=key)
    eq(o.get("fence"), g["fence"], "lock.renewed fence")
    time.sleep(0.2)
    r = ld.request("DELETE", path(key), headers={"Lock-Token": g["token"], "X-Request-Id": "ev-rel-1"})
    expect_json(r, 200, "release")
    o = wait_event(ld, "lock.released", key=key)
    eq(o.get("holds_left"), 0, "lock.released holds_left")
    eq(o.get("request_id"), "ev-rel-1", "lock.released request_id")
    # the memory store knows when the hold was granted; others may not say
    if ctx.backend == "memory" or "held_ms" in o:
        check(150 <= o.get("held_ms", -1) < 10000, "lock.released held_ms %r" % o.get("held_ms"))
    after = metrics(ctx, ld)
    for ev in ("lock.granted", "lock.renewed", "lock.released"):
        eq(metric(after, "lockd_lock_events_total", event=ev) - metric(before, "lockd_lock_events_total", event=ev),
           1, "lockd_lock_events_total{event=%s}" % ev)


@harness.scenario("events: a lock whose TTL passes writes lock.expired (by the sweep, or at the takeover) "
                  "before the next lock.granted", backends=["memory"])
def takeover(ctx):
    ld = events_lockd(ctx)
    key = ctx.key("ev-take")
    g1 = expect_grant(ld.request("POST", path(key), {"ttl_ms": 200, "owner": "job-a"}), key, 200)
    time.sleep(0.4)
    g2 = expect_grant(ld.request("POST", path(key), {"ttl_ms": 2000}), key, 2000)
    exp = wait_event(ld, "lock.expired", key=key)
    eq(exp.get("fence"), g1["fence"], "lock.expired fence")
    gr = wait_event(ld, "lock.granted", key=key, fence=g2["fence"])
    # the memory store's sweep (every 250 ms) usually expires the holder
    # first; a grant that finds it expired itself says it took over
    if exp.get("reason") == "taken over":
        eq(gr.get("took_over_fence"), g1["fence"], "lock.granted took_over_fence")
    else:
        eq(exp.get("reason"), "ttl passed", "lock.expired reason")
        eq(exp.get("owner"), "job-a", "lock.expired owner")
        check("took_over_fence" not in gr, "a grant after the sweep took nothing over: %r" % gr)
    lines = event_lines(ld)
    i_exp = next(i for i, o in enumerate(lines) if o.get("event") == "lock.expired" and o.get("key") == key)
    i_gr = next(i for i, o in enumerate(lines) if o.get("event") == "lock.granted" and o.get("fence") == g2["fence"]
                and o.get("key") == key)
    check(i_exp < i_gr, "lock.expired comes before the grant that followed it")


@harness.scenario("events: a waiter that times out writes lock.wait_timeout and is in lockd_lock_wait_seconds")
def wait_timeout(ctx):
    ld = events_lockd(ctx)
    key = ctx.key("ev-wait")
    g = expect_grant(ld.request("POST", path(key), {"ttl_ms": 10000}), key, 10000)
    before = metrics(ctx, ld)
    r = ld.request("POST", path(key), {"ttl_ms": 1000, "wait_ms": 400}, headers={"X-Request-Id": "ev-wait-1"})
    expect_error(r, 409, "lock_held", "acquire that waited")
    o = wait_event(ld, "lock.wait_timeout", key=key)
    eq(o.get("request_id"), "ev-wait-1", "lock.wait_timeout request_id")
    check(350 <= o.get("waited_ms", -1) < 5000, "lock.wait_timeout waited_ms %r" % o.get("waited_ms"))
    check_client(o, "lock.wait_timeout")
    after = metrics(ctx, ld)
    n = "lockd_lock_wait_seconds_count"
    eq(metric(after, n, result="timeout") - metric(before, n, result="timeout"), 1,
       "lockd_lock_wait_seconds_count{result=timeout}")
    s = "lockd_lock_wait_seconds_sum"
    check(metric(after, s, result="timeout") - metric(before, s, result="timeout") >= 0.35, "wait time observed")
    r = ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    expect_json(r, 200, "release")


@harness.scenario("events: a lost token writes lock.lost with op and result")
def lost_token(ctx):
    ld = events_lockd(ctx)
    key = ctx.key("ev-lost")
    g = expect_grant(ld.request("POST", path(key), {"ttl_ms": 10000}), key, 10000)
    r = ld.request("PUT", path(key), {"ttl_ms": 1000}, headers={"Lock-Token": "not-the-token",
                                                                 "X-Request-Id": "ev-lost-1"})
    expect_error(r, 409, "token_mismatch", "renew with another token")
    o = wait_event(ld, "lock.lost", key=key, op="renew")
    eq(o.get("result"), "mismatch", "lock.lost result")
    eq(o.get("request_id"), "ev-lost-1", "lock.lost request_id")
    check_client(o, "lock.lost")
    expect_json(ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]}), 200, "release")
    r = ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    expect_error(r, 404, "lock_not_found", "release of a released lock")
    o = wait_event(ld, "lock.lost", key=key, op="release")
    eq(o.get("result"), "not_found", "lock.lost result after release")

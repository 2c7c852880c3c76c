"""tests/e2e/test_operator.py - the operator endpoints of docs/API.md on
every backend: GET /locks (the held keys by prefix, in byte order, paged
by an opaque cursor, never a token) and DELETE /locks/{key}?force=true
(the admin token frees a key whatever its holders; the next grant gets a
greater fence; waiters are woken, on another instance too).

Keys come from ctx.key() and every list names its own prefix: stores
outlive one scenario.
"""

import json
import os
import re
import socket
import time
import urllib.parse

import harness
from client import Waiter, acquire, expect_error, expect_grant, expect_json, metric, metrics, path, release, req
from harness import check, eq

ADMIN = "adm1n-Token_lockd-e2e"
USER = "us3r-Token_lockd-e2e"
SUMMARY_FIELDS = {"key", "mode", "fence", "ttl_ms", "expires_at", "holder_count", "owner", "limit"}
TOKEN_LIKE = re.compile(r"[0-9a-f]{32}")


def token_file(ctx, name, value):
    p = os.path.join(ctx.tmpdir, "%s-%d" % (name, harness.free_port()))
    with open(p, "w") as f:
        f.write(value + "\n")
    os.chmod(p, 0o600)
    return p


def admin_lockd(ctx, auth=True, extra=()):
    """A lockd on ctx's store with the admin token (and the auth token)."""
    args = ["--admin-token-file", token_file(ctx, "admin", ADMIN)] + list(extra)
    if auth:
        args += ["--auth-token-file", token_file(ctx, "auth", USER)]
    return ctx.new_lockd(args)


def bearer(t):
    return {"Authorization": "Bearer " + t}


def list_locks(ld, query="", headers=None, what="list"):
    r = ld.request("GET", "/locks" + ("?" + query if query else ""), headers=headers)
    body = expect_json(r, 200, what)
    check(isinstance(body.get("locks"), list), "%s: no locks array in %r" % (what, r.text[:300]))
    check(not TOKEN_LIKE.search(r.text), "%s: a token-like string in %r" % (what, r.text[:300]))
    for e in body["locks"]:
        check(set(e) <= SUMMARY_FIELDS, "%s: unexpected fields %r" % (what, sorted(set(e) - SUMMARY_FIELDS)))
    return body


def prefix_query(prefix, extra=""):
    q = "prefix=" + urllib.parse.quote(prefix, safe="")
    return q + ("&" + extra if extra else "")


def keys_of(body):
    return [e["key"] for e in body["locks"]]


def ld_acquire(ld, key, headers=None, **params):
    r = ld.request("POST", path(key), params or None, headers=headers)
    return expect_grant(r, key, params.get("ttl_ms"))


@harness.scenario("operator: GET /locks lists the held keys by prefix in byte order, with a summary and never a token")
def list_order(ctx):
    p = ctx.key("oplist") + "/"
    names = ["b", "a", "a/x", "\u00e9", "A", "a b"]
    toks = {}
    for n in names:
        toks[n] = acquire(ctx, p + n, ttl_ms=20000, owner="job-" + str(len(n)))["token"]
    # two shared holders: limit 5, or none where semaphores are not offered
    lim = {"limit": 5} if harness.semaphores(ctx.lockd) else {}
    s1 = acquire(ctx, p + "shared", mode="shared", ttl_ms=20000, **lim)
    acquire(ctx, p + "shared", mode="shared", ttl_ms=20000, **lim)
    if not lim:
        harness.refuses_semaphore(ctx.lockd, p + "shared", {"mode": "shared", "limit": 5}, what="limit 5")
    gone = acquire(ctx, p + "gone", ttl_ms=20000)
    release(ctx, p + "gone", gone["token"])
    acquire(ctx, p[:-1] + "0-outside", ttl_ms=20000)  # no match: another prefix
    body = list_locks(ctx.lockd, prefix_query(p))
    want = sorted([p + n for n in names] + [p + "shared"], key=lambda k: k.encode())
    eq(keys_of(body), want, "keys in byte order")
    check("next_cursor" not in body, "a single page has no next_cursor: %r" % body)
    by = {e["key"]: e for e in body["locks"]}
    e = by[p + "a"]
    eq(e["mode"], "exclusive", "mode")
    eq(e["holder_count"], 1, "holder_count")
    eq(e.get("owner"), "job-1", "owner")
    check(isinstance(e["fence"], int) and e["fence"] >= 1, "fence %r" % e["fence"])
    check(1 <= e["ttl_ms"] <= 20000, "ttl_ms %r" % e["ttl_ms"])
    check(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", e["expires_at"]), "expires_at %r" % e["expires_at"])
    sh = by[p + "shared"]
    eq(sh["mode"], "shared", "shared mode")
    eq(sh["holder_count"], 2, "shared holder_count")
    check("owner" not in sh, "a shared key shows no owner: %r" % sh)
    check(sh["fence"] > s1["fence"], "a shared key shows its greatest fence")
    # HEAD answers as GET without a body
    r = ctx.lockd.request("HEAD", "/locks?" + prefix_query(p))
    eq(r.status, 200, "HEAD /locks")
    eq(r.body, b"", "HEAD body")
    # an empty prefix is every key: ours among them, limit bounds the page
    body = list_locks(ctx.lockd, "prefix=&limit=1000")
    check(len(body["locks"]) <= 1000, "limit 1000")


@harness.scenario("operator: GET /locks percent-decodes the prefix (encoded bytes, spaces, slashes); NUL is 400")
def list_prefix_encoding(ctx):
    p = ctx.key("openc") + "/"
    for n in ["\u00e9t\u00e9", "\u00e9a", "e", "a b", "a+b"]:
        acquire(ctx, p + n, ttl_ms=20000)
    q = "prefix=" + urllib.parse.quote(p + "\u00e9", safe="")  # %C3%A9
    eq(keys_of(list_locks(ctx.lockd, q)), [p + "\u00e9a", p + "\u00e9t\u00e9"], "prefix with %C3%A9")
    q = "prefix=" + urllib.parse.quote(p, safe="") + "%C3"  # half a character
    eq(keys_of(list_locks(ctx.lockd, q)), [p + "\u00e9a", p + "\u00e9t\u00e9"], "prefix ending inside a character")
    q = "prefix=" + urllib.parse.quote(p + "a ", safe="")  # %20
    eq(keys_of(list_locks(ctx.lockd, q)), [p + "a b"], "prefix with %20")
    q = "prefix=" + urllib.parse.quote(p + "a+", safe="")  # %2B is a plus
    eq(keys_of(list_locks(ctx.lockd, q)), [p + "a+b"], "prefix with %2B")
    r = ctx.lockd.request("GET", "/locks?prefix=" + urllib.parse.quote(p, safe="") + "%00")
    expect_error(r, 400, "invalid_parameter", "a NUL in the prefix")
    r = ctx.lockd.request("GET", "/locks?prefix=" + "x" * 513)
    expect_error(r, 400, "invalid_parameter", "a prefix over 512 bytes")


@harness.scenario("operator: GET /locks pages 30 keys by limit 7: every held key exactly once, no next_cursor at the end")
def list_pages(ctx):
    p = ctx.key("oppage") + "/"
    held = sorted(p + "%02d" % i for i in range(30))
    for k in held:
        acquire(ctx, k, ttl_ms=30000)
    seen, cursor, pages = [], None, 0
    while True:
        pages += 1
        check(pages <= 30, "paging does not end")
        q = prefix_query(p, "limit=7" + ("&cursor=" + urllib.parse.quote(cursor, safe="") if cursor else ""))
        body = list_locks(ctx.lockd, q, what="page %d" % pages)
        check(len(body["locks"]) <= 7, "page %d has %d keys" % (pages, len(body["locks"])))
        seen += keys_of(body)
        cursor = body.get("next_cursor")
        if cursor is None:
            break
        check(isinstance(cursor, str) and cursor, "next_cursor %r" % cursor)
    eq(seen, held, "every held key once, in order")
    check(pages >= 5, "30 keys by 7 take 5 pages at least, got %d" % pages)


@harness.scenario("operator: GET /locks refuses limit 0/1001/abc, a bad cursor, an unknown parameter and a body (400)")
def list_refusals(ctx):
    for q in ("limit=0", "limit=1001", "limit=abc", "limit=-1", "limit=", "limit=1&limit=2", "cursor=abc",
              "cursor=k", "cursor=kAA", "cursor=" + "k" + "_" * 3, "token=" + "a" * 32, "force=true", "prefix",
              "all=true"):
        r = ctx.lockd.request("GET", "/locks?" + q)
        expect_error(r, 400, "invalid_parameter", "GET /locks?%s" % q)
    r = ctx.lockd.request("GET", "/locks", {"prefix": "a"})
    expect_error(r, 400, "invalid_parameter", "GET /locks with a body")
    r = ctx.lockd.request("PATCH", "/locks")
    expect_error(r, 405, "method_not_allowed", "PATCH /locks")
    eq(r.header("Allow"), "GET, HEAD, POST, PUT, DELETE", "Allow on /locks")


@harness.scenario("operator: GET /locks leaves out keys whose TTL has passed")
def list_expired(ctx):
    p = ctx.key("opexp") + "/"
    acquire(ctx, p + "short", ttl_ms=300)
    acquire(ctx, p + "long", ttl_ms=20000)
    eq(keys_of(list_locks(ctx.lockd, prefix_query(p))), [p + "long", p + "short"], "both held at first")
    time.sleep(0.8)
    eq(keys_of(list_locks(ctx.lockd, prefix_query(p))), [p + "long"], "the expired key is gone")


@harness.scenario("operator: forced release needs the admin token: 401 without or with a wrong one, 403 otherwise")
def force_auth(ctx):
    ld = admin_lockd(ctx)
    key = ctx.key("opauth")
    ld_acquire(ld, key, headers=bearer(USER), ttl_ms=20000)
    for hdrs in ({}, bearer("wrong"), bearer(ADMIN + "x"), {"Authorization": "Basic " + ADMIN}):
        r = ld.request("DELETE", path(key, "force=true"), headers=hdrs)
        expect_error(r, 401, "unauthorized", "force with %r" % hdrs)
        check("Bearer" in (r.header("WWW-Authenticate") or ""), "401 has WWW-Authenticate")
    r = ld.request("DELETE", path(key, "force=true"), headers=bearer(USER))
    expect_error(r, 403, "forbidden", "force with the auth token")
    # the admin token passes wherever the auth token does
    r = ld.request("GET", path(key), headers=bearer(ADMIN))
    expect_json(r, 200, "inspect with the admin token")
    r = ld.request("GET", "/locks", headers=bearer(ADMIN))
    expect_json(r, 200, "list with the admin token")
    expect_error(ld.request("GET", "/locks"), 401, "unauthorized", "list without a token")
    # no admin file: 403 whatever is sent
    r = req(ctx, "DELETE", key, query="force=true")
    err = expect_error(r, 403, "forbidden", "force without --admin-token-file")
    check("admin-token-file" in err["message"], "the message names --admin-token-file: %r" % err["message"])
    only_auth = ctx.new_lockd(["--auth-token-file", token_file(ctx, "auth", USER)])
    r = only_auth.request("DELETE", path(key, "force=true"), headers=bearer(USER))
    expect_error(r, 403, "forbidden", "force with the auth token, no admin file")
    expect_json(ld.request("GET", path(key), headers=bearer(USER)), 200, "still held after the refusals")


@harness.scenario("operator: forced release frees every holder; old tokens are gone and the next fence is greater")
def force_release(ctx):
    ld = admin_lockd(ctx, auth=False)
    key = ctx.key("opforce")
    g = ld_acquire(ld, key, ttl_ms=20000, owner="stuck-job")
    ld.request("POST", path(key), {"token": g["token"]})  # a re-entry: two holds
    r = ld.request("DELETE", path(key), {"force": True}, headers=bearer(ADMIN))
    body = expect_json(r, 200, "forced release")
    eq(body, {"key": key, "released": True, "forced": True, "holders": 1}, "forced release body")
    expect_error(ld.request("GET", path(key)), 404, "lock_not_found", "inspect after")
    r = ld.request("PUT", path(key), headers={"Lock-Token": g["token"]})
    check(r.status in (404, 409), "renew with the old token: %r" % r)
    expect_error(r, r.status, ("lock_not_found", "token_mismatch"), "renew with the old token")
    g2 = ld_acquire(ld, key, ttl_ms=20000)
    check(g2["fence"] > g["fence"], "next fence %d > forced holder's %d" % (g2["fence"], g["fence"]))
    r = ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    expect_error(r, 409, "token_mismatch", "release with the old token")
    # shared: every holder at once
    skey = ctx.key("opforce-sh")
    fences = [ld_acquire(ld, skey, mode="shared", ttl_ms=20000)["fence"] for _ in range(3)]
    r = ld.request("DELETE", path(skey, "force=true"), headers=bearer(ADMIN))
    eq(expect_json(r, 200, "shared forced release")["holders"], 3, "holders of a shared key")
    check(ld_acquire(ld, skey, ttl_ms=20000)["fence"] > max(fences), "fence after a shared forced release")
    # free: 404
    r = ld.request("DELETE", path(ctx.key("opfree"), "force=true"), headers=bearer(ADMIN))
    expect_error(r, 404, "lock_not_found", "forced release of a free key")


@harness.scenario("operator: force with a token or all is 400; force=false is an ordinary release")
def force_params(ctx):
    ld = admin_lockd(ctx, auth=False)
    key = ctx.key("opparams")
    g = ld_acquire(ld, key, ttl_ms=20000)
    for q, body, hdrs in (("force=true", None, {"Lock-Token": g["token"]}),
                          ("force=true&token=" + g["token"], None, {}),
                          ("force=true&all=true", None, {}),
                          (None, {"force": True, "all": False}, {}),
                          (None, {"force": True, "token": g["token"]}, {}),
                          ("force=yes", None, {}),
                          (None, {"force": "true"}, {}),
                          ("force=true&force=true", None, {})):
        h = dict(hdrs)
        h.update(bearer(ADMIN))
        r = ld.request("DELETE", path(key, q), body, headers=h)
        expect_error(r, 400, "invalid_parameter", "DELETE ?%s %r %r" % (q, body, hdrs))
    expect_json(ld.request("GET", path(key)), 200, "still held after the 400s")
    r = ld.request("DELETE", path(key, "force=false"), headers={"Lock-Token": g["token"]})
    eq(expect_json(r, 200, "force=false release"), {"key": key, "released": True, "holds": 0}, "ordinary release")
    r = ld.request("DELETE", path(key, "force=false"), headers=bearer(ADMIN))
    expect_error(r, 400, "missing_token", "force=false without a token")


@harness.scenario("operator: a waiter on a second lockd is granted promptly after a forced release")
def force_wakes_waiter(ctx):
    ld = admin_lockd(ctx, auth=False)
    # the memory store lives in one process: its waiter waits there
    other = ld if ctx.backend == "memory" else ctx.lockd
    key = ctx.key("opwake")
    g = ld_acquire(ld, key, ttl_ms=30000)
    w = Waiter(ctx, key, wait_ms=15000, ttl_ms=5000, lockd=other)
    w.start()
    time.sleep(0.5)
    check(w.resp is None, "the waiter is still waiting")
    t0 = time.time()
    r = ld.request("DELETE", path(key, "force=true"), headers=bearer(ADMIN))
    expect_json(r, 200, "forced release")
    w.join(10)
    check(w.resp is not None, "the waiter was answered")
    body = expect_grant(w.resp, key)
    check(w.t_done - t0 < 2.0, "granted %.2f s after the forced release" % (w.t_done - t0))
    check(body["fence"] > g["fence"], "the waiter's fence is greater")


@harness.scenario("operator: lockd_http_request_duration_seconds of acquire leaves out the time parked waiting")
def parked_time_not_in_latency(ctx):
    ld = ctx.new_lockd()
    key = ctx.key("opparked")
    g = ld_acquire(ld, key, ttl_ms=20000)
    w = Waiter(ctx, key, wait_ms=10000, ttl_ms=5000, lockd=ld)
    w.start()
    time.sleep(1.2)
    r = ld.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    expect_json(r, 200, "release")
    w.join(10)
    check(w.resp is not None and w.resp.status == 201, "the waiter was granted: %r" % (w.resp,))
    check(w.t_done - w.t_sent >= 1.0, "the waiter waited %.2f s" % (w.t_done - w.t_sent))
    samples = metrics(ctx, ld)
    total = metric(samples, "lockd_http_request_duration_seconds_sum", route="acquire")
    count = metric(samples, "lockd_http_request_duration_seconds_count", route="acquire")
    eq(count, 2, "acquires counted")
    check(total < 0.5, "acquire latency sum %.3f s includes the %.2f s parked" % (total, w.t_done - w.t_sent))


@harness.scenario("operator: a forced release writes its audit line whatever --log-level and --log-events")
def force_audit_line(ctx):
    ld = admin_lockd(ctx, auth=False, extra=["--log-level", "error", "--log-events", "audit",
                                             "--log-format", "json"])
    key = ctx.key("opaudit")
    g = ld_acquire(ld, key, ttl_ms=20000, owner="stuck-job")
    rid = "audit-%d" % harness.free_port()
    r = ld.request("DELETE", path(key, "force=true"), headers=dict(bearer(ADMIN), **{"X-Request-Id": rid}))
    expect_json(r, 200, "forced release")
    line, deadline = None, time.time() + 3.0
    while line is None and time.time() < deadline:
        for raw in ld.log_tail(20000).splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if ev.get("event") == "lock.force_released" and ev.get("request_id") == rid:
                line = ev
        if line is None:
            time.sleep(0.05)
    check(line is not None, "no lock.force_released line in %r" % ld.log_tail(2000))
    eq((line.get("level"), line.get("key"), line.get("holders"), line.get("fence"), line.get("owner"),
        line.get("admin")), ("warn", key, 1, g["fence"], "stuck-job", "admin"), "audit line")
    check(re.match(r"^127\.0\.0\.1:\d+$", line.get("client") or ""), "client %r" % line.get("client"))


@harness.scenario("operator: a waiter whose client leaves reaches the events once (lock.wait_cancelled)")
def waiter_cancel_event(ctx):
    ld = ctx.new_lockd(["--log-format", "json"])
    key = ctx.key("opcancel")
    ld_acquire(ld, key, ttl_ms=20000)
    rid = "cancel-%d" % harness.free_port()
    body = json.dumps({"wait_ms": 10000}).encode()
    s = socket.create_connection(("127.0.0.1", ld.port), timeout=5)
    try:
        s.sendall(b"POST " + path(key).encode() + b" HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + rid.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.5)
    finally:
        s.close()
    lines, deadline = [], time.time() + 5.0
    while not lines and time.time() < deadline:
        time.sleep(0.1)
        lines = [ev for ev in (json.loads(x) for x in ld.log_tail(50000).splitlines() if x.startswith("{"))
                 if ev.get("request_id") == rid and ev.get("event", "").startswith("lock.")]
    eq([ev["event"] for ev in lines], ["lock.wait_cancelled"], "events of the cancelled waiter")
    check(lines[0].get("key") == key, "event key %r" % lines[0].get("key"))

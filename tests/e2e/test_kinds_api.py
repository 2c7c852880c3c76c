"""tests/e2e/test_kinds_api.py - the lock kinds of docs/API.md over real
HTTP, on every backend: the strictness of mode, limit, the re-entry token,
all and the Idempotency-Key header (every malformed combination is 400
invalid_parameter and changes nothing), the shapes of the grant, release
and inspect bodies, shared holders up to the limit, limit_mismatch at once,
re-entry counts and their release one by one or all at once, idempotent
replays and conflicts, and inspect of a shared key (holders by fence,
never a token).

Where the store offers no semaphores (redlock://, harness.semaphores()), a
case whose point is a limit above 1 keeps it with no limit or limit 1, and
checks there that the limit above 1 is 400 invalid_parameter naming the
store and changing nothing.

The helpers come from client.py; keys always from ctx.key().
"""

import json
import time

import harness
from client import (check_fence, check_ttl_left, expect_error, expect_free, expect_grant, expect_json,
                    http_request, parse_expires, path, raw_json, raw_response, req)
from harness import check, eq

BAD = (400, "invalid_parameter")
LIMIT_MAX = 10000


# ---------------------------------------------------------------- helpers

def grant(ctx, key, headers=None, status=201, what="acquire", **body):
    """An acquire (or re-entry) that must succeed: its checked body."""
    r = req(ctx, "POST", key, body or None, headers=headers)
    g = expect_grant(r, key, body.get("ttl_ms"), status=status, what=what)
    check_grant_kind(g, body.get("mode", "exclusive"), body.get("limit"), what)
    return g


def check_grant_kind(g, mode, limit, what):
    eq(g.get("mode"), mode, what + " mode")
    h = g.get("holds")
    check(isinstance(h, int) and not isinstance(h, bool) and h >= 1, "%s holds %r" % (what, h))
    if limit is None:
        check("limit" not in g, "%s shows a limit none was given: %r" % (what, g))
    else:
        eq(g.get("limit"), limit, what + " limit")
    want = {"key", "token", "fence", "ttl_ms", "expires_at", "mode", "holds"} | ({"limit"} if limit else set())
    eq(set(g), want, what + " fields")


def shared(limit, **body):
    """An acquire body in shared mode, with limit unless it is None."""
    body["mode"] = "shared"
    if limit is not None:
        body["limit"] = limit
    return body


def release(ctx, key, token, all_=None, holds_left=0, what="release"):
    q = None if all_ is None else "all=" + ("true" if all_ else "false")
    r = req(ctx, "DELETE", key, query=q, headers={"Lock-Token": token})
    body = expect_json(r, 200, what)
    eq(body, {"key": key, "released": holds_left == 0, "holds": holds_left}, what + " body")
    return body


def inspect_body(ctx, key, what="inspect"):
    body = expect_json(req(ctx, "GET", key), 200, what)
    eq(body.get("key"), key, what + " key")
    eq(body.get("held"), True, what + " held")
    return body


def snapshot(ctx, key):
    """What a rejected request must not change: the inspect answer without
    the remaining TTLs (they run down), and its expires_at."""
    r = req(ctx, "GET", key)
    if r.status == 404:
        return None, None
    body = expect_json(r, 200, "inspect for a snapshot")
    b = dict(body)
    exp = parse_expires(b.pop("expires_at"))
    b.pop("ttl_ms", None)
    b["holders"] = [{k: v for k, v in h.items() if k not in ("ttl_ms", "expires_at")}
                    for h in b.get("holders", [])]
    return b, exp


def same_state(ctx, key, before, what):
    body, exp = snapshot(ctx, key)
    eq(body, before[0], "%s: the lock after it" % what)
    if exp is not None:
        check(abs(exp - before[1]) <= 1.0, "%s: expires_at moved by %.3f s" % (what, exp - before[1]))


def no_token_in(text, tokens, what):
    for t in tokens:
        check(t not in text, "%s shows a token: %s" % (what, text[:300]))


def int_field(d, name, what):
    v = d.get(name)
    check(isinstance(v, int) and not isinstance(v, bool), "%s %s %r is not an integer" % (what, name, v))
    return v


# ------------------------------------------------------------- strictness

def bad_acquires(t):
    """(what, body, query, headers) of acquires that are 400
    invalid_parameter whatever the key's state; t is a holder's token."""
    cases = []
    for v in ('"read"', '"Shared"', '"SHARED"', '" shared"', '""', "1", "null", "true", '["shared"]', "{}"):
        cases.append(("mode " + v, '{"mode":%s}' % v, None, None))
    for v in ("0", "-1", "10001", "4294967297", "3.0", "3e0", '"3"', "null", "true", "[3]"):
        cases.append(("shared limit " + v, '{"mode":"shared","limit":%s}' % v, None, None))
    cases += [
        ("limit without mode", '{"limit":3}', None, None),
        ("limit with exclusive mode", '{"mode":"exclusive","limit":3}', None, None),
        ("limit with exclusive mode, query", None, "mode=exclusive&limit=3", None),
        ("limit in the query without mode", None, "limit=2", None),
        ("mode twice (duplicate field)", '{"mode":"shared","mode":"shared"}', None, None),
        ("mode in query and body", '{"mode":"shared"}', "mode=shared", None),
        ("limit in query and body", '{"mode":"shared","limit":2}', "limit=2", None),
        ("limit twice in the query", None, "mode=shared&limit=2&limit=2", None),
        ("mode without a value", None, "mode", None),
        ("mode empty in the query", None, "mode=", None),
        ("mode with a NUL", None, "mode=shared%00", None),
        ("limit with a sign", None, "mode=shared&limit=%2B2", None),
        ("limit in hex", None, "mode=shared&limit=0x2", None),
        ("limit as a float", None, "mode=shared&limit=2.0", None),
        ("all on acquire", None, "all=true", None),
        ("all in an acquire body", '{"all":false}', None, None),
        ("empty token", '{"token":""}', None, None),
        ("empty token in the query", None, "token=", None),
        ("empty Lock-Token", None, None, {"Lock-Token": ""}),
        ("token with wait_ms", '{"token":"%s","wait_ms":100}' % t, None, None),
        ("token with wait_ms 0", None, "token=%s&wait_ms=0" % t, None),
        ("token with mode", '{"mode":"exclusive"}', None, {"Lock-Token": t}),
        ("token with shared mode", None, "mode=shared", {"Lock-Token": t}),
        ("token with limit", '{"token":"%s","mode":"shared","limit":2}' % t, None, None),
        ("token with owner", None, "owner=me", {"Lock-Token": t}),
        ("token in header and body", '{"token":"%s"}' % t, None, {"Lock-Token": t}),
        ("token in header and query", None, "token=" + t, {"Lock-Token": t}),
        ("token with an Idempotency-Key", None, None, {"Lock-Token": t, "Idempotency-Key": "k-1"}),
        ("token in the body with an Idempotency-Key", '{"token":"%s"}' % t, None, {"Idempotency-Key": "k-1"}),
        ("empty Idempotency-Key", None, None, {"Idempotency-Key": ""}),
        ("129-character Idempotency-Key", None, None, {"Idempotency-Key": "i" * 129}),
        ("Idempotency-Key with DEL", None, None, {"Idempotency-Key": "a\x7fb"}),
        ("Idempotency-Key with a tab", None, None, {"Idempotency-Key": "a\tb"}),
        ("Idempotency-Key with limit but exclusive", '{"limit":2}', None, {"Idempotency-Key": "k-2"}),
    ]
    return cases


def send(ctx, method, key, body, query, headers):
    hdrs = dict(headers or {})
    if body is not None:
        hdrs.setdefault("Content-Type", "application/json")
    return ctx.lockd.request(method, path(key, query), body.encode() if body is not None else None, hdrs)


def twice_idem(ctx, method, key, extra=None):
    """A request with the Idempotency-Key header given twice (raw HTTP)."""
    headers = [("Idempotency-Key", "k-1"), ("Idempotency-Key", "k-1")] + list(extra or [])
    resp = raw_response(ctx.lockd.port, http_request(method, path(key), b"", headers))
    check(resp is not None, "no answer to %s with Idempotency-Key twice" % method)
    eq(resp[0], 400, "%s with Idempotency-Key twice: status (body %r)" % (method, resp[2][:200]))
    eq(raw_json(resp)["error"]["code"], "invalid_parameter", "%s with Idempotency-Key twice" % method)


@harness.scenario("kinds: every malformed mode, limit, re-entry token, all or Idempotency-Key is 400 invalid_parameter and changes nothing")
def kinds_strictness(ctx):
    held = ctx.key("kstrict")
    g = grant(ctx, held, ttl_ms=60000, owner="keeper")
    t = g["token"]
    before = snapshot(ctx, held)
    n = 0
    for what, body, query, headers in bad_acquires(t):
        free = ctx.key("kfree")
        expect_error(send(ctx, "POST", free, body, query, headers), *BAD, what="acquire of a free key, " + what)
        expect_free(ctx, free, "a free key after a rejected acquire (%s)" % what)
        expect_error(send(ctx, "POST", held, body, query, headers), *BAD, what="acquire of a held key, " + what)
        n += 2
    twice_idem(ctx, "POST", ctx.key("kfree"))
    # renew, release and inspect take none of the kinds' acquire inputs
    lt = {"Lock-Token": t}
    others = [
        ("PUT", None, None, {"Lock-Token": t, "Idempotency-Key": "k-1"}),
        ("PUT", '{"mode":"shared"}', None, lt),
        ("PUT", None, "limit=2", lt),
        ("PUT", '{"all":true}', None, lt),
        ("PUT", None, "all=false", lt),
        ("DELETE", None, None, {"Lock-Token": t, "Idempotency-Key": "k-1"}),
        ("DELETE", '{"mode":"exclusive"}', None, lt),
        ("DELETE", None, "limit=1", lt),
        ("GET", None, None, {"Idempotency-Key": "k-1"}),
        ("GET", None, "mode=shared", None),
        ("GET", None, "all=true", None),
    ]
    for v in ("", "yes", "TRUE", "True", "1", "0", "on", "true%20", "%74rue%00", "true&all=true", "false&all=true"):
        others.append(("DELETE", None, "all=" + v, lt))
    others.append(("DELETE", None, "all", lt))
    for v in ("1", "0", '"true"', "null", "[true]", "{}"):
        others.append(("DELETE", '{"all":%s}' % v, None, lt))
    others.append(("DELETE", '{"all":true,"all":true}', None, lt))
    others.append(("DELETE", '{"all":true}', "all=true", lt))
    for method, body, query, headers in others:
        what = "%s %s %s %s" % (method, body or "", query or "", sorted((headers or {}).keys()))
        expect_error(send(ctx, method, held, body, query, headers), *BAD, what=what)
        n += 1
    twice_idem(ctx, "PUT", held, [("Lock-Token", t)])
    twice_idem(ctx, "DELETE", held, [("Lock-Token", t)])
    same_state(ctx, held, before, "%d rejected requests" % n)
    harness.log("     %d malformed requests, each 400 invalid_parameter" % n)
    release(ctx, held, t)


# ---------------------------------------------------------------- shapes

@harness.scenario("kinds: grant, re-entry, renew, release and inspect bodies carry mode, holds, limit and holders with the right types")
def kinds_shapes(ctx):
    key = ctx.key("kshape")
    t0 = time.time()
    r = req(ctx, "POST", key, {"ttl_ms": 8000, "owner": "pod-a"})
    g = expect_grant(r, key, 8000, t_sent=t0)
    check_grant_kind(g, "exclusive", None, "exclusive grant")
    eq(g["holds"], 1, "a new grant's holds")
    # re-entry: 200, the same token and fence, holds + 1
    r = req(ctx, "POST", key, headers={"Lock-Token": g["token"]})
    e = expect_grant(r, key, 8000, status=200, what="re-entry")
    check_grant_kind(e, "exclusive", None, "re-entry")
    eq((e["token"], e["fence"], e["holds"]), (g["token"], g["fence"], 2), "re-entry token, fence, holds")
    # renew keeps the count and carries the grant's fields
    r = req(ctx, "PUT", key, {"ttl_ms": 6000}, headers={"Lock-Token": g["token"]})
    n = expect_grant(r, key, 6000, status=200, what="renew")
    check_grant_kind(n, "exclusive", None, "renew")
    eq((n["token"], n["fence"], n["holds"]), (g["token"], g["fence"], 2), "renew token, fence, holds")
    # inspect: every field, holders with one entry
    b = inspect_body(ctx, key)
    eq(set(b), {"key", "held", "mode", "fence", "ttl_ms", "expires_at", "owner", "holds", "holder_count", "holders"},
       "exclusive inspect fields")
    eq((b["mode"], b["fence"], b["owner"], b["holds"], b["holder_count"]), ("exclusive", g["fence"], "pod-a", 2, 1),
       "exclusive inspect")
    check(1 <= int_field(b, "ttl_ms", "inspect") <= 6000, "inspect ttl_ms %r" % b["ttl_ms"])
    parse_expires(b["expires_at"])
    check(isinstance(b["holders"], list) and len(b["holders"]) == 1, "holders %r" % b["holders"])
    h = b["holders"][0]
    eq(set(h), {"fence", "ttl_ms", "expires_at", "owner", "holds"}, "holder fields")
    eq((h["fence"], h["owner"], h["holds"]), (g["fence"], "pod-a", 2), "the holder")
    check(1 <= int_field(h, "ttl_ms", "holder") <= 6000, "holder ttl_ms %r" % h["ttl_ms"])
    parse_expires(h["expires_at"])
    no_token_in(req(ctx, "GET", key).text, [g["token"]], "inspect")
    # release: one hold, then the last
    release(ctx, key, g["token"], holds_left=1, what="release of one of two holds")
    release(ctx, key, g["token"], holds_left=0, what="release of the last hold")
    expect_free(ctx, key)
    # shared with and without a limit (no limit above 1 where semaphores are not offered)
    sem = harness.semaphores(ctx.lockd)
    for limit in (None, 1, LIMIT_MAX) if sem else (None, 1):
        k = ctx.key("kshape-s")
        s = grant(ctx, k, what="shared grant, limit %r" % limit, **shared(limit, ttl_ms=5000))
        eq(s["holds"], 1, "shared grant holds")
        b = inspect_body(ctx, k, "inspect of a shared key")
        want = {"key", "held", "mode", "fence", "ttl_ms", "expires_at", "holder_count", "holders"}
        eq(set(b), want | ({"limit"} if limit else set()), "shared inspect fields, limit %r" % limit)
        eq((b["mode"], b["holder_count"], b.get("limit")), ("shared", 1, limit), "shared inspect")
        eq(set(b["holders"][0]), {"fence", "ttl_ms", "expires_at", "holds"}, "shared holder fields (no owner)")
        if not sem:
            harness.refuses_semaphore(ctx.lockd, k, shared(LIMIT_MAX), what="limit %d on a held key" % LIMIT_MAX)
        release(ctx, k, s["token"])
    if not sem:
        harness.refuses_semaphore(ctx.lockd, ctx.key("kshape-s"), shared(LIMIT_MAX), what="limit %d" % LIMIT_MAX)
    # query parameters work as well as the body
    k = ctx.key("kshape-q")
    lim = 2 if sem else 1
    r = req(ctx, "POST", k, query="mode=shared&limit=%d&ttl_ms=4000" % lim)
    s = expect_grant(r, k, 4000, what="shared grant from the query")
    check_grant_kind(s, "shared", lim, "shared grant from the query")
    if not sem:
        harness.refuses_semaphore(ctx.lockd, k, query="mode=shared&limit=2&ttl_ms=4000", what="limit 2 in the query")
    release(ctx, k, s["token"], all_=False)


# ----------------------------------------------------------- shared, limit

@harness.scenario("kinds: shared holders are granted up to the limit, then 409 lock_held; exclusive and shared exclude each other")
def kinds_shared_limit(ctx):
    # limit 3, or 1 where semaphores are not offered (a limit above 1 is 400 there)
    n = 3 if harness.semaphores(ctx.lockd) else 1
    key = ctx.key("ksem")
    gs = [grant(ctx, key, what="permit %d" % i, mode="shared", limit=n, ttl_ms=10000) for i in range(n)]
    fences = [g["fence"] for g in gs]
    eq(len({g["token"] for g in gs}), n, "distinct tokens")
    check(fences == sorted(fences) and len(set(fences)) == n, "fences grow: %r" % fences)
    if n == 1:
        harness.refuses_semaphore(ctx.lockd, key, shared(3), what="limit 3 on a held key")
        harness.refuses_semaphore(ctx.lockd, ctx.key("ksem"), shared(3, wait_ms=2000), what="limit 3 on a free key")
    t0 = time.monotonic()
    r = req(ctx, "POST", key, {"mode": "shared", "limit": n})
    err = expect_error(r, 409, "lock_held", "permit %d of %d" % (n + 1, n))
    check(time.monotonic() - t0 < 1.0, "a try-once fourth permit waited")
    ra = int_field(err, "retry_after_ms", "lock_held")
    check(1 <= ra <= 10000, "retry_after_ms %r" % ra)
    expect_error(req(ctx, "POST", key), 409, "lock_held", "exclusive against shared holders")
    # one permit back: the next fits, with a greater fence
    release(ctx, key, gs[0]["token"])
    g = grant(ctx, key, what="a permit after a release", mode="shared", limit=n, ttl_ms=10000)
    check(g["fence"] > max(fences), "fence %d after %r" % (g["fence"], fences))
    for x in gs[1:] + [g]:
        release(ctx, key, x["token"])
    expect_free(ctx, key)
    # readers without a limit, against a writer
    rw = ctx.key("krw")
    w = grant(ctx, rw, ttl_ms=10000)
    expect_error(req(ctx, "POST", rw, {"mode": "shared"}), 409, "lock_held", "a reader against a writer")
    release(ctx, rw, w["token"])
    readers = [grant(ctx, rw, what="reader %d" % i, mode="shared", ttl_ms=10000) for i in range(5)]
    expect_error(req(ctx, "POST", rw), 409, "lock_held", "a writer against readers")
    b = inspect_body(ctx, rw)
    eq((b["mode"], b["holder_count"]), ("shared", 5), "five readers")
    for x in readers:
        release(ctx, rw, x["token"])
    expect_free(ctx, rw)


@harness.scenario("kinds: a shared acquire under another limit is 409 limit_mismatch at once, whatever its wait_ms")
def kinds_limit_mismatch(ctx):
    # limit 2 against 3, 1 and none; where semaphores are not offered, 1
    # against none (a limit above 1 is 400 there, whatever the holders')
    sem = harness.semaphores(ctx.lockd)
    lim = 2 if sem else 1
    key = ctx.key("klim")
    a = grant(ctx, key, mode="shared", limit=lim, ttl_ms=10000)
    before = snapshot(ctx, key)
    others = ({"mode": "shared", "limit": 3}, {"mode": "shared", "limit": 1}, {"mode": "shared"},
              {"mode": "shared", "limit": 3, "wait_ms": 3000}, {"mode": "shared", "wait_ms": 3000})
    for body in others if sem else others[2::2]:
        t0 = time.monotonic()
        r = req(ctx, "POST", key, body)
        expect_error(r, 409, "limit_mismatch", "shared acquire %r against limit %d" % (body, lim))
        check(time.monotonic() - t0 < 1.0, "%r waited %.2f s for a limit_mismatch" % (body, time.monotonic() - t0))
    same_state(ctx, key, before, "limit_mismatch answers")
    if not sem:
        for body in others[0::3]:
            harness.refuses_semaphore(ctx.lockd, key, body, what="%r against limit 1" % body)
    # the same limit still fits (where it is 1: it is full, not another limit)
    if sem:
        b = grant(ctx, key, mode="shared", limit=2, ttl_ms=10000)
    else:
        expect_error(req(ctx, "POST", key, {"mode": "shared", "limit": 1}), 409, "lock_held", "the same limit 1")
    release(ctx, key, a["token"])
    if sem:
        release(ctx, key, b["token"])
    # a limit against holders with none
    num = 5 if sem else 1
    key = ctx.key("klim2")
    c = grant(ctx, key, mode="shared", ttl_ms=10000)
    expect_error(req(ctx, "POST", key, {"mode": "shared", "limit": num, "wait_ms": 2000}), 409, "limit_mismatch",
                 "a limit against holders with none")
    release(ctx, key, c["token"])
    # once the key is free, its limit is gone with its holders
    d = grant(ctx, key, mode="shared", limit=num, ttl_ms=10000)
    release(ctx, key, d["token"])


# --------------------------------------------------------------- re-entry

@harness.scenario("kinds: re-entry by token counts holds (200, same token and fence); release gives back one, all=true every one")
def kinds_reentry(ctx):
    key = ctx.key("kre")
    g = grant(ctx, key, ttl_ms=5000, owner="o")
    t = g["token"]
    # by header, query and body; ttl_ms defaults to the last TTL
    ways = [(None, None, {"Lock-Token": t}), (None, "token=" + t, None), ({"token": t}, None, None)]
    for i, (body, query, headers) in enumerate(ways):
        r = req(ctx, "POST", key, body, query=query, headers=headers)
        e = expect_grant(r, key, 5000, status=200, what="re-entry %d" % (i + 1))
        eq((e["token"], e["fence"], e["holds"], e["mode"]), (t, g["fence"], i + 2, "exclusive"),
           "re-entry %d" % (i + 1))
    r = req(ctx, "POST", key, {"token": t, "ttl_ms": 7000})
    e = expect_grant(r, key, status=200, what="re-entry with ttl_ms")
    check_ttl_left(e["ttl_ms"], 7000, "re-entry ttl_ms")
    eq(e["holds"], 5, "holds after four re-entries")
    # a renew keeps the count and the new TTL stays the last one
    r = req(ctx, "PUT", key, headers={"Lock-Token": t})
    n = expect_grant(r, key, 7000, status=200, what="renew after re-entries")
    eq(n["holds"], 5, "renew keeps the holds")
    eq(inspect_body(ctx, key)["holds"], 5, "inspect holds")
    # others: free key 404, another token 409, never a new lock
    free = ctx.key("kre-free")
    expect_error(req(ctx, "POST", free, headers={"Lock-Token": t}), 404, "lock_not_found", "re-entry of a free key")
    expect_free(ctx, free, "a free key after a re-entry")
    expect_error(req(ctx, "POST", key, headers={"Lock-Token": "0" * 32}), 409, "token_mismatch",
                 "re-entry with another token")
    eq(inspect_body(ctx, key)["holds"], 5, "holds after a mismatched re-entry")
    # give back one by one, then all at once
    release(ctx, key, t, holds_left=4, what="release 1")
    release(ctx, key, t, all_=False, holds_left=3, what="release with all=false")
    b = inspect_body(ctx, key)
    eq((b["holds"], b["fence"]), (3, g["fence"]), "still held, three holds")
    r = req(ctx, "DELETE", key, {"token": t, "all": True})
    eq(expect_json(r, 200, "release all"), {"key": key, "released": True, "holds": 0}, "release all body")
    expect_free(ctx, key)
    expect_error(req(ctx, "POST", key, headers={"Lock-Token": t}), 404, "lock_not_found", "re-entry after release")
    # a shared holder re-enters its own hold only (two holders: limit 2,
    # or no limit where semaphores are not offered)
    lim = 2 if harness.semaphores(ctx.lockd) else None
    key = ctx.key("kre-s")
    a = grant(ctx, key, **shared(lim, ttl_ms=5000))
    b2 = grant(ctx, key, **shared(lim, ttl_ms=5000))
    e = expect_grant(req(ctx, "POST", key, headers={"Lock-Token": a["token"]}), key, 5000, status=200,
                     what="shared re-entry")
    eq((e["mode"], e["holds"], e["fence"], e.get("limit")), ("shared", 2, a["fence"], lim), "shared re-entry")
    holders = {h["fence"]: h["holds"] for h in inspect_body(ctx, key)["holders"]}
    eq(holders, {a["fence"]: 2, b2["fence"]: 1}, "holds per shared holder")
    if lim is None:
        harness.refuses_semaphore(ctx.lockd, key, shared(2), what="limit 2 beside re-entered readers")
    release(ctx, key, a["token"], all_=True)
    release(ctx, key, b2["token"])
    expect_free(ctx, key)


# ------------------------------------------------------------ idempotency

@harness.scenario("kinds: an Idempotency-Key replays its live grant (201, same token and fence, nothing renewed) and conflicts on another mode or limit")
def kinds_idempotency(ctx):
    key = ctx.key("kidem")
    ik = {"Idempotency-Key": "retry-" + key}
    r = req(ctx, "POST", key, {"ttl_ms": 6000}, headers=ik)
    g = expect_grant(r, key, 6000, what="first acquire with a key")
    time.sleep(0.3)
    r = req(ctx, "POST", key, {"ttl_ms": 6000}, headers=ik)
    p = expect_grant(r, key, what="retry with the same key")
    eq((p["token"], p["fence"], p["mode"], p["holds"]), (g["token"], g["fence"], "exclusive", 1), "the replay")
    check(p["ttl_ms"] <= g["ttl_ms"] - 200, "a replay renewed the lock: ttl_ms %d after %d" % (p["ttl_ms"], g["ttl_ms"]))
    check(abs(parse_expires(p["expires_at"]) - parse_expires(g["expires_at"])) <= 0.1, "a replay moved expires_at")
    # another mode: 400 invalid_parameter, nothing changed
    before = snapshot(ctx, key)
    expect_error(req(ctx, "POST", key, {"mode": "shared"}, headers=ik), *BAD, what="the key with another mode")
    same_state(ctx, key, before, "an idempotency conflict")
    # another key on the held lock is an ordinary acquire
    expect_error(req(ctx, "POST", key, headers={"Idempotency-Key": "other-" + key}), 409, "lock_held",
                 "another Idempotency-Key")
    # released: the key names nothing any more, a new grant comes
    release(ctx, key, g["token"])
    n = expect_grant(req(ctx, "POST", key, headers=ik), key, what="the key after its grant was released")
    check(n["token"] != g["token"] and n["fence"] > g["fence"], "a new grant after release: %r" % n)
    release(ctx, key, n["token"])
    # shared with a limit: replay, then another limit or none conflicts;
    # where semaphores are not offered: shared with none, then limit 1 or
    # exclusive conflicts
    sem = harness.semaphores(ctx.lockd)
    lim = 3 if sem else None
    key = ctx.key("kidem-s")
    ik = {"Idempotency-Key": "sem-" + key}
    s = grant(ctx, key, headers=ik, **shared(lim, ttl_ms=8000))
    other = grant(ctx, key, **shared(lim, ttl_ms=8000))
    p = expect_grant(req(ctx, "POST", key, shared(lim), headers=ik), key, what="shared replay")
    eq((p["token"], p["fence"], p.get("limit"), p["mode"]), (s["token"], s["fence"], lim, "shared"), "shared replay")
    conflicts = ({"mode": "shared", "limit": 2}, {"mode": "shared"}, {}) if sem else (shared(1), {})
    for body in conflicts:
        expect_error(req(ctx, "POST", key, body, headers=ik), *BAD, what="the key with %r" % body)
    if not sem:
        harness.refuses_semaphore(ctx.lockd, key, shared(3), what="limit 3 beside an idempotent grant")
    eq(inspect_body(ctx, key)["holder_count"], 2, "holders after replays and conflicts")
    release(ctx, key, s["token"])
    release(ctx, key, other["token"])
    expect_free(ctx, key)


# ---------------------------------------------------------------- inspect

@harness.scenario("kinds: inspect of a shared key lists holders by fence with holder_count and limit, and never a token")
def kinds_inspect_shared(ctx):
    # four readers under limit 6, or no limit where semaphores are not offered
    lim = 6 if harness.semaphores(ctx.lockd) else None
    key = ctx.key("kinsp")
    gs = []
    for i, (ttl, owner) in enumerate(((9000, "r-0"), (4000, None), (12000, "r-2"), (6000, None))):
        body = shared(lim, ttl_ms=ttl)
        if owner is not None:
            body["owner"] = owner
        gs.append(grant(ctx, key, what="reader %d" % i, **body))
    # the second reader re-enters once
    expect_grant(req(ctx, "POST", key, headers={"Lock-Token": gs[1]["token"]}), key, status=200, what="re-entry")
    r = req(ctx, "GET", key)
    b = expect_json(r, 200, "inspect")
    no_token_in(r.text, [g["token"] for g in gs], "inspect of a shared key")
    check("token" not in json.dumps(b), "a token field in %r" % b)
    eq((b["mode"], b.get("limit"), b["holder_count"]), ("shared", lim, 4), "shared inspect")
    if lim is None:
        check("limit" not in b, "a limit shown where none was given: %r" % b)
        harness.refuses_semaphore(ctx.lockd, key, shared(6), what="limit 6 beside four readers")
    check("owner" not in b and "holds" not in b, "top-level owner or holds on a shared key: %r" % b)
    fences = [g["fence"] for g in gs]
    eq(b["fence"], max(fences), "fence is the greatest held")
    hs = b["holders"]
    eq([h["fence"] for h in hs], sorted(fences), "holders by fence")
    by_fence = {g["fence"]: (i, g) for i, g in enumerate(gs)}
    for h in hs:
        i, g = by_fence[h["fence"]]
        check_fence(h["fence"], "holder fence")
        eq(h["holds"], 2 if i == 1 else 1, "holder %d holds" % i)
        eq(h.get("owner"), ("r-0", None, "r-2", None)[i], "holder %d owner" % i)
        check(1 <= int_field(h, "ttl_ms", "holder") <= 12000, "holder ttl_ms %r" % h["ttl_ms"])
        parse_expires(h["expires_at"])
    # the top level's expiry is the holder that expires last (the 12 s one)
    last = max(hs, key=lambda h: parse_expires(h["expires_at"]))
    eq(last["fence"], gs[2]["fence"], "the holder that expires last")
    check(abs(parse_expires(b["expires_at"]) - parse_expires(last["expires_at"])) <= 0.1,
          "top-level expires_at %s is not the last holder's %s" % (b["expires_at"], last["expires_at"]))
    check(b["ttl_ms"] > 9000, "top-level ttl_ms %r is not the longest holder's" % b["ttl_ms"])
    for g in gs:
        r = req(ctx, "DELETE", key, {"token": g["token"], "all": True})
        expect_json(r, 200, "release all of a reader")
    expect_free(ctx, key)

"""tests/e2e/test_api.py - API.md's contract over real HTTP, on every
backend: each status and error code, acquire / inspect / renew / release,
parameters from body, query and header with their strictness rules, fences,
TTLs, keys, the operational endpoints and the data-driven request cases in
tests/data/requests/<case>/{request,expect}.

The helpers (paths, expectations, /metrics parsing, raw HTTP parsing) are
in client.py. Keys always come from ctx.key(): stores outlive one
scenario.
"""

import json
import math
import os
import re
import socket
import time

import harness
from client import (ALLOW_LOCKS, ALLOW_OPS, DEFAULT_TTL_MS, MAX_TTL_MS, MAX_WAIT_MS, acquire, check_fence,
                    check_ttl_left, expect_error, expect_free, expect_grant, expect_held, expect_json, has_metric,
                    http_request, inspect, metric, metrics, parse_expires, parse_http, parse_metrics, path, quote,
                    raw_json, raw_response, release, req, sleep_until)
from harness import check, eq

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "data", "requests")


# ------------------------------------------------------- acquire, grants

@harness.scenario("acquire of a free key returns 201 with key, token, fence, ttl_ms and expires_at")
def acquire_free(ctx):
    key = ctx.key("acq")
    t0 = time.time()
    r = req(ctx, "POST", key, {"ttl_ms": 5000})
    g = expect_grant(r, key, 5000, t_sent=t0)
    eq(set(g), {"key", "token", "fence", "ttl_ms", "expires_at", "mode", "holds"}, "grant fields")
    eq((g["mode"], g["holds"]), ("exclusive", 1), "grant mode and holds")
    check(r.header("Retry-After") is None, "a grant carries Retry-After")
    release(ctx, key, g["token"])


@harness.scenario("acquire with an empty body or {} uses the default ttl of 30000 ms")
def acquire_defaults(ctx):
    for body in (None, b"", {}, b" {}\n"):
        key = ctx.key("def")
        r = ctx.lockd.request("POST", path(key), body)
        g = expect_grant(r, key, DEFAULT_TTL_MS, what="acquire with body %r" % (body,))
        held = expect_held(ctx, key, g["fence"])
        check("owner" not in held, "inspect shows an owner none was given: %r" % held)
        check(DEFAULT_TTL_MS - 5000 < held["ttl_ms"] <= DEFAULT_TTL_MS, "remaining ttl %r" % held["ttl_ms"])
        release(ctx, key, g["token"])


@harness.scenario("acquire of a held key returns 409 lock_held with retry_after_ms and Retry-After")
def acquire_held(ctx):
    key = ctx.key("held")
    g = acquire(ctx, key, ttl_ms=10000, owner="first")
    t0 = time.monotonic()
    r = req(ctx, "POST", key, {"ttl_ms": 1000, "owner": "second"})
    elapsed = time.monotonic() - t0
    err = expect_error(r, 409, "lock_held")
    ra = err.get("retry_after_ms")
    check(isinstance(ra, int) and not isinstance(ra, bool), "retry_after_ms %r is not an integer" % (ra,))
    check(8000 <= ra <= 10000, "retry_after_ms %r is not the holder's remaining ttl (~10000)" % ra)
    eq(r.header("Retry-After"), str(math.ceil(ra / 1000.0)), "Retry-After")
    check(elapsed < 1.0, "a try-once acquire of a held key took %.3f s" % elapsed)
    expect_held(ctx, key, g["fence"], "first", "the holder after a conflict")
    # wait_ms 0 explicitly: still try once
    r = req(ctx, "POST", key, {"wait_ms": 0})
    expect_error(r, 409, "lock_held", "acquire with wait_ms 0")
    release(ctx, key, g["token"])


@harness.scenario("Retry-After is retry_after_ms rounded up to whole seconds, at least 1")
def retry_after_rounding(ctx):
    for ttl in (150, 1000, 1500, 2500, 4001, 100000):
        key = ctx.key("ra")
        g = acquire(ctx, key, ttl_ms=ttl)
        r = req(ctx, "POST", key)
        if ttl == 150 and r.status == 201:  # expired already on a slow machine
            release(ctx, key, r.json["token"])
            continue
        err = expect_error(r, 409, "lock_held", "conflict with a %d ms holder" % ttl)
        ra = err.get("retry_after_ms")
        check(isinstance(ra, int) and 1 <= ra <= ttl, "retry_after_ms %r for a holder of ttl %d" % (ra, ttl))
        if ttl >= 1000:
            check(ra >= ttl - 2000, "retry_after_ms %r is not the remaining ttl of a %d ms holder" % (ra, ttl))
        eq(r.header("Retry-After"), str(max(1, math.ceil(ra / 1000.0))),
           "Retry-After for retry_after_ms %d" % ra)
        release(ctx, key, g["token"])


@harness.scenario("tokens are 32 lowercase hex characters, different for every grant")
def tokens_unique(ctx):
    seen = set()
    key = ctx.key("tok")
    for _ in range(20):
        g = acquire(ctx, key, ttl_ms=5000)
        check(g["token"] not in seen, "token %s given twice" % g["token"])
        seen.add(g["token"])
        release(ctx, key, g["token"])
    other = ctx.key("tok2")
    g = acquire(ctx, other, ttl_ms=5000)
    check(g["token"] not in seen, "token reused across keys")
    release(ctx, other, g["token"])


@harness.scenario("fences strictly increase across grants of a key, by release and by expiry")
def fences_increase(ctx):
    key = ctx.key("fence")
    last = 0
    for i in range(8):
        g = acquire(ctx, key, ttl_ms=5000)
        check(g["fence"] > last, "grant %d: fence %d not above %d" % (i, g["fence"], last))
        last = g["fence"]
        release(ctx, key, g["token"])
    g = acquire(ctx, key, ttl_ms=100)
    check(g["fence"] > last, "fence %d not above %d" % (g["fence"], last))
    last = g["fence"]
    time.sleep(0.35)
    g = acquire(ctx, key, ttl_ms=5000, what="acquire after expiry")
    check(g["fence"] > last, "after expiry: fence %d not above %d" % (g["fence"], last))
    # another key's grants in between do not break the order of this one
    other = ctx.key("fence2")
    release(ctx, key, g["token"])
    last = g["fence"]
    for _ in range(3):
        o = acquire(ctx, other, ttl_ms=5000)
        release(ctx, other, o["token"])
        g = acquire(ctx, key, ttl_ms=5000)
        check(g["fence"] > last, "fence %d not above %d" % (g["fence"], last))
        last = g["fence"]
        release(ctx, key, g["token"])


@harness.scenario("the largest ttl_ms and wait_ms are accepted and one more is 400 invalid_parameter")
def limits_default(ctx):
    key = ctx.key("max")
    g = acquire(ctx, key, ttl_ms=MAX_TTL_MS)
    check_fence(g["fence"])
    release(ctx, key, g["token"])
    t0 = time.monotonic()
    r = req(ctx, "POST", key, {"ttl_ms": 1000, "wait_ms": MAX_WAIT_MS})
    g = expect_grant(r, key, 1000, what="acquire with the largest wait_ms of a free key")
    check(time.monotonic() - t0 < 2.0, "a waiting acquire of a free key was not granted at once")
    release(ctx, key, g["token"])
    r = req(ctx, "POST", key, {"ttl_ms": 1})
    if r.status == 503:
        # accepted, but the store's round trip outlasted the 1 ms: lockd
        # never answers 201 for a grant that may be gone already
        eq(r.error_code(), "backend_unavailable", "acquire with ttl_ms 1 answered 503")
    else:
        expect_grant(r, key, 1, what="acquire with ttl_ms 1")
    for body in ({"ttl_ms": MAX_TTL_MS + 1}, {"wait_ms": MAX_WAIT_MS + 1}, {"ttl_ms": 0}):
        k2 = ctx.key("max")
        expect_error(req(ctx, "POST", k2, body), 400, "invalid_parameter", "acquire %r" % body)
        expect_free(ctx, k2, "key after a rejected acquire")


# -------------------------------------------------------------- inspect

@harness.scenario("inspect of a held key shows fence, remaining ttl, expires_at and owner, never the token")
def inspect_held(ctx):
    key = ctx.key("insp")
    g = acquire(ctx, key, ttl_ms=8000, owner="pod-a/worker-3")
    body = expect_held(ctx, key, g["fence"], "pod-a/worker-3")
    eq(set(body), {"key", "held", "mode", "fence", "ttl_ms", "expires_at", "owner", "holds", "holder_count",
                   "holders"}, "inspect fields")
    check(isinstance(body["ttl_ms"], int) and 1 <= body["ttl_ms"] <= 8000,
          "remaining ttl_ms %r not in [1, 8000]" % body["ttl_ms"])
    check(body["ttl_ms"] > 6000, "remaining ttl_ms %r right after an 8 s grant" % body["ttl_ms"])
    check(g["token"] not in r_text(ctx, key), "inspect shows the token")
    d = abs(parse_expires(body["expires_at"]) - parse_expires(g["expires_at"]))
    check(d <= 1.0, "inspect expires_at %s vs grant %s" % (body["expires_at"], g["expires_at"]))
    time.sleep(0.3)
    later = expect_held(ctx, key, g["fence"])
    check(later["ttl_ms"] < body["ttl_ms"], "remaining ttl did not go down: %r then %r"
          % (body["ttl_ms"], later["ttl_ms"]))
    # HEAD: same status, no body
    r = ctx.lockd.request("HEAD", path(key))
    eq(r.status, 200, "HEAD of a held key")
    eq(r.body, b"", "HEAD body")
    release(ctx, key, g["token"])
    r = ctx.lockd.request("HEAD", path(key))
    eq(r.status, 404, "HEAD of a free key")
    eq(r.body, b"", "HEAD body")


def r_text(ctx, key):
    return inspect(ctx, key).text


@harness.scenario("inspect shows owner only when one was given, and an empty owner when it was empty")
def inspect_owner(ctx):
    key = ctx.key("own")
    g = acquire(ctx, key, ttl_ms=5000)
    body = expect_held(ctx, key, g["fence"])
    check("owner" not in body, "owner shown though none was given: %r" % body)
    release(ctx, key, g["token"])
    g = acquire(ctx, key, ttl_ms=5000, owner="")
    expect_held(ctx, key, g["fence"], "")
    release(ctx, key, g["token"])
    for owner in ("x" * 128, "é" * 64, "ключ 🔒 \"q\" \\ / %2F", "\u0085 C1 control is not a control char"):
        g = acquire(ctx, key, ttl_ms=5000, owner=owner)
        expect_held(ctx, key, g["fence"], owner)
        release(ctx, key, g["token"])


@harness.scenario("inspect of a free key returns 404 lock_not_found")
def inspect_free(ctx):
    key = ctx.key("free")
    expect_free(ctx, key)
    g = acquire(ctx, key, ttl_ms=5000)
    release(ctx, key, g["token"])
    expect_free(ctx, key, "inspect after release")


@harness.scenario("inspect takes no parameters: any query parameter or body field is 400 invalid_parameter")
def inspect_no_params(ctx):
    key = ctx.key("inp")
    g = acquire(ctx, key, ttl_ms=5000)
    for q in ("ttl_ms=5", "token=" + g["token"], "x=1", "owner"):
        expect_error(req(ctx, "GET", key, query=q), 400, "invalid_parameter", "GET ?%s" % q)
    expect_error(req(ctx, "GET", key, {"owner": "x"}), 400, "invalid_parameter", "GET with a body field")
    expect_error(ctx.lockd.request("GET", path(key), headers={}, body={"token": g["token"]}), 400,
                 "invalid_parameter", "GET with a token field")
    expect_held(ctx, key, g["fence"])
    release(ctx, key, g["token"])


# ---------------------------------------------------------------- release

@harness.scenario("release with the token frees the key and answers released true")
def release_frees(ctx):
    key = ctx.key("rel")
    g = acquire(ctx, key, ttl_ms=10000)
    r = req(ctx, "DELETE", key, headers={"Lock-Token": g["token"]})
    body = expect_json(r, 200, "release")
    eq(body, {"key": key, "released": True, "holds": 0}, "release body")
    expect_free(ctx, key, "inspect after release")
    g2 = acquire(ctx, key, ttl_ms=1000, what="acquire after release")
    check(g2["fence"] > g["fence"], "fence after release")
    check(g2["token"] != g["token"], "same token after release")
    release(ctx, key, g2["token"])


@harness.scenario("release of a free key returns 404 lock_not_found, twice too")
def release_free(ctx):
    key = ctx.key("relfree")
    expect_error(req(ctx, "DELETE", key, headers={"Lock-Token": "0" * 32}), 404, "lock_not_found")
    g = acquire(ctx, key, ttl_ms=5000)
    release(ctx, key, g["token"])
    expect_error(req(ctx, "DELETE", key, headers={"Lock-Token": g["token"]}), 404, "lock_not_found",
                 "second release")


@harness.scenario("release or renew with another token returns 409 token_mismatch and keeps the lock")
def mismatch(ctx):
    key = ctx.key("mis")
    g = acquire(ctx, key, ttl_ms=10000, owner="holder")
    others = ["0" * 32, "f" * 32, g["token"][:-1], g["token"] + "0",
              g["token"][:-1] + ("0" if g["token"][-1] != "0" else "1")]
    if g["token"].upper() != g["token"]:
        others.append(g["token"].upper())
    for t in others:
        for method in ("DELETE", "PUT"):
            r = req(ctx, method, key, headers={"Lock-Token": t})
            if t == g["token"].upper() or len(t) != 32:
                check(r.status in (400, 409), "%s with token %r: %r" % (method, t, r))
                expect_error(r, r.status, ("token_mismatch", "invalid_parameter"), "%s with %r" % (method, t))
            else:
                expect_error(r, 409, "token_mismatch", "%s with token %r" % (method, t))
    expect_held(ctx, key, g["fence"], "holder", "holder after wrong tokens")
    release(ctx, key, g["token"])


@harness.scenario("release and renew without a token return 400 missing_token, and an empty token is missing")
def missing_token(ctx):
    key = ctx.key("mt")
    g = acquire(ctx, key, ttl_ms=10000)
    for method in ("DELETE", "PUT"):
        expect_error(req(ctx, method, key), 400, "missing_token", "%s without token" % method)
        expect_error(req(ctx, method, key, {}), 400, "missing_token", "%s with {}" % method)
        expect_error(req(ctx, method, key, {"token": ""}), 400, "missing_token", "%s with token \"\"" % method)
        expect_error(req(ctx, method, key, headers={"Lock-Token": ""}), 400, "missing_token",
                     "%s with an empty Lock-Token" % method)
    expect_held(ctx, key, g["fence"])
    free = ctx.key("mt")
    expect_error(req(ctx, "DELETE", free), 400, "missing_token", "release of a free key without a token")
    release(ctx, key, g["token"])


@harness.scenario("renew and release take the token from the Lock-Token header, the query or the body")
def token_sources(ctx):
    key = ctx.key("src")
    for how in ("header", "lowercase header", "query", "body"):
        for method in ("PUT", "DELETE"):
            g = acquire(ctx, key, ttl_ms=5000)
            t = g["token"]
            if how == "header":
                r = req(ctx, method, key, headers={"Lock-Token": t})
            elif how == "lowercase header":
                r = req(ctx, method, key, headers={"lock-token": t})
            elif how == "query":
                r = req(ctx, method, key, query="token=" + t)
            else:
                r = req(ctx, method, key, {"token": t})
            if method == "PUT":
                b = expect_grant(r, key, 5000, status=200, what="renew with the token in the " + how)
                eq(b["token"], t, "renew token")
                eq(b["fence"], g["fence"], "renew fence")
                release(ctx, key, t)
            else:
                eq(expect_json(r, 200, "release with the token in the " + how).get("released"), True, "released")
                expect_free(ctx, key)


@harness.scenario("a token given twice (header and query, header and body, query and body) is 400 invalid_parameter")
def token_twice(ctx):
    key = ctx.key("tt")
    g = acquire(ctx, key, ttl_ms=10000)
    t = g["token"]
    cases = [
        ("header+query", None, "token=" + t, {"Lock-Token": t}),
        ("header+body", {"token": t}, None, {"Lock-Token": t}),
        ("query+body", {"token": t}, "token=" + t, None),
        ("query twice", None, "token=%s&token=%s" % (t, t), None),
        ("duplicate JSON key", b'{"token":"%s","token":"%s"}' % (t.encode(), t.encode()), None, None),
    ]
    for method in ("DELETE", "PUT"):
        for what, body, query, headers in cases:
            r = req(ctx, method, key, body, query, headers)
            expect_error(r, 400, "invalid_parameter", "%s with the token in %s" % (method, what))
    expect_held(ctx, key, g["fence"], what="lock after rejected releases")
    release(ctx, key, t)


@harness.scenario("release accepts only the token: ttl_ms, wait_ms, owner or unknown fields are 400 invalid_parameter")
def release_params(ctx):
    key = ctx.key("rp")
    g = acquire(ctx, key, ttl_ms=10000)
    t = g["token"]
    for body in ({"token": t, "ttl_ms": 5}, {"token": t, "wait_ms": 5}, {"token": t, "owner": "x"},
                 {"token": t, "force": True}, {"token": 5}, {"token": None}, {"token": [t]}):
        expect_error(req(ctx, "DELETE", key, body), 400, "invalid_parameter", "release with %r" % body)
    for q in ("ttl_ms=5", "force=1", "token"):
        expect_error(req(ctx, "DELETE", key, query=q, headers={"Lock-Token": t}), 400, "invalid_parameter",
                     "release ?%s" % q)
    for body in (b"[]", b"token=" + t.encode(), b"\"" + t.encode() + b"\"", b"{"):
        expect_error(req(ctx, "DELETE", key, body), 400, "invalid_json", "release with body %r" % body)
    expect_held(ctx, key, g["fence"], what="lock after rejected releases")
    release(ctx, key, t)


# ------------------------------------------------------------------ renew

@harness.scenario("renew keeps the fence and token and moves the expiry to now + ttl_ms")
def renew_moves(ctx):
    key = ctx.key("ren")
    t0 = time.monotonic()
    g = acquire(ctx, key, ttl_ms=600)
    sleep_until(t0 + 0.3)
    r = req(ctx, "PUT", key, {"token": g["token"]})
    b = expect_grant(r, key, 600, status=200, what="renew")
    eq(b["fence"], g["fence"], "renew fence")
    eq(b["token"], g["token"], "renew token")
    moved = parse_expires(b["expires_at"]) - parse_expires(g["expires_at"])
    check(0.15 <= moved <= 1.5, "renew moved expires_at by %.3f s, want ~0.3 s" % moved)
    sleep_until(t0 + 0.7)  # past the first expiry, before the renewed one
    expect_held(ctx, key, g["fence"], what="inspect after the original ttl, renewed")
    time.sleep(0.8)
    expect_free(ctx, key, "inspect after the renewed ttl")


@harness.scenario("renew with ttl_ms sets a new ttl and renew without ttl_ms keeps the last one")
def renew_ttl(ctx):
    key = ctx.key("rttl")
    g = acquire(ctx, key, ttl_ms=4000)
    t = g["token"]
    b = expect_grant(req(ctx, "PUT", key, headers={"Lock-Token": t}), key, 4000, status=200,
                     what="renew without ttl after the grant")
    b = expect_grant(req(ctx, "PUT", key, {"token": t, "ttl_ms": 9000}), key, 9000, status=200,
                     what="renew with ttl_ms 9000")
    b = expect_grant(req(ctx, "PUT", key, query="token=" + t), key, 9000, status=200,
                     what="renew without ttl after a renew with 9000")
    held = expect_held(ctx, key, g["fence"])
    check(held["ttl_ms"] > 7000, "remaining ttl %r after renew with the last ttl (9000)" % held["ttl_ms"])
    b = expect_grant(req(ctx, "PUT", key, query="token=%s&ttl_ms=700" % t), key, 700, status=200,
                     what="renew with ttl_ms 700 in the query")
    b = expect_grant(req(ctx, "PUT", key, {"token": t}), key, 700, status=200, what="renew keeping 700")
    eq(b["fence"], g["fence"], "fence")
    time.sleep(1.0)
    expect_free(ctx, key, "inspect after the shortened ttl")
    for body in ({"token": t, "ttl_ms": 0}, {"token": t, "ttl_ms": MAX_TTL_MS + 1},
                 {"token": t, "ttl_ms": "5"}, {"token": t, "wait_ms": 5}, {"token": t, "owner": "x"}):
        expect_error(req(ctx, "PUT", key, body), 400, "invalid_parameter", "renew with %r" % body)


@harness.scenario("renew of a free key returns 404 lock_not_found")
def renew_free(ctx):
    key = ctx.key("rfree")
    expect_error(req(ctx, "PUT", key, headers={"Lock-Token": "a" * 32}), 404, "lock_not_found")
    g = acquire(ctx, key, ttl_ms=5000)
    release(ctx, key, g["token"])
    expect_error(req(ctx, "PUT", key, headers={"Lock-Token": g["token"]}), 404, "lock_not_found",
                 "renew after release")
    expect_free(ctx, key, "inspect after a failed renew")


@harness.scenario("rejected renews change nothing: the lock keeps its ttl and fence")
def renew_rejected_no_change(ctx):
    key = ctx.key("rnc")
    g = acquire(ctx, key, ttl_ms=600)
    t = g["token"]
    t0 = time.monotonic()
    for body in ({"token": t, "ttl_ms": 60000, "x": 1}, {"token": t, "ttl_ms": 60000, "owner": "y"}):
        expect_error(req(ctx, "PUT", key, body), 400, "invalid_parameter", "renew with %r" % body)
    expect_error(req(ctx, "PUT", key, {"ttl_ms": 60000}, query="token=" + t, headers={"Lock-Token": t}),
                 400, "invalid_parameter", "renew with the token twice")
    expect_error(req(ctx, "PUT", key, {"ttl_ms": 60000}, query="ttl_ms=60000&token=" + t),
                 400, "invalid_parameter", "renew with ttl_ms twice")
    check(time.monotonic() - t0 < 0.5, "rejections took too long to judge the ttl")
    time.sleep(0.9)
    expect_free(ctx, key, "a lock whose rejected renews asked for 60 s")


# ------------------------------------------------------------ TTL expiry

@harness.scenario("a lock expires after its ttl and the key can be acquired again with a higher fence")
def ttl_expiry(ctx):
    key = ctx.key("exp")
    t0 = time.monotonic()
    g = acquire(ctx, key, ttl_ms=500)
    t1 = time.monotonic()
    held = expect_held(ctx, key, g["fence"])
    if time.monotonic() - t1 < 0.3:
        check(1 <= held["ttl_ms"] <= 500, "remaining ttl %r" % held["ttl_ms"])
    r = req(ctx, "POST", key, {"ttl_ms": 1000})
    if time.monotonic() - t1 < 0.4:
        expect_error(r, 409, "lock_held", "acquire before the ttl passed")
    sleep_until(t1 + 0.5 + 0.15)
    expect_free(ctx, key, "inspect after the ttl")
    g2 = acquire(ctx, key, ttl_ms=1000, what="acquire after expiry")
    check(g2["fence"] > g["fence"], "fence after expiry %d <= %d" % (g2["fence"], g["fence"]))
    check(t1 - t0 < 5.0, "slow acquire")
    release(ctx, key, g2["token"])


@harness.scenario("a token stays dead after its lock expires, also when the key is granted again")
def dead_token(ctx):
    key = ctx.key("dead")
    a = acquire(ctx, key, ttl_ms=200)
    time.sleep(0.45)
    expect_error(req(ctx, "PUT", key, headers={"Lock-Token": a["token"]}), 404, "lock_not_found",
                 "renew of an expired lock")
    expect_error(req(ctx, "DELETE", key, headers={"Lock-Token": a["token"]}), 404, "lock_not_found",
                 "release of an expired lock")
    b = acquire(ctx, key, ttl_ms=10000, owner="b", what="acquire after expiry")
    check(b["fence"] > a["fence"], "fence")
    expect_error(req(ctx, "PUT", key, headers={"Lock-Token": a["token"]}), 409, "token_mismatch",
                 "renew with the dead token while b holds")
    expect_error(req(ctx, "DELETE", key, {"token": a["token"]}), 409, "token_mismatch",
                 "release with the dead token while b holds")
    expect_held(ctx, key, b["fence"], "b", "b after the dead token's attempts")
    release(ctx, key, b["token"])
    expect_error(req(ctx, "PUT", key, headers={"Lock-Token": a["token"]}), 404, "lock_not_found",
                 "renew with the dead token after b released")
    c = acquire(ctx, key, ttl_ms=1000)
    expect_error(req(ctx, "DELETE", key, headers={"Lock-Token": b["token"]}), 409, "token_mismatch",
                 "release with b's released token while c holds")
    release(ctx, key, c["token"])


# ------------------------------------------------------------- parameters

@harness.scenario("acquire reads ttl_ms, wait_ms and owner from the query string, with + as a space")
def params_query(ctx):
    key = ctx.key("pq")
    r = req(ctx, "POST", key, query="ttl_ms=4321&wait_ms=0&owner=pod-a%2Fworker+3%20%C3%A9")
    g = expect_grant(r, key, 4321)
    expect_held(ctx, key, g["fence"], "pod-a/worker 3 é")
    release(ctx, key, g["token"])


@harness.scenario("in a query value %2B is a literal + while + is a space, and the key keeps its literal +")
def query_plus(ctx):
    key = ctx.key("plus") + "+k"
    r = req(ctx, "POST", key, query="ttl_ms=5000&owner=a%2Bb+c%2B%2B", safe="+")
    g = expect_grant(r, key, 5000)
    expect_held(ctx, key, g["fence"], "a+b c++")
    expect_free(ctx, key[:-2] + " k", "the key with a space where the path had +")
    # digits may be percent-encoded too (%36 is 6)
    r = req(ctx, "PUT", key, query="token=%s&ttl_ms=%%36000" % g["token"], safe="+")
    expect_grant(r, key, 6000, status=200, what="renew with ttl_ms=%36000 in the query")
    release(ctx, key, g["token"])


@harness.scenario("acquire reads a JSON body whatever its Content-Type, and fields may be split between query and body")
def params_body_ctype(ctx):
    for ctype in ("application/json", "application/x-www-form-urlencoded", "text/plain",
                  "application/json; charset=utf-8", "application/octet-stream"):
        key = ctx.key("ct")
        r = ctx.lockd.request("POST", path(key), {"ttl_ms": 3456, "owner": ctype},
                              headers={"Content-Type": ctype})
        g = expect_grant(r, key, 3456, what="acquire with Content-Type " + ctype)
        expect_held(ctx, key, g["fence"], ctype)
        release(ctx, key, g["token"])
    # no Content-Type at all (curl --data-binary with -H 'Content-Type:')
    key = ctx.key("ct")
    resp = raw_response(ctx.lockd.port, http_request("POST", path(key), b'{"ttl_ms":2345}'))
    check(resp is not None, "no answer to a body without Content-Type")
    eq(resp[0], 201, "acquire without Content-Type (body %r)" % resp[2][:200])
    g = raw_json(resp)
    check_ttl_left(g.get("ttl_ms"), 2345)
    release(ctx, key, g["token"])
    key = ctx.key("split")
    r = req(ctx, "POST", key, {"ttl_ms": 2222}, query="owner=split")
    g = expect_grant(r, key, 2222, what="acquire with ttl_ms in the body and owner in the query")
    expect_held(ctx, key, g["fence"], "split")
    release(ctx, key, g["token"])


BAD_JSON_BODIES = [b"ttl_ms=5000", b"[]", b"[{}]", b"5", b"null", b"true", b'"x"', b" ", b"\n\t \r\n",
                   b"{", b"}", b"{}x", b"{} {}", b"{}{}", b"{'ttl_ms':5000}", b'{"ttl_ms":5000,}',
                   b'{"ttl_ms" 5000}', b'{ttl_ms:5000}', b'{"ttl_ms":5000', b"\x00", b"{\x00}"]

BAD_PARAM_BODIES = [
    b'{"ttl_ms":"5000"}', b'{"ttl_ms":5000.0}', b'{"ttl_ms":1e3}', b'{"ttl_ms":1E3}', b'{"ttl_ms":true}',
    b'{"ttl_ms":null}', b'{"ttl_ms":[5000]}', b'{"ttl_ms":{}}', b'{"ttl_ms":0}', b'{"ttl_ms":-0}',
    b'{"ttl_ms":-1}', b'{"ttl_ms":86400001}', b'{"ttl_ms":99999999999999999999}',
    b'{"ttl_ms":18446744073709551617}', b'{"ttl_ms":9223372036854775807}', b'{"ttl_ms":-9223372036854775808}',
    b'{"wait_ms":-1}', b'{"wait_ms":300001}', b'{"wait_ms":"0"}', b'{"wait_ms":0.5}', b'{"wait_ms":false}',
    b'{"owner":5}', b'{"owner":null}', b'{"owner":["a"]}', b'{"owner":{}}', b'{"owner":true}',
    b'{"owner":"' + b"x" * 129 + b'"}', b'{"owner":"' + "é".encode() * 64 + b'x"}',
    b'{"owner":"a\\nb"}', b'{"owner":"a\\u0000b"}', b'{"owner":"\\u007f"}', b'{"owner":"\\u001f"}',
    b'{"owner":"tab\\there"}',
    b'{"ttl":5000}', b'{"TTL_MS":5000}', b'{"ttl_ms ":5000}', b'{"":1}', b'{"token":"' + b"a" * 32 + b'","wait_ms":0}',
    b'{"ttl_ms":5000,"extra":1}', b'{"ttl_ms":5000,"ttl_ms":5000}', b'{"owner":"a","owner":"a"}',
    b'{"wait_ms":0,"wait_ms":1}',
]

BAD_QUERIES = ["ttl_ms", "ttl_ms=", "ttl_ms=abc", "ttl_ms=-1", "ttl_ms=%2B5", "ttl_ms=+5", "ttl_ms=5.0",
               "ttl_ms=1e3", "ttl_ms=0", "ttl_ms=86400001", "ttl_ms=99999999999999999999999",
               "ttl_ms=0x10", "ttl_ms=5%00", "ttl_ms=5000&ttl_ms=5000", "wait_ms=-1", "wait_ms=300001",
               "wait_ms", "foo=1", "TTL_MS=5000", "owner", "owner=%zz", "owner=a%0Ab", "owner=%7F",
               "owner=" + "x" * 129, "token=" + "a" * 32 + "&wait_ms=0", "=5", "ttl_ms=5000&owner=a&owner=b",
               "ttl_ms=%35%30%30%30&wait_ms=%"]


@harness.scenario("acquire with a body that is not a JSON object returns 400 invalid_json and grants nothing")
def bad_json(ctx):
    for body in BAD_JSON_BODIES:
        key = ctx.key("bj")
        r = ctx.lockd.request("POST", path(key), body)
        expect_error(r, 400, "invalid_json", "acquire with body %r" % body)
        expect_free(ctx, key, "key after acquire with body %r" % body)


@harness.scenario("acquire with a wrong type, out-of-range value, unknown or duplicate field returns 400 invalid_parameter")
def bad_params(ctx):
    for body in BAD_PARAM_BODIES:
        key = ctx.key("bp")
        r = ctx.lockd.request("POST", path(key), body)
        # jansson refuses \u0000 at parse time: invalid_json is fair there
        codes = ("invalid_parameter", "invalid_json") if b"\\u0000" in body else "invalid_parameter"
        expect_error(r, 400, codes, "acquire with body %r" % body)
        expect_free(ctx, key, "key after acquire with body %r" % body)


@harness.scenario("acquire with a bad, unknown, valueless or repeated query parameter returns 400 invalid_parameter")
def bad_queries(ctx):
    for q in BAD_QUERIES:
        key = ctx.key("bq")
        r = req(ctx, "POST", key, query=q)
        expect_error(r, 400, "invalid_parameter", "acquire ?%s" % q)
        expect_free(ctx, key, "key after acquire ?%s" % q)


@harness.scenario("a field given in both the query and the body returns 400 invalid_parameter")
def query_and_body(ctx):
    for q, body in (("ttl_ms=5000", {"ttl_ms": 5000}), ("owner=a", {"owner": "a"}),
                    ("wait_ms=0", {"wait_ms": 0}), ("ttl_ms=5000", {"ttl_ms": 6000, "owner": "x"})):
        key = ctx.key("qb")
        expect_error(req(ctx, "POST", key, body, query=q), 400, "invalid_parameter",
                     "acquire ?%s with body %r" % (q, body))
        expect_free(ctx, key)


# ------------------------------------------------------------------- keys

@harness.scenario("a key with / is the same lock whether the slash is literal or %2F")
def key_slash(ctx):
    base = ctx.key("sl")
    key = base + "/orders/42"
    r = ctx.lockd.request("POST", "/locks/" + key, {"ttl_ms": 5000})
    g = expect_grant(r, key, 5000, what="acquire of /locks/" + key)
    r = ctx.lockd.request("POST", "/locks/" + key.replace("/", "%2F"))
    expect_error(r, 409, "lock_held", "acquire of the %2F spelling")
    r = ctx.lockd.request("POST", "/locks/" + base + "%2forders/42")
    expect_error(r, 409, "lock_held", "acquire of the mixed spelling")
    body = expect_json(ctx.lockd.request("GET", "/locks/" + key.replace("/", "%2F")), 200, "inspect")
    eq(body.get("key"), key, "inspect key")
    eq(body.get("fence"), g["fence"], "inspect fence")
    r = ctx.lockd.request("DELETE", "/locks/" + base + "%2Forders%2F42", headers={"Lock-Token": g["token"]})
    expect_json(r, 200, "release through %2F")
    expect_free(ctx, key)


@harness.scenario("keys are exact byte strings: no path, case or Unicode normalisation")
def key_exact(ctx):
    base = ctx.key("ex")
    # (path as sent, key lockd must see)
    spellings = [
        ("/locks/" + base + "/x", base + "/x"),
        ("/locks/" + base + "/../x", base + "/../x"),
        ("/locks/" + base + "/./x", base + "/./x"),
        ("/locks/" + base + "//x", base + "//x"),
        ("/locks/" + base + "/x/", base + "/x/"),
        ("/locks/" + base + "/X", base + "/X"),
        ("/locks/" + base + "/%C3%A9", base + "/\u00e9"),          # NFC
        ("/locks/" + base + "/e%CC%81", base + "/e\u0301"),        # NFD
        ("/locks/" + base + "/a+b", base + "/a+b"),
        ("/locks/" + base + "/a%20b", base + "/a b"),
        ("/locks/" + base + "/%2541", base + "/%41"),
        ("/locks/" + base + "/A", base + "/A"),
        ("/locks/" + base + "/..", base + "/.."),
        ("/locks/../" + base, "../" + base),
        ("/locks/" + base + "/%2E%2E%2Fetc", base + "/../etc"),
        ("/locks/" + base + "/%22q%22%5C%27%7B%7D%3C%3E%3F%23%26", base + "/\"q\"\\'{}<>?#&"),
        ("/locks/" + base + "/%C2%85", base + "/\u0085"),          # C1 is not a control char in API.md
    ]
    grants = {}
    for p, key in spellings:
        r = ctx.lockd.request("POST", p, {"ttl_ms": 10000})
        if key in grants:
            expect_error(r, 409, "lock_held", "acquire of %s (same key %r)" % (p, key))
            continue
        g = expect_grant(r, key, 10000, what="acquire of %s" % p)
        grants[key] = g
    eq(len(grants), len(set(k for _, k in spellings)), "distinct keys")
    for key, g in grants.items():
        body = expect_held(ctx, key, g["fence"], what="inspect of %r" % key)
        eq(body["key"], key, "key")
    for key, g in grants.items():
        release(ctx, key, g["token"])
        expect_free(ctx, key)


@harness.scenario("keys that look like store internals, wildcards or SQL are independent locks")
def key_injective(ctx):
    base = ctx.key("inj")
    keys = [base, base + " ", base + "  ", " " + base, base.upper(), base + ":fence", base + ":queue",
            base + ":q", "lockd:" + base, base + "{x}", "{" + base + "}", base + "*", base + "?", base + "[a]",
            base + "\\", base + "%", base + "_", base[:-1] + "_", base[:-1] + "%",
            base + "'; DROP TABLE lockd_locks; --", base + "\"", "/" + base, base + "/", base + "/.",
            base + "/x/../y", base + "\u00a0", base + "\u200b", base + "\uff21", base + "\U0001f512",
            "../../" + base, base + "/zk/../../", base + "\u0085"]
    grants = {}
    for k in keys:
        r = req(ctx, "POST", k, {"ttl_ms": 20000, "owner": k[:128]})
        grants[k] = expect_grant(r, k, 20000, what="acquire of %r" % k)
    for k, g in grants.items():
        expect_held(ctx, k, g["fence"], k[:128], "inspect of %r" % k)
    # releasing one leaves every other held
    first = keys[0]
    release(ctx, first, grants[first]["token"])
    for k in keys[1:]:
        expect_held(ctx, k, grants[k]["fence"], what="%r after releasing %r" % (k, first))
    expect_free(ctx, first)
    for k in keys[1:]:
        release(ctx, k, grants[k]["token"], what="release of %r" % k)
        expect_free(ctx, k, "%r after its release" % k)


@harness.scenario("Unicode keys round-trip exactly, percent-encoded or raw UTF-8 in the path")
def key_unicode(ctx):
    key = ctx.key("uni") + "/ключ/日本語/🔒/ä ö"
    g = acquire(ctx, key, ttl_ms=5000)
    target = b"/locks/" + key.replace(" ", "%20").encode("utf-8")
    resp = raw_response(ctx.lockd.port, http_request("GET", target))
    check(resp is not None, "no answer to a raw UTF-8 path")
    eq(resp[0], 200, "inspect through a raw UTF-8 path (body %r)" % resp[2][:200])
    body = raw_json(resp)
    eq(body.get("key"), key, "key")
    eq(body.get("fence"), g["fence"], "fence")
    release(ctx, key, g["token"])


@harness.scenario("a key of 512 bytes is accepted and 513 bytes is 400 invalid_key")
def key_length(ctx):
    base = ctx.key("len") + "/"
    cases = [
        (base + "x" * (512 - len(base)), 201),
        (base + "x" * (513 - len(base)), 400),
        (base + "x" * (509 - len(base)) + "€", 201),   # 512 bytes, 3-byte char at the end
        (base + "x" * (510 - len(base)) + "€", 400),   # 513 bytes
        (base + "x" * (508 - len(base)) + "🔒", 201),   # 512 bytes, 4-byte char
        (base + "x" * (4000 - len(base)), 400),
        ("Z", 201),  # the shortest key; released at once
    ]
    for key, status in cases:
        n = len(key.encode("utf-8"))
        r = req(ctx, "POST", key, {"ttl_ms": 5000})
        if status == 201:
            g = expect_grant(r, key, 5000, what="acquire of a %d-byte key" % n)
            release(ctx, key, g["token"])
        else:
            expect_error(r, 400, "invalid_key", "acquire of a %d-byte key" % n)
            expect_error(req(ctx, "GET", key), 400, "invalid_key", "inspect of a %d-byte key" % n)
    # 512 bytes written with percent-escapes: the limit is after decoding
    key = base + "y" * (512 - len(base))
    r = ctx.lockd.request("POST", "/locks/" + "".join("%%%02X" % b for b in key.encode()), {"ttl_ms": 5000})
    g = expect_grant(r, key, 5000, what="acquire of a 512-byte key spelled with 1536 chars of escapes")
    release(ctx, key, g["token"])


BAD_UTF8 = ["%FF", "%C3%28", "%C0%AF", "%E0%80%AF", "%ED%A0%80", "%ED%BF%BF", "%F4%90%80%80", "%E2%82",
            "%80", "%F8%88%80%80%80", "%FE", "%C1%BF"]
CONTROL = ["%00", "%01", "%09", "%0A", "%0D", "%1B", "%1F", "%7F"]
BAD_ESCAPES = ["%zz", "%4", "%", "%G1", "%%", "%2", "%%41", "%-1"]


@harness.scenario("keys with bad UTF-8, control characters or bad percent escapes return 400 invalid_key")
def key_invalid(ctx):
    base = ctx.key("inv")
    for kind, items in (("bad UTF-8", BAD_UTF8), ("control char", CONTROL), ("bad escape", BAD_ESCAPES)):
        for esc in items:
            for method in ("POST", "GET", "PUT", "DELETE"):
                p = "/locks/" + base + esc
                r = ctx.lockd.request(method, p, headers={"Lock-Token": "a" * 32})
                expect_error(r, 400, "invalid_key", "%s %s (%s)" % (method, p, kind))
        p = "/locks/" + esc
        expect_error(ctx.lockd.request("POST", p), 400, "invalid_key", "POST %s" % p)
    for p in ("/locks/",):
        for method in ("POST", "GET", "PUT", "DELETE"):
            expect_error(ctx.lockd.request(method, p, headers={"Lock-Token": "a" * 32}), 400, "invalid_key",
                         "%s %s" % (method, p))
    # raw bytes, not escaped: bad UTF-8 and a control char inside the path
    for raw_key in (base.encode() + b"\xff", base.encode() + b"\xc0\xaf"):
        resp = raw_response(ctx.lockd.port, http_request("POST", b"/locks/" + raw_key))
        check(resp is not None, "no answer to raw bad UTF-8 in the path")
        eq(resp[0], 400, "raw %r (body %r)" % (raw_key, resp[2][:200]))
        eq(raw_json(resp).get("error", {}).get("code"), "invalid_key", "code for raw %r" % raw_key)


# ------------------------------------------------------ routes, methods

@harness.scenario("unknown methods get 405 method_not_allowed with an Allow header")
def methods_405(ctx):
    key = ctx.key("m")
    for method in ("PATCH", "OPTIONS", "PROPFIND", "FOO", "TRACE"):
        r = req(ctx, method, key)
        expect_error(r, 405, "method_not_allowed", "%s /locks/key" % method)
        eq(r.header("Allow"), ALLOW_LOCKS, "Allow for %s /locks/key" % method)
    for p in ("/healthz", "/readyz", "/metrics"):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            r = ctx.lockd.request(method, p)
            expect_error(r, 405, "method_not_allowed", "%s %s" % (method, p))
            eq(r.header("Allow"), ALLOW_OPS, "Allow for %s %s" % (method, p))
    expect_free(ctx, key)


@harness.scenario("paths that are no route return 404 not_found")
def routes_404(ctx):
    for p in ("/", "/lock/x", "/locksx", "/LOCKS/x", "/Locks/x", "/healthz/x",
              "/metricsx", "/readyz/", "/favicon.ico", "//locks/x", "/v1/locks/x"):
        # POST /locks is the multi-key acquire (tests/e2e/test_multi.py)
        for method in ("GET", "POST") if not p.startswith("/locks") else ("GET",):
            expect_error(ctx.lockd.request(method, p), 404, "not_found", "%s %s" % (method, p))
    # a path under /locks/ that looks like a traversal is just a key
    expect_error(ctx.lockd.request("GET", "/locks/../healthz"), 404, "lock_not_found", "GET /locks/../healthz")


@harness.scenario("/healthz answers 200 status ok, GET and HEAD")
def healthz(ctx):
    r = ctx.lockd.request("GET", "/healthz")
    eq(expect_json(r, 200, "/healthz"), {"status": "ok"}, "/healthz body")
    r = ctx.lockd.request("HEAD", "/healthz")
    eq(r.status, 200, "HEAD /healthz")
    eq(r.body, b"", "HEAD /healthz body")


# What /readyz must say of a --backend URL: (topology, nodes, a word its
# fence phrase must hold, one its failover phrase must hold).
def readyz_expected(url):
    scheme, rest = url.split("://", 1)
    hosts = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    n = len(hosts.split(","))
    replicas = re.search(r"[?&]min_replicas=([1-9][0-9]*)", url) is not None
    if scheme == "memory":
        return "process", 0, "wall clock", "everything"
    if scheme == "redis":
        return "single", 1, "slot", "appendfsync"
    if scheme in ("redis+sentinel", "redis+cluster"):
        return scheme[6:], n, "slot", "replica" if replicas else "granted again"
    if scheme == "zookeeper":
        return ("ensemble", n, "czxid", "quorum") if n > 1 else ("single", 1, "czxid", "logged")
    if scheme == "mysql":
        return "single", 1, "AUTO_INCREMENT", "durability"
    if scheme == "redlock":
        return "redlock", n, "majority", "max TTL"
    raise harness.Fail("readyz: no expectation for %r" % url)


def check_readyz_topology(body, url, what):
    """body (a /readyz 200) names the topology of url and its guarantees."""
    topology, nodes, fence, failover = readyz_expected(url)
    # a store of independent nodes also says how many are up and vote
    several = {"nodes"} if url.startswith("redlock://") else set()
    eq(set(body), {"status", "backend", "fifo", "topology", "guarantees"} | several, what + ": fields")
    eq(body.get("topology"), topology, what + ": topology")
    g = body.get("guarantees")
    check(isinstance(g, dict), what + ": guarantees %r" % (g,))
    eq(set(g), {"fence", "failover", "nodes"}, what + ": guarantees fields")
    check(type(g["nodes"]) is int, what + ": nodes %r" % (g["nodes"],))
    eq(g["nodes"], nodes, what + ": nodes")
    for name, word in (("fence", fence), ("failover", failover)):
        check(isinstance(g[name], str) and word in g[name], "%s: %s %r lacks %r" % (what, name, g[name], word))


@harness.scenario("/readyz answers 200 ready with the backend name, fifo scope, topology and guarantees")
def readyz(ctx):
    r = ctx.lockd.request("GET", "/readyz")
    body = expect_json(r, 200, "/readyz")
    eq(body.get("status"), "ready", "status")
    eq(body.get("backend"), ctx.backend, "backend")
    check(body.get("fifo") in ("store", "instance"), "fifo %r" % body.get("fifo"))
    check_readyz_topology(body, ctx.url, "/readyz")
    r = ctx.lockd.request("HEAD", "/readyz")
    eq(r.status, 200, "HEAD /readyz")


@harness.scenario("/readyz counts the URL's hosts: two ZooKeeper hosts are an ensemble", backends=["zookeeper"])
def readyz_zookeeper_hosts(ctx):
    # the one server named twice: what is checked is the reading of the URL
    m = re.match(r"zookeeper://([^/?]+)(.*)$", ctx.url)
    url = "zookeeper://%s,%s%s" % (m.group(1), m.group(1), m.group(2))
    ld = harness.Lockd(url, tmpdir=ctx.tmpdir)
    ctx.extra.append(ld)
    ld.start()
    body = expect_json(ld.request("GET", "/readyz", timeout=10), 200, "/readyz with two hosts")
    check_readyz_topology(body, url, "/readyz with two hosts")


@harness.scenario("/metrics is Prometheus text with every documented family")
def metrics_format(ctx):
    r = ctx.lockd.request("GET", "/metrics")
    eq(r.status, 200, "/metrics status")
    eq((r.header("Content-Type") or "").replace(" ", ""), "text/plain;version=0.0.4;charset=utf-8",
       "/metrics Content-Type")
    check(r.header("X-Request-Id"), "/metrics has no X-Request-Id")
    check(r.text.endswith("\n"), "exposition does not end with a newline")
    samples, types = parse_metrics(r.text)
    want = {"lockd_build_info": "gauge", "lockd_http_requests_total": "counter",
            "lockd_http_request_duration_seconds": "histogram", "lockd_lock_grants_total": "counter",
            "lockd_lock_renewals_total": "counter", "lockd_lock_releases_total": "counter",
            "lockd_lock_expiries_total": "counter", "lockd_lock_conflicts_total": "counter",
            "lockd_waiters": "gauge", "lockd_backend_operations_total": "counter",
            "lockd_backend_errors_total": "counter",
            "lockd_backend_operation_duration_seconds": "histogram"}
    for name, typ in want.items():
        eq(types.get(name), typ, "TYPE of " + name)
    bi = [(lab, v) for (n, lab), v in samples.items() if n == "lockd_build_info"]
    eq(len(bi), 1, "lockd_build_info samples")
    labels = dict(bi[0][0])
    eq(labels.get("backend"), ctx.backend, "lockd_build_info backend")
    check(re.match(r"^\d+\.\d+\.\d+", labels.get("version", "")), "lockd_build_info version %r" % labels)
    eq(bi[0][1], 1.0, "lockd_build_info value")
    # histograms: cumulative buckets ending in +Inf == _count
    for fam in ("lockd_http_request_duration_seconds", "lockd_backend_operation_duration_seconds"):
        series = {}
        for (n, lab), v in samples.items():
            if n == fam + "_bucket":
                d = dict(lab)
                le = d.pop("le")
                series.setdefault(tuple(sorted(d.items())), []).append((math.inf if le == "+Inf" else float(le), v))
        check(series, "no buckets for " + fam)
        for lab, buckets in series.items():
            buckets.sort()
            eq(buckets[-1][0], math.inf, fam + " last bucket")
            for (_, a), (_, b) in zip(buckets, buckets[1:]):
                check(a <= b, "%s%r buckets not cumulative" % (fam, lab))
            eq(buckets[-1][1], samples.get((fam + "_count", lab)), "%s%r +Inf bucket vs _count" % (fam, lab))
            check((fam + "_sum", lab) in samples, "%s%r has no _sum" % (fam, lab))
    routes = {dict(lab).get("route") for (n, lab) in samples if n == "lockd_http_requests_total"}
    check(routes <= {"acquire", "renew", "release", "inspect", "acquire_multi", "renew_multi",
                     "release_multi", "healthz", "readyz", "metrics", "other"},
          "unknown route labels %r" % routes)
    if ctx.backend == "memory":
        check(has_metric(samples, "lockd_locks_held"), "memory: no lockd_locks_held gauge")


@harness.scenario("/metrics counters move after traffic")
def metrics_move(ctx):
    before = metrics(ctx)
    key = ctx.key("met")
    g = acquire(ctx, key, ttl_ms=5000)
    held_mid = metrics(ctx)
    expect_error(req(ctx, "POST", key), 409, "lock_held")
    expect_grant(req(ctx, "PUT", key, headers={"Lock-Token": g["token"]}), key, 5000, status=200, what="renew")
    release(ctx, key, g["token"])
    expect_free(ctx, key)
    ctx.lockd.request("GET", "/nope")
    after = metrics(ctx)

    def d(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    for name, want in (("lockd_lock_grants_total", 1), ("lockd_lock_conflicts_total", 1),
                       ("lockd_lock_renewals_total", 1), ("lockd_lock_releases_total", 1)):
        check(d(name) >= want, "%s moved by %r, want >= %d" % (name, d(name), want))
    for route, status, want in (("acquire", "201", 1), ("acquire", "409", 1), ("renew", "200", 1),
                                ("release", "200", 1), ("inspect", "404", 1), ("other", "404", 1),
                                ("metrics", "200", 1)):
        got = d("lockd_http_requests_total", route=route, status=status)
        check(got >= want, "lockd_http_requests_total{route=%s,status=%s} moved by %r" % (route, status, got))
    got = d("lockd_http_request_duration_seconds_count", route="acquire")
    check(got >= 2, "acquire latency histogram count moved by %r" % got)
    for op in ("acquire", "renew", "release", "inspect"):
        got = d("lockd_backend_operations_total", op=op)
        check(got >= 1, "lockd_backend_operations_total{op=%s} moved by %r" % (op, got))
        check(has_metric(after, "lockd_backend_operations_total", backend=ctx.backend, op=op),
              "no lockd_backend_operations_total{backend=%s,op=%s}" % (ctx.backend, op))
    # on ZooKeeper the count is the keeper's last sweep pass (documented):
    # it is there, but need not have moved yet
    if has_metric(before, "lockd_locks_held") and ctx.backend != "zookeeper":
        check(metric(held_mid, "lockd_locks_held") >= metric(before, "lockd_locks_held") + 1,
              "lockd_locks_held did not count the held lock")
    elif ctx.backend == "zookeeper":
        check(has_metric(held_mid, "lockd_locks_held"), "no lockd_locks_held on zookeeper")


@harness.scenario("lockd_lock_expiries_total counts a lock that expired", backends=["memory"])
def metrics_expiry(ctx):
    before = metric(metrics(ctx), "lockd_lock_expiries_total")
    key = ctx.key("mexp")
    acquire(ctx, key, ttl_ms=100)
    time.sleep(0.4)
    expect_free(ctx, key)
    after = metric(metrics(ctx), "lockd_lock_expiries_total")
    check(after >= before + 1, "lockd_lock_expiries_total %r -> %r" % (before, after))


@harness.scenario("X-Request-Id is echoed when valid and generated otherwise, on every response")
def request_id(ctx):
    key = ctx.key("rid")
    for p, method in ((path(key), "GET"), ("/healthz", "GET"), ("/nope", "GET"), ("/healthz", "POST"),
                      (path(key), "PATCH"), ("/locks/%zz", "GET"), ("/metrics", "GET")):
        r = ctx.lockd.request(method, p, headers={"X-Request-Id": "req-abc.123_XYZ:9/~"})
        eq(r.header("X-Request-Id"), "req-abc.123_XYZ:9/~", "X-Request-Id of %s %s" % (method, p))
    ids = set()
    for _ in range(5):
        rid = ctx.lockd.request("GET", "/healthz").header("X-Request-Id")
        check(rid and 1 <= len(rid) <= 128 and all(33 <= ord(c) < 127 for c in rid),
              "generated X-Request-Id %r" % rid)
        ids.add(rid)
    eq(len(ids), 5, "distinct generated request ids")
    eq(ctx.lockd.request("GET", "/healthz", headers={"X-Request-Id": "a" * 128}).header("X-Request-Id"),
       "a" * 128, "128-char X-Request-Id")
    for bad in ("a" * 129, "has space", "tab\there"):
        got = ctx.lockd.request("GET", "/healthz", headers={"X-Request-Id": bad}).header("X-Request-Id")
        check(got and got != bad, "invalid X-Request-Id %r was echoed (%r)" % (bad, got))
        check(1 <= len(got) <= 128 and " " not in got, "generated id %r" % got)
    resp = raw_response(ctx.lockd.port, http_request("GET", "/healthz", headers={"X-Request-Id": b"caf\xc3\xa9"}))
    check(resp is not None and resp[0] == 200, "healthz with a non-ASCII request id")
    check(resp[1].get("x-request-id") and resp[1]["x-request-id"].encode("latin-1") != b"caf\xc3\xa9",
          "non-ASCII X-Request-Id echoed")


@harness.scenario("every response is JSON with Content-Type application/json, except /metrics")
def content_types(ctx):
    key = ctx.key("ct")
    g = acquire(ctx, key, ttl_ms=5000)
    seen = set()
    for method, p, body, headers in (
            ("GET", path(key), None, None), ("POST", path(key), None, None),
            ("PUT", path(key), None, {"Lock-Token": g["token"]}), ("GET", "/healthz", None, None),
            ("GET", "/readyz", None, None), ("GET", "/x", None, None), ("PATCH", path(key), None, None),
            ("POST", path(key), b"[", None), ("DELETE", path(key), None, None),
            ("POST", path(key), b"{" + b" " * 9000 + b"}", None), ("GET", "/locks/", None, None),
            ("PUT", path(key), None, {"Lock-Token": "0" * 32}),
            ("DELETE", path(key), None, {"Lock-Token": g["token"]}),
            ("PUT", path(key), None, {"Lock-Token": g["token"]})):
        r = ctx.lockd.request(method, p, body, headers)
        expect_json(r, r.status, "%s %s" % (method, p))
        seen.add(r.status)
    # the list reaches every kind of answer, errors included
    eq(sorted(seen), [200, 400, 404, 405, 409, 413], "statuses met")


@harness.scenario("HTTP/1.0, keep-alive, chunked bodies and pipelined requests are served")
def http_framing(ctx):
    key = ctx.key("h10")
    resp = raw_response(ctx.lockd.port, http_request("POST", path(key), b'{"ttl_ms":3000}', version="HTTP/1.0"))
    check(resp is not None, "no answer to HTTP/1.0")
    eq(resp[0], 201, "HTTP/1.0 acquire (%r)" % (resp[2][:200],))
    g = raw_json(resp)
    release(ctx, key, g["token"])
    # chunked body
    key = ctx.key("chunk")
    body = b'{"ttl_ms":3333,"owner":"chunked"}'
    data = (b"POST " + path(key).encode() + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\n" + b"%x\r\n" % 10 + body[:10] + b"\r\n"
            + b"%x\r\n" % (len(body) - 10) + body[10:] + b"\r\n0\r\n\r\n")
    resp = raw_response(ctx.lockd.port, data)
    check(resp is not None, "no answer to a chunked body")
    eq(resp[0], 201, "chunked acquire (%r)" % (resp[2][:200],))
    g = raw_json(resp)
    check_ttl_left(g.get("ttl_ms"), 3333, "ttl_ms from a chunked body")
    expect_held(ctx, key, g["fence"], "chunked")
    # pipelined: three requests in one write, three answers in order
    data = (http_request("GET", path(key)) + http_request("DELETE", path(key), headers={"Lock-Token": g["token"]})
            + http_request("GET", path(key)))
    s = socket.create_connection(("127.0.0.1", ctx.lockd.port), timeout=5)
    try:
        s.sendall(data)
        buf = b""
        answers = []
        deadline = time.monotonic() + 5
        while len(answers) < 3 and time.monotonic() < deadline:
            p = parse_http(buf)
            if p is not None:
                answers.append(p[:3])
                buf = p[3]
                continue
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    eq([a[0] for a in answers], [200, 200, 404], "statuses of three pipelined requests")
    # keep-alive: many requests on one connection
    c = ctx.lockd.client(timeout=10)
    try:
        for _ in range(20):
            eq(c.request("GET", "/healthz").status, 200, "keep-alive healthz")
    finally:
        c.close()


# ------------------------------------------------------ data-driven cases
#
# tests/data/requests/<case>/{request,expect}, the one set of cases that
# tests/unit/test_codec.c also runs through the router (format in
# tests/data/README.md). Here each is sent as raw bytes to the running
# lockd, with a fresh key for @KEY@.

EXPECT_KEYS = ("status", "code", "setup", "after", "keep_newline", "only")


def load_case(d):
    """(method, target, headers as [(name, value)], body, expect) of the
    case in directory d."""
    with open(os.path.join(d, "request"), "rb") as f:
        text = f.read()
    with open(os.path.join(d, "expect"), "r", encoding="utf-8") as f:
        expect = {}
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, _, v = line.partition(" ")
                check(k not in expect, "%s/expect: %s given twice" % (os.path.basename(d), k))
                expect[k] = v.strip()
    head, sep, body = text.partition(b"\n\n")
    if not sep and head.endswith(b"\n"):
        head = head[:-1]
    lines = head.split(b"\n")
    method, _, target = lines[0].partition(b" ")
    headers = []
    for h in lines[1:]:
        k, _, v = h.partition(b":")
        headers.append((k.strip().decode(), v.strip()))
    if body.endswith(b"\n") and expect.get("keep_newline") != "yes":
        body = body[:-1]
    return method.decode(), target, headers, body, expect


def case_errors(target, expect):
    """What is wrong with a case's files: a misspelt or meaningless
    expectation would silently check nothing."""
    errors = []
    unknown = [k for k in expect if k not in EXPECT_KEYS and not k.startswith(("json.", "header."))]
    if unknown:
        errors.append("unknown expect keys %s" % unknown)
    if not re.match(r"^[1-5]\d\d$", expect.get("status", "")):
        errors.append("expect: no status")
    for k, values in (("after", ("held", "free")), ("setup", ("held",)), ("only", ("http", "codec")),
                      ("keep_newline", ("yes",))):
        if k in expect and expect[k] not in values:
            errors.append("expect: %s %r" % (k, expect[k]))
    if ("setup" in expect or "after" in expect) and not re.match(rb"^/locks/@KEY@(\?|$)", target):
        errors.append("setup and after need the target /locks/@KEY@")
    return errors


def run_case(ctx, name, method, target, headers, body, expect):
    """Send the case; the list of what differs from its expect file."""
    key = ctx.key("dd")
    target = target.replace(b"@KEY@", quote(key).encode())
    expect = {k: v.replace("@KEY@", key) for k, v in expect.items()}
    g = None
    if expect.get("setup") == "held":
        g = acquire(ctx, key, ttl_ms=10000)
        tok = g["token"].encode()
        target = target.replace(b"@TOKEN@", tok)
        body = body.replace(b"@TOKEN@", tok)
        headers = [(k, v.replace(b"@TOKEN@", tok)) for k, v in headers]
    check(b"@TOKEN@" not in target + body + b"".join(v for _, v in headers),
          "%s: @TOKEN@ without setup held" % name)
    resp = raw_response(ctx.lockd.port, http_request(method, target, body, headers))
    problems = []
    j = None
    if resp is None:
        problems.append("no answer")
    else:
        status, hdrs, rbody = resp
        if str(status) != expect.get("status"):
            problems.append("status %d, want %s (body %r)" % (status, expect.get("status"), rbody[:200]))
        try:
            j = json.loads(rbody.decode("utf-8"))
        except ValueError:
            problems.append("body is not JSON: %r" % rbody[:200])
        if "code" in expect:
            got = j.get("error", {}).get("code") if isinstance(j, dict) else None
            if got != expect["code"]:
                problems.append("code %r, want %s" % (got, expect["code"]))
        for k, v in expect.items():
            if k.startswith("json."):
                field = k[5:]
                want = json.loads(v)
                got = j.get(field) if isinstance(j, dict) else None
                if field == "ttl_ms" and isinstance(got, int) and isinstance(want, int):
                    # what is left of the TTL when lockd answered
                    if not (1 <= got <= want and got > want - 1000):
                        problems.append("ttl_ms = %r, want what is left of %r" % (got, want))
                elif not isinstance(j, dict) or field not in j or got != want:
                    problems.append("%s = %r, want %r" % (field, got, want))
            if k.startswith("header."):
                if hdrs.get(k[7:].lower()) != v:
                    problems.append("header %s = %r, want %r" % (k[7:], hdrs.get(k[7:].lower()), v))
    if expect.get("after") == "held":
        r = inspect(ctx, key)
        if r.status != 200 or (g is not None and r.json.get("fence") != g["fence"]):
            problems.append("lock not held %safterwards: %r" % ("as before " if g else "", r))
    elif expect.get("after") == "free":
        if inspect(ctx, key).status != 404:
            problems.append("key not free afterwards")
    # leave no lock behind: the setup's, or the one the case was granted
    if g is not None:
        ctx.lockd.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
    if resp is not None and resp[0] == 201 and isinstance(j, dict) and "key" in j and "token" in j:
        ctx.lockd.request("DELETE", path(j["key"]), headers={"Lock-Token": j["token"]})
    return problems


@harness.scenario("data-driven request cases in tests/data/requests answer as expected")
def data_cases(ctx):
    cases = sorted(d for d in os.listdir(DATA_DIR)) if os.path.isdir(DATA_DIR) else []
    check(len(cases) >= 10, "only %d cases in %s" % (len(cases), DATA_DIR))
    failures = []
    sent = codec_only = 0
    for name in cases:
        method, target, headers, body, expect = load_case(os.path.join(DATA_DIR, name))
        errors = case_errors(target, expect)
        if errors:
            failures.append("%s: %s" % (name, "; ".join(errors)))
            continue
        if expect.get("only") == "codec":
            codec_only += 1
            continue
        problems = run_case(ctx, name, method, target, headers, body, expect)
        sent += 1
        if problems:
            failures.append("%s: %s" % (name, "; ".join(problems)))
    harness.log("     %d of %d cases sent, %d only for the codec" % (sent, len(cases), codec_only))
    check(sent >= 10, "only %d cases sent over HTTP" % sent)
    check(not failures, "%d data-driven cases failed:\n  %s" % (len(failures), "\n  ".join(failures)))


# ------------------------------------------------ backend_unavailable

@harness.scenario("a paused store gives 503 backend_unavailable with Retry-After 1, never a grant, and recovers",
                  backends=["redis", "redlock", "zookeeper", "mysql"], slow=True)
def store_paused(ctx):
    key = ctx.key("down")
    g = acquire(ctx, key, ttl_ms=60000)
    free = ctx.key("down")
    ctx.server.pause()
    try:
        t0 = time.monotonic()
        r = req(ctx, "POST", free, {"ttl_ms": 5000}, timeout=15)
        check(time.monotonic() - t0 < 6.0, "acquire on a paused store took %.1f s" % (time.monotonic() - t0))
        expect_error(r, 503, "backend_unavailable", "acquire on a paused store")
        eq(r.header("Retry-After"), "1", "Retry-After of 503")
        r = ctx.lockd.request("GET", "/readyz", timeout=15)
        body = expect_json(r, 503, "/readyz on a paused store")
        eq(body.get("status"), "unavailable", "readyz status")
        check(isinstance(body.get("reason"), str) and body["reason"], "readyz reason")
        eq(body.get("backend"), ctx.backend, "readyz backend")
        # a waiting acquire whose last attempt met the unavailable store: 503 at its deadline, not 409
        r = req(ctx, "POST", free, {"ttl_ms": 5000, "wait_ms": 1500}, timeout=20)
        expect_error(r, 503, "backend_unavailable", "waiting acquire on a paused store")
    finally:
        ctx.server.resume()
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if ctx.lockd.request("GET", "/readyz", timeout=15).status == 200:
            break
        time.sleep(0.2)
    eq(ctx.lockd.request("GET", "/readyz").status, 200, "readyz after the store came back")
    # an acquire answered 503 at its bound may still have been run by the
    # store once it came back (a call still in flight then, retried on a
    # new connection): lockd releases such a grant at once. So the key may
    # show held for a moment, even after it was seen free, but never for
    # long: a grant nobody releases would stay for its 5 s TTL
    end = time.monotonic() + 3.0
    held_since = None
    while time.monotonic() < end:
        now = time.monotonic()
        if inspect(ctx, free).status == 404:
            held_since = None
        elif held_since is None:
            held_since = now
        else:
            check(now - held_since < 1.0, "the key asked for while the store was paused "
                  "stayed held %.1f s after the store came back" % (now - held_since))
        time.sleep(0.02)
    end = time.monotonic() + 1.0
    while inspect(ctx, free).status != 404 and time.monotonic() < end:
        time.sleep(0.02)
    expect_free(ctx, free, "the key asked for while the store was paused")
    expect_held(ctx, key, g["fence"], what="a lock held across the pause")
    release(ctx, key, g["token"])

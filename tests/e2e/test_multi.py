"""tests/e2e/test_multi.py - several keys at once (POST, PUT and DELETE
/locks with "keys") over real HTTP, on every backend, through two lockd
instances where the store is shared (one on memory://):

- strictness: every malformed request gets its exact 400 code and changes
  nothing (a canary key and a multi-key holder untouched, free keys left
  free); GET /locks is the list of held keys (tests/e2e/test_operator.py);
- the grant's body (keys in request order, one token, a fence per key above
  every earlier grant of that key), each key afterwards an ordinary lock
  (inspect, single renew, re-entry, release), release of a partial set;
- all or nothing: one key held gives 409 naming exactly the held keys and
  takes none of the others; renew of a set with a key lost renews nothing
  and names the first key not held;
- waiting: a multi-key waiter holds none of its keys, is granted within
  250 ms of its last key's release (or expiry), through either instance, and
  a try-once multi-key acquire never overtakes a queued single-key waiter;
- load: 16 clients taking random overlapping key sets and single keys
  through two instances: per-key hold intervals never overlap, every grant
  covers all its keys, every wait is answered by its bound, no pause;
- kill -9 of the instance that granted (persistent stores): every key held
  until its TTL, then all free;
- how a key kept busy by single-key clients delays a multi-key waiter
  (measured and logged: the README quotes it).

Keys always come from ctx.key().
"""

import math
import random
import threading
import time

import harness
from client import (TOKEN_RE, check_fence, check_ttl_left, expect_error, expect_free, expect_json, metric, metrics,
                    parse_expires, path)
from harness import check, eq

M = "/locks"
BAD = (400, "invalid_parameter")
WAKE_BOUND = 0.25  # s: a waiter is granted within this of its last key's release
WAIT_MARGIN = 1.0  # s: a wait is answered by wait_ms plus this (a loaded 2-core machine)
GRANT_FIELDS = {"keys", "token", "fences", "ttl_ms", "expires_at"}


# ---------------------------------------------------------------- helpers

def instances(ctx):
    """Two instances on one store; memory:// is one store per process."""
    if ctx.backend == "memory":
        return [ctx.lockd]
    return [ctx.lockd, ctx.new_lockd()]


def mreq(on, method, body=None, headers=None, query=None):
    """A request to /locks through a Lockd or a kept-alive Client; body: a
    dict (sent as JSON), a str or bytes (sent as they are) or None."""
    if isinstance(body, str):
        body = body.encode()
    hdrs = dict(headers or {})
    if body is not None:
        hdrs.setdefault("Content-Type", "application/json")
    return on.request(method, M + ("" if query is None else "?" + query), body, hdrs)


def macquire(on, keys, ttl_ms=10000, wait_ms=None, owner=None):
    body = {"keys": list(keys), "ttl_ms": ttl_ms}
    if wait_ms is not None:
        body["wait_ms"] = wait_ms
    if owner is not None:
        body["owner"] = owner
    return mreq(on, "POST", body)


def mrelease(on, keys, token):
    return mreq(on, "DELETE", {"keys": list(keys), "token": token})


def expect_mgrant(r, keys, ttl_ms=None, status=201, what="multi-key grant"):
    """A multi-key grant (201) or renewal (200): exactly its fields, the keys
    in request order, a token, one fence per key, ttl_ms what is left of
    ttl_ms, expires_at about now + ttl_ms."""
    body = expect_json(r, status, what)
    eq(set(body), GRANT_FIELDS, what + " fields")
    eq(body["keys"], list(keys), what + " keys (in request order)")
    check(isinstance(body["token"], str) and TOKEN_RE.match(body["token"]),
          "%s token %r is not 32 lowercase hex chars" % (what, body["token"]))
    fences = body["fences"]
    check(isinstance(fences, dict), "%s fences %r is not an object" % (what, fences))
    eq(sorted(fences), sorted(keys), what + " fences' keys")
    for k in keys:
        check_fence(fences[k], "%s fence of %r" % (what, k))
    if ttl_ms is not None:
        check_ttl_left(body["ttl_ms"], ttl_ms, what + " ttl_ms")
    ttl = body["ttl_ms"]
    check(isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 1, "%s ttl_ms %r" % (what, ttl))
    exp = parse_expires(body["expires_at"])
    now = time.time()
    check(now + ttl / 1000.0 - 3.0 <= exp <= now + ttl / 1000.0 + 1.0,
          "%s expires_at %s is not now + ttl_ms (%d ms): off by %.3f s"
          % (what, body["expires_at"], ttl, exp - (now + ttl / 1000.0)))
    return body


def expect_mheld(r, held, what="multi-key acquire", ttl_max=None):
    """409 lock_held naming exactly the keys held, in request order, with
    retry_after_ms and Retry-After."""
    err = expect_error(r, 409, "lock_held", what)
    eq(err.get("held"), list(held), what + ": held")
    ra = err.get("retry_after_ms")
    check(isinstance(ra, int) and not isinstance(ra, bool) and ra >= 1, "%s retry_after_ms %r" % (what, ra))
    if ttl_max is not None:
        check(ra <= ttl_max, "%s retry_after_ms %r above the holders' TTL %d" % (what, ra, ttl_max))
    eq(r.header("Retry-After"), str(max(1, math.ceil(ra / 1000.0))), what + ": Retry-After")
    return err


def expect_mreleased(r, released, not_held, what="multi-key release"):
    body = expect_json(r, 200, what)
    eq(body, {"released": list(released), "not_held": list(not_held)}, what + " body")
    return body


def single(on, method, key, body=None, headers=None):
    hdrs = dict(headers or {})
    if body is not None:
        hdrs.setdefault("Content-Type", "application/json")
    return on.request(method, path(key), body, hdrs)


def sgrant(on, key, what="single acquire", **body):
    r = single(on, "POST", key, body or None)
    b = expect_json(r, 201, what + " of " + key)
    eq(b.get("key"), key, what + " key")
    return b


def srelease(on, key, token, what="single release"):
    r = single(on, "DELETE", key, headers={"Lock-Token": token})
    return expect_json(r, 200, what + " of " + key)


def inspect(on, key, what="inspect"):
    return expect_json(single(on, "GET", key), 200, what + " of " + key)


def snapshot(on, key):
    """What a rejected request must not change: the inspect answer without
    the remaining TTLs (they run down), and its expires_at."""
    r = single(on, "GET", key)
    if r.status == 404:
        return None, None
    b = dict(expect_json(r, 200, "inspect for a snapshot of " + key))
    exp = parse_expires(b.pop("expires_at"))
    b.pop("ttl_ms", None)
    b["holders"] = [{k: v for k, v in h.items() if k not in ("ttl_ms", "expires_at")}
                    for h in b.get("holders", [])]
    return b, exp


def same_state(on, key, before, what):
    body, exp = snapshot(on, key)
    eq(body, before[0], "%s: %s after it" % (what, key))
    if exp is not None:
        check(abs(exp - before[1]) <= 0.5, "%s: expires_at of %s moved by %.3f s" % (what, key, exp - before[1]))


def waiters_now(ld):
    try:
        return metric(metrics(None, ld), "lockd_waiters")
    except Exception:  # noqa: BLE001 - the gauge is a hint here, not the subject
        return None


def wait_parked(ld, want, timeout=2.0):
    """Until ld's lockd_waiters reaches want (bounded); then a short settle."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = waiters_now(ld)
        if n is None or n >= want:
            break
        time.sleep(0.02)
    time.sleep(0.05)


class MWaiter(threading.Thread):
    """One multi-key acquire on its own connection, in a thread; records when
    the answer came."""

    def __init__(self, ld, keys, wait_ms, ttl_ms=10000):
        super().__init__(daemon=True)
        self.ld, self.keys, self.wait_ms, self.ttl_ms = ld, list(keys), wait_ms, ttl_ms
        self.resp = self.error = self.t_sent = self.t_done = None

    def run(self):
        try:
            c = self.ld.client(timeout=self.wait_ms / 1000.0 + 20)
            try:
                self.t_sent = time.monotonic()
                self.resp = macquire(c, self.keys, ttl_ms=self.ttl_ms, wait_ms=self.wait_ms)
                self.t_done = time.monotonic()
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001 - reported by the scenario
            self.error = e

    def result(self, timeout=20.0):
        self.join(timeout)
        check(not self.is_alive(), "multi-key waiter on %s still waiting after %.0f s" % (self.keys, timeout))
        check(self.error is None, "multi-key waiter on %s failed: %r" % (self.keys, self.error))
        return self.resp


class SingleWaiter(threading.Thread):
    """One single-key waiting acquire on its own connection, in a thread."""

    def __init__(self, ld, key, wait_ms, ttl_ms=5000):
        super().__init__(daemon=True)
        self.ld, self.key, self.wait_ms, self.ttl_ms = ld, key, wait_ms, ttl_ms
        self.resp = self.error = self.t_done = None

    def run(self):
        try:
            c = self.ld.client(timeout=self.wait_ms / 1000.0 + 20)
            try:
                self.resp = single(c, "POST", self.key, {"ttl_ms": self.ttl_ms, "wait_ms": self.wait_ms})
                self.t_done = time.monotonic()
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001 - reported by the scenario
            self.error = e

    def result(self, timeout=20.0):
        self.join(timeout)
        check(not self.is_alive(), "waiter on %s still waiting after %.0f s" % (self.key, timeout))
        check(self.error is None, "waiter on %s failed: %r" % (self.key, self.error))
        return self.resp


def check_exclusion(holds, what):
    """holds: (t_granted_seen, t_release_sent, fence) of one key. What a
    client sees lies inside the real hold, so those intervals never overlap,
    and the later hold has the greater fence."""
    holds = sorted(holds)
    for a, b in zip(holds, holds[1:]):
        check(a[1] <= b[0], "%s: holds overlap: %r and %r" % (what, a, b))
        check(b[2] > a[2], "%s: fence did not grow: %r then %r" % (what, a, b))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


# ------------------------------------------------------------- strictness

def bad_posts(free, canary):
    """(what, body, query, headers, code, bad index) of multi-key acquires
    that are 400 whatever the keys' state; free: two free keys."""
    f = list(free)
    ok = {"keys": f, "ttl_ms": 5000}
    many = ["%s-%d" % (f[0], i) for i in range(65)]
    cases = [
        ("a query parameter", ok, "ttl_ms=5", None),
        ("wait_ms in the query", ok, "wait_ms=0", None),
        ("keys in the query", {"ttl_ms": 5000}, "keys=" + f[0], None),
        ("an unknown field", {"keys": f, "ttl": 5}, None, None),
        ("mode", {"keys": f, "mode": "shared"}, None, None),
        ("limit", {"keys": f, "limit": 2}, None, None),
        ("token", {"keys": f, "token": "0" * 32}, None, None),
        ("key", {"keys": f, "key": f[0]}, None, None),
        ("no keys", {"ttl_ms": 5000}, None, None),
        ("keys a string", {"keys": f[0]}, None, None),
        ("keys an object", {"keys": {f[0]: 1}}, None, None),
        ("keys null", {"keys": None}, None, None),
        ("keys a number", {"keys": 2}, None, None),
        ("keys empty", {"keys": []}, None, None),
        ("65 keys", {"keys": many}, None, None),
        ("a number among the keys", {"keys": [f[0], 1]}, None, None),
        ("null among the keys", {"keys": [f[0], None]}, None, None),
        ("an array among the keys", {"keys": [f[0], [f[1]]]}, None, None),
        ("an object among the keys", {"keys": [{"k": f[1]}, f[0]]}, None, None),
        ("true as a key", {"keys": [True]}, None, None),
        ("a repeated key", {"keys": [f[0], f[0]]}, None, None),
        ("a key repeated further on", {"keys": [f[0], f[1], f[0]]}, None, None),
        ("keys twice", '{"keys":["%s"],"keys":["%s"]}' % (f[0], f[1]), None, None),
        ("ttl_ms 0", {"keys": f, "ttl_ms": 0}, None, None),
        ("ttl_ms a string", {"keys": f, "ttl_ms": "5"}, None, None),
        ("ttl_ms over --max-ttl-ms", {"keys": f, "ttl_ms": 86400001}, None, None),
        ("wait_ms -1", {"keys": f, "wait_ms": -1}, None, None),
        ("wait_ms over --max-wait-ms", {"keys": f, "wait_ms": 300001}, None, None),
        ("wait_ms 1.0", '{"keys":["%s"],"wait_ms":1.0}' % f[0], None, None),
        ("owner a number", {"keys": f, "owner": 5}, None, None),
        ("owner of 129 bytes", {"keys": f, "owner": "o" * 129}, None, None),
        ("an Idempotency-Key", ok, None, {"Idempotency-Key": "multi-1"}),
        ("a held key and an unknown field", {"keys": [canary, f[0]], "ttl": 5}, None, None),
        ("a held key and a query parameter", {"keys": [f[0], canary]}, "owner=x", None),
    ]
    out = [(w, b, q, h, "invalid_parameter", None) for w, b, q, h in cases]
    out += [
        ("an empty key", {"keys": [f[0], ""]}, None, None, "invalid_key", 1),
        ("a 513-byte key", {"keys": [f[0], f[1], "k" * 513]}, None, None, "invalid_key", 2),
        ("a control character in a key", {"keys": ["a\u0001b", f[0]]}, None, None, "invalid_key", 0),
        ("DEL in a key", {"keys": [f[0], "a\u007f"]}, None, None, "invalid_key", 1),
        ("an array body", "[]", None, None, "invalid_json", None),
        ("junk", "keys=a", None, None, "invalid_json", None),
        ("junk after the object", '{"keys":["%s"]} x' % f[0], None, None, "invalid_json", None),
    ]
    return out


def bad_renews_releases(keys, token, other):
    """(what, method, body, query, headers, code, bad index) of multi-key
    renews and releases of keys (held by token) that are 400."""
    k = list(keys)
    lt = {"Lock-Token": token}
    cases = []
    for m in ("PUT", "DELETE"):
        cases += [
            (m + " without a token", m, {"keys": k}, None, None, "missing_token", None),
            (m + " with an empty token", m, {"keys": k, "token": ""}, None, None, "missing_token", None),
            (m + " with the token in the header and the body", m, {"keys": k, "token": token}, None, lt,
             "invalid_parameter", None),
            (m + " with the token in the query", m, {"keys": k}, "token=" + token, None, "invalid_parameter", None),
            (m + " with a query parameter", m, {"keys": k, "token": token}, "x=1", None, "invalid_parameter", None),
            (m + " without keys", m, {"token": token}, None, None, "invalid_parameter", None),
            (m + " with keys empty", m, {"keys": [], "token": token}, None, None, "invalid_parameter", None),
            (m + " with a repeated key", m, {"keys": k + [k[0]], "token": token}, None, None,
             "invalid_parameter", None),
            (m + " with a number among the keys", m, {"keys": [k[0], 7], "token": token}, None, None,
             "invalid_parameter", None),
            (m + " with keys a string", m, {"keys": k[0]}, None, lt, "invalid_parameter", None),
            (m + " with wait_ms", m, {"keys": k, "token": token, "wait_ms": 1}, None, None,
             "invalid_parameter", None),
            (m + " with owner", m, {"keys": k, "owner": "x"}, None, lt, "invalid_parameter", None),
            (m + " with an Idempotency-Key", m, {"keys": k}, None, dict(lt, **{"Idempotency-Key": "m-1"}),
             "invalid_parameter", None),
            (m + " with an empty key", m, {"keys": k + [""], "token": token}, None, None, "invalid_key", len(k)),
            (m + " with a control character in a key", m, {"keys": ["x\u0002", k[0]]}, None, lt, "invalid_key", 0),
            (m + " with an array body", m, "[]", None, lt, "invalid_json", None),
            (m + " with another token and an unknown field", m, {"keys": k, "token": other, "all": True}, None,
             None, "invalid_parameter", None),
        ]
    cases += [
        ("PUT with ttl_ms 0", "PUT", {"keys": k, "token": token, "ttl_ms": 0}, None, None, "invalid_parameter", None),
        ("PUT with ttl_ms a string", "PUT", {"keys": k, "ttl_ms": "5"}, None, lt, "invalid_parameter", None),
        ("DELETE with ttl_ms", "DELETE", {"keys": k, "token": token, "ttl_ms": 5}, None, None,
         "invalid_parameter", None),
    ]
    return cases


def check_bad(r, code, index, what):
    err = expect_error(r, 400, code, what)
    if index is not None:
        check("keys[%d]" % index in err["message"], "%s: the message %r does not name keys[%d]"
              % (what, err["message"], index))


@harness.scenario("multi: every malformed POST, PUT or DELETE /locks gets its exact 400 code and changes nothing")
def multi_strictness(ctx):
    ld = ctx.lockd
    canary = ctx.key("mcanary")
    c = sgrant(ld, canary, ttl_ms=60000, owner="canary")
    held = [ctx.key("mheld-b"), ctx.key("mheld-a")]
    g = expect_mgrant(macquire(ld, held, ttl_ms=60000, owner="multi-holder"), held, 60000)
    free = [ctx.key("mfree-b"), ctx.key("mfree-a")]
    watched = [canary] + held
    before = {k: snapshot(ld, k) for k in watched}
    n = 0
    for what, body, query, headers, code, index in bad_posts(free, canary):
        check_bad(mreq(ld, "POST", body, headers, query), code, index, "POST /locks, " + what)
        for k in free:
            expect_free(ctx, k, "%s after a rejected POST /locks (%s)" % (k, what))
        n += 1
    for what, method, body, query, headers, code, index in bad_renews_releases(held, g["token"], c["token"]):
        check_bad(mreq(ld, method, body, headers, query), code, index, what)
        n += 1
    # a renew or release naming the canary with its own token, malformed
    lt = {"Lock-Token": c["token"]}
    for method in ("PUT", "DELETE"):
        check_bad(mreq(ld, method, {"keys": [canary], "ttl": 1}, lt), "invalid_parameter", None,
                  method + " of the canary with an unknown field")
        check_bad(mreq(ld, method, {"keys": [canary, canary]}, lt), "invalid_parameter", None,
                  method + " of the canary twice")
        n += 2
    for k in watched:
        same_state(ld, k, before[k], "%d rejected requests" % n)
    for k in free + ["%s-%d" % (free[0], i) for i in (0, 64)]:
        expect_free(ctx, k, "a key named only by rejected requests")
    # /locks serves POST, PUT and DELETE, and GET and HEAD list held keys
    for method in ("PATCH", "OPTIONS"):
        r = mreq(ld, method)
        eq(r.status, 405, "%s /locks status (body %r)" % (method, r.text[:200]))
        allow = {m.strip() for m in (r.header("Allow") or "").split(",") if m.strip()}
        eq(allow, {"GET", "HEAD", "POST", "PUT", "DELETE"}, "%s /locks Allow" % method)
        eq(r.error_code(), "method_not_allowed", "%s /locks code" % method)
    for method in ("GET", "HEAD"):
        r = mreq(ld, method)
        eq(r.status, 200, "%s /locks status (body %r)" % (method, r.text[:200]))
    harness.log("     %d malformed requests, each its exact 400; canary, holder and free keys untouched" % n)
    expect_mreleased(mrelease(ld, held, g["token"]), held, [], "release of the multi-key holder")
    srelease(ld, canary, c["token"])


# ---------------------------------------------------------------- shapes

@harness.scenario("multi: a grant carries the keys in request order, one token and a fence per key above every "
                  "earlier grant; each key is then an ordinary lock, released singly or as a partial set")
def multi_grant_shapes(ctx):
    lds = instances(ctx)
    one, two = lds[0], lds[-1]
    keys = [ctx.key("mshape-c"), ctx.key("mshape-a"), ctx.key("mshape-b")]
    earlier = {}
    for k in keys:  # an earlier single grant of each key
        s = sgrant(one, k, ttl_ms=5000)
        earlier[k] = s["fence"]
        srelease(one, k, s["token"])
    m0 = metrics(None, one)
    t0 = time.time()
    r = macquire(one, keys, ttl_ms=20000, owner="multi/owner")
    g = expect_mgrant(r, keys, 20000)
    check(parse_expires(g["expires_at"]) >= t0 + 20.0 - 1.0, "expires_at %s is early" % g["expires_at"])
    m1 = metrics(None, one)
    eq(metric(m1, "lockd_lock_grants_total") - metric(m0, "lockd_lock_grants_total"), 3,
       "lockd_lock_grants_total after a grant of 3 keys")
    eq(metric(m1, "lockd_lock_multi_grants_total") - metric(m0, "lockd_lock_multi_grants_total"), 1,
       "lockd_lock_multi_grants_total after one multi-key grant")
    tok, fences = g["token"], g["fences"]
    for k in keys:
        check(fences[k] > earlier[k], "fence of %s: %d is not above the earlier grant's %d"
              % (k, fences[k], earlier[k]))
        b = inspect(two, k, "inspect through the other instance")
        eq((b["held"], b["mode"], b["fence"], b.get("owner"), b.get("holds"), b["holder_count"]),
           (True, "exclusive", fences[k], "multi/owner", 1, 1), "inspect of %s" % k)
        check(1 <= b["ttl_ms"] <= 20000, "inspect ttl_ms %r" % b["ttl_ms"])
        check("token" not in b and tok not in single(two, "GET", k).text, "inspect shows the token")
    c, a, b = keys
    expect_error(single(two, "POST", a, {"ttl_ms": 1000}), 409, "lock_held", "a single acquire of a held key")
    expect_mheld(macquire(two, [ctx.key("mshape-x"), a]), [a], "another multi-key acquire", 20000)
    # single renew, re-entry and release work per key, with the one token
    n = expect_json(single(two, "PUT", b, {"ttl_ms": 30000}, {"Lock-Token": tok}), 200, "single renew of " + b)
    eq((n["key"], n["token"], n["fence"], n["holds"]), (b, tok, fences[b], 1), "single renew")
    check_ttl_left(n["ttl_ms"], 30000, "single renew ttl_ms")
    e = expect_json(single(one, "POST", c, None, {"Lock-Token": tok}), 200, "re-entry of " + c)
    eq((e["token"], e["fence"], e["holds"]), (tok, fences[c], 2), "re-entry")
    eq(srelease(two, c, tok, "release of one hold"), {"key": c, "released": False, "holds": 1}, "one hold back")
    eq(srelease(one, a, tok), {"key": a, "released": True, "holds": 0}, "single release of " + a)
    expect_free(ctx, a, a + " after its single release")
    eq(inspect(one, b)["fence"], fences[b], "fence after the single renew")
    # a partial set: a is no longer held by the token; c's last hold and b go
    expect_mreleased(mrelease(two, [c, a, b], tok), [c, b], [a], "release of a partial set")
    for k in keys:
        expect_free(ctx, k, k + " after the multi-key release")
    expect_error(mrelease(one, keys, tok), 404, "lock_not_found", "a multi-key release of keys none held")
    expect_error(mreq(one, "PUT", {"keys": keys}, {"Lock-Token": tok}), 404, "lock_not_found",
                 "a multi-key renew of keys none held")
    later = sgrant(two, b, ttl_ms=1000)
    check(later["fence"] > fences[b], "a later single grant's fence %d is not above the multi-key grant's %d"
          % (later["fence"], fences[b]))
    srelease(two, b, later["token"])
    # one key is a set too; 64 keys are allowed
    solo = [ctx.key("msolo")]
    g1 = expect_mgrant(macquire(one, solo, ttl_ms=3000), solo, 3000, what="a grant of one key")
    expect_mreleased(mrelease(one, solo, g1["token"]), solo, [], "release of one key")
    big = ["%s-%02d" % (ctx.key("m64"), i) for i in range(64)]
    g64 = expect_mgrant(macquire(two, big, ttl_ms=10000), big, 10000, what="a grant of 64 keys")
    expect_mreleased(mrelease(one, big, g64["token"]), big, [], "release of 64 keys")
    expect_free(ctx, big[37], "a key of the 64 after the release")


# ---------------------------------------------------------- all or nothing

@harness.scenario("multi: all or nothing: held keys give 409 naming exactly them, and none of the others is taken")
def multi_all_or_nothing(ctx):
    lds = instances(ctx)
    one, two = lds[0], lds[-1]
    a, b, c, d, e = (ctx.key("maon-" + x) for x in "abcde")
    hb = sgrant(one, b, ttl_ms=8000)
    t0 = time.monotonic()
    expect_mheld(macquire(two, [a, b, c], ttl_ms=5000), [b], "one key of three held", 8000)
    check(time.monotonic() - t0 < 1.0, "a try-once multi-key acquire waited")
    for k in (a, c):
        expect_free(ctx, k, k + " after a refused multi-key acquire")
    hd = sgrant(two, d, ttl_ms=8000)
    expect_mheld(macquire(one, [d, a, b, c], ttl_ms=5000), [d, b], "two keys of four held", 8000)
    # a wait that runs out takes nothing either
    t0 = time.monotonic()
    r = macquire(two, [c, b, a], ttl_ms=5000, wait_ms=400)
    took = time.monotonic() - t0
    expect_mheld(r, [b], "a multi-key wait that ran out", 8000)
    check(0.39 <= took < 0.4 + WAIT_MARGIN, "answered after %.3f s for wait_ms 400" % took)
    for k in (a, c):
        expect_free(ctx, k, k + " after a multi-key wait ran out")
    # a key held shared counts as held
    hs = sgrant(one, e, ttl_ms=8000, mode="shared")
    expect_mheld(macquire(one, [a, e], ttl_ms=5000), [e], "a key held shared")
    expect_free(ctx, a, a + " after a refusal over a shared key")
    # multi against multi
    g = expect_mgrant(macquire(one, [a, c], ttl_ms=8000), [a, c], 8000)
    expect_mheld(macquire(two, [c, ctx.key("maon-f")], ttl_ms=5000), [c], "a key of another multi-key grant")
    expect_mheld(macquire(two, [a, b, c, d, e], ttl_ms=5000), [a, b, c, d, e], "every key held")
    eq(inspect(two, b)["fence"], hb["fence"], "the single holder of %s after the refusals" % b)
    eq(inspect(one, d)["fence"], hd["fence"], "the single holder of %s after the refusals" % d)
    for k, t in ((b, hb["token"]), (d, hd["token"]), (e, hs["token"])):
        srelease(one, k, t)
    expect_mreleased(mrelease(two, [a, c], g["token"]), [a, c], [], "release of the multi-key grant")
    g = expect_mgrant(macquire(two, [a, b, c, d, e], ttl_ms=3000), [a, b, c, d, e], 3000, what="all five, free")
    expect_mreleased(mrelease(one, [e, d, c, b, a], g["token"]), [e, d, c, b, a], [], "release of all five")


# ------------------------------------------------------------------ renew

@harness.scenario("multi: renew is all or nothing: with one key lost it renews none and names the first key "
                  "not held (404 or 409)")
def multi_renew_atomic(ctx):
    lds = instances(ctx)
    one, two = lds[0], lds[-1]
    a, b, c = (ctx.key("mren-" + x) for x in "abc")
    keys = [a, b, c]
    g = expect_mgrant(macquire(one, keys, ttl_ms=6000), keys, 6000)
    tok = g["token"]
    r = mreq(two, "PUT", {"keys": keys, "ttl_ms": 15000}, {"Lock-Token": tok})
    n = expect_mgrant(r, keys, 15000, status=200, what="renew of all three (token in the header)")
    eq((n["token"], n["fences"]), (tok, g["fences"]), "renew keeps the token and fences")
    r = mreq(one, "PUT", {"keys": [c, a, b], "token": tok})
    n = expect_mgrant(r, [c, a, b], 15000, status=200, what="renew without ttl_ms (each key's last TTL)")
    for k in keys:
        check(inspect(two, k)["ttl_ms"] > 12000, "%s after a renew to 15 s" % k)
    srelease(two, b, tok, "a single release of one key")

    def ttl_unmoved(what):
        for k in (a, c):
            t = inspect(one, k)["ttl_ms"]
            check(t <= 15000, "%s: the ttl of %s moved to %d ms" % (what, k, t))

    r = mreq(two, "PUT", {"keys": keys, "token": tok, "ttl_ms": 60000})
    eq(expect_error(r, 404, "lock_not_found", "renew with one key released").get("key"), b, "error.key")
    ttl_unmoved("a renew with one key lost")
    other = sgrant(one, b, ttl_ms=10000, owner="other")
    r = mreq(one, "PUT", {"keys": keys, "ttl_ms": 60000}, {"Lock-Token": tok})
    eq(expect_error(r, 409, "token_mismatch", "renew with one key held by another").get("key"), b, "error.key")
    ttl_unmoved("a renew with one key held by another token")
    # "first" is the lowest index among the keys the token does not hold
    srelease(two, a, tok, "a single release of another key")
    for order, status, code, key in (([a, b, c], 404, "lock_not_found", a), ([c, b, a], 409, "token_mismatch", b),
                                     ([c, a, b], 404, "lock_not_found", a), ([b, a], 409, "token_mismatch", b)):
        r = mreq(two, "PUT", {"keys": order, "token": tok, "ttl_ms": 60000})
        eq(expect_error(r, status, code, "renew of %s" % order).get("key"), key, "error.key for %s" % order)
    t = inspect(one, c)["ttl_ms"]
    check(t <= 15000, "the ttl of %s moved to %d ms" % (c, t))
    r = mreq(one, "PUT", {"keys": [c], "token": other["token"]})
    eq(expect_error(r, 409, "token_mismatch", "renew with another's token").get("key"), c, "error.key")
    eq(inspect(two, b)["fence"], other["fence"], "the other holder of %s" % b)
    expect_mreleased(mrelease(two, keys, tok), [c], [a, b], "release: only c is still the token's")
    eq(inspect(one, b)["fence"], other["fence"], "%s, held by another token, after the release" % b)
    srelease(one, b, other["token"])
    for k in keys:
        expect_free(ctx, k)


# ---------------------------------------------------------------- waiting

@harness.scenario("multi: a try-once multi-key acquire never overtakes a queued single-key waiter",
                  needs=["fifo:store"])
def multi_no_queue_jumping(ctx):
    ld = ctx.lockd
    for i in range(5):
        a, b = ctx.key("mjump-a"), ctx.key("mjump-b")
        base = waiters_now(ld) or 0
        h = sgrant(ld, a, ttl_ms=20000)
        w = SingleWaiter(ld, a, 10000)
        w.start()
        wait_parked(ld, base + 1)
        c = ld.client(timeout=10)
        try:
            c.request("GET", "/healthz")  # connection open before the race
            srelease(ld, a, h["token"])
            r = macquire(c, [b, a], ttl_ms=5000)
        finally:
            c.close()
        got = w.result()
        gw = expect_json(got, 201, "the queued single-key waiter")
        if r.status == 201:
            mrelease(ld, [b, a], r.json["token"])
        expect_mheld(r, [a], "round %d: a try-once multi-key acquire right after the release" % i)
        expect_free(ctx, b, "round %d: %s after the refused multi-key acquire" % (i, b))
        srelease(ld, a, gw["token"])


@harness.scenario("multi: a waiting multi-key acquire holds none of its keys and is granted within 250 ms of its "
                  "last key's release (or expiry), through either instance")
def multi_wait(ctx):
    lds = instances(ctx)
    holder = lds[0]
    lat = {}
    for ld in lds:
        where = "the same instance" if ld is holder else "the other instance"
        for i in range(3):
            a, b = ctx.key("mwait-a"), ctx.key("mwait-b")
            ha, hb = sgrant(holder, a, ttl_ms=20000), sgrant(holder, b, ttl_ms=20000)
            base = waiters_now(ld) or 0
            w = MWaiter(ld, [a, b], 8000, ttl_ms=5000)
            w.start()
            wait_parked(ld, base + 1)
            srelease(holder, a, ha["token"])
            time.sleep(0.2)
            check(w.resp is None and w.error is None, "granted with one key still held: %r" % (w.resp,))
            # the waiter holds none of its keys: a is free to anyone
            expect_free(ctx, a, "%s while a multi-key waiter waits for it and %s" % (a, b))
            x = sgrant(holder, a, ttl_ms=2000, what="a single try-once acquire beside the multi-key waiter")
            srelease(holder, a, x["token"])
            check(w.resp is None, "granted with one key still held: %r" % (w.resp,))
            t0 = time.monotonic()
            srelease(holder, b, hb["token"])
            g = expect_mgrant(w.result(), [a, b], 5000, what="the waiter's grant (%s)" % where)
            lat.setdefault(where, []).append(w.t_done - t0)
            check(g["fences"][a] > x["fence"] and g["fences"][b] > hb["fence"], "fences after the waiter's grant")
            expect_mreleased(mrelease(holder, [a, b], g["token"]), [a, b], [])
    for where, xs in lat.items():
        xs.sort()
        harness.log("     multi-key waiter granted after its last key's release, through %s: %s ms"
                    % (where, ", ".join("%.1f" % (x * 1000) for x in xs)))
        check(xs[1] < WAKE_BOUND, "median wake-up through %s %.0f ms (bound %d ms)"
              % (where, xs[1] * 1000, WAKE_BOUND * 1000))
        check(xs[2] < 4 * WAKE_BOUND, "slowest wake-up through %s %.0f ms" % (where, xs[2] * 1000))
    # the last key's holder expires instead: granted at its TTL, not before
    a, b = ctx.key("mexp-a"), ctx.key("mexp-b")
    t_sent = time.monotonic()
    h = sgrant(holder, a, ttl_ms=700)
    t_got = time.monotonic()
    w = MWaiter(lds[-1], [b, a], 5000, ttl_ms=3000)
    w.start()
    g = expect_mgrant(w.result(), [b, a], 3000, what="the waiter's grant at the holder's expiry")
    check(w.t_done >= t_sent + 0.7 - 0.01, "granted %.0f ms before the holder expired"
          % ((t_sent + 0.7 - w.t_done) * 1000))
    late = w.t_done - (t_got + 0.7)
    harness.log("     multi-key waiter granted %.1f ms after its last key's holder expired" % (late * 1000))
    check(late < 4 * WAKE_BOUND, "granted %.0f ms after the holder expired" % (late * 1000))
    check(g["fences"][a] > h["fence"], "fence after the expiry")
    expect_mreleased(mrelease(holder, [a, b], g["token"]), [a, b], [])


# ------------------------------------------------------------------- load

def multi_load(lds, keys, clients, seconds, wait_ms=2000, ttl_ms=5000):
    """clients threads through lds: three in four take 2 to 5 random keys at
    once (random order), one in four a single key; each holds a moment and
    releases. Records per-key hold intervals, every wait and every grant."""
    holds = {k: [] for k in keys}
    waits, grants, bad, lock = [], [], [], threading.Lock()
    counts = {"multi": 0, "single": 0, "multi_timeouts": 0, "single_timeouts": 0}
    t_start = time.monotonic()
    stop = t_start + seconds

    def worker(n):
        rng = random.Random(n * 7919 + 1)
        c = lds[n % len(lds)].client(timeout=wait_ms / 1000.0 + 15)
        kind = "single" if n % 4 == 3 else "multi"
        try:
            while time.monotonic() < stop:
                ks = [rng.choice(keys)] if kind == "single" else rng.sample(keys, rng.randint(2, 5))
                t0 = time.monotonic()
                if kind == "single":
                    r = single(c, "POST", ks[0], {"ttl_ms": ttl_ms, "wait_ms": wait_ms})
                else:
                    r = macquire(c, ks, ttl_ms=ttl_ms, wait_ms=wait_ms)
                t1 = time.monotonic()
                with lock:
                    waits.append((t1 - t0, kind, r.status))
                if r.status == 409 and r.error_code() == "lock_held":
                    held = (r.json["error"].get("held") or []) if kind == "multi" else ks
                    if not held or not set(held) <= set(ks):
                        bad.append("409 names %r for %r" % (held, ks))
                    with lock:
                        counts[kind + "_timeouts"] += 1
                    continue
                if r.status != 201:
                    bad.append("%s acquire of %r: %r" % (kind, ks, r))
                    continue
                b = r.json
                if kind == "multi":
                    fences = b.get("fences") or {}
                    if b.get("keys") != ks or sorted(fences) != sorted(ks):
                        bad.append("a partial grant: asked %r, got %r" % (ks, b))
                        continue
                else:
                    fences = {ks[0]: b["fence"]}
                time.sleep(rng.uniform(0.001, 0.004))
                t2 = time.monotonic()
                if kind == "multi":
                    rr = mrelease(c, ks, b["token"])
                    ok = rr.status == 200 and rr.json == {"released": ks, "not_held": []}
                else:
                    rr = single(c, "DELETE", ks[0], headers={"Lock-Token": b["token"]})
                    ok = rr.status == 200
                if not ok:
                    bad.append("%s release of %r: %r" % (kind, ks, rr))
                    continue
                with lock:
                    counts[kind] += 1
                    grants.append(t1)
                    for k in ks:
                        holds[k].append((t1, t2, fences[k]))
        except Exception as e:  # noqa: BLE001 - a failed or hung request is a finding
            bad.append("client %d: %r" % (n, e))
        finally:
            c.close()

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + wait_ms / 1000.0 + 30)
    check(not any(t.is_alive() for t in ts), "a client still runs %.0f s after the load" % (wait_ms / 1000.0 + 30))
    return holds, waits, grants, counts, bad, t_start


@harness.scenario("multi: 16 clients taking random overlapping key sets and single keys through two instances "
                  "never overlap on a key, never get a partial grant, and never deadlock")
def multi_load_scenario(ctx):
    lds = instances(ctx)
    keys = [ctx.key("mload-%d" % i) for i in range(8)]
    wait_ms, seconds = 2000, 4.0
    holds, waits, grants, counts, bad, t_start = multi_load(lds, keys, 16, seconds, wait_ms=wait_ms)
    longest = max((w[0] for w in waits), default=0)
    seen = sorted([t_start] + grants)
    gap = max((y - x for x, y in zip(seen, seen[1:])), default=seconds)
    harness.log("     %d multi-key and %d single-key grants on %d instance(s); waits that ran out: %d multi, "
                "%d single; longest wait %.3f s, longest pause between grants %.3f s"
                % (counts["multi"], counts["single"], len(lds), counts["multi_timeouts"],
                   counts["single_timeouts"], longest, gap))
    check(not bad, "wrong answers: %s" % bad[:3])
    for k in keys:
        check_exclusion(holds[k], "key %s" % k)
    over = [w for w in waits if w[0] > wait_ms / 1000.0 + WAIT_MARGIN]
    check(not over, "%d waits answered after wait_ms %d + %.1f s: %r" % (len(over), wait_ms, WAIT_MARGIN, over[:3]))
    check(gap < 1.0, "no grant for %.2f s while clients waited" % gap)
    check(counts["multi"] >= 20 and counts["single"] >= 5,
          "too few grants: %d multi-key, %d single-key" % (counts["multi"], counts["single"]))
    for k in keys:
        expect_free(ctx, k, "%s after the load" % k)


# --------------------------------------------------------- kill -9

@harness.scenario("multi: lockd killed with SIGKILL between a multi-key grant and its release leaves every key "
                  "held until the TTL, then all free", backends=["redis", "redlock", "zookeeper", "mysql"])
def multi_kill9(ctx):
    doomed = ctx.new_lockd()
    ld = ctx.lockd
    keys = [ctx.key("mkill-b"), ctx.key("mkill-a"), ctx.key("mkill-c")]
    ttl = 3.0
    t_sent = time.monotonic()
    g = expect_mgrant(macquire(doomed, keys, ttl_ms=int(ttl * 1000), owner="doomed"), keys, int(ttl * 1000))
    t_got = time.monotonic()
    doomed.kill9()
    for k in keys:
        b = inspect(ld, k, "inspect after the kill")
        eq((b["fence"], b.get("owner")), (g["fences"][k], "doomed"), "%s after the kill" % k)
    expect_error(single(ld, "POST", keys[1], {"ttl_ms": 1000}), 409, "lock_held", "a single acquire after the kill")
    expect_mheld(macquire(ld, keys, ttl_ms=1000), keys, "a multi-key acquire after the kill", int(ttl * 1000))
    time.sleep(max(0.0, t_sent + ttl - 0.4 - time.monotonic()))
    for k in keys:
        r = single(ld, "GET", k)
        if time.monotonic() < t_sent + ttl - 0.05:
            eq(r.status, 200, "%s just before its TTL passed (body %r)" % (k, r.text[:200]))
    time.sleep(max(0.0, t_got + ttl + 0.3 - time.monotonic()))
    for k in keys:
        expect_free(ctx, k, "%s after its TTL passed" % k)
    n = expect_mgrant(macquire(ld, keys, ttl_ms=2000), keys, 2000, what="a grant after the TTL")
    for k in keys:
        check(n["fences"][k] > g["fences"][k], "fence of %s after the kill: %d is not above %d"
              % (k, n["fences"][k], g["fences"][k]))
    expect_mreleased(mrelease(ld, keys, n["token"]), keys, [])


# ------------------------------------------------- a busy key (measured)

def busy_key_rounds(ld, a, b, clients, rounds, wait_ms, hold=0.010, pause=0.010):
    """clients single-key clients keep key a busy (hold `hold` s, then
    `pause` s before the next acquire, which waits); a multi-key waiter asks
    for {a, b} `rounds` times. The delays of the granted rounds, how many
    waits ran out, and a's hold intervals."""
    holds, bad, lock = [], [], threading.Lock()
    stopping = threading.Event()

    def busy(n):
        c = ld.client(timeout=30)
        try:
            while not stopping.is_set():
                r = single(c, "POST", a, {"ttl_ms": 5000, "wait_ms": 5000})
                t1 = time.monotonic()
                if r.status == 409:
                    continue
                if r.status != 201:
                    bad.append("busy acquire: %r" % r)
                    time.sleep(0.05)
                    continue
                time.sleep(hold)
                t2 = time.monotonic()
                rr = single(c, "DELETE", a, headers={"Lock-Token": r.json["token"]})
                if rr.status != 200:
                    bad.append("busy release: %r" % rr)
                with lock:
                    holds.append((t1, t2, r.json["fence"]))
                time.sleep(pause)
        except Exception as e:  # noqa: BLE001
            bad.append("busy client %d: %r" % (n, e))
        finally:
            c.close()

    ts = [threading.Thread(target=busy, args=(n,)) for n in range(clients)]
    for t in ts:
        t.start()
    delays, timeouts = [], 0
    c = ld.client(timeout=wait_ms / 1000.0 + 20)
    try:
        time.sleep(0.3)
        for _ in range(rounds):
            t0 = time.monotonic()
            r = macquire(c, [a, b], ttl_ms=5000, wait_ms=wait_ms)
            t1 = time.monotonic()
            if r.status == 409:
                timeouts += 1
                check(t1 - t0 < wait_ms / 1000.0 + WAIT_MARGIN, "a multi-key wait answered after %.2f s" % (t1 - t0))
                continue
            g = expect_mgrant(r, [a, b], what="the multi-key waiter's grant beside a busy key")
            time.sleep(hold)
            t2 = time.monotonic()
            expect_mreleased(mrelease(c, [a, b], g["token"]), [a, b], [])
            with lock:
                holds.append((t1, t2, g["fences"][a]))
            delays.append(t1 - t0)
            time.sleep(0.05)
    finally:
        c.close()
        stopping.set()
        for t in ts:
            t.join(20)
    check(not bad, "busy clients got wrong answers: %s" % bad[:3])
    check_exclusion(holds, "the busy key")
    return delays, timeouts, len(holds) - len(delays)


@harness.scenario("multi: how a busy key delays a multi-key waiter (measured), never beside the key's holders")
def multi_busy_key(ctx):
    ld = ctx.lockd
    figures = []
    for clients, rounds, wait_ms in ((1, 10, 3000), (2, 6, 1500), (4, 4, 1500)):
        a, b = ctx.key("mbusy-a"), ctx.key("mbusy-b")
        delays, timeouts, busy = busy_key_rounds(ld, a, b, clients, rounds, wait_ms)
        if delays:
            fig = "granted %d of %d, after p50 %.1f ms, max %.1f ms" % (
                len(delays), rounds, pct(delays, 50) * 1000, max(delays) * 1000)
        else:
            fig = "granted 0 of %d" % rounds
        harness.log("     busy key, %d single-key client(s) (10 ms held, 10 ms apart; %d holds): multi-key waiter "
                    "on {a,b} %s; %d waits of %d ms ran out" % (clients, busy, fig, timeouts, wait_ms))
        figures.append((clients, delays, timeouts))
        for k in (a, b):
            expect_free(ctx, k, "%s after the busy-key run" % k)
    # with one client the key is free half the time: the waiter gets in
    clients, delays, timeouts = figures[0]
    eq(timeouts, 0, "multi-key waits that ran out beside one busy client")

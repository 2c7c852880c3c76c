"""tests/e2e/client.py - what scenarios use to talk to lockd and judge its
answers, shared by every tests/e2e/test_*.py (no scenario file imports
another): lock paths and requests (path, req, acquire, release, inspect),
the expectations of API.md's bodies (expect_json, expect_error,
expect_grant, expect_held, expect_free), /metrics parsing (metrics,
metric), raw HTTP (http_request, parse_http, read_answer, raw_response)
and Waiter, a waiting acquire in a thread.

Keys always come from ctx.key(): stores outlive one scenario.
"""

import calendar
import json
import re
import threading
import time
import urllib.parse

import harness
from harness import Fail, check, eq

TOKEN_RE = re.compile(r"^[0-9a-f]{32}$")
EXPIRES_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
ALLOW_LOCKS = "GET, HEAD, POST, PUT, DELETE"
ALLOW_OPS = "GET, HEAD"
FENCE_LIMIT = 1 << 53
DEFAULT_TTL_MS = 30000
MAX_TTL_MS = 86400000
MAX_WAIT_MS = 300000


# ---------------------------------------------------------------- helpers

def quote(key, safe=""):
    """Percent-encode a key (str or bytes) for the path; '/' too unless
    safe says otherwise."""
    return urllib.parse.quote(key, safe=safe)


def path(key, query=None, safe=""):
    p = "/locks/" + quote(key, safe)
    if query is not None:
        p += "?" + query
    return p


def content_type(r):
    return (r.header("Content-Type") or "").split(";")[0].strip().lower()


def expect_json(r, status, what="response"):
    eq(r.status, status, "%s status (body %r)" % (what, r.text[:300]))
    eq(content_type(r), "application/json", "%s Content-Type" % what)
    check(isinstance(r.json, dict), "%s: body is not a JSON object: %r" % (what, r.text[:300]))
    check(r.header("X-Request-Id"), "%s: no X-Request-Id" % what)
    return r.json


def expect_error(r, status, code, what="response"):
    """status, JSON error body with code and a human message, X-Request-Id."""
    if isinstance(code, str):
        code = (code,)
    body = expect_json(r, status, what)
    err = body.get("error")
    check(isinstance(err, dict), "%s: no error object in %r" % (what, r.text[:300]))
    check(err.get("code") in code, "%s: error code %r, want %s (body %r)"
          % (what, err.get("code"), "/".join(code), r.text[:300]))
    msg = err.get("message")
    check(isinstance(msg, str) and msg.strip(), "%s: no message in %r" % (what, r.text[:300]))
    return err


def parse_expires(s):
    """RFC 3339 UTC with milliseconds -> unix seconds (float)."""
    check(isinstance(s, str) and EXPIRES_RE.match(s), "expires_at %r is not YYYY-MM-DDTHH:MM:SS.mmmZ" % (s,))
    t = time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S")
    return calendar.timegm(t) + int(s[20:23]) / 1000.0


def check_fence(f, what="fence"):
    check(isinstance(f, int) and not isinstance(f, bool), "%s %r is not an integer" % (what, f))
    check(1 <= f < FENCE_LIMIT, "%s %r out of [1, 2^53)" % (what, f))


def check_ttl_left(got, want, what="ttl_ms"):
    """A grant's ttl_ms is what is left of want when lockd answered: never
    more, and (on a machine that is not stalled) not much less: under 1 s,
    plus the clock drift redlock:// takes off (1 % + 2 ms by default)."""
    check(isinstance(got, int) and not isinstance(got, bool), "%s %r is not an integer" % (what, got))
    drift = want // 100 + 2
    check(1 <= got <= want and got > want - 1000 - drift,
          "%s %r: want what is left of %d (at most %d, less by under 1 s + %d ms)" % (what, got, want, want, drift))


def expect_grant(r, key, ttl_ms=None, status=201, what="grant", t_sent=None):
    """A grant (201) or renewal (200) body: key, token, fence, ttl_ms,
    expires_at ~ now + ttl_ms."""
    body = expect_json(r, status, what)
    eq(body.get("key"), key, what + " key")
    check(isinstance(body.get("token"), str) and TOKEN_RE.match(body["token"]),
          "%s token %r is not 32 lowercase hex chars" % (what, body.get("token")))
    check_fence(body.get("fence"), what + " fence")
    if ttl_ms is not None:
        check_ttl_left(body.get("ttl_ms"), ttl_ms, what + " ttl_ms")
    ttl = body.get("ttl_ms")
    check(isinstance(ttl, int) and ttl >= 1, "%s ttl_ms %r" % (what, ttl))
    exp = parse_expires(body.get("expires_at"))
    now = time.time()
    lo = (t_sent if t_sent is not None else now - 2.0) + ttl / 1000.0 - 1.0
    hi = now + ttl / 1000.0 + 1.0
    check(lo <= exp <= hi, "%s expires_at %s is not now + ttl_ms (%d ms): off by %.3f s"
          % (what, body.get("expires_at"), ttl, exp - (now + ttl / 1000.0)))
    return body


def req(ctx, method, key, body=None, query=None, headers=None, safe="", timeout=30.0):
    return ctx.lockd.request(method, path(key, query, safe), body, headers, timeout=timeout)


def acquire(ctx, key, what="acquire", **params):
    r = ctx.lockd.request("POST", path(key), params or None)
    return expect_grant(r, key, params.get("ttl_ms"), what=what)


def release(ctx, key, token, what="release"):
    r = ctx.lockd.request("DELETE", path(key), headers={"Lock-Token": token})
    body = expect_json(r, 200, what)
    eq(body.get("key"), key, what + " key")
    eq(body.get("released"), True, what + " released")
    return body


def inspect(ctx, key):
    return ctx.lockd.request("GET", path(key))


def expect_held(ctx, key, fence=None, owner=None, what="inspect"):
    r = inspect(ctx, key)
    body = expect_json(r, 200, what)
    eq(body.get("key"), key, what + " key")
    eq(body.get("held"), True, what + " held")
    check("token" not in body, "%s shows the token: %r" % (what, body))
    if fence is not None:
        eq(body.get("fence"), fence, what + " fence")
    if owner is not None:
        eq(body.get("owner"), owner, what + " owner")
    return body


def expect_free(ctx, key, what="inspect of a free key"):
    expect_error(inspect(ctx, key), 404, "lock_not_found", what)


def sleep_until(t):
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)


# /metrics: {(name, (("label","value"),...)): float}
SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$')
LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')


def parse_labels(s):
    out = []
    pos = 0
    while pos < len(s):
        m = LABEL_RE.match(s, pos)
        if m is None:
            raise Fail("bad label set {%s}" % s)
        out.append((m.group(1), m.group(2)))
        pos = m.end()
    return tuple(sorted(out))


def parse_metrics(text):
    """Parse the Prometheus text format strictly enough to catch a broken
    exposition: returns (samples, types)."""
    samples = {}
    types = {}
    for n, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                check(len(parts) == 4 and parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"),
                      "metrics line %d: bad TYPE line %r" % (n + 1, line))
                check(parts[2] not in types, "metrics: TYPE of %s given twice" % parts[2])
                types[parts[2]] = parts[3]
            continue
        m = SAMPLE_RE.match(line)
        check(m is not None, "metrics line %d is not a sample: %r" % (n + 1, line))
        name, labels, value = m.group(1), parse_labels(m.group(3) or ""), m.group(4)
        try:
            v = float(value)
        except ValueError:
            raise Fail("metrics line %d: bad value %r" % (n + 1, line))
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        check(name in types or family in types, "metrics line %d: %s has no TYPE line before it" % (n + 1, name))
        check((name, labels) not in samples, "metrics: sample %s%r given twice" % (name, labels))
        samples[(name, labels)] = v
    return samples, types


def metrics(ctx, lockd=None):
    r = (lockd or ctx.lockd).request("GET", "/metrics")
    eq(r.status, 200, "/metrics status")
    return parse_metrics(r.text)[0]


def metric(samples, name, **labels):
    """Sum of every sample of name whose labels include the given ones."""
    total = 0.0
    want = set(labels.items())
    for (n, lab), v in samples.items():
        if n == name and want <= set(lab):
            total += v
    return total


def has_metric(samples, name, **labels):
    want = set(labels.items())
    return any(n == name and want <= set(lab) for (n, lab) in samples)


def parse_http(buf):
    """One HTTP response from the front of buf: (status, headers, body,
    rest), or None if incomplete. Content-Length framing only (lockd always
    sends it); a response to HEAD must be parsed by the caller."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return None
    head = buf[:i].decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", head[0])
    if m is None:
        raise Fail("not an HTTP response: %r" % buf[:200])
    headers = {}
    for line in head[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    start = i + 4
    if len(buf) < start + n:
        return None
    return int(m.group(1)), headers, buf[start:start + n], buf[start + n:]


def read_answer(s, timeout):
    """Read from socket s until one whole HTTP answer is in, the peer closes
    or resets, or timeout passes: parse_http() of it, or None."""
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if parse_http(out) is not None:
            break
    return parse_http(out) if out else None


def raw_response(port, data, timeout=5.0):
    """Send raw bytes; (status, headers, body) of the first response, or
    None when the server closed or reset the connection without one."""
    out = harness_raw(port, data, timeout)
    if not out:
        return None
    p = parse_http(out)
    if p is None:
        raise Fail("incomplete HTTP response: %r" % out[:300])
    return p[:3]


def harness_raw(port, data, timeout=5.0):
    try:
        return harness.raw(port, data, timeout)
    except (ConnectionResetError, BrokenPipeError):
        return b""


def raw_json(status_headers_body):
    status, headers, body = status_headers_body
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError:
        raise Fail("body of %d is not JSON: %r" % (status, body[:200]))


def http_request(method, target, body=b"", headers=None, version="HTTP/1.1"):
    """Bytes of one request with Host and Content-Length (when a body).
    headers: a dict, or a list of (name, value) pairs (a name may repeat)."""
    if isinstance(target, str):
        target = target.encode("utf-8")
    hdrs = [b"Host: 127.0.0.1"]
    for k, v in (headers.items() if isinstance(headers, dict) else headers or ()):
        hdrs.append(k.encode() + b": " + (v if isinstance(v, bytes) else v.encode()))
    if body:
        hdrs.append(b"Content-Length: %d" % len(body))
    return (method.encode() + b" " + target + b" " + version.encode() + b"\r\n"
            + b"\r\n".join(hdrs) + b"\r\n\r\n" + body)


# ---------------------------------------------------------------- waiters

class Waiter(threading.Thread):
    """One acquire on its own connection, run in a thread; records when the
    answer came."""

    def __init__(self, ctx, key, wait_ms, ttl_ms=10000, owner=None, then_release_after=None, timeout=30.0,
                 lockd=None):
        super().__init__(daemon=True)
        self.lockd = lockd or ctx.lockd
        self.key = key
        self.body = {"wait_ms": wait_ms, "ttl_ms": ttl_ms}
        if owner is not None:
            self.body["owner"] = owner
        self.then_release_after = then_release_after
        self.timeout = timeout
        self.resp = None
        self.error = None
        self.t_sent = None
        self.t_done = None
        self.release_status = None

    def run(self):
        try:
            c = self.lockd.client(timeout=self.timeout)
            try:
                self.t_sent = time.monotonic()
                self.resp = c.request("POST", path(self.key), self.body)
                self.t_done = time.monotonic()
                if self.then_release_after is not None and self.resp.status == 201:
                    time.sleep(self.then_release_after)
                    r = c.request("DELETE", path(self.key), headers={"Lock-Token": self.resp.json["token"]})
                    self.release_status = r.status
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001 - reported by the scenario
            self.error = e

    def result(self, timeout=15.0):
        self.join(timeout)
        check(not self.is_alive(), "waiter on %s still waiting after %.0f s" % (self.key, timeout))
        check(self.error is None, "waiter on %s failed: %r" % (self.key, self.error))
        return self.resp

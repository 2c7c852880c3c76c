"""tests/e2e/test_hostile.py - malformed and hostile requests, on every
backend. Each case must be answered with the right 4xx JSON error (or, for
bytes that are not HTTP, a 4xx from the HTTP layer or a closed connection),
lockd must stay alive, and a canary lock taken before the cases must be
untouched at the end: same fence, same owner, same expiry, still renewable
with its token.
"""

import json
import random
import select
import socket
import time

import harness
from client import (MAX_TTL_MS, acquire, expect_held, expect_json, http_request, parse_expires, parse_http, path,
                    quote, req)
from harness import check

RAW_TIMEOUT = 3.0


class Canary:
    def __init__(self, ctx):
        self.key = ctx.key("canary")
        self.g = acquire(ctx, self.key, ttl_ms=120000, owner="canary")
        self.token = self.g["token"]
        self.fence = self.g["fence"]
        self.expires = parse_expires(self.g["expires_at"])

    def verify(self, ctx):
        eq_status = ctx.lockd.request("GET", "/healthz", timeout=10)
        check(eq_status.status == 200, "healthz after the hostile cases: %r" % eq_status)
        body = expect_held(ctx, self.key, self.fence, "canary", "canary after the hostile cases")
        moved = parse_expires(body["expires_at"]) - self.expires
        check(abs(moved) <= 1.0, "canary's expiry moved by %.3f s: a rejected request renewed it" % moved)
        r = req(ctx, "PUT", self.key, headers={"Lock-Token": self.token})
        b = expect_json(r, 200, "renew of the canary with its token")
        check(b.get("fence") == self.fence, "canary fence changed on renew: %r" % b)
        r = req(ctx, "DELETE", self.key, headers={"Lock-Token": self.token})
        expect_json(r, 200, "release of the canary")


def send_raw(port, data, timeout=RAW_TIMEOUT, chunks=None):
    """Send bytes (or a list of chunks), return what came back until close,
    a complete response, or the timeout. Like a careful client, stop sending
    once lockd has answered (it may answer 413 before the body). Resets are
    a close."""
    if chunks is None:
        i = data.find(b"\r\n\r\n")
        chunks = [data[:i + 4], data[i + 4:]] if 0 <= i < len(data) - 4 else [data]
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = b""
    try:
        try:
            for n, part in enumerate(chunks):
                if n > 0:
                    r, _, _ = select.select([s], [], [], 0.05)
                    if r:
                        break
                s.sendall(part)
        except OSError:
            pass  # lockd may answer and close before reading everything
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            try:
                if parse_http(out) is not None:
                    break
            except AssertionError:
                break
    finally:
        s.close()
    return out


def judge(case, got):
    """None if the answer meets the expectation, else why not."""
    name, kind, expect = case["name"], case["kind"], case["expect"]
    if kind == "http":
        status, hdrs, body = got.status, got.headers, got.body
    else:
        if not got:
            return None if expect[0] in ("reject", "json_or_reject") else "connection closed without an answer"
        try:
            p = parse_http(got)
        except AssertionError:
            p = None
        if p is None:
            return "not one complete HTTP response: %r" % got[:200]
        status, hdrs, body = p[0], p[1], p[2]
    try:
        j = json.loads(body.decode("utf-8"))
    except ValueError:
        j = None
    if expect[0] == "reject":
        if 400 <= status <= 499 or status == 505:
            return None
        return "status %d, want a 4xx or a close (body %r)" % (status, body[:200])
    want_status, codes = expect[1], expect[2]
    if isinstance(want_status, int):
        want_status = (want_status,)
    if expect[0] == "json_or_reject":
        # lockd's own answer must be right; the HTTP layer may refuse instead
        if not (400 <= status <= 499 or status == 505):
            return "status %d, want %s or a refusal (body %r)" % (status, "/".join(map(str, want_status)),
                                                                 body[:200])
        if not (isinstance(j, dict) and isinstance(j.get("error"), dict)):
            return None
        if status not in want_status:
            return "status %d, want %s (body %r)" % (status, "/".join(map(str, want_status)), body[:200])
    if status not in want_status:
        return "status %d, want %s (body %r)" % (status, "/".join(map(str, want_status)), body[:200])
    ctype = (hdrs.get("content-type") or "").split(";")[0].strip()
    if ctype != "application/json":
        return "Content-Type %r" % ctype
    try:
        j = json.loads(body.decode("utf-8"))
        code = j["error"]["code"]
        msg = j["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return "not a JSON error: %r" % body[:200]
    if code not in codes:
        return "code %r, want %s" % (code, "/".join(codes))
    if not isinstance(msg, str) or not msg:
        return "empty message"
    if not hdrs.get("x-request-id"):
        return "no X-Request-Id"
    return None


def run_cases(ctx, cases):
    failures = []
    for case in cases:
        try:
            if case["kind"] == "http":
                method, p, body, headers = case["req"]
                got = ctx.lockd.request(method, p, body, headers, timeout=10)
            else:
                got = send_raw(ctx.lockd.port, case.get("data"), chunks=case.get("chunks"),
                               timeout=case.get("timeout", RAW_TIMEOUT))
            why = judge(case, got)
        except Exception as e:  # noqa: BLE001 - a case that blows up is a finding
            why = "exception %r" % e
        if why is None and case.get("free_after"):
            r = ctx.lockd.request("GET", path(case["free_after"]))
            if r.status != 404:
                why = "the key is not free afterwards: %r" % r
        if why is not None:
            failures.append("%s: %s" % (case["name"], why))
        if not ctx.lockd.alive():
            failures.append("%s: lockd died" % case["name"])
            break
    return failures


def http_case(name, method, p, body=None, headers=None, expect=None, free_after=None):
    return {"name": name, "kind": "http", "req": (method, p, body, headers), "expect": expect,
            "free_after": free_after}


def raw_case(name, data=None, expect=("reject",), chunks=None, timeout=RAW_TIMEOUT, free_after=None):
    return {"name": name, "kind": "raw", "data": data, "chunks": chunks, "expect": expect,
            "timeout": timeout, "free_after": free_after}


def J(status, *codes):
    return ("json", status, codes)


def JR(status, *codes):
    return ("json_or_reject", status, codes)


BAD_JSON = J(400, "invalid_json")
BAD_PARAM = J(400, "invalid_parameter")
BAD_KEY = J(400, "invalid_key")
JSON_OR_PARAM = J(400, "invalid_json", "invalid_parameter")


def finish(ctx, canary, cases, minimum):
    check(len(cases) >= minimum, "only %d cases" % len(cases))
    failures = run_cases(ctx, cases)
    canary.verify(ctx)
    harness.log("     %d cases, %d failed" % (len(cases), len(failures)))
    check(not failures, "%d of %d cases failed:\n  %s" % (len(failures), len(cases), "\n  ".join(failures)))


@harness.scenario("hostile JSON bodies get 400 invalid_json or invalid_parameter, lockd lives, the canary is untouched")
def hostile_json(ctx):
    canary = Canary(ctx)
    bodies = [
        ("unclosed object", b"{", BAD_JSON),
        ("array", b"[]", BAD_JSON),
        ("array of numbers", b"[1,2,3]", BAD_JSON),
        ("number", b"42", BAD_JSON),
        ("null", b"null", BAD_JSON),
        ("string", b'"string"', BAD_JSON),
        ("4000-deep array", b"[" * 4000 + b"]" * 4000, BAD_JSON),
        ("1000-deep object in a field", b'{"x":' + b'{"a":' * 1000 + b"1" + b"}" * 1001, JSON_OR_PARAM),
        ("3000-deep unclosed", b'{"x":' + b"[" * 3000, BAD_JSON),
        ("400-digit integer", b'{"ttl_ms":' + b"9" * 400 + b"}", BAD_PARAM),
        ("1e400", b'{"ttl_ms":1e400}', JSON_OR_PARAM),
        ("-1e400", b'{"wait_ms":-1e400}', JSON_OR_PARAM),
        ("negative ttl", b'{"ttl_ms":-1}', BAD_PARAM),
        ("float ttl", b'{"ttl_ms":1.5}', BAD_PARAM),
        ("string ttl", b'{"ttl_ms":"1000"}', BAD_PARAM),
        ("boolean ttl", b'{"ttl_ms":true}', BAD_PARAM),
        ("null ttl", b'{"ttl_ms":null}', BAD_PARAM),
        ("2^63 ttl", b'{"ttl_ms":9223372036854775808}', BAD_PARAM),
        ("-2^63-1 wait", b'{"wait_ms":-9223372036854775809}', BAD_PARAM),
        ("2^64 wait", b'{"wait_ms":18446744073709551616}', BAD_PARAM),
        ("max ttl + 1", b'{"ttl_ms":%d}' % (MAX_TTL_MS + 1), BAD_PARAM),
        ("duplicate keys", b'{"ttl_ms":1000,"ttl_ms":1000}', BAD_PARAM),
        ("duplicate keys, different values", b'{"owner":"a","ttl_ms":1000,"owner":"b"}', BAD_PARAM),
        ("unknown field", b'{"unknown":1}', BAD_PARAM),
        ("unknown field with NUL in its name", b'{"ttl_ms\\u0000":1000}', JSON_OR_PARAM),
        ("re-entry token with wait_ms", b'{"token":"' + b"a" * 32 + b'","wait_ms":1000}', BAD_PARAM),
        ("invalid UTF-8 in a string", b'{"owner":"\xff\xfe"}', JSON_OR_PARAM),
        ("lone surrogate escape", b'{"owner":"\\ud800"}', JSON_OR_PARAM),
        ("overlong UTF-8", b'{"owner":"\xc0\xaf"}', JSON_OR_PARAM),
        ("raw surrogate bytes", b'{"owner":"\xed\xa0\x80"}', JSON_OR_PARAM),
        ("NUL escape in owner", b'{"owner":"a\\u0000b"}', JSON_OR_PARAM),
        ("ESC in owner", b'{"owner":"\\u001b[31m"}', BAD_PARAM),
        ("200-byte owner", b'{"owner":"' + b"x" * 200 + b'"}', BAD_PARAM),
        ("owner object", b'{"owner":{"name":"x"}}', BAD_PARAM),
        ("100 NULs", b"\x00" * 100, BAD_JSON),
        ("object then NUL", b'{"ttl_ms":5000}\x00', BAD_JSON),
        ("object then garbage", b'{"ttl_ms":5000}garbage', BAD_JSON),
        ("two objects", b"{}{}", BAD_JSON),
        ("whitespace only", b"   \r\n\t  ", BAD_JSON),
        ("form body", b"ttl_ms=5&owner=x", BAD_JSON),
        ("single quotes", b"{'ttl_ms':5}", BAD_JSON),
        ("trailing comma", b'{"ttl_ms":5,}', BAD_JSON),
        ("comment", b'{/*c*/"ttl_ms":5}', BAD_JSON),
        ("NaN", b'{"ttl_ms":NaN}', BAD_JSON),
        ("hex number", b'{"ttl_ms":0x10}', BAD_JSON),
        ("leading zero", b'{"ttl_ms":0100}', BAD_JSON),
        ("plus sign", b'{"ttl_ms":+100}', BAD_JSON),
        ("8000 fields", b"{" + b",".join(b'"f%d":1' % i for i in range(900)) + b"}", BAD_PARAM),
    ]
    cases = []
    for name, body, expect in bodies:
        key = ctx.key("hj")
        cases.append(http_case("POST body " + name, "POST", path(key), body, None, expect, free_after=key))
    # the same against the canary (acquire: must stay the canary's)
    for name, body, expect in bodies[:10]:
        cases.append(http_case("POST canary body " + name, "POST", path(canary.key), body, None, expect))
    # and against renew / release of the canary, with its real token
    t = canary.token
    for method in ("PUT", "DELETE"):
        for name, body in (("array", b"[]"), ("number", b"1"), ("unclosed", b'{"token":"' + t.encode()),
                           ("trailing junk", b'{"token":"' + t.encode() + b'"}x'), ("null", b"null")):
            cases.append(http_case("%s canary with a %s body" % (method, name), method, path(canary.key),
                                   body, None, BAD_JSON))
    finish(ctx, canary, cases, 50)


@harness.scenario("hostile parameters and tokens get 400/404/409 and never touch the canary")
def hostile_params(ctx):
    canary = Canary(ctx)
    t = canary.token
    ck = path(canary.key)
    cases = []
    for q in ("ttl_ms", "ttl_ms=1&ttl_ms=2", "ttl_ms=%zz", "owner=%00", "owner=%E2%82", "owner=%ff",
              "ttl_ms=99999999999999999999999999", "x=" + "a" * 3000, "wait_ms=-1", "ttl_ms=1%2E5",
              "ttl_ms=%00", "ttl_ms=5000&x", "&&&=&", "ttl_ms=1 000", "wait_ms=0x1", "owner=a%0D%0AX:y"):
        key = ctx.key("hq")
        cases.append(http_case("POST ?" + q[:40], "POST", path(key, q.replace(" ", "%20")), None, None,
                               BAD_PARAM, free_after=key))
    key = ctx.key("hq")
    cases.append(http_case("ttl_ms in query and body", "POST", path(key, "ttl_ms=5000"), {"ttl_ms": 5000}, None,
                           BAD_PARAM, free_after=key))
    T = t.encode()
    cases += [
        http_case("release canary with another token", "DELETE", ck, None, {"Lock-Token": "0" * 32},
                  J(409, "token_mismatch")),
        http_case("release canary with its token in header and body", "DELETE", ck, {"token": t},
                  {"Lock-Token": t}, BAD_PARAM),
        http_case("release canary with its token in header and query", "DELETE", ck + "?token=" + t,
                  None, {"Lock-Token": t}, BAD_PARAM),
        http_case("release canary with its token twice in the query", "DELETE", ck + "?token=%s&token=%s" % (t, t),
                  None, None, BAD_PARAM),
        http_case("release canary with its token twice in the body", "DELETE", ck,
                  b'{"token":"' + T + b'","token":"' + T + b'"}', None, BAD_PARAM),
        http_case("release canary with its token and ttl_ms", "DELETE", ck, {"token": t, "ttl_ms": 5}, None,
                  BAD_PARAM),
        http_case("release canary with its token and ?ttl_ms", "DELETE", ck + "?ttl_ms=5", None,
                  {"Lock-Token": t}, BAD_PARAM),
        http_case("release canary with its token and an unknown field", "DELETE", ck, {"token": t, "everything": True},
                  None, BAD_PARAM),
        http_case("release canary with the upper-case token", "DELETE", ck, None, {"Lock-Token": t.upper()},
                  J((400, 409), "token_mismatch", "invalid_parameter")),
        http_case("release canary with a prefix of the token", "DELETE", ck, None, {"Lock-Token": t[:16]},
                  J((400, 409), "token_mismatch", "invalid_parameter")),
        http_case("release canary with the token and a NUL", "DELETE", ck, {"token": t + "\u0000"}, None,
                  J((400, 409), "token_mismatch", "invalid_parameter", "invalid_json")),
        http_case("release canary with the token and an escaped NUL in the query", "DELETE",
                  ck + "?token=" + t + "%00", None, None, J((400, 409), "token_mismatch", "invalid_parameter")),
        http_case("release canary with a 5000-char token", "DELETE", ck, {"token": "a" * 5000}, None,
                  J((400, 409), "token_mismatch", "invalid_parameter")),
        http_case("release canary with a numeric token", "DELETE", ck, b'{"token":12345}', None, BAD_PARAM),
        http_case("release canary with a token array", "DELETE", ck, {"token": [t]}, None, BAD_PARAM),
        http_case("release canary with a null token", "DELETE", ck, b'{"token":null}', None, BAD_PARAM),
        http_case("release canary with an empty token", "DELETE", ck, {"token": ""}, None,
                  J(400, "missing_token")),
        http_case("release canary with the token as a bearer credential", "DELETE", ck, None,
                  {"Authorization": "Bearer " + t}, J(400, "missing_token")),
        http_case("release canary with the token in a cookie", "DELETE", ck, None,
                  {"Cookie": "token=" + t}, J(400, "missing_token")),
        http_case("release the canary's key with a trailing NUL", "DELETE", ck + "%00", None, {"Lock-Token": t},
                  BAD_KEY),
        http_case("release the canary's key in upper case", "DELETE", path(canary.key.upper()), None,
                  {"Lock-Token": t}, J(404, "lock_not_found")),
        http_case("release the canary's key with a trailing slash", "DELETE", ck + "/", None,
                  {"Lock-Token": t}, J(404, "lock_not_found")),
        http_case("release the canary's key with a trailing space", "DELETE", ck + "%20", None,
                  {"Lock-Token": t}, J(404, "lock_not_found")),
        http_case("release the canary's key with /./ in front", "DELETE", "/locks/./" + quote(canary.key), None,
                  {"Lock-Token": t}, J(404, "lock_not_found")),
        http_case("renew canary with ttl_ms 1 and an unknown field", "PUT", ck, {"token": t, "ttl_ms": 1, "x": 1},
                  None, BAD_PARAM),
        http_case("renew canary with ttl_ms 0", "PUT", ck, {"token": t, "ttl_ms": 0}, None, BAD_PARAM),
        http_case("renew canary with ttl_ms twice in the query", "PUT", ck + "?ttl_ms=1&ttl_ms=1", None,
                  {"Lock-Token": t}, BAD_PARAM),
        http_case("renew canary with ttl_ms in query and body", "PUT", ck + "?ttl_ms=1", {"ttl_ms": 1},
                  {"Lock-Token": t}, BAD_PARAM),
        http_case("renew canary with wait_ms", "PUT", ck, {"token": t, "wait_ms": 1}, None, BAD_PARAM),
        http_case("renew canary with owner", "PUT", ck, {"token": t, "owner": "thief"}, None, BAD_PARAM),
        http_case("renew canary with a huge ttl", "PUT", ck, {"token": t, "ttl_ms": 10 ** 30}, None, BAD_PARAM),
        http_case("renew canary with a float ttl", "PUT", ck, b'{"token":"' + T + b'","ttl_ms":1.0}', None,
                  BAD_PARAM),
        http_case("renew canary with another token and ttl 1", "PUT", ck, {"token": "f" * 32, "ttl_ms": 1}, None,
                  J(409, "token_mismatch")),
        http_case("acquire the canary", "POST", ck, {"ttl_ms": 1000}, None, J(409, "lock_held")),
        http_case("acquire the canary with owner", "POST", ck + "?owner=thief", None, None, J(409, "lock_held")),
        http_case("inspect the canary with its token", "GET", ck + "?token=" + t, None, None, BAD_PARAM),
    ]
    finish(ctx, canary, cases, 50)


@harness.scenario("hostile keys, paths and methods get 400 invalid_key, 404 or 405, and never touch the canary")
def hostile_keys(ctx):
    canary = Canary(ctx)
    base = ctx.key("hk")
    cases = []
    for esc in ("%zz", "%00", "%ff", "%c0%ae%c0%ae", "%ed%b0%80", "%", "%4", "%0d%0aX-Injected:%20yes",
                "%1b[31m", "%7f", "%f4%90%80%80", "%e2%82", "%fe%ff", "a%00" + quote(canary.key)):
        cases.append(http_case("POST key " + esc, "POST", "/locks/" + base + esc, None, None, BAD_KEY))
        cases.append(http_case("GET key " + esc, "GET", "/locks/" + base + esc, None, None, BAD_KEY))
    long513 = base + "x" * (513 - len(base))
    cases += [
        http_case("POST 513-byte key", "POST", path(long513), None, None, BAD_KEY),
        http_case("POST 513-byte key of 2-byte chars", "POST",
                  path(base + "é" * ((513 - len(base)) // 2) + "x" * ((513 - len(base)) % 2)), None, None, BAD_KEY),
        http_case("POST 10000-byte key", "POST", path(base + "y" * 10000), None, None, JR(400, "invalid_key")),
        http_case("POST /locks/", "POST", "/locks/", None, None, BAD_KEY),
        http_case("DELETE /locks/", "DELETE", "/locks/", None, {"Lock-Token": canary.token}, BAD_KEY),
        http_case("PATCH the canary", "PATCH", path(canary.key), None, {"Lock-Token": canary.token},
                  J(405, "method_not_allowed")),
        http_case("FOO the canary", "FOO", path(canary.key), None, None, J(405, "method_not_allowed")),
        http_case("DELETE /healthz", "DELETE", "/healthz", None, None, J(405, "method_not_allowed")),
        http_case("POST /metrics", "POST", "/metrics", b"x" * 100, None, J(405, "method_not_allowed")),
        http_case("GET /locks?ttl_ms=5", "GET", "/locks?ttl_ms=5", None, None,
                  J(400, "invalid_parameter")),
        # the multi-key release: without a body it names no keys
        http_case("DELETE /locks", "DELETE", "/locks", None, {"Lock-Token": canary.token},
                  J(400, "invalid_parameter")),
        http_case("GET /../../etc/passwd", "GET", "/../../etc/passwd", None, None, J(404, "not_found")),
        http_case("GET /locks/../../etc/passwd", "GET", "/locks/../../etc/passwd", None, None,
                  J(404, "lock_not_found")),
        http_case("GET /admin", "GET", "/admin", None, None, J(404, "not_found")),
    ]
    for raw_key, name in ((base.encode() + b"\xff\xfe", "raw 0xff in the path"),
                          (base.encode() + b"\xc0\xaf", "raw overlong in the path"),
                          (base.encode() + b"\xed\xa0\x80", "raw surrogate in the path")):
        cases.append(raw_case("POST " + name, http_request("POST", b"/locks/" + raw_key), J(400, "invalid_key")))
    cases += [
        raw_case("raw control char in the path", b"GET /locks/" + base.encode() + b"\x01x HTTP/1.1\r\nHost: x\r\n\r\n",
                 JR(400, "invalid_key")),
        raw_case("raw DEL in the path", b"GET /locks/" + base.encode() + b"\x7fx HTTP/1.1\r\nHost: x\r\n\r\n",
                 JR(400, "invalid_key")),
        raw_case("raw NUL in the path", b"GET /locks/" + base.encode() + b"\x00x HTTP/1.1\r\nHost: x\r\n\r\n",
                 JR(400, "invalid_key")),
        raw_case("raw tab in the path", b"GET /locks/" + base.encode() + b"\tx HTTP/1.1\r\nHost: x\r\n\r\n",
                 JR(400, "invalid_key")),
        raw_case("lower-case method", b"get /healthz HTTP/1.1\r\nHost: x\r\n\r\n", JR(405, "method_not_allowed")),
    ]
    finish(ctx, canary, cases, 45)


@harness.scenario("hostile HTTP framing: oversized, absurd, garbage and pipelined requests are refused, lockd lives")
def hostile_framing(ctx):
    canary = Canary(ctx)
    ck = path(canary.key).encode()
    keys = []

    def kp():
        """A fresh key's path for one case (its free_after is the same key)."""
        keys.append(ctx.key("hf"))
        return path(keys[-1]).encode()

    def key():
        return keys[-1]
    big = b'{"ttl_ms":5000,"owner":"' + b"x" * 9000 + b'"}'
    rnd = random.Random(42)
    garbage = bytes(rnd.randrange(256) for _ in range(2000))
    tls_hello = bytes.fromhex("16030100a5010000a10303") + bytes(rnd.randrange(256) for _ in range(160))
    chunked_big = [b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"]
    for _ in range(12):
        chunked_big.append(b"3e8\r\n" + b" " * 1000 + b"\r\n")
    chunked_big.append(b"0\r\n\r\n")
    chunked_key = key()
    TOO_LARGE = J(413, "body_too_large")
    cases = [
        raw_case("body over 8192 bytes by Content-Length", b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(big) + big, TOO_LARGE, free_after=key()),
        raw_case("Content-Length 100000000 without the body", b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: 100000000\r\n\r\n", TOO_LARGE, free_after=key()),
        raw_case("Content-Length 100000000 with Expect: 100-continue", b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\n"
                 b"Expect: 100-continue\r\nContent-Length: 100000000\r\n\r\n", TOO_LARGE, free_after=key()),
        raw_case("chunked body over 8192 bytes", chunks=chunked_big, expect=TOO_LARGE, free_after=chunked_key),
        raw_case("release of the canary with a body over 8192 bytes", b"DELETE " + ck + b" HTTP/1.1\r\nHost: x\r\n"
                 b"Lock-Token: " + canary.token.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(big) + big,
                 TOO_LARGE),
        raw_case("absurd Content-Length", b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: 99999999999999999999999999\r\n\r\n{}", JR(413, "body_too_large"),
                 free_after=key()),
        raw_case("negative Content-Length", b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
                 free_after=key()),
        raw_case("Content-Length abc", b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
                 free_after=key()),
        raw_case("two different Content-Lengths", b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                 b"Content-Length: 40\r\n\r\n{}", free_after=key()),
        raw_case("bad chunk size", b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"zz\r\n{}\r\n0\r\n\r\n", free_after=key()),
        raw_case("20 KB header", b"GET " + kp() + b" HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
                 JR(431, "headers_too_large")),
        raw_case("100 KB header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n"),
        raw_case("100 KB URL", b"GET /locks/" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                 JR(400, "invalid_key")),
        raw_case("300 headers", b"GET " + kp() + b" HTTP/1.1\r\nHost: x\r\n"
                 + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 50) for i in range(300)) + b"\r\n",
                 JR(404, "lock_not_found")),
        raw_case("not HTTP: hello", b"hello\r\n\r\n"),
        raw_case("not HTTP: 2000 random bytes", garbage),
        raw_case("not HTTP: TLS ClientHello", tls_hello, timeout=1.0),  # no line end: closed at the idle timeout
        raw_case("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        raw_case("HTTP/9.9", b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n"),
        raw_case("header without a colon", b"GET /healthz HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n"),
        raw_case("NUL in a header value", b"GET " + kp() + b" HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
                 JR(404, "lock_not_found")),
        raw_case("bare LF line ends", b"GET " + kp() + b" HTTP/1.1\nHost: x\n\n", JR(404, "lock_not_found")),
        raw_case("HTTP/1.0 inspect of a free key", http_request("GET", kp(), version="HTTP/1.0"),
                 J(404, "lock_not_found")),
        raw_case("HTTP/1.0 acquire of the canary", http_request("POST", ck, version="HTTP/1.0"), J(409, "lock_held")),
        raw_case("chunked release of the canary with a bad body", chunks=[
            b"DELETE " + ck + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"2\r\n[]\r\n", b"0\r\n\r\n"], expect=BAD_JSON),
        raw_case("body split into 1-byte writes", chunks=[b"POST " + kp() + b" HTTP/1.1\r\nHost: x\r\n"
                                                          b"Content-Length: 3\r\n\r\n", b"[", b"]", b"x"],
                 expect=BAD_JSON, free_after=key()),
    ]
    failures = run_cases(ctx, cases)
    # pipelined: a good request, a bad one, a good one
    s = socket.create_connection(("127.0.0.1", ctx.lockd.port), timeout=5)
    try:
        pk = kp()
        s.sendall(http_request("GET", pk) + http_request("POST", pk, b"[1]") + http_request("GET", "/healthz"))
        buf, answers = b"", []
        deadline = time.monotonic() + 5
        while len(answers) < 3 and time.monotonic() < deadline:
            p = parse_http(buf)
            if p is not None:
                answers.append(p[0])
                buf = p[3]
                continue
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        if answers != [404, 400, 200]:
            failures.append("pipelined inspect, bad acquire, healthz: statuses %r, want [404, 400, 200]" % answers)
    finally:
        s.close()
    # pipelined garbage after a good request: the good one is answered
    out = send_raw(ctx.lockd.port, http_request("GET", "/healthz") + garbage)
    p = parse_http(out) if out else None
    if p is None or p[0] != 200:
        failures.append("healthz followed by garbage on one connection: %r" % out[:100])
    r = ctx.lockd.request("GET", path(key()))
    if r.status != 404:
        failures.append("the pipelined key is not free afterwards: %r" % r)
    canary.verify(ctx)
    harness.log("     %d cases, %d failed" % (len(cases) + 2, len(failures)))
    check(not failures, "%d cases failed:\n  %s" % (len(failures), "\n  ".join(failures)))


@harness.scenario("slow partial requests do not stop lockd from serving others")
def slowloris(ctx):
    canary = Canary(ctx)
    socks = []
    try:
        for i in range(40):
            s = socket.create_connection(("127.0.0.1", ctx.lockd.port), timeout=5)
            if i % 3 == 0:
                s.sendall(b"POST /locks/" + quote(canary.key).encode() + b" HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            elif i % 3 == 1:
                s.sendall(b"DELETE " + path(canary.key).encode() + b" HTTP/1.1\r\nHost: x\r\nLock-Token: "
                          + canary.token.encode() + b"\r\nContent-Length: 100\r\n\r\n{\"to")
            else:
                s.sendall(b"GE")
            socks.append(s)
        worst = 0.0
        for i in range(20):
            t0 = time.monotonic()
            r = ctx.lockd.request("GET", "/healthz", timeout=5)
            worst = max(worst, time.monotonic() - t0)
            check(r.status == 200, "healthz with 40 stalled clients: %r" % r)
        k = ctx.key("slow")
        g = acquire(ctx, k, ttl_ms=2000)
        req(ctx, "DELETE", k, headers={"Lock-Token": g["token"]})
        harness.log("     slowest healthz with 40 stalled clients: %.1f ms" % (worst * 1000))
        check(worst < 1.0, "healthz took %.3f s with 40 stalled clients" % worst)
    finally:
        for s in socks:
            s.close()
    canary.verify(ctx)

"""tests/e2e/test_edges.py - HTTP's edges, on raw sockets: every error is
a JSON {"error":{"code","message"}} with Content-Type: application/json, and
a malformed request never changes lock state. Header values with a NUL or a
control character, transfer codings lockd cannot read, CONNECT, absolute-
and asterisk-form targets, header sections up to 16 KiB and past it, and
what libmicrohttpd 0.9.75 still answers itself (docs/http.md).
"""

import json
import socket
import time

import harness
from client import acquire, expect_held, parse_expires, parse_http, path, req
from harness import check, eq

T = 3.0  # seconds to wait for an answer


def exchange(port, data, timeout=T):
    """Send data; return (response or None, closed, seconds). response is
    (status, headers, body); closed: lockd closed the connection after it
    (or without one) within the timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.monotonic()
    out, closed, resp = b"", False, None
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # lockd may answer and close before reading everything
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            try:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            out += chunk
            if resp is None:
                p = parse_http(out if not data.startswith(b"HEAD ") else no_body(out))
                if p is not None:
                    resp = p[:3]
                    elapsed = time.monotonic() - t0
                    if p[1].get("connection", "").lower() != "close":
                        return resp, False, elapsed
    finally:
        s.close()
    return resp, closed, time.monotonic() - t0


def no_body(out):
    """A response to HEAD as parse_http() can read it: Content-Length 0."""
    i = out.find(b"\r\n\r\n")
    if i < 0:
        return out
    lines = [ln for ln in out[:i].split(b"\r\n") if not ln.lower().startswith(b"content-length:")]
    return b"\r\n".join(lines) + b"\r\nContent-Length: 0\r\n\r\n" + out[i + 4:]


def head(method, target, headers=(), body=b"", nl=b"\r\n"):
    """A request's bytes; headers are (name, value) pairs of bytes."""
    lines = [method + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1"]
    lines += [k + b": " + v for k, v in headers]
    return nl.join(lines) + nl + nl + body


def expect_error(resp, status, code, what):
    check(resp is not None, "%s: no answer" % what)
    st, hdrs, body = resp
    check(st == status, "%s: status %d, want %d (body %r)" % (what, st, status, body[:200]))
    ctype = (hdrs.get("content-type") or "").split(";")[0].strip()
    check(ctype == "application/json", "%s: Content-Type %r (body %r)" % (what, ctype, body[:200]))
    try:
        err = json.loads(body.decode("utf-8"))["error"]
    except (ValueError, KeyError, TypeError):
        raise harness.Fail("%s: not a JSON error: %r" % (what, body[:200]))
    codes = code if isinstance(code, tuple) else (code,)
    check(err.get("code") in codes, "%s: code %r, want %s" % (what, err.get("code"), "/".join(codes)))
    check(isinstance(err.get("message"), str) and err["message"], "%s: no message" % what)
    check(hdrs.get("x-request-id"), "%s: no X-Request-Id" % what)
    return hdrs, err


def expect_unchanged(ctx, key, g, what):
    """The lock is held exactly as granted: same fence, expiry not moved."""
    body = expect_held(ctx, key, g["fence"], what=what + ": inspect")
    moved = parse_expires(body["expires_at"]) - parse_expires(g["expires_at"])
    check(abs(moved) <= 1.0, "%s: the lock's expiry moved by %.3f s" % (what, moved))


def expect_free(ctx, key, what):
    r = req(ctx, "GET", key)
    check(r.status == 404, "%s: the key is not free: %r" % (what, r))


@harness.scenario("HTTP edges: a NUL or control character in a header lockd reads is 400 and changes nothing")
def header_control_chars(ctx):
    port = ctx.lockd.port
    key = ctx.key("edge-nul")
    g = acquire(ctx, key, ttl_ms=60000, owner="edge")
    tok = g["token"].encode()
    kp = path(key).encode()
    after = [(b"X-After", b"1")]
    variants = [
        ("NUL then x", [(b"Lock-Token", tok + b"\x00x")] + after, b"\r\n"),
        ("NUL then x, last header", [(b"Lock-Token", tok + b"\x00x")], b"\r\n"),
        ("two NULs then x, last header", [(b"Lock-Token", tok + b"\x00\x00x")], b"\r\n"),
        ("trailing NUL", [(b"Lock-Token", tok + b"\x00")] + after, b"\r\n"),
        ("NUL then x, bare LF lines", [(b"Lock-Token", tok + b"\x00x")] + after, b"\n"),
        ("NUL then x, bare LF lines, last", [(b"Lock-Token", tok + b"\x00x")], b"\n"),
        ("\\x01", [(b"Lock-Token", tok + b"\x01")], b"\r\n"),
        ("\\x7f", [(b"Lock-Token", tok + b"\x7f")], b"\r\n"),
        ("ESC", [(b"Lock-Token", tok + b"\x1b[0m")], b"\r\n"),
        ("bare CR then x", [(b"Lock-Token", tok + b"\rx")] + after, b"\r\n"),
        ("CR before CRLF", [(b"Lock-Token", tok + b"\r")] + after, b"\r\n"),
        ("valid token, Authorization with \\x01", [(b"Lock-Token", tok), (b"Authorization", b"Bearer a\x01b")],
         b"\r\n"),
        ("valid token, Authorization with a NUL", [(b"Authorization", b"Bearer a\x00b"), (b"Lock-Token", tok)],
         b"\r\n"),
        ("valid token, Content-Type with a NUL", [(b"Lock-Token", tok), (b"Content-Type", b"text/plain\x00x")],
         b"\r\n"),
        ("valid token, X-Request-Id with \\x01", [(b"X-Request-Id", b"id\x01"), (b"Lock-Token", tok)], b"\r\n"),
        ("valid token, Host with a NUL", [(b"Lock-Token", tok), (b"X-Host", b"1"), (b"Host", b"h\x00x")], b"\r\n"),
        ("valid token, Content-Length 0 with a NUL", [(b"Lock-Token", tok), (b"Content-Length", b"0\x00x")],
         b"\r\n"),
        ("valid token, Transfer-Encoding chunked with a NUL",
         [(b"Lock-Token", tok), (b"Transfer-Encoding", b"chunked\x00x")], b"\r\n"),
    ]
    n = 0
    for method in (b"DELETE", b"PUT"):
        for name, hdrs, nl in variants:
            what = "%s with %s" % (method.decode(), name)
            resp, _, _ = exchange(port, head(method, kp, hdrs, nl=nl))
            expect_error(resp, 400, "invalid_parameter", what)
            expect_unchanged(ctx, key, g, what)
            n += 1
    # acquire and inspect of a free key: nothing is taken
    free = ctx.key("edge-nul-free")
    for method in (b"POST", b"GET", b"HEAD"):
        for hdrs in ([(b"Authorization", b"Bearer x\x00y")], [(b"Content-Length", b"0\x00x")],
                     [(b"Content-Type", b"application/json\x01")], [(b"X-Request-Id", b"a\x00b")]):
            what = "%s of a free key with %r" % (method.decode(), hdrs)
            resp, _, _ = exchange(port, head(method, path(free).encode(), hdrs))
            check(resp is not None and resp[0] == 400, "%s: %r" % (what, resp))
            if method != b"HEAD":
                expect_error(resp, 400, "invalid_parameter", what)
            expect_free(ctx, free, what)
            n += 1
    # a folded (obs-fold) Lock-Token: 400, not a token cut or renamed
    for method in (b"DELETE", b"PUT"):
        data = (method + b" " + kp + b" HTTP/1.1\r\nHost: x\r\nLock-Token: " + tok[:16] + b"\r\n " + tok[16:]
                + b"\r\n\r\n")
        resp, _, _ = exchange(port, data)
        expect_error(resp, 400, "bad_request", "%s with a folded Lock-Token" % method.decode())
        expect_unchanged(ctx, key, g, "folded Lock-Token")
        n += 1
    # a tab is no control character here: OWS before the token, inside Content-Type
    tabs = [(b"Lock-Token", b"\t" + tok), (b"Content-Type", b"text/plain;\tq=1")]
    resp, _, _ = exchange(port, head(b"PUT", kp, tabs))
    check(resp is not None and resp[0] == 200, "PUT with tabs: %r" % (resp,))
    # a header lockd does not read may hold anything
    resp, _, _ = exchange(port, head(b"GET", kp, [(b"X-Junk", b"a\x00b\x01")]))
    check(resp is not None and resp[0] == 200, "GET with a junk X-Junk header: %r" % (resp,))
    resp, _, _ = exchange(port, head(b"DELETE", kp, [(b"Lock-Token", tok)]))
    check(resp is not None and resp[0] == 200, "DELETE with the clean token: %r" % (resp,))
    expect_free(ctx, key, "after the clean release")
    harness.log("     %d refused requests, the lock untouched by each" % n)


@harness.scenario("HTTP edges: a transfer coding but chunked alone is 501 at once, closed; with Content-Length 400")
def transfer_codings(ctx):
    port = ctx.lockd.port
    held = ctx.key("edge-te-held")
    g = acquire(ctx, held, ttl_ms=60000)
    tok = g["token"].encode()
    chunked_body = b"2\r\n{}\r\n0\r\n\r\n"
    cases = [
        ("gzip", [(b"Transfer-Encoding", b"gzip")], b"\x1f\x8b\x08\x00"),
        ("gzip, chunked", [(b"Transfer-Encoding", b"gzip, chunked")], chunked_body),
        ("chunked, gzip", [(b"Transfer-Encoding", b"chunked, gzip")], chunked_body),
        ("identity", [(b"Transfer-Encoding", b"identity")], b"{}"),
        ("deflate", [(b"Transfer-Encoding", b"deflate")], b""),
        ("chunked twice in one header", [(b"Transfer-Encoding", b"chunked, chunked")], chunked_body),
        ("gzip then chunked in two headers", [(b"Transfer-Encoding", b"gzip"), (b"Transfer-Encoding", b"chunked")],
         chunked_body),
        ("chunked with a parameter", [(b"Transfer-Encoding", b"chunked;x=1")], chunked_body),
    ]
    for name, hdrs, body in cases:
        for method, key, extra in ((b"POST", ctx.key("edge-te"), []), (b"PUT", held, [(b"Lock-Token", tok)]),
                                   (b"DELETE", held, [(b"Lock-Token", tok)])):
            what = "%s with Transfer-Encoding %s" % (method.decode(), name)
            resp, closed, secs = exchange(port, head(method, path(key).encode(), extra + hdrs, body))
            hdrs_got, _ = expect_error(resp, 501, "not_implemented", what)
            eq((hdrs_got.get("connection") or "").lower(), "close", what + ": Connection header")
            check(closed, "%s: the connection stayed open" % what)
            check(secs < 1.0, "%s: answered after %.2f s" % (what, secs))
            if key == held:
                expect_unchanged(ctx, held, g, what)
            else:
                expect_free(ctx, key, what)
    # chunked with a Content-Length: ambiguous framing, refused and closed
    for cl in (b"2", b"0", b"100"):
        key = ctx.key("edge-te-cl")
        what = "chunked with Content-Length %s" % cl.decode()
        resp, closed, secs = exchange(port, head(b"POST", path(key).encode(), [
            (b"Transfer-Encoding", b"chunked"), (b"Content-Length", cl)], chunked_body))
        hdrs_got, _ = expect_error(resp, 400, "invalid_parameter", what)
        eq((hdrs_got.get("connection") or "").lower(), "close", what + ": Connection header")
        check(closed and secs < 1.0, "%s: closed %r after %.2f s" % (what, closed, secs))
        expect_free(ctx, key, what)
    # chunked alone, in any case, is read as ever
    for te in (b"chunked", b"CHUNKED"):
        key = ctx.key("edge-te-ok")
        resp, _, _ = exchange(port, head(b"POST", path(key).encode(), [(b"Transfer-Encoding", te)],
                                         b"10\r\n{\"ttl_ms\":60000}\r\n0\r\n\r\n"))
        check(resp is not None and resp[0] == 201, "POST with Transfer-Encoding %s: %r" % (te.decode(), resp))
        t = json.loads(resp[2])["token"]
        r = req(ctx, "DELETE", key, headers={"Lock-Token": t})
        eq(r.status, 200, "release of the chunked acquire")
    expect_unchanged(ctx, held, g, "after the transfer codings")


@harness.scenario("HTTP edges: CONNECT gets 405 method_not_allowed with Allow, as every method lockd does not serve")
def connect_method(ctx):
    port = ctx.lockd.port
    key = ctx.key("edge-connect")
    g = acquire(ctx, key, ttl_ms=60000)
    locks = "GET, HEAD, POST, PUT, DELETE"
    cases = [
        (b"CONNECT", b"127.0.0.1:443", locks),
        (b"CONNECT", b"example.com:80", locks),
        (b"CONNECT", path(key).encode(), locks),
        (b"CONNECT", b"/healthz", "GET, HEAD"),
        (b"FOO", path(key).encode(), locks),
        (b"TRACE", path(key).encode(), locks),
        (b"PATCH", path(key).encode(), locks),
        (b"OPTIONS", path(key).encode(), locks),
        (b"TRACE", b"/healthz", "GET, HEAD"),
    ]
    for method, target, allow in cases:
        what = "%s %s" % (method.decode(), target.decode())
        resp, _, _ = exchange(port, head(method, target, [(b"Lock-Token", g["token"].encode())]))
        hdrs, _ = expect_error(resp, 405, "method_not_allowed", what)
        eq(hdrs.get("allow"), allow, what + ": Allow")
    expect_unchanged(ctx, key, g, "after CONNECT and other methods")


@harness.scenario("HTTP edges: absolute-form targets route by their path and query; asterisk-form gets JSON")
def absolute_form(ctx):
    port = ctx.lockd.port
    key = ctx.key("edge-abs")
    kp = path(key).encode()

    def ask(method, target, hdrs=()):
        resp, _, _ = exchange(port, head(method, target, list(hdrs)))
        check(resp is not None, "%s %s: no answer" % (method.decode(), target.decode()))
        return resp

    resp = ask(b"GET", b"http://127.0.0.1:%d/healthz" % port)
    check(resp[0] == 200 and json.loads(resp[2]) == {"status": "ok"}, "GET http://.../healthz: %r" % (resp,))
    resp = ask(b"POST", b"HTTPS://lockd.example" + kp + b"?ttl_ms=60000&owner=abs")
    check(resp[0] == 201, "POST HTTPS://host/locks/k?ttl_ms=...: %r" % (resp,))
    g = json.loads(resp[2])
    eq(g.get("key"), key, "key of the absolute-form acquire")
    eq(g.get("ttl_ms") <= 60000 and g.get("ttl_ms") > 50000, True, "ttl_ms from the absolute-form query")
    expect_held(ctx, key, g["fence"], "abs", "inspect in origin form")
    resp = ask(b"GET", b"hTTp://h:1" + kp)
    check(resp[0] == 200 and json.loads(resp[2]).get("owner") == "abs", "GET hTTp://h:1/locks/k: %r" % (resp,))
    resp = ask(b"PUT", b"http://h" + kp + b"?ttl_ms=60000", [(b"Lock-Token", g["token"].encode())])
    check(resp[0] == 200, "PUT http://h/locks/k: %r" % (resp,))
    resp = ask(b"DELETE", b"https://h" + kp, [(b"Lock-Token", g["token"].encode())])
    check(resp[0] == 200, "DELETE https://h/locks/k: %r" % (resp,))
    expect_free(ctx, key, "after the absolute-form release")
    # a percent-encoded slash is the same key as in origin form
    resp = ask(b"POST", b"http://h/locks/" + key.encode() + b"%2Fsub")
    check(resp[0] == 201 and json.loads(resp[2]).get("key") == key + "/sub", "POST http://h/locks/k%%2Fsub: %r"
          % (resp,))
    r = req(ctx, "DELETE", key + "/sub", headers={"Lock-Token": json.loads(resp[2])["token"]})
    eq(r.status, 200, "release of k/sub in origin form")
    # no path: "/", which is no route
    for target in (b"http://h", b"http://h?x=1", b"HTTP://127.0.0.1:8080"):
        expect_error(ask(b"GET", target), 404, "not_found", "GET " + target.decode())
    # not a path, nor an absolute http(s) URI
    for target in (b"healthz", b"*", b"http:///healthz", b"https://", b"ftp://h/healthz", b"h:80", b"locks/x"):
        expect_error(ask(b"GET", target), 400, "bad_request", "GET " + target.decode())
    # the asterisk form is OPTIONS': lockd serves no OPTIONS, and says what it serves
    hdrs, _ = expect_error(ask(b"OPTIONS", b"*"), 405, "method_not_allowed", "OPTIONS *")
    eq(hdrs.get("allow"), "GET, HEAD, POST, PUT, DELETE", "OPTIONS *: Allow")


def section(target, size, field=b"X-Big", prefix=b""):
    """A GET whose request line and headers are size bytes, the padding in
    one field (after prefix)."""
    base = head(b"GET", target, [(field, prefix)])
    return head(b"GET", target, [(field, prefix + b"a" * (size - len(base)))])


@harness.scenario("HTTP edges: request headers up to 16 KiB are answered as ever; bigger ones get a JSON 431")
def header_sizes(ctx):
    port = ctx.lockd.port
    key = ctx.key("edge-hdr")
    g = acquire(ctx, key, ttl_ms=60000)
    kp = path(key).encode()
    # 16 KiB in total, in the shapes real clients send: one big field (a
    # JWT), cookies, 150 fields
    for size in (8192, 12000, 16384):
        data = section(kp, size)
        eq(len(data), size, "request size")
        resp, _, _ = exchange(port, data)
        check(resp is not None and resp[0] == 200, "a %d-byte header section: %r" % (size, resp))
    # Cookie fields cost libmicrohttpd twice their size and more (docs/
    # http.md): 8 KiB of them, in one cookie or up to 100, in a 16 KiB section
    for name, cookie in (("one 8 KiB cookie", b"session=" + b"s" * 8184),
                         ("a jar of 80 cookies", b"; ".join(b"c%02d=%s" % (i, b"v" * 96) for i in range(80))),
                         ("a jar of 100 cookies", b"; ".join(b"c%03d=%s" % (i, b"v" * 75) for i in range(100)))):
        base = head(b"GET", b"/healthz", [(b"Cookie", cookie), (b"X-Pad", b"")])
        data = head(b"GET", b"/healthz", [(b"Cookie", cookie), (b"X-Pad", b"p" * (16384 - len(base)))])
        eq(len(data), 16384, "request size")
        resp, _, _ = exchange(port, data)
        check(resp is not None and resp[0] == 200, "a 16384-byte section with %s: %r" % (name, resp))
    for n, size in ((150, 97), (250, 54)):
        data = head(b"GET", kp, [(b"X-F%03d" % i, b"v" * size) for i in range(n)])
        check(len(data) <= 16384, "%d fields: %d bytes" % (n, len(data)))
        resp, _, _ = exchange(port, data)
        check(resp is not None and resp[0] == 200, "%d fields, %d bytes: %r" % (n, len(data), resp))
    # a big Lock-Token is read, and refused as a token, not as a header
    resp, _, _ = exchange(port, head(b"DELETE", kp, [(b"Lock-Token", b"a" * 10000)]))
    big = "DELETE with a 10000-byte Lock-Token"
    check(resp is not None and resp[0] in (400, 409), "%s: %r" % (big, resp))
    expect_error(resp, resp[0], ("invalid_parameter", "token_mismatch"), big)
    # an acquire and a release with a 16 KiB section work
    other = ctx.key("edge-hdr-acq")
    data = head(b"POST", path(other).encode(), [(b"Content-Length", b"2"), (b"X-Pad", b"")], b"{}")
    data = head(b"POST", path(other).encode(), [(b"Content-Length", b"2"),
                                                (b"X-Pad", b"p" * (16384 - (len(data) - 2)))], b"{}")
    resp, _, _ = exchange(port, data)
    check(resp is not None and resp[0] == 201, "acquire with a 16384-byte header section: %r" % (resp,))
    r = req(ctx, "DELETE", other, headers={"Lock-Token": json.loads(resp[2])["token"], "X-Pad": "p" * 16000})
    eq(r.status, 200, "release with a 16 KB header")
    # bigger: lockd's JSON 431, and the connection closed
    for method, extra in ((b"GET", []), (b"DELETE", [(b"Lock-Token", g["token"].encode())]),
                          (b"PUT", [(b"Lock-Token", g["token"].encode())])):
        for size in (16385, 20000, 28000):
            base = head(method, kp, extra + [(b"X-Big", b"")])
            data = head(method, kp, extra + [(b"X-Big", b"a" * (size - len(base)))])
            what = "%s with a %d-byte header section" % (method.decode(), size)
            resp, closed, _ = exchange(port, data)
            hdrs, _ = expect_error(resp, 431, "headers_too_large", what)
            eq((hdrs.get("connection") or "").lower(), "close", what + ": Connection header")
            check(closed, what + ": the connection stayed open")
    expect_unchanged(ctx, key, g, "after the big headers")
    # the bound is --max-header-bytes
    small = ctx.new_lockd(args=["--max-header-bytes", "4096"])
    resp, _, _ = exchange(small.port, section(b"/healthz", 4096))
    check(resp is not None and resp[0] == 200, "--max-header-bytes 4096, a 4096-byte section: %r" % (resp,))
    resp, _, _ = exchange(small.port, section(b"/healthz", 4097))
    expect_error(resp, 431, "headers_too_large", "--max-header-bytes 4096, a 4097-byte section")


@harness.scenario("HTTP edges: what libmicrohttpd still answers itself is as docs/http.md says, and changes nothing")
def mhd_answers(ctx):
    """Each case of docs/http.md's table: its status (0: closed without an
    answer), the connection closed, lockd alive, a lock untouched."""
    port = ctx.lockd.port
    key = ctx.key("edge-mhd")
    g = acquire(ctx, key, ttl_ms=60000)
    kp = path(key).encode()
    lt = b"\r\nLock-Token: " + g["token"].encode() + b"\r\n"
    cases = [
        ("HTTP/2.0 in the request line", b"DELETE " + kp + b" HTTP/2.0\r\nHost: x" + lt + b"\r\n", 505),
        ("HTTP/0.9 in the request line", b"DELETE " + kp + b" HTTP/0.9\r\nHost: x" + lt + b"\r\n", 505),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
        ("no HTTP version", b"DELETE " + kp + b"\r\nHost: x" + lt + b"\r\n", 400),
        ("version HTTP/1", b"DELETE " + kp + b" HTTP/1\r\nHost: x" + lt + b"\r\n", 400),
        ("version in lower case", b"DELETE " + kp + b" http/1.1\r\nHost: x" + lt + b"\r\n", 400),
        ("a header line without a colon", b"DELETE " + kp + b" HTTP/1.1\r\nHost: x" + lt + b"NoColon\r\n\r\n", 400),
        ("a malformed chunk size", b"PUT " + kp + b" HTTP/1.1\r\nHost: x" + lt
         + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400),
        ("a chunk size past 2^64", b"PUT " + kp + b" HTTP/1.1\r\nHost: x" + lt
         + b"Transfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n", 413),
        ("Content-Length abc", b"PUT " + kp + b" HTTP/1.1\r\nHost: x" + lt + b"Content-Length: abc\r\n\r\n{}", 400),
        ("Content-Length past 2^64", b"PUT " + kp + b" HTTP/1.1\r\nHost: x" + lt
         + b"Content-Length: 99999999999999999999999\r\n\r\n", 413),
        ("a request line over the memory pool", b"DELETE " + kp + b"?x=" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x"
         + lt + b"\r\n", 414),
        ("a header section over the memory pool", b"DELETE " + kp + b" HTTP/1.1\r\nHost: x" + lt + b"X-Big: "
         + b"a" * 40000 + b"\r\n\r\n", 431),
        ("600 small fields", b"DELETE " + kp + b" HTTP/1.1\r\nHost: x" + lt
         + b"".join(b"A%d: b\r\n" % i for i in range(600)) + b"\r\n", 431),
        ("a jar of 600 cookies", b"DELETE " + kp + b" HTTP/1.1\r\nHost: x" + lt + b"Cookie: "
         + b"; ".join(b"c%03d=v" % i for i in range(600)) + b"\r\n\r\n", 431),
        ("a 16 KiB section that is one Cookie", b"DELETE " + kp + b" HTTP/1.1\r\nHost: x" + lt + b"Cookie: s="
         + b"v" * (16300 - len(kp) - len(lt)) + b"\r\n\r\n", 431),
        ("a request line without a space", b"hello\r\n\r\n", 0),
    ]
    failures = []
    for name, data, status in cases:
        resp, closed, _ = exchange(port, data)
        got = resp[0] if resp is not None else 0
        if got != status:
            failures.append("%s: status %r, want %r (%r)" % (name, got, status, resp))
        elif not closed:
            failures.append("%s: the connection stayed open" % name)
        if not ctx.lockd.alive():
            failures.append("%s: lockd died" % name)
            break
    # and what it lets through, which lockd answers as ever
    for name, data in (("HTTP/1.2", b"GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n"),
                       ("no Host", b"GET /healthz HTTP/1.1\r\n\r\n"),
                       ("bare LF line ends", b"GET /healthz HTTP/1.1\nHost: x\n\n")):
        resp, _, _ = exchange(port, data)
        if resp is None or resp[0] != 200:
            failures.append("%s: %r, want 200" % (name, resp))
    resp, _, _ = exchange(port, b"DELETE " + kp + b" HTTP/1.1\r\nHost: x\r\nLock-Token : " + g["token"].encode()
                          + b"\r\n\r\n")
    if resp is None or resp[0] != 400 or json.loads(resp[2])["error"]["code"] != "missing_token":
        failures.append("a space before Lock-Token's colon: %r, want 400 missing_token" % (resp,))
    check(not failures, "libmicrohttpd's own answers are not as docs/http.md says:\n  " + "\n  ".join(failures))
    expect_unchanged(ctx, key, g, "after libmicrohttpd's own answers")

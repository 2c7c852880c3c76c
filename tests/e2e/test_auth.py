"""tests/e2e/test_auth.py - scoped credentials (--auth-file, docs/API.md
"Authentication") against a real lockd on memory://: each rule of a
credential (prefixes, verbs, modes, multi, open) allowing and refusing on
every verb, 401 vs 403, refusals that change nothing (checked by an
admin credential afterwards), SIGHUP granting and revoking, a bad file on
SIGHUP keeping the old policy, refusals at start, --hash-token, and the
legacy token flags beside an --auth-file.

The policy is about who may do what, not about the store: memory is
enough (certificates are the unit test's, tests/unit/test_authz.c).
"""

import hashlib
import json
import os
import signal
import subprocess
import time

import harness
from client import expect_error, expect_json, path
from harness import check, eq

T_ORD = "orders-Token_e2e-0123"
T_LIST = "lister-Token_e2e-4567"
T_OPS = "ops-Token_e2e-89ab"
T_NEW = "newcomer-Token_e2e-cdef"
T_ADMIN = "legacy-admin-Token_e2e"


def sha(t):
    return hashlib.sha256(t.encode()).hexdigest()


def bearer(t):
    return {"Authorization": "Bearer " + t}


def policy(open_=None, orders_prefixes=("orders/", "jobs/orders-"), extra=()):
    creds = [
        {"name": "orders", "token_sha256": sha(T_ORD), "prefixes": list(orders_prefixes),
         "verbs": ["acquire", "renew", "release", "inspect"], "modes": ["exclusive"], "multi": False,
         "max_waiters": 5},
        {"name": "lister", "token_sha256": sha(T_LIST), "prefixes": ["orders/"],
         "verbs": ["list", "acquire", "renew", "release"]},
        {"name": "ops", "token_sha256": sha(T_OPS), "prefixes": [""],
         "verbs": ["*", "force", "probes", "metrics"]},
    ] + list(extra)
    p = {"credentials": creds}
    if open_ is not None:
        p["open"] = open_
    return p


def write_policy(ctx, p, name=None):
    fn = name or os.path.join(ctx.tmpdir, "auth-%d.json" % harness.free_port())
    tmp = fn + ".tmp"
    with open(tmp, "w") as f:
        f.write(p if isinstance(p, str) else json.dumps(p))
    os.replace(tmp, fn)
    return fn


def auth_lockd(ctx, p=None, extra=()):
    fn = write_policy(ctx, p if p is not None else policy())
    return ctx.new_lockd(["--auth-file", fn] + list(extra)), fn


def grant(ld, key, who=T_OPS, **body):
    r = ld.request("POST", path(key), body or None, headers=bearer(who))
    return expect_json(r, 201, "acquire of %s" % key)


def held_fence(ld, key):
    """The key's fence as ops sees it, or None when free."""
    r = ld.request("GET", path(key), headers=bearer(T_OPS))
    if r.status == 404:
        return None
    return expect_json(r, 200, "inspect of %s by ops" % key)["fence"]


def refused(r, status, what, words=()):
    err = expect_error(r, status, "unauthorized" if status == 401 else "forbidden", what)
    for t in (T_ORD, T_LIST, T_OPS, T_NEW):
        check(t not in err["message"], "%s: the message echoes a token: %r" % (what, err["message"]))
    for w in words:
        check(w in err["message"], "%s: %r not in the message %r" % (what, w, err["message"]))
    if status == 401:
        check((r.header("WWW-Authenticate") or "").startswith("Bearer"),
              "%s: no WWW-Authenticate: %r" % (what, r.headers))
    return err


@harness.scenario("auth: a credential acquires, renews, releases and inspects within its prefixes; 403 outside, "
                  "401 without or with a wrong token; refusals change nothing", backends=["memory"])
def single_key_scope(ctx):
    ld, _ = auth_lockd(ctx)
    inside, inside2 = "orders/" + ctx.key("a"), "jobs/orders-" + ctx.key("b")
    outside = "billing/" + ctx.key("c")
    for key in (inside, inside2):
        g = grant(ld, key, T_ORD, ttl_ms=20000)
        r = ld.request("PUT", path(key), {"ttl_ms": 20000}, headers=dict(bearer(T_ORD), **{"Lock-Token": g["token"]}))
        expect_json(r, 200, "renew in scope")
        expect_json(ld.request("GET", path(key), headers=bearer(T_ORD)), 200, "inspect in scope")
        r = ld.request("DELETE", path(key), headers=dict(bearer(T_ORD), **{"Lock-Token": g["token"]}))
        expect_json(r, 200, "release in scope")
        eq(held_fence(ld, key), None, "released")
    # outside: ops holds the key; orders may do nothing with it
    g = grant(ld, outside, T_OPS, ttl_ms=20000)
    tok = {"Lock-Token": g["token"]}
    refused(ld.request("POST", path(outside), headers=bearer(T_ORD)), 403, "acquire outside",
            ["credential 'orders' may not acquire keys outside orders/, jobs/orders-"])
    refused(ld.request("PUT", path(outside), headers=dict(bearer(T_ORD), **tok)), 403, "renew outside",
            ["may not renew keys outside"])
    refused(ld.request("DELETE", path(outside), headers=dict(bearer(T_ORD), **tok)), 403, "release outside",
            ["may not release keys outside"])
    refused(ld.request("GET", path(outside), headers=bearer(T_ORD)), 403, "inspect outside",
            ["may not inspect keys outside"])
    # a prefix is bytes: "orders" alone is not within "orders/"
    refused(ld.request("POST", path("orders"), headers=bearer(T_ORD)), 403, "acquire of 'orders'")
    # lister has no inspect
    refused(ld.request("GET", path(inside), headers=bearer(T_LIST)), 403, "lister inspect",
            ["credential 'lister' may not inspect keys"])
    # 401: nothing, a wrong token, not Bearer
    for hdrs, words in (({}, []), (bearer(T_NEW), ["matches no credential"]),
                        ({"Authorization": "Basic " + T_ORD}, ["Bearer"])):
        for m in ("POST", "PUT", "DELETE", "GET"):
            h = dict(hdrs, **tok) if m in ("PUT", "DELETE") else hdrs
            refused(ld.request(m, path(outside), headers=h), 401, "%s with %r" % (m, list(hdrs)), words)
    eq(held_fence(ld, outside), g["fence"], "held by ops, same fence, after every refusal")
    r = ld.request("GET", path(outside), headers=bearer(T_OPS))
    eq(expect_json(r, 200, "inspect")["ttl_ms"] <= 20000, True, "TTL not renewed by the refused renew")
    eq(held_fence(ld, inside), None, "the refused acquire of 'orders' took nothing")
    check(held_fence(ld, "orders") is None, "'orders' is free")


@harness.scenario("auth: modes, multi-key verbs, list prefixes and forced release follow the credential",
                  backends=["memory"])
def modes_multi_list_force(ctx):
    ld, _ = auth_lockd(ctx)
    k1, k2 = "orders/" + ctx.key("m1"), "orders/" + ctx.key("m2")
    out = "billing/" + ctx.key("m3")
    # modes: orders may take exclusive locks only; lister both
    refused(ld.request("POST", path(k1), {"mode": "shared"}, headers=bearer(T_ORD)), 403, "shared by orders",
            ["credential 'orders' may not acquire shared locks"])
    refused(ld.request("POST", path(k1), {"mode": "shared", "limit": 2}, headers=bearer(T_ORD)), 403,
            "semaphore by orders")
    eq(held_fence(ld, k1), None, "no shared grant")
    g = grant(ld, k1, T_LIST, mode="shared", limit=2, ttl_ms=20000)
    eq(g.get("mode"), "shared", "lister's shared grant")
    ld.request("DELETE", path(k1), headers=dict(bearer(T_LIST), **{"Lock-Token": g["token"]}))
    # multi: orders has "multi": false; lister within orders/ only
    body = {"keys": [k1, k2], "ttl_ms": 20000}
    refused(ld.request("POST", "/locks", body, headers=bearer(T_ORD)), 403, "multi by orders",
            ["may not use several keys at once"])
    refused(ld.request("POST", "/locks", {"keys": [k1, out]}, headers=bearer(T_LIST)), 403, "multi outside",
            ["credential 'lister' may not acquire keys outside orders/: keys[1]"])
    eq((held_fence(ld, k1), held_fence(ld, out)), (None, None), "the refused multi acquires took nothing")
    m = expect_json(ld.request("POST", "/locks", body, headers=bearer(T_LIST)), 201, "multi acquire by lister")
    tok = {"Lock-Token": m["token"]}
    fences = (held_fence(ld, k1), held_fence(ld, k2))
    refused(ld.request("PUT", "/locks", {"keys": [k1, k2]}, headers=dict(bearer(T_ORD), **tok)), 403,
            "multi renew by orders")
    refused(ld.request("DELETE", "/locks", {"keys": [k1, k2]}, headers=dict(bearer(T_ORD), **tok)), 403,
            "multi release by orders")
    refused(ld.request("DELETE", "/locks", {"keys": [k1, k2]}, headers=tok), 401, "multi release, no bearer")
    eq((held_fence(ld, k1), held_fence(ld, k2)), fences, "still held after the refused multi verbs")
    expect_json(ld.request("PUT", "/locks", {"keys": [k1, k2], "ttl_ms": 20000}, headers=dict(bearer(T_LIST), **tok)),
                200, "multi renew by lister")
    # list: lister within orders/, orders has no list, ops anything
    body = expect_json(ld.request("GET", "/locks?prefix=orders/", headers=bearer(T_LIST)), 200, "list orders/")
    check({k1, k2} <= {e["key"] for e in body["locks"]}, "lister sees its keys: %r" % body)
    refused(ld.request("GET", "/locks?prefix=order", headers=bearer(T_LIST)), 403, "list a wider prefix",
            ["may not list keys outside orders/"])
    refused(ld.request("GET", "/locks", headers=bearer(T_LIST)), 403, "list every key")
    refused(ld.request("GET", "/locks?prefix=orders/", headers=bearer(T_ORD)), 403, "list by orders",
            ["may not list keys"])
    refused(ld.request("GET", "/locks?prefix=orders/"), 401, "list, no bearer")
    expect_json(ld.request("GET", "/locks", headers=bearer(T_OPS)), 200, "list by ops")
    # force: ops only
    for who in (T_ORD, T_LIST):
        refused(ld.request("DELETE", path(k1, "force=true"), headers=bearer(who)), 403, "force by a non-admin",
                ["may not force-release keys"])
    refused(ld.request("DELETE", path(k1, "force=true")), 401, "force, no bearer")
    eq(held_fence(ld, k1), fences[0], "still held after the refused forced releases")
    expect_json(ld.request("DELETE", path(k1, "force=true"), headers=bearer(T_OPS)), 200, "force by ops")
    eq(held_fence(ld, k1), None, "freed by ops")
    expect_json(ld.request("DELETE", "/locks", {"keys": [k2]}, headers=dict(bearer(T_LIST), **tok)), 200,
                "multi release by lister")


@harness.scenario("auth: operator endpoints are open by default; those left out of 'open' need probes or metrics",
                  backends=["memory"])
def operator_endpoints(ctx):
    ld, _ = auth_lockd(ctx)
    for p in ("/healthz", "/readyz", "/metrics"):
        eq(ld.request("GET", p).status, 200, "%s open by default" % p)
    ld2, _ = auth_lockd(ctx, policy(open_=["healthz"]))
    eq(ld2.request("GET", "/healthz").status, 200, "healthz open")
    eq(ld2.request("GET", "/healthz", headers=bearer(T_NEW)).status, 200, "healthz open, whatever the token")
    for p in ("/readyz", "/metrics"):
        refused(ld2.request("GET", p), 401, "%s closed, no bearer" % p)
        refused(ld2.request("GET", p, headers=bearer(T_ORD)), 403, "%s closed, orders" % p)
        eq(ld2.request("GET", p, headers=bearer(T_OPS)).status, 200, "%s with ops" % p)
    ld3, _ = auth_lockd(ctx, policy(open_=[]))
    refused(ld3.request("GET", "/healthz"), 401, "healthz closed")
    eq(ld3.request("GET", "/healthz", headers=bearer(T_OPS)).status, 200, "healthz with probes")


def hup(ld, n, timeout=5.0):
    """The n-th SIGHUP, waited for by its log line."""
    ld.signal(signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while ld.log_tail(200000).count("SIGHUP:") < n:
        check(time.monotonic() < deadline, "no SIGHUP line %d: %s" % (n, ld.log_tail()))
        time.sleep(0.02)
    check(ld.alive(), "lockd died on SIGHUP")


@harness.scenario("auth: SIGHUP re-reads --auth-file (grants and revokes at once); a bad file keeps the old policy",
                  backends=["memory"])
def sighup_reload(ctx):
    ld, fn = auth_lockd(ctx)
    key = "billing/" + ctx.key("hup")
    refused(ld.request("POST", path(key), headers=bearer(T_ORD)), 403, "billing/ before the reload")
    refused(ld.request("POST", path(key), headers=bearer(T_NEW)), 401, "newcomer before the reload")
    newcomer = {"name": "newcomer", "token_sha256": sha(T_NEW), "prefixes": ["billing/"], "verbs": ["*"]}
    p = policy(orders_prefixes=("orders/", "billing/"), extra=[newcomer])
    p["credentials"] = [c for c in p["credentials"] if c["name"] != "lister"]  # revoked
    write_policy(ctx, p, fn)
    hup(ld, 1)
    g = grant(ld, key, T_ORD, ttl_ms=20000)
    r = ld.request("POST", path(key), headers=bearer(T_NEW))
    expect_error(r, 409, "lock_held", "newcomer may acquire billing/ now (held by orders)")
    refused(ld.request("POST", path("orders/" + ctx.key("l")), headers=bearer(T_LIST)), 401, "lister revoked")
    text = ld.log_tail(200000)
    check(fn in text and "SIGHUP:" in text, "the SIGHUP line names the file: %s" % text[-1000:])
    # broken files: not JSON, an unknown field, deleted - each keeps the policy in force
    for n, bad in enumerate(('{"credentials": [', json.dumps({"credentials": [], "colour": 1}), None), start=2):
        if bad is None:
            os.unlink(fn)
        else:
            write_policy(ctx, bad, fn)
        hup(ld, n)
        expect_json(ld.request("GET", path(key), headers=bearer(T_ORD)), 200, "orders after bad file %d" % n)
        expect_error(ld.request("POST", path(key), headers=bearer(T_NEW)), 409, "lock_held",
                     "newcomer after bad file %d" % n)
        refused(ld.request("POST", path("orders/x"), headers=bearer(T_LIST)), 401, "lister still revoked")
    text = ld.log_tail(200000)
    check(text.count("the old policy stays in force") >= 3, "three warnings: %s" % text[-2000:])
    check("colour" in text, "the warning names the bad field: %s" % text[-2000:])
    for t in (T_ORD, T_LIST, T_OPS, T_NEW):
        check(t not in text, "a token reached the log")
    ld.request("DELETE", path(key), headers=dict(bearer(T_ORD), **{"Lock-Token": g["token"]}))


def run_lockd(args, stdin=None, timeout=10):
    p = subprocess.run([harness.LOCKD_BIN] + args, input=stdin, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


@harness.scenario("auth: a bad --auth-file exits 2 at start naming the file and the field", backends=["memory"])
def start_refusals(ctx):
    good = policy()["credentials"][0]
    cases = [
        ('{"credentials": [', ["not JSON"]),
        (json.dumps({"credentials": [dict(good, colour="red")]}), ["credentials[0]: unknown field 'colour'"]),
        (json.dumps({"credentials": [dict(good, token_sha256=sha(T_ORD).upper())]}), ["credentials[0].token_sha256"]),
        (json.dumps({"credentials": [dict(good, prefixes=[])]}), ["credentials[0].prefixes"]),
        (json.dumps({"credentials": [dict(good, verbs=["acquire", "nuke"])]}), ["credentials[0].verbs[1]", "nuke"]),
        (json.dumps({"credentials": [good, dict(good, token_sha256=sha(T_NEW))]}), ["credentials[1].name"]),
        (json.dumps({"credentials": [dict(good, tls_identity="a.svc")]}),
         ["credentials[0].tls_identity", "--tls-client-ca"]),
        (json.dumps({"credentials": [dict(good, name="token")]}), ["--auth-token-file"]),
    ]
    tok = os.path.join(ctx.tmpdir, "tok-%d" % harness.free_port())
    with open(tok, "w") as f:
        f.write("whatever-token\n")
    failures = []
    for text, words in cases:
        fn = write_policy(ctx, text)
        args = ["--listen", "127.0.0.1:%d" % harness.free_port(), "--auth-file", fn]
        if "--auth-token-file" in words:
            args += ["--auth-token-file", tok]
        rc, _, err = run_lockd(args)
        if rc != 2 or fn not in err or not all(w in err for w in words):
            failures.append("%s: exit %r, stderr %r (want %r)" % (text[:60], rc, err[:300], words))
    rc, _, err = run_lockd(["--listen", "127.0.0.1:%d" % harness.free_port(),
                            "--auth-file", "/nonexistent/lockd-auth.json"])
    if rc != 2 or "/nonexistent/lockd-auth.json" not in err:
        failures.append("missing file: exit %r, stderr %r" % (rc, err[:300]))
    check(not failures, "bad --auth-file not refused:\n  " + "\n  ".join(failures))


@harness.scenario("auth: lockd --hash-token prints the token's SHA-256 for token_sha256", backends=["memory"])
def hash_token(ctx):
    rc, out, err = run_lockd(["--hash-token"], stdin=T_NEW + "\n")
    eq((rc, out.strip()), (0, sha(T_NEW)), "--hash-token (stderr %r)" % err)
    rc, out, err = run_lockd(["--hash-token"], stdin=T_NEW + "\r\nsecond line\n")
    eq((rc, out.strip()), (0, sha(T_NEW)), "--hash-token with CRLF")
    rc, out, err = run_lockd(["--hash-token"], stdin="")
    eq(rc, 2, "--hash-token without a token")
    check(err.strip(), "a message on stderr")
    # the printed value works in a file
    cred = {"name": "hashed", "token_sha256": sha(T_NEW), "prefixes": [""], "verbs": ["*"]}
    ld, _ = auth_lockd(ctx, {"credentials": [cred]})
    expect_json(ld.request("POST", path(ctx.key("hash")), headers=bearer(T_NEW)), 201, "acquire with the token")


@harness.scenario("auth: --auth-token-file and --admin-token-file beside --auth-file are credentials token and admin",
                  backends=["memory"])
def legacy_beside_file(ctx):
    adm = os.path.join(ctx.tmpdir, "adm-%d" % harness.free_port())
    with open(adm, "w") as f:
        f.write(T_ADMIN + "\n")
    ld, _ = auth_lockd(ctx, extra=["--admin-token-file", adm])
    key = "billing/" + ctx.key("legacy")
    g = grant(ld, key, T_OPS, ttl_ms=20000)
    refused(ld.request("DELETE", path(key, "force=true"), headers=bearer(T_ORD)), 403, "force by orders")
    expect_json(ld.request("GET", path(key), headers=bearer(T_ADMIN)), 200, "admin inspects any key")
    body = expect_json(ld.request("DELETE", path(key, "force=true"), headers=bearer(T_ADMIN)), 200, "admin forces")
    eq(body.get("holders"), 1, "one holder removed")
    check(g["fence"] > 0, "fence")
    expect_json(ld.request("POST", path("orders/" + ctx.key("l")), headers=bearer(T_ORD)), 201, "orders still works")


@harness.scenario("auth: the access log line names the credential of a request, never its token",
                  backends=["memory"])
def access_log_credential(ctx):
    ld, _ = auth_lockd(ctx, extra=["--log-format", "json"])
    key = ctx.key("orders/logged")
    rid = "auth-log-%d" % harness.free_port()
    headers = dict(bearer(T_ORD), **{"X-Request-Id": rid})
    expect_json(ld.request("POST", path(key), {"ttl_ms": 5000}, headers=headers), 201, "acquire by orders")
    line = None
    deadline = time.monotonic() + 5
    while line is None and time.monotonic() < deadline:
        for raw in ld.log_tail(20000).splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if ev.get("request_id") == rid and ev.get("status") == 201:
                line = ev
        if line is None:
            time.sleep(0.05)
    check(line is not None, "no access line for %s in %r" % (rid, ld.log_tail(2000)))
    eq(line.get("credential"), "orders", "the access line's credential")
    check(T_ORD not in ld.log_tail(200000), "the bearer token is in the log")

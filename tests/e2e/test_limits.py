"""tests/e2e/test_limits.py - the per-client limits: --max-waiters-per-client
(requests that may wait, counted per credential with auth on, else per
client address) and --max-connections-per-ip, both answered 429
too_many_requests with Retry-After: 1 and counted in
lockd_http_limited_total{limit}; lockd_http_client_waiters and
lockd_http_waiting_clients show the waiter count going back to 0 whatever
ended the waits (a grant, a timeout, a client gone).

With --auth-file the client is the credential: two tokens from one
address count apart, and a credential's max_waiters overrides the flag.

The waiters are raw sockets, some bound to 127.0.0.2 to stand for a second
client address (all of 127.0.0.0/8 is loopback on Linux). Memory store
only: the limits sit in front of the store, the same for every backend.
"""

import hashlib
import json
import os
import socket
import subprocess
import time

import harness
from client import expect_json, http_request, metric, parse_metrics, path, read_answer
from harness import check, eq

OTHER_ADDR = "127.0.0.2"  # a second client address on loopback


def park(ld, method, target, body, source="127.0.0.1", headers=None):
    """Send one request from source on its own connection and leave it
    unanswered: the socket, to read or close later."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(10)
        s.bind((source, 0))
        s.connect(("127.0.0.1", ld.port))
        data = json.dumps(body).encode() if body is not None else b""
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        s.sendall(http_request(method, target, data, hdrs))
    except OSError:
        s.close()
        raise
    return s


def answer(s, timeout=10.0):
    """The answer on a parked socket: (status, headers, json body)."""
    p = read_answer(s, timeout)
    check(p is not None, "no answer on a parked connection within %.0f s" % timeout)
    status, headers, body, _ = p
    return status, headers, json.loads(body.decode()) if body else None


def request_from(ld, source, method, target, body=None, headers=None):
    """One request from source on its own connection: (status, headers,
    json body)."""
    s = park(ld, method, target, body, source, headers)
    try:
        return answer(s)
    finally:
        s.close()


def gauges(ld, source="127.0.0.1"):
    """(client_waiters, waiting_clients, limited{waiters},
    limited{connections}) from /metrics, scraped from source."""
    s = park(ld, "GET", "/metrics", None, source)
    try:
        p = read_answer(s, 10)
    finally:
        s.close()
    check(p is not None and p[0] == 200, "/metrics from %s: %r" % (source, p))
    s = parse_metrics(p[2].decode())[0]
    return (metric(s, "lockd_http_client_waiters"), metric(s, "lockd_http_waiting_clients"),
            metric(s, "lockd_http_limited_total", limit="waiters"),
            metric(s, "lockd_http_limited_total", limit="connections"))


def wait_gauges(ld, slots, clients, timeout=10.0, what="waiter gauges"):
    """Until lockd_http_client_waiters and lockd_http_waiting_clients read
    slots and clients (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        g = gauges(ld)
        if g[:2] == (slots, clients):
            return g
        check(time.monotonic() < deadline, "%s: (client_waiters, waiting_clients) = %r, want %r"
              % (what, g[:2], (slots, clients)))
        time.sleep(0.05)


def expect_429(status, headers, body, what):
    eq(status, 429, what + " status")
    eq(headers.get("retry-after"), "1", what + " Retry-After")
    err = (body or {}).get("error") or {}
    eq(err.get("code"), "too_many_requests", what + " code")
    return err.get("message") or ""


def close_all(socks):
    for s in socks:
        s.close()


@harness.scenario("limits: the 4th waiter of one address over --max-waiters-per-client 3 gets 429, "
                  "another address still waits", backends=["memory"])
def waiters_capped(ctx):
    ld = ctx.new_lockd(["--max-waiters-per-client", "3"])
    key, key2 = ctx.key("cap"), ctx.key("cap-multi")
    holder = expect_json(ld.request("POST", path(key), {"ttl_ms": 60000}), 201, "the holder's grant")
    holder2 = expect_json(ld.request("POST", path(key2), {"ttl_ms": 60000}), 201, "the 2nd holder's grant")
    eq(gauges(ld)[:3], (0, 0, 0), "gauges before any waiter")
    socks = []
    try:
        # three waiters from 127.0.0.1: two on one key, one multi-key
        for _ in range(2):
            socks.append(park(ld, "POST", path(key), {"wait_ms": 20000, "ttl_ms": 300}))
        socks.append(park(ld, "POST", "/locks", {"keys": [key2], "wait_ms": 20000, "ttl_ms": 300}))
        wait_gauges(ld, 3, 1, what="three waiters from 127.0.0.1")

        # the 4th, single or multi-key, is refused before the store sees it
        for what, target, body in (("4th waiter", path(key), {"wait_ms": 5000}),
                                   ("4th waiter, several keys", "/locks", {"keys": [key2], "wait_ms": 5000})):
            msg = expect_429(*request_from(ld, "127.0.0.1", "POST", target, body), what)
            check("--max-waiters-per-client" in msg and "client: 3," in msg,
                  "%s: the message names neither the flag nor the cap: %r" % (what, msg))
        eq(gauges(ld)[:3], (3, 1, 2), "gauges after two refusals")

        # try-once acquires are never limited: the store answers 409
        for what, target, body in (("try-once", path(key), {"wait_ms": 0}),
                                   ("try-once, several keys", "/locks", {"keys": [key2]})):
            status, _, b = request_from(ld, "127.0.0.1", "POST", target, body)
            eq((status, (b or {}).get("error", {}).get("code")), (409, "lock_held"), what + " at the cap")

        # another address parks fine
        socks.append(park(ld, "POST", path(key), {"wait_ms": 20000, "ttl_ms": 300}, source=OTHER_ADDR))
        wait_gauges(ld, 4, 2, what="a waiter from %s" % OTHER_ADDR)

        # the holders leave: every waiter gets its grant in turn (ttl 300
        # ms each), the refused ones never queued
        for k, h in ((key, holder), (key2, holder2)):
            expect_json(ld.request("DELETE", path(k), headers={"Lock-Token": h["token"]}), 200,
                        "a holder's release")
        for i, s in enumerate(socks):
            status, _, b = answer(s, 15)
            eq(status, 201, "waiter %d's answer (%r)" % (i + 1, b))
    finally:
        close_all(socks)
    wait_gauges(ld, 0, 0, what="after the waiters were granted")
    # new waiters from the same address are accepted again
    for i in range(3):
        expect_json(ld.request("POST", path(key), {"wait_ms": 5000, "ttl_ms": 200}), 201,
                    "waiter %d after" % (i + 1))
    wait_gauges(ld, 0, 0, what="after three more waits")


@harness.scenario("limits: waiters that time out, whose client leaves or that lockd drains give their slot back",
                  backends=["memory"])
def waiter_slots_returned(ctx):
    ld = ctx.new_lockd(["--max-waiters-per-client", "2"])
    key = ctx.key("slots")
    expect_json(ld.request("POST", path(key), {"ttl_ms": 60000}), 201, "the holder's grant")
    socks = []
    try:
        # timed out: 409 after wait_ms
        socks = [park(ld, "POST", path(key), {"wait_ms": 300}) for _ in range(2)]
        for i, s in enumerate(socks):
            eq(answer(s)[0], 409, "timed-out waiter %d" % (i + 1))
        close_all(socks)
        wait_gauges(ld, 0, 0, what="after two timeouts")

        # client gone: lockd sees the socket close and drops the waiter
        socks = [park(ld, "POST", path(key), {"wait_ms": 20000}) for _ in range(2)]
        wait_gauges(ld, 2, 1, what="two parked waiters")
        close_all(socks)
        wait_gauges(ld, 0, 0, what="after their clients left")

        # the cap holds again, exactly: two park, the third is refused
        socks = [park(ld, "POST", path(key), {"wait_ms": 20000}) for _ in range(2)]
        wait_gauges(ld, 2, 1, what="two parked waiters again")
        expect_429(*request_from(ld, "127.0.0.1", "POST", path(key), {"wait_ms": 1000}), "3rd waiter")

        # shutdown: the parked waiters are answered 503, lockd exits 0
        eq(ld.stop(), 0, "exit code with parked waiters")
        for i, s in enumerate(socks):
            status, _, b = answer(s)
            eq((status, (b or {}).get("error", {}).get("code")), (503, "shutting_down"),
               "parked waiter %d at shutdown" % (i + 1))
        eq(ld.sanitizer_report(), "", "sanitizer report")
    finally:
        close_all(socks)


@harness.scenario("limits: --max-waiters-per-client defaults to a quarter of --max-connections",
                  backends=["memory"])
def waiters_default(ctx):
    ld = ctx.new_lockd(["--max-connections", "16", "--threads", "1"])  # auto: 4
    key = ctx.key("auto")
    expect_json(ld.request("POST", path(key), {"ttl_ms": 60000}), 201, "the holder's grant")
    socks = []
    try:
        socks = [park(ld, "POST", path(key), {"wait_ms": 20000}) for _ in range(4)]
        wait_gauges(ld, 4, 1, what="four parked waiters")
        msg = expect_429(*request_from(ld, "127.0.0.1", "POST", path(key), {"wait_ms": 1000}), "5th waiter")
        check("client: 4," in msg, "the message does not name the cap 4: %r" % msg)
        socks.append(park(ld, "POST", path(key), {"wait_ms": 20000}, source=OTHER_ADDR))
        wait_gauges(ld, 5, 2, what="a waiter from %s" % OTHER_ADDR)
    finally:
        close_all(socks)
    wait_gauges(ld, 0, 0, what="after their clients left")


@harness.scenario("limits: an address over --max-connections-per-ip gets 429, counted as limit=connections",
                  backends=["memory"])
def connections_capped(ctx):
    ld = ctx.new_lockd(["--max-connections-per-ip", "2"])
    held = []
    try:
        # two kept-alive connections from 127.0.0.1 (the harness's port
        # probe may still count for a moment)
        for i in range(2):
            held.append(harness.served_client(ld.port, i + 1))
        before = gauges(ld, OTHER_ADDR)[3]
        status, headers, body = request_from(ld, "127.0.0.1", "GET", "/healthz")
        msg = expect_429(status, headers, body, "3rd connection from 127.0.0.1")
        check("--max-connections-per-ip" in msg, "the message does not name the flag: %r" % msg)
        # another address is served, and sees the refusal counted
        eq(gauges(ld, OTHER_ADDR)[3], before + 1, "lockd_http_limited_total{limit=\"connections\"}")
    finally:
        for c in held:
            c.close()



@harness.scenario("limits: LOCKD_MAX_WAITERS_PER_CLIENT sets the cap; a bad value exits 2", backends=["memory"])
def waiters_env(ctx):
    for bad in ("abc", "-1", "1000001", ""):
        p = subprocess.run([harness.LOCKD_BIN, "--listen", "127.0.0.1:%d" % harness.free_port(),
                            "--max-waiters-per-client", bad], capture_output=True, timeout=10)
        eq(p.returncode, 2, "exit code for --max-waiters-per-client %r" % bad)
        check(b"--max-waiters-per-client" in p.stderr, "stderr for %r: %r" % (bad, p.stderr[:300]))
    ld = ctx.new_lockd(env={"LOCKD_MAX_WAITERS_PER_CLIENT": "1"})
    key = ctx.key("env")
    expect_json(ld.request("POST", path(key), {"ttl_ms": 60000}), 201, "the holder's grant")
    s = park(ld, "POST", path(key), {"wait_ms": 20000})
    try:
        wait_gauges(ld, 1, 1, what="one parked waiter")
        msg = expect_429(*request_from(ld, "127.0.0.1", "POST", path(key), {"wait_ms": 1000}), "2nd waiter")
        check("client: 1," in msg, "the message does not name the cap 1: %r" % msg)
    finally:
        s.close()
    wait_gauges(ld, 0, 0, what="after the waiter left")


@harness.scenario("limits: with --auth-file each credential has its own waiter count from one address, "
                  "and max_waiters overrides the flag", backends=["memory"])
def waiters_per_credential(ctx):
    tokens = {"alpha": "alpha-Token_limits-01", "beta": "beta-Token_limits-02", "gamma": "gamma-Token_limits-03"}
    creds = [{"name": n, "token_sha256": hashlib.sha256(t.encode()).hexdigest(), "prefixes": [""], "verbs": ["*"]}
             for n, t in sorted(tokens.items())]
    creds[2]["max_waiters"] = 1  # gamma
    fn = os.path.join(ctx.tmpdir, "limits-auth-%d.json" % harness.free_port())
    with open(fn, "w") as f:
        json.dump({"credentials": creds}, f)
    ld = ctx.new_lockd(["--auth-file", fn, "--max-waiters-per-client", "2"])
    auth = {n: {"Authorization": "Bearer " + t} for n, t in tokens.items()}
    key = ctx.key("auth")
    expect_json(ld.request("POST", path(key), {"ttl_ms": 60000}, headers=auth["alpha"]), 201, "the holder's grant")
    body = {"wait_ms": 20000}
    socks = []
    try:
        socks += [park(ld, "POST", path(key), body, headers=auth["alpha"]) for _ in range(2)]
        wait_gauges(ld, 2, 1, what="alpha's two waiters")
        msg = expect_429(*request_from(ld, "127.0.0.1", "POST", path(key), body, auth["alpha"]), "alpha's 3rd")
        check("--max-waiters-per-client" in msg and "client: 2," in msg, "alpha's 429 message: %r" % msg)
        # same address, another credential: its own count
        socks += [park(ld, "POST", path(key), body, headers=auth["beta"]) for _ in range(2)]
        wait_gauges(ld, 4, 2, what="beta's two waiters beside alpha's")
        # a credential's max_waiters overrides the flag
        socks.append(park(ld, "POST", path(key), body, headers=auth["gamma"]))
        wait_gauges(ld, 5, 3, what="gamma's waiter")
        msg = expect_429(*request_from(ld, "127.0.0.1", "POST", path(key), body, auth["gamma"]), "gamma's 2nd")
        check("max_waiters" in msg and "client: 1," in msg, "gamma's 429 message: %r" % msg)
        # no credential: 401 before any count
        status, _, _ = request_from(ld, "127.0.0.1", "POST", path(key), body)
        eq(status, 401, "a waiter without a credential")
        eq(gauges(ld)[:3], (5, 3, 2), "gauges after the refusals")
    finally:
        close_all(socks)
    wait_gauges(ld, 0, 0, what="after every waiter left")

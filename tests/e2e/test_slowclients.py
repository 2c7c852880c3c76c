"""tests/e2e/test_slowclients.py - issue 10, part 6: slow clients must not
exhaust connections. libmicrohttpd's 60 s timeout is an idle timeout, so a
socket that sends one byte every few seconds held its connection for ever;
--request-timeout-ms bounds the time a request may take to arrive, and
--max-connections-per-ip keeps one address from holding most connections.

The new options are given as environment variables, which an older lockd
ignores: run against one, these scenarios fail on what they check, not on a
refused flag. They run on memory only: the HTTP layer is the same on every
backend.
"""

import json
import select
import socket
import threading
import time

import harness
from client import Waiter, acquire, expect_grant, http_request, path, read_answer, release
from harness import check, eq

SLOW = 64  # slow sockets, as in the issue
TIMEOUT_MS = 2000  # --request-timeout-ms in these scenarios
TRICKLE_S = 1.0  # a slow socket sends one byte this often
SLACK_S = 3.0  # the 2-core test machine is shared


class Trickler(threading.Thread):
    """Sends one byte on every open socket each TRICKLE_S, for at most
    max_s; records when the server closed each socket (to 0.1 s)."""

    def __init__(self, socks, max_s=40.0):
        super().__init__(daemon=True)
        self.socks = list(socks)
        self.t0 = time.monotonic()
        self.closed_at = {}
        self.stop = threading.Event()
        self.max_s = max_s

    def closed(self, i):
        self.closed_at.setdefault(i, time.monotonic() - self.t0)

    def run(self):
        end = self.t0 + self.max_s
        next_send = self.t0 + TRICKLE_S
        while not self.stop.is_set() and time.monotonic() < end:
            open_ = [s for i, s in enumerate(self.socks) if i not in self.closed_at]
            if not open_:
                break
            readable, _, _ = select.select(open_, [], [], 0.1)
            for s in readable:
                try:
                    if s.recv(4096, socket.MSG_DONTWAIT) == b"":
                        self.closed(self.socks.index(s))
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed(self.socks.index(s))
            if time.monotonic() >= next_send:
                next_send += TRICKLE_S
                for i, s in enumerate(self.socks):
                    if i not in self.closed_at:
                        try:
                            s.sendall(b"a")
                        except OSError:
                            self.closed(i)

    def finish(self):
        self.stop.set()
        self.join(5)
        for s in self.socks:
            s.close()


def stopped_clean(ld):
    """Stop an extra lockd: exit 0 and no sanitizer report (the reaper
    thread and the connection table run under ASan and TSan builds)."""
    rc = ld.stop(15)
    report = ld.sanitizer_report()
    check(not report, "sanitizer: " + report)
    eq(rc, 0, "exit code after SIGTERM")


def slow_sockets(port, n, first, source="127.0.0.1"):
    """n connections that each sent `first` and will trickle the rest."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        s.sendall(first)
        out.append(s)
    return out


def served_within(ld, limit_s):
    """Seconds until a fresh connection gets a lock and releases it, trying
    again while lockd refuses connections; None if not within limit_s."""
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < limit_s:
        # a new key each try: an abandoned try may still be served later
        n += 1
        key = "slow-legit-%d-%d" % (int(t0 * 1000), n)
        try:
            c = ld.client(timeout=1.0)
            try:
                r = c.request("POST", path(key), {"ttl_ms": 5000})
                if r.status == 201:
                    c.request("DELETE", path(key), headers={"Lock-Token": r.json["token"]})
                    return time.monotonic() - t0
            finally:
                c.close()
        except Exception:  # noqa: BLE001 - refused or timed out: try again
            pass
        time.sleep(0.1)
    return None


def is_closed(s, timeout=0.2):
    """True if the server closed (or reset) s; a socket the server shut down
    reads EOF."""
    s.settimeout(timeout)
    try:
        return s.recv(4096) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def exhausted(ctx, first):
    ld = ctx.new_lockd(["--max-connections", str(SLOW), "--threads", "2"],
                       env={"LOCKD_REQUEST_TIMEOUT_MS": str(TIMEOUT_MS),
                            "LOCKD_MAX_CONNECTIONS_PER_IP": str(SLOW)})
    t = Trickler(slow_sockets(ld.port, SLOW, first))
    t.start()
    try:
        time.sleep(0.3)  # every slot is taken
        took = served_within(ld, TIMEOUT_MS / 1000.0 + 12)
        harness.log("     a request with %d slow sockets open was served after %s s"
                    % (SLOW, "%.2f" % took if took is not None else "> %.0f" % (TIMEOUT_MS / 1000.0 + 12)))
        check(took is not None and took <= TIMEOUT_MS / 1000.0 + SLACK_S,
              "with %d slow sockets a request was served after %s s, not within --request-timeout-ms %d"
              % (SLOW, took, TIMEOUT_MS))
        time.sleep(0.3)
        cut = sorted(t.closed_at.values())
        check(len(cut) == SLOW, "%d of %d slow sockets are still open after %.1f s"
              % (SLOW - len(cut), SLOW, time.monotonic() - t.t0))
        harness.log("     slow sockets closed %.2f-%.2f s after they were opened" % (cut[0], cut[-1]))
        check(cut[0] >= TIMEOUT_MS / 1000.0 - 0.2, "a slow socket was closed after %.2f s, before "
              "--request-timeout-ms %d" % (cut[0], TIMEOUT_MS))
    finally:
        t.finish()
    check(ld.alive(), "lockd died")
    stopped_clean(ld)


@harness.scenario("issue 10: 64 slow-header sockets with --max-connections 64 are cut at "
                  "--request-timeout-ms and a request is served", backends=["memory"])
def test_issue_10_slow_headers(ctx):
    exhausted(ctx, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")


@harness.scenario("issue 10: 64 slow-body sockets with --max-connections 64 are cut at "
                  "--request-timeout-ms and a request is served", backends=["memory"])
def test_issue_10_slow_body(ctx):
    exhausted(ctx, b"POST /locks/slow-body HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n{\"ttl_ms\"")


@harness.scenario("issue 10: a parked waiter and an idle kept-alive connection outlive "
                  "--request-timeout-ms; a slow request beside them is cut", backends=["memory"])
def test_issue_10_waiter_survives(ctx):
    ld = ctx.new_lockd(env={"LOCKD_REQUEST_TIMEOUT_MS": "1000"})
    key = ctx.key("slowwait")
    r = ld.request("POST", path(key), {"ttl_ms": 30000})
    eq(r.status, 201, "holder's acquire")
    holder = r.json
    w = Waiter(ctx, key, wait_ms=15000, ttl_ms=5000, lockd=ld)
    w.start()
    keep = ld.client(timeout=10)
    eq(keep.request("GET", "/healthz").status, 200, "healthz on the kept-alive connection")
    t = Trickler(slow_sockets(ld.port, 1, b"POST " + path(ctx.key("slowbeside")).encode()
                              + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"), max_s=10)
    t.start()
    try:
        time.sleep(3.5)  # over three times the request timeout
        eq(ld.request("DELETE", path(key), headers={"Lock-Token": holder["token"]}).status, 200,
           "holder's release")
        resp = w.result(10)
        expect_grant(resp, key, 5000, what="the waiter parked for 3.5 s with --request-timeout-ms 1000")
        harness.log("     the waiter got its grant %.2f s after it was sent" % (w.t_done - w.t_sent))
        r = keep.request("GET", "/healthz")
        eq(r.status, 200, "healthz on a kept-alive connection idle for 3.5 s")
        eq(ld.request("DELETE", path(key), headers={"Lock-Token": resp.json["token"]}).status, 200,
           "waiter's release")
        check(0 in t.closed_at or is_closed(t.socks[0]),
              "a request whose body trickles for 3.5 s was not cut with --request-timeout-ms 1000")
        harness.log("     the slow request beside them was closed after %s s"
                    % ("%.2f" % t.closed_at[0] if 0 in t.closed_at else "<3.5"))
    finally:
        t.finish()
        keep.close()
    stopped_clean(ld)


def raw_get(port, source, timeout=3.0):
    """GET /healthz on a new connection from source: (status, headers, body)
    or None if closed without an answer. The socket is returned open."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    try:
        s.sendall(http_request("GET", "/healthz"))
    except OSError:
        pass
    p = read_answer(s, timeout)
    return s, (p[:3] if p is not None else None)


@harness.scenario("issue 10: --max-connections-per-ip refuses one address's excess with 429 "
                  "too_many_requests while another address is served", backends=["memory"])
def test_issue_10_per_ip_cap(ctx):
    cap = 8
    ld = ctx.new_lockd(["--max-connections", "64"], env={"LOCKD_MAX_CONNECTIONS_PER_IP": str(cap)},
                       start=False)
    ld.start(wait_ready=False)
    # probe from an address of its own: lockd may count a closed probe
    # for a moment, and every connection from 127.0.0.1 below must count
    check(harness.wait_port(ld.port, 15, source="127.0.0.9"), "lockd did not listen: " + ld.log_tail())
    held = []
    try:
        for i in range(cap):
            s, p = raw_get(ld.port, "127.0.0.1")
            held.append(s)
            check(p is not None and p[0] == 200, "connection %d from 127.0.0.1: %r" % (i + 1, p))
        s, p = raw_get(ld.port, "127.0.0.1")
        held.append(s)
        check(p is not None, "connection %d from 127.0.0.1 was closed without an answer" % (cap + 1))
        status, hdrs, body = p
        eq(status, 429, "connection %d from 127.0.0.1 with --max-connections-per-ip %d" % (cap + 1, cap))
        eq(json.loads(body)["error"]["code"], "too_many_requests", "error code")
        eq(hdrs.get("retry-after"), "1", "Retry-After")
        eq(hdrs.get("content-type"), "application/json", "Content-Type")
        check(hdrs.get("x-request-id"), "no X-Request-Id")
        check(is_closed(s, 2.0), "the refused connection was left open")
        # another address is served, up to its own cap
        for i in range(cap):
            s, p = raw_get(ld.port, "127.0.0.2")
            held.append(s)
            check(p is not None and p[0] == 200, "connection %d from 127.0.0.2: %r" % (i + 1, p))
        # a slot freed on 127.0.0.1 is usable again
        held.pop(0).close()
        deadline = time.monotonic() + 5  # until lockd has seen it close
        while True:
            time.sleep(0.1)
            s, p = raw_get(ld.port, "127.0.0.1")
            if p is not None and p[0] == 200 or time.monotonic() > deadline:
                break
            s.close()
        held.append(s)
        check(p is not None and p[0] == 200, "127.0.0.1 5 s after one of its connections closed: %r" % (p,))
        g = acquire(ctx, ctx.key("perip"), ttl_ms=2000)
        release(ctx, g["key"], g["token"])
    finally:
        for s in held:
            s.close()
    stopped_clean(ld)

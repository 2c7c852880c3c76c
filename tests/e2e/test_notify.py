"""tests/e2e/test_notify.py - waiters on Redis cost nothing while idle:
they are tried again on a release heard on the channel, at the holder's
expiry, or when the subscription comes back after a break (a release
published meanwhile was not heard), never on a poll every 2 s. Counted on
Redis itself (INFO commandstats)."""

import socket
import threading
import time

import harness
from client import metric, metrics
from harness import check, eq
from multi import acquire, release, wait_until
from server_redis import _read_reply

R = ["redis"]


class Admin:
    """One Redis connection kept open: it still works when maxclients
    refuses new ones."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.sock.makefile("rb")

    def command(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return _read_reply(self.f)

    def close(self):
        self.f.close()
        self.sock.close()


def waiting(ctx, ld):
    return metric(metrics(ctx, ld), "lockd_waiters")


def script_calls(ctx):
    """Scripts Redis has run (every lockd decision is one), all clients."""
    info = ctx.server.command("INFO", "commandstats").decode()
    n = 0
    for line in info.splitlines():
        name = line.split(":", 1)[0]
        if name in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro",
                    "cmdstat_fcall", "cmdstat_fcall_ro"):
            n += int(line.split("calls=", 1)[1].split(",", 1)[0])
    return n


class Waiter(threading.Thread):
    def __init__(self, ld, key, wait_ms):
        super().__init__(daemon=True)
        self.c = ld.client(timeout=wait_ms / 1000.0 + 10)
        self.key, self.wait_ms = key, wait_ms
        self.resp = self.error = self.t_answer = None
        self.start()

    def run(self):
        try:
            self.resp = acquire(self.c, self.key, ttl_ms=5000, wait_ms=self.wait_ms)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            self.error = e
        self.t_answer = time.monotonic()


IDLE_KEYS = 40


@harness.scenario("40 waiters parked on 40 held keys make no store call in 6 s, and each is granted at once on release",
                  backends=R)
def idle_waiters_are_idle(ctx):
    other = ctx.new_lockd()
    holder = ctx.lockd.client()
    keys = [ctx.key("idle-%02d" % i) for i in range(IDLE_KEYS)]
    tokens = []
    for k in keys:
        r = acquire(holder, k, ttl_ms=60000)
        eq(r.status, 201, "hold " + k)
        tokens.append(r.json["token"])
    waiters = [Waiter(other, k, 30000) for k in keys]
    check(wait_until(lambda: waiting(ctx, other) == IDLE_KEYS, 5),
          "the waiters did not all park: lockd_waiters %s" % waiting(ctx, other))
    before = script_calls(ctx)
    time.sleep(6)
    calls = script_calls(ctx) - before
    print("  %d store scripts in 6 s with %d waiters parked (a poll every 2 s: %d)"
          % (calls, IDLE_KEYS, 3 * IDLE_KEYS))
    check(calls <= IDLE_KEYS // 4, "%d store scripts while nothing happened" % calls)
    check(all(w.resp is None and w.error is None for w in waiters), "a waiter was answered early")
    slow = 0.0
    for k, tok, w in zip(keys, tokens, waiters):
        t = time.monotonic()
        eq(release(holder, k, tok).status, 200, "release " + k)
        w.join(10)
        check(w.resp is not None, "waiter on %s: %s" % (k, w.error))
        eq(w.resp.status, 201, "waiter on " + k)
        slow = max(slow, w.t_answer - t)
        release(other.client(), k, w.resp.json["token"])
    print("  slowest grant after its release: %.0f ms" % (slow * 1000))
    check(slow < 1.0, "a waiter was granted %.2f s after the release" % slow)


@harness.scenario("a release published while the waiter's instance could not subscribe is heard once it can again",
                  backends=R)
def missed_release_heard_on_resubscribe(ctx):
    holder = ctx.new_lockd(args=["--threads", "1"])
    other = ctx.new_lockd()
    key = ctx.key("missed")
    r = acquire(holder.client(), key, ttl_ms=60000)
    eq(r.status, 201, "hold")
    tok = r.json["token"]
    w = Waiter(other, key, 30000)
    check(wait_until(lambda: waiting(ctx, other) == 1, 5), "the waiter did not park")
    admin = Admin(ctx.server.port)
    try:
        n = int(admin.command("INFO", "clients").decode().split("connected_clients:", 1)[1].split()[0])
        killed = admin.command("CLIENT", "KILL", "TYPE", "pubsub")
        check(killed >= 2, "killed %r subscribers" % killed)
        # no new connection from now on: the subscribers stay away
        admin.command("CONFIG", "SET", "maxclients", str(n - killed))
        time.sleep(0.3)
        eq(release(holder.client(), key, tok).status, 200, "release while nobody listens")
        time.sleep(1.5)
        check(w.resp is None and w.error is None, "the waiter was answered while its instance was deaf")
        t = time.monotonic()
    finally:
        admin.command("CONFIG", "SET", "maxclients", "10000")
        admin.close()
    w.join(15)
    check(w.resp is not None, "waiter: %s" % w.error)
    eq(w.resp.status, 201, "waiter")
    print("  granted %.0f ms after the subscription could come back" % ((w.t_answer - t) * 1000))
    check(w.t_answer - t < 8.0, "granted %.1f s after the subscription could come back" % (w.t_answer - t))
    release(other.client(), key, w.resp.json["token"])

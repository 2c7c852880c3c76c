"""tests/e2e/test_mysql_late.py - a renew or release that waits for the
key's row while its lock expires, and another instance takes the key over,
must not act on the new holder's grant.

MariaDB and MySQL fix NOW() when a statement starts, before it waits for a
row lock. A renew or release that judged its holder live with that time
after waiting behind a takeover renewed or deleted the new holder's key row
(a fault load saw it as a double grant once under a store stall). Here a
root session of the test's own holds the key's row while lockd's call
waits behind it, lets the holder's TTL pass, takes the key over exactly as
another instance's grant does (a fence, the key row's expiry, a holder row,
one commit) and lets go: the late call must answer as for a key held by
another token and leave the new grant whole, through the compound
statements (MariaDB) and the statement by statement path (compound=0),
for one key and for several (the first taken over, the last still the
caller's)."""

import subprocess
import threading
import time

import harness
import server_mysql
from harness import check, eq
from multi import acquire, path, release

M = ["mysql"]
NOW_MS = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
TTL_MS = 1500


class Session:
    """An interactive root session on the test's MariaDB: statements run
    in one connection (so a transaction stays open across calls)."""

    def __init__(self, server):
        self.proc = subprocess.Popen(
            [server_mysql.CLIENT, "--no-defaults", "-S", server.socket, "-uroot", "-N", "-B", "-n",
             "lockd"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.seq = 0

    def run(self, sql, timeout=10.0):
        """Run sql (statements ending in ';'); the lines it printed."""
        self.seq += 1
        mark = "done-%d" % self.seq
        self.proc.stdin.write("%s\nSELECT '%s';\n" % (sql, mark))
        self.proc.stdin.flush()
        out = []
        timer = threading.Timer(timeout, self.proc.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                line = line.rstrip("\n")
                if line == mark:
                    return out
                check(not line.startswith("ERROR"), "mariadb: %s: %s" % (sql, line))
                out.append(line)
        finally:
            timer.cancel()
        raise harness.Fail("mariadb session ended in: %s (%s)" % (sql, out))

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sq(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"


def waiting_on_row(watch, until):
    """Whether one of lockd's statements has run for 20 ms or more before
    monotonic time until (watch: a Session of its own, polled without a
    new process): one waiting for the row our session holds. The process
    list, not INNODB_TRX: a primary key lookup that waits while the
    optimizer reads the row (a FOR UPDATE by a constant key) shows there
    in state "Statistics" and not as a lock wait."""
    while time.monotonic() < until:
        n = watch.run("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE user = 'lockd'"
                      " AND info IS NOT NULL AND time_ms >= 20;")
        if n and int(n[0]) > 0:
            return True
        time.sleep(0.01)
    return False


def take_over(sess, keys):
    """Grant keys to token 'took-over' for 30 s as an acquire does: one
    fence, the key rows' expiry, the holder rows, one commit."""
    for k in keys:
        sess.run("INSERT INTO lockd_locks_fence () VALUES (); SET @f = LAST_INSERT_ID();"
                 " SET @e = %s + 30000;"
                 " UPDATE lockd_locks SET token = '', owner = NULL, ttl_ms = 30000, mode = 0, lim = 0,"
                 " expires_at = @e WHERE lock_key = %s;"
                 " INSERT INTO lockd_locks_holders (lock_key, token, owner, fence, ttl_ms, expires_at,"
                 " holds, idem) VALUES (%s, 'took-over', NULL, @f, 30000, @e, 1, NULL);"
                 % (NOW_MS, sq(k), sq(k)))
    sess.run("COMMIT;")


class NotLate(Exception):
    """The call did not wait as the case needs (too slow a moment): try
    the case again."""


def late_call(ctx, ld, what, keys):
    """Hold keys (granted through ld with TTL_MS), hold their rows from a
    session of our own, send what (renew or release, of one key or all)
    with the holder's token, let the TTL pass, take the keys over, let go;
    the late call must find the keys another token's and the takeover must
    stand. NotLate if the call was not seen waiting before the TTL ended,
    or waited past lockd's row lock timeout (1 s: a 503)."""
    c = ld.client(timeout=15)
    if len(keys) == 1:
        r = acquire(c, keys[0], ttl_ms=TTL_MS)
    else:
        r = c.request("POST", "/locks", {"keys": keys, "ttl_ms": TTL_MS})
    eq(r.status, 201, "acquire %s" % keys)
    token, granted = r.json["token"], time.monotonic()
    ends = granted + TTL_MS / 1000.0
    # of several keys the last stays the token's: the first one's statement
    # waits, the last one's does not (a multi-key call is all or nothing)
    taken, kept = keys[:1], keys[1:]
    for k in kept:
        eq(c.request("PUT", path(k), {"token": token, "ttl_ms": 30000}).status, 200, "renew %r" % k)
    sess, watch = Session(ctx.server), Session(ctx.server)
    answer = {}

    def send():
        lc = ld.client(timeout=15)
        if len(keys) == 1 and what == "renew":
            answer["r"] = lc.request("PUT", path(keys[0]), {"token": token, "ttl_ms": 30000})
        elif len(keys) == 1:
            answer["r"] = lc.request("DELETE", path(keys[0]), headers={"Lock-Token": token})
        elif what == "renew":
            answer["r"] = lc.request("PUT", "/locks", {"keys": keys, "token": token, "ttl_ms": 30000})
        else:
            answer["r"] = lc.request("DELETE", "/locks", {"keys": keys, "token": token})
        lc.close()

    t = threading.Thread(target=send)
    try:
        # lockd's sessions wait at most 1 s for a row lock: the call starts
        # waiting 0.4 s before the TTL ends, the takeover 0.15 s after it
        time.sleep(max(0.0, ends - 0.4 - time.monotonic()))
        sess.run("SET SESSION tx_isolation = 'READ-COMMITTED'; SET autocommit = 0;"
                 " SELECT COUNT(*) FROM lockd_locks WHERE lock_key IN (%s) FOR UPDATE;"
                 % ", ".join(sq(k) for k in keys))
        t.start()
        if not waiting_on_row(watch, ends - 0.02):
            sess.run("ROLLBACK;")
            t.join(15)
            raise NotLate("the %s did not wait for the key row before the TTL ended (%s)"
                          % (what, answer["r"].status if "r" in answer else "no answer"))
        time.sleep(max(0.0, ends + 0.15 - time.monotonic()))
        take_over(sess, taken)
        t.join(15)
        check(not t.is_alive(), "no answer to the late %s" % what)
    finally:
        sess.close()
        watch.close()
        if t.is_alive():
            t.join(15)
    r = answer["r"]
    try:
        if r.status == 503:
            raise NotLate("the %s waited past lockd's row lock timeout: %s" % (what, r.body))
        # the key is another token's now: token_mismatch; a release of
        # several releases the one still held
        late = "a %s of %s that waited past the first one's TTL, after its takeover: %s" % (what, keys, r.body)
        if what == "release" and kept:
            eq(r.status, 200, late)
            eq((r.json["released"], r.json["not_held"]), (kept, taken), late)
        else:
            eq(r.status, 409, late)
            eq(r.json["error"]["code"], "token_mismatch", late)
            for k in kept:
                eq(release(c, k, token).status, 200, "release %r, still the token's" % k)
        for k in taken:
            row = ctx.server.sql("SELECT k.expires_at - %s, COUNT(h.token) FROM lockd_locks AS k"
                                 " LEFT JOIN lockd_locks_holders AS h ON h.lock_key = k.lock_key"
                                 " AND h.token = 'took-over' WHERE k.lock_key = %s GROUP BY k.expires_at"
                                 % (NOW_MS, sq(k)))
            check(row and int(row[0][0]) > 20000 and row[0][1] == "1",
                  "the takeover of %r after the late %s: key row and holder %s (want ~30 s left, 1)"
                  % (k, what, row))
            a = acquire(c, k, ttl_ms=1000)
            eq(a.status, 409, "an acquire of %r held by the takeover (after the late %s): %s" % (k, what, a.body))
    finally:
        for k in keys:
            ctx.server.sql("DELETE FROM lockd_locks_holders WHERE lock_key = %s;"
                           " DELETE FROM lockd_locks WHERE lock_key = %s" % (sq(k), sq(k)))
        c.close()


@harness.scenario("a renew or release that waits for the key row past its TTL while another instance takes "
                  "the key over finds it another token's and leaves the new grant whole (compound statements and step by step, "
                  "one key and several)", backends=M)
def late_after_takeover(ctx):
    steps = ctx.new_lockd(start=False)
    steps.backend_url = ctx.url + ("&" if "?" in ctx.url else "?") + "compound=0"
    steps.start()
    for name, ld in (("compound", ctx.lockd), ("step by step", steps)):
        for what in ("release", "renew"):
            for n in (1, 2):
                for attempt in range(4):
                    try:
                        late_call(ctx, ld, what, [ctx.key("late-%d-%s" % (i, what)) for i in range(n)])
                        break
                    except NotLate as e:
                        harness.log("     %s, %s of %d key(s): %s; again" % (name, what, n, e))
                else:
                    raise harness.Fail("the %s of %d key(s) never waited as the case needs" % (what, n))
        harness.log("     %s: late renews and releases found the keys taken over, which stand" % name)

"""tests/e2e/test_mysql.py - what only the MySQL/MariaDB backend promises:
several lockd instances on one database exclude each other with growing
fences; expiry runs on the database's clock, so instances with skewed clocks
(libfaketime) agree; a killed MariaDB gives 503s (never a grant) and is
served again after its restart without restarting lockd; expired and
released rows are removed; every key is its own row, byte for byte, with no
way into the SQL."""

import datetime
import email.utils
import os
import time

import harness
from harness import check, eq
from multi import (Load, acquire, check_injective_grants, check_lock_kept, check_unready,
                   ensure_server_up, exclusion_run, path, release, release_each, renew,
                   wait_first_grant, wait_until, wake_by_expiry, wake_by_release)

M = ["mysql"]
# libfaketime from Debian's faketime package, preloaded into lockd itself
# (the faketime wrapper forks, and may leave lockd behind on SIGTERM)
LIBFAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                                "/usr/lib/faketime/libfaketimeMT.so.1")
                    if os.path.exists(p)), None)


def unix_ms(rfc3339):
    """'2026-11-21T12:00:30.123Z' -> unix ms."""
    t = datetime.datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%S.%fZ")
    return int(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000 + 0.5)


def rows_like(ctx, prefix):
    return int(ctx.server.sql("SELECT COUNT(*) FROM lockd_locks WHERE lock_key LIKE '%s%%'"
                              % prefix.replace("'", "''"))[0][0])


@harness.scenario("two instances on one MariaDB exclude each other and fences strictly increase",
                  backends=M)
def two_instances_exclude(ctx):
    # try-once, so that both instances keep asking
    load = exclusion_run(ctx, 3.0, wait_ms=0)
    harness.log("     %d grants in 3 s on 2 instances" % len(load.holds))


@harness.scenario("instances whose clocks are skewed by +1 h and -10 min agree on holders, fences and expiry (the database's clock)",
                  backends=M)
def skewed_clocks_agree(ctx):
    check(LIBFAKETIME is not None, "libfaketime (Debian package faketime) is not installed")

    def skewed(offset):
        # under ASan, libfaketime in LD_PRELOAD comes before the ASan runtime
        return ctx.new_lockd(env={"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset,
                                  "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:verify_asan_link_order=0"})

    ahead = skewed("+1h")
    behind = skewed("-10m")
    normal = ctx.lockd
    # the clocks really are skewed: the Date header comes from lockd's clock
    for ld, skew in ((ahead, 3600), (behind, -600), (normal, 0)):
        r = ld.request("GET", "/healthz")
        eq(r.status, 200, "healthz")
        their = email.utils.parsedate_to_datetime(r.header("Date")).timestamp()
        check(abs(their - time.time() - skew) < 30,
              "Date %r is not %+d s off the real clock" % (r.header("Date"), skew))

    for a, b, name in ((normal, ahead, "normal->ahead"), (ahead, behind, "ahead->behind"),
                       (behind, normal, "behind->normal")):
        key = ctx.key("skew")
        ca, cb = a.client(), b.client()
        real_sent = time.time()
        g = acquire(ca, key, ttl_ms=800)
        t_got = time.monotonic()
        eq(g.status, 201, "%s: acquire" % name)
        # expires_at is the database's clock + ttl, whatever lockd's clock says
        exp = unix_ms(g.json["expires_at"])
        check(real_sent * 1000 + 700 <= exp <= time.time() * 1000 + 900,
              "%s: expires_at %s is not the real time + 800 ms" % (name, g.json["expires_at"]))
        i = cb.request("GET", path(key))
        eq(i.status, 200, "%s: inspect through the other instance" % name)
        eq(i.json["fence"], g.json["fence"], "%s: fence" % name)
        eq(i.json["expires_at"], g.json["expires_at"], "%s: expires_at" % name)
        check(1 <= i.json["ttl_ms"] <= 800, "%s: remaining ttl %r" % (name, i.json["ttl_ms"]))
        r = acquire(cb, key, ttl_ms=800)
        eq(r.status, 409, "%s: acquire through the other instance" % name)
        ra = r.json["error"]["retry_after_ms"]
        check(500 <= ra <= 800, "%s: retry_after_ms %r is not the holder's remaining ttl" % (name, ra))
        eq(renew(cb, key, g.json["token"]).status, 200, "%s: renew through the other instance" % name)
        # the lock ends when the database's clock passes expiry: a waiter on
        # the other instance gets it then, not before and not much later
        t_renewed = time.monotonic()
        w = acquire(cb, key, ttl_ms=500, wait_ms=3000)
        t_w = time.monotonic()
        eq(w.status, 201, "%s: waiter through the other instance" % name)
        check(w.json["fence"] > g.json["fence"], "%s: fence grows" % name)
        check(t_w >= t_got + 0.8 - 0.05, "%s: granted %.0f ms before the renewed lock expired"
              % (name, (t_got + 0.8 - t_w) * 1000))
        check(t_w <= t_renewed + 0.8 + 0.3, "%s: granted %.0f ms after the renewed lock expired"
              % (name, (t_w - t_renewed - 0.8) * 1000))
        eq(renew(ca, key, g.json["token"]).status, 409, "%s: the expired holder's renew" % name)
        eq(release(cb, key, w.json["token"]).status, 200, "%s: release" % name)
        ca.close()
        cb.close()


@harness.scenario("kill -9 of MariaDB under load: only 503s while down, /readyz 503, no grant; back after restart with held locks kept and fences growing",
                  backends=M, slow=True)
def mysql_killed_under_load(ctx):
    other = ctx.new_lockd()
    kept = ctx.key("kept")
    g_kept = acquire(ctx.lockd.client(), kept, ttl_ms=60000)
    eq(g_kept.status, 201, "a long lock before the kill")
    load = Load(ctx.key("kill"), timeout=10)
    try:
        load.start((ctx.lockd, other) * 2)
        time.sleep(1.0)
        ctx.server.kill9()
        t_down = time.monotonic()
        time.sleep(0.3)
        for ld in (ctx.lockd, other):
            check_unready(ld, "mysql", "/readyz while MariaDB is down")
        time.sleep(1.0)
        t_up = time.monotonic()
        ctx.server.restart()
        t_back = wait_first_grant(ctx, 10.0)
        check(t_back, "no grant within 10 s of MariaDB restarting")
        harness.log("     first grant %.2f s after mariadbd was started again" % (t_back - t_up))
        time.sleep(1.0)
    finally:
        load.stop()
        ensure_server_up(ctx)
    load.check_outage(t_down, t_up, "MariaDB")
    before = [h[2] for h in load.holds if h[0] < t_down]
    after = [h[2] for h in load.holds if h[0] > t_up]
    check(before and after, "grants before and after the kill: %d, %d" % (len(before), len(after)))
    check(min(after) > max(before), "fences went back after the restart: %d <= %d" % (min(after), max(before)))
    for ld in (ctx.lockd, other):
        eq(ld.request("GET", "/readyz").status, 200, "/readyz after the restart")
        i = ld.request("GET", path(kept))
        eq(i.status, 200, "the long lock after the restart")
        eq(i.json["fence"], g_kept.json["fence"], "its fence")
    check_lock_kept(other, kept, g_kept.json, None)


@harness.scenario("expired and released rows are removed, so the table stays bounded, and fences keep growing",
                  backends=M)
def rows_are_reaped(ctx):
    prefix = ctx.key("reap") + "-"
    c = ctx.lockd.client()
    top = 0
    for i in range(300):
        # long enough to outlive this loop on a slow (sanitizer) build
        r = acquire(c, prefix + str(i), ttl_ms=2000)
        eq(r.status, 201, "acquire %d" % i)
        top = max(top, r.json["fence"])
    for i in range(50):
        k = prefix + "r" + str(i)
        r = acquire(c, k, ttl_ms=60000)
        eq(r.status, 201, "acquire to release %d" % i)
        eq(release(c, k, r.json["token"]).status, 200, "release %d" % i)
    n0 = rows_like(ctx, prefix)
    check(n0 <= 300, "%d rows: released locks left rows behind" % n0)
    check(n0 >= 100, "only %d rows right after 300 grants: nothing to watch" % n0)
    # the reaper runs about every second, 100 rows a statement
    n = wait_until(lambda: rows_like(ctx, prefix) == 0, 8.0, step=0.2)
    check(n, "%d rows of expired locks are left after 8 s" % rows_like(ctx, prefix))
    total = int(ctx.server.sql("SELECT COUNT(*) FROM lockd_locks")[0][0])
    check(total < 100, "%d rows in lockd_locks after the reaper ran" % total)
    # one fence row per grant; the reaper deletes all but the last ones
    fences = lambda: int(ctx.server.sql("SELECT COUNT(*) FROM lockd_locks_fence")[0][0])  # noqa: E731
    n = wait_until(lambda: fences() < 50, 4.0, step=0.2)
    check(n, "%d rows in lockd_locks_fence after the reaper ran" % fences())
    for i in (0, 299):
        r = acquire(c, prefix + str(i), ttl_ms=1000)
        eq(r.status, 201, "acquire %d again" % i)
        check(r.json["fence"] > top, "fence %d after the reaper is not above %d" % (r.json["fence"], top))
        eq(release(c, prefix + str(i), r.json["token"]).status, 200, "release")


@harness.scenario("keys with quotes, backslashes, %, _, trailing spaces, unicode and 512 bytes are distinct rows (no SQL injection)",
                  backends=M)
def keys_are_injective(ctx):
    base = ctx.key("inj")
    keys = [base, base.upper(), base + " ", base + "  ", " " + base, base + "'", base + "''",
            base + "\\", base + "\\'", base + '"', base + "`", base + ";", base + "%", base + "_",
            base + "%'", "%", "_", "%%", base + "' OR '1'='1", base + "'; DROP TABLE lockd_locks; --",
            base + "\\0", base + "/../x", base + "\u00e9", base + "e\u0301", base + "\u4e2d\U0001f512",
            (base + "x" * 512)[:512], (base + "x" * 511)[:511] + "y", ("\u00e9" * 256)]
    for k in keys:
        check(len(k.encode()) <= 512, "key of %d bytes" % len(k.encode()))
    check(len(keys[-3].encode()) == 512 and len(keys[-1].encode()) == 512, "512-byte keys")
    eq(len(set(keys)), len(keys), "the keys are distinct")
    c = ctx.lockd.client()
    grants = check_injective_grants(c, keys, lambda n: "o'\\%_" + str(n))
    # exactly these bytes are stored, one row each, and the table survived
    want = {k.encode().hex().upper() for k in keys}
    got = {row[0] for row in ctx.server.sql("SELECT HEX(lock_key) FROM lockd_locks")}
    check(want <= got, "rows missing for %d keys" % len(want - got))
    # one sequence serves every key
    fences = [grants[k]["fence"] for k in keys]
    eq(len(set(fences)), len(fences), "distinct fences")
    # releasing one frees exactly that one
    release_each(c, keys, grants, others_stay=True)
    got = {row[0] for row in ctx.server.sql("SELECT HEX(lock_key) FROM lockd_locks")}
    check(not (want & got), "released keys left rows")


@harness.scenario("a release (event table) or an expiry (retry at the TTL) on another instance reaches a waiter within 250 ms",
                  backends=M)
def waiter_hears_other_instance(ctx):
    other = ctx.new_lockd()
    # expiry: the waiter's retry is timed by the holder's remaining TTL
    _, late = wake_by_expiry(other, ctx.lockd, ctx.key("exp"), early=0.05)
    harness.log("     wake-up after an expiry on another instance: %.0f ms" % (late * 1000))
    # release: B appends an event, A's background thread polls them
    _, dt = wake_by_release(other, ctx.lockd, ctx.key("rel"), within=0.25, holder_ttl_ms=30000, wait_ms=6000)
    harness.log("     wake-up after a release on another instance: %.0f ms" % (dt * 1000))
    # a release through the waiter's own instance wakes it at once
    wake_by_release(ctx.lockd, ctx.lockd, ctx.key("local"), within=0.25, holder_ttl_ms=30000)


@harness.scenario("?table= keeps a separate lock table, the schema has a binary key, and unknown URL options stop lockd",
                  backends=M)
def table_option_and_schema(ctx):
    url = ctx.url + "?table=lockd_e2e_other&connect_timeout_ms=1500&read_timeout_ms=1500&write_timeout_ms=1500"
    ld = harness.Lockd(url, tmpdir=ctx.tmpdir)
    ctx.extra.append(ld)
    ld.start()
    key = ctx.key("tbl")
    a = acquire(ctx.lockd.client(), key, ttl_ms=5000)
    b = acquire(ld.client(), key, ttl_ms=5000)
    eq(a.status, 201, "acquire in the default table")
    eq(b.status, 201, "the same key in the other table")
    eq(ctx.server.sql("SELECT COUNT(*) FROM lockd_e2e_other WHERE lock_key = '%s'" % key)[0][0], "1",
       "row in the other table")
    create = ctx.server.sql("SHOW CREATE TABLE lockd_locks")[0][1].lower()
    check("`lock_key` varbinary(512) not null" in create, "lock_key column: %s" % create)
    check("primary key (`lock_key`)" in create, "primary key: %s" % create)
    check("engine=innodb" in create, "engine: %s" % create)
    seq = ctx.server.sql("SELECT v FROM lockd_locks_seq WHERE id = 1")
    check(int(seq[0][0]) >= a.json["fence"], "the sequence is at or above the fences it gave")
    eq(release(ctx.lockd.client(), key, a.json["token"]).status, 200, "release")
    eq(release(ld.client(), key, b.json["token"]).status, 200, "release in the other table")
    for bad in ("?bogus=1", "?table=x-y", "?read_timeout_ms=0"):
        ld2 = harness.Lockd(ctx.url + bad, tmpdir=ctx.tmpdir)
        ctx.extra.append(ld2)
        ld2.start(wait_ready=False)
        try:
            rc = ld2.proc.wait(10)
        except Exception:  # noqa: BLE001 - still running is the failure
            rc = None
        eq(rc, 2, "exit code of lockd with backend URL option %s" % bad)
    check(os.path.exists(ld.log_path), "log")

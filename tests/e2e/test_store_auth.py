"""tests/e2e/test_store_auth.py - lockd's own credentials on its stores.

MySQL/MariaDB over TLS: a MariaDB of the scenario's own (server_mysql.py
with tls=...) whose user REQUIREs SSL (the server's view that lockd speaks
TLS) and another that REQUIREs an X509 client certificate; ssl_mode=
verify_identity with ssl_ca serves a lock round trip; ssl_mode=disabled,
a CA that did not sign the server's certificate and a host name the
certificate does not name are refused (/readyz 503, never a grant), and
verify_ca does not look at the name. Options that do not go together or
files that cannot be read stop lockd at start (exit 2, the option named).

ZooKeeper digest auth and ACLs: lockd instances with the same user share a
chroot's locks; a raw client without credentials may read lockd's nodes
(acl=creator_read) or not even that (acl=creator), and never delete or
change them; a lockd with a wrong password, or none, answers 503 and
changes nothing. No password ever shows in lockd's output.
"""

import base64
import hashlib
import os
import time

import certs
import harness
import server_mysql
import server_zookeeper
from harness import check, eq
from multi import acquire, path, release, safe, wait_until

Z = ["zookeeper"]
M = ["mysql"]
ZK_ALL, ZK_READ = 31, 1  # ZooKeeper's perms: all, read


def lockd_on(ctx, url, args=(), env=None, ready=True):
    """A lockd on url (stopped by ctx.cleanup); ready: wait for /readyz 200."""
    ld = harness.Lockd(url, args=args, env=env, tmpdir=ctx.tmpdir)
    ctx.extra.append(ld)
    ld.start()
    if ready:
        check(wait_until(lambda: safe(lambda: ld.request("GET", "/readyz", timeout=5).status == 200), 15.0),
              "lockd on %s not ready: %s" % (url, ld.log_tail()))
    return ld


def refused(ld, key, what, log_has=None, within=10.0):
    """/readyz answers 503 and an acquire 503 (never a grant); log_has, when
    given, shows in lockd's log within the time."""
    r = ld.request("GET", "/readyz", timeout=5)
    eq(r.status, 503, what + ": /readyz")
    eq(acquire(ld.client(timeout=10), key, ttl_ms=5000).status, 503, what + ": acquire")
    if log_has is not None:
        check(wait_until(lambda: log_has in ld.log_tail(20000), within),
              "%s: %r not in the log: %s" % (what, log_has, ld.log_tail()))


def exits_2(ctx, url, want, env=None):
    """lockd on url stops at start with exit 2 and want in its output."""
    ld = harness.Lockd(url, env=env, tmpdir=ctx.tmpdir)
    ctx.extra.append(ld)
    ld.start(wait_ready=False)
    try:
        rc = ld.proc.wait(15)
    except Exception:  # noqa: BLE001 - any failure to stop is the finding
        ld.kill9()
        raise harness.Fail("lockd kept running on %s" % url)
    eq(rc, 2, "exit code for %s (%s)" % (url, ld.log_tail()))
    check(want in ld.log_tail(), "%r not in %r" % (want, ld.log_tail()))
    return ld.log_tail()


def no_secret(lockds, secrets):
    for ld in lockds:
        text = ld.log_tail(200000)
        for s in secrets:
            check(s not in text, "a password shows in lockd's output: %s" % text[-2000:])


# ---- ZooKeeper ------------------------------------------------------------


def zk_url(ctx, user_info, chroot, query=""):
    return "zookeeper://%s127.0.0.1:%d/%s?session_timeout_ms=4000%s" % (
        user_info, ctx.server.port, chroot, query)


def digest_id(user, password):
    """ZooKeeper's id for digest user:password: user:base64(sha1(...))."""
    h = hashlib.sha1(("%s:%s" % (user, password)).encode()).digest()
    return "%s:%s" % (user, base64.b64encode(h).decode())


def key_node(key):
    return "k" + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


@harness.scenario("store auth: zookeeper digest: two lockd with one user share locks; others may read, never delete or change",
                  backends=Z)
def zk_auth_creator_read(ctx):
    chroot = "auth-%d-%d" % (os.getpid(), int(time.time() * 1000) % 10**9)
    pw_file = os.path.join(ctx.tmpdir, "zk-pw-%s" % chroot)
    with open(pw_file, "w") as f:
        f.write("s3cret:pw\n")
    a = lockd_on(ctx, zk_url(ctx, "alice:s3cret%3Apw@", chroot))
    b = lockd_on(ctx, zk_url(ctx, "alice@", chroot, "&password_file=" + pw_file))
    key = ctx.key("zkauth")
    g = acquire(a.client(), key, ttl_ms=30000)
    eq(g.status, 201, "grant on a")
    eq(acquire(b.client(), key, ttl_ms=30000).status, 409, "b: held by a's grant")
    eq(release(a.client(), key, g.json["token"]).status, 200, "release on a")
    g = acquire(b.client(), key, ttl_ms=30000)
    eq(g.status, 201, "grant on b after a released")
    # the nodes: creator-all for alice, read for anyone
    port = ctx.server.port
    kpath = "/%s/lockd/locks/%s" % (chroot, key_node(key))
    want = sorted([(ZK_ALL, "digest", digest_id("alice", "s3cret:pw")), (ZK_READ, "world", "anyone")])
    for p in ("/" + chroot, "/%s/lockd" % chroot, "/%s/lockd/locks" % chroot, kpath, kpath + "/h"):
        # ZooKeeper shows the digest to its owner only ("alice:x" to others)
        err, acl = server_zookeeper.zk_ops(port, [("acl", p)], auth="alice:s3cret:pw")[0]
        eq(err, 0, "getACL %s" % p)
        eq(sorted(acl), want, "ACL of %s" % p)
    kids = server_zookeeper.zk_ops(port, [("children", kpath)])[0]
    eq(kids[0], 0, "anyone lists the key's node")
    marker = [k for k in kids[1] if k.startswith("t")]
    eq(len(marker), 1, "one holder's marker in %r" % kids[1])
    res = server_zookeeper.zk_ops(port, [("get", kpath + "/h"), ("set", kpath + "/h", b"stolen"),
                                         ("delete", kpath + "/" + marker[0]), ("delete", kpath + "/h"),
                                         ("delete", kpath)])
    eq(res[0][0], 0, "anyone reads h")
    eq([r[0] for r in res[1:]], [server_zookeeper.ZNOAUTH] * 4, "setData/delete without credentials")
    # the same writes with alice's credentials would go through: the
    # refusals above are the ACL's (on a node no lock depends on)
    res = server_zookeeper.zk_ops(port, [("set", "/%s/lockd/clock" % chroot, b"")],
                                  auth="alice:s3cret:pw")
    eq(res[0][0], 0, "setData with the credentials")
    r = a.request("GET", path(key))
    eq(r.status, 200, "still held")
    eq(r.json.get("fence"), g.json["fence"], "the same holder")
    eq(release(b.client(), key, g.json["token"]).status, 200, "release on b")
    no_secret([a, b], ["s3cret"])


@harness.scenario("store auth: zookeeper acl=creator: a client without credentials cannot even read lockd's nodes",
                  backends=Z)
def zk_auth_creator_only(ctx):
    chroot = "authc-%d-%d" % (os.getpid(), int(time.time() * 1000) % 10**9)
    env = {"LOCKD_BACKEND_PASSWORD": "env-pw-1"}
    a = lockd_on(ctx, zk_url(ctx, "bob@", chroot, "&acl=creator"), env=env)
    key = ctx.key("zkc")
    g = acquire(a.client(), key, ttl_ms=30000)
    eq(g.status, 201, "grant")
    kpath = "/%s/lockd/locks/%s" % (chroot, key_node(key))
    port = ctx.server.port
    err, acl = server_zookeeper.zk_ops(port, [("acl", kpath + "/h")], auth="bob:env-pw-1")[0]
    eq((err, acl), (0, [(ZK_ALL, "digest", digest_id("bob", "env-pw-1"))]), "ACL of h")
    res = server_zookeeper.zk_ops(port, [("get", kpath + "/h"), ("children", kpath), ("acl", kpath),
                                         ("children", "/%s/lockd/locks" % chroot), ("delete", kpath + "/h")])
    eq([r[0] for r in res], [server_zookeeper.ZNOAUTH] * 5, "get/list/getACL/delete without credentials")
    res = server_zookeeper.zk_ops(port, [("get", kpath + "/h")], auth="bob:env-pw-1")
    eq(res[0][0], 0, "get with the credentials")
    eq(release(a.client(), key, g.json["token"]).status, 200, "release")
    no_secret([a], ["env-pw-1"])


@harness.scenario("store auth: zookeeper: a lockd with a wrong password, or none, answers 503 and never grants",
                  backends=Z)
def zk_auth_wrong_password(ctx):
    chroot = "authw-%d-%d" % (os.getpid(), int(time.time() * 1000) % 10**9)
    a = lockd_on(ctx, zk_url(ctx, "carol:right-pw@", chroot))
    key = ctx.key("zkw")
    g = acquire(a.client(), key, ttl_ms=30000)
    eq(g.status, 201, "grant")
    wrong = lockd_on(ctx, zk_url(ctx, "carol:wrong-pw@", chroot, "&timeout_ms=500"), ready=False)
    anon = lockd_on(ctx, zk_url(ctx, "", chroot, "&timeout_ms=500"), ready=False)
    for ld, what, hint in ((wrong, "wrong password", "leaves out the URL's user"),
                           (anon, "no credentials", "add user:password to the URL")):
        refused(ld, key, what, log_has=hint)
        refused(ld, ctx.key("zkw-free"), what + ", a free key")
        r = release(ld.client(), key, g.json["token"])
        eq(r.status, 503, what + ": release of a's lock")
        check("not authenticated" in ld.log_tail(), what + ": the reason: " + ld.log_tail())
    r = a.request("GET", path(key))
    eq((r.status, r.json.get("fence")), (200, g.json["fence"]), "a's lock untouched")
    eq(release(a.client(), key, g.json["token"]).status, 200, "release on a")
    no_secret([a, wrong, anon], ["right-pw", "wrong-pw"])


@harness.scenario("store auth: zookeeper URL at start: bad combinations exit 2 without showing the password",
                  backends=Z)
def zk_auth_bad_urls(ctx):
    base = "127.0.0.1:%d/x" % ctx.server.port
    for url, want in (("zookeeper://alice@%s" % base, "user 'alice' needs a password"),
                      ("zookeeper://%s?acl=creator" % base, "acl= needs a user"),
                      ("zookeeper://alice:pw-9x@%s?acl=world" % base, "acl must be creator_read or creator"),
                      ("zookeeper://alice@%s?password_file=/nonexistent/pw" % base, "/nonexistent/pw"),
                      ("zookeeper://alice:pw-9x@%s?password_file=/etc/hostname" % base, "password_file")):
        text = exits_2(ctx, url, want, env={"LOCKD_BACKEND_PASSWORD": ""})
        check("pw-9x" not in text, "the password shows: " + text)


# ---- MySQL/MariaDB over TLS ----------------------------------------------


@harness.scenario("store auth: mysql over TLS: verify_identity serves locks; no TLS, a foreign CA or a wrong name is refused",
                  backends=M)
def mysql_tls(ctx):
    d = os.path.join(ctx.tmpdir, "mysql-tls-certs")
    ca = certs.Ca(os.path.join(d, "ca"))
    other = certs.Ca(os.path.join(d, "other"), name="other CA")
    # the server's certificate names 127.0.0.1 only; 127.0.0.2 reaches
    # the same server under a name it does not have
    scert, skey = ca.issue("lockd-db", ("IP:127.0.0.1",), name="db")
    ccert, ckey = ca.issue("lockd-client", (), client=True, name="client")
    srv = server_mysql.MysqlServer(ctx.tmpdir, also_bind="127.0.0.2", tls=(scert, skey, ca.cert),
                                   subdir="mysql-tls")
    try:
        srv.start()
        srv.sql("CREATE USER 'tls'@'%%' IDENTIFIED BY 'tls-pw-7' REQUIRE SSL; "
                "GRANT ALL ON lockd.* TO 'tls'@'%%'; "
                "CREATE USER 'x509'@'%%' IDENTIFIED BY 'tls-pw-7' REQUIRE SUBJECT '/CN=lockd-client' "
                "AND ISSUER '/CN=lockd test CA'; GRANT ALL ON lockd.* TO 'x509'@'%%'", database=None)
        mysql_tls_checks(ctx, srv, ca, other, (ccert, ckey))
    finally:
        for ld in ctx.extra:  # before their server; ctx.cleanup() reads their logs later
            if ld.alive():
                ld.stop(5)
        srv.stop()


def mysql_tls_checks(ctx, srv, ca, other, client):
    pw_file = os.path.join(ctx.tmpdir, "mysql-tls-pw")
    with open(pw_file, "w") as f:
        f.write("tls-pw-7\n")

    def url(user, host, query):
        return "mysql://%s@%s:%d/lockd?password_file=%s&connect_timeout_ms=2000&%s" % (
            user, host, srv.port, pw_file, query)

    good = lockd_on(ctx, url("tls", "127.0.0.1", "ssl_mode=verify_identity&ssl_ca=" + ca.cert))
    key = ctx.key("tls")
    g = acquire(good.client(), key, ttl_ms=10000)
    eq(g.status, 201, "grant over TLS")
    eq(good.request("GET", path(key)).status, 200, "inspect over TLS")
    eq(release(good.client(), key, g.json["token"]).status, 200, "release over TLS")
    # verify_ca checks the chain, not the name
    ld = lockd_on(ctx, url("tls", "127.0.0.2", "ssl_mode=verify_ca&ssl_ca=" + ca.cert))
    eq(acquire(ld.client(), ctx.key("tls"), ttl_ms=1000).status, 201, "verify_ca under another name")
    # the client certificate the x509 user requires
    cert = "ssl_cert=%s&ssl_key=%s" % client
    ld = lockd_on(ctx, url("x509", "127.0.0.1", "ssl_mode=verify_identity&ssl_ca=%s&%s" % (ca.cert, cert)))
    eq(acquire(ld.client(), ctx.key("tls"), ttl_ms=1000).status, 201, "with a client certificate")
    for query, user, host, what, log_has in (
            ("ssl_mode=disabled", "tls", "127.0.0.1", "no TLS", "Access denied for user 'tls'"),
            ("ssl_mode=required", "x509", "127.0.0.1", "no client certificate", "Access denied for user 'x509'"),
            ("ssl_mode=verify_ca&ssl_ca=" + other.cert, "tls", "127.0.0.1", "a foreign CA", "TLS/SSL error"),
            ("ssl_mode=verify_identity&ssl_ca=" + ca.cert, "tls", "127.0.0.2", "a wrong name",
             "Validation of SSL server certificate failed")):
        ld = lockd_on(ctx, url(user, host, query), ready=False)
        refused(ld, ctx.key("tls-no"), what, log_has=log_has)
    # a server without TLS (the suite's own): required refuses it,
    # preferred falls back to plain text
    plain = "mysql://lockd:%s@127.0.0.1:%d/lockd?connect_timeout_ms=2000&" % (
        server_mysql.PASSWORD, ctx.server.port)
    ld = lockd_on(ctx, plain + "ssl_mode=required", ready=False)
    refused(ld, ctx.key("tls-no"), "required, server without TLS",
            log_has="the server does not offer TLS (ssl_mode=required)")
    ld = lockd_on(ctx, plain + "ssl_mode=preferred")
    eq(acquire(ld.client(), ctx.key("tls"), ttl_ms=1000).status, 201, "preferred without TLS")
    for query, want in (("ssl_mode=verify_identity", "ssl_mode=verify_identity needs ssl_ca=PATH"),
                        ("ssl_ca=" + ca.cert, "ssl_ca= needs TLS"),
                        ("ssl_mode=verify_ca&ssl_ca=/nonexistent/ca.pem",
                         "ssl_ca=/nonexistent/ca.pem: cannot read it"),
                        ("ssl_mode=required&ssl_cert=" + client[0], "ssl_cert= and ssl_key= go together")):
        exits_2(ctx, url("tls", "127.0.0.1", query), want)
    no_secret(ctx.extra, ["tls-pw-7"])

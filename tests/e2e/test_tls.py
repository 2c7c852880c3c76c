"""tests/e2e/test_tls.py - HTTPS on lockd's listener (--tls-cert, --tls-key)
and client certificates (--tls-client-ca), on memory: a lock round trip
over HTTPS and --check-health https://; TLS 1.1 and plain HTTP refused on
the TLS port; SIGHUP swaps the certificate for new connections while a
waiter parked on an older one is served; a bad new file keeps the old set;
mTLS accepts a verified client and answers 401 without one (none, another
CA, expired, not for client auth), /healthz stays open; the CA reloads too;
start-up refusals exit 2 naming the file, never printing key material.
Certificates come from tests/e2e/certs.py (openssl, faketime).
"""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import certs
import harness
from client import Waiter, expect_error, expect_json, path
from harness import LOCKD_BIN, check, eq

_PKI = {}


def pki(ctx):
    """The certificates every scenario here uses, made once per temp dir:
    a CA with a server certificate and client certificates (one with SANs,
    one expired, one for server auth only), and another CA with its own
    server and client certificates."""
    if ctx.tmpdir in _PKI:
        return _PKI[ctx.tmpdir]
    base = os.path.join(ctx.tmpdir, "tls-pki-%d" % os.getpid())
    ca = certs.Ca(os.path.join(base, "ca"))
    other = certs.Ca(os.path.join(base, "other"), name="another CA")
    p = {
        "ca": ca,
        "other": other,
        "server": ca.server(),
        "server2": ca.server(name="server2"),
        "other_server": other.server(name="other-server"),
        "client": ca.issue("orders", ("DNS:orders.svc", "URI:spiffe://lockd/orders"), client=True),
        "expired": ca.issue("old", client=True, days=1, at="2020-01-01"),
        "server_only": ca.issue("not-a-client", name="not-a-client"),
        "other_client": other.issue("stranger", client=True),
    }
    _PKI[ctx.tmpdir] = p
    return p


def copy_pair(pair, dir, name):
    """Copy a (cert, key) pair to dir/name.pem and dir/name.key: files a
    test may overwrite before a SIGHUP."""
    os.makedirs(dir, exist_ok=True)
    cert, key = os.path.join(dir, name + ".pem"), os.path.join(dir, name + ".key")
    shutil.copyfile(pair[0], cert)
    shutil.copyfile(pair[1], key)
    os.chmod(key, 0o600)
    return cert, key


def der(pem_path):
    """The first certificate of a PEM file, DER-encoded."""
    with open(pem_path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def handshake(port, ctx=None):
    """A fresh TLS connection to lockd: (version, cipher name, server
    certificate DER)."""
    ctx = ctx or harness.tls_context()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            return t.version(), t.cipher()[0], t.getpeercert(binary_form=True)


def plain_http(port, timeout=3.0):
    """A plain HTTP request on a fresh connection: what came back before
    the connection closed or was reset, or the timeout passed."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
    return out


def hup_and_wait(ld, n, timeout=5.0):
    """The n-th SIGHUP; returns once its log line is written."""
    ld.signal(signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while ld.log_tail(200000).count(" info SIGHUP: ") < n:
        if time.monotonic() > deadline:
            raise harness.Fail("no SIGHUP line after %.0f s: %s" % (timeout, ld.log_tail()))
        time.sleep(0.02)
    check(ld.alive(), "lockd died on SIGHUP: %s" % ld.log_tail())


def key_text(key_path):
    """The base64 lines of a private key file (none may reach a log)."""
    with open(key_path) as f:
        return [ln for ln in f.read().splitlines() if ln and not ln.startswith("-----")]


def tls_lockd(ctx, p, pair=None, client_ca=None, client=None, args=()):
    """A lockd on HTTPS with pair (default: the CA's server certificate);
    its request() verifies lockd against the CA and shows client (a
    (cert, key) pair) if given."""
    cert, key = pair or p["server"]
    a = ["--tls-cert", cert, "--tls-key", key] + list(args)
    if client_ca is not None:
        a += ["--tls-client-ca", client_ca]
    tls = dict(ca=p["ca"].cert)
    if client is not None:
        tls.update(cert=client[0], key=client[1])
    return ctx.new_lockd(args=a, tls=tls)


def health(args, timeout=15):
    return subprocess.run([LOCKD_BIN, "--check-health"] + args, capture_output=True, text=True,
                          timeout=timeout)


@harness.scenario("tls: a lock round trip over HTTPS (TLS 1.3, 1.2 with an ECDHE AEAD suite); "
                  "--check-health over https://", backends=["memory"])
def tls_round_trip(ctx):
    p = pki(ctx)
    ld = tls_lockd(ctx, p)
    key = ctx.key("tls")
    c = ld.client()
    try:
        r = c.request("POST", path(key), {"ttl_ms": 10000, "owner": "tls-test"})
        g = expect_json(r, 201, "acquire over HTTPS")
        expect_json(c.request("GET", path(key)), 200, "inspect over HTTPS")
        r = c.request("DELETE", path(key), headers={"Lock-Token": g["token"]})
        expect_json(r, 200, "release over HTTPS")
    finally:
        c.close()
    eq(handshake(ld.port, harness.tls_context(ca=p["ca"].cert))[0], "TLSv1.3", "protocol by default")
    v, cipher, cert = handshake(ld.port, harness.tls_context(
        ca=p["ca"].cert, maximum_version=ssl.TLSVersion.TLSv1_2))
    eq(v, "TLSv1.2", "protocol with a TLS 1.2 client")
    check(cipher.startswith("ECDHE-") and ("GCM" in cipher or "CHACHA20" in cipher),
          "TLS 1.2 suite %s is not ECDHE with an AEAD cipher" % cipher)
    eq(cert, der(p["server"][0]), "the server certificate presented")
    url = "https://127.0.0.1:%d/healthz" % ld.port
    r = health([url])
    eq(r.returncode, 0, "--check-health %s: %s" % (url, r.stderr))
    # the default URL follows --tls-cert
    r = health(["--listen", "127.0.0.1:%d" % ld.port, "--tls-cert", p["server"][0],
                "--tls-key", p["server"][1]])
    eq(r.returncode, 0, "--check-health with --tls-cert: %s" % r.stderr)
    r = health(["http://127.0.0.1:%d/healthz" % ld.port])
    eq(r.returncode, 1, "--check-health http:// on the TLS port: %s" % r.stderr)
    eq(ld.stop(), 0, "exit code")


@harness.scenario("tls: the TLS port refuses TLS 1.1, TLS 1.2 without an AEAD suite, and plain HTTP "
                  "(no HTTP answer)", backends=["memory"])
def tls_refuses_old_and_plain(ctx):
    p = pki(ctx)
    ld = tls_lockd(ctx, p)
    old = harness.tls_context(minimum_version=ssl.TLSVersion.TLSv1_1,
                              maximum_version=ssl.TLSVersion.TLSv1_1)
    old.set_ciphers("ALL:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
    try:
        v = handshake(ld.port, old)[0]
        raise harness.Fail("a TLS 1.1 handshake succeeded (%s)" % v)
    except (ssl.SSLError, ConnectionResetError):
        pass
    cbc = harness.tls_context(maximum_version=ssl.TLSVersion.TLSv1_2)
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA")
    try:
        c = handshake(ld.port, cbc)[1]
        raise harness.Fail("a TLS 1.2 handshake without an AEAD suite succeeded (%s)" % c)
    except (ssl.SSLError, ConnectionResetError):
        pass
    out = plain_http(ld.port)
    check(b"HTTP/1." not in out, "plain HTTP on the TLS port got an HTTP answer: %r" % out[:200])
    # still serving after both
    expect_json(ld.request("GET", "/healthz"), 200, "healthz over HTTPS after")
    eq(ld.stop(), 0, "exit code")


@harness.scenario("tls: SIGHUP swaps the certificate for new connections; a waiter parked on an older "
                  "connection is granted after it; a bad new file keeps the old set", backends=["memory"])
def tls_reload(ctx):
    p = pki(ctx)
    d = os.path.join(ctx.tmpdir, "tls-reload-%d-%d" % (os.getpid(), time.monotonic_ns()))
    cert, key = copy_pair(p["server"], d, "live")
    ld = tls_lockd(ctx, p, pair=(cert, key))
    k = ctx.key("tls-hup")
    holder = expect_json(ld.request("POST", path(k), {"ttl_ms": 20000}), 201, "holder")
    kept = ld.client()
    expect_json(kept.request("GET", "/healthz"), 200, "a kept-alive connection before SIGHUP")
    w = Waiter(ctx, k, wait_ms=15000, lockd=ld)
    w.start()
    time.sleep(0.3)
    check(w.is_alive() and w.resp is None, "the waiter was answered early: %r" % (w.resp,))

    copy_pair(p["server2"], d, "live")
    hup_and_wait(ld, 1)
    eq(handshake(ld.port)[2], der(p["server2"][0]), "certificate of a connection after SIGHUP")
    check(w.is_alive() and w.resp is None, "the waiter was answered at SIGHUP: %r" % (w.resp,))
    r = kept.request("GET", "/healthz")
    expect_json(r, 200, "the kept-alive connection after SIGHUP")
    eq(kept.conn.sock.getpeercert(binary_form=True), der(p["server"][0]),
       "the kept-alive connection's certificate")
    kept.close()
    r = ld.request("DELETE", path(k), headers={"Lock-Token": holder["token"]})
    expect_json(r, 200, "release by the holder")
    eq(w.result().status, 201, "the waiter parked across SIGHUP")

    # a broken certificate, then a key of another certificate: the old
    # set stays, the warning names the file and shows no key material
    with open(cert, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    hup_and_wait(ld, 2)
    eq(handshake(ld.port)[2], der(p["server2"][0]), "certificate after a broken one on SIGHUP")
    shutil.copyfile(p["server"][0], cert)  # its key stays server2's
    hup_and_wait(ld, 3)
    eq(handshake(ld.port)[2], der(p["server2"][0]), "certificate after a mismatched key on SIGHUP")
    text = ld.log_tail(200000)
    check(text.count("the old certificate, key and client CA stay in force") == 2,
          "two refused reloads not logged: %s" % text[-2000:])
    check(cert in text and "does not match the certificate" in text,
          "the refusals do not name the file and the reason: %s" % text[-2000:])
    for ln in key_text(key) + key_text(p["server"][1]):
        check(ln not in text, "key material in the log")
    expect_json(ld.request("GET", "/healthz"), 200, "healthz after the refused reloads")
    eq(ld.stop(), 0, "exit code")


@harness.scenario("tls: with --tls-client-ca a verified client certificate gets /locks; none, another CA's, "
                  "an expired one or a server-only one get 401; /healthz needs none", backends=["memory"])
def tls_client_certs(ctx):
    p = pki(ctx)
    ld = tls_lockd(ctx, p, client_ca=p["ca"].cert, client=p["client"])
    k = ctx.key("mtls")
    g = expect_json(ld.request("POST", path(k), {"ttl_ms": 10000}), 201, "acquire with a verified cert")
    expect_json(ld.request("GET", "/locks"), 200, "list with a verified cert")

    def refused(client, why, what):
        tls = dict(ca=p["ca"].cert)
        if client is not None:
            tls.update(cert=client[0], key=client[1])
        r = ld.request("GET", path(k), tls=tls)
        err = expect_error(r, 401, "unauthorized", what)
        check(why in err["message"], "%s: message %r lacks %r" % (what, err["message"], why))
        r = ld.request("DELETE", path(k), headers={"Lock-Token": g["token"]}, tls=tls)
        expect_error(r, 401, "unauthorized", what + " (release)")
        eq(ld.request("GET", "/healthz", tls=tls).status, 200, what + ": /healthz")

    refused(None, "a client certificate is required", "no client certificate")
    refused(p["other_client"], "not signed by the client CA", "another CA's certificate")
    refused(p["expired"], "expired", "an expired certificate")
    refused(p["server_only"], "not for client authentication", "a server-only certificate")
    expect_json(ld.request("GET", path(k)), 200, "the lock is still held by the verified client")
    r = ld.request("DELETE", path(k), headers={"Lock-Token": g["token"]})
    expect_json(r, 200, "release with a verified cert")
    eq(ld.stop(), 0, "exit code")


@harness.scenario("tls: SIGHUP reloads the client CA: a connection kept alive across it is checked again; "
                  "the certificate request names no CA",
                  backends=["memory"])
def tls_client_ca_reload(ctx):
    p = pki(ctx)
    d = os.path.join(ctx.tmpdir, "tls-ca-%d-%d" % (os.getpid(), time.monotonic_ns()))
    os.makedirs(d, exist_ok=True)
    ca_file = os.path.join(d, "clients.pem")
    shutil.copyfile(p["ca"].cert, ca_file)
    ld = tls_lockd(ctx, p, client_ca=ca_file, client=p["client"])
    k = ctx.key("mtls-hup")
    kept = ld.client()
    try:
        expect_json(kept.request("GET", path(k)), 404, "inspect with the first CA's cert")
        shutil.copyfile(p["other"].cert, ca_file)
        hup_and_wait(ld, 1)
        expect_error(kept.request("GET", path(k)), 401, "unauthorized",
                     "the kept-alive connection after the CA changed")
    finally:
        kept.close()
    r = ld.request("GET", path(k), tls=dict(ca=p["ca"].cert, cert=p["other_client"][0],
                                            key=p["other_client"][1]))
    expect_json(r, 404, "the new CA's client on a new connection")
    # the certificate request names no CA (the start's list would be
    # stale now, and clients that pick by it would send nothing)
    for v in ("-tls1_2", "-tls1_3"):
        r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % ld.port, v,
                            "-servername", "localhost"], input="", capture_output=True, text=True,
                           timeout=15)
        check("No client certificate CA names sent" in r.stdout,
              "openssl s_client %s: the certificate request names CAs: %s" % (v, r.stdout[-1500:]))
    eq(ld.stop(), 0, "exit code")


@harness.scenario("tls: start-up refusals exit 2 naming the file, never printing the key", backends=["memory"])
def tls_startup_refusals(ctx):
    p = pki(ctx)
    d = os.path.join(ctx.tmpdir, "tls-bad-%d" % os.getpid())
    os.makedirs(d, exist_ok=True)
    garbage = os.path.join(d, "garbage.pem")
    with open(garbage, "w") as f:
        f.write("hello\n")
    missing = os.path.join(d, "missing.pem")
    cert, key = p["server"]
    cases = [
        (["--tls-key", key], "--tls-cert"),
        (["--tls-cert", cert], "--tls-key"),
        (["--tls-client-ca", p["ca"].cert], "--tls-client-ca needs --tls-cert"),
        (["--tls-cert", missing, "--tls-key", key], missing),
        (["--tls-cert", garbage, "--tls-key", key], garbage),
        (["--tls-cert", cert, "--tls-key", garbage], garbage),
        (["--tls-cert", cert, "--tls-key", p["server2"][1]], "does not match the certificate"),
        (["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", garbage], garbage),
    ]
    secrets = key_text(key) + key_text(p["server2"][1])
    for args, want in cases:
        r = subprocess.run([LOCKD_BIN, "--listen", "127.0.0.1:%d" % harness.free_port(),
                            "--backend", "memory://"] + args,
                           capture_output=True, text=True, timeout=15)
        eq(r.returncode, 2, "exit code for %s: %s" % (args, r.stderr))
        check(want in r.stderr, "stderr for %s lacks %r: %r" % (args, want, r.stderr))
        for ln in secrets:
            check(ln not in r.stderr + r.stdout, "key material printed for %s" % args)
    # also from the environment
    env = dict(os.environ, LOCKD_TLS_CERT=cert)
    r = subprocess.run([LOCKD_BIN, "--listen", "127.0.0.1:%d" % harness.free_port()], env=env,
                       capture_output=True, text=True, timeout=15)
    eq(r.returncode, 2, "exit code with LOCKD_TLS_CERT alone: %s" % r.stderr)


@harness.scenario("tls: --auth-file's tls_identity matches a verified certificate's CN, DNS or URI SAN; "
                  "a verified certificate no credential names gets 403", backends=["memory"])
def tls_identity_credentials(ctx):
    p = pki(ctx)
    pol = os.path.join(ctx.tmpdir, "tls-auth-%d-%d.json" % (os.getpid(), time.monotonic_ns()))
    creds = [
        {"name": "by-uri", "tls_identity": "spiffe://lockd/orders", "prefixes": ["orders/"], "verbs": ["*"]},
        {"name": "by-cn", "tls_identity": "old", "prefixes": ["old/"], "verbs": ["*"]},
    ]
    with open(pol, "w") as f:
        json.dump({"credentials": creds}, f)
    ld = tls_lockd(ctx, p, client_ca=p["ca"].cert, client=p["client"], args=["--auth-file", pol])
    k = "orders/" + ctx.key("id")
    g = expect_json(ld.request("POST", path(k), {"ttl_ms": 10000}), 201, "acquire by the URI SAN's credential")
    expect_error(ld.request("POST", path("billing/" + ctx.key("id")), {"ttl_ms": 10000}), 403, "forbidden",
                 "a key outside the credential's prefixes")
    expect_json(ld.request("DELETE", path(k), headers={"Lock-Token": g["token"]}), 200, "release")
    # "stranger" verifies against its own CA once that CA is trusted, but
    # no credential names it
    both = os.path.join(ctx.tmpdir, "tls-both-%d.pem" % os.getpid())
    with open(both, "w") as f:
        for c in (p["ca"].cert, p["other"].cert):
            with open(c) as src:
                f.write(src.read())
    ld2 = tls_lockd(ctx, p, client_ca=both, client=p["other_client"], args=["--auth-file", pol])
    r = ld2.request("GET", path("orders/" + ctx.key("id")))
    expect_error(r, 403, "forbidden", "a verified certificate no credential names")
    # the expired "old" certificate does not verify, whatever its CN names
    r = ld2.request("GET", path("old/" + ctx.key("id")),
                    tls=dict(ca=p["ca"].cert, cert=p["expired"][0], key=p["expired"][1]))
    expect_error(r, 401, "unauthorized", "an expired certificate whose CN a credential names")
    eq(ld.stop(), 0, "exit code")
    eq(ld2.stop(), 0, "exit code")


@harness.scenario("tls: a connection over --max-connections-per-ip on the TLS port is answered 429 "
                  "with Retry-After over TLS, then closed", backends=["memory"])
def tls_connections_capped(ctx):
    p = pki(ctx)
    ld = tls_lockd(ctx, p, args=["--max-connections-per-ip", "1"])
    held = None
    deadline = time.monotonic() + 5
    while held is None:
        # the harness's readiness probe may still count for a moment
        c = ld.client(timeout=5)
        try:
            ok = c.request("GET", "/healthz").status == 200
        except OSError:
            ok = False
        if ok:
            held = c
        else:
            c.close()
            check(time.monotonic() < deadline, "one connection with a cap of 1 was not served")
            time.sleep(0.1)
    try:
        c2 = ld.client(timeout=5)
        try:
            r = c2.request("GET", "/healthz")
        finally:
            c2.close()
        body = expect_error(r, 429, "too_many_requests", "2nd TLS connection from 127.0.0.1")
        eq(r.header("Retry-After"), "1", "Retry-After of the 429")
        check("--max-connections-per-ip" in body["message"], "the message names the flag")
        eq(held.request("GET", "/healthz").status, 200, "the first connection is still served")
    finally:
        held.close()

"""tests/e2e/harness.py - what every end-to-end scenario stands on.

- Lockd: one build/lockd process on a free loopback port, on a given backend.
- http(): one HTTP request over a fresh connection (or a kept-alive Client),
  answered as a Response with .status, .headers, .json, .text. Over HTTPS
  with tls=dict(ca=..., cert=..., key=...) (tls_context()): a Lockd made
  with tls= talks HTTPS in request() and client().
- scenario(): registers a test; its name is a sentence. A scenario takes one
  argument, the Context for the backend it runs on; it fails by raising Fail
  (check(), eq()) and may raise Skip(reason) when it cannot run here. What
  it needs of a backend is declared, never tested for with an early return:
  backends=[...] by name, needs=[...] by capability (CAPABILITIES).
- Server: the base of the real backing servers (Redis, ZooKeeper, MariaDB)
  that tests/e2e/server_<name>.py start on loopback in a temp dir.
- semaphores(): whether a lockd's store offers a shared limit above 1 (not
  on redlock://); refuses_semaphore() checks such a store's 400.

Only Python's standard library is used: the suite runs on a bare Debian 12.
"""

import http.client as httpclient
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCKD_BIN = os.environ.get("LOCKD_BIN", os.path.join(ROOT, "build", "lockd"))
# lockctl, the command-line client, is built beside lockd (same build dir,
# so the ASan and TSan runs test their own lockctl).
LOCKCTL_BIN = os.path.join(os.path.dirname(LOCKD_BIN), "lockctl")

SCENARIOS = []

# What a backend may offer a scenario, as the running lockd says it
# (capabilities()): "fifo:store" when waiters keep their place in the
# store's own queue (first come, first served across instances),
# "fifo:instance" when only each instance serves its waiters in order.
CAPABILITIES = ("fifo:store", "fifo:instance")


def scenario(name, backends=None, slow=False, needs=()):
    """Register fn as a scenario. backends: None = every backend, else the
    list of backend names it runs on. needs: capabilities (CAPABILITIES)
    the backend must have; where it lacks one the runner does not run the
    scenario and says so ("n/a")."""
    unknown = [n for n in needs if n not in CAPABILITIES]
    if unknown:
        raise ValueError("scenario %r needs unknown capabilities %r (known: %s)"
                         % (name, unknown, ", ".join(CAPABILITIES)))

    def wrap(fn):
        SCENARIOS.append({"name": name, "fn": fn, "backends": backends, "slow": slow,
                          "needs": tuple(needs)})
        return fn

    return wrap


class Fail(AssertionError):
    pass


class Skip(Exception):
    """Raised by a scenario that cannot run here (e.g. no container engine):
    the runner prints "skip <name>: <reason>" and counts it as skipped, never
    as passed."""


def check(cond, msg="check failed"):
    if not cond:
        raise Fail(msg)


def eq(got, want, what="value"):
    if got != want:
        raise Fail("%s: got %r, want %r" % (what, got, want))


_HANDED_OUT = set()
_PORT_RNG = random.Random()  # seeded from the OS: apart in every process


def _ephemeral_low():
    """The first port of the kernel's ephemeral range (what it gives the
    source port of an outgoing connection)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port():
    """A loopback port nobody is bound to, below the kernel's ephemeral
    range when there is room: a port the kernel hands out as it pleases
    can become the source port of any client's outgoing connection
    between this call and the server's bind (a ZooKeeper ensemble writes
    all its ports into its config before any node starts). Never the same
    port twice in one process."""
    low = _ephemeral_low()
    if low > 12000:
        for _ in range(500):
            port = _PORT_RNG.randrange(10000, low)
            if port not in _HANDED_OUT and _bindable(port):
                _HANDED_OUT.add(port)
                return port
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    _HANDED_OUT.add(port)
    return port


def wait_port(port, timeout=15.0, host="127.0.0.1", source=None):
    """True once a connection to host:port is accepted (from source, an
    address to connect from, if given), False after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.5,
                                     source_address=(source, 0) if source else None).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def served_client(port, n):
    """A kept-alive connection to lockd that was answered 200, the n-th of
    a test's. lockd counts the harness's port probe until it has seen it
    close, which may take a moment: a refused try is repeated for 5 s."""
    deadline = time.monotonic() + 5
    while True:
        c = Client(port, timeout=5)
        try:
            if c.request("GET", "/healthz").status == 200:
                return c
        except (OSError, httpclient.HTTPException):
            pass
        c.close()
        check(time.monotonic() < deadline, "connection %d was not served within 5 s" % n)
        time.sleep(0.1)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body
        self.text = body.decode("utf-8", "replace")
        try:
            self.json = json.loads(self.text) if body else None
        except ValueError:
            self.json = None

    def header(self, name):
        return self.headers.get(name.lower())

    def error_code(self):
        try:
            return self.json["error"]["code"]
        except (TypeError, KeyError):
            return None

    def __repr__(self):
        return "<%d %s>" % (self.status, self.text[:200])


def _encode_body(body):
    if body is None:
        return None
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def tls_context(ca=None, cert=None, key=None, maximum_version=None, minimum_version=None):
    """An ssl.SSLContext for a client of lockd: ca (PEM path) verifies the
    server's certificate (None: no verification); cert and key (PEM paths)
    are the client certificate shown to lockd (None: none);
    maximum_version/minimum_version: ssl.TLSVersion bounds."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca is not None:
        ctx.load_verify_locations(ca)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    if minimum_version is not None:
        ctx.minimum_version = minimum_version
    if maximum_version is not None:
        ctx.maximum_version = maximum_version
    return ctx


def _tls(tls):
    """tls: None (plain HTTP), an ssl.SSLContext, or a dict of
    tls_context()'s arguments."""
    if tls is None or isinstance(tls, ssl.SSLContext):
        return tls
    return tls_context(**tls)


class Client:
    """A kept-alive HTTP/1.1 connection to one lockd; over HTTPS with tls
    (an ssl.SSLContext or a dict of tls_context()'s arguments)."""

    def __init__(self, port, host="127.0.0.1", timeout=30.0, tls=None):
        ctx = _tls(tls)
        if ctx is None:
            self.conn = httpclient.HTTPConnection(host, port, timeout=timeout)
        else:
            self.conn = httpclient.HTTPSConnection(host, port, timeout=timeout, context=ctx)

    def request(self, method, path, body=None, headers=None):
        data = _encode_body(body)
        hdrs = dict(headers or {})
        if data is not None and "Content-Type" not in hdrs:
            hdrs["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, body=data, headers=hdrs)
            r = self.conn.getresponse()
            return Response(r.status, r.getheaders(), r.read())
        except Exception:
            self.conn.close()
            raise

    def close(self):
        self.conn.close()


def http(port, method, path, body=None, headers=None, timeout=30.0, host="127.0.0.1", tls=None):
    c = Client(port, host=host, timeout=timeout, tls=tls)
    try:
        return c.request(method, path, body, headers)
    finally:
        c.close()


def wait_stopped(pid, timeout=2.0):
    """After a SIGSTOP to pid: until every thread of it has stopped. kill()
    only queues the signal; on a busy machine a thread of the server may
    still answer a request sent right after it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            return  # gone
        running = 0
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("T", "t", "Z", "X"):
                running += 1
        if running == 0:
            return
        time.sleep(0.001)
    raise Fail("pid %d has not stopped %.1f s after SIGSTOP" % (pid, timeout))


def raw(port, data, timeout=5.0, read=True):
    """Send raw bytes, return what the server answers until it closes or the
    timeout passes (b"" if nothing)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, rest = out.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        if len(rest) >= int(line.split(b":")[1]):
                            return out
        return out
    finally:
        s.close()


class Lockd:
    """One lockd process. Output goes to a log file in the run's temp dir.
    wrapper: a command prefix (e.g. ["ip", "netns", "exec", NS], which execs
    lockd itself, so proc.pid is lockd's); env: added to the environment
    (LD_PRELOAD, FAKETIME, ...); host: the address it listens on and is
    reached at (127.0.0.1, or e.g. a veth address in a namespace); tls: how
    request() and client() reach it over HTTPS (a dict of tls_context()'s
    arguments: ca to verify lockd, cert and key to show; or an
    ssl.SSLContext), None for plain HTTP. lockd's own --tls-* flags go in
    args."""

    def __init__(self, backend_url, args=(), env=None, port=None, tmpdir=None, wrapper=None,
                 host="127.0.0.1", tls=None):
        self.backend_url = backend_url
        self.tls = tls
        self.host = host
        self.port = port or free_port()
        self.args = list(args)
        self.env = dict(env or {})
        self.wrapper = list(wrapper or [])
        self.tmpdir = tmpdir or tempfile.mkdtemp(prefix="lockd-e2e-")
        self.proc = None
        self.log_path = None
        self.store = None  # (semaphores offered?, scheme): semaphores() asks once

    def start(self, wait_ready=True, timeout=15.0):
        env = dict(os.environ)
        env.update(self.env)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        self.log_path = os.path.join(self.tmpdir, "lockd-%d.log" % self.port)
        log = open(self.log_path, "ab")
        cmd = self.wrapper + [LOCKD_BIN, "--listen", "%s:%d" % (self.host, self.port),
                              "--backend", self.backend_url] + self.args
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
        log.close()
        if wait_ready:
            if not wait_port(self.port, timeout, self.host):
                raise Fail("lockd did not listen on %s:%d: %s" % (self.host, self.port, self.log_tail()))
        return self

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def request(self, method, path, body=None, headers=None, timeout=30.0, tls=False):
        """tls=False: self.tls; else this request's (None: plain HTTP)."""
        return http(self.port, method, path, body, headers, timeout, self.host,
                    self.tls if tls is False else tls)

    def client(self, timeout=30.0, tls=False):
        return Client(self.port, host=self.host, timeout=timeout,
                      tls=self.tls if tls is False else tls)

    def acquire(self, key, **params):
        return self.request("POST", "/locks/" + key, params or None)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)
            if sig == signal.SIGSTOP:
                wait_stopped(self.proc.pid)

    def stop(self, timeout=15.0):
        """SIGTERM and wait; returns the exit code (None if it had to be
        killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode

    def kill9(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def sanitizer_report(self):
        """The sanitizer's report in the log, if any ('' if none)."""
        text = self.log_tail(200000)
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                       "runtime error:", "WARNING: ThreadSanitizer"):
            i = text.find(marker)
            if i >= 0:
                return text[max(0, i - 200):i + 3000]
        return ""


def capabilities(lockd, timeout=30.0):
    """The CAPABILITIES of the backend lockd runs on, from its /readyz:
    "fifo:" + the fifo field ("store" or "instance"). Waits until the store
    is ready; Fail if it never is or names no fifo scope."""
    deadline = time.monotonic() + timeout
    r = None
    while True:
        try:
            r = lockd.request("GET", "/readyz", timeout=10)
            if r.status == 200 and isinstance(r.json, dict):
                break
        except OSError as e:
            r = e
        if time.monotonic() > deadline:
            raise Fail("capabilities: /readyz not ready after %.0f s: %r" % (timeout, r))
        time.sleep(0.1)
    fifo = r.json.get("fifo")
    if fifo not in ("store", "instance"):
        raise Fail("capabilities: /readyz names no fifo scope: %r" % r)
    return {"fifo:" + fifo}


def _lock_path(key):
    return "/locks/" + urllib.parse.quote(key, safe="")


def _store(lockd):
    """(semaphores offered?, scheme) of lockd's store, probed on first use:
    the scheme from /readyz's backend, then a shared acquire with limit 2
    of a key of its own: 201 (released at once with its token) or 400
    invalid_parameter; anything else is a Fail."""
    if lockd.store is not None:
        return lockd.store
    r = lockd.request("GET", "/readyz", timeout=10)
    scheme = r.json.get("backend") if r.status == 200 and isinstance(r.json, dict) else None
    check(isinstance(scheme, str) and scheme, "semaphores: /readyz names no backend: %r" % r)
    key = "semaphore-probe-%d-%d-%d" % (os.getpid(), lockd.port, time.monotonic_ns())
    r = lockd.request("POST", _lock_path(key), {"mode": "shared", "limit": 2, "ttl_ms": 10000})
    if r.status == 201:
        rel = lockd.request("DELETE", _lock_path(key), headers={"Lock-Token": r.json["token"]})
        eq(rel.status, 200, "semaphores: release of the probe (%r)" % rel)
        lockd.store = (True, scheme)
    elif r.status == 400 and r.error_code() == "invalid_parameter":
        lockd.store = (False, scheme)
    else:
        raise Fail("semaphores: a shared acquire with limit 2 is neither 201 nor 400 invalid_parameter: %r" % r)
    return lockd.store


def semaphores(lockd):
    """Whether lockd's store offers semaphores (shared, limit above 1): a
    probe acquire with limit 2, once per Lockd (then cached). Where it does
    not (redlock://), a scenario whose point is a limit above 1 keeps it
    with no limit or limit 1, and checks refuses_semaphore()."""
    return _store(lockd)[0]


def _lock_state(lockd, key):
    """GET /locks/key without what runs down (ttl_ms, expires_at)."""
    r = lockd.request("GET", _lock_path(key))
    body = r.json
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in ("ttl_ms", "expires_at")}
        if isinstance(body.get("holders"), list):
            body["holders"] = [{k: v for k, v in h.items() if k not in ("ttl_ms", "expires_at")}
                               for h in body["holders"]]
    return r.status, body


def refuses_semaphore(lockd, key, body=None, query=None, what="a semaphore"):
    """On a store without semaphores: an acquire of key with body (JSON)
    or query asking a shared limit above 1 is 400 invalid_parameter, its
    message names the store's scheme (redlock://), and key's inspect answer
    is the same after it as before (the TTLs aside). Returns the error."""
    offered, scheme = _store(lockd)
    check(not offered, "refuses_semaphore on a store that offers semaphores (%s)" % scheme)
    before = _lock_state(lockd, key)
    r = lockd.request("POST", _lock_path(key) + ("?" + query if query else ""), body)
    eq((r.status, r.error_code()), (400, "invalid_parameter"), "%s on %s:// (%r)" % (what, scheme, r))
    msg = r.json["error"].get("message", "")
    check(scheme + "://" in msg and "limit" in msg, "%s: the 400 does not name %s://: %r" % (what, scheme, msg))
    eq(_lock_state(lockd, key), before, "%s: the key after the refusal" % what)
    return r.json["error"]


class Server:
    """A real backing server on loopback. Subclasses (server_<name>.py) set
    self.url (the lockd --backend URL) in start()."""

    name = "base"
    url = None

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.proc = None

    def start(self):
        raise NotImplementedError

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        wait_stopped(self.proc.pid)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def restart(self):
        """Start again on the same port and data dir after stop()/kill9()."""
        self.start()


class Context:
    """What a scenario gets: the backend it runs on, a running lockd on it,
    and a way to start more lockd instances on the same store."""

    def __init__(self, backend, server, lockd, tmpdir):
        self.backend = backend  # "memory", "redis", "zookeeper", "mysql"
        self.server = server  # Server or None (memory)
        self.lockd = lockd
        self.tmpdir = tmpdir
        self.extra = []
        self.seq = 0

    @property
    def url(self):
        return self.server.url if self.server is not None else "memory://"

    def key(self, hint="k"):
        """A key no other scenario uses (stores outlive one scenario)."""
        self.seq += 1
        return "%s-%d-%d-%d" % (hint, os.getpid(), int(time.time() * 1000) % 10**9, self.seq)

    def new_lockd(self, args=(), env=None, wrapper=None, start=True, tls=None):
        ld = Lockd(self.url, args=args, env=env, tmpdir=self.tmpdir, wrapper=wrapper, tls=tls)
        self.extra.append(ld)
        if start:
            ld.start()
        return ld

    def cleanup(self):
        """Stop the extra instances; their sanitizer reports, if any."""
        reports = []
        for ld in self.extra:
            if ld.alive():
                ld.stop(5)
            report = ld.sanitizer_report()
            if report:
                reports.append(report)
        self.extra = []
        return reports


def log(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()

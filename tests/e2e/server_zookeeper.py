"""tests/e2e/server_zookeeper.py - a real standalone ZooKeeper (Debian's
zookeeper 3.8 package) for the end-to-end suite: loopback only, a free
port, dataDir in the run's temp dir, admin server off, a short tickTime (so
sessions expire within seconds) and a container reaper that runs every
second. restart() reuses the port and the data dir, so locks and fences
survive a kill -9.

ZooKeeperEnsemble runs three nodes (a real quorum) on loopback for the
fault load: kill -9, SIGSTOP and restart of one node, a network partition
of one node (isolate/heal, iptables through netfault.py), which one leads
(the srvr four-letter word), and which node a lockd process has its
session on (its TCP connections, from /proc).

The URL asks for 4 s sessions: a killed lockd's waiters leave the queue
soon after.

The JVM starts with fast-start flags (client compiler only, serial GC, a
small heap): right for the suite, whose ZooKeeper lives for seconds, but
they cap ZooKeeper's own throughput. make(tmpdir, jvm="server"), or
LOCKD_ZK_JVM=server in the environment, starts it as a server would run
(both JIT tiers, a parallel collector, a fixed 1 GiB heap): tests/bench/run
does so."""

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

import harness

JAVA = "/usr/bin/java"
JARS = ["/usr/share/java/zookeeper.jar"]
# slf4j's simple logger, from libslf4j-java (which Debian's zookeeper pulls
# in); without it slf4j falls back to its no-op logger
LOGGER_JARS = ["/usr/share/java/slf4j-simple.jar"]
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
SESSION_MS = 4000
JVM_FLAGS = {
    # starts in about a second; for the suite
    "fast": ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"],
    # what a production ZooKeeper runs with; for benchmarks
    "server": ["-Xms1g", "-Xmx1g", "-XX:+UseParallelGC", "-XX:+AlwaysPreTouch"],
}


def available():
    return os.path.exists(JAVA) and all(os.path.exists(j) for j in JARS)


def zk_ruok(port, timeout=0.5):
    """True if a ZooKeeper on port answers the ruok four-letter word."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


def zk_session(port, timeout=1.0):
    """True if a ZooKeeper on port completes a real session handshake
    (ConnectRequest, protocol 0), i.e. it serves clients, not just TCP."""
    req = struct.pack(">iqiqi16s", 0, 0, 4000, 0, 16, b"\0" * 16)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(req)) + req)
            head = s.recv(4)
            if len(head) < 4:
                return False
            n = struct.unpack(">i", head)[0]
            body = b""
            while len(body) < n:
                chunk = s.recv(n - len(body))
                if not chunk:
                    return False
                body += chunk
            timeout_ms, session = struct.unpack(">iq", body[4:16])
            return session != 0 and timeout_ms > 0
    except (OSError, struct.error):
        return False


def _recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise OSError("zookeeper closed the connection")
        out += chunk
    return out


def zk_children(port, path, timeout=2.0):
    """The children of path (a list of str), or None if path does not
    exist: one getChildren over a fresh session, speaking the wire
    protocol directly (the suite uses the standard library only)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        req = struct.pack(">iqiqi16s", 0, 0, 4000, 0, 16, b"\0" * 16)
        s.sendall(struct.pack(">i", len(req)) + req)
        n = struct.unpack(">i", _recv_exact(s, 4))[0]
        _recv_exact(s, n)
        p = path.encode()
        req = struct.pack(">iii", 1, 8, len(p)) + p + b"\0"  # getChildren, no watch
        s.sendall(struct.pack(">i", len(req)) + req)
        n = struct.unpack(">i", _recv_exact(s, 4))[0]
        body = _recv_exact(s, n)
        xid, _zxid, err = struct.unpack(">iqi", body[:16])
        if err == -101:  # ZNONODE
            return None
        if err != 0:
            raise OSError("zookeeper: getChildren %s: error %d" % (path, err))
        count = struct.unpack(">i", body[16:20])[0]
        off, names = 20, []
        for _ in range(count):
            ln = struct.unpack(">i", body[off:off + 4])[0]
            names.append(body[off + 4:off + 4 + ln].decode())
            off += 4 + ln
        req = struct.pack(">ii", 2, -11)  # closeSession
        s.sendall(struct.pack(">i", len(req)) + req)
        return names


def zoo_cfg(data, port, extra=""):
    """zoo.cfg of one server on loopback: short ticks, no admin server, the
    four-letter words the tests use, no purge; extra (ensemble lines)
    appended."""
    return ("tickTime=500\n"
            "minSessionTimeout=1000\n"
            "maxSessionTimeout=20000\n"
            "dataDir=%s\n"
            "clientPort=%d\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons\n"
            "maxClientCnxns=0\n"
            "autopurge.purgeInterval=0\n"
            "%s" % (data, port, extra))


class ZooKeeperServer(harness.Server):
    name = "zookeeper"

    def __init__(self, tmpdir, jvm=None):
        super().__init__(tmpdir)
        self.jvm = jvm or os.environ.get("LOCKD_ZK_JVM", "fast")
        if self.jvm not in JVM_FLAGS:
            raise ValueError("jvm must be one of %s" % ", ".join(sorted(JVM_FLAGS)))
        self.port = harness.free_port()
        self.dir = os.path.join(tmpdir, "zookeeper")
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.data, exist_ok=True)
        self.cfg = os.path.join(self.dir, "zoo.cfg")
        self.log_path = os.path.join(self.dir, "zookeeper.log")
        with open(self.cfg, "w") as f:
            f.write(zoo_cfg(self.data, self.port))

    def start(self):
        if not available():
            raise harness.Fail("zookeeper: %s or %s missing (apt-get install zookeeper)"
                               % (JAVA, " ".join(JARS)))
        cmd = [JAVA] + JVM_FLAGS[self.jvm] + [
               "-Xshare:auto", "-Djava.net.preferIPv4Stack=true",
               "-Dzookeeper.admin.enableServer=false",
               "-Dznode.container.checkIntervalMs=1000",
               "-Dzookeeper.snapCount=100000",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-cp", ":".join(JARS + [j for j in LOGGER_JARS if os.path.exists(j)]), MAIN, self.cfg]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if zk_ruok(self.port) and zk_session(self.port):
                self.url = "zookeeper://127.0.0.1:%d?session_timeout_ms=%d" % (self.port, SESSION_MS)
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        tail = ""
        try:
            with open(self.log_path, "rb") as f:
                tail = f.read()[-3000:].decode("utf-8", "replace")
        except OSError:
            pass
        self.kill9()
        raise harness.Fail("zookeeper did not answer on %d: %s" % (self.port, tail))

    def children(self, path):
        return zk_children(self.port, path)


def make(tmpdir, jvm=None):
    return ZooKeeperServer(tmpdir, jvm)


def zk_4lw(port, word, timeout=1.0):
    """The answer to a four-letter word (str), or None if the node does not
    answer in time (stopped, dead, not serving)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(word.encode())
            out = b""
            while len(out) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
            return out.decode("utf-8", "replace")
    except OSError:
        return None


def zk_mode(port, timeout=1.0):
    """'leader', 'follower', 'standalone', or None (not serving)."""
    out = zk_4lw(port, "srvr", timeout)
    for line in (out or "").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def tcp_peers(pid):
    """The remote loopback ports of pid's established TCP connections, from
    /proc (its socket inodes matched in /proc/<pid>/net/tcp)."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    try:
        for fd in os.listdir(fd_dir):
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        with open("/proc/%d/net/tcp" % pid) as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return []
    ports = []
    for row in rows:
        cols = row.split()
        if len(cols) > 9 and cols[3] == "01" and cols[9] in inodes:  # ESTABLISHED
            ports.append(int(cols[2].split(":")[1], 16))
    return ports


class ZooKeeperEnsemble:
    """Three ZooKeeper nodes on loopback, each with its own client, quorum
    and election port, data dir and log under tmpdir/zk-ensemble: a real
    quorum, for faults of one node (kill -9, SIGSTOP, restart) while the
    other two serve. Node i (0..2) has myid i+1. url: zookeeper://h1,h2,h3
    with the suite's session timeout; a caller adds &timeout_ms=... ."""

    def __init__(self, tmpdir, size=3):
        self.tmpdir = tmpdir
        self.dir = os.path.join(tmpdir, "zk-ensemble")
        self.size = size
        self.procs = [None] * size
        self.blocks = [None] * size  # netfault.PortBlock of an isolated node
        # as root, node i runs under a uid of its own, so that isolate(i)
        # can drop what it sends from any port (netfault's uids)
        base = 300000 + (os.getpid() % 100000) * 8
        self.uids = [base + i for i in range(size)] if os.geteuid() == 0 else [None] * size
        self._configure()

    def _configure(self):
        """Pick the ports and write every node's config, myid and data dir
        (again after a start that failed: fresh ports)."""
        size = self.size
        self.ports = [harness.free_port() for _ in range(size)]
        self.quorum = [(harness.free_port(), harness.free_port()) for _ in range(size)]
        self.cfgs, self.logs = [], []
        servers = "".join("server.%d=127.0.0.1:%d:%d\n" % (i + 1, q[0], q[1]) for i, q in enumerate(self.quorum))
        for i in range(size):
            d = os.path.join(self.dir, "node%d" % (i + 1))
            data = os.path.join(d, "data")
            shutil.rmtree(data, ignore_errors=True)  # a failed start's epochs
            os.makedirs(data)
            with open(os.path.join(data, "myid"), "w") as f:
                f.write("%d\n" % (i + 1))
            cfg = os.path.join(d, "zoo.cfg")
            with open(cfg, "w") as f:
                # syncLimit 4 ticks: a stopped follower is dropped by the
                # leader after 2 s; the other two keep the quorum
                f.write(zoo_cfg(data, self.ports[i], "initLimit=20\nsyncLimit=4\n" + servers))
            self.cfgs.append(cfg)
            self.logs.append(os.path.join(d, "zookeeper.log"))
            if self.uids[i] is not None:
                # the node's uid must reach its dir: let it through ours
                # (search only, no listing)
                for up in (self.tmpdir, self.dir):
                    os.chmod(up, os.stat(up).st_mode | 0o111)
                for top, dirs, files in os.walk(d):
                    for n in [top] + [os.path.join(top, x) for x in dirs + files]:
                        os.chown(n, self.uids[i], self.uids[i])
        self.url = "zookeeper://%s?session_timeout_ms=%d" % (
            ",".join("127.0.0.1:%d" % p for p in self.ports), SESSION_MS)

    def _spawn(self, i):
        cmd = [JAVA, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Xshare:auto", "-Djava.net.preferIPv4Stack=true",
               "-Dzookeeper.admin.enableServer=false",
               "-Dznode.container.checkIntervalMs=1000",
               "-Dzookeeper.snapCount=100000",
               # warnings and errors to the node's log (why a node quit)
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-cp", ":".join(JARS + [j for j in LOGGER_JARS if os.path.exists(j)]),
               "org.apache.zookeeper.server.quorum.QuorumPeerMain", self.cfgs[i]]
        uid = self.uids[i]
        who = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
        log = open(self.logs[i], "ab")
        env = dict(os.environ, HOME=os.path.dirname(self.cfgs[i]))
        self.procs[i] = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         env=env, cwd=os.path.dirname(self.cfgs[i]), **who)
        log.close()

    def log_tail(self, i, n=2000):
        try:
            with open(self.logs[i], "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def serving(self, i):
        return zk_mode(self.ports[i]) in ("leader", "follower") and zk_session(self.ports[i])

    def start(self, timeout=90.0):
        """Start every node; return once all serve clients and one leads.
        A node that quits before that (a port taken between the pick and
        its bind) gets one more try, every node on fresh ports; the first
        try's log tails are printed."""
        if not available():
            raise harness.Fail("zookeeper: %s or %s missing" % (JAVA, " ".join(JARS)))
        why = self._try_start(timeout)
        if why is None:
            return self
        sys.stderr.write("zookeeper ensemble: %s; starting again on fresh ports\n" % why)
        self._configure()
        why = self._try_start(timeout)
        if why is None:
            return self
        raise harness.Fail("the ZooKeeper ensemble did not form: %s" % why)

    def _try_start(self, timeout):
        """None once every node serves and one leads; else stop them all
        and return why not (exit codes, log tails)."""
        for i in range(self.size):
            self._spawn(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.serving(i) for i in range(self.size)) and self.leader() is not None:
                return None
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        codes = ["node %d: %s" % (i + 1, "running" if p.poll() is None else "exit %d" % p.returncode)
                 for i, p in enumerate(self.procs)]
        tails = "\n".join("node %d: %s" % (i + 1, self.log_tail(i, 1500)) for i in range(self.size))
        self.stop()
        return "%s\n%s" % (", ".join(codes), tails)

    def modes(self):
        return [zk_mode(p) for p in self.ports]

    def leader(self):
        """The index of the node that leads, or None."""
        for i, m in enumerate(self.modes()):
            if m == "leader":
                return i
        return None

    def node_of(self, pid):
        """The indexes of the nodes that process pid has a connection to."""
        peers = set(tcp_peers(pid))
        return [i for i, p in enumerate(self.ports) if p in peers]

    def pause(self, i):
        self.procs[i].send_signal(signal.SIGSTOP)
        harness.wait_stopped(self.procs[i].pid)

    def resume(self, i):
        if self.procs[i] is not None and self.procs[i].poll() is None:
            self.procs[i].send_signal(signal.SIGCONT)

    def kill9(self, i):
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def restart(self, i, timeout=60.0):
        """Start node i again (same ports and data dir) after kill9(i);
        whether it serves again within timeout."""
        self._spawn(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.serving(i):
                return True
            if self.procs[i].poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def isolate(self, i):
        """Cut node i off from the other nodes and from clients: its
        client, quorum and election ports DROP every tcp packet, and so
        does everything it sends (a uid of its own), from any port, so its
        connections out to the others stall too: a real partition, the
        process runs on. heal(i) ends it. Raises harness.Skip when
        iptables cannot be used here."""
        import netfault

        ok, why = netfault.available()
        if not ok:
            raise harness.Skip(why)
        if self.uids[i] is None:
            raise harness.Skip("not root: the node cannot run under a uid of its own")
        if self.blocks[i] is None:
            self.blocks[i] = netfault.PortBlock([self.ports[i]] + list(self.quorum[i]), uids=[self.uids[i]])
        self.blocks[i].on()

    def heal(self, i):
        """End isolate(i) (no-op if node i is not isolated)."""
        if self.blocks[i] is not None:
            self.blocks[i].close()
            self.blocks[i] = None

    def stop(self):
        for i in range(len(self.blocks)):
            self.heal(i)
        for i, p in enumerate(self.procs):
            if p is None or p.poll() is not None:
                continue
            self.resume(i)
            p.terminate()
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---- raw requests with auth: for the ACL tests (tests/e2e/test_store_auth.py)

ZNOAUTH = -102
ZNONODE = -101


def _ustr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">i", len(b)) + b


def _take_str(body, off):
    n = struct.unpack(">i", body[off:off + 4])[0]
    if n < 0:
        return None, off + 4
    return body[off + 4:off + 4 + n], off + 4 + n


def _zk_reply(s, xid):
    """The body of the reply to xid (notifications and pings skipped)."""
    while True:
        n = struct.unpack(">i", _recv_exact(s, 4))[0]
        body = _recv_exact(s, n)
        if struct.unpack(">i", body[:4])[0] == xid:
            return body


def zk_ops(port, ops, auth=None, timeout=2.0):
    """Run ops over one fresh session, after digest auth "user:password"
    when auth is given; a list with one (err, value) per op. ops: ("get",
    path) -> data bytes; ("set", path, data) and ("delete", path) -> None;
    ("acl", path) -> [(perms, scheme, id)]; ("children", path) -> [names].
    Versions are -1 (any). Speaks the wire protocol directly, as
    zk_children does."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        req = struct.pack(">iqiqi16s", 0, 0, 4000, 0, 16, b"\0" * 16)
        s.sendall(struct.pack(">i", len(req)) + req)
        n = struct.unpack(">i", _recv_exact(s, 4))[0]
        _recv_exact(s, n)
        if auth is not None:
            req = struct.pack(">iii", -4, 100, 0) + _ustr("digest") + _ustr(auth)
            s.sendall(struct.pack(">i", len(req)) + req)
            err = struct.unpack(">i", _zk_reply(s, -4)[12:16])[0]
            if err != 0:
                raise OSError("zookeeper: digest auth refused: %d" % err)
        out = []
        for xid, op in enumerate(ops, 1):
            kind, path = op[0], op[1]
            if kind == "get":
                req = struct.pack(">ii", xid, 4) + _ustr(path) + b"\0"
            elif kind == "set":
                req = struct.pack(">ii", xid, 5) + _ustr(path) + _ustr(op[2]) + struct.pack(">i", -1)
            elif kind == "delete":
                req = struct.pack(">ii", xid, 2) + _ustr(path) + struct.pack(">i", -1)
            elif kind == "acl":
                req = struct.pack(">ii", xid, 6) + _ustr(path)
            elif kind == "children":
                req = struct.pack(">ii", xid, 8) + _ustr(path) + b"\0"
            else:
                raise ValueError("unknown op %r" % (kind,))
            s.sendall(struct.pack(">i", len(req)) + req)
            body = _zk_reply(s, xid)
            err = struct.unpack(">i", body[12:16])[0]
            value = None
            if err == 0 and kind == "get":
                value = _take_str(body, 16)[0]
            elif err == 0 and kind in ("acl", "children"):
                count, off, value = struct.unpack(">i", body[16:20])[0], 20, []
                for _ in range(count):
                    if kind == "children":
                        name, off = _take_str(body, off)
                        value.append(name.decode())
                        continue
                    perms = struct.unpack(">i", body[off:off + 4])[0]
                    scheme, off = _take_str(body, off + 4)
                    ident, off = _take_str(body, off)
                    value.append((perms, scheme.decode(), ident.decode()))
            out.append((err, value))
        req = struct.pack(">ii", len(ops) + 1, -11)  # closeSession
        s.sendall(struct.pack(">i", len(req)) + req)
        return out

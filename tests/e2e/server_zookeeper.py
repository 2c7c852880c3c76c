"""tests/e2e/server_zookeeper.py - a real standalone ZooKeeper (Debian's
zookeeper 3.8 package) for the end-to-end suite: loopback only, a free
port, dataDir in the run's temp dir, admin server off, a short tickTime (so
sessions expire within seconds) and a container reaper that runs every
second. restart() reuses the port and the data dir, so locks and fences
survive a kill -9.

The URL asks for 4 s sessions: a killed lockd's waiters leave the queue
soon after.

The JVM starts with fast-start flags (client compiler only, serial GC, a
small heap): right for the suite, whose ZooKeeper lives for seconds, but
they cap ZooKeeper's own throughput. make(tmpdir, jvm="server"), or
LOCKD_ZK_JVM=server in the environment, starts it as a server would run
(both JIT tiers, a parallel collector, a fixed 1 GiB heap): tests/bench/run
does so."""

import os
import socket
import struct
import subprocess
import time

import harness

JAVA = "/usr/bin/java"
JARS = ["/usr/share/java/zookeeper.jar"]
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
            f.write("tickTime=500\n"
                    "minSessionTimeout=1000\n"
                    "maxSessionTimeout=20000\n"
                    "dataDir=%s\n"
                    "clientPort=%d\n"
                    "clientPortAddress=127.0.0.1\n"
                    "admin.enableServer=false\n"
                    "4lw.commands.whitelist=ruok,srvr,mntr,cons\n"
                    "maxClientCnxns=0\n"
                    "autopurge.purgeInterval=0\n" % (self.data, self.port))

    def start(self):
        if not available():
            raise harness.Fail("zookeeper: %s or %s missing (apt-get install zookeeper)"
                               % (JAVA, " ".join(JARS)))
        cmd = [JAVA] + JVM_FLAGS[self.jvm] + [
               "-Xshare:auto", "-Djava.net.preferIPv4Stack=true",
               "-Dzookeeper.admin.enableServer=false",
               "-Dznode.container.checkIntervalMs=1000",
               "-Dzookeeper.snapCount=100000",
               "-cp", ":".join(JARS), MAIN, self.cfg]
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

"""tests/e2e/netns.py - a network namespace with a veth pair, for one lockd
instance that the chaos suite cuts off from its store (a helper module: it
registers no scenarios).

    ns = Namespace().open()          # lockd-chaos-<pid>-<n>, veth lc<pid>x<n>h/n
    ld = harness.Lockd(url, wrapper=ns.wrapper(), host=ns.inner)
    srv = store_on(backend, tmpdir, ns.outer)   # a store on the host end
    ns.partition(ns.outer, srv.port)  # iptables DROP in the namespace, both ways
    ns.heal()
    ns.close()                       # also at exit

Addresses: a /30 out of 10.200.0.0-10.254.255.252 that no address or
route of the host overlaps; the host end (outer) is .1, the namespace's
(inner) .2. Needs root, ip and iptables: available() says why not.

store_on() starts a Redis, MariaDB or ZooKeeper from server_<name>.py that
also listens on the given address (Redis and MariaDB keep 127.0.0.1 too;
ZooKeeper listens on the given address only, since it has one client
address)."""

import atexit
import ipaddress
import os
import random
import shutil
import socket
import subprocess
import time

import harness

OPEN = []  # namespaces not closed yet, closed at exit
SEQ = [0]


def _run(cmd, timeout=10):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).strip()


def available():
    """(True, "") if a namespace with a veth pair and iptables can be made
    here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "not root: network namespaces need CAP_NET_ADMIN"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return False, "no %s command" % tool
    return True, ""


def _used_networks():
    nets = []
    for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        rc, out = _run(cmd)
        for word in out.split():
            try:
                nets.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                continue
    return nets


def _free_net():
    used = _used_networks()
    rnd = random.Random()
    for _ in range(200):
        base = ipaddress.ip_address("10.%d.%d.%d" % (rnd.randint(200, 254), rnd.randint(0, 255),
                                                        rnd.randrange(0, 256, 4)))
        net = ipaddress.ip_network("%s/30" % base)
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise harness.Fail("netns: no free /30 in 10.200.0.0/8-ish after 200 tries")


class Namespace:
    """One namespace, its veth pair and the partition rules in it."""

    def __init__(self):
        SEQ[0] += 1
        n = SEQ[0]
        self.name = "lockd-chaos-%d-%d" % (os.getpid(), n)
        # interface names: at most 15 bytes
        self.veth_out = "lc%dx%dh" % (os.getpid() % 10000000, n)
        self.veth_in = "lc%dx%dn" % (os.getpid() % 10000000, n)
        self.outer = self.inner = None
        self.rules = []
        self.made = False

    def _must(self, cmd):
        rc, out = _run(cmd)
        if rc != 0:
            raise harness.Fail("netns: %s: %s" % (" ".join(cmd), out))

    def open(self):
        """Make the namespace, the veth pair and its addresses. Skip if this
        machine does not let us (not root, no ip, a kernel without netns)."""
        ok, why = available()
        if not ok:
            raise harness.Skip(why)
        rc, out = _run(["ip", "netns", "add", self.name])
        if rc != 0:
            raise harness.Skip("ip netns add failed: %s" % out)
        self.made = True
        OPEN.append(self)
        try:
            net = _free_net()
            hosts = list(net.hosts())
            self.outer, self.inner = str(hosts[0]), str(hosts[1])
            self._must(["ip", "link", "add", self.veth_out, "type", "veth", "peer", "name", self.veth_in])
            self._must(["ip", "link", "set", self.veth_in, "netns", self.name])
            self._must(["ip", "addr", "add", "%s/30" % self.outer, "dev", self.veth_out])
            self._must(["ip", "link", "set", self.veth_out, "up"])
            ex = ["ip", "netns", "exec", self.name]
            self._must(ex + ["ip", "addr", "add", "%s/30" % self.inner, "dev", self.veth_in])
            self._must(ex + ["ip", "link", "set", self.veth_in, "up"])
            self._must(ex + ["ip", "link", "set", "lo", "up"])
            rc, out = _run(ex + ["iptables", "-w", "-L", "OUTPUT", "-n"])
            if rc != 0:
                raise harness.Skip("iptables does not work in a namespace here: %s" % out)
        except BaseException:
            self.close()
            raise
        return self

    def wrapper(self):
        """The command prefix that runs a program inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def partition(self, addr, port):
        """DROP tcp between the namespace and addr:port, both directions."""
        rules = [["OUTPUT", "-p", "tcp", "-d", addr, "--dport", str(port), "-j", "DROP"],
                 ["INPUT", "-p", "tcp", "-s", addr, "--sport", str(port), "-j", "DROP"]]
        for r in rules:
            self._must(self.wrapper() + ["iptables", "-w", "-I"] + r)
            self.rules.append(r)

    def heal(self):
        """Remove every partition rule."""
        while self.rules:
            r = self.rules.pop()
            self._must(self.wrapper() + ["iptables", "-w", "-D"] + r)

    def close(self):
        """Remove the veth pair and the namespace (its rules go with it).
        Safe to call twice."""
        if not self.made:
            return
        self.made = False
        self.rules = []
        _run(["ip", "link", "del", self.veth_out])
        _run(["ip", "netns", "del", self.name])
        if self in OPEN:
            OPEN.remove(self)


@atexit.register
def _close_all():
    for ns in list(OPEN):
        ns.close()


# ---- a store that also listens on the host end of the veth ----


def _zk_ready(addr, port, timeout=1.0):
    try:
        with socket.create_connection((addr, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


def store_on(backend, tmpdir, addr, reach=()):
    """A started store of backend ("redis", "mysql", "zookeeper") from its
    server_<name>.py, data under tmpdir, that listens on addr; .url is
    lockd's URL through addr. reach: the client addresses a MariaDB user
    must be allowed from (the namespace's, and addr itself for the host's
    instances). The caller stops it."""
    if backend == "redis":
        import server_redis
        srv = server_redis.RedisServer(tmpdir, also_bind=addr)
        srv.start()
        srv.url = "redis://%s:%d" % (addr, srv.port)
        return srv
    if backend == "mysql":
        import server_mysql
        srv = server_mysql.MysqlServer(tmpdir, also_bind=addr)
        srv.start()
        for peer in sorted(set(reach) | {addr}):
            srv.sql("CREATE USER IF NOT EXISTS 'lockd'@'%s' IDENTIFIED BY '%s'; GRANT ALL ON lockd.* TO 'lockd'@'%s'"
                    % (peer, server_mysql.PASSWORD, peer), database=None)
        srv.url = "mysql://lockd:%s@%s:%d/lockd" % (server_mysql.PASSWORD, addr, srv.port)
        return srv
    if backend == "zookeeper":
        return _zk_on(tmpdir, addr)
    raise harness.Skip("no partition set-up for backend %s" % backend)


def _zk_on(tmpdir, addr):
    """ZooKeeper has one client address: its zoo.cfg gets addr, and its
    start() (which polls 127.0.0.1) is replaced by one that polls addr."""
    import server_zookeeper as zk
    if not zk.available():
        raise harness.Skip("no java or zookeeper.jar")
    srv = zk.ZooKeeperServer(tmpdir)
    with open(srv.cfg) as f:
        cfg = f.read().replace("clientPortAddress=127.0.0.1", "clientPortAddress=" + addr)
    with open(srv.cfg, "w") as f:
        f.write(cfg)
    cmd = [zk.JAVA] + zk.JVM_FLAGS[srv.jvm] + [
        "-Xshare:auto", "-Djava.net.preferIPv4Stack=true", "-Dzookeeper.admin.enableServer=false",
        "-Dznode.container.checkIntervalMs=1000", "-Dzookeeper.snapCount=100000",
        "-cp", ":".join(zk.JARS), zk.MAIN, srv.cfg]
    log = open(srv.log_path, "ab")
    srv.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and srv.proc.poll() is None:
        if _zk_ready(addr, srv.port):
            srv.url = "zookeeper://%s:%d?session_timeout_ms=%d" % (addr, srv.port, zk.SESSION_MS)
            return srv
        time.sleep(0.1)
    srv.kill9()
    raise harness.Fail("zookeeper did not answer on %s:%d" % (addr, srv.port))

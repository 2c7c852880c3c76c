"""tests/e2e/server_cluster.py - a real Redis Cluster for the end-to-end and
chaos suites: `masters` masters with `replicas` replicas each, every node a
redis-server on a free loopback port with its data (append-only, fsynced)
in the run's temp dir, built over raw RESP (CLUSTER ADDSLOTSRANGE, MEET,
REPLICATE; no redis-cli). cluster-node-timeout is short (1000 ms) so a
killed master's replica takes over within seconds.

    c = RedisCluster(tmpdir).start()
    c.url("timeout_ms=500")  # redis+cluster://127.0.0.1:p1,...[?opts]
    c.masters(); c.master_of_slot(slot); c.failover(i); c.migrate_slot(s, dst)
    c.stop()
"""

import os
import signal
import subprocess
import time

import harness
from server_redis import REDIS_SERVER, redis_command, redis_ping

SLOTS = 16384
NODE_TIMEOUT_MS = 1000


def crc16(data):
    """CRC16-CCITT (XMODEM), as Redis Cluster hashes keys."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def hash_tag(key):
    """Redis's hash tag rule: the bytes between the first '{' and the first
    '}' after it when not empty, else the whole key."""
    if isinstance(key, str):
        key = key.encode()
    i = key.find(b"{")
    if i >= 0:
        j = key.find(b"}", i + 1)
        if j > i + 1:
            return key[i + 1:j]
    return key


def keyslot(key):
    return crc16(hash_tag(key)) % SLOTS


def lock_tag(key):
    """lockd's tag for a lock key on a cluster: 16 hex of FNV-1a 64 of the
    key's hash tag (every Redis key of the lock carries "{" tag "}")."""
    h = 14695981039346656037
    for b in hash_tag(key):
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def lock_slot(key):
    """The slot lockd puts every Redis key of lock `key` in."""
    return keyslot(lock_tag(key))


class RedisCluster:
    name = "redis-cluster"

    def __init__(self, tmpdir, masters=3, replicas=1):
        self.tmpdir = tmpdir
        self.nmasters = masters
        self.nreplicas = replicas
        n = masters * (1 + replicas)
        self.ports = [harness.free_port() for _ in range(n)]
        # the bus on a port of its own (default: port + 10000, which may be
        # taken or past 65535)
        self.bus_ports = [harness.free_port() for _ in range(n)]
        self.dirs = [os.path.join(tmpdir, "cluster-%d" % p) for p in self.ports]
        self.procs = [None] * n
        self.ids = [None] * n
        self._last_meet = None

    # ---- nodes ----

    def _spawn(self, i):
        os.makedirs(self.dirs[i], exist_ok=True)
        cmd = [REDIS_SERVER, "--port", str(self.ports[i]), "--bind", "127.0.0.1",
               "--dir", self.dirs[i], "--daemonize", "no", "--save", "",
               "--appendonly", "yes", "--appendfsync", "always",
               "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
               "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
               "--cluster-port", str(self.bus_ports[i]),
               # a replica takes over however long ago it last heard its
               # master, and syncs at once (the default waits 5 s)
               "--cluster-replica-validity-factor", "0",
               "--repl-diskless-sync-delay", "0",
               "--logfile", os.path.join(self.dirs[i], "redis.log")]
        self.procs[i] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)

    def _wait_ping(self, i, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if redis_ping(self.ports[i]):
                return
            if self.procs[i].poll() is not None:
                break
            time.sleep(0.05)
        raise harness.Fail("cluster node %d (port %d) did not start: %s"
                           % (i, self.ports[i], self._log_tail(i)))

    def _log_tail(self, i):
        try:
            with open(os.path.join(self.dirs[i], "redis.log"), "rb") as f:
                return f.read()[-1500:].decode("utf-8", "replace")
        except OSError:
            return ""

    def cmd(self, i, *args, timeout=2.0):
        """One command on node i; an error reply raises harness.Fail."""
        r = redis_command(self.ports[i], *args, timeout=timeout)
        if isinstance(r, RuntimeError):
            raise harness.Fail("node %d %s: %s" % (i, " ".join(map(str, args[:3])), r))
        return r

    def alive(self, i):
        return self.procs[i] is not None and self.procs[i].poll() is None

    def _info(self, i):
        text = self.cmd(i, "CLUSTER", "INFO").decode()
        return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)

    def _wait(self, what, fn, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = fn()
                if last:
                    return last
            except (OSError, harness.Fail) as e:
                last = e
            time.sleep(0.05)
        raise harness.Fail("cluster: %s not within %.0f s (last: %r)" % (what, timeout, last))

    # ---- life ----

    def start(self):
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        n = len(self.ports)
        for i in range(n):
            self._spawn(i)
        for i in range(n):
            self._wait_ping(i)
            self.ids[i] = self.cmd(i, "CLUSTER", "MYID").decode()
        per = SLOTS // self.nmasters
        for m in range(self.nmasters):
            lo = m * per
            hi = SLOTS - 1 if m == self.nmasters - 1 else lo + per - 1
            self.cmd(m, "CLUSTER", "ADDSLOTSRANGE", str(lo), str(hi))
        self._wait("every node knowing every other", self._met, 40)
        for r in range(self.nmasters, n):
            master = (r - self.nmasters) % self.nmasters
            self._wait("node %d replicating %d" % (r, master),
                       lambda r=r, master=master: self.cmd(
                           r, "CLUSTER", "REPLICATE", self.ids[master]) == "OK", 20)
        self.wait_ok(30)
        self._wait("every replica in sync", lambda: all(
            b"master_link_status:up" in self.cmd(r, "INFO", "replication")
            for r in range(self.nmasters, n)), 30)
        return self

    def _met(self):
        """True once every node knows every other (no handshake pending).
        Until then each node that some node does not know MEETs node 0
        again, at most once a second: a handshake that did not finish
        within the node timeout (a loaded machine) is dropped by Redis and
        never retried by gossip."""
        n = len(self.ports)
        missing = set()
        for i in range(n):
            text = self.cmd(i, "CLUSTER", "NODES").decode()
            known = {line.split(" ", 1)[0] for line in text.splitlines()
                     if line and "handshake" not in line}
            missing |= {j for j in range(n) if self.ids[j] not in known}
        if not missing:
            return True
        now = time.monotonic()
        if self._last_meet is None or now - self._last_meet >= 1.0:
            self._last_meet = now
            for j in sorted(missing):
                self.cmd(j or 1, "CLUSTER", "MEET", "127.0.0.1", str(self.ports[0]),
                         str(self.bus_ports[0]))
        return False

    def wait_ok(self, timeout=30.0):
        """Every live node says cluster_state:ok and every slot is served."""
        def ok():
            for i in range(len(self.ports)):
                if not self.alive(i):
                    continue
                info = self._info(i)
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS):
                    return False
            return True
        self._wait("cluster_state:ok", ok, timeout)

    def stop(self):
        for i, p in enumerate(self.procs):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()

    def url(self, opts=""):
        hosts = ",".join("127.0.0.1:%d" % p for p in self.ports[:self.nmasters])
        return "redis+cluster://%s%s" % (hosts, "?" + opts if opts else "")

    def kill9(self, i):
        if self.alive(i):
            self.procs[i].kill()
            self.procs[i].wait()

    def restart(self, i):
        """Start node i again on its port and data (it rejoins as it was,
        or as a replica of the master that took over)."""
        self._spawn(i)
        self._wait_ping(i)

    def rejoin(self, i, timeout=30.0):
        """Restart node i after a failover took its slots and wait until it
        replicates the master that took over, in sync (min_replicas can be
        met again)."""
        self.restart(i)
        self._wait("node %d back as an in-sync replica" % i, lambda: (
            lambda info: b"role:slave" in info and b"master_link_status:up" in info)(
                self.cmd(i, "INFO", "replication")), timeout)
        self.wait_ok(timeout)

    def pause(self, i):
        self.procs[i].send_signal(signal.SIGSTOP)
        harness.wait_stopped(self.procs[i].pid)

    def resume(self, i):
        self.procs[i].send_signal(signal.SIGCONT)

    # ---- topology ----

    def _any_alive(self):
        for i in range(len(self.ports)):
            if self.alive(i):
                return i
        raise harness.Fail("cluster: no node alive")

    def masters(self):
        """Indexes of the live nodes whose ROLE is master and that serve
        slots."""
        out = []
        for i in range(len(self.ports)):
            if not self.alive(i):
                continue
            try:
                role = redis_command(self.ports[i], "ROLE", timeout=1.0)
            except OSError:
                continue
            if isinstance(role, list) and role[0] == b"master":
                out.append(i)
        return out

    def master_of_slot(self, slot):
        """The index of the node serving slot (CLUSTER SLOTS of a live
        node), or None."""
        slots = self.cmd(self._any_alive(), "CLUSTER", "SLOTS")
        for lo, hi, master, *_ in slots:
            if lo <= slot <= hi:
                port = master[1]
                return self.ports.index(port) if port in self.ports else None
        return None

    def replicas_of(self, i):
        """The indexes of the nodes that replicate master i now."""
        text = self.cmd(i, "INFO", "replication").decode()
        ports = [int(f.split("=", 1)[1]) for line in text.split("\r\n") if line.startswith("slave")
                 for f in line.split(":", 1)[1].split(",") if f.startswith("port=")]
        return [j for j, p in enumerate(self.ports) if p in ports]

    def failover(self, i, timeout=30.0, after_kill=None):
        """kill -9 master i (then after_kill(), e.g. to resume a paused
        replica); wait until one of its replicas is master of its slots and
        the cluster is ok again; the new master's index."""
        slots = [lo for lo, hi, m, *_ in self.cmd(i, "CLUSTER", "SLOTS")
                 if m[1] == self.ports[i]]
        self.kill9(i)
        if after_kill is not None:
            after_kill()

        def promoted():
            j = self.master_of_slot(slots[0])
            return j if j is not None and j != i and self.alive(j) else None
        j = self._wait("a replica of node %d promoted" % i, promoted, timeout)
        self.wait_ok(timeout)
        return j

    def migrate_slot(self, slot, dst, between=None):
        """Move slot to node dst the way redis-cli --cluster reshard does:
        IMPORTING on dst, MIGRATING on the source, MIGRATE of every key,
        then SETSLOT NODE on every master. between(): called once the slot
        is MIGRATING/IMPORTING and before its keys move (to run requests
        meanwhile)."""
        src = self.master_of_slot(slot)
        if src is None or src == dst:
            raise harness.Fail("migrate_slot: slot %d is on %r" % (slot, src))
        s = str(slot)
        self.cmd(dst, "CLUSTER", "SETSLOT", s, "IMPORTING", self.ids[src])
        self.cmd(src, "CLUSTER", "SETSLOT", s, "MIGRATING", self.ids[dst])
        if between is not None:
            between()
        while True:
            keys = self.cmd(src, "CLUSTER", "GETKEYSINSLOT", s, "100")
            if not keys:
                break
            self.cmd(src, "MIGRATE", "127.0.0.1", str(self.ports[dst]), "", "0", "5000",
                     "KEYS", *keys, timeout=10.0)
        for m in [dst, src] + [k for k in self.masters() if k not in (src, dst)]:
            self.cmd(m, "CLUSTER", "SETSLOT", s, "NODE", self.ids[dst])
        return src

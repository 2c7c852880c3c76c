"""tests/e2e/server_sentinel.py - a Redis Sentinel set on loopback for the
end-to-end and chaos suites: one primary, `replicas` replicas and
`sentinels` Sentinels (redis-server --sentinel), all on free ports, data
and configs in the run's temp dir. Sentinels decide fast
(down-after-milliseconds 1000), so a failover takes a few seconds.

    s = SentinelSet(tmpdir).start()
    ld = Lockd(s.url("min_replicas=1"))
    old, new = s.failover()
    s.stop()
"""

import os
import signal
import subprocess
import time

import harness
from server_redis import REDIS_SERVER, redis_command, redis_ping

DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000


def _cmd(port, *args, timeout=1.0):
    """redis_command, or the OSError as a value: nodes come and go here."""
    try:
        return redis_command(port, *args, timeout=timeout)
    except (OSError, harness.Fail) as e:
        return e


def _pairs(reply):
    """A flat [k1, v1, k2, v2, ...] reply into a dict of str."""
    if not isinstance(reply, list):
        return {}
    it = [x.decode() if isinstance(x, bytes) else x for x in reply]
    return dict(zip(it[0::2], it[1::2]))


class SentinelSet:
    def __init__(self, tmpdir, replicas=2, sentinels=3, master_name="lockd"):
        self.dir = os.path.join(tmpdir, "sentinel-%d" % harness.free_port())
        os.makedirs(self.dir, exist_ok=True)
        self.master_name = master_name
        self.nreplicas = replicas
        self.ports = [harness.free_port() for _ in range(1 + replicas)]
        self.sentinel_ports = [harness.free_port() for _ in range(sentinels)]
        self.nodes = [None] * len(self.ports)  # Popen per node
        self.sentinels = [None] * sentinels
        self.paused = set()

    # ---- starting ----

    def _node_cmd(self, i, replicaof):
        d = os.path.join(self.dir, "node%d" % i)
        os.makedirs(d, exist_ok=True)
        cmd = [REDIS_SERVER, "--port", str(self.ports[i]), "--bind", "127.0.0.1",
               "--dir", d, "--daemonize", "no", "--save", "", "--appendonly", "no",
               "--logfile", os.path.join(d, "redis.log"),
               # a replica syncs at once, not after the default 5 s wait
               # for more replicas to share the transfer
               "--repl-diskless-sync-delay", "0"]
        if replicaof is not None:
            cmd += ["--replicaof", "127.0.0.1", str(self.ports[replicaof])]
        return cmd

    def _start_node(self, i, replicaof):
        self.nodes[i] = subprocess.Popen(self._node_cmd(i, replicaof), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
        self._until(lambda: redis_ping(self.ports[i]), 10, "node %d answers PING" % i)

    def _start_sentinel(self, j):
        d = os.path.join(self.dir, "sentinel%d" % j)
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s\n"
                    "sentinel monitor %s 127.0.0.1 %d 2\n"
                    "sentinel down-after-milliseconds %s %d\n"
                    "sentinel failover-timeout %s %d\n"
                    "sentinel parallel-syncs %s 1\n"
                    % (self.sentinel_ports[j], d, os.path.join(d, "sentinel.log"),
                       self.master_name, self.ports[0], self.master_name, DOWN_AFTER_MS,
                       self.master_name, FAILOVER_TIMEOUT_MS, self.master_name))
        self.sentinels[j] = subprocess.Popen([REDIS_SERVER, conf, "--sentinel"],
                                             stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL)

    def start(self):
        try:
            self._start_node(0, None)
            for i in range(1, len(self.ports)):
                self._start_node(i, 0)
            for j in range(len(self.sentinels)):
                self._start_sentinel(j)
            # Sentinels learn replicas from the primary's INFO, every 10 s
            self._until(self._settled, 60, "the Sentinels know every replica and each other")
        except BaseException:
            self.stop()
            raise
        return self

    def _settled(self):
        for i in range(1, len(self.ports)):
            info = _cmd(self.ports[i], "INFO", "replication")
            if not isinstance(info, bytes) or b"master_link_status:up" not in info:
                return False
        for p in self.sentinel_ports:
            m = _pairs(_cmd(p, "SENTINEL", "MASTER", self.master_name))
            if (m.get("num-slaves") != str(self.nreplicas)
                    or m.get("num-other-sentinels") != str(len(self.sentinel_ports) - 1)):
                return False
        return True

    def _until(self, cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.05)
        raise harness.Fail("sentinel set: no %s within %ds: %s" % (what, timeout, self.log_tail()))

    def log_tail(self, n=1500):
        out = []
        for root, _, files in os.walk(self.dir):
            for name in files:
                if name.endswith(".log"):
                    with open(os.path.join(root, name), "rb") as f:
                        out.append("%s: %s" % (os.path.basename(root),
                                               f.read()[-n:].decode("utf-8", "replace")))
        return "\n".join(out)

    # ---- asking ----

    def url(self, opts=""):
        hosts = ",".join("127.0.0.1:%d" % p for p in self.sentinel_ports)
        return "redis+sentinel://%s/%s%s" % (hosts, self.master_name, "?" + opts if opts else "")

    def named(self):
        """The node index a Sentinel names as the primary (first to answer)."""
        for p in self.sentinel_ports:
            r = _cmd(p, "SENTINEL", "get-master-addr-by-name", self.master_name)
            if isinstance(r, list) and len(r) == 2 and int(r[1]) in self.ports:
                return self.ports.index(int(r[1]))
        return None

    def role(self, i):
        r = _cmd(self.ports[i], "ROLE")
        return r[0].decode() if isinstance(r, list) and r else None

    def primary(self):
        """The node the Sentinels name and that says ROLE master, or None."""
        i = self.named()
        if i is None or i in self.paused or self.role(i) != "master":
            return None
        return i

    def command(self, i, *args):
        return redis_command(self.ports[i], *args)

    # ---- faults ----

    def failover(self, timeout=30):
        """SENTINEL FAILOVER; wait for a new primary that says ROLE master."""
        old = self.primary()
        deadline = time.monotonic() + timeout
        asked = False
        while time.monotonic() < deadline:
            if not asked:
                r = _cmd(self.sentinel_ports[0], "SENTINEL", "FAILOVER", self.master_name)
                asked = r == "OK"
            new = self.primary()
            if asked and new is not None and new != old:
                return old, new
            time.sleep(0.05)
        raise harness.Fail("sentinel set: no failover within %ds: %s" % (timeout, self.log_tail()))

    def wait_primary(self, other_than=None, timeout=30):
        """Wait until the Sentinels name a primary (not other_than) that says master."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.primary()
            if p is not None and p != other_than:
                return p
            time.sleep(0.05)
        raise harness.Fail("sentinel set: no primary within %ds: %s" % (timeout, self.log_tail()))

    def kill9(self, i):
        p = self.nodes[i]
        if p is not None and p.poll() is None:
            if i in self.paused:
                p.send_signal(signal.SIGCONT)
                self.paused.discard(i)
            p.kill()
            p.wait()

    def restart(self, i):
        """Start node i again; as a replica of the current primary if there is another."""
        self.kill9(i)
        cur = self.named()
        self._start_node(i, cur if cur is not None and cur != i else None)

    def pause(self, i):
        self.nodes[i].send_signal(signal.SIGSTOP)
        harness.wait_stopped(self.nodes[i].pid)
        self.paused.add(i)

    def resume(self, i):
        if self.nodes[i] is not None and self.nodes[i].poll() is None:
            self.nodes[i].send_signal(signal.SIGCONT)
        self.paused.discard(i)

    def replicas(self):
        p = self.named()
        return [i for i in range(len(self.ports)) if i != p]

    def pause_replicas(self):
        for i in self.replicas():
            self.pause(i)

    def resume_replicas(self):
        for i in list(self.paused):
            self.resume(i)

    def stop(self):
        for p in self.nodes + self.sentinels:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
        self.paused.clear()

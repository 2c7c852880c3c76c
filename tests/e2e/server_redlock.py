"""tests/e2e/server_redlock.py - the store of the redlock:// backend for the
end-to-end suite: n independent redis-servers (no replication between
them), each on loopback on a free port with its own data dir in the run's
temp dir.

RedlockNodes(tmpdir, n=3, fsync=True, trust=True):
  - fsync: each node keeps an append-only file fsynced on every write (a
    kill -9 and restart keeps locks and fences, as server_redis.py's one
    server does); without it no persistence at all (--appendonly no
    --save ""), so a restart is a restart with no data;
  - trust: the URL carries trust_fsync=1, so a node that restarted with an
    fsync-always AOF votes at once instead of sitting out the max TTL.
  - url: redlock://127.0.0.1:p1,...,127.0.0.1:pn[?trust_fsync=1].
  - The whole-store methods (start, stop, kill9, pause, resume, restart)
    act on every node, so the generic suite's faults hit the store as a
    whole; restart() starts again the nodes that are not running.
  - node(i): that node's server (RedlockNode: kill9, pause, resume,
    restart, restart_empty, command).
  - commands(*args): the command run on every node, the list of replies
    (deliberately not named command(): that is one reply on redis, and
    the scenarios that read keys that way are redis-only).

make(tmpdir) = 3 nodes, fsync, trust: what the generic suite runs on."""

import os
import shutil
import signal

import harness
from server_redis import RedisServer


class RedlockNode(RedisServer):
    """One redis-server of the store, data in <tmpdir>/redis."""

    what = "redis-server (redlock node)"

    def __init__(self, tmpdir, fsync=True):
        super().__init__(tmpdir)
        self.fsync = fsync

    @property
    def addr(self):
        """host:port, as the URL and lockd's /metrics name it."""
        return "127.0.0.1:%d" % self.port

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def persist_args(self):
        if self.fsync:
            return super().persist_args()
        return ["--appendonly", "no"]

    def restart_empty(self):
        """kill -9 (if running) and start again on the same port with the
        data dir wiped: a node that lost its data across a restart."""
        self.kill9()
        for name in os.listdir(self.dir):
            p = os.path.join(self.dir, name)
            if p == self.log_path:
                continue
            if os.path.isdir(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        return self.start()


class _Procs:
    """The nodes' processes seen as one, for generic code that asks
    server.proc: poll() is None while every node runs."""

    def __init__(self, nodes):
        self.nodes = nodes

    def poll(self):
        for n in self.nodes:
            if n.proc is None:
                return -1
            rc = n.proc.poll()
            if rc is not None:
                return rc
        return None

    def send_signal(self, sig):
        for n in self.nodes:
            if n.alive():
                n.proc.send_signal(sig)

    def kill(self):
        for n in self.nodes:
            n.kill9()

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def wait(self, timeout=None):
        for n in self.nodes:
            if n.proc is not None:
                n.proc.wait(timeout)
        return self.poll()


class RedlockNodes(harness.Server):
    name = "redlock"

    def __init__(self, tmpdir, n=3, fsync=True, trust=True):
        super().__init__(tmpdir)
        self.fsync = fsync
        self.trust = trust
        self.nodes = [RedlockNode(os.path.join(tmpdir, "redlock-node%d" % i), fsync) for i in range(n)]
        for nd, port in zip(self.nodes, [harness.free_port() for _ in range(n)]):
            nd.port = port
        self.proc = _Procs(self.nodes)
        self.url = "redlock://" + ",".join(nd.addr for nd in self.nodes) + ("?trust_fsync=1" if trust else "")

    def __len__(self):
        return len(self.nodes)

    def node(self, i):
        return self.nodes[i]

    @property
    def addrs(self):
        return [nd.addr for nd in self.nodes]

    def start(self):
        """Start every node that is not running."""
        for nd in self.nodes:
            if not nd.alive():
                nd.start()
        return self

    def restart(self):
        return self.start()

    def stop(self):
        for nd in self.nodes:
            try:
                if nd.alive():
                    nd.resume()  # a stopped process does not act on SIGTERM
                nd.stop()
            except Exception:  # noqa: BLE001 - stop the others anyway
                nd.kill9()

    def kill9(self):
        for nd in self.nodes:
            nd.kill9()

    def pause(self):
        for nd in self.nodes:
            if nd.alive():
                nd.proc.send_signal(signal.SIGSTOP)  # all first, then wait
        for nd in self.nodes:
            if nd.alive():
                harness.wait_stopped(nd.proc.pid)

    def resume(self):
        for nd in self.nodes:
            if nd.alive():
                nd.resume()

    def commands(self, *args):
        """args run on every node: the list of replies (an exception in
        place of the reply of a node that did not answer)."""
        out = []
        for nd in self.nodes:
            try:
                out.append(nd.command(*args))
            except OSError as e:
                out.append(e)
        return out


def make(tmpdir):
    return RedlockNodes(tmpdir, n=3, fsync=True, trust=True)

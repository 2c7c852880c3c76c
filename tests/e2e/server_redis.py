"""tests/e2e/server_redis.py - a real redis-server for the end-to-end suite:
loopback only, a free port, data in the run's temp dir, append-only file
fsynced on every write (so a kill -9 and restart keeps locks and fences).
restart() reuses the port and the data dir."""

import os
import socket
import subprocess
import time

import harness

REDIS_SERVER = "/usr/bin/redis-server"


def redis_ping(port, timeout=0.5):
    """True if a Redis on port answers PING (raw RESP, no client library)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _read_reply(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise harness.Fail("redis: short reply %r" % line)
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise harness.Fail("redis: bad reply %r" % line)


def redis_command(port, *args, timeout=2.0):
    """One command (str or bytes args) on a fresh connection; the parsed
    reply (bytes for bulk strings, lists for arrays, RuntimeError for an
    error reply)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(out)
        with s.makefile("rb") as f:
            return _read_reply(f)


class RedisServer(harness.Server):
    name = "redis"
    what = "redis-server"  # what a failed start calls it

    def __init__(self, tmpdir, also_bind=None):
        """also_bind: one more address to listen on (a network namespace's
        veth end, for the partition faults), protected mode off then."""
        super().__init__(tmpdir)
        self.also_bind = also_bind
        self.port = harness.free_port()
        self.dir = os.path.join(tmpdir, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.log_path = os.path.join(self.dir, "redis.log")

    def persist_args(self):
        """How the data survives a restart: an append-only file fsynced
        on every write (RDB snapshots are off in any case)."""
        return ["--appendonly", "yes", "--appendfsync", "always"]

    def start(self):
        cmd = [REDIS_SERVER,
               "--port", str(self.port),
               "--bind", "127.0.0.1" + (" " + self.also_bind if self.also_bind else ""),
               # protected mode refuses clients off loopback without a password
               "--protected-mode", "no" if self.also_bind else "yes",
               "--dir", self.dir,
               "--daemonize", "no",
               "--save", ""] + self.persist_args() + [
               "--logfile", self.log_path]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if redis_ping(self.port):
                self.url = "redis://127.0.0.1:%d" % self.port
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = ""
        try:
            with open(self.log_path, "rb") as f:
                tail = f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            pass
        self.kill9()
        raise harness.Fail("%s did not answer on %d: %s" % (self.what, self.port, tail))

    def command(self, *args):
        return redis_command(self.port, *args)


def make(tmpdir):
    return RedisServer(tmpdir)

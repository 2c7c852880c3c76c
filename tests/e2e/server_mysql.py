"""tests/e2e/server_mysql.py - a real MariaDB (Debian's mariadb-server) for
the end-to-end suite: mariadb-install-db into the run's temp dir, mariadbd on
a free loopback port and a unix socket there, a `lockd` database and a
password user for lockd. restart() reuses the port and the data dir, so
locks and fences survive a kill -9 (InnoDB recovers them).

tls=(cert, key, ca): PEM paths (tests/e2e/certs.py) for the server's own
certificate, its key and the CA it trusts for client certificates; the
server then offers TLS (its users may REQUIRE SSL or X509)."""

import os
import subprocess
import time

import harness

INSTALL_DB = "/usr/bin/mariadb-install-db"
MARIADBD = "/usr/sbin/mariadbd"
CLIENT = "/usr/bin/mariadb"
PASSWORD = "lockd-e2e-pw"


class MysqlServer(harness.Server):
    name = "mysql"

    def __init__(self, tmpdir, also_bind=None, tls=None, subdir="mysql"):
        """also_bind: one more address to listen on (a network namespace's
        veth end, for the partition faults). tls: (cert, key, ca) PEM paths,
        or None for a server without TLS. subdir: its dir under tmpdir (a
        second server in one run needs its own)."""
        super().__init__(tmpdir)
        self.also_bind = also_bind
        self.tls = tls
        self.port = harness.free_port()
        self.dir = os.path.join(tmpdir, subdir)
        self.datadir = os.path.join(self.dir, "data")
        self.socket = os.path.join(self.dir, "sock")
        self.log_path = os.path.join(self.dir, "mariadbd.log")
        os.makedirs(self.dir, exist_ok=True)
        self.url = "mysql://lockd:%s@127.0.0.1:%d/lockd" % (PASSWORD, self.port)

    def _log_tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _install(self):
        p = subprocess.run([INSTALL_DB, "--no-defaults", "--datadir=" + self.datadir,
                            "--auth-root-authentication-method=normal", "--skip-test-db",
                            "--user=root", "--skip-name-resolve",
                            "--innodb-log-file-size=8M"],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise harness.Fail("mariadb-install-db failed: %s" % (p.stdout + p.stderr)[-2000:])

    def start(self):
        first = not os.path.isdir(os.path.join(self.datadir, "mysql"))
        if first:
            self._install()
        # flush_log_at_trx_commit=2: the log is written at every commit, so
        # a kill -9 of mariadbd loses nothing (only an OS crash could)
        cmd = [MARIADBD, "--no-defaults",
               "--datadir=" + self.datadir,
               "--socket=" + self.socket,
               "--port=%d" % self.port,
               "--bind-address=127.0.0.1" + ("," + self.also_bind if self.also_bind else ""),
               "--pid-file=" + os.path.join(self.dir, "mariadbd.pid"),
               "--log-error=" + self.log_path,
               "--user=root",
               "--skip-log-bin",
               "--skip-name-resolve",
               "--innodb-buffer-pool-size=32M",
               "--innodb-log-file-size=8M",
               "--innodb-flush-log-at-trx-commit=2",
               "--max-connections=500"]
        if self.tls is not None:
            cmd += ["--ssl-cert=" + self.tls[0], "--ssl-key=" + self.tls[1],
                    "--ssl-ca=" + self.tls[2]]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self._answers():
                if first:
                    self.sql("CREATE DATABASE lockd; "
                             "CREATE USER 'lockd'@'127.0.0.1' IDENTIFIED BY '%s'; "
                             "GRANT ALL ON lockd.* TO 'lockd'@'127.0.0.1'" % PASSWORD,
                             database=None)
                return self
            time.sleep(0.05)
        tail = self._log_tail()
        self.kill9()
        raise harness.Fail("mariadbd did not answer on %d: %s" % (self.port, tail))

    def _answers(self):
        try:
            p = subprocess.run([CLIENT, "--no-defaults", "-S", self.socket, "-uroot",
                                "--connect-timeout=1", "-e", "SELECT 1"],
                               capture_output=True, timeout=5)
            return p.returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def sql(self, query, database="lockd", timeout=10):
        """Run query as root over the socket; rows as lists of strings
        (NULL is None). Raises harness.Fail on an error."""
        cmd = [CLIENT, "--no-defaults", "-S", self.socket, "-uroot", "-N", "-B",
               "--connect-timeout=2", "-e", query]
        if database:
            cmd.insert(-2, database)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise harness.Fail("mariadb: %s: %s" % (query, p.stderr.strip()))
        rows = []
        for line in p.stdout.splitlines():
            rows.append([None if v == "NULL" else v for v in line.split("\t")])
        return rows

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.resume()
        super().stop()

    def restart(self):
        if self.proc is not None and self.proc.poll() is None:
            raise harness.Fail("mariadbd is still running")
        self.start()


def make(tmpdir):
    return MysqlServer(tmpdir)

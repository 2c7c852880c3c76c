"""tests/e2e/test_newcomer.py - what a newcomer's clone relies on: `make run`
stops with the make a user started, and the repository carries everything
its tests need (no path into a directory beside the checkout).

Each scenario runs once (on the memory backend).
"""

import os
import signal
import socket
import subprocess
import time

import harness
from harness import check, scenario

ROOT = harness.ROOT


def pid_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def lockd_pids(port):
    """Processes whose command line serves --listen 127.0.0.1:port."""
    want = "127.0.0.1:%d" % port
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == "lockd" and want in argv:
            out.append(int(d))
    return out


def port_free(port):
    s = socket.socket()
    try:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        s.close()


def make_run_args():
    """`make run` on the build the suite tests (build/, or build-address/
    for SANITIZE=address)."""
    build = os.environ.get("LOCKD_BUILD", "build").rstrip("/")
    base = os.path.basename(build)
    if base.startswith("build-") and os.path.dirname(build) in ("", ROOT):
        return ["SANITIZE=" + base[len("build-"):]]
    return ["BUILD=" + build]


@scenario("newcomer: SIGTERM to the PID of `make run` stops lockd and frees its port", backends=["memory"])
def t_make_run_stops(ctx):
    port = harness.free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["LOCKD_LISTEN"] = "127.0.0.1:%d" % port
    log_path = os.path.join(ctx.tmpdir, "make-run-%d.log" % port)
    log = open(log_path, "wb")
    mk = subprocess.Popen(["make", "-s", "-C", ROOT, "run"] + make_run_args(), stdout=log, stderr=log,
                          stdin=subprocess.DEVNULL, env=env)
    pids = []

    def tail():
        with open(log_path, "rb") as f:
            return f.read()[-2000:].decode("utf-8", "replace")

    try:
        deadline = time.monotonic() + 120  # make run may have to build first
        while time.monotonic() < deadline and mk.poll() is None:
            try:
                if harness.http(port, "GET", "/healthz", timeout=2).status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        check(mk.poll() is None, "make run exited (%r) before lockd answered /healthz:\n%s" % (mk.returncode, tail()))
        pids = lockd_pids(port)
        check(pids, "make run: nothing answered /healthz on %d within 120 s, or no lockd serves it:\n%s"
              % (port, tail()))

        mk.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (any(pid_alive(p) for p in pids) or not port_free(port)):
            time.sleep(0.1)
        left = [p for p in pids if pid_alive(p)]
        check(not left, "lockd (pid %s) still runs 10 s after SIGTERM to make (pid %d)"
              % (", ".join(map(str, left)), mk.pid))
        check(port_free(port), "port %d still answers 10 s after SIGTERM to make" % port)
        try:
            mk.wait(10)
        except subprocess.TimeoutExpired:
            raise harness.Fail("make (pid %d) still runs 10 s after SIGTERM, lockd gone" % mk.pid)
    finally:
        for p in pids:
            if pid_alive(p):
                os.kill(p, signal.SIGKILL)
        if mk.poll() is None:
            mk.kill()
            mk.wait(10)
        log.close()


@scenario("newcomer: no tracked file points into a directory beside the checkout", backends=["memory"])
def t_no_outside_paths(ctx):
    # spelled in pieces so that this file does not match itself
    banned = [".." + "/shared", "shared" + "/tools"]
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, timeout=30)
    if r.returncode != 0:
        raise harness.Skip("not a git checkout: git ls-files failed")
    hits = []
    for f in r.stdout.decode().split("\0"):
        p = os.path.join(ROOT, f)
        if not f or not os.path.isfile(p):
            continue
        with open(p, "rb") as fh:
            data = fh.read()
        hits += ["%s: %s" % (f, b) for b in banned if b.encode() in data]
    check(not hits, "tracked files name paths outside the repository:\n" + "\n".join(hits))

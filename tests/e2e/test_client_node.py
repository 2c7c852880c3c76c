"""tests/e2e/test_client_node.py - the Node.js client helper
(clients/node/lockd.mjs) passes its own tests, clients/node/test/, against
real lockd instances on this scenario's backend: `node --test` with
LOCKD_BIN (the build under test) and LOCKD_TEST_BACKEND (the store's URL).
Those tests start their lockd instances themselves; their logs land in this
scenario's temp dir and must hold no sanitizer report.

Nothing passes by not running: node failing, a TAP summary with no test, or
any test skipped or todo fails the scenario. Without node 18+ the scenario
is skipped (make deps installs nodejs).
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile

import harness
from harness import Fail, check, scenario

ROOT = harness.ROOT
TIMEOUT = 150  # s, for the whole `node --test` run
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")


def node_version(node):
    """(major, minor, patch) of `node --version`, or None."""
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.match(r"v(\d+)\.(\d+)\.(\d+)", out.strip())
    return tuple(int(x) for x in m.groups()) if m else None


def reporter_args(version):
    """--test-reporter came in 18.15 and 19.6; 18.13 writes TAP anyway, and
    later versions do when the output is not a terminal, until 23 (spec)."""
    if version >= (19, 6) or (18, 15) <= version < (19, 0):
        return ["--test-reporter=tap"]
    return []


def run_group(args, env, timeout):
    """Runs args in a process group of its own, so that on a timeout the
    lockd instances node started die with it. Returns (exit code or None
    on timeout, output)."""
    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        code = p.returncode
    except subprocess.TimeoutExpired:
        code = None
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
    try:
        os.killpg(p.pid, signal.SIGKILL)  # anything node left behind
    except ProcessLookupError:
        pass
    return code, out.decode("utf-8", "replace")


def tap_summary(out):
    """The counters of the TAP summary: {"tests": N, "pass": N, ...}."""
    return {k: int(v) for k, v in re.findall(r"^# (tests|pass|fail|cancelled|skipped|todo) (\d+)$", out, re.M)}


def sanitizer_report(logdir):
    for log in sorted(glob.glob(os.path.join(logdir, "*.log"))):
        with open(log, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        for marker in SANITIZER_MARKERS:
            i = text.find(marker)
            if i >= 0:
                return "%s:\n%s" % (os.path.basename(log), text[max(0, i - 200):i + 3000])
    return ""


@scenario("client node: the Node.js helper keeps, loses and releases locks as the spec says, "
          "proven by its own tests against a real lockd", backends=["memory", "redis"])
def t_client_node(ctx):
    node = shutil.which("node")
    version = node_version(node) if node else None
    if version is None or version < (18, 0, 0):
        raise harness.Skip("node 18+ not installed: make deps installs nodejs")
    logdir = tempfile.mkdtemp(prefix="client-node-", dir=ctx.tmpdir)
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKD_URL", "LOCKD_AUTH_TOKEN_FILE")}
    env.update(LOCKD_BIN=os.path.abspath(harness.LOCKD_BIN), LOCKD_TEST_BACKEND=ctx.url,
               LOCKD_TEST_LOGDIR=logdir, NODE_NO_WARNINGS="1")
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    args = [node, "--test"] + reporter_args(version) + [os.path.join("clients", "node", "test") + os.sep]
    code, out = run_group(args, env, TIMEOUT)

    failed = "\n".join(line for line in out.splitlines() if re.match(r"\s*not ok ", line))
    tail = out[-4000:]
    if code is None:
        raise Fail("node --test ran over %d s:\n%s" % (TIMEOUT, tail))
    if code != 0:
        raise Fail("node --test exited %d:\n%s\n...\n%s" % (code, failed, tail))
    got = tap_summary(out)
    check(got.get("tests", 0) > 0, "no test ran (TAP summary %r):\n%s" % (got, tail))
    check(got.get("pass") == got["tests"], "passed %r of %r tests:\n%s" % (got.get("pass"), got["tests"], tail))
    check(got.get("skipped") == 0 and got.get("todo", 0) == 0,
          "tests skipped or todo (TAP summary %r):\n%s" % (got, tail))
    report = sanitizer_report(logdir)
    check(not report, "a sanitizer report from a lockd the node tests started:\n" + report)

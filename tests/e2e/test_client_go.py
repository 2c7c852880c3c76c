"""tests/e2e/test_client_go.py - the Go client helper (clients/go): `go vet`
and `gofmt -l` are clean, and its own tests (clients/go/lockd_test.go) pass
against the lockd under test on the scenario's backend. Those tests start
their own lockd (LOCKD_BIN) on the store (LOCKD_TEST_BACKEND), so a restart
of it leaves the suite's instance alone.

Every Test function must PASS: a skipped one (LOCKD_BIN unset) or a run in
which no test ran fails the scenario. Without Go the scenario is a skip
(`make deps` installs golang-go), which CI counts as a failure.
"""

import os
import re
import shutil
import subprocess

import harness
from harness import check

GO_DIR = os.path.join(harness.ROOT, "clients", "go")
TIMEOUT = 150  # s, for each go command


def go_env(ctx):
    """The environment of the go commands: offline, caches in the build dir."""
    build = os.environ.get("LOCKD_BUILD") or os.path.join(harness.ROOT, "build")
    build = os.path.join(harness.ROOT, build)  # as it is, if absolute
    env = dict(os.environ)
    env.update({
        "LOCKD_BIN": os.path.abspath(harness.LOCKD_BIN),
        "LOCKD_TEST_BACKEND": ctx.url,
        "GOCACHE": os.path.join(build, "go-cache"),
        "GOPATH": os.path.join(build, "go-path"),
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
        "GOTELEMETRY": "off",
        "CGO_ENABLED": "0",
    })
    for name in ("LOCKD_URL", "LOCKD_AUTH_TOKEN_FILE"):  # the tests choose their own
        env.pop(name, None)
    return env


def tail(text, n=4000):
    return text if len(text) <= n else "..." + text[-n:]


def run_go(args, env):
    """Run go with args in clients/go; its combined output. Fail when it
    exits non-zero or outlives TIMEOUT."""
    try:
        r = subprocess.run(["go"] + args, cwd=GO_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = (e.output or b"").decode("utf-8", "replace")
        raise harness.Fail("go %s: still running after %d s:\n%s" % (" ".join(args), TIMEOUT, tail(out)))
    out = r.stdout.decode("utf-8", "replace")
    check(r.returncode == 0, "go %s exited %d:\n%s" % (" ".join(args), r.returncode, tail(out)))
    return out


def gofmt_path(env):
    """gofmt from PATH, else the one beside the go tool (GOROOT/bin)."""
    found = shutil.which("gofmt")
    if found:
        return found
    goroot = run_go(["env", "GOROOT"], env).strip()
    return os.path.join(goroot, "bin", "gofmt")


def test_names():
    """The Test functions of clients/go's _test.go files."""
    names = set()
    for f in os.listdir(GO_DIR):
        if f.endswith("_test.go"):
            with open(os.path.join(GO_DIR, f), encoding="utf-8") as fh:
                names.update(re.findall(r"^func (Test\w*)\(t \*testing\.T\)", fh.read(), re.M))
    return names


@harness.scenario("client go: vet and gofmt are clean and every test of the Go client passes against lockd",
                  backends=["memory", "redis"])
def t_client_go(ctx):
    if shutil.which("go") is None:
        raise harness.Skip("go not installed: make deps installs golang-go")
    env = go_env(ctx)
    run_go(["vet", "./..."], env)
    r = subprocess.run([gofmt_path(env), "-l", "."], cwd=GO_DIR, env=env, capture_output=True, timeout=TIMEOUT)
    unformatted = (r.stdout + r.stderr).decode("utf-8", "replace").strip()
    check(r.returncode == 0 and not unformatted, "gofmt -l . is not clean:\n%s" % unformatted)

    out = run_go(["test", "-count=1", "-v", "./..."], env)
    want = test_names()
    check(want, "no Test functions found in %s" % GO_DIR)
    passed = re.findall(r"^--- PASS: (Test\w*)", out, re.M)
    skipped = re.findall(r"^\s*--- SKIP: (\S+)", out, re.M)
    check(not skipped, "go test skipped %s:\n%s" % (", ".join(skipped), tail(out)))
    check(sorted(passed) == sorted(want),
          "go test: %d of %d tests passed (missing: %s):\n%s"
          % (len(passed), len(want), ", ".join(sorted(want - set(passed))) or "-", tail(out)))

#!/usr/bin/env python3
"""tests/run.py - runs every test: the unit test programs, then the
end-to-end scenarios (tests/e2e/test_*.py) on every backend built in, each
against a real server started on loopback in a temp dir. Prints one line
per test and ends with "N passed, N failed", after a line "N skipped".

  python3 tests/run.py [--backend NAME]... [-k SUBSTRING] [--no-unit] [--quick]
                       [--no-fuzz] [--strict-skips] [--allow-skip SUBSTRING]...

First the tree's rules (tests/check_arrows.py: includes run lib <-
backends <- api <- service; tests/check_sizes.py: no file over 800 lines,
no function over 80), each counted as one test, then the unit programs,
then the libFuzzer targets (tests/fuzz/): `make fuzz-build` builds them in
build-fuzz/ with clang, and each runs LOCKD_FUZZ_SECONDS (default 5) on a
copy of its seed corpus, one check per target ("fuzz: fuzz_router"). Where
clang or its libFuzzer runtime is missing, that is one skip ("fuzz"),
printed. --no-fuzz leaves them out; -k fuzz runs only them.

Nothing passes by not running:

- A unit program (build/tests/unit/test_*) that cannot run here exits 77
  (CHECK_SKIP_EXIT in tests/unit/check.h) after a line "skip: <reason>":
  it prints "skip unit: <name>: <reason>" and counts as skipped. One that
  exits 0 having run no case ("0 passed, 0 failed") is a failure. A line
  "skip store: <store>: <reason>" (test_contract: a server that cannot
  start) counts as one skip of that store.
- The backends come from the binary ($LOCKD_BIN --backends, one scheme a
  line; from the "backends built in:" line of --help if that fails). A
  backend the suite knows but the binary lacks prints "skip <backend>:
  not built in" and counts as skipped, as does one built in that the suite
  has no tests/e2e/server_<name>.py for.
- A scenario that cannot run here raises harness.Skip(reason) (e.g. no
  container engine): "skip <backend>: <name>: <reason>", counted as
  skipped, never as passed.
- A run in which no test ran at all (-k matching no name, say) fails.
- A scenario that does not apply to a backend by design is not run there:
  backends=[...] in its decorator, or needs=[...] with capabilities the
  runner reads from the running lockd (harness.capabilities():
  "fifo:store" or "fifo:instance", from GET /readyz). One that lacks a
  capability prints "n/a  <backend>: <name> (needs ...)" and counts as
  neither passed nor skipped.
- No scenario file imports another (helpers shared by several are in
  tests/e2e/client.py): one that does is a failure.

Strict skips, for CI: with --strict-skips (or LOCKD_STRICT_SKIPS=1) every
skip whose name ("unit: test_redis", "redis", "memory: deploy: the image
builds ...") contains none of the --allow-skip substrings (repeatable; or
LOCKD_ALLOW_SKIPS, a comma-separated list) also counts as a failure and is
listed under "failed:" as "unexpected skip: ...". E.g. on a CI machine
that has every store but no container engine:

  make test TESTFLAGS="--strict-skips --allow-skip image"

Environment: LOCKD_BIN (default build/lockd), LOCKD_BUILD (default build),
LOCKD_STRICT_SKIPS, LOCKD_ALLOW_SKIPS, LOCKD_FUZZ_SECONDS.
"""

import argparse
import ast
import glob
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "e2e"))

import harness  # noqa: E402

BACKENDS = ["memory", "redis", "redlock", "zookeeper", "mysql"]
SCENARIO_TIMEOUT = 180
SKIP_EXIT = 77  # a unit program that cannot run here (tests/unit/check.h)


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout("scenario ran over %d s" % SCENARIO_TIMEOUT)


class Tally:
    """What the run counted: passed, failed (with names), skipped (with
    names and reasons)."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.failures = []
        self.skips = []  # (name, reason)

    def ok(self, n=1):
        self.passed += n

    def fail(self, name, n=1):
        self.failed += n
        self.failures.append(name)

    def skip(self, name, reason):
        self.skips.append((name, reason))
        print("skip %s: %s" % (name, reason))


def unit_counts(out):
    """(passed, failed) from the last "N passed, N failed" line, or None."""
    m = re.findall(r"^(\d+) passed, (\d+) failed", out, re.M)
    return (int(m[-1][0]), int(m[-1][1])) if m else None


def skip_reason(out):
    """The reason of the program's last "skip: <reason>" line."""
    m = re.findall(r"^skip: *(.*?)\s*$", out, re.M)
    return (m[-1] if m else "") or "no reason given"


def run_checks(tally):
    """The tree's own rules, read from the sources: the include arrows
    (tests/check_arrows.py) and the size rule (tests/check_sizes.py)."""
    for script in ("check_arrows.py", "check_sizes.py"):
        p = subprocess.run([sys.executable, os.path.join(HERE, script)], capture_output=True,
                           text=True, timeout=120)
        out = (p.stdout + p.stderr).rstrip()
        if p.returncode == 0:
            tally.ok()
            print(out)
        else:
            tally.fail("check: " + script)
            print(out)
        sys.stdout.flush()


def run_units(build, tally):
    exes = [exe for exe in sorted(glob.glob(os.path.join(build, "tests", "unit", "test_*")))
            if not exe.endswith((".o", ".d")) and os.access(exe, os.X_OK)]
    if not exes:
        tally.fail("unit: no unit test program in %s/tests/unit (run `make unit`)" % build)
        print("FAIL unit: no unit test program in %s/tests/unit (run `make unit`)" % build)
    for exe in exes:
        name = os.path.basename(exe)
        t0 = time.monotonic()
        try:
            p = subprocess.run([exe], capture_output=True, text=True, timeout=600)
            out = p.stdout + p.stderr
            rc = p.returncode
        except subprocess.TimeoutExpired:
            out, rc = "timed out", -1
        counts = unit_counts(out)
        np, nf = counts if counts else (0, 0)
        took = time.monotonic() - t0
        if rc == SKIP_EXIT and nf == 0:
            # cannot run here: neither passed nor failed, whatever it ran
            tally.skip("unit: " + name, skip_reason(out))
            sys.stdout.flush()
            continue
        why = None
        if counts is None:
            why = "no \"N passed, N failed\" line (exit %r)" % rc
        elif nf:
            why = "%d failed" % nf
        elif rc != 0:
            why = "exit %r" % rc
        elif np == 0:
            why = "ran no test"
            if re.search(r"^skip:", out, re.M):
                why += "; one that cannot run here must exit %d" % SKIP_EXIT
        if why is None:
            tally.ok(np)
            print("ok   unit: %s (%d passed, %d failed, %.1fs)" % (name, np, nf, took))
            # a program that ran, but not on every store it tests
            for store, reason in re.findall(r"^skip store: *([^:]+): *(.*?)\s*$", out, re.M):
                tally.skip("unit: %s: %s" % (name, store), reason)
        else:
            tally.ok(np)
            tally.fail("unit: %s (%s)" % (name, why), max(nf, 1))
            print("FAIL unit: %s (%s; %d passed, %d failed, %.1fs)" % (name, why, np, nf, took))
            print("\n".join("     " + line for line in out.splitlines()[-60:]))
        sys.stdout.flush()


def fuzz_runner():
    """tests/fuzz/run.py as a module (its run_target() and targets())."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fuzz_run", os.path.join(HERE, "fuzz", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def libfuzzer_missing():
    """Why the fuzz targets cannot be built here, or None: clang must link
    a trivial target with -fsanitize=fuzzer,address,undefined."""
    if shutil.which("clang") is None:
        return "clang is not installed (make deps installs it)"
    tmp = tempfile.mkdtemp(prefix="lockd-fuzz-probe-")
    try:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write("#include <stddef.h>\n#include <stdint.h>\n"
                    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\n"
                    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)"
                    "{ (void)d; (void)n; return 0; }\n")
        p = subprocess.run(["clang", "-fsanitize=fuzzer,address,undefined", "-o",
                            os.path.join(tmp, "probe"), src], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            return "clang cannot link -fsanitize=fuzzer (no libFuzzer runtime?): " + \
                (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    except (OSError, subprocess.TimeoutExpired) as e:
        return "clang failed: %s" % e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return None


def run_fuzz(tally, only=None):
    """Build the libFuzzer targets and run each for LOCKD_FUZZ_SECONDS: one
    check per target; only: a substring the check's name must contain."""
    why = libfuzzer_missing()
    if why is not None:
        tally.skip("fuzz", why)
        return
    build = os.path.join(ROOT, "build-fuzz")
    t0 = time.monotonic()
    try:
        p = subprocess.run(["make", "-C", ROOT, "-j2", "fuzz-build"], capture_output=True, text=True,
                           timeout=1800)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired:
        out, rc = "timed out", -1
    if rc != 0:
        tally.fail("fuzz: make fuzz-build")
        print("FAIL fuzz: make fuzz-build (exit %r)\n%s" % (
            rc, "\n".join("     " + s for s in out.splitlines()[-30:])))
        return
    print("ok   fuzz: make fuzz-build (%.1fs)" % (time.monotonic() - t0))
    tally.ok()
    runner = fuzz_runner()
    seconds = int(os.environ.get("LOCKD_FUZZ_SECONDS", "5") or 5)
    todo = [(n, path) for n, path in runner.targets(build) if only is None or only in "fuzz: " + n]
    if not todo:
        tally.fail("fuzz: no target in %s/tests/fuzz" % build)
        print("FAIL fuzz: no target in %s/tests/fuzz" % build)
    for name, path in todo:
        ok, line, out = runner.run_target(name, path, build, seconds)
        if ok:
            tally.ok()
            print("ok   fuzz: " + line)
        else:
            tally.fail("fuzz: " + name)
            print("FAIL fuzz: " + line)
            print("\n".join("     " + s for s in out.splitlines()[-40:]))
        sys.stdout.flush()


def parse_backend_list(text):
    """Backend names from `lockd --backends` (one scheme a line, "redis" or
    "redis://")."""
    names = []
    for line in text.splitlines():
        words = line.split()
        if words:
            names.append(words[0].split(":", 1)[0].lower())
    return names


def built_backends():
    """The backends the binary has built in, asked of the binary itself:
    (names, how), or (None, why not)."""
    try:
        p = subprocess.run([harness.LOCKD_BIN, "--backends"], capture_output=True, text=True, timeout=30)
        if p.returncode == 0 and parse_backend_list(p.stdout):
            return parse_backend_list(p.stdout), "--backends"
        # older binaries: the "backends built in: a, b" line of --help
        p = subprocess.run([harness.LOCKD_BIN, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "cannot run %s: %s" % (harness.LOCKD_BIN, e)
    m = re.search(r"^backends built in:\s*(.*)$", p.stdout + p.stderr, re.M | re.I)
    if p.returncode != 0 or m is None:
        return None, "%s: neither --backends nor --help names the built-in backends (exit %r)" % (
            harness.LOCKD_BIN, p.returncode)
    names = [w.strip().split(":", 1)[0].lower() for w in m.group(1).split(",") if w.strip()]
    return names, "--help"


def imports_of_scenario_files(path):
    """The test_* modules the scenario file at path imports: none may (its
    scenarios would depend on another file's, and helpers would be split
    over scenario files)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return sorted({n for n in names if n.split(".")[0].startswith("test_")})


def has_server(name):
    return name == "memory" or os.path.exists(os.path.join(HERE, "e2e", "server_%s.py" % name))


def run_backend(backend, scenarios, tally):
    tmpdir = tempfile.mkdtemp(prefix="lockd-test-%s-" % backend)
    server = None
    lockd = None
    try:
        if backend != "memory":
            mod = importlib.import_module("server_" + backend)
            server = mod.make(tmpdir)
            server.start()
        url = server.url if server is not None else "memory://"
        lockd = harness.Lockd(url, tmpdir=tmpdir).start()
        caps = None
        if any(sc["needs"] for sc in scenarios):
            caps = harness.capabilities(lockd)
            print("     %s: capabilities %s" % (backend, " ".join(sorted(caps))))
        for sc in scenarios:
            name = "%s: %s" % (backend, sc["name"])
            missing = sorted(set(sc["needs"]) - caps) if sc["needs"] else []
            if missing:
                print("n/a  %s (needs %s)" % (name, ", ".join(missing)))
                continue
            ctx = harness.Context(backend, server, lockd, tmpdir)
            t0 = time.monotonic()
            signal.alarm(SCENARIO_TIMEOUT)
            err = None
            skip = None
            try:
                sc["fn"](ctx)
            except harness.Skip as e:
                skip = str(e) or "no reason given"
            except Exception as e:  # noqa: BLE001 - a failing scenario is data
                err = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-3:])
            finally:
                signal.alarm(0)
                try:
                    reports = ctx.cleanup()
                except Exception:  # noqa: BLE001
                    reports = []
            if err is None and reports:
                err = "a sanitizer report from another lockd of the scenario:\n" + reports[0]
            if err is None and not lockd.alive():
                err = "lockd died: " + lockd.log_tail()
            if err is not None:
                tally.fail(name)
                print("FAIL %s (%.1fs)\n%s" % (name, time.monotonic() - t0,
                                               "\n".join("     " + line for line in err.splitlines())))
                if not lockd.alive():
                    lockd = harness.Lockd(url, tmpdir=tmpdir).start()
            elif skip is not None:
                tally.skip(name, skip)
            else:
                tally.ok()
                print("ok   %s (%.1fs)" % (name, time.monotonic() - t0))
            sys.stdout.flush()
        # the main instance must leave cleanly: exit 0, no sanitizer report
        name = "%s: lockd exits 0 on SIGTERM after the suite, with no sanitizer report" % backend
        rc = lockd.stop(20)
        report = lockd.sanitizer_report()
        if rc == 0 and not report:
            tally.ok()
            print("ok   " + name)
        else:
            tally.fail(name)
            print("FAIL %s: exit %r\n%s" % (name, rc, report or lockd.log_tail()))
    except Exception as e:  # noqa: BLE001 - set-up failure counts as one failure
        tally.fail("%s: set-up" % backend)
        print("FAIL %s: set-up: %s" % (backend, "".join(traceback.format_exception(type(e), e, e.__traceback__))))
    finally:
        if lockd is not None and lockd.alive():
            lockd.kill9()
        if server is not None:
            try:
                server.stop()
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(tmpdir, ignore_errors=True)
    sys.stdout.flush()


def env_flag(name):
    return os.environ.get(name, "").strip().lower() not in ("", "0", "no", "false")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", action="append", help="run only on this backend (repeatable)")
    ap.add_argument("-k", dest="filter", help="run only scenarios whose name contains this")
    ap.add_argument("--no-unit", action="store_true")
    ap.add_argument("--quick", action="store_true", help="skip scenarios marked slow")
    ap.add_argument("--no-fuzz", action="store_true", help="leave out the libFuzzer targets' short runs")
    ap.add_argument("--strict-skips", action="store_true", default=env_flag("LOCKD_STRICT_SKIPS"),
                    help="count a skip that no --allow-skip matches as a failure (env LOCKD_STRICT_SKIPS=1)")
    ap.add_argument("--allow-skip", action="append", default=[], metavar="SUBSTRING",
                    help="with --strict-skips, a skip whose name contains this is allowed (repeatable; "
                    "env LOCKD_ALLOW_SKIPS, comma-separated)")
    opts = ap.parse_args()
    allowed = [a for a in opts.allow_skip if a]
    allowed += [a.strip() for a in os.environ.get("LOCKD_ALLOW_SKIPS", "").split(",") if a.strip()]
    signal.signal(signal.SIGALRM, on_alarm)

    tally = Tally()
    build = os.environ.get("LOCKD_BUILD", os.path.join(ROOT, "build"))
    if not opts.no_unit and not opts.filter:
        run_checks(tally)
        run_units(build, tally)
    if not opts.no_fuzz and ((not opts.no_unit and not opts.filter) or
                             (opts.filter and opts.filter.startswith("fuzz"))):
        run_fuzz(tally, opts.filter)

    for path in sorted(glob.glob(os.path.join(HERE, "e2e", "test_*.py"))):
        bad = imports_of_scenario_files(path)
        if bad:
            tally.fail("%s imports %s: shared helpers belong in tests/e2e/client.py"
                       % (os.path.relpath(path, ROOT), ", ".join(bad)))
            print("FAIL " + tally.failures[-1])
        importlib.import_module(os.path.splitext(os.path.basename(path))[0])

    built, how = built_backends()
    if built is None:
        tally.fail("which backends are built in: " + how)
        print("FAIL which backends are built in: " + how)
        built = []
    wanted = [b for b in BACKENDS + [b for b in built if b not in BACKENDS]
              if not opts.backend or b in opts.backend]
    if not built:
        wanted = []
    for b in opts.backend or []:
        if b not in wanted:
            tally.fail("--backend %s: no such backend (the suite knows %s)" % (b, ", ".join(BACKENDS)))
            print("FAIL --backend %s: no such backend" % b)
    for backend in wanted:
        if backend not in built:
            tally.skip(backend, "not built in (%s %s lists %s)" % (harness.LOCKD_BIN, how, ", ".join(built)))
            continue
        if not has_server(backend):
            tally.skip(backend, "built in, but the suite has no tests/e2e/server_%s.py to run it on" % backend)
            continue
        scs = [s for s in harness.SCENARIOS
               if (s["backends"] is None or backend in s["backends"])
               and (not opts.filter or opts.filter in s["name"])
               and not (opts.quick and s["slow"])]
        if not scs:
            continue
        run_backend(backend, scs, tally)

    if opts.strict_skips:
        for name, reason in tally.skips:
            if not any(a in name for a in allowed):
                tally.fail("unexpected skip: %s: %s" % (name, reason))
    if tally.passed + tally.failed == 0:
        tally.fail("no test ran" + (" (no scenario name contains %r)" % opts.filter if opts.filter else ""))
    if tally.failures:
        print("\nfailed:\n" + "\n".join("  " + f for f in tally.failures))
    if tally.skips:
        print("\nskipped:\n" + "\n".join("  %s: %s" % s for s in tally.skips))
    print("%d skipped" % len(tally.skips))
    print("%d passed, %d failed" % (tally.passed, tally.failed))
    return 0 if tally.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

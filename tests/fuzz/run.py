#!/usr/bin/env python3
"""tests/fuzz/run.py - runs every libFuzzer target of a build dir
(BUILD/tests/fuzz/fuzz_<name>, built by `make fuzz-build`) for SECONDS
each, one after the other, on a fresh copy of its seed corpus
(tests/fuzz/corpus/<name>/ into BUILD/fuzz-corpus/<name>/), so the
repository's corpus stays as committed. Prints one line per target:

  fuzz_router: ok, 1234567 execs in 60 s, cov 1880 ft 7351, corpus 412

or "FAIL" with what libFuzzer found (crash, leak, timeout, out of memory)
and the input it saved (BUILD/fuzz-artifacts/<name>-crash-<sha1>), then
the tail of its output. Exits 1 if any target failed or none ran.

  python3 tests/fuzz/run.py [--seconds N] [--build DIR] [--only NAME]... [--keep]

--keep goes on from the corpus copy an earlier run grew, instead of the seeds.

tests/run.py imports run_target() for `make test`'s short runs.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# -close_fd_mask=3: the targets' own stdout and stderr (config's messages)
# are closed; libFuzzer and the sanitizers keep a copy of stderr.
FLAGS = ["-timeout=5", "-rss_limit_mb=2048", "-close_fd_mask=3", "-print_final_stats=1"]

KINDS = [
    ("leak", "ERROR: LeakSanitizer"),
    ("timeout", "ERROR: libFuzzer: timeout"),
    ("out of memory", "ERROR: libFuzzer: out-of-memory"),
    ("deadly signal", "ERROR: libFuzzer: deadly signal"),
    ("ASan", "ERROR: AddressSanitizer"),
    ("UBSan", "runtime error:"),
    ("crash", "ERROR: libFuzzer"),
]


# Defects of the libraries lockd links, not of lockd, that a target can
# meet: (what it is, the report's pattern). A run that dies of one goes on
# from its grown corpus for the time left (at most KNOWN_RESTARTS times);
# the line says so. Anything else still fails the target.
KNOWN = [
    # MHD 0.9.75 (Debian 12) joins a folded header line ("obs-fold") to
    # the line before with memcpy() from the read buffer into that line's
    # block grown in place, source and destination a few bytes apart. The
    # destination lies before the source, which every memcpy() copies
    # right (glibc's is its memmove()); ASan reports the overlap.
    ("libmicrohttpd 0.9.75's folded-header memcpy() overlap",
     re.compile(r"ERROR: AddressSanitizer: memcpy-param-overlap[^\n]*\n\s*#0 [^\n]*memcpy[^\n]*\n"
                r"\s*#1 [^\n]*libmicrohttpd\.so")),
]
KNOWN_RESTARTS = 100


def known_defect(out):
    """The KNOWN defect out reports, or None."""
    return next((what for what, pat in KNOWN if pat.search(out)), None)


def targets(build):
    """The target programs built in build: [(name, path)]."""
    out = []
    for path in sorted(glob.glob(os.path.join(build, "tests", "fuzz", "fuzz_*"))):
        if not path.endswith((".d", ".o")) and os.access(path, os.X_OK):
            out.append((os.path.basename(path), path))
    return out


def run_target(name, path, build, seconds, keep=False):
    """Run one target for seconds on a fresh copy of its corpus (keep: on
    the copy a previous run grew, if there is one): (ok, line, output).
    A KNOWN library defect restarts it for the time left."""
    met = []
    t0 = time.monotonic()
    while True:
        left = max(1, int(seconds - (time.monotonic() - t0)))
        ok, line, out = run_once(name, path, build, left, keep or bool(met))
        what = None if ok else known_defect(out)
        if what is None or len(met) == KNOWN_RESTARTS:
            break
        art = re.findall(r"Test unit written to (\S+)", out)
        met.append((what, art[-1] if art else "not saved"))
        if time.monotonic() - t0 >= seconds - 1:
            ok, line = True, "%s: ok, the time spent" % name
            break
    if met:
        line += "; run on after %d known defect(s): %s (first input %s)" % (
            len(met), ", ".join(sorted({w for w, _ in met})), met[0][1])
    return ok, line, out


def run_once(name, path, build, seconds, keep):
    """run_target() without its restarts."""
    short = name[len("fuzz_"):]
    seed = os.path.join(HERE, "corpus", short)
    corpus = os.path.join(build, "fuzz-corpus", short)
    arts = os.path.join(build, "fuzz-artifacts")
    if keep and os.path.isdir(corpus):
        pass
    elif os.path.isdir(seed):
        shutil.rmtree(corpus, ignore_errors=True)
        shutil.copytree(seed, corpus)
    else:
        shutil.rmtree(corpus, ignore_errors=True)
        os.makedirs(corpus)
    os.makedirs(arts, exist_ok=True)
    cmd = [path, "-max_total_time=%d" % seconds, "-artifact_prefix=%s/%s-" % (arts, short)]
    cmd += FLAGS + [corpus]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                           timeout=seconds + 120)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += "\nrun.py: killed after %d s" % (seconds + 120)
        rc = -1
    execs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", out)
    done = re.findall(r"#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED)\s+cov: (\d+) ft: (\d+) corp: (\d+)", out)
    secs = re.findall(r"Done \d+ runs in (\d+) second", out)
    n = execs[-1] if execs else (done[-1][0] if done else "?")
    cov = "cov %s ft %s, corpus %s" % done[-1][1:] if done else "no coverage line"
    took = "%s s" % secs[-1] if secs else "?"
    if rc == 0 and execs:
        return True, "%s: ok, %s execs in %s, %s" % (name, n, took, cov), out
    kind = next((k for k, pat in KINDS if pat in out), "exit %r" % rc)
    art = re.findall(r"Test unit written to (\S+)", out)
    line = "%s: FAIL (%s) after %s execs, %s%s" % (name, kind, n, cov,
                                                   ", input " + art[-1] if art else "")
    return False, line, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--build", default="build-fuzz")
    ap.add_argument("--only", action="append", help="run only this target (fuzz_NAME or NAME)")
    ap.add_argument("--keep", action="store_true", help="go on from the grown corpus copy")
    opts = ap.parse_args()
    todo = [(n, p) for n, p in targets(opts.build)
            if not opts.only or n in opts.only or n[len("fuzz_"):] in opts.only]
    if not todo:
        print("no fuzz target in %s/tests/fuzz (run `make fuzz-build`)" % opts.build)
        return 1
    failed = 0
    for name, path in todo:
        ok, line, out = run_target(name, path, opts.build, opts.seconds, opts.keep)
        print(line)
        if not ok:
            failed += 1
            print("\n".join("     " + s for s in out.splitlines()[-40:]))
        sys.stdout.flush()
    print("%d passed, %d failed" % (len(todo) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

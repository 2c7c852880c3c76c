"""tests/e2e/test_readme.py - the README's curl session, replayed.

The README's "A session with curl" shows console blocks that a reader is
meant to replay, one after the other in one shell. Each is marked by an
HTML comment naming this file just before it. The test takes those blocks
literally: each line starting with "$ " is a shell command, the lines up to
the next command are what it printed. It runs the commands of every marked
block in order in one bash (so variables such as the token, and shell
functions, carry over from block to block), against a lockd it starts on
memory://; the only change made to the commands is that "localhost:8080"
(make run's address) becomes that lockd's address. Then each command's
output must have the shape of the README's:

- the same number of lines, each ending in a newline (as the README shows
  them; a missing one would put the next prompt on the same line);
- a JSON line: the same keys at every level (arrays: the same length,
  item by item), the same JSON types and the same values, except those
  that differ from run to run: token, fence,
  ttl_ms, retry_after_ms and expires_at (which must still be a 32-hex
  token, a positive integer, an RFC 3339 time), and the values of fences
  (a multi-key grant's fence by key: the same keys, each a positive
  integer);
- any other line (a status printed by curl -w, ...): the same text.

Needs bash, curl and sed.
"""

import json
import os
import re
import subprocess

import harness
from harness import Fail, check

README = os.path.join(harness.ROOT, "README.md")
MARKER = "tests/e2e/test_readme.py replays this block"
ADDRESS = "localhost:8080"
STEP_END = "@@readme-step-end@@"

# Values that differ from one run to the next, and what they must look like.
VARYING = {
    "token": re.compile(r"^[0-9a-f]{32}$"),
    "expires_at": re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"),
    "fence": None,
    "ttl_ms": None,
    "retry_after_ms": None,
}
# Objects whose keys are fixed but whose values differ from run to run
# (each a positive integer): a multi-key grant's fences, by key.
VARYING_MAPS = ("fences",)


def readme_session(path=README):
    """[(command, [expected output lines])] of every marked console block,
    in the README's order."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    block = re.compile(r"^```console\n(.*?)^```$", re.S | re.M)
    steps = []
    i = text.find(MARKER)
    check(i >= 0, "README.md has no block marked %r" % MARKER)
    while i >= 0:
        m = block.search(text, i)
        check(m is not None, "README.md: no ```console block after the marker at offset %d" % i)
        check("```" not in text[i:m.start()], "README.md: the marker at offset %d is not right before its "
              "console block" % i)
        n = len(steps)
        for line in m.group(1).splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                check(len(steps) > n, "README.md: output before the first command of a block: %r" % line)
                steps[-1][1].append(line)
        check(len(steps) - n >= 3, "README.md: a replayed block has %d commands" % (len(steps) - n))
        i = text.find(MARKER, m.end())
    return steps


def run_session(steps, address, tmpdir):
    """Each step's output (text), run in one bash with ADDRESS replaced
    (in tmpdir, from a script file: stdin is not the script)."""
    script = []
    for cmd, _ in steps:
        script.append(cmd.replace(ADDRESS, address))
        script.append("printf '%s\\n' " + STEP_END)
    path = os.path.join(tmpdir, "readme-session.sh")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(script) + "\n")
    p = subprocess.run(["bash", "--noprofile", "--norc", path], stdin=subprocess.DEVNULL, cwd=tmpdir,
                       capture_output=True, text=True, timeout=120,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"})
    check(p.returncode == 0, "bash exited %d: %s" % (p.returncode, p.stderr[-2000:]))
    outs = p.stdout.split(STEP_END + "\n")
    check(len(outs) == len(steps) + 1 and outs[-1] == "",
          "could not split the session's output into its %d steps: %r" % (len(steps), p.stdout[-2000:]))
    return outs[:-1], p.stderr


def shape_errors(want, got, where):
    """Where got differs from want beyond the values that vary per run."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return ["%s: %s, README has an object" % (where, json.dumps(got))]
        errs = []
        if set(want) != set(got):
            errs.append("%s: keys %s, README has %s" % (where, sorted(got), sorted(want)))
        for k in want:
            if k in got:
                errs += value_errors(k, want[k], got[k], "%s.%s" % (where, k))
        return errs
    return value_errors(None, want, got, where)


def value_errors(key, want, got, where):
    if key in VARYING_MAPS and isinstance(want, dict) and isinstance(got, dict):
        if set(want) != set(got):
            return ["%s: keys %s, README has %s" % (where, sorted(got), sorted(want))]
        return ["%s.%s: %s is not a positive integer" % (where, k, json.dumps(v)) for k, v in got.items()
                if isinstance(v, bool) or not isinstance(v, int) or v <= 0]
    if isinstance(want, dict):
        return shape_errors(want, got, where)
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return ["%s: %d items, README has %d" % (where, len(got), len(want))]
        errs = []
        for n, (w, g) in enumerate(zip(want, got)):
            errs += value_errors(None, w, g, "%s[%d]" % (where, n))
        return errs
    if type(want) is not type(got):
        return ["%s: %s, README has %s" % (where, json.dumps(got), json.dumps(want))]
    if key in VARYING:
        rx = VARYING[key]
        if rx is not None and not rx.match(got):
            return ["%s: %r does not look like %r" % (where, got, want)]
        if isinstance(got, int) and got <= 0:
            return ["%s: %r is not positive" % (where, got)]
        return []
    if want != got:
        return ["%s: %s, README has %s" % (where, json.dumps(got), json.dumps(want))]
    return []


def compare(steps, outs):
    """Every difference between the README's outputs and the replay's."""
    errs = []
    for n, ((cmd, want), out) in enumerate(zip(steps, outs), 1):
        where = "step %d ($ %s)" % (n, cmd[:70])
        if out and not out.endswith("\n"):
            errs.append("%s: the output does not end in a newline (the next prompt would follow it): %r"
                        % (where, out[-120:]))
        got = out.splitlines()
        if len(got) != len(want):
            errs.append("%s: %d lines, README shows %d:\n      got:    %s\n      README: %s"
                        % (where, len(got), len(want), "\n              ".join(got), "\n              ".join(want)))
            continue
        for w, g in zip(want, got):
            try:
                wj = json.loads(w)
            except ValueError:
                wj = None
            if isinstance(wj, dict):
                try:
                    gj = json.loads(g)
                except ValueError:
                    errs.append("%s: %r is not JSON, README has %s" % (where, g, w))
                    continue
                errs += shape_errors(wj, gj, where)
            elif g != w:
                errs.append("%s: %r, README has %r" % (where, g, w))
    return errs


@harness.scenario("readme: the README's curl sessions replay as shown, each output with the README's keys and "
                  "statuses", backends=["memory"])
def readme_curl_session(ctx):
    steps = readme_session()
    ld = ctx.new_lockd()
    outs, stderr = run_session(steps, "127.0.0.1:%d" % ld.port, ctx.tmpdir)
    errs = compare(steps, outs)
    if errs:
        raise Fail("the README's session does not replay (%d differences):\n  %s%s"
                   % (len(errs), "\n  ".join(errs), "\n  stderr: " + stderr[-1000:] if stderr else ""))
    harness.log("     %d commands replayed" % len(steps))
    # a replay leaves nothing behind: the sessions end with every key free
    r = ld.request("GET", "/locks/orders/42")
    check(r.status == 404, "after the session orders/42 is %d: %s" % (r.status, r.text[:200]))
    r = ld.request("GET", "/metrics")
    m = re.search(r"^lockd_locks_held (\d+)$", r.text, re.M)
    check(m is not None, "memory's /metrics has no lockd_locks_held")
    check(m.group(1) == "0", "after the sessions lockd_locks_held is %s: a block leaves a lock held" % m.group(1))

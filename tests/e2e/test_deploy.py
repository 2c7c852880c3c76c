"""tests/e2e/test_deploy.py - deploy and operate: the Dockerfile, Kubernetes
manifests and compose file checked (tests/deploy/check_manifests.py),
yamllint and shellcheck, the image built and run for real, and the
observability contract on the running lockd: every metric family with its
Prometheus type, X-Request-Id, JSON logs.

Each scenario runs once (on the memory backend). The image scenario builds
with a container-build tool when one sits in a sibling directory of the
checkout (<parent>/<dir>/tools/container-build: it installs podman and makes
debian:12-slim locally, for machines that reach no registry), else with
`make image`'s deploy/image.sh (Docker or Podman, whichever can build here);
where no container engine can run it is skipped, with the reason. It needs
Debian's archive, like `make deps`; it is marked slow.
"""

import glob

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import Fail, check, eq, scenario

ROOT = harness.ROOT
CHECKER = os.path.join(ROOT, "tests", "deploy", "check_manifests.py")
IMAGE_SH = os.path.join(ROOT, "deploy", "image.sh")
IMAGE = "lockd:dev"  # what the container-build tool tags too
IMAGE_MAX_BYTES = 100 * 1000 * 1000  # the goal: under 100 MB (podman's MB)
BUILD_TIMEOUT = 1500  # first run: podman install + debootstrap + apt + make


# ---------------------------------------------------------------- helpers

def yaml_python():
    """A Python that has PyYAML: this one, else Debian's (python3-yaml comes
    with yamllint)."""
    try:
        import yaml  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    for py in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(py, os.X_OK) and subprocess.run(
                [py, "-c", "import yaml"], capture_output=True, timeout=30).returncode == 0:
            return py
    raise Fail("no python3 with PyYAML: install Debian's python3-yaml (yamllint depends on it)")


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def run_checker(*args):
    return run([yaml_python(), CHECKER] + list(args), timeout=120, cwd=ROOT)


def tracked_files():
    try:
        out = run(["git", "-C", ROOT, "ls-files", "-z"], timeout=30)
        if out.returncode == 0:
            return [f for f in out.stdout.split("\0") if f]
    except (OSError, subprocess.TimeoutExpired):
        pass
    files = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not (x.startswith(".git") or x.startswith("build"))]
        files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
    return files


SHEBANG = re.compile(rb"^#!\s*(/usr)?/bin/(env\s+)?(sh|bash|dash|ksh)\b")


def shell_scripts():
    out = []
    for f in tracked_files():
        p = os.path.join(ROOT, f)
        if not os.path.isfile(p):
            continue
        if f.endswith(".sh"):
            out.append(f)
            continue
        with open(p, "rb") as fh:
            if SHEBANG.match(fh.readline(200)):
                out.append(f)
    return sorted(out)


# ---------------------------------------------------------------- static checks

@scenario("deploy: the Dockerfile, Kubernetes manifests and compose file pass the deployment checks",
          backends=["memory"])
def t_manifests_pass(ctx):
    r = run_checker("--shellcheck")
    check(r.returncode == 0, "check_manifests.py:\n" + r.stdout + r.stderr)
    check("1 sidecar, 1 service, 1 compose" in r.stdout, "checked too little: " + r.stdout)
    # The compose schema itself, when a compose tool that can check it offline is installed.
    dc = shutil.which("docker-compose")
    if dc is None:
        harness.log("     docker-compose not installed: compose.yaml checked without the compose schema")
        return
    r = run([dc, "-f", os.path.join(ROOT, "deploy", "compose.yaml"), "config", "-q"], cwd=ROOT)
    check(r.returncode == 0, "docker-compose config:\n" + r.stdout + r.stderr)


# A manifest file, a change that breaks it, and what the checker must say.
MUTANTS = [
    ("service", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false",
     "readOnlyRootFilesystem must be true"),
    ("service", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true",
     "allowPrivilegeEscalation must be false"),
    ("service", 'drop: ["ALL"]', 'drop: ["NET_RAW"]', "capabilities.drop must contain ALL"),
    ("service", "path: /readyz", "path: /ready", "readinessProbe GETs '/ready'"),
    ("service", "path: /healthz", "path: /metrics", "livenessProbe GETs '/metrics'"),
    ("service", 'value: "0.0.0.0:8080"', 'value: "0.0.0.0:9090"', "livenessProbe port 'https' is 8080, lockd listens on 9090"),
    ("service", "replicas: 3", "replicas: 1", "replicas is 1, want 3"),
    ("service", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 10",
     "terminationGracePeriodSeconds 10 <"),
    ("service", "memory: 256Mi", "ephemeral-storage: 1Gi", "resources.limits.memory missing"),
    ("service", "            runAsUser: 10001", "            runAsUser: 1000", "runAsUser is 1000, want 10001"),
    ("service", "enableServiceLinks: false", "enableServiceLinks: true", "enableServiceLinks must be false"),
    ("service", "key: url", "key: backend", "key 'backend' is not in this file"),
    ("service", "targetPort: https", "targetPort: 9000", "targets 9000, lockd listens on 8080"),
    ("service", "scheme: HTTPS", "scheme: HTTP", "livenessProbe scheme is 'HTTP', lockd serves HTTPS"),
    ("service", "mountPath: /etc/lockd/tls", "mountPath: /etc/lockd/certs",
     "LOCKD_TLS_CERT=/etc/lockd/tls/tls.crt is on no volume the container mounts"),
    ("service", "name: LOCKD_TLS_KEY", "name: LOCKD_TLS_KEYS", "LOCKD_TLS_CERT and LOCKD_TLS_KEY: both or neither"),
    ("service", "mountPath: /etc/lockd/store", "mountPath: /etc/lockd/secret",
     "password_file=/etc/lockd/store/password is on no volume the container mounts"),
    ("service", '"redis://redis:6379/0?password_file=/etc/lockd/store/password"', '"redis://:hunter2@redis:6379/0"',
     "the backend URL carries a password"),
    ("sidecar", 'value: "127.0.0.1:8080"', 'value: "127.0.0.1:9090"',
     "livenessProbe GETs http://127.0.0.1:8080/healthz, want http://127.0.0.1:9090/healthz"),
    ("sidecar", "- http://127.0.0.1:8080/readyz\n            periodSeconds: 5",
     "- http://127.0.0.1:8080/healthz\n            periodSeconds: 5",
     "readinessProbe GETs http://127.0.0.1:8080/healthz, want http://127.0.0.1:8080/readyz"),
    ("sidecar", "seccompProfile:\n              type: RuntimeDefault\n        - name: lockd",
     "seccompProfile:\n              type: Unconfined\n        - name: lockd",
     "container app: seccompProfile.type must be RuntimeDefault"),
    ("compose", '"redis://redis:6379/0"', '"redis://cache:6379/0"', "backend host 'cache' is not a compose service"),
    ("compose", '"127.0.0.1:8081:8080"', '"8081:8080"', "publish on 127.0.0.1 only"),
]


@scenario("deploy: the manifest checker rejects manifests that lose a probe, a security setting or the right port",
          backends=["memory"])
def t_manifests_mutants(ctx):
    paths = {"sidecar": os.path.join(ROOT, "deploy", "kubernetes", "sidecar.yaml"),
             "service": os.path.join(ROOT, "deploy", "kubernetes", "service.yaml"),
             "compose": os.path.join(ROOT, "deploy", "compose.yaml")}
    tmp = tempfile.mkdtemp(prefix="lockd-mutant-", dir=ctx.tmpdir)
    try:
        for which, old, new, want in MUTANTS:
            text = open(paths[which], encoding="utf-8").read()
            check(old in text, "%s no longer contains %r: update MUTANTS" % (paths[which], old))
            # the compose file's build context is "..": keep the layout
            sub = os.path.join(tmp, "deploy")
            os.makedirs(sub, exist_ok=True)
            shutil.copy(os.path.join(ROOT, "Dockerfile"), os.path.join(tmp, "Dockerfile"))
            mutant = os.path.join(sub, os.path.basename(paths[which]))
            with open(mutant, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new, 1))
            r = run_checker("--" + which, mutant)
            check(r.returncode == 1 and want in r.stdout,
                  "%s with %r -> %r: want exit 1 and %r, got exit %d:\n%s%s"
                  % (which, old, new, want, r.returncode, r.stdout, r.stderr))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def deploy_yaml():
    """YAML files under deploy/, Helm templates excepted (Go templates, not
    YAML: their renderings are linted instead)."""
    return sorted(os.path.relpath(os.path.join(d, n), ROOT)
                  for d, _, names in os.walk(os.path.join(ROOT, "deploy"))
                  if os.path.basename(d) != "templates" and "node_modules" not in d
                  for n in names if n.endswith((".yaml", ".yml")) or n == ".yamllint")


@scenario("deploy: yamllint passes on every YAML file under deploy/, with the project's and Debian's default "
          "settings", backends=["memory"])
def t_yamllint(ctx):
    conf = os.path.join(ROOT, "deploy", ".yamllint")
    files = deploy_yaml()
    check(len(files) >= 6, "too few YAML files under deploy/: %r" % files)
    check("deploy/helm/lockd/values.yaml" in files, "the chart's values.yaml is not linted: %r" % files)
    for how in (["-c", conf], ["-d", "default"]):
        r = run(["yamllint", "-f", "parsable"] + how + files, cwd=ROOT)
        check(r.returncode == 0, "yamllint %s:\n%s%s" % (" ".join(how), r.stdout, r.stderr))
        # the same configuration does catch a broken file
        bad = os.path.join(ctx.tmpdir, "bad.yaml")
        with open(bad, "w") as f:
            f.write("---\na: 1\na: 2\nb:   [1,2]\n")
        r = run(["yamllint", "-f", "parsable"] + how + [bad])
        check(r.returncode != 0 and "key-duplicates" in r.stdout, "yamllint accepted a duplicate key: " + r.stdout)
    # Debian's defaults are stricter on line length than the project's
    r = run(["yamllint", "-f", "parsable", "-d", "default", "-"], input="---\na: %s\n" % ("x" * 90))
    check(r.returncode != 0 and "line-length" in r.stdout, "the default settings took a 93-character line")


# ---------------------------------------------------------------- the Helm chart

CHART = os.path.join(ROOT, "deploy", "helm", "lockd")
CHART_PY = os.path.join(ROOT, "tests", "deploy", "chart.py")
VALIDATE = os.path.join(ROOT, "tests", "deploy", "validate.mjs")
# Every optional part of the chart on.
ALL_ON = """\
backend: {existingSecret: lockd-store, existingSecretKey: redis-url, passwordSecret: lockd-store-pw}
tls: {existingSecret: lockd-tls, clientCA: {existingSecret: lockd-client-ca, key: ca.crt}}
authFile: {existingSecret: lockd-auth, key: auth.json}
auth: {existingSecret: lockd-tokens, key: token}
admin: {existingSecret: lockd-admin, key: admin-token}
image: {digest: "sha256:%s"}
config: {threads: 4, maxStoreConnections: 8, logEvents: all}
networkPolicy:
  enabled: true
  from: [{podSelector: {matchLabels: {lockd-client: "true"}}}]
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  storePorts: [6379, 26379]
serviceMonitor: {enabled: true, labels: {release: prometheus}}
prometheusRule: {enabled: true, labels: {release: prometheus}}
autoscaling: {enabled: true}
""" % ("0123456789abcdef" * 4)
ALL_ON_KINDS = {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "ServiceAccount", "NetworkPolicy",
                "ServiceMonitor", "PrometheusRule", "HorizontalPodAutoscaler"}


def chart_helm():
    """helm, installed by tests/deploy/chart.py (npm ci); Skip when npm or
    its registry cannot be reached."""
    try:
        r = run([sys.executable, CHART_PY, "tools"], timeout=420)
    except subprocess.TimeoutExpired:
        raise harness.Skip("tests/deploy/chart.py tools ran over 420 s")
    if r.returncode == 3:
        raise harness.Skip(r.stderr.strip().replace("chart.py: ", "", 1))
    check(r.returncode == 0, "tests/deploy/chart.py tools: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    return r.stdout.strip()


def all_on_values(ctx):
    path = os.path.join(ctx.tmpdir, "all-on.yaml")
    with open(path, "w") as f:
        f.write(ALL_ON)
    return path


def helm_template(helm, *args):
    r = run([helm, "template", "lockd", CHART] + list(args), cwd=ROOT)
    check(r.returncode == 0, "helm template %s:\n%s" % (" ".join(args), r.stderr))
    import yaml
    return r.stdout, [d for d in yaml.safe_load_all(r.stdout) if d]


def validate_objects(objs):
    return run(["node", VALIDATE], input=json.dumps(objs), cwd=ROOT)


def obj(objs, kind):
    found = [o for o in objs if o["kind"] == kind]
    check(len(found) == 1, "want one %s, got %d" % (kind, len(found)))
    return found[0]


@scenario("deploy: helm lint --strict passes on the chart with default values and with every optional part on",
          backends=["memory"])
def t_chart_lint(ctx):
    helm = chart_helm()
    for args in ([], ["-f", all_on_values(ctx)]):
        r = run([helm, "lint", "--strict", CHART] + args, cwd=ROOT)
        check(r.returncode == 0 and "0 chart(s) failed" in r.stdout,
              "helm lint --strict %s:\n%s%s" % (" ".join(args), r.stdout, r.stderr))
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        chart = f.read()
    with open(os.path.join(ROOT, "Makefile")) as f:
        version = re.search(r"^VERSION\s*:=\s*(\S+)", f.read(), re.M).group(1)
    check(re.search(r'^appVersion: "%s"$' % re.escape(version), chart, re.M),
          "Chart.yaml appVersion is not lockd's version %s" % version)
    for f in ("deploy/kubernetes/service.yaml", "deploy/kubernetes/sidecar.yaml", "deploy/compose.yaml"):
        images = set(re.findall(r"image: \"?(lockd[^\s\"]*)", open(os.path.join(ROOT, f)).read()))
        eq(images, {"lockd:" + version}, "lockd images in " + f)


@scenario("deploy: the chart's renderings validate against the Kubernetes schemas, pass check_manifests.py and "
          "yamllint, and carry the alerts, probes, digest and checksum the values ask for", backends=["memory"])
def t_chart_render(ctx):
    helm = chart_helm()
    text, default = helm_template(helm)
    text_on, on = helm_template(helm, "-f", all_on_values(ctx))
    eq({o["kind"] for o in on}, ALL_ON_KINDS, "kinds rendered with every optional part on")
    r = validate_objects(default + on)
    check(r.returncode == 0, "schema validation:\n" + r.stdout + r.stderr)
    eq(r.stdout.count("\nok ") + r.stdout.startswith("ok "), len(default) + len(on), "objects validated")
    broken = json.loads(json.dumps(obj(default, "Deployment")))
    broken["spec"]["replicas"] = "three"
    r = validate_objects([broken])
    check(r.returncode == 1 and "replicas must be integer" in r.stdout, "the validator took a bad object: " + r.stdout)
    # check_manifests.py on the default rendering, as a shared service
    path = os.path.join(ctx.tmpdir, "rendered.yaml")
    for name, body in (("rendered.yaml", text), ("rendered-on.yaml", text_on)):
        with open(os.path.join(ctx.tmpdir, name), "w") as f:
            f.write(body)
    r = run_checker("--service", path)
    check(r.returncode == 0, "check_manifests.py on the rendering:\n" + r.stdout + r.stderr)
    r = run(["yamllint", "-f", "parsable", "-c", os.path.join(ROOT, "deploy", ".yamllint"), path,
             os.path.join(ctx.tmpdir, "rendered-on.yaml")])
    check(r.returncode == 0, "yamllint on the renderings:\n" + r.stdout)
    # what the values ask for
    c = obj(on, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    eq(c["image"], "lockd@sha256:" + "0123456789abcdef" * 4, "image by digest")
    env = {e["name"]: e for e in c["env"]}
    eq(env["LOCKD_BACKEND"]["valueFrom"]["secretKeyRef"], {"name": "lockd-store", "key": "redis-url"}, "backend")
    eq(env["LOCKD_AUTH_TOKEN_FILE"]["value"], "/etc/lockd/auth/token", "auth token file")
    eq(env["LOCKD_ADMIN_TOKEN_FILE"]["value"], "/etc/lockd/admin/admin-token", "admin token file")
    eq((env["LOCKD_TLS_CERT"]["value"], env["LOCKD_TLS_KEY"]["value"], env["LOCKD_TLS_CLIENT_CA"]["value"]),
       ("/etc/lockd/tls/tls.crt", "/etc/lockd/tls/tls.key", "/etc/lockd/client-ca/ca.crt"), "TLS files")
    eq(env["LOCKD_AUTH_FILE"]["value"], "/etc/lockd/auth-file/auth.json", "auth file")
    check("LOCKD_BACKEND_PASSWORD" not in env, "the store password is a file, not a variable")
    pod = obj(on, "Deployment")["spec"]["template"]["spec"]
    eq({v["name"]: v["secret"]["secretName"] for v in pod["volumes"]},
       {"tls": "lockd-tls", "client-ca": "lockd-client-ca", "auth-file": "lockd-auth", "store-password": "lockd-store-pw",
        "auth-token": "lockd-tokens", "admin-token": "lockd-admin"}, "Secret volumes")
    for p in ("livenessProbe", "readinessProbe"):
        eq((c[p]["httpGet"]["scheme"], c[p]["httpGet"]["port"]), ("HTTPS", "https"), p + " with TLS")
    ep = obj(on, "ServiceMonitor")["spec"]["endpoints"][0]
    eq((ep["scheme"], ep["tlsConfig"]["ca"]["secret"]["name"]), ("https", "lockd-tls"), "ServiceMonitor over TLS")
    _, made = helm_template(helm, "--set", "backend.passwordSecret=pw",
                            "--set", "backend.url=mysql://lockd@db/lockd?ssl_mode=required")
    eq(obj(made, "Secret")["stringData"]["url"],
       "mysql://lockd@db/lockd?ssl_mode=required&password_file=/etc/lockd/store/password", "URL with password_file")
    cm = obj(on, "ConfigMap")["data"]
    eq((cm["LOCKD_THREADS"], cm["LOCKD_MAX_STORE_CONNECTIONS"], cm["LOCKD_LOG_EVENTS"], cm["LOCKD_MAX_TTL_MS"]),
       ("4", "8", "all", "86400000"), "ConfigMap")
    exprs = " ".join(r["expr"] for g in obj(on, "PrometheusRule")["spec"]["groups"] for r in g["rules"])
    for want in ("lockd_backend_errors_total{", 'lockd_http_request_duration_seconds_bucket{', 'route="acquire"',
                 "force_released", "lost", "expired|taken_over", "kube_deployment_status_replicas_available", "up{",
                 "lockd_http_limited_total{", 'status=~"401|403"'):
        check(want in exprs, "no alert uses %r: %s" % (want, exprs))
    spread = obj(default, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    eq([s["topologyKey"] for s in spread], ["topology.kubernetes.io/zone", "kubernetes.io/hostname"], "spread")
    _, off = helm_template(helm, "--set", "readiness.followStore=false")
    probe = obj(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    eq(probe["httpGet"]["path"], "/healthz", "readiness probe with readiness.followStore=false")
    _, edited = helm_template(helm, "--set", "config.logLevel=debug")
    ann = [obj(x, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
           for x in (default, edited)]
    check(ann[0] != ann[1], "checksum/config did not change with the settings: %r" % ann)


@scenario("deploy: deploy/kubernetes/service.yaml is the chart's rendering with deploy/kubernetes/service-values.yaml",
          backends=["memory"])
def t_chart_manifest(ctx):
    chart_helm()
    r = run([sys.executable, CHART_PY, "check"], cwd=ROOT)
    check(r.returncode == 0, "tests/deploy/chart.py check:\n" + r.stdout[-3000:] + r.stderr)


# --set that values.schema.json (or the templates) must refuse, and what helm says.
BAD_VALUES = [
    ("replicaCount=0", "replicaCount"), ("image.digest=sha256:abc", "image.digest"),
    ("config.logFormat=xml", "config.logFormat"), ("config.logEvents=some", "config.logEvents"),
    ("backend.url=memory://", "backend.url"), ("readiness.followStore=maybe", "readiness.followStore"),
    ("replicas=3", "replicas"), ("networkPolicy.storePorts[0]=70000", "storePorts"),
    ("config.maxStoreConnections=0", "maxStoreConnections"), ("extraEnv.LOCKD_BACKEND=x", "extraEnv"),
    ("terminationGracePeriodSeconds=16", "terminationGracePeriodSeconds 16 < preStopSleepSeconds 5"),
    ("tls.clientCA.existingSecret=ca", "tls.clientCA.existingSecret needs tls.existingSecret"),
    ("tls.existingSecret=Bad_Name", "tls.existingSecret"), ("extraEnv.LOCKD_BACKEND_PASSWORD=x", "extraEnv"),
    ("authFile.key=a/b", "authFile.key"),
]


@scenario("deploy: the chart refuses bad values (values.schema.json), naming the value", backends=["memory"])
def t_chart_schema(ctx):
    helm = chart_helm()
    for setting, want in BAD_VALUES:
        r = run([helm, "template", "lockd", CHART, "--set", setting], cwd=ROOT)
        check(r.returncode != 0 and want in r.stderr,
              "--set %s: want a failure naming %r, got exit %d:\n%s" % (setting, want, r.returncode, r.stderr[-800:]))
    r = run([helm, "template", "lockd", CHART, "--set", "backend.url=zookeeper://zk:2181/lockd",
             "--set", "config.maxStoreConnections=16"], cwd=ROOT)
    check(r.returncode == 0, "good values refused: " + r.stderr)


@scenario("deploy: shellcheck passes on every shell script in the repository", backends=["memory"])
def t_shellcheck(ctx):
    scripts = shell_scripts()
    check("deploy/debian-deps.sh" in scripts, "did not find the shell scripts (found %r)" % scripts)
    r = run(["shellcheck", "-x"] + scripts, cwd=ROOT, timeout=300)
    check(r.returncode == 0, "shellcheck on %s:\n%s%s" % (" ".join(scripts), r.stdout, r.stderr))
    harness.log("     shellcheck: %s" % " ".join(scripts))


# ---------------------------------------------------------------- the image

def container_build_tool():
    """A container-build tool in a sibling directory of the checkout, or
    None. LOCKD_CONTAINER_BUILD names one instead (empty: use none)."""
    env = os.environ.get("LOCKD_CONTAINER_BUILD")
    if env is not None:
        check(not env or os.access(env, os.X_OK), "LOCKD_CONTAINER_BUILD=%s is not executable" % env)
        return env or None
    found = sorted(p for p in glob.glob(os.path.join(os.path.dirname(ROOT), "*", "tools", "container-build"))
                   if os.access(p, os.X_OK))
    return found[0] if found else None


# The engine command the image scenario builds and runs with (set by t_image).
ENGINE = []


def is_podman():
    return "podman" in ENGINE


def podman_cmd():
    base = ["podman", "--runtime", "runc"]  # as container-build: crun fails on this kernel
    if os.geteuid() != 0:
        base = ["sudo", "-n"] + base
    return base


def podman(*args, timeout=60):
    """The engine (podman or docker) with these arguments."""
    return run(ENGINE + list(args), timeout=timeout)


def build_with_tool(tool):
    """Build with the container-build tool, which also runs its own checks
    (health, non-root, SIGTERM exit 0); the ID of the image it built."""
    ENGINE[:] = podman_cmd()
    port = harness.free_port()
    t0 = time.monotonic()
    try:
        r = run([tool, "--run", str(port)], cwd=ROOT, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Fail("container-build ran over %d s" % BUILD_TIMEOUT)
    out = r.stdout + r.stderr
    check(r.returncode == 0, "%s --run %d failed (exit %d):\n%s"
          % (tool, port, r.returncode, "\n".join(out.splitlines()[-60:])))
    harness.log("     %s --run: %.0f s" % (tool, time.monotonic() - t0))
    # The image this build made (others may retag lockd:dev after it): the ID
    # from container-build's image table, "localhost/lockd dev <ID> ...".
    repo, tag = IMAGE.split(":")
    ids = [w[2] for w in (line.split() for line in r.stdout.splitlines())
           if len(w) >= 3 and w[0].rsplit("/", 1)[-1] == repo and w[1] == tag
           and re.fullmatch(r"[0-9a-f]{12,64}", w[2])]
    check(ids, "no image ID for %s in container-build's output:\n%s" % (IMAGE, r.stdout[-2000:]))
    return ids[-1]


def build_with_make_image():
    """Build as `make image` does (deploy/image.sh); the ID of the image.
    Skip when no container engine can build here."""
    r = run([IMAGE_SH, "--engine"], timeout=120)
    if r.returncode == 3:
        raise harness.Skip((r.stderr.strip().splitlines() or ["no container engine"])[-1]
                           .replace("image.sh: ", "", 1))
    check(r.returncode == 0 and r.stdout.split(), "deploy/image.sh --engine: exit %d %s%s"
          % (r.returncode, r.stdout, r.stderr))
    ENGINE[:] = r.stdout.split()
    t0 = time.monotonic()
    try:
        r = run([IMAGE_SH, IMAGE], cwd=ROOT, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Fail("deploy/image.sh ran over %d s" % BUILD_TIMEOUT)
    out = r.stdout + r.stderr
    check(r.returncode == 0, "deploy/image.sh %s (%s) failed (exit %d):\n%s"
          % (IMAGE, " ".join(ENGINE), r.returncode, "\n".join(out.splitlines()[-60:])))
    harness.log("     make image (%s): %.0f s" % (" ".join(ENGINE), time.monotonic() - t0))
    r = podman("image", "inspect", "-f", "{{.Id}}", IMAGE)
    check(r.returncode == 0 and r.stdout.strip(), "image inspect %s: %s" % (IMAGE, r.stderr))
    return r.stdout.strip()


def ulimits():
    """Containers may not ask for more than the host's hard limits."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if nofile == resource.RLIM_INFINITY:
        nofile = 1048576
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if nproc == resource.RLIM_INFINITY or nproc > 32768:
        nproc = 32768
    return ["--ulimit", "nofile=%d:%d" % (nofile, nofile), "--ulimit", "nproc=%d:%d" % (nproc, nproc)]


def proc_uid(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


@scenario("deploy: the image builds and, run with a read-only root and no capabilities, is healthy as a "
          "non-root user, serves acquire, renew and release and exits 0 on SIGTERM", backends=["memory"], slow=True)
def t_image(ctx):
    # The first build on a machine may install podman and bootstrap the base
    # image: allow it more than the runner's per-scenario alarm (every step
    # below has its own timeout).
    signal.alarm(BUILD_TIMEOUT + 300)
    tool = container_build_tool()
    image = build_with_tool(tool) if tool else build_with_make_image()

    r = podman("image", "inspect", image)
    check(r.returncode == 0, "podman image inspect %s (%s): %s" % (IMAGE, image, r.stderr))
    info = json.loads(r.stdout)[0]
    size = int(info["Size"])
    harness.log("     image %s (%s): %.1f MB" % (IMAGE, image, size / 1e6))
    check(size < IMAGE_MAX_BYTES, "image is %.1f MB, the goal is under %.0f MB" % (size / 1e6, IMAGE_MAX_BYTES / 1e6))
    cfg = info["Config"]
    eq(cfg.get("User"), "10001:10001", "image USER")
    eq(cfg.get("Entrypoint"), ["/usr/local/bin/lockd"], "image ENTRYPOINT")
    check("LOCKD_LISTEN=0.0.0.0:8080" in (cfg.get("Env") or []), "image Env: %r" % cfg.get("Env"))
    check("8080/tcp" in (cfg.get("ExposedPorts") or {}), "image ExposedPorts: %r" % cfg.get("ExposedPorts"))
    hc = (info.get("Healthcheck") or cfg.get("Healthcheck") or {}).get("Test")
    eq(hc, ["CMD", "/usr/local/bin/lockd", "--check-health"], "image HEALTHCHECK")

    # Run it as Kubernetes would with the manifests' securityContext.
    port = harness.free_port()
    name = "lockd-e2e-%d-%d" % (os.getpid(), port)
    r = podman("run", "-d", "--pull=never", "--name", name, "--network", "host",
               "--read-only", *(["--read-only-tmpfs=false"] if is_podman() else []), "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges", *ulimits(),
               "-e", "LOCKD_LISTEN=127.0.0.1:%d" % port, image, timeout=120)
    try:
        check(r.returncode == 0, "podman run: " + r.stderr)
        if not harness.wait_port(port, 30):
            logs = podman("logs", "--tail", "30", name).stdout
            raise Fail("the container did not listen on %d within 30 s:\n%s" % (port, logs))
        pid = int(podman("inspect", "-f", "{{.State.Pid}}", name).stdout.strip())
        eq(proc_uid(pid), 10001, "uid of lockd in the container")

        h = {"X-Request-Id": "deploy-smoke-1"}
        eq(harness.http(port, "GET", "/healthz").status, 200, "healthz")
        r = harness.http(port, "GET", "/readyz")
        eq(r.status, 200, "readyz")
        eq(r.json.get("backend"), "memory", "readyz backend")
        r = harness.http(port, "POST", "/locks/deploy/smoke", {"ttl_ms": 5000, "owner": "e2e"}, h)
        eq(r.status, 201, "acquire: %r" % r)
        eq(r.header("X-Request-Id"), "deploy-smoke-1", "X-Request-Id echoed by the image")
        token, fence = r.json["token"], r.json["fence"]
        r = harness.http(port, "POST", "/locks/deploy/smoke", {"ttl_ms": 5000})
        eq(r.status, 409, "second acquire: %r" % r)
        r = harness.http(port, "PUT", "/locks/deploy/smoke", {"ttl_ms": 8000}, {"Lock-Token": token})
        eq(r.status, 200, "renew: %r" % r)
        eq(r.json["fence"], fence, "fence after renew")
        check(7000 < r.json["ttl_ms"] <= 8000, "ttl after renew: %r, want what is left of 8000" % r.json["ttl_ms"])
        r = harness.http(port, "GET", "/locks/deploy/smoke")
        eq(r.status, 200, "inspect: %r" % r)
        eq(r.json.get("owner"), "e2e", "owner")
        check("token" not in r.json, "inspect shows the token")
        r = harness.http(port, "DELETE", "/locks/deploy/smoke", headers={"Lock-Token": token})
        eq(r.status, 200, "release: %r" % r)
        eq(harness.http(port, "GET", "/locks/deploy/smoke").status, 404, "inspect after release")

        # the commands the manifests run inside the container
        r = podman("exec", name, "/usr/local/bin/lockd", "--check-health", "http://127.0.0.1:%d/readyz" % port)
        eq(r.returncode, 0, "sidecar readiness probe command: %s%s" % (r.stdout, r.stderr))
        if is_podman():
            r = podman("healthcheck", "run", name)
            eq(r.returncode, 0, "podman healthcheck run (the image's HEALTHCHECK): %s%s" % (r.stdout, r.stderr))
        else:  # docker runs the HEALTHCHECK itself, every 10 s
            deadline = time.monotonic() + 40
            while True:
                health = podman("inspect", "-f", "{{.State.Health.Status}}", name).stdout.strip()
                if health != "starting" or time.monotonic() > deadline:
                    break
                time.sleep(1)
            eq(health, "healthy", "the image's HEALTHCHECK")
        dead = harness.free_port()
        r = podman("exec", name, "/usr/local/bin/lockd", "--check-health", "http://127.0.0.1:%d/healthz" % dead)
        eq(r.returncode, 1, "--check-health against a closed port")
        r = podman("exec", name, "/bin/sleep", "0")
        eq(r.returncode, 0, "preStop command /bin/sleep: %s" % r.stderr)
        for path in ("/usr/bin/gcc", "/usr/include/microhttpd.h"):
            r = podman("exec", name, "/usr/bin/test", "-e", path)
            eq(r.returncode, 1, "%s in the runtime image" % path)

        t1 = time.monotonic()
        r = podman("stop", "-t", "15", name, timeout=60)
        took = time.monotonic() - t1
        check(r.returncode == 0, "podman stop: " + r.stderr)
        code = podman("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
        eq(code, "0", "exit code after SIGTERM (logs: %s)" % podman("logs", "--tail", "20", name).stdout)
        check(took < 11, "SIGTERM to exit took %.1f s (lockd drains within 10 s)" % took)
        harness.log("     container: uid 10001, read-only root, no capabilities; SIGTERM to exit 0 in %.1f s" % took)
    finally:
        podman("rm", "-f", *(["-t", "2"] if is_podman() else []), name, timeout=60)


# ---------------------------------------------------------------- metrics

LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")


def parse_exposition(text):
    """Prometheus text format 0.0.4 -> ({family: type}, {family: help},
    [(name, labels, value)]). Raises Fail on a malformed line."""
    types, helps, samples = {}, {}, []
    for n, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                check(len(parts) == 4, "line %d: %r" % (n, line))
                check(parts[2] not in types, "line %d: TYPE %s given twice" % (n, parts[2]))
                check(not any(s[0] == parts[2] or s[0].startswith(parts[2] + "_") and
                              s[0][len(parts[2]):] in ("_bucket", "_sum", "_count") for s in samples),
                      "line %d: TYPE %s after its samples" % (n, parts[2]))
                types[parts[2]] = parts[3]
            elif len(parts) >= 3 and parts[1] == "HELP":
                helps[parts[2]] = parts[3] if len(parts) > 3 else ""
            continue
        m = SAMPLE.match(line)
        check(m is not None, "line %d is not a sample: %r" % (n, line))
        name, lbl, val = m.groups()
        labels = {}
        rest = lbl or ""
        while rest.strip():
            lm = LABEL.match(rest)
            check(lm is not None, "line %d: bad labels %r" % (n, lbl))
            check(lm.group(1) not in labels, "line %d: label %s twice" % (n, lm.group(1)))
            labels[lm.group(1)] = lm.group(2)
            rest = rest[lm.end():]
        try:
            value = float(val)
        except ValueError:
            raise Fail("line %d: value %r" % (n, val))
        samples.append((name, labels, value))
    return types, helps, samples


def family_of(name, types):
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) == "histogram":
            return name[:-len(suffix)]
    return None


# family -> (type, label names)
FAMILIES = {
    "lockd_build_info": ("gauge", {"version", "backend"}),
    "lockd_http_requests_total": ("counter", {"route", "status"}),
    "lockd_http_request_duration_seconds": ("histogram", {"route", "backend"}),
    "lockd_lock_grants_total": ("counter", set()),
    "lockd_lock_shared_grants_total": ("counter", set()),
    "lockd_lock_reentries_total": ("counter", set()),
    "lockd_lock_idempotent_replays_total": ("counter", set()),
    "lockd_lock_renewals_total": ("counter", set()),
    "lockd_lock_releases_total": ("counter", set()),
    "lockd_lock_expiries_total": ("counter", set()),
    "lockd_lock_conflicts_total": ("counter", set()),
    "lockd_waiters": ("gauge", set()),
    "lockd_locks_held": ("gauge", set()),
    "lockd_backend_operations_total": ("counter", {"backend", "op"}),
    "lockd_backend_errors_total": ("counter", {"backend", "op"}),
    "lockd_backend_operation_duration_seconds": ("histogram", {"backend", "op"}),
}
ROUTES = {"acquire", "renew", "release", "inspect", "acquire_multi", "renew_multi", "release_multi",
          "list", "force_release", "healthz", "readyz", "metrics", "other"}


def scrape(lockd):
    r = lockd.request("GET", "/metrics")
    eq(r.status, 200, "GET /metrics")
    ct = r.header("Content-Type") or ""
    check(ct.startswith("text/plain") and "version=0.0.4" in ct, "/metrics Content-Type %r" % ct)
    check(r.header("X-Request-Id"), "/metrics without X-Request-Id")
    types, helps, samples = parse_exposition(r.text)
    for name, labels, _ in samples:
        check(family_of(name, types) is not None, "sample %s has no # TYPE" % name)
    return types, helps, samples


def value(samples, name, **labels):
    """Sum of the samples of name whose labels include these."""
    return sum(v for n, lb, v in samples if n == name and all(lb.get(k) == x for k, x in labels.items()))


def check_histograms(types, samples):
    for fam, typ in types.items():
        if typ != "histogram":
            continue
        check(fam.endswith("_seconds"), "histogram %s: durations in seconds, named *_seconds" % fam)
        series = {}
        for n, lb, v in samples:
            if family_of(n, types) != fam:
                continue
            key = tuple(sorted((k, x) for k, x in lb.items() if k != "le"))
            s = series.setdefault(key, {"buckets": [], "sum": None, "count": None})
            if n == fam + "_bucket":
                check("le" in lb, "%s_bucket without le" % fam)
                s["buckets"].append((float(lb["le"]), v, lb["le"]))
            elif n == fam + "_sum":
                s["sum"] = v
            elif n == fam + "_count":
                s["count"] = v
            else:
                raise Fail("histogram %s has a sample %s" % (fam, n))
        check(series, "histogram %s has no series" % fam)
        for key, s in series.items():
            where = "%s%r" % (fam, dict(key))
            check(s["sum"] is not None and s["count"] is not None, where + ": _sum or _count missing")
            b = s["buckets"]
            check(b and b[-1][2] == "+Inf", where + ': the last bucket must be le="+Inf"')
            check([x[0] for x in b] == sorted(x[0] for x in b), where + ": buckets out of order")
            check(all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1)), where + ": buckets not cumulative")
            eq(b[-1][1], s["count"], where + ': le="+Inf" bucket vs _count')
            finite = [x[0] for x in b if x[2] != "+Inf"]
            # request and store times stay under the 300 s wait cap; how
            # long a key is waited for or held may run to hours
            top = 4 * 3600 if fam in ("lockd_lock_wait_seconds", "lockd_lock_hold_seconds") else 300
            check(finite and 0 < finite[0] and finite[-1] <= top,
                  where + ": bucket bounds %r do not look like seconds" % finite)
            check(s["sum"] >= 0, where + ": negative _sum")


def delta(before, after, name, **lb):
    return value(after, name, **lb) - value(before, name, **lb)


# What the traffic of t_metrics adds: (sample name, labels, increase).
WANT = [
    ("lockd_lock_grants_total", {}, 3),
    ("lockd_lock_conflicts_total", {}, 1),
    ("lockd_lock_renewals_total", {}, 1),
    ("lockd_lock_releases_total", {}, 3),
    ("lockd_http_requests_total", {"route": "acquire", "status": "201"}, 3),
    ("lockd_http_requests_total", {"route": "acquire", "status": "409"}, 1),
    ("lockd_http_requests_total", {"route": "renew", "status": "200"}, 1),
    ("lockd_http_requests_total", {"route": "renew", "status": "409"}, 1),
    ("lockd_http_requests_total", {"route": "renew", "status": "404"}, 1),
    ("lockd_http_requests_total", {"route": "release", "status": "200"}, 3),
    ("lockd_http_requests_total", {"route": "inspect", "status": "200"}, 1),
    ("lockd_http_requests_total", {"route": "inspect", "status": "404"}, 1),
    ("lockd_http_requests_total", {"route": "other", "status": "404"}, 1),
    ("lockd_http_requests_total", {"route": "healthz", "status": "200"}, 1),
    ("lockd_http_requests_total", {"route": "readyz", "status": "200"}, 1),
    ("lockd_http_request_duration_seconds_count", {"route": "acquire"}, 4),
    ("lockd_http_request_duration_seconds_count", {"route": "release"}, 3),
]


@scenario("deploy: /metrics after real traffic has every metric family of the brief with its Prometheus type",
          backends=["memory"])
def t_metrics(ctx):
    ld = ctx.lockd
    k1, k2 = ctx.key("metrics"), ctx.key("metrics-wait")
    # let the counts of earlier scenarios' last requests land first
    _, _, before = scrape(ld)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        time.sleep(0.1)
        _, _, again = scrape(ld)
        if not [1 for n, lb, v in again if lb.get("route") != "metrics" and v != value(before, n, **lb)]:
            break
        before = again

    r = ld.acquire(k1, ttl_ms=5000)
    eq(r.status, 201, "acquire")
    tok = r.json["token"]
    eq(ld.acquire(k1, ttl_ms=5000).status, 409, "conflicting acquire")
    eq(ld.request("PUT", "/locks/" + k1, {"ttl_ms": 5000}, {"Lock-Token": tok}).status, 200, "renew")
    eq(ld.request("PUT", "/locks/" + k1, None, {"Lock-Token": "0" * 32}).status, 409, "renew, wrong token")
    eq(ld.request("GET", "/locks/" + k1).status, 200, "inspect")
    eq(ld.request("DELETE", "/locks/" + k1, None, {"Lock-Token": tok}).status, 200, "release")
    eq(ld.request("GET", "/locks/" + k1).status, 404, "inspect of a free key")
    eq(ld.request("PUT", "/locks/" + k1, None, {"Lock-Token": tok}).status, 404, "renew of a free key")
    eq(ld.request("GET", "/no/such/route").status, 404, "unknown route")
    eq(ld.request("GET", "/healthz").status, 200, "healthz")
    eq(ld.request("GET", "/readyz").status, 200, "readyz")

    # a waiter, seen in lockd_waiters while it waits, then granted
    r = ld.acquire(k2, ttl_ms=10000)
    eq(r.status, 201, "acquire k2")
    tok2 = r.json["token"]
    res = {}

    def waiter():
        res["r"] = ld.request("POST", "/locks/" + k2, {"ttl_ms": 5000, "wait_ms": 5000}, timeout=15)

    th = threading.Thread(target=waiter, daemon=True)
    th.start()
    deadline = time.monotonic() + 3
    waiting = held = 0
    while time.monotonic() < deadline:
        _, _, mid = scrape(ld)
        waiting, held = value(mid, "lockd_waiters"), value(mid, "lockd_locks_held")
        if waiting >= 1:
            break
        time.sleep(0.05)
    check(waiting >= 1, "lockd_waiters stayed %r while a client waited" % waiting)
    check(held >= 1, "lockd_locks_held is %r while a lock is held" % held)
    eq(ld.request("DELETE", "/locks/" + k2, None, {"Lock-Token": tok2}).status, 200, "release k2")
    th.join(10)
    check("r" in res, "the waiter was not answered")
    eq(res["r"].status, 201, "waiter granted after the release")
    eq(ld.request("DELETE", "/locks/" + k2, None, {"Lock-Token": res["r"].json["token"]}).status, 200,
       "release by the waiter")

    # lockd counts a request and logs it once the response is sent (MHD's
    # completed callback), possibly just after the client has read it:
    # scrape until the counts settle (they must then be exact).
    deadline = time.monotonic() + 3
    while True:
        types, helps, after = scrape(ld)
        settled = all(delta(before, after, name, **lb) == n for name, lb, n in WANT)
        if settled and value(after, "lockd_waiters") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for fam, (typ, labels) in FAMILIES.items():
        eq(types.get(fam), typ, "# TYPE of " + fam)
        check(helps.get(fam), "no # HELP for " + fam)
        for n, lb, _ in after:
            if family_of(n, types) == fam:
                eq(set(lb) - {"le"}, labels, "labels of %s" % n)
    for fam, typ in types.items():
        check(fam.startswith(("lockd_", "process_")),
              "metric %s without the lockd_ prefix (or Prometheus' standard process_)" % fam)
        check((typ == "counter") == fam.endswith("_total"),
              "%s is a %s: counters, and only counters, end in _total" % (fam, typ))
    check_histograms(types, after)
    info = [lb for n, lb, v in after if n == "lockd_build_info" and v == 1]
    check(len(info) == 1 and info[0]["backend"] == "memory" and info[0]["version"],
          "lockd_build_info: %r" % info)
    routes = {lb["route"] for n, lb, _ in after if n == "lockd_http_requests_total"}
    check(routes <= ROUTES, "unknown route labels %r" % (routes - ROUTES))
    check(value(after, "lockd_waiters") == 0, "lockd_waiters did not come back to 0")

    for name, lb, n in WANT:
        eq(delta(before, after, name, **lb), n, "increase of %s%r" % (name, lb))
    grew = delta(before, after, "lockd_backend_operations_total", backend="memory", op="acquire")
    check(grew >= 4, "lockd_backend_operations_total{op=acquire} grew by %r" % grew)
    grew = delta(before, after, "lockd_backend_operation_duration_seconds_count", backend="memory", op="release")
    check(grew >= 3, "lockd_backend_operation_duration_seconds_count{op=release} grew by %r" % grew)
    eq(delta(before, after, "lockd_backend_errors_total"), 0, "backend errors on the memory store")


# ---------------------------------------------------------------- request ids

def printable_id(rid):
    return rid is not None and 1 <= len(rid) <= 128 and all(33 <= ord(c) <= 126 for c in rid)


@scenario("deploy: X-Request-Id is echoed when the client sends one and generated when it does not",
          backends=["memory"])
def t_request_id(ctx):
    ld = ctx.lockd
    key = ctx.key("rid")
    cases = [("GET", "/healthz", None), ("GET", "/readyz", None), ("GET", "/metrics", None),
             ("POST", "/locks/" + key, {"ttl_ms": 1000}), ("GET", "/locks/" + key, None),
             ("GET", "/locks/", None), ("PATCH", "/locks/" + key, None), ("GET", "/nope", None)]
    for i, (method, path, body) in enumerate(cases):
        rid = "e2e-%d.%s_Z~" % (i, "x" * i)
        r = ld.request(method, path, body, {"X-Request-Id": rid})
        eq(r.header("X-Request-Id"), rid, "X-Request-Id of %s %s (%d)" % (method, path, r.status))
        r = ld.request(method, path, None if method == "POST" else body)
        got = r.header("X-Request-Id")
        check(printable_id(got), "generated X-Request-Id of %s %s: %r" % (method, path, got))
    ids = {ld.request("GET", "/healthz").header("X-Request-Id") for _ in range(5)}
    eq(len(ids), 5, "distinct generated request ids")
    longest = "r" * 128
    eq(ld.request("GET", "/healthz", headers={"X-Request-Id": longest}).header("X-Request-Id"), longest,
       "a 128-character request id")
    for bad in ("r" * 129, "has space", "tab\there"):
        got = ld.request("GET", "/healthz", headers={"X-Request-Id": bad}).header("X-Request-Id")
        check(got != bad and printable_id(got), "X-Request-Id %r: want a generated id, got %r" % (bad, got))


@scenario("deploy: with --log-format json every log line is a JSON object and access lines carry the request id",
          backends=["memory"])
def t_json_logs(ctx):
    ld = ctx.new_lockd(args=["--log-format", "json"])
    key = ctx.key("log")
    eq(ld.request("POST", "/locks/" + key, {"ttl_ms": 1000}, {"X-Request-Id": "log-e2e-42"}).status, 201, "acquire")
    gen = ld.request("GET", "/locks/" + key).header("X-Request-Id")
    check(printable_id(gen), "generated id %r" % gen)
    found = {}
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and len(found) < 2:
        for line in ld.log_tail(200000).splitlines():
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise Fail("log line is not JSON: %r" % line)
            check(isinstance(obj, dict), "log line is not an object: %r" % line)
            vals = [str(v) for v in obj.values()]
            for rid in ("log-e2e-42", gen):
                if rid in vals:
                    found[rid] = obj
        time.sleep(0.05)
    check("log-e2e-42" in found, "no JSON log line carries the client's request id: %s" % ld.log_tail(2000))
    check(gen in found, "no JSON log line carries the generated request id %r" % gen)
    line = json.dumps(found["log-e2e-42"])
    check("201" in line and key in line, "the access line lacks status or path: %s" % line)
    eq(ld.stop(10), 0, "exit code after SIGTERM")

"""tests/e2e/test_examples.py - the examples under examples/ do what their
READMEs say: the cron wrapper run twice at once lets exactly one run the job,
the fenced write refuses a stale holder on a real MariaDB, and the
Kubernetes manifests pass yamllint (deploy's configuration), shellcheck on
the scripts they embed, and a check of their structure.

The example *.sh files are shellchecked by test_deploy's "shellcheck passes
on every shell script in the repository" (every tracked *.sh); this file
only makes sure they are tracked, and checks what that scenario cannot see:
the scripts inside the manifests.

Static checks and the cron run use the memory backend; the fenced write
runs on mysql (ctx.server: MariaDB started by server_mysql.py; this file
uses root over its unix socket, in a database of its own). The scripts get
lockctl from harness.LOCKCTL_BIN's directory, put first in PATH.
"""

import os
import shlex
import shutil
import subprocess
import tempfile
import time
import urllib.parse

import harness
from harness import Fail, check, eq, scenario

ROOT = harness.ROOT
EXAMPLES = os.path.join(ROOT, "examples")
YAMLLINT_CONF = os.path.join(ROOT, "deploy", ".yamllint")
CRONJOB = os.path.join(EXAMPLES, "kubernetes", "cronjob.yaml")
SIDECAR = os.path.join(EXAMPLES, "kubernetes", "deployment-sidecar.yaml")
SERVICE = os.path.join(ROOT, "deploy", "kubernetes", "service.yaml")
NIGHTLY = os.path.join(EXAMPLES, "cron", "nightly-report.sh")
CRONTAB = os.path.join(EXAMPLES, "cron", "crontab")
FENCED = os.path.join(EXAMPLES, "fenced-write")
SCRIPTS = ["examples/cron/nightly-report.sh", "examples/fenced-write/write.sh"]

IMAGE = "lockd:0.1.0"  # the one image name: lockd:<version> (Makefile)
LOCKD_BIN_IN_IMAGE = "/usr/local/bin/lockd"
LOCKD_UID = 10001
SHARED_URL = "http://lockd.lockd.svc:8080"
SIDECAR_URL = "http://127.0.0.1:8080"


# ---------------------------------------------------------------- helpers

def run(cmd, timeout=60, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def load_yaml(text):
    try:
        import yaml
    except ImportError:
        raise Fail("no PyYAML: install Debian's python3-yaml (yamllint depends on it)")
    return [d for d in yaml.safe_load_all(text) if d is not None]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def script_env(extra):
    """The environment the example scripts run with: lockctl first in PATH."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(harness.LOCKCTL_BIN) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    for k in ("LOCKD_TOKEN", "LOCKD_FENCE", "LOCKD_KEY", "LOCKD_AUTH_TOKEN_FILE"):
        env.pop(k, None)
    env.update(extra)
    return env


def lockd_url(ld):
    return "http://127.0.0.1:%d" % ld.port


def inspect(ld, key):
    return ld.request("GET", "/locks/" + urllib.parse.quote(key, safe=""))


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(5)


# ---------------------------------------------------------------- manifests

def pod_specs(docs):
    """(where, pod spec) of every workload: Deployment and CronJob here."""
    for d in docs:
        kind, spec = d.get("kind"), d.get("spec") or {}
        name = "%s/%s" % (kind, (d.get("metadata") or {}).get("name"))
        if kind == "CronJob":
            yield name, ((((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {})
                         .get("spec") or {})
        elif kind in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            yield name, (spec.get("template") or {}).get("spec") or {}


def effective(pod_sc, sc, key):
    return sc[key] if key in sc else pod_sc.get(key)


def security_problems(where, pod, c, uid=None):
    out = []
    psc, sc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    if effective(psc, sc, "runAsNonRoot") is not True:
        out.append("%s: runAsNonRoot must be true" % where)
    got = effective(psc, sc, "runAsUser")
    if not isinstance(got, int) or got == 0 or (uid is not None and got != uid):
        out.append("%s: runAsUser is %r, want %s" % (where, got, uid or "a non-root uid"))
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append("%s: allowPrivilegeEscalation must be false" % where)
    if sc.get("readOnlyRootFilesystem") is not True:
        out.append("%s: readOnlyRootFilesystem must be true" % where)
    if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
        out.append("%s: capabilities.drop must contain ALL" % where)
    if sc.get("privileged") or (sc.get("capabilities") or {}).get("add"):
        out.append("%s: privileged or added capabilities" % where)
    if (effective(psc, sc, "seccompProfile") or {}).get("type") != "RuntimeDefault":
        out.append("%s: seccompProfile must be RuntimeDefault" % where)
    res = c.get("resources") or {}
    for part in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in (res.get(part) or {}):
                out.append("%s: resources.%s.%s missing" % (where, part, r))
    return out


def argv_of(c):
    return [str(a) for a in list(c.get("command") or []) + list(c.get("args") or [])]


def shell_body(argv):
    """The script of an `sh -c SCRIPT` argv (anywhere in it), or None."""
    for i in range(len(argv) - 2):
        if os.path.basename(argv[i]) in ("sh", "bash") and argv[i + 1] == "-c":
            return argv[i + 2]
    return None


def lockctl_calls(argv):
    """Every lockctl command line a container runs: its own argv when that
    is lockctl, else the lockctl lines of its `sh -c` script (continuation
    lines joined, up to the first control operator)."""
    if argv and os.path.basename(argv[0]) == "lockctl":
        return [argv]
    body = shell_body(argv)
    if body is None:
        return []
    calls = []
    for line in body.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, w in enumerate(words):
            if os.path.basename(w) == "lockctl":
                call = []
                for x in words[i:]:
                    if x in ("&", ";", "&&", "||", "|"):
                        break
                    call.append(x)
                calls.append(call)
                break
    return calls


def lockctl_problems(where, call, url):
    """A `lockctl run ... KEY -- CMD` call against url."""
    out = []
    if len(call) < 2 or call[1] != "run":
        return ["%s: %r is not `lockctl run`" % (where, call)]
    if "--" not in call or call.index("--") == len(call) - 1:
        return ["%s: lockctl run without `-- CMD`: %r" % (where, call)]
    opts = call[2:call.index("--")]
    got = None
    for i, a in enumerate(opts):
        if a == "--url" and i + 1 < len(opts):
            got = opts[i + 1]
        elif a.startswith("--url="):
            got = a.split("=", 1)[1]
    if got != url:
        out.append("%s: lockctl run --url is %r, want %s" % (where, got, url))
    return out


def service_url_of_deploy():
    """http://<Service name>.lockd.svc:<port> of deploy/kubernetes/service.yaml
    (applied in the namespace "lockd", as cronjob.yaml says)."""
    for d in load_yaml(read(SERVICE)):
        if d.get("kind") == "Service":
            port = d["spec"]["ports"][0]["port"]
            return "http://%s.lockd.svc:%d" % (d["metadata"]["name"], port)
    raise Fail("deploy/kubernetes/service.yaml has no Service")


def check_cronjob(text):
    """Problems of cronjob.yaml's text (a list; empty when fine)."""
    docs = load_yaml(text)
    out = []
    kinds = [d.get("kind") for d in docs]
    if kinds != ["CronJob"] or docs[0].get("apiVersion") != "batch/v1":
        return ["cronjob.yaml: want one batch/v1 CronJob, got %r" % kinds]
    if docs[0]["spec"].get("concurrencyPolicy") != "Forbid":
        out.append("CronJob: concurrencyPolicy is not Forbid")
    if "concurrencyPolicy" not in text.split("---")[0] or "cluster" not in text.split("---")[0]:
        out.append("cronjob.yaml: its comment must say why Forbid is not enough (other clusters...)")
    calls = 0
    for where, pod in pod_specs(docs):
        out += pod_problems(where, pod)
        for c in pod.get("containers") or []:
            cw = "%s container %s" % (where, c.get("name"))
            out += security_problems(cw, pod, c)
            if c.get("image") != IMAGE:
                out.append("%s: image %r, want %s" % (cw, c.get("image"), IMAGE))
            for call in lockctl_calls(argv_of(c)):
                calls += 1
                out += lockctl_problems(cw, call, SHARED_URL)
        if pod.get("restartPolicy") not in ("Never", "OnFailure"):
            out.append("%s: restartPolicy %r" % (where, pod.get("restartPolicy")))
    if calls == 0:
        out.append("CronJob: no container runs lockctl run")
    return out


def pod_problems(where, pod):
    out = []
    if pod.get("enableServiceLinks") is not False:
        out.append("%s: enableServiceLinks must be false" % where)
    if pod.get("automountServiceAccountToken") is not False:
        out.append("%s: automountServiceAccountToken must be false" % where)
    return out


def sidecar_lockd_problems(where, c, secrets):
    out = []
    env = {e["name"]: e for e in c.get("env") or []}
    if (env.get("LOCKD_LISTEN") or {}).get("value") != "127.0.0.1:8080":
        out.append("%s: LOCKD_LISTEN must be 127.0.0.1:8080 (loopback only)" % where)
    ref = ((env.get("LOCKD_BACKEND") or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
    if ref.get("key") not in (secrets.get(ref.get("name")) or {}):
        out.append("%s: LOCKD_BACKEND's secretKeyRef %r is not in the file" % (where, ref))
    for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        cmd = ((c.get(kind) or {}).get("exec") or {}).get("command")
        want = [LOCKD_BIN_IN_IMAGE, "--check-health", SIDECAR_URL + path]
        if cmd != want:
            out.append("%s: %s runs %r, want exec %r" % (where, kind, cmd, want))
    stop = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
    if not stop or stop[0] != "/bin/sleep":
        out.append("%s: preStop is not /bin/sleep (the app releases while lockd serves)" % where)
    return out


def check_sidecar(text):
    """Problems of deployment-sidecar.yaml's text (empty when fine)."""
    docs = load_yaml(text)
    out = []
    kinds = sorted(d.get("kind") for d in docs)
    if kinds != ["Deployment", "Secret"]:
        return ["deployment-sidecar.yaml: want a Deployment and a Secret, got %r" % kinds]
    secrets = {d["metadata"]["name"]: d.get("stringData") or d.get("data") or {}
               for d in docs if d["kind"] == "Secret"}
    for where, pod in pod_specs(docs):
        out += pod_problems(where, pod)
        sidecars = workers = 0
        for c in pod.get("containers") or []:
            cw = "%s container %s" % (where, c.get("name"))
            if c.get("image") != IMAGE:
                out.append("%s: image %r, want %s" % (cw, c.get("image"), IMAGE))
            calls = lockctl_calls(argv_of(c))
            if calls:
                workers += 1
                out += security_problems(cw, pod, c)
                for call in calls:
                    out += lockctl_problems(cw, call, SIDECAR_URL)
            elif not argv_of(c):  # the image's entrypoint: lockd
                sidecars += 1
                out += security_problems(cw, pod, c, LOCKD_UID)
                out += sidecar_lockd_problems(cw, c, secrets)
            else:
                out.append("%s: neither lockd nor a lockctl run worker: %r" % (cw, argv_of(c)))
        if sidecars != 1 or workers != 1:
            out.append("%s: want one lockd sidecar and one lockctl worker, got %d and %d"
                       % (where, sidecars, workers))
    return out


# A manifest, a change that breaks it, and what the check must then say.
MUTANTS = [
    (CRONJOB, check_cronjob, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false",
     "readOnlyRootFilesystem must be true"),
    (CRONJOB, check_cronjob, "                - --\n", "", "without `-- CMD`"),
    (CRONJOB, check_cronjob, "lockd.lockd.svc:8080", "lockd.lockd.svc:9090", "--url is"),
    (CRONJOB, check_cronjob, "\n  concurrencyPolicy: Forbid", "\n  concurrencyPolicy: Allow", "not Forbid"),
    (CRONJOB, check_cronjob, "image: lockd:0.1.0", "image: lockd:dev", "image 'lockd:dev'"),
    (CRONJOB, check_cronjob, "              resources:\n", "              resourcez:\n",
     "resources.requests.cpu missing"),
    (SIDECAR, check_sidecar, 'value: "127.0.0.1:8080"', 'value: "0.0.0.0:8080"', "loopback only"),
    (SIDECAR, check_sidecar, '"--check-health", "http://127.0.0.1:8080/readyz"',
     '"--check-health", "http://127.0.0.1:8080/healthz"', "readinessProbe runs"),
    (SIDECAR, check_sidecar, 'drop: ["ALL"]', 'drop: ["NET_RAW"]', "capabilities.drop must contain ALL"),
    (SIDECAR, check_sidecar, "runAsUser: 10001", "runAsUser: 10003", "runAsUser is 10003, want 10001"),
    (SIDECAR, check_sidecar, "      type: RuntimeDefault\n        - name: lockd", "      type: Unconfined\n        - name: lockd",
     "container worker: seccompProfile"),
    (SIDECAR, check_sidecar, 'worker/batch -- /bin/sh', 'worker/batch /bin/sh', "without `-- CMD`"),
    (SIDECAR, check_sidecar, "--url http://127.0.0.1:8080", "--url http://lockd:8080", "--url is"),
    (SIDECAR, check_sidecar, "enableServiceLinks: false", "enableServiceLinks: true", "enableServiceLinks"),
]


# ---------------------------------------------------------------- static checks

@scenario("examples: yamllint with deploy's configuration passes on every YAML file under examples/",
          backends=["memory"])
def t_yamllint(ctx):
    files = sorted(os.path.relpath(os.path.join(d, n), ROOT)
                   for d, _, names in os.walk(EXAMPLES)
                   for n in names if n.endswith((".yaml", ".yml")))
    check(len(files) >= 2, "too few YAML files under examples/: %r" % files)
    r = run(["yamllint", "-f", "parsable", "-c", YAMLLINT_CONF] + files, cwd=ROOT)
    check(r.returncode == 0, "yamllint:\n" + r.stdout + r.stderr)
    # the same run does catch a broken copy of an example
    bad = os.path.join(ctx.tmpdir, "cronjob-bad.yaml")
    with open(bad, "w", encoding="utf-8") as f:
        f.write(read(CRONJOB).replace("  schedule:", "  schedule: x\n  schedule:", 1))
    r = run(["yamllint", "-f", "parsable", "-c", YAMLLINT_CONF, bad])
    check(r.returncode != 0 and "key-duplicates" in r.stdout, "yamllint accepted a duplicate key: " + r.stdout)


@scenario("examples: the CronJob and the sidecar Deployment run lockctl run with -- in locked-down lockd:0.1.0 "
          "containers, the sidecar probed with lockd --check-health", backends=["memory"])
def t_manifests(ctx):
    eq(service_url_of_deploy(), SHARED_URL, "the shared service's URL (deploy/kubernetes/service.yaml)")
    for path, checker in ((CRONJOB, check_cronjob), (SIDECAR, check_sidecar)):
        problems = checker(read(path))
        check(not problems, "%s:\n  %s" % (os.path.relpath(path, ROOT), "\n  ".join(problems)))
    for path, checker, old, new, want in MUTANTS:
        text = read(path)
        check(old in text, "mutant: %r not in %s" % (old, path))
        problems = checker(text.replace(old, new, 1))
        check(any(want in p for p in problems), "%s with %r -> %r: want a problem saying %r, got %r"
              % (os.path.basename(path), old, new, want, problems))


@scenario("examples: the scripts the manifests embed pass shellcheck, and the example *.sh are tracked "
          "for deploy's shellcheck", backends=["memory"])
def t_shellcheck(ctx):
    bodies = []
    for path in (CRONJOB, SIDECAR):
        for where, pod in pod_specs(load_yaml(read(path))):
            for c in pod.get("containers") or []:
                body = shell_body(argv_of(c))
                if body is not None:
                    bodies.append(("%s %s" % (os.path.basename(path), c.get("name")), body))
                for e in c.get("env") or []:
                    if e.get("name") == "BATCH":  # the worker runs sh -c "$BATCH"
                        bodies.append(("%s BATCH" % os.path.basename(path), e["value"]))
    eq(len(bodies), 3, "embedded scripts found (CronJob, worker loop, BATCH)")
    bodies.append(("a broken script (must fail)", "echo $1\ncd /tmp\n"))
    for name, body in bodies:
        f = os.path.join(ctx.tmpdir, "embedded.sh")
        with open(f, "w", encoding="utf-8") as fh:
            fh.write("#!/bin/sh\n" + body)
        r = run(["shellcheck", f])
        if name.startswith("a broken"):
            check(r.returncode != 0, "shellcheck passed a script with an unquoted $1")
        else:
            check(r.returncode == 0, "shellcheck on %s:\n%s%s" % (name, r.stdout, r.stderr))
    r = run(["git", "-C", ROOT, "ls-files", "--error-unmatch"] + SCRIPTS)
    check(r.returncode == 0, "the example scripts are not tracked, so deploy's shellcheck scenario "
          "does not see them: git add them (%s)" % r.stderr.strip())
    for s in SCRIPTS:
        check(os.access(os.path.join(ROOT, s), os.X_OK), "%s is not executable" % s)
    fields = [ln.split(None, 5) for ln in read(CRONTAB).splitlines() if ln.strip() and not ln.startswith("#")]
    env = dict(f[0].split("=", 1) for f in fields if "=" in f[0])
    jobs = [f for f in fields if "=" not in f[0]]
    check(env.get("LOCKD_URL", "").startswith("http://"), "crontab sets no LOCKD_URL: %r" % env)
    check(len(jobs) == 1 and len(jobs[0]) == 6 and "nightly-report.sh" in jobs[0][5],
          "crontab: want one line of 5 time fields and nightly-report.sh: %r" % jobs)


# ---------------------------------------------------------------- cron

def wait_first_exit(procs, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, p in enumerate(procs):
            if p.poll() is not None:
                return i
        time.sleep(0.02)
    raise Fail("neither nightly-report.sh exited within %.0f s" % timeout)


def communicate(p, timeout=15):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise Fail("nightly-report.sh still running after %d s: %s" % (timeout, err))
    return p.returncode, out, err


@scenario("examples: nightly-report.sh started twice at once runs the job once; the other logs "
          "\"already running\" and exits 0", backends=["memory"])
def t_cron_once(ctx):
    ld = ctx.lockd
    work = os.path.join(ctx.tmpdir, "nightly-work-%d" % ld.port)
    go = work + ".go"
    # the job: records its start, holds on until the test says go (bounded)
    job = ["sh", "-c", 'echo "start $LOCKD_FENCE" >>"$W"; i=0; '
           'while [ ! -e "$G" ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done; echo end >>"$W"']
    env = script_env({"LOCKD_URL": lockd_url(ld), "W": work, "G": go})
    procs = [subprocess.Popen([NIGHTLY] + job, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, stdin=subprocess.DEVNULL) for _ in range(2)]
    try:
        first = wait_first_exit(procs, 10)
        rc, _, err = communicate(procs[first])
        eq(rc, 0, "exit status of the run that found the lock held (stderr: %s)" % err.strip())
        check("already running" in err, "the skipped run did not log \"already running\": %r" % err)
        check("got the lock" not in err, "the skipped run says it got the lock: %r" % err)
        other = procs[1 - first]
        check(other.poll() is None, "the job's run ended before the job was let go")
        r = inspect(ld, "nightly-report")
        eq(r.status, 200, "GET /locks/nightly-report while the job runs")
        eq(r.json.get("owner"), os.uname().nodename, "the lock's owner (the host name)")
        fence = r.json.get("fence")
        open(go, "w").close()
        rc, _, err = communicate(other)
        eq(rc, 0, "exit status of the run that did the job (stderr: %s)" % err.strip())
        check("got the lock (fence %s)" % fence in err and "done" in err, "the job's run logged %r" % err)
        eq(read(work), "start %s\nend\n" % fence, "the job's record (one run, under the lock's fence)")
        eq(inspect(ld, "nightly-report").status, 404, "GET /locks/nightly-report after the job")

        # a job that fails with 1 is not taken for "already running"
        r = run([NIGHTLY, "sh", "-c", "exit 1"], env=env, timeout=15)
        eq(r.returncode, 2, "exit status of a job that exited 1 (stderr: %s)" % r.stderr.strip())
        check("already running" not in r.stderr, "a failed job logged as a skip: %r" % r.stderr)
        # lockd unreachable: the job does not run, and the run fails
        env["LOCKD_URL"] = "http://127.0.0.1:%d" % harness.free_port()
        r = run([NIGHTLY, "sh", "-c", 'echo ran >>"$W"'], env=env, timeout=30)
        eq(r.returncode, 3, "exit status with lockd unreachable (stderr: %s)" % r.stderr.strip())
        eq(read(work), "start %s\nend\n" % fence, "the job's record after the unreachable run")
    finally:
        kill_all(procs)


# ---------------------------------------------------------------- fenced write

class Db:
    """A database of our own on the suite's MariaDB, as root over its socket."""

    def __init__(self, ctx):
        self.server = ctx.server
        self.name = "examples_%d_%d" % (os.getpid(), int(time.time() * 1000) % 10**9)
        self.client = shutil.which("mariadb") or shutil.which("mysql")
        check(self.client is not None, "no mariadb/mysql client")
        self.cnf = os.path.join(ctx.tmpdir, self.name + ".cnf")
        with open(self.cnf, "w") as f:
            f.write("[client]\nsocket=%s\nuser=root\nconnect-timeout=5\n" % self.server.socket)

    def create(self, schema):
        self.server.sql("CREATE DATABASE %s" % self.name, database=None)
        with open(schema, "rb") as f:
            r = subprocess.run([self.client, "--defaults-extra-file=" + self.cnf, self.name],
                               stdin=f, capture_output=True, timeout=30)
        check(r.returncode == 0, "loading schema.sql: %s" % r.stderr.decode("utf-8", "replace"))

    def row(self, id_):
        # HEX: the client's batch output escapes backslashes
        rows = self.server.sql("SELECT HEX(body), fence FROM documents WHERE id = %d" % id_, database=self.name)
        eq(len(rows), 1, "rows with id %d" % id_)
        return bytes.fromhex(rows[0][0]).decode("utf-8"), int(rows[0][1])

    def drop(self):
        self.server.sql("DROP DATABASE IF EXISTS %s" % self.name, database=None)


def written_fence(stdout):
    """N of write.sh's "documents/ID written under fence N"."""
    words = stdout.split()
    check("written" in words and words[-1].isdigit(), "write.sh printed %r" % stdout)
    return int(words[-1])


@scenario("examples: fenced write: write.sh writes under the lock's fence, and a holder whose lock "
          "expired is refused (0 rows, exit 10) after a newer holder wrote", backends=["mysql"])
def t_fenced_write(ctx):
    ld = ctx.lockd
    db = Db(ctx)
    write = os.path.join(FENCED, "write.sh")
    env = script_env({"LOCKD_URL": lockd_url(ld), "MYSQL_CNF": db.cnf, "DB": db.name,
                      "MYSQL": db.client})
    db.create(os.path.join(FENCED, "schema.sql"))
    try:
        eq(db.row(1), ("nobody has written this yet", 0), "the row schema.sql inserts")
        r = run([write, "1", "first version"], env=env, timeout=30)
        eq(r.returncode, 0, "write.sh 1 (stderr: %s)" % r.stderr.strip())
        f1 = written_fence(r.stdout)
        eq(db.row(1), ("first version", f1), "the row after the first write")
        eq(inspect(ld, "documents/1").status, 404, "the lock after write.sh (released)")

        # A holds the lock with a 1 s TTL and pauses past it
        r = ld.request("POST", "/locks/" + urllib.parse.quote("documents/1", safe=""), {"ttl_ms": 1000})
        eq(r.status, 201, "A's acquire")
        fa = r.json["fence"]
        check(fa > f1, "A's fence %d is not above the first write's %d" % (fa, f1))
        deadline = time.monotonic() + 5
        while inspect(ld, "documents/1").status != 404:
            check(time.monotonic() < deadline, "A's lock did not expire within 5 s")
            time.sleep(0.05)
        # B takes it (a newer fence) and writes, quotes and backslashes intact
        b_text = "B's \\ version"
        r = run([write, "1", b_text], env=env, timeout=30)
        eq(r.returncode, 0, "B's write.sh (stderr: %s)" % r.stderr.strip())
        fb = written_fence(r.stdout)
        check(fb > fa, "B's fence %d is not above A's %d" % (fb, fa))
        eq(db.row(1), (b_text, fb), "the row after B's write")
        # A wakes up and writes with its old fence: refused, loudly
        env_a = dict(env, LOCKD_FENCE=str(fa))
        r = run([write, "--under-lock", "1", "A's stale version"], env=env_a, timeout=30)
        eq(r.returncode, 10, "A's stale write.sh (stdout %r, stderr %r)" % (r.stdout, r.stderr))
        check("REFUSED" in r.stderr and str(fb) in r.stderr and str(fa) in r.stderr,
              "A's refusal does not name both fences: %r" % r.stderr)
        eq(db.row(1), (b_text, fb), "the row after A's stale write (B's, untouched)")
        # a row that does not exist is not taken for a newer holder
        r = run([write, "--under-lock", "2", "x"], env=dict(env, LOCKD_FENCE=str(fb + 1)), timeout=30)
        eq(r.returncode, 11, "write.sh to a missing row (stderr %r)" % r.stderr)
    finally:
        db.drop()


# ---------------------------------------------------------------- sidecar worker loop

def worker_loop_script():
    """The worker container's sh -c script of deployment-sidecar.yaml."""
    for _, pod in pod_specs(load_yaml(read(SIDECAR))):
        for c in pod.get("containers") or []:
            body = shell_body(argv_of(c))
            if body is not None and lockctl_calls(argv_of(c)):
                return body
    raise Fail("deployment-sidecar.yaml has no worker loop")


@scenario("examples: the sidecar Deployment's worker loop, two at once, runs one batch at a time and "
          "on SIGTERM stops a long batch at once, leaving the lock free", backends=["memory"])
def t_worker_loop(ctx):
    ld = ctx.lockd
    body = worker_loop_script()
    for old in ("/usr/local/bin/lockctl", SIDECAR_URL):
        check(old in body, "the worker loop does not name %s" % old)
    body = body.replace("/usr/local/bin/lockctl", harness.LOCKCTL_BIN).replace(SIDECAR_URL, lockd_url(ld))
    log = os.path.join(ctx.tmpdir, "batches-%d" % ld.port)
    # short batches, until the test asks for long ones (a batch SIGTERM must cut short)
    batch = ('echo "start $POD_NAME $LOCKD_FENCE" >>"$W"; '
             'if [ -e "$W.long" ]; then sleep 20; else sleep 0.2; fi; echo "end $POD_NAME" >>"$W"')

    def lines():
        return read(log).splitlines() if os.path.exists(log) else []

    outfiles = [os.path.join(ctx.tmpdir, "loop-%s-%d" % (pod, ld.port)) for pod in ("pod-a", "pod-b")]

    def seen():
        """The batches so far and what each loop printed (lockctl's
        messages, the loop's exit notes), with the time: for a failure."""
        return "%r; loops printed %r at +%.1f s" % (
            lines(), [read(f) if os.path.exists(f) else "" for f in outfiles], time.monotonic() - t0)

    procs = []
    t0 = time.monotonic()
    try:
        for pod, out in zip(("pod-a", "pod-b"), outfiles):
            env = script_env({"POD_NAME": pod, "BATCH": batch, "W": log})
            with open(out, "w") as f:
                procs.append(subprocess.Popen(["/bin/sh", "-c", body], env=env, stdin=subprocess.DEVNULL,
                                              stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 10
        while len({ln.split()[1] for ln in lines() if ln.startswith("end ")}) < 2 or len(lines()) < 6:
            check(time.monotonic() < deadline, "two loops ran too few batches in 10 s: %s" % seen())
            time.sleep(0.05)
        open(log + ".long", "w").close()
        n = len(lines())
        deadline = time.monotonic() + 5
        while not [ln for ln in lines()[n:] if ln.startswith("start ")]:
            check(time.monotonic() < deadline, "no batch started within 5 s after the short ones: %s" % seen())
            time.sleep(0.05)
        stopped = time.monotonic()
        for p in procs:
            p.send_signal(15)
        outs = []
        for p, out in zip(procs, outfiles):
            try:
                p.wait(timeout=max(0.1, stopped + 5 - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise Fail("a worker loop still runs 5 s after SIGTERM, in a 20 s batch: %s" % seen())
            outs.append(read(out))
        got = lines()
        check(got[-1].startswith("start "), "the long batch was not cut short: %r" % got)
        fences = []
        for i, ln in enumerate(got):
            if i % 2 == 0:
                check(ln.startswith("start "), "batches overlap: line %d is %r in %r" % (i, ln, got))
                fences.append(int(ln.split()[2]))
            else:
                check(ln == "end " + got[i - 1].split()[1], "batches overlap: line %d is %r in %r" % (i, ln, got))
        eq(fences, sorted(set(fences)), "the batches' fences (one grant each, increasing)")
        r = inspect(ld, "worker/batch")
        eq(r.status, 404, "worker/batch after both loops stopped (outputs %r): %r" % (outs, r))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait(5)


# ---------------------------------------------------------------- the CronJob's command

def cronjob_argv(url, body):
    """The CronJob container's command line, run here: lockctl from the
    build, url for the shared service, $(POD_NAME) expanded as Kubernetes
    would, and body for the report's script."""
    for _, pod in pod_specs(load_yaml(read(CRONJOB))):
        for c in pod.get("containers") or []:
            argv = argv_of(c)
            if lockctl_calls(argv) == [argv]:
                check(argv[-3:-1] == ["/bin/sh", "-c"], "the CronJob's command does not end in sh -c SCRIPT")
                argv = [url if a == SHARED_URL else "cronjob-pod" if a == "$(POD_NAME)" else a for a in argv]
                return [harness.LOCKCTL_BIN] + argv[1:-1] + [body]
    raise Fail("cronjob.yaml: no container runs lockctl")


@scenario("examples: the CronJob's command runs the report when the lock is free and succeeds without "
          "running it when another cluster holds the lock", backends=["memory"])
def t_cronjob_command(ctx):
    ld = ctx.lockd
    work = os.path.join(ctx.tmpdir, "cronjob-work-%d" % ld.port)
    argv = cronjob_argv(lockd_url(ld), 'echo "ran $LOCKD_FENCE" >>"$W"')
    env = script_env({"W": work})
    r = run(argv, env=env, timeout=30)
    eq(r.returncode, 0, "the CronJob's command with the lock free (stderr: %s)" % r.stderr.strip())
    check(read(work).startswith("ran "), "the report did not run: %r" % read(work))
    eq(inspect(ld, "nightly-report").status, 404, "the lock after the report")
    held = ld.request("POST", "/locks/nightly-report", {"ttl_ms": 10000, "owner": "other-cluster"})
    eq(held.status, 201, "the other cluster's acquire")
    try:
        r = run(argv, env=env, timeout=30)
        eq(r.returncode, 0, "the CronJob's command with the lock held elsewhere (stderr: %s)" % r.stderr.strip())
        check("held" in r.stderr, "lockctl did not say the lock is held: %r" % r.stderr)
        eq(read(work).count("ran "), 1, "reports run (the held run must not run it)")
    finally:
        ld.request("DELETE", "/locks/nightly-report", None, {"Lock-Token": held.json["token"]})

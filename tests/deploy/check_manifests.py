#!/usr/bin/env python3
"""tests/deploy/check_manifests.py - checks the deployment files against what
lockd needs to run safely: the Dockerfile, the Kubernetes manifests and the
compose playground.

  check_manifests.py [--root DIR] [--dockerfile F] [--sidecar F] [--service F]
                     [--compose F] [--shellcheck]

Every lockd container (image named lockd) must have a liveness probe on
/healthz and a readiness probe on /readyz that reach the address lockd
listens on (httpGet on the container port when it listens on all
interfaces, `lockd --check-health http://127.0.0.1:PORT/...` when it listens
on loopback only) in the scheme it serves (HTTPS with LOCKD_TLS_CERT or
--tls-cert), a preStop and grace period that fit its 10 s drain, and
runs as uid 10001. The files lockd reads (TLS certificate, key and client
CA, auth and token files, the store's password_file=) lie on volumes the
container mounts; the TLS certificate comes with its key, the client CA
with both; a shared service's backend URL carries no password. Every container has resource requests and limits and a
locked-down security context. ConfigMaps and Secrets referenced exist; the
Service and PodDisruptionBudget select the pods. Prints one line per problem
and exits 1 if there is any, else prints "ok ..." lines and exits 0.

Needs PyYAML (Debian: python3-yaml, which yamllint depends on).
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from urllib.parse import urlsplit

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCKD_UID = 10001
DRAIN_S = 10  # lockd exits within 10 s of SIGTERM
LOCKD_BIN = "/usr/local/bin/lockd"
SLEEP_BINS = ("/bin/sleep", "/usr/bin/sleep")  # in the debian:12-slim runtime image
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod")

problems = []


def problem(where, msg):
    problems.append("%s: %s" % (where, msg))


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# ---------------------------------------------------------------- Dockerfile

def dockerfile_facts(path):
    """Instructions of the Dockerfile, by stage: [(from_line, [(INSTR, args)])]."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"\\\n", " ", text)  # line continuations
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        args = args.strip()
        if instr == "FROM":
            stages.append((args, []))
        elif stages:
            stages[-1][1].append((instr, args))
    return stages


def check_dockerfile(path):
    where = os.path.relpath(path, ROOT)
    stages = dockerfile_facts(path)
    if len(stages) < 2:
        problem(where, "want a multi-stage build (build stage + runtime stage), got %d stage(s)" % len(stages))
        return {}
    names = set()
    for frm, _ in stages:
        w = frm.split()
        img = [x for x in w if not x.startswith("--")][0]
        if img not in ("debian:12-slim", "debian:bookworm-slim") and img not in names:
            problem(where, "FROM %s: only debian:12-slim (or an earlier stage) exists here" % img)
        if len(w) >= 3 and w[-2].upper() == "AS":
            names.add(w[-1])
    build = " ".join(a for _, ins in stages[:-1] for i, a in ins if i == "RUN")
    if not re.search(r"\bmake\b", build):
        problem(where, "no build stage runs make")
    final = stages[-1][1]
    facts = {}
    for instr, args in final:
        facts.setdefault(instr, []).append(args)
    runs = " ".join(facts.get("RUN", []))
    for bad in ("-dev", "gcc", "make ", "build-essential"):
        if re.search(r"apt-get install[^&;]*" + re.escape(bad), runs):
            problem(where, "runtime stage installs %r: runtime libraries only" % bad.strip())
    if "apt-get install" in runs:
        if "--no-install-recommends" not in runs:
            problem(where, "runtime apt-get install without --no-install-recommends")
        if "rm -rf /var/lib/apt/lists" not in runs:
            problem(where, "runtime stage keeps the apt lists")
    user = (facts.get("USER") or [""])[-1]
    if user != "%d:%d" % (LOCKD_UID, LOCKD_UID):
        problem(where, "USER is %r, want %d:%d" % (user, LOCKD_UID, LOCKD_UID))
    env = {}
    for args in facts.get("ENV", []):
        for part in shlex.split(args):
            k, eq, v = part.partition("=")
            if eq:
                env[k] = v
    if env.get("LOCKD_LISTEN") != "0.0.0.0:8080":
        problem(where, "ENV LOCKD_LISTEN is %r, want 0.0.0.0:8080" % env.get("LOCKD_LISTEN"))
    if "8080" not in " ".join(facts.get("EXPOSE", [])).split():
        problem(where, "EXPOSE 8080 missing")
    ep = (facts.get("ENTRYPOINT") or [""])[-1]
    if ep.replace(" ", "") != '["%s"]' % LOCKD_BIN:
        problem(where, "ENTRYPOINT is %r, want exec form [\"%s\"] (lockd is PID 1 and gets SIGTERM)" % (ep, LOCKD_BIN))
    hc = (facts.get("HEALTHCHECK") or [""])[-1]
    m = re.search(r"\bCMD\s+(\[.*\])\s*$", hc)
    if m is None:
        problem(where, "HEALTHCHECK missing or not in exec form (the image has no curl)")
    else:
        argv = yaml.safe_load(m.group(1))
        if argv[:2] != [LOCKD_BIN, "--check-health"]:
            problem(where, "HEALTHCHECK runs %r, want %s --check-health" % (argv, LOCKD_BIN))
    return {"env": env}


# ---------------------------------------------------------------- Kubernetes

def is_lockd_image(image):
    name = (image or "").split("@")[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":")[0] == "lockd"


def index_objects(docs):
    objs = {}
    for d in docs:
        objs[(d.get("kind"), (d.get("metadata") or {}).get("name"))] = d
    return objs


def config_value(objs, kind, name, key):
    """Value of key in the ConfigMap/Secret of that name in the same file,
    or None when the object or the key is missing."""
    obj = objs.get((kind, name))
    if obj is None:
        return None
    for field in ("data", "stringData"):
        if key in (obj.get(field) or {}):
            return str(obj[field][key])
    return None


def container_env(c, objs, where):
    """The environment the container starts with: envFrom first, then env
    (env wins, as in Kubernetes). Values from Secrets are returned as is."""
    env = {}
    for ef in c.get("envFrom") or []:
        for kind, ref in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if ref in ef:
                name = ef[ref].get("name")
                obj = objs.get((kind, name))
                if obj is None:
                    if not ef[ref].get("optional"):
                        problem(where, "envFrom %s %r is not in this file" % (kind, name))
                    continue
                for field in ("data", "stringData"):
                    for k, v in (obj.get(field) or {}).items():
                        env[ef.get("prefix", "") + k] = str(v)
    for e in c.get("env") or []:
        name = e.get("name")
        if "value" in e:
            env[name] = str(e["value"])
            continue
        vf = e.get("valueFrom") or {}
        for kind, ref in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
            if ref in vf:
                r = vf[ref]
                v = config_value(objs, kind, r.get("name"), r.get("key"))
                if v is None and not r.get("optional"):
                    problem(where, "env %s: %s %r key %r is not in this file" % (name, kind, r.get("name"), r.get("key")))
                if v is not None:
                    env[name] = v
    return env


def listen_of(c, env, image_env):
    """(host, port) lockd listens on: --listen flag, else LOCKD_LISTEN, else
    the image's ENV."""
    addr = None
    argv = list(c.get("command") or []) + list(c.get("args") or [])
    for i, a in enumerate(argv):
        if a == "--listen" and i + 1 < len(argv):
            addr = argv[i + 1]
        elif a.startswith("--listen="):
            addr = a.split("=", 1)[1]
    if addr is None:
        addr = env.get("LOCKD_LISTEN", image_env.get("LOCKD_LISTEN", "127.0.0.1:8080"))
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def resolve_port(c, port):
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in c.get("ports") or []:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def check_probe(where, c, probe, kind, path, host, port, tls=False):
    """kind: livenessProbe/readinessProbe; path: /healthz or /readyz;
    tls: lockd serves HTTPS only."""
    scheme = "https" if tls else "http"
    if not probe:
        problem(where, "no %s" % kind)
        return
    loopback = host not in ("0.0.0.0", "::", "")
    if "httpGet" in probe:
        hg = probe["httpGet"]
        if hg.get("path") != path:
            problem(where, "%s GETs %r, want %s" % (kind, hg.get("path"), path))
        p = resolve_port(c, hg.get("port"))
        if p != port:
            problem(where, "%s port %r is %r, lockd listens on %d" % (kind, hg.get("port"), p, port))
        if hg.get("host"):
            problem(where, "%s: host must stay the default (pod IP)" % kind)
        if hg.get("scheme", "HTTP") != scheme.upper():
            problem(where, "%s scheme is %r, lockd serves %s%s" % (kind, hg.get("scheme", "HTTP"), scheme.upper(),
                                                                 " (LOCKD_TLS_CERT)" if tls else ""))
        if loopback:
            problem(where, "%s is httpGet, but lockd listens on %s only: the kubelet probes the pod IP; "
                    "use exec [%s, --check-health, %s://127.0.0.1:%d%s]" % (kind, host, LOCKD_BIN, scheme, port, path))
    elif "exec" in probe:
        argv = probe["exec"].get("command") or []
        if argv[:2] != [LOCKD_BIN, "--check-health"]:
            problem(where, "%s runs %r, want %s --check-health URL" % (kind, argv, LOCKD_BIN))
            return
        if len(argv) == 2:
            want_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
            url = "%s://%s:%d/healthz" % (scheme, want_host, port)  # lockd's default
        else:
            url = argv[2]
        u = urlsplit(url)
        probe_host = u.hostname
        ok_hosts = ("127.0.0.1", "localhost") if host in ("0.0.0.0", "", "127.0.0.1") else (host,)
        if u.scheme != scheme or probe_host not in ok_hosts or u.port != port or u.path != path:
            problem(where, "%s GETs %s, want %s://%s:%d%s" % (kind, url, scheme, ok_hosts[0], port, path))
    else:
        problem(where, "%s is neither httpGet nor exec" % kind)
        return
    for k in ("periodSeconds", "timeoutSeconds"):
        if not isinstance(probe.get(k), int) or probe[k] < 1:
            problem(where, "%s.%s must be set (>= 1)" % (kind, k))


FILE_VARS = ("LOCKD_TLS_CERT", "LOCKD_TLS_KEY", "LOCKD_TLS_CLIENT_CA", "LOCKD_AUTH_FILE", "LOCKD_AUTH_TOKEN_FILE",
             "LOCKD_ADMIN_TOKEN_FILE")


def flag_or_env(c, env, var):
    """The value of --<flag> (from the LOCKD_ variable's name) in the
    container's argv, else of the variable, else None."""
    flag = "--" + var[len("LOCKD_"):].lower().replace("_", "-")
    argv = list(c.get("command") or []) + list(c.get("args") or [])
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return env.get(var)


def check_files(where, pod, c, env, shared):
    """The files lockd is told to read are on volumes the container mounts;
    TLS settings come in working sets; a shared service keeps the store's
    password out of its URL."""
    volumes = {v.get("name") for v in pod.get("volumes") or []}
    mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") in volumes]
    files = [(v, flag_or_env(c, env, v)) for v in FILE_VARS]
    backend = flag_or_env(c, env, "LOCKD_BACKEND") or ""
    for opt in ("password_file", "sentinel_password_file"):
        m = re.search(r"[?&]%s=([^&]+)" % opt, backend)
        if m:
            files.append((opt, m.group(1)))
    for name, path in files:
        if not path:
            continue
        mp = [m["mountPath"].rstrip("/") for m in mounts
              if path.startswith(m.get("mountPath", "").rstrip("/") + "/")]
        if not mp:
            problem(where, "%s=%s is on no volume the container mounts" % (name, path))
    have = {v: bool(p) for v, p in files if v in FILE_VARS}
    if have["LOCKD_TLS_CERT"] != have["LOCKD_TLS_KEY"]:
        problem(where, "LOCKD_TLS_CERT and LOCKD_TLS_KEY: both or neither (lockd exits 2)")
    if have["LOCKD_TLS_CLIENT_CA"] and not have["LOCKD_TLS_CERT"]:
        problem(where, "LOCKD_TLS_CLIENT_CA without LOCKD_TLS_CERT (lockd exits 2)")
    netloc = urlsplit(backend).netloc if "://" in backend else ""
    if shared and ":" in netloc.rpartition("@")[0]:
        problem(where, "the backend URL carries a password: use password_file= (a Secret volume) or "
                "LOCKD_BACKEND_PASSWORD")
    return have["LOCKD_TLS_CERT"]


def effective_sc(pod_sc, c_sc, key):
    if key in (c_sc or {}):
        return c_sc[key]
    return (pod_sc or {}).get(key)


def check_security(where, pod, c, lockd):
    psc = pod.get("securityContext") or {}
    sc = c.get("securityContext") or {}
    if effective_sc(psc, sc, "runAsNonRoot") is not True:
        problem(where, "securityContext.runAsNonRoot must be true")
    uid = effective_sc(psc, sc, "runAsUser")
    if lockd and uid != LOCKD_UID:
        problem(where, "runAsUser is %r, want %d (the image's user)" % (uid, LOCKD_UID))
    if uid == 0:
        problem(where, "runAsUser 0")
    if sc.get("allowPrivilegeEscalation") is not False:
        problem(where, "securityContext.allowPrivilegeEscalation must be false")
    if sc.get("readOnlyRootFilesystem") is not True:
        problem(where, "securityContext.readOnlyRootFilesystem must be true")
    if sc.get("privileged"):
        problem(where, "securityContext.privileged must not be set")
    drop = ((sc.get("capabilities") or {}).get("drop")) or []
    if "ALL" not in drop:
        problem(where, "securityContext.capabilities.drop must contain ALL")
    if (sc.get("capabilities") or {}).get("add"):
        problem(where, "securityContext.capabilities.add must be empty")
    seccomp = effective_sc(psc, sc, "seccompProfile") or {}
    if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
        problem(where, "seccompProfile.type must be RuntimeDefault, got %r" % seccomp.get("type"))


def check_resources(where, c):
    res = c.get("resources") or {}
    for part in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in (res.get(part) or {}):
                problem(where, "resources.%s.%s missing" % (part, r))


def prestop_seconds(where, c):
    ps = ((c.get("lifecycle") or {}).get("preStop")) or {}
    if not ps:
        return 0
    if "sleep" in ps:
        return int(ps["sleep"].get("seconds", 0))
    argv = (ps.get("exec") or {}).get("command") or []
    if len(argv) == 2 and argv[0] in SLEEP_BINS and argv[1].isdigit():
        return int(argv[1])
    problem(where, "preStop %r: the runtime image has no shell tools but %s" % (ps, " and ".join(SLEEP_BINS)))
    return 0


def workloads(docs):
    for d in docs:
        kind = d.get("kind")
        if kind not in WORKLOAD_KINDS:
            continue
        if kind == "Pod":
            yield d, d.get("metadata") or {}, d.get("spec") or {}
        else:
            tpl = (d.get("spec") or {}).get("template") or {}
            yield d, tpl.get("metadata") or {}, tpl.get("spec") or {}


def check_k8s_file(path, image_env, want):
    """want: "sidecar" or "service"."""
    rel = os.path.relpath(path, ROOT)
    docs = load_docs(path)
    objs = index_objects(docs)
    lockds = []  # (where, listen host, port, pod labels)
    for d in docs:
        if "apiVersion" not in d or "kind" not in d or not (d.get("metadata") or {}).get("name"):
            problem(rel, "a document without apiVersion, kind or metadata.name: %r" % (str(d)[:80],))
    for w, meta, pod in workloads(docs):
        wname = "%s %s/%s" % (rel, w["kind"], w["metadata"]["name"])
        if w["kind"] != "Pod":
            sel = ((w.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            labels = meta.get("labels") or {}
            if not sel or any(labels.get(k) != v for k, v in sel.items()):
                problem(wname, "selector %r does not match the pod labels %r" % (sel, labels))
        containers = list(pod.get("containers") or []) + list(pod.get("initContainers") or [])
        if not containers:
            problem(wname, "no containers")
        if pod.get("enableServiceLinks") is not False:
            problem(wname, "enableServiceLinks must be false (Service env vars like LOCKD_PORT look like lockd settings)")
        if pod.get("automountServiceAccountToken") is not False:
            problem(wname, "automountServiceAccountToken must be false (lockd never calls the API server)")
        grace = pod.get("terminationGracePeriodSeconds", 30)
        for c in containers:
            where = "%s container %s" % (wname, c.get("name"))
            lockd = is_lockd_image(c.get("image"))
            check_resources(where, c)
            check_security(where, pod, c, lockd)
            env = container_env(c, objs, where)
            if not lockd:
                continue
            host, port = listen_of(c, env, image_env)
            lockds.append((where, host, port, meta.get("labels") or {}, w, c, env))
            tls = check_files(where, pod, c, env, want == "service")
            check_probe(where, c, c.get("livenessProbe"), "livenessProbe", "/healthz", host, port, tls)
            check_probe(where, c, c.get("readinessProbe"), "readinessProbe", "/readyz", host, port, tls)
            if host in ("0.0.0.0", "::", ""):
                if port not in [p.get("containerPort") for p in c.get("ports") or []]:
                    problem(where, "lockd listens on %d but the container declares no such port" % port)
            stop = prestop_seconds(where, c)
            if grace < stop + DRAIN_S + 5:
                problem(where, "terminationGracePeriodSeconds %d < preStop %d s + drain %d s + 5 s margin"
                        % (grace, stop, DRAIN_S))
            if "LOCKD_BACKEND" not in env and not any(a.startswith("--backend") for a in c.get("args") or []):
                problem(where, "no backend configured (LOCKD_BACKEND)")
    if not lockds:
        problem(rel, "no lockd container")
        return
    if want == "sidecar":
        ok = False
        for where, host, port, labels, w, c, env in lockds:
            pod = w["spec"]["template"]["spec"] if w["kind"] != "Pod" else w["spec"]
            others = [x for x in pod.get("containers") or [] if not is_lockd_image(x.get("image"))]
            if host in ("127.0.0.1", "localhost", "::1") and others:
                ok = True
        if not ok:
            problem(rel, "want a pod with an app container and lockd on loopback (127.0.0.1)")
    elif want == "service":
        deps = [x for x in lockds if x[4]["kind"] == "Deployment"]
        if not deps:
            problem(rel, "no lockd Deployment")
        for where, host, port, labels, w, c, env in deps:
            if w["spec"].get("replicas") != 3:
                problem(where, "replicas is %r, want 3" % w["spec"].get("replicas"))
            if host not in ("0.0.0.0", "::", ""):
                problem(where, "a shared service must listen on all interfaces, not %s" % host)
            if (env.get("LOCKD_BACKEND") or "memory://").startswith("memory:"):
                problem(where, "a shared service needs a shared store, not memory://")
            ann = (w["spec"]["template"].get("metadata") or {}).get("annotations") or {}
            if ann.get("prometheus.io/scrape") == "true" and str(ann.get("prometheus.io/port")) != str(port):
                problem(where, "prometheus.io/port %r is not lockd's port %d" % (ann.get("prometheus.io/port"), port))
        kinds = {k for k, _ in objs}
        for k in ("Service", "ConfigMap", "Secret", "PodDisruptionBudget"):
            if k not in kinds:
                problem(rel, "no %s" % k)
        for d in docs:
            if d.get("kind") == "Service":
                sel = (d.get("spec") or {}).get("selector") or {}
                hit = [x for x in deps if sel and all(x[3].get(k) == v for k, v in sel.items())]
                if not hit:
                    problem(rel, "Service %s selects no lockd pod" % d["metadata"]["name"])
                for sp in (d.get("spec") or {}).get("ports") or []:
                    for x in hit:
                        tp = resolve_port(x[5], sp.get("targetPort", sp.get("port")))
                        if tp != x[2]:
                            problem(rel, "Service %s port %r targets %r, lockd listens on %d"
                                    % (d["metadata"]["name"], sp.get("port"), sp.get("targetPort"), x[2]))
            if d.get("kind") == "PodDisruptionBudget":
                spec = d.get("spec") or {}
                sel = (spec.get("selector") or {}).get("matchLabels") or {}
                hit = [x for x in deps if sel and all(x[3].get(k) == v for k, v in sel.items())]
                if not hit:
                    problem(rel, "PodDisruptionBudget %s selects no lockd pod" % d["metadata"]["name"])
                if "maxUnavailable" not in spec and "minAvailable" not in spec:
                    problem(rel, "PodDisruptionBudget without maxUnavailable/minAvailable")
                for x in hit:
                    ma = spec.get("minAvailable")
                    if isinstance(ma, int) and ma >= x[4]["spec"].get("replicas", 1):
                        problem(rel, "PodDisruptionBudget minAvailable %d blocks every eviction" % ma)


# ---------------------------------------------------------------- compose

def check_compose(path, image_env):
    rel = os.path.relpath(path, ROOT)
    doc = load_docs(path)[0]
    services = doc.get("services") or {}
    lockds = 0
    for name, s in services.items():
        where = "%s service %s" % (rel, name)
        if not s.get("healthcheck"):
            problem(where, "no healthcheck")
        b = s.get("build")
        if b is None and not is_lockd_image(s.get("image")):
            continue
        lockds += 1
        if b is None:
            problem(where, "lockd service not built from the Dockerfile")
            continue
        ctx = os.path.normpath(os.path.join(os.path.dirname(path), b.get("context", ".")))
        if not os.path.isfile(os.path.join(ctx, b.get("dockerfile", "Dockerfile"))):
            problem(where, "build context %s has no %s" % (ctx, b.get("dockerfile", "Dockerfile")))
        env = s.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        url = env.get("LOCKD_BACKEND", "memory://")
        hosts = []
        if not url.startswith("memory:"):
            netloc = urlsplit(url).netloc.rsplit("@", 1)[-1]
            hosts = [h.rsplit(":", 1)[0] for h in netloc.split(",")]
        for h in hosts:
            if h not in services:
                problem(where, "backend host %r is not a compose service" % h)
            elif ((s.get("depends_on") or {}).get(h) or {}).get("condition") != "service_healthy":
                problem(where, "does not wait for %s to be healthy (depends_on condition: service_healthy)" % h)
        _, port = listen_of({}, env, image_env)
        for p in s.get("ports") or []:
            parts = str(p).split(":")
            if len(parts) != 3 or parts[0] != "127.0.0.1":
                problem(where, "port %r: publish on 127.0.0.1 only" % p)
            elif int(parts[2]) != port:
                problem(where, "port %r: lockd listens on %d in the container" % (p, port))
        if s.get("read_only") is not True or "ALL" not in (s.get("cap_drop") or []):
            problem(where, "run read_only with cap_drop ALL, as in Kubernetes")
    for want in ("redis", "zookeeper", "mysql"):
        if not any(want in str((s.get("environment") or {})) for s in services.values()):
            problem(rel, "no lockd service on %s" % want)
    if lockds == 0:
        problem(rel, "no lockd service")


# ---------------------------------------------------------------- embedded shell

def shellcheck_embedded(paths):
    """Runs shellcheck on `sh -c SCRIPT` bodies of every container."""
    n = 0
    for path in paths:
        for w, meta, pod in workloads(load_docs(path)):
            for c in list(pod.get("containers") or []) + list(pod.get("initContainers") or []):
                argv = list(c.get("command") or []) + list(c.get("args") or [])
                if len(argv) >= 3 and argv[0] in ("/bin/sh", "sh", "/bin/bash", "bash") and argv[1] == "-c":
                    n += 1
                    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
                        f.write("#!%s\n%s" % ("/bin/sh" if argv[0].endswith("sh") and "bash" not in argv[0]
                                              else "/bin/bash", argv[2]))
                    try:
                        p = subprocess.run(["shellcheck", f.name], capture_output=True, text=True, timeout=60)
                    finally:
                        os.unlink(f.name)
                    if p.returncode != 0:
                        problem("%s container %s" % (os.path.relpath(path, ROOT), c.get("name")),
                                "shellcheck on its script:\n" + p.stdout)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dockerfile", default=os.path.join(ROOT, "Dockerfile"))
    ap.add_argument("--sidecar", action="append")
    ap.add_argument("--service", action="append")
    ap.add_argument("--compose", action="append")
    ap.add_argument("--shellcheck", action="store_true", help="also shellcheck scripts embedded in manifests")
    o = ap.parse_args()
    picked = o.sidecar or o.service or o.compose
    if not picked:
        k8s = os.path.join(ROOT, "deploy", "kubernetes")
        o.sidecar = [os.path.join(k8s, "sidecar.yaml")]
        o.service = [os.path.join(k8s, "service.yaml")]
        o.compose = [os.path.join(ROOT, "deploy", "compose.yaml")]
    facts = check_dockerfile(o.dockerfile)
    image_env = facts.get("env", {})
    for p in o.sidecar or []:
        check_k8s_file(p, image_env, "sidecar")
    for p in o.service or []:
        check_k8s_file(p, image_env, "service")
    for p in o.compose or []:
        check_compose(p, image_env)
    n = 0
    if o.shellcheck:
        n = shellcheck_embedded((o.sidecar or []) + (o.service or []))
    if problems:
        for p in problems:
            print("problem: " + p)
        return 1
    print("ok: Dockerfile, %d sidecar, %d service, %d compose file(s), %d embedded script(s)"
          % (len(o.sidecar or []), len(o.service or []), len(o.compose or []), n))
    return 0


if __name__ == "__main__":
    sys.exit(main())

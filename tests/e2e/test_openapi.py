"""tests/e2e/test_openapi.py - api/openapi.yaml against docs/API.md and a
running lockd.

- The document on its own: every $ref resolves, every operation has an
  operationId, every response a description and X-Request-Id, every example
  fits its schema.
- Against docs/API.md: the error code enum is exactly the codes of its
  error table (all of which lockd's sources serve), each error example sits
  under its table status; both configuration tables list the flags of
  `lockd --help`.
- Against the sources: the /readyz example of each backend says the "fifo"
  that backend's capabilities give (backends/<name>/, BACKEND_CAP_QUEUE).
- Against reality, on the backend under test: many live answers across all
  routes and error cases (auth, 429, an unreachable store, shutdown) must
  fit the document, checked by tests/e2e/oaschema.py (status listed for the
  operation, declared headers present and fitting their schemas, body
  fitting the response schema), and every response example must have the
  keys, JSON types and enum values of a live answer documented by the same
  response.
"""

import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import threading
import time

import harness
import oaschema
from harness import Fail, check, eq

SPEC_PATH = os.path.join(harness.ROOT, "api", "openapi.yaml")
API_MD_PATH = os.path.join(harness.ROOT, "docs", "API.md")
METHODS = oaschema.METHODS
BACKENDS = ("memory", "redis", "zookeeper", "mysql", "redlock")

# The contract's routes and methods (docs/API.md plus the decided Allow lists).
ROUTES = {
    "/locks": {"get", "head", "post", "put", "delete"},
    "/locks/{key}": {"get", "head", "post", "put", "delete"},
    "/healthz": {"get", "head"},
    "/readyz": {"get", "head"},
    "/metrics": {"get", "head"},
}

# Documented answers no test here can bring about on demand.
UNREACHABLE_CODES = {"internal_error": "an allocation failure inside lockd"}


def load_spec():
    try:
        return Spec(oaschema.load_yaml(SPEC_PATH))
    except oaschema.SpecError as e:
        raise Fail(str(e))


def error_table():
    """{code: status} from docs/API.md's error table."""
    check(os.path.exists(API_MD_PATH), "%s is missing" % API_MD_PATH)
    with open(API_MD_PATH, encoding="utf-8") as f:
        text = f.read()
    check("## Errors" in text, "docs/API.md has no '## Errors' section")
    section = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    table = {m.group(2): int(m.group(1))
             for m in re.finditer(r"^\|\s*(\d{3})\s*\|\s*`([a-z_]+)`\s*\|", section, re.M)}
    check(len(table) >= 10, "could not read the error table of %s" % API_MD_PATH)
    return table


def served_codes(table):
    """The codes of table that lockd's sources name as a string: the error
    X-macro (api/errors.h) and the few answers written elsewhere."""
    text = ""
    for d in ("api", "service"):
        for name in sorted(os.listdir(os.path.join(harness.ROOT, d))):
            if name.endswith((".c", ".h")):
                with open(os.path.join(harness.ROOT, d, name), encoding="utf-8") as f:
                    text += f.read()
    return {c for c in table if re.search(r'\\?"%s\\?"' % re.escape(c), text)}


def fifo_by_source():
    """{backend: "store" | "instance"}: what /readyz answers on each backend,
    from the capabilities in its adapter's ops table (api/handlers.c says
    "store" exactly when BACKEND_CAP_QUEUE is set)."""
    out = {}
    for name in BACKENDS:
        folder = os.path.join(harness.ROOT, "backends", name)
        text = ""
        for src in sorted(os.listdir(folder)):
            if src.endswith(".c"):
                with open(os.path.join(folder, src), encoding="utf-8") as f:
                    text += f.read()
        m = re.search(r"\.caps\s*=([^;,]*)[,;]", text)
        check(m is not None, "backends/%s/: no .caps member in its ops table" % name)
        out[name] = "store" if "BACKEND_CAP_QUEUE" in m.group(1) else "instance"
    return out


class Spec(oaschema.Document):
    """The document, with the questions these tests ask of it."""

    def op(self, path, method):
        return self.doc["paths"][path][method]

    def schema_of(self, path, method, status, media="application/json"):
        r = self.response(path, method, status)
        return self.resolve(r["content"][media]["schema"])

    def examples(self, media):
        return [v for _, v in self.media_examples(media)]

    def error_codes(self, resp):
        """The error codes a response object documents (its examples)."""
        codes = set()
        media = (resp.get("content") or {}).get("application/json")
        if media is None:
            return codes
        for ex in self.examples(media):
            if isinstance(ex, dict) and isinstance(ex.get("error"), dict):
                codes.add(ex["error"].get("code"))
        return codes


def documented_allow(spec, path):
    return {m.upper() for m in spec.doc["paths"][path] if m in METHODS}


def answer_errors(spec, method, path, resp):
    """What the document does not allow in one live answer: its status,
    headers and body (oaschema), and its error code among the examples of
    the response that documents it. 405s and unknown routes are answered
    by components.responses.MethodNotAllowed and RouteNotFound; so is a
    404 for a method a documented path does not serve yet (GET /locks)."""
    comps = spec.doc["components"]["responses"]
    tmpl = spec.route(path)
    where = "%s %s -> %d" % (method.upper(), path[:80], resp.status)
    if tmpl is None or (resp.status in (404, 405) and spec.operation(tmpl, method) is None):
        name = "RouteNotFound" if tmpl is None or resp.status == 404 else "MethodNotAllowed"
        r = comps[name]
        want = 404 if name == "RouteNotFound" else 405
        if resp.status != want:
            return ["%s: want %d (%s)" % (where, want, name)]
        errs = spec.check_answer(r, method, resp.headers, resp.body, where)
        if tmpl is not None and want == 405:
            allow = {m.strip() for m in (resp.header("Allow") or "").split(",") if m.strip()}
            if allow != documented_allow(spec, tmpl):
                errs.append("%s: Allow %r, documented %s" % (where, resp.header("Allow"),
                                                              sorted(documented_allow(spec, tmpl))))
    else:
        errs = spec.check_response(path, method, resp.status, resp.headers, resp.body)
        r = spec.response(tmpl, method, resp.status)
    if not errs and resp.status >= 400 and method.lower() != "head" and r is not None:
        codes = spec.error_codes(r)
        if (codes or resp.error_code() is not None) and resp.error_code() not in codes:
            errs.append("%s: code %r not among the documented %s" % (where, resp.error_code(), sorted(codes)))
    return errs


def conforms(spec, resp, path, method, want_status=None, want_code=None):
    """resp must be documented for (path, method): status, headers, body."""
    where = "%s %s -> %d" % (method.upper(), path, resp.status)
    if want_status is not None:
        eq(resp.status, want_status, "%s: status (body %r)" % (where, resp.text[:300]))
    errs = answer_errors(spec, method, path, resp)
    check(not errs, "%s does not fit openapi.yaml:\n  %s" % (where, "\n  ".join(errs)))
    if want_code is not None:
        eq(resp.error_code(), want_code, "%s: error code" % where)
    return resp


def check_document(spec, table):
    doc = spec.doc
    eq(doc.get("openapi"), "3.1.0", "openapi version (3.1: the mutualTLS security scheme)")
    check(doc["info"].get("title") and doc["info"].get("version"), "info title/version")

    # every $ref resolves
    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                spec.resolve(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(doc)

    # routes and methods: exactly the served ones
    eq(set(doc["paths"]), set(ROUTES), "documented paths")
    for path, methods in ROUTES.items():
        eq({m for m in doc["paths"][path] if m in METHODS}, methods, "methods of %s" % path)

    # operations: ids, descriptions, X-Request-Id, examples fit schemas
    ids = set()
    for path in ROUTES:
        for method in ROUTES[path]:
            op = spec.op(path, method)
            oid = op.get("operationId")
            check(oid and oid not in ids, "%s %s: missing or duplicate operationId" % (method, path))
            ids.add(oid)
            check(op.get("responses"), "%s %s: no responses" % (method, path))
            for status, r in op["responses"].items():
                r = spec.resolve(r)
                what = "%s %s %s" % (method.upper(), path, status)
                check(str(r.get("description", "")).strip(), what + ": no description")
                check("X-Request-Id" in (r.get("headers") or {}), what + ": no X-Request-Id header")
                for media in (r.get("content") or {}).values():
                    for ex in spec.examples(media):
                        errs = spec.validate(ex, media["schema"])
                        check(not errs, "%s: example %r does not fit its schema: %s" % (what, ex, errs))
                for code in spec.error_codes(r):
                    eq(table.get(code), int(status), "%s: docs/API.md's status of example code %r" % (what, code))
    for name, r in doc["components"]["responses"].items():
        check(str(r.get("description", "")).strip(), "components.responses.%s: description" % name)
        check("X-Request-Id" in (r.get("headers") or {}), "components.responses.%s: X-Request-Id" % name)

    # the error code enum is exactly the codes of docs/API.md's table, and
    # lockd serves every one of them (docs/API.md documents only what lockd
    # implements)
    enum = set(spec.resolve({"$ref": "#/components/schemas/ErrorCode"})["enum"])
    eq(set(table) - served_codes(table), set(), "codes of docs/API.md that lockd's sources never name")
    eq(enum - set(table), set(), "codes in openapi.yaml but not in docs/API.md")
    eq(set(table) - enum, set(), "codes of docs/API.md missing from openapi.yaml's enum")
    documented = set()
    for r in doc["components"]["responses"].values():
        documented |= spec.error_codes(r)
    for path in ROUTES:
        for method in ROUTES[path]:
            for r in spec.op(path, method)["responses"].values():
                documented |= spec.error_codes(spec.resolve(r))
    eq(set(table) - documented, set(), "codes of docs/API.md no response documents")

    # the statuses and codes each lock operation must document
    need = {
        ("post", 200): None, ("post", 201): None,
        ("post", 400): {"invalid_key", "invalid_json", "invalid_parameter"},
        ("post", 401): {"unauthorized"}, ("post", 404): {"lock_not_found"},
        ("post", 409): {"lock_held", "limit_mismatch", "token_mismatch"}, ("post", 413): {"body_too_large"},
        ("post", 503): {"backend_unavailable", "shutting_down"},
        ("get", 200): None, ("get", 404): {"lock_not_found"}, ("get", 400): {"invalid_key", "invalid_parameter"},
        ("head", 200): None, ("head", 404): None,
    }
    for m in ("put", "delete"):
        need.update({
            (m, 200): None, (m, 400): {"invalid_key", "invalid_json", "invalid_parameter", "missing_token"},
            (m, 401): {"unauthorized"}, (m, 404): {"lock_not_found"}, (m, 409): {"token_mismatch"},
            (m, 413): {"body_too_large"}, (m, 503): {"backend_unavailable", "shutting_down"},
        })
    for (m, status), codes in need.items():
        r = spec.response("/locks/{key}", m, status)
        check(r is not None, "%s /locks/{key}: %d not documented" % (m.upper(), status))
        if codes:
            eq(codes - spec.error_codes(r), set(), "%s /locks/{key} %d: codes not documented" % (m.upper(), status))
    for status, header in ((409, "Retry-After"), (503, "Retry-After"), (401, "WWW-Authenticate")):
        check(header in (spec.response("/locks/{key}", "post", status).get("headers") or {}),
              "POST /locks/{key} %d: no %s header" % (status, header))
    mna = doc["components"]["responses"]["MethodNotAllowed"]
    check("Allow" in mna.get("headers", {}), "405 documents Allow")
    eq(spec.error_codes(mna), {"method_not_allowed"}, "405's codes")
    eq(spec.error_codes(doc["components"]["responses"]["RouteNotFound"]), {"not_found"}, "route 404's codes")

    # parameters: names, places, defaults; bodies strict
    def params(m):
        out = {}
        for p in spec.doc["paths"]["/locks/{key}"].get("parameters", []) + spec.op("/locks/{key}", m).get(
                "parameters", []):
            p = spec.resolve(p)
            out[(p["in"], p["name"])] = p
        return out

    def body_props(m):
        rb = spec.op("/locks/{key}", m).get("requestBody")
        if rb is None:
            return set()
        s = spec.resolve(rb["content"]["application/json"]["schema"])
        eq(s.get("additionalProperties"), False, "%s body: additionalProperties" % m.upper())
        return set(s["properties"])

    def query(m):
        return {n for (i, n) in params(m) if i == "query"}

    key = params("get")[("path", "key")]
    check(key["required"] and key["schema"]["minLength"] == 1 and key["schema"]["maxLength"] == 512, "key param")
    acquire_fields = {"ttl_ms", "wait_ms", "owner", "mode", "limit", "token"}
    eq(query("post"), acquire_fields, "POST query parameters")
    eq(body_props("post"), acquire_fields, "POST body fields")
    eq(query("put"), {"token", "ttl_ms"}, "PUT query parameters")
    eq(body_props("put"), {"token", "ttl_ms"}, "PUT body fields")
    eq(query("delete"), {"token", "all", "force"}, "DELETE query parameters")
    eq(body_props("delete"), {"token", "all", "force"}, "DELETE body fields")
    eq(query("get") | query("head"), set(), "GET/HEAD query parameters")
    for m in ("post", "put", "delete"):
        check(("header", "Lock-Token") in params(m), "%s documents Lock-Token" % m.upper())
    idem = [m for m in ROUTES["/locks/{key}"] if ("header", "Idempotency-Key") in params(m)]
    eq(idem, ["post"], "the operations that take Idempotency-Key")
    mode = spec.resolve(params("post")[("query", "mode")]["schema"])
    eq((mode.get("enum"), mode.get("default")), (["exclusive", "shared"], "exclusive"), "mode enum and default")
    lim = spec.resolve(params("post")[("query", "limit")]["schema"])
    eq((lim.get("minimum"), lim.get("maximum")), (1, 10000), "limit range")
    post = params("post")
    eq(spec.resolve(post[("query", "ttl_ms")]["schema"]).get("default"), 30000, "ttl_ms default")
    eq(spec.resolve(post[("query", "wait_ms")]["schema"]).get("default"), 0, "wait_ms default")
    eq(spec.resolve(post[("query", "ttl_ms")]["schema"]).get("minimum"), 1, "ttl_ms minimum")

    # auth: optional bearer on /locks, never on the operations endpoints
    eq(doc["components"]["securitySchemes"]["bearerAuth"].get("scheme"), "bearer", "bearer scheme")
    eq(doc["components"]["securitySchemes"]["mutualTLS"].get("type"), "mutualTLS", "mutual TLS scheme")
    for m in ROUTES["/locks/{key}"]:
        sec = spec.op("/locks/{key}", m).get("security")
        check(sec and {"bearerAuth": []} in sec and {} in sec, "%s /locks/{key}: optional bearer" % m.upper())
    for path in ("/healthz", "/readyz", "/metrics"):
        for m in ROUTES[path]:
            eq(spec.op(path, m).get("security"), [], "%s %s security" % (m.upper(), path))
    check_multi_document(spec)

    # the validator used below is not vacuous
    grant = spec.resolve({"$ref": "#/components/schemas/Grant"})
    good = {"key": "k", "token": "0" * 32, "fence": 1, "ttl_ms": 1, "expires_at": "2026-11-21T12:00:30.123Z",
            "mode": "exclusive", "holds": 1}
    eq(spec.validate(good, grant), [], "validator on a good grant")
    eq(spec.validate({**good, "mode": "shared", "limit": 3}, grant), [], "validator on a good shared grant")
    for bad in ({**good, "token": "X" * 32}, {**good, "fence": "1"}, {**good, "extra": 1},
                {k: v for k, v in good.items() if k != "fence"}, {**good, "expires_at": "2026-11-21"},
                {**good, "mode": "read"}, {**good, "holds": 0}, {**good, "limit": 10001},
                {k: v for k, v in good.items() if k != "holds"}):
        check(spec.validate(bad, grant), "validator accepted %r" % bad)
    check(spec.validate("2026-13-21T12:00:30.123Z", {"type": "string", "format": "date-time"}),
          "validator accepted month 13")
    check(spec.validate(2 ** 53, {"$ref": "#/components/schemas/Fence"}), "validator accepted fence 2^53")
    ok_headers = {"x-request-id": "r1", "content-type": "application/json", "retry-after": "1"}
    body = json.dumps({"error": {"code": "backend_unavailable", "message": "m"}}).encode()
    eq(spec.check_response("/locks/a", "POST", 503, ok_headers, body), [], "validator on a good 503")
    for what, hdrs, b, status in (
            ("no Retry-After", {**ok_headers, "retry-after": None}, body, 503),
            ("Retry-After 2 where the document says 1", {**ok_headers, "retry-after": "2"}, body, 503),
            ("Retry-After not a number", {**ok_headers, "retry-after": "soon"}, body, 503),
            ("an undocumented status", ok_headers, body, 418),
            ("a body on HEAD", ok_headers, body, 404),
            ("a text body", {**ok_headers, "content-type": "text/plain"}, body, 503)):
        hdrs = {k: v for k, v in hdrs.items() if v is not None}
        method = "HEAD" if what == "a body on HEAD" else "POST"
        check(spec.check_response("/locks/a", method, status, hdrs, b), "validator accepted %s" % what)
    www = spec.doc["components"]["headers"]["WWW-Authenticate"]
    check(spec.validate_header("WWW-Authenticate", "Basic", www), "validator accepted WWW-Authenticate: Basic")

    # /readyz: one example per backend, saying the fifo its adapter gives
    # (one source of truth: the capabilities in backends/<name>/)
    fifo = fifo_by_source()
    media = spec.response("/readyz", "get", 200)["content"]["application/json"]
    by_backend = {ex.get("backend"): ex for ex in spec.examples(media)}
    eq(set(by_backend), set(BACKENDS), "backends of the /readyz 200 examples")
    eq(set(spec.resolve({"$ref": "#/components/schemas/BackendName"})["enum"]), set(BACKENDS), "BackendName")
    for name, ex in by_backend.items():
        eq(ex.get("fifo"), fifo[name], "/readyz example of %s: fifo (the caps in backends/%s/)"
           % (name, name))


def check_multi_document(spec):
    """/locks: the statuses and codes each multi-key operation documents,
    strict bodies with the contract's fields and nothing from the query,
    Lock-Token on renew and release only, optional bearer auth; a validator
    that tells a good multi-key grant and release from bad ones."""
    need = {
        ("post", 201): None, ("post", 400): {"invalid_key", "invalid_json", "invalid_parameter"},
        ("post", 401): {"unauthorized"}, ("post", 409): {"lock_held"}, ("post", 413): {"body_too_large"},
        ("post", 503): {"backend_unavailable", "shutting_down"},
        ("put", 200): None, ("put", 404): {"lock_not_found"}, ("put", 409): {"token_mismatch"},
        ("delete", 200): None, ("delete", 404): {"lock_not_found"},
    }
    for m in ("put", "delete"):
        need.update({(m, 400): {"invalid_key", "invalid_json", "invalid_parameter", "missing_token"},
                     (m, 401): {"unauthorized"}, (m, 413): {"body_too_large"},
                     (m, 503): {"backend_unavailable", "shutting_down"}})
    for (m, status), codes in need.items():
        r = spec.response("/locks", m, status)
        check(r is not None, "%s /locks: %d not documented" % (m.upper(), status))
        if codes:
            eq(codes - spec.error_codes(r), set(), "%s /locks %d: codes not documented" % (m.upper(), status))
    eq(spec.response("/locks", "delete", 409), None, "DELETE /locks documents no 409 (a key not held is not_held)")
    check("Retry-After" in (spec.response("/locks", "post", 409).get("headers") or {}), "POST /locks 409: Retry-After")
    held = spec.examples(spec.response("/locks", "post", 409)["content"]["application/json"])
    check(held and all(isinstance(ex["error"].get("held"), list) for ex in held), "POST /locks 409 examples: held")
    for status, code in ((404, "lock_not_found"), (409, "token_mismatch")):
        exs = spec.examples(spec.response("/locks", "put", status)["content"]["application/json"])
        check(exs and all(isinstance(ex["error"].get("key"), str) for ex in exs),
              "PUT /locks %d examples: error.key" % status)
    fields = {"post": {"keys", "ttl_ms", "wait_ms", "owner"}, "put": {"keys", "token", "ttl_ms"},
              "delete": {"keys", "token"}}
    for m, want in fields.items():
        op = spec.op("/locks", m)
        what = "%s /locks" % m.upper()
        ps = [spec.resolve(p) for p in spec.doc["paths"]["/locks"].get("parameters", []) + op.get("parameters", [])]
        eq({p["name"] for p in ps if p["in"] == "query"}, set(), what + ": query parameters (body only)")
        eq({p["name"] for p in ps if p["in"] == "header"}, {"X-Request-Id"} | ({"Lock-Token"} if m != "post" else set()),
           what + ": headers")
        rb = op.get("requestBody") or {}
        check(rb.get("required") is True, what + ": the body is required")
        schema = spec.resolve(rb["content"]["application/json"]["schema"])
        eq(schema.get("additionalProperties"), False, what + " body: additionalProperties")
        eq(set(schema["properties"]), want, what + " body fields")
        eq(schema.get("required"), ["keys"], what + " body: required")
        keys = spec.resolve(schema["properties"]["keys"])
        eq((keys.get("type"), keys.get("minItems"), keys.get("maxItems"), keys.get("uniqueItems")),
           ("array", 1, 64, True), what + ": keys")
        eq(spec.resolve(keys["items"]), spec.resolve({"$ref": "#/components/schemas/Key"}), what + ": keys items")
        sec = op.get("security")
        check(sec and {"bearerAuth": []} in sec and {} in sec, what + ": optional bearer")
    grant = spec.resolve({"$ref": "#/components/schemas/MultiGrant"})
    good = {"keys": ["a", "b"], "token": "0" * 32, "fences": {"a": 3, "b": 1}, "ttl_ms": 1,
            "expires_at": "2026-11-21T12:00:30.123Z"}
    eq(spec.validate(good, grant), [], "validator on a good multi-key grant")
    for bad in ({**good, "fences": {"a": "3"}}, {**good, "fences": {"a": 0}}, {**good, "keys": []},
                {**good, "keys": ["a"] * 65}, {**good, "key": "a"}, {**good, "mode": "exclusive"},
                {k: v for k, v in good.items() if k != "fences"}, {**good, "token": "x"}):
        check(spec.validate(bad, grant), "validator accepted the multi-key grant %r" % bad)
    rel = spec.resolve({"$ref": "#/components/schemas/MultiReleased"})
    eq(spec.validate({"released": ["a"], "not_held": []}, rel), [], "validator on a good multi-key release")
    for bad in ({"released": [], "not_held": ["a"]}, {"released": ["a"]}, {"released": ["a"], "not_held": [],
                                                                           "holds": 0}):
        check(spec.validate(bad, rel), "validator accepted the multi-key release %r" % bad)


def config_flags(markdown):
    """The flags of the '## Configuration' table of a Markdown text."""
    check("## Configuration" in markdown, "no '## Configuration' section")
    section = markdown.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\s*\|\s*`(--[a-z-]+)`\s*\|", section, re.M))


def check_flags(spec):
    """docs/API.md's and openapi.yaml's configuration tables list exactly the
    options `lockd --help` lists (less --help, --version, --backends,
    --check-health and --hash-token, which print and exit)."""
    p = subprocess.run([harness.LOCKD_BIN, "--help"], capture_output=True, text=True, timeout=10)
    eq(p.returncode, 0, "lockd --help exit code")
    served = set(re.findall(r"^\s+(--[a-z-]+)", p.stdout + p.stderr, re.M))
    served -= {"--help", "--version", "--backends", "--check-health", "--hash-token"}
    check(len(served) >= 10, "could not read lockd --help: %r" % (p.stdout + p.stderr)[:500])
    with open(API_MD_PATH, encoding="utf-8") as f:
        eq(config_flags(f.read()), served, "docs/API.md's configuration table against lockd --help")
    eq(config_flags(spec.doc["info"]["description"]), served, "openapi.yaml's configuration table against lockd --help")


@harness.scenario("openapi.yaml lists every route, method, status and error code lockd serves", backends=["memory"])
def openapi_matches_lockd(ctx):
    spec = load_spec()
    check_document(spec, error_table())
    check_flags(spec)

    ld = ctx.lockd
    L = "/locks/{key}"
    k = ctx.key("openapi")
    grant_required = set(spec.schema_of(L, "post", 201)["required"])

    # acquire: 201 with exactly the grant's documented fields
    r = conforms(spec, ld.request("POST", "/locks/" + k, {"ttl_ms": 5000, "owner": "openapi/test"}), L, "post", 201)
    eq(set(r.json), grant_required, "201 body keys")
    eq(r.json["key"], k, "granted key")
    token, fence = r.json["token"], r.json["fence"]

    # inspect, HEAD
    r = conforms(spec, ld.request("GET", "/locks/" + k), L, "get", 200)
    eq((r.json["fence"], r.json["owner"], "token" in r.json), (fence, "openapi/test", False), "inspect")
    conforms(spec, ld.request("HEAD", "/locks/" + k), L, "head", 200)

    # held: 409 lock_held with retry_after_ms and Retry-After = ceil(ms / 1000)
    r = conforms(spec, ld.request("POST", "/locks/" + k), L, "post", 409, "lock_held")
    ms = r.json["error"].get("retry_after_ms")
    check(isinstance(ms, int) and 1 <= ms <= 5000, "retry_after_ms %r" % ms)
    eq(r.header("Retry-After"), str(max(1, math.ceil(ms / 1000.0))), "Retry-After")

    # renew: 200, same fields as the grant, same fence
    r = conforms(spec, ld.request("PUT", "/locks/" + k, {"ttl_ms": 4000}, {"Lock-Token": token}), L, "put", 200)
    eq(set(spec.schema_of(L, "put", 200)["required"]), set(r.json), "renew body keys")
    eq((r.json["fence"], r.json["ttl_ms"]), (fence, 4000), "renew fence and ttl")
    conforms(spec, ld.request("PUT", "/locks/" + k, None, {"Lock-Token": "0" * 32}), L, "put", 409, "token_mismatch")
    conforms(spec, ld.request("DELETE", "/locks/" + k, {"token": "f" * 32}), L, "delete", 409, "token_mismatch")

    # 400s, each a code documented for its operation
    conforms(spec, ld.request("PUT", "/locks/" + k), L, "put", 400, "missing_token")
    conforms(spec, ld.request("DELETE", "/locks/" + k, {"token": ""}), L, "delete", 400, "missing_token")
    conforms(spec, ld.request("POST", "/locks/" + k, {"ttl": 5}), L, "post", 400, "invalid_parameter")
    conforms(spec, ld.request("POST", "/locks/" + k + "?ttl_ms=5", {"ttl_ms": 5}), L, "post", 400,
             "invalid_parameter")
    conforms(spec, ld.request("POST", "/locks/" + k, b"[]"), L, "post", 400, "invalid_json")
    conforms(spec, ld.request("GET", "/locks/" + k + "?wait_ms=1"), L, "get", 400, "invalid_parameter")
    conforms(spec, ld.request("PUT", "/locks/" + k, {"token": token},
                              {"Lock-Token": token}), L, "put", 400, "invalid_parameter")
    conforms(spec, ld.request("GET", "/locks/"), L, "get", 400, "invalid_key")
    conforms(spec, ld.request("POST", "/locks/%zz"), L, "post", 400, "invalid_key")
    conforms(spec, ld.request("POST", "/locks/" + k, b"{" + b" " * 9000 + b"}"), L, "post", 413, "body_too_large")

    # release: 200 with exactly the documented fields; then the key is free
    r = conforms(spec, ld.request("DELETE", "/locks/" + k, None, {"Lock-Token": token}), L, "delete", 200)
    eq(set(r.json), set(spec.resolve({"$ref": "#/components/schemas/Released"})["required"]), "release body keys")
    conforms(spec, ld.request("GET", "/locks/" + k), L, "get", 404, "lock_not_found")
    conforms(spec, ld.request("HEAD", "/locks/" + k), L, "head", 404)
    conforms(spec, ld.request("PUT", "/locks/" + k + "?token=" + token), L, "put", 404, "lock_not_found")
    conforms(spec, ld.request("DELETE", "/locks/" + k, {"token": token}), L, "delete", 404, "lock_not_found")

    # a key with "/" (raw and %2F) is one key, as the key parameter says
    r = conforms(spec, ld.request("POST", "/locks/%s/a%%2Fb?ttl_ms=1000" % k), L, "post", 201)
    eq(r.json["key"], k + "/a/b", "decoded key")
    conforms(spec, ld.request("GET", "/locks/%s%%2Fa/b" % k), L, "get", 200)
    conforms(spec, ld.request("DELETE", "/locks/%s/a/b" % k, None, {"Lock-Token": r.json["token"]}), L, "delete", 200)

    # operations endpoints
    r = conforms(spec, ld.request("GET", "/healthz"), "/healthz", "get", 200)
    conforms(spec, ld.request("HEAD", "/healthz"), "/healthz", "head", 200)
    r = conforms(spec, ld.request("GET", "/readyz"), "/readyz", "get", 200)
    eq(r.json["backend"], ctx.backend, "readyz backend")
    conforms(spec, ld.request("HEAD", "/readyz"), "/readyz", "head", 200)
    r = conforms(spec, ld.request("GET", "/metrics"), "/metrics", "get", 200)
    check("version=0.0.4" in r.header("Content-Type"), "metrics Content-Type %r" % r.header("Content-Type"))
    check("lockd_lock_grants_total" in r.text, "metrics text lists lockd_lock_grants_total")
    conforms(spec, ld.request("HEAD", "/metrics"), "/metrics", "head", 200)

    # X-Request-Id: the client's is echoed
    rid = "openapi-%d" % int(time.time() * 1000)
    eq(ld.request("GET", "/healthz", headers={"X-Request-Id": rid}).header("X-Request-Id"), rid, "X-Request-Id echo")

    # several keys at once
    conforms_multi(spec, ld, ctx)

    # 405 with Allow = the documented methods; 404 not_found for other paths
    comps = spec.doc["components"]["responses"]
    for path, real in ((L, "/locks/" + k), ("/locks", "/locks"), ("/healthz", "/healthz"), ("/readyz", "/readyz"),
                       ("/metrics", "/metrics")):
        for method in {L: ("PATCH", "OPTIONS"), "/locks": ("PATCH", "OPTIONS")}.get(path, ("PATCH", "POST")):
            r = ld.request(method, real)
            eq(r.status, 405, "%s %s status" % (method, real))
            eq(spec.validate(r.json, comps["MethodNotAllowed"]["content"]["application/json"]["schema"]), [],
               "%s %s body" % (method, real))
            eq(r.error_code(), "method_not_allowed", "%s %s code" % (method, real))
            allow = {m.strip() for m in (r.header("Allow") or "").split(",") if m.strip()}
            eq(allow, documented_allow(spec, path), "%s %s Allow" % (method, real))
            check(r.header("X-Request-Id"), "405 X-Request-Id")
    # the held keys: GET /locks
    kl = ctx.key("openapi-list")
    conforms(spec, ld.request("POST", "/locks/" + kl, {"owner": "openapi/list"}), L, "post", 201)
    r = conforms(spec, ld.request("GET", "/locks?prefix=" + kl + "&limit=5"), "/locks", "get", 200)
    eq([e["key"] for e in r.json["locks"]], [kl], "GET /locks lists the held key")
    conforms(spec, ld.request("GET", "/locks?limit=0"), "/locks", "get", 400, "invalid_parameter")
    conforms(spec, ld.request("HEAD", "/locks"), "/locks", "head", 200)
    for real in ("/nope", "/healthz/x", "/locksx"):
        r = ld.request("GET", real)
        eq((r.status, r.error_code()), (404, "not_found"), "GET %s" % real)
        eq(spec.validate(r.json, comps["RouteNotFound"]["content"]["application/json"]["schema"]), [], real)

    # optional bearer auth: 401 + WWW-Authenticate on /locks only
    tok_file = os.path.join(ctx.tmpdir, "openapi-auth-token")
    with open(tok_file, "w") as f:
        f.write("s3cret-openapi\n")
    la = ctx.new_lockd(args=["--auth-token-file", tok_file])
    k2 = ctx.key("openapi-auth")
    conforms(spec, la.request("POST", "/locks/" + k2), L, "post", 401, "unauthorized")
    conforms(spec, la.request("POST", "/locks", {"keys": [k2]}), "/locks", "post", 401, "unauthorized")
    conforms(spec, la.request("GET", "/locks/" + k2, headers={"Authorization": "Bearer wrong"}), L, "get", 401,
             "unauthorized")
    r = conforms(spec, la.request("POST", "/locks/" + k2, headers={"Authorization": "Bearer s3cret-openapi"}),
                 L, "post", 201)
    conforms(spec, la.request("GET", "/healthz"), "/healthz", "get", 200)
    conforms(spec, la.request("GET", "/readyz"), "/readyz", "get", 200)
    conforms(spec, la.request("GET", "/locks"), "/locks", "get", 401, "unauthorized")
    conforms(spec, la.request("DELETE", "/locks/" + k2 + "?force=true", headers={"Authorization": "Bearer s3cret-openapi"}),
             L, "delete", 403, "forbidden")


def conforms_multi(spec, ld, ctx):
    """POST, PUT and DELETE /locks: every status the contract names, each
    fitting the document, with exactly the documented fields."""
    M = "/locks"
    a, b, c = ctx.key("oa-ma"), ctx.key("oa-mb"), ctx.key("oa-mc")
    r = conforms(spec, ld.request("POST", M, {"keys": [b, a], "ttl_ms": 5000, "owner": "openapi/multi"}), M, "post",
                 201)
    eq(set(r.json), set(spec.schema_of(M, "post", 201)["required"]), "multi-key 201 body keys")
    eq(r.json["keys"], [b, a], "granted keys in request order")
    tok = r.json["token"]
    r = conforms(spec, ld.request("POST", M, {"keys": [c, a]}), M, "post", 409, "lock_held")
    eq(r.json["error"].get("held"), [a], "held")
    eq(r.header("Retry-After"), str(max(1, math.ceil(r.json["error"]["retry_after_ms"] / 1000.0))), "Retry-After")
    r = conforms(spec, ld.request("PUT", M, {"keys": [a, b], "ttl_ms": 4000}, {"Lock-Token": tok}), M, "put", 200)
    eq(set(r.json), set(spec.schema_of(M, "put", 200)["required"]), "multi-key renew body keys")
    r = conforms(spec, ld.request("PUT", M, {"keys": [a, c, b], "token": tok}), M, "put", 404, "lock_not_found")
    eq(r.json["error"].get("key"), c, "error.key")
    conforms(spec, ld.request("PUT", M, {"keys": [a]}), M, "put", 400, "missing_token")
    conforms(spec, ld.request("DELETE", M, {"keys": [a], "token": ""}), M, "delete", 400, "missing_token")
    conforms(spec, ld.request("POST", M + "?ttl_ms=5", {"keys": [c]}), M, "post", 400, "invalid_parameter")
    conforms(spec, ld.request("POST", M, {"keys": [c, c]}), M, "post", 400, "invalid_parameter")
    r = conforms(spec, ld.request("POST", M, {"keys": [c, ""]}), M, "post", 400, "invalid_key")
    check("keys[1]" in r.json["error"]["message"], "invalid_key names keys[1]: %r" % r.json)
    conforms(spec, ld.request("POST", M, b"[]"), M, "post", 400, "invalid_json")
    conforms(spec, ld.request("DELETE", M, b"{" + b" " * 9000 + b"}"), M, "delete", 413, "body_too_large")
    r = conforms(spec, ld.request("DELETE", M, {"keys": [a, c, b], "token": tok}), M, "delete", 200)
    eq(r.json, {"released": [a, b], "not_held": [c]}, "multi-key release body")
    conforms(spec, ld.request("DELETE", M, {"keys": [a, b]}, {"Lock-Token": tok}), M, "delete", 404,
             "lock_not_found")


# ------------------------------------------------------------ live answers

class Answer:
    """One live answer: the request that got it, and the harness Response."""

    def __init__(self, label, method, path, resp):
        self.label, self.method, self.path, self.resp = label, method, path, resp


def parse_raw(data):
    """A harness Response from the raw bytes of one HTTP/1.1 answer, or None."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    if m is None:
        return None
    hdrs = [tuple(p.strip() for p in line.split(":", 1)) for line in lines[1:] if ":" in line]
    n = int(dict((k.lower(), v) for k, v in hdrs).get("content-length", len(body)))
    return harness.Response(int(m.group(1)), hdrs, body[:n])


def dead_backend_url(backend):
    """A URL of the backend's scheme (redis for memory) where nothing listens."""
    port = harness.free_port()
    return {
        "zookeeper": "zookeeper://127.0.0.1:%d?timeout_ms=300" % port,
        "mysql": "mysql://lockd@127.0.0.1:%d/lockd?connect_timeout_ms=300" % port,
    }.get(backend, "redis://127.0.0.1:%d?timeout_ms=300&connect_timeout_ms=300" % port)


def live_kinds(ld, ctx, ask, other):
    """The lock kinds' answers (shared, semaphore, re-entry, Idempotency-Key)
    through ask(); other is a token that holds none of these keys. Where
    the store offers no semaphores (redlock://) the semaphore is of 1
    permit, and one of 2 is its documented 400."""
    L = "/locks/"
    # a read-write lock: two readers, a writer kept out
    ks = ctx.key("oa-rw")
    r1 = ask(ld, "shared grant", "POST", L + ks, {"mode": "shared", "ttl_ms": 5000}, status=201)
    r2 = ask(ld, "shared grant by query", "POST", L + ks + "?mode=shared&ttl_ms=5000", status=201)
    ask(ld, "inspect, shared", "GET", L + ks, status=200)
    ask(ld, "exclusive on a shared key", "POST", L + ks, status=409, code="lock_held")
    ask(ld, "a limit against none", "POST", L + ks, {"mode": "shared", "limit": 1}, status=409,
        code="limit_mismatch")
    ask(ld, "renew, shared", "PUT", L + ks, None, {"Lock-Token": r1.json["token"]}, status=200)
    for r in (r1, r2):
        ask(ld, "release, shared", "DELETE", L + ks, None, {"Lock-Token": r.json["token"]}, status=200)
    # a semaphore of 2 (of 1 where semaphores are not offered)
    sem = harness.semaphores(ld)
    n = 2 if sem else 1
    kp = ctx.key("oa-sem")
    p1 = ask(ld, "permit 1", "POST", L + kp, {"mode": "shared", "limit": n, "owner": "job-1"}, status=201)
    if sem:
        p2 = ask(ld, "permit 2", "POST", L + kp, {"mode": "shared", "limit": 2, "owner": "job-2"}, status=201)
    ask(ld, "inspect, semaphore", "GET", L + kp, status=200)
    ask(ld, "no permit left", "POST", L + kp, {"mode": "shared", "limit": n}, status=409, code="lock_held")
    ask(ld, "another limit", "POST", L + kp + ("?mode=shared&limit=3" if sem else "?mode=shared"), status=409,
        code="limit_mismatch")
    if not sem:
        ask(ld, "a semaphore where none is offered", "POST", L + kp, {"mode": "shared", "limit": 2}, status=400,
            code="invalid_parameter")
        harness.refuses_semaphore(ld, kp, {"mode": "shared", "limit": 2}, what="a semaphore of 2")
    ask(ld, "limit with exclusive", "POST", L + kp, {"limit": 2}, status=400, code="invalid_parameter")
    ask(ld, "limit 0", "POST", L + kp, {"mode": "shared", "limit": 0}, status=400, code="invalid_parameter")
    ask(ld, "limit 10001", "POST", L + kp + "?mode=shared&limit=10001", status=400, code="invalid_parameter")
    ask(ld, "unknown mode", "POST", L + kp, {"mode": "read"}, status=400, code="invalid_parameter")
    ask(ld, "renew a permit", "PUT", L + kp, None, {"Lock-Token": p1.json["token"]}, status=200)
    ask(ld, "release a permit, all in the body", "DELETE", L + kp, {"token": p1.json["token"], "all": True},
        status=200)
    if not sem:
        p2 = ask(ld, "permit 2, after permit 1", "POST", L + kp, {"mode": "shared", "limit": 1, "owner": "job-2"},
                 status=201)
    ask(ld, "release a permit, all in the query", "DELETE", L + kp + "?all=true", None,
        {"Lock-Token": p2.json["token"]}, status=200)
    # re-entry
    kr = ctx.key("oa-reenter")
    t = ask(ld, "grant to re-enter", "POST", L + kr, {"owner": "pod-a/worker-3"}, status=201).json["token"]
    ask(ld, "re-entry, header", "POST", L + kr, {"ttl_ms": 5000}, {"Lock-Token": t}, status=200)
    ask(ld, "re-entry, query", "POST", L + kr + "?token=" + t, status=200)
    ask(ld, "re-entry, body", "POST", L + kr, {"token": t}, status=200)
    ask(ld, "inspect, re-entered", "GET", L + kr, status=200)
    ask(ld, "re-entry, another token", "POST", L + kr, None, {"Lock-Token": other}, status=409,
        code="token_mismatch")
    ask(ld, "re-entry with wait_ms", "POST", L + kr, {"token": t, "wait_ms": 100}, status=400,
        code="invalid_parameter")
    ask(ld, "re-entry with mode", "POST", L + kr, {"mode": "exclusive"}, {"Lock-Token": t}, status=400,
        code="invalid_parameter")
    ask(ld, "re-entry, empty token", "POST", L + kr, {"token": ""}, status=400, code="invalid_parameter")
    ask(ld, "release, one hold", "DELETE", L + kr, None, {"Lock-Token": t}, status=200)
    ask(ld, "release, all holds", "DELETE", L + kr + "?all=true", None, {"Lock-Token": t}, status=200)
    ask(ld, "re-entry of a free key", "POST", L + kr, None, {"Lock-Token": t}, status=404, code="lock_not_found")
    # Idempotency-Key
    ki = ctx.key("oa-idem")
    h = {"Idempotency-Key": "openapi " + ki}
    g1 = ask(ld, "grant with an Idempotency-Key", "POST", L + ki, {"ttl_ms": 5000}, h, status=201)
    g2 = ask(ld, "the same acquire again", "POST", L + ki, {"ttl_ms": 5000}, h, status=201)
    eq((g2.json["token"], g2.json["fence"]), (g1.json["token"], g1.json["fence"]), "a replay's token and fence")
    ask(ld, "Idempotency-Key, another mode", "POST", L + ki, {"mode": "shared"}, h, status=400,
        code="invalid_parameter")
    ask(ld, "Idempotency-Key with a token", "POST", L + ki, None, dict(h, **{"Lock-Token": g1.json["token"]}),
        status=400, code="invalid_parameter")
    ask(ld, "Idempotency-Key too long", "POST", L + ki + "-x", None, {"Idempotency-Key": "k" * 129},
        status=400, code="invalid_parameter")
    lt = dict(h, **{"Lock-Token": g1.json["token"]})
    for m, hdrs in (("PUT", lt), ("DELETE", lt), ("GET", h)):
        ask(ld, "Idempotency-Key on %s" % m, m, L + ki, None, hdrs, status=400, code="invalid_parameter")
    ask(ld, "release the replayed grant", "DELETE", L + ki, None, {"Lock-Token": g1.json["token"]}, status=200)


def live_multi(ld, ctx, ask, other):
    """Several keys at once through ask(): grants, refusals naming the held
    keys, renews all or nothing naming error.key, releases of full and
    partial sets, and each 400; other is a token that holds none of them."""
    M = "/locks"
    a, b, c = ctx.key("oa-ma"), ctx.key("oa-mb"), ctx.key("oa-mc")
    g = ask(ld, "multi-key grant", "POST", M, {"keys": [a, b], "ttl_ms": 5000, "owner": "pod-a/worker-3"},
            status=201)
    tok = g.json["token"]
    ask(ld, "multi-key grant of one key, defaults", "POST", M, {"keys": [c]}, status=201)
    ask(ld, "multi-key grant, waiting for free keys", "POST", M,
        {"keys": [ctx.key("oa-mw"), ctx.key("oa-mw")], "wait_ms": 1000, "ttl_ms": 1000}, status=201)
    ask(ld, "multi-key, keys held", "POST", M, {"keys": [c, ctx.key("oa-mx"), a]}, status=409, code="lock_held")
    ask(ld, "multi-key, held after a wait", "POST", M, {"keys": [b], "wait_ms": 150}, status=409, code="lock_held")
    ask(ld, "inspect a key of a multi-key grant", "GET", "/locks/" + a, status=200)
    ask(ld, "multi-key renew, header", "PUT", M, {"keys": [b, a], "ttl_ms": 6000}, {"Lock-Token": tok}, status=200)
    ask(ld, "multi-key renew, body, each key's TTL", "PUT", M, {"keys": [a, b], "token": tok}, status=200)
    ask(ld, "multi-key renew, a key not held", "PUT", M, {"keys": [a, ctx.key("oa-my"), b], "token": tok},
        status=404, code="lock_not_found")
    ask(ld, "multi-key renew, a key held by another", "PUT", M, {"keys": [a, c], "token": tok}, status=409,
        code="token_mismatch")
    ask(ld, "multi-key renew, another token", "PUT", M, {"keys": [a]}, {"Lock-Token": other}, status=409,
        code="token_mismatch")
    ask(ld, "single renew of a key of a multi-key grant", "PUT", "/locks/" + b, None, {"Lock-Token": tok},
        status=200)
    for what, method, body, headers, code in (
            ("a query parameter", "POST", {"keys": [a]}, None, "invalid_parameter"),
            ("an unknown field", "POST", {"keys": [a], "mode": "shared"}, None, "invalid_parameter"),
            ("keys empty", "POST", {"keys": []}, None, "invalid_parameter"),
            ("keys not an array", "POST", {"keys": a}, None, "invalid_parameter"),
            ("a repeated key", "POST", {"keys": [a, b, a]}, None, "invalid_parameter"),
            ("a number among the keys", "PUT", {"keys": [a, 1]}, {"Lock-Token": tok}, "invalid_parameter"),
            ("an Idempotency-Key", "POST", {"keys": [a]}, {"Idempotency-Key": "oa-1"}, "invalid_parameter"),
            ("token twice", "DELETE", {"keys": [a], "token": tok}, {"Lock-Token": tok}, "invalid_parameter"),
            ("an empty key", "POST", {"keys": [a, ""]}, None, "invalid_key"),
            ("a control character in a key", "DELETE", {"keys": ["x\u0001"]}, {"Lock-Token": tok}, "invalid_key"),
            ("no token", "PUT", {"keys": [a]}, None, "missing_token"),
            ("an empty token", "DELETE", {"keys": [a], "token": ""}, None, "missing_token"),
            ("an array body", "DELETE", b"[]", {"Lock-Token": tok}, "invalid_json"),
            ("junk", "POST", b"keys=a", None, "invalid_json")):
        query = "?wait_ms=0" if what == "a query parameter" else ""
        ask(ld, "multi-key, " + what, method, M + query, body, headers, status=400, code=code)
    for m in ("POST", "PUT", "DELETE"):
        ask(ld, "multi-key, body too large", m, M, b"{" + b" " * 9000 + b"}", status=413, code="body_too_large")
    ask(ld, "multi-key release, a partial set", "DELETE", M, {"keys": [a, ctx.key("oa-mz")], "token": tok},
        status=200)
    ask(ld, "multi-key release, header", "DELETE", M, {"keys": [b]}, {"Lock-Token": tok}, status=200)
    ask(ld, "multi-key release, none held", "DELETE", M, {"keys": [a, b], "token": tok}, status=404,
        code="lock_not_found")


def live_operator(ld, ctx, ask):
    """GET /locks and the forced release: every answer they document."""
    p = ctx.key("oa-op") + "/"
    ask(ld, "grant, listed", "POST", "/locks/" + p + "a", {"owner": "pod-a", "ttl_ms": 5000}, status=201)
    ask(ld, "grant, listed shared", "POST", "/locks/" + p + "b", {"mode": "shared", "ttl_ms": 5000}, status=201)
    r = ask(ld, "list, a page", "GET", "/locks?limit=2&prefix=" + p, status=200)
    ask(ld, "list, HEAD", "HEAD", "/locks?limit=2&prefix=" + p, status=200)
    r = ask(ld, "list, first page", "GET", "/locks?limit=1&prefix=" + p, status=200)
    ask(ld, "list, next page", "GET", "/locks?limit=1&prefix=" + p + "&cursor=" + r.json["next_cursor"], status=200)
    ask(ld, "list, none", "GET", "/locks?prefix=" + p + "none", status=200)
    ask(ld, "list, bad limit", "GET", "/locks?limit=0", status=400, code="invalid_parameter")
    ask(ld, "list, bad cursor", "GET", "/locks?cursor=zz", status=400, code="invalid_parameter")
    ask(ld, "list, a body", "GET", "/locks", {"prefix": "a"}, status=400, code="invalid_parameter")
    ask(ld, "force, no admin file", "DELETE", "/locks/" + p + "a?force=true", status=403, code="forbidden")
    tf = os.path.join(ctx.tmpdir, "openapi-admin-%d" % harness.free_port())
    with open(tf, "w") as f:
        f.write("adm1n-openapi\n")
    la = ctx.new_lockd(args=["--admin-token-file", tf])
    adm = {"Authorization": "Bearer adm1n-openapi"}
    # its own key: on a shared store the first instance still holds p/a
    ask(la, "grant, to force", "POST", "/locks/" + p + "c", {"owner": "stuck", "ttl_ms": 5000}, status=201)
    ask(la, "force, no token", "DELETE", "/locks/" + p + "c?force=true", status=401, code="unauthorized")
    ask(la, "force with a token", "DELETE", "/locks/" + p + "c?force=true", {"token": "x"}, adm, status=400,
        code="invalid_parameter")
    ask(la, "force", "DELETE", "/locks/" + p + "c", {"force": True}, adm, status=200)
    ask(la, "force, free", "DELETE", "/locks/" + p + "c?force=true", None, adm, status=404, code="lock_not_found")


def live_answers(ctx):
    """Many requests across every route and error case on the backend under
    test; returns [Answer]. Each request's status (and error code) is
    checked here, so that the answers cover what they claim to."""
    out = []
    L = "/locks/"

    def ask(ld, label, method, path, body=None, headers=None, status=None, code=None, client=None):
        r = (client or ld).request(method, path, body, headers)
        out.append(Answer(label, method, path, r))
        if status is not None:
            eq(r.status, status, "%s: %s %s status (body %r)" % (label, method, path[:80], r.text[:200]))
        if code is not None:
            eq(r.error_code(), code, "%s: %s %s code" % (label, method, path[:80]))
        return r

    # ---- the lock verbs on the main instance
    ld = ctx.lockd
    k = ctx.key("oa-live")
    g = ask(ld, "grant", "POST", L + k, {"ttl_ms": 5000, "owner": "pod-a/worker-3"}, status=201)
    tok = g.json["token"]
    ask(ld, "grant by query", "POST", L + k + "-q?ttl_ms=4000&owner=q+label", status=201)
    ask(ld, "grant, empty body", "POST", L + k + "-e", b"", status=201)
    ask(ld, "grant, unicode key", "POST", L + k + "/caf%C3%A9%2F%E2%98%83", {"ttl_ms": 1000}, status=201)
    ask(ld, "grant, 512-byte key", "POST", L + (k + "-" + "k" * 512)[:512], {"ttl_ms": 1000}, status=201)
    ask(ld, "inspect", "GET", L + k, status=200)
    ask(ld, "inspect, no owner", "GET", L + k + "-e", status=200)
    ask(ld, "inspect HEAD", "HEAD", L + k, status=200)
    ask(ld, "held", "POST", L + k, status=409, code="lock_held")
    ask(ld, "held after a wait", "POST", L + k + "?wait_ms=150", status=409, code="lock_held")
    ask(ld, "renew, header", "PUT", L + k, {"ttl_ms": 6000}, {"Lock-Token": tok}, status=200)
    ask(ld, "renew, query", "PUT", L + k + "?token=" + tok, status=200)
    ask(ld, "renew, body", "PUT", L + k, {"token": tok}, status=200)
    ask(ld, "renew, wrong token", "PUT", L + k, None, {"Lock-Token": "0" * 32}, status=409, code="token_mismatch")
    ask(ld, "release, wrong token", "DELETE", L + k, {"token": "f" * 32}, status=409, code="token_mismatch")
    ask(ld, "renew, no token", "PUT", L + k, status=400, code="missing_token")
    ask(ld, "release, empty token", "DELETE", L + k, {"token": ""}, status=400, code="missing_token")
    ask(ld, "token twice", "PUT", L + k, {"token": tok}, {"Lock-Token": tok}, status=400, code="invalid_parameter")
    ask(ld, "unknown field", "POST", L + k, {"ttl": 5}, status=400, code="invalid_parameter")
    ask(ld, "field twice", "POST", L + k + "?ttl_ms=5", {"ttl_ms": 5}, status=400, code="invalid_parameter")
    ask(ld, "ttl_ms 0", "POST", L + k + "?ttl_ms=0", status=400, code="invalid_parameter")
    ask(ld, "ttl_ms a string", "POST", L + k, {"ttl_ms": "5"}, status=400, code="invalid_parameter")
    ask(ld, "Lock-Token on acquire: a re-entry", "POST", L + k, None, {"Lock-Token": tok}, status=200)
    ask(ld, "release one of two holds", "DELETE", L + k, None, {"Lock-Token": tok}, status=200)
    live_kinds(ld, ctx, ask, tok)
    live_multi(ld, ctx, ask, tok)
    live_operator(ld, ctx, ask)
    ask(ld, "wait_ms on renew", "PUT", L + k, {"token": tok, "wait_ms": 1}, status=400, code="invalid_parameter")
    ask(ld, "query on inspect", "GET", L + k + "?wait_ms=1", status=400, code="invalid_parameter")
    ask(ld, "array body", "POST", L + k, b"[]", status=400, code="invalid_json")
    ask(ld, "form body", "POST", L + k, b"ttl_ms=5", status=400, code="invalid_json")
    ask(ld, "junk body on inspect", "GET", L + k, b"x", status=400, code="invalid_json")
    ask(ld, "junk body on release", "DELETE", L + k, b"{", status=400, code="invalid_json")
    ask(ld, "empty key", "GET", L, status=400, code="invalid_key")
    ask(ld, "empty key HEAD", "HEAD", L, status=400)
    ask(ld, "bad escape", "POST", L + "%zz", status=400, code="invalid_key")
    ask(ld, "NUL in key", "PUT", L + "a%00b", None, {"Lock-Token": tok}, status=400, code="invalid_key")
    ask(ld, "bad UTF-8 key", "DELETE", L + "%ff", None, {"Lock-Token": tok}, status=400, code="invalid_key")
    ask(ld, "513-byte key", "POST", L + "k" * 513, status=400, code="invalid_key")
    big = b"{" + b" " * 9000 + b"}"
    for m in ("POST", "PUT", "DELETE", "GET"):
        ask(ld, "body too large", m, L + k, big, status=413, code="body_too_large")
    ask(ld, "release", "DELETE", L + k, None, {"Lock-Token": tok}, status=200)
    ask(ld, "inspect free", "GET", L + k, status=404, code="lock_not_found")
    ask(ld, "inspect free HEAD", "HEAD", L + k, status=404)
    ask(ld, "renew free", "PUT", L + k + "?token=" + tok, status=404, code="lock_not_found")
    ask(ld, "release free", "DELETE", L + k, {"token": tok}, status=404, code="lock_not_found")
    # a waiter granted when the holder's TTL passes
    ask(ld, "short holder", "POST", L + k + "-w", {"ttl_ms": 200}, status=201)
    ask(ld, "waiter granted at expiry", "POST", L + k + "-w", {"wait_ms": 5000, "ttl_ms": 1000}, status=201)
    # operations endpoints, 405s and unknown routes
    ask(ld, "healthz", "GET", "/healthz", status=200)
    ask(ld, "healthz HEAD", "HEAD", "/healthz", status=200)
    r = ask(ld, "readyz", "GET", "/readyz", status=200)
    eq(r.json.get("backend"), ctx.backend, "readyz backend")
    ask(ld, "readyz HEAD", "HEAD", "/readyz", status=200)
    ask(ld, "metrics", "GET", "/metrics", status=200)
    ask(ld, "metrics HEAD", "HEAD", "/metrics", status=200)
    for path, methods in ((L + k, ("PATCH", "OPTIONS", "TRACE")), ("/locks", ("PATCH", "OPTIONS", "TRACE")),
                          ("/healthz", ("POST", "DELETE")), ("/readyz", ("PUT",)), ("/metrics", ("POST",))):
        for m in methods:
            ask(ld, "method not allowed", m, path, status=405, code="method_not_allowed")
    for path in ("/nope", "/healthz/x", "/", "/locksx"):
        ask(ld, "no such route", "GET", path, status=404, code="not_found")

    # ---- HTTP's edges, sent as raw bytes: answered by lockd, in JSON
    def ask_raw(label, method, path, head, status, code=None):
        data = ("%s %s HTTP/1.1\r\nHost: x\r\n" % (method, path)).encode() + head + b"Connection: close\r\n\r\n"
        r = parse_raw(harness.raw(ld.port, data))
        check(r is not None, "%s: no HTTP answer" % label)
        out.append(Answer(label, method, path, r))
        eq(r.status, status, "%s: status (body %r)" % (label, r.text[:200]))
        if code is not None:
            eq(r.error_code(), code, "%s: code" % label)
    ke = ctx.key("oa-edge")
    ask(ld, "edge holder", "POST", L + ke, status=201)
    for m in ("POST", "GET", "HEAD"):
        ask_raw("unknown transfer coding", m, L + ke, b"Transfer-Encoding: gzip\r\n", 501,
                None if m == "HEAD" else "not_implemented")
    ask_raw("unknown transfer coding", "GET", "/healthz", b"Transfer-Encoding: gzip, chunked\r\n", 501,
            "not_implemented")
    for path in (L + ke, "/healthz", "/readyz"):
        ask_raw("headers over --max-header-bytes", "GET", path, b"X-Big: " + b"a" * 20000 + b"\r\n", 431,
                "headers_too_large")
    ask_raw("NUL in Lock-Token", "DELETE", L + ke, b"Lock-Token: 0123\x00x\r\n", 400, "invalid_parameter")
    ask_raw("control character in Lock-Token", "PUT", L + ke, b"Lock-Token: 01\x0123\r\n", 400,
            "invalid_parameter")
    for m in ("POST", "PUT", "DELETE", "GET"):
        ask_raw("folded header line", m, L + ke, b"X-A: a\r\n b\r\n", 400, "bad_request")
    for m in ("POST", "PUT", "DELETE"):
        ask_raw("folded header line, several keys", m, "/locks", b"X-A: a\r\n b\r\n", 400, "bad_request")
    ask_raw("absolute-form target", "GET", "http://127.0.0.1:%d/healthz" % ld.port, b"", 200)
    ask_raw("absolute-form target", "GET", "HTTP://h" + L + ke, b"", 200)
    ask_raw("CONNECT", "CONNECT", "/healthz", b"", 405, "method_not_allowed")

    # ---- bearer auth: 401 on /locks only
    tok_file = os.path.join(ctx.tmpdir, "openapi-live-token")
    with open(tok_file, "w") as f:
        f.write("s3cret-live\n")
    la = ctx.new_lockd(args=["--auth-token-file", tok_file])
    ka = ctx.key("oa-auth")
    ask(la, "no credentials", "POST", L + ka, status=401, code="unauthorized")
    ask(la, "wrong token", "GET", L + ka, None, {"Authorization": "Bearer wrong"}, status=401, code="unauthorized")
    ask(la, "Basic", "PUT", L + ka, None, {"Authorization": "Basic czNjcmV0", "Lock-Token": "x"}, status=401,
        code="unauthorized")
    ask(la, "no credentials, release", "DELETE", L + ka, status=401, code="unauthorized")
    ask(la, "no credentials, HEAD", "HEAD", L + ka, status=401)
    for m in ("POST", "PUT", "DELETE"):
        ask(la, "no credentials, several keys", m, "/locks", {"keys": [ka]}, status=401, code="unauthorized")
    auth = {"Authorization": "Bearer s3cret-live"}
    g = ask(la, "authorized grant", "POST", L + ka, None, auth, status=201)
    ask(la, "authorized release", "DELETE", L + ka, None, dict(auth, **{"Lock-Token": g.json["token"]}),
        status=200)
    for path in ("/healthz", "/readyz", "/metrics"):
        ask(la, "open without auth", "GET", path, status=200)

    # ---- 429: an address over --max-connections-per-ip, on any path
    lc = ctx.new_lockd(env={"LOCKD_MAX_CONNECTIONS_PER_IP": "1"})
    first = lc.client(timeout=10)
    try:
        deadline = time.monotonic() + 5
        while True:  # until lockd has seen the harness's probe connection go
            try:
                if first.request("GET", "/healthz").status == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass
            check(time.monotonic() < deadline, "the first connection is refused with a cap of 1")
            first.close()
            first = lc.client(timeout=10)
            time.sleep(0.1)
        ask(lc, "the one connection", "GET", "/healthz", status=200, client=first)
        for method, path in (("GET", "/healthz"), ("GET", L + ctx.key("oa-cap")), ("POST", "/locks")):
            r = parse_raw(harness.raw(lc.port, ("%s %s HTTP/1.1\r\nHost: x\r\n\r\n" % (method, path)).encode()))
            check(r is not None, "no answer to a connection over the per-address cap")
            out.append(Answer("over the per-address cap", method, path, r))
            eq((r.status, r.error_code()), (429, "too_many_requests"), "over the per-address cap")
    finally:
        first.close()

    # ---- an unreachable store: 503 backend_unavailable, /readyz 503
    lu = ctx.new_lockd(args=["--backend", dead_backend_url(ctx.backend)])
    ku = ctx.key("oa-down")
    hdr = {"Lock-Token": "0" * 32}
    for m, h in (("POST", None), ("PUT", hdr), ("DELETE", hdr), ("GET", None), ("HEAD", None)):
        ask(lu, "store unreachable", m, L + ku, None, h, status=503,
            code=None if m == "HEAD" else "backend_unavailable")
    for m, h in (("POST", None), ("PUT", hdr), ("DELETE", hdr)):
        ask(lu, "store unreachable, several keys", m, "/locks", {"keys": [ku, ku + "-2"]}, h, status=503,
            code="backend_unavailable")
    ask(lu, "store unreachable", "GET", "/readyz", status=503)
    ask(lu, "store unreachable", "HEAD", "/readyz", status=503)
    ask(lu, "store unreachable", "GET", "/healthz", status=200)
    ask(lu, "store unreachable", "GET", "/metrics")

    # ---- shutdown: parked waiters (one key, several keys) are answered 503 shutting_down
    ls = ctx.new_lockd()
    kd = ctx.key("oa-drain")
    ask(ls, "holder before shutdown", "POST", L + kd, {"ttl_ms": 30000}, status=201)
    waiters = [("waiter at shutdown", L + kd, {"wait_ms": 20000}),
               ("multi-key waiter at shutdown", "/locks", {"keys": [ctx.key("oa-drain"), kd], "wait_ms": 20000})]
    got = {}

    def wait(label, path, body):
        try:
            got[label] = ls.request("POST", path, body, timeout=15)
        except (OSError, http.client.HTTPException) as e:
            got[label + " error"] = e

    keep = ls.client(timeout=10)
    ts = [threading.Thread(target=wait, args=w, daemon=True) for w in waiters]
    try:
        ask(ls, "kept alive", "GET", "/healthz", status=200, client=keep)
        for t in ts:
            t.start()
        time.sleep(0.4)
        ls.signal(signal.SIGTERM)
        for t in ts:
            t.join(10)
        for label, path, _ in waiters:
            check(label in got, "the %s got no answer after SIGTERM: %r" % (label, got.get(label + " error")))
            out.append(Answer(label, "POST", path, got[label]))
            eq((got[label].status, got[label].error_code()), (503, "shutting_down"), label)
        try:
            ask(ls, "readyz while draining", "GET", "/readyz", status=503, client=keep)
        except (OSError, http.client.HTTPException, socket.timeout):
            pass  # the kept-alive connection was closed: lockd may be gone already
    finally:
        keep.close()
    return out


_LIVE = {}


def live_answers_once(ctx):
    """live_answers() for this backend, run once per test run."""
    if ctx.backend not in _LIVE:
        _LIVE[ctx.backend] = live_answers(ctx)
    return _LIVE[ctx.backend]


@harness.scenario("openapi.yaml: every live answer (all routes, errors, auth, 429, store down, shutdown) "
                  "fits its documented status, headers and body schema")
def openapi_live_answers_fit(ctx):
    spec = load_spec()
    answers = live_answers_once(ctx)
    errs = []
    for a in answers:
        errs += ["[%s] %s" % (a.label, e) for e in answer_errors(spec, a.method, a.path, a.resp)]
    harness.log("     %d live answers checked against api/openapi.yaml" % len(answers))
    check(not errs, "%d answers do not fit api/openapi.yaml:\n  %s" % (len(errs), "\n  ".join(errs[:40])))


def enum_leaves(spec, inst, schema, where="$"):
    """{where: value} of inst's values whose schema has an enum or const."""
    out = {}
    schema = spec.resolve(schema or {})
    for sub in schema.get("allOf", []):
        out.update(enum_leaves(spec, inst, sub, where))
    if "enum" in schema or "const" in schema:
        out[where] = inst
    if isinstance(inst, dict):
        props = schema.get("properties") or {}
        for name, value in inst.items():
            if name in props:
                out.update(enum_leaves(spec, value, props[name], "%s.%s" % (where, name)))
    return out


def flat_schema(spec, schema):
    """schema resolved, with its allOf parts merged in (its own keys win)."""
    out = dict(spec.resolve(schema or {}))
    for sub in out.pop("allOf", []):
        out = {**flat_schema(spec, sub), **out}
    return out


def shape(v, spec=None, schema=None):
    """v's keys and JSON types, recursively (values dropped). Under a schema
    that is a map (additionalProperties, no properties: a multi-key
    grant's fences) the keys are data, so only the values' types count."""
    schema = flat_schema(spec, schema) if spec is not None else {}
    if isinstance(v, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if not props and isinstance(extra, dict):
            return {"*": sorted({json.dumps(shape(x, spec, extra)) for x in v.values()})}
        return {k: shape(x, spec, props.get(k)) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(v[0], spec, schema.get("items"))] if v else []
    return oaschema._json_type(v)  # noqa: SLF001 - same module family


@harness.scenario("openapi.yaml: every response example has the keys, types and enum values "
                  "of a live answer on this backend")
def openapi_examples_match_live(ctx):
    spec = load_spec()
    answers = live_answers_once(ctx)
    comps = spec.doc["components"]["responses"]

    def documenting(a):
        """The response object that documents answer a (resolved), or None."""
        tmpl = spec.route(a.path)
        if tmpl is None:
            return spec.resolve(comps["RouteNotFound"])
        if spec.operation(tmpl, a.method) is None:
            return spec.resolve(comps["MethodNotAllowed"])
        return spec.response(tmpl, a.method, a.resp.status)

    by_response = {}
    for a in answers:
        r = documenting(a)
        if r is not None and a.method != "HEAD":
            by_response.setdefault(id(r), []).append(a)

    # (where, response object, media type, media, value), each response
    # object once however many operations share it
    examples, seen = [], set()
    owners = [("%s %s %s" % (method.upper(), tmpl, status), r)
              for tmpl, item in spec.doc["paths"].items()
              for method, op in item.items() if method in METHODS
              for status, r in op["responses"].items()]
    owners += [("components.responses.%s" % c, comps[c]) for c in ("MethodNotAllowed", "RouteNotFound")]
    for where, r in owners:
        if "$ref" in r:
            where += " (%s)" % r["$ref"].rsplit("/", 1)[-1]
        r = spec.resolve(r)
        if id(r) in seen:
            continue
        seen.add(id(r))
        for mt, media in (r.get("content") or {}).items():
            for name, value in spec.media_examples(media):
                examples.append(("%s %s" % (where, name), r, mt, media, value))

    failures, skipped, checked = [], [], 0
    for where, r, mt, media, value in examples:
        cands = [a for a in by_response.get(id(r), [])
                 if (a.resp.header("Content-Type") or "").split(";")[0].strip() == mt]
        if mt == "text/plain":
            check(cands, "%s: no live answer" % where)
            live = cands[0].resp.text
            for line in value.splitlines():
                name = line.split()[2] if line.startswith("# TYPE") else line.split()[0].split("{")[0]
                if line.startswith("# TYPE"):
                    check(line in live, "%s: %r is not in the live metrics" % (where, line))
                else:
                    check(re.search(r"^%s[ {]" % re.escape(name), live, re.M),
                          "%s: metric %s is not in the live metrics" % (where, name))
            checked += 1
            continue
        want_enums = enum_leaves(spec, value, media["schema"])
        match = [a for a in cands if enum_leaves(spec, a.resp.json, media["schema"]) == want_enums]
        want_shape = shape(value, spec, media["schema"])
        if any(shape(a.resp.json, spec, media["schema"]) == want_shape for a in match):
            checked += 1
            continue
        code = want_enums.get("$.error.code")
        if isinstance(value, dict) and value.get("backend") not in (None, ctx.backend) and not match:
            skipped.append("%s (backend %s)" % (where, value.get("backend")))
        elif code in UNREACHABLE_CODES and not match:
            skipped.append("%s (%s: %s)" % (where, code, UNREACHABLE_CODES[code]))
        elif match:
            failures.append("%s: example %s, live %s" % (where, json.dumps(value), match[0].resp.text[:300]))
        else:
            failures.append("%s: no live answer with %s (example %s; live answers of this response: %s)"
                            % (where, want_enums, json.dumps(value),
                               sorted({a.resp.text[:120] for a in cands})[:4]))
    harness.log("     %d examples matched live answers; not checkable on %s: %s"
                % (checked, ctx.backend, "; ".join(skipped) or "none"))
    check(not failures, "%d examples differ from lockd's answers:\n  %s"
          % (len(failures), "\n  ".join(failures)))

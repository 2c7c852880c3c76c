"""tests/e2e/test_openapi.py - api/openapi.yaml against docs/API.md and a
running lockd.

The document is checked on its own (every $ref resolves, every operation has
an operationId, every response a description and X-Request-Id, every example
fits its schema), against docs/API.md (the error code enum is exactly the
table's codes, each error example sits under its table status), and against reality:
real requests must answer a status the document lists for that operation,
with a body that fits the documented schema, a code among the documented
examples and the documented headers.

PyYAML comes from the running python if it has it, else from Debian's
/usr/bin/python3 (python3-yaml, a dependency of yamllint) in a subprocess.
"""

import json
import math
import os
import re
import subprocess
import time

import harness
from harness import Fail, check, eq

SPEC_PATH = os.path.join(harness.ROOT, "api", "openapi.yaml")
API_MD_PATH = os.path.join(harness.ROOT, "docs", "API.md")
METHODS = ("get", "head", "post", "put", "delete", "options", "patch", "trace")

# The contract's routes and methods (docs/API.md plus the decided Allow lists).
ROUTES = {
    "/locks/{key}": {"get", "head", "post", "put", "delete"},
    "/healthz": {"get", "head"},
    "/readyz": {"get", "head"},
    "/metrics": {"get", "head"},
}

_YAML_TO_JSON = (
    "import json, sys, yaml\n"
    "json.dump(yaml.safe_load(open(sys.argv[1], encoding='utf-8')), sys.stdout, default=str)\n"
)


def load_spec():
    try:
        import yaml  # noqa: PLC0415 - optional, not in the standard library
    except ImportError:
        yaml = None
    if yaml is not None:
        with open(SPEC_PATH, encoding="utf-8") as f:
            return yaml.safe_load(f)
    p = subprocess.run(["/usr/bin/python3", "-c", _YAML_TO_JSON, SPEC_PATH],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise Fail("cannot parse %s (no PyYAML here or in /usr/bin/python3): %s"
                   % (SPEC_PATH, p.stderr[-2000:]))
    return json.loads(p.stdout)


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


class Spec:
    def __init__(self, doc):
        self.doc = doc

    def resolve(self, node):
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            check(ref.startswith("#/"), "non-local $ref %r" % ref)
            node = self.doc
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(node, dict) or part not in node:
                    raise Fail("$ref %r does not resolve" % ref)
                node = node[part]
            seen += 1
            check(seen < 20, "$ref loop at %r" % ref)
        return node

    def op(self, path, method):
        return self.doc["paths"][path][method]

    def response(self, path, method, status):
        resps = self.op(path, method)["responses"]
        r = resps.get(str(status))
        return None if r is None else self.resolve(r)

    def schema_of(self, path, method, status, media="application/json"):
        r = self.response(path, method, status)
        return self.resolve(r["content"][media]["schema"])

    def examples(self, media):
        out = []
        if "example" in media:
            out.append(media["example"])
        for ex in (media.get("examples") or {}).values():
            out.append(self.resolve(ex)["value"])
        return out

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

    # A small JSON Schema (OpenAPI 3.0 subset) validator: what the document uses.
    def validate(self, inst, schema, where="$"):
        errs = []
        schema = self.resolve(schema)
        for sub in schema.get("allOf", []):
            errs += self.validate(inst, sub, where)
        t = schema.get("type")
        types = {"object": dict, "string": str, "boolean": bool, "array": list}
        if t == "integer":
            if isinstance(inst, bool) or not isinstance(inst, int):
                return errs + ["%s: %r is not an integer" % (where, inst)]
        elif t == "number":
            if isinstance(inst, bool) or not isinstance(inst, (int, float)):
                return errs + ["%s: %r is not a number" % (where, inst)]
        elif t in types and not isinstance(inst, types[t]):
            return errs + ["%s: %r is not of type %s" % (where, inst, t)]
        if "enum" in schema and inst not in schema["enum"]:
            errs.append("%s: %r not in enum %r" % (where, inst, schema["enum"]))
        if isinstance(inst, str):
            if "minLength" in schema and len(inst) < schema["minLength"]:
                errs.append("%s: %r shorter than %d" % (where, inst, schema["minLength"]))
            if "maxLength" in schema and len(inst) > schema["maxLength"]:
                errs.append("%s: longer than %d" % (where, schema["maxLength"]))
            if "pattern" in schema and not re.search(schema["pattern"], inst):
                errs.append("%s: %r does not match %r" % (where, inst, schema["pattern"]))
        if isinstance(inst, (int, float)) and not isinstance(inst, bool):
            if "minimum" in schema and inst < schema["minimum"]:
                errs.append("%s: %r < minimum %r" % (where, inst, schema["minimum"]))
            if "maximum" in schema and inst > schema["maximum"]:
                errs.append("%s: %r > maximum %r" % (where, inst, schema["maximum"]))
        if isinstance(inst, dict):
            props = schema.get("properties") or {}
            for name in schema.get("required", []):
                if name not in inst:
                    errs.append("%s: missing required %r" % (where, name))
            for name, value in inst.items():
                if name in props:
                    errs += self.validate(value, props[name], "%s.%s" % (where, name))
                elif schema.get("additionalProperties") is False:
                    errs.append("%s: undocumented property %r" % (where, name))
        return errs


def documented_allow(spec, path):
    return {m.upper() for m in spec.doc["paths"][path] if m in METHODS}


def conforms(spec, resp, path, method, want_status=None, want_code=None):
    """resp must be documented for (path, method): status, headers, body."""
    where = "%s %s -> %d" % (method.upper(), path, resp.status)
    if want_status is not None:
        eq(resp.status, want_status, "%s: status (body %r)" % (where, resp.text[:300]))
    r = spec.response(path, method, resp.status)
    check(r is not None, "%s: status not documented (documented: %s)"
          % (where, sorted(spec.op(path, method)["responses"])))
    check(resp.header("X-Request-Id"), "%s: no X-Request-Id" % where)
    for name, h in (r.get("headers") or {}).items():
        if spec.resolve(h).get("required"):
            check(resp.header(name) is not None, "%s: documented header %s missing" % (where, name))
    content = r.get("content") or {}
    if method == "head":
        eq(resp.body, b"", "%s: HEAD body" % where)
        return resp
    check(content, "%s: no documented content" % where)
    ctype = resp.header("Content-Type") or ""
    media_type = [m for m in content if ctype.split(";")[0].strip() == m]
    check(media_type, "%s: Content-Type %r not documented (%s)" % (where, ctype, sorted(content)))
    media = content[media_type[0]]
    if media_type[0] == "application/json":
        check(resp.json is not None, "%s: body is not JSON: %r" % (where, resp.text[:200]))
        errs = spec.validate(resp.json, media["schema"])
        check(not errs, "%s: body %r does not fit the documented schema: %s" % (where, resp.json, errs))
        if resp.status >= 400:
            codes = spec.error_codes(r)
            check(resp.error_code() in codes, "%s: code %r not among documented %s"
                  % (where, resp.error_code(), sorted(codes)))
            if want_code is not None:
                eq(resp.error_code(), want_code, "%s: error code" % where)
    return resp


def check_document(spec, table):
    doc = spec.doc
    eq(doc.get("openapi"), "3.0.3", "openapi version")
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
        ("post", 201): None, ("post", 400): {"invalid_key", "invalid_json", "invalid_parameter"},
        ("post", 401): {"unauthorized"}, ("post", 409): {"lock_held"}, ("post", 413): {"body_too_large"},
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
    eq(query("post"), {"ttl_ms", "wait_ms", "owner"}, "POST query parameters")
    eq(body_props("post"), {"ttl_ms", "wait_ms", "owner"}, "POST body fields")
    eq(query("put"), {"token", "ttl_ms"}, "PUT query parameters")
    eq(body_props("put"), {"token", "ttl_ms"}, "PUT body fields")
    eq(query("delete"), {"token"}, "DELETE query parameters")
    eq(body_props("delete"), {"token"}, "DELETE body fields")
    eq(query("get") | query("head"), set(), "GET/HEAD query parameters")
    for m in ("put", "delete"):
        check(("header", "Lock-Token") in params(m), "%s documents Lock-Token" % m.upper())
    post = params("post")
    eq(spec.resolve(post[("query", "ttl_ms")]["schema"]).get("default"), 30000, "ttl_ms default")
    eq(spec.resolve(post[("query", "wait_ms")]["schema"]).get("default"), 0, "wait_ms default")
    eq(spec.resolve(post[("query", "ttl_ms")]["schema"]).get("minimum"), 1, "ttl_ms minimum")

    # auth: optional bearer on /locks, never on the operations endpoints
    eq(doc["components"]["securitySchemes"]["bearerAuth"].get("scheme"), "bearer", "bearer scheme")
    for m in ROUTES["/locks/{key}"]:
        sec = spec.op("/locks/{key}", m).get("security")
        check(sec and {"bearerAuth": []} in sec and {} in sec, "%s /locks/{key}: optional bearer" % m.upper())
    for path in ("/healthz", "/readyz", "/metrics"):
        for m in ROUTES[path]:
            eq(spec.op(path, m).get("security"), [], "%s %s security" % (m.upper(), path))

    # the validator used below is not vacuous
    grant = spec.resolve({"$ref": "#/components/schemas/Grant"})
    good = {"key": "k", "token": "0" * 32, "fence": 1, "ttl_ms": 1, "expires_at": "2026-11-21T12:00:30.123Z"}
    eq(spec.validate(good, grant), [], "validator on a good grant")
    for bad in ({**good, "token": "X" * 32}, {**good, "fence": "1"}, {**good, "extra": 1},
                {k: v for k, v in good.items() if k != "fence"}, {**good, "expires_at": "2026-11-21"}):
        check(spec.validate(bad, grant), "validator accepted %r" % bad)


@harness.scenario("openapi.yaml lists every route, method, status and error code lockd serves", backends=["memory"])
def openapi_matches_lockd(ctx):
    spec = Spec(load_spec())
    check_document(spec, error_table())

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
    eq(set(r.json), set(spec.schema_of(L, "delete", 200)["required"]), "release body keys")
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

    # 405 with Allow = the documented methods; 404 not_found for other paths
    comps = spec.doc["components"]["responses"]
    for path, real in ((L, "/locks/" + k), ("/healthz", "/healthz"), ("/readyz", "/readyz"), ("/metrics", "/metrics")):
        for method in ("PATCH", "OPTIONS") if path == L else ("PATCH", "POST"):
            r = ld.request(method, real)
            eq(r.status, 405, "%s %s status" % (method, real))
            eq(spec.validate(r.json, comps["MethodNotAllowed"]["content"]["application/json"]["schema"]), [],
               "%s %s body" % (method, real))
            eq(r.error_code(), "method_not_allowed", "%s %s code" % (method, real))
            allow = {m.strip() for m in (r.header("Allow") or "").split(",") if m.strip()}
            eq(allow, documented_allow(spec, path), "%s %s Allow" % (method, real))
            check(r.header("X-Request-Id"), "405 X-Request-Id")
    for real in ("/locks", "/nope", "/healthz/x"):
        r = ld.request("GET", real)
        eq((r.status, r.error_code()), (404, "not_found"), "GET %s" % real)
        eq(spec.validate(r.json, comps["RouteNotFound"]["content"]["application/json"]["schema"]), [], real)

    # optional bearer auth: 401 + WWW-Authenticate on /locks only
    tok_file = os.path.join(ctx.tmpdir, "openapi-auth-token")
    with open(tok_file, "w") as f:
        f.write("s3cret-openapi\n")
    la = ctx.new_lockd(args=["--auth-token-file", tok_file])
    k2 = ctx.key("openapi-auth")
    r = conforms(spec, la.request("POST", "/locks/" + k2), L, "post", 401, "unauthorized")
    check((r.header("WWW-Authenticate") or "").startswith("Bearer"), "WWW-Authenticate %r"
          % r.header("WWW-Authenticate"))
    conforms(spec, la.request("GET", "/locks/" + k2, headers={"Authorization": "Bearer wrong"}), L, "get", 401,
             "unauthorized")
    r = conforms(spec, la.request("POST", "/locks/" + k2, headers={"Authorization": "Bearer s3cret-openapi"}),
                 L, "post", 201)
    conforms(spec, la.request("GET", "/healthz"), "/healthz", "get", 200)
    conforms(spec, la.request("GET", "/readyz"), "/readyz", "get", 200)

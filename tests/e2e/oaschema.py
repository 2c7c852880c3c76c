"""tests/e2e/oaschema.py - a small OpenAPI 3.0 validator for lockd's tests.

It reads api/openapi.yaml and checks live HTTP answers against it:

- Document.validate(inst, schema): JSON Schema as OpenAPI 3.0 uses it:
  $ref (local), allOf/anyOf/oneOf, type (with nullable), enum, const,
  pattern, minLength/maxLength, minimum/maximum (and exclusive ones),
  multipleOf, format (date-time, int32, int64), required, properties,
  additionalProperties (false or a schema), items, minItems/maxItems.
  Returns a list of messages; empty means valid.
- Document.check_response(path, method, status, headers, body): the
  operation of that path template and method lists the status; every
  header it declares is there when required and fits its schema (a header
  value is text: an integer schema takes decimal digits); the body fits the
  documented media type's schema, a HEAD answer and a response without
  content have no body.
- Document.route(path): the path template a request path belongs to.

Only the standard library and PyYAML. PyYAML comes from the running python
if it has it, else from Debian's /usr/bin/python3 (package python3-yaml) in
a subprocess.
"""

import datetime
import json
import re
import subprocess

METHODS = ("get", "head", "post", "put", "delete", "options", "patch", "trace")

_YAML_TO_JSON = (
    "import json, sys, yaml\n"
    "json.dump(yaml.safe_load(open(sys.argv[1], encoding='utf-8')), sys.stdout, default=str)\n"
)

# RFC 3339 date-time (JSON Schema's format), checked for real dates too.
_DATE_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")


class SpecError(Exception):
    """The document itself is broken (a $ref that does not resolve, ...)."""


def load_yaml(path):
    try:
        import yaml  # noqa: PLC0415 - optional, not in the standard library
    except ImportError:
        yaml = None
    if yaml is not None:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    p = subprocess.run(["/usr/bin/python3", "-c", _YAML_TO_JSON, path],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SpecError("cannot parse %s (no PyYAML here or in /usr/bin/python3;"
                        " install python3-yaml): %s" % (path, p.stderr[-2000:]))
    return json.loads(p.stdout)


def _is_date_time(s):
    m = _DATE_TIME.match(s)
    if m is None:
        return False
    y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
    try:
        datetime.datetime(y, mo, d, h, mi, min(sec, 59))  # 60: a leap second
    except ValueError:
        return False
    return sec <= 60


def _json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _type_ok(inst, t):
    jt = _json_type(inst)
    if t == "number":
        return jt in ("integer", "number")
    return jt == t


class Document:
    def __init__(self, doc):
        self.doc = doc

    @classmethod
    def load(cls, path):
        return cls(load_yaml(path))

    # ------------------------------------------------------------ references

    def resolve(self, node):
        """Follow $ref until a node without one."""
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/"):
                raise SpecError("non-local $ref %r" % ref)
            node = self.doc
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(node, dict) or part not in node:
                    raise SpecError("$ref %r does not resolve" % ref)
                node = node[part]
            seen += 1
            if seen > 20:
                raise SpecError("$ref loop at %r" % ref)
        return node

    # ----------------------------------------------------------------- paths

    def route(self, path):
        """The path template of doc.paths that a request path (without its
        query) matches, or None. A {param} matches any characters, '/'
        included (lockd's key is the whole rest of the path), and none: a
        path with an empty parameter still belongs to its template, whose
        operation documents the 400 it gets."""
        path = path.split("?", 1)[0]
        m = re.match(r"(?i)https?://[^/]*", path)  # absolute form: route by its path
        if m:
            path = path[m.end():] or "/"
        for tmpl in self.doc.get("paths", {}):
            rx = "^" + "".join(".*" if re.fullmatch(r"\{[^}]+\}", part) else re.escape(part)
                               for part in re.split(r"(\{[^}]+\})", tmpl)) + "$"
            if re.match(rx, path, re.S):
                return tmpl
        return None

    def operation(self, tmpl, method):
        item = self.doc["paths"].get(tmpl) or {}
        return item.get(method.lower())

    def response(self, tmpl, method, status):
        """The response object documented for status (exact, then 4XX,
        then default), resolved; None if the status is not listed."""
        op = self.operation(tmpl, method)
        if op is None:
            return None
        resps = op.get("responses") or {}
        for k in (str(status), "%dXX" % (status // 100), "default"):
            if k in resps:
                return self.resolve(resps[k])
        return None

    # ---------------------------------------------------------------- schema

    def validate(self, inst, schema, where="$"):
        errs = []
        schema = self.resolve(schema)
        if not isinstance(schema, dict):
            raise SpecError("%s: a schema must be an object, not %r" % (where, schema))
        for sub in schema.get("allOf", []):
            errs += self.validate(inst, sub, where)
        if "anyOf" in schema:
            if not any(not self.validate(inst, s, where) for s in schema["anyOf"]):
                errs.append("%s: %r fits none of anyOf" % (where, inst))
        if "oneOf" in schema:
            n = sum(1 for s in schema["oneOf"] if not self.validate(inst, s, where))
            if n != 1:
                errs.append("%s: %r fits %d of oneOf, not exactly one" % (where, inst, n))
        if inst is None and schema.get("nullable"):
            return errs
        t = schema.get("type")
        if t is not None and not _type_ok(inst, t):
            return errs + ["%s: %r is %s, not %s" % (where, inst, _json_type(inst), t)]
        if "enum" in schema and not any(_json_type(inst) == _json_type(e) and inst == e
                                        for e in schema["enum"]):
            errs.append("%s: %r not in enum %r" % (where, inst, schema["enum"]))
        if "const" in schema and not (_json_type(inst) == _json_type(schema["const"])
                                      and inst == schema["const"]):
            errs.append("%s: %r is not the const %r" % (where, inst, schema["const"]))
        if isinstance(inst, str):
            n = len(inst)
            if "minLength" in schema and n < schema["minLength"]:
                errs.append("%s: %r shorter than %d" % (where, inst, schema["minLength"]))
            if "maxLength" in schema and n > schema["maxLength"]:
                errs.append("%s: longer than %d" % (where, schema["maxLength"]))
            if "pattern" in schema and not re.search(schema["pattern"], inst):
                errs.append("%s: %r does not match %r" % (where, inst, schema["pattern"]))
            if schema.get("format") == "date-time" and not _is_date_time(inst):
                errs.append("%s: %r is not an RFC 3339 date-time" % (where, inst))
        if _json_type(inst) in ("integer", "number"):
            if "minimum" in schema:
                if inst < schema["minimum"] or (schema.get("exclusiveMinimum") is True
                                                and inst == schema["minimum"]):
                    errs.append("%s: %r below minimum %r" % (where, inst, schema["minimum"]))
            if "maximum" in schema:
                if inst > schema["maximum"] or (schema.get("exclusiveMaximum") is True
                                                and inst == schema["maximum"]):
                    errs.append("%s: %r above maximum %r" % (where, inst, schema["maximum"]))
            if "multipleOf" in schema and inst % schema["multipleOf"] != 0:
                errs.append("%s: %r not a multiple of %r" % (where, inst, schema["multipleOf"]))
            bits = {"int32": 31, "int64": 63}.get(schema.get("format"))
            if bits is not None and not -(1 << bits) <= inst < (1 << bits):
                errs.append("%s: %r out of %s" % (where, inst, schema["format"]))
        if isinstance(inst, dict):
            props = schema.get("properties") or {}
            for name in schema.get("required", []):
                if name not in inst:
                    errs.append("%s: missing required %r" % (where, name))
            extra = schema.get("additionalProperties", True)
            for name, value in inst.items():
                if name in props:
                    errs += self.validate(value, props[name], "%s.%s" % (where, name))
                elif extra is False:
                    errs.append("%s: undocumented property %r" % (where, name))
                elif isinstance(extra, dict):
                    errs += self.validate(value, extra, "%s.%s" % (where, name))
        if isinstance(inst, list):
            if "minItems" in schema and len(inst) < schema["minItems"]:
                errs.append("%s: fewer than %d items" % (where, schema["minItems"]))
            if "maxItems" in schema and len(inst) > schema["maxItems"]:
                errs.append("%s: more than %d items" % (where, schema["maxItems"]))
            if "items" in schema:
                for i, v in enumerate(inst):
                    errs += self.validate(v, schema["items"], "%s[%d]" % (where, i))
        return errs

    def validate_header(self, name, value, header):
        """A header's text against its header object's schema."""
        header = self.resolve(header)
        schema = self.resolve(header.get("schema") or {})
        inst = value
        if schema.get("type") in ("integer", "number"):
            if not re.fullmatch(r"-?\d+", value.strip()):
                return ["header %s: %r is not a decimal integer" % (name, value)]
            inst = int(value.strip())
        return self.validate(inst, schema, "header %s" % name)

    # -------------------------------------------------------------- answers

    def check_response(self, path, method, status, headers, body):
        """Messages for everything in one answer that the document does not
        allow; empty when it fits. headers: {lower-case name: value}; body:
        bytes."""
        method = method.lower()
        tmpl = self.route(path)
        where = "%s %s -> %d" % (method.upper(), path[:80], status)
        if tmpl is None:
            return ["%s: the path is not documented" % where]
        if self.operation(tmpl, method) is None:
            return ["%s: %s is not an operation of %s" % (where, method.upper(), tmpl)]
        resp = self.response(tmpl, method, status)
        if resp is None:
            listed = sorted((self.operation(tmpl, method).get("responses") or {}))
            return ["%s: status not documented for %s %s (documented: %s)"
                    % (where, method.upper(), tmpl, ", ".join(listed))]
        return self.check_answer(resp, method, headers, body, where)

    def check_answer(self, resp, method, headers, body, where="answer"):
        """As check_response, against one response object (e.g. one of
        components.responses for an answer no operation lists)."""
        resp = self.resolve(resp)
        method = method.lower()
        errs = []
        for name, h in (resp.get("headers") or {}).items():
            h = self.resolve(h)
            value = headers.get(name.lower())
            if value is None:
                if h.get("required"):
                    errs.append("%s: documented header %s missing" % (where, name))
                continue
            errs += ["%s: %s" % (where, e) for e in self.validate_header(name, value, h)]
        content = resp.get("content") or {}
        if method == "head" or not content:
            if body:
                errs.append("%s: a body %r where none is documented" % (where, body[:100]))
            return errs
        ctype = (headers.get("content-type") or "").split(";")[0].strip().lower()
        media = content.get(ctype)
        if media is None:
            return errs + ["%s: Content-Type %r not documented (%s)" % (where, ctype, ", ".join(content))]
        schema = media.get("schema")
        if schema is None:
            return errs
        if ctype == "application/json" or ctype.endswith("+json"):
            try:
                inst = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                return errs + ["%s: body is not JSON: %r" % (where, body[:200])]
        else:
            try:
                inst = body.decode("utf-8")
            except UnicodeDecodeError:
                return errs + ["%s: body is not UTF-8 text" % where]
        errs += ["%s: body %s" % (where, e) for e in self.validate(inst, schema)]
        return errs

    # ------------------------------------------------------------- examples

    def media_examples(self, media):
        """[(name, value)] of one media type object's example(s)."""
        out = []
        if "example" in media:
            out.append(("example", media["example"]))
        for name, ex in (media.get("examples") or {}).items():
            out.append((name, self.resolve(ex).get("value")))
        return out

    def response_examples(self):
        """[(tmpl, method, status, media type, name, value)] for every
        example of every documented response."""
        out = []
        for tmpl, item in self.doc.get("paths", {}).items():
            for method, op in item.items():
                if method not in METHODS:
                    continue
                for status, r in (op.get("responses") or {}).items():
                    for mt, media in (self.resolve(r).get("content") or {}).items():
                        for name, value in self.media_examples(media):
                            out.append((tmpl, method, status, mt, name, value))
        return out

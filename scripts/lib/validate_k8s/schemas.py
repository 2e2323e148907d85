"""The schemas documents are validated against: Kubernetes' own OpenAPI schemas (strict, from
the PyPI package kubernetes-validate) for the core kinds, the vendored CRD schemas of
testdata/k8s-schemas/ for every other kind, each turned into a cached jsonschema validator."""

import copy
import json
import re

import jsonschema
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

from .documents import K8S_VERSION, REPO, SCHEMA_DIR


def _close(node):
    """CRD structural schema -> JSON Schema (draft 4) with the API server's reading of it: an
    object with `properties` is closed unless it preserves unknown fields."""
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("properties", "patternProperties"):
            out[k] = {name: _close(s) for name, s in v.items()}
        elif k in ("items", "additionalProperties", "not") and isinstance(v, dict):
            out[k] = _close(v)
        elif k in ("allOf", "anyOf", "oneOf"):
            out[k] = [_close(s) for s in v]
        elif k.startswith("x-kubernetes-") or k in ("nullable", "default", "example", "format"):
            continue  # annotations, not constraints (CEL rules cannot be evaluated here)
        else:
            out[k] = v
    _apply_k8s_extensions(node, out)
    return out


def _apply_k8s_extensions(node, out):
    """What the x-kubernetes-* markers and `nullable` mean, in JSON Schema terms."""
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        if "anyOf" not in out:
            out["type"] = ["integer", "string"]
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-embedded-resource") and "properties" in out:
        for f in ("apiVersion", "kind", "metadata"):
            out["properties"].setdefault(f, {})
    if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False


def _optional(node):
    """A schema with every `required` list removed: a patch is a partial object, so only the
    fields it does carry are judged (names, types, unknown fields)."""
    if isinstance(node, list):
        return [_optional(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "required" and isinstance(v, list):
            continue
        if k in ("properties", "patternProperties", "$defs", "definitions") and isinstance(v, dict):
            out[k] = {name: _optional(s) for name, s in v.items()}  # keys are names, not keywords
        else:
            out[k] = _optional(v)
    return out


class Schemas:
    """Vendored CRD schemas plus Kubernetes' own (kubernetes-validate), validators cached."""

    def __init__(self):
        self.crds, self.sources, self.cache = {}, {}, {}
        for f in sorted(SCHEMA_DIR.rglob("*.json")):
            d = json.loads(f.read_text())
            if "versions" in d and "kind" in d:
                for version, schema in d["versions"].items():
                    self.crds[(f"{d['group']}/{version}", d["kind"])] = schema
                    self.sources[(f"{d['group']}/{version}", d["kind"])] = f.relative_to(REPO)
            elif "schema" in d and "name" in d:  # a hand-written schema of a non-CRD document
                self.crds[("", d["name"])] = d["schema"]
        self.k8s_dir = "v%s-local-strict" % self._k8s_schema_version()

    @staticmethod
    def _k8s_schema_version():
        mm = kv_utils.major_minor(K8S_VERSION)
        return [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= mm][-1]

    def _k8s_contents(self, filename):
        return kv_utils.schema_contents(f"kubernetes-json-schema/{self.k8s_dir}/{filename}", K8S_VERSION)

    def _k8s_validator(self, filename, partial=False):
        schema, defs = self._k8s_contents(filename), self._k8s_contents("_definitions.json")
        if partial:
            schema, defs = _optional(schema), _optional(defs)
        registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
        return jsonschema.Draft202012Validator(schema, registry=registry)

    @staticmethod
    def _k8s_filename(api_version, kind):
        group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
        return f"{kind.lower()}-{group_version}.json"

    def _crd_validator(self, key):
        root = copy.deepcopy(self.crds[key])
        # The API server takes these at the top of every object, whatever the CRD lists.
        props = root.setdefault("properties", {})
        for field in ("apiVersion", "kind"):
            props.setdefault(field, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
        return jsonschema.Draft4Validator(_close(root))

    def validator(self, api_version, kind):
        """Returns (validator, is_crd) or (None, None) when no schema is known."""
        key = (api_version, kind)
        if key not in self.cache:
            if key in self.crds:
                self.cache[key] = (self._crd_validator(key), True)
            else:
                try:
                    self.cache[key] = (self._k8s_validator(self._k8s_filename(api_version, kind)), False)
                except (FileNotFoundError, kv_utils.VersionNotSupportedError, kv_utils.InvalidSchemaError):
                    self.cache[key] = (None, None)
        return self.cache[key]

    def patch_validator(self, api_version, kind):
        """A core kind's strict schema without `required`, for the partial objects of patches."""
        key = ("patch", api_version, kind)
        if key not in self.cache:
            self.cache[key] = self._k8s_validator(self._k8s_filename(api_version, kind), partial=True)
        return self.cache[key]

    def object_meta(self):
        if "meta" not in self.cache:
            self.cache["meta"] = self._k8s_validator("objectmeta-meta-v1.json")
        return self.cache["meta"]

    def plain(self, name):
        """A hand-written schema (testdata/k8s-schemas/ file with `name` and `schema`)."""
        if ("plain", name) not in self.cache:
            self.cache[("plain", name)] = jsonschema.Draft4Validator(self.crds[("", name)])
        return self.cache[("plain", name)]


def schema_errors(validator, doc, path, problems, prefix=""):
    """Every error of `doc`, as `path prefix field.path: message`, in field order."""
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(p) for p in e.absolute_path)
        message = e.message if len(e.message) < 240 else e.message[:240] + "..."
        if e.validator in ("anyOf", "oneOf") and e.context:
            message += " (" + "; ".join(sorted({c.message[:120] for c in e.context})[:3]) + ")"
        problems.add(f"{path}{prefix}{where}".rstrip("."), message)

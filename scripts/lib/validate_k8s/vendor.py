"""--vendor-crd: (re)writes testdata/k8s-schemas/<group>/<plural>.json from a CRD file, the
openAPIV3Schema of every served version with its descriptions removed (testdata/k8s-schemas/
README.md says how to refresh them)."""

import json
import sys
from pathlib import Path

import yaml

from .documents import SCHEMA_DIR, rel


def _strip_descriptions(node):
    if isinstance(node, dict):
        return {k: _strip_descriptions(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def vendor_crd(args):
    """--vendor-crd FILE --source OWNER/REPO --ref TAG --commit SHA --path PATH [--kinds K1,K2]:
    writes testdata/k8s-schemas/<group>/<plural>.json for each CRD of FILE (all of them, or the
    listed kinds): the openAPIV3Schema of every served version, descriptions removed."""
    opts = dict(zip(args[1::2], args[2::2]))
    need = ("--source", "--ref", "--commit", "--path")
    if not args or any(k not in opts for k in need):
        print(vendor_crd.__doc__, file=sys.stderr)
        return 2
    kinds = set(opts["--kinds"].split(",")) if "--kinds" in opts else None
    written = 0
    for d in yaml.safe_load_all(Path(args[0]).read_text()):
        if not isinstance(d, dict) or d.get("kind") != "CustomResourceDefinition":
            continue
        spec = d["spec"]
        if kinds is not None and spec["names"]["kind"] not in kinds:
            continue
        out = {"source": {"repository": opts["--source"], "ref": opts["--ref"], "commit": opts["--commit"],
                          "path": opts["--path"]},
               "group": spec["group"], "kind": spec["names"]["kind"], "plural": spec["names"]["plural"],
               "versions": {v["name"]: _strip_descriptions(v["schema"]["openAPIV3Schema"])
                            for v in spec["versions"] if v.get("served") and "schema" in v}}
        target = SCHEMA_DIR / spec["group"] / f"{spec['names']['plural']}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"wrote {rel(target)} ({', '.join(out['versions'])})")
        written += 1
    return 0 if written else 1

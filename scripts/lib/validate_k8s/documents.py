"""Where things are, and the YAML documents validate-k8s reads: files and directories in, one
Doc per non-empty YAML document out, each labelled by its file and index for the report."""

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
SCHEMA_DIR = REPO / "testdata" / "k8s-schemas"
DEFAULT_TARGETS = [REPO / "k8s", REPO / "envoy" / "istio"]
# Kubernetes release whose OpenAPI schemas the core kinds are checked against: 1.33, where the
# native sidecar containers the EnvoyProxy relies on are GA (on by default since 1.29).
K8S_VERSION = "1.33.0"


class Doc:
    """One YAML document of a file, with the accessors every check needs, safe on malformed data
    (the schema check reports what is malformed)."""

    def __init__(self, file, index, data):
        self.file, self.index, self.data = file, index, data

    def _mapping(self, key):
        value = self.data.get(key) if isinstance(self.data, dict) else None
        return value if isinstance(value, dict) else {}

    @property
    def kind(self):
        return self.data.get("kind") if isinstance(self.data, dict) else None

    @property
    def meta(self):
        return self._mapping("metadata")

    @property
    def name(self):
        return self.meta.get("name")

    @property
    def namespace(self):
        return self.meta.get("namespace", "default")

    @property
    def spec(self):
        return self._mapping("spec")

    def label(self):
        what = f"{self.kind}/{self.name}" if self.kind else "(not a Kubernetes object)"
        return f"{rel(self.file)}#{self.index} {what}"


def rel(p):
    """A path relative to the repository when it is inside it."""
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def expand(targets):
    """Files as given, directories searched recursively for *.yaml / *.yml (so the output
    directory of a rendered Helm chart validates as it is)."""
    files = []
    for t in map(Path, targets):
        if t.is_dir():
            files += sorted(p for p in t.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        else:
            files.append(t)
    return files


def load(files, unreadable):
    """Every document of the files; a file that is not YAML goes to `unreadable` instead."""
    docs = []
    for f in files:
        try:
            loaded = list(yaml.safe_load_all(Path(f).read_text()))
        except (OSError, yaml.YAMLError) as e:
            unreadable[rel(f)] = [f"cannot read YAML: {e}"]
            continue
        # Rendered Helm output has empty documents between `---` lines: nothing to check.
        docs += [Doc(f, i, d) for i, d in enumerate(loaded) if d is not None]
    return docs

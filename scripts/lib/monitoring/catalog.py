"""Every metric family and series ferrogate exports, and their names in `serve` and in Envoy.

  * The filter's families come from the code: FAMILIES in filter/core/src/metrics.rs (name, kind,
    unit, labels). Envoy prints them under their recorded name (`ferrogate_request_duration_ms`,
    `ferrogate_cost_microusd_total`); `ferrogate serve` in Prometheus' base units
    (`ferrogate_request_duration_seconds`, `ferrogate_cost_usd_total`): Unit::suffixes there.
  * Which of them take the `key` label (metrics_key_label), and the sidecar's series (limits,
    leases, targets, snapshot, keys, KV events), come from the manual: docs/observability.md,
    its "Filter metrics", "Sidecar series" and "KV-cache events" tables.
  * The values of the closed label sets (outcome, feed, type, metric, ...) come from those
    tables too, where a row lists them in parentheses.

Standard library only: scripts/dashboards runs it without a venv.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
METRICS_RS = REPO / "filter" / "core" / "src" / "metrics.rs"
OBSERVABILITY_MD = REPO / "docs" / "observability.md"

# Unit::suffixes and Unit::to_base of metrics.rs: (recorded suffix, serve suffix, recorded units
# per base unit).
UNITS = {
    "None": None,
    "Milliseconds": ("_ms", "_seconds", 1000),
    "Microseconds": ("_us", "_seconds", 1_000_000),
    "MicroUsd": ("_microusd", "_usd", 1_000_000),
}
# Labels Prometheus adds to every scraped series (the target's), usable in any query.
TARGET_LABELS = frozenset({"job", "instance"})
# status_class is written by metrics::status_class (1xx ... 5xx, other); the manual says so in
# prose rather than in a table row.
STATUS_CLASSES = frozenset({"1xx", "2xx", "3xx", "4xx", "5xx", "other"})


@dataclass(frozen=True)
class Family:
    """One filter family: `name` as recorded (Envoy's, `ferrogate_request_duration_ms`)."""
    name: str
    kind: str  # counter, gauge, histogram
    unit: str  # a key of UNITS
    labels: tuple
    key_label: bool = False  # takes `key` with metrics_key_label

    @property
    def serve_name(self):
        u = UNITS[self.unit]
        if not u:
            return self.name
        recorded, base, _ = u
        stem, total = (self.name[:-6], "_total") if self.name.endswith("_total") else (self.name, "")
        if not stem.endswith(recorded):
            raise ValueError(f"{self.name}: a {self.unit} family whose name does not end in {recorded}")
        return stem[: -len(recorded)] + base + total

    @property
    def factor(self):
        """Recorded units per base unit (1000 for milliseconds), 1 for none."""
        u = UNITS[self.unit]
        return u[2] if u else 1

    def series(self, naming):
        """{series name: label set} as printed under `naming` ('serve' or 'envoy')."""
        name = self.serve_name if naming == "serve" else self.name
        labels = frozenset(self.labels) | ({"key"} if self.key_label else set())
        if self.kind == "histogram":
            return {f"{name}_bucket": labels | {"le"}, f"{name}_sum": labels, f"{name}_count": labels}
        return {name: labels}


@dataclass
class Catalog:
    families: list  # [Family]
    sidecar: dict  # {series name: frozenset(labels)}: the same in serve and in Envoy's sidecar
    values: dict = field(default_factory=dict)  # {(series name or family base, label): frozenset(values)}
    kinds: dict = field(default_factory=dict)  # {sidecar series name: counter/gauge}

    def series(self, naming):
        """Every series name a scrape can show under `naming`, with its labels."""
        out = {}
        for f in self.families:
            out.update(f.series(naming))
        out.update(self.sidecar)
        return out

    def family_of_series(self, name, naming):
        """The Family whose series `name` is under `naming`, else None (a sidecar series)."""
        for f in self.families:
            if name in f.series(naming):
                return f
        return None

    def closed_values(self, series, label, naming):
        """The values `label` can take on `series`, when the manual lists them; else None."""
        if label == "status_class":
            return STATUS_CLASSES
        f = self.family_of_series(series, naming)
        key = f.name if f else series
        return self.values.get((key, label))


def parse_families(text):
    """FAMILIES of metrics.rs: [(name with '_', kind, unit, labels)]."""
    consts = {m.group(1): _str_list(m.group(2))
              for m in re.finditer(r"const (\w+): &\[&str\] = (&\[[^\]]*\]);", text)}
    body = text[text.index("pub const FAMILIES"):]
    body = body[: body.index("\n];")]
    out = []
    for m in re.finditer(r'family\(\s*"([\w.]+)",\s*Kind::(\w+),\s*Unit::(\w+),\s*(&\[[^\]]*\]|\w+)\s*,', body):
        name, kind, unit, labels = m.groups()
        labels = _str_list(labels) if labels.startswith("&") else consts[labels]
        if unit not in UNITS:
            raise ValueError(f"metrics.rs: unit {unit} of {name} is new to scripts/lib/monitoring/catalog.py")
        out.append((name.replace(".", "_"), kind.lower(), unit, tuple(labels)))
    if not out:
        raise ValueError("metrics.rs: no family( ... ) entries found in FAMILIES")
    return out


def _str_list(src):
    return re.findall(r'"([^"]*)"', src)


def _tables(markdown, heading):
    """The rows (lists of cells) of the first table under `### heading`, header row first."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"### {heading}")
    rows, seen = [], False
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in _split_row(line)]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        elif seen:
            break
    return rows


def _split_row(line):
    # Cells are separated by '|' outside backticks.
    cells, cur, tick = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            tick = not tick
        if ch == "|" and not tick:
            cells.append(cur)
            cur = ""
        else:
            cur += ch
    cells.append(cur)
    return cells


LABEL_CELL = re.compile(r"`(\w+)`(?:\s*\(([^)]*)\))?")


def parse_label_cell(cell):
    """'`feed` (`snapshot`, `kv`), `outcome` (`ok`, `error`) (+ `key`)' ->
    ({'feed': {'snapshot', 'kv'}, 'outcome': {'ok', 'error'}}, key_label)."""
    key = "(+ `key`)" in cell
    cell = cell.replace("(+ `key`)", "")
    labels = {}
    if cell.strip() in ("none", ""):
        return labels, key
    for m in LABEL_CELL.finditer(cell):
        values = set(re.findall(r"`([^`]+)`", m.group(2) or ""))
        labels[m.group(1)] = values
    return labels, key


def load(metrics_rs=None, observability_md=None):
    rs = (metrics_rs or METRICS_RS).read_text()
    md = (observability_md or OBSERVABILITY_MD).read_text()
    families = parse_families(rs)

    values, key_families, doc_labels = {}, set(), {}
    table = _tables(md, "Filter metrics")
    by_label = {}
    for row in table[1:]:
        m = re.match(r"`(\w+)`", row[0])
        if not m:
            continue
        labels, key = parse_label_cell(row[2])
        doc_labels[m.group(1)] = set(labels)
        if key:
            key_families.add(m.group(1))
        for label, vals in labels.items():
            if vals:
                values[(m.group(1), label)] = frozenset(vals)
                by_label.setdefault(label, set()).add(frozenset(vals))
    # A row naming a label without its values takes the values another row gives it, when the
    # table gives just one set for that label (limit_cuts_total's `metric`).
    for name, labels in doc_labels.items():
        for label in labels:
            if (name, label) not in values and len(by_label.get(label, ())) == 1:
                values[(name, label)] = next(iter(by_label[label]))

    out = []
    for name, kind, unit, labels in families:
        fam = Family(name, kind, unit, labels)
        fam = Family(name, kind, unit, labels, key_label=fam.serve_name in key_families)
        out.append(fam)
        # The manual names families by their serve name: move the values to the family's own.
        for (doc_name, label), vals in list(values.items()):
            if doc_name == fam.serve_name and doc_name != fam.name:
                values[(fam.name, label)] = vals

    sidecar, kinds = {}, {}
    for heading in ("Sidecar series", "KV-cache events"):
        rows = _tables(md, heading)
        header = [c.lower() for c in rows[0]]
        col, kind_col = header.index("labels"), header.index("type") if "type" in header else None
        for row in rows[1:]:
            m = re.match(r"`(\w+)`", row[0])
            if not m:
                continue
            labels, _ = parse_label_cell(row[col])
            sidecar[m.group(1)] = frozenset(labels)
            if kind_col is not None:
                kinds[m.group(1)] = row[kind_col]
            for label, vals in labels.items():
                if vals:
                    values[(m.group(1), label)] = frozenset(vals)
    return Catalog(out, sidecar, values, kinds), doc_labels


def docs_agree(catalog, doc_labels):
    """Problems where the manual's Filter metrics table and metrics.rs disagree (a family
    missing from either, or other labels)."""
    problems = []
    code = {f.serve_name: set(f.labels) for f in catalog.families}
    for name, labels in code.items():
        if name not in doc_labels:
            problems.append(f"docs/observability.md: Filter metrics has no row for {name} (metrics.rs FAMILIES)")
        elif doc_labels[name] != labels:
            problems.append(f"docs/observability.md: {name} has labels {sorted(doc_labels[name])}, "
                            f"metrics.rs {sorted(labels)}")
    for name in doc_labels:
        if name not in code:
            problems.append(f"docs/observability.md: Filter metrics lists {name}, which metrics.rs FAMILIES lacks")
    return problems

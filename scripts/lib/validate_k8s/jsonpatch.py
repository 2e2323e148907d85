"""JSONPath and JSON Patch as Envoy Gateway applies an EnvoyPatchPolicy's jsonPatches
(internal/utils/jsonpatch/patch.go): a jsonPath selects the nodes, the RFC 6902 operation is
applied at each (its `path` relative to the node)."""

import copy
import re

# The subset of JSONPath Envoy Gateway's library (ohler55/ojg) accepts that patches use: $, .name,
# ..name (descendants), [n], [*], ['name'] and [?(@.a.b == 'value')].
_JP = re.compile(r"""\.\.(?P<desc>[A-Za-z_][\w-]*)|\.(?P<child>[A-Za-z_@][\w-]*)|\[(?P<index>-?\d+|\*)\]"""
                 r"""|\[['"](?P<quoted>[^'"]+)['"]\]|\[\?\(?\s*@(?P<fpath>(?:\.[\w-]+)+)\s*==\s*"""
                 r"""(?P<q>['"])(?P<fvalue>.*?)(?P=q)\s*\)?\]""")


def jsonpath_steps(expr):
    """The steps of a JSONPath expression; ValueError on syntax the subset lacks."""
    s = expr.strip()
    s = s[1:] if s.startswith("$") else (s if s[:1] in (".", "[") else "." + s)
    steps, pos = [], 0
    while pos < len(s):
        m = _JP.match(s, pos)
        if not m:
            raise ValueError(f"unsupported JSONPath syntax at {s[pos:]!r}")
        pos = m.end()
        if m.group("desc"):
            steps.append(("desc", m.group("desc")))
        elif m.group("child") or m.group("quoted"):
            steps.append(("child", m.group("child") or m.group("quoted")))
        elif m.group("index"):
            steps.append(("index", m.group("index")))
        else:
            steps.append(("filter", (m.group("fpath").split(".")[1:], m.group("fvalue"))))
    if not steps:
        raise ValueError("using only the root ('$') is not allowed")
    return steps


def _descendants(ptr, node):
    yield ptr, node
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        yield from _descendants(ptr + (k,), v)


def _get(node, keys):
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return node


def jsonpath_locate(doc, steps):
    """The JSON pointers (tuples of keys) of every node the steps select."""
    cur = [((), doc)]
    for kind, arg in steps:
        nxt = []
        for ptr, node in cur:
            if kind == "child" and isinstance(node, dict) and arg in node:
                nxt.append((ptr + (arg,), node[arg]))
            elif kind == "desc":
                nxt += [(p + (arg,), n[arg]) for p, n in _descendants(ptr, node) if isinstance(n, dict) and arg in n]
            elif kind == "index" and isinstance(node, list):
                if arg == "*":
                    nxt += [(ptr + (i,), v) for i, v in enumerate(node)]
                elif -len(node) <= int(arg) < len(node):
                    nxt.append((ptr + (int(arg) % len(node),), node[int(arg)]))
            elif kind == "filter":
                items = enumerate(node) if isinstance(node, list) else node.items() if isinstance(node, dict) else []
                nxt += [(ptr + (k,), v) for k, v in items if _get(v, arg[0]) == arg[1]]
        cur = nxt
    return [ptr for ptr, _ in cur]


def pointer(path):
    """An RFC 6901 pointer as its tokens."""
    path = path or ""
    return [t.replace("~1", "/").replace("~0", "~") for t in path.lstrip("/").split("/")] if path.strip("/") else []


def _walk_to(root, tokens):
    node = root
    for t in tokens:
        node = node[int(t)] if isinstance(node, list) else node[t]
    return node


def json_patch(root, op, tokens, value=None, source=None):
    """One RFC 6902 operation on `root` at the token path; returns the new root."""
    if op in ("move", "copy"):
        value = copy.deepcopy(_walk_to(root, source))
        if op == "move":
            root = json_patch(root, "remove", source)
        op = "add"
    if not tokens:
        if op in ("add", "replace"):
            return copy.deepcopy(value)
        raise KeyError("cannot remove the whole document")
    parent, last = _walk_to(root, tokens[:-1]), tokens[-1]
    if op == "test":
        if _walk_to(root, tokens) != value:
            raise ValueError(f"test failed: {_walk_to(root, tokens)!r} != {value!r}")
    elif isinstance(parent, list):
        i = len(parent) if last == "-" else int(last)
        if op == "add":
            if not 0 <= i <= len(parent):
                raise IndexError(i)
            parent.insert(i, copy.deepcopy(value))
        elif op == "replace":
            parent[i] = copy.deepcopy(value)
        elif op == "remove":
            del parent[i]
    elif isinstance(parent, dict):
        if op in ("replace", "remove") and last not in parent:
            raise KeyError(last)
        if op == "remove":
            del parent[last]
        else:
            parent[last] = copy.deepcopy(value)
    else:
        raise KeyError(f"{last} (parent is not an object or array)")
    return root

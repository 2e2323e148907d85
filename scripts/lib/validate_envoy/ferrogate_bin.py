"""Running `ferrogate check`, the judge of ferrogate's configuration: `--config` for a config
document, `--plugin-config` for a filter's plugin configuration (its inline `config` included,
parsed by the filter's own code). The one runner of scripts/validate-envoy, scripts/validate-k8s
and scripts/check-helm; standard library only, as check-helm runs it outside any venv.

The binary: FERROGATE_BIN, else target/native/ferrogate, else target/debug/ferrogate. A caller
that finds none reports what it could not judge (missing_binary_message), never passes it.
"""

import os
import re
import subprocess
import tempfile
from pathlib import Path

from .common import REPO, rel

FERROGATE_CANDIDATES = [REPO / "target" / "native" / "ferrogate", REPO / "target" / "debug" / "ferrogate"]
# `--plugin-config`: a syntax error's position (serde's) is in the binary's compact
# re-serialization of the file, a text no reader has; the message names the field instead.
_POSITION = re.compile(r"^(plugin configuration syntax: .*) at line \d+ column \d+$")


def find_ferrogate():
    """FERROGATE_BIN, else target/native/ferrogate, else target/debug/ferrogate; None when none
    is executable."""
    candidates = [Path(os.environ["FERROGATE_BIN"])] if os.environ.get("FERROGATE_BIN") else FERROGATE_CANDIDATES
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def missing_binary_message():
    looked = os.environ.get("FERROGATE_BIN") or ", ".join(rel(c) for c in FERROGATE_CANDIDATES)
    return f"no ferrogate binary to run `ferrogate check` ({looked}): build it or set FERROGATE_BIN"


def ferrogate_check(binary, flag, text, name):
    """`ferrogate check FLAG FILE` (`--config` or `--plugin-config`) with `text` as the file,
    which messages call `name`. Returns the problems it prints, one per line, the file name
    removed (`path: message`); [] when the binary accepts the file."""
    with tempfile.TemporaryDirectory(prefix="ferrogate-check-") as tmp:
        f = Path(tmp) / name
        f.write_text(text)
        try:
            # A clean environment: the verdict must not depend on the shell running the check.
            r = subprocess.run([str(binary), "check", flag, str(f)], capture_output=True, text=True,
                               env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return [f"cannot run {binary}: {e}"]
    if r.returncode == 0:
        return []
    lines = [x for x in (r.stdout + r.stderr).replace(str(f), name).splitlines() if x.strip()]
    # A problem is a line naming the file; other lines quote the text under a syntax error's
    # first line, which has said where and what already.
    problems = [_POSITION.sub(r"\1", x.removeprefix(f"{name}: ")) for x in lines if x.startswith(f"{name}: ")]
    return problems or lines or [f"exit status {r.returncode}"]

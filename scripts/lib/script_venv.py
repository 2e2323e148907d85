"""A script's own virtualenv: created on first use, the pinned requirements installed into it
(again only when a requirements file changes: a stamp holds their hash), and the script run
again by the venv's python. Shared by validate-envoy, validate-k8s and check-monitoring.

Standard library only: the entry scripts import this before their venv exists.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Venv:
    """The venv of `tool` at `path` (relative to the repository) with `requirements` (relative
    paths; the first is installed, all are hashed: it may include the others with `-r`)."""

    def __init__(self, tool, path, requirements):
        self.tool = tool
        self.dir = REPO / path
        self.requirements = [REPO / r for r in requirements]
        self.stamp = self.dir / f".{tool}-requirements"

    def _ensure(self):
        """Creates the venv and installs the pinned requirements unless already done."""
        want = hashlib.sha256(b"".join(r.read_bytes() for r in self.requirements)).hexdigest()
        py = self.dir / "bin" / "python"
        ok = py.exists() and subprocess.run([str(py), "-c", "pass"], capture_output=True).returncode == 0
        if ok and self.stamp.exists() and self.stamp.read_text().strip() == want:
            return py
        if not ok:
            print(f"{self.tool}: creating {self.dir.relative_to(REPO)}", file=sys.stderr)
            self.dir.parent.mkdir(parents=True, exist_ok=True)
            if subprocess.run([sys.executable, "-m", "venv", "--clear", str(self.dir)]).returncode != 0:
                sys.exit(f"{self.tool}: '{sys.executable} -m venv' failed (on Debian: apt-get install python3-venv)")
        first = self.requirements[0]
        print(f"{self.tool}: installing {first.relative_to(REPO)}", file=sys.stderr)
        r = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            "-r", str(first)])
        if r.returncode != 0:
            sys.exit(f"{self.tool}: pip install failed: is PyPI reachable?")
        self.stamp.write_text(want + "\n")
        return py

    def _inside(self):
        try:
            return Path(sys.prefix).resolve() == self.dir.resolve()
        except OSError:
            return False

    def reexec_inside(self, script, argv):
        """Returns when already running in the venv; otherwise replaces this process with
        `script` run by the venv's python."""
        if self._inside():
            return
        py = self._ensure()
        os.execv(str(py), [str(py), str(Path(script).resolve()), *argv])

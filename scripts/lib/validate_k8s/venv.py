"""The venv validate-k8s runs in: created in .cache/validate-k8s-venv on first use, with
scripts/requirements-k8s.txt installed (again only when the requirements change).

Standard library only: the entry script imports this before the venv exists.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
VENV = REPO / ".cache" / "validate-k8s-venv"
# requirements-k8s.txt includes requirements-envoy.txt: a change to either reinstalls.
REQUIREMENTS = [REPO / "scripts" / "requirements-k8s.txt", REPO / "scripts" / "requirements-envoy.txt"]
STAMP = VENV / ".validate-k8s-requirements"


def _ensure_venv():
    """Creates the venv and installs the pinned requirements unless already done."""
    want = hashlib.sha256(b"".join(r.read_bytes() for r in REQUIREMENTS)).hexdigest()
    py = VENV / "bin" / "python"
    ok = py.exists() and subprocess.run([str(py), "-c", "pass"], capture_output=True).returncode == 0
    if ok and STAMP.exists() and STAMP.read_text().strip() == want:
        return py
    if not ok:
        print(f"validate-k8s: creating {VENV.relative_to(REPO)}", file=sys.stderr)
        VENV.parent.mkdir(parents=True, exist_ok=True)
        if subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)]).returncode != 0:
            sys.exit(f"validate-k8s: '{sys.executable} -m venv' failed (on Debian: apt-get install python3-venv)")
    print("validate-k8s: installing scripts/requirements-k8s.txt", file=sys.stderr)
    r = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "-r", str(REQUIREMENTS[0])])
    if r.returncode != 0:
        sys.exit("validate-k8s: pip install failed")
    STAMP.write_text(want + "\n")
    return py


def _in_venv():
    try:
        return Path(sys.prefix).resolve() == VENV.resolve()
    except OSError:
        return False


def reexec_inside(script, argv):
    """Returns when already running in the venv; otherwise replaces this process with the script
    run by the venv's python."""
    if _in_venv():
        return
    py = _ensure_venv()
    os.execv(str(py), [str(py), str(Path(script).resolve()), *argv])

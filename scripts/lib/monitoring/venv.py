"""The venv check-monitoring runs in: .cache/check-monitoring-venv, with
scripts/requirements-monitoring.txt installed (again only when the requirements change).

Standard library only: the entry script imports this before the venv exists.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
VENV = REPO / ".cache" / "check-monitoring-venv"
REQUIREMENTS = REPO / "scripts" / "requirements-monitoring.txt"
STAMP = VENV / ".check-monitoring-requirements"


def _ensure_venv():
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    py = VENV / "bin" / "python"
    ok = py.exists() and subprocess.run([str(py), "-c", "pass"], capture_output=True).returncode == 0
    if ok and STAMP.exists() and STAMP.read_text().strip() == want:
        return py
    if not ok:
        print(f"check-monitoring: creating {VENV.relative_to(REPO)}", file=sys.stderr)
        VENV.parent.mkdir(parents=True, exist_ok=True)
        if subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)]).returncode != 0:
            sys.exit(f"check-monitoring: '{sys.executable} -m venv' failed (on Debian: apt-get install python3-venv)")
    print("check-monitoring: installing scripts/requirements-monitoring.txt", file=sys.stderr)
    r = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "-r", str(REQUIREMENTS)])
    if r.returncode != 0:
        sys.exit("check-monitoring: pip install failed: is PyPI reachable?")
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

"""The venv validate-k8s runs in: .cache/validate-k8s-venv, with scripts/requirements-k8s.txt
installed (again only when the requirements change). The work is scripts/lib/script_venv.py's.

Standard library only: the entry script imports this before the venv exists.
"""

from script_venv import Venv

# requirements-k8s.txt includes requirements-envoy.txt: a change to either reinstalls.
_VENV = Venv("validate-k8s", ".cache/validate-k8s-venv",
             ["scripts/requirements-k8s.txt", "scripts/requirements-envoy.txt"])


def reexec_inside(script, argv):
    """Returns when already running in the venv; otherwise re-runs `script` inside it."""
    _VENV.reexec_inside(script, argv)

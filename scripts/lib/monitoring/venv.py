"""The venv check-monitoring runs in: .cache/check-monitoring-venv, with
scripts/requirements-monitoring.txt installed (again only when the requirements change). The
work is scripts/lib/script_venv.py's.

Standard library only: the entry script imports this before the venv exists.
"""

from script_venv import Venv

_VENV = Venv("check-monitoring", ".cache/check-monitoring-venv", ["scripts/requirements-monitoring.txt"])


def reexec_inside(script, argv):
    """Returns when already running in the venv; otherwise re-runs `script` inside it."""
    _VENV.reexec_inside(script, argv)

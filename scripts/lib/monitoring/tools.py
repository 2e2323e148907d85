"""The programs check-monitoring runs:

  * promtool and prometheus, Prometheus' own binaries, from Debian's `prometheus` package
    (Debian 12: upstream 2.42.0). No PyPI or npm package ships promtool; Debian's does, and the
    build machines reach Debian's archive. The .deb is fetched with `apt-get download` (no
    install: no service, no dependencies) and the two binaries are unpacked into
    .cache/prometheus-tools/<version>/bin. The pin is the upstream version: Debian may rebuild
    the package (+deb12uN) but a new upstream version fails until PROMETHEUS_VERSION is bumped.
  * helm from scripts/k8s-tools (the one scripts/check-helm uses).
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROMETHEUS_VERSION = "2.42.0"
CACHE = Path(os.environ.get("PROMETHEUS_TOOLS_DIR") or REPO / ".cache" / "prometheus-tools") / PROMETHEUS_VERSION


class ToolError(RuntimeError):
    pass


def _version(binary):
    if not Path(binary).exists():
        return ""
    r = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    return (r.stdout + r.stderr).splitlines()[0] if r.returncode == 0 and (r.stdout + r.stderr) else ""


def prometheus_tools():
    """(promtool, prometheus) paths, fetched and unpacked on first use."""
    promtool, prometheus = CACHE / "bin" / "promtool", CACHE / "bin" / "prometheus"
    if all(f" {PROMETHEUS_VERSION}" in _version(b) for b in (promtool, prometheus)):
        return promtool, prometheus
    for tool in ("apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            raise ToolError(f"{tool} is needed to fetch Debian's prometheus package (promtool)")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=".fetch-") as tmp:
        os.chmod(tmp, 0o777)  # apt-get download drops to the _apt user where it can
        cmd = ["apt-get", "download", "-q", "prometheus"]
        r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        if r.returncode != 0 and os.geteuid() == 0:
            # A machine whose package lists were never fetched (or are stale) has no candidate.
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
            r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob("prometheus_*.deb"))
        if r.returncode != 0 or not debs:
            raise ToolError("apt-get download prometheus failed (is Debian's archive reachable? "
                            f"run apt-get update): {(r.stderr or r.stdout).strip()[-400:]}")
        deb = debs[0]
        version = deb.name.split("_")[1]
        if not version.startswith(PROMETHEUS_VERSION + "+") and version != PROMETHEUS_VERSION:
            raise ToolError(f"Debian's prometheus is {version}, the pin is {PROMETHEUS_VERSION}: check the "
                            "new promtool, then bump PROMETHEUS_VERSION in scripts/lib/monitoring/tools.py")
        x = Path(tmp) / "x"
        r = subprocess.run(["dpkg-deb", "-x", str(deb), str(x)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ToolError(f"dpkg-deb -x {deb.name}: {r.stderr.strip()}")
        new = Path(tmp) / "bin"
        new.mkdir()
        for name in ("promtool", "prometheus"):
            shutil.copy2(x / "usr" / "bin" / name, new / name)
            got = _version(new / name)
            if f" {PROMETHEUS_VERSION}" not in got:
                raise ToolError(f"the unpacked {name} says {got!r}, expected {PROMETHEUS_VERSION}")
        (new / "DEB").write_text(deb.name + "\n")
        shutil.rmtree(CACHE / "bin", ignore_errors=True)
        new.rename(CACHE / "bin")
    return promtool, prometheus


def describe_prometheus():
    deb = CACHE / "bin" / "DEB"
    return f"promtool/prometheus {PROMETHEUS_VERSION} ({deb.read_text().strip() if deb.exists() else 'Debian'})"


def helm():
    r = subprocess.run([str(REPO / "scripts" / "k8s-tools")], capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolError(f"scripts/k8s-tools failed: {r.stderr.strip()[-400:]}")
    return Path(r.stdout.strip()) / "helm"

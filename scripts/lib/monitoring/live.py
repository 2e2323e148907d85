"""The real thing: `ferrogate sim` engines behind `ferrogate serve`, traffic that reaches what the
dashboard and the alerts show, a scrape of the admin /metrics, and a real Prometheus scraping
it that evaluates every query.

The configuration turns on what the series need: virtual keys (one in two groups, for the
ferrogate_key_info join) with `--metrics-key-label`, pricing, a group limit that refuses, a key
whose streams are cut (`overrun: cut`), a flow-controlled model that queues and refuses, a
provider pool whose endpoints are probed (target gauges), a `precise_cache_aware` model over a
sim publishing KV events (KV series and decisions), a provider that always answers 500 behind a
model with a fallback (failovers, upstream errors). Every port is picked free; every process
is stopped at the end, whatever happens.

Series that need what the check cannot run cheaply are in CATALOG_ONLY: they are checked
against the catalog (metrics.rs and the manual) instead of the scrape.
"""

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

# Series no check run produces, and why (each is still checked against the catalog).
CATALOG_ONLY = {
    "ferrogate_lease_waits_total": "needs `redis:` and a Redis server (lease top-ups happen only across replicas)",
    "ferrogate_limits_synced": "set only with `redis:` and some limit (the cross-replica view)",
    "ferrogate_lease_asks_total": "with `redis:` only",
    "ferrogate_lease_short_total": "with `redis:` only",
    "ferrogate_lease_amount_total": "with `redis:` only",
    "ferrogate_lease_failures_total": "with `redis:` only",
    "ferrogate_lease_active_replicas": "with `redis:` only",
}

KEYS = {"alpha": "fg-check-monitoring-alpha", "beta": "fg-check-monitoring-beta", "gamma": "fg-check-monitoring-gamma"}


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def config(p):
    digest = {k: "sha256:" + hashlib.sha256(v.encode()).hexdigest() for k, v in KEYS.items()}
    return f"""\
# check-monitoring's gateway: every feature the dashboard and the alerts show, on sims.
providers:
  - name: local
    kind: openai_compatible
    base_url: http://sim.internal
    endpoints: ["127.0.0.1:{p['sim']}"]
    max_concurrency: 1
  - name: direct
    kind: openai_compatible
    base_url: http://127.0.0.1:{p['sim']}
  - name: pool
    kind: openai_compatible
    base_url: http://sim.internal
    kv_tokenize: true
    endpoints:
      - {{ address: "127.0.0.1:{p['kvsim']}", kv_events: "tcp://127.0.0.1:{p['kvevents']}", kv_replay: "tcp://127.0.0.1:{p['kvreplay']}" }}
  - name: flaky
    kind: openai_compatible
    base_url: http://127.0.0.1:{p['flaky']}
models:
  - name: chat
    targets: [{{ provider: local, model: sim-small }}]
    flow_control: {{ max_queue: 1, queue_ttl_ms: 300 }}
  - name: long
    targets: [{{ provider: direct, model: sim-small }}]
  - name: kv-chat
    strategy: precise_cache_aware
    targets: [{{ provider: pool, model: sim-kv }}]
  - name: fo-chat
    targets: [{{ provider: flaky, model: sim-small }}]
    fallbacks: [long]
  - name: broken
    targets: [{{ provider: flaky, model: sim-small }}]
pricing:
  local/sim-small: {{ input_per_mtok: 0.15, output_per_mtok: 0.60 }}
  direct/sim-small: {{ input_per_mtok: 0.15, output_per_mtok: 0.60 }}
  pool/sim-kv: {{ input_per_mtok: 0.15, output_per_mtok: 0.60 }}
groups:
  - {{ name: team-a, models: ["*"], limits: {{ requests_per_minute: 1000 }} }}
  - {{ name: all, models: ["*"] }}
  - {{ name: team-b, models: ["*"], limits: {{ requests_per_minute: 2 }} }}
keys:
  - {{ name: alpha, digest: "{digest['alpha']}", groups: [team-a, all] }}
  - {{ name: beta, digest: "{digest['beta']}", groups: [team-b] }}
  - {{ name: gamma, digest: "{digest['gamma']}", groups: [all], limits: {{ tokens_per_minute: 100, overrun: cut }} }}
"""


class Stack:
    """The processes of one live run; `with Stack(...) as s:` stops them all on exit."""

    def __init__(self, ferrogate, prometheus, workdir, log=print):
        self.ferrogate, self.prometheus, self.dir, self.log = str(ferrogate), str(prometheus), Path(workdir), log
        self.procs = []
        names = ["sim", "kvsim", "kvevents", "kvreplay", "flaky", "gateway", "admin", "sidecar", "prom"]
        self.ports = dict(zip(names, free_ports(len(names))))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for name, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        return False

    def spawn(self, name, args, env=None):
        log = open(self.dir / f"{name}.log", "w")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env={**os.environ, **(env or {})})
        self.procs.append((name, p))
        return p

    def logtail(self, name, n=15):
        f = self.dir / f"{name}.log"
        return " | ".join(f.read_text(errors="replace").splitlines()[-n:]) if f.exists() else ""

    def start(self, filter_wasm=None):
        p, f = self.ports, self.ferrogate
        self.spawn("sim", [f, "sim", "--listen", f"127.0.0.1:{p['sim']}", "--model", "sim-small",
                           "--ttft-ms", "30", "--itl-ms", "2", "--output-tokens", "200"])
        self.spawn("kvsim", [f, "sim", "--listen", f"127.0.0.1:{p['kvsim']}", "--model", "sim-kv",
                             "--kv-events", f"tcp://127.0.0.1:{p['kvevents']}",
                             "--kv-replay", f"tcp://127.0.0.1:{p['kvreplay']}"])
        self.spawn("flaky", [f, "sim", "--listen", f"127.0.0.1:{p['flaky']}", "--model", "sim-small",
                             "--error-500-rate", "1"])
        (self.dir / "config.yaml").write_text(config(p))
        env = {"FERROGATE_LOG": "info,wasm=warn"}
        if filter_wasm:
            env["FERROGATE_FILTER_WASM"] = str(filter_wasm)
        self.spawn("serve", [f, "serve", "--config", str(self.dir / "config.yaml"),
                             "--listen", f"127.0.0.1:{p['gateway']}", "--admin-listen", f"127.0.0.1:{p['admin']}",
                             "--sidecar-listen", f"127.0.0.1:{p['sidecar']}", "--metrics-key-label",
                             "--workers", "2"], env)
        self.wait_http(f"http://127.0.0.1:{p['admin']}/readyz", "serve", 180)
        self.wait_http(f"http://127.0.0.1:{p['gateway']}/v1/models", "serve", 60, ok=(200, 401))
        (self.dir / "prometheus.yml").write_text(
            "global: { scrape_interval: 1s, evaluation_interval: 1s }\n"
            "scrape_configs:\n"
            f"  - job_name: ferrogate\n    static_configs: [{{ targets: ['127.0.0.1:{p['admin']}'] }}]\n")
        self.spawn("prometheus", [self.prometheus, f"--config.file={self.dir / 'prometheus.yml'}",
                                  f"--storage.tsdb.path={self.dir / 'tsdb'}",
                                  f"--web.listen-address=127.0.0.1:{p['prom']}", "--log.level=warn"])
        deadline = time.time() + 60
        while True:
            try:
                r = self.query("up")
                if r and r[0]["value"][1] == "1":
                    break
            except (OSError, ValueError, KeyError):
                pass
            if time.time() > deadline or self.procs[-1][1].poll() is not None:
                raise RuntimeError("prometheus never scraped ferrogate serve: " + self.logtail("prometheus"))
            time.sleep(0.5)

    def wait_http(self, url, name, timeout, ok=(200,)):
        deadline = time.time() + timeout
        proc = dict(self.procs)[name]
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}): {self.logtail(name)}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status in ok:
                        return
            except urllib.error.HTTPError as e:
                if e.code in ok:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{url} did not answer within {timeout}s: {self.logtail(name)}")

    # -- traffic --------------------------------------------------------------------------
    def request(self, key, model, stream=False, content="Hello there", max_tokens=8):
        body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": content}]}
        if max_tokens:
            body["max_tokens"] = max_tokens
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {KEYS[key]}"
        req = urllib.request.Request(f"http://127.0.0.1:{self.ports['gateway']}/v1/chat/completions",
                                     data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                return r.status
        except urllib.error.HTTPError as e:
            e.read()
            return e.code
        except OSError:
            return 0

    def traffic(self):
        """What each dashboard row needs; returns {what: [statuses]} for the log."""
        out = {}
        out["chat stream (alpha)"] = [self.request("alpha", "chat", stream=True) for _ in range(3)]
        out["chat (beta, group limit 2/min)"] = [self.request("beta", "chat") for _ in range(4)]
        prompt = "The same long prompt about caches and blocks and tokens, repeated to fill a block or two. " * 3
        # The first request fills the engine's cache; its KV events reach the index before the
        # next two, which should then be hits.
        out["kv-chat (alpha)"] = [self.request("alpha", "kv-chat", content=prompt)]
        time.sleep(1.5)
        out["kv-chat (alpha)"] += [self.request("alpha", "kv-chat", content=prompt) for _ in range(2)]
        out["no key"] = [self.request(None, "chat")]
        out["unknown model"] = [self.request("alpha", "no-such-model")]
        out["fo-chat (fails over)"] = [self.request("alpha", "fo-chat") for _ in range(2)]
        out["broken (500)"] = [self.request("alpha", "broken") for _ in range(2)]
        # Reserves ~30 + 60 of its 100 tokens: an allowance of ~70, and the sim's words weigh ~1.6
        # estimated tokens each, so the stream is cut before its 60 tokens are through.
        out["long stream (gamma, cut)"] = [self.request("gamma", "long", stream=True, max_tokens=60)]
        results = []

        def one():
            results.append(self.request("alpha", "chat", stream=True, max_tokens=64))

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out["6 concurrent chat streams (flow control)"] = sorted(results)
        return out

    # -- reading ----------------------------------------------------------------------------
    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['admin']}/metrics", timeout=10) as r:
            return r.read().decode()

    def query(self, expr):
        url = f"http://127.0.0.1:{self.ports['prom']}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=20) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as e:
            doc = json.loads(e.read() or b"{}")
            raise ValueError(f"{doc.get('errorType', e.code)}: {doc.get('error', '')}") from None
        if doc.get("status") != "success":
            raise ValueError(f"{doc.get('errorType')}: {doc.get('error')}")
        return doc["data"]["result"] if doc["data"]["resultType"] == "vector" else [doc["data"]["result"]]


SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$")
LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_exposition(text):
    """{series name: {label: {values}}} of a Prometheus text exposition; problems for lines
    that are not samples, comments or blank."""
    series, problems = {}, []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            problems.append(f"/metrics line {n} is not a sample: {line[:120]}")
            continue
        labels = series.setdefault(m.group(1), {})
        body, pos = m.group(3) or "", 0
        while pos < len(body):
            lm = LABEL.match(body, pos)
            if not lm:
                problems.append(f"/metrics line {n}: unreadable labels: {body[pos:pos + 60]}")
                break
            labels.setdefault(lm.group(1), set()).add(lm.group(2))
            pos = lm.end()
    return series, problems

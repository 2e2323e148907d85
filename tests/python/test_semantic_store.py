"""The sidecar's semantic cache store with a real embedding model: all-MiniLM-L6-v2 served by
embed_server.py, a `ferrogate sidecar` whose model `embed` points at it, and the filter-facing
routes called directly (`POST /v1/cache/semantic/lookup`, `PUT /v1/cache/semantic/{ticket}`),
as the filter calls them.

At the configuration's default threshold (`DEFAULT_THRESHOLD` of filter/core/src/config/cache.rs,
read from there) on testdata/cache/semantic: paraphrases are served from their original's
entry, near-misses (another entity, number, direction, negation, language) mostly are not —
the lexical signature turns away those cosine alone would serve —, and nothing is ever served
across scopes. The bounds asserted are the rates scripts/semantic-eval measured, with a margin.
The harness here is shared with that script.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import REPO, Proc, StartError, _bin, _free_port, _wait_until

EMBED_SERVER = Path(__file__).with_name("embed_server.py")
DATA = REPO / "testdata" / "cache" / "semantic"
TOKEN = "semantic-store-token"
MODEL_LOAD_TIMEOUT_S = 240.0  # torch import + weights, on a busy 2-core machine
DEFAULT_THRESHOLD = float(re.search(r"pub const DEFAULT_THRESHOLD: f32 = ([0-9.]+);",
                                     (REPO / "filter/core/src/config/cache.rs").read_text())[1])
# Measured at 0.93 (scripts/semantic-eval, cosine + signature): 39/45 paraphrases served from
# their own entry (86.7 %), 2/45 near-misses served (4.4 %: "ascending"/"descending order" at
# 0.97 and "convert a string to an integer"/"an integer to a string" at 0.997, which differ in
# lowercase words only). Cosine alone at 0.93 serves 8/45 near-misses (17.8 %), so the ceiling
# fails if the guard stops working.
MIN_HIT_RATE = 0.80
MAX_FALSE_HIT_RATE = 0.10
# Near-misses that embed above the default threshold but differ in a number, unit direction,
# name order or date, which the signature tells apart (cosine 0.96..0.999 with this model).
GUARDED = [
    ("Convert 5 km to miles.", "Convert 5 miles to km."),
    ("Convert 100 degrees Fahrenheit to Celsius.", "Convert 100 degrees Celsius to Fahrenheit."),
    ("Convert 10 US dollars to euros.", "Convert 10 euros to US dollars."),
    ("Show me flights from Paris to London on March 3.", "Show me flights from London to Paris on March 3."),
    ("What's the weather like in Vienna today?", "What's the weather like in Vienna tomorrow?"),
]


def pairs(name: str, other: str) -> list[tuple[str, str]]:
    """`(original, other)` of testdata/cache/semantic/<name>.jsonl."""
    lines = (DATA / f"{name}.jsonl").read_text().splitlines()
    return [(row["original"], row[other]) for row in map(json.loads, filter(None, lines))]


@dataclass
class Looked:
    """A lookup's answer: the entry served (None: a miss), its similarity, the miss's ticket."""
    entry: str | None
    similarity: float | None
    ticket: str | None
    seconds: float


class Stack:
    """embed_server.py and a `ferrogate sidecar` using it as model `embed`."""

    def __init__(self, workdir: Path):
        self.procs: list[Proc] = []
        self.http: httpx.Client | None = None
        try:
            self._start(workdir)
        except BaseException:
            self.stop()
            raise

    def _start(self, workdir: Path) -> None:
        self.embed = Proc("embed", [sys.executable, str(EMBED_SERVER), "--port", "0"], workdir / "embed.log")
        self.procs.append(self.embed)
        started = time.monotonic()
        _wait_until("the embedding model", self.procs, lambda: "READY" in self.embed.log_text(),
                    MODEL_LOAD_TIMEOUT_S)
        self.model_load_s = time.monotonic() - started
        embed_port = int(self.embed.log_text().split("READY ")[1].split()[0])
        self.embed_url = f"http://127.0.0.1:{embed_port}/v1/embeddings"
        config = {
            "providers": [{"name": "minilm", "kind": "openai_compatible",
                           "base_url": f"http://127.0.0.1:{embed_port}"}],
            "models": [{"name": "embed", "targets": [{"provider": "minilm", "model": "all-minilm-l6-v2"}]}],
        }
        (workdir / "sidecar.json").write_text(json.dumps(config))
        port = _free_port()
        argv = [str(_bin()), "sidecar", "--config", str(workdir / "sidecar.json"),
                "--sidecar-listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{_free_port()}"]
        env = {"PATH": "/usr/bin:/bin", "FERROGATE_INTERNAL_TOKEN": TOKEN}
        self.procs.append(Proc("sidecar", argv, workdir / "sidecar.log", env=env))
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10,
                                 headers={"authorization": f"Bearer {TOKEN}"})
        # Ready once a lookup gets a ticket: the sidecar serves its config and the model answers.
        _wait_until("the sidecar", self.procs, lambda: self.lookup("ready?", "global").ticket is not None, 60)

    def lookup(self, text: str, scope: str, threshold: float = DEFAULT_THRESHOLD) -> Looked:
        body = {"embedding_model": "embed", "threshold": threshold, "model": "chat", "scope": scope,
                "context": "0" * 64, "text": text, "ttl_secs": 3600}
        started = time.perf_counter()
        r = self.http.post("/v1/cache/semantic/lookup", json=body)
        took = time.perf_counter() - started
        if r.status_code == 200:
            return Looked(r.content.decode(), float(r.headers["x-ferrogate-cache-similarity"]), None, took)
        assert r.status_code == 404, r.text
        return Looked(None, None, r.headers.get("x-ferrogate-cache-ticket"), took)

    def vector(self, text: str) -> list[float]:
        """The embedding server's unit vector of `text`, asked directly (not through the sidecar)."""
        r = httpx.post(self.embed_url, json={"model": "all-minilm-l6-v2", "input": text}, timeout=30)
        r.raise_for_status()
        v = r.json()["data"][0]["embedding"]
        norm = sum(x * x for x in v) ** 0.5
        return [x / norm for x in v]

    def remember(self, text: str, scope: str) -> None:
        """Stores `text` itself as the entry of `text` (a lookup's ticket, then the store)."""
        # Threshold 1.0: only the same text may hit (a similar original must not stop the store).
        looked = self.lookup(text, scope, threshold=1.0)
        if looked.entry == text:
            return  # already stored
        assert looked.ticket, f"no ticket for {text!r}: {looked}"
        r = self.http.put(f"/v1/cache/semantic/{looked.ticket}", content=text.encode(),
                          headers={"x-ferrogate-cache-ttl": "3600"})
        assert r.status_code == 204, r.text

    def stop(self) -> None:
        if self.http:
            self.http.close()
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture(scope="module")
def stack():
    with tempfile.TemporaryDirectory(prefix="ferrogate-semantic-") as d:
        try:
            s = Stack(Path(d))
        except StartError as e:
            logs = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}"
                             for log in Path(d).glob("*.log"))
            pytest.fail(f"{e}\n{logs}")
        try:
            yield s
        finally:
            s.stop()


def test_paraphrases_hit_and_near_misses_mostly_miss_at_the_default_threshold(stack):
    paraphrases, near_misses = pairs("paraphrases", "paraphrase"), pairs("near_misses", "near_miss")
    for original, _ in paraphrases + near_misses:
        stack.remember(original, "global")
    served = [stack.lookup(p, "global").entry == original for original, p in paraphrases]
    false = [stack.lookup(n, "global").entry is not None for _, n in near_misses]
    hit_rate, false_rate = sum(served) / len(served), sum(false) / len(false)
    assert hit_rate >= MIN_HIT_RATE, f"paraphrases served from their own entry: {hit_rate:.2f}"
    assert false_rate <= MAX_FALSE_HIT_RATE, f"near-misses served: {false_rate:.2f}"


def test_the_signature_turns_away_near_misses_cosine_would_serve(stack):
    for original, near_miss in GUARDED:
        stack.remember(original, "global")
        cosine = sum(a * b for a, b in zip(stack.vector(original), stack.vector(near_miss)))
        assert cosine >= DEFAULT_THRESHOLD, f"{near_miss!r}: {cosine:.4f}, not a near-miss for cosine alone"
        looked = stack.lookup(near_miss, "global")
        assert looked.entry is None, f"{near_miss!r} served {looked.entry!r} ({looked.similarity})"
        assert looked.ticket
        # ... while the original itself is still served.
        assert stack.lookup(original, "global").entry == original


def test_no_hit_crosses_a_scope(stack):
    text = "Summarize our refund policy for enterprise customers."
    stack.remember(text, "key:a")
    assert stack.lookup(text, "key:a").entry == text
    for scope in ("key:b", "group:a", "global"):
        looked = stack.lookup(text, scope)
        assert looked.entry is None, scope
        assert looked.ticket, "a miss with an embedding gets a ticket"

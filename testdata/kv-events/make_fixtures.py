#!/usr/bin/env python3
"""Generate vLLM KV-cache event fixtures (msgpack payloads) for ferrogate's decoder tests.

Each ``*.msgpack`` file written next to this script is exactly one msgpack
payload, i.e. the third ZMQ frame vLLM's ZmqEventPublisher sends
(frames: topic, 8-byte big-endian sequence number, payload). Payloads are made
by the real ``msgspec`` encoder from ``msgspec.Struct`` classes shaped like
``vllm/distributed/kv_events.py`` in successive vLLM versions; each generation
gets its own set of classes (built by the ``gen_*`` functions below) so a
fixture is what that version's encoder would emit.

Generated with msgspec 0.23.0 (Python 3.11). Regenerate, from the repo root:

    python3 -m venv /tmp/fxvenv && /tmp/fxvenv/bin/pip install msgspec==0.23.0
    /tmp/fxvenv/bin/python testdata/kv-events/make_fixtures.py

The script is deterministic (fixed ts values and hashes): re-running it
rewrites identical bytes and an identical expected.json.

Besides the fixtures it writes ``expected.json`` (what a correct decoder reads
from each file, normalized; built from the inputs given to the encoder) and
then self-checks: every file is decoded back with msgspec into plain Python
objects, normalized by an independent reference reader (``reference_read``)
and compared with expected.json; each file is also decoded with the typed
msgspec decoder of its own generation; two byte-exact examples are asserted.

Two fixtures model what LMCache 0.5.6 adds to vLLM 0.34's stream (its in-process
LMCacheConnectorV1 and its multiprocess LMCacheMPConnector); their chunk hashes are real
LMCache hashes, hard-coded and re-derived by ``check_lmcache`` (see ``build``, 13-14).

Observed msgspec behaviour (0.23.0), which the fixtures rely on:
* ``omit_defaults=True`` has no effect on ``array_like=True`` structs: every
  field is written positionally, trailing ``None`` defaults included.
* ``tag=True`` with array_like: the tag (class name) is element 0 of the array.
* ``tag=True`` without array_like (map form): the tag is the first map entry,
  key ``"type"`` (msgspec's default tag_field); fields follow in declaration
  order; only fields *with* a default are omitted when equal to it, so
  ``lora_id``/``medium``/``lora_name`` (no default) are always present, as nil.
* floats are always float64 (0xcb); ints > 2**63-1 are uint64 (0xcf); negative
  ints use the smallest signed form (e.g. -1 is the fixint 0xff, large ones
  0xd3); bytes are bin (0xc4 NN); tuples encode as arrays.
"""

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Union

import msgspec

OUT = Path(__file__).resolve().parent
MSGSPEC_VERSION = "0.23.0"

ExternalBlockHash = Union[bytes, int]

# u64 values used across fixtures
H1 = 17507053300047258101  # 0xf2f58c385525a1f5
H2 = 14424512966625972522  # 0xc82e2a1e69c1d12a
H3 = 6803416000392209307  # 0x5e6a96ce6a96239b
D1 = bytes.fromhex("749fdc796f99efd836e0126282116392f5a5e4ea5c7ed009f2f58c385525a1f5")
D2 = bytes.fromhex("2d5697df551c58c422455b94c9c0db1ddfc2a375c20b0014c82e2a1e69c1d12a")


# ---------------------------------------------------------------------------
# Struct generations (one namespace per vLLM era)
# ---------------------------------------------------------------------------


def gen_v09() -> SimpleNamespace:
    """v0.9.0: 2-element batch (no dp rank); BlockStored 5 fields; BlockRemoved 1 field."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]

    class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[int]
        parent_block_hash: Optional[int]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[int]

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]

    return SimpleNamespace(**locals())


def gen_v011() -> SimpleNamespace:
    """~v0.11: dp rank in the batch; + medium on BlockStored and BlockRemoved."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: Optional[int] = None

    class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        parent_block_hash: Optional[ExternalBlockHash]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        medium: Optional[str]

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]

    return SimpleNamespace(**locals())


def gen_v012() -> SimpleNamespace:
    """+ lora_name on BlockStored (8-element positional BlockStored incl. tag)."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: Optional[int] = None

    class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        parent_block_hash: Optional[ExternalBlockHash]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]
        lora_name: Optional[str]

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        medium: Optional[str]

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]

    return SimpleNamespace(**locals())


def gen_v020() -> SimpleNamespace:
    """Last positional era: + extra_keys, group_idx, kv_cache_spec_kind/_sliding_window (12 elements)."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: Optional[int] = None

    class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        parent_block_hash: Optional[ExternalBlockHash]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]
        lora_name: Optional[str]
        extra_keys: Optional[list[Optional[tuple[Any, ...]]]] = None
        group_idx: Optional[int] = None
        kv_cache_spec_kind: Optional[str] = None
        kv_cache_spec_sliding_window: Optional[int] = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        medium: Optional[str]
        group_idx: Optional[int] = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]

    return SimpleNamespace(**locals())


def gen_v026() -> SimpleNamespace:
    """>= v0.26: KVCacheEvent drops array_like -> events are maps tagged {"type": ...}."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: Optional[int] = None

    class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        parent_block_hash: Optional[ExternalBlockHash]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]
        lora_name: Optional[str]
        extra_keys: Optional[list[Optional[tuple[Any, ...]]]] = None
        group_idx: Optional[int] = None
        kv_cache_spec_kind: Optional[str] = None
        kv_cache_spec_sliding_window: Optional[int] = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        medium: Optional[str]
        group_idx: Optional[int] = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]

    return SimpleNamespace(**locals())


def gen_v033() -> SimpleNamespace:
    """Newest map form: optional locality/ownership/session_id/lookahead_token_ids on
    BlockStored, remaining_copy_counts on BlockRemoved (all omitted when default)."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: Optional[int] = None

    class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        parent_block_hash: Optional[ExternalBlockHash]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]
        lora_name: Optional[str]
        extra_keys: Optional[list[Optional[tuple[Any, ...]]]] = None
        group_idx: Optional[int] = None
        kv_cache_spec_kind: Optional[str] = None
        kv_cache_spec_sliding_window: Optional[int] = None
        locality: Optional[str] = None
        ownership: Optional[str] = None
        session_id: Optional[str] = None
        lookahead_token_ids: Optional[list[int]] = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        medium: Optional[str]
        group_idx: Optional[int] = None
        remaining_copy_counts: Optional[list[int]] = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]

    return SimpleNamespace(**locals())


def gen_v034() -> SimpleNamespace:
    """vLLM 0.34.0 exactly: lookahead_token_ids is one list per block; BlockRemoved has
    locality/ownership and no remaining_copy_counts. BlockStored has 15 fields + the tag, so
    msgspec writes a map16 header (de 00 NN) even for the 8 entries of a plain store."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: Optional[int] = None

    class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        parent_block_hash: Optional[ExternalBlockHash]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]
        lora_name: Optional[str]
        extra_keys: Optional[list[Optional[tuple[Any, ...]]]] = None
        group_idx: Optional[int] = None
        kv_cache_spec_kind: Optional[str] = None
        kv_cache_spec_sliding_window: Optional[int] = None
        locality: Optional[str] = None
        ownership: Optional[str] = None
        session_id: Optional[str] = None
        lookahead_token_ids: Optional[list[list[int]]] = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[ExternalBlockHash]
        medium: Optional[str]
        group_idx: Optional[int] = None
        locality: Optional[str] = None
        ownership: Optional[str] = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]

    return SimpleNamespace(**locals())


def gen_batch_map() -> SimpleNamespace:
    """A vLLM main variant whose EventBatch is not array_like: the batch is a map too."""

    class EventBatch(msgspec.Struct, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: Optional[int] = None

    ns = gen_v026()

    class KVEventBatch(EventBatch):
        events: list[Union[ns.BlockStored, ns.BlockRemoved, ns.AllBlocksCleared]]

    ns.EventBatch = EventBatch
    ns.KVEventBatch = KVEventBatch
    return ns


# ---------------------------------------------------------------------------
# Normalization (the decoder's view, as specified for expected.json)
# ---------------------------------------------------------------------------


def hash_u64(h: Any) -> int:
    """bytes -> u64 of the last 8 bytes big-endian; negative int -> two's complement."""
    if isinstance(h, (bytes, bytearray)):
        return int.from_bytes(bytes(h)[-8:], "big")
    if isinstance(h, int):
        return h & 0xFFFFFFFFFFFFFFFF
    raise TypeError(f"bad hash {h!r}")


def norm_medium(m: Optional[str]) -> str:
    return "gpu" if m is None else m.lower()


def norm_stored(f: dict) -> dict:
    extra = f.get("extra_keys")
    parent = f.get("parent_block_hash")
    return {
        "type": "BlockStored",
        "block_hashes": [hash_u64(h) for h in f["block_hashes"]],
        "parent_block_hash": None if parent is None else hash_u64(parent),
        "token_ids": list(f["token_ids"]),
        "block_size": f["block_size"],
        "lora_id": f.get("lora_id"),
        "lora_name": f.get("lora_name"),
        "medium": norm_medium(f.get("medium")),
        "has_extra_keys": extra is not None and any(e is not None for e in extra),
        "group_idx": f.get("group_idx"),
    }


def norm_removed(f: dict) -> dict:
    return {
        "type": "BlockRemoved",
        "block_hashes": [hash_u64(h) for h in f["block_hashes"]],
        "medium": norm_medium(f.get("medium")),
        "group_idx": f.get("group_idx"),
    }


def norm_struct(ev: msgspec.Struct) -> dict:
    name = type(ev).__name__
    fields = msgspec.structs.asdict(ev)
    if name == "BlockStored":
        return norm_stored(fields)
    if name == "BlockRemoved":
        return norm_removed(fields)
    if name == "AllBlocksCleared":
        return {"type": "AllBlocksCleared"}
    raise ValueError(name)


# Independent reference reader over generic msgspec output (lists/dicts only).
STORED_POS = [
    "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
    "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
]
REMOVED_POS = ["block_hashes", "medium", "group_idx"]


def reference_read(raw: bytes) -> dict:
    obj = msgspec.msgpack.decode(raw)
    if isinstance(obj, dict):
        ts, events, dp = obj["ts"], obj["events"], obj.get("data_parallel_rank")
    else:
        ts, events = obj[0], obj[1]
        dp = obj[2] if len(obj) > 2 else None
    out, unknown = [], 0
    for ev in events:
        if isinstance(ev, dict):
            tag, fields = ev.get("type"), ev
        else:
            tag = ev[0]
            names = {"BlockStored": STORED_POS, "BlockRemoved": REMOVED_POS}.get(tag, [])
            fields = dict(zip(names, ev[1:]))
        if tag == "BlockStored":
            out.append(norm_stored(fields))
        elif tag == "BlockRemoved":
            out.append(norm_removed(fields))
        elif tag == "AllBlocksCleared":
            out.append({"type": "AllBlocksCleared"})
        else:
            unknown += 1
    return {"ts": ts, "data_parallel_rank": dp, "events": out, "unknown_events": unknown}


# ---------------------------------------------------------------------------
# LMCache chunk hashes (fixtures 13 and 14)
# ---------------------------------------------------------------------------

LMC_CHUNK = 256  # LMCache chunk_size (its default), the block_size of its events

# In-process LMCacheConnectorV1, pre_caching_hash_algorithm "builtin" (the default):
# vLLM 0.34 has no hash named "builtin", so LMCache falls back to Python's hash(); its
# NONE_HASH comes from vLLM's init_none_hash(hash) = hash(os.environ["PYTHONHASHSEED"]),
# here hash("0") under PYTHONHASHSEED=0 (a str hash, so seeded: hard-coded). Each chunk
# hash is hash((prefix_hash, tuple(chunk_tokens), ())) (token_database._hash_tokens), a
# signed 64-bit int; hashing a tuple of ints does not depend on the seed.
LMC_NONE_HASH = 5313149338359954478
LMC_PROMPT = list(range(1000, 2100))  # a 1100-token prompt
LMC_CHUNK_HASHES = [  # chunks 0..3 of LMC_PROMPT
    -5291550163413402495,
    -3317032428723197383,
    6040625876194402222,
    -6511183717868374682,
]

# Multiprocess LMCacheMPConnector: TokenHasher "blake3" (its default) gives 32-byte
# digests; none_hash = blake3(i64be(0) + u32be(0)), chunk = blake3(prefix_digest +
# u32be(tokens...)). vLLM's maybe_convert_block_hash (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1,
# the default) publishes int.from_bytes(digest) & (2**64-1): the last 8 bytes.
MP_NONE_HASH = bytes.fromhex("7e3eff9ef7613a50340eb12677ee03b83ac759fcba9bb32705f07248d56d473b")
MP_PROMPT = list(range(3000, 3512))  # 2 chunks
MP_DIGESTS = [  # chunks 0, 1 of MP_PROMPT
    bytes.fromhex("d95997759dc83ad28505e0461554871757f5eebb32cd9bb8f9dc6db3b89af5af"),
    bytes.fromhex("dd50b94e928eff92a21184540571957ec03ae8b807b8c1e63a865b0c123ee535"),
]
MP_OTHER_PROMPT = list(range(5000, 5256))  # 1 chunk, announced earlier, then evicted
MP_OTHER_DIGEST = bytes.fromhex("0f597bcaba4bad7408fd60ad70322b2bc257c5df46080b98b49bb66021f39bb7")


def lmcache_builtin_chain(tokens: list[int]) -> list[int]:
    """LMCache's prefix-chained builtin chunk hashes over the full chunks of ``tokens``."""
    h, out = LMC_NONE_HASH, []
    for i in range(0, len(tokens) - len(tokens) % LMC_CHUNK, LMC_CHUNK):
        h = hash((h, tuple(tokens[i:i + LMC_CHUNK]), ()))
        out.append(h)
    return out


def vllm_int_hash(digest: bytes) -> int:
    """vLLM's maybe_convert_block_hash with int block hashes on."""
    return int.from_bytes(digest, "big") & 0xFFFFFFFFFFFFFFFF


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

FIXTURES: dict[str, dict] = {}  # name -> {"bytes", "expected", "decoder"}


def add(name: str, ns: SimpleNamespace, batch: msgspec.Struct, unknown: int = 0) -> None:
    raw = msgspec.msgpack.encode(batch)
    known = [e for e in batch.events if isinstance(e, msgspec.Struct)]
    expected = {
        "ts": batch.ts,
        "data_parallel_rank": getattr(batch, "data_parallel_rank", None),
        "events": [norm_struct(e) for e in known],
        "unknown_events": unknown,
    }
    # Typed decoding only works when every event is a known struct.
    decoder = None if unknown else msgspec.msgpack.Decoder(type=ns.KVEventBatch)
    FIXTURES[name] = {"bytes": raw, "expected": expected, "decoder": decoder}


def build() -> None:
    # 1. v0.9.0: 2-element batch, 6-element BlockStored, 2-element BlockRemoved.
    g = gen_v09()
    add("v09-positional.msgpack", g, g.EventBatch(
        ts=1717171717.25,
        events=[
            g.BlockStored(block_hashes=[12345, H1], parent_block_hash=None,
                          token_ids=list(range(100, 132)), block_size=16, lora_id=None),
            g.BlockRemoved(block_hashes=[12345]),
        ],
    ))

    # 2. ~v0.11 exact example (45 bytes).
    g = gen_v011()
    add("v011-positional.msgpack", g, g.EventBatch(
        ts=1.5,
        events=[g.BlockStored(block_hashes=[H1], parent_block_hash=None, token_ids=[1, 2],
                              block_size=2, lora_id=None, medium="GPU")],
        data_parallel_rank=0,
    ))

    # 3. ~v0.11 BlockRemoved + AllBlocksCleared (58 bytes).
    add("v011-removed-cleared.msgpack", g, g.EventBatch(
        ts=1.5,
        events=[g.BlockRemoved(block_hashes=[H3], medium="GPU"), g.AllBlocksCleared()],
        data_parallel_rank=0,
    ))

    # 4. + lora_name.
    g = gen_v012()
    add("v012-lora.msgpack", g, g.EventBatch(
        ts=1730000000.5,
        events=[g.BlockStored(block_hashes=[H2, H3], parent_block_hash=H1,
                              token_ids=list(range(1, 33)), block_size=16, lora_id=7,
                              medium="GPU", lora_name="sql-adapter")],
        data_parallel_rank=0,
    ))

    # 5. Full 12-element positional BlockStored; BlockRemoved with group_idx.
    g = gen_v020()
    add("v020-positional-full.msgpack", g, g.EventBatch(
        ts=1750000000.75,
        events=[
            g.BlockStored(block_hashes=[H1, H2], parent_block_hash=H3,
                          token_ids=list(range(500, 532)), block_size=16, lora_id=None,
                          medium="GPU", lora_name=None,
                          extra_keys=[None, ("mm-hash-abc", 0)], group_idx=0,
                          kv_cache_spec_kind="full_attention",
                          kv_cache_spec_sliding_window=None),
            g.BlockRemoved(block_hashes=[H3], medium="GPU", group_idx=0),
        ],
        data_parallel_rank=0,
    ))

    # 6. Map-form events (>= v0.26).
    g = gen_v026()
    add("v026-map.msgpack", g, g.EventBatch(
        ts=1760000000.125,
        events=[
            g.BlockStored(block_hashes=[H1, H2, H3], parent_block_hash=None,
                          token_ids=list(range(1000, 1048)), block_size=16, lora_id=None,
                          medium="GPU", lora_name=None),
            g.BlockRemoved(block_hashes=[H1], medium="GPU"),
            g.AllBlocksCleared(),
        ],
        data_parallel_rank=0,
    ))

    # 7. Map form with the newest optional fields; CPU medium, no tokens.
    g = gen_v033()
    add("v033-map-new-fields.msgpack", g, g.EventBatch(
        ts=1770000000.0,
        events=[
            g.BlockStored(block_hashes=[H2], parent_block_hash=H1, token_ids=[],
                          block_size=16, lora_id=None, medium="CPU", lora_name=None,
                          extra_keys=[("mm-hash-def", 3)], group_idx=1,
                          kv_cache_spec_kind="sliding_window",
                          kv_cache_spec_sliding_window=4096, locality="local",
                          ownership="owned", session_id="s-1", lookahead_token_ids=[5, 6]),
            g.BlockRemoved(block_hashes=[H2], medium="CPU", group_idx=1,
                           remaining_copy_counts=[0]),
        ],
        data_parallel_rank=0,
    ))

    # 8. 32-byte sha256 hashes as bin values (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
    g = gen_v026()
    add("bytes-hashes.msgpack", g, g.EventBatch(
        ts=1760000001.5,
        events=[
            g.BlockStored(block_hashes=[D1], parent_block_hash=None, token_ids=list(range(16)),
                          block_size=16, lora_id=None, medium="GPU", lora_name=None),
            g.BlockStored(block_hashes=[D2], parent_block_hash=D1,
                          token_ids=list(range(16, 32)), block_size=16, lora_id=None,
                          medium="GPU", lora_name=None),
            g.BlockRemoved(block_hashes=[D1, D2], medium="GPU"),
        ],
        data_parallel_rank=0,
    ))

    # 9. Negative ints (old `builtin` hash), v0.9 shapes.
    g = gen_v09()
    add("negative-hashes.msgpack", g, g.EventBatch(
        ts=1717171718.5,
        events=[
            g.BlockStored(block_hashes=[-1, -6917529027641081856], parent_block_hash=-2,
                          token_ids=list(range(32)), block_size=16, lora_id=None),
            g.BlockRemoved(block_hashes=[-6917529027641081856]),
        ],
    ))

    # 10. Unknown event type between known ones (positional, then map form).
    g = gen_v011()
    add("unknown-event.msgpack", g, g.EventBatch(
        ts=1.5,
        events=[
            g.BlockStored(block_hashes=[H1], parent_block_hash=None, token_ids=[1, 2],
                          block_size=2, lora_id=None, medium="GPU"),
            ["BlockPinned", [1]],
            g.BlockRemoved(block_hashes=[H1], medium="GPU"),
        ],
        data_parallel_rank=0,
    ), unknown=1)
    g = gen_v026()
    add("unknown-event-map.msgpack", g, g.EventBatch(
        ts=1.5,
        events=[
            g.BlockStored(block_hashes=[H1], parent_block_hash=None, token_ids=[1, 2],
                          block_size=2, lora_id=None, medium="GPU", lora_name=None),
            {"type": "BlockPinned", "block_hashes": [1]},
            g.BlockRemoved(block_hashes=[H1], medium="GPU"),
        ],
        data_parallel_rank=0,
    ), unknown=1)

    # 11. The batch itself as a map, with map events.
    g = gen_batch_map()
    add("batch-as-map.msgpack", g, g.EventBatch(
        ts=1780000000.25,
        events=[
            g.BlockStored(block_hashes=[H3], parent_block_hash=H2, token_ids=list(range(16)),
                          block_size=16, lora_id=None, medium="GPU", lora_name=None),
            g.BlockRemoved(block_hashes=[H3], medium="GPU"),
        ],
        data_parallel_rank=1,
    ))

    # 12. Positional batch from data-parallel rank 3.
    g = gen_v011()
    add("dp-rank-3.msgpack", g, g.EventBatch(
        ts=1740000000.5,
        events=[g.BlockStored(block_hashes=[H2], parent_block_hash=H1, token_ids=list(range(16)),
                              block_size=16, lora_id=None, medium="GPU")],
        data_parallel_rank=3,
    ))

    # 13. LMCache 0.5.6 LMCacheConnectorV1 (in-process, enable_kv_events: true) through
    # vLLM 0.34. Its events are built by LMCacheEngine.store() (cache_engine.py ~l.535)
    # and copied field by field into vLLM BlockStored (lmcache_connector.py
    # get_kv_connector_kv_cache_events); the scheduler publishes them with
    # KVEventBatch(ts, events), the ZMQ publisher fills in data_parallel_rank 0.
    # Modelled: LMC_PROMPT prefilled in 512-token steps (max_num_batched_tokens 512);
    # step 1 stored chunks 0-1, this is step 2's store of tokens[:1024] with the first 512
    # masked, i.e. chunks 2 and 3. One event per chunk:
    # * block_hashes = [LMCache chunk hash] (Python hash(): signed, chunk 3 is negative);
    #   not vLLM's block hash.
    # * parent_block_hash: prev_key starts at 0 in each store() call and None is used only
    #   for start == 0, so the first chunk of a store that starts past token 0 says 0 (not
    #   chunk 1's hash); later chunks chain to the previous one of the same call.
    # * token_ids = convert_tokens_to_list(tokens, start, end) = tokens[start:end + 1]:
    #   upstream off-by-one, 257 ids for a 256-token chunk; the slice is clamped at the end
    #   of the stored tokens (truncated to a chunk multiple), so the store's last chunk
    #   has 256. Reproduced as sent: 257 then 256 ids, block_size 256 for both.
    # * medium "cpu", lower case (whatever backend holds the chunk); lora_id/lora_name None.
    # The connector never sends BlockRemoved or AllBlocksCleared.
    g = gen_v034()
    c2, c3 = 2 * LMC_CHUNK, 3 * LMC_CHUNK
    stored_tokens = LMC_PROMPT[:4 * LMC_CHUNK]
    add("lmcache-v05-connector-cpu.msgpack", g, g.EventBatch(
        ts=1790000000.5,
        events=[
            g.BlockStored(block_hashes=[LMC_CHUNK_HASHES[2]], parent_block_hash=0,
                          token_ids=stored_tokens[c2:c3 + 1], block_size=LMC_CHUNK,
                          lora_id=None, medium="cpu", lora_name=None),
            g.BlockStored(block_hashes=[LMC_CHUNK_HASHES[3]],
                          parent_block_hash=LMC_CHUNK_HASHES[2],
                          token_ids=stored_tokens[c3:c3 + LMC_CHUNK + 1], block_size=LMC_CHUNK,
                          lora_id=None, medium="cpu", lora_name=None),
        ],
        data_parallel_rank=0,
    ))

    # 14. LMCache 0.5.6 LMCacheMPConnector (multiprocess server), vLLM 0.34, kv events on
    # (lmcache_mp_connector.py get_kv_connector_kv_cache_events, vllm_multi_process_adapter).
    # BlockStored: one chunk, medium "CPU" (KV_EVENT_MEDIUM_CPU), block_size = the server's
    # chunk size, token_ids exactly the chunk's 256 tokens, parent = the previous chunk's
    # hash (None only for chunk 0). BlockRemoved(medium "CPU"): a server-side CPU eviction
    # of a hash this worker announced earlier. Hashes are blake3 digests as vLLM ints.
    g = gen_v034()
    add("lmcache-mp-cpu-removed.msgpack", g, g.EventBatch(
        ts=1790000001.25,
        events=[
            g.BlockStored(block_hashes=[vllm_int_hash(MP_DIGESTS[1])],
                          parent_block_hash=vllm_int_hash(MP_DIGESTS[0]),
                          token_ids=MP_PROMPT[LMC_CHUNK:2 * LMC_CHUNK], block_size=LMC_CHUNK,
                          lora_id=None, medium="CPU", lora_name=None),
            g.BlockRemoved(block_hashes=[vllm_int_hash(MP_OTHER_DIGEST)], medium="CPU"),
        ],
        data_parallel_rank=0,
    ))


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


def check_exact_examples() -> None:
    # (float64 1.5 is cb 3ff8000000000000: 8 bytes after the 0xcb marker)
    ex2 = bytes.fromhex(
        "93" "cb3ff8000000000000" "91" "97" "ab426c6f636b53746f726564" "91cff2f58c385525a1f5"
        "c0" "920102" "02" "c0" "a3475055" "00"
    )
    assert len(ex2) == 45
    got = FIXTURES["v011-positional.msgpack"]["bytes"]
    assert got == ex2, f"v011-positional: {got.hex()} != {ex2.hex()}"
    got3 = FIXTURES["v011-removed-cleared.msgpack"]["bytes"]
    ex3 = bytes.fromhex(
        "93" "cb3ff8000000000000" "92"
        "93" "ac426c6f636b52656d6f766564" "91cf5e6a96ce6a96239b" "a3475055"
        "91" "b0416c6c426c6f636b73436c6561726564"
        "00"
    )
    assert len(ex3) == 58 and got3 == ex3, f"v011-removed-cleared: {got3.hex()}"
    assert hash_u64(D1) == H1 and hash_u64(D2) == H2
    assert hash_u64(-1) == 18446744073709551615
    assert hash_u64(-6917529027641081856) == 11529215046068469760


def check_lmcache() -> None:
    """The LMCache fixtures: hashes re-derived, upstream quirks present in the bytes."""
    # Tuple-of-int hashing is fixed in 64-bit CPython >= 3.8 (independent of the seed).
    if sys.implementation.name == "cpython" and sys.hash_info.width == 64:
        assert lmcache_builtin_chain(LMC_PROMPT) == LMC_CHUNK_HASHES, lmcache_builtin_chain(LMC_PROMPT)
    try:  # optional: only needed to re-derive the MP digests
        import blake3  # type: ignore[import-not-found]
    except ImportError:
        blake3 = None
    if blake3 is not None:
        def b3(prefix: Any, tokens: list[int]) -> bytes:
            h = blake3.blake3()
            h.update(prefix if isinstance(prefix, bytes) else prefix.to_bytes(8, "big", signed=True))
            h.update(b"".join(t.to_bytes(4, "big") for t in tokens))
            return h.digest()
        assert b3(0, [0]) == MP_NONE_HASH
        d0 = b3(MP_NONE_HASH, MP_PROMPT[:LMC_CHUNK])
        assert [d0, b3(d0, MP_PROMPT[LMC_CHUNK:])] == MP_DIGESTS
        assert b3(MP_NONE_HASH, MP_OTHER_PROMPT) == MP_OTHER_DIGEST

    raw = FIXTURES["lmcache-v05-connector-cpu.msgpack"]["bytes"]
    stored = b"\xde\x00\x08\xa4type\xabBlockStored"  # map16 header, 8 entries
    assert raw.count(stored) == 2 and raw.count(b"\xa6medium\xa3cpu") == 2, raw.hex()
    assert b"\xb1parent_block_hash\x00\xa9token_ids\xdc\x01\x01" in raw  # parent 0, 257 ids
    assert b"\xa9token_ids\xdc\x01\x00" in raw and b"\xaablock_size\xcd\x01\x00" in raw
    assert LMC_CHUNK_HASHES[3] < 0 and b"\xacblock_hashes\x91\xd3" in raw  # int64
    ev = FIXTURES["lmcache-v05-connector-cpu.msgpack"]["expected"]["events"]
    assert [len(e["token_ids"]) for e in ev] == [257, 256] and ev[1]["token_ids"][0] == ev[0]["token_ids"][-1]
    assert [e["parent_block_hash"] for e in ev] == [0, hash_u64(LMC_CHUNK_HASHES[2])]

    raw = FIXTURES["lmcache-mp-cpu-removed.msgpack"]["bytes"]
    assert raw.count(b"\xa6medium\xa3CPU") == 2 and raw.count(stored) == 1, raw.hex()
    assert b"\x83\xa4type\xacBlockRemoved" in raw  # fixmap: group_idx etc. omitted
    ev = FIXTURES["lmcache-mp-cpu-removed.msgpack"]["expected"]["events"]
    assert len(ev[0]["token_ids"]) == ev[0]["block_size"] == LMC_CHUNK
    assert ev[0]["parent_block_hash"] == 0xF9DC6DB3B89AF5AF and ev[1]["block_hashes"] == [0xB49BB66021F39BB7]


def summary(raw: bytes) -> str:
    obj = msgspec.msgpack.decode(raw)
    if isinstance(obj, dict):
        shape = f"batch=map{{{','.join(obj)}}}"
        events = obj["events"]
    else:
        shape = f"batch=array[{len(obj)}]"
        events = obj[1]
    evs = []
    for ev in events:
        if isinstance(ev, dict):
            evs.append(f"map:{ev.get('type')}({len(ev)} keys)")
        else:
            evs.append(f"arr:{ev[0]}[{len(ev)}]")
    return f"{len(raw):4d} B  {shape}  events: {', '.join(evs)}"


def dump_expected(expected: dict) -> str:
    """JSON with one line per event (plain json, just laid out for reading)."""
    files = []
    for name, exp in expected.items():
        events = ",\n".join("      " + json.dumps(e) for e in exp["events"])
        files.append(
            f"  {json.dumps(name)}: {{\n"
            f"    \"ts\": {json.dumps(exp['ts'])},\n"
            f"    \"data_parallel_rank\": {json.dumps(exp['data_parallel_rank'])},\n"
            f"    \"events\": [\n{events}\n    ],\n"
            f"    \"unknown_events\": {json.dumps(exp['unknown_events'])}\n"
            f"  }}"
        )
    text = "{\n" + ",\n".join(files) + "\n}\n"
    assert json.loads(text) == expected
    return text


def main() -> int:
    if msgspec.__version__ != MSGSPEC_VERSION:
        print(f"warning: msgspec {msgspec.__version__}, fixtures were made with {MSGSPEC_VERSION}",
              file=sys.stderr)
    build()
    check_exact_examples()
    check_lmcache()

    expected = {}
    for name, fx in FIXTURES.items():
        (OUT / name).write_bytes(fx["bytes"])
        expected[name] = fx["expected"]
    (OUT / "expected.json").write_text(dump_expected(expected))

    # Self-check: decode every written file back.
    loaded = json.loads((OUT / "expected.json").read_text())
    for name in FIXTURES:
        raw = (OUT / name).read_bytes()
        ref = reference_read(raw)
        assert ref == loaded[name], f"{name}: reference reader {ref} != expected {loaded[name]}"
        dec = FIXTURES[name]["decoder"]
        if dec is not None:
            typed = dec.decode(raw)
            assert [norm_struct(e) for e in typed.events] == loaded[name]["events"], name
        print(f"{name:33s} {summary(raw)}")
    print(f"ok: {len(FIXTURES)} fixtures + expected.json in {OUT} (msgspec {msgspec.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

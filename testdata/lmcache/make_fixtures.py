#!/usr/bin/env python3
"""Generate LMCache cache-controller protocol fixtures for ferrogate's decoder tests.

Each ``*.msgpack`` file written next to this script is exactly one ZMQ frame
payload that an LMCache 0.5.6 worker sends to its cache controller: one
msgspec-encoded message, a msgpack map tagged ``"type": "<ClassName>"``. On the
PUSH -> PULL socket a worker sends up to 50 such frames in one multipart
message (``send_multipart([encode(m) for m in msgs])``), and the controller
decodes every frame on its own: there is no topic frame and no envelope.
``RegisterMsg`` travels DEALER -> ROUTER (``[b"", payload]``), ``HeartbeatMsg``
over a second DEALER, so those payloads are the last frame of their message.
The ``.json`` file is the JSON form an external sender may use instead: the
controller accepts any frame starting with ``{`` (``msgspec.convert(json.loads
(part), type=Msg)``).

The ``reply-*.msgpack`` files go the other way: each is the payload a 0.5.6
controller sends back on a ROUTER socket (``[identity, b"", encode(ret_msg)]``,
so the worker's DEALER sees ``[b"", payload]``): ``RegisterRetMsg``,
``HeartbeatRetMsg`` or ``ErrorMsg``. They are always msgpack, and they are not
worker messages, so they are listed in ``replies.json`` rather than in
``expected.json``.

The struct classes below are copied from LMCache 0.5.6's
``lmcache/v1/cache_controller/message.py`` (PyPI wheel, commit g3e11e108): the
worker -> controller classes, their bases and ``KVOpEvent``/``OpType``, and the
controller -> worker reply classes (``WorkerReqRetMsg`` and its subclasses) with
the heartbeat commands they carry (``HeartbeatCommand``/``FullSyncCommand``, from
``commands/base.py`` and ``commands/full_sync.py``), with their fields, defaults,
field order and class options exactly as upstream; only the ``describe()``,
``execute()`` and ``has_commands()`` methods are left out (they do not affect
encoding).
``MsgBase`` is ``msgspec.Struct, tag=True``: tag field ``"type"``, tag value
the class name, map form (no ``array_like``), no ``omit_defaults`` (fields with
a default are always written).

Generated with msgspec 0.23.0 (Python 3.11). Regenerate, from the repo root:

    python3 -m venv /tmp/fxvenv && /tmp/fxvenv/bin/pip install msgspec==0.23.0
    /tmp/fxvenv/bin/python testdata/lmcache/make_fixtures.py

Optional cross-check against the upstream source: set ``LMCACHE_WHEEL_DIR`` to
a directory holding the unpacked lmcache 0.5.6 wheel (the one containing
``lmcache/``); the script then loads the real ``message.py`` (with small stubs
for its imports) and asserts it encodes every fixture and every reply to the
same bytes, and that every copied class has upstream's fields, types, defaults
and class options.

The script is deterministic: re-running it rewrites identical bytes and an
identical expected.json and replies.json. It writes ``expected.json`` (what a correct decoder
reads from each file, normalized; built from the inputs given to the encoder;
the normal form is described in README.md) and then self-checks: every file is
decoded back (1) generically into dicts and normalized by an independent
reference reader and (2) with the typed msgspec decoder over the Union of the
classes, as the controller does; both must equal expected.json. It also
writes ``replies.json`` (each reply file -> its message as plain JSON, keys in
wire order) and decodes every reply file back generically and with the typed
msgspec decoder over the Union of the reply classes (as the worker does); both
must equal replies.json. Byte-exact examples (from hand-built msgpack, not
msgspec) are asserted too.
"""

import enum
import hashlib
import importlib.util
import json
import logging
import os
import re
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import msgspec

OUT = Path(__file__).resolve().parent
MSGSPEC_VERSION = "0.23.0"
LMCACHE_VERSION = "0.5.6"
U64 = 0xFFFFFFFFFFFFFFFF

# ---------------------------------------------------------------------------
# LMCache 0.5.6 lmcache/v1/cache_controller/message.py (worker -> controller part)
# ---------------------------------------------------------------------------


class MsgBase(msgspec.Struct, tag=True):  # type: ignore
    """Base class for all messages"""


class WorkerMsg(MsgBase):
    """Message between LMCache and Controller"""


class WorkerReqMsg(MsgBase):
    pass


class RegisterMsg(WorkerReqMsg):
    """Message for Registration (REQ-REP mode)"""

    instance_id: str
    worker_id: int
    ip: str
    port: int
    # URL for actual KV cache transfer, only useful when p2p is enabled
    peer_init_url: Optional[str]


class DeRegisterMsg(WorkerMsg):
    """Message for Deregistration"""

    instance_id: str
    worker_id: int
    ip: str
    port: int


class KVOperationMsg(WorkerMsg):
    """Base class for KV operation messages (admit/evict) with full context"""

    instance_id: str
    worker_id: int
    key: int
    location: str
    seq_num: int = 0


class KVAdmitMsg(KVOperationMsg):
    """Message for KV chunk admission"""


class KVEvictMsg(KVOperationMsg):
    """Message for KV chunk eviction"""


class OpType(enum.Enum):
    """Enum for KV operation types"""

    ADMIT = "admit"
    EVICT = "evict"


class KVOpEvent(msgspec.Struct):
    """Lightweight KV operation event for queue storage (without common fields)"""

    op_type: OpType
    key: int
    seq_num: int


class BatchedKVOperationMsg(WorkerMsg):
    """Batched KV operation message with common fields and lightweight operations"""

    instance_id: str
    worker_id: int
    location: str
    operations: list[KVOpEvent]


class FullSyncBatchMsg(WorkerMsg):
    """Full sync batch message (PUSH mode, no confirmation needed)"""

    instance_id: str
    worker_id: int
    location: str
    sync_id: str
    batch_id: int  # Current batch number (0-indexed)
    keys: list[int]  # List of chunk_hash in this batch


class FullSyncEndMsg(WorkerMsg):
    """Full sync end message (PUSH mode)"""

    instance_id: str
    worker_id: int
    location: str
    sync_id: str
    actual_total_keys: int  # Actual total keys sent (for verification)


class HeartbeatMsg(WorkerReqMsg):
    """Message for heartbeat (REQ-REP mode), include register info for re-register"""

    instance_id: str
    worker_id: int
    ip: str
    port: int
    peer_init_url: Optional[str]


class BatchedP2PLookupMsg(WorkerReqMsg):
    """Batched P2P lookup message"""

    hashes: list[int]
    instance_id: str
    worker_id: int  # TP rank


class FullSyncStartMsg(WorkerReqMsg):
    """Full sync start message (REQ-REP mode, needs confirmation)"""

    instance_id: str
    worker_id: int
    location: str
    sync_id: str  # Sync session ID
    total_keys: int  # Expected total key count
    batch_count: int  # Expected batch count


class FullSyncStatusMsg(WorkerReqMsg):
    """Full sync status query message (REQ-REP mode)"""

    instance_id: str
    worker_id: int
    sync_id: str


# The worker -> controller members of upstream's ``Msg`` union (upstream's union also
# holds the reply, control and orchestration classes; tags are class names, so this
# subset decodes these payloads exactly as the full union does).
WorkerSideMsg = Union[
    RegisterMsg,
    DeRegisterMsg,
    KVAdmitMsg,
    KVEvictMsg,
    BatchedKVOperationMsg,
    HeartbeatMsg,
    BatchedP2PLookupMsg,
    FullSyncStartMsg,
    FullSyncBatchMsg,
    FullSyncEndMsg,
    FullSyncStatusMsg,
]

# ---------------------------------------------------------------------------
# LMCache 0.5.6 controller -> worker replies: the heartbeat commands from
# lmcache/v1/cache_controller/commands/{base,full_sync}.py, then the reply part
# of lmcache/v1/cache_controller/message.py
# ---------------------------------------------------------------------------


class HeartbeatCommand(msgspec.Struct, tag_field="command_type"):
    """Base class for heartbeat commands (polymorphic)"""

    reason: Optional[str] = None  # Why this command is issued
    args: Optional[Dict[str, Any]] = None  # Extension arguments for command


class FullSyncCommand(HeartbeatCommand, tag="full_sync"):
    """Command to request full state synchronization"""


# Type alias for all command types - msgspec needs Union for tagged unions
AnyCommand = Union[FullSyncCommand, HeartbeatCommand]


class WorkerReqRetMsg(MsgBase):
    pass


class RegisterRetMsg(WorkerReqRetMsg):
    """Register response message with controller configuration"""

    # Extra configuration from controller to worker
    # e.g., {"heartbeat_url": "tcp://...:8082"}
    extra_config: dict[str, str] = msgspec.field(default_factory=dict)


class HeartbeatRetMsg(WorkerReqRetMsg):
    """Heartbeat response message with optional commands"""

    commands: List[AnyCommand] = []


class BatchedP2PLookupRetMsg(WorkerReqRetMsg):
    """Batched P2P lookup return message"""

    # (instance_id, location, num_hit_chunks, peer_init_url)
    layout_info: list[tuple[str, str, int, str]]


class FullSyncStartRetMsg(WorkerReqRetMsg):
    """Full sync start response message"""

    sync_id: str
    accepted: bool  # Whether sync request is accepted
    error_msg: Optional[str] = None


class FullSyncStatusRetMsg(WorkerReqRetMsg):
    """Full sync status response message"""

    sync_id: str
    is_complete: bool  # Whether current worker sync is complete
    global_progress: float  # Global progress (0.0 - 1.0)
    can_exit_freeze: bool  # Whether freeze mode can be exited
    missing_batches: list[int] = []  # List of missing batch IDs that need to be resent


class ErrorMsg(WorkerReqRetMsg):
    """Control Error Message"""

    error: str


# The controller -> worker reply members of upstream's ``Msg`` union (the worker
# decodes replies with the full union; tags are class names, so this subset decodes
# these payloads exactly as the full union does).
ReplyMsg = Union[
    RegisterRetMsg,
    HeartbeatRetMsg,
    BatchedP2PLookupRetMsg,
    FullSyncStartRetMsg,
    FullSyncStatusRetMsg,
    ErrorMsg,
]

# ---------------------------------------------------------------------------
# Normal form (see README.md): what a decoder reports for one frame
# ---------------------------------------------------------------------------

# Types a controller-side consumer is expected to understand. Anything else
# (e.g. BatchedP2PLookupMsg, FullSync{Start,End,Status}Msg) is "known": false
# and carries no other information.
KNOWN_TYPES = (
    "BatchedKVOperationMsg",
    "KVAdmitMsg",
    "KVEvictMsg",
    "RegisterMsg",
    "DeRegisterMsg",
    "HeartbeatMsg",
    "FullSyncBatchMsg",
)


def u64(k: int) -> int:
    """Any msgpack int (-2**63 .. 2**64-1) as unsigned 64-bit two's complement."""
    assert -(1 << 63) <= k <= U64, k
    return k & U64


def normal(type_: str, *, instance_id: Optional[str] = None, worker_id: Optional[int] = None,
           location: Optional[str] = None, operations: Optional[list] = None,
           ip: Optional[str] = None, port: Optional[int] = None,
           keys: Optional[list[int]] = None) -> dict:
    known = type_ in KNOWN_TYPES
    if not known:
        return {"type": type_, "known": False, "instance_id": None, "worker_id": None,
                "location": None, "operations": [], "ip": None, "port": None, "keys_u64": []}
    return {
        "type": type_,
        "known": True,
        "instance_id": instance_id,
        "worker_id": worker_id,
        "location": location,
        "operations": [{"op": op, "key_u64": u64(k), "seq_num": s} for op, k, s in operations or []],
        "ip": ip,
        "port": port,
        "keys_u64": [u64(k) for k in keys or []],
    }


def norm_struct(m: msgspec.Struct) -> dict:
    """Typed path: a decoded struct -> normal form."""
    name = type(m).__name__
    if isinstance(m, BatchedKVOperationMsg):
        ops = [(e.op_type.value, e.key, e.seq_num) for e in m.operations]
        return normal(name, instance_id=m.instance_id, worker_id=m.worker_id,
                      location=m.location, operations=ops)
    if isinstance(m, (KVAdmitMsg, KVEvictMsg)):
        op = "admit" if isinstance(m, KVAdmitMsg) else "evict"
        return normal(name, instance_id=m.instance_id, worker_id=m.worker_id,
                      location=m.location, operations=[(op, m.key, m.seq_num)])
    if isinstance(m, (RegisterMsg, HeartbeatMsg, DeRegisterMsg)):
        return normal(name, instance_id=m.instance_id, worker_id=m.worker_id, ip=m.ip, port=m.port)
    if isinstance(m, FullSyncBatchMsg):
        return normal(name, instance_id=m.instance_id, worker_id=m.worker_id,
                      location=m.location, keys=m.keys)
    return normal(name)


def reference_read(obj: Any) -> dict:
    """Independent reader over generic decoder output (dicts, lists, str, int)."""
    assert isinstance(obj, dict) and isinstance(obj.get("type"), str), obj
    t = obj["type"]
    out = {"type": t, "known": t in KNOWN_TYPES, "instance_id": None, "worker_id": None,
           "location": None, "operations": [], "ip": None, "port": None, "keys_u64": []}
    if not out["known"]:
        return out
    out["instance_id"] = obj["instance_id"]
    out["worker_id"] = obj["worker_id"]
    out["location"] = obj.get("location")
    out["ip"] = obj.get("ip")
    out["port"] = obj.get("port")
    if t == "BatchedKVOperationMsg":
        for op in obj["operations"]:
            assert op["op_type"] in ("admit", "evict"), op
            out["operations"].append(
                {"op": op["op_type"], "key_u64": op["key"] & U64, "seq_num": op["seq_num"]})
    elif t in ("KVAdmitMsg", "KVEvictMsg"):
        out["operations"].append({"op": "admit" if t == "KVAdmitMsg" else "evict",
                                  "key_u64": obj["key"] & U64, "seq_num": obj["seq_num"]})
    elif t == "FullSyncBatchMsg":
        out["keys_u64"] = [k & U64 for k in obj["keys"]]
    return out


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

INST = "vllm-0"
CPU = "LocalCPUBackend"
DISK = "LocalDiskBackend"
IP = "10.0.0.5"
PORT = 8001  # the worker's REP port (lmcache_worker_ports[i])
K_BIG = 12345678901234567890  # > 2**63-1: msgpack uint64 (cf)
K_NEG = -42  # int8 (d0 d6)
K_I64 = -6511183717868374682  # int64 (d3): a real builtin-hash chunk hash (see kv-events)

HB_URL = "127.0.0.1:8500"  # a heartbeat_url as the controller hands it out (no tcp://)

FIXTURES: dict[str, dict] = {}  # name -> {"bytes", "msg", "expected", "json"}
REPLIES: dict[str, dict] = {}  # name -> {"bytes", "msg", "plain"}


def add(name: str, msg: msgspec.Struct, expected: dict, as_json: bool = False) -> None:
    raw = msgspec.json.encode(msg) if as_json else msgspec.msgpack.encode(msg)
    FIXTURES[name] = {"bytes": raw, "msg": msg, "expected": expected, "json": as_json}


def add_reply(name: str, msg: msgspec.Struct, plain: dict) -> None:
    """A controller -> worker reply; ``plain`` is its replies.json entry (keys in wire order)."""
    REPLIES[name] = {"bytes": msgspec.msgpack.encode(msg), "msg": msg, "plain": plain}


def command_reply() -> HeartbeatRetMsg:
    """In-memory only (no file): a HeartbeatRetMsg carrying one FullSyncCommand."""
    return HeartbeatRetMsg(commands=[FullSyncCommand(reason="worker_re_registered")])


def batched_1() -> BatchedKVOperationMsg:
    return BatchedKVOperationMsg(instance_id=INST, worker_id=0, location=CPU, operations=[
        KVOpEvent(op_type=OpType.ADMIT, key=K_BIG, seq_num=0),
        KVOpEvent(op_type=OpType.EVICT, key=K_NEG, seq_num=1),
        KVOpEvent(op_type=OpType.ADMIT, key=7, seq_num=2),
    ])


def build() -> None:
    ops1 = [("admit", K_BIG, 0), ("evict", K_NEG, 1), ("admit", 7, 2)]

    # 1. What 0.5.6 actually sends for admits/evicts (PUSH): one batch per sender drain.
    add("batched-admit-evict.msgpack", batched_1(),
        normal("BatchedKVOperationMsg", instance_id=INST, worker_id=0, location=CPU, operations=ops1))

    # 2. The disk backend's sender; TP rank 1; seq_num continues (per sender, per op).
    add("batched-disk.msgpack",
        BatchedKVOperationMsg(instance_id=INST, worker_id=1, location=DISK, operations=[
            KVOpEvent(op_type=OpType.ADMIT, key=K_I64, seq_num=41)]),
        normal("BatchedKVOperationMsg", instance_id=INST, worker_id=1, location=DISK,
               operations=[("admit", K_I64, 41)]))

    # 3. Registration (DEALER -> ROUTER; reply RegisterRetMsg).
    add("register.msgpack",
        RegisterMsg(instance_id=INST, worker_id=0, ip=IP, port=PORT, peer_init_url=None),
        normal("RegisterMsg", instance_id=INST, worker_id=0, ip=IP, port=PORT))

    # 4. Deregistration (PUSH).
    add("deregister.msgpack",
        DeRegisterMsg(instance_id=INST, worker_id=0, ip=IP, port=PORT),
        normal("DeRegisterMsg", instance_id=INST, worker_id=0, ip=IP, port=PORT))

    # 5. Heartbeat (heartbeat DEALER; reply HeartbeatRetMsg).
    add("heartbeat.msgpack",
        HeartbeatMsg(instance_id=INST, worker_id=0, ip=IP, port=PORT, peer_init_url=None),
        normal("HeartbeatMsg", instance_id=INST, worker_id=0, ip=IP, port=PORT))

    # 6. Legacy single-op messages: still in the Msg union, sent by no 0.5.6 code
    #    (the 0.3.9 era sent one per chunk, without seq_num).
    add("kv-admit-legacy.msgpack",
        KVAdmitMsg(instance_id=INST, worker_id=0, key=K_BIG, location=CPU, seq_num=7),
        normal("KVAdmitMsg", instance_id=INST, worker_id=0, location=CPU,
               operations=[("admit", K_BIG, 7)]))
    add("kv-evict-legacy.msgpack",
        KVEvictMsg(instance_id=INST, worker_id=0, key=K_NEG, location=CPU),
        normal("KVEvictMsg", instance_id=INST, worker_id=0, location=CPU,
               operations=[("evict", K_NEG, 0)]))

    # 7. Full sync batch (PUSH), after a FullSyncCommand: keys as fixint, negative fixint, uint64.
    keys7 = [1, -2, 18446744073709551615]
    add("full-sync-batch.msgpack",
        FullSyncBatchMsg(instance_id=INST, worker_id=0, location=CPU, sync_id="s1",
                         batch_id=0, keys=keys7),
        normal("FullSyncBatchMsg", instance_id=INST, worker_id=0, location=CPU, keys=keys7))

    # 8. A real worker message a controller consumer may not handle (P2P lookup, DEALER).
    add("unknown-type.msgpack",
        BatchedP2PLookupMsg(hashes=[K_BIG, K_NEG, 7], instance_id=INST, worker_id=0),
        normal("BatchedP2PLookupMsg"))

    # 9. Fixture 1 as JSON (external senders; the controller accepts frames starting with '{').
    add("batched-admit-evict.json", batched_1(),
        normal("BatchedKVOperationMsg", instance_id=INST, worker_id=0, location=CPU, operations=ops1),
        as_json=True)

    # Replies (controller ROUTER -> worker DEALER), always msgpack; listed in replies.json.
    # R1. RegisterMsg -> RegisterRetMsg when the controller has no heartbeat socket: the
    #     controller always passes its extra_config dict, here empty.
    add_reply("reply-register.msgpack", RegisterRetMsg(extra_config={}),
              {"type": "RegisterRetMsg", "extra_config": {}})
    # R2. ... and when it has one: the worker then opens its heartbeat DEALER to this URL.
    add_reply("reply-register-heartbeat.msgpack",
              RegisterRetMsg(extra_config={"heartbeat_url": HB_URL}),
              {"type": "RegisterRetMsg", "extra_config": {"heartbeat_url": HB_URL}})
    # R3. HeartbeatMsg -> HeartbeatRetMsg with no commands (the usual case).
    add_reply("reply-heartbeat.msgpack", HeartbeatRetMsg(commands=[]),
              {"type": "HeartbeatRetMsg", "commands": []})
    # R4. ErrorMsg, sent for a request the controller cannot handle.
    add_reply("reply-error.msgpack", ErrorMsg(error="unknown request"),
              {"type": "ErrorMsg", "error": "unknown request"})


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


def fs(s: str) -> bytes:
    """Hand-built msgpack fixstr (independent of msgspec)."""
    b = s.encode()
    assert len(b) < 32
    return bytes([0xA0 | len(b)]) + b


def check_exact_examples() -> None:
    head = fs("instance_id") + fs(INST) + fs("worker_id") + b"\x00"
    cpu = fs("location") + fs(CPU)

    # Fixture 1: the 162-byte two-op example of the notes, with a third op appended.
    op_admit_big = b"\x83" + fs("op_type") + fs("admit") + fs("key") + bytes.fromhex("cfab54a98ceb1f0ad2") + fs("seq_num") + b"\x00"
    op_evict_neg = b"\x83" + fs("op_type") + fs("evict") + fs("key") + b"\xd0\xd6" + fs("seq_num") + b"\x01"
    op_admit_7 = b"\x83" + fs("op_type") + fs("admit") + fs("key") + b"\x07" + fs("seq_num") + b"\x02"
    ex1 = (b"\x85" + fs("type") + fs("BatchedKVOperationMsg") + head + cpu + fs("operations")
           + b"\x93" + op_admit_big + op_evict_neg + op_admit_7)
    got = FIXTURES["batched-admit-evict.msgpack"]["bytes"]
    assert got.startswith(bytes.fromhex("85a474797065b5")), got.hex()
    assert got == ex1, f"batched-admit-evict: {got.hex()} != {ex1.hex()}"
    assert len(got) == 162 + 29, len(got)  # the notes' 162 B + a 29-byte third op

    # Fixture 2: int64 key (d3) in a fixmap op.
    got = FIXTURES["batched-disk.msgpack"]["bytes"]
    assert got.startswith(bytes.fromhex("85a474797065b5")), got.hex()
    assert b"\xa3key\xd3" + K_I64.to_bytes(8, "big", signed=True) + b"\xa7seq_num\x29" in got, got.hex()
    assert b"\xa8location\xb0LocalDiskBackend" in got and b"\xa9worker_id\x01" in got

    # Register / heartbeat / deregister: exact bytes.
    tail = fs("ip") + fs(IP) + fs("port") + b"\xcd\x1f\x41"
    ex_reg = b"\x86" + fs("type") + fs("RegisterMsg") + head + tail + fs("peer_init_url") + b"\xc0"
    assert FIXTURES["register.msgpack"]["bytes"] == ex_reg and len(ex_reg) == 83
    ex_hb = b"\x86" + fs("type") + fs("HeartbeatMsg") + head + tail + fs("peer_init_url") + b"\xc0"
    assert FIXTURES["heartbeat.msgpack"]["bytes"] == ex_hb and len(ex_hb) == 84
    ex_dereg = b"\x85" + fs("type") + fs("DeRegisterMsg") + head + tail
    assert FIXTURES["deregister.msgpack"]["bytes"] == ex_dereg and len(ex_dereg) == 70

    # Legacy single ops: the notes' 94- and 87-byte examples (seq_num written though default).
    ex_adm = (b"\x86" + fs("type") + fs("KVAdmitMsg") + head + fs("key")
              + bytes.fromhex("cfab54a98ceb1f0ad2") + cpu + fs("seq_num") + b"\x07")
    assert FIXTURES["kv-admit-legacy.msgpack"]["bytes"] == ex_adm and len(ex_adm) == 94
    ex_ev = b"\x86" + fs("type") + fs("KVEvictMsg") + head + fs("key") + b"\xd0\xd6" + cpu + fs("seq_num") + b"\x00"
    assert FIXTURES["kv-evict-legacy.msgpack"]["bytes"] == ex_ev and len(ex_ev) == 87

    # Full sync: keys [fixint 1, negative fixint -2 (fe), uint64 max].
    got = FIXTURES["full-sync-batch.msgpack"]["bytes"]
    assert got.startswith(b"\x87" + fs("type") + fs("FullSyncBatchMsg")), got.hex()
    assert got.endswith(fs("sync_id") + fs("s1") + fs("batch_id") + b"\x00" + fs("keys")
                        + b"\x93\x01\xfe\xcf" + b"\xff" * 8), got.hex()

    # Unknown type: tag first, then the P2P fields (hashes first, as upstream declares).
    got = FIXTURES["unknown-type.msgpack"]["bytes"]
    assert got.startswith(b"\x84" + fs("type") + b"\xb3BatchedP2PLookupMsg" + fs("hashes") + b"\x93\xcf"), got.hex()

    # JSON: compact, tag first, big ints as plain numbers, enum by value.
    js = FIXTURES["batched-admit-evict.json"]["bytes"]
    ex_js = (b'{"type":"BatchedKVOperationMsg","instance_id":"vllm-0","worker_id":0,'
             b'"location":"LocalCPUBackend","operations":['
             b'{"op_type":"admit","key":12345678901234567890,"seq_num":0},'
             b'{"op_type":"evict","key":-42,"seq_num":1},'
             b'{"op_type":"admit","key":7,"seq_num":2}]}')
    assert js == ex_js, js

    assert u64(-1) == U64 and u64(K_NEG) == 18446744073709551574
    assert u64(K_I64) == 11935560355841176934

    # Replies: fixmap 2, the tag, then the one field, written even when empty (no omit_defaults).
    ex_rr = b"\x82" + fs("type") + fs("RegisterRetMsg") + fs("extra_config") + b"\x80"
    assert REPLIES["reply-register.msgpack"]["bytes"] == ex_rr and len(ex_rr) == 35
    ex_rrh = (b"\x82" + fs("type") + fs("RegisterRetMsg") + fs("extra_config")
              + b"\x81" + fs("heartbeat_url") + fs(HB_URL))
    assert REPLIES["reply-register-heartbeat.msgpack"]["bytes"] == ex_rrh and len(ex_rrh) == 64
    ex_hr = b"\x82" + fs("type") + fs("HeartbeatRetMsg") + fs("commands") + b"\x90"
    assert REPLIES["reply-heartbeat.msgpack"]["bytes"] == ex_hr and len(ex_hr) == 32
    ex_err = b"\x82" + fs("type") + fs("ErrorMsg") + fs("error") + fs("unknown request")
    assert REPLIES["reply-error.msgpack"]["bytes"] == ex_err and len(ex_err) == 37
    # The defaults encode the same as the explicit empty values.
    assert msgspec.msgpack.encode(RegisterRetMsg()) == ex_rr
    assert msgspec.msgpack.encode(HeartbeatRetMsg()) == ex_hr
    # A decoder fills in a missing field with its default (the tag alone is a valid reply).
    assert msgspec.msgpack.decode(b"\x81" + fs("type") + fs("RegisterRetMsg"), type=ReplyMsg) == RegisterRetMsg()
    assert msgspec.msgpack.decode(b"\x81" + fs("type") + fs("HeartbeatRetMsg"), type=ReplyMsg) == HeartbeatRetMsg()
    # Not written to a file: a heartbeat reply carrying a command (what the controller sends
    # after re-registering a worker). Each command is a map tagged "command_type" first,
    # then reason and args (both written, also when None).
    ex_cmd = (b"\x82" + fs("type") + fs("HeartbeatRetMsg") + fs("commands") + b"\x91\x83"
              + fs("command_type") + fs("full_sync") + fs("reason") + fs("worker_re_registered")
              + fs("args") + b"\xc0")
    assert msgspec.msgpack.encode(command_reply()) == ex_cmd
    assert msgspec.msgpack.decode(ex_cmd, type=ReplyMsg) == command_reply()


def type_str(t: Any) -> str:
    """A field type as text, without module prefixes (ours are __main__, upstream's lmcache.*)."""
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", repr(t))


def class_shape(cls: type) -> tuple:
    """What of a copied class affects the wire: bases, struct options, fields (enum: members)."""
    if issubclass(cls, enum.Enum):
        return tuple((e.name, e.value) for e in cls)
    cfg = cls.__struct_config__
    opts = tuple((a, getattr(cfg, a)) for a in sorted(dir(cfg)) if not a.startswith("_"))
    fields = tuple((f.name, f.encode_name, type_str(f.type), repr(f.default), f.default_factory)
                   for f in msgspec.structs.fields(cls))
    return tuple(b.__name__ for b in cls.__mro__), opts, fields


def union_names(u: Any) -> list[str]:
    return [c.__name__ for c in u.__args__]


def check_upstream() -> None:
    """Optional: encode with the real message.py from an unpacked lmcache 0.5.6 wheel."""
    root = os.environ.get("LMCACHE_WHEEL_DIR")
    if not root:
        return
    base = Path(root) / "lmcache" / "v1" / "cache_controller"
    saved = {k: v for k, v in sys.modules.items() if k == "lmcache" or k.startswith("lmcache.")}
    try:
        for name in ["lmcache", "lmcache.v1", "lmcache.v1.cache_controller",
                     "lmcache.v1.cache_controller.commands"]:
            m = types.ModuleType(name)
            m.__path__ = []
            sys.modules[name] = m
        lg = types.ModuleType("lmcache.logging")
        lg.init_logger = logging.getLogger
        sys.modules["lmcache.logging"] = lg

        def load(modname: str, path: Path) -> types.ModuleType:
            spec = importlib.util.spec_from_file_location(modname, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            spec.loader.exec_module(mod)
            return mod

        load("lmcache.v1.cache_controller.commands.base", base / "commands" / "base.py")
        load("lmcache.v1.cache_controller.commands.full_sync", base / "commands" / "full_sync.py")
        up = load("lmcache.v1.cache_controller.message", base / "message.py")
        ver = (Path(root) / "lmcache" / "_version.py").read_text()
        assert f"'{LMCACHE_VERSION}'" in ver, "not lmcache " + LMCACHE_VERSION
        for name, fx in FIXTURES.items():
            m = fx["msg"]
            fields = msgspec.structs.asdict(m)
            if "operations" in fields:
                fields["operations"] = [
                    up.KVOpEvent(op_type=up.OpType(e.op_type.value), key=e.key, seq_num=e.seq_num)
                    for e in fields["operations"]]
            um = getattr(up, type(m).__name__)(**fields)
            enc = msgspec.json.encode if fx["json"] else msgspec.msgpack.encode
            assert enc(um) == fx["bytes"], f"{name}: upstream encodes differently"
            # and upstream's own decoder (full Msg union) reads our bytes back to the same struct
            if fx["json"]:
                back = msgspec.convert(json.loads(fx["bytes"]), type=up.Msg)
            else:
                back = msgspec.msgpack.decode(fx["bytes"], type=up.Msg)
            assert back == um, name

        def up_reply(m: msgspec.Struct) -> msgspec.Struct:
            fields = msgspec.structs.asdict(m)
            if "commands" in fields:
                fields["commands"] = [getattr(up, type(c).__name__)(**msgspec.structs.asdict(c))
                                      for c in fields["commands"]]
            return getattr(up, type(m).__name__)(**fields)

        for name, m, raw in ([(n, r["msg"], r["bytes"]) for n, r in REPLIES.items()]
                             + [("(command reply)", command_reply(),
                                 msgspec.msgpack.encode(command_reply()))]):
            um = up_reply(m)
            assert msgspec.msgpack.encode(um) == raw, f"{name}: upstream encodes differently"
            assert msgspec.msgpack.decode(raw, type=up.Msg) == um, name  # what the worker does

        # Every copied class (also those without a fixture) matches upstream's definition ...
        copied = [v for v in globals().values() if isinstance(v, type) and v.__module__ == __name__
                  and (issubclass(v, msgspec.Struct) or issubclass(v, enum.Enum))]
        for cls in copied:
            assert class_shape(cls) == class_shape(getattr(up, cls.__name__)), cls.__name__
        # ... and the two unions hold exactly upstream's worker-side and reply members.
        up_members = up.Msg.__args__
        assert sorted(union_names(WorkerSideMsg)) == sorted(
            c.__name__ for c in up_members if issubclass(c, (up.WorkerMsg, up.WorkerReqMsg)))
        assert sorted(union_names(ReplyMsg)) == sorted(
            c.__name__ for c in up_members if issubclass(c, up.WorkerReqRetMsg))
        assert union_names(AnyCommand) == union_names(up.AnyCommand)
        print(f"upstream check: {len(FIXTURES)} fixtures and {len(REPLIES)} replies byte-identical, "
              f"{len(copied)} classes identical with {base / 'message.py'}")
    finally:
        for k in [k for k in sys.modules if k == "lmcache" or k.startswith("lmcache.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def summary(raw: bytes, is_json: bool) -> str:
    obj = json.loads(raw) if is_json else msgspec.msgpack.decode(raw)
    extra = ""
    if "operations" in obj:
        extra = f", {len(obj['operations'])} ops"
    elif "keys" in obj:
        extra = f", {len(obj['keys'])} keys"
    elif "commands" in obj:
        extra = f", {len(obj['commands'])} commands"
    kind = "json" if is_json else "msgpack"
    return f"{len(raw):4d} B  {kind} map{{{len(obj)}}} {obj['type']}{extra}"


def dump_expected(expected: dict) -> str:
    """JSON with one line per file (plain json, laid out for reading)."""
    lines = [f"  {json.dumps(name)}: {json.dumps(exp)}" for name, exp in expected.items()]
    text = "{\n" + ",\n".join(lines) + "\n}\n"
    assert json.loads(text) == expected
    return text


def main() -> int:
    if msgspec.__version__ != MSGSPEC_VERSION:
        print(f"warning: msgspec {msgspec.__version__}, fixtures were made with {MSGSPEC_VERSION}",
              file=sys.stderr)
    build()
    check_exact_examples()
    check_upstream()

    expected = {}
    for name, fx in FIXTURES.items():
        (OUT / name).write_bytes(fx["bytes"])
        expected[name] = fx["expected"]
    (OUT / "expected.json").write_text(dump_expected(expected))

    # Self-check: decode every written file back, generically and typed.
    loaded = json.loads((OUT / "expected.json").read_text())
    assert list(loaded) == list(FIXTURES)
    typed_mp = msgspec.msgpack.Decoder(type=WorkerSideMsg)
    for name, fx in FIXTURES.items():
        raw = (OUT / name).read_bytes()
        if fx["json"]:
            assert raw[:1] == b"{"
            generic = json.loads(raw)
            typed = msgspec.convert(generic, type=WorkerSideMsg)  # what the controller does
            assert msgspec.json.decode(raw, type=WorkerSideMsg) == typed, name
        else:
            generic = msgspec.msgpack.decode(raw)
            typed = typed_mp.decode(raw)
        ref = reference_read(generic)
        assert ref == loaded[name], f"{name}: reference reader {ref} != expected {loaded[name]}"
        assert typed == fx["msg"], f"{name}: typed decode {typed!r} != {fx['msg']!r}"
        assert norm_struct(typed) == loaded[name], f"{name}: typed {norm_struct(typed)}"
        # the tag comes first in every frame
        assert next(iter(generic)) == "type", name
        print(f"{name:33s} {summary(raw, fx['json'])}  sha256 {hashlib.sha256(raw).hexdigest()[:16]}")

    # Replies: replies.json, then decode every reply file back, generically and typed.
    assert not set(REPLIES) & set(FIXTURES)
    replies = {}
    for name, rp in REPLIES.items():
        (OUT / name).write_bytes(rp["bytes"])
        replies[name] = rp["plain"]
    (OUT / "replies.json").write_text(dump_expected(replies))

    loaded_r = json.loads((OUT / "replies.json").read_text())
    assert list(loaded_r) == list(REPLIES) and not set(loaded_r) & set(loaded)
    typed_rp = msgspec.msgpack.Decoder(type=ReplyMsg)
    for name, rp in REPLIES.items():
        raw = (OUT / name).read_bytes()
        generic = msgspec.msgpack.decode(raw)
        # same content and the same key order (tag first, then the fields as declared)
        assert generic == loaded_r[name] and list(generic) == list(loaded_r[name]), name
        typed = typed_rp.decode(raw)  # what the worker does (with the full Msg union)
        assert typed == rp["msg"], f"{name}: typed decode {typed!r} != {rp['msg']!r}"
        assert msgspec.to_builtins(typed) == loaded_r[name], name
        # a reply is not a worker message: the worker-side decoder rejects its tag
        try:
            typed_mp.decode(raw)
        except msgspec.ValidationError:
            pass
        else:
            raise AssertionError(f"{name} decodes as a worker message")
        print(f"{name:33s} {summary(raw, False)}  sha256 {hashlib.sha256(raw).hexdigest()[:16]}")
    print(f"ok: {len(FIXTURES)} fixtures + expected.json, {len(REPLIES)} replies + replies.json "
          f"in {OUT} (msgspec {msgspec.__version__}, LMCache {LMCACHE_VERSION} message classes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

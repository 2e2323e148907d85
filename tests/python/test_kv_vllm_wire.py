"""KV-cache events on vLLM's exact wire: real libzmq (pyzmq) sockets and msgspec-encoded
batches from structs shaped like vLLM's (`vllm/distributed/kv_events.py`), published the way
vLLM's ZmqEventPublisher does (PUB frames [topic, seq u64 BE, payload]; a ROUTER answering
replay requests with [identity, "", topic, seq, payload] and an end marker), consumed by
`ferrogate serve`'s sidecar, and steering `precise_cache_aware` over two `ferrogate sim`
engines (which answer the HTTP requests; their own caches play no part here).
"""

from __future__ import annotations

import collections
import json
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path

import httpx
import msgspec
import pytest
import zmq

from conftest import STARTUP_TIMEOUT_S, Proc, _bin, _free_port, _wait_until


# vLLM's current structs: the batch a positional array, events tagged maps.
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list | None = None
    group_idx: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


# An older vLLM (v0.11 shape): events as tagged positional arrays.
class OldEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class OldBlockStored(OldEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


END_SEQ = (-1).to_bytes(8, "big", signed=True)


class Publisher:
    """vLLM's publisher: numbered batches on a PUB socket, the last ones kept for replay."""

    def __init__(self, ctx: zmq.Context):
        self.pub = ctx.socket(zmq.PUB)
        self.pub_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.router = ctx.socket(zmq.ROUTER)
        self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.encoder = msgspec.msgpack.Encoder()
        self.buffer: collections.deque = collections.deque(maxlen=10_000)
        self.seq = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve_replay, daemon=True)
        self.thread.start()

    def publish(self, events: list, *, drop: bool = False) -> int:
        """Sends one batch (or, with `drop`, only keeps it for replay: a message lost at the
        high-water mark); returns its number."""
        payload = self.encoder.encode(EventBatch(ts=time.time(), events=events, data_parallel_rank=0))
        with self.lock:
            seq = self.seq
            self.seq += 1
            self.buffer.append((seq, payload))
            if not drop:
                self.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        return seq

    def _serve_replay(self) -> None:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while not self.stop.is_set():
            if not poller.poll(100):
                continue
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            identity, _, start = frames
            start = int.from_bytes(start, "big")
            with self.lock:
                batches = [(s, p) for s, p in self.buffer if s >= start]
            for s, p in batches:
                self.router.send_multipart([identity, b"", b"", s.to_bytes(8, "big"), p])
            self.router.send_multipart([identity, b"", b"", END_SEQ, b""])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.pub.close(linger=0)
        self.router.close(linger=0)


@pytest.fixture(scope="module")
def fleet():
    ctx = zmq.Context()
    publishers = [Publisher(ctx), Publisher(ctx)]
    workdir = Path(tempfile.mkdtemp(prefix="ferrogate-kv-wire-"))
    binary = str(_bin())
    sim_ports = [_free_port(), _free_port()]
    gw_port, admin_port, side_port = _free_port(), _free_port(), _free_port()
    token = secrets.token_hex(16)
    endpoints = [
        {"address": f"127.0.0.1:{port}", "kv_events": f"tcp://127.0.0.1:{p.pub_port}",
         "kv_replay": f"tcp://127.0.0.1:{p.replay_port}"}
        for port, p in zip(sim_ports, publishers)
    ]
    config = {
        "providers": [{"name": "pool", "kind": "openai_compatible", "base_url": f"http://127.0.0.1:{sim_ports[0]}",
                       "kv_block_size": 16, "endpoints": endpoints}],
        "models": [{"name": "chat", "strategy": "precise_cache_aware",
                    "targets": [{"provider": "pool", "model": "sim-small"}]}],
    }
    (workdir / "kv.json").write_text(json.dumps(config))
    env = dict(os.environ, FERROGATE_ADMIN_TOKEN=token, NO_COLOR="1")
    env.pop("FERROGATE_INTERNAL_TOKEN", None)
    procs = [Proc(f"sim{i}", [binary, "sim", "--listen", f"127.0.0.1:{port}"], workdir / f"sim{i}.log", env)
             for i, port in enumerate(sim_ports)]
    argv = [binary, "serve", "--config", str(workdir / "kv.json"), "--listen", f"127.0.0.1:{gw_port}",
            "--admin-listen", f"127.0.0.1:{admin_port}", "--sidecar-listen", f"127.0.0.1:{side_port}"]
    if os.environ.get("FERROGATE_FILTER_WASM"):
        argv += ["--filter", os.environ["FERROGATE_FILTER_WASM"]]
    procs.append(Proc("serve", argv, workdir / "serve.log", env))
    admin = httpx.Client(base_url=f"http://127.0.0.1:{admin_port}", headers={"authorization": f"Bearer {token}"})

    def kv() -> list[dict]:
        return admin.get("/api/v1/kv").json()["providers"][0]["endpoints"]

    try:
        _wait_until("both event streams connected", procs, lambda: all(e["connected"] for e in kv()),
                    STARTUP_TIMEOUT_S)
        yield {"publishers": publishers, "sims": sim_ports, "gateway": f"http://127.0.0.1:{gw_port}", "kv": kv}
    finally:
        admin.close()
        for p in procs:
            p.stop()
        for p in publishers:
            p.close()
        ctx.term()


def until(what: str, check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def chat(prompt: str) -> dict:
    return {"model": "sim-small", "messages": [{"role": "user", "content": prompt}], "max_tokens": 2}


def token_ids(sim_port: int, prompt: str) -> list[int]:
    return httpx.post(f"http://127.0.0.1:{sim_port}/tokenize", json=chat(prompt)).json()["tokens"]


def stored(tokens: list[int], first_hash: int, old: bool = False):
    blocks = len(tokens) // 16
    args = dict(block_hashes=list(range(first_hash, first_hash + blocks)), parent_block_hash=None,
                token_ids=tokens[: blocks * 16], block_size=16, lora_id=None, medium="GPU")
    return OldBlockStored(**args) if old else BlockStored(lora_name=None, **args)


def routed_to(fleet, prompt: str, ids: list[int]) -> int:
    body = dict(chat(prompt), model="chat")
    r = httpx.post(f"{fleet['gateway']}/v1/chat/completions", json=body,
                   headers={"x-ferrogate-token-ids": ",".join(map(str, ids))})
    assert r.status_code == 200, r.text
    return fleet["sims"].index(int(r.headers["x-sim-endpoint"].rsplit(":", 1)[1]))


def test_both_vllm_encodings_over_real_zmq_steer_routing(fleet):
    pubs = fleet["publishers"]
    for engine, old in ((1, True), (0, False)):
        prompt = " ".join(f"p{engine}w{i}" for i in range(70))
        ids = token_ids(fleet["sims"][0], prompt)
        pubs[engine].publish([stored(ids, 1000 * (engine + 1), old=old)])
        until(f"engine {engine}'s blocks indexed", lambda: fleet["kv"]()[engine]["blocks"] >= len(ids) // 16)
        until(f"the prompt routed to engine {engine}", lambda: routed_to(fleet, prompt, ids) == engine)


def test_a_lost_batch_is_replayed_and_removals_apply(fleet):
    pub = fleet["publishers"][0]
    before = fleet["kv"]()[0]
    lost = " ".join(f"lost{i}" for i in range(70))
    ids = token_ids(fleet["sims"][0], lost)
    pub.publish([stored(ids, 5000)], drop=True)
    pub.publish([BlockRemoved(block_hashes=[1000], medium="GPU")])
    after = until("the gap replayed", lambda: (e := fleet["kv"]()[0])["gaps"] > before["gaps"] and
                  e["blocks"] == before["blocks"] + len(ids) // 16 - 1 and e)
    assert after["replays"] > before["replays"], after
    until("the replayed prompt routed to engine 0", lambda: routed_to(fleet, lost, ids) == 0)

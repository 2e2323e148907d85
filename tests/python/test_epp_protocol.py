"""The endpoint picker (`ferrogate serve --epp-listen`) against a gateway's ext_proc client
built from Envoy's own protos (PyPI `xds-protos`, generated from envoyproxy/envoy's `api/`)
over grpcio: the Gateway API Inference Extension's protocol in BUFFERED, STREAMED and
FULL_DUPLEX_STREAMED body modes. The pool is two `ferrogate sim` engines whose KV-cache events
come over real ZMQ sockets in vLLM's encoding (the publishers of test_kv_vllm_wire.py), routed
by `precise_cache_aware` with `kv_tokenize`: the picker tokenizes through an engine's
`/tokenize` and sends a warmed prefix to the engine holding it.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import secrets
import tempfile
from pathlib import Path

import grpc
import httpx
import pytest
import zmq
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from google.protobuf import struct_pb2

from conftest import STARTUP_TIMEOUT_S, Proc, _bin, _free_port, _wait_until
from test_kv_vllm_wire import Publisher, chat, stored, until

ENDPOINT = "x-gateway-destination-endpoint"
STREAMED, BUFFERED, FULL_DUPLEX = 1, 2, 4
TIMEOUT_S = 60
BLOCK_IDS = itertools.count(100_000, 1_000)


@pytest.fixture(scope="module")
def picker():
    ctx = zmq.Context()
    publishers = [Publisher(ctx), Publisher(ctx)]
    workdir = Path(tempfile.mkdtemp(prefix="ferrogate-epp-"))
    binary = str(_bin())
    sims = [_free_port(), _free_port()]
    gw, admin_port, side, epp = _free_port(), _free_port(), _free_port(), _free_port()
    token = secrets.token_hex(16)
    # One loopback IP per engine: a gateway's subset names pods by IP.
    hosts = [f"127.0.0.{i + 2}:{port}" for i, port in enumerate(sims)]
    endpoints = [{"address": host, "kv_events": f"tcp://127.0.0.1:{p.pub_port}",
                  "kv_replay": f"tcp://127.0.0.1:{p.replay_port}"} for host, p in zip(hosts, publishers)]
    config = {
        "providers": [{"name": "pool", "kind": "openai_compatible", "base_url": f"http://{hosts[0]}",
                       "kv_block_size": 16, "kv_tokenize": True, "endpoints": endpoints}],
        "models": [{"name": "chat", "strategy": "precise_cache_aware",
                    "targets": [{"provider": "pool", "model": "sim-small"}]}],
    }
    (workdir / "epp.json").write_text(json.dumps(config))
    env = dict(os.environ, FERROGATE_ADMIN_TOKEN=token, NO_COLOR="1")
    env.pop("FERROGATE_INTERNAL_TOKEN", None)
    procs = [Proc(f"sim{i}", [binary, "sim", "--listen", host], workdir / f"sim{i}.log", env)
             for i, host in enumerate(hosts)]
    argv = [binary, "serve", "--config", str(workdir / "epp.json"), "--listen", f"127.0.0.1:{gw}",
            "--admin-listen", f"127.0.0.1:{admin_port}", "--sidecar-listen", f"127.0.0.1:{side}",
            "--epp-listen", f"127.0.0.1:{epp}", "--epp-fallbacks", "1"]
    if os.environ.get("FERROGATE_FILTER_WASM"):
        argv += ["--filter", os.environ["FERROGATE_FILTER_WASM"]]
    procs.append(Proc("serve", argv, workdir / "serve.log", env))
    admin = httpx.Client(base_url=f"http://127.0.0.1:{admin_port}", headers={"authorization": f"Bearer {token}"})
    channel = grpc.insecure_channel(f"127.0.0.1:{epp}")

    def kv() -> list[dict]:
        return admin.get("/api/v1/kv").json()["providers"][0]["endpoints"]

    try:
        _wait_until("both event streams connected", procs, lambda: all(e["connected"] for e in kv()),
                    STARTUP_TIMEOUT_S)
        grpc.channel_ready_future(channel).result(timeout=STARTUP_TIMEOUT_S)
        yield {"stub": ext_grpc.ExternalProcessorStub(channel), "publishers": publishers, "kv": kv,
               "engines": hosts}
    finally:
        channel.close()
        admin.close()
        for p in procs:
            p.stop()
        for p in publishers:
            p.close()
        ctx.term()


class Stream:
    """One ext_proc stream, as a gateway drives it: messages in, replies read one by one."""

    def __init__(self, stub):
        self.outbox: queue.Queue = queue.Queue()
        self.replies = stub.Process(iter(self.outbox.get, None), timeout=TIMEOUT_S)

    def send(self, **message) -> None:
        self.outbox.put(ext.ProcessingRequest(**message))

    def next(self) -> ext.ProcessingResponse:
        return next(self.replies)

    def close(self) -> None:
        self.outbox.put(None)


def headers_message(body_len: int, mode: int, *, without_waiting: bool = False, subset: list[str] | None = None):
    pairs = [(":method", "POST"), (":path", "/v1/chat/completions"), (":authority", "gateway.example"),
             (":scheme", "http"), ("content-type", "application/json"), ("content-length", str(body_len))]
    headers = ext.HttpHeaders(headers=base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs]))
    message = {
        "request_headers": headers,
        "protocol_config": ext.ProtocolConfiguration(
            request_body_mode=mode, response_body_mode=mode,
            send_body_without_waiting_for_header_response=without_waiting),
    }
    if subset is not None:
        hint = struct_pb2.Struct()
        hint.update({"x-gateway-destination-endpoint-subset": subset})
        message["metadata_context"] = base_pb2.Metadata(filter_metadata={"envoy.lb.subset_hint": hint})
    return message


def the_pick(reply: ext.ProcessingResponse, common) -> list[str]:
    """The pick as the protocol carries it: a `raw_value` header and `envoy.lb` metadata,
    identical; the route cache cleared."""
    header = [h.header.raw_value.decode() for h in common.header_mutation.set_headers if h.header.key == ENDPOINT]
    assert len(header) == 1, common
    lb = reply.dynamic_metadata.fields["envoy.lb"].struct_value
    assert lb.fields[ENDPOINT].string_value == header[0], reply
    assert common.clear_route_cache
    return header[0].split(",")


def route(fleet, prompt: str, mode: int, subset: list[str] | None = None) -> list[str]:
    """One request through the picker in `mode`; its endpoint list (pick first)."""
    body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": 2}).encode()
    s = Stream(fleet["stub"])
    try:
        s.send(**headers_message(len(body), mode, without_waiting=mode == STREAMED, subset=subset))
        if mode == BUFFERED:
            first = s.next()
            assert first.WhichOneof("response") == "request_headers", first
            s.send(request_body=ext.HttpBody(body=body, end_of_stream=True))
            reply = s.next()
            assert reply.WhichOneof("response") == "request_body", reply
            return the_pick(reply, reply.request_body.response)
        half = len(body) // 2
        s.send(request_body=ext.HttpBody(body=body[:half]))
        s.send(request_body=ext.HttpBody(body=body[half:], end_of_stream=True))
        reply = s.next()
        assert reply.WhichOneof("response") == "request_headers", reply
        picked = the_pick(reply, reply.request_headers.response)
        if mode == STREAMED:  # one reply per chunk, in order
            for _ in range(2):
                assert s.next().WhichOneof("response") == "request_body"
        else:  # FULL_DUPLEX: the body streamed back, its last chunk ending the stream
            while not s.next().request_body.response.body_mutation.streamed_response.end_of_stream:
                pass
        return picked
    finally:
        s.close()


def token_ids(engine: str, prompt: str) -> list[int]:
    return httpx.post(f"http://{engine}/tokenize", json=chat(prompt)).json()["tokens"]


def warm(fleet, engine: int, tag: str) -> str:
    prompt = " ".join(f"{tag}w{i}" for i in range(70))
    ids = token_ids(fleet["engines"][0], prompt)
    want = fleet["kv"]()[engine]["blocks"] + len(ids) // 16
    fleet["publishers"][engine].publish([stored(ids, next(BLOCK_IDS))])
    until(f"engine {engine}'s blocks indexed", lambda: fleet["kv"]()[engine]["blocks"] >= want)
    return prompt


@pytest.mark.parametrize("mode", [BUFFERED, STREAMED, FULL_DUPLEX], ids=["buffered", "streamed", "full_duplex"])
def test_a_warmed_prefix_goes_to_its_holder_every_time(picker, mode):
    for engine in (0, 1):
        prompt = warm(picker, engine, f"m{mode}e{engine}")
        # Each worker's filter VM follows the sidecar's index within a poll; streams go to the
        # workers in turn, so once a run of picks (every VM, twice) reached the holder, every
        # later one must.
        holder = picker["engines"][engine]
        until(f"the prefix routed to engine {engine} by every VM",
              lambda: all(route(picker, prompt, mode)[0] == holder for _ in range(4)))
        for _ in range(5):
            picked = route(picker, prompt, mode)
            assert picked[0] == picker["engines"][engine], picked
            assert picked[1:] == [picker["engines"][1 - engine]], f"the other engine as the fallback: {picked}"


def test_the_subset_hint_overrides_the_cache(picker):
    prompt = warm(picker, 0, "subset")
    other = picker["engines"][1]
    until("the prefix routed to engine 0 by every VM",
          lambda: all(route(picker, prompt, FULL_DUPLEX)[0] == picker["engines"][0] for _ in range(4)))
    assert route(picker, prompt, FULL_DUPLEX, subset=[other]) == [other]
    s = Stream(picker["stub"])
    body = b'{"model": "chat", "messages": [{"role": "user", "content": "x"}]}'
    s.send(**headers_message(len(body), FULL_DUPLEX, subset=[]))
    s.send(request_body=ext.HttpBody(body=body, end_of_stream=True))
    reply = s.next()
    s.close()
    assert reply.WhichOneof("response") == "immediate_response", reply
    assert reply.immediate_response.status.code == 503


def test_a_malformed_sequence_is_refused_not_left_hanging(picker):
    s = Stream(picker["stub"])
    s.send(request_body=ext.HttpBody(body=b"{}", end_of_stream=True))
    with pytest.raises(grpc.RpcError) as refused:
        s.next()
    s.close()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT

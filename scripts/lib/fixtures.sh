# Shared by scripts/bench and scripts/instructions (sourced): the bench key, the gateway's and
# the reference's configurations, and the static nginx upstream, so both measure the same thing.

# The full data path: a virtual key is checked, the model resolved and granted, usage
# tracked and recorded for every request.
KEY=fg-bench-0123456789abcdef
DIGEST=sha256:$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)

# write_configs <dir> <upstream port>: <dir>/ref-config.yaml and <dir>/config.yaml (gateway).
write_configs() {
  # The reference filter predates keys and pricing: an open config with the route alone ...
  cat >"$1/ref-config.yaml" <<YAML
providers:
  - { name: local, kind: openai_compatible, base_url: "http://127.0.0.1:$2" }
models:
  - name: chat
    targets: [{ provider: local, model: sim-small }]
YAML
  # ... and the gateway the same route with a key, its grant and prices.
  { cat "$1/ref-config.yaml"; cat <<YAML; } >"$1/config.yaml"
groups:
  - { name: bench, models: ["chat"] }
keys:
  - { name: bench, digest: "$DIGEST", groups: [bench] }
pricing:
  sim-small: { input_per_mtok: 0.1, output_per_mtok: 0.4 }
YAML
}

# start_nginx <dir> <port>: nginx in the background answering every request with a fixed chat
# completion (the upstream costs almost nothing, so the gateway's own cost shows).
start_nginx() {
  mkdir -p "$1/nginx"
  cat >"$1/nginx/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
pid $1/nginx/nginx.pid;
error_log $1/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $1/nginx;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$2;
    location / {
      default_type application/json;
      return 200 '{"id":"chatcmpl-static","object":"chat.completion","created":0,"model":"sim-small","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}';
    }
  }
}
NGINX
  nginx -c "$1/nginx/nginx.conf" -e "$1/nginx/error.log" &
}

#!/usr/bin/env bash
# Installs axe-core (tests/ui-audit/package-lock.json: axe-core 4.x, pinned) into
# tests/ui-audit/node_modules with `npm ci`, when it is missing or the lock file (or the Node
# version) changed since the last install (a stamp holds their hash). Used by
# tests/python/ui_browser.py, which runs axe.min.js in every page the browser tests visit; safe to
# run by hand and concurrently (a lock serializes runs of the tests started at once).
#
# Exit status: 0 when installed, 3 when node or npm is missing, npm's status otherwise.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "tests/ui-audit/install.sh: $tool is not installed; the dashboard's accessibility audit needs Node.js 18" \
      "or newer with npm (e.g. apt-get install nodejs npm)" >&2
    exit 3
  fi
done

exec 9>"${TMPDIR:-/tmp}/ferrogate-ui-audit-install-$(echo "$DIR" | sha256sum | cut -c1-16).lock"
flock 9 2>/dev/null || true

stamp="$DIR/node_modules/.ferrogate-stamp"
want="$( (cat "$DIR/package-lock.json"; node --version) | sha256sum | cut -d' ' -f1)"
if [[ -f "$DIR/node_modules/axe-core/axe.min.js" && "$(cat "$stamp" 2>/dev/null || true)" == "$want" ]]; then
  exit 0
fi
echo "tests/ui-audit/install.sh: npm ci in tests/ui-audit" >&2
(cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
echo "$want" >"$stamp"

#!/usr/bin/env bash
# Installs the test OpenID provider's packages (tests/oidc/package-lock.json: oidc-provider 8.x,
# pinned) into tests/oidc/node_modules with `npm ci`, when they are missing or the lock file
# (or the Node version) changed since the last install (a stamp holds their hash). Used by
# tests/python/test_admin_oidc.py; safe to run by hand and concurrently (a lock serializes).
#
# Exit status: 0 when installed, 3 when node or npm is missing, npm's status otherwise.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "tests/oidc/install.sh: $tool is not installed; the OIDC end-to-end test needs Node.js 18 or 20 with npm" \
      "(e.g. apt-get install nodejs npm)" >&2
    exit 3
  fi
done

exec 9>"${TMPDIR:-/tmp}/ferrogate-oidc-install-$(echo "$DIR" | sha256sum | cut -c1-16).lock"
flock 9 2>/dev/null || true

stamp="$DIR/node_modules/.ferrogate-stamp"
want="$( (cat "$DIR/package-lock.json"; node --version) | sha256sum | cut -d' ' -f1)"
if [[ -d "$DIR/node_modules/oidc-provider" && "$(cat "$stamp" 2>/dev/null || true)" == "$want" ]]; then
  exit 0
fi
echo "tests/oidc/install.sh: npm ci in tests/oidc" >&2
(cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
echo "$want" >"$stamp"

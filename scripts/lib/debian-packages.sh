# Sourced by the scripts that need Debian packages on the machine (scripts/test-tools,
# scripts/image-tools): installs those of the given packages that dpkg does not list, with
# apt-get (as root, or with sudo), updating the package lists once first. A second run is a
# no-op.
#
#   ensure_debian_packages WHO PACKAGE...   WHO prefixes the messages (the calling script)

ensure_debian_packages() {
  local who="$1"
  shift
  local missing=() pkg sudo=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  if ! command -v apt-get >/dev/null; then
    echo "$who: ${missing[*]} missing and no apt-get: install them with the system's package manager" >&2
    return 1
  fi
  if [[ "$(id -u)" != 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "$who: ${missing[*]} missing: installing them needs root (or sudo)" >&2
      return 1
    fi
    sudo=(sudo)
  fi
  echo "$who: installing ${missing[*]}" >&2
  # The package lists of a fresh machine may be empty or stale: update them once, then install.
  "${sudo[@]}" apt-get update -qq >&2 || { echo "$who: apt-get update failed: is the Debian mirror reachable?" >&2; return 1; }
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
    { echo "$who: apt-get install ${missing[*]} failed" >&2; return 1; }
}

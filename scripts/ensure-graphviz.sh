#!/usr/bin/env bash
# Make sure the Graphviz `dot` program is installed; install it with apt-get where we can.
set -euo pipefail
if command -v dot >/dev/null 2>&1; then
  exit 0
fi
echo "Graphviz 'dot' is missing: installing it (apt-get install graphviz)..."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && SUDO="sudo"
fi
if command -v apt-get >/dev/null 2>&1 && { [ -z "$SUDO" ] && [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends graphviz fonts-dejavu-core >/dev/null
fi
if ! command -v dot >/dev/null 2>&1; then
  cat >&2 <<'MSG'
Could not install Graphviz automatically. Install the `dot` program, then run make again:
  Debian/Ubuntu:  sudo apt-get install graphviz
  macOS:          brew install graphviz
  conda:          conda install -c conda-forge graphviz
MSG
  exit 1
fi
echo "Graphviz installed: $(dot -V 2>&1)"

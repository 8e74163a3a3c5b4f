#!/usr/bin/env bash
# Make sure a chromium for the browser tests (tests/browser: Voila pages and JupyterLab) is
# installed; install Debian's chromium with apt-get where we can. Playwright drives this system
# browser: never run `playwright install` (it downloads its own browser build). JupyterLab,
# Voila and playwright come from the venv (the `browser` extra); nothing else is needed.
set -euo pipefail
CHROMIUM="${WFKIT_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
echo "chromium is missing at $CHROMIUM: installing it (apt-get install chromium)..."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && SUDO="sudo"
fi
if command -v apt-get >/dev/null 2>&1 && { [ -z "$SUDO" ] && [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
if [ ! -x "$CHROMIUM" ]; then
  cat >&2 <<'MSG'
Could not install chromium automatically; the browser tests (tests/browser) need it.
Install it, then run make again:
  Debian/Ubuntu:  sudo apt-get install chromium
  elsewhere:      install Chromium and set WFKIT_CHROMIUM=/path/to/chromium
Outside CI the browser tests are skipped when no chromium is found; with CI=true they fail.
MSG
  if [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; then
    exit 1
  fi
  exit 0
fi
echo "chromium installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"

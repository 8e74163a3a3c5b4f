#!/usr/bin/env bash
# Make sure a PostgreSQL server answers on 127.0.0.1:5432 with trust auth for the tests
# (the conformance suite runs the engine tests on it). Start the installed cluster, or install
# Debian's postgresql with apt-get, or say clearly what to do.
set -euo pipefail
URL="${WFKIT_TEST_POSTGRES:-postgresql://postgres@127.0.0.1:5432/postgres}"
ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if command -v pg_isready >/dev/null 2>&1 && ready; then
  exit 0
fi
if [ -n "${WFKIT_TEST_POSTGRES:-}" ]; then
  exit 0  # a server of the user's choosing: the tests will say if it does not answer
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then command -v sudo >/dev/null 2>&1 && SUDO="sudo"; fi
if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; }; then
    echo "PostgreSQL is missing: installing it (apt-get install postgresql)..."
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  fi
fi
version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1 || true)
if [ -n "$version" ]; then
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  if ! grep -qE '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$hba"; then
    # the tests connect as postgres over TCP without a password, as CI's machine allows
    $SUDO sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  fi
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
    || $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main reload 2>/dev/null || true
  for _ in $(seq 1 30); do ready && exit 0; sleep 0.5; done
fi
cat >&2 <<MSG
No PostgreSQL server answers on 127.0.0.1:5432 (wanted: $URL, trust auth).
Start one, e.g. on Debian/Ubuntu:  sudo apt-get install postgresql && sudo pg_ctlcluster 15 main start
or point the tests at yours:       export WFKIT_TEST_POSTGRES=postgresql://user@host:port/db
MSG
[ -n "${CI:-}" ] && exit 1
exit 0

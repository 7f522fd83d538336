#!/usr/bin/env bash
# What the test suite's peers need beyond Rust, installed into the repository (nothing global):
#   tests/node/node_modules        the canonical npm socket.io / socket.io-client (npm ci, locked)
#   tests/peers/bridle-py/.venv    python-socketio and aiohttp for the Python Bridle peers
#                                  (pinned in tests/peers/bridle-py/requirements.txt)
# Idempotent: a venv whose packages already match is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

npm ci --prefix tests/node --no-audit --no-fund --loglevel=error

py=tests/peers/bridle-py
req="$py/requirements.txt"
stamp="$py/.venv/.requirements"
if [ -x "$py/.venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  exit 0
fi
rm -rf "$py/.venv"
if ! python3 -m venv "$py/.venv" 2>/dev/null; then
  # Debian's python3 ships venv's ensurepip separately.
  rm -rf "$py/.venv"
  apt-get update -qq && apt-get install -y -qq python3-venv
  python3 -m venv "$py/.venv"
fi
"$py/.venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req"
cp "$req" "$stamp"

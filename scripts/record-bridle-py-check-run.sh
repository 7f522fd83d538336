#!/usr/bin/env bash
# Records tests/peers/bridle-py/check-run: `check bridle hub` (rules handshake-auth, http-health and
# same-user-browsers) against the python-socketio hub (tests/peers/bridle-py/hub.py, its legal
# defaults), through `bridgewire record bridle`. The cells are the hub's own traffic: a replay of
# them against that hub, or against npm socket.io's (tests/node/hub.js), must pass. Needs the
# venv scripts/test-deps.sh makes (tests/peers/bridle-py/.venv).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins -q
BIN=${CARGO_TARGET_DIR:-target}/release
PY=tests/peers/bridle-py/.venv/bin/python
OUT=tests/peers/bridle-py/check-run
. scripts/recording-setup.sh

export JWT_SECRET=py-check-run-secret-0123456789abcdef BRIDLE_API_KEY=py-check-run-key
"$PY" tests/peers/bridle-py/hub.py >"$tmp/hub" 2>"$tmp/hub.err" & pids+=($!)
HUB=$(first_line "$tmp/hub")
"$BIN/bridgewire" record bridle --listen 127.0.0.1:0 --upstream "$HUB" --dir "$OUT" --hub py \
  --jwt-secret "$JWT_SECRET" --api-key "$BRIDLE_API_KEY" >"$tmp/proxy" & proxy=$!
pids+=($proxy)
PROXY=$(first_line "$tmp/proxy")
"$BIN/bridgewire" check bridle hub --url "$PROXY" --wait-ms 2000 \
  --rule handshake-auth --rule http-health --rule same-user-browsers
sleep 0.3
# The proxy writes what is queued and exits on SIGTERM.
kill -TERM "$proxy"; wait "$proxy" || true
rm -f "$OUT/row-counts.pending.json"
find "$OUT" -type f | sort

#!/usr/bin/env bash
# Records tests/node/two-tabs: two tabs of one user (tests/node/two-tabs.js, the canonical
# socket.io-client) ↔ `bridgewire record bridle` ↔ the node hub (tests/node/hub.js, npm
# `socket.io`) ↔ the node agent (tests/node/agent.js, through the proxy too). Needs
# `npm ci --prefix tests/node`. The cells hold both tabs' lines, each marked with its
# connection (`conn`), which replay and parity play on a socket each.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins -q
BIN=${CARGO_TARGET_DIR:-target}/release
OUT=tests/node/two-tabs
rm -rf "$OUT"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
first_line() { for _ in $(seq 100); do [ -s "$1" ] && { head -1 "$1"; return; }; sleep 0.1; done; echo "no address in $1" >&2; exit 1; }

export JWT_SECRET=two-tabs-secret BRIDLE_API_KEY=two-tabs-key
node tests/node/hub.js >"$tmp/hub" & pids+=($!)
HUB=$(first_line "$tmp/hub")
"$BIN/bridgewire" record bridle --listen 127.0.0.1:0 --upstream "$HUB" --dir "$OUT" --hub node \
  --jwt-secret "$JWT_SECRET" --api-key "$BRIDLE_API_KEY" >"$tmp/proxy" & proxy=$!
pids+=($proxy)
PROXY=$(first_line "$tmp/proxy")
BRIDLE_URL=$PROXY BRIDLE_AGENT_ID=tabs node tests/node/agent.js & pids+=($!)
for _ in $(seq 100); do curl -s "$HUB/api/agent/tabs/health" | grep -q '"agentConnected":true' && break; sleep 0.1; done
HUB_URL=$PROXY AGENT_ID=tabs SUB=twin node tests/node/two-tabs.js
sleep 0.3
# The proxy writes what is queued and exits on SIGTERM.
kill -TERM "$proxy"; wait "$proxy" || true
rm -f "$OUT/row-counts.pending.json"
find "$OUT" -type f | sort

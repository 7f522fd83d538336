#!/usr/bin/env bash
# Records the committed Bridle cells: the canonical socket.io-client browser script ↔
# `bridgewire record bridle` ↔ the reference hub ↔ the reference agent (through the proxy too),
# into recordings/bridle/ref-hub/, then re-pins them. Needs `npm ci --prefix tests/node`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --bins -q
BIN=target/debug
OUT=recordings/bridle/ref-hub
. scripts/recording-setup.sh

export JWT_SECRET=recording-secret BRIDLE_API_KEY=recording-key
"$BIN/bridle-ref-hub" --listen 127.0.0.1:0 >"$tmp/hub" & pids+=($!)
HUB=$(first_line "$tmp/hub")
"$BIN/bridgewire" record bridle --listen 127.0.0.1:0 --upstream "$HUB" --dir recordings/bridle --hub ref-hub >"$tmp/proxy" & pids+=($!)
PROXY=$(first_line "$tmp/proxy")
BRIDLE_URL=$PROXY BRIDLE_AGENT_ID=bot-1 "$BIN/bridle-ref-agent" & pids+=($!)
for _ in $(seq 100); do curl -s "$PROXY/api/agent/bot-1/health" | grep -q '"agentConnected":true' && break; sleep 0.1; done

browser() { HUB_URL=$PROXY AGENT_ID=$1 SUB=$2 ROLES=${3:-} MESSAGES=$4 node tests/node/browser-script.js; }
browser bot-1 alice "" "hello|think with a tool|plain please|legacy image"
browser bot-1 boss ADMIN "hi as admin"
TRANSPORTS=websocket browser bot-1 carol "" "tell me a story"
browser nobody dave "" "anyone there?"
curl -s -XPOST -H 'content-type: application/json' -d '{"text":"plain over http"}' "$PROXY/api/agent/bot-1/message/sync"; echo
curl -s "$PROXY/api/agent/bot-1/health"; echo
sleep 0.3
"$BIN/bridgewire" pins --update recordings/bridle

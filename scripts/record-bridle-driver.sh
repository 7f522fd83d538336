#!/usr/bin/env bash
# Records one scripted scene on canonical socket.io 4 peers through `bridgewire record bridle`:
# the driver tests/node/NAME.js (socket.io-client) ↔ the proxy ↔ the node hub (tests/node/hub.js,
# npm `socket.io`), into tests/node/NAME. Needs `npm ci --prefix tests/node`. The cells hold
# each line's connection (`conn`), which replay and parity play on a socket each.
#   two-tabs       two tabs of one user, answered by the node agent (tests/node/agent.js,
#                  through the proxy too)
#   newest-leaves  two agents of one agentId (a takeover), the newer leaving first while the
#                  older stays, and a browser asking in between (the driver plays the agents)
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${1:?usage: scripts/record-bridle-driver.sh two-tabs|newest-leaves}
case "$NAME" in
  two-tabs) AGENT_ID=tabs SUB=twin ;;
  newest-leaves) AGENT_ID=newest SUB=asker ;;
  *) echo "unknown scene $NAME" >&2; exit 2 ;;
esac
cargo build --release --bins -q
BIN=${CARGO_TARGET_DIR:-target}/release
OUT=tests/node/$NAME
. scripts/recording-setup.sh

export JWT_SECRET=$NAME-secret BRIDLE_API_KEY=$NAME-key
node tests/node/hub.js >"$tmp/hub" & pids+=($!)
HUB=$(first_line "$tmp/hub")
"$BIN/bridgewire" record bridle --listen 127.0.0.1:0 --upstream "$HUB" --dir "$OUT" --hub node \
  --jwt-secret "$JWT_SECRET" --api-key "$BRIDLE_API_KEY" >"$tmp/proxy" & proxy=$!
pids+=($proxy)
PROXY=$(first_line "$tmp/proxy")
if [ "$NAME" = two-tabs ]; then
  BRIDLE_URL=$PROXY BRIDLE_AGENT_ID=$AGENT_ID node tests/node/agent.js & pids+=($!)
  for _ in $(seq 100); do curl -s "$HUB/api/agent/$AGENT_ID/health" | grep -q '"agentConnected":true' && break; sleep 0.1; done
fi
HUB_URL=$PROXY AGENT_ID=$AGENT_ID SUB=$SUB node "tests/node/$NAME.js"
sleep 0.3
# The proxy writes what is queued and exits on SIGTERM.
kill -TERM "$proxy"; wait "$proxy" || true
rm -f "$OUT/row-counts.pending.json"
find "$OUT" -type f | sort

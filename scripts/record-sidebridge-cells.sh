#!/usr/bin/env bash
# Re-records the committed Side Bridge cells: sidebridge-ref behind `bridgewire record
# sidebridge`, driven by `bridgewire check sidebridge`; keeps three chats under stable names.
# Usage: scripts/record-sidebridge-cells.sh [target/debug]
set -euo pipefail
bin=${1:-target/debug}
out=recordings/sidebridge/sidebridge-ref
tmp=$(mktemp -d)
cleanup() { kill "${proxy:-}" "${bridge:-}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
"$bin/sidebridge-ref" --key s3cret > "$tmp/ref.url" & bridge=$!
for _ in $(seq 50); do [ -s "$tmp/ref.url" ] && break; sleep 0.1; done
"$bin/bridgewire" record sidebridge --upstream "$(head -1 "$tmp/ref.url")" --dir "$tmp/rec" \
  --bridge sidebridge-ref --key s3cret > "$tmp/proxy.url" & proxy=$!
for _ in $(seq 50); do [ -s "$tmp/proxy.url" ] && break; sleep 0.1; done
"$bin/bridgewire" check sidebridge --config bridgewire.toml --url "$(head -1 "$tmp/proxy.url")" --key s3cret | tail -1
kill "$proxy"; wait "$proxy" 2>/dev/null || true
pick() { # <text in a request> <cell name>
  local f; f=$(grep -lF -- "$1" "$tmp"/rec/sidebridge-ref/*/client→bridge.ndjson | head -1)
  rm -rf "${out:?}/$2"; mkdir -p "$out"; cp -r "$(dirname "$f")" "$out/$2"
}
pick 'Hello Side Bridge!' conversation
pick 'enable history' no-history
pick 'bye' end-session
echo "recorded into $out"

#!/usr/bin/env bash
# Re-records tests/peers/sidebridge/check-run: every request `bridgewire check sidebridge`
# makes of the independent Python peer (tests/peers/sidebridge/peer.py, correct build, key
# s3cret), through `bridgewire record sidebridge`: one cell per chat, interleaved as check
# sent them. tests/sidebridge_peers.rs replays it in `parity` against each of the peer's
# flaws and oddities. Chat ids come from --seed 7, so a re-recording keeps the cell names.
# Usage: scripts/record-sidebridge-peer-run.sh [target/debug]
set -euo pipefail
bin=${1:-target/debug}
out=tests/peers/sidebridge/check-run
tmp=$(mktemp -d)
cleanup() { kill "${proxy:-}" "${bridge:-}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
python3 tests/peers/sidebridge/peer.py --key s3cret 2> "$tmp/peer.log" & bridge=$!
for _ in $(seq 100); do grep -q 'serving on' "$tmp/peer.log" 2>/dev/null && break; sleep 0.1; done
upstream=$(grep -o 'http://[^ ]*' "$tmp/peer.log" | head -1)
"$bin/bridgewire" record sidebridge --upstream "$upstream" --dir "$tmp/rec" \
  --bridge peer --key s3cret > "$tmp/proxy.url" & proxy=$!
for _ in $(seq 50); do [ -s "$tmp/proxy.url" ] && break; sleep 0.1; done
"$bin/bridgewire" check sidebridge --config tests/peers/sidebridge/peer.toml \
  --url "$(head -1 "$tmp/proxy.url")" --key s3cret --seed 7 | tail -1
kill "$proxy"; wait "$proxy" 2>/dev/null || true
rm -rf "${out:?}"; mkdir -p "$out"; cp -r "$tmp/rec/peer" "$out/peer"
echo "recorded $(ls "$out/peer" | wc -l) cells into $out"

#!/usr/bin/env bash
# Re-records a check-run of an independent Side Bridge peer: every request `bridgewire check
# sidebridge` makes of it (correct build, with a key), through `bridgewire record sidebridge`,
# one cell per chat, interleaved as check sent them. The peer's tests replay it in `parity`
# against each of the peer's flaws and oddities. Chat ids come from --seed 7, so a re-recording
# keeps the cell names.
#   python: tests/peers/sidebridge/peer.py         → tests/peers/sidebridge/check-run/peer
#   node:   tests/peers/sidebridge-node/server.js  → tests/peers/sidebridge-node/check-run/node
# Usage: scripts/record-sidebridge-peer-run.sh python|node [target/debug]
set -euo pipefail
peer=${1:?usage: $0 python|node [target/debug]}
bin=${2:-target/debug}
case "$peer" in
  python) dir=tests/peers/sidebridge; name=peer; key=s3cret
          start=(python3 "$dir/peer.py" --key "$key"); fixture=$dir/peer.toml ;;
  node)   dir=tests/peers/sidebridge-node; name=node; key=SECRET123
          start=(node "$dir/server.js" --key "$key"); fixture=$dir/fixture.toml ;;
  *) echo "usage: $0 python|node [target/debug]" >&2; exit 2 ;;
esac
out=$dir/check-run
tmp=$(mktemp -d)
cleanup() { kill "${proxy:-}" "${bridge:-}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
"${start[@]}" > "$tmp/peer.log" 2>&1 & bridge=$!
for _ in $(seq 100); do grep -q 'http://' "$tmp/peer.log" 2>/dev/null && break; sleep 0.1; done
upstream=$(grep -o 'http://[^ ]*' "$tmp/peer.log" | head -1)
"$bin/bridgewire" record sidebridge --upstream "$upstream" --dir "$tmp/rec" \
  --bridge "$name" --key "$key" > "$tmp/proxy.url" & proxy=$!
for _ in $(seq 50); do [ -s "$tmp/proxy.url" ] && break; sleep 0.1; done
"$bin/bridgewire" check sidebridge --config "$fixture" \
  --url "$(head -1 "$tmp/proxy.url")" --key "$key" --seed 7 | tail -1
kill "$proxy"; wait "$proxy" 2>/dev/null || true
rm -rf "${out:?}"; mkdir -p "$out"; cp -r "$tmp/rec/$name" "$out/$name"
echo "recorded $(ls "$out/$name" | wc -l) cells into $out"

#!/bin/sh
# Benchmark: `replay bridle` of the bundled recordings/bridle cells against the reference hub,
# idle detection (the default) against the fixed quiet window (--fixed-windows, the replay's
# timing before idle detection), interleaved round by round; wall time of each whole command
# (hub start included), whether both modes printed the same report, and the load average.
#
# Usage: benches/replay-bridle.sh [ROUNDS]   (default 3; release build)
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
cargo build --quiet --release --bin bridgewire --bin bridle-ref-hub
BW=target/release/bridgewire
HUB=target/release/bridle-ref-hub
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
now() { date +%s%N; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
while [ "$i" -lt "$ROUNDS" ]; do
  for mode in idle fixed; do
    flag=""
    [ "$mode" = fixed ] && flag="--fixed-windows"
    t0=$(now)
    # shellcheck disable=SC2086
    "$BW" replay bridle recordings/bridle $flag -- "$HUB" --listen 127.0.0.1:0 \
      >"$TMP/$mode.$i" 2>/dev/null || true
    t1=$(now)
    echo "$mode $(( (t1 - t0) / 1000000 ))" >>"$TMP/walls"
    echo "round $i $mode: $(( (t1 - t0) / 1000000 )) ms, $(tail -1 "$TMP/$mode.$i")"
  done
  cmp -s "$TMP/idle.$i" "$TMP/fixed.$i" || echo "round $i: THE REPORTS DIFFER"
  i=$((i + 1))
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
med() { grep "^$1 " "$TMP/walls" | cut -d' ' -f2 | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
I=$(med idle)
F=$(med fixed)
echo
echo "| replay bridle, bundled cells ($ROUNDS rounds, median) | wall ms | vs fixed window |"
echo "| --- | ---: | ---: |"
echo "| fixed window (--fixed-windows) | $F | 1.0× |"
echo "| idle detection (default) | $I | $(echo "scale=2; $F / $I" | bc)× faster |"

#!/bin/sh
# Benchmark: live replay of the bundled bb-ref cells through bb-ref-bridge and the provider
# double, with -j 1 and -j 2 (speed-up), plus harness CPU time per replayed line
# (getrusage of the bridgewire process itself; bridges and doubles are reported as children).
#
# Usage: benches/replay-bb.sh [ROUNDS] [PROFILE]   (default 3 rounds per setting, release)
# Prints one `stats:` line per run (from `replay bb --stats`) and a summary.
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
PROFILE=${2:-release}
if [ "$PROFILE" = release ]; then
  cargo build --quiet --release --bin bridgewire --bin bb-ref-bridge --bin bb-ref-provider
else
  cargo build --quiet --bin bridgewire --bin bb-ref-bridge --bin bb-ref-provider
fi
BW=target/$PROFILE/bridgewire
BRIDGE=target/$PROFILE/bb-ref-bridge
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
for j in 1 2; do
  i=0
  while [ "$i" -lt "$ROUNDS" ]; do
    "$BW" replay bb --stats -j "$j" recordings/bb-ref -- "$BRIDGE" 2>&1 >/dev/null | grep '^stats:'
    i=$((i + 1))
  done
done | tee /tmp/replay-bb-bench.$$ 
awk '
  /jobs 1,/ { n1++; match($0, /wall [0-9]+/); w1 += substr($0, RSTART + 5, RLENGTH - 5) }
  /jobs 2,/ { n2++; match($0, /wall [0-9]+/); w2 += substr($0, RSTART + 5, RLENGTH - 5) }
  { match($0, /per line [0-9.]+/); pl += substr($0, RSTART + 9, RLENGTH - 9); n++ }
  END {
    printf "mean wall -j 1: %.0f ms, -j 2: %.0f ms, speed-up %.2fx; mean harness cpu per line %.0f µs\n",
      w1 / n1, w2 / n2, (w1 / n1) / (w2 / n2), pl / n
  }' /tmp/replay-bb-bench.$$
rm -f /tmp/replay-bb-bench.$$

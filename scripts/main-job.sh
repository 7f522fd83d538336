#!/usr/bin/env bash
# The main job on the bundled default: every check bridgewire offers, run against the reference
# peers and recordings in this repository. This is what a bridge author's CI step looks like,
# with our reference peers standing in for theirs. Reports land in reports/.
#
# BRIDGEWIRE_BIN_DIR: take the binaries from there instead of building release ones (the guard
# test, tests/main_job.rs, runs the job on the debug build). BRIDGEWIRE_REPORTS_DIR: where the
# reports go (default reports/).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${BRIDGEWIRE_BIN_DIR:-}" ]; then
  bin=$BRIDGEWIRE_BIN_DIR
else
  cargo build --release --locked --bins
  bin=target/release
fi
reports=${BRIDGEWIRE_REPORTS_DIR:-reports}
mkdir -p "$reports"
bw=$bin/bridgewire
status=0
step() { echo; echo "==> $*"; "$@" || status=1; }

# Pins: every recordings folder reproduces its pinned counts (bb's corpus included).
for dir in recordings/*/; do
  step "$bw" pins "${dir%/}"
done
# bb: the live catalogue plus the recorded-traffic rules, against the reference bridge.
step "$bw" check bb --recordings recordings/bb-ref \
  --junit "$reports/check-bb.junit.xml" --markdown "$reports/check-bb.md" --html "$reports/check-bb.html" \
  -- "$bin/bb-ref-bridge"
# bb: replay the bundled cells and compare the bridge with itself (parity smoke: a determinism
# check on purpose, hence --allow-same-bridge).
step "$bw" parity --allow-same-bridge --base "cmd:$bin/bb-ref-bridge" --head "cmd:$bin/bb-ref-bridge" recordings/bb-ref
# Side Bridge: the rule table with and without a key, then replay of the recorded chats.
step "$bw" check sidebridge --config bridgewire.toml --junit "$reports/check-sidebridge.junit.xml" -- "$bin/sidebridge-ref" --listen 127.0.0.1:0
step "$bw" check sidebridge --config bridgewire.toml --key s3cret -- "$bin/sidebridge-ref" --listen 127.0.0.1:0 --key s3cret
step "$bw" replay sidebridge --key s3cret recordings/sidebridge -- "$bin/sidebridge-ref" --listen 127.0.0.1:0 --key s3cret
# Bridle: the hub rules, the agent rules, and replay of the recorded cells against the hub.
# The spec's /message/sync timeout is 120 s; the reference hub takes a shorter one so the
# timeout rule does not wait two minutes.
step "$bw" check bridle hub --sync-timeout-ms 2000 --junit "$reports/check-bridle-hub.junit.xml" -- "$bin/bridle-ref-hub" --listen 127.0.0.1:0
step "$bw" check bridle agent -- "$bin/bridle-ref-agent"
step "$bw" replay bridle recordings/bridle
echo
if [ "$status" -eq 0 ]; then echo "main job: all steps passed"; else echo "main job: a step failed"; fi
exit "$status"

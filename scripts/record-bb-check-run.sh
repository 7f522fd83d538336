#!/usr/bin/env bash
# Records tests/peers/bb/check-run: every request `bridgewire check bb` makes of the independent
# Python bridge (tests/fixtures/py_bb_bridge.py, no flaw, no oddity), teed by `bridgewire
# record bb` in front of it, with the fixture prompts of tests/bb_py_peer.rs. Parity replays it
# against each of the bridge's flaws and oddities (tests/bb_py_peer.rs,
# `parity_over_a_recorded_check_run_fails_each_flaw_the_runtime_would_see`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins -q
BIN=$(realpath "${CARGO_TARGET_DIR:-target}/release/bridgewire")
OUT=tests/peers/bb/check-run
rm -rf "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/bridgewire.toml" <<'TOML'
[bb.fixture]
promptInput = "hello"
zeroWorkPromptInput = "/noop"
interruptiblePromptInput = "/hold"
icons = { pluginId = "py", names = ["plan", "message"] }
TOML
env -u PY_BB_FLAW -u PY_BB_ODDITY "$BIN" check bb --timeout-ms 3000 --fixture "$tmp/bridgewire.toml" \
  -- "$BIN" record bb --dir "$tmp/rec" -- python3 "$PWD/tests/fixtures/py_bb_bridge.py"
# A recordings folder holds <provider>/<cell>: the cells are the bridge's "py".
mkdir -p "$OUT"
mv "$tmp/rec" "$OUT/py"

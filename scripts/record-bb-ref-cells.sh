#!/bin/sh
# Regenerates recordings/bb-ref/bb-ref/<cell>/ from the reference bridge (on purpose), then
# re-pins the folder. Runs the ignored test tests/record_bb_ref_cells.rs, which drives
# `bridgewire record bb --provider bb-ref -- bb-ref-bridge` with the provider wrapped in
# `bridgewire record child -- bb-ref-provider`.
#
# Usage: scripts/record-bb-ref-cells.sh [OUT]   (OUT default: recordings/bb-ref)
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-recordings/bb-ref}
BRIDGEWIRE_RECORD_OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
export BRIDGEWIRE_RECORD_OUT
cargo test --test record_bb_ref_cells -- --ignored --nocapture
cargo run --quiet --bin bridgewire -- pins --update "$OUT"

# Sourced by the scripts that record a committed Bridle corpus (record-bridle-cells.sh,
# record-bridle-driver.sh, record-bridle-py-check-run.sh), after they set OUT: empties OUT, makes
# a scratch folder `tmp`, kills every process whose pid is added to `pids` on exit, and defines
# first_line FILE (the first line a started process printed: its address).
rm -rf "$OUT"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
first_line() { for _ in $(seq 100); do [ -s "$1" ] && { head -1 "$1"; return; }; sleep 0.1; done; echo "no address in $1" >&2; exit 1; }

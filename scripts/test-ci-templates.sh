#!/usr/bin/env bash
# Runs the shell steps of the CI templates in docs/ci/ locally, as the CI would, in a scratch
# "bridge repository": every `run:` (GitHub Actions) and `script:`/`before_script:` (GitLab) line
# in order, except steps marked `ci-local: skip` (installing bridgewire: the bridgewire given in
# $BRIDGEWIRE_BIN is put on PATH instead) and `uses:` actions (they need GitHub). Then checks
# that the job published what it promises: a JUnit file and a Markdown summary.
#
#   BRIDGEWIRE_BIN=target/debug/bridgewire BRIDGE="<bridge command>" [CONFIG=bridgewire.toml] \
#     bash scripts/test-ci-templates.sh
#
# BRIDGE overrides the templates' example bridge; CONFIG is copied in as the project's
# bridgewire.toml. Every step is bounded by `timeout`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
: "${BRIDGEWIRE_BIN:?set BRIDGEWIRE_BIN to a built bridgewire}"
: "${BRIDGE:?set BRIDGE to the bridge command to check}"
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
bin_dir=$(mktemp -d)
ln -s "$(cd "$(dirname "$BRIDGEWIRE_BIN")" && pwd)/$(basename "$BRIDGEWIRE_BIN")" "$bin_dir/bridgewire"
trap 'rm -rf "$bin_dir" "${work:-}"' EXIT

# The shell steps of a template, NUL-terminated, in order. A step is skipped when its line
# (GitLab) or the comment line right above its `run:` (GitHub) says `ci-local: skip`.
steps() {
  python3 - "$1" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
out, i = [], 0
def skipped(j):
    return "ci-local: skip" in lines[j] or (j > 0 and lines[j - 1].strip().startswith("#")
                                            and "ci-local: skip" in lines[j - 1])
while i < len(lines):
    l = lines[i]; s = l.strip(); ind = len(l) - len(l.lstrip())
    if s.startswith("run: |") or s.startswith("- run: |"):
        start, block, i = i, [], i + 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > ind):
            block.append(lines[i].strip()); i += 1
        if not skipped(start):
            out.append("\n".join(block))
        continue
    if s.startswith("run: ") or s.startswith("- run: "):
        if not skipped(i):
            out.append(s.split("run: ", 1)[1])
    elif s in ("script:", "before_script:"):
        i += 1
        while i < len(lines) and lines[i].strip().startswith("- "):
            if not skipped(i):
                out.append(lines[i].strip()[2:])
            i += 1
        continue
    i += 1
sys.stdout.write("".join(step + "\0" for step in out))
PY
}

status=0
for template in "$here"/docs/ci/github-actions.yml "$here"/docs/ci/gitlab-ci.yml; do
  name=$(basename "$template")
  work=$(mktemp -d)
  [ -n "${CONFIG:-}" ] && cp "$CONFIG" "$work/bridgewire.toml"
  summary="$work/step-summary.md"
  : >"$summary"
  echo "==> $name"
  job=0
  while IFS= read -r -d '' step; do
    echo "   \$ $step"
    if ! (cd "$work" && PATH="$bin_dir:$PATH" GITHUB_STEP_SUMMARY="$summary" BRIDGE="$BRIDGE" \
          timeout "$STEP_TIMEOUT" bash -eo pipefail -c "$step" >"$work/step.log" 2>&1); then
      job=1
      tail -5 "$work/step.log" | sed 's/^/     | /'
    fi
  done < <(steps "$template")
  for f in reports/bridgewire.junit.xml reports/bridgewire.md; do
    if [ ! -s "$work/$f" ]; then echo "   MISSING $f"; status=1; fi
  done
  if ! grep -q "<testsuite " "$work/reports/bridgewire.junit.xml" 2>/dev/null; then
    echo "   the JUnit file has no test suite"; status=1
  fi
  if [ "$name" = github-actions.yml ] && ! grep -q "bridgewire check bb" "$summary"; then
    echo "   nothing reached \$GITHUB_STEP_SUMMARY"; status=1
  fi
  echo "   job $( [ $job -eq 0 ] && echo passed || echo failed ); reports published"
  [ "${EXPECT_JOB:-pass}" = pass ] && [ $job -ne 0 ] && status=1
  [ "${EXPECT_JOB:-pass}" = fail ] && [ $job -eq 0 ] && status=1
  rm -rf "$work"
done
exit "$status"

#!/usr/bin/env bash
# Needs: your repository's checkout, run at its top, in a venv holding perfsuite with what your
# benchmark's transports need (docs/install.md) and your package (pip install -e .); a folder this
# machine keeps between jobs (PERF_HOME), and in it a baseline recorded first (PERF_RECORD=update).
#
# Gate a checkout of your repository against the baselines this machine keeps: perfsuite run of
# your benchmark --compare against $PERF_HOME/baselines, with --confirm: each case the store
# cannot decide, or decides from fewer than 8 sittings, is judged again by an interleaved A/B
# against the commit that recorded the baseline (built as ab --a-ref builds it), so the gate
# decides from the first baseline on (docs/baselines.md). --strict: a case left UNKNOWN fails too.
# PERF_RECORD=update records this checkout as the baseline instead (the first time, or to accept
# a change); PERF_RECORD=add adds a sitting of the same code, 10 minutes or more after the last
# (the machine's drift between runs is learned from its sittings).
# Exit: 0 pass, 1 a regression, 2 bad input, 3 UNKNOWN or nothing compared, 4 a world failed.
#
#   PERF_HOME    (required) a folder this machine keeps between jobs; the baselines are in its baselines/
#   PERF_RECORD  update or add: record instead of judging [empty: judge]
#   PERF_BUDGET  seconds of A/B pairs --confirm may take [lib.sh's]
#   and PERF_BENCHMARKS, PERF_ARGS, PERF_RESULTS: lib.sh (results/run.txt and run.json here)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ -n "${PERF_HOME:-}" ] || perf_bad "set PERF_HOME: a folder this machine keeps between jobs (its baselines/)"
case ${PERF_RECORD:-} in
  "") mode=(--compare --confirm --confirm-budget "$PERF_BUDGET" --strict); title="judged against the stored baseline" ;;
  update) mode=(--baseline-update); title="recorded as the baseline" ;;
  add) mode=(--baseline-add); title="recorded as one more sitting of the baseline" ;;
  *) perf_bad "PERF_RECORD=$PERF_RECORD: update (record the baseline), add (one more sitting) or empty (judge)" ;;
esac
rm -f "$PERF_RESULTS/run.json" "$PERF_RESULTS/run.txt"
head=$(git rev-parse --short=10 HEAD 2>/dev/null || echo "this checkout")
status=0
perfsuite run --benchmarks "$PERF_BENCHMARKS" --baseline-dir "$PERF_HOME/baselines" "${mode[@]}" \
  "${perf_args[@]}" --json "$PERF_RESULTS/run.json" 2>&1 | tee "$PERF_RESULTS/run.txt" || status=$?
# the run's own last line says what it decided (or what was left UNKNOWN, and the command that decides it)
last=$(grep -v '^\s*$' "$PERF_RESULTS/run.txt" | tail -n 1 || true)
if [ -z "${PERF_RECORD:-}" ] && [ -z "$(ls -A "$PERF_HOME/baselines" 2>/dev/null)" ]; then
  title="$title, but $PERF_HOME/baselines holds none yet: record one with PERF_RECORD=update (gh workflow run perf-stored.yml -f record=update)"
fi
echo "perfsuite run: $head $title: exit $status"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  { echo "## perfsuite run: $head $title: exit $status"
    echo "$last"
    echo '```text'
    cat "$PERF_RESULTS/run.txt"
    echo '```'
  } >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"

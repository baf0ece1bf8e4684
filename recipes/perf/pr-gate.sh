#!/usr/bin/env bash
# Needs: a git checkout of your repository with its whole history, run at its top, in a venv
# holding perfsuite with what your benchmark's transports need (docs/install.md; pip install
# "perfsuite[torch] @ URL" for torch-nccl) and your package (pip install -e .); a machine with the
# hardware your benchmark declares (its transports and device decide where it runs: one GPU per
# rank for torch-nccl). PERF_BENCHMARKS and PERF_BASE set (below).
#
# Gate a pull request of your repository: perfsuite ab of your benchmark, arm A the commit where
# the pull request left its base branch (their merge-base: what was merged there since is in
# neither arm, so it is neither blamed on the pull request nor credited to it), arm B its head,
# each commit built into its own environment, both measured now in interleaved pairs on this
# machine and judged case by case (--strict: a case left UNKNOWN fails too).
# Exit: 0 pass, 1 a regression, 2 bad input, 3 UNKNOWN or nothing compared, 4 a world failed.
#
#   PERF_BASE     (required) the base branch's commit: github.event.pull_request.base.sha
#   PERF_HEAD     the pull request's head [HEAD]
#   PERF_ENV_DIR  where commits' environments are kept between runs [perfsuite's: ~/.cache/perfsuite/envs]
# A pull request that adds a benchmark passes: the cases only its head declares are measured
# and reported "new" (nothing at the branch point to compare them with); a case it removes
# ("missing") leaves the gate UNKNOWN (3), for a reviewer to see.
#   and PERF_BENCHMARKS, PERF_ARGS, PERF_BUDGET, PERF_MAX_PAIRS, PERF_RESULTS: lib.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ -n "${PERF_BASE:-}" ] || perf_bad "set PERF_BASE: the base branch's commit (github.event.pull_request.base.sha)"
head=$(git rev-parse -q --verify "${PERF_HEAD:-HEAD}^{commit}") || perf_bad "PERF_HEAD=${PERF_HEAD:-HEAD} names no commit here"
a=$(git merge-base "$PERF_BASE" "$head") \
  || perf_bad "no merge-base of PERF_BASE=$PERF_BASE and $head here (is the checkout's history whole? fetch-depth: 0)"
echo "A: $a (where the head left $PERF_BASE); B: $head (the head)"
status=0
env_dir=()
[ -z "${PERF_ENV_DIR:-}" ] || env_dir=(--env-dir "$PERF_ENV_DIR")
perfsuite ab --a-ref "$a" --b-ref "$head" --benchmarks "$PERF_BENCHMARKS" --strict \
  --max-pairs "$PERF_MAX_PAIRS" --budget "$PERF_BUDGET" "${env_dir[@]}" \
  "${perf_args[@]}" --json "$PERF_RESULTS/ab.json" 2>&1 | tee "$PERF_RESULTS/ab.txt" || status=$?
perf_judge "$status" "perfsuite ab: A ${a:0:10} (branch point) vs B ${head:0:10} (head)"

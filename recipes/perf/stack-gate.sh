#!/usr/bin/env bash
# Needs: a venv holding perfsuite (docs/install.md) to drive the arms, and two images that each
# hold Python 3.11+, an MPI and perfsuite (docs/install.md, "In a container image") with a
# container runtime, or two venvs' Pythons; PERF_BENCHMARKS set.
#
# Gate a stack upgrade before it rolls out: perfsuite ab of your benchmark with arm A the stack
# you run now and arm B the one you would roll out, both measured now in interleaved pairs on this
# machine and judged case by case (--strict: a case left UNKNOWN fails too). An arm is
#   a container image (PERF_A_IMAGE, PERF_B_IMAGE): its whole world runs inside it, with the
#     image's mpiexec, Python and perfsuite (your package or benchmark file in it, or in the
#     working directory, which is mounted); PERF_CONTAINER_RUNTIME picks the runtime; or
#   a Python (PERF_A_PYTHON, PERF_B_PYTHON): a venv's, its mpiexec used where one lies beside it.
# Two images or two Pythons, never a mix. The report and the A/B file say each arm's stack (MPI,
# NCCL, torch ... as the image holds them). Exit: 0 pass, 1 a regression, 2 bad input, 3 UNKNOWN
# or nothing compared, 4 a world failed.
#
#   and PERF_BENCHMARKS, PERF_ARGS, PERF_BUDGET, PERF_MAX_PAIRS, PERF_RESULTS: lib.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
given=()
for name in PERF_A_IMAGE PERF_B_IMAGE PERF_A_PYTHON PERF_B_PYTHON; do
  if [ -n "${!name:-}" ]; then given+=("$name"); fi
done
case "${given[*]}" in
  "PERF_A_IMAGE PERF_B_IMAGE")
    a=$PERF_A_IMAGE b=$PERF_B_IMAGE
    arms=(--a-image "$PERF_A_IMAGE" --b-image "$PERF_B_IMAGE" "${perf_runtime[@]}") ;;
  "PERF_A_PYTHON PERF_B_PYTHON")
    a=$PERF_A_PYTHON b=$PERF_B_PYTHON
    arms=(--a-python "$PERF_A_PYTHON" --b-python "$PERF_B_PYTHON") ;;
  *) perf_bad "give two images (PERF_A_IMAGE, PERF_B_IMAGE) or two Pythons (PERF_A_PYTHON, PERF_B_PYTHON), not a mix; set: ${given[*]:-none}" ;;
esac
status=0
perfsuite ab "${arms[@]}" --benchmarks "$PERF_BENCHMARKS" --strict \
  --max-pairs "$PERF_MAX_PAIRS" --budget "$PERF_BUDGET" \
  "${perf_args[@]}" --json "$PERF_RESULTS/ab.json" 2>&1 | tee "$PERF_RESULTS/ab.txt" || status=$?
perf_judge "$status" "perfsuite ab: A $a vs B $b"

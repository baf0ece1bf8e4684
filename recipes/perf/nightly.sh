#!/usr/bin/env bash
# Needs: a Slurm login node (salloc, srun), a folder the login and compute nodes both see
# (PERF_HOME) holding the venv with perfsuite that runs this (docs/install.md), a container
# runtime on the compute nodes, images that hold perfsuite, and the first reference accepted
# (PERF_ACCEPT=1, below).
#
# A nightly on Slurm: tonight's image (PERF_IMAGE) against the reference image, the last one
# accepted, by perfsuite ab on one compute node of one exclusive allocation, each arm's whole
# world inside its image. A regression (exit 1) or an undecided case (3) turns the night red,
# night after night, until it is fixed or tonight's image is accepted: PERF_ACCEPT=1 makes
# PERF_IMAGE the reference before the run (one line in $PERF_HOME/reference-image, each
# acceptance appended to $PERF_HOME/reference-images.log), and that run is an A/A check of the
# gate itself. The first night has no reference and exits 2 saying how to accept one. Name
# images immutably (a dated tag, or IMAGE@sha256:...): a moving tag takes the reference along.
#
#   PERF_HOME   (required) a folder the login and compute nodes both see (perfsuite's venv
#               there too: the compute node runs the perfsuite on PATH)
#   PERF_IMAGE  (required) tonight's image;  PERF_ACCEPT  1: accept PERF_IMAGE first [0]
#   PERF_SLURM_PARTITION [the default one], PERF_SALLOC_ARGS [--time=02:00:00], PERF_SRUN_ARGS
#   and PERF_BENCHMARKS, PERF_ARGS, PERF_BUDGET [1200], PERF_MAX_PAIRS, PERF_CONTAINER_RUNTIME,
#   PERF_RESULTS: lib.sh
set -euo pipefail
PERF_BUDGET=${PERF_BUDGET:-1200}
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ -n "${PERF_HOME:-}" ] || perf_bad "set PERF_HOME: a folder the login and compute nodes both see"
[ -n "${PERF_IMAGE:-}" ] || perf_bad "set PERF_IMAGE: tonight's image"
ref="$PERF_HOME/reference-image"
accept="PERF_ACCEPT=1 PERF_IMAGE=$PERF_IMAGE (gh workflow run perf-nightly.yml -f accept=true -f image=$PERF_IMAGE)"
if [ "${PERF_ACCEPT:-0}" = 1 ]; then
  mkdir -p "$PERF_HOME"
  printf '%s\n' "$PERF_IMAGE" > "$ref.tmp" && mv "$ref.tmp" "$ref"
  printf '%s %s accepted by %s%s\n' "$(date -u +%FT%TZ)" "$PERF_IMAGE" "${GITHUB_ACTOR:-$(id -un)}" \
    "${PERF_RUN_URL:+ ($PERF_RUN_URL)}" >> "$PERF_HOME/reference-images.log"
  echo "the reference image is now $PERF_IMAGE ($ref)"
fi
[ -s "$ref" ] || perf_bad "no reference image yet ($ref): accept tonight's as the first: $accept"
reference=$(head -n 1 "$ref")
strict=(--strict)
if [ "$reference" = "$PERF_IMAGE" ]; then strict=(); fi  # an A/A run, which may stay UNKNOWN
json="$PERF_HOME/nights/$(date -u +%Y%m%dT%H%M%SZ)-$$/ab.json"  # written on the compute node
mkdir -p "$(dirname "$json")"
partition=()
[ -z "${PERF_SLURM_PARTITION:-}" ] || partition=(--partition="$PERF_SLURM_PARTITION")
read -r -a salloc_args <<< "${PERF_SALLOC_ARGS:---time=02:00:00}"
read -r -a srun_args <<< "${PERF_SRUN_ARGS:-}"
status=0
salloc --exclusive --nodes=1 "${partition[@]}" --job-name=perf-nightly "${salloc_args[@]}" \
  srun -N1 -n1 "${srun_args[@]}" perfsuite ab --a-image "$reference" --b-image "$PERF_IMAGE" "${perf_runtime[@]}" \
  --benchmarks "$PERF_BENCHMARKS" "${strict[@]}" --max-pairs "$PERF_MAX_PAIRS" --budget "$PERF_BUDGET" \
  "${perf_args[@]}" --json "$json" 2>&1 | tee "$PERF_RESULTS/ab.txt" || status=$?
cp "$json" "$PERF_RESULTS/ab.json" 2>/dev/null || true
perf_judge "$status" "perfsuite ab: reference $reference vs tonight $PERF_IMAGE" \
  "If tonight's image is intended, accept it as the reference: $accept"

#!/usr/bin/env bash
# fp8 collectives on NCCL beside nccl-tests on one GPU, bfloat16 beside them as the known line, in
# one call of the tool that lends the GPU machine (under 5 minutes, at most 8 files back from $OUT):
#
#   bash scripts/gpu-wheels.sh                       # here, once: .whl/ (mpich)
#   git clone --depth 1 https://github.com/NVIDIA/nccl-tests .nccl-tests   # here, once
#   bash scripts/gpu-fp8.sh                          # there (carry .whl and .nccl-tests)
#
# It is scripts/gpu-collectives.sh for allreduce, all_gather and reduce_scatter at --dtypes
# float8_e4m3,float8_e5m2,bfloat16 (nccl-tests' -d f8e4m3, f8e5m2, bfloat16), its log fp8.log:
# the bring-up, nccl-tests built for this GPU, ROUNDS interleaved rounds of both tools, then one
# side-by-side table per collective and type with nccl-tests' #wrong rows.
#
# What it shows: that NCCL >= 2.24 runs fp8 through perfsuite at all (a world skipped says why: an
# older NCCL, a GPU below sm90 for the reductions), that every fp8 result checked exactly (a WRONG
# beside a timing is a failed check), and whether a byte of fp8 costs what nccl-tests says.
# Variables and exit statuses as gpu-collectives.sh's.
set -uo pipefail

# NCCL refuses to reduce fp8 below sm90 (nccl-tests leaves fp8 out there): say so once, up front.
sm="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')"
if [[ "$sm" =~ ^[0-9]+$ ]] && (( sm < 90 )); then
    echo "== this GPU is sm$sm: NCCL reduces fp8 only on sm90 or newer, so fp8 allreduce and reduce_scatter are skipped"
fi
NAME=fp8 COLLECTIVES=allreduce,all_gather,reduce_scatter DTYPES=float8_e4m3,float8_e5m2,bfloat16 \
    exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu-collectives.sh"

#!/usr/bin/env bash
# gpt2-small on one GPU, DDP and FSDP, float32 and bf16: tokens/s, MFU and peak memory, in one call of the tool
# that lends the GPU machine (under 5 minutes):
#
#   bash scripts/gpu-wheels.sh             # here, once: .whl/ (mpich)
#   bash scripts/gpu-transformer.sh        # there (carry .whl)
#
# Steps, all under BUDGET (default 270 s after the start):
#  1. the bring-up (scripts/gpu-bringup.sh: a venv over the machine's CuPy, NCCL and PyTorch,
#     perfsuite installed editable from this checkout);
#  2. perfsuite run --benchmarks torch-epoch --transports torch-nccl --world-sizes 1
#     --models gpt2-small --parallel ddp,fsdp --amp bf16,off --rounds ROUNDS (default 3):
#     the four worlds interleaved round by round, tokens/s with its interval over rounds, MFU
#     against the GPU's peak (perfsuite/kernels/training/peaks.py), each collective's time and exposed time,
#     the harness against a plain loop of the same model in the same world, and each world's peak
#     memory per rank (torch's caching allocator: max_memory_allocated and _reserved over the
#     timed steps; NVML's count for the rank's process) with its model state (parameters,
#     gradients, optimizer state: FSDP's shard against DDP's replica).
#
# $OUT (default a new temp folder) gets bringup.log, transformer.log (everything printed) and
# transformer.json (the run file). BATCH (default 8 sequences of 1024 tokens), ITERS (default 20),
# ROUNDS, BUDGET, WHEELS (default .whl), VENV (default .venv-gpu).
#
# Exit 0 done; 1 a step failed (its line says which). Without a GPU it says so and exits 0.
set -uo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$checkout/scripts/gpu-steps.sh"
deadline=$(( SECONDS + ${BUDGET:-270} ))
begin gpu-transformer transformer.log
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader

step 240 "gpt2-small, DDP and FSDP, bf16 and float32, n=1" "$venv/bin/perfsuite" run --benchmarks torch-epoch \
    --transports torch-nccl --world-sizes 1 --models gpt2-small --parallel ddp,fsdp --amp bf16,off \
    --batches "${BATCH:-8}" --iters "${ITERS:-20}" --warmup 3 --rounds "${ROUNDS:-3}" --max-contention off \
    --timeout 120 --json "$out/transformer.json"
finish gpu-transformer "$out"

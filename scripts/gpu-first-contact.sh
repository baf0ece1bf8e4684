#!/usr/bin/env bash
# The first contact with a lent GPU machine, in three commands that each fit one call of the tool
# that lends it (10 minutes, at most 8 files back from $OUT; each stage's limits sum to 9 minutes
# or less): bring perfsuite up from carried wheels, then measure every device path one GPU allows,
# beside nccl-tests on the same GPU.
#
#   bash scripts/gpu-wheels.sh                       # here, once: .whl/ (mpich)
#   git clone --depth 1 https://github.com/NVIDIA/nccl-tests .nccl-tests   # here, once
#   bash scripts/gpu-first-contact.sh smoke          # there: bring-up + scripts/gpu-smoke.sh
#   bash scripts/gpu-first-contact.sh measure        # there: the sweep, graph timing, nccl-tests
#   bash scripts/gpu-first-contact.sh pytest         # there: the GPU test cases and benchmarks
#   bash scripts/gpu-first-contact.sh all            # there: all of it in one call (see below)
#
# Both stages start with scripts/gpu-bringup.sh .whl (seconds; a fresh machine has nothing of the
# last one). `smoke` runs scripts/gpu-smoke.sh (460 s at most). `measure` runs, each under its own limit:
#   perfsuite run --transports nccl,mpi-staged,gpu-ring,mpi-cuda --world-sizes 1,2 --sizes 4:256MiB
#   perfsuite run --transports nccl --world-sizes 1 --device-timing graph --sizes 4:256MiB
#   all_reduce_perf -b 4 -e 256M -f 4 -g 1 (and -G 100, CUDA graphs), built from .nccl-tests with
#     nvcc for this GPU only, against the NCCL CuPy loads (the nvidia-nccl wheel), so both tables
#     come from one NCCL
# and prints one side-by-side table of nccl's time against all_reduce_perf's. `pytest` runs
#   pytest tests/test_gpu_*.py tests/test_one_gpu.py, and pytest benchmarks --benchmark-only with
#     --perf-transports nccl (which runs at world size 1 on one GPU).
#
# `all` is the whole first contact in one call, for a lease too short for three (15 minutes of
# device time, the machine's start included): bring-up, the smoke (SMOKE_TIMEOUT 55), nccl and
# torch-nccl at world size 1 over 4:256MiB, the graph run, nccl-tests, a torch-nccl training epoch
# (small-cnn and resnet50), and the GPU test cases. Each step keeps its own limit, cut to what is
# left of ALL_BUDGET (540 s after the bring-up) so the call ends inside the tool's 600 s; on an H100 it took about
# 6 minutes. 8 files. STEPS (a comma list of smoke, nccl, tests, epoch, pytest) reruns only some.
#
# $OUT (default a new temp folder) gets at most 5 files (8 for `all`): bringup.log, and for `smoke` the smoke's
# smoke.log and smoke.json; for `measure` sweep.json, graph.json, nccl-tests.log, measure.log
# (everything printed); for `pytest` pytest.log.
#
# WHEELS (default .whl), VENV (default .venv-gpu), NCCL_TESTS (default .nccl-tests) and PYTHON (the
# machine's, default python3) say where things are.
#
# Exit 0 done (a skipped world is no failure); 1 a step failed (its line says which); 2 bad input.
# Without a GPU it says so in one line after the bring-up and exits 0.
set -uo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stage="${1:-}"
out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-first-contact.XXXXXX")}"
sources="${NCCL_TESTS:-$checkout/.nccl-tests}"
say() { echo "gpu-first-contact: $*"; }

case "$stage" in
    smoke|measure|pytest|all) ;;
    *) say "stage '${stage}' is unknown; run it with smoke, measure, pytest or all"; exit 2 ;;
esac
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # a cluster's Open MPI, as root

source "$checkout/scripts/gpu-steps.sh"
bring_up gpu-first-contact  # before the GPU check: without a GPU the bring-up is what there is to show
grep -v '^installed\|^kept' "$out/bringup.log"
if ! nvidia-smi -L >/dev/null 2>&1; then
    say "no GPU here: nvidia-smi lists none; the bring-up above is all this machine can show"
    exit 0
fi

wanted() {  # wanted STEP: is this step of `all` to run (STEPS, default every one)?
    [[ ",${STEPS:-smoke,nccl,tests,epoch,pytest}," == *",$1,"* ]]
}
if [[ "$stage" == smoke ]]; then
    PYTHON="$py" OUT="$out" bash "$checkout/scripts/gpu-smoke.sh"
    exit $?
fi

exec > >(tee -a "$out/$stage.log") 2>&1
failed=()
# `all`: every step ends before the call's 600 s; another stage's steps keep their own limits
[[ "$stage" == all ]] && deadline=$(( SECONDS + ${ALL_BUDGET:-540} )) || deadline=""
MIN_LEFT=20
gpu_tests() {  # gpu_tests LIMIT_S
    step "$1" "pytest GPU cases" "$py" -m pytest "$checkout/tests/test_gpu_transports.py" \
        "$checkout/tests/test_gpu_correctness.py" "$checkout/tests/test_one_gpu.py" \
        "$checkout/tests/test_torch.py" -q -rs -p no:cacheprovider
}

if [[ "$stage" == pytest ]]; then
    gpu_tests 300
    step 150 "pytest benchmarks, nccl" "$py" -m pytest "$checkout/benchmarks" --benchmark-only -k allreduce \
        --perf-transports nccl --perf-sizes 4,1MiB,64MiB -q -rs -p no:cacheprovider
    finish gpu-first-contact "$out"
fi

if [[ "$stage" == all ]]; then
    if wanted smoke; then
        step 380 "gpu-smoke" env SMOKE_TIMEOUT=55 PYTHON="$py" OUT="$out" bash "$checkout/scripts/gpu-smoke.sh"
    fi
    if wanted nccl; then
        step 100 "nccl and torch-nccl, n=1" "$venv/bin/perfsuite" run --transports nccl,torch-nccl \
            --world-sizes 1 --sizes 4:256MiB --timeout 80 --max-contention off --json "$out/sweep.json"
        step 50 "nccl graph timing" "$venv/bin/perfsuite" run --transports nccl --world-sizes 1 \
            --device-timing graph --sizes 4:256MiB --timeout 40 --max-contention off --json "$out/graph.json"
    fi
else
    step 220 "perfsuite sweep" "$venv/bin/perfsuite" run --transports nccl,mpi-staged,gpu-ring,mpi-cuda \
        --world-sizes 1,2 --sizes 4:256MiB --timeout 90 --max-contention off --json "$out/sweep.json"
    step 60 "nccl graph timing" "$venv/bin/perfsuite" run --transports nccl --world-sizes 1 \
        --device-timing graph --sizes 4:256MiB --timeout 50 --max-contention off --json "$out/graph.json"
fi

# nccl-tests against the NCCL CuPy loads: the wheel's include/ and lib/, with the unversioned
# libnccl.so the linker wants made beside it in a scratch folder.
nccl_tests() {
    local home build
    home="$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')" || return 1
    build="$(mktemp -d)"
    mkdir -p "$build/nccl/lib"
    ln -s "$home/include" "$build/nccl/include"
    ln -s "$(ls "$home"/lib/libnccl.so* | head -1)" "$build/nccl/lib/libnccl.so"
    local cc
    cc="$("$py" -c 'import cupy; d = cupy.cuda.Device(0).compute_capability; print(d)')" || return 1
    make -s -j"$(nproc)" -C "$sources/src" BUILDDIR="$build/bin" NCCL_HOME="$build/nccl" \
        NVCC_GENCODE="-gencode=arch=compute_$cc,code=sm_$cc" "$build/bin/all_reduce_perf" || return 1
    export LD_LIBRARY_PATH="$home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    { "$build/bin/all_reduce_perf" -b 4 -e 256M -f 4 -g 1 -w 5 -n 50 &&
      echo "# the same, each size's iterations as one CUDA graph (-G 100)" &&
      "$build/bin/all_reduce_perf" -b 4 -e 256M -f 4 -g 1 -w 5 -n 100 -G 100; } | tee "$out/nccl-tests.log"
}
if [[ "$stage" == all ]] && ! wanted tests; then
    :
elif [[ -f "$sources/src/all_reduce.cu" ]]; then
    export -f nccl_tests
    export py sources out
    step "$([[ "$stage" == all ]] && echo 120 || echo 200)" "nccl-tests all_reduce_perf" bash -c nccl_tests
else
    echo "== nccl-tests: no sources in $sources (git clone --depth 1 https://github.com/NVIDIA/nccl-tests $sources, then carry it)"
    failed+=("nccl-tests (no sources)")
fi

side_by_side() {
echo "== nccl: perfsuite beside nccl-tests (one GPU, world size 1: busbw is 0 for both; time is the figure)"
"$py" - "$out/sweep.json" "$out/graph.json" "$out/nccl-tests.log" <<'EOF' || failed+=("side-by-side table")
import re
import sys
from pathlib import Path

from perfsuite.store.formats import load_run

ours = {}
for path, how in ((sys.argv[1], "batch"), (sys.argv[2], "graph")):
    if Path(path).exists():
        for s in load_run(path).samples():
            if s.case.transport in ("nccl", "torch-nccl") and s.case.world_size == 1:
                key = how if s.case.transport == "nccl" else "torch"
                ours[(key, s.case.size_bytes)] = s.info.get("latency_us")
theirs, block = {}, 0
log = Path(sys.argv[3])
for line in log.read_text().splitlines() if log.exists() else []:
    if line.startswith("# the same"):
        block = 1
    cells = line.split()
    # nccl-tests rows: size count type redop root time algbw busbw #wrong (out-of-place), then in-place
    if len(cells) >= 9 and cells[0].isdigit() and cells[2] == "float":
        theirs[("batch" if block == 0 else "graph", int(cells[0]))] = float(cells[5])
print(f"{'size':>12} {'perfsuite us':>14} {'nccl-tests us':>14} {'ratio':>7} {'graph: ours':>12} {'theirs':>10}"
      f" {'torch-nccl us':>14}")
for size in sorted({k[1] for k in ours} | {k[1] for k in theirs}):
    a, b = ours.get(("batch", size)), theirs.get(("batch", size))
    g, h = ours.get(("graph", size)), theirs.get(("graph", size))
    ratio = f"{a / b:.2f}" if a and b else "-"
    fmt = lambda x: "-" if x is None else f"{x:.2f}"
    print(f"{size:>12} {fmt(a):>14} {fmt(b):>14} {ratio:>7} {fmt(g):>12} {fmt(h):>10}"
          f" {fmt(ours.get(('torch', size))):>14}")
EOF
}
if [[ "$stage" != all ]] || wanted nccl || wanted tests; then
    side_by_side
fi

if [[ "$stage" == all ]]; then
    if wanted epoch; then
        step 90 "torch-nccl training epoch, n=1" "$venv/bin/perfsuite" run --benchmarks torch-epoch \
            --transports torch-nccl --world-sizes 1 --models small-cnn,resnet50 --timeout 80 \
            --max-contention off --json "$out/epoch.json"
    fi
    if wanted pytest; then
        gpu_tests 240
    fi
fi
finish gpu-first-contact "$out"

#!/usr/bin/env bash
# Every collective of the nccl transport beside nccl-tests on one GPU, in one call of the tool that
# lends the GPU machine (under 5 minutes, at most 8 files back from $OUT):
#
#   bash scripts/gpu-wheels.sh                       # here, once: .whl/ (mpich)
#   git clone --depth 1 https://github.com/NVIDIA/nccl-tests .nccl-tests   # here, once
#   bash scripts/gpu-collectives.sh                  # there (carry .whl and .nccl-tests)
#
# Steps, each under its own limit and all under BUDGET (default 270 s after the start):
#  1. the bring-up (scripts/gpu-bringup.sh, as gpu-first-contact.sh does: a venv over the machine's
#     CuPy, NCCL and PyTorch, perfsuite installed editable from this checkout);
#  2. nccl-tests' six *_perf binaries built from .nccl-tests with nvcc for this GPU only, against the
#     NCCL CuPy loads (the nvidia-nccl wheel);
#  3. ROUNDS (default 2) interleaved rounds, the tool that goes first turned each round, of
#     perfsuite run --benchmarks allreduce,all_gather,reduce_scatter,alltoall,broadcast,reduce
#     --transports nccl --world-sizes 1 --sizes 4:64MiB (default device timing: the native C loop
#     where it builds and loads, else the Python batch with its reason) and of each *_perf at
#     -b 4 -e 64M -f 4 -g 1 -w 5 -n 50 (both rotate their buffers within the sweep's largest);
# then one side-by-side table per collective: size, perfsuite's time (median over rounds, its
# timing named), nccl-tests' (median over rounds; out of place, but in place for broadcast, which
# perfsuite times on one buffer as MPI_Bcast has it), the ratio and each one's range.
#
# $OUT (default a new temp folder) gets at most 2 + 2 x ROUNDS files: bringup.log, collectives.log
# (everything printed), coll-R.json and nccl-tests-R.log per round.
#
# WHEELS (default .whl), VENV (default .venv-gpu), NCCL_TESTS (default .nccl-tests),
# NCCL_TESTS_BUILD (default /tmp/perfsuite-nccl-tests: a rerun on the same machine skips the build),
# PYTHON (the machine's, default python3), BUDGET (seconds, default 270) and ROUNDS (default 2)
# say where things are and how much; COLLECTIVES (default the six) and DTYPES (default float32;
# nccl-tests' -d for each: float, bfloat16, f8e4m3, ...) what is measured, and NAME (default
# collectives) what its log is called (gpu-fp8.sh runs this script for fp8 and bfloat16).
#
# Exit 0 done (a skipped world is no failure); 1 a step failed (its line says which). Without a
# GPU it says so in one line and exits 0.
set -uo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$checkout/scripts/gpu-steps.sh"
sources="${NCCL_TESTS:-$checkout/.nccl-tests}"
deadline=$(( SECONDS + ${BUDGET:-270} ))
name="${NAME:-collectives}"
begin "gpu-$name" "$name.log"
collectives="${COLLECTIVES:-allreduce,all_gather,reduce_scatter,alltoall,broadcast,reduce}"
dtypes="${DTYPES:-float32}"
declare -A PERF=([allreduce]=all_reduce [all_gather]=all_gather [reduce_scatter]=reduce_scatter
                 [alltoall]=alltoall [broadcast]=broadcast [reduce]=reduce)
declare -A DFLAG=([float32]=float [float64]=double [float16]=half [bfloat16]=bfloat16 [int32]=int32
                  [float8_e4m3]=f8e4m3 [float8_e5m2]=f8e5m2)
PERF_NAMES="" D_FLAGS=""
for c in ${collectives//,/ }; do PERF_NAMES+="${PERF[$c]} "; done
for d in ${dtypes//,/ }; do D_FLAGS+="${DFLAG[$d]} "; done

suite=("$venv/bin/perfsuite" run --benchmarks "$collectives" --dtypes "$dtypes"
       --transports nccl --world-sizes 1 --max-contention off --sizes 4:64MiB --timeout 40)

nccl_tests_run() {  # nccl_tests_run LOG: each *_perf at each -d, sum, 4 B to 64 MiB
    local bin home c d
    bin="$(cat "$out/.bin")"
    home="$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')" || return 1
    export LD_LIBRARY_PATH="$home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    for c in $PERF_NAMES; do
        for d in $D_FLAGS; do
            echo "## ${c}_perf $d sum"
            "$bin/${c}_perf" -b 4 -e 64M -f 4 -g 1 -w 5 -n 50 -d "$d" || return 1
        done
    done > "$1" 2>&1
}
have_tests=0
if [[ -f "$sources/src/all_reduce.cu" ]]; then
    export -f nccl_tests_build nccl_tests_run
    export py sources out PERF_NAMES D_FLAGS
    # shellcheck disable=SC2086  # one word per collective
    step 90 "nccl-tests: build $PERF_NAMES" bash -c 'nccl_tests_build "$@"' _ $PERF_NAMES
    [[ -f "$out/.bin" ]] && have_tests=1
else
    echo "== nccl-tests: no sources in $sources (git clone --depth 1 https://github.com/NVIDIA/nccl-tests $sources, then carry it)"
    failed+=("nccl-tests (no sources)")
fi
# Interleaved: each round runs both tools, the one that goes first turned each round, so a drift
# of the machine falls on both.
for (( r = 1; r <= ${ROUNDS:-2}; r++ )); do
    order=(perfsuite nccl-tests)
    (( r % 2 == 0 )) && order=(nccl-tests perfsuite)
    for tool in "${order[@]}"; do
        if [[ $tool == perfsuite ]]; then
            step 60 "round $r: perfsuite" "${suite[@]}" --json "$out/coll-$r.json"
        elif (( have_tests )); then
            step 45 "round $r: nccl-tests" bash -c 'nccl_tests_run "$0"' "$out/nccl-tests-$r.log"
        fi
    done
done
rm -f "$out/.bin"

echo "== side by side (one GPU, world size 1: busbw is 0 for both; time is the figure)"
"$py" - "$out" "$collectives" "$dtypes" <<'EOF' || failed+=("side-by-side tables")
import re
import statistics
import sys
from pathlib import Path

from perfsuite.store.formats import load_run

out, benches, dtypes = Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[3].split(",")
PERF = {"allreduce": "all_reduce_perf", "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf",
        "alltoall": "alltoall_perf", "broadcast": "broadcast_perf", "reduce": "reduce_perf"}
DFLAG = {"float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16", "int32": "int32",
         "float8_e4m3": "f8e4m3", "float8_e5m2": "f8e5m2"}  # ours: nccl-tests' -d
IN_PLACE = ("broadcast",)  # perfsuite times broadcast on one buffer: nccl-tests' in-place column
SIZES = [4 << (2 * k) for k in range(13)]  # -b 4 -e 64M -f 4

ours, timing, notes = {}, {}, []
for path in sorted(out.glob("coll-*.json")):
    for o in load_run(path).outcomes:
        if o.skipped or o.failure:
            notes.append(f"{path.name}: {o.world} {'skipped' if o.skipped else 'FAILED'}: {o.skipped or o.why}")
        facts = (o.result.extra.get("transport_facts") or {}) if o.result else {}
        if facts.get("timing_why"):
            notes.append(f"{path.name}: {o.world} not native-batch: {facts['timing_why']}")
        for s in o.samples():
            key = (s.case.benchmark, s.case.dtype)
            ours.setdefault((*key, s.case.size_bytes), []).append(s.info["latency_us"])
            timing[key] = s.info.get("timing", "?") + ("" if s.valid else " WRONG")
theirs, wrong = {}, {}
for path in sorted(out.glob("nccl-tests-*.log")):
    block = None
    for line in path.read_text().splitlines():
        m = re.match(r"## (\S+_perf) (\S+)", line)
        if m:
            bench = next(b for b, x in PERF.items() if x == m[1])
            block, k = (bench, next(t for t, x in DFLAG.items() if x == m[2])), 0
            continue
        cells = line.split()
        # rows: size count type redop root time algbw busbw #wrong (out of place), then in place
        if block and len(cells) >= 13 and cells[0].isdigit() and cells[1].isdigit() and k < len(SIZES):
            inplace = block[0] in IN_PLACE
            theirs.setdefault((*block, SIZES[k]), []).append((int(cells[0]), float(cells[9] if inplace else cells[5])))
            if cells[12 if inplace else 8] not in ("0", "N/A"):
                wrong[block] = wrong.get(block, 0) + 1
            k += 1
for note in notes:
    print("#", note)
fmt = lambda x: "-" if x is None else f"{x:.2f}"
span = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}" if xs else "-"
for bench in benches:
    for dtype in dtypes:
        key = (bench, dtype)
        place = "in place" if bench in IN_PLACE else "out of place"
        print(f"\n# {bench} {dtype} (-d {DFLAG[dtype]}, {place}; medians over rounds; nccl-tests' own size, which "
              f"rounds each rank's part to 16 bytes; perfsuite timing {timing.get(key, '-')}; nccl-tests rows "
              f"with #wrong: {wrong.get(key, 0)})")
        print(f"{'size':>10} {'theirs B':>10} {'perfsuite us':>13} {'range':>13} {'nccl-tests us':>14} "
              f"{'range':>13} {'ratio':>6}")
        for size in SIZES:
            a = ours.get((*key, size), [])
            b = [t for _, t in theirs.get((*key, size), [])]
            their_b = theirs.get((*key, size), [(None, None)])[0][0]
            ma, mb = (statistics.median(a) if a else None), (statistics.median(b) if b else None)
            ratio = f"{ma / mb:.2f}" if ma and mb else "-"
            print(f"{size:>10} {their_b if their_b is not None else '-':>10} {fmt(ma):>13} {span(a):>13} "
                  f"{fmt(mb):>14} {span(b):>13} {ratio:>6}")
EOF

finish "gpu-$name" "$out"

#!/usr/bin/env bash
# fp8 collectives on NCCL beside nccl-tests on one GPU, bfloat16 beside them as the known line, in
# one call of the tool that lends the GPU machine (under 5 minutes, at most 8 files back from $OUT):
#
#   bash scripts/gpu-wheels.sh                       # here, once: .whl/ (mpich)
#   git clone --depth 1 https://github.com/NVIDIA/nccl-tests .nccl-tests   # here, once
#   bash scripts/gpu-fp8.sh                          # there (carry .whl and .nccl-tests)
#
# Steps, each under its own limit and all under BUDGET (default 270 s after the start):
#  1. the bring-up (scripts/gpu-bringup.sh: a venv over the machine's CuPy, NCCL and PyTorch);
#  2. nccl-tests' all_reduce_perf, all_gather_perf and reduce_scatter_perf built for this GPU against
#     the NCCL CuPy loads (gpu-steps.sh's nccl_tests_build, as gpu-collectives.sh builds its six);
#  3. ROUNDS (default 2) interleaved rounds, the tool that goes first turned each round, of
#     perfsuite run --benchmarks allreduce,all_gather,reduce_scatter --transports nccl
#     --dtypes float8_e4m3,float8_e5m2,bfloat16 --world-sizes 1 --sizes 4:64MiB and of each *_perf
#     at -d f8e4m3, f8e5m2, bfloat16 with -b 4 -e 64M -f 4 -g 1 -w 5 -n 50;
# then one side-by-side table per collective and type: size, perfsuite's time (median over rounds),
# nccl-tests' (out of place, median over rounds, with its #wrong), the ratio and each one's range.
#
# What it shows: that NCCL >= 2.24 runs fp8 through perfsuite at all (a world skipped says why: an
# older NCCL, a GPU below sm90 for the reductions), that every fp8 result checked exactly (a WRONG
# beside a timing is a failed check), and whether a byte of fp8 costs what nccl-tests says.
#
# $OUT (default a new temp folder) gets at most 2 + 2 x ROUNDS files: bringup.log, fp8.log
# (everything printed), fp8-R.json and nccl-tests-fp8-R.log per round.
#
# WHEELS, VENV, NCCL_TESTS, NCCL_TESTS_BUILD, PYTHON, BUDGET and ROUNDS as in gpu-collectives.sh.
#
# Exit 0 done (a skipped world is no failure); 1 a step failed (its line says which). Without a
# GPU it says so in one line and exits 0, as every GPU script here does (gpu-steps.sh's begin).
set -uo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$checkout/scripts/gpu-steps.sh"
sources="${NCCL_TESTS:-$checkout/.nccl-tests}"
deadline=$(( SECONDS + ${BUDGET:-270} ))
begin gpu-fp8 fp8.log

# NCCL refuses to reduce fp8 below sm90 (nccl-tests leaves fp8 out there): say so once, up front.
sm="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
if [[ "$sm" =~ ^[0-9]+$ ]] && (( sm < 90 )); then
    echo "== this GPU is sm$sm: NCCL reduces fp8 only on sm90 or newer, so fp8 allreduce and reduce_scatter are skipped"
fi

suite=("$venv/bin/perfsuite" run --benchmarks allreduce,all_gather,reduce_scatter --transports nccl
       --dtypes float8_e4m3,float8_e5m2,bfloat16 --world-sizes 1 --max-contention off --sizes 4:64MiB
       --timeout 40)

nccl_tests_fp8() {  # nccl_tests_fp8 LOG: each *_perf at each type, sum, 4 B to 64 MiB
    local bin home c d
    bin="$(cat "$out/.bin")"
    home="$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')" || return 1
    export LD_LIBRARY_PATH="$home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    for c in all_reduce all_gather reduce_scatter; do
        for d in f8e4m3 f8e5m2 bfloat16; do
            echo "## ${c}_perf $d sum"
            "$bin/${c}_perf" -b 4 -e 64M -f 4 -g 1 -w 5 -n 50 -d "$d" || return 1
        done
    done > "$1" 2>&1
}
have_tests=0
if [[ -f "$sources/src/all_reduce.cu" ]]; then
    export -f nccl_tests_build nccl_tests_fp8
    export py sources out
    step 90 "nccl-tests: build three *_perf" bash -c 'nccl_tests_build "$@"' _ all_reduce all_gather reduce_scatter
    [[ -f "$out/.bin" ]] && have_tests=1
else
    echo "== nccl-tests: no sources in $sources (git clone --depth 1 https://github.com/NVIDIA/nccl-tests $sources, then carry it)"
    failed+=("nccl-tests (no sources)")
fi
# Interleaved, as gpu-collectives.sh: a drift of the machine falls on both tools.
for (( r = 1; r <= ${ROUNDS:-2}; r++ )); do
    order=(perfsuite nccl-tests)
    (( r % 2 == 0 )) && order=(nccl-tests perfsuite)
    for tool in "${order[@]}"; do
        if [[ $tool == perfsuite ]]; then
            step 60 "round $r: perfsuite" "${suite[@]}" --json "$out/fp8-$r.json"
        elif (( have_tests )); then
            step 45 "round $r: nccl-tests" bash -c 'nccl_tests_fp8 "$0"' "$out/nccl-tests-fp8-$r.log"
        fi
    done
done
rm -f "$out/.bin"

echo "== side by side (one GPU, world size 1: busbw is 0 for both; time is the figure)"
"$py" - "$out" <<'EOF' || failed+=("side-by-side tables")
import re
import statistics
import sys
from pathlib import Path

from perfsuite.store.formats import load_run

out = Path(sys.argv[1])
NAMES = {"allreduce": "all_reduce_perf", "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf"}
TYPES = {"float8_e4m3": "f8e4m3", "float8_e5m2": "f8e5m2", "bfloat16": "bfloat16"}  # ours: nccl-tests' -d
SIZES = [4 << (2 * k) for k in range(13)]  # -b 4 -e 64M -f 4

ours, timing, notes = {}, {}, []
for path in sorted(out.glob("fp8-*.json")):
    for o in load_run(path).outcomes:
        if o.skipped or o.failure:
            notes.append(f"{path.name}: {o.world} {'skipped' if o.skipped else 'FAILED'}: {o.skipped or o.why}")
        for s in o.samples():
            key = (s.case.benchmark, s.case.dtype)
            ours.setdefault((*key, s.case.size_bytes), []).append(s.info["latency_us"])
            timing[key] = s.info.get("timing", "?") + ("" if s.valid else " WRONG")
theirs, wrong = {}, {}
for path in sorted(out.glob("nccl-tests-fp8-*.log")):
    block = None
    for line in path.read_text().splitlines():
        m = re.match(r"## (\S+_perf) (\S+)", line)
        if m:
            bench = next(b for b, x in NAMES.items() if x == m[1])
            block, k = (bench, next(t for t, x in TYPES.items() if x == m[2])), 0
            continue
        cells = line.split()
        # rows: size count type redop root time algbw busbw #wrong (out of place), then in place
        if block and len(cells) >= 13 and cells[0].isdigit() and cells[1].isdigit() and k < len(SIZES):
            theirs.setdefault((*block, SIZES[k]), []).append((int(cells[0]), float(cells[5])))
            if cells[8] not in ("0", "N/A"):
                wrong[block] = wrong.get(block, 0) + 1
            k += 1
for note in notes:
    print("#", note)
fmt = lambda x: "-" if x is None else f"{x:.2f}"
span = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}" if xs else "-"
for bench in NAMES:
    for dtype in TYPES:
        key = (bench, dtype)
        print(f"\n# {bench} {dtype} (-d {TYPES[dtype]}; sum, out of place; medians over rounds; perfsuite "
              f"timing {timing.get(key, '-')}; nccl-tests rows with #wrong: {wrong.get(key, 0)})")
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

finish gpu-fp8 "$out"

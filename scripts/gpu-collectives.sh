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
#  2. perfsuite run --benchmarks allreduce,all_gather,reduce_scatter,alltoall,broadcast,reduce
#     --transports nccl --world-sizes 1 --sizes 4:64MiB --max-contention off (default device
#     timing: the native C loop where it builds and loads, else the Python batch with its reason);
#  3. nccl-tests' six *_perf binaries built from .nccl-tests with nvcc for this GPU only, against the
#     NCCL CuPy loads (the nvidia-nccl wheel), each run at -b 4 -e 64M -f 4 -g 1 -w 5 -n 50, and
#     all_reduce, reduce_scatter and reduce once more with -d bfloat16 -o avg -b 4 -e 16M -f 4;
#  4. the same perfsuite run with --device-timing batch (the batch issued from Python);
#  5. perfsuite with --dtypes bfloat16 --ops avg at 4, 256KiB and 16MiB;
# then one side-by-side table per collective: size, perfsuite's time (its timing named), the
# Python batch's, nccl-tests' out-of-place time, and the ratio of perfsuite's to nccl-tests'.
#
# $OUT (default a new temp folder) gets at most 6 files: bringup.log, collectives.log (everything
# printed), nccl-tests.log, coll.json, coll-batch.json, coll-bf16.json.
#
# WHEELS (default .whl), VENV (default .venv-gpu), NCCL_TESTS (default .nccl-tests),
# NCCL_TESTS_BUILD (default /tmp/perfsuite-nccl-tests: a rerun on the same machine skips the build),
# PYTHON (the machine's, default python3) and BUDGET (seconds, default 270) say where things are.
#
# Exit 0 done (a skipped world is no failure); 1 a step failed (its line says which). Without a
# GPU it says so in one line and exits 0.
set -uo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { echo "gpu-collectives: $*"; }
if ! nvidia-smi -L >/dev/null 2>&1; then
    say "no GPU here (nvidia-smi lists none); nothing to measure"
    exit 0
fi
out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-collectives.XXXXXX")}"
sources="${NCCL_TESTS:-$checkout/.nccl-tests}"
mkdir -p "$out"
deadline=$(( SECONDS + ${BUDGET:-270} ))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # a cluster's Open MPI, as root

if ! timeout -k 5 60 bash "$checkout/scripts/gpu-bringup.sh" "${WHEELS:-$checkout/.whl}" >"$out/bringup.log" 2>&1; then
    cat "$out/bringup.log"
    say "FAILED: the bring-up (its log is above and in $out/bringup.log)"
    exit 1
fi
exec > >(tee -a "$out/collectives.log") 2>&1
grep -v '^installed\|^kept' "$out/bringup.log" | tail -3
venv="${VENV:-$checkout/.venv-gpu}"
py="$venv/bin/python"

failed=()
step() {  # step LIMIT_S NAME COMMAND...: cut to what is left of BUDGET; a line before and after
    local limit=$1 name=$2 rc=0 left=$(( deadline - SECONDS ))
    shift 2
    if (( left < 15 )); then
        echo "== $name: not run, ${left} s left of the budget"
        failed+=("$name (no time left)")
        return
    fi
    (( limit <= left )) || limit=$left
    echo "== $name (limit ${limit} s)"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" || rc=$?
    echo "== $name: exit $rc after $(( SECONDS - t0 )) s"
    (( rc == 0 )) || failed+=("$name (exit $rc)")
}

suite=("$venv/bin/perfsuite" run --benchmarks allreduce,all_gather,reduce_scatter,alltoall,broadcast,reduce
       --transports nccl --world-sizes 1 --max-contention off)
step 75 "perfsuite, default timing" "${suite[@]}" --sizes 4:64MiB --timeout 40 --json "$out/coll.json"

# nccl-tests against the NCCL CuPy loads: the wheel's include/ and lib/, with the unversioned
# libnccl.so the linker wants made beside it in the build folder.
nccl_tests() {
    local home build cc bins=()
    home="$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')" || return 1
    cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
    [[ -n "$cc" ]] || cc="$("$py" -c 'import cupy; print(cupy.cuda.Device(0).compute_capability)')" || return 1
    build="${NCCL_TESTS_BUILD:-/tmp/perfsuite-nccl-tests}-sm$cc"
    mkdir -p "$build/nccl/lib"
    ln -sfn "$home/include" "$build/nccl/include"
    ln -sf "$(ls "$home"/lib/libnccl.so* | head -1)" "$build/nccl/lib/libnccl.so"
    for c in all_reduce all_gather reduce_scatter alltoall broadcast reduce; do bins+=("$build/bin/${c}_perf"); done
    make -s -j"$(nproc)" -C "$sources/src" BUILDDIR="$build/bin" NCCL_HOME="$build/nccl" \
        NVCC_GENCODE="-gencode=arch=compute_$cc,code=sm_$cc" "${bins[@]}" || return 1
    export LD_LIBRARY_PATH="$home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    for b in "${bins[@]}"; do
        echo "## $(basename "$b") float32 sum"
        "$b" -b 4 -e 64M -f 4 -g 1 -w 5 -n 50 || return 1
    done
    for c in all_reduce reduce_scatter reduce; do
        echo "## ${c}_perf bfloat16 avg"
        "$build/bin/${c}_perf" -d bfloat16 -o avg -b 4 -e 16M -f 4 -g 1 -w 5 -n 50 || return 1
    done
}
if [[ -f "$sources/src/all_reduce.cu" ]]; then
    export -f nccl_tests
    export py sources
    step 150 "nccl-tests: build six *_perf, run them" \
        bash -c 'nccl_tests 2>&1 | tee "$0/nccl-tests.log"; exit "${PIPESTATUS[0]}"' "$out"
else
    echo "== nccl-tests: no sources in $sources (git clone --depth 1 https://github.com/NVIDIA/nccl-tests $sources, then carry it)"
    failed+=("nccl-tests (no sources)")
fi

step 60 "perfsuite, --device-timing batch" "${suite[@]}" --sizes 4:64MiB --device-timing batch --timeout 35 \
    --json "$out/coll-batch.json"
step 40 "perfsuite, bfloat16 and avg" "${suite[@]}" --sizes 4,256KiB,16MiB --dtypes bfloat16 --ops avg \
    --timeout 25 --json "$out/coll-bf16.json"

echo "== side by side (one GPU, world size 1: busbw is 0 for both; time is the figure)"
"$py" - "$out" <<'EOF' || failed+=("side-by-side tables")
import re
import sys
from pathlib import Path

from perfsuite.formats import load_run

out = Path(sys.argv[1])
NAMES = {"allreduce": "all_reduce_perf", "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf",
         "alltoall": "alltoall_perf", "broadcast": "broadcast_perf", "reduce": "reduce_perf"}


def ours(name):
    """{(benchmark, dtype, nominal size): (us, timing, nccl-tests' size)}, and lines about worlds."""
    got, notes, path = {}, [], out / name
    if not path.exists():
        return got, [f"{name}: none (that step did not run or wrote nothing)"]
    run = load_run(path)
    for o in run.outcomes:
        if o.skipped or o.failure:
            notes.append(f"{name}: {o.world} {'skipped' if o.skipped else 'FAILED'}: {o.skipped or o.why}")
        facts = (o.result.extra.get("transport_facts") or {}) if o.result else {}
        if facts.get("timing_why"):
            notes.append(f"{name}: {o.world} timed by the Python batch, not the native loop: {facts['timing_why']}")
        for s in o.samples():
            i = s.info
            got[(s.case.benchmark, s.case.dtype, s.case.size_bytes)] = (
                i.get("latency_us"), i.get("timing", "?") + ("" if s.valid else " WRONG"), i.get("size_bytes"))
    return got, notes


theirs, block = {}, None  # {(binary, dtype): [(size, oop us), ...]} in the order printed
log = out / "nccl-tests.log"
for line in log.read_text().splitlines() if log.exists() else []:
    m = re.match(r"## (\S+) (\S+)", line)
    if m:
        block = (m[1], m[2])
        theirs[block] = []
        continue
    cells = line.split()
    # rows: size count type redop root time algbw busbw #wrong (out-of-place), then in-place
    if block and len(cells) >= 13 and cells[0].isdigit() and cells[1].isdigit():
        theirs[block].append((int(cells[0]), float(cells[5])))

default, n1 = ours("coll.json")
batch, n2 = ours("coll-batch.json")
bf16, n3 = ours("coll-bf16.json")
fmt = lambda x: "-" if x is None else f"{x:.2f}"
for note in n1 + n2 + n3:
    print("#", note)
for dtype, mine, nominal, ran in (("float32", default, [4 << (2 * k) for k in range(13)], "float32"),
                                  ("bfloat16", bf16, [4, 256 << 10, 16 << 20], "bfloat16")):
    for bench, binary in NAMES.items():
        rows = theirs.get((binary, ran), [])
        if not any(k[0] == bench and k[1] == dtype for k in mine) and not rows:
            continue
        op = " avg" if dtype == "bfloat16" and bench in ("allreduce", "reduce_scatter", "reduce") else ""
        print(f"\n# {bench} ({dtype}{op}, out of place; sizes: perfsuite's and nccl-tests' own, which "
              "rounds each rank's part to 16 bytes)")
        print(f"{'size':>10} {'ours B':>10} {'theirs B':>10} {'perfsuite us':>13} {'timing':>13} "
              f"{'py batch us':>12} {'nccl-tests us':>14} {'ratio':>6}")
        by_size = dict(zip([4 << (2 * k) for k in range(len(rows))], rows))  # nccl-tests -b 4 -f 4
        for size in nominal:
            us, timing, our_b = mine.get((bench, dtype, size), (None, "-", None))
            b = batch.get((bench, dtype, size), (None,))[0] if dtype == "float32" else None
            their_b, t = by_size.get(size, (None, None))
            ratio = f"{us / t:.2f}" if us and t else "-"
            print(f"{size:>10} {our_b if our_b is not None else '-':>10} {their_b if their_b is not None else '-':>10} "
                  f"{fmt(us):>13} {timing:>13} {fmt(b):>12} {fmt(t):>14} {ratio:>6}")
EOF

if (( ${#failed[@]} )); then
    printf '  - %s\n' "${failed[@]}"
    say "FAILED: ${#failed[@]} step(s); files in $out"
    exit 1
fi
say "done: files in $out"
exit 0

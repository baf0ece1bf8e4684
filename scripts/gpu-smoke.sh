#!/usr/bin/env bash
# Smoke test of perfsuite's GPU paths on a bare GPU machine: no network, no install.
#
#   bash scripts/gpu-smoke.sh            # PYTHON=/path/to/python picks the interpreter
#
# Runs perfsuite straight from this checkout (PYTHONPATH), because on such a machine
# `pip install -e .` cannot reach an index. Needs CuPy, mpi4py (with its MPI) and perfsuite's
# runtime dependencies importable by $PYTHON; TensorFlow is not needed. Checks that CuPy compiles
# a kernel and finds NCCL, says which MPI mpi4py loaded and whether it is CUDA-aware, then runs
# each transport at world sizes 1 and 2 through `perfsuite run` and prints one table.
#
# Exit 0: every world that could run here ran and validated (skips are listed with their reason),
#         or there is no GPU here at all (one line says why).
# Exit 1: CuPy cannot compile or finds no NCCL, a world failed or timed out, a sum was wrong, or
#         a rank was left running.
#
# SMOKE_TRANSPORTS  default nccl,mpi-cuda,mpi-staged,gpu-ring (host ones such as mpi also work)
# SMOKE_SIZES       default 4,1MiB,64MiB
# SMOKE_TIMEOUT     seconds for one transport's two worlds together, default 300
# OUT               where the results files and logs go, default a new temp folder
set -euo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$checkout${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python3}"
transports="${SMOKE_TRANSPORTS:-nccl,mpi-cuda,mpi-staged,gpu-ring}"
sizes="${SMOKE_SIZES:-4,1MiB,64MiB}"
run_timeout="${SMOKE_TIMEOUT:-300}"
# perfsuite's own per-world timeout fires first, so a hung world is killed whole and recorded as
# a failure in the results file; the outer `timeout` is only the backstop for the CLI itself.
world_timeout=$(( run_timeout / 2 - 10 ))
(( world_timeout >= 30 )) || world_timeout=30

say() { echo "gpu-smoke: $*"; }

gpus_listed() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep '^GPU ' || true
}

gpus_hidden() {
    [[ -v CUDA_VISIBLE_DEVICES ]] && [[ -z "${CUDA_VISIBLE_DEVICES// /}" || "${CUDA_VISIBLE_DEVICES// /}" == -1 ]]
}

# need_gpu() asks NVML and never imports CuPy, so a machine without a GPU leaves here cheaply.
# Host transports alone (SMOKE_TRANSPORTS=mpi) need no GPU: the worlds-and-table part then runs
# anywhere, which is how it is tested.
probe='
import sys
from perfsuite import transports
from perfsuite.errors import ConfigError
from perfsuite.transports.gpu import need_gpu

def on_device(name):
    try:
        return transports.spec(name).device == "gpu"
    except ConfigError:  # an unknown name: perfsuite run says so, with the names it knows
        return False

print((need_gpu() or "") if any(on_device(n) for n in sys.argv[1].split(",")) else "")
'
if ! reason="$("$PYTHON" -c "$probe" "$transports" 2>&1)"; then
    if [[ -z "$(gpus_listed)" ]]; then
        say "no GPU here: nvidia-smi lists none (and perfsuite does not import with $PYTHON: ${reason##*$'\n'})"
        exit 0
    fi
    echo "$reason"
    say "FAILED: a GPU is present, but perfsuite does not import from $checkout with $PYTHON"
    exit 1
fi
if [[ -n "$reason" ]]; then
    if gpus_hidden || [[ -z "$(gpus_listed)" ]]; then
        say "no GPU here: $reason"
        exit 0
    fi
    # nvidia-smi sees a GPU that perfsuite cannot use (no CuPy, no nvidia-ml-py, no mpi4py):
    # every GPU world would be skipped, and a smoke test that only skips proves nothing.
    say "FAILED: a GPU is present, but perfsuite would skip every GPU world: $reason"
    exit 1
fi

out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke.XXXXXX")}"
mkdir -p "$out"
problems=()
# Every rank inherits this token, so the leftover check below finds our ranks and nobody else's.
export GPU_SMOKE_TOKEN="gpu-smoke-$$-$RANDOM$RANDOM"

if [[ -n "$(gpus_listed)" ]]; then
    echo "== GPUs"
    gpus_listed
    echo "== CuPy"
    # Compiling a kernel is the check that matters: without NVRTC CuPy imports fine and every
    # world is skipped at its first fill or add.
    if ! "$PYTHON" - <<'EOF'
import sys
import warnings

import cupy

props = cupy.cuda.runtime.getDeviceProperties(0)
name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
print(f"CuPy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, "
      f"driver {cupy.cuda.runtime.driverGetVersion()}, device 0: {name}")
bad = 0
try:
    print("kernel compile: ok,", (cupy.ones(4) + 1).get())
except Exception as exc:  # NVRTC missing or broken: CompileException, RuntimeError, ImportError
    print(f"kernel compile: FAILED ({type(exc).__name__}): {exc}")
    print("  CuPy needs NVRTC: install cupy-cuda12x[ctk] (CuPy >= 14) or a CUDA toolkit")
    bad = 1
# CuPy turns a missing libnccl into a warning and nccl.available = False: keep the warning's text.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from cupy.cuda import nccl
if getattr(nccl, "available", False):
    print("NCCL: found, version", nccl.get_version())
else:
    why = "; ".join(str(w.message) for w in caught) or "cupy.cuda.nccl.available is False"
    print(f"NCCL: NOT found ({why})")
    print("  CuPy loads NCCL from the nvidia-nccl-cu12 (or -cu13) wheel")
    bad = 1
sys.exit(bad)
EOF
    then
        problems+=("CuPy cannot compile a kernel or finds no NCCL (see above)")
    fi
fi

echo "== MPI"
"$PYTHON" - <<'EOF'
import mpi4py

mpi4py.rc.initialize = False  # the library's name needs no MPI_Init (nor an mpiexec around it)
from mpi4py import MPI

print(f"mpi4py {mpi4py.__version__} loaded: {MPI.Get_library_version().splitlines()[0].strip()}")
EOF
# mpi_cuda_aware() asks the libmpi inside an initialised rank, so it runs in a 1-rank world with
# the mpiexec perfsuite's worlds use (the one beside $PYTHON first, then PATH).
mpiexec="$("$PYTHON" -c 'from perfsuite.launch.world import default_program; print(default_program("mpiexec"))')"
aware_rc=0
timeout -k 5 60 "$mpiexec" -n 1 "$PYTHON" -c '
from perfsuite.transports.cuda_aware import mpi_cuda_aware
aware, how = mpi_cuda_aware()
print("CUDA-aware:", "yes" if aware else "no", f"({how})")' >"$out/cuda-aware.log" 2>&1 || aware_rc=$?
cat "$out/cuda-aware.log"
(( aware_rc == 0 )) ||
    problems+=("a 1-rank world ($mpiexec -n 1) exited $aware_rc before saying whether MPI is CUDA-aware")

runs=()
IFS=, read -r -a names <<<"$transports"
for transport in "${names[@]}"; do
    echo "== $transport at world sizes 1,2 (log: $out/$transport.log)"
    rc=0
    timeout -k 15 "$run_timeout" "$PYTHON" -m perfsuite.cli run --transports "$transport" \
        --world-sizes 1,2 --sizes "$sizes" --json "$out/$transport.json" \
        --max-contention off --timeout "$world_timeout" >"$out/$transport.log" 2>&1 || rc=$?
    if (( rc != 0 )); then
        echo "perfsuite run exited $rc; its last lines:"
        tail -n 15 "$out/$transport.log"
    fi
    runs+=("$transport:$rc")
done

ours() {
    local pid
    for pid in $(pgrep -f perfsuite.worker || true); do
        if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "GPU_SMOKE_TOKEN=$GPU_SMOKE_TOKEN"; then
            ps -o pid=,args= -p "$pid" || true
        fi
    done
}
# A killed world must not leave ranks behind holding a GPU; give a last kill a moment to land.
for _ in 1 2 3 4 5; do
    left="$(ours)"
    [[ -z "$left" ]] && break
    sleep 1
done
if [[ -n "$left" ]]; then
    echo "== still running after the runs:"
    echo "$left"
    problems+=("ranks were left running")
fi

echo "== results (files in $out)"
table_rc=0
SMOKE_TIMEOUT="$run_timeout" "$PYTHON" - "$out" "${runs[@]}" <<'EOF' || table_rc=$?
import os
import sys
from pathlib import Path

from perfsuite.errors import PerfsuiteError
from perfsuite.formats import load_run
from perfsuite.model import format_size

out, runs = Path(sys.argv[1]), sys.argv[2:]
timeout_s = os.environ["SMOKE_TIMEOUT"]
rows, failed = [], []


def num(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def note(transport, n, text):
    """A world with no numbers: its reason goes last, where its length shifts no column."""
    rows.append((transport, n, "-", "-", "-", text))


for entry in runs:
    transport, rc = entry.rsplit(":", 1)
    rc = int(rc)
    path = out / f"{transport}.json"
    before = len(failed)
    try:
        run = load_run(path) if path.exists() else None
    except PerfsuiteError as exc:
        run, why = None, f"unreadable results file: {exc}"
    else:
        why = (f"perfsuite run timed out after {timeout_s} s" if rc in (124, 137)
               else f"perfsuite run exited {rc}") + ", no results file"
    if run is None:
        note(transport, "-", f"FAILED: {why}")
        failed.append(transport)
        continue
    for o in sorted(run.outcomes, key=lambda o: o.spec.world_size):
        n = o.spec.world_size
        if o.skipped is not None:
            note(transport, n, f"skipped: {o.skipped}")
            continue
        copy = (o.result.extra or {}).get("device_copy_GBps") if o.result is not None else None
        for s in o.samples():
            rows.append((transport, n, format_size(s.case.size_bytes or 0),
                         num(s.info.get("busbw_GBps"), 3), num(s.info.get("latency_us"), 2),
                         "OK" if s.valid else "WRONG", num(copy, 1)))
            if not s.valid:
                failed.append(f"{transport}-n{n}")
        if o.failure is not None:
            note(transport, n, f"FAILED: {o.why}")
            failed.append(f"{transport}-n{n}")
    if run.interrupted:
        note(transport, "-", f"FAILED: interrupted by {run.interrupted}")
        failed.append(transport)
    # The CLI exits non-zero on a failure; a run of skips alone is no failure, whatever it exits.
    skips_only = not run.results and not run.failures
    if rc != 0 and not skips_only and len(failed) == before:
        note(transport, "-", f"FAILED: perfsuite run exited {rc}")
        failed.append(transport)

head = ("transport", "n", "size", "busbw(GB/s)", "latency(us)", "valid", "D2D-copy(GB/s)")
measured = [r for r in rows if len(r) == len(head)]
widths = [max(len(str(r[i])) for r in [head, *measured]) for i in range(len(head))]
for r in [head, *rows]:
    cells = [f"{str(c):<{w}}" if i < 3 else f"{str(c):>{w}}" for i, (c, w) in enumerate(zip(r, widths))]
    print("  ".join(cells if len(r) == len(head) else cells[:-1] + [str(r[-1])]).rstrip())
if failed:
    print("failed:", ", ".join(dict.fromkeys(failed)))
sys.exit(1 if failed else 0)
EOF
(( table_rc == 0 )) || problems+=("a world failed, timed out or returned a wrong sum (see the table)")

if (( ${#problems[@]} )); then
    printf '  - %s\n' "${problems[@]}"
    say "FAILED"
    exit 1
fi
echo "(a skipped world is no failure: its reason is in the table)"
say "passed"

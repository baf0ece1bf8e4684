# Sourced by .ci/run (bash, set -euo pipefail): phases that print their time as they end, and
# steps that run in the background beside them.
#
#   begin NAME; ...; end        prints "# phase NAME took N s; cores busy M s of CPU (K of C on average)":
#                               the machine's busy time over the phase (/proc/stat, every process,
#                               background steps too), so a phase bound by the cores shows as one
#   bg NAME FUNCTION            runs FUNCTION in the background: errexit on, as in the foreground,
#                               its output to its own log, in a process group of its own
#   await NAME...               waits for each, prints its log (ending "# phase NAME took N s (in
#                               the background)") and how long this script waited; a step that
#                               failed fails the script here (exit 1, "NAME failed (exit N; ...)").
#                               A step that only warns says so inside its function and exits 0.
# On exit, steps not awaited (the script failed before it waited for them) are stopped, their
# whole process group, so nothing of a failed CI run keeps installing behind it.

cpu_busy() {  # the machine's busy CPU time so far, in clock ticks: /proc/stat less idle and iowait
    awk 'NR == 1 { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat 2>/dev/null || echo 0
}
phase_name="" phase_t0=$(date +%s) phase_cpu0=0
begin() { phase_name=$1 phase_t0=$(date +%s) phase_cpu0=$(cpu_busy); }
end() {
    local s=$(( $(date +%s) - phase_t0 )) ticks=$(( $(cpu_busy) - phase_cpu0 ))
    awk -v n="$phase_name" -v s="$s" -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v c="$(nproc)" 'BEGIN {
        printf "# phase %s took %d s; cores busy %d s of CPU (%.2f of %d on average)\n", n, s, t / hz, s ? t / hz / s : 0, c }'
}

bg_logs=$(mktemp -d)
declare -A bg_pid=()
bg() {  # bg NAME FUNCTION
    local name=$1 fn=$2
    set -m  # only while starting it: its own process group, for stop_background
    (
        t0=$(date +%s)
        # Started asynchronously, so errexit holds inside it (in `fn || ...` bash would ignore it).
        "$fn" &
        rc=0
        wait $! || rc=$?
        echo "# phase $name took $(( $(date +%s) - t0 )) s (in the background)"
        exit "$rc"
    ) >"$bg_logs/$name.log" 2>&1 &
    bg_pid[$name]=$!
    set +m
}
await() {  # await NAME...
    local name rc t0 waited
    for name in "$@"; do
        rc=0 t0=$(date +%s)
        wait "${bg_pid[$name]}" || rc=$?
        waited=$(( $(date +%s) - t0 ))
        unset "bg_pid[$name]"
        cat "$bg_logs/$name.log"
        (( waited == 0 )) || echo "# waited $waited s for $name"
        if (( rc != 0 )); then
            echo "$name failed (exit $rc; its log is above)" >&2
            exit 1
        fi
    done
}
stop_background() {
    local pid
    for pid in "${bg_pid[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
    rm -rf "$bg_logs"
}
trap stop_background EXIT

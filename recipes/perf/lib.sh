# Sourced by pr-gate.sh, stack-gate.sh and nightly.sh: the settings they share, and how a gate is
# judged from what `perfsuite ab --json "$PERF_RESULTS/ab.json"` left. Each setting is an
# environment variable, with a default where it can have one:
#
#   PERF_BENCHMARKS  (required) your benchmark: its name (entry point), module or .py file
#   PERF_ARGS        more perfsuite ab options, split like a shell's words, e.g.
#                    --world-sizes 2 --transports torch-nccl --container-args '--device nvidia.com/gpu=all'
#   PERF_BUDGET      seconds of pairs at most [900]; pairs stop once every case is decided
#   PERF_MAX_PAIRS   pairs at most [100]
#   PERF_CONTAINER_RUNTIME  podman, docker, apptainer or singularity [the first on PATH]
#   PERF_RESULTS     where ab.json (the A/B file) and ab.txt (its table) go [results]
# shellcheck shell=bash disable=SC2034  # perf_args, perf_runtime: the scripts read them
PERF_RESULTS=${PERF_RESULTS:-results}
PERF_BUDGET=${PERF_BUDGET:-900}
PERF_MAX_PAIRS=${PERF_MAX_PAIRS:-100}

perf_bad() {  # bad input: one line, exit 2 (as every perfsuite command)
  echo "$(basename "$0"): $*" >&2
  exit 2
}

[ -n "${PERF_BENCHMARKS:-}" ] || perf_bad "set PERF_BENCHMARKS: your benchmark's name, module or .py file"
perf_args=()
if [ -n "${PERF_ARGS:-}" ]; then
  words=$(python3 -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "$PERF_ARGS" 2>/dev/null) \
    || perf_bad "PERF_ARGS cannot be split like a shell's words: $PERF_ARGS"
  [ -z "$words" ] || mapfile -t perf_args <<< "$words"
fi
perf_runtime=()
[ -z "${PERF_CONTAINER_RUNTIME:-}" ] || perf_runtime=(--container-runtime "$PERF_CONTAINER_RUNTIME")
mkdir -p "$PERF_RESULTS"
rm -f "$PERF_RESULTS/ab.json" "$PERF_RESULTS/ab.txt"  # an earlier run's file never passes for this one

# perf_judge STATUS TITLE [HINT]: exits with ab's status (STATUS), but where the A/B file holds no
# verdicts, 3 for a 0 (a gate that compared nothing has not passed) and 4 for a 1 (no regression
# without a verdict: what started ab failed). Writes the A/B table to $GITHUB_STEP_SUMMARY where
# it is set, with HINT on a regression or an undecided case. A 3 whose only cause is new cases (a
# pull request that adds a benchmark) is a 0: they are measured and shown, with nothing to fail.
perf_judge() {
  local status=$1 title=$2 hint=${3:-} says new
  # "nothing": no verdict and no new case; N: N new cases (only B's tree declares them: a pull
  # request that adds a benchmark), no missing one and no verdict UNKNOWN, so ab's 3 under
  # --strict is theirs alone; empty otherwise
  new=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); v, new = d.get("verdicts") or [], d.get("new") or []
ok = new and not d.get("missing") and all(x.get("kind") != "UNKNOWN" for x in v)
print("nothing" if not (v or new) else len(new) if ok else "")' "$PERF_RESULTS/ab.json" 2>/dev/null || echo nothing)
  if [ "$new" = nothing ]; then
    echo "::error::nothing was compared ($PERF_RESULTS/ab.json holds no verdicts): a gate that compared nothing has not passed"
    if [ "$status" -eq 0 ]; then status=3; fi
    if [ "$status" -eq 1 ]; then status=4; fi
    new=""
  elif [ -n "$new" ] && [ "$status" -eq 3 ]; then
    status=0
  else
    new=""
  fi
  case $status in
    0) says="no regression${new:+; $new new case(s) measured at B only (nothing at A to compare them with)}" ;;
    1) says="REGRESSION: B is slower than A beyond the tolerance (DIFFERENT)" ;;
    2) says="bad input: an option, an image, or a commit that does not install" ;;
    3) says="UNKNOWN: not every case was decided (raise PERF_BUDGET or PERF_MAX_PAIRS, or re-run)" ;;
    4) says="a world failed: the comparison is incomplete" ;;
    *) says="stopped (exit $status)" ;;
  esac
  case $status in 1 | 3) ;; *) hint="" ;; esac
  echo "$title: $says${hint:+. $hint}"
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    { echo "## $title: $says"
      echo '```text'
      cat "$PERF_RESULTS/ab.txt" 2>/dev/null || echo "(no output)"
      echo '```'
      if [ -n "$hint" ]; then echo "$hint"; fi
    } >> "$GITHUB_STEP_SUMMARY"
  fi
  exit "$status"
}

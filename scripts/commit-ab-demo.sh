#!/usr/bin/env bash
# Arms from commits, measured: a clone of this checkout gets a commit that makes the ring
# allocate its sum (a temporary per reduction instead of an add in place) buried among six
# harmless ones; then
#   1. perfsuite ab --a-ref BAD~1 --b-ref BAD, cold (both environments built), then cached, then
#      cached with --stop-on-regression (as a gate that only needs the exit status);
#   2. perfsuite bisect --good BASE --bad HEAD, which must name the ring commit.
# Each step prints its exit status and wall time. Usage: bash scripts/commit-ab-demo.sh [WORKDIR]
# (default: a new temporary folder, kept for reading). Run it with the perfsuite you want to
# drive the arms (the venv's python on PATH or PYTHON=...).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d /tmp/commit-ab-demo.XXXXXX)}
PYTHON=${PYTHON:-python}
export GIT_AUTHOR_NAME=demo GIT_AUTHOR_EMAIL=demo@example.org GIT_COMMITTER_NAME=demo GIT_COMMITTER_EMAIL=demo@example.org
repo="$work/repo"
rm -rf "$repo" "$work/envs"
git clone -q --no-local "$here" "$repo"
cd "$repo"
harmless() { echo "<!-- harmless change $1 -->" >> docs/design.md; git commit -qam "docs: harmless change $1"; }
base=$(git rev-parse HEAD)
harmless 1; harmless 2; harmless 3
"$PYTHON" - <<'EOF'
from pathlib import Path
p = Path("perfsuite/transports/ring.py")
old = "        np.add(dst, src, out=dst)\n"
assert old in p.read_text(), "the ring's in-place add is not where this demo expects it"
p.write_text(p.read_text().replace(old, "        dst[...] = dst + src  # allocates the sum\n"))
EOF
git commit -qam "ring: reduce through a temporary"
bad=$(git rev-parse HEAD)
harmless 4; harmless 5; harmless 6
echo "== clone $repo: ring commit ${bad:0:10} among 6 harmless ones after ${base:0:10}"
common=(--transports ring --sizes "4,16MiB" --world-sizes 2 --env-dir "$work/envs")
step() {
    local name=$1; shift
    local t0 rc=0
    t0=$EPOCHREALTIME
    "$PYTHON" -P -m perfsuite.faces.cli "$@" || rc=$?
    printf '== %s: exit %s, %s s\n' "$name" "$rc" "$(awk "BEGIN { printf \"%.0f\", $EPOCHREALTIME - $t0 }")"
}
step "ab cold" ab "${common[@]}" --a-ref "$bad~1" --b-ref "$bad" --json "$work/ab-cold.json"
step "ab cached" ab "${common[@]}" --a-ref "$bad~1" --b-ref "$bad" --json "$work/ab-cached.json"
step "ab cached, --stop-on-regression" ab "${common[@]}" --a-ref "$bad~1" --b-ref "$bad" --stop-on-regression \
    --json "$work/ab-stop.json"
step "bisect" bisect "${common[@]}" --good "$base" --bad HEAD
echo "== the ring commit was ${bad:0:10}; files in $work"

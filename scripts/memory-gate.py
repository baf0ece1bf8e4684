#!/usr/bin/env python3
"""The stored gate on peak memory, on real worlds: one baseline session (``--baseline-update``,
10 rounds) of a user step that keeps a cache, then separate ``perfsuite run --compare`` sessions
with the cache unchanged (how often is memory wrongly DIFFERENT?), grown by 20% of the step's
peak, and doubled (how often is it found?). The unit of replication is the session.

    python scripts/memory-gate.py [SAME=10] [CHANGED=5]
"""
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SAME = int(sys.argv[1]) if len(sys.argv) > 1 else 10
CHANGED = int(sys.argv[2]) if len(sys.argv) > 2 else 5
STEP = '''import os
import numpy as np
import perfsuite

@perfsuite.benchmark(world_sizes=[2], transports=["mpi"])
def cached(world):
    cache = np.ones(int(float(os.environ.get("CACHE_MIB", "64")) * (1 << 20)) // 8)
    def step():
        cache[0] += 1
    return step
'''


def session(folder: Path, cache_mib: float, *args: str) -> tuple[int, dict]:
    """(exit status, the peak_mem row of the verdict table: status and change)."""
    got = subprocess.run([sys.executable, "-m", "perfsuite", "run", "--benchmarks", "steps.py", *args],
                         cwd=folder, capture_output=True, text=True, env={**os.environ, "CACHE_MIB": str(cache_mib)})
    for line in got.stdout.splitlines():
        cells = line.split()
        if len(cells) > 5 and cells[2] == "peak_mem":
            change = float(cells[5].rstrip("%")) / 100 if cells[5].endswith("%") else None
            return got.returncode, {"status": cells[0].lower(), "change": change}
    return got.returncode, {}


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="memgate-"))
    (folder / "steps.py").write_text(STEP)
    rc, _ = session(folder, 64, "--baseline-update")
    assert rc == 0, rc
    # the step's own peak at 64 MiB is about 113 MiB a rank: +20% of it is about 22.6 MiB more cache
    for label, cache, n in (("unchanged", 64, SAME), ("+20% of the peak", 64 + 22.6, CHANGED), ("cache doubled", 128, CHANGED)):
        seen = collections.Counter()
        codes = collections.Counter()
        changes = []
        for _ in range(n):
            rc, v = session(folder, cache, "--compare")
            seen[v.get("status", "none")] += 1
            codes[rc] += 1
            if v.get("change") is not None:
                changes.append(v["change"])
        spread = f"{min(changes):+.1%}..{max(changes):+.1%}" if changes else "-"
        print(f"{label:18} sessions {n:>3}  peak_mem verdicts {dict(seen)}  exit {dict(codes)}  change {spread}",
              flush=True)


if __name__ == "__main__":
    main()

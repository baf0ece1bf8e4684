#!/usr/bin/env python3
"""Peak memory's drift between sessions, measured: the same worlds in SESSIONS separate
``perfsuite run`` sessions (ROUNDS rounds each); per case, each session's level (the median of its
rounds) and how far the levels move: their range and the SD of their logs. The unit of
replication is the session. What ``perfsuite/records/memory.py``'s declared DRIFT rests on.

    python scripts/memory-drift.py [SESSIONS=6] [ROUNDS=3]

Each session runs a user step that keeps a 64 MiB cache and a no-op step (mpi and torch-gloo,
2 ranks: the harness's own memory), and gpt-tiny under DDP and FSDP over gloo at 2 ranks.
"""
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from perfsuite.records.model import Case

SESSIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
STEPS = '''import numpy as np
import perfsuite

@perfsuite.benchmark(world_sizes=[2], transports=["mpi"])
def cached(world):
    cache = np.ones(64 * (1 << 20) // 8)
    def step():
        cache[0] += 1
    return step

@perfsuite.benchmark(world_sizes=[2], transports=["mpi", "torch-gloo"])
def noop(world):
    return lambda: None
'''
RUNS = (["--benchmarks", "{steps}"],
        ["--benchmarks", "torch-epoch", "--transports", "torch-gloo", "--models", "gpt-tiny", "--parallel",
         "ddp,fsdp", "--world-sizes", "2", "--iters", "6", "--warmup", "2", "--yardsticks", "off"])


def levels(path: Path) -> dict[str, float]:
    doc = json.loads(path.read_text())
    out = {}
    for res in doc["results"]:
        for s in res["samples"]:
            rounds = (s["info"].get("round_values") or {}).get("peak_mem_MiB")
            if rounds:
                out[Case.from_dict(s["case"]).name] = statistics.median(rounds)
    return out


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="memdrift-"))
    steps = tmp / "steps.py"
    steps.write_text(STEPS)
    by_case: dict[str, list[float]] = {}
    for k in range(SESSIONS):
        for i, args in enumerate(RUNS):
            out = tmp / f"s{k}-{i}.json"
            cmd = [sys.executable, "-m", "perfsuite", "run", *[a.format(steps=steps) for a in args],
                   "--rounds", str(ROUNDS), "--json", str(out), "--max-contention", "off"]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            for case, level in levels(out).items():
                by_case.setdefault(case, []).append(level)
        print(f"# session {k + 1} of {SESSIONS} done", flush=True)
    print(f"{'case':44} {'sessions':>8} {'median MiB':>11} {'range':>8} {'SD(log)':>8}")
    for case, v in by_case.items():
        sd = statistics.stdev(math.log(x) for x in v) if len(v) > 1 else float("nan")
        print(f"{case:44} {len(v):>8} {statistics.median(v):>11.1f} {max(v) / min(v) - 1:>8.2%} {sd:>8.2%}")


if __name__ == "__main__":
    main()

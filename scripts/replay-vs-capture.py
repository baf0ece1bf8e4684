#!/usr/bin/env python3
"""A captured job's own communication time beside its replay's, on this machine (issue 55).

    .venv/bin/python scripts/replay-vs-capture.py [--world-sizes 2,4] [--captures 3]
        [--transports torch-gloo,mpi] [--json FILE]

For each world size, ``--captures`` times: recipes/replay/train_moe.py (DDP + FSDP2 + an MoE
layer's uneven all_to_all on expert-parallel pairs) runs 4 steps under ``perfsuite capture
--skip-calls 11`` (set-up and the first step left out: the window is 3 steps), then the capture
is replayed on each transport (``perfsuite run --benchmarks replay``, default iterations; the
transports' order alternates between captures).

Per capture: the job's own communication time over the window, from the profiler (the time
during which any of gloo's work events ran, the largest rank's), and the window's host span;
the replay's window per iteration (p50, slowest rank) and its kinds' times. Printed: medians
over captures with their range, and the replay / captured ratio per capture (median, range).
The unit of replication is the capture (a fresh job each time).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "recipes" / "replay" / "train_moe.py"
BIN = Path(sys.executable).parent


def perfsuite(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([str(BIN / "perfsuite"), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=1800)


def mid(values: list[float]) -> str:
    return f"{statistics.median(values):.4g} [{min(values):.4g}, {max(values):.4g}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world-sizes", default="2,4")
    ap.add_argument("--captures", type=int, default=3)
    ap.add_argument("--transports", default="torch-gloo,mpi")
    ap.add_argument("--json")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from perfsuite.records import trace as traces

    transports = args.transports.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.world_sizes.split(",")):
            for k in range(args.captures):
                out = Path(tmp) / f"n{n}-{k}"
                r = perfsuite("capture", "-o", str(out), "--skip-calls", "11", "--", str(BIN / "torchrun"),
                              "--nproc-per-node", str(n), str(JOB), env={"STEPS": "4", "OMP_NUM_THREADS": "1"})
                if r.returncode != 0:
                    print(r.stdout[-2000:], r.stderr[-2000:])
                    return 1
                t = traces.load(str(out))
                row = {"world_size": n, "capture": k, "captured_comm_us": max(rt.work_us for rt in t.ranks),
                       "captured_span_us": max(rt.span_us for rt in t.ranks),
                       "calls": max(len(rt.comms) for rt in t.ranks), "replay": {}}
                for transport in (transports if k % 2 == 0 else transports[::-1]):
                    js = Path(tmp) / f"r-{n}-{k}-{transport}.json"
                    r = perfsuite("run", "--benchmarks", "replay", "--trace", str(out), "--transports", transport,
                                  "--json", str(js), *(["--iters", "5", "--warmup", "1"] if transport == "mpi" and n > 2 else []))
                    sample = json.loads(js.read_text())["results"][0]["samples"][0]
                    assert sample["valid"], r.stdout[-2000:]
                    row["replay"][transport] = {"window_us": sample["metrics"]["step_us"]["value"],
                                                "kinds": {kk: v["us"] for kk, v in sample["info"]["kinds"].items()}}
                rows.append(row)
                print(f"n={n} capture {k}: captured comm {row['captured_comm_us']:.0f} us of "
                      f"{row['captured_span_us']:.0f} us; " + ", ".join(
                          f"{t} {v['window_us']:.0f} us" for t, v in row["replay"].items()), flush=True)
    print("\n| ranks | calls | captured: comm per window (us) | captured: window span (us) | transport | "
          "replay: window per iteration (us) | replay / captured comm |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in sorted({r["world_size"] for r in rows}):
        mine = [r for r in rows if r["world_size"] == n]
        for transport in transports:
            replay = [r["replay"][transport]["window_us"] for r in mine]
            ratio = [r["replay"][transport]["window_us"] / r["captured_comm_us"] for r in mine]
            print(f"| {n} | {mine[0]['calls']} | {mid([r['captured_comm_us'] for r in mine])} | "
                  f"{mid([r['captured_span_us'] for r in mine])} | {transport} | {mid(replay)} | {mid(ratio)} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

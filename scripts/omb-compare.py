#!/usr/bin/env python3
"""perfsuite's mpi transport against OSU Micro-Benchmarks' matching benchmark, per collective and
size, in interleaved rounds on this machine.

    .venv/bin/python scripts/omb-compare.py OMB_BIN_DIR [--benchmarks all_gather,...]
        [--world-sizes 2] [--sizes 4:64MiB] [--rounds 5] [--iters omb|ITERS:WARMUP] [--json FILE]

OMB_BIN_DIR holds osu_allreduce, osu_allgather, osu_reduce_scatter, osu_alltoall, osu_bcast,
osu_reduce and osu_alltoallv (OMB 7.4's c/mpi/collective/blocking, built against the same MPI as
perfsuite); only the binaries of the collectives asked for are needed.

Each round visits every collective, in an order that alternates between rounds (forward, then
reversed), and for each runs OMB's binary once and ``perfsuite run`` once, the tool that goes first
alternating too, so a spell of the machine (4 B at ~0.3 us in one, ~1 us in the other, minutes
each) falls on both tools alike. Both time float32 (OMB ``-T mpi_float``), out of place, root 0, op
sum, at the same iterations:

* ``--iters omb`` (default): OMB's own defaults for its collectives (c/util/osu_util.h:
  COLL_LOOP_SMALL 1000 / COLL_SKIP_SMALL 100 up to LARGE_MESSAGE_SIZE 8192 B of OMB's size,
  COLL_LOOP_LARGE 100 / COLL_SKIP_LARGE 10 above it), given to both: OMB as ``-i/-x``, perfsuite as
  ``--iters/--warmup``. perfsuite's iterations are one number per run, so each tool runs twice per
  collective per round (the sizes up to 8 KiB of OMB's size, then those above).
* ``--iters 200:20``: those counts for every size, one run of each tool per collective per round.

Sizes are perfsuite's (``--sizes``: the case's size, as ``perfsuite run --sizes``). They are
matched to OMB's rows by OMB's message size, perfsuite's ``omb_size_bytes`` (docs/collectives.md),
which is what each OMB benchmark's source calls ``size`` (OMB 7.4):

* osu_allreduce, osu_reduce, osu_bcast: the whole buffer (``num_elements = size / type size``,
  sendbuf and recvbuf of that size; bcast one buffer).
* osu_allgather: one rank's part: MPI_Allgather(sendbuf, size, ...); recvbuf is ``size x numprocs``.
* osu_alltoall: one peer's part: MPI_Alltoall(sendbuf, size, ...); both buffers ``size x numprocs``.
* osu_alltoallv: one peer's part too: MPI_Alltoallv with every sendcounts[i] and recvcounts[i]
  ``size / type size`` and displacements i x that, so its counts are equal; perfsuite's alltoallv
  runs with ``--splits uniform`` here (its case size is each rank's total, n x OMB's size).
* osu_reduce_scatter: the whole send buffer: MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts) with
  recvcounts ``size / numprocs`` each (the remainder spread over the first ranks; with fewer
  elements than ranks, one each to the first). Note it calls MPI_Reduce_scatter, where perfsuite
  calls MPI_Reduce_scatter_block; ``--omb-binary reduce_scatter=osu_reduce_scatter_block`` times
  OMB's _block benchmark instead (same size meaning; OMB 7.4 gives it a zero count below one
  element per rank).

OMB's "Avg Latency(us)" is the average over ranks of each rank's mean call time; perfsuite's
``omb_avg_us`` is the same statistic of its own loop; ``latency_us`` (perfsuite's p50 of the
per-call slowest rank) is printed beside them. OMB prints two decimals.

Prints per collective per size the median over rounds of OMB's avg, perfsuite's omb_avg and p50,
the median of the same-round ratio perfsuite / OMB, and each one's range over rounds; then the
spells: per round, each tool's time at the smallest size over the run's clock, a round more than
x2 from that tool's median marked. ``--json`` writes every run of every round.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from perfsuite import collectives
from perfsuite.bench.allreduce import parse_sizes as sweep_sizes
from perfsuite.records.errors import ConfigError

OMB = {name: collectives.get(name).omb_name for name in collectives.NAMES}  # the records' OSU benchmark
LARGE_MESSAGE_SIZE = 8192  # OMB 7.4 c/util/osu_util.h
OMB_ITERS = {"small": (1000, 100), "large": (100, 10)}  # COLL_LOOP/SKIP_SMALL, _LARGE
SPELL = 2.0  # a round this far (either way) from its tool's median is marked


def parse_sizes(text: str) -> list[int]:
    """'4,1KiB' or MIN:MAX[:FACTOR] (default x4), perfsuite's own --sizes, float32 sizes."""
    try:
        return list(sweep_sizes(text, "float32"))
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None


def omb_size(name: str, size: int, n: int) -> int:
    """OMB's message size of perfsuite's case of ``size`` bytes, from the collective's record
    (``Collective.sizes``); perfsuite's own ``omb_size_bytes`` is checked against it after each run."""
    return collectives.get(name).sizes(size, "float32", n)["omb_size_bytes"]


def batches(name: str, sizes: list[int], n: int, iters: str) -> list[tuple[str, list[int], int, int]]:
    """(label, sizes, iters, warmup) of the runs each tool makes per collective per round."""
    if iters != "omb":
        i, w = (int(x) for x in iters.split(":"))
        return [("all", sizes, i, w)]
    out = []
    for label in ("small", "large"):
        part = [s for s in sizes if (omb_size(name, s, n) > LARGE_MESSAGE_SIZE) == (label == "large")]
        if part:
            out.append((label, part, *OMB_ITERS[label]))
    return out


def omb_ranges(omb_sizes: list[int]) -> list[tuple[int, int]]:
    """-m MIN:MAX runs covering ``omb_sizes``: OMB doubles from MIN, so one run where every size is
    MIN x 2^k (the sizes between are run too, and dropped), else one run per size."""
    lo, hi = min(omb_sizes), max(omb_sizes)
    chain = all(s % lo == 0 and (s // lo) & (s // lo - 1) == 0 for s in omb_sizes)
    return [(lo, hi)] if chain else [(s, s) for s in sorted(set(omb_sizes))]


def parse_omb(text: str) -> dict[int, dict[str, float]]:
    """OMB's table (-f): size -> avg, min, max (us) and iterations, by the header's column names."""
    cols, rows = None, {}
    for line in text.splitlines():
        if line.startswith("# Size"):
            cols = re.split(r"\s{2,}", line[1:].strip())
        elif cols and line[:1].isdigit():
            vals = line.split()
            named = dict(zip(cols, vals))
            rows[int(vals[0])] = {"avg_us": float(named["Avg Latency(us)"]),
                                  "min_us": float(named.get("Min Latency(us)", "nan")),
                                  "max_us": float(named.get("Max Latency(us)", "nan")),
                                  "iters": int(named["Iterations"]) if "Iterations" in named else None}
    return rows


def run(cmd: list[str], timeout: float) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as exc:
        return 124, exc.stdout or "", f"timed out after {timeout:g} s", time.monotonic() - t0


def run_omb(args, binary: str, name: str, n: int, sizes: list[int], i: int, w: int) -> dict:
    want = {s: omb_size(name, s, n) for s in sizes}
    rows, rc, err, wall = {}, 0, "", 0.0
    for lo, hi in omb_ranges(list(want.values())):
        cmd = [args.mpiexec, "-n", str(n), str(Path(args.omb_bin_dir) / binary), "-m", f"{lo}:{hi}",
               "-i", str(i), "-x", str(w), "-T", "mpi_float", "-f"]
        code, out, e, dt = run(cmd, args.timeout)
        wall += dt
        if code and not rc:
            rc, err = code, (e.strip().splitlines() or [f"exited {code}"])[-1]
        rows.update(parse_omb(out))
    got = {s: {"omb_size_bytes": o, **rows[o]} for s, o in want.items() if o in rows}
    return {"rc": rc, "error": err or None, "wall_s": wall, "rows": got}


def run_perfsuite(args, name: str, n: int, sizes: list[int], i: int, w: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="omb-compare-") as tmp:
        out = Path(tmp) / "run.json"
        cmd = [args.perfsuite, "run", "--benchmarks", name, "--transports", "mpi", "--world-sizes", str(n),
               "--sizes", ",".join(map(str, sizes)), "--iters", str(i), "--warmup", str(w),
               "--contention-retries", "0", "--json", str(out)]
        if collectives.get(name).splits is not None:  # OMB's alltoallv sends equal counts to every peer
            cmd += ["--splits", "uniform"]
        code, _stdout, e, wall = run(cmd, args.timeout)
        data = json.loads(out.read_text()) if out.exists() else {"results": []}
    per: dict[int, list[dict]] = {}
    for res in data.get("results", []):
        for smp in res.get("samples", []):
            case, info = smp["case"], smp["info"]
            if case["benchmark"] == name and case["world_size"] == n:
                per.setdefault(case["size_bytes"], []).append(info)
    rows = {}
    for s, infos in per.items():  # one sample per case (one world); pooled rounds: their medians
        rows[s] = {"omb_size_bytes": infos[0]["omb_size_bytes"],
                   "omb_avg_us": statistics.median(x["omb_avg_us"] for x in infos),
                   "p50_us": statistics.median(x["latency_us"] for x in infos),
                   "iters": infos[0]["iters"], "warmup": infos[0].get("warmup"),
                   "timing": infos[0].get("timing"), "valid": all(x.get("valid", True) for x in infos),
                   "samples": len(infos)}
        if rows[s]["omb_size_bytes"] != omb_size(name, s, n):
            print(f"# WARNING {name} n={n} {s} B: perfsuite's omb_size_bytes {rows[s]['omb_size_bytes']} is not "
                  f"{omb_size(name, s, n)}, the size OMB was run at", file=sys.stderr)
    return {"rc": code, "error": (e.strip().splitlines() or [""])[-1] if code and not rows else None,
            "wall_s": wall, "rows": rows}


def rounds(args) -> list[dict]:
    runs: list[dict] = []
    units = [(name, n) for name in args.benchmarks for n in args.world_sizes]
    t_start = time.monotonic()
    for r in range(args.rounds):
        order = units if r % 2 == 0 else units[::-1]
        for k, (name, n) in enumerate(order):
            for label, sizes, i, w in batches(name, args.sizes, n, args.iters):
                tools = ("omb", "perfsuite") if (r + k) % 2 == 0 else ("perfsuite", "omb")
                for tool in tools:
                    t = time.monotonic() - t_start
                    got = (run_omb(args, args.omb_binary[name], name, n, sizes, i, w) if tool == "omb"
                           else run_perfsuite(args, name, n, sizes, i, w))
                    runs.append({"round": r + 1, "benchmark": name, "world_size": n, "batch": label,
                                 "tool": tool, "binary": args.omb_binary[name] if tool == "omb" else "perfsuite run",
                                 "iters": i, "warmup": w, "started_s": round(t, 3), **got})
                    missing = [s for s in sizes if s not in got["rows"]]
                    print(f"# round {r + 1}/{args.rounds} {name} n={n} {label}: {tool} {got['wall_s']:.1f} s"
                          + (f", rc {got['rc']}" if got["rc"] else "")
                          + (f", no row for {missing}: {got['error'] or 'not in its output'}" if missing else ""),
                          file=sys.stderr, flush=True)
    return runs


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None or x != x else format(x, spec)


def summary(runs: list[dict], args) -> tuple[str, dict]:
    lines, table = [], {}
    lines.append(f"# perfsuite (mpi transport) vs OMB 7.4, float32, {args.rounds} interleaved round(s), iters "
                 f"{args.iters}; medians over rounds; ratio: median over rounds of the same round's "
                 "perfsuite omb_avg / OMB avg; [min-max] over rounds")
    for name in args.benchmarks:
        for n in args.world_sizes:
            mine = [x for x in runs if x["benchmark"] == name and x["world_size"] == n]
            lines.append(f"# {name} ({args.omb_binary[name]}) world_size={n}")
            lines.append(f"#{'size':>9} {'omb_size':>9} {'OMB avg(us)':>12} {'[min-max]':>19} "
                         f"{'ps omb_avg(us)':>15} {'[min-max]':>19} {'ratio':>7} {'[min-max]':>15} "
                         f"{'ps p50(us)':>11} {'iters':>6}")
            for s in args.sizes:
                per_round: dict[int, dict] = {}
                for x in mine:
                    if s in x["rows"]:
                        per_round.setdefault(x["round"], {})[x["tool"]] = x["rows"][s]
                omb = [v["omb"]["avg_us"] for v in per_round.values() if "omb" in v]
                ps = [v["perfsuite"]["omb_avg_us"] for v in per_round.values() if "perfsuite" in v]
                p50 = [v["perfsuite"]["p50_us"] for v in per_round.values() if "perfsuite" in v]
                ratio = [v["perfsuite"]["omb_avg_us"] / v["omb"]["avg_us"] for v in per_round.values()
                         if "omb" in v and "perfsuite" in v and v["omb"]["avg_us"] > 0]
                med = {k: float(np.median(v)) if v else None for k, v in
                       (("omb_avg_us", omb), ("perfsuite_omb_avg_us", ps), ("perfsuite_p50_us", p50), ("ratio", ratio))}
                rng = {k: (min(v), max(v)) if v else None for k, v in
                       (("omb_avg_us", omb), ("perfsuite_omb_avg_us", ps), ("ratio", ratio))}
                iters = sorted({v[t]["iters"] for v in per_round.values() for t in v if v[t].get("iters")})
                table[f"{name}/n{n}/{s}"] = {"benchmark": name, "world_size": n, "size_bytes": s,
                                             "omb_size_bytes": omb_size(name, s, n), "median": med, "range": rng,
                                             "rounds": len(per_round), "iters": iters}

                def span(key: str, spec: str = ".2f") -> str:
                    return f"[{_fmt(rng[key][0], spec)}-{_fmt(rng[key][1], spec)}]" if rng[key] else "-"

                lines.append(f"{s:>10} {omb_size(name, s, n):>9} {_fmt(med['omb_avg_us']):>12} {span('omb_avg_us'):>19} "
                             f"{_fmt(med['perfsuite_omb_avg_us']):>15} {span('perfsuite_omb_avg_us'):>19} "
                             f"{_fmt(med['ratio'], '.3f'):>7} {span('ratio', '.3f'):>15} "
                             f"{_fmt(med['perfsuite_p50_us']):>11} {'/'.join(map(str, iters)) or '-':>6}")
    lines += spells(runs, args)
    return "\n".join(lines), table


def spells(runs: list[dict], args) -> list[str]:
    """Each tool's time at the smallest size, round by round, on the run's clock: a round more
    than x2 from that tool's median (over the rounds of that collective) is marked, the machine's
    spells named by when they fell."""
    s = min(args.sizes)
    lines = [f"# spells: each tool's time at {s} B per round (started_s: seconds into the run); "
             f"'<<' a round over x{SPELL:g} faster than that tool's median, '>>' over x{SPELL:g} slower"]
    for name in args.benchmarks:
        for n in args.world_sizes:
            got = [(x["started_s"], x["round"], x["tool"], x["rows"][s]) for x in runs
                   if x["benchmark"] == name and x["world_size"] == n and s in x["rows"]]
            series = {"OMB avg": [(t, r, row["avg_us"]) for t, r, tool, row in got if tool == "omb"],
                      "ps omb_avg": [(t, r, row["omb_avg_us"]) for t, r, tool, row in got if tool == "perfsuite"],
                      "ps p50": [(t, r, row["p50_us"]) for t, r, tool, row in got if tool == "perfsuite"]}
            for label, pts in series.items():
                if not pts:
                    continue
                med = float(np.median([v for _, _, v in pts]))
                cells = []
                for t, r, v in pts:
                    mark = ">>" if med > 0 and v >= SPELL * med else "<<" if v > 0 and med >= SPELL * v else ""
                    cells.append(f"r{r}@{t:.0f}s {v:.2f}{mark}")
                lines.append(f"# {name} n={n} {label} (median {med:.2f} us): " + "  ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    here = Path(sys.executable).parent
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("omb_bin_dir", metavar="OMB_BIN_DIR", help="folder of OMB 7.4's osu_* collective binaries")
    p.add_argument("--benchmarks", default=",".join(OMB), help=f"comma list of {', '.join(OMB)} [default: all]")
    p.add_argument("--world-sizes", default="2", help="comma list of world sizes [default: 2]")
    p.add_argument("--sizes", default="4:64MiB", help="perfsuite's sizes: 4,1KiB or MIN:MAX[:FACTOR] (x4) [default: 4:64MiB]")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds [default: 5]")
    p.add_argument("--iters", default="omb", help="omb (OMB's defaults per size, both tools) or ITERS:WARMUP for every size")
    p.add_argument("--omb-binary", action="append", default=[], metavar="NAME=BINARY",
                   help="another OMB binary for a collective, e.g. reduce_scatter=osu_reduce_scatter_block")
    p.add_argument("--json", help="write every run of every round and the summary here")
    p.add_argument("--mpiexec", default=str(here / "mpiexec") if (here / "mpiexec").exists() else "mpiexec")
    p.add_argument("--perfsuite", default=str(here / "perfsuite") if (here / "perfsuite").exists() else "perfsuite")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one run of either tool may take")
    args = p.parse_args(argv)
    args.benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    unknown = [b for b in args.benchmarks if b not in OMB]
    if unknown:
        p.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(OMB)}")
    args.world_sizes = [int(x) for x in args.world_sizes.split(",")]
    args.sizes = parse_sizes(args.sizes)
    if args.iters != "omb" and not re.fullmatch(r"[1-9]\d*:\d+", args.iters):
        p.error("--iters is omb or ITERS:WARMUP, e.g. 200:20")
    args.omb_binary = {**OMB, **dict(x.split("=", 1) for x in args.omb_binary)}
    for name in args.benchmarks:
        path = Path(args.omb_bin_dir) / args.omb_binary[name]
        if not os.access(path, os.X_OK):
            p.error(f"no executable {path}")
    runs = rounds(args)
    text, table = summary(runs, args)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"format": "omb-compare", "omb_bin_dir": str(args.omb_bin_dir), "benchmarks": args.benchmarks,
             "world_sizes": args.world_sizes, "sizes": args.sizes, "rounds": args.rounds, "iters": args.iters,
             "omb_binary": {b: args.omb_binary[b] for b in args.benchmarks}, "runs": runs, "summary": table},
            indent=1))
    failed = [x for x in runs if x["rc"] and not x["rows"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

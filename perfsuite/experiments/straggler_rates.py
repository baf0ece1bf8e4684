"""The straggler rule's rates on real worlds, from the results files
``scripts/straggler-rates.sh`` keeps: per kind of run (``link-allreduce``, ``clean-nodes``, ...,
from the file name), how many worlds named the expected node (a degraded run) or nobody (a clean
run), with the 95% interval of the rate. The unit is a world: each file is one world of one
round, and it counts as naming a node when any of its cases did.

    python -m perfsuite.experiments.straggler_rates OUT
"""
from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from ..store import formats
from ..records import stats
from ..verdicts import stragglers

#: What each kind of run should name: a node, or nobody (None).
EXPECTED = {"link-allreduce": "node2", "link-nodes": "node2", "cpu-training": "node3",
            "clean-allreduce": None, "clean-nodes": None, "clean-training": None, "clean-plain": None}


def kind_of(path: Path) -> str:
    return path.stem.rsplit("-", 1)[0]


def named_in(run: formats.SuiteRun) -> set[str]:
    """Every node a world of the run named (a straggler, or either end of a slow link)."""
    names = {s.node for _, s in stragglers.named(run.samples())}
    for sample in run.samples():
        for link in sample.info.get("slow_links") or ():
            names.update(link["nodes"])
    return names


def rates(paths: Iterable[Path]) -> list[dict]:
    rows: dict[str, dict] = {}
    for path in sorted(paths):
        kind = kind_of(path)
        if kind not in EXPECTED:
            continue
        row = rows.setdefault(kind, {"kind": kind, "expected": EXPECTED[kind], "worlds": 0, "right": 0,
                                     "failed": 0, "named": {}})
        run = formats.load_run(str(path))
        if not run.ok or not run.samples():
            row["failed"] += 1
            continue
        names = named_in(run)
        row["worlds"] += 1
        want = EXPECTED[kind]
        row["right"] += int(names == ({want} if want else set()))
        for name in names:
            row["named"][name] = row["named"].get(name, 0) + 1
    for row in rows.values():
        low, high = stats.rate_ci(row["right"], row["worlds"]) if row["worlds"] else (0.0, 1.0)
        row.update(rate=row["right"] / row["worlds"] if row["worlds"] else 0.0, low=low, high=high)
    return [rows[k] for k in EXPECTED if k in rows]


def table(rows: list[dict]) -> str:
    lines = ["# straggler rule on real worlds: each file one world; right = named exactly the expected "
             "node (or nobody, for a clean kind); 95% interval of the rate",
             f"{'kind':<18}{'expects':>9}{'right':>8}{'worlds':>8}{'rate':>8}{'95% interval':>18}"
             f"{'failed':>8}  named"]
    for r in rows:
        named = ", ".join(f"{k} x{v}" for k, v in sorted(r["named"].items())) or "-"
        interval = f"[{r['low']:.1%}, {r['high']:.1%}]"
        lines.append(f"{r['kind']:<18}{r['expected'] or 'nobody':>9}{r['right']:>8}{r['worlds']:>8}"
                     f"{r['rate']:>8.1%}{interval:>18}{r['failed']:>8}  {named}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m perfsuite.experiments.straggler_rates OUT (the folder of "
              "scripts/straggler-rates.sh)", file=sys.stderr)
        return 2
    print(table(rates(Path(argv[0]).glob("*.json"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 52's validity grid for the machine's learned drift (stored mode), through the code the
commands run (``experiments/validity.py``), in one process: prints docs/measurements.md's table.

    python scripts/validity-pooled.py [RUNS]     # 800 runs a clean row (400 a change), ~15 min here

Rows marked --confirm then run ``--confirm`` as ``run --compare --confirm`` does: an A/B (at most
ab.DEFAULT_MAX_PAIRS pairs) on the machine as it is now decides the cases ``regress.to_confirm``
takes, and its verdicts settle into the run's (``experiments.confirm``).
"""
from __future__ import annotations

import math
import sys

from perfsuite.experiments import validity as v

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 800
X3 = math.log(3.0)


def run(label: str, m: v.Machine, **kw) -> None:
    r = v.rate("stored", m, kw.pop("runs", RUNS), workers=1, **kw)
    lo, hi = r.interval()
    if kw.get("confirm_pairs"):
        label += ", --confirm"
    print(f"| {label} | {m.label()} | {kw.get('sessions', 1)} | {kw.get('n_cases', 1)} | {r.condition} | "
          f"{r.hits}/{r.runs} | {r.rate:.2%} [{lo:.2%}, {hi:.2%}] | {r.same} |", flush=True)


PAIRS = v.ab.DEFAULT_MAX_PAIRS

print("| row | machine | sittings | cases | change | flagged | rate [95% CI] | same |")
print("|---|---|---|---|---|---|---|---|")
quiet = v.Machine(0.02, 0.3, 0.02, shared_sd=0.01)
for s in (1, 2, 4):
    run("quiet", quiet, sessions=s, n_cases=3)
shared = v.Machine(0.02, 0.3, 0.02, shared_sd=0.10)
for s in (2, 4):
    run("shared drift", shared, sessions=s, n_cases=5)
run("shared drift", shared, sessions=2, n_cases=5, confirm_pairs=PAIRS)
run("cases unalike", v.Machine(0.02, 0.3, 0.05, shared_sd=0.02, case_spread=0.7), sessions=4, n_cases=5)
flip = v.Machine(0.02, 0.3, 0.02, mode_step=X3, switch=0.02, canary_sees=False, spells_shared=True)
for s in (2, 4, 8):
    run("flips x3, slow spells", flip, sessions=s, n_cases=3)
for s in (2, 4):
    run("flips x3, slow spells", flip, sessions=s, n_cases=3, confirm_pairs=PAIRS)
run("flips x3, back to back", flip, sessions=4, n_cases=3, apart=False)
run("flips x3, fast spells", v.Machine(0.02, 0.3, 0.02, mode_step=X3, switch=0.2, canary_sees=False,
                                        spells_shared=True), sessions=4, n_cases=3)
for c in (0.3, 1.0):
    for s in (1, 2, 4):
        run("detection", quiet, sessions=s, n_cases=3, change=c, runs=400)
    for s in (1, 4):
        run("detection", quiet, sessions=s, n_cases=3, change=c, runs=400, confirm_pairs=PAIRS)
print("done", flush=True)

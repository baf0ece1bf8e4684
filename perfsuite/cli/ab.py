"""``perfsuite ab``: two arms measured now, interleaved, judged pair by pair."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from .. import bench, formats, options, regress, suite
from ..errors import ConfigError
from ..launch.launchers import parse_env
from ..experiments.ab import DEFAULT_MAX_PAIRS
from ..model import whole_number
from .common import EXIT_FAIL, EXIT_OK, say

COMMANDS = {}
SHARED = ("transports", "world-sizes", "sizes", "dtypes", "models", "batches", "image-size", "launcher",
          "launcher-program", "mpi-flavor", "hostfile", "hosts", "ppn", "oversubscribe", "env",
          "timeout", "iters", "warmup", "workdir", "max-contention", "max-canary-shift", "host-timing")


def add_ab(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", default="allreduce", metavar="NAME",
                   help=f"the benchmark both arms run: {', '.join(bench.names())} [default: allreduce]")
    options.add_options(p.add_argument, names=SHARED)
    for arm in ("a", "b"):
        up = arm.upper()
        p.add_argument(f"--{arm}-transport", metavar="NAME", help=f"arm {up}'s transport [default: --transports]")
        p.add_argument(f"--{arm}-env", action="append", default=[], metavar="NAME=VALUE",
                       help=f"a variable set for arm {up}'s ranks (repeatable)")
        p.add_argument(f"--{arm}-python", metavar="PATH", help=f"arm {up}'s Python (another venv; "
                       "its mpiexec is used when one lies beside it)")
        p.add_argument(f"--{arm}-launcher-args", metavar="ARGS", help=f"extra launcher arguments for arm {up}")
    p.add_argument("--max-pairs", default=str(DEFAULT_MAX_PAIRS), metavar="N",
                   help=f"pairs at most [default: {DEFAULT_MAX_PAIRS}]")
    p.add_argument("--budget", metavar="S", help="seconds at most (stops after the pair running then)")
    p.add_argument("--tolerance", metavar="TOL", help="0.02 or LOWER:UPPER [default: 0.02]")
    p.add_argument("--alpha", metavar="P", help="false-alarm rate over every look [default: 0.01]")
    p.add_argument("--seed", metavar="N", help="seed of the pairs' order [default: random]")
    p.add_argument("--json", metavar="PATH", help="write the versioned A/B file here")


def do_ab(args: argparse.Namespace) -> int:
    from ..experiments import ab

    values = vars(args)
    name = args.benchmarks.strip()
    if name not in bench.names():
        raise ConfigError(f"benchmark {name!r} is unknown; choose from {', '.join(bench.names())}")
    arms = []
    for arm in ("a", "b"):
        transport = values[f"{arm}_transport"] or (args.transports or "mpi")
        if "," in transport or transport == "all":
            raise ConfigError(f"arm {arm.upper()} transport {transport!r} must name one transport; "
                              f"give --{arm}-transport NAME")
        python = values[f"{arm}_python"]
        if python:
            ab.check_python(python)
        arms.append(ab.Arm(arm.upper(), transport, tuple(parse_env(values[f"{arm}_env"]).items()),
                           python, options.launcher_args(values[f"{arm}_launcher_args"])))
    cases = []
    for arm in arms:
        sel = options.selection({**values, "transports": arm.transport}, name)
        if not sel.transports:
            raise ConfigError(f"transport {arm.transport!r} does not run {name}")
        cases.append(tuple(suite.select_cases(sel)))
    tol = regress.parse_tolerance(args.tolerance) if args.tolerance else ab.DEFAULT_TOLERANCE
    budget = options.seconds(args.budget, "budget") if args.budget is not None else None
    cfg = ab.ABConfig(arms[0], arms[1], cases[0], cases[1],
                      max_pairs=whole_number(args.max_pairs, "max pairs", low=2), budget_s=budget,
                      tolerance=tol, alpha=regress.parse_alpha(args.alpha),
                      max_contention=options.contention_limit(values.get("max_contention") or "0.05"),
                      canary_shift=options.canary_limit(values.get("max_canary_shift") or "0.15"),
                      seed=whole_number(args.seed, "seed", low=0), judged=bench.get(name).judged)
    suite_cfg = options.suite_config({**values, "transports": arms[0].transport})
    say(f"# A/B: {len(cases[0])} case(s), up to {cfg.max_pairs} pairs ...")
    rep = ab.run(cfg, ab.world_runner(replace(suite_cfg, rounds=None)),
                 progress=lambda m: print(f"# {m}", file=sys.stderr, flush=True))
    say(ab.format_report(rep))
    if args.json:
        formats.write_json(args.json, formats.stamp(formats.AB, rep.to_dict()))
        say(f"# A/B written to {args.json}")
    # A failed world fails its pair, and the run: as `perfsuite run` does for a failed world.
    if rep.failures or any(v.kind == "DIFFERENT" for v in rep.verdicts):
        return EXIT_FAIL
    return EXIT_OK


COMMANDS["ab"] = (add_ab, do_ab, "compare two arms (transport, env, venv, launcher args) in "
                  "interleaved pairs in random order: B/A with its interval and SAME/DIFFERENT/UNKNOWN")

"""``perfsuite run``: the suite on this machine (or a cluster), its tables, and its gate:
``--compare`` against this system's baselines, ``--baseline-update``/``--baseline-add`` to record them."""
from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace

from ... import bench, suite, transports
from .. import options
from ... import gate
from ...reading import report
from ...records.errors import ConfigError
from ...records.model import split_list
from .common import EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_WORLD, say

COMMANDS = {}
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "--compare: a case DIFFERENT against its baseline (--fail-on-improvement: an improvement too)",
         EXIT_UNKNOWN: "--compare --strict: a case left UNKNOWN, or nothing compared (no baseline)",
         EXIT_WORLD: "a world failed or returned wrong results, or the results, report, baselines or asv history could not be written"}
#: The options --help shows with their help (the suite's axes, and the gate's two ends: judge, record); --help-all shows every one.
BRIEF = ("--benchmarks", "--transports", "--world-sizes", "--sizes", "--compare", "--baseline-update", "--json")


def add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", default="allreduce", metavar="LIST",
                   help=f"comma list of benchmarks: {', '.join(bench.names())}, or a module or .py file "
                   "of your own (@perfsuite.benchmark) [default: %(default)s]")
    options.add_options(p.add_argument)
    p.add_argument("--json", metavar="PATH", help="write the versioned results file here")
    p.add_argument("--compare", action="store_true", help="judge every case against the baselines "
                   "of this system and exit 1 on any regression (see --baseline-dir, --system)")
    p.add_argument("--keep-worlds", action="store_true", help="keep each world's scratch folder (debugging)")
    # Progress goes to stderr and the results to stdout; these change stderr only.
    said = p.add_mutually_exclusive_group()
    said.add_argument("-v", "--verbose", action="store_true", help="progress for every world, a line for "
                      "each one skipped too (without it: one line per reason, at the end)")
    said.add_argument("-q", "--quiet", action="store_true", help="no progress: only the tables, verdicts and "
                      "the summary of skips and failures (on stdout)")
    options.add_asv_options(p.add_argument)


def run_cases_from_args(args: argparse.Namespace) -> tuple[list, suite.SuiteConfig]:
    values = vars(args)
    cases = []
    for b in bench.selected(split_list(args.benchmarks, "benchmarks", "allreduce,tf-epoch")):
        if b not in bench.names():
            raise ConfigError(f"benchmark {b!r} is unknown; choose from {', '.join(bench.names())}")
        sel = options.selection(values, b)
        for note in sel.notes:
            say(f"# {note}")
        if not sel.transports:
            raise ConfigError(f"none of the transports {args.transports!r} runs {b}; "
                              f"{b} runs {', '.join(transports.names(bench.get(b).transports))}")
        cases += suite.select_cases(sel)  # none is one line naming what the benchmark declares
    cfg = options.suite_config(values)
    return cases, replace(cfg, keep_worlds=bool(args.keep_worlds))


def do_run(args: argparse.Namespace) -> int:
    from ...reading.progress import SweepProgress

    cases, cfg = run_cases_from_args(args)  # main() has checked every output location
    values = vars(args)
    asv_to = options.prepare_asv(options.asv_target(values))  # bad --asv* is a usage error now
    if asv_to is not None:
        from ...asv.record import check_store

        check_store(asv_to)
    g = gate.Gate(options.gate_plan(values, compare=bool(args.compare), asv=asv_to), cases,
                  hint=lambda system, root: record_command(args, system, root))
    done = g.session(cfg, gate.Keep(json=args.json, report=args.report, source=args.json or "this run"),
                     rounds_given=args.rounds is not None,
                     progress=None if args.quiet else lambda worlds: SweepProgress(worlds, verbose=args.verbose),
                     summary=lambda run: say(report.run_summary(run)),
                     say=lambda m: print(f"# {m}", file=sys.stderr, flush=True))
    for line, _ in done.lines:
        say(line)
    if done.undecided:
        say(done.undecided)
    return done.status


COMMANDS["run"] = (add_run, do_run, "run the suite on this machine (or a cluster), print tables")


# --- the command that records this run's baselines (the gate's hint) ---------------------

#: What ``record_command`` leaves out of the run that found no baseline: how that run judged
#: (a recording neither judges nor may take fewer rounds than a baseline needs) and where it
#: wrote its own results.
NOT_RECORDING = ("rounds", "max-rounds", "precision", "round-budget", "tolerance", "alpha", "session-drift",
                 "strict", "confirm", "confirm-budget", "fail-on-improvement", "report", "baseline-update",
                 "baseline-add", "system",
                 "baseline-dir")


def record_command(args: argparse.Namespace, system: str, root: str) -> str:
    """The ``perfsuite run`` that records this run's cases as the baselines of ``system``: the
    options this run was given that choose its cases and worlds, then --baseline-update."""
    words = ["perfsuite", "run"]
    if args.benchmarks != "allreduce":
        words += ["--benchmarks", args.benchmarks]
    for o in options.all_options():
        value = getattr(args, o.dest, None)
        if o.name in NOT_RECORDING or value in (None, [], False):
            continue
        if o.kind == "flag":
            words.append(f"--{o.name}")
        else:
            for each in value if o.kind == "list" else [value]:
                words += [f"--{o.name}", str(each)]
    return shlex.join([*words, "--system", system, "--baseline-dir", root, "--baseline-update"])

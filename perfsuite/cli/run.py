"""``perfsuite run``: the suite on this machine (or a cluster), its tables, and its gate:
``--compare`` against this system's baselines, ``--baseline-update``/``--baseline-add`` to record them."""
from __future__ import annotations

import argparse
from dataclasses import replace
import shlex
import signal
from pathlib import Path

from .. import bench, formats, interrupts, options, regress, report, suite, transports
from ..errors import ConfigError
from ..model import split_list
from .common import (EXIT_OK, EXIT_UNKNOWN, EXIT_WORLD, canary_shift, exit_status, gate_settings,
                     not_recorded, print_verdicts, say)

COMMANDS = {}


def add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", default="allreduce", metavar="LIST",
                   help=f"comma list of benchmarks: {', '.join(bench.names())} [default: allreduce]")
    options.add_options(p.add_argument)
    p.add_argument("--json", metavar="PATH", help="write the versioned results file here")
    p.add_argument("--compare", action="store_true", help="judge every case against the baselines "
                   "of this system and exit 1 on any regression (see --baseline-dir, --system)")
    p.add_argument("--keep-worlds", action="store_true", help="keep each world's scratch folder (debugging)")
    options.add_asv_options(p.add_argument)


def run_cases_from_args(args: argparse.Namespace) -> tuple[list, suite.SuiteConfig]:
    values = vars(args)
    cases = []
    for b in split_list(args.benchmarks, "benchmarks", "allreduce,tf-epoch"):
        if b not in bench.names():
            raise ConfigError(f"benchmark {b!r} is unknown; choose from {', '.join(bench.names())}")
        sel = options.selection(values, b)
        for note in sel.notes:
            say(f"# {note}")
        if not sel.transports:
            raise ConfigError(f"none of the transports {args.transports!r} runs {b}; "
                              f"{b} runs {', '.join(transports.names(bench.get(b).transports))}")
        cases += suite.select_cases(sel)
    cfg = options.suite_config(values)
    return cases, replace(cfg, keep_worlds=bool(args.keep_worlds))


def do_run(args: argparse.Namespace) -> int:
    from ..asv.record import check_store, record_run
    from ..progress import SweepProgress

    cases, cfg = run_cases_from_args(args)  # main() has checked every output location
    cfg = judging(cfg, args, cases)
    asv_to = options.prepare_asv(options.asv_target(vars(args)))  # bad --asv* is a usage error now
    if asv_to is not None:
        check_store(asv_to)
    with interrupts.handled() as signals:
        with SweepProgress(suite.plan(cases, cfg.options)) as on_world:
            run = suite.run(cases, cfg, on_world=on_world)
        signals.defer()
        say(report.run_summary(run))
        kept = keep(run, args)
        if run.interrupted or signals.raised:
            stop = run.interrupted or signals.raised.name
            say(f"# interrupted by {stop}: not judged, not recorded in asv or as baselines")
            return 128 + signal.Signals[stop].value
        if asv_to is not None:
            say(record_run(run, asv_to, bench.asv_layout).line())
        gate = gate_run(run, args)
    # A failed world, an invalid case or results that could not be kept: 4, before the gate's
    # regression (1) or UNKNOWN (3), since the gate then lacks part of its evidence.
    return exit_status(EXIT_OK if run.ok and kept else EXIT_WORLD, gate)


def keep(run: formats.SuiteRun, args: argparse.Namespace) -> bool:
    """Write the results file and the report; a write that fails now (the disk filled, the
    folder went) still keeps the results, in the temp folder, says where, and returns False."""
    ok = True
    if args.json:
        where, why = formats.write_run_kept(args.json, run)
        say(f"# results written to {where}" + (f" because {why}" if why else ""))
        ok = why is None
    if args.report:
        try:
            report.write_report(args.report, [report.ReportRun.from_suite_run(run, args.json or "this run")])
            say(f"# report written to {Path(args.report) / 'index.html'}")
        except (OSError, ConfigError) as exc:
            ok = False
            say(f"# report not written to {args.report}: {getattr(exc, 'strerror', None) or exc}")
            if not args.json:
                where, _ = formats.write_run_kept(formats.fallback_path("perfsuite-results.json"), run)
                say(f"# results written to {where} instead")
    return ok


COMMANDS["run"] = (add_run, do_run, "run the suite on this machine (or a cluster) and print tables")



# --- the gate: verdicts against the baselines, or recording them ----------------------------

def judging(cfg: suite.SuiteConfig, args: argparse.Namespace, cases: list) -> suite.SuiteConfig:
    """The rounds a judging run needs (``suite.judging_rounds``): --baseline-update records
    more, --compare adds rounds while a verdict is UNKNOWN."""
    from .. import baselines

    tol, alpha = gate_settings(args)
    recording = bool(args.baseline_update or args.baseline_add)
    if args.baseline_update and args.baseline_add:
        raise ConfigError("--baseline-update replaces the stored rounds and --baseline-add adds to them; "
                          "give one of them")
    if args.baseline_update and args.rounds is not None and cfg.rounds.rounds < regress.MIN_BASELINE_ROUNDS:
        raise ConfigError(f"--rounds {args.rounds} with --baseline-update records a baseline that can "
                          f"decide nothing; a baseline needs at least {regress.MIN_BASELINE_ROUNDS} rounds "
                          f"(leave --rounds out: {suite.BASELINE_ROUNDS} are recorded)")
    # Read now, so that a baseline file the end of the run could not read or update stops the
    # run before any world starts.
    stored = (baselines.load_all(args.baseline_dir or "baselines", baselines.system_for(None, args.system))
              if args.compare or recording else None)
    args.family = suite.family(cases, stored) if args.compare else None
    args.drift_history = _asv_history(args) if args.compare else None
    policy, args.looks = suite.judging_rounds(cfg.rounds, update=recording,
                                              rounds_given=args.rounds is not None,
                                              baselines=stored if args.compare else None,
                                              tolerance=tol, alpha=alpha,
                                              canary_shift=canary_shift(args), family=args.family,
                                              session_sd=options.session_drift(args.session_drift),
                                              history=args.drift_history)
    return replace(cfg, rounds=policy)


def _asv_history(args: argparse.Namespace):
    """With --asv, this machine's asv history: each case's level in earlier runs, from which
    verdicts measure the drift between runs (``regress.session_drift``)."""
    to = options.asv_target(vars(args))
    if to is None:
        return None
    from ..asv.read import drift_history

    return drift_history(to, bench.asv_layout)


def gate_run(run: formats.SuiteRun, args: argparse.Namespace) -> int:
    """``run --compare``: verdicts against this system's baselines; ``--baseline-update``: record."""
    from .. import baselines

    if not (args.compare or args.baseline_update or args.baseline_add):
        return EXIT_OK
    system = baselines.system_for(run.machine, args.system)
    root = args.baseline_dir or "baselines"
    code = EXIT_OK
    if args.compare:
        tol, alpha = gate_settings(args)
        judged = {c.name for o in run.outcomes for c in o.spec.cases if not o.skipped}
        say(f"# verdicts on {system} against {root}/{system}/")
        stored = baselines.load_all(root, system)
        verdicts = regress.compare(run.samples(), stored, tolerance=tol,
                                   alpha=alpha, system=system, cases=judged,
                                   looks=getattr(args, "looks", 1), canary_shift=canary_shift(args),
                                   judged=suite.judged, family=getattr(args, "family", None),
                                   session_sd=options.session_drift(args.session_drift),
                                   history=getattr(args, "drift_history", None))
        code = print_verdicts(verdicts, bool(args.strict))
        if verdicts and all(v.status == "new" for v in verdicts):
            # A gate that judged nothing must not pass quietly: every case is new, so the run
            # proves nothing about a regression. One line, loud; under --strict it is UNKNOWN (3).
            say(nothing_compared(args, system, root, bool(stored)))
            if args.strict:
                code = exit_status(code, EXIT_UNKNOWN)
    if args.baseline_update or args.baseline_add:
        for line in not_recorded(run, allow_partial=False):
            say(line)
        complete = [s for r in run.results for s in r.samples if s.valid]
        try:
            for line in baselines.update(root, system, complete, run.machine, session=run.created,
                                         add=bool(args.baseline_add), measured_now=True) if complete else ():
                say(line)
        except ConfigError as exc:  # the rounds were measured: keep the run's verdicts, say why not
            say(f"# not recorded: {exc}")
            return exit_status(code, EXIT_WORLD)
    return code


#: What ``record_command`` leaves out of the run that found no baseline: how that run judged
#: (a recording neither judges nor may take fewer rounds than a baseline needs) and where it
#: wrote its own results.
NOT_RECORDING = ("rounds", "max-rounds", "precision", "round-budget", "tolerance", "alpha", "session-drift",
                 "strict", "report", "baseline-update", "baseline-add", "system", "baseline-dir")


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


def nothing_compared(args: argparse.Namespace, system: str, root: str, any_stored: bool) -> str:
    """The one line of a --compare whose every verdict is new: which baseline is missing, and
    the command that records it."""
    why = (f"the baselines in {root}/{system}/ hold none of this run's cases" if any_stored
           else f"no baseline for system {system} in {root}/{system}/")
    return (f"NOTHING COMPARED: {why}, so every case is new and no regression could be seen; "
            f"record one with: {record_command(args, system, root)}")

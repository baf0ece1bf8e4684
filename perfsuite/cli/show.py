"""Commands that show what is here and what was measured: ``transports``, ``report``,
``history`` and ``asv-offline``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import bench, regress, report, suite, transports
from .. import verdict_text as vt
from ..asv import project as asv_project
from ..errors import ConfigError
from .common import EXIT_FAIL, EXIT_OK, add_canary_shift, canary_shift, say

COMMANDS = {}


# --- transports, overhead ---------------------------------------------------------------------

def add_transports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmark", default=None, help="only transports of this benchmark")


def do_transports(args: argparse.Namespace) -> int:
    for spec in transports.REGISTRY.values():
        if args.benchmark and args.benchmark not in spec.benchmarks:
            continue
        reason = spec.unavailable_reason()
        state = "available" if reason is None else f"skipped: {reason}"
        say(f"{spec.name:<14} {','.join(spec.benchmarks):<20} {spec.summary}\n{'':<14} {state}")
    return EXIT_OK


COMMANDS["transports"] = (add_transports, do_transports, "list transports and whether they can run here")

# --- report -----------------------------------------------------------------------------------

PRINT_FORMATS = ("nccl", "omb", "csv", "md")


def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULTS.json", help="files written by perfsuite run --json")
    p.add_argument("--out", metavar="DIR", help="write index.html, summary.md, results.csv, tables.txt "
                   "and PNG plots here [default: report, unless --print is given]")
    p.add_argument("--asv-url", metavar="URL", help="link the page to the asv history site")
    p.add_argument("--print", dest="print_format", metavar="FORMAT",
                   help=f"also print the results to stdout as one of: {', '.join(PRINT_FORMATS)}")
    p.add_argument("--baselines", metavar="DIR", help="compare with the baselines stored here "
                   "(e.g. baselines) and put the verdicts, regressions first, at the top of the report")
    p.add_argument("--system", metavar="NAME", help="baseline system name [default: from each "
                   "results file's fingerprint]")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a verdict is a regression or an invalid result (not excused by xfail)")
    add_canary_shift(p)


def report_verdicts(runs: list, root: str, system: str | None,
                    shift: float | None = regress.DEFAULT_CANARY_SHIFT) -> list:
    """Each results file against the baselines of the system it ran on."""
    from .. import baselines

    verdicts = []
    for run in runs:
        name = baselines.system_for(run.fingerprint or None, system)
        samples = [s for r in run.results for s in r.samples]
        verdicts += regress.compare(samples, baselines.load_all(root, name), system=name,
                                    cases={s.case.name for s in samples}, canary_shift=shift,
                                    judged=suite.judged)
    return verdicts


def do_report(args: argparse.Namespace) -> int:
    if args.print_format and args.print_format not in PRINT_FORMATS:
        raise ConfigError(f"--print {args.print_format!r} is unknown; choose from {', '.join(PRINT_FORMATS)}")
    if args.fail_on_regression and not args.baselines:
        raise ConfigError("--fail-on-regression needs --baselines DIR (what to compare with)")
    runs = report.load_runs(args.results)
    verdicts = (report_verdicts(runs, args.baselines, args.system, canary_shift(args))
                if args.baselines else None)
    if args.print_format == "csv":
        sys.stdout.write(report.csv_text(runs))
    elif args.print_format == "md":
        sys.stdout.write(report.summary_markdown(runs, verdicts=verdicts, asv_url=args.asv_url))
    elif args.print_format:
        for run in runs:
            for r in run.results:
                say(report.omb_table(r) if args.print_format == "omb" and r.benchmark == "allreduce"
                       else report.result_table(r))
    notes = sys.stderr if args.print_format else sys.stdout  # stdout holds the printed results
    out = args.out or (None if args.print_format else "report")
    if out:
        written = report.write_report(out, runs, verdicts=verdicts, asv_url=args.asv_url)
        drawn = [p.file.name for p in written["plots"] if p.file]
        print(f"# report written to {Path(out) / 'index.html'} (plots: {', '.join(drawn) or 'none'})",
              file=notes, flush=True)
        for p in written["plots"]:
            if p.skipped:
                print(f"# not drawn: {p.title}: {p.skipped}", file=notes)
    if verdicts is not None:
        bad = regress.failing(verdicts)
        print(f"# {len(verdicts)} verdicts against {args.baselines}: {len(bad)} failing"
              + "".join(f"\n#   {vt.line(v)}" for v in bad), file=notes)
        if bad and args.fail_on_regression:
            return EXIT_FAIL
    return EXIT_OK


COMMANDS["report"] = (add_report, do_report, "turn results files into index.html, summary.md, CSV and plots")


# --- history (asv) ----------------------------------------------------------------------------

def add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asv-config", default=asv_project.DEFAULT_CONFIG, metavar="PATH",
                   help=f"asv config whose results to read [default: {asv_project.DEFAULT_CONFIG}]")
    p.add_argument("--asv-machine", metavar="NAME", help="only this asv machine [default: every machine]")
    p.add_argument("-k", dest="pattern", metavar="REGEX",
                   help="only entries matching REGEX, e.g. \"inv_busbw\\('mpi'\"")
    p.add_argument("--threshold", metavar="FRACTION",
                   help="smallest step reported, e.g. 0.05 [default: asv.conf.json regressions_thresholds, else 0.05]")
    p.add_argument("--since", metavar="COMMIT",
                   help="regressions that start after COMMIT are new (e.g. the last published commit) "
                        "[default: every regression still present is new]")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when a new regression appears")


def do_history(args: argparse.Namespace) -> int:
    from .. import history
    from ..asv.read import read_history

    project = asv_project.load_project(args.asv_config)
    thresholds = project.thresholds
    if args.threshold is not None:
        try:
            t = float(args.threshold)
        except ValueError:
            t = -1.0
        if not 0 <= t < 10:
            raise ConfigError(f"threshold {args.threshold!r} must be a fraction >= 0, e.g. 0.05 for 5%")
        thresholds = {".*": t}
    series, order = read_history(project, bench.asv_layouts(), args.asv_machine, args.pattern)
    try:
        since = history.resolve_since(order, args.since)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    found = history.analyse(series, order, thresholds, since)
    say(history.format_report(found))
    return EXIT_FAIL if args.fail_on_regression and found.new_regressions() else EXIT_OK


COMMANDS["history"] = (add_history, do_history,
                       "list the steps asv's step detection finds in the asv history (regressions, improvements)")


def add_asv_offline(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asv-config", default=asv_project.DEFAULT_CONFIG, metavar="PATH",
                   help=f"asv config whose html_dir to rewrite [default: {asv_project.DEFAULT_CONFIG}]")
    p.add_argument("--html-dir", metavar="DIR", help="the published site [default: html_dir of the config]")


def do_asv_offline(args: argparse.Namespace) -> int:
    from ..faces.asv_offline import make_offline

    html_dir = args.html_dir or asv_project.load_project(args.asv_config).html_dir
    names = make_offline(html_dir)
    say(f"# {html_dir}/index.html now loads {len(names)} CDN files from vendor/: {', '.join(names)}")
    return EXIT_OK


COMMANDS["asv-offline"] = (add_asv_offline, do_asv_offline,
                           "make a published asv site work without internet (scripts from Debian packages)")



"""``perfsuite report``: results files as index.html, summary.md, CSV and plots, optionally judged
against stored baselines."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import regress, report, rounds, suite
from .. import verdict_text as vt
from ..errors import ConfigError
from ..gate import verdict_status
from .common import EXIT_OK, add_canary_shift, canary_shift, say

COMMANDS = {}


def print_formats() -> tuple[str, ...]:
    """"nccl": each world's own table; then the other layouts benchmarks offer (allreduce's
    "omb"); then the whole run as CSV or Markdown."""
    return ("nccl", *report.layout_names(), "csv", "md")


def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULTS.json", help="files written by perfsuite run --json")
    p.add_argument("--out", metavar="DIR", help="write index.html, summary.md, results.csv, tables.txt "
                   "and PNG plots here [default: report, unless --print is given]")
    p.add_argument("--asv-url", metavar="URL", help="link the page to the asv history site")
    p.add_argument("--print", dest="print_format", metavar="FORMAT",
                   help=f"also print the results to stdout as one of: {', '.join(print_formats())}")
    p.add_argument("--baselines", metavar="DIR", help="compare with the baselines stored here "
                   "(e.g. baselines) and put the verdicts, regressions first, at the top of the report")
    p.add_argument("--system", metavar="NAME", help="baseline system name [default: from each "
                   "results file's fingerprint]")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a verdict is a regression, 4 when a result is invalid (not excused by xfail)")
    add_canary_shift(p)


def report_verdicts(runs: list, root: str, system: str | None,
                    shift: float | None = rounds.DEFAULT_CANARY_SHIFT) -> list:
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
    formats = print_formats()
    if args.print_format and args.print_format not in formats:
        raise ConfigError(f"--print {args.print_format!r} is unknown; choose from {', '.join(formats)}")
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
                say(report.layout_table(r, args.print_format))
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
        if args.fail_on_regression:
            return verdict_status(verdicts, strict=False)  # 1 a regression, 4 an invalid result
    return EXIT_OK


COMMANDS["report"] = (add_report, do_report, "turn results files into index.html, summary.md, CSV and plots")

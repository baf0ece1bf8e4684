"""``perfsuite report``: results files as index.html, summary.md, CSV and plots, optionally judged
against stored baselines."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...verdicts import regress, rounds
from ...reading import report
from ...reading import verdict_text as vt
from ...records.errors import ConfigError
from ...gate import verdict_status
from .. import options
from .common import EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_WORLD, add_canary_shift, add_gating, canary_shift, exit_status, renamed, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("turn results files into index.html, summary.md, CSV and plots; --compare judges them against the baselines")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "--compare: a case DIFFERENT against its baseline (--fail-on-improvement: an improvement too)",
         EXIT_UNKNOWN: "--compare --strict: a case left UNKNOWN, or nothing compared",
         EXIT_WORLD: "--compare: a case whose results were wrong (INVALID)"}


def print_formats() -> tuple[str, ...]:
    """"nccl": each world's own table; then the other layouts benchmarks offer (allreduce's
    "omb"); then the whole run as CSV or Markdown."""
    return ("nccl", *report.layout_names(), "csv", "md")


#: The report's folder when neither --out nor --print is given.
OUT = "report"


def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULTS.json", help="files written by perfsuite run --json")
    p.add_argument("--out", metavar="DIR", help="write index.html, summary.md, results.csv, tables.txt "
                   f"and PNG plots here [default: {OUT}, unless --print is given]")
    p.add_argument("--asv-url", metavar="URL", help="link the page to the asv history site")
    p.add_argument("--print", dest="print_format", metavar="FORMAT",
                   help=f"also print the results to stdout as one of: {', '.join(print_formats())}")
    # Judged as run --compare judges: the same flags, and the verdicts set the exit status.
    p.add_argument("--compare", action="store_true", help="judge every case against the stored baselines, "
                   "put the verdicts, regressions first, at the top of the report, and exit 1 on a regression "
                   "(4 on an invalid result)")
    p.add_argument("--baseline-dir", default=options.BASELINE_DIR, metavar="DIR",
                   help="folder of baselines/<system>/<benchmark>.json [default: %(default)s]")
    p.add_argument("--system", metavar="NAME", help="baseline system name [default: from each "
                   "results file's fingerprint]")
    add_gating(p)
    renamed(p, "--baselines", "--compare --baseline-dir", "baseline_dir", compare=True)
    renamed(p, "--fail-on-regression", "--compare", "compare", flag=True)
    add_canary_shift(p)


def report_verdicts(runs: list, root: str, system: str | None,
                    shift: float | None = rounds.DEFAULT_CANARY_SHIFT) -> list:
    """Each results file against the baselines of the system it ran on."""
    from ...store import baselines

    verdicts = []
    for run in runs:
        name = baselines.system_for(run.fingerprint or None, system)
        samples = [s for r in run.results for s in r.samples]
        verdicts += regress.compare(samples, baselines.load_all(root, name), system=name,
                                    cases={s.case.name for s in samples}, canary_shift=shift)
    return verdicts


def do_report(args: argparse.Namespace) -> int:
    formats = print_formats()
    if args.print_format and args.print_format not in formats:
        raise ConfigError(f"--print {args.print_format!r} is unknown; choose from {', '.join(formats)}")
    runs = report.load_runs(args.results)
    verdicts = (report_verdicts(runs, args.baseline_dir, args.system, canary_shift(args))
                if args.compare else None)
    if args.print_format == "csv":
        sys.stdout.write(report.csv_text(runs))
    elif args.print_format == "md":
        sys.stdout.write(report.summary_markdown(runs, verdicts=verdicts, asv_url=args.asv_url))
    elif args.print_format:
        for run in runs:
            for r in run.results:
                say(report.layout_table(r, args.print_format))
    notes = sys.stderr if args.print_format else sys.stdout  # stdout holds the printed results
    out = args.out or (None if args.print_format else OUT)
    if out:
        written = report.write_report(out, runs, verdicts=verdicts, asv_url=args.asv_url)
        drawn = [p.file.name for p in written["plots"] if p.file]
        print(f"# report written to {Path(out) / 'index.html'} (plots: {', '.join(drawn) or 'none'})",
              file=notes, flush=True)
        for p in written["plots"]:
            if p.skipped:
                print(f"# not drawn: {p.title}: {p.skipped}", file=notes)
    if verdicts is not None:
        bad = regress.failing(verdicts, args.fail_on_improvement)
        print(f"# {len(verdicts)} verdicts against {args.baseline_dir}: {len(bad)} failing"
              + "".join(f"\n#   {vt.line(v)}" for v in bad), file=notes)
        # Nothing compared: cases, and none of them with a baseline (every verdict "new").
        nothing = all(v.status == "new" for v in verdicts)
        if nothing:
            print(f"# NOTHING COMPARED: the baselines in {args.baseline_dir} hold none of these cases", file=notes)
        return exit_status(verdict_status(verdicts, args.strict, args.fail_on_improvement),
                           EXIT_UNKNOWN if nothing and args.strict else EXIT_OK)
    return EXIT_OK


COMMANDS["report"] = (add_report, do_report, "turn results files into HTML, Markdown, CSV and plots")

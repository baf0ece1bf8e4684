"""``perfsuite history``: the steps asv's step detection finds in the asv history."""
from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from ... import bench
from ...asv import project as asv_project
from ...records.errors import ConfigError
from ...verdicts.history import DEFAULT_THRESHOLD
from .common import EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, add_gating, exit_status, renamed, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("list the steps asv's step detection finds in the asv history (regressions, improvements)")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "--compare: a new regression (one that starts after --since, else any still present)",
         EXIT_UNKNOWN: "--compare --strict: no series to judge"}


def add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asv-config", default=asv_project.DEFAULT_CONFIG, metavar="PATH",
                   help="asv config whose results to read [default: %(default)s]")
    p.add_argument("--asv-machine", metavar="NAME", help="only this asv machine [default: every machine]")
    p.add_argument("-k", dest="pattern", metavar="EXPRESSION",
                   help="only the series matching a pytest -k expression (not a regex) over the words of "
                        "asv's entry: benchmark, metric and each parameter, e.g. \"inv_busbw and mpi and not "
                        "64MiB\"; a word matches any part of a name, case-insensitively, as in pytest")
    p.add_argument("--threshold", metavar="FRACTION",
                   help="smallest step reported, e.g. 0.05 [default: the config's regressions_thresholds, else "
                        f"{DEFAULT_THRESHOLD:g}]")
    p.add_argument("--since", metavar="COMMIT",
                   help="regressions that start after COMMIT are new (e.g. the last published commit) "
                        "[default: every regression still present is new]")
    p.add_argument("--compare", action="store_true", help="judge the history as a gate: exit 1 when a new "
                   "regression appears (one that starts after --since, else any still present)")
    add_gating(p, improvements=False)
    renamed(p, "--fail-on-regression", "--compare", "compare", flag=True)


def keyword_match(text: str | None) -> Callable[[str], bool] | None:
    """pytest's -k for asv entries: the expression compiled by pytest's own ``Expression`` and
    matched by its ``KeywordMatcher`` (a word matches any part of a name, case-insensitively)
    against ``entry_words``; a bad expression is one line naming it."""
    if not text:
        return None
    import pytest
    from _pytest.mark import KeywordMatcher, expression

    bad = (SyntaxError, getattr(expression, "ParseError", SyntaxError), pytest.UsageError)
    try:
        compiled = expression.Expression.compile(text)
        compiled.evaluate(KeywordMatcher(frozenset()))  # call syntax, foo(x=1), fails only here
    except bad as exc:
        raise ConfigError(f"-k {text!r} is not a pytest -k expression ({exc}); use words joined by and, or, "
                          "not, e.g. -k \"inv_busbw and mpi and not 64MiB\"") from None
    return lambda entry: compiled.evaluate(KeywordMatcher(frozenset(entry_words(entry))))


def entry_words(entry: str) -> set[str]:
    """The names -k matches an asv entry by, as pytest matches a test by its and its parents'
    names: the whole entry, its dotted name and each part (module, class, method), and each
    parameter value. "allreduce.Allreduce.track_inv_busbw('mpi', 2, '1MiB', 'float32')" has
    allreduce, Allreduce, track_inv_busbw, mpi, 2, 1MiB, float32."""
    name, _, params = entry.partition("(")
    values = re.findall(r"'([^']*)'|\"([^\"]*)\"|([^,\s)]+)", params)
    return {entry, name, *name.split("."), *(next(v for v in groups if v) for groups in values)}


def do_history(args: argparse.Namespace) -> int:
    from ...verdicts import history
    from ...asv.read import read_history

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
    match = keyword_match(args.pattern)
    series, order = read_history(project, bench.asv_layouts(), args.asv_machine)
    series = [s for s in series if match is None or match(s.entry)]
    try:
        since = history.resolve_since(order, args.since)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    found = history.analyse(series, order, thresholds, since)
    say(history.format_report(found))
    if not args.compare:
        return EXIT_OK
    if not series:
        say("# NOTHING COMPARED: no series in the asv history" + (f" matches -k {args.pattern!r}" if args.pattern
                                                                   else f" of {args.asv_machine or 'any machine'}"))
    # --strict: a gate that compared nothing has not passed.
    return exit_status(EXIT_REGRESSION if found.new_regressions() else EXIT_OK,
                       EXIT_UNKNOWN if args.strict and not series else EXIT_OK)


COMMANDS["history"] = (add_history, do_history, "the steps asv's step detection finds in the asv history")

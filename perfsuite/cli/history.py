"""``perfsuite history``: the steps asv's step detection finds in the asv history."""
from __future__ import annotations

import argparse

from .. import bench
from ..asv import project as asv_project
from ..errors import ConfigError
from .common import EXIT_OK, EXIT_REGRESSION, say

COMMANDS = {}


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
    return EXIT_REGRESSION if args.fail_on_regression and found.new_regressions() else EXIT_OK


COMMANDS["history"] = (add_history, do_history,
                       "list the steps asv's step detection finds in the asv history (regressions, improvements)")

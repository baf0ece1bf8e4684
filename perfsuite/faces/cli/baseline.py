"""``perfsuite baseline``: record a results file as this system's baselines, or show them."""
from __future__ import annotations

import argparse

from ...store import formats
from ...records.errors import ConfigError
from ...gate import not_recorded
from .. import options
from .common import EXIT_OK, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("record a results file as this system's baselines, or show the stored ones")


def add_baseline(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("update", "show"), help="update: record a results file as "
                   "the baselines; show: print the stored baselines")
    p.add_argument("--from", dest="source", metavar="RESULTS.json",
                   help="results file written by perfsuite run --json (for update)")
    p.add_argument("--system", metavar="NAME", help="system name [default: from the results file's "
                   "fingerprint for update, every system for show]")
    p.add_argument("--baseline-dir", default=options.BASELINE_DIR, metavar="DIR",
                   help="folder of baselines/<system>/<benchmark>.json [default: %(default)s]")
    p.add_argument("--allow-partial", action="store_true", help="update: also record the cases a failed "
                   "or interrupted world measured before it stopped (left out by default)")
    p.add_argument("--add", action="store_true", help="update: add the file's rounds to the stored ones "
                   "as one more session, instead of replacing them")


def do_baseline(args: argparse.Namespace) -> int:
    from ...store import baselines

    if args.action == "show":
        say(baselines.show(args.baseline_dir, args.system))
        return EXIT_OK
    if not args.source:
        raise ConfigError("baseline update needs --from RESULTS.json (written by perfsuite run --json)")
    run = formats.load_run(args.source)
    complete = [s for r in run.results for s in r.samples if s.valid]
    partial = [s for o in run.failures for s in o.samples() if s.valid]
    samples = complete + (partial if args.allow_partial else [])
    for line in not_recorded(run, args.allow_partial):
        say(line)
    if not samples:
        raise ConfigError(f"{args.source} holds only partial samples of failed or interrupted worlds; "
                          "rerun them, or pass --allow-partial to record those" if partial else
                          f"{args.source} holds no valid sample to record")
    for line in baselines.update(args.baseline_dir, baselines.system_for(run.machine, args.system),
                                 samples, run.machine, session=run.created or args.source,
                                 add=args.add, source=args.source):
        say(line)
    return EXIT_OK


COMMANDS["baseline"] = (add_baseline, do_baseline, "record a results file as the baselines, or show them")

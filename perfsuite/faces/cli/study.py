"""``perfsuite study PLAN --out DIR``: run a study plan and write its report."""
from __future__ import annotations

import argparse
import shlex
import signal
import sys

from ...store import formats
from .. import options
from ... import suite
from ...experiments import study_session
from ...experiments.study_plan import VECTORS
from .common import EXIT_INTERRUPTED, EXIT_OK, EXIT_WORLD, exit_status, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line: the vectors a plan
#: may hold, from the table plans are checked against.
DESCRIPTION = f"run a study plan (any of its {len(VECTORS)} vectors: {', '.join(VECTORS)}) and write its report"
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_WORLD: "a world failed or measured wrong results, or the study's files could not be written"}


def add_study(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", metavar="PLAN", help="a study plan, .toml or .json (e.g. studies/seed-tf.toml)")
    p.add_argument("--out", default="study", metavar="DIR",
                   help=f"folder for {study_session.RESULTS} (every finished world) and the report [default: %(default)s]")
    p.add_argument("--resume", action="store_true",
                   help=f"continue the study in --out: run only the worlds its {study_session.RESULTS} lacks, then report")
    p.add_argument("--dry-run", action="store_true",
                   help="check the plan and its MPI environments, print its worlds and expected duration; run none")


def _base(plan) -> suite.SuiteConfig:
    """The plan's [launch] table read as ``perfsuite run`` reads its launch options (TOML's
    tables and lists where the command line has NAME=VALUE items and comma lists)."""
    values = {k.replace("-", "_"): v for k, v in plan.launch.items()}
    if isinstance(values.get("env"), dict):
        values["env"] = [f"{k}={v}" for k, v in values["env"].items()]
    if isinstance(values.get("launcher_args"), list):
        values["launcher_args"] = shlex.join(map(str, values["launcher_args"]))
    if isinstance(values.get("hosts"), list):
        values["hosts"] = ",".join(map(str, values["hosts"]))
    return options.suite_config({**values, "timeout": plan.timeout})


def do_study(args: argparse.Namespace) -> int:
    from ...experiments import study_plan as sp

    plan = sp.parse(formats.read_plan(args.plan), args.plan)
    got = study_session.run(plan, args.plan, _base(plan), out=args.out, resume=args.resume, dry_run=args.dry_run,
                            say=say)
    for line in got.unwritten:
        print(f"perfsuite study: {line}", file=sys.stderr, flush=True)
    return exit_status(EXIT_INTERRUPTED + signal.Signals[got.stopped].value if got.stopped else EXIT_OK,
                       EXIT_WORLD if got.failed or got.wrong or got.unwritten else EXIT_OK)


COMMANDS["study"] = (add_study, do_study, "run a study plan and write its report")

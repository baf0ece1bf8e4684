"""``perfsuite transports``: every transport and whether it can run here, with why not."""
from __future__ import annotations

import argparse

from .. import transports
from .common import EXIT_OK, say

COMMANDS = {}


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

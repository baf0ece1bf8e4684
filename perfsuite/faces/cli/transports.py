"""``perfsuite transports``: every transport and whether it can run here, with why not."""
from __future__ import annotations

import argparse

from ... import bench, transports
from ...records.errors import ConfigError
from .ab import one_benchmark
from .common import EXIT_OK, renamed, say

COMMANDS = {}


def add_transports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", dest="benchmark", default=None, metavar="NAME",
                   help="only transports of this benchmark (one value): a name, e.g. allreduce, or the module "
                   "or .py file that declares yours")
    renamed(p, "--benchmark", "--benchmarks", "benchmark")


def runs_on(name: str) -> str:
    """The transport set a benchmark runs over (stalls: tf-epoch's); an unknown name is one line."""
    record = bench.find(name)
    if record is None:
        known = ", ".join(s.name for s in bench.all_specs())
        broken = "".join(f"; {line}" for line in bench.BROKEN.values())  # it may be one of theirs
        raise ConfigError(f"--benchmarks {name!r} is no benchmark; choose from {known}{broken}")
    return record.transports


def do_transports(args: argparse.Namespace) -> int:
    if args.benchmark:  # a name, or the module or .py file of yours that declares one, as ab takes
        args.benchmark = one_benchmark(args.benchmark, "transports")
    of = runs_on(args.benchmark) if args.benchmark else None
    for key, spec in transports.REGISTRY.items():
        if key.startswith("collective:"):  # an allreduce design under the other collectives: the matrix says
            continue
        if of and of not in spec.benchmarks:
            continue
        reason = spec.unavailable_reason()
        state = "available" if reason is None else f"skipped: {reason}"
        runs = "collectives" if spec.benchmarks == transports.COLLECTIVES else ",".join(spec.benchmarks)
        say(f"{spec.name:<14} {runs:<20} {spec.summary}\n{'':<14} {state}")
    if not of or of in transports.COLLECTIVES:
        say(matrix())
    return EXIT_OK


def matrix() -> str:
    """Which transport runs which collective: 'yes', or '-' with the reason below the table."""
    names = list(dict.fromkeys(n for c in transports.COLLECTIVES for n in transports.names(c)))
    head = f"{'# collective':<14}" + "".join(f"{c:>16}" for c in transports.COLLECTIVES)
    lines, why = [head], {}
    for name in names:
        have = transports.collectives_of(name)
        lines.append(f"{name:<14}" + "".join(f"{'yes' if c in have else '-':>16}" for c in transports.COLLECTIVES))
        missing = [c for c in transports.COLLECTIVES if c not in have]
        if missing:
            try:
                why[name] = transports.spec(name, missing[0]).unavailable_reason()
            except ConfigError:  # a design that is not an allreduce transport at all
                why[name] = f"runs only {', '.join(have)}" if have else "a training transport"
    lines += [f"# {name}: {reason}" for name, reason in why.items() if reason]
    lines.append("# 'yes' where the transport has the call; whether it can run here is above")
    return "\n".join(lines)


COMMANDS["transports"] = (add_transports, do_transports, "list transports and whether they can run here")

"""``perfsuite overhead``: the mpi transport's native and mpi4py loops beside a C program making
the same MPI call (allreduce, or each collective ``--benchmarks`` names), with deltas."""
from __future__ import annotations

import argparse

from .. import options
from ...collectives import REGULAR
from ...experiments.overhead import PLAIN_LOOPS, PLAIN_TARGET_SIZES, ROUNDS, SIZES
from ...reading import report
from ...records.errors import ConfigError
from ...records.model import format_size
from .common import EXIT_REGRESSION, EXIT_WORLD, exit_status, one_value, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("print the mpi transport's native and mpi4py loops beside a C program of the same MPI call (--benchmarks: "
               f"{', '.join(REGULAR)}; alltoallv's counts are per rank, which the C program does not take), or "
               "torch-gloo beside a plain torch.distributed loop, with deltas")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "a target missed: the harness adds more than it may",
         EXIT_WORLD: "a target nothing measured (no C program, no native loop), or a world failed"}
#: The options --help shows with their help (what is compared, over what); --help-all shows every one.
BRIEF = ("--transports", "--benchmarks", "--sizes", "--rounds", "--world-sizes")


#: The shared options that mean here what they mean to run; --transports, --sizes and --rounds
#: do not (one transport, the command's own sizes, interleaved rounds), so they are overhead's own.
OVERHEAD_OPTIONS = ("world-sizes", "launcher", "launcher-program", "launcher-args", "mpi-flavor",
                    "hostfile", "hosts", "ppn", "oversubscribe", "env", "timeout", "start-timeout", "iters", "warmup", "workdir",
                    "root")


def sizes_text(sizes) -> str:
    return ",".join(format_size(n) for n in sizes)


def add_overhead(p: argparse.ArgumentParser) -> None:
    # Only what applies: the mpi transport against C, or a transport against its framework's plain
    # loop (kernels/plain/), float32, once.
    p.add_argument("--transports", default="mpi", metavar="NAME",
                   help=f"the one transport compared: mpi (its native and mpi4py loops against a C program) or "
                        f"{', '.join(PLAIN_LOOPS)} (against a plain loop of its framework) [default: %(default)s]")
    options.add_options(p.add_argument, names=OVERHEAD_OPTIONS)
    p.add_argument("--sizes", metavar="SIZES",
                   help=f"message sizes: 4,1024,1MiB or a range MIN:MAX[:FACTOR] [default: {sizes_text(SIZES)}; "
                        f"{', '.join(PLAIN_LOOPS)}: {sizes_text(PLAIN_TARGET_SIZES)}]")
    p.add_argument("--rounds", default=str(ROUNDS), metavar="N",
                   help="rounds, each running every loop once per collective in a rotated order, so a drift of "
                        "the machine hits every loop alike [default: %(default)s]")
    p.add_argument("--benchmarks", default="allreduce", metavar="LIST",
                   help="comma list of the collectives to compare with a plain loop of the same call "
                        f"(mpi: a C program; torch-gloo: a plain torch loop): {', '.join(REGULAR)}, or all "
                        "[default: %(default)s]")


def do_overhead(args: argparse.Namespace) -> int:
    from ...experiments.overhead import overhead, plain_overhead
    from ...records.model import parse_names, whole_number

    values = vars(args)
    picked = one_value(args.transports, "--transports", "overhead", "mpi")
    if picked != "mpi" and picked not in PLAIN_LOOPS:
        raise ConfigError(f"overhead compares transport {picked!r} with nothing; choose mpi (against a C "
                          f"program) or {', '.join(PLAIN_LOOPS)} (against a plain loop of its framework)")
    # The C program times the regular collectives: alltoallv's counts are per rank, not per size.
    benchmarks = parse_names(args.benchmarks or "allreduce", REGULAR, "benchmark")
    sel = options.selection({**values, "transports": picked})
    # --rounds here counts interleaved rounds of the loops, not pooled rounds of one world.
    rounds = whole_number(args.rounds, "rounds")
    if picked != "mpi":
        rep = plain_overhead(options.suite_config({**values, "rounds": None}), picked,
                             world_size=sel.world_sizes[0], rounds=rounds,
                             sizes=sel.values["sizes"] if args.sizes is not None else PLAIN_TARGET_SIZES,
                             benchmarks=benchmarks)
        say(report.plain_overhead_table(rep))
        return exit_status(*(EXIT_WORLD if measured is None else EXIT_REGRESSION
                             for _what, measured, met in rep.targets() if not met))
    rep = overhead(options.suite_config({**values, "rounds": None}), world_size=sel.world_sizes[0],
                   sizes=sel.values["sizes"] if args.sizes is not None else SIZES, rounds=rounds,
                   benchmarks=benchmarks, root=int(sel.values.get("root") or 0))
    say(report.overhead_table(rep))
    # A missed target is the harness's own regression (1): a script or CI step running this
    # command must see it without reading the table. A target nothing measured (no C program, no
    # native loop) is not met either, but says nothing of performance: 4, as a failed world.
    return exit_status(*(EXIT_WORLD if measured is None else EXIT_REGRESSION
                         for _what, measured, met in rep.targets() if not met))


COMMANDS["overhead"] = (add_overhead, do_overhead, "what the harness adds: its loops beside a plain loop")

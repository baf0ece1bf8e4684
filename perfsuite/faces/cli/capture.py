"""``perfsuite capture``: a job's communication captured as PyTorch traces (one per rank), for
``perfsuite run --benchmarks replay --trace DIR``; ``--summary`` prints what a trace holds."""
from __future__ import annotations

import argparse

from ...launch import capture as launch_capture
from ...records import trace as traces
from ...records.errors import ConfigError
from .common import EXIT_OK, EXIT_WORLD, say

COMMANDS = {}
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_WORLD: "the job wrote no trace, or exited non-zero (its traces are kept)"}


def add_capture(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", metavar="DIR", help="folder the ranks' traces go to (empty or new)")
    p.add_argument("--skip-calls", type=int, default=0, metavar="N",
                   help="each rank's window starts after its first N collectives (set-up, warm-up steps) [default: %(default)s]")
    p.add_argument("--summary", metavar="PATH", help="print what a captured trace holds (a folder of rank files, "
                   "or a name with {rank}): calls per kind, bytes per window, groups, dtypes; then exit")
    p.add_argument("job", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the job to run, unmodified, e.g. -- torchrun --nproc-per-node 2 train.py")


def do_capture(args: argparse.Namespace) -> int:
    command = args.job[1:] if args.job[:1] == ["--"] else args.job
    if args.summary:
        if command or args.out:
            raise ConfigError("--summary PATH reads a capture; give it alone, or -o DIR -- COMMAND to capture one")
        for line in traces.summary(traces.load(args.summary)):
            say(line)
        return EXIT_OK
    if args.skip_calls < 0:
        raise ConfigError(f"--skip-calls {args.skip_calls} must be a whole number >= 0: the calls each rank's "
                          "window leaves out, e.g. 11")
    if not args.out:
        raise ConfigError("perfsuite capture needs -o DIR (where the traces go) and -- COMMAND, "
                          "or --summary PATH")
    status, files = launch_capture.capture(command, args.out, args.skip_calls)
    if not files:
        say(f"perfsuite capture: the command exited {status} and no rank wrote a trace: it never called "
            "torch.distributed.init_process_group in a Python that loads site (python -S/-I skip the hook)")
        return EXIT_WORLD
    for line in traces.summary(traces.load(args.out)):
        say(line)
    say(f"# {len(files)} traces in {args.out}; replay: perfsuite run --benchmarks replay --trace {args.out}")
    if status != 0:
        say(f"perfsuite capture: the command exited {status}; its traces are kept")
        return EXIT_WORLD
    return EXIT_OK


COMMANDS["capture"] = (add_capture, do_capture, "capture a job's communication as traces to replay")

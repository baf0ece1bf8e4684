"""``perfsuite detection-power``: how often A/B and stored-baseline verdicts flag a slowdown and
a clean rerun, measured on real worlds (or a saved stream judged again)."""
from __future__ import annotations

import argparse
import sys

from ...store import formats
from .. import options
from ... import suite, transports
from ...records.model import format_size, parse_size, whole_number
from .ab import write_kept
from .common import EXIT_OK, EXIT_WORLD, exit_status, fraction, alpha_help, gate_settings, one_value, renamed, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("measure how often A/B and stored-baseline verdicts flag a slowdown and a clean rerun, and whether the "
               "canary earns an adjustment")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_WORLD: "a world failed or measured wrong results: the stream is incomplete"}


def add_detection_power(p: argparse.ArgumentParser) -> None:
    from ...experiments import detection as d

    c = d.DetectionConfig()
    p.add_argument("--small", default=format_size(c.small), metavar="SIZE", help="latency size [default: %(default)s]")
    p.add_argument("--large", default=format_size(c.large), metavar="SIZE", help="busbw size [default: %(default)s]")
    p.add_argument("--transports", default=c.transport, metavar="NAME",
                   help="the transport measured, one value [default: %(default)s]")
    renamed(p, "--transport", "--transports", "transports")
    p.add_argument("--blocks", default=str(c.blocks), metavar="K",
                   help="blocks of three pairs (A/A, A/+small, A/+large), 6 worlds each; 0: blocks until the "
                        f"stream has run the gap plus {d.CANDIDATE_S:.0f} s [default: %(default)s]")
    p.add_argument("--small-slowdown", default=f"{c.small_slowdown:g}", metavar="F",
                   help="slowdown A/B mode is asked to catch [default: %(default)s]")
    p.add_argument("--large-slowdown", default=f"{c.large_slowdown:g}", metavar="F",
                   help="slowdown the stored-baseline gate is asked to catch [default: %(default)s]")
    p.add_argument("--gap", default=f"{c.gap_s:g}", metavar="S",
                   help="seconds between a baseline and its candidates [default: %(default)s]")
    p.add_argument("--max-pairs", default=str(c.max_pairs), metavar="N",
                   help="A/B mode: pairs per window at most [default: %(default)s]")
    p.add_argument("--tolerance", metavar="TOL", help="stored mode: 0.05 or LOWER:UPPER [default: the gate's]")
    p.add_argument("--alpha", default=f"{c.alpha:g}", metavar="P",
                   help=alpha_help("the gate's, whose rates this measures", "%(default)s"))
    p.add_argument("--max-contention", default=f"{c.max_contention:g}", metavar="F",
                   help="contended worlds are left out, as the gate does; off: none is [default: %(default)s]")
    p.add_argument("--seed", default=str(c.seed), metavar="N", help="order of pairs [default: %(default)s]")
    p.add_argument("--timeout", default="120", metavar="S", help="seconds one world may take [default: %(default)s]")
    p.add_argument("--json", metavar="PATH", help="write the versioned file: every world, every window")
    p.add_argument("--from", dest="source", metavar="PATH",
                   help="judge the worlds of a stream written by --json again, with this perfsuite's "
                        "rules (and --max-pairs, --gap if given), instead of running worlds")


def do_detection_power(args: argparse.Namespace) -> int:
    from ...experiments import detection as d

    tol, alpha = gate_settings(args)
    if args.source:
        saved = formats.check_format(formats.read_json(args.source, "detection stream", "pass a file written "
                                                       "by perfsuite detection-power --json"),
                                     formats.DETECTION, args.source)
        given = {"max_pairs": whole_number(args.max_pairs, "max pairs", low=2),
                 "gap_s": options.seconds(args.gap, "gap") if args.gap != "0" else 0.0, "tolerance": tol}
        cfg, worlds = d.from_dict(saved, **given)
        say(f"# detection power: {len(worlds)} worlds of {args.source}, judged again")
        rep = d.judge(cfg, worlds, float(saved.get("wall_s", 0.0)), saved.get("injection"))
        say(d.format_report(rep))
        return detection_status(rep)
    cfg = d.DetectionConfig(small=parse_size(args.small), large=parse_size(args.large),
                            transport=one_value(args.transports, "--transports", "detection-power", "mpi"),
                            blocks=whole_number(args.blocks, "blocks", low=0),
                            small_slowdown=fraction(args.small_slowdown, "small-slowdown"),
                            large_slowdown=fraction(args.large_slowdown, "large-slowdown"),
                            gap_s=options.seconds(args.gap, "gap") if args.gap != "0" else 0.0,
                            max_pairs=whole_number(args.max_pairs, "max pairs", low=2),
                            tolerance=tol, alpha=alpha,
                            max_contention=options.contention_limit(args.max_contention),
                            seed=whole_number(args.seed, "seed", low=0))
    transports.spec(cfg.transport, "allreduce")
    runner = d.world_runner(suite.SuiteConfig(timeout=options.seconds(args.timeout)))
    say(f"# detection power: {cfg.blocks * 6} worlds in {cfg.blocks} blocks ..." if cfg.blocks else
        f"# detection power: blocks of 6 worlds for {cfg.stream_s:.0f} s (the {cfg.gap_s:.0f} s "
        f"gap, then {d.CANDIDATE_S:.0f} s of candidates) ...")
    rep = d.run(cfg, runner, progress=lambda m: print(f"# {m}", file=sys.stderr, flush=True))
    say(d.format_report(rep))
    return exit_status(detection_status(rep),
                       write_kept(args.json, formats.DETECTION, rep.to_dict(), "detection-power", "detection stream"))


def detection_status(rep) -> int:
    """The rates are read from the calm, valid worlds that ran; one that failed (FAILED) or whose
    results were wrong (INVALID, which ends a stream measured now) leaves the stream incomplete:
    4, as a failed world."""
    return EXIT_WORLD if rep.failures or rep.invalid_lines() else EXIT_OK


COMMANDS["detection-power"] = (add_detection_power, do_detection_power, "how often verdicts flag a slowdown and a clean rerun")

"""``perfsuite nodes``: every link between the nodes, one rank per node, in round-robin rounds
(the p2p benchmark); names the node whose links are slow, or the slow links. Exit 1 when one is
named, so a nightly step can stop on it."""
from __future__ import annotations

import argparse
import os
import signal

from ...store import formats
from ... import interrupts, suite
from .. import options
from ...reading import report
from ...verdicts import stragglers
from ...reading import verdict_text as vt
from ...records.errors import ConfigError
from ...records.model import whole_number
from .common import EXIT_OK, EXIT_REGRESSION, EXIT_WORLD, exit_status, renamed, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("measure every link between the nodes (one rank per node, round-robin pairs) and name the slow node or "
               "links")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_REGRESSION: "a slow node or link named",
         EXIT_WORLD: "a world failed or returned wrong results, or the results file could not be written"}
#: The options --help shows with their help (which nodes, and how they start); --help-all shows every one.
BRIEF = ("--nodes", "--hosts", "--hostfile", "--launcher", "--link-sizes", "--json")

NODES_OPTIONS = ("launcher", "launcher-program", "launcher-args", "mpi-flavor", "hostfile", "hosts", "env",
                 "timeout", "start-timeout", "workdir", "iters", "link-sizes", "repeats", "emulated-network")


def add_nodes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", metavar="N", help="how many nodes (one rank each) [default: the --hosts or "
                   "--hostfile count, or Slurm's SLURM_NNODES inside an allocation]")
    options.add_options(p.add_argument, names=NODES_OPTIONS)  # p2p's sizes: --link-sizes, as in run
    renamed(p, "--sizes", "--link-sizes", "link_sizes")
    p.add_argument("--json", metavar="PATH", help="write the versioned results file here")


def node_count(args: argparse.Namespace) -> int:
    """--nodes, else the hosts named, else the Slurm allocation's node count."""
    if args.nodes is not None:
        n = whole_number(args.nodes, "nodes", low=2)
    elif args.hosts:
        n = len([h for h in str(args.hosts).split(",") if h.strip()])
    elif args.hostfile:
        try:
            with open(args.hostfile) as f:
                n = len([line for line in f if line.split("#", 1)[0].strip()])
        except OSError as exc:
            raise ConfigError(f"hostfile {args.hostfile!r} cannot be read ({exc.strerror})") from None
    elif os.environ.get("SLURM_NNODES"):
        n = whole_number(os.environ["SLURM_NNODES"], "SLURM_NNODES", low=1)
    else:
        raise ConfigError("say how many nodes: --nodes N (or --hosts, --hostfile, or run inside a Slurm "
                          "allocation)")
    if n < 2:
        raise ConfigError(f"nodes {n} cannot form a link; give --nodes 2 or more (3 or more to name a node)")
    return n


def do_nodes(args: argparse.Namespace) -> int:
    n = node_count(args)
    values = {**vars(args), "benchmarks": "p2p", "transports": "mpi", "world_sizes": str(n), "ppn": "1",
              "rounds": None}
    sel = options.selection(values, "p2p")
    cases = suite.select_cases(sel)
    cfg = options.suite_config(values)
    with interrupts.handled() as signals:
        run = suite.run(cases, cfg)
        signals.defer()
        say(report.run_summary(run))
        for s in run.samples():
            if not s.valid:
                say(vt.invalid_sample(s))
        kept = True
        if args.json:
            where, why = formats.write_run_kept(args.json, run)
            say(f"# results written to {where}" + (f" because {why}" if why else ""))
            kept = why is None
        if run.interrupted or signals.raised:
            return 128 + signal.Signals[run.interrupted or signals.raised.name].value
    # A case whose results were wrong is a failed world (run.ok is False): never evidence of a
    # slow node or link.
    samples = [s for s in run.samples() if s.valid]
    names = samples[0].info.get("nodes") or [] if samples else []
    if len(set(names)) < len(names):
        say(f"# nodes: {len(names)} ranks on {len(set(names))} host(s) ({', '.join(sorted(set(names)))}): "
            "ranks that share a host measure its memory, not a link; give one host per rank (--hosts, "
            "--hostfile, a Slurm allocation, or --emulated-network)")
    found = bool(stragglers.named(samples)) or any(s.info.get("slow_links") for s in samples)
    unjudged = next((s.info["straggler_why"] for s in samples if s.info.get("straggler_why")), None)
    if not found and run.ok:
        # Two nodes share their one link: a slow one has no other link to stand out against.
        say(f"# nodes: {n} nodes, {len(samples)} case(s): "
            + (f"nothing judged ({unjudged})" if unjudged else "no node or link stands out"))
    return exit_status(EXIT_OK if run.ok and kept else EXIT_WORLD, EXIT_REGRESSION if found else EXIT_OK)


COMMANDS["nodes"] = (add_nodes, do_nodes, "measure every link between nodes and name a slow one")

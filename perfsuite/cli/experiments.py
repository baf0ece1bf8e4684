"""The experiments' commands: ``detection-power``, ``overhead`` and ``stalls``."""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from dataclasses import replace

from .. import formats, options, report, suite, transports
from ..errors import ConfigError
from ..model import parse_size, whole_number
from .common import EXIT_FAIL, EXIT_OK, gate_settings, say

COMMANDS = {}


def add_detection_power(p: argparse.ArgumentParser) -> None:
    from ..experiments import detection as d

    c = d.DetectionConfig()
    p.add_argument("--small", default=str(c.small), metavar="SIZE", help=f"latency size [default: {c.small}]")
    p.add_argument("--large", default="16MiB", metavar="SIZE", help="busbw size [default: 16MiB]")
    p.add_argument("--transport", default=c.transport, help=f"[default: {c.transport}]")
    p.add_argument("--blocks", default=str(c.blocks), metavar="K",
                   help="blocks of three pairs (A/A, A/+small, A/+large), 6 worlds each [default: 0, "
                        f"blocks until the stream has run the gap plus {d.CANDIDATE_S:.0f} s]")
    p.add_argument("--small-slowdown", default=f"{c.small_slowdown:g}", metavar="F",
                   help=f"slowdown A/B mode is asked to catch [default: {c.small_slowdown:g}]")
    p.add_argument("--large-slowdown", default=f"{c.large_slowdown:g}", metavar="F",
                   help=f"slowdown the stored-baseline gate is asked to catch [default: {c.large_slowdown:g}]")
    p.add_argument("--gap", default=f"{c.gap_s:g}", metavar="S",
                   help=f"seconds between a baseline and its candidates [default: {c.gap_s:g}]")
    p.add_argument("--max-pairs", default=str(c.max_pairs), metavar="N",
                   help=f"A/B mode: pairs per window at most [default: {c.max_pairs}]")
    p.add_argument("--tolerance", metavar="TOL", help="stored mode: 0.05 or LOWER:UPPER [default: the gate's]")
    p.add_argument("--alpha", default=str(c.alpha), help=f"significance level [default: {c.alpha}]")
    p.add_argument("--max-contention", default="0.05", metavar="F",
                   help="contended worlds are left out, as the gate does [default: 0.05; off]")
    p.add_argument("--seed", default=str(c.seed), metavar="N", help=f"order of pairs [default: {c.seed}]")
    p.add_argument("--timeout", default="120", metavar="S", help="seconds one world may take [default: 120]")
    p.add_argument("--json", metavar="PATH", help="write the versioned file: every world, every window")
    p.add_argument("--from", dest="source", metavar="PATH",
                   help="judge the worlds of a stream written by --json again, with this perfsuite's "
                        "rules (and --max-pairs, --gap if given), instead of running worlds")


def _fraction(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--{what} {text!r} takes a fraction, e.g. 0.05") from None


def do_detection_power(args: argparse.Namespace) -> int:
    from ..experiments import detection as d

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
        return EXIT_OK
    cfg = d.DetectionConfig(small=parse_size(args.small), large=parse_size(args.large),
                            transport=args.transport, blocks=whole_number(args.blocks, "blocks", low=0),
                            small_slowdown=_fraction(args.small_slowdown, "small-slowdown"),
                            large_slowdown=_fraction(args.large_slowdown, "large-slowdown"),
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
    if args.json:
        formats.write_json(args.json, formats.stamp(formats.DETECTION, rep.to_dict()))
        say(f"# detection stream written to {args.json}")
    return EXIT_OK


COMMANDS["detection-power"] = (add_detection_power, do_detection_power,
                               "measure how often A/B and stored-baseline verdicts flag a slowdown "
                               "and a clean rerun, and whether the canary earns an adjustment")


def add_validity(p: argparse.ArgumentParser) -> None:
    from ..experiments import validity as v

    p.add_argument("--mode", default="both", choices=("stored", "ab", "both"), help="[default: both]")
    p.add_argument("--runs", default=str(v.DEFAULT_RUNS), metavar="N",
                   help=f"seeded runs per setting [default: {v.DEFAULT_RUNS}]")
    p.add_argument("--within", default=",".join(f"{x:g}" for x in v.WITHIN), metavar="LIST",
                   help="within-session spreads, fractions [default: %(default)s]")
    p.add_argument("--lag1", default=",".join(f"{x:g}" for x in v.LAG1), metavar="LIST",
                   help="lag-1 correlations of rounds [default: %(default)s]")
    p.add_argument("--sessions", default=",".join(f"{x:g}" for x in v.SESSION), metavar="LIST",
                   help="SD of the drift between sessions, fractions [default: %(default)s]")
    p.add_argument("--mode-step", default="0", metavar="F",
                   help="a slow machine mode this much slower (0.65: x1.65), its canary 1.65x [default: 0]")
    p.add_argument("--switch", default="0.1", metavar="F",
                   help="with --mode-step: the chance per world that the mode changes [default: 0.1]")
    p.add_argument("--canary-blind", action="store_true",
                   help="with --mode-step: the canary does not see the modes (as on this project's VM)")
    p.add_argument("--change", default="0", metavar="F",
                   help="a real change of the candidate (arm B), e.g. 0.3: the rate it is caught "
                        "[default: 0, the false-alarm rate]")
    p.add_argument("--cases", default="1", metavar="N", help="cases judged in each run, one family [default: 1]")
    p.add_argument("--baseline-sessions", default="1", metavar="K",
                   help="stored mode: sessions the baseline holds (--baseline-add) [default: 1]")
    p.add_argument("--seed", default="0", metavar="N", help="[default: 0]")
    p.add_argument("--json", metavar="PATH", help="write the versioned table here")


def _floats(text: str, what: str) -> list[float]:
    from ..model import split_list

    return [_fraction(x, what) for x in split_list(text, what, "0.01,0.02")]


def do_validity(args: argparse.Namespace) -> int:
    from ..experiments import validity as v

    runs = whole_number(args.runs, "runs")
    kw = {"change": _fraction(args.change, "change"), "n_cases": whole_number(args.cases, "cases")}
    sessions = whole_number(args.baseline_sessions, "baseline sessions")
    machines = v.grid(_floats(args.within, "within"), _floats(args.lag1, "lag1"), _floats(args.sessions, "sessions"))
    step = _fraction(args.mode_step, "mode-step")
    if step:
        machines = [replace(m, mode_step=math.log1p(step), switch=_fraction(args.switch, "switch"),
                            canary_sees=not args.canary_blind) for m in machines]
    modes = ("stored", "A/B") if args.mode == "both" else (("stored",) if args.mode == "stored" else ("A/B",))
    say(f"# validity: {len(machines)} synthetic machine(s) x {len(modes)} mode(s), {runs} seeded runs each, "
        "judged by the code the commands run")
    rates = []
    for mode in modes:
        for i, m in enumerate(machines):
            extra = {"sessions": sessions} if mode == "stored" else {}
            rates.append(v.rate(mode, m, runs, seed=whole_number(args.seed, "seed", low=0) + i, **kw, **extra))
            print(f"# {mode} {m.label()}: {rates[-1].hits}/{runs}", file=sys.stderr, flush=True)
    say(v.table(rates))
    if args.json:
        formats.write_json(args.json, formats.stamp(formats.VALIDITY, {"rates": [r.to_dict() for r in rates]}))
        say(f"# table written to {args.json}")
    clean = [r for r in rates if r.condition == "clean"]
    return EXIT_FAIL if any(r.rate > v.BOUND for r in clean) else EXIT_OK


COMMANDS["validity"] = (add_validity, do_validity,
                        "the verdict rules' false-alarm and detection rates on synthetic sessions, "
                        "through the code the commands run")


OVERHEAD_OPTIONS = ("world-sizes", "sizes", "launcher", "launcher-program", "launcher-args", "mpi-flavor",
                    "hostfile", "hosts", "ppn", "oversubscribe", "env", "timeout", "iters", "warmup", "workdir",
                    "rounds")


def add_overhead(p: argparse.ArgumentParser) -> None:
    # Only what applies: the comparison is always the mpi transport, float32, out of place, once.
    options.add_options(p.add_argument, names=OVERHEAD_OPTIONS)


def do_overhead(args: argparse.Namespace) -> int:
    from ..experiments.overhead import ROUNDS, SIZES, overhead
    from ..model import whole_number

    values = vars(args)
    sel = options.selection({**values, "transports": "mpi"})
    # --rounds here counts interleaved rounds of the three loops, not pooled rounds of one world.
    rounds = whole_number(args.rounds, "rounds") if args.rounds is not None else ROUNDS
    rep = overhead(options.suite_config({**values, "rounds": None}), world_size=sel.world_sizes[0],
                   sizes=sel.values["sizes"] if args.sizes is not None else SIZES, rounds=rounds)
    say(report.overhead_table(rep))
    # A missed target is the harness's own regression: a script or CI step running this command
    # must see it without reading the table.
    return EXIT_FAIL if rep.missed() else EXIT_OK


COMMANDS["overhead"] = (add_overhead, do_overhead,
                        "print the mpi transport's native and mpi4py loops beside a C MPI_Allreduce program, with "
                        "deltas; exit 1 when a target is not met")


# --- stalls (Stash breakdown) ----------------------------------------------------------------

def add_stalls(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="small-cnn", help="tf-epoch model [default: small-cnn]")
    p.add_argument("--transport", default="mpi", help="tf-epoch transport [default: mpi]")
    p.add_argument("--world-size", default="2", metavar="N", help="workers N [default: 2]")
    p.add_argument("--batch", default="16", metavar="B", help="images per worker per step [default: 16]")
    p.add_argument("--steps", default="10", metavar="N", help="timed steps per run [default: 10]")
    p.add_argument("--warmup", default="2", metavar="N", help="warm-up steps per run [default: 2]")
    p.add_argument("--image-size", default=None, metavar="PX", help="model input size [default: the model's]")
    p.add_argument("--emulated-network", default=None, metavar="RATE",
                   help="bandwidth of the emulated links for T4, e.g. 1gbit, 10gbit, 25gbit "
                        "(',delay=5ms' needs netem); unset: no network stall")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="JPEG dataset folder (written if missing) [default: a folder under the temp dir]")
    p.add_argument("--no-data", action="store_true", help="skip the real-data runs (no prep/fetch stall)")
    p.add_argument("--emulated-disk", default=None, metavar="RATE",
                   help="read bandwidth of an emulated slow disk for the file runs, e.g. 20MB/s "
                        "(root, cgroup v1 blkio) [default: the real disk]")
    p.add_argument("--prep-threads", default="2", metavar="N", help="tf.data threads per worker [default: 2]")
    p.add_argument("--timeout", default="600", metavar="S", help="seconds one run may take [default: 600]")
    p.add_argument("--json", metavar="PATH", help="write the versioned results file (stall metrics) here")
    p.add_argument("--png", metavar="PATH", help="stacked-bar picture [default: next to --json, else stalls.png]")


def do_stalls(args: argparse.Namespace) -> int:
    from .. import dataset, stalls
    from ..experiments.stalls import StallConfig, run_stalls
    from ..kernels.tf_models import check_image_size, model_spec
    from ..launch import netns
    from ..launch.diskio import parse_disk_rate

    spec = model_spec(args.model)
    transports.spec(args.transport, "tf-epoch")
    n = whole_number(args.world_size, "world size", low=2)
    batch, steps = whole_number(args.batch, "batch"), whole_number(args.steps, "steps")
    warmup = whole_number(args.warmup, "warm-up steps", low=0)
    image = check_image_size(args.model, args.image_size) if args.image_size else spec.image_size
    shaping = netns.parse_shaping(args.emulated_network) if args.emulated_network else None
    if shaping is not None and shaping.delay:
        say(f"# delay {shaping.delay} asked for: checking for netem ({netns.NO_NETEM} if absent)")
    data_dir = None
    if not args.no_data:
        count = n * (warmup + steps) * batch
        px = max(image + image // 4, 16)  # stored a little larger: the pipeline resizes
        data_dir = args.data_dir or os.path.join(tempfile.gettempdir(), f"perfsuite-jpeg-{count}x{px}")
        m = dataset.ensure_dataset(data_dir, dataset.DatasetSpec(count=count, image_px=px))
        say(f"# dataset {data_dir}: {m['count']} JPEG files of {px} px, {m['bytes'] / 1e6:.1f} MB")
    sc = StallConfig(model=args.model, transport=args.transport, world_size=n, batch=batch,
                     network=shaping, data_dir=data_dir, prep_threads=whole_number(args.prep_threads, "prep threads"),
                     disk=parse_disk_rate(args.emulated_disk) if args.emulated_disk else None,
                     options={"iters": steps, "warmup": warmup, "image_size": image})

    def on_run(event, run, outcome):
        if event == "start":
            say(f"# {run.key}: {run.meaning} ...")
        elif outcome is not None and (outcome.skipped or outcome.failure):
            say(f"#   {run.key}: {outcome.skipped or outcome.failure}")

    out = run_stalls(sc, suite.SuiteConfig(timeout=options.seconds(args.timeout)), on_run)
    for key, why in out.skipped.items():
        say(f"# {key} skipped: {why}")
    title = f"{args.model} b{batch} {args.transport} n{n}" + (f" {shaping.label}" if shaping else "")
    say(stalls.format_table(out.breakdown, title))
    bound = out.sample.info.get("network_stall_bound_ms")
    if bound is not None:
        say(f"# network bound: gradients {out.sample.info['gradient_bytes']} B x 2(n-1)/n / "
               f"{shaping.label} = {bound:.2f} ms/step")
    if args.json:
        formats.write_run(args.json, out.suite_run())
        say(f"# results written to {args.json}")
    png = args.png or (os.path.splitext(args.json)[0] + ".png" if args.json else "stalls.png")
    report.write_stall_png(png, out.breakdown, title)
    say(f"# stacked bar written to {png}")
    return EXIT_OK


COMMANDS["stalls"] = (add_stalls, do_stalls,
                      "Stash stall breakdown of a training step: compute, interconnect, prep, fetch, network")



"""``perfsuite stalls``: the Stash stall breakdown of a training step (compute, interconnect,
prep, fetch, network)."""
from __future__ import annotations

import argparse
import os
import sys

from ...store import formats
from .. import options
from ... import suite, transports
from ...reading import report
from ...reading import verdict_text as vt
from ...launch.netns import SHAPING_FORMS
from ...records.model import whole_number
from ...kernels.models.catalogue import LM_MODELS, MODELS
from .common import EXIT_OK, EXIT_WORLD, one_value, renamed, say

COMMANDS = {}
#: What its --help and docs/cli.md say it does, beyond ``perfsuite --help``'s line.
DESCRIPTION = ("Stash stall breakdown of a training step: compute, interconnect, prep, fetch, network")
#: What its statuses mean for this command (records/status.py's where it says nothing).
EXITS = {EXIT_WORLD: "a run's world failed or measured wrong results, or the results or the picture could not be written"}
#: The options --help shows with their help (the one training world broken down); --help-all shows every one.
BRIEF = ("--models", "--transports", "--world-sizes", "--batches", "--emulated-network", "--json")
#: The training transport a breakdown runs unless --transports names one: TensorFlow's mpi design
#: for an image model, PyTorch's gloo for a language model.
TRANSPORT, LM_TRANSPORT = "mpi", "torch-gloo"


def add_stalls(p: argparse.ArgumentParser) -> None:
    # The axes are spelled as every command spells them (plural); a breakdown takes one value of each.
    p.add_argument("--models", default="small-cnn", metavar="MODEL", help="training model, one value "
                   "[default: %(default)s]")
    p.add_argument("--transports", default=None, metavar="TRANSPORT", help="training transport, one value: "
                   "TensorFlow's (mpi, grpc, horovod, ...) or PyTorch's (torch-gloo, torch-nccl) "
                   f"[default: {TRANSPORT}; {LM_TRANSPORT} for a language model]")
    p.add_argument("--world-sizes", default="2", metavar="N", help="workers, one value [default: %(default)s]")
    p.add_argument("--batches", default="16", metavar="B", help="images (or sequences) per worker per step, "
                   "one value [default: %(default)s]")
    for old, now in (("--model", "--models"), ("--transport", "--transports"), ("--world-size", "--world-sizes"),
                     ("--batch", "--batches")):
        renamed(p, old, now, now[2:].replace("-", "_"))
    p.add_argument("--steps", default="10", metavar="N", help="timed steps per run [default: %(default)s]")
    p.add_argument("--warmup", default="2", metavar="N", help="warm-up steps per run [default: %(default)s]")
    p.add_argument("--image-size", default=None, metavar="PX", help="model input size [default: the model's]")
    p.add_argument("--seq-len", default=None, metavar="T",
                   help="tokens per sequence of a language model [default: the model's, "
                   + ", ".join(f"{MODELS[m].seq_len} for {m}" for m in LM_MODELS) + "]")
    p.add_argument("--emulated-network", default=None, metavar="RATE[,...]",
                   help=f"the emulated links for T4: {SHAPING_FORMS}; unset: no network stall")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="dataset folder, JPEGs or a language model's token shards (written if missing) "
                        "[default: a folder under the temp dir]")
    p.add_argument("--no-data", action="store_true", help="skip the real-data runs (no prep/fetch stall)")
    p.add_argument("--emulated-disk", default=None, metavar="RATE",
                   help="read bandwidth of an emulated slow disk for the file runs, e.g. 20MB/s "
                        "(root, cgroup v1 blkio) [default: the real disk]")
    p.add_argument("--prep-threads", default="2", metavar="N", help="input threads per worker: tf.data's, or DataLoader "
                   "worker processes [default: %(default)s]")
    p.add_argument("--timeout", default="600", metavar="S", help="seconds one run may take [default: %(default)s]")
    p.add_argument("--json", metavar="PATH", help="write the versioned results file (stall metrics) here")
    p.add_argument("--png", metavar="PATH", help="stacked-bar picture [default: next to --json, else stalls.png]")


def do_stalls(args: argparse.Namespace) -> int:
    from ...stalls import stash as stalls
    from ...stalls.experiment import StallConfig, ensure_data, run_stalls, stall_benchmark
    from ...kernels.models.catalogue import check_image_size, check_seq_len, model_spec
    from ...launch import netns
    from ...launch.diskio import parse_disk_rate

    png = args.png or (os.path.splitext(args.json)[0] + ".png" if args.json else "stalls.png")
    if not args.png:  # the default picture's folder, checked as --png is, before any world runs
        formats.check_output_file(png, "the stacked-bar picture (--png)")
    model = one_value(args.models, "--models", "stalls", "small-cnn")
    spec = model_spec(model)
    transport = (one_value(args.transports, "--transports", "stalls", TRANSPORT) if args.transports
                 else LM_TRANSPORT if spec.is_lm else TRANSPORT)
    transports.spec(transport, stall_benchmark(model, transport, not args.no_data))
    n = whole_number(one_value(args.world_sizes, "--world-sizes", "stalls", "2"), "world size", low=2)
    batch = whole_number(one_value(args.batches, "--batches", "stalls", "16"), "batch")
    steps = whole_number(args.steps, "steps")
    warmup = whole_number(args.warmup, "warm-up steps", low=0)
    image = check_image_size(model, args.image_size) if args.image_size else spec.image_size
    seq_len = check_seq_len(model, args.seq_len) if args.seq_len else spec.seq_len
    shaping = netns.parse_shaping(args.emulated_network) if args.emulated_network else None
    if shaping is not None and shaping.delay:
        say(f"# delay {shaping.delay} asked for: checking for netem ({netns.NO_NETEM} if absent)")
    data_dir = None
    if not args.no_data:
        data_dir, described = ensure_data(spec, n * (warmup + steps) * batch, image, seq_len, args.data_dir)
        say(f"# dataset {data_dir}: {described}")
    shape = {"seq_len": seq_len} if spec.is_lm else {"image_size": image}
    sc = StallConfig(model=model, transport=transport, world_size=n, batch=batch,
                     network=shaping, data_dir=data_dir, prep_threads=whole_number(args.prep_threads, "prep threads"),
                     disk=parse_disk_rate(args.emulated_disk) if args.emulated_disk else None,
                     options={"iters": steps, "warmup": warmup, **shape})

    def on_run(event, run, outcome):
        if event == "start":
            say(f"# {run.key}: {run.meaning} ...")
        elif outcome is not None and (outcome.skipped or outcome.failure):
            say(f"#   {run.key}: {outcome.skipped or outcome.failure}")
        if outcome is not None:
            for s in outcome.samples():
                if not s.valid:
                    say(vt.invalid_sample(s, at=f"run {run.key}"))

    out = run_stalls(sc, suite.SuiteConfig(timeout=options.seconds(args.timeout)), on_run)
    for key, why in out.skipped.items():
        say(f"# {key} skipped: {why}")
    title = f"{model} b{batch} {transport} n{n}" + (f" {shaping.label}" if shaping else "")
    say(stalls.format_table(out.breakdown, title))
    memory = stalls.memory_line(out.sample.info)
    if memory:
        say(memory)
    bound = out.sample.info.get("network_stall_bound_ms")
    if bound is not None:
        say(f"# network bound: gradients {out.sample.info['gradient_bytes']} B x 2(n-1)/n / "
               f"{shaping.label} = {bound:.2f} ms/step")
    unwritten = []  # a write that failed after the runs: one line each, and 4
    if args.json:
        where, why = formats.write_run_kept(args.json, out.suite_run())
        if why is None:
            say(f"# results written to {where}")
        else:
            unwritten.append(f"{why}; the results are in {where} instead")
    try:
        report.write_stall_png(png, out.breakdown, title)
        say(f"# stacked bar written to {png}")
    except OSError as exc:
        unwritten.append(f"{png} could not be written ({exc.strerror or exc}): no stacked bar")
    for line in unwritten:
        print(f"perfsuite stalls: {line}", file=sys.stderr, flush=True)
    # A run that could not run here (no root for the disk, no netem) is a skip; one whose world
    # failed or measured a wrong result leaves its stall unmeasured: 4, as a failed world.
    failed = [k for k, o in out.outcomes.items()
              if o.failure is not None or not all(s.valid for s in o.samples())]
    return EXIT_WORLD if failed or unwritten else EXIT_OK


COMMANDS["stalls"] = (add_stalls, do_stalls, "Stash stall breakdown of a training step")

"""``perfsuite``: the command-line face. Thin: parse, call the suite or an experiment, print
what ``report`` formats.

Each command is a pair in ``COMMANDS``: ``add_<name>(parser)`` declares its arguments and
``do_<name>(args) -> exit status`` runs it, so tests call a command as a function (asv's
``commands/*.py`` habit). Exit status: 0 when everything that could run here ran and
validated, 1 when a world failed or a result was wrong (or a gate tripped), 2 on bad usage.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from . import bench, formats, options, regress, report, suite, transports
from .asv import project as asv_project
from .errors import ConfigError, PerfsuiteError
from .model import parse_size, whole_number

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

#: name -> (add_arguments, handler, help)
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], int], str]] = {}


def _print(text: str = "") -> None:
    print(text, flush=True)


def _gate_settings(args: argparse.Namespace):
    """(tolerance or None, alpha): the gate's settings, refused before any world runs."""
    tol = regress.parse_tolerance(args.tolerance) if getattr(args, "tolerance", None) else None
    return tol, regress.parse_alpha(getattr(args, "alpha", None))


# --- run --------------------------------------------------------------------------------------

def add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", default="allreduce", metavar="LIST",
                   help=f"comma list of benchmarks: {', '.join(bench.names())} [default: allreduce]")
    options.add_options(p.add_argument)
    p.add_argument("--json", metavar="PATH", help="write the versioned results file here")
    p.add_argument("--compare", action="store_true", help="judge every case against the baselines "
                   "of this system and exit 1 on any regression (see --baseline-dir, --system)")
    p.add_argument("--keep-worlds", action="store_true", help="keep each world's scratch folder (debugging)")
    asv_project.add_options(p.add_argument)


def run_cases_from_args(args: argparse.Namespace) -> tuple[list, suite.SuiteConfig]:
    values = vars(args)
    cases = []
    for b in (b.strip() for b in args.benchmarks.split(",") if b.strip()):
        if b not in bench.names():
            raise ConfigError(f"benchmark {b!r} is unknown; choose from {', '.join(bench.names())}")
        sel = options.selection(values, b)
        if not sel.transports:
            raise ConfigError(f"none of the transports {args.transports!r} runs {b}; "
                              f"{b} runs {', '.join(transports.names(bench.get(b).transports))}")
        cases += suite.select_cases(sel)
    cfg = options.suite_config(values)
    return cases, replace(cfg, keep_worlds=bool(args.keep_worlds))


def do_run(args: argparse.Namespace) -> int:
    from .asv.record import record_run
    from .progress import SweepProgress

    cases, cfg = run_cases_from_args(args)
    _gate_settings(args)
    asv_to = asv_project.prepare(asv_project.target(vars(args)))  # bad --asv* is a usage error now
    with SweepProgress(suite.plan(cases, cfg.options)) as on_world:
        run = suite.run(cases, cfg, on_world=on_world)
    _print(report.run_summary(run))
    if args.report:
        report.write_report(args.report, [report.ReportRun.from_suite_run(run, args.json or "this run")])
        _print(f"# report written to {Path(args.report) / 'index.html'}")
    if args.json:
        formats.write_run(args.json, run)
        _print(f"# results written to {args.json}")
    if asv_to is not None:
        _print(record_run(run, asv_to).line())
    gate = gate_run(run, args)
    return EXIT_OK if run.ok and gate == EXIT_OK else EXIT_FAIL


COMMANDS["run"] = (add_run, do_run, "run the suite on this machine (or a cluster) and print tables")


# --- baselines and verdicts -------------------------------------------------------------------

def _print_verdicts(verdicts: list, strict: bool) -> int:
    _print(regress.verdict_table(verdicts))
    bad = regress.failing(verdicts, strict)
    for v in bad:
        _print(f"{v.status.upper()}: {v.note}")
    return EXIT_FAIL if bad else EXIT_OK


def gate_run(run: formats.SuiteRun, args: argparse.Namespace) -> int:
    """``run --compare``: verdicts against this system's baselines; ``--baseline-update``: record."""
    from . import baselines

    if not (args.compare or args.baseline_update):
        return EXIT_OK
    system = baselines.system_for(run.machine, args.system)
    root = args.baseline_dir or "baselines"
    code = EXIT_OK
    if args.compare:
        tol, alpha = _gate_settings(args)
        judged = {c.name for o in run.outcomes for c in o.spec.cases if not o.skipped}
        _print(f"# verdicts on {system} against {root}/{system}/")
        verdicts = regress.compare(run.samples(), baselines.load_all(root, system), tolerance=tol,
                                   alpha=alpha, system=system, cases=judged)
        code = _print_verdicts(verdicts, bool(args.strict))
    if args.baseline_update:
        for line in baselines.update(root, system, [s for s in run.samples() if s.valid], run.machine):
            _print(line)
    return code


def add_baseline(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("update", "show"), help="update: record a results file as "
                   "the baselines; show: print the stored baselines")
    p.add_argument("--from", dest="source", metavar="RESULTS.json",
                   help="results file written by perfsuite run --json (for update)")
    p.add_argument("--system", metavar="NAME", help="system name [default: from the results file's "
                   "fingerprint for update, every system for show]")
    p.add_argument("--baseline-dir", default="baselines", metavar="DIR", help="[default: baselines]")


def do_baseline(args: argparse.Namespace) -> int:
    from . import baselines

    if args.action == "show":
        _print(baselines.show(args.baseline_dir, args.system))
        return EXIT_OK
    if not args.source:
        raise ConfigError("baseline update needs --from RESULTS.json (written by perfsuite run --json)")
    run = formats.load_run(args.source)
    samples = [s for r in run.results for s in r.samples if s.valid]
    if not samples:
        raise ConfigError(f"{args.source} holds no valid sample to record")
    for line in baselines.update(args.baseline_dir, baselines.system_for(run.machine, args.system),
                                 samples, run.machine):
        _print(line)
    return EXIT_OK


COMMANDS["baseline"] = (add_baseline, do_baseline,
                        "record a results file as this system's baselines, or show the stored ones")


def add_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD.json", help="results file taken as the baseline")
    p.add_argument("new", metavar="NEW.json", help="results file judged against it")
    p.add_argument("--tolerance", metavar="TOL", help="0.05 or LOWER:UPPER [default: per metric]")
    p.add_argument("--strict", action="store_true", help="also fail improvements")
    p.add_argument("--alpha", metavar="P", help="significance level of the U test [default: 0.01]")


def do_compare(args: argparse.Namespace) -> int:
    old, new = formats.load_run(args.old), formats.load_run(args.new)
    tol, alpha = _gate_settings(args)
    ref = {(s.case.name, m): regress.baseline_from_sample(s, m)
           for s in old.samples() if s.valid for m in s.metrics}
    verdicts = regress.compare(new.samples(), ref, tolerance=tol, alpha=alpha, system=args.old)
    _print(f"# {args.new} against {args.old}")
    return _print_verdicts(verdicts, args.strict)


COMMANDS["compare"] = (add_compare, do_compare,
                       "judge one results file against another with the baseline verdict logic")


def add_detection_power(p: argparse.ArgumentParser) -> None:
    from .experiments.detection import DetectionConfig

    c = DetectionConfig()
    slowdowns = ",".join(f"{s:g}" for s in c.slowdowns)
    p.add_argument("--small", default=str(c.small), metavar="SIZE", help=f"latency size [default: {c.small}]")
    p.add_argument("--large", default="16MiB", metavar="SIZE", help="busbw size [default: 16MiB]")
    p.add_argument("--transport", default=c.transport, help=f"[default: {c.transport}]")
    p.add_argument("--worlds", default=str(c.worlds), metavar="K",
                   help=f"worlds measured per condition (clean and each slowdown) [default: {c.worlds}]")
    p.add_argument("--rounds", default=str(c.rounds), metavar="N",
                   help=f"rounds pooled on each side of a comparison [default: {c.rounds}]")
    p.add_argument("--slowdowns", default=slowdowns, metavar="LIST",
                   help=f"injected slowdowns as fractions [default: {slowdowns}]")
    p.add_argument("--comparisons", default=str(c.comparisons), metavar="N",
                   help=f"comparisons drawn per row [default: {c.comparisons}]")
    p.add_argument("--tolerance", metavar="TOL", help="0.05 or LOWER:UPPER [default: per metric]")
    p.add_argument("--alpha", default=str(c.alpha), help=f"significance level [default: {c.alpha}]")
    p.add_argument("--timeout", default="120", metavar="S", help="seconds one world may take [default: 120]")


def do_detection_power(args: argparse.Namespace) -> int:
    from .experiments import detection as d

    try:
        slowdowns = tuple(float(x) for x in args.slowdowns.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--slowdowns {args.slowdowns!r} takes fractions, e.g. 0.05,0.1") from None
    tol, alpha = _gate_settings(args)
    cfg = d.DetectionConfig(small=parse_size(args.small), large=parse_size(args.large),
                            transport=args.transport, worlds=whole_number(args.worlds, "worlds"),
                            rounds=whole_number(args.rounds, "rounds"), slowdowns=slowdowns,
                            comparisons=whole_number(args.comparisons, "comparisons"),
                            tolerance=tol, alpha=alpha)
    transports.spec(cfg.transport, "allreduce")
    runner = d.world_runner(suite.SuiteConfig(timeout=options.seconds(args.timeout)))
    _print(f"# detection power: {cfg.worlds * (1 + len(cfg.slowdowns))} worlds "
           f"({cfg.worlds} per condition, interleaved) ...")
    rep = d.run(cfg, runner, progress=lambda m: print(f"# {m}", file=sys.stderr, flush=True))
    _print(d.format_report(rep))
    return EXIT_OK


COMMANDS["detection-power"] = (add_detection_power, do_detection_power,
                               "measure how often the gate flags an injected 5/10/20%% slowdown and a clean rerun")


# --- transports, overhead ---------------------------------------------------------------------

def add_transports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmark", default=None, help="only transports of this benchmark")


def do_transports(args: argparse.Namespace) -> int:
    for spec in transports.REGISTRY.values():
        if args.benchmark and args.benchmark not in spec.benchmarks:
            continue
        reason = spec.unavailable_reason()
        state = "available" if reason is None else f"skipped: {reason}"
        _print(f"{spec.name:<14} {','.join(spec.benchmarks):<20} {spec.summary}\n{'':<14} {state}")
    return EXIT_OK


COMMANDS["transports"] = (add_transports, do_transports, "list transports and whether they can run here")

OVERHEAD_OPTIONS = ("world-sizes", "sizes", "launcher", "launcher-program", "launcher-args", "mpi-flavor",
                    "hostfile", "hosts", "ppn", "oversubscribe", "env", "timeout", "iters", "warmup", "workdir")


def add_overhead(p: argparse.ArgumentParser) -> None:
    # Only what applies: the comparison is always the mpi transport, float32, out of place, once.
    options.add_options(p.add_argument, names=OVERHEAD_OPTIONS)


def do_overhead(args: argparse.Namespace) -> int:
    from .experiments.overhead import SIZES, overhead

    values = vars(args)
    sel = options.selection({**values, "transports": "mpi"})
    rep = overhead(options.suite_config(values), world_size=sel.world_sizes[0],
                   sizes=sel.values["sizes"] if args.sizes is not None else SIZES)
    _print(report.overhead_table(rep))
    return EXIT_OK


COMMANDS["overhead"] = (add_overhead, do_overhead,
                        "print what the Python harness adds over a C MPI_Allreduce loop, and host busbw vs memcpy")


# --- report -----------------------------------------------------------------------------------

PRINT_FORMATS = ("nccl", "omb", "csv", "md")


def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", metavar="RESULTS.json", help="files written by perfsuite run --json")
    p.add_argument("--out", metavar="DIR", help="write index.html, summary.md, results.csv, tables.txt "
                   "and PNG plots here [default: report, unless --print is given]")
    p.add_argument("--asv-url", metavar="URL", help="link the page to the asv history site")
    p.add_argument("--print", dest="print_format", metavar="FORMAT",
                   help=f"also print the results to stdout as one of: {', '.join(PRINT_FORMATS)}")
    p.add_argument("--baselines", metavar="DIR", help="compare with the baselines stored here "
                   "(e.g. baselines) and put the verdicts, regressions first, at the top of the report")
    p.add_argument("--system", metavar="NAME", help="baseline system name [default: from each "
                   "results file's fingerprint]")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a verdict is a regression or an invalid result (not excused by xfail)")


def report_verdicts(runs: list, root: str, system: str | None) -> list:
    """Each results file against the baselines of the system it ran on."""
    from . import baselines

    verdicts = []
    for run in runs:
        name = baselines.system_for(run.fingerprint or None, system)
        samples = [s for r in run.results for s in r.samples]
        verdicts += regress.compare(samples, baselines.load_all(root, name), system=name,
                                    cases={s.case.name for s in samples})
    return verdicts


def do_report(args: argparse.Namespace) -> int:
    if args.print_format and args.print_format not in PRINT_FORMATS:
        raise ConfigError(f"--print {args.print_format!r} is unknown; choose from {', '.join(PRINT_FORMATS)}")
    if args.fail_on_regression and not args.baselines:
        raise ConfigError("--fail-on-regression needs --baselines DIR (what to compare with)")
    runs = report.load_runs(args.results)
    verdicts = report_verdicts(runs, args.baselines, args.system) if args.baselines else None
    if args.print_format == "csv":
        sys.stdout.write(report.csv_text(runs))
    elif args.print_format == "md":
        sys.stdout.write(report.summary_markdown(runs, verdicts=verdicts, asv_url=args.asv_url))
    elif args.print_format:
        for run in runs:
            for r in run.results:
                _print(report.omb_table(r) if args.print_format == "omb" and r.benchmark == "allreduce"
                       else report.result_table(r))
    notes = sys.stderr if args.print_format else sys.stdout  # stdout holds the printed results
    out = args.out or (None if args.print_format else "report")
    if out:
        written = report.write_report(out, runs, verdicts=verdicts, asv_url=args.asv_url)
        drawn = [p.file.name for p in written["plots"] if p.file]
        print(f"# report written to {Path(out) / 'index.html'} (plots: {', '.join(drawn) or 'none'})",
              file=notes, flush=True)
        for p in written["plots"]:
            if p.skipped:
                print(f"# not drawn: {p.title}: {p.skipped}", file=notes)
    if verdicts is not None:
        bad = regress.failing(verdicts)
        print(f"# {len(verdicts)} verdicts against {args.baselines}: {len(bad)} failing"
              + "".join(f"\n#   {v.note}" for v in bad), file=notes)
        if bad and args.fail_on_regression:
            return EXIT_FAIL
    return EXIT_OK


COMMANDS["report"] = (add_report, do_report, "turn results files into index.html, summary.md, CSV and plots")


# --- history (asv) ----------------------------------------------------------------------------

def add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asv-config", default=asv_project.DEFAULT_CONFIG, metavar="PATH",
                   help=f"asv config whose results to read [default: {asv_project.DEFAULT_CONFIG}]")
    p.add_argument("--asv-machine", metavar="NAME", help="only this asv machine [default: every machine]")
    p.add_argument("-k", dest="pattern", metavar="REGEX",
                   help="only entries matching REGEX, e.g. \"inv_busbw\\('mpi'\"")
    p.add_argument("--threshold", metavar="FRACTION",
                   help="smallest step reported, e.g. 0.05 [default: asv.conf.json regressions_thresholds, else 0.05]")
    p.add_argument("--since", metavar="COMMIT",
                   help="regressions that start after COMMIT are new (e.g. the last published commit) "
                        "[default: every regression still present is new]")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when a new regression appears")


def do_history(args: argparse.Namespace) -> int:
    from . import history
    from .asv.read import read_history

    project = asv_project.load_project(args.asv_config)
    thresholds = project.thresholds
    if args.threshold is not None:
        try:
            t = float(args.threshold)
        except ValueError:
            t = -1.0
        if not 0 <= t < 10:
            raise ConfigError(f"threshold {args.threshold!r} must be a fraction >= 0, e.g. 0.05 for 5%")
        thresholds = {".*": t}
    series, order = read_history(project, args.asv_machine, args.pattern)
    try:
        since = history.resolve_since(order, args.since)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    found = history.analyse(series, order, thresholds, since)
    _print(history.format_report(found))
    return EXIT_FAIL if args.fail_on_regression and found.new_regressions() else EXIT_OK


COMMANDS["history"] = (add_history, do_history,
                       "list the steps asv's step detection finds in the asv history (regressions, improvements)")


def add_asv_offline(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asv-config", default=asv_project.DEFAULT_CONFIG, metavar="PATH",
                   help=f"asv config whose html_dir to rewrite [default: {asv_project.DEFAULT_CONFIG}]")
    p.add_argument("--html-dir", metavar="DIR", help="the published site [default: html_dir of the config]")


def do_asv_offline(args: argparse.Namespace) -> int:
    from .asv.offline import make_offline

    html_dir = args.html_dir or asv_project.load_project(args.asv_config).html_dir
    names = make_offline(html_dir)
    _print(f"# {html_dir}/index.html now loads {len(names)} CDN files from vendor/: {', '.join(names)}")
    return EXIT_OK


COMMANDS["asv-offline"] = (add_asv_offline, do_asv_offline,
                           "make a published asv site work without internet (scripts from Debian packages)")


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
    from . import dataset, stalls
    from .experiments.stalls import StallConfig, run_stalls
    from .kernels.tf_models import check_image_size, model_spec
    from .launch import netns
    from .launch.diskio import parse_disk_rate

    spec = model_spec(args.model)
    transports.spec(args.transport, "tf-epoch")
    n = whole_number(args.world_size, "world size", low=2)
    batch, steps = whole_number(args.batch, "batch"), whole_number(args.steps, "steps")
    warmup = whole_number(args.warmup, "warm-up steps", low=0)
    image = check_image_size(args.model, args.image_size) if args.image_size else spec.image_size
    shaping = netns.parse_shaping(args.emulated_network) if args.emulated_network else None
    if shaping is not None and shaping.delay:
        _print(f"# delay {shaping.delay} asked for: checking for netem ({netns.NO_NETEM} if absent)")
    data_dir = None
    if not args.no_data:
        count = n * (warmup + steps) * batch
        px = max(image + image // 4, 16)  # stored a little larger: the pipeline resizes
        data_dir = args.data_dir or os.path.join(tempfile.gettempdir(), f"perfsuite-jpeg-{count}x{px}")
        m = dataset.ensure_dataset(data_dir, dataset.DatasetSpec(count=count, image_px=px))
        _print(f"# dataset {data_dir}: {m['count']} JPEG files of {px} px, {m['bytes'] / 1e6:.1f} MB")
    sc = StallConfig(model=args.model, transport=args.transport, world_size=n, batch=batch,
                     network=shaping, data_dir=data_dir, prep_threads=whole_number(args.prep_threads, "prep threads"),
                     disk=parse_disk_rate(args.emulated_disk) if args.emulated_disk else None,
                     options={"iters": steps, "warmup": warmup, "image_size": image})

    def on_run(event, run, outcome):
        if event == "start":
            _print(f"# {run.key}: {run.meaning} ...")
        elif outcome is not None and (outcome.skipped or outcome.failure):
            _print(f"#   {run.key}: {outcome.skipped or outcome.failure}")

    out = run_stalls(sc, suite.SuiteConfig(timeout=options.seconds(args.timeout)), on_run)
    for key, why in out.skipped.items():
        _print(f"# {key} skipped: {why}")
    title = f"{args.model} b{batch} {args.transport} n{n}" + (f" {shaping.label}" if shaping else "")
    _print(stalls.format_table(out.breakdown, title))
    bound = out.sample.info.get("network_stall_bound_ms")
    if bound is not None:
        _print(f"# network bound: gradients {out.sample.info['gradient_bytes']} B x 2(n-1)/n / "
               f"{shaping.label} = {bound:.2f} ms/step")
    if args.json:
        formats.write_run(args.json, out.suite_run())
        _print(f"# results written to {args.json}")
    png = args.png or (os.path.splitext(args.json)[0] + ".png" if args.json else "stalls.png")
    report.write_stall_png(png, out.breakdown, title)
    _print(f"# stacked bar written to {png}")
    return EXIT_OK


COMMANDS["stalls"] = (add_stalls, do_stalls,
                      "Stash stall breakdown of a training step: compute, interconnect, prep, fetch, network")


# --- entry point ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfsuite", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (add, handler, help) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=help)
        add(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # registers PERFSUITE_BENCHMARKS: a bad one is a usage error
    except ConfigError as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"perfsuite {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PerfsuiteError as exc:
        print(f"perfsuite {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print(f"perfsuite {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

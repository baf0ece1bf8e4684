"""``perfsuite``: the command-line face. Thin: parse, call suite, print with report.

Exit status: 0 when everything that could run here ran and validated, 1 when a world failed or
a result was wrong (or a gate tripped), 2 on bad usage.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from . import options as _options
from . import asv_export, history, report, suite, transports
from .errors import ConfigError, PerfsuiteError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

#: name -> (add_arguments, handler, help); each subcommand registers itself here.
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None],
                          Callable[[argparse.Namespace], int], str]] = {}




def _print(text: str = "") -> None:
    print(text, flush=True)


# --- run --------------------------------------------------------------------------------------

def add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", default="allreduce", metavar="LIST",
                   help=f"comma list of benchmarks: {', '.join(suite.CASE_BUILDERS)} [default: allreduce]")
    _options.add_options(p.add_argument)
    p.add_argument("--json", metavar="PATH", help="write the versioned results file here")
    p.add_argument("--compare", action="store_true", help="judge every case against the baselines "
                   "of this system and exit 1 on any regression (see --baseline-dir, --system)")
    p.add_argument("--keep-worlds", action="store_true", help="keep each world's scratch folder (debugging)")
    asv_export.add_options(p.add_argument)


def run_cases_from_args(args: argparse.Namespace) -> tuple[list, suite.SuiteConfig]:
    values = vars(args)
    benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    cases = []
    for b in benchmarks:
        if b not in suite.CASE_BUILDERS:
            raise ConfigError(f"benchmark {b!r} is unknown; choose from {', '.join(suite.CASE_BUILDERS)}")
        sel = _options.selection(values, b, **extra_axes(args, b))
        if not sel.transports:
            raise ConfigError(f"none of the transports {args.transports!r} runs {b}; "
                              f"{b} runs {', '.join(transports.names(b))}")
        cases += suite.select_cases(sel)
    cfg = _options.suite_config(values)
    if args.keep_worlds:
        cfg = suite.SuiteConfig(cfg.launch, cfg.timeout, cfg.options, cfg.workdir, keep_worlds=True,
                                network=cfg.network, rounds=cfg.rounds)
    return cases, cfg


def extra_axes(args: argparse.Namespace, benchmark: str) -> dict:
    """Per-benchmark axes beyond the shared options (models, batches, ...); kernels add theirs."""
    return {}


def do_run(args: argparse.Namespace) -> int:
    cases, cfg = run_cases_from_args(args)
    _alpha(args), _tolerance(args)  # the gate's settings: a bad one is refused before any world runs
    asv_to = asv_export.prepare(asv_export.target(vars(args)))  # bad --asv* is a usage error now
    from .progress import SweepProgress

    with SweepProgress(suite.plan(cases, cfg.options)) as on_world:
        run = suite.run(cases, cfg, on_world=on_world)
    _print(report.run_summary(run))
    if getattr(args, "report", None):
        report.write_report(args.report, [report.ReportRun.from_suite_run(run, args.json or "this run")])
        _print(f"# report written to {Path(args.report) / 'index.html'}")
    if args.json:
        report.write_run_json(args.json, run)
        _print(f"# results written to {args.json}")
    if asv_to is not None:
        _print(asv_export.record_run(run, asv_to).line())
    gate = gate_run(run, args)  # --compare / --baseline-update (issue 3)
    return EXIT_OK if run.ok and gate == EXIT_OK else EXIT_FAIL


COMMANDS["run"] = (add_run, do_run, "run the suite on this machine (or a cluster) and print tables")


# --- baselines and verdicts (issue 3) ---------------------------------------------------------

def _baseline_dir(args: argparse.Namespace) -> str:
    return getattr(args, "baseline_dir", None) or "baselines"


def _tolerance(args: argparse.Namespace):
    from .regress import parse_tolerance

    return parse_tolerance(args.tolerance) if getattr(args, "tolerance", None) else None


def _alpha(args: argparse.Namespace) -> float:
    from .regress import parse_alpha

    return parse_alpha(getattr(args, "alpha", None))


def _print_verdicts(verdicts: list, strict: bool) -> int:
    from .regress import failing, verdict_table

    _print(verdict_table(verdicts))
    bad = failing(verdicts, strict)
    for v in bad:
        _print(f"{v.status.upper()}: {v.note}")
    return EXIT_FAIL if bad else EXIT_OK


def gate_run(run: suite.SuiteRun, args: argparse.Namespace) -> int:
    """``run --compare``: verdicts against this system's baselines; ``--baseline-update``: record."""
    from . import baselines, regress

    if not (getattr(args, "compare", False) or getattr(args, "baseline_update", False)):
        return EXIT_OK
    fp = next((r.fingerprint for r in run.results), None) or run.fingerprint
    system = baselines.system_for(fp, getattr(args, "system", None))
    samples = run.samples()
    code = EXIT_OK
    if getattr(args, "compare", False):
        judged = {c.name for o in run.outcomes for c in o.spec.cases if not o.skipped}
        _print(f"# verdicts on {system} against {_baseline_dir(args)}/{system}/")
        verdicts = regress.compare(samples, baselines.load_all(_baseline_dir(args), system),
                                   tolerance=_tolerance(args), alpha=_alpha(args), system=system,
                                   cases=judged)
        code = _print_verdicts(verdicts, bool(getattr(args, "strict", False)))
    if getattr(args, "baseline_update", False):
        for line in baselines.update(_baseline_dir(args), system, [s for s in samples if s.valid], fp):
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
    run = suite.load_run(args.source)
    fp = next((r.fingerprint for r in run.results), None) or run.fingerprint
    system = baselines.system_for(fp, args.system)
    samples = [s for r in run.results for s in r.samples if s.valid]
    if not samples:
        raise ConfigError(f"{args.source} holds no valid sample to record")
    for line in baselines.update(args.baseline_dir, system, samples, fp):
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
    from . import regress

    old, new = suite.load_run(args.old), suite.load_run(args.new)
    ref = {(s.case.name, m): regress.baseline_from_sample(s, m)
           for s in old.samples() if s.valid for m in s.metrics}
    new_samples = new.samples()
    verdicts = regress.compare(new_samples, ref, tolerance=_tolerance(args), alpha=_alpha(args),
                               system=args.old)
    _print(f"# {args.new} against {args.old}")
    return _print_verdicts(verdicts, args.strict)


COMMANDS["compare"] = (add_compare, do_compare,
                       "judge one results file against another with the baseline verdict logic")


def add_detection_power(p: argparse.ArgumentParser) -> None:
    from . import detection as d

    c = d.DetectionConfig()
    p.add_argument("--small", default=str(c.small), metavar="SIZE", help=f"latency size [default: {c.small}]")
    p.add_argument("--large", default="16MiB", metavar="SIZE", help="busbw size [default: 16MiB]")
    p.add_argument("--transport", default=c.transport, help=f"[default: {c.transport}]")
    p.add_argument("--worlds", default=str(c.worlds), metavar="K",
                   help=f"worlds measured per condition (clean and each slowdown) [default: {c.worlds}]")
    p.add_argument("--rounds", default=str(c.rounds), metavar="N",
                   help=f"rounds pooled on each side of a comparison [default: {c.rounds}]")
    p.add_argument("--slowdowns", default=",".join(f"{s:g}" for s in c.slowdowns), metavar="LIST",
                   help=f"injected slowdowns as fractions [default: {','.join(f'{s:g}' for s in c.slowdowns)}]")
    p.add_argument("--comparisons", default=str(c.comparisons), metavar="N",
                   help=f"comparisons drawn per row [default: {c.comparisons}]")
    p.add_argument("--tolerance", metavar="TOL", help="0.05 or LOWER:UPPER [default: per metric]")
    p.add_argument("--alpha", default=str(c.alpha), help=f"significance level [default: {c.alpha}]")
    p.add_argument("--timeout", default="120", metavar="S", help="seconds one world may take [default: 120]")


def do_detection_power(args: argparse.Namespace) -> int:
    from . import detection as d
    from .cases import parse_size

    try:
        slowdowns = tuple(float(x) for x in args.slowdowns.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--slowdowns {args.slowdowns!r} takes fractions, e.g. 0.05,0.1") from None
    alpha = _alpha(args)
    cfg = d.DetectionConfig(small=parse_size(args.small), large=parse_size(args.large),
                            transport=args.transport, worlds=_options._int(args.worlds, "worlds"),
                            rounds=_options._int(args.rounds, "rounds"), slowdowns=slowdowns,
                            comparisons=_options._int(args.comparisons, "comparisons"),
                            tolerance=_tolerance(args), alpha=alpha)
    transports.spec(cfg.transport, "allreduce")
    runner = d.world_runner(suite.SuiteConfig(), _options._timeout(args.timeout))
    n = cfg.worlds * (1 + len(cfg.slowdowns))
    _print(f"# detection power: {n} worlds ({cfg.worlds} per condition, interleaved) ...")
    rep = d.run(cfg, runner, progress=lambda m: print(f"# {m}", file=sys.stderr, flush=True))
    _print(d.format_report(rep))
    return EXIT_OK


COMMANDS["detection-power"] = (add_detection_power, do_detection_power,
                               "measure how often the gate flags an injected 5/10/20%% slowdown and a clean rerun")


# --- transports -------------------------------------------------------------------------------

def add_transports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmark", default=None, help="only transports of this benchmark")


def do_transports(args: argparse.Namespace) -> int:
    for name, spec in transports.REGISTRY.items():
        if args.benchmark and args.benchmark not in spec.benchmarks:
            continue
        reason = spec.unavailable_reason()
        state = "available" if reason is None else f"skipped: {reason}"
        _print(f"{spec.name:<14} {','.join(spec.benchmarks):<20} {spec.summary}\n{'':<14} {state}")
    return EXIT_OK


COMMANDS["transports"] = (add_transports, do_transports, "list transports and whether they can run here")


# --- overhead ---------------------------------------------------------------------------------

OVERHEAD_OPTIONS = ("world-sizes", "sizes", "launcher", "launcher-program", "launcher-args", "mpi-flavor", "hostfile",
                    "hosts", "ppn", "oversubscribe", "env", "timeout", "iters", "warmup", "workdir")


def add_overhead(p: argparse.ArgumentParser) -> None:
    # Only what applies: the comparison is always the mpi transport, float32, out of place, once.
    _options.add_options(p.add_argument, names=OVERHEAD_OPTIONS)


def do_overhead(args: argparse.Namespace) -> int:
    values = vars(args)
    cfg = _options.suite_config(values)
    sel = _options.selection({**values, "transports": "mpi"})
    n = sel.world_sizes[0]
    rep = suite.overhead(cfg, world_size=n,
                         sizes=sel.sizes if args.sizes is not None else suite.OVERHEAD_SIZES)
    _print(f"# harness overhead: perfsuite mpi loop vs the same MPI_Allreduce loop in C, "
           f"world_size={n}, p50 of the slowest rank per iteration")
    _print("# C: the loop in C; mpi4py: the same loop as a plain Python script (the binding's cost);"
           " suite: perfsuite's kernel; diff = suite - C")
    _print(f"#{'size':>11} {'C(us)':>10} {'mpi4py(us)':>11} {'suite(us)':>10} {'diff(us)':>10} "
           f"{'C busbw':>10} {'suite busbw':>12} {'ratio':>7}")
    for r in rep.rows:
        plain = f"{r['plain_p50_us']:>11.2f}" if "plain_p50_us" in r else f"{'-':>11}"
        if "c_p50_us" in r:
            _print(f"{r['size_bytes']:>12} {r['c_p50_us']:>10.2f} {plain} {r['suite_p50_us']:>10.2f} "
                   f"{r['overhead_us']:>10.2f} {r['c_busbw_GBps']:>10.3f} {r['suite_busbw_GBps']:>12.3f} "
                   f"{r['busbw_ratio']:>7.3f}")
        else:
            _print(f"{r['size_bytes']:>12} {'-':>10} {plain} {r['suite_p50_us']:>10.2f}")
    if rep.skipped:
        _print(f"# SKIPPED C reference: {rep.skipped}")
    _print(f"# world start {rep.world_start_s:.3f} s (target <= 0.5 s with MPICH)")
    if rep.host_copy_GBps and rep.busbw_64MiB_GBps:
        _print(f"# host memory-copy bandwidth {rep.host_copy_GBps:.2f} GB/s; busbw at 64MiB "
               f"{rep.busbw_64MiB_GBps:.3f} GB/s = {rep.busbw_64MiB_GBps / rep.host_copy_GBps:.2f} of it")
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
    from . import baselines, regress

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
    out = args.out or (None if args.print_format else "report")
    if out:
        written = report.write_report(out, runs, verdicts=verdicts, asv_url=args.asv_url)
        drawn = [p.file.name for p in written["plots"] if p.file]
        print(f"# report written to {Path(out) / 'index.html'} (plots: {', '.join(drawn) or 'none'})",
              file=sys.stderr if args.print_format else sys.stdout, flush=True)
        for p in written["plots"]:
            if p.skipped:
                print(f"# not drawn: {p.title}: {p.skipped}", file=sys.stderr if args.print_format else sys.stdout)
    if verdicts is not None:
        from .regress import failing

        bad = failing(verdicts)
        print(f"# {len(verdicts)} verdicts against {args.baselines}: {len(bad)} failing"
              + "".join(f"\n#   {v.note}" for v in bad), file=sys.stderr if args.print_format else sys.stdout)
        if bad and args.fail_on_regression:
            return EXIT_FAIL
    return EXIT_OK


COMMANDS["report"] = (add_report, do_report, "turn results files into index.html, summary.md, CSV and plots")


# --- history (asv) ----------------------------------------------------------------------------

def add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asv-config", default=asv_export.DEFAULT_CONFIG, metavar="PATH",
                   help=f"asv config whose results to read [default: {asv_export.DEFAULT_CONFIG}]")
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
    project = asv_export.load_project(args.asv_config)
    thresholds = project.thresholds
    if args.threshold is not None:
        try:
            t = float(args.threshold)
        except ValueError:
            t = -1.0
        if not 0 <= t < 10:
            raise ConfigError(f"threshold {args.threshold!r} must be a fraction >= 0, e.g. 0.05 for 5%")
        thresholds = {".*": t}
    series, order = asv_export.read_history(project, args.asv_machine, args.pattern)
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
    p.add_argument("--asv-config", default=asv_export.DEFAULT_CONFIG, metavar="PATH",
                   help=f"asv config whose html_dir to rewrite [default: {asv_export.DEFAULT_CONFIG}]")
    p.add_argument("--html-dir", metavar="DIR", help="the published site [default: html_dir of the config]")


def do_asv_offline(args: argparse.Namespace) -> int:
    html_dir = args.html_dir or asv_export.load_project(args.asv_config).html_dir
    names = asv_export.make_offline(html_dir)
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
    import os
    import tempfile

    from . import dataset, stalls
    from .kernels.tf_models import check_image_size, model_spec
    from .launch import netns
    from .model import Result, WorldSpec

    spec = model_spec(args.model)
    transports.spec(args.transport, "tf-epoch")
    n = _options._int(args.world_size, "world size", low=2)
    batch, steps = _options._int(args.batch, "batch"), _options._int(args.steps, "steps")
    warmup = _options._int(args.warmup, "warm-up steps", low=0)
    threads = _options._int(args.prep_threads, "prep threads")
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
    from .launch.diskio import parse_disk_rate

    disk = parse_disk_rate(args.emulated_disk) if args.emulated_disk else None
    sc = suite.StallConfig(model=args.model, transport=args.transport, world_size=n, batch=batch,
                           network=shaping, data_dir=data_dir, prep_threads=threads, disk=disk,
                           options={"iters": steps, "warmup": warmup, "image_size": image})
    cfg = suite.SuiteConfig(timeout=_options._timeout(args.timeout))

    def on_run(event, run, outcome):
        if event == "start":
            _print(f"# {run.key}: {run.meaning} ...")
        elif outcome is not None and (outcome.skipped or outcome.failure):
            _print(f"#   {run.key}: {outcome.skipped or outcome.failure}")

    out = suite.run_stalls(sc, cfg, on_run)
    for key, why in out.skipped.items():
        _print(f"# {key} skipped: {why}")
    title = f"{args.model} b{batch} {args.transport} n{n}" + (f" {shaping.label}" if shaping else "")
    _print(stalls.format_table(out.breakdown, title))
    bound = out.sample.info.get("network_stall_bound_ms")
    if bound is not None:
        _print(f"# network bound: gradients {out.sample.info['gradient_bytes']} B x 2(n-1)/n / "
               f"{shaping.label} = {bound:.2f} ms/step")
    result = Result("stalls", args.transport, n, (out.sample,), fingerprint=suite.fingerprint.collect())
    run = suite.SuiteRun([suite.WorldOutcome(WorldSpec("stalls", args.transport, n, (out.sample.case,)),
                                             result)], result.fingerprint)
    if args.json:
        report.write_run_json(args.json, run)
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (add, handler, help) in COMMANDS.items():
        p = sub.add_parser(name, help=help, description=help)
        add(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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

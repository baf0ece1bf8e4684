"""``perfsuite``: the command-line face. Thin: parse, call suite, print with report.

Exit status: 0 when everything that could run here ran and validated, 1 when a world failed or
a result was wrong (or a gate tripped), 2 on bad usage.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from . import options as _options
from . import report, suite, transports
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
    p.add_argument("--keep-worlds", action="store_true", help="keep each world's scratch folder (debugging)")


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
        cfg = suite.SuiteConfig(cfg.launch, cfg.timeout, cfg.options, cfg.workdir, keep_worlds=True)
    return cases, cfg


def extra_axes(args: argparse.Namespace, benchmark: str) -> dict:
    """Per-benchmark axes beyond the shared options (models, batches, ...); kernels add theirs."""
    return {}


def do_run(args: argparse.Namespace) -> int:
    cases, cfg = run_cases_from_args(args)

    def on_world(event, spec, outcome):
        if event == "start":
            _print(f"# running {spec.label}: {len(spec.cases)} cases")

    run = suite.run(cases, cfg, on_world=on_world)
    _print(report.run_summary(run))
    if args.json:
        report.write_run_json(args.json, run)
        _print(f"# results written to {args.json}")
    return EXIT_OK if run.ok else EXIT_FAIL


COMMANDS["run"] = (add_run, do_run, "run the suite on this machine (or a cluster) and print tables")


# --- transports -------------------------------------------------------------------------------

def add_transports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmark", default=None, help="only transports of this benchmark")


def do_transports(args: argparse.Namespace) -> int:
    for name, spec in transports.REGISTRY.items():
        if args.benchmark and args.benchmark not in spec.benchmarks:
            continue
        reason = spec.unavailable_reason()
        state = "available" if reason is None else f"skipped: {reason}"
        _print(f"{name:<14} {','.join(spec.benchmarks):<20} {spec.summary}\n{'':<14} {state}")
    return EXIT_OK


COMMANDS["transports"] = (add_transports, do_transports, "list transports and whether they can run here")


# --- overhead ---------------------------------------------------------------------------------

def add_overhead(p: argparse.ArgumentParser) -> None:
    _options.add_options(p.add_argument)


def do_overhead(args: argparse.Namespace) -> int:
    cfg = _options.suite_config(vars(args))
    (n,) = _options.selection(vars(args)).world_sizes[:1]
    rep = suite.overhead(cfg, world_size=n)
    _print(f"# harness overhead: perfsuite mpi loop vs the same MPI_Allreduce loop in C, "
           f"world_size={n}, p50 of the slowest rank per iteration")
    _print(f"#{'size':>11} {'C(us)':>10} {'suite(us)':>10} {'diff(us)':>10} {'C busbw':>10} "
           f"{'suite busbw':>12} {'ratio':>7}")
    for r in rep.rows:
        if "c_p50_us" in r:
            _print(f"{r['size_bytes']:>12} {r['c_p50_us']:>10.2f} {r['suite_p50_us']:>10.2f} "
                   f"{r['overhead_us']:>10.2f} {r['c_busbw_GBps']:>10.3f} {r['suite_busbw_GBps']:>12.3f} "
                   f"{r['busbw_ratio']:>7.3f}")
        else:
            _print(f"{r['size_bytes']:>12} {'-':>10} {r['suite_p50_us']:>10.2f}")
    if rep.skipped:
        _print(f"# SKIPPED C reference: {rep.skipped}")
    _print(f"# world start {rep.world_start_s:.3f} s (target <= 0.5 s with MPICH)")
    if rep.host_copy_GBps and rep.busbw_64MiB_GBps:
        _print(f"# host memory-copy bandwidth {rep.host_copy_GBps:.2f} GB/s; busbw at 64MiB "
               f"{rep.busbw_64MiB_GBps:.3f} GB/s = {rep.busbw_64MiB_GBps / rep.host_copy_GBps:.2f} of it")
    return EXIT_OK


COMMANDS["overhead"] = (add_overhead, do_overhead,
                        "print what the Python harness adds over a C MPI_Allreduce loop, and host busbw vs memcpy")


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

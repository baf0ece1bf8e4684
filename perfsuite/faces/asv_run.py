"""What ``benchmarks/asv_bench`` needs under ``asv run``: the case matrix from
``PERFSUITE_ASV_<OPTION>`` variables, each world measured once in ``setup_cache``, and the
number of each ``track_*`` method read back from that cache.

A face on the top floor, like the CLI and the pytest plugin: it turns environment variables
into options and calls the suite; ``benchmarks/asv_bench/*.py`` are its thin asv classes.
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Mapping
from typing import Any

from .. import bench, suite
from . import options
from ..bench.asv_view import metrics_for, round_samples
from ..records.model import Case

ENV_PREFIX = "PERFSUITE_ASV_"  # PERFSUITE_ASV_SIZES=4,1MiB narrows what `asv run` measures


def env_values(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Option values for ``asv run`` from ``PERFSUITE_ASV_<OPTION>`` (e.g. PERFSUITE_ASV_SIZES),
    so the asv benchmarks measure the matrix the nightly perfsuite run measures."""
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for o in options.all_options():
        raw = environ.get(ENV_PREFIX + o.dest.upper())
        if raw is None or raw == "":
            continue
        if o.kind == "flag":
            out[o.dest] = raw.strip().lower() in ("1", "yes", "true", "on")
        elif o.kind == "list":
            out[o.dest] = [x for x in raw.split(";") if x.strip()]
        else:
            out[o.dest] = raw
    return out


def bench_cases(benchmark: str, environ: Mapping[str, str] | None = None) -> list[Case]:
    """The asv benchmark's cases: the same ``suite.select_cases`` the pytest suite uses."""
    return suite.select_cases(options.selection(env_values(environ), benchmark))


def bench_timeout(cases: list[Case], environ: Mapping[str, str] | None = None) -> float:
    """setup_cache's bound: every world's own timeout plus slack, so a world's timeout (which
    kills its whole process group) always fires before asv kills setup_cache."""
    cfg = options.suite_config(env_values(environ))
    return len(suite.plan(cases, cfg.options)) * (cfg.timeout + 30.0)


def measure(cases: list[Case], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run every world of ``cases`` once (``suite.run_one``) and return what the track methods
    read, keyed by ``(method, param ids)``: picklable, as asv's setup_cache needs."""
    cfg = options.suite_config(env_values(environ))
    cache: dict[str, Any] = {"values": {}, "skipped": {}, "failed": {}}
    for spec in suite.plan(cases, cfg.options):
        outcome = suite.run_one(spec, cfg)
        for case in spec.cases:
            layout = bench.asv_layout(case.benchmark)
            sample = outcome.sample_for(case)
            ids = layout.param_ids(case, sample.info if sample is not None else None)
            if outcome.skipped or sample is None:
                why = (f"{case.transport}: {outcome.skipped}" if outcome.skipped
                       else f"{case.name}: {outcome.failure or 'no result'}")
                for each in layout.all_ids(case):  # whichever loop would have timed it
                    cache["skipped" if outcome.skipped else "failed"][each] = why
            elif not sample.valid:
                cache["failed"][ids] = f"{case.name}: wrong result (validation failed)"
            elif sample.info.get("contended"):
                # As the recorder does (record.record): no history point rests on rounds that
                # all waited for a CPU; asv shows the case as skipped, with why.
                cache["skipped"][ids] = f"{case.name}: machine contended in every round"
            else:
                for m in metrics_for(layout, sample):
                    vals = round_samples(sample, m)
                    if vals:  # the median over rounds, as the recorder's value
                        cache["values"][(m.method, ids)] = statistics.median(vals)
    return cache


def check_case(cache: Mapping[str, Any], benchmark: str, *values: Any) -> None:
    """For asv's ``setup``: a skipped transport, or a combination nothing was measured with,
    raises NotImplementedError (asv: skipped)."""
    ids = tuple(repr(v) for v in values)
    if ids in cache["skipped"]:
        raise NotImplementedError(cache["skipped"][ids])
    if ids not in cache["failed"] and not any(k[1] == ids for k in cache["values"]):
        # Another timing of a measured case (the loop that timed it has the number): n/a.
        raise NotImplementedError(f"{ids}: not measured with these parameters")


def tracked(cache: Mapping[str, Any], method: str, *values: Any) -> float:
    """The recorded number of one case; a failed world raises (asv records a failure)."""
    ids = tuple(repr(v) for v in values)
    if ids in cache["failed"]:
        raise RuntimeError(cache["failed"][ids])
    if (method, ids) not in cache["values"]:
        raise NotImplementedError(f"{method}{ids}: not in the measured matrix")
    return cache["values"][(method, ids)]

"""A user's own distributed benchmark, in about ten lines (``perfsuite.benchmark``).

pytest-benchmark's promise is ``benchmark(fn)``; asv's is ``time_*`` functions in your own
repository. Here a user writes one module-level function that runs on every rank: it gets its
rank's ``World`` (the mpi4py communicator, or a torch.distributed group on a torch transport)
and one value of each of its parameters, and either returns the step to time (a setup and a
step: build buffers once, return a closure) or is itself the step (returns None: each call is
one step, the first a warm-up)::

    @perfsuite.benchmark(world_sizes=[2], params={"n": [1_000, 1_000_000]})
    def allreduce_sum(world, n):
        buf = np.ones(n)
        return lambda: world.comm.Allreduce(MPI.IN_PLACE, buf)

    test_allreduce_sum = allreduce_sum.test   # pytest collects one test per case

The harness does the rest, as for a built-in benchmark (``kernels/user/step.py`` on the ranks):
warm-up, an iteration count chosen by a time budget (``--iters`` exact), the step timed
barrier-separated on every rank (host clock, or CUDA events with ``device="cuda"``), the
slowest rank per iteration, the straggler rule, contention and the canary; then the same
verdicts, baselines, asv history, ``ab``, ``bisect`` and report.

This module is imported on the ranks (they import the user's module, which calls the
decorator), so it imports nothing heavy and registers nothing: the registry
(``perfsuite.bench``) takes every declaration when it is next asked, on the analysing side.
"""
from __future__ import annotations

import importlib.util
import inspect
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

#: What a user benchmark's transport names, for the registry (``transports``: "user:NAME").
TRANSPORT_SET = "user"
TRANSPORTS = ("mpi", "torch-gloo", "torch-nccl", "torch-mpi")
DEVICES = ("cpu", "cuda")
#: The metric every user benchmark reports: the world's step time (its slowest rank), median.
METRIC = "step_us"
#: Seconds of timed steps per case when ``--iters`` is not given (pytest-benchmark's max_time).
DEFAULT_MAX_TIME_S = 1.0
DEFAULT_MIN_ITERS = 10
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")

#: Every benchmark declared in this process, by name (the registry registers them once loaded).
DECLARED: dict[str, "UserBenchmark"] = {}


def _value_text(value: Any) -> str:
    text = str(value)
    if not re.fullmatch(r"[A-Za-z0-9_.+]+", text):
        raise ConfigError(f"parameter value {value!r} cannot name a case; use numbers or words "
                          "(letters, digits, _ . +)")
    return text


@dataclass(frozen=True)
class UserBenchmark:
    """One declared benchmark: the function, where it lives, and its axes."""

    name: str
    fn: Callable[..., Any] = field(compare=False)
    module: str
    qualname: str
    file: str | None
    world_sizes: tuple[int, ...]
    transports: tuple[str, ...]
    params: tuple[tuple[str, tuple[Any, ...]], ...]
    device: str = "cpu"
    max_time_s: float = DEFAULT_MAX_TIME_S
    min_iters: int = DEFAULT_MIN_ITERS
    summary: str = ""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def combinations(self) -> list[dict[str, Any]]:
        names = [n for n, _ in self.params]
        return [dict(zip(names, values)) for values in itertools.product(*(v for _, v in self.params))]

    def variant(self, values: Mapping[str, Any]) -> str:
        """A case's name for one combination of the parameters: 'n=1000-dtype=f4'."""
        return "-".join(f"{k}={_value_text(values[k])}" for k, _ in self.params)

    def values_of(self, variant: str) -> dict[str, Any]:
        """The combination a case's variant names (the ranks look their values up here)."""
        for values in self.combinations():
            if self.variant(values) == variant:
                return values
        raise ConfigError(f"{self.name}: no combination of its parameters is named {variant!r}")

    def source(self) -> dict[str, Any]:
        """Where a rank finds the function: the module by name, else its file (the job's options)."""
        return {"module": self.module, "qualname": self.qualname, "file": self.file,
                "relfile": _relative_to_repo(self.file)}

    @property
    def test(self) -> Callable[..., Any]:
        """A pytest test of every case: ``test_x = x.test`` in a test module. The plugin
        parametrizes it from the benchmark (``perf_case``) and measures it (``perf_measure``)."""
        def test(benchmark, perf_case, perf_measure):
            perf_measure(benchmark)

        test.perfsuite_benchmark = self.name  # read by the plugin, as the perf_benchmark marker
        test.__doc__ = self.summary or f"perfsuite benchmark {self.name}"
        return test


def _relative_to_repo(path: str | None) -> str | None:
    """``path`` relative to its git repository's top, found by walking up to ``.git``: a commit's
    environment (``launch.envs``) holds the same file under its own tree."""
    if not path:
        return None
    here = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.exists(os.path.join(here, ".git")):
            return os.path.relpath(os.path.abspath(path), here)
        up = os.path.dirname(here)
        if up == here:
            return None
        here = up


def _whole_list(values: Iterable[Any], what: str) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{what} {v!r} must be a whole number >= 1, e.g. world_sizes=[2, 4]")
        out.append(v)
    if not out:
        raise ConfigError(f"{what} is empty; give at least one, e.g. world_sizes=[2]")
    return tuple(out)


def benchmark(fn: Callable[..., Any] | None = None, *, world_sizes: Iterable[int] = (2,),
              transports: Iterable[str] = ("mpi",), params: Mapping[str, Iterable[Any]] | None = None,
              device: str = "cpu", max_time: float = DEFAULT_MAX_TIME_S, min_iters: int = DEFAULT_MIN_ITERS,
              name: str | None = None):
    """Declare ``fn(world, **params)`` a distributed benchmark (module doc). Usable bare
    (``@perfsuite.benchmark``) or with its axes: ``world_sizes`` (ranks), ``transports`` (mpi:
    ``world.comm``; torch-gloo, torch-nccl, torch-mpi: a torch.distributed group, ``world.dist``),
    ``params`` (the user's own axes, each a list: one case per combination), ``device`` ("cuda":
    the step is timed by CUDA events on each rank's GPU), ``max_time`` (seconds of timed steps
    per case when ``--iters`` is not given), ``min_iters``."""
    if fn is None:
        return lambda f: benchmark(f, world_sizes=world_sizes, transports=transports, params=params,
                                   device=device, max_time=max_time, min_iters=min_iters, name=name)
    if not callable(fn) or "<locals>" in getattr(fn, "__qualname__", "<locals>"):
        raise ConfigError(f"perfsuite.benchmark decorates a module-level function (the ranks import it "
                          f"by name), got {fn!r}")
    title = name or fn.__name__
    if not _NAME.match(title):
        raise ConfigError(f"benchmark name {title!r} must be letters, digits, _ . - (a case id holds it)")
    sizes = _whole_list(world_sizes, "world size")
    picked = tuple(dict.fromkeys([transports] if isinstance(transports, str) else transports))
    bad = [t for t in picked if t not in TRANSPORTS]
    if bad or not picked:
        raise ConfigError(f"{title}: transport {bad[0] if bad else ''!r} is not one a user benchmark runs "
                          f"over; choose from {', '.join(TRANSPORTS)}")
    if device not in DEVICES:
        raise ConfigError(f"{title}: device {device!r} must be one of {', '.join(DEVICES)}")
    if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or not max_time > 0:
        raise ConfigError(f"{title}: max_time {max_time!r} must be seconds > 0, e.g. 1.0")
    [min_iters] = _whole_list([min_iters], "min_iters")
    axes = []
    for key, values in (params or {}).items():
        if not str(key).isidentifier() or key in ("world",):
            raise ConfigError(f"{title}: parameter {key!r} must be a Python name other than 'world'")
        values = tuple([values] if isinstance(values, (str, bytes)) else values)
        if not values:
            raise ConfigError(f"{title}: parameter {key!r} has no values; give a list, e.g. [1, 2]")
        for v in values:
            _value_text(v)
        axes.append((str(key), values))
    _check_signature(title, fn, [k for k, _ in axes])
    file = inspect.getsourcefile(fn)
    doc = (inspect.getdoc(fn) or "").strip().splitlines()
    declared = UserBenchmark(title, fn, fn.__module__, fn.__qualname__, os.path.abspath(file) if file else None,
                             sizes, picked, tuple(axes), device, float(max_time), min_iters,
                             doc[0] if doc else f"a user benchmark ({fn.__module__}.{fn.__qualname__})")
    DECLARED[title] = declared  # the registry registers it when next asked (bench._load)
    return declared


def _check_signature(title: str, fn: Callable[..., Any], names: list[str]) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(None, **{n: None for n in names})
    except TypeError as exc:
        raise ConfigError(f"{title}: {fn.__name__}{sig} cannot be called as {fn.__name__}(world, "
                          f"{', '.join(f'{n}=...' for n in names)}) ({exc}); its first argument is the "
                          "rank's world, then one per parameter") from None


def import_file(path: str, name: str | None = None):
    """A module from its file, as pytest's rootdir import does: its folder first on sys.path
    (so its siblings import), its module name its file name, imported once."""
    path = os.path.abspath(path)
    name = name or os.path.splitext(os.path.basename(path))[0]
    have = sys.modules.get(name)
    if have is not None and os.path.abspath(getattr(have, "__file__", "") or "") == path:
        return have
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module

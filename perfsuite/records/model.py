"""Frozen records that flow between the rooms, and the checked values they are built from.

``Case`` is one thing a user can select (one pytest test id, one asv parameter combination).
``WorldSpec`` is one MPI world: a benchmark, a transport, a world size and every case it sweeps.
``Sample`` is one measured case with its metrics; ``Result`` is what one world returned.
``Opt`` is one user-facing option (both faces add it; ``options`` parses it).
Records know nothing of files: ``formats`` stores them, with a version per format.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import ConfigError

# --- checked values: user strings become these at the boundary --------------------------------

#: Element types a collective's buffer can hold, and their size in bytes.
DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4,
          "float8_e4m3": 1, "float8_e5m2": 1}
#: The 8-bit floats NCCL has (ncclFloat8e4m3, ncclFloat8e5m2, NCCL >= 2.24): e4m3 is the
#: "fn" form (no infinity, max 448), torch's float8_e4m3fn; e5m2 is IEEE-like, torch's float8_e5m2.
FP8 = ("float8_e4m3", "float8_e5m2")
#: Other names the field gives them (nccl-tests' -d, torch's and ml_dtypes'), accepted by --dtypes.
DTYPE_ALIASES = {"f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2", "float8_e4m3fn": "float8_e4m3"}
#: numpy has no bfloat16 or fp8: host arrays hold their bits (``collectives.as_type``).
_STORAGE = {"bfloat16": "uint16", "float8_e4m3": "uint8", "float8_e5m2": "uint8"}


def storage_dtype(dtype: str) -> str:
    """The numpy dtype a host array of ``dtype`` is held in."""
    return _STORAGE.get(dtype, dtype)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, what: str = "size") -> int:
    """'4' -> 4, '1MiB' -> 1048576, '64M' -> 67108864 (binary units, as OMB and nccl-tests)."""
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"{what} {text!r} is not a byte count; use e.g. 4, 1024, 1KiB, 1MiB, 64MiB")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def format_size(nbytes: int) -> str:
    """4 -> '4B', 1048576 -> '1MiB', 1536 -> '1536B' (exact, so ids never collide)."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


def whole_number(value: Any, what: str, low: int = 1) -> int | None:
    """A whole number >= ``low`` from an option or a kernel knob; None when not given."""
    if value is None or value == "":
        return None
    s = str(value).strip()
    if isinstance(value, bool) or not s.isdigit() or int(s) < low:
        raise ConfigError(f"{what} {value!r} must be a whole number >= {low}")
    return int(s)


def split_list(text: str, what: str, example: str) -> list[str]:
    """'a, b' -> ['a', 'b']; an empty item ('4,,8', a trailing comma) is refused rather than
    skipped, since it is more often a value lost in a script than a wish."""
    parts = [p.strip() for p in str(text).split(",")]
    if any(not p for p in parts) and any(parts):
        raise ConfigError(f"{what} {text!r} has an empty item; separate values with single commas, e.g. {example}")
    return [p for p in parts if p]


def parse_names(text: str | Sequence[str], known: Iterable[str], what: str,
                every: Iterable[str] | None = None) -> tuple[str, ...]:
    """Comma list checked against ``known``; 'all' selects ``every`` (default: every known name)."""
    known = list(known)
    parts = (split_list(text, f"{what} list", "a,b") if isinstance(text, str)
             else [p.strip() for p in text if p.strip()])
    if parts == ["all"]:
        return tuple(known if every is None else every)
    for p in parts:
        if p not in known:
            raise ConfigError(f"{what} {p!r} is unknown; choose from {', '.join(known)} (or all)")
    if not parts:
        raise ConfigError(f"no {what} given; choose from {', '.join(known)}")
    return tuple(dict.fromkeys(parts))


@dataclass(frozen=True)
class Opt:
    """One option of both faces: ``--perf-<name>`` (and ini ``perf_<dest>``) in pytest,
    ``--<name>`` in the CLI. ``parse`` turns the raw value into a checked one (raising
    ConfigError); ``knob`` names the kernel option the checked value is passed as."""

    name: str  # dashed, without prefix
    default: Any
    help: str
    kind: str = "str"  # str | flag | list
    metavar: str | None = None
    parse: Callable[[Any], Any] | None = field(default=None, compare=False)
    knob: str | None = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


# --- what is measured ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One selectable case. Allreduce cases have a size and dtype; training cases a model and batch."""

    benchmark: str
    transport: str
    world_size: int
    size_bytes: int | None = None
    dtype: str = "float32"
    model: str | None = None
    batch: int | None = None
    variant: str = ""  # free-form extra axis (e.g. "inplace", "1gbit"); part of the id when set

    def _id(self, swept: bool) -> str:
        parts = [self.transport, f"n{self.world_size}"]
        if swept and self.size_bytes is not None:
            parts.append(format_size(self.size_bytes))
        if self.model is not None:
            parts.append(self.model)
        if swept and self.batch is not None:
            parts.append(f"b{self.batch}")
        if self.dtype != "float32":
            parts.append(self.dtype)
        if self.variant:
            parts.append(self.variant)
        return "-".join(parts)

    @property
    def id(self) -> str:
        """The pytest-style id without the benchmark, e.g. 'mpi-n2-1MiB'."""
        return self._id(swept=True)

    @property
    def world_id(self) -> str:
        """The id of the world this case runs in: every axis but the swept ones (size, batch)."""
        return self._id(swept=False)

    @property
    def name(self) -> str:
        """The full name used in verdicts, baselines and asv, e.g. 'allreduce[mpi-n2-1MiB]'."""
        return f"{self.benchmark}[{self.id}]"

    @property
    def world_key(self) -> tuple:
        """Cases with the same key run in one world: they differ only in size or batch."""
        return (self.benchmark, self.transport, self.world_size, self.dtype, self.variant, self.model)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Case":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class Metric:
    """One number of a case. ``samples`` are the raw per-iteration values behind ``value``."""

    name: str
    value: float
    unit: str
    higher_is_better: bool
    samples: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples"] = list(self.samples)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Metric":
        return cls(name=d["name"], value=float(d["value"]), unit=d["unit"],
                   higher_is_better=bool(d["higher_is_better"]),
                   samples=tuple(float(x) for x in d.get("samples", ())))


@dataclass(frozen=True)
class Sample:
    """One measured case: its metrics, whether it validated, and the raw entry from the ranks.

    ``times_s`` are the per-iteration times (seconds) that pytest-benchmark replays as its own
    statistics; ``info`` holds everything else the kernel reported (latency min/max, algbw, ...).
    """

    case: Case
    metrics: dict[str, Metric]
    valid: bool = True
    times_s: tuple[float, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case.to_dict(), "valid": self.valid,
                "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
                "times_s": list(self.times_s), "info": self.info}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sample":
        return cls(case=Case.from_dict(d["case"]), valid=bool(d.get("valid", True)),
                   metrics={k: Metric.from_dict(m) for k, m in d.get("metrics", {}).items()},
                   times_s=tuple(d.get("times_s", ())), info=dict(d.get("info", {})))


def time_sliced_label(facts: dict[str, Any] | None) -> str | None:
    """'time-sliced (2 ranks on 1 GPU)' where a transport's facts say ranks shared a GPU: such a
    world measures one GPU taking turns, not a bus between GPUs, and is labelled as such."""
    k = int((facts or {}).get("ranks_per_gpu") or 1)
    return f"time-sliced ({k} ranks on 1 GPU)" if k > 1 else None


def time_sliced(info: dict[str, Any]) -> str | None:
    """A sample's (or a result's extra) time-sliced label, None for a world of its own GPUs."""
    label = info.get("time_sliced")
    return str(label) if label else None


def timing_of(info: dict[str, Any]) -> str:
    """How a sample's calls were timed: "native" or "python" (host loops), a device timing
    (batch, per-call, graph), or "" when not recorded."""
    return str(info.get("timing") or "")


#: Key in ``Sample.info`` holding per-metric round values of a sample pooled over rounds.
ROUNDS_KEY = "round_values"


def round_values(sample: Sample, metric: str) -> list[float]:
    """The per-round values of ``metric`` (one per world run); a plain sample is one round."""
    pooled = sample.info.get(ROUNDS_KEY, {}).get(metric)
    if pooled:
        return [float(x) for x in pooled]
    return [float(sample.metrics[metric].value)]


@dataclass(frozen=True)
class WorldSpec:
    """One world to start: every case in it shares benchmark, transport and world size."""

    benchmark: str
    transport: str
    world_size: int
    cases: tuple[Case, ...]
    options: dict[str, Any] = field(default_factory=dict)  # kernel knobs: iters, warmup, inplace, ...
    kernel: str = ""  # module whose run(ctx) each rank calls; "" = the benchmark's registered one

    @property
    def label(self) -> str:
        """'allreduce[mpi-n2]', 'allreduce[ring-n4-float64]', 'tf-epoch[grpc-n2-small-cnn]':
        every axis the world is keyed on, so two different worlds never share a label."""
        wid = self.cases[0].world_id if self.cases else f"{self.transport}-n{self.world_size}"
        return f"{self.benchmark}[{wid}]"


@dataclass(frozen=True)
class Result:
    """What one world returned: its samples, the machine it ran on, and how long it took to start."""

    benchmark: str
    transport: str
    world_size: int
    samples: tuple[Sample, ...]
    fingerprint: dict[str, Any] = field(default_factory=dict)
    world_start_s: float | None = None
    wall_s: float | None = None
    error: str | None = None  # set when the world failed after measuring some samples
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record's fields; ``formats.dump_result`` adds the format and version."""
        return {"benchmark": self.benchmark, "transport": self.transport,
                "world_size": self.world_size, "fingerprint": self.fingerprint,
                "world_start_s": self.world_start_s, "wall_s": self.wall_s, "error": self.error,
                "extra": self.extra, "samples": [s.to_dict() for s in self.samples]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Result":
        """From ``to_dict``'s fields (``formats.load_result`` checks the version first)."""
        return cls(benchmark=d["benchmark"], transport=d["transport"],
                   world_size=int(d["world_size"]),
                   samples=tuple(Sample.from_dict(s) for s in d.get("samples", [])),
                   fingerprint=d.get("fingerprint", {}), world_start_s=d.get("world_start_s"),
                   wall_s=d.get("wall_s"), error=d.get("error"), extra=d.get("extra", {}))


# --- baselines and verdicts (regress decides, baselines stores) ---------------------------------

#: Every verdict status, in the order a reader needs them: what got worse first. Tables, reports
#: and the one-line summary of a case all sort by it.
VERDICT_ORDER = ("regression", "invalid", "improvement", "unknown", "missing", "new", "same")
#: What each status is in the three-way language of comparisons.
VERDICT_KIND = {"regression": "DIFFERENT", "improvement": "DIFFERENT", "same": "SAME", "unknown": "UNKNOWN"}


@dataclass(frozen=True)
class Tolerance:
    """Allowed relative change of a metric's value, ReFrame-style: ``lower`` <= 0 <= ``upper``.

    For a higher-is-better metric (busbw) a drop below ``lower`` is a regression and a rise above
    ``upper`` an improvement; for a lower-is-better one (latency) the other way round.
    """

    lower: float
    upper: float

    def __post_init__(self):
        if not (-1.0 < self.lower <= 0.0 <= self.upper):
            raise ConfigError(f"tolerance ({self.lower}, {self.upper}) must satisfy "
                             "-1 < lower <= 0 <= upper, e.g. (-0.05, 0.05)")

    def to_dict(self) -> dict[str, float]:
        return {"lower": self.lower, "upper": self.upper}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Tolerance":
        return cls(float(d["lower"]), float(d["upper"]))


@dataclass(frozen=True)
class Baseline:
    """The reference of one metric of one case on one system.

    ``rounds`` are the per-round values (one per world run; the unit the test compares),
    ``samples`` a bounded set of raw per-iteration values (evenly spaced quantiles when there were
    more), ``median``/``iqr``/``mad``/``n`` summarise the raw samples. ``tolerance`` None means
    the metric's default; ``xfail`` is a reason that turns this metric's failure into an xfail.
    """

    case: str
    metric: str
    unit: str
    higher_is_better: bool
    value: float  # the value verdicts compare against: median of ``rounds``
    rounds: tuple[float, ...]
    samples: tuple[float, ...] = ()
    median: float | None = None
    iqr: float | None = None
    mad: float | None = None
    n: int = 0
    tolerance: Tolerance | None = None
    xfail: str | None = None
    recorded: str = ""  # ISO time the baseline was measured
    canary: tuple[float, ...] = ()  # the canary (us) of each round, when every round has one
    timing: str = ""  # which loop or device timing measured it (timing_of); "" when not recorded
    sessions: tuple[str, ...] = ()  # the measurement session (one perfsuite run) of each round
    history: tuple[float, ...] = ()  # levels of earlier sessions an update replaced, oldest first

    def session_rounds(self) -> dict[str, list[float]]:
        """Round values by session, in recording order (rounds with no session: one session)."""
        ids = self.sessions if len(self.sessions) == len(self.rounds) else ("",) * len(self.rounds)
        out: dict[str, list[float]] = {}
        for sid, v in zip(ids, self.rounds):
            out.setdefault(sid, []).append(v)
        return out

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"unit": self.unit, "higher_is_better": self.higher_is_better,
                             "value": self.value, "rounds": list(self.rounds),
                             "summary": {"median": self.median, "iqr": self.iqr, "mad": self.mad,
                                         "n": self.n},
                             "samples": list(self.samples), "recorded": self.recorded}
        if self.tolerance is not None:
            d["tolerance"] = self.tolerance.to_dict()
        if self.xfail:
            d["xfail"] = self.xfail
        if self.canary:
            d["canary_rounds"] = list(self.canary)
        if self.timing:
            d["timing"] = self.timing
        if self.sessions:
            d["sessions"] = list(self.sessions)
        if self.history:
            d["history"] = list(self.history)
        return d

    @classmethod
    def from_dict(cls, case: str, metric: str, d: dict[str, Any]) -> "Baseline":
        summary = d.get("summary", {})
        tol = d.get("tolerance")
        return cls(case=case, metric=metric, unit=str(d["unit"]),
                   higher_is_better=bool(d["higher_is_better"]), value=float(d["value"]),
                   rounds=tuple(float(x) for x in d["rounds"]),
                   samples=tuple(float(x) for x in d.get("samples", ())),
                   median=summary.get("median"), iqr=summary.get("iqr"), mad=summary.get("mad"),
                   n=int(summary.get("n") or 0),
                   tolerance=Tolerance.from_dict(tol) if tol is not None else None,
                   xfail=d.get("xfail") or None, recorded=str(d.get("recorded", "")),
                   canary=tuple(float(x) for x in d.get("canary_rounds", ())),
                   timing=str(d.get("timing") or ""),
                   sessions=tuple(str(x) for x in d.get("sessions", ())),
                   history=tuple(float(x) for x in d.get("history", ())))


#: Metrics that are one number seen two ways (a time and its rate: busbw = bytes x factor /
#: time, img/s = images / step time): a case is judged once, on the first of the pair, and the
#: other is shown as its reciprocal change.
MIRRORS = {"latency_us": "busbw_GBps", "busbw_GBps": "latency_us",
           "img_per_s": "step_ms", "step_ms": "img_per_s"}

#: Why a verdict is what it is: a code the text room turns into words (``verdict_text``).
REASONS = (
    "decided",        # the interval lies beyond, or within, the tolerance
    "straddles",      # the interval straddles the tolerance
    "unbounded",      # too few rounds or pairs to bound the change at the verdict's confidence
    "span",           # too few baseline sessions to measure the drift: only a change beyond the
                      # machine's span between runs can decide, and none does
    "beyond-span",    # decided so: beyond anything the machine does between runs on its own
    "other-mode",     # the candidate ran in a machine mode none of the baseline's rounds ran in
    "across-modes",   # decided across machine modes: beyond anything the modes produce
    "timing",         # baseline and run were timed by different loops
    "contended",      # every round waited for a CPU
    "no-pairs",       # A/B: no calm pair to judge
    "new", "missing", "invalid",
)


@dataclass(frozen=True)
class Verdict:
    """What one case did against its baseline (``regress``), or arm B against arm A.

    ``change`` is value / baseline - 1 in the judged metric's own terms (busbw -0.26 = 26% less
    bandwidth, latency +0.30 = 30% more time), ``low``/``high`` its interval at ``confidence``
    (``high`` inf when the data cannot bound it); ``rounds`` the rounds (or pairs) judged and
    ``dropped`` those left out as contended or in another machine mode. ``reason`` is a code of
    ``REASONS`` and ``facts`` the numbers behind it; words are made from them when shown, by
    ``verdict_text``, never stored.
    """

    case: str
    metric: str
    status: str
    unit: str = ""
    higher_is_better: bool = True
    value: float | None = None
    baseline: float | None = None
    change: float | None = None
    low: float | None = None
    high: float | None = None
    tolerance: Tolerance | None = None
    p_value: float | None = None  # adjusted p that the change lies beyond the tolerance
    test: str = ""
    system: str = ""
    xfail: str | None = None
    rounds: int = 0
    dropped: int = 0
    reason: str = ""
    confidence: float | None = None  # of low/high, after the family's and the looks' share
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """DIFFERENT, SAME or UNKNOWN for a comparison; the status itself otherwise."""
        return VERDICT_KIND.get(self.status, self.status)

    @property
    def is_failure(self) -> bool:
        """A regression or an invalid result (whether or not an xfail reason excuses it)."""
        return self.status in ("regression", "invalid")

    @property
    def mirror(self) -> str | None:
        """The metric shown beside the judged one as its reciprocal (busbw beside latency)."""
        return self.facts.get("mirror")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tolerance"] = self.tolerance.to_dict() if self.tolerance else None
        d["kind"] = self.kind
        for key in ("low", "high", "change"):  # JSON has no infinity
            if isinstance(d[key], float) and math.isinf(d[key]):
                d[key] = None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Verdict":
        tol = d.get("tolerance")
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "tolerance"}
        if kw.get("high") is None and kw.get("low") is not None:
            kw["high"] = math.inf  # stored as null: an unbounded side
        return cls(**kw, tolerance=Tolerance.from_dict(tol) if tol else None)

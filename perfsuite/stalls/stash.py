"""Stash-style stall breakdown of a training step, by differences between five short epochs.

The differential method of DS-Analyzer (Mohan et al., VLDB 2021), extended by Stash (Sharma et
al., "Stash: A Comprehensive Stall-Centric Characterization of Public Cloud VMs for Distributed
Deep Learning") with the two communication stalls. Each run is a real short epoch of the same
model, batch and transport; only one thing changes between the two runs of a difference:

    T0  synthetic data, 1 worker                       (compute alone)
    T1  synthetic data, N workers, one node            (+ gradient exchange inside the node)
    T2  real data (JPEG files), N workers, cold cache  (+ reading the files from disk)
        (a language model's real data: token shards, one sequence a file)
    T3  real data, N workers, warm (fully cached)      (+ decoding / augmenting them)
    T4  synthetic data, N workers across nodes         (+ gradient exchange over the network)

    interconnect stall = T1 - T0      prep (CPU) stall = T3 - T1
    fetch (disk) stall = T2 - T3      network stall    = T4 - T1

in ms per step (median step time of the slowest rank), and as a share of the stacked step
compute (T0) + the four stalls. These are Stash's definitions (and the issue's). DS-Analyzer's
public fork by Stash's first author (github.com/aakash-sharma/DS-Analyzer, tool/analyze.py)
computes the fetch stall differently, as ``T2 - (T3 - T1)`` (the cold epoch minus the prep
stall, i.e. fetch + compute + interconnect) and divides by T2's time; we keep ``T2 - T3``, which
isolates the disk and adds up with the other stalls.

Noise: a difference of two medians is only a stall when it is outside the noise. Each stall
gets a bootstrap confidence interval of the difference of medians (``stats``; each run
resampled on its own). A stall must have its interval above 0 *and* be at least ``MIN_SHARE``
(3 %) of its reference run's step, since separate worlds of one configuration drift by that much
on a busy machine. When the interval contains 0 (or the difference is under 3 %) the stall is reported as 0 with status ``within noise``
(the raw difference is kept beside it); when it lies wholly below 0 it is reported as 0 with
status ``negative`` (the run with more work was faster: contention or drift, never a stall).
So a stall that is really zero comes out 0, never as negative noise presented as a number.

Pure: step times in, numbers out; nothing here starts a process or reads a file.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..records import stats
from ..records.model import Case, Metric, Sample

BENCHMARK = "stalls"
STALLS: dict[str, tuple[str, str]] = {  # name -> (run with the stall, its reference run)
    "interconnect": ("T1", "T0"),
    "prep": ("T3", "T1"),
    "fetch": ("T2", "T3"),
    "network": ("T4", "T1"),
}
WITHIN_NOISE, NEGATIVE, STALL = "within noise", "negative", "stall"
DEFAULT_CONFIDENCE = 0.95
#: A difference below this share of its reference run's median step is never called a stall:
#: two worlds of the same configuration drift by a few percent on a shared machine.
MIN_SHARE = 0.03


@dataclass(frozen=True)
class StallRun:
    """One of the five epochs: what it runs, and why."""

    key: str  # T0..T4
    world_size: int
    data: str  # synthetic | files
    cache: str | None = None  # cold | warm (files only)
    across_nodes: bool = False
    meaning: str = ""


def plan(world_size: int, data: bool = True, network: bool = True, files: str = "JPEG files") -> list[StallRun]:
    """The runs of a breakdown for N = ``world_size`` workers, in the order they should run
    (warm before cold, so the cold run's page-cache drop is the last thing before it);
    ``files`` names what the file runs read ("token files" for a language model)."""
    runs = [StallRun("T0", 1, "synthetic", meaning="synthetic, 1 worker: compute"),
            StallRun("T1", world_size, "synthetic", meaning=f"synthetic, {world_size} workers, one node")]
    if network:
        runs.append(StallRun("T4", world_size, "synthetic", across_nodes=True,
                             meaning=f"synthetic, {world_size} workers across {world_size} emulated nodes"))
    if data:
        runs += [StallRun("T3", world_size, "files", "warm", meaning=f"{files}, warm page cache"),
                 StallRun("T2", world_size, "files", "cold", meaning=f"{files}, cold page cache")]
    return runs


@dataclass(frozen=True)
class Stall:
    name: str
    ms: float  # reported: the difference when it is a stall, else 0
    raw_ms: float  # the difference of medians as measured
    ci_ms: tuple[float, float]
    status: str  # stall | within noise | negative | skipped: <reason>
    share: float = 0.0  # of compute + all reported stalls
    runs: tuple[str, str] = ("", "")
    per_step_ms: tuple[float, ...] = ()  # run-with-stall steps minus the reference median


@dataclass(frozen=True)
class Breakdown:
    compute_ms: float
    compute_ci_ms: tuple[float, float]
    stalls: dict[str, Stall]
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> median, ci, n
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def step_ms(self) -> float:
        """The stacked step: compute + every reported stall."""
        return self.compute_ms + sum(s.ms for s in self.stalls.values())

    def rows(self) -> list[tuple[str, float, float, str]]:
        """(part, ms/step, share, note) for the table and the stacked bar, compute first."""
        total = self.step_ms
        out = [("compute", self.compute_ms, self.compute_ms / total if total > 0 else 0.0,
                f"T0 median, CI {self.compute_ci_ms[0]:.2f}..{self.compute_ci_ms[1]:.2f}")]
        for name in STALLS:
            s = self.stalls[name]
            if s.status.startswith("skipped"):
                out.append((name, float("nan"), float("nan"), s.status))
                continue
            note = f"{s.runs[0]}-{s.runs[1]} = {s.raw_ms:+.2f} ms, CI {s.ci_ms[0]:+.2f}..{s.ci_ms[1]:+.2f}"
            if s.status != STALL:
                note += f" ({s.status}: reported as 0)"
            out.append((name, s.ms, s.share, note))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"compute_ms": self.compute_ms, "compute_ci_ms": list(self.compute_ci_ms),
                "step_ms": self.step_ms, "confidence": self.confidence, "runs": self.runs,
                "stalls": {k: {"ms": s.ms, "raw_ms": s.raw_ms, "ci_ms": list(s.ci_ms),
                               "status": s.status, "share": s.share, "runs": list(s.runs)}
                           for k, s in self.stalls.items()}}


def _ms(values: Sequence[float]) -> np.ndarray:
    a = np.asarray(list(values), dtype=float)
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError("step times must be a non-empty list of finite numbers")
    return a


def classify(raw: float, lo: float, hi: float, floor: float = 0.0) -> tuple[float, str]:
    """(reported ms, status) of one difference with its CI. ``floor``: the smallest difference
    called a stall (separate worlds drift by a few percent even when nothing differs)."""
    if lo > 0 and raw >= floor:
        return raw, STALL
    if hi < 0:
        return 0.0, NEGATIVE
    return 0.0, WITHIN_NOISE


def decompose(step_ms: Mapping[str, Sequence[float]], skipped: Mapping[str, str] | None = None,
              confidence: float = DEFAULT_CONFIDENCE, n_boot: int = stats.BOOTSTRAP,
              seed: int | None = 0, min_share: float = MIN_SHARE) -> Breakdown:
    """The breakdown from each run's per-step times (ms). A run that is missing or named in
    ``skipped`` (with its reason) leaves the stalls that need it skipped with that reason."""
    skipped = dict(skipped or {})
    if "T0" not in step_ms:
        raise ValueError("the breakdown needs T0 (synthetic data, 1 worker): the compute time")
    rng = np.random.default_rng(seed)
    runs = {}
    for key, values in step_ms.items():
        a = _ms(values)
        lo, hi = stats.bootstrap_median_ci(a, confidence, n_boot, rng)
        runs[key] = {"median_ms": float(np.median(a)), "ci_ms": [lo, hi], "n": int(a.size)}
    compute = runs["T0"]["median_ms"]
    stalls: dict[str, Stall] = {}
    for i, (name, (a, b)) in enumerate(STALLS.items()):
        missing = [k for k in (a, b) if k not in step_ms]
        if missing:
            why = "; ".join(skipped.get(k, f"{k} not measured") for k in missing)
            stalls[name] = Stall(name, 0.0, float("nan"), (float("nan"), float("nan")),
                                 f"skipped: {why}", runs=(a, b))
            continue
        raw, lo, hi = stats.bootstrap_median_difference_ci(
            _ms(step_ms[a]), _ms(step_ms[b]), confidence, n_boot, None if seed is None else seed + i + 1)
        ref = float(np.median(_ms(step_ms[b])))
        ms, status = classify(raw, lo, hi, min_share * ref)
        stalls[name] = Stall(name, ms, raw, (lo, hi), status, runs=(a, b),
                             per_step_ms=tuple(float(v) - ref for v in step_ms[a]))
    total = compute + sum(s.ms for s in stalls.values())
    stalls = {k: Stall(s.name, s.ms, s.raw_ms, s.ci_ms, s.status,
                       s.ms / total if total > 0 else 0.0, s.runs, s.per_step_ms)
              for k, s in stalls.items()}
    return Breakdown(compute, tuple(runs["T0"]["ci_ms"]), stalls, runs, confidence)


def metric_name(stall: str) -> str:
    return f"stall_{stall}_ms"


def to_sample(case: Case, bd: Breakdown, info: Mapping[str, Any] | None = None) -> Sample:
    """One Sample of the breakdown: ``compute_ms`` and ``stall_<name>_ms`` (lower is better) for
    every stall that was measured; the metric samples of a stall are its per-step values (the
    run-with-stall steps minus the reference median), the raw data a verdict test compares."""
    metrics = {"compute_ms": Metric("compute_ms", bd.compute_ms, "ms", False)}
    for name, s in bd.stalls.items():
        if not s.status.startswith("skipped"):
            metrics[metric_name(name)] = Metric(metric_name(name), s.ms, "ms", False, s.per_step_ms)
    t2 = bd.runs.get("T0", {})
    full = {**dict(info or {}), "breakdown": bd.to_dict(), "step_ms": bd.step_ms,
            "compute_median_ms": t2.get("median_ms")}
    return Sample(case, metrics, True, (), full)


def stall_case(transport: str, world_size: int, model: str, batch: int, network: str | None) -> Case:
    """``stalls[mpi-n2-mobilenet-b16-1gbit]``: the variant names the emulated network."""
    return Case(BENCHMARK, transport, world_size, model=model, batch=batch,
                variant=network or "no-network")


def format_table(bd: Breakdown, title: str = "") -> str:
    """The breakdown as a terminal table: part, ms/step, share, and how it was obtained."""
    lines = [f"# stall breakdown{(' ' + title) if title else ''}  "
             f"(step = compute + stalls = {bd.step_ms:.2f} ms; {bd.confidence:.0%} bootstrap CIs)",
             f"#{'part':>13} {'ms/step':>10} {'share':>7}  how"]
    for part, ms, share, note in bd.rows():
        ms_s = "-" if ms != ms else f"{ms:.2f}"
        sh_s = "-" if share != share else f"{share:.1%}"
        lines.append(f"{part:>14} {ms_s:>10} {sh_s:>7}  {note}")
    lines.append("# runs: " + "  ".join(f"{k}={v['median_ms']:.2f}ms(n={v['n']})"
                                        for k, v in sorted(bd.runs.items())))
    return "\n".join(lines)


#: The parts whose memory two runs tell apart, each by the one thing they differ in, as the
#: stalls are (T1 - T0: N workers beside one; T3 - T1: the input read from files, cached).
MEMORY_PARTS = (("workers", "T1", "T0"), ("input pipeline", "T3", "T1"))


def memory_line(info: Mapping[str, Any]) -> str | None:
    """'# peak memory per run (largest rank): T0 512.3 MiB, T1 530.2 MiB; workers (T1-T0) +17.9
    MiB, input pipeline (T3-T1) +80.3 MiB': each run's peak and the memory of each part two runs
    tell apart, where both measured it; None where no run did."""
    peaks = {k[:2]: v["peak_mem_MiB"] for k, v in info.items()
             if k.endswith("_info") and isinstance(v, dict) and v.get("peak_mem_MiB") is not None}
    if not peaks:
        return None
    where = next((v.get("peak_mem_where") for k, v in info.items() if k.endswith("_info") and isinstance(v, dict)
                  and v.get("peak_mem_where")), "host")
    runs = ", ".join(f"{k} {v:.1f} MiB" for k, v in sorted(peaks.items()))
    parts = [f"{name} ({a}-{b}) {peaks[a] - peaks[b]:+.1f} MiB" for name, a, b in MEMORY_PARTS
             if a in peaks and b in peaks]
    what = "allocated on the GPU" if where == "device" else "resident"
    return f"# peak memory per run (largest rank, {what}): {runs}" + (f"; {', '.join(parts)}" if parts else "")


def expected_network_stall_ms(gradient_bytes: int, world_size: int, rate_bps: int) -> float:
    """The ring-allreduce lower bound of one step's gradient exchange over links of
    ``rate_bps``: gradient_bytes x 2(n-1)/n / bandwidth (what the validation test compares)."""
    if world_size < 2:
        return 0.0
    return gradient_bytes * 2 * (world_size - 1) / world_size * 8 / rate_bps * 1e3

"""The pictures people decide from: latency and busbw against message size, scaling, img/s, stalls.

Each plot function takes results tagged by the run they came from and writes one PNG, or says
why it drew nothing (no result that sweeps message sizes, no scaling numbers yet, no stall
metrics), so the report can show the reason instead of a hole. Which benchmarks are drawn
against message size their records say (``BenchmarkSpec.plots_by_size``); the others are
drawn by what their metrics are (a throughput unit, ``scaling_efficiency``, ``stall_*``).
matplotlib runs on the Agg backend: no display, no window, same bytes in CI as on a laptop.
Only ``report`` calls these; each PNG is written whole through ``formats.atomic_write``.
"""
from __future__ import annotations

import io
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: never try to open a display (CI, ssh, Slurm nodes)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

from .. import bench, collectives  # noqa: E402
from ..records import memory  # noqa: E402
from ..store.formats import atomic_write  # noqa: E402
from ..records.model import Result, Sample, format_size  # noqa: E402

#: A result and the tag of the run it came from ('' when the report has a single run).
Tagged = tuple[str, Result]

DPI = 110
#: Metrics that mean training throughput, by unit (kernels name them in their own words).
THROUGHPUT_UNITS = ("img/s", "images/s", "samples/s", "tokens/s")
STALL_PREFIX = "stall_"
COMPUTE_PREFIX = "compute_"
#: result.extra keys ending in this are measured copy bandwidths: the ceiling busbw can reach.
CEILING_SUFFIX = "_copy_GBps"


@dataclass(frozen=True)
class Plot:
    """One picture of the report: the PNG written, or why there is none."""

    name: str
    title: str
    file: Path | None = None
    skipped: str | None = None
    caption: str = ""


def series_label(result: Result, tag: str = "", sample: Sample | None = None) -> str:
    """'mpi n2', 'ring n4 float64 in-place · run2': what tells one line from another."""
    parts = [result.transport, f"n{result.world_size}"]
    case = sample.case if sample is not None else (result.samples[0].case if result.samples else None)
    if case is not None and case.dtype != "float32":  # as in the case's id (model.Case)
        parts.append(case.dtype)
    if case is not None and case.variant:
        parts.append(case.variant)
    if (result.extra or {}).get("inplace"):
        parts.append("in-place")
    if result.error:
        parts.append("(partial)")
    return " ".join(parts) + (f" · {tag}" if tag else "")


def _size_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(
        lambda x, _pos: format_size(int(round(x))) if x >= 1 else ""))
    ax.set_xlabel("message size")
    ax.grid(True, which="major", alpha=0.3)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI, bbox_inches="tight")  # keeps legends outside the axes
    plt.close(fig)
    return atomic_write(path, png.getvalue())


def _by_size(tagged: Sequence[Tagged]) -> list[Tagged]:
    """The results of benchmarks whose cases sweep message sizes (``BenchmarkSpec.plots_by_size``)."""
    return [(t, r) for t, r in tagged if bench.plots_by_size(r.benchmark) and r.samples]


def _by_size_title(what: str, rows: Sequence[Tagged] = ()) -> str:
    """'Allreduce latency vs message size': named after the size-sweeping benchmarks drawn
    (every registered one where none is)."""
    drawn = list(dict.fromkeys(r.benchmark for _, r in rows)) or bench.sized_benchmarks()
    names = " / ".join(n.capitalize() for n in drawn) or "Message-size"
    return f"{names} {what} vs message size"


def _label(r: Result, tag: str, rows: Sequence[Tagged]) -> str:
    """``series_label``, led by the benchmark where several collectives share a plot."""
    several = len({row.benchmark for _, row in rows}) > 1
    return f"{r.benchmark} {series_label(r, tag)}" if several else series_label(r, tag)


def _no_sized_results() -> str:
    names = bench.sized_benchmarks()
    return f"no {' or '.join(names) if len(names) < 3 else 'message-size'} results in the input"


def _points(result: Result, metric: str) -> list[tuple[int, float]]:
    pts = [(s.case.size_bytes, s.metrics[metric].value) for s in result.samples
           if s.case.size_bytes and metric in s.metrics]
    return sorted(pts)


def latency_plot(tagged: Sequence[Tagged], path: Path) -> Plot:
    rows = _by_size(tagged)
    title = _by_size_title("latency", rows)
    if not rows:
        return Plot("latency", title, skipped=_no_sized_results())
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for tag, r in rows:
        pts = _points(r, "latency_us")
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=_label(r, tag, rows))
    _size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("time (µs): slowest rank per call, p50")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return Plot("latency", title, _save(fig, path),
                caption="Each size's time as the table's: per call the slowest rank's, p50 over calls "
                        "(log-log); lower is better.")


def busbw_plot(tagged: Sequence[Tagged], path: Path) -> Plot:
    rows = _by_size(tagged)
    title = _by_size_title("bus bandwidth", rows)
    if not rows:
        return Plot("busbw", title, skipped=_no_sized_results())
    # One rank moves nothing over a bus: busbw is 0 there (nccl-tests' factor), no line to draw.
    rows = [(tag, r) for tag, r in rows if any(v > 0 for _, v in _points(r, "busbw_GBps"))]
    if not rows:
        return Plot("busbw", title, skipped="busbw is 0 in every result (one rank a world moves nothing over a bus)")
    by_transport: dict[str, list[Tagged]] = defaultdict(list)
    for tag, r in rows:
        by_transport[r.transport].append((tag, r))
    n = len(by_transport)
    cols = min(n, 2)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6.0 * cols, 4.2 * nrows), squeeze=False)
    ceilings = 0
    for ax, (transport, group) in zip(axes.flat, sorted(by_transport.items())):
        for tag, r in group:
            pts = _points(r, "busbw_GBps")
            (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                              label=_label(r, tag, rows))
            for key, value in sorted((r.extra or {}).items()):
                # The measured copy bandwidth is what one rank's memory can move: busbw near it
                # means the transport is memory-bound, far below it means overhead to find.
                if key.endswith(CEILING_SUFFIX) and isinstance(value, (int, float)) and value > 0:
                    ceilings += 1
                    what = key[: -len(CEILING_SUFFIX)].replace("_", " ")
                    ax.axhline(value, linestyle="--", color=line.get_color(), alpha=0.8,
                               label=f"{what} copy {value:.2f} GB/s ({series_label(r, tag)})")
        _size_axis(ax)
        ax.set_ylabel("busbw (GB/s)")
        ax.set_ylim(bottom=0)
        ax.set_title(transport)
        ax.legend(fontsize="x-small")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    words = {r.benchmark: c.factor_words for _, r in rows if (c := collectives.find(r.benchmark))}
    factor = (next(iter(words.values())) if len(words) == 1 else
              "the factor of its collective (" + "; ".join(f"{b} {w}" for b, w in words.items()) + ")")
    cap = (f"busbw = algbw x {factor}, as nccl-tests; dashed: the measured memory-copy ceiling."
           if ceilings else f"busbw = algbw x {factor}; no measured copy ceiling in these results.")
    return Plot("busbw", title, _save(fig, path), caption=cap)


def _metric_samples(tagged: Sequence[Tagged], pick: Callable[[str, object], bool]):
    for tag, r in tagged:
        for s in r.samples:
            for name, m in s.metrics.items():
                if pick(name, m):
                    yield tag, r, s, m


def scaling_plot(tagged: Sequence[Tagged], path: Path) -> Plot:
    title = "Scaling efficiency vs world size"
    pts: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for tag, r, s, m in _metric_samples(tagged, lambda n, m: n == "scaling_efficiency"):
        key = f"{s.case.benchmark} {r.transport}" + (f" {s.case.model}" if s.case.model else "")
        pts[key + (f" · {tag}" if tag else "")].append((r.world_size, m.value))
    if not pts:
        return Plot("scaling", title, skipped="no result carries a scaling_efficiency metric "
                    "(TensorFlow epoch results over several world sizes produce it)")
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    sizes = set()
    for label, p in sorted(pts.items()):
        p.sort()
        sizes.update(x for x, _ in p)
        ax.plot([x for x, _ in p], [y for _, y in p], marker="o", label=label)
    ax.axhline(1.0, color="grey", linestyle=":", label="ideal")
    ax.set_xticks(sorted(sizes))
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel("scaling efficiency")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize="small")
    return Plot("scaling", title, _save(fig, path),
                caption="Throughput per rank relative to one rank; 1.0 is perfect scaling.")


def throughput_plot(tagged: Sequence[Tagged], path: Path) -> Plot:
    """Each world's rate per model and batch, and beside it, where its ranks read it, its peak
    memory per rank (the largest rank's): what a change costs in memory stands next to its speed."""
    title = "Training throughput per transport and model"
    bars: dict[str, dict[str, float]] = defaultdict(dict)  # model -> series -> value
    mem: dict[str, dict[str, float]] = defaultdict(dict)
    unit = ""
    for tag, r, s, m in _metric_samples(tagged, lambda n, m: m.unit in THROUGHPUT_UNITS):
        group = (s.case.model or s.case.benchmark) + (f" b{s.case.batch}" if s.case.batch else "")
        bars[group][series_label(r, tag, s)] = m.value
        if memory.METRIC in s.metrics:
            mem[group][series_label(r, tag, s)] = s.metrics[memory.METRIC].value
        unit = m.unit
    if not bars:
        return Plot("throughput", title, skipped="no result carries an img/s or tokens/s metric "
                    "(the training benchmarks, tf-epoch and torch-epoch, produce them)")
    models = sorted(bars)
    series = sorted({k for v in bars.values() for k in v})
    width = 0.8 / len(series)
    panels = [(bars, unit, title)] + ([(mem, "peak memory per rank, MiB (largest rank)", "Peak memory")] if mem else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(len(panels) * max(6.0, 1.6 * len(models) + 3), 4.5),
                             squeeze=False)
    for ax, (values, ylabel, head) in zip(axes[0], panels):
        for i, name in enumerate(series):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(models))]
            ax.bar(xs, [values[mo].get(name, 0.0) for mo in models], width, label=name)
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models)
        ax.set_ylabel(ylabel)
        ax.set_title(head)
    axes[0][-1].legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return Plot("throughput", title + (" (and peak memory)" if mem else ""), _save(fig, path),
                caption="Images (or tokens) per second of the whole world, per model and per-worker batch; higher "
                        "is better." + (" Beside it, the largest rank's peak memory over the timed steps; lower "
                                        "is better." if mem else ""))


def _part_label(name: str) -> str:
    """'stall_io_ms' -> 'io stall', 'compute_ms' -> 'compute'."""
    base = re.sub(r"_(ms|s|us)$", "", name)
    return f"{base[len(STALL_PREFIX):]} stall" if base.startswith(STALL_PREFIX) else base


def stall_plot(tagged: Sequence[Tagged], path: Path) -> Plot:
    """Stacked bars per case: its ``compute_*`` time, then every ``stall_*`` metric on top."""
    title = "Where the time goes: stall breakdown"
    stacks: dict[str, dict[str, float]] = defaultdict(dict)
    unit = ""
    for tag, r in tagged:
        for s in r.samples:
            if not any(n.startswith(STALL_PREFIX) for n in s.metrics):
                continue
            key = s.case.name + (f" · {tag}" if tag else "")
            for name, m in s.metrics.items():
                if name.startswith((STALL_PREFIX, COMPUTE_PREFIX)):
                    stacks[key][_part_label(name)] = m.value
                    unit = m.unit
    if not stacks:
        return Plot("stalls", title, skipped="no result carries stall_* metrics "
                    "(the stall decomposition produces them)")
    cases = sorted(stacks)
    # compute first, so the stalls read as what is added on top of useful work
    parts = sorted({p for v in stacks.values() for p in v}, key=lambda p: (p.endswith("stall"), p))
    fig, ax = plt.subplots(figsize=(8.0, 1.0 + 0.5 * len(cases) + 1.5))
    left = [0.0] * len(cases)
    for part in parts:
        values = [stacks[c].get(part, 0.0) for c in cases]
        ax.barh(cases, values, left=left, label=part, height=0.6)
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlabel(f"time per step ({unit})" if unit else "time")
    ax.set_title(title)
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    return Plot("stalls", title, _save(fig, path),
                caption="Compute time and each stall on top of it (differential decomposition).")



def breakdown_plot(parts: Sequence[tuple[str, float]], title: str, path: Path) -> Plot:
    """One stacked bar of a Stash breakdown: compute, then each stall (ms per step)."""
    shown = [(name, ms) for name, ms in parts if ms == ms]  # NaN: a skipped stall
    fig, ax = plt.subplots(figsize=(8.0, 2.6))
    left = 0.0
    for name, ms in shown:
        ax.barh([title], [ms], left=left, label=f"{name} {ms:.1f} ms")
        left += ms
    ax.set_xlabel("ms per step (median of the slowest rank)")
    ax.set_title("Where a training step goes: compute and stalls (Stash)")
    ax.legend(fontsize="small", ncol=min(len(shown), 5), loc="upper center",
              bbox_to_anchor=(0.5, -0.35))
    return Plot("breakdown", title, _save(fig, Path(path)))


#: The most cases the per-rank plot draws: the ones that named a rank first, then the latest.
RANK_PLOT_CASES = 8


def rank_plot(tagged: Sequence[Tagged], path: Path) -> Plot:
    """Per case, each rank's arrival (or compute) against the others' (``info["rank_ratio"]``):
    one small panel of bars per case, a named straggler in red."""
    title = "Who is late: each rank against the others"
    shown = []
    for tag, r in tagged:
        for s in r.samples:
            ratios = s.info.get("rank_ratio") or s.info.get("node_ratio")
            if ratios:
                shown.append((s, tag, ratios, (s.info.get("straggler") or {}).get("rank")))
    if not shown:
        return Plot("ranks", title, skipped="no result of two or more ranks carries per-rank times "
                    "(allreduce, training with a visible exchange, p2p)")
    shown = sorted(shown, key=lambda x: (x[3] is None, -max(x[2])))[:RANK_PLOT_CASES]
    fig, axes = plt.subplots(len(shown), 1, figsize=(7.0, 1.4 + 1.3 * len(shown)), squeeze=False)
    for ax, (s, tag, ratios, late) in zip(axes[:, 0], shown):
        colors = ["tab:red" if i == late else "tab:blue" for i in range(len(ratios))]
        second = s.info.get("reordered_blocks")
        if second:  # the same calls over the second rank order, beside the first
            again = [math.exp(statistics.median(col)) for col in zip(*second)]
            ax.bar([i - 0.2 for i in range(len(ratios))], ratios, 0.4, color=colors, label="world order")
            ax.bar([i + 0.2 for i in range(len(again))], again, 0.4, color=colors, alpha=0.45,
                   hatch="//", label="second order")
            ax.legend(fontsize="x-small", loc="upper left")
        else:
            ax.bar(range(len(ratios)), ratios, color=colors)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        nodes = s.info.get("nodes") or []
        ax.set_xticks(range(len(ratios)))
        ax.set_xticklabels([f"{i}\n{nodes[i]}" if i < len(nodes) else str(i) for i in range(len(ratios))],
                           fontsize="x-small")
        ax.set_ylabel("x others", fontsize="small")
        ax.set_title(s.case.name + (f" · {tag}" if tag else ""), fontsize="small")
    axes[0, 0].figure.suptitle(title)
    fig.tight_layout()
    return Plot("ranks", title, _save(fig, path),
                caption="Each rank's time to arrive (allreduce: from its barrier exit to the end of its call; "
                        "training: its compute apart from the exchange; p2p: its links) over the median of "
                        "the other ranks, the median of the case's blocks of calls; hatched: the same calls over "
                        "the second rank order, where one ran; red: the rank the straggler rule named.")


PLOTS: tuple[Callable[[Sequence[Tagged], Path], Plot], ...] = (
    latency_plot, busbw_plot, scaling_plot, throughput_plot, stall_plot, rank_plot)
FILES = {"latency_plot": "latency.png", "busbw_plot": "busbw.png", "scaling_plot": "scaling.png",
         "throughput_plot": "throughput.png", "stall_plot": "stalls.png", "rank_plot": "ranks.png"}


def make_plots(tagged: Sequence[Tagged], out_dir: Path) -> list[Plot]:
    """Every plot of the report, in reading order; skipped ones carry their reason."""
    return [fn(tagged, out_dir / FILES[fn.__name__]) for fn in PLOTS]

"""What a study's worlds say, vector by vector: pure over the plan and the records.

Every figure is a geometric mean over the study's rounds with a 95% t interval on the logs
(``stats.paired_ratio_ci``). A ratio of two points, or a scaling efficiency, pairs the rounds:
round r of one point with round r of the other, which ran in the same pass over the plan. A
round is evidence when its world ran, validated (a world whose results were wrong counts as
a failed round, though its record keeps what it measured) and was not contended (an allreduce world's
timed thread waited for a CPU beyond the suite's limit in every retry); TensorFlow's own
threads crowd a small machine by design, so a training world's wait share is reported and not
judged (``rounds.contention_of``). A language model's rate is tokens/s (``training.rate_of``):
the parallelism vector gives each world size and precision DDP's and FSDP's tokens/s, their
ratio paired by round, and each one's scaling efficiency against its own 1-rank point.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..store import formats
from ..records import memory, stats
from ..kernels.models.catalogue import model_spec
from ..kernels.training.loop import rate_of, training_variant
from ..records.model import Result, Sample
from .study_plan import NO_GRPC_REFERENCE, PARALLELISM_BENCHMARK, Plan, Point, training

#: The seed paper's headline, Horovod-MPI's img/s over native gRPC's on Piz Daint's GPUs: a
#: reference to read beside each No-gRPC design's ratio on this machine, not a target.
PAPER_RATIO = {"resnet50": 1.8, "mobilenet": 3.2}
PAPER_WHERE = "Horovod-MPI over gRPC, Piz Daint (P100 GPUs, Aries)"


@dataclass
class PointData:
    point: Point
    results: dict[int, Result] = field(default_factory=dict)  # round -> result
    skipped: str | None = None
    failures: list[str] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)

    def sample(self, rnd: int, batch: int | None = None, size: int | None = None) -> Sample | None:
        r = self.results.get(rnd)
        for s in r.samples if r else ():
            if (batch is None or s.case.batch == batch) and (size is None or s.case.size_bytes == size):
                return s
        return None

    def series(self, metric: str, batch: int | None = None, size: int | None = None) -> dict[int, float]:
        """round -> value of the valid rounds: the calm ones, unless fewer than two were calm
        (then every round, and ``contended_rounds`` says so beside the figure)."""
        out, calm = {}, {}
        for rnd in sorted(self.results):
            s = self.sample(rnd, batch, size)
            if s is None or not s.valid or metric not in s.metrics or not s.metrics[metric].value > 0:
                continue
            out[rnd] = float(s.metrics[metric].value)
            if not s.info.get("contended"):
                calm[rnd] = out[rnd]
        return calm if len(calm) >= 2 else out

    def contended_rounds(self) -> int:
        return sum(1 for r in self.results.values() if any(s.info.get("contended") for s in r.samples))

    def contention(self) -> tuple[float | None, str]:
        """(median wait share over the rounds, scope 'thread' or 'process')."""
        waits, scope = [], "thread"
        for r in self.results.values():
            for s in r.samples[:1]:
                c = s.info.get("contention")
                scope = s.info.get("contention_scope", "thread")
                if isinstance(c, (int, float)):
                    waits.append(float(c))
        return (stats.median(waits) if waits else None), scope

    @property
    def status(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.failures and not self.results:
            return f"failed: {self.failures[-1]}"
        return f"{len(self.failures)} round(s) failed" if self.failures else ""


def collect(plan: Plan, records: Sequence[dict]) -> dict[str, PointData]:
    data = {k: PointData(p) for k, p in plan.points.items()}
    last = {(r.get("point"), r.get("round")): r for r in records}  # a re-run world replaces its failure
    for rec in last.values():
        d = data.get(rec.get("point"))
        if d is None:
            continue
        d.wall_s.append(float(rec.get("wall_s", 0.0)))
        if rec.get("skipped"):
            d.skipped = rec["skipped"]
        elif rec.get("failure"):
            d.failures.append(f"round {rec['round'] + 1}: {rec['failure']}")
        elif rec.get("result"):
            result = formats.load_result(rec["result"], f"study world {rec['point']}")
            wrong = [s.case.name for s in result.samples if not s.valid]
            if wrong:  # a failed round: its record keeps what it measured, no figure uses it
                d.failures.append(f"round {rec['round'] + 1}: wrong results in {', '.join(wrong)}")
            else:
                d.results[int(rec["round"])] = result
    return data


@dataclass(frozen=True)
class Figure:
    """A geometric mean over rounds with its 95% interval (NaN bounds: fewer than 2 rounds)."""

    value: float
    low: float
    high: float
    rounds: int

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "rounds": self.rounds}


NONE = Figure(math.nan, math.nan, math.nan, 0)


def figure(values: dict[int, float]) -> Figure:
    if not values:
        return NONE
    v = list(values.values())
    g, lo, hi = stats.paired_ratio_ci(v, [1.0] * len(v))
    return Figure(g, lo, hi, len(v))


def paired(num: dict[int, float], den: dict[int, float], scale: float = 1.0) -> Figure:
    """num/(scale x den) over the rounds both have."""
    common = sorted(set(num) & set(den))
    if not common:
        return NONE
    g, lo, hi = stats.paired_ratio_ci([num[r] for r in common], [scale * den[r] for r in common])
    return Figure(g, lo, hi, len(common))


def _contention(d: PointData) -> str:
    c, scope = d.contention()
    bad = d.contended_rounds()
    return ("n/a" if c is None else f"{c:.0%}" + (" (process)" if scope != "thread" else "")
            + (f", {bad} of {len(d.results)} rounds contended" if bad else ""))


def _get(data: dict[str, PointData], p: Point) -> PointData | None:
    return data.get(p.key)


def _tf_point(plan: Plan, t: str, n: int, model: str, network: str = "none", arm: str = "") -> Point:
    """A training point: TensorFlow's or PyTorch's, by the transport's name."""
    net = "none" if n == 1 else network
    return Point(training(t), t, n, model, plan.image(model), net, arm)


def _row(d: PointData | None, **cells: Any) -> dict[str, Any]:
    status = "not in plan" if d is None else d.status
    return {**cells, "contention": "n/a" if d is None else _contention(d), "status": status}


def efficiency(data, plan, t, n, model, batch, network="none") -> tuple[Figure, Figure]:
    """(img/s, scaling efficiency img/s(n) / (n x img/s(1)) paired by round)."""
    d, one = _get(data, _tf_point(plan, t, n, model, network)), _get(data, _tf_point(plan, t, 1, model))
    img = d.series("img_per_s", batch) if d else {}
    base = one.series("img_per_s", batch) if one else {}
    return figure(img), (paired(img, base, n) if n > 1 else (figure({r: 1.0 for r in img}) if img else NONE))


def scaling(plan: Plan, data: dict[str, PointData]) -> dict[str, list[dict]]:
    v = plan.vectors["scaling"]
    model, batch = v["model"], v["batches"][0]
    tf_rows, ar_rows = [], []
    for t in v["transports"]:
        for net in v["networks"]:
            for n in v["world_sizes"]:
                if n == 1 and net != v["networks"][0]:
                    continue
                img, eff = efficiency(data, plan, t, n, model, batch, net)
                d = _get(data, _tf_point(plan, t, n, model, net))
                tf_rows.append(_row(d, transport=t, network="none" if n == 1 else net, world_size=n,
                                    img_per_s=img, efficiency=eff))
    sizes = v.get("allreduce_sizes", ())
    for t in v.get("allreduce", ()):
        for net in v["networks"]:
            for n in v.get("allreduce_world_sizes", ()):
                d = _get(data, Point("allreduce", t, n, network=net))
                ar_rows.append(_row(d, transport=t, network=net, world_size=n,
                                    latency_us=figure(d.series("latency_us", size=sizes[0])) if d else NONE,
                                    busbw_GBps=figure(d.series("busbw_GBps", size=sizes[-1])) if d else NONE))
    return {"training": tf_rows, "allreduce": ar_rows}


def batch(plan: Plan, data: dict[str, PointData]) -> list[dict]:
    v = plan.vectors["batch"]
    rows = []
    for t in v["transports"]:
        for b in v["batches"]:
            img, eff = efficiency(data, plan, t, v["world_size"], v["model"], b, v["network"])
            d = _get(data, _tf_point(plan, t, v["world_size"], v["model"], v["network"]))
            rows.append(_row(d, transport=t, batch=b, img_per_s=img, efficiency=eff))
    return rows


def mpi_library(plan: Plan, data: dict[str, PointData]) -> list[dict]:
    v = plan.vectors["mpi-library"]
    n, libs = v["world_size"], v["libraries"]
    cases = [(training(t), t, "img_per_s", None, None) for t in v["transports"]]
    sizes = v.get("allreduce_sizes", ())
    for t in v.get("allreduce", ()):
        cases += [("allreduce", t, "latency_us", None, sizes[0]), ("allreduce", t, "busbw_GBps", None, sizes[-1])]
    rows = []
    for bench, t, metric, b, size in cases:
        ref = None
        for lib in libs:
            arm = plan.arms[lib].key
            p = (_tf_point(plan, t, n, v["model"], arm=arm) if bench != "allreduce"
                 else Point("allreduce", t, n, arm=arm))
            d = _get(data, p)
            vals = d.series(metric, b if b is not None else (v["batches"][0] if bench != "allreduce" else None), size) if d else {}
            ref = vals if ref is None else ref
            rows.append(_row(d, case=f"{bench} {t}" + (f" {LABELS[metric]}" if bench == "allreduce" else " img/s"),
                             library=lib, metric=metric, value=figure(vals),
                             ratio=paired(vals, ref) if lib != libs[0] else NONE))
    return rows


def models(plan: Plan, data: dict[str, PointData]) -> dict[str, list[dict]]:
    v = plan.vectors["models"]
    n, b = v["world_size"], v["batches"][0]
    rows, headline = [], []
    for m in v["models"]:
        img = {}
        for t in v["transports"]:
            d = _get(data, _tf_point(plan, t, n, m, v["network"]))
            img[t] = d.series("img_per_s", b) if d else {}
            rows.append(_row(d, model=m, transport=t, image_size=plan.image(m), img_per_s=figure(img[t])))
        if NO_GRPC_REFERENCE in img:
            for t in v["transports"]:
                if t != NO_GRPC_REFERENCE:
                    headline.append({"model": m, "transport": t, "image_size": plan.image(m),
                                     "ratio": paired(img[t], img[NO_GRPC_REFERENCE]),
                                     "paper": PAPER_RATIO.get(m)})
    return {"rows": rows, "headline": headline}


def rate_metric(model: str) -> tuple[str, str]:
    """(metric, unit) of a model's training rate: tokens/s for a language model, else img/s
    (``training.rate_of``'s rule, asked of the model instead of a sample)."""
    return rate_of({"seq_len": model_spec(model).seq_len})


def model_state(d: PointData | None, batch: int | None) -> float:
    """The largest rank's model state (MiB) of a point: counted from its tensors, the same every
    round, so the last round's; NaN where none was counted."""
    for rnd in sorted(d.results, reverse=True) if d else ():
        s = d.sample(rnd, batch)
        if s is not None and s.info.get("model_state_MiB"):
            return float(max(s.info["model_state_MiB"]))
    return math.nan


def parallelism(plan: Plan, data: dict[str, PointData]) -> dict[str, Any]:
    """Per transport, precision and world size: each parallelism's rate and scaling efficiency
    (rate(n) / (n x rate(1)) of the same parallelism and precision, where the plan has 1 rank),
    its peak memory per rank and model state, and FSDP over DDP in rate and in peak memory,
    round r of one over round r of the other: the time FSDP costs beside the memory it saves."""
    v = plan.vectors["parallelism"]
    model, b = v["model"], v["batches"][0]
    metric, unit = rate_metric(model)
    rows, ratios = [], []
    mem: dict[tuple[int, str], dict[int, float]] = {}
    state: dict[tuple[int, str], float] = {}

    def point(t: str, n: int, par: str, amp: str) -> Point:
        return Point(PARALLELISM_BENCHMARK, t, n, model, plan.image(model), "none" if n == 1 else v["networks"][n],
                     variant=training_variant(par, amp), seq_len=plan.seq(model))

    for t in v["transports"]:
        for amp in v["amp"]:
            series = {}
            for n in v["world_sizes"]:
                for par in v["parallel"]:
                    d = _get(data, point(t, n, par, amp))
                    series[n, par] = d.series(metric, b) if d else {}
                    mem[n, par] = d.series(memory.METRIC, b) if d else {}
                    state[n, par] = model_state(d, b)
                    one = series.get((1, par), {})
                    eff = (NONE if 1 not in v["world_sizes"] else paired(series[n, par], one, n) if n > 1
                           else figure({r: 1.0 for r in series[n, par]}) if series[n, par] else NONE)
                    rows.append(_row(d, transport=t, amp=amp, world_size=n, network=point(t, n, par, amp).network,
                                     parallel=par, rate=figure(series[n, par]), efficiency=eff,
                                     peak_mem=figure(mem[n, par]), model_state_MiB=state[n, par]))
                if {"ddp", "fsdp"} <= set(v["parallel"]):
                    ratios.append({"transport": t, "amp": amp, "world_size": n,
                                   "network": point(t, n, "ddp", amp).network,
                                   "ratio": paired(series[n, "fsdp"], series[n, "ddp"]),
                                   "mem_ratio": paired(mem[n, "fsdp"], mem[n, "ddp"]),
                                   "state_ratio": state[n, "fsdp"] / state[n, "ddp"] if state[n, "ddp"] > 0 else math.nan})
    return {"metric": metric, "unit": unit, "model": model, "batch": b, "seq_len": plan.seq(model),
            "rows": rows, "ratios": ratios}


LABELS = {"latency_us": "latency (us, lower is better)", "busbw_GBps": "busbw (GB/s)"}
ANALYSES = {"scaling": scaling, "batch": batch, "mpi-library": mpi_library, "models": models,
            "parallelism": parallelism}


def analyse(plan: Plan, records: Sequence[dict]) -> dict[str, Any]:
    data = collect(plan, records)
    return {name: ANALYSES[name](plan, data) for name in plan.vectors} | {"_data": data}


def document(plan: Plan, an: dict[str, Any]) -> dict[str, Any]:
    """What the report draws: the plan's name and words, and the analysis with plain figures."""
    from .study_plan import VECTORS

    sizes = next((v.get("allreduce_sizes") for v in plan.vectors.values() if v.get("allreduce_sizes")), ())
    return {"name": plan.name, "description": plan.description, "about": dict(VECTORS),
            "allreduce_sizes": list(plan.vectors.get("scaling", {}).get("allreduce_sizes", sizes)),
            "paper_where": PAPER_WHERE, "analysis": to_json(an)}


def to_json(value: Any) -> Any:
    """The analysis with every Figure as a dict (for the report's JSON twin)."""
    if isinstance(value, Figure):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items() if k != "_data"}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value


def frameworks(plan: Plan, data: dict[str, PointData], fp: dict) -> str:
    """'TensorFlow 2.20.0, PyTorch 2.14.1': the frameworks the plan's points train with, each as
    its ranks reported it (PyTorch) or as installed here (TensorFlow), '?' before a world ran."""
    benches = {p.benchmark for p in plan.points.values()}
    seen = {"torch-epoch": next((str(r.extra.get("torch")) for d in data.values() for r in d.results.values()
                                 if d.point.benchmark == "torch-epoch" and (r.extra or {}).get("torch")), None),
            "tf-epoch": fp.get("tensorflow")}
    names = {"tf-epoch": "TensorFlow", "torch-epoch": "PyTorch"}
    return ", ".join(f"{names[b]} {seen[b] or '?'}" for b in names if b in benches) or "no framework"


def libraries(plan: Plan, data: dict[str, PointData]) -> str:
    """'mpich: MPICH Version: 5.0.2; openmpi: Open MPI v5.0.11', as each arm's rank 0 reported."""
    seen: dict[str, str] = {}
    for d in data.values():
        for r in d.results.values():
            lib = str(r.fingerprint.get("mpi_library") or "").split(",")[0].strip()
            name = next((a.name for a in plan.arms.values() if a.key == d.point.arm), "this venv")
            if lib:
                seen.setdefault(name, lib)
    return "; ".join(f"{k}: {v}" for k, v in seen.items())

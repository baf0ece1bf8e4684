"""A study's report: the seed paper's kinds of figures and tables, as Markdown, HTML and PNG.

One section per vector the plan names, each a picture and the table it was drawn from, every
figure with its 95% interval over the study's rounds and each point's contention; the headline
No-gRPC/gRPC ratio per model first, beside the paper's own figure as a reference; the
parallelism vector as one row per world size and precision: DDP's and FSDP's tokens/s, FSDP/DDP
and each one's scaling efficiency, beside each one's peak memory per rank and model state and
FSDP/DDP in memory (the trade FSDP makes, in one row). Written whole
through ``formats.atomic_write``; the pictures through ``plots``' Agg backend.
"""
from __future__ import annotations

import html
import math
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..store.formats import atomic_write
from .plots import _save  # Agg backend, one PNG written whole
from .report import _html_table, _md_table
from ..records.model import format_size

import matplotlib.pyplot as plt  # noqa: E402

Table = tuple[Sequence[str], list[Sequence[str]]]
#: A figure as the analysis hands it over: {"value", "low", "high", "rounds"} (NaN: none).
Figure = dict
NONE: Figure = {"value": math.nan, "low": math.nan, "high": math.nan, "rounds": 0}


def text(f: Figure, fmt: str = ".3g") -> str:
    if not f["rounds"] or math.isnan(f["value"]):
        return "n/a"
    if math.isnan(f["low"]):
        return f"{f['value']:{fmt}} (1 round, no interval)"
    return f"{f['value']:{fmt}} [{f['low']:{fmt}}, {f['high']:{fmt}}]"


def _err(figs: Sequence[Figure]) -> tuple[list[float], list[list[float]]]:
    """Values and asymmetric error bars (no interval: no bar)."""
    ys = [f["value"] for f in figs]
    lo = [f["value"] - f["low"] if not math.isnan(f["low"]) else 0.0 for f in figs]
    hi = [f["high"] - f["value"] if not math.isnan(f["high"]) else 0.0 for f in figs]
    return ys, [lo, hi]


def _lines(ax, rows: list[dict], x: str, y: str, group: Sequence[str]) -> None:
    keys = list(dict.fromkeys(tuple(r[g] for g in group) for r in rows))
    for k in keys:
        pts = [r for r in rows if tuple(r[g] for g in group) == k and r[y]["rounds"]]
        if pts:
            ys, err = _err([r[y] for r in pts])
            ax.errorbar([r[x] for r in pts], ys, yerr=err, marker="o", capsize=3,
                        label=" ".join(str(p) for p in k if p not in ("none", "")))
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def scaling_png(rows: dict, path: Path, title: str) -> Path:
    fig, axes = plt.subplots(1, 3 if rows["allreduce"] else 2, figsize=(15 if rows["allreduce"] else 10, 4))
    _lines(axes[0], rows["training"], "world_size", "img_per_s", ("transport", "network"))
    axes[0].set(xlabel="workers", ylabel="img/s (95% interval)", title=f"{title}: throughput")
    _lines(axes[1], rows["training"], "world_size", "efficiency", ("transport", "network"))
    axes[1].axhline(1.0, color="grey", lw=0.8, ls=":")
    axes[1].set(xlabel="workers", ylabel="img/s(n) / (n x img/s(1))", title="scaling efficiency")
    if rows["allreduce"]:
        _lines(axes[2], rows["allreduce"], "world_size", "busbw_GBps", ("transport", "network"))
        axes[2].set(xlabel="ranks", ylabel="busbw GB/s", title="allreduce alongside")
    for ax, which in zip(axes, ("training", "training", "allreduce")):
        ax.set_xticks(sorted({r["world_size"] for r in rows[which]}))
    return _save(fig, path)


def batch_png(rows: list[dict], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    _lines(ax, rows, "batch", "efficiency", ("transport",))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["batch"] for r in rows}), [str(b) for b in sorted({r["batch"] for r in rows})])
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="per-worker batch", ylabel="scaling efficiency (95% interval)", title=title)
    return _save(fig, path)


def _bars(ax, labels: list[str], groups: list[str], figs: dict[tuple[str, str], Figure]) -> None:
    width = 0.8 / max(len(groups), 1)
    for j, g in enumerate(groups):
        fs = [figs.get((lab, g), NONE) for lab in labels]
        ys, err = _err(fs)
        ax.bar([i + j * width for i in range(len(labels))], [0 if math.isnan(y) else y for y in ys],
               width, yerr=err, capsize=3, label=g)
    ax.set_xticks([i + width * (len(groups) - 1) / 2 for i in range(len(labels))],
                  [textwrap.fill(lab, 18) for lab in labels], fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    top = max([f["high"] if not math.isnan(f["high"]) else f["value"] for f in figs.values()
               if not math.isnan(f["value"])] + [1.0])
    ax.set_ylim(0, top * 1.25)  # room for the legend above the bars
    ax.legend(fontsize=8, loc="upper left", ncol=len(groups))
    ax.grid(True, axis="y", alpha=0.3)


def mpi_png(rows: list[dict], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len({r["case"] for r in rows})), 4.5))
    libs = list(dict.fromkeys(r["library"] for r in rows))
    cases = list(dict.fromkeys(r["case"] for r in rows))
    figs = {}
    for r in rows:
        figs[(r["case"], r["library"])] = (r["ratio"] if r["library"] != libs[0]
                                           else {**NONE, "value": 1.0, "rounds": r["value"]["rounds"]})
    _bars(ax, cases, libs, figs)
    ax.set(ylabel=f"value / value under {libs[0]} (95% interval)", title=title)
    return _save(fig, path)


def models_png(headline: list[dict], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = list(dict.fromkeys(f"{h['model']}@{h['image_size']}" for h in headline))
    ts = list(dict.fromkeys(h["transport"] for h in headline))
    _bars(ax, labels, ts, {(f"{h['model']}@{h['image_size']}", h["transport"]): h["ratio"] for h in headline})
    width = 0.8 / max(len(ts), 1)
    paper = {f"{h['model']}@{h['image_size']}": h["paper"] for h in headline if h["paper"]}
    if paper:
        ax.set_ylim(0, max(ax.get_ylim()[1], 1.25 * max(paper.values())))
    for i, label in enumerate(labels):
        if label in paper:  # one mark per model, across its bars: the paper's Horovod-MPI/gRPC
            ax.hlines(paper[label], i - width / 2, i + width * (len(ts) - 0.5), colors="k", linestyles="--")
            ax.annotate(f"paper {paper[label]}x (GPUs)", (i, paper[label]), fontsize=7,
                        xytext=(0, 3), textcoords="offset points")
    ax.set(ylabel="img/s over gRPC's (95% interval)", title=title)
    return _save(fig, path)


#: How a precision reads in a table or a legend: "off" is float32 (autocast off).
PRECISION = {"off": "float32", "bf16": "bf16"}


def parallelism_png(an: dict, path: Path, title: str) -> Path:
    rows = [{**r, "amp": PRECISION.get(r["amp"], r["amp"])} for r in an["rows"]]
    ratios = [{**r, "amp": PRECISION.get(r["amp"], r["amp"])} for r in an["ratios"]]
    nets = {r["world_size"]: r["network"] for r in rows}
    ticks = sorted(nets)
    labels = [f"{n}" + (f"\n{nets[n]}" if nets[n] != "none" else "") for n in ticks]  # emulated nodes' rate
    memory = [r for r in ratios if r.get("mem_ratio", NONE)["rounds"]]
    panels = 1 + bool(ratios) + bool(memory)
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    ax = axes[0][0]
    _lines(ax, rows, "world_size", "rate", ("transport", "parallel", "amp"))
    ax.set(xlabel="ranks", ylabel=f"{an['unit']} (95% interval)", title=f"{title}: {an['model']}")
    ax.set_xticks(ticks, labels)
    if ratios:
        ax = axes[0][1]
        _lines(ax, ratios, "world_size", "ratio", ("transport", "amp"))
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_yscale("log")  # a ratio: 0.5 and 2 are as far from 1
        ax.set(xlabel="ranks", ylabel=f"FSDP {an['unit']} / DDP's (95%, paired by round)", title="FSDP over DDP")
        ax.set_xticks(ticks, labels)
    if memory:  # what FSDP buys with its time: the largest rank's peak memory, FSDP over DDP
        ax = axes[0][2]
        _lines(ax, memory, "world_size", "mem_ratio", ("transport", "amp"))
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set(xlabel="ranks", ylabel="FSDP peak memory / DDP's (largest rank, 95%)", title="memory, FSDP over DDP")
        ax.set_xticks(ticks, labels)
    return _save(fig, path)


# --- tables -------------------------------------------------------------------------------------

def parallelism_table(an: dict) -> Table:
    """One row per transport, precision and world size: each parallelism's rate, FSDP/DDP, each
    one's scaling efficiency (where the plan has 1 rank), contention and status."""
    pars = list(dict.fromkeys(r["parallel"] for r in an["rows"]))
    groups: dict[tuple, dict[str, dict]] = {}
    for r in an["rows"]:
        groups.setdefault((r["transport"], r["amp"], r["world_size"]), {})[r["parallel"]] = r
    ratio = {(r["transport"], r["amp"], r["world_size"]): r["ratio"] for r in an["ratios"]}
    eff = any(r["world_size"] == 1 for r in an["rows"])
    unit = an["unit"]
    fmt = ".0f" if unit == "tokens/s" else ".4g"  # thousands of tokens/s read best whole
    mem_ratio = {(r["transport"], r["amp"], r["world_size"]): r.get("mem_ratio", NONE) for r in an["ratios"]}
    state_ratio = {(r["transport"], r["amp"], r["world_size"]): r.get("state_ratio", math.nan) for r in an["ratios"]}
    mem = any(r.get("peak_mem", NONE)["rounds"] for r in an["rows"])
    head = (["transport", "ranks", "network", "precision"] + [f"{p.upper()} {unit} [95%]" for p in pars]
            + (["FSDP/DDP [95%]"] if ratio else []) + ([f"{p.upper()} efficiency [95%]" for p in pars] if eff else [])
            + ([f"{p.upper()} peak MiB/rank [95%]" for p in pars] + [f"{p.upper()} model state MiB/rank" for p in pars]
               + (["FSDP/DDP memory [95%]", "FSDP/DDP model state"] if ratio else []) if mem else [])
            + ["contention", "status"])
    rows = []
    for (t, amp, n), by in groups.items():
        first = next(iter(by.values()))
        statuses = list(dict.fromkeys(r["status"] for r in by.values()))
        status = statuses[0] if len(statuses) == 1 else "; ".join(f"{p}: {r['status']}" for p, r in by.items()
                                                                  if r["status"])
        rows.append([t, n, first["network"], PRECISION.get(amp, amp)]
                    + [_f(by[p]["rate"], fmt) if p in by else "not in plan" for p in pars]
                    + ([_f(ratio.get((t, amp, n), NONE))] if ratio else [])
                    + ([("1 (the reference)" if n == 1 and by[p]["rate"]["rounds"] else _f(by[p]["efficiency"]))
                        if p in by else "-" for p in pars] if eff else [])
                    + ([_f(by[p].get("peak_mem", NONE), ".1f") if p in by else "-" for p in pars]
                       + [_state(by[p].get("model_state_MiB")) if p in by else "-" for p in pars]
                       + ([_f(mem_ratio.get((t, amp, n), NONE)), _state(state_ratio.get((t, amp, n)), ".3f")]
                          if ratio else []) if mem else [])
                    + ["; ".join(f"{p} {r['contention']}" for p, r in by.items()), status])
    return head, rows


def _state(x: Any, fmt: str = ".2f") -> str:
    """A model-state cell: exact (counted from the tensors), so no interval; '-' where none."""
    return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def _f(x: Any, fmt: str = ".3g") -> str:
    return text(x, fmt) if isinstance(x, dict) and "rounds" in x else str(x)


def tables(doc: dict[str, Any]) -> dict[str, list[tuple[str, Table]]]:
    an = doc["analysis"]
    out: dict[str, list[tuple[str, Table]]] = {}
    if "scaling" in an:
        s = an["scaling"]
        out["scaling"] = [("training", (("transport", "network", "workers", "img/s [95%]", "efficiency [95%]",
                                        "contention", "status"),
                                       [(r["transport"], r["network"], r["world_size"], _f(r["img_per_s"], ".4g"),
                                         _f(r["efficiency"]) if r["world_size"] > 1 or not r["img_per_s"]["rounds"]
                                         else "1 (the reference)",
                                         r["contention"], r["status"]) for r in s["training"]]))]
        if s["allreduce"]:
            sz = doc["allreduce_sizes"]
            out["scaling"].append(("allreduce alongside", (
                ("transport", "network", "ranks", f"latency us @ {format_size(sz[0])}",
                 f"busbw GB/s @ {format_size(sz[-1])}", "contention", "status"),
                [(r["transport"], r["network"], r["world_size"], _f(r["latency_us"]), _f(r["busbw_GBps"]),
                  r["contention"], r["status"]) for r in s["allreduce"]])))
    if "batch" in an:
        out["batch"] = [("", (("transport", "batch", "img/s [95%]", "efficiency [95%]", "contention", "status"),
                              [(r["transport"], r["batch"], _f(r["img_per_s"], ".4g"), _f(r["efficiency"]),
                                r["contention"], r["status"]) for r in an["batch"]]))]
    if "mpi-library" in an:
        out["mpi-library"] = [("", (("case", "MPI library", "value [95%]", "ratio to first [95%]", "contention",
                                     "status"),
                                    [(r["case"], r["library"], _f(r["value"], ".4g"), _f(r["ratio"]),
                                      r["contention"], r["status"]) for r in an["mpi-library"]]))]
    if "models" in an:
        m = an["models"]
        out["models"] = [("", (("model", "image px", "transport", "img/s [95%]", "contention", "status"),
                               [(r["model"], r["image_size"], r["transport"], _f(r["img_per_s"], ".4g"),
                                 r["contention"], r["status"]) for r in m["rows"]]))]
    if "parallelism" in an:
        a = an["parallelism"]
        what = (f"{a['model']}, {a['seq_len']} tokens x {a['batch']} sequences per rank" if a["seq_len"]
                else f"{a['model']}, batch {a['batch']} per rank")
        out["parallelism"] = [(f"{what}: DDP and FSDP by world size and precision", parallelism_table(a))]
    return out


def headline_table(doc: dict[str, Any]) -> Table | None:
    rows = doc["analysis"].get("models", {}).get("headline") or []
    if not rows:
        return None
    return (("model", "image px", "No-gRPC transport", "img/s over gRPC [95%]", "paper (reference)"),
            [(h["model"], h["image_size"], h["transport"], _f(h["ratio"]),
              f"{h['paper']}x ({doc['paper_where']})" if h["paper"] else "-") for h in rows])


def _md(t: Table) -> list[str]:
    return _md_table(*t)


def _html(t: Table) -> str:
    return _html_table(*t)


PNG = {"scaling": "scaling.png", "batch": "batch.png", "mpi-library": "mpi-library.png", "models": "models.png",
       "parallelism": "parallelism.png"}


def write(out: str | os.PathLike, doc: dict[str, Any], facts: list[str], notes: list[str]) -> list[Path]:
    """report.md, report.html and one PNG per vector under ``out``; ``doc`` is the study's
    name, description, vectors' descriptions (``about``) and analysis, figures as dicts."""
    out, an, name_ = Path(out), doc["analysis"], doc["name"]
    written = []
    draw = {"scaling": lambda p: scaling_png(an["scaling"], p, name_),
            "batch": lambda p: batch_png(an["batch"], p, f"{name_}: efficiency vs batch"),
            "mpi-library": lambda p: mpi_png(an["mpi-library"], p, f"{name_}: MPI library"),
            "models": lambda p: models_png(an["models"]["headline"], p, f"{name_}: No-gRPC over gRPC"),
            "parallelism": lambda p: parallelism_png(an["parallelism"], p, name_)}
    for name in an:
        if name != "models" or an["models"]["headline"]:
            written.append(draw[name](out / PNG[name]))
    tabs, head = tables(doc), headline_table(doc)
    md = [f"# Study {name_}", "", doc["description"], ""] + [f"- {f}" for f in facts] + [""]
    page = [f"<h1>Study {html.escape(name_)}</h1><p>{html.escape(doc['description'])}</p><ul>"
            + "".join(f"<li>{html.escape(f)}</li>" for f in facts) + "</ul>"]
    if head:
        md += ["## Headline: No-gRPC img/s over gRPC, per model", ""] + _md(head) + [""]
        page.append("<h2>Headline: No-gRPC img/s over gRPC, per model</h2>" + _html(head))
    for name in an:
        about = doc["about"][name]
        md += [f"## Vector: {name}", "", about + ".", ""]
        page.append(f"<h2>Vector: {html.escape(name)}</h2><p>{html.escape(about)}.</p>")
        if (out / PNG[name]).exists() and any(p.name == PNG[name] for p in written):
            md += [f"![{name}]({PNG[name]})", ""]
            page.append(f'<img src="{PNG[name]}" alt="{html.escape(name)}">')
        for sub, t in tabs.get(name, []):
            md += ([f"### {sub}", ""] if sub else []) + _md(t) + [""]
            page.append((f"<h3>{html.escape(sub)}</h3>" if sub else "") + _html(t))
    md += ["## How to read this", ""] + [f"- {n}" for n in notes]
    page.append("<h2>How to read this</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    written.append(atomic_write(out / "report.md", "\n".join(md) + "\n"))
    written.append(atomic_write(out / "report.html", "<!doctype html><meta charset=utf-8><title>perfsuite study "
                                f"{html.escape(name_)}</title><style>body{{font-family:sans-serif;max-width:80em}}"
                                "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
                                "img{max-width:100%}</style>" + "".join(page)))
    return written


def summary(doc: dict[str, Any], facts: list[str]) -> str:
    """The terminal's view: the facts, the headline and every vector's tables, in columns."""
    def cols(t: Table) -> list[str]:
        head, rows = t
        cells = [list(map(str, head))] + [list(map(str, r)) for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
        return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]

    lines = [f"# {f}" for f in facts]
    head = headline_table(doc)
    if head:
        lines += ["", "## headline: No-gRPC img/s over gRPC"] + cols(head)
    for name, subs in tables(doc).items():
        for sub, t in subs:
            lines += ["", f"## {name}" + (f": {sub}" if sub else "")] + cols(t)
    return "\n".join(lines)

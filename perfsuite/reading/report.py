"""What people read: terminal tables, CSV, and the report (``summary.md`` and a self-contained
``index.html`` with the plots of ``plots.py``).

One of the rooms that write files, through ``formats.atomic_write``. Each benchmark's own table
comes from its record (``perfsuite/bench``); runs are read through ``formats.load_run``. Every
page function takes an optional list of verdicts (from ``regress``), shown regressions first,
so a report of a plain run and of a compared run are the same page with one more table filled.
"""
from __future__ import annotations

import base64
import html
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import bench
from ..store import formats
from ..verdicts import stragglers
from . import verdict_text as vt
from ..records.errors import ConfigError
from ..store.formats import SuiteRun
from ..records.model import Result, Verdict, time_sliced

def result_table(result: Result) -> str:
    """One world's table, as its benchmark's record lays it out, then the world's straggler line
    where one of its cases named a rank (``stragglers``)."""
    late = [line for line in [stragglers.world_line(result.samples)] if line]
    return "\n".join([bench.table(result), *late, *stragglers.link_lines(result.samples)])


def layout_table(result: Result, layout: str) -> str:
    """One world's table in another layout its benchmark offers (``BenchmarkSpec.layouts``,
    e.g. allreduce's "omb"), else as ``result_table``."""
    return bench.layout(result, layout)


def layout_names() -> list[str]:
    """The other layouts some benchmark offers, for ``perfsuite report --print``."""
    return bench.layout_names()


def _world_names(labels: Sequence[str]) -> str:
    """'allreduce[nccl-n2, gpu-ring-n2], tf-epoch[nccl-n2-small-cnn]': world labels with each
    benchmark named once."""
    ids: dict[str, list[str]] = {}
    for label in labels:
        name, bracket, rest = label.partition("[")
        if bracket and rest.endswith("]"):
            ids.setdefault(name, []).append(rest[:-1])
        else:
            ids.setdefault(label, [])
    return ", ".join(f"{b}[{', '.join(w)}]" if w else b for b, w in ids.items())


def skipped_lines(skipped: Iterable[formats.WorldOutcome], prefix: str = "# ") -> list[str]:
    """One line per reason for the worlds skipped, in the order the reasons first came: how many
    worlds and cases, which, and why. Both faces print these (``perfsuite run``'s summary, the
    pytest plugin's section), so a reason shared by five transports is said once, not five times."""
    groups: dict[str, list[formats.WorldOutcome]] = {}
    for o in skipped:
        groups.setdefault(str(o.skipped), []).append(o)
    lines = []
    for why, worlds in groups.items():
        n, cases = len(worlds), sum(len(o.spec.cases) for o in worlds)
        lines.append(f"{prefix}skipped {n} world{'s' * (n != 1)} ({cases} case{'s' * (cases != 1)}) "
                     f"{_world_names([o.world for o in worlds])}: {why}")
    return lines


def run_summary(run: SuiteRun) -> str:
    """Every table, then what was skipped and why (one line per reason), then what failed and
    the tail of its stderr (each failed or interrupted world in full, never grouped)."""
    parts = [result_table(r) for r in run.results]
    for o in run.failures:
        if o.samples():
            parts.append(result_table(Result(o.spec.benchmark, o.spec.transport, o.spec.world_size,
                                              tuple(o.samples()))) + "\n# (partial: world "
                         + ("interrupted)" if getattr(o.failure, "kind", "") == "interrupted" else "failed)"))
    ratios = bench.comparisons(run.samples())
    if ratios:
        parts.append("\n".join(ratios))
    if run.skipped:
        parts.append("\n".join(skipped_lines(run.skipped)))
    for o in run.failures:
        tail = getattr(o.failure, "stderr_tail", "")
        word = "INTERRUPTED" if getattr(o.failure, "kind", "") == "interrupted" else "FAILED"
        msg = f"# {word} {o.failure}"
        if tail:
            msg += "\n" + "\n".join(f"#   | {line}" for line in tail.splitlines()[-8:])
        parts.append(msg)
    # A wrong result's line (which case, which rank) is the gate's, printed once after the tables.
    return "\n\n".join(parts)


def overhead_table(rep: Any) -> str:
    """``perfsuite overhead``: the native and mpi4py loops beside the C program, with deltas."""
    names = list(rep.benchmarks)
    calls = ", ".join(rep.call(b) for b in names)
    lines = [f"# harness overhead: the mpi transport's native loop and mpi4py loop vs the same "
             f"{calls} loop as a C program, world_size={rep.world_size}, {rep.rounds} "
             "interleaved round(s)",
             "# p50 of the slowest rank per iteration, median over rounds; +us and x: median over "
             "rounds of each loop against C in the same round",
             f"#{'size':>11} {'C(us)':>10} {'native(us)':>11} {'mpi4py(us)':>11} {'native+us':>10} "
             f"{'native x':>9} {'mpi4py+us':>10} {'mpi4py x':>9} {'C busbw':>9} {'nat busbw':>10} "
             f"{'busbw x':>8}"]

    def cell(d: dict, key: str, width: int, fmt: str) -> str:
        return f"{format(d[key], fmt):>{width}}" if key in d else f"{'-':>{width}}"

    shown = None
    for r in rep.rows:
        if len(names) > 1 and r.get("benchmark") != shown:  # a heading per collective
            shown = r.get("benchmark")
            lines.append(f"# {shown} ({rep.call(shown)})")
        p, b = r["p50_us"], r["busbw_GBps"]
        delta, ratio = r["delta_us"], r["ratio"]
        bx = {"x": 1 / ratio["native"]} if ratio.get("native") else {}
        lines.append(f"{r['size_bytes']:>12} {cell(p, 'c', 10, '.2f')} {cell(p, 'native', 11, '.2f')} "
                     f"{cell(p, 'python', 11, '.2f')} {cell(delta, 'native', 10, '+.2f')} "
                     f"{cell(ratio, 'native', 9, '.3f')} {cell(delta, 'python', 10, '+.2f')} "
                     f"{cell(ratio, 'python', 9, '.3f')} {cell(b, 'c', 9, '.3f')} "
                     f"{cell(b, 'native', 10, '.3f')} {cell(bx, 'x', 8, '.3f')}")
    for r in rep.rows:
        lo_hi = ", ".join(f"{k} {a:.2f}-{z:.2f}" for k, (a, z) in r["range_us"].items())
        lines.append(f"# {rep.label(r)}{r['size_bytes']} B range over rounds (us): {lo_hi}")
    for what, value, met in rep.targets():
        shown = f"{value:.3f} {'met' if met else 'NOT met'}" if value is not None else "NOT met (not measured)"
        lines.append(f"# target {what}: {shown}")
    if rep.skipped:
        lines.append(f"# SKIPPED C program: {rep.skipped}")
    if rep.native_why:
        lines.append(f"# native loop not used: {rep.native_why}")
    if rep.world_start_s is not None:
        lines.append(f"# world start {rep.world_start_s:.3f} s (target <= 0.5 s with MPICH)")
    for r in rep.rows:
        nat = r["busbw_GBps"].get("native") if r["size_bytes"] == 64 << 20 else None
        if rep.host_copy_GBps and nat:
            lines.append(f"# host memory-copy bandwidth {rep.host_copy_GBps:.2f} GB/s; {rep.label(r)}native "
                         f"busbw at 64MiB {nat:.3f} GB/s = {nat / rep.host_copy_GBps:.2f} of it")
    return "\n".join(lines)


def plain_overhead_table(rep: Any) -> str:
    """``perfsuite overhead --transports torch-gloo``: the harness beside the framework's plain loop."""
    names = list(dict.fromkeys(r.get("benchmark", "allreduce") for r in rep.rows)) or ["allreduce"]
    lines = [f"# harness overhead: {rep.transport}'s kernel loop vs a plain loop of the framework's own "
             f"{', '.join(names)} (kernels/plain/; allreduce in place), float32, world_size={rep.world_size}, "
             f"{rep.rounds} world(s) each",
             "# in each world the loops take turns in short blocks; p50 of the slowest rank per call, median over "
             "worlds; +us: median over paired calls of harness - plain; x: 1 + (+us) / plain p50, and its range "
             "over worlds",
             f"#{'size':>11} {'plain(us)':>11} {'harness(us)':>12} {'+us':>9} {'x':>7} {'x over worlds':>15}"]
    for r in rep.rows:
        p = r["p50_us"]
        lo_hi = f"{r['ratio_range'][0]:.3f}-{r['ratio_range'][1]:.3f}" if r["ratio_range"] else "-"
        diff = f"{r['diff_us']:+.2f}" if r["diff_us"] is not None else "-"
        if len(names) > 1 and r is next(x for x in rep.rows if x.get("benchmark") == r.get("benchmark")):
            lines.append(f"# {r.get('benchmark')}")
        lines.append(f"{r['size_bytes']:>12} {p.get('plain', float('nan')):>11.2f} "
                     f"{p.get('harness', float('nan')):>12.2f} {diff:>9} "
                     f"{(format(r['ratio'], '.3f') if r['ratio'] is not None else '-'):>7} {lo_hi:>15}")
    for r in rep.rows:
        lo_hi = ", ".join(f"{k} {a:.2f}-{z:.2f}" for k, (a, z) in r["range_us"].items())
        per_world = ", ".join(f"{x:.3f}" for x in r["world_ratios"])
        lines.append(f"# {r.get('benchmark', 'allreduce') + ' ' if len(names) > 1 else ''}{r['size_bytes']} B: "
                     f"p50 range over worlds (us): {lo_hi}; x per world: {per_world} "
                     f"({r['pairs']} paired calls)")
    for what, value, met in rep.targets():
        shown = f"{value:.3f} {'met' if met else 'NOT met'}" if value is not None else "NOT met (not measured)"
        lines.append(f"# target {what}: {shown}")
    return "\n".join(lines)


# --- exports: CSV ------------------------------------------------------------------------------

CSV_FIXED = ("source", "case", "benchmark", "transport", "world_size", "size_bytes", "dtype",
             "model", "batch", "variant", "valid", "partial")


def csv_text(runs: "Sequence[ReportRun]") -> str:
    """One row per measured case; one column per metric, headed 'name (unit)'."""
    import csv
    import io

    rows = [(run, r, s) for run in runs for r in run.results for s in r.samples]
    metrics: dict[str, str] = {}
    for _, _, s in rows:
        for name, m in s.metrics.items():
            metrics.setdefault(name, m.unit)
    names = sorted(metrics)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_FIXED, *(f"{n} ({metrics[n]})" for n in names)])
    for run, r, s in rows:
        c = s.case
        w.writerow([run.source, c.name, c.benchmark, c.transport, c.world_size, c.size_bytes or "",
                    c.dtype, c.model or "", c.batch or "", c.variant, s.valid, bool(r.error),
                    *(repr(s.metrics[n].value) if n in s.metrics else "" for n in names)])
    return buf.getvalue()


# --- reading runs back -------------------------------------------------------------------------

@dataclass
class ReportRun:
    """One results file (or the run just made), as the report reads it: complete and partial
    worlds as Results (a partial one has ``error`` set), failures and skips as their records."""

    source: str
    tag: str = ""  # tells runs apart in plots when a report has several
    created: str = ""
    fingerprint: dict = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)

    @classmethod
    def from_suite_run(cls, run: SuiteRun, source: str = "this run") -> "ReportRun":
        results = list(run.results) + [
            Result(o.spec.benchmark, o.spec.transport, o.spec.world_size, tuple(o.samples()),
                   error=f"{o.world}: world failed; partial") for o in run.failures if o.samples()]
        return cls(source=source, created=run.created, fingerprint=run.fingerprint, results=results,
                   failures=[formats.failure_dict(o) for o in run.failures],
                   skipped=[formats.skip_dict(o) for o in run.skipped])


def load_runs(paths: Sequence[str | os.PathLike]) -> list[ReportRun]:
    """Read results files (``perfsuite run --json``); several get tags to tell them apart."""
    return tag_runs([ReportRun.from_suite_run(formats.load_run(p), str(p)) for p in paths])


def tag_runs(runs: list[ReportRun]) -> list[ReportRun]:
    if len(runs) > 1:
        stems = [Path(r.source).stem for r in runs]
        for i, r in enumerate(runs):
            r.tag = stems[i] if stems.count(stems[i]) == 1 else f"{stems[i]}#{i + 1}"
    return runs


# --- verdicts ----------------------------------------------------------------------------------

def verdict_rows(verdicts: Sequence[Verdict | dict] | None) -> list[dict[str, Any]]:
    """Verdicts as the report's rows (``verdict_text.rows``: the one place they become words)."""
    return vt.rows(verdicts)


def _num(x: Any, fmt: str = ".4g") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else ("" if x is None else str(x))


# --- the report: summary.md and index.html -----------------------------------------------------

def _result_rows(r: Result) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Header and rows of one world's table: its benchmark's (``BenchmarkSpec.report_rows``),
    else one column per metric."""
    own = bench.report_rows(r)
    if own is not None:
        return own
    names = sorted({n for s in r.samples for n in s.metrics})
    units = {n: m.unit for s in r.samples for n, m in s.metrics.items()}
    return (("case", *(f"{n} ({units[n]})" if units[n] else n for n in names), "valid"),
            [(s.case.id, *(_num(s.metrics[n].value) if n in s.metrics else "" for n in names),
              "OK" if s.valid else "WRONG") for s in r.samples])


def _heading(r: Result, tag: str) -> str:
    bits = [f"{r.benchmark} · {r.transport} · {r.world_size} ranks"]
    if time_sliced(r.extra or {}):
        bits.append(time_sliced(r.extra or {}))
    if r.world_start_s is not None:
        bits.append(f"world start {r.world_start_s:.2f} s")
    for key, value in sorted((r.extra or {}).items()):
        if key.endswith("_copy_GBps") and isinstance(value, (int, float)):
            bits.append(f"{key[:-len('_copy_GBps')].replace('_', ' ')} copy {value:.2f} GB/s")
    if tag:
        bits.append(tag)
    if r.error:
        bits.append("PARTIAL: " + r.error)
    return " · ".join(bits)


def _machine(run: ReportRun) -> str:
    fp = dict(run.fingerprint)
    for r in run.results:  # rank 0's fingerprint knows the MPI library
        fp = {**r.fingerprint, **fp}
    gpus = fp.get("gpus") or []
    gpu = ", ".join(str(g.get("name", g)) if isinstance(g, dict) else str(g) for g in gpus) or "no GPU"
    parts = [fp.get("host"), fp.get("cpu_model") and f"{fp['cpu_model']} x{fp.get('cpu_count')}",
             gpu, fp.get("mpi_library"), fp.get("python") and f"Python {fp['python']}",
             fp.get("perfsuite") and f"perfsuite {fp['perfsuite']}"]
    return " · ".join(str(p) for p in parts if p)


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731
    return (["| " + " | ".join(cell(h) for h in head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows])


def _verdict_table_rows(rows: list[dict]) -> list[tuple[str, ...]]:
    return [vt.cells(r) for r in rows]


VERDICT_HEAD = vt.HEAD
NO_VERDICTS = "No baseline was compared, so there are no verdicts."


def summary_markdown(runs: Sequence[ReportRun], plots: Sequence[Any] = (),
                     verdicts: Sequence[Any] | None = None, asv_url: str | None = None) -> str:
    """The Markdown summary (also fit for $GITHUB_STEP_SUMMARY): verdicts, plots, tables."""
    out = ["# perfsuite report", ""]
    for run in runs:
        out.append(f"- `{run.source}` {run.created} · {_machine(run)}")
    rows = verdict_rows(verdicts)
    regressions = sum(r["css"] == "regression" for r in rows)
    out += ["", "## Verdicts", ""]
    if rows:
        out += [f"**{regressions} failing verdict(s)** (regressions, invalid results) of {len(rows)}.", ""]
        out += _md_table(VERDICT_HEAD, _verdict_table_rows(rows))
    else:
        out.append(NO_VERDICTS)
    if asv_url:
        out += ["", f"History: [asv benchmarks page]({asv_url})"]
    out += ["", "## Plots", ""]
    for p in plots:
        out.append(f"![{p.title}]({p.file.name})" if p.file else f"- {p.title}: not drawn, {p.skipped}")
    out += ["", "## Results"]
    for run in runs:
        for r in run.results:
            head, body = _result_rows(r)
            out += ["", f"### {_heading(r, run.tag)}", "", *_md_table(head, body)]
            late = [line for line in [stragglers.world_line(r.samples), *stragglers.link_lines(r.samples)] if line]
            out += ["", *(f"**{line.lstrip('# ')}**" for line in late)] if late else []
    problems = _problems(runs)
    if problems:
        out += ["", "## Skipped and failed worlds", ""]
        for kind, world, text, tail, logs in problems:
            out.append(f"- **{kind}** `{world}`: {text}")
            if tail:
                out += ["", "  ```", *("  " + line for line in tail.splitlines()), "  ```"]
            if logs:
                out.append(f"  (logs of {', '.join(logs)}: in index.html)")
    return "\n".join(out) + "\n"


def _problems(runs: Sequence[ReportRun]) -> list[tuple[str, str, str, str, dict[str, str]]]:
    """(kind, world, message, stderr tail) of every skipped and failed world."""
    out = []
    for run in runs:
        for s in run.skipped:
            out.append(("skipped", s.get("world", "?"), s.get("reason", ""), "", {}))
        for f in run.failures:
            out.append(("FAILED", f.get("world", "?"), f.get("message", ""), f.get("stderr_tail") or "",
                        f.get("logs") or {}))
        bad = [s.case.name for r in run.results for s in r.samples if not s.valid]
        if bad:
            out.append(("FAILED", "validation", "wrong results in " + ", ".join(bad), "", {}))  # any check's
    return out


_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:nth-child(2),td:first-child,td:last-child{text-align:left}
tr.regression td{background:#fde2e2;color:#b00020;font-weight:600}tr.improvement td{color:#0a6b2d}
tr.xfail td{background:#fff4d6;color:#8a5a00}tr.missing td,tr.new td{color:#555}
figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}figcaption,.note{color:#666}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto}.bad{color:#b00020}"""


def _h(x: Any) -> str:
    return html.escape(str(x))


def _html_table(head: Sequence[str], rows: Sequence[Sequence[str]], classes: Sequence[str] = (),
                table_id: str = "") -> str:
    tid = f' id="{table_id}"' if table_id else ""
    body = "".join(f'<tr class="{_h(classes[i]) if i < len(classes) else ""}">'
                   + "".join(f"<td>{_h(x)}</td>" for x in row) + "</tr>" for i, row in enumerate(rows))
    return (f"<table{tid}><thead><tr>" + "".join(f"<th>{_h(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{body}</tbody></table>")


def html_page(runs: Sequence[ReportRun], plots: Sequence[Any] = (),
              verdicts: Sequence[Any] | None = None, asv_url: str | None = None) -> str:
    """One self-contained page: the PNGs are embedded as data URIs, so it can be mailed or
    uploaded as a single CI artifact and still show every plot."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>perfsuite report</title>"
             f"<style>{_CSS}</style></head><body><h1>perfsuite report</h1><ul>"]
    parts += [f"<li><code>{_h(r.source)}</code> {_h(r.created)} · {_h(_machine(r))}</li>" for r in runs]
    parts.append("</ul><h2>Verdicts</h2>")
    rows = verdict_rows(verdicts)
    if rows:
        n = sum(r["css"] == "regression" for r in rows)
        parts.append(f"<p class='{'bad' if n else 'note'}'><b>{n} failing verdict(s)</b> (regressions, invalid results) of {len(rows)}.</p>")
    parts.append(_html_table(VERDICT_HEAD, _verdict_table_rows(rows), [r["css"] for r in rows],
                             table_id="verdicts"))
    if not rows:
        parts.append(f"<p class='note'>{_h(NO_VERDICTS)}</p>")
    if asv_url:
        parts.append(f"<p>History: <a id='asv-link' href='{_h(asv_url)}'>asv benchmarks page</a></p>")
    parts.append("<h2>Plots</h2>")
    for p in plots:
        if p.file:
            data = base64.b64encode(Path(p.file).read_bytes()).decode("ascii")
            parts.append(f"<figure><img class='plot' alt='{_h(p.title)}' data-file='{_h(p.file.name)}' "
                         f"src='data:image/png;base64,{data}'><figcaption>{_h(p.caption)}</figcaption></figure>")
        else:
            parts.append(f"<p class='note skipped-plot'>{_h(p.title)}: not drawn, {_h(p.skipped)}.</p>")
    parts.append("<h2>Results</h2>")
    for run in runs:
        for r in run.results:
            head, body = _result_rows(r)
            parts.append(f"<h3>{_h(_heading(r, run.tag))}</h3>" + _html_table(
                head, body, ["" if b[-1] == "OK" else "regression" for b in body]))
            for line in [stragglers.world_line(r.samples), *stragglers.link_lines(r.samples)]:
                if line:
                    parts.append(f"<p class='bad straggler'>{_h(line.lstrip('# '))}</p>")
    problems = _problems(runs)
    if problems:
        parts.append("<h2>Skipped and failed worlds</h2><ul>")
        for kind, world, text, tail, logs in problems:
            tail_html = f"<details open><summary>stderr tail</summary><pre>{_h(tail)}</pre></details>" if tail else ""
            # Every rank's log, folded: the failed rank's tail above usually says enough.
            logs_html = "".join(f"<details class='rank-log'><summary>{_h(source)} log</summary>"
                                f"<pre>{_h(text or '(empty)')}</pre></details>" for source, text in logs.items())
            parts.append(f"<li class='{'bad' if kind == 'FAILED' else 'note'}'><b>{_h(kind)}</b> "
                         f"<code>{_h(world)}</code>: {_h(text)}{tail_html}{logs_html}</li>")
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def text_tables(runs: Sequence[ReportRun]) -> str:
    """Every world's table, then the same world in each other layout its benchmark offers
    (allreduce: OSU's)."""
    out = []
    for run in runs:
        for r in run.results:
            out.append(result_table(r) + (f"\n# ({r.error})" if r.error else ""))
            if r.samples:
                out += [layout(r) for layout in bench.layouts(r)]
    return "\n\n".join(out) + "\n"


def write_stall_png(path: str | os.PathLike, breakdown: Any, title: str) -> Path:
    """The stacked bar of one stall breakdown (``perfsuite stalls``): compute + four stalls."""
    from .plots import breakdown_plot

    return breakdown_plot([(part, ms) for part, ms, _share, _note in breakdown.rows()], title, path).file


def write_report(out_dir: str | os.PathLike, runs: Sequence[ReportRun],
                 verdicts: Sequence[Any] | None = None, asv_url: str | None = None) -> dict[str, Any]:
    """Write index.html, summary.md, results.csv, tables.txt and the PNGs into ``out_dir``.

    Returns what was written: file name -> path, and 'plots' -> the Plot records (with the
    reason of each plot that was not drawn).
    """
    from .plots import make_plots  # matplotlib costs a second to import; only reports need it

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"report folder {str(out)!r} cannot be created: {exc.strerror}") from None
    plots = make_plots([(run.tag, r) for run in runs for r in run.results], out)
    texts = {"index.html": html_page(runs, plots, verdicts, asv_url),
             "summary.md": summary_markdown(runs, plots, verdicts, asv_url),
             "results.csv": csv_text(runs), "tables.txt": text_tables(runs)}
    written: dict[str, Any] = {}
    for name, text in texts.items():
        written[name] = formats.atomic_write(out / name, text)
    written["plots"] = plots
    return written

"""The report people look at: files written from a real small run, the page rendered by a real
browser (every plot loaded, verdict table present, regressions first and red), and the exports.
"""
from __future__ import annotations

import csv
import io
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import ALLREDUCE_BENCH

from perfsuite.faces import cli
from perfsuite.reading import plots, report
from perfsuite.records.errors import FormatError
from perfsuite.store.formats import RUN as RUN_FORMAT
from perfsuite.records.model import Case, Metric, Result, Sample, Tolerance, Verdict

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
QUICK = ["--transports", "mpi,ring", "--sizes", "4,1MiB", "--world-sizes", "2",
         "--iters", "20", "--warmup", "2"]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


@pytest.fixture(scope="module")
def run_json(tmp_path_factory) -> Path:
    """One real run of two transports, two sizes (seconds), shared by the tests of this module."""
    path = tmp_path_factory.mktemp("run") / "r.json"
    rc = cli.main(["run", *QUICK, "--json", str(path)])
    assert rc == 0 and path.exists()
    return path


# --- from a real run ----------------------------------------------------------------------------

@pytest.mark.world
def test_report_command_writes_page_summary_and_plots(run_json, tmp_path, capsys):
    out = tmp_path / "report"
    assert cli.main(["report", str(run_json), "--out", str(out), "--asv-url", "https://ci.example/asv/"]) == 0
    said = capsys.readouterr().out
    assert "latency.png, busbw.png, ranks.png" in said and "not drawn: Scaling efficiency" in said
    for name in ("index.html", "summary.md", "results.csv", "tables.txt", "latency.png", "busbw.png", "ranks.png"):
        assert (out / name).stat().st_size > 0, name
    for name in ("latency.png", "busbw.png", "ranks.png"):
        w, h = png_size(out / name)
        assert w > 300 and h > 200
    # Nothing to draw for TF scaling, img/s or stalls in an allreduce run: no file, a reason.
    assert not (out / "scaling.png").exists() and not (out / "stalls.png").exists()
    md = (out / "summary.md").read_text()
    assert "## Verdicts" in md and report.NO_VERDICTS in md
    assert "![Allreduce latency vs message size](latency.png)" in md
    assert "Scaling efficiency vs world size: not drawn, no result carries a scaling_efficiency" in md
    assert "(https://ci.example/asv/)" in md
    for t in ("mpi", "ring"):
        assert f"### allreduce · {t} · 2 ranks" in md
    page = (out / "index.html").read_text()
    assert page.count("<img class='plot'") == 3 and 'id="verdicts"' in page  # latency, busbw, ranks
    assert "src='data:image/png;base64," in page  # self-contained: one file shows every plot
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    assert {r["case"] for r in rows} == {f"allreduce[{t}-n2-{s}]" for t in ("mpi", "ring") for s in ("4B", "1MiB")}
    stored = json.loads(run_json.read_text())
    first = stored["results"][0]["samples"][0]
    row = next(r for r in rows if r["case"] == Case.from_dict(first["case"]).name)
    assert float(row["latency_us (us)"]) == first["metrics"]["latency_us"]["value"]
    tables = (out / "tables.txt").read_text()
    assert "# OSU MPI Allreduce Latency Test" in tables and "busbw(GB/s)" in tables


def _chromium() -> str | None:
    return next((shutil.which(c) for c in CHROMIUMS if shutil.which(c)), None)


# Appended to a copy of the page: reports each image's natural width into the DOM, which
# --dump-dom then prints. A deliberately broken image proves the check can see a failure.
PROBE = """
<img id="probe-broken" src="data:image/png;base64,bm90IGEgcG5n">
<pre id="probe"></pre>
<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.querySelectorAll('img'));
  const t = document.getElementById('verdicts');
  const first = t && t.tBodies[0].rows[0];
  document.getElementById('probe').textContent = JSON.stringify({
    images: imgs.map(i => ({id: i.id, cls: i.className, w: i.naturalWidth, done: i.complete})),
    verdicts: !!t, first_class: first ? first.className : null,
    first_color: first ? getComputedStyle(first.cells[0]).color : null});
});
</script>
"""


def render(page: Path, tmp_path: Path) -> dict:
    """Load ``page`` in headless Chromium and return what the probe saw."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium)")
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
            "--dump-dom", probed.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    m = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert m and m.group(1), f"the probe did not run (rc {proc.returncode}): {proc.stderr[-800:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.world
def test_page_renders_every_plot_and_red_regressions_first(run_json, tmp_path):
    runs = report.load_runs([run_json])
    verdicts = [  # shaped like regress' verdicts; the regression is listed last on purpose
        {"case": "allreduce[mpi-n2-4B]", "metric": "latency_us", "status": "same", "value": 12.0,
         "baseline": 12.1, "change": -0.008},
        {"case": "allreduce[ring-n2-1MiB]", "metric": "busbw_GBps", "status": "regression",
         "value": 1.0, "baseline": 1.4, "change": -0.29, "p_value": 0.001}]
    out = tmp_path / "report"
    written = report.write_report(out, runs, verdicts=verdicts)
    seen = render(written["index.html"], tmp_path)
    plots_seen = [i for i in seen["images"] if i["cls"] == "plot"]
    drawn = [p for p in written["plots"] if p.file]
    assert len(plots_seen) == len(drawn) == 3  # latency, busbw, ranks
    assert all(i["done"] and i["w"] > 0 for i in plots_seen), seen
    broken = next(i for i in seen["images"] if i["id"] == "probe-broken")
    assert broken["w"] == 0  # the check tells a broken image from a loaded one
    assert seen["verdicts"] and seen["first_class"] == "regression"
    assert seen["first_color"] == "rgb(176, 0, 32)"  # #b00020: regressions are red


@pytest.mark.world
def test_pytest_perf_report_writes_the_same_report(pytester, no_leftover_ranks):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    out = pytester.path / "rep"
    r = pytester.runpytest_subprocess("--benchmark-only", "--perf-transports", "mpi", "--perf-sizes", "4,64KiB",
                                      "--perf-iters", "20", "--perf-warmup", "2", "--perf-report", str(out),
                                      "-p", "no:cacheprovider")
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines([f"# results written to {out}/results.json", f"# report written to {out}/index.html"])
    for name in ("index.html", "summary.md", "results.csv", "latency.png", "busbw.png", "results.json"):
        assert (out / name).exists(), name
    assert report.load_runs([out / "results.json"])[0].results[0].transport == "mpi"
    # the plugin's verdicts (no baselines in this folder: every metric is new) fill the table
    assert "| new | allreduce[mpi-n2-4B] | latency\\|busbw |" in (out / "summary.md").read_text()


@pytest.mark.world
def test_an_injected_slowdown_shows_as_red_regressions_first(slowed_runs, tmp_path, capsys):
    """Baselines from a fast run, a second run made 21x slower by the fault switch (beyond the x4
    a one-session baseline allows for this machine's states): the report of both runs against
    the baselines lists regressions first and --compare exits 1. The two runs are
    conftest's ``slowed_runs`` (8 rounds a side of two worlds), the ones tests/test_exit_status.py
    judges: the report's plumbing is under test here, not the gate's rules."""
    from perfsuite.store import baselines

    fast, slow = slowed_runs / "fast.json", slowed_runs / "slow.json"
    runs = report.load_runs([fast])
    baselines.update(tmp_path / "b", "test-sys", [s for r in runs[0].results for s in r.samples])
    out = tmp_path / "report"
    # The report's plumbing, not the machine-mode rule: the two runs may fall in different modes.
    rc = cli.main(["report", str(fast), str(slow), "--out", str(out), "--compare", "--baseline-dir",
                   str(tmp_path / "b"), "--system", "test-sys", "--max-canary-shift", "off"])
    said = capsys.readouterr().out
    assert rc == cli.EXIT_REGRESSION, said
    assert re.search(r"# 4 verdicts against .*: [12] failing", said), said  # one per case of each run
    md = (out / "summary.md").read_text()
    table = md[md.index("## Verdicts"):md.index("## Plots")]
    statuses = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and "status" not in line]
    # The fast run's verdicts come first in the files' order, unknown (a one-session baseline
    # decides nothing within x4, not even the run it was made from): the table must move the
    # slow run's regressions above them.
    assert "unknown" in statuses, statuses
    assert statuses[0] == "REGRESSION" and statuses == sorted(statuses, key=lambda x: x != "REGRESSION")
    assert "class=\"regression\"" in (out / "index.html").read_text()


@pytest.mark.world
def test_a_failed_world_shows_its_partial_results_and_stderr_tail(tmp_path, monkeypatch, capsys,
                                                                  no_leftover_ranks):
    path = tmp_path / "f.json"
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "raise@1@1048576")  # rank 1 raises at 1 MiB
    assert cli.main(["run", "--transports", "ring", "--sizes", "4,1MiB", "--iters", "20",
                     "--warmup", "2", "--json", str(path)]) == cli.EXIT_WORLD
    monkeypatch.delenv("PERFSUITE_TEST_FAULT")
    said = capsys.readouterr()
    assert "# [1/1] allreduce[ring-n2]: FAILED after" in said.err  # the progress line, no bar here
    assert "# FAILED allreduce[ring-n2]: rank 1 raised" in said.out  # and the summary's, with the results
    out = tmp_path / "report"
    assert cli.main(["report", str(path), "--out", str(out)]) == 0
    md = (out / "summary.md").read_text()
    assert "PARTIAL: allreduce[ring-n2]: world failed; partial" in md and "| 4B |" in md
    assert "- **FAILED** `allreduce[ring-n2]`: allreduce[ring-n2]: rank 1 raised" in md
    assert "InjectedFault: injected fault on rank 1" in md  # the rank's own stderr, in the report
    page = (out / "index.html").read_text()
    assert "<details open><summary>stderr tail</summary>" in page and "PARTIAL: allreduce[ring-n2]" in page
    assert "<summary>rank 0 log</summary>" in page and "<summary>rank 1 log</summary>" in page


# --- pure: synthetic results, no MPI -------------------------------------------------------------

def _sample(case: Case, **metrics: tuple[float, str]) -> Sample:
    return Sample(case, {n: Metric(n, v, u, higher_is_better=u == "img/s") for n, (v, u) in metrics.items()})


def tf_results() -> list[Result]:
    """Results shaped like TF epoch + stall kernels, with numbers made up for drawing only."""
    out = []
    for n, eff in ((1, 1.0), (2, 0.93), (4, 0.81)):
        case = Case("tf_epoch", "mpi", n, model="resnet20", batch=64)
        out.append(Result("tf_epoch", "mpi", n, (_sample(case, img_per_s=(900.0 * n * eff, "img/s"),
                                                          scaling_efficiency=(eff, "")),)))
    case = Case("stalls", "mpi", 2, model="resnet20")
    out.append(Result("stalls", "mpi", 2, (_sample(case, compute_ms=(30.0, "ms"), stall_io_ms=(10.0, "ms"),
                                                   stall_network_ms=(5.0, "ms")),)))
    return out


def test_every_plot_draws_when_its_metrics_exist(tmp_path):
    allreduce = Result("allreduce", "mpi", 2, tuple(
        Sample(Case("allreduce", "mpi", 2, size_bytes=s),
               {"latency_us": Metric("latency_us", 10.0 + s / 1e3, "us", False),
                "busbw_GBps": Metric("busbw_GBps", s / 1e6, "GB/s", True)}, True, (),
               {"nodes": ["a", "b"], "rank_ratio": [1.3, 0.77], "reordered_blocks": [[0.25, -0.25]] * 4,
                "straggler": {"rank": 0}}) for s in (4, 1 << 20)),
        extra={"host_copy_GBps": 5.0, "device_copy_GBps": 900.0})
    drawn = plots.make_plots([("", r) for r in [allreduce, *tf_results()]], tmp_path)
    assert [p.name for p in drawn] == ["latency", "busbw", "scaling", "throughput", "stalls", "ranks"]
    assert all(p.file is not None and p.skipped is None for p in drawn), drawn
    for p in drawn:
        assert png_size(p.file)[0] > 300


def test_plots_without_their_metrics_say_why(tmp_path):
    drawn = {p.name: p for p in plots.make_plots([("", r) for r in tf_results()[:1]], tmp_path)}
    assert drawn["latency"].skipped == "no message-size results in the input"
    assert "stall_*" in drawn["stalls"].skipped and drawn["stalls"].file is None
    assert drawn["throughput"].file is not None  # img/s is there, the allreduce is not
    assert not (tmp_path / "latency.png").exists()


def test_ceiling_lines_come_from_every_copy_bandwidth(tmp_path):
    r = Result("allreduce", "nccl", 2, (_sample(Case("allreduce", "nccl", 2, size_bytes=4),
                                                latency_us=(5.0, "us"), busbw_GBps=(0.1, "GB/s")),),
               extra={"host_copy_GBps": 5.0, "device_copy_GBps": 900.0})
    p = plots.busbw_plot([("", r)], tmp_path / "b.png")
    assert "measured memory-copy ceiling" in p.caption
    r2 = Result("allreduce", "mpi", 2, r.samples)
    assert "no measured copy ceiling" in plots.busbw_plot([("", r2)], tmp_path / "c.png").caption


def test_a_one_rank_world_has_no_busbw_to_draw(tmp_path):
    """busbw is 0 at world size 1 (nccl-tests' factor): the plot says so instead of a log axis
    over nothing raising ValueError (``perfsuite report`` of a --world-sizes 1 run crashed)."""
    cases = [Case("allreduce", "mpi", 1, size_bytes=s) for s in (4, 1024)]
    one = Result("allreduce", "mpi", 1, tuple(_sample(c, latency_us=(1.0, "us"), busbw_GBps=(0.0, "GB/s"))
                                           for c in cases))
    p = plots.busbw_plot([("", one)], tmp_path / "b.png")
    assert p.file is None and "busbw is 0 in every result" in p.skipped
    two = Result("allreduce", "mpi", 2, (_sample(Case("allreduce", "mpi", 2, size_bytes=4),
                                                 latency_us=(1.0, "us"), busbw_GBps=(0.1, "GB/s")),))
    assert plots.busbw_plot([("", one), ("", two)], tmp_path / "c.png").file is not None


def test_verdict_rows_put_regressions_first():
    tol = Tolerance(-0.03, 0.03)

    def verdict(case, metric, status, unit, hib, value, ref, change, low, high, p, **kw):
        return Verdict(case, metric, status, unit, hib, value=value, baseline=ref, change=change, low=low,
                       high=high, tolerance=tol, p_value=p, test="stored", rounds=6, **kw)

    verdicts = [
        verdict("allreduce[mpi-n2-4B]", "latency_us", "same", "us", False, 12.0, 12.1, -0.008, -0.02, 0.01, 0.4),
        verdict("allreduce[ring-n2-1MiB]", "busbw_GBps", "regression", "GB/s", True, 1.0, 1.4, -0.286, -0.3,
                -0.25, 0.001, xfail="known: ring on 2 cores"),
        verdict("allreduce[mpi-n2-1MiB]", "busbw_GBps", "improvement", "GB/s", True, 2.0, 1.5, 0.33, 0.3, 0.36,
                0.002),
        verdict("allreduce[mpi-n2-64KiB]", "busbw_GBps", "unknown", "GB/s", True, 1.9, 2.0, -0.05, -1.0,
                float("inf"), 1.0),
        verdict("allreduce[ring-n2-4B]", "latency_us", "regression", "us", False, 90.0, 60.0, 0.5, 0.45, 0.55,
                0.001),
    ]
    rows = report.verdict_rows(verdicts)
    assert [(r["status"], r["css"]) for r in rows] == [
        ("regression", "regression"), ("regression", "xfail"), ("improvement", "improvement"),
        ("unknown", "unknown"), ("same", "same")]
    assert rows[0]["case"] == "allreduce[ring-n2-4B]" and rows[0]["tolerance"] == "+-3%"
    assert rows[1]["note"] == "expected failure: known: ring on 2 cores"
    assert report.verdict_rows([v.to_dict() for v in verdicts]) == rows  # stored verdicts read the same
    json.dumps([v.to_dict() for v in verdicts], allow_nan=False)  # an unbounded interval stores as null
    md = report.summary_markdown([], verdicts=verdicts)
    assert "**1 failing verdict(s)** (regressions, invalid results) of 5." in md
    assert "| REGRESSION | allreduce[ring-n2-4B] | latency | 90 us | 60 | +50.0% | +-3% | [+45.0%, +55.0%] | 6 |" in md
    # the one vocabulary: an open side is "unbounded" here as in the terminal table and the lines
    assert "[-100.0%, unbounded]" in md and "+inf" not in md
    assert md.index("allreduce[ring-n2-4B]") < md.index("allreduce[mpi-n2-4B]")


def test_csv_and_omb_exports_of_synthetic_runs():
    run = report.ReportRun("r.json", results=tf_results())
    rows = list(csv.DictReader(io.StringIO(report.csv_text([run]))))
    assert len(rows) == 4 and rows[0]["img_per_s (img/s)"] == repr(900.0)
    assert rows[3]["stall_io_ms (ms)"] == repr(10.0) and rows[3]["img_per_s (img/s)"] == ""


def test_old_or_foreign_results_files_say_what_to_do(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": RUN_FORMAT, "version": 0, "results": []}))
    with pytest.raises(FormatError, match="version 0 is not supported.*re-run the suite"):
        report.load_runs([old])
    assert cli.main(["report", str(tmp_path / "missing.json"), "--out", str(tmp_path / "o")]) == cli.EXIT_USAGE
    assert cli.main(["report", str(old), "--print", "xml"]) == cli.EXIT_USAGE


def test_several_runs_get_tags_that_tell_them_apart(tmp_path):
    data = {"format": RUN_FORMAT, "version": 1, "results": [r.to_dict() for r in tf_results()]}
    paths = []
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        paths.append(tmp_path / d / "r.json")
        paths[-1].write_text(json.dumps(data))
    paths.append(tmp_path / "nightly.json")
    paths[-1].write_text(json.dumps(data))
    assert [r.tag for r in report.load_runs(paths)] == ["r#1", "r#2", "nightly"]
    assert report.load_runs(paths[:1])[0].tag == ""


def test_stall_parts_read_compute_first_then_stalls():
    assert plots._part_label("stall_io_ms") == "io stall" and plots._part_label("compute_ms") == "compute"
    assert plots._part_label("stall_network_s") == "network stall"


# --- perfsuite overhead: the targets decide the exit status ------------------------------------

def _overhead_report(native_4b_us: float | None, native_why: str | None = None):
    """A report as experiments.overhead builds it, C against native in the same rounds: 4 B
    native - C = ``native_4b_us`` (None: no native column), 1 MiB and 64 MiB exactly as fast."""
    from perfsuite.experiments.overhead import OverheadReport

    rows = []
    for size, c_us in ((4, 1.0), (1 << 20, 300.0), (64 << 20, 40_000.0)):
        native = {} if native_4b_us is None else {"native": c_us + (native_4b_us if size == 4 else 0.0)}
        p50 = {"c": c_us, "python": c_us * 1.5, **native}
        rows.append({"size_bytes": size, "p50_us": p50, "range_us": {k: (v, v) for k, v in p50.items()},
                     "busbw_GBps": {k: size / v / 1e3 for k, v in p50.items()},
                     "delta_us": {k: v - c_us for k, v in p50.items() if k != "c"},
                     "ratio": {k: v / c_us for k, v in p50.items() if k != "c"}})
    return OverheadReport(2, 1, rows, native_why=native_why)


@pytest.mark.parametrize("native_4b_us, native_why, rc, says", [
    (0.1, None, 0, ["4 B native - C <= +0.2 us: 0.100 met", "1 MiB native / C <= 1.02: 1.000 met",
                    "64 MiB busbw native / C >= 0.98: 1.000 met"]),
    (0.5, None, 1, ["4 B native - C <= +0.2 us: 0.500 NOT met", "1 MiB native / C <= 1.02: 1.000 met"]),
    (None, "no mpicc", 4, ["4 B native - C <= +0.2 us: NOT met (not measured)",
                           "64 MiB busbw native / C >= 0.98: NOT met (not measured)"]),
])
def test_overhead_exits_1_when_a_printed_target_is_not_met(monkeypatch, capsys, native_4b_us, native_why,
                                                           rc, says):
    """A target missed is exit 1 (the command's claim is that the harness meets them); one not
    measured because the native loop could not run is not met either, but is no measurement of
    performance: exit 4, as a failed world. All met is 0."""
    from perfsuite.experiments import overhead

    monkeypatch.setattr(overhead, "overhead", lambda *a, **kw: _overhead_report(native_4b_us, native_why))
    assert cli.main(["overhead"]) == rc
    out = capsys.readouterr().out
    targets = [line for line in out.splitlines() if line.startswith("# target ")]
    assert len(targets) == 3 and all(f"# target {s}" in targets for s in says), out
    # not measured: 4, before a missed one (1); all met: 0
    assert rc == (4 if any("not measured" in t for t in targets) else 1 if any("NOT met" in t for t in targets)
                  else 0)


def test_overhead_prints_each_collective_asked_for_with_its_targets(monkeypatch, capsys):
    """--benchmarks reaches the experiment with the root; the table heads each collective's rows
    with its MPI call, and its targets and ranges name the collective; one missed target is 1."""
    from perfsuite.experiments import overhead

    asked = {}

    def fake(*a, benchmarks=("allreduce",), root=0, **kw):
        asked.update(benchmarks=benchmarks, root=root)
        rep = _overhead_report(0.1)
        slow = _overhead_report(0.5)
        rep.rows = ([{"benchmark": "all_gather", **r} for r in rep.rows]
                    + [{"benchmark": "broadcast", **r} for r in slow.rows])
        rep.benchmarks = tuple(benchmarks)
        return rep

    monkeypatch.setattr(overhead, "overhead", fake)
    assert cli.main(["overhead", "--benchmarks", "all_gather,broadcast", "--root", "1"]) == 1
    assert asked == {"benchmarks": ("all_gather", "broadcast"), "root": 1}
    out = capsys.readouterr().out
    assert "MPI_Allgather, MPI_Bcast loop as a C program" in out, out
    lines = out.splitlines()
    heads = [i for i, line in enumerate(lines) if line in ("# all_gather (MPI_Allgather)", "# broadcast (MPI_Bcast)")]
    assert len(heads) == 2, out
    # each heading is followed by its three sizes' rows
    assert [lines[i].split()[0] for i in range(heads[0] + 1, heads[0] + 4)] == ["4", "1048576", "67108864"], out
    assert "# target all_gather 4 B native - C <= +0.2 us: 0.100 met" in lines, out
    assert "# target broadcast 4 B native - C <= +0.2 us: 0.500 NOT met" in lines, out
    assert "# broadcast 4 B range over rounds (us): c 1.00-1.00, python 1.50-1.50, native 1.50-1.50" in lines, out
    # a transport with nothing to compare against, or an unknown name, is bad input (2)
    assert cli.main(["overhead", "--transports", "ring", "--benchmarks", "alltoall"]) == 2
    assert cli.main(["overhead", "--benchmarks", "allgather"]) == 2
    assert "benchmark 'allgather' is unknown" in capsys.readouterr().err

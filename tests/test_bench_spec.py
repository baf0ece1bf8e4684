"""What differs per benchmark lives in its record (``BenchmarkSpec``): the generic rooms (report,
plots, the report command, regress) hold no branch on a benchmark's name, a new benchmark's
report table, other layouts, size plots, default tolerances and short metric names come from
its record alone, options and metric names shared by name must mean one thing, and the
training benchmarks share their table, ratio lines and options (``bench.training``). Also the
transport contract: what a kernel reads of a transport is declared on its base class."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from perfsuite import bench, transports, worker
from perfsuite.verdicts import decision, regress
from perfsuite.reading import plots, report
from perfsuite.reading import verdict_text as vt
from perfsuite.bench import BenchmarkSpec, register, training
from perfsuite.bench.tf_epoch import OPTIONS as TF_OPTIONS
from perfsuite.bench.tf_epoch import SPEC as TF_SPEC
from perfsuite.records.errors import ConfigError
from perfsuite.kernels.collectives.allreduce import injected_turns
from perfsuite.records.model import Case, Metric, Opt, Result, Sample, Tolerance
from perfsuite.transports.base import AllreduceTransport
from perfsuite.transports.gpu import GpuTransport

ROOT = Path(__file__).resolve().parents[1] / "perfsuite"
GENERIC = ("reading/report.py", "reading/plots.py", "faces/cli/report.py", "verdicts/regress.py")


@pytest.fixture
def toys():
    """Register toy benchmarks for one test; the registry is as it was afterwards."""
    names = []

    def add(spec: BenchmarkSpec) -> BenchmarkSpec:
        names.append(spec.name)
        return register(spec)

    yield add
    for name in names:
        bench.REGISTRY.pop(name, None)


def toy(name: str, **fields) -> BenchmarkSpec:
    return BenchmarkSpec(name, f"{name}: a toy", kernel="toy", cases=lambda sel: [], **fields)


def sample(benchmark: str, transport: str, metrics: dict[str, float], **case) -> Sample:
    units = {"latency_us": "us", "busbw_GBps": "GB/s", "img_per_s": "img/s"}
    return Sample(Case(benchmark, transport, 2, **case),
                  {n: Metric(n, v, units.get(n, ""), n != "latency_us") for n, v in metrics.items()})


# --- no generic room branches on a benchmark's name ------------------------------------------------

def _name_branches(path: Path, names: set[str]) -> list[str]:
    """Comparisons (==, !=, in) against a string that is a benchmark's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += [f"{path.name}:{node.lineno} compares with {i.value!r}" for i in items
                          if isinstance(i, ast.Constant) and i.value in names]
    return found


def test_the_generic_rooms_hold_no_branch_on_a_benchmark_name():
    names = set(bench.names(runnable=False)) | {"torch-epoch"}
    assert not [hit for f in GENERIC for hit in _name_branches(ROOT / f, names)]


def test_the_checker_sees_a_branch_on_a_benchmark_name(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(r, x='allreduce'):\n"
                     "    return r.benchmark == 'allreduce' or r in ('tf-epoch',)\n")
    assert len(_name_branches(probe, {"allreduce", "tf-epoch"})) == 2  # the default is no branch


# --- a benchmark's record says how the report shows it --------------------------------------------

def test_a_new_benchmark_brings_its_report_table_layouts_and_size_plots(toys, tmp_path):
    def rows(result):
        return ("size", "t"), [(str(s.case.size_bytes), f"{s.metrics['latency_us'].value:.1f}")
                               for s in result.samples]

    toys(toy("toy-bcast", report_rows=rows, layouts={"toy-osu": lambda r: f"# osu {r.transport}"},
             plots_by_size=True))
    samples = tuple(sample("toy-bcast", "mpi", {"latency_us": 2.0 * k}, size_bytes=4 << k) for k in range(3))
    r = Result("toy-bcast", "mpi", 2, samples)
    run = report.ReportRun("x.json", results=[r])
    md = report.summary_markdown([run])
    assert "| size | t |" in md and "| 16 | 4.0 |" in md
    assert "<th>size</th><th>t</th>" in report.html_page([run])
    assert report.text_tables([run]).rstrip().endswith("# osu mpi")
    assert report.layout_table(r, "toy-osu") == "# osu mpi"
    assert report.layout_table(r, "omb") == report.result_table(r)  # a layout it lacks: its table
    from perfsuite.faces.cli.report import print_formats

    assert print_formats() == ("nccl", "omb", "toy-osu", "csv", "md")
    plot = plots.latency_plot([("", r)], tmp_path / "l.png")
    assert plot.file is not None and plot.title == "Toy-bcast latency vs message size"


def test_the_builtin_records_keep_their_report_words():
    every = ["allreduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "alltoallv"]
    assert bench.sized_benchmarks() == every
    p = plots.latency_plot([], Path("/nonexistent/never-written.png"))
    assert p.title == " / ".join(n.capitalize() for n in every) + " latency vs message size"
    assert p.skipped == "no message-size results in the input"
    assert bench.layout_names() == ["omb"]
    tf = Result("tf-epoch", "mpi", 2, (sample("tf-epoch", "mpi", {"img_per_s": 5.0}),))
    assert report._result_rows(tf)[0] == ("case", "img_per_s (img/s)", "valid")  # no report rows: by metric


# --- regress: judged metrics and default tolerances from the records ------------------------------

def test_default_tolerances_come_from_the_benchmark_record(toys):
    toys(toy("toy-tol", tolerances={"latency_us": Tolerance(-0.01, 0.01), "hops": Tolerance(-0.2, 0.2)}))
    assert regress.default_tolerance("latency_us", "allreduce[mpi-n2-4B]") == Tolerance(-0.03, 0.03)
    assert regress.default_tolerance("latency_us", "toy-tol[mpi-n2]") == Tolerance(-0.01, 0.01)
    tf_case = "tf-epoch[mpi-n2-small-cnn-b32]"
    assert regress.default_tolerance("img_per_s", tf_case) == decision.DEFAULT_TOLERANCE
    # Without a case (baseline listings of old callers), the first record that declares it.
    assert regress.default_tolerance("latency_us") == Tolerance(-0.03, 0.03)
    assert regress.default_tolerance("hops") == Tolerance(-0.2, 0.2)
    assert regress.noise_tolerance("hops", [1.0, 1.0, 1.0], "toy-tol[mpi-n2]") == Tolerance(-0.2, 0.2)


def test_the_primary_of_a_mirrored_pair_is_what_benchmarks_judge():
    assert bench.primary_metrics() == ("latency_us", "img_per_s", "tokens_per_s", "peak_mem_MiB",
                                       "bw_min_GBps", "step_us")  # p2p: its slowest link; replay: its window
    s = sample("toy-undeclared", "mpi", {"latency_us": 1.0, "busbw_GBps": 2.0, "extra": 3.0})
    assert regress.judged_metrics(s) == ["latency_us", "extra"]  # busbw is latency's mirror


def test_short_metric_names_come_from_the_records(toys):
    assert (vt.short("busbw_GBps"), vt.short("img_per_s"), vt.short("hops")) == ("busbw", "img/s", "hops")
    toys(toy("toy-words", short_names={"hops_per_s": "hops"}))
    assert vt.short("hops_per_s") == "hops"
    toys(toy("toy-same-words", short_names={"img_per_s": "img/s"}))  # the same word: fine
    with pytest.raises(ConfigError, match=r"'allreduce' and 'toy-other-words' name metric 'busbw_GBps'"):
        register(toy("toy-other-words", short_names={"busbw_GBps": "bandwidth"}))
    assert "toy-other-words" not in bench.REGISTRY


# --- options shared by name mean one thing ---------------------------------------------------------

def test_two_benchmarks_may_share_an_option_but_not_give_one_name_two_meanings(toys):
    toys(toy("toy-epoch", options=training.OPTIONS))  # the very Opt objects tf-epoch lists
    equal = Opt("models", training.DEFAULT_MODELS, training.MODELS_OPT.help, metavar="LIST",
                parse=training.parse_models)
    toys(toy("toy-epoch-2", options=(equal,)))  # an equal one, same parser: one meaning
    assert [o.name for o in bench.options()].count("models") == 1
    other_default = Opt("models", "resnet50", training.MODELS_OPT.help, metavar="LIST",
                        parse=training.parse_models)
    with pytest.raises(ConfigError, match=r"benchmarks 'tf-epoch' and 'toy-clash' both declare option "
                                          r"'models' with a different default"):
        register(toy("toy-clash", options=(other_default,)))
    other_parse = Opt("batches", training.DEFAULT_BATCHES, training.BATCHES_OPT.help, metavar="LIST",
                      parse=lambda text: (int(text),))
    with pytest.raises(ConfigError, match=r"'toy-clash'.*'batches' with a different parse"):
        register(toy("toy-clash", options=(other_parse,)))
    other_knob = Opt("sizes", "4:64MiB", "sizes", knob="message_sizes")
    with pytest.raises(ConfigError, match=r"'allreduce' and 'toy-clash'.*'sizes' with a different "
                                          r"parse, knob, help"):
        register(toy("toy-clash", options=(other_knob,)))
    assert "toy-clash" not in bench.REGISTRY


def test_shared_training_options_say_training_and_tf_epoch_lists_them():
    assert all(o in TF_OPTIONS for o in training.OPTIONS)
    assert all(o.help.startswith("training: ") for o in training.OPTIONS)
    assert next(o for o in TF_OPTIONS if o.name == "fusion-threshold").help.startswith("tf-epoch ")


# --- what training benchmarks share ----------------------------------------------------------------

def _img(benchmark: str, transport: str, value: float) -> Sample:
    return sample(benchmark, transport, {"img_per_s": value}, model="small-cnn", batch=32)


def test_ratio_lines_work_for_any_training_benchmark():
    samples = [_img("toy-epoch", "nccl", 300.0), _img("toy-epoch", "gloo", 100.0),
               _img("tf-epoch", "mpi", 9.0), _img("tf-epoch", "grpc", 1.0)]
    pairs = training.ratio_pairs("gloo", "nccl")
    assert pairs == (("nccl", "gloo"),)
    (line,) = training.ratio_lines(samples, "toy-epoch", pairs)
    assert line.startswith("# img/s(nccl)/img/s(gloo) = 3.00 (no interval")
    assert training.ratio_comparisons("toy-epoch", pairs)(samples) == [line]
    # tf-epoch's record reads its own samples only: the toy's are not its business.
    assert [x.split(" = ")[0] for x in TF_SPEC.comparisons(samples)] == ["# img/s(mpi)/img/s(grpc)"]


def test_training_table_heads_with_the_framework_it_is_given():
    info = {"model": "small-cnn", "batch": 32, "global_batch": 64, "img_per_s": 1280.0,
            "img_per_s_per_worker": 640.0, "step_ms_p50": 50.0, "step_ms_p99": 51.0,
            "weights_identical": True}
    s = Sample(Case("toy-epoch", "nccl", 2, model="small-cnn", batch=32), {}, True, (), info)
    r = Result("toy-epoch", "nccl", 2, (s,), extra={"torch": "2.14.0", "torch_import_s": 1.25})
    head, cols, row = training.training_table(r, "torch", "torch", "torch_import_s").splitlines()
    assert head == "# toy-epoch  transport=nccl  world_size=2  torch 2.14.0  torch import 1.2 s"
    assert cols.split()[:4] == ["#", "model", "batch", "global"]
    assert row.split()[:4] == ["small-cnn", "32", "64", "1280.0"]
    tf = Result("tf-epoch", "mpi", 2, (s,), extra={"tensorflow": "2.20.0"})
    assert TF_SPEC.table(tf).splitlines()[0] == "# tf-epoch  transport=mpi  world_size=2  TF 2.20.0"


def test_training_cases_and_parsers():
    cs = training.training_cases("toy-epoch", ["nccl"], [2], "small-cnn", "16,32")
    assert [c.name for c in cs] == ["toy-epoch[nccl-n2-small-cnn-b16]", "toy-epoch[nccl-n2-small-cnn-b32]"]
    assert training.parse_batches("32,16,32") == (32, 16)
    with pytest.raises(ConfigError):
        training.parse_models("resnet-50")


# --- the transport contract --------------------------------------------------------------------------

def test_the_base_declares_what_a_kernel_reads():
    t = AllreduceTransport(None)
    assert (t.xp, t.timing, t.timing_why, t.native, t.clock) == (np, "python", "", None, "host")
    assert t.host_buffers is True
    assert t.copy_bandwidth() is None
    assert GpuTransport.host_buffers is False  # device buffers unless host arrays stand in


def test_device_buffers_are_not_spun_inline():
    class Device(AllreduceTransport):
        host_buffers = False

    assert injected_turns(Device(None), None, None, spinner=None) == -1


def test_thread_level_comes_from_the_transport_record():
    assert transports.spec("horovod", "tf-epoch").thread_level == "multiple"
    assert transports.spec("horovod-nccl", "tf-epoch").thread_level == "multiple"
    assert transports.spec("mpi", "tf-epoch").thread_level == "funneled"
    assert transports.spec("mpi", "allreduce").thread_level == "funneled"
    assert worker.thread_level({"benchmark": "tf-epoch", "transport": "horovod"}) == "multiple"
    assert worker.thread_level({"benchmark": "allreduce", "transport": "mpi"}) == "funneled"
    assert worker.thread_level({"benchmark": "allreduce", "transport": "no-such"}) == "funneled"

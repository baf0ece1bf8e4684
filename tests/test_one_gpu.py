"""One GPU is a first-class machine: a GPU transport's default world sizes fit the GPUs this node
has (said once per transport), a user's own --world-sizes is kept, and a world whose ranks took
turns on one GPU is labelled time-sliced in tables and reports and kept out of baselines and asv.
The GPU count is faked (NVML's answer), since this machine has none."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest

from perfsuite.store import baselines
from perfsuite import bench, suite
from perfsuite.faces import options
from perfsuite.reading import report
from perfsuite.asv.project import RecordTarget
from perfsuite.asv import record
from perfsuite.records.model import Case, Result, time_sliced, time_sliced_label
from perfsuite.transports import gpu

from test_asv_history import make_project, stored
from test_baselines import pooled

SLICED = "time-sliced (2 ranks on 1 GPU)"


@pytest.fixture
def gpus(monkeypatch):
    """Set how many GPUs NVML counts here."""
    def fake(n: int) -> None:
        monkeypatch.setattr(gpu, "nvml_gpu_count", lambda: (n, "NVML"))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def test_default_world_sizes_fit_the_gpus():
    assert gpu.fit_world_sizes((2,), 1) == ((1,), "2 ranks need 2 GPUs, 1 here: --world-sizes 1 "
                                            "(name --world-sizes to run ranks time-sliced on shared GPUs)")
    assert gpu.fit_world_sizes((1, 2, 4), 2)[0] == (1, 2)
    assert gpu.fit_world_sizes((2,), 2) == ((2,), None)
    assert gpu.fit_world_sizes((2,), 0) == ((2,), None)  # no GPU: the cases skip with that reason


def test_visible_gpus_narrowed_by_cuda_visible_devices(gpus):
    gpus(4)
    assert gpu.visible_gpus({}) == 4
    assert gpu.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert gpu.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == 0


def test_selection_fits_gpu_transports_only_and_says_so_once_each(gpus):
    gpus(1)
    sel = options.selection({"transports": "mpi,nccl,gpu-ring"})
    assert sel.world_sizes_of("mpi") == (2,)
    assert sel.world_sizes_of("nccl") == sel.world_sizes_of("gpu-ring") == (1,)
    assert [n.split(":")[0] for n in sel.notes] == ["nccl", "gpu-ring"]
    assert {(c.transport, c.world_size) for c in suite.select_cases(sel)} == {("mpi", 2), ("nccl", 1),
                                                                              ("gpu-ring", 1)}


@pytest.mark.parametrize("given", [{"world_sizes": "1,2"}, {"hosts": "a,b"}, {"launcher": "srun"}])
def test_a_users_world_sizes_and_multi_node_worlds_are_not_fitted(gpus, given):
    gpus(1)
    sel = options.selection({"transports": "nccl", **given})
    assert sel.world_sizes_of("nccl") == sel.world_sizes and not sel.notes


def test_two_gpus_keep_the_default_of_two(gpus):
    gpus(2)
    sel = options.selection({"transports": "nccl"})
    assert sel.world_sizes_of("nccl") == (2,) and not sel.notes


def test_the_cli_says_it_once_per_transport(gpus, capsys):
    from perfsuite.faces import cli

    gpus(1)
    # CuPy is not installed here, so the world is skipped with that reason after the note.
    assert cli.main(["run", "--transports", "nccl,mpi-staged", "--sizes", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("2 ranks need 2 GPUs, 1 here") == 2
    assert "# nccl: 2 ranks need 2 GPUs, 1 here: --world-sizes 1" in out
    assert "nccl-n1" in out and "nccl-n2" not in out


def test_pytest_collects_world_size_1_on_one_gpu(tmp_path):
    """`pytest benchmarks -k allreduce --perf-transports nccl` on one GPU collects the 1-rank world
    (it skipped every case before: two ranks on one GPU, and NCCL refuses that), and says why in
    the session header."""
    (tmp_path / "one_gpu.py").write_text(textwrap.dedent("""
        from perfsuite.transports import gpu
        gpu.nvml_gpu_count = lambda: (1, "NVML")
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "one_gpu", "benchmarks/test_allreduce.py",
                           "--collect-only", "--perf-transports", "nccl", "--perf-sizes", "4",
                           "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "perfsuite: nccl: 2 ranks need 2 GPUs, 1 here: --world-sizes 1" in done.stdout
    collected = [line for line in done.stdout.splitlines() if "test_allreduce[" in line]
    assert collected and all("nccl-n1" in line for line in collected), done.stdout


def sliced_result() -> Result:
    s = pooled(Case("allreduce", "mpi-staged", 2, size_bytes=1 << 20), 5.0, 1)
    row = {"size_bytes": 1 << 20, "count": 1 << 18, "dtype": "float32", "op": "sum", "latency_us": 200.0,
           "latency_min_us": 190.0, "latency_max_us": 210.0, "p50_us": 200.0, "p99_us": 230.0,
           "algbw_GBps": 5.0, "busbw_GBps": 5.0}
    s = dataclasses.replace(s, info={**s.info, **row, "time_sliced": SLICED})
    return Result("allreduce", "mpi-staged", 2, (s,), extra={"time_sliced": SLICED,
                                                              "transport_facts": {"ranks_per_gpu": 2}})


def test_the_label_comes_from_the_transports_facts():
    assert time_sliced_label({"ranks_per_gpu": 2}) == SLICED
    assert time_sliced_label({"ranks_per_gpu": 1}) is None and time_sliced_label({}) is None
    assert time_sliced({"time_sliced": SLICED}) == SLICED and time_sliced({}) is None


def test_tables_and_reports_label_a_time_sliced_world():
    r = sliced_result()
    assert SLICED in bench.table(r).splitlines()[0]
    page = report.summary_markdown([report.ReportRun(source="t", created="", fingerprint={}, results=[r])])
    assert SLICED in page


def test_a_time_sliced_world_is_no_baseline(tmp_path):
    r = sliced_result()
    fair = pooled(Case("allreduce", "mpi-staged", 1, size_bytes=1 << 20), 5.0, 2)
    lines = baselines.update(tmp_path, "box", [*r.samples, fair])
    assert any(f"not recorded, {SLICED}" in line for line in lines)
    stored_set = baselines.load(tmp_path, "box", "allreduce")
    assert {name for name, _ in stored_set.entries} == {fair.case.name}
    # Alone, it is said and not recorded; no "too few rounds" refusal hides why.
    assert any(SLICED in line for line in baselines.update(tmp_path / "b", "box", list(r.samples)))


def test_a_time_sliced_world_is_not_recorded_in_asv(tmp_path):
    pytest.importorskip("asv", reason="asv is not installed (a GPU machine's own Python has none)")
    conf, (commit,) = make_project(tmp_path, 1)
    r = sliced_result()
    summary = record.record(list(r.samples), RecordTarget(conf, "box", commit), bench.asv_layout, fp={})
    assert summary.entries == 0
    assert summary.left_out == [f"{r.samples[0].case.name} ({SLICED})"]
    assert not any(stored(conf, commit).values())

"""A write that fails after the worlds ran (a disk that filled, a folder remounted read-only):
one line naming the path and the OS error, exit 4, and what was measured kept in the temp
folder where it can be. Every flag that writes is checked before the first world (``perfsuite
--json`` into a read-only folder is exit 2 with nothing run); these tests make the folder
read-only while the worlds run, after that check, with a read-only bind mount (root ignores
permission bits). The worlds are fakes: what is tested is the write, not a measurement."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from perfsuite.store import formats
from perfsuite import suite
from perfsuite.faces.cli import main
from perfsuite.records.model import Metric, Result, Sample

EROFS = "Read-only file system"


@pytest.fixture
def spare(tmp_path, monkeypatch) -> Path:
    """The temp folder, where a file that could not be written where asked is kept."""
    folder = tmp_path / "spare"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def one_line(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith(f"perfsuite {command}: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_ab_json_in_a_folder_gone_read_only_is_kept_in_the_temp_folder(tmp_path, read_only, spare, monkeypatch,
                                                                       capsys):
    from perfsuite.experiments import ab

    out = tmp_path / "out"
    out.mkdir()
    rng = np.random.default_rng(1)

    def runner_of(_cfg):
        def runner(arm, cases):
            if not runner.mounted:
                read_only(out)  # after the pre-flight check, while the pairs run
                runner.mounted = True
            v = 3.0 * (1 + 0.01 * rng.standard_normal())
            return [Sample(c, {"latency_us": Metric("latency_us", v, "us", False)}, info={"contention": 0.0})
                    for c in cases]
        runner.mounted = False
        return runner

    monkeypatch.setattr(ab, "world_runner", runner_of)
    assert main(["ab", "--world-sizes", "2", "--sizes", "4", "--max-pairs", "2", "--b-env", "X=1", "--json", str(out / "ab.json")]) == 4
    line = one_line(capsys.readouterr().err, "ab")
    [kept] = spare.iterdir()
    assert line == f"perfsuite ab: {out / 'ab.json'} could not be written ({EROFS}); the A/B file is in {kept} instead"
    d = formats.check_format(json.loads(kept.read_text()), formats.AB, str(kept))
    assert d["pairs"] == 2 and len(d["values"]["allreduce[mpi-n2-4B]"]["latency_us"]["a"]) == 2


def test_detection_json_in_a_folder_gone_read_only_is_kept(tmp_path, read_only, spare, monkeypatch, capsys):
    from perfsuite.experiments import detection as d

    out = tmp_path / "out"
    out.mkdir()
    state = {"mounted": False}

    def runner_of(_cfg):
        def runner(spec, slowdown):
            if not state["mounted"]:
                read_only(out)
                state["mounted"] = True
            return [Sample(c, {"latency_us": Metric("latency_us", 3.0 * (1 + slowdown), "us", False),
                               "busbw_GBps": Metric("busbw_GBps", 1.0 / (1 + slowdown), "GB/s", True)},
                           info={"contention": 0.0, "measured": 0.05, "turns": 10}) for c in spec.cases]
        return runner

    monkeypatch.setattr(d, "world_runner", runner_of)
    assert main(["detection-power", "--blocks", "1", "--gap", "0", "--max-pairs", "2", "--large", "64KiB",
                 "--json", str(out / "d.json")]) == 4
    line = one_line(capsys.readouterr().err, "detection-power")
    [kept] = spare.iterdir()
    assert line == (f"perfsuite detection-power: {out / 'd.json'} could not be written ({EROFS}); the detection "
                    f"stream file is in {kept} instead")
    assert len(json.loads(kept.read_text())["worlds"]) == 6


STUDY = """
format = "perfsuite-study-plan"
version = 1
name = "kept"
rounds = 2
steps = 2
warmup = 1
allreduce_iters = 20

[vectors.scaling]
transports = ["mpi"]
allreduce = ["mpi"]
allreduce_sizes = ["4"]
world_sizes = [2]
"""


def _outcome(spec):
    samples = tuple(Sample(c, {"latency_us": Metric("latency_us", 3.0, "us", False)}, True, (3e-6,) * 4,
                           {"contention": 0.0}) for c in spec.cases)
    return formats.WorldOutcome(spec, Result(spec.benchmark, spec.transport, spec.world_size, samples))


def test_study_out_gone_read_only_keeps_its_worlds_in_the_temp_folder(tmp_path, read_only, spare, monkeypatch,
                                                                      capsys):
    """The first world's record is written to --out; the folder then turns read-only: the rest go
    to one file in the temp folder, the report cannot be written, a line each, exit 4."""
    out = tmp_path / "out"
    state = {"worlds": 0}

    def fake(spec, cfg):
        if spec.benchmark != "allreduce":
            return formats.WorldOutcome(spec, skipped="not run by this test")
        state["worlds"] += 1
        if state["worlds"] == 2:
            read_only(out)
        return _outcome(spec)

    monkeypatch.setattr(suite, "run_one", fake)
    plan = tmp_path / "plan.toml"
    plan.write_text(STUDY)
    assert main(["study", str(plan), "--out", str(out)]) == 4
    err = capsys.readouterr().err
    [kept] = spare.iterdir()
    lines = [line for line in err.splitlines() if line.startswith("perfsuite study: ")]
    assert len(lines) == 2, err
    assert lines[0] == (f"perfsuite study: {out / 'study.json'} could not be written ({EROFS}); the study's "
                        f"worlds are in {kept} instead")
    assert len(lines) == 2 and f"({EROFS}): no report" in lines[1], err
    assert len([r for r in formats.load_study(kept)["worlds"] if r.get("result")]) == 2  # both worlds
    assert len([r for r in formats.load_study(out / "study.json")["worlds"] if r.get("result")]) == 1


def test_stalls_json_and_picture_in_a_folder_gone_read_only(tmp_path, read_only, spare, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    steps = (0.010, 0.011, 0.0105, 0.0102, 0.0108, 0.0101)

    def fake(spec, cfg):
        if not fake.mounted:
            read_only(out)
            fake.mounted = True
        (case,) = spec.cases
        sample = Sample(case, {"step_ms": Metric("step_ms", 10.0, "ms", False)}, True, steps, {})
        return formats.WorldOutcome(spec, Result(case.benchmark, case.transport, case.world_size, (sample,)))
    fake.mounted = False

    monkeypatch.setattr(suite, "run_one", fake)
    assert main(["stalls", "--no-data", "--steps", "6", "--json", str(out / "s.json")]) == 4
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("perfsuite stalls: ")]
    [kept] = spare.iterdir()
    assert lines == [f"perfsuite stalls: {out / 's.json'} could not be written ({EROFS}); the results are in "
                     f"{kept} instead",
                     f"perfsuite stalls: {out / 's.png'} could not be written ({EROFS}): no stacked bar"], err
    assert [s.case.benchmark for s in formats.load_run(kept).samples()] == ["stalls"]


def test_a_default_stalls_picture_that_cannot_be_written_is_refused_before_any_run(tmp_path, read_only,
                                                                                   monkeypatch, capsys):
    """Without --png the picture goes beside --json, or to ./stalls.png: checked as --png is."""
    def refuse(*a, **k):
        raise AssertionError("a world started")

    monkeypatch.setattr(suite, "run_one", refuse)
    here = tmp_path / "here"
    here.mkdir()
    read_only(here)
    monkeypatch.chdir(here)
    assert main(["stalls", "--no-data"]) == 2
    assert "'stalls.png' cannot be written" in capsys.readouterr().err

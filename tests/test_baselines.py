"""Baseline store: round trip, merge keeps hand edits, atomic writes, errors that say what to do."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from perfsuite import baselines, regress
from perfsuite.errors import BaselineFormatError, ConfigError
from perfsuite.model import Case, Metric, Sample, Tolerance

CASE = Case("allreduce", "mpi", 2, size_bytes=1 << 20)
SMALL = Case("allreduce", "mpi", 2, size_bytes=4)


def sample(case: Case, busbw: float, seed: int, n: int = 1000, valid: bool = True) -> Sample:
    rng = np.random.default_rng(seed)
    bw = busbw * (1 + 0.01 * rng.standard_normal(n))
    lat = (case.size_bytes or 4) / bw / 1e3
    return Sample(case, {"busbw_GBps": Metric("busbw_GBps", float(np.median(bw)), "GB/s", True, tuple(bw)),
                         "latency_us": Metric("latency_us", float(np.median(lat)), "us", False, tuple(lat))},
                  valid)


def test_system_names_are_checked():
    assert baselines.system_for(name="ci-2core") == "ci-2core"
    assert baselines.system_for({"cpu_model": "Intel(R) Xeon(R) Processor @ 2.50GHz", "cpu_count": 2}) \
        == "intel-xeon-2c"
    for bad in ("../etc", "a/b", " x"):
        with pytest.raises(ConfigError, match="system name"):
            baselines.system_for(name=bad)


def test_update_writes_then_loads_the_same_baselines(tmp_path):
    pooled = regress.pool_rounds([sample(CASE, 1.25, s) for s in range(3)])
    lines = baselines.update(tmp_path, "box", [pooled, sample(SMALL, 0.001, 9)], fp={"host": "h"})
    path = tmp_path / "box" / "allreduce.json"
    assert lines[0] == f"{path}: 4 change(s)" and any("new 1.25 GB/s (3 round(s))" in x for x in lines)
    got = baselines.load(tmp_path, "box", "allreduce")
    b = got.entries[(CASE.name, "busbw_GBps")]
    assert b.unit == "GB/s" and b.higher_is_better and len(b.rounds) == 3
    assert b.value == pytest.approx(1.25, rel=0.01) and b.n == 3000
    assert len(b.samples) == regress.MAX_BASELINE_SAMPLES  # bounded, shape kept as quantiles
    assert got.entries[(SMALL.name, "latency_us")].higher_is_better is False
    assert got.fingerprint == {"host": "h"}
    assert not [p for p in path.parent.iterdir() if p.name != "allreduce.json"]  # no temp left


def test_update_keeps_hand_set_tolerance_and_xfail_and_reports_the_change(tmp_path):
    baselines.update(tmp_path, "box", [sample(CASE, 1.0, 1)])
    path = tmp_path / "box" / "allreduce.json"
    d = json.loads(path.read_text())
    d["cases"][CASE.name]["busbw_GBps"]["tolerance"] = {"lower": -0.2, "upper": 0.3}
    d["cases"][CASE.name]["busbw_GBps"]["xfail"] = "slow NIC"
    d["tolerances"] = {"latency_us": {"lower": -0.07, "upper": 0.07}}
    path.write_text(json.dumps(d))
    lines = baselines.update(tmp_path, "box", [sample(CASE, 1.1, 2)])
    assert any(re.search(r"busbw_GBps: 0\.99\d+ -> 1\.1 GB/s \(\+10\.\d%", x) for x in lines), lines
    bs = baselines.load(tmp_path, "box", "allreduce")
    eff = bs.effective()
    assert eff[(CASE.name, "busbw_GBps")].tolerance == Tolerance(-0.2, 0.3)
    assert eff[(CASE.name, "busbw_GBps")].xfail == "slow NIC"
    assert eff[(CASE.name, "latency_us")].tolerance == Tolerance(-0.07, 0.07)  # file default
    assert baselines.load_all(tmp_path, "box") == eff


def test_invalid_samples_are_never_recorded(tmp_path):
    lines = baselines.update(tmp_path, "box", [sample(CASE, 1.0, 1, valid=False)])
    assert any("failed validation" in x for x in lines)
    assert baselines.load(tmp_path, "box", "allreduce").entries == {}


def test_nothing_is_written_without_update(tmp_path):
    assert baselines.load(tmp_path, "box", "allreduce") is None
    assert baselines.load_all(tmp_path, "box") == {}
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    baselines.update(tmp_path, "box", [sample(CASE, 1.0, 1)])
    path = tmp_path / "box" / "allreduce.json"
    before = path.read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        baselines.update(tmp_path, "box", [sample(CASE, 2.0, 2)])
    assert path.read_text() == before
    assert [p.name for p in path.parent.iterdir()] == ["allreduce.json"]


@pytest.mark.parametrize("content,match", [
    ("{not json", "not valid JSON.*perfsuite baseline update"),
    ('{"format": "perfsuite-run", "version": 1}', "not a perfsuite-baseline file"),
    ('{"format": "perfsuite-baseline", "version": 0, "cases": {}}', "older than this perfsuite.*re-record"),
    ('{"format": "perfsuite-baseline", "version": 99, "cases": {}}', "upgrade perfsuite"),
    ('{"format": "perfsuite-baseline", "version": 1}', "malformed baseline.*cases"),
    ('{"format": "perfsuite-baseline", "version": 1, "cases": {"c": {"m": {"unit": "us"}}}}',
     "malformed baseline"),
])
def test_bad_files_say_what_to_do(tmp_path, content, match):
    (tmp_path / "box").mkdir()
    (tmp_path / "box" / "allreduce.json").write_text(content)
    with pytest.raises(BaselineFormatError, match=match):
        baselines.load(tmp_path, "box", "allreduce")


def test_show_lists_every_entry(tmp_path):
    assert "no baselines" in baselines.show(tmp_path)
    baselines.update(tmp_path, "box", [sample(CASE, 1.25, 1)])
    text = baselines.show(tmp_path, "box")
    assert CASE.name in text and "busbw_GBps" in text and "latency_us" in text and "-3%" in text

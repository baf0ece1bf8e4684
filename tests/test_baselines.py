"""Baseline store: round trip, merge keeps hand edits, atomic writes, errors that say what to do."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from perfsuite.store import baselines
from perfsuite.verdicts import regress, rounds
from perfsuite.records.errors import BaselineFormatError, ConfigError
from perfsuite.records.model import Case, Metric, Sample, Tolerance

CASE = Case("allreduce", "mpi", 2, size_bytes=1 << 20)
SMALL = Case("allreduce", "mpi", 2, size_bytes=4)


def sample(case: Case, busbw: float, seed: int, n: int = 1000, valid: bool = True) -> Sample:
    rng = np.random.default_rng(seed)
    bw = busbw * (1 + 0.01 * rng.standard_normal(n))
    lat = (case.size_bytes or 4) / bw / 1e3
    return Sample(case, {"busbw_GBps": Metric("busbw_GBps", float(np.median(bw)), "GB/s", True, tuple(bw)),
                         "latency_us": Metric("latency_us", float(np.median(lat)), "us", False, tuple(lat))},
                  valid)


def pooled(case: Case, busbw: float, seed: int, k: int = 5, **kw) -> Sample:
    """``k`` rounds (enough for a baseline that can decide), pooled as the suite pools them."""
    return rounds.pool_rounds([sample(case, busbw * (1 + 0.002 * i), seed * 100 + i, n=200, **kw)
                                for i in range(k)])


def test_system_names_are_checked():
    assert baselines.system_for(name="ci-2core") == "ci-2core"
    assert baselines.system_for({"cpu_model": "Intel(R) Xeon(R) Processor @ 2.50GHz", "cpu_count": 2}) \
        == "intel-xeon-2c"
    for bad in ("../etc", "a/b", " x"):
        with pytest.raises(ConfigError, match="system name"):
            baselines.system_for(name=bad)


def test_update_writes_then_loads_the_same_baselines(tmp_path):
    lines = baselines.update(tmp_path, "box", [pooled(CASE, 1.25, 1), pooled(SMALL, 0.001, 9)],
                             fp={"host": "h"}, session="2026-11-25T10:00:00")
    path = tmp_path / "box" / "allreduce.json"
    assert lines[0] == f"{path}: 4 change(s)"
    assert any(re.search(r"new 1\.25\d* GB/s \(1 session\(s\), 5 round\(s\)\)", x) for x in lines), lines
    got = baselines.load(tmp_path, "box", "allreduce")
    b = got.entries[(CASE.name, "busbw_GBps")]
    assert b.unit == "GB/s" and b.higher_is_better and len(b.rounds) == 5
    assert b.sessions == ("2026-11-25T10:00:00",) * 5
    assert b.value == pytest.approx(1.254, rel=0.01) and b.n == 1000
    assert len(b.samples) == regress.MAX_BASELINE_SAMPLES  # bounded, shape kept as quantiles
    assert got.entries[(SMALL.name, "latency_us")].higher_is_better is False
    assert got.fingerprint == {"host": "h"}
    assert not [p for p in path.parent.iterdir() if p.name != "allreduce.json"]  # no temp left


def test_update_keeps_hand_set_tolerance_and_xfail_and_reports_the_change(tmp_path):
    baselines.update(tmp_path, "box", [pooled(CASE, 1.0, 1)])
    path = tmp_path / "box" / "allreduce.json"
    d = json.loads(path.read_text())
    d["cases"][CASE.name]["busbw_GBps"]["tolerance"] = {"lower": -0.2, "upper": 0.3}
    d["cases"][CASE.name]["busbw_GBps"]["xfail"] = "slow NIC"
    d["tolerances"] = {"latency_us": {"lower": -0.07, "upper": 0.07}}
    path.write_text(json.dumps(d))
    lines = baselines.update(tmp_path, "box", [pooled(CASE, 1.1, 2)])
    assert any(re.search(r"busbw_GBps: 1\.00\d+ -> 1\.1\d* GB/s \(\+10\.\d%; replaced: 1 session\(s\), 5 "
                         r"round\(s\)\)", x) for x in lines), lines
    bs = baselines.load(tmp_path, "box", "allreduce")
    eff = bs.effective()
    assert eff[(CASE.name, "busbw_GBps")].tolerance == Tolerance(-0.2, 0.3)
    assert eff[(CASE.name, "busbw_GBps")].xfail == "slow NIC"
    assert eff[(CASE.name, "latency_us")].tolerance == Tolerance(-0.07, 0.07)  # file default
    assert baselines.load_all(tmp_path, "box") == eff


def test_invalid_samples_are_never_recorded(tmp_path):
    lines = baselines.update(tmp_path, "box", [pooled(CASE, 1.0, 1, valid=False)])
    assert any("failed validation" in x for x in lines)
    assert baselines.load(tmp_path, "box", "allreduce").entries == {}


def test_nothing_is_written_without_update(tmp_path):
    assert baselines.load(tmp_path, "box", "allreduce") is None
    assert baselines.load_all(tmp_path, "box") == {}
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    baselines.update(tmp_path, "box", [pooled(CASE, 1.0, 1)])
    path = tmp_path / "box" / "allreduce.json"
    before = path.read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        baselines.update(tmp_path, "box", [pooled(CASE, 2.0, 2)])
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
    baselines.update(tmp_path, "box", [pooled(CASE, 1.25, 1)])
    text = baselines.show(tmp_path, "box")
    assert CASE.name in text and "busbw_GBps" in text and "latency_us" in text and "-3%" in text


def test_a_baseline_that_could_decide_nothing_is_refused_in_one_line(tmp_path):
    """One round (a run file of one world) against any candidate can only ever say UNKNOWN:
    refused before anything is written, saying how to record one that can decide."""
    with pytest.raises(ConfigError) as err:
        baselines.update(tmp_path, "box", [sample(CASE, 1.0, 1), sample(SMALL, 1.0, 2)], source="a.json")
    line = str(err.value)
    assert "\n" not in line and line.startswith("a.json holds 1 round(s) of allreduce[mpi-n2-1MiB] "
                                                "(and 1 more case(s)); a baseline needs at least 5 rounds")
    assert "--baseline-update" in line and "--rounds 10" in line
    assert not (tmp_path / "box").exists()


def test_sessions_are_added_and_old_levels_kept(tmp_path):
    """--baseline-add: a run's rounds join the stored ones as one more session (a one-round run
    may add to five stored rounds); an update replaces the rounds and keeps their sessions'
    levels as history, which the verdicts' drift is measured from."""
    baselines.update(tmp_path, "box", [pooled(CASE, 1.0, 1)], session="mon")
    lines = baselines.update(tmp_path, "box", [sample(CASE, 1.02, 5)], session="tue", add=True)
    assert any("session added: 2 session(s), 6 round(s)" in x for x in lines), lines
    b = baselines.load(tmp_path, "box", "allreduce").entries[(CASE.name, "busbw_GBps")]
    assert b.sessions == ("mon",) * 5 + ("tue",) and list(b.session_rounds()) == ["mon", "tue"]
    baselines.update(tmp_path, "box", [pooled(CASE, 1.1, 3)], session="wed")
    b = baselines.load(tmp_path, "box", "allreduce").entries[(CASE.name, "busbw_GBps")]
    assert b.sessions == ("wed",) * 5 and len(b.history) == 2
    assert b.history[0] == pytest.approx(1.004, rel=0.01) and b.history[1] == pytest.approx(1.02, rel=0.01)
    assert "1+2" in baselines.show(tmp_path, "box")  # 1 session, 2 earlier levels


def test_a_version_2_baseline_migrates_to_one_session_per_entry(tmp_path):
    (tmp_path / "box").mkdir()
    (tmp_path / "box" / "allreduce.json").write_text(json.dumps({
        "format": "perfsuite-baseline", "version": 2, "cases": {CASE.name: {"busbw_GBps": {
            "unit": "GB/s", "higher_is_better": True, "value": 1.0, "rounds": [1.0, 1.01, 0.99],
            "recorded": "2026-11-20T00:00:00+00:00", "timing": "native"}}}}))
    b = baselines.load(tmp_path, "box", "allreduce").entries[(CASE.name, "busbw_GBps")]
    assert b.sessions == ("2026-11-20T00:00:00+00:00",) * 3 and b.timing == "native"


@pytest.mark.parametrize("root", ["baselines", "elsewhere/my baselines"])
def test_an_empty_show_advises_a_command_that_parses_and_records_enough_rounds(tmp_path, monkeypatch, root):
    """The advice is a `perfsuite` command line: run's parser takes it, and the rounds it records
    (judging.judging_rounds, as run computes them) are as many as `baseline update` asks for."""
    import shlex

    from perfsuite.faces import options
    from perfsuite.verdicts import judging, regress
    from perfsuite.faces.cli import build_parser

    monkeypatch.chdir(tmp_path)
    advice = baselines.show(root)
    command = re.search(r"`perfsuite ([^`]+)`", advice).group(1)
    args = build_parser().parse_args(shlex.split(command))
    assert args.command == "run" and args.baseline_update
    assert (args.baseline_dir or "baselines") == root  # unset: the option's default, baselines
    policy, _ = judging.judging_rounds(options.rounds_policy(options.with_defaults(vars(args))), update=True,
                                     rounds_given=args.rounds is not None)
    assert policy.rounds >= regress.MIN_BASELINE_ROUNDS


def test_each_session_names_the_commit_that_measured_it(tmp_path):
    """BASELINE 4: ``recorded_at`` per session (an update starts it again, an add keeps it), read
    back oldest first over every benchmark's file; a version 3 file has none and migrates."""
    baselines.update(tmp_path, "box", [pooled(CASE, 1.0, 1)], session="2026-12-01T00:00:00",
                     at={"commit": "a" * 40, "repo": "/r"})
    baselines.update(tmp_path, "box", [pooled(CASE, 1.0, 2)], session="2026-12-02T00:00:00", add=True,
                     at={"commit": "b" * 40, "repo": "/r"})
    assert [c["commit"][0] for _, c in baselines.recorded_at(tmp_path, "box")] == ["a", "b"]
    assert "commit=bbbbbbbbbb" in baselines.show(tmp_path, "box")
    baselines.update(tmp_path, "box", [pooled(CASE, 1.0, 3)], session="2026-12-03T00:00:00",
                     at={"commit": "c" * 40, "repo": "/r"})
    assert [c["commit"][0] for _, c in baselines.recorded_at(tmp_path, "box")] == ["c"]
    d = json.loads((tmp_path / "box" / "allreduce.json").read_text())
    assert d["version"] == 4
    d["version"] = 3
    del d["recorded_at"]
    (tmp_path / "box" / "allreduce.json").write_text(json.dumps(d))
    assert baselines.recorded_at(tmp_path, "box") == []


def test_show_says_what_the_machine_drift_is_and_from_what(tmp_path):
    """The drift line: not learned from one session (only the prior decides); learned, with
    its sessions, cases and degrees of freedom, from two on."""
    baselines.update(tmp_path, "box", [pooled(CASE, 1.0, 1), pooled(SMALL, 1.0, 2)], session="s1")
    assert "drift between runs not learned yet: 1 sitting(s) recorded" in baselines.show(tmp_path, "box")
    baselines.update(tmp_path, "box", [pooled(CASE, 1.05, 3), pooled(SMALL, 0.97, 4)], session="s2", add=True)
    line = baselines.show(tmp_path, "box").splitlines()[-1]
    assert line.startswith("# box: drift between sittings SD ") and "learned from 2 sitting(s) of 2 case(s)" in line

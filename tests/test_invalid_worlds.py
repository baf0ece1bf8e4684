"""A world whose results were wrong is a failed world in every command that measures: exit 4,
one line naming the arm (where there are arms), the case and the rank, and nothing measured
lost: the file the command writes keeps the world, marked invalid. Wrong sums come from the
test-only fault switch (``PERFSUITE_TEST_FAULT=corrupt@1``: rank 1's result off by one) in real
2-rank worlds; ``stalls`` and ``nodes`` run kernels the switch cannot corrupt (a training step,
point-to-point links: only an emulated network the traffic did not cross makes them invalid),
so their worlds are given by a fake ``suite`` that returns such a sample.

Each command's test keeps its worlds few: one pair, one world, one round.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import SWITCHES, perfsuite, said, small_world
from perfsuite.store import formats
from perfsuite import suite
from perfsuite.faces.cli import main
from perfsuite.records.model import Case, Metric, Result, Sample

WORLD = small_world()
CASE = "allreduce[mpi-n2-4B]"
#: The line every command prints for rank 1's wrong sum (after "arm X: " where there are arms).
WRONG = re.escape(CASE) + r" returned wrong results on rank 1 in {at} \(checked against the exact expected values\)"


def invalid_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "INVALID: " in line]


@pytest.mark.world
def test_ab_stops_at_the_pair_whose_arm_returned_wrong_sums(tmp_path, no_leftover_ranks):
    """The issue's command, one size: exit 4 (it exited 0 with an empty table), one line, and
    the pair kept in the A/B file, marked."""
    r = perfsuite("ab", *WORLD, "--b-env", "PERFSUITE_TEST_FAULT=corrupt@1", "--max-pairs", "4",
                  "--json", "ab.json", cwd=tmp_path)
    assert r.returncode == 4, said(r)
    lines = invalid_lines(r.stdout + r.stderr)
    assert len(lines) == 1 and re.fullmatch("INVALID: arm B: " + WRONG.format(at="pair 1") + ".*", lines[0]), said(r)
    d = formats.check_format(json.loads((tmp_path / "ab.json").read_text()), formats.AB, "ab.json")
    assert d["pairs"] == 1 and d["invalid"] == [{"pair": 1, "arm": "B", "case": CASE, "ranks": [1], "reason": None}]
    values = d["values"][CASE]["latency_us"]
    assert len(values["a"]) == len(values["b"]) == 1 and values["invalid"] == [0]


@pytest.mark.world
def test_bisect_fails_the_step_whose_commit_returns_wrong_sums(tmp_path, monkeypatch, capsys, no_leftover_ranks):
    """A two-commit repository whose bad commit's environment corrupts rank 1's sum (its Python
    sets the fault switch): the bad end's step fails at its first pair, exit 4, the line once."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True, env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                                    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout.strip()
    git("init", "-q")
    for n in (1, 2):
        (repo / "f").write_text(str(n))
        git("add", "f")
        git("commit", "-q", "-m", f"commit {n}")
    good, bad = git("rev-parse", "HEAD~1"), git("rev-parse", "HEAD")
    from perfsuite.launch import envs

    def build(repo_, ref, **kw):  # a commit's environment: this Python, the bad one with the fault
        commit = envs.resolve(repo_, ref)
        folder = tmp_path / "envs" / commit[:10]
        (folder / "bin").mkdir(parents=True, exist_ok=True)
        fault = "export PERFSUITE_TEST_FAULT=corrupt@1\n" if commit == bad else ""
        (folder / "bin" / "python").write_text(f"#!/bin/sh\n{fault}exec {sys.executable} \"$@\"\n")
        (folder / "bin" / "python").chmod(0o755)
        return envs.CommitEnv(ref, commit, str(folder), True, 0.0)

    monkeypatch.setattr(envs, "build", build)
    monkeypatch.chdir(repo)
    for k in SWITCHES:
        monkeypatch.delenv(k, raising=False)
    assert main(["bisect", *WORLD, "--good", good, "--bad", bad, "--max-pairs", "4"]) == 4
    out = capsys.readouterr().out
    lines = invalid_lines(out)
    assert len(lines) == 1 and re.fullmatch("INVALID: arm B: " + WRONG.format(at="pair 1") + ".*", lines[0]), out
    assert f"could not decide at {bad[:10]} (wrong results: the INVALID line above)" in out, out


@pytest.mark.world
def test_detection_power_ends_the_stream_at_a_world_with_wrong_sums(tmp_path, monkeypatch, capsys,
                                                                    no_leftover_ranks):
    """The stream's first world is wrong: the stream ends there, kept in the file with the case
    marked, exit 4. (The injection check before the stream is left out: its kernel checks no
    sums, and its six worlds would cost this test a minute.)"""
    from perfsuite.experiments import detection

    monkeypatch.setattr(detection, "check_injection", lambda cfg, runner: [])
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "corrupt@1@1024")
    assert main(["detection-power", "--blocks", "1", "--gap", "0", "--max-pairs", "2", "--large", "64KiB",
                 "--json", str(tmp_path / "d.json")]) == 4
    out = capsys.readouterr().out
    lines = invalid_lines(out)
    assert len(lines) == 1, out
    assert re.fullmatch(r"INVALID: arm [AB]: allreduce\[mpi-n2-64KiB\] returned wrong results on rank 1 in "
                        r"world 1 \(A/[+a-z]+ pair\) .*", lines[0]), out
    d = json.loads((tmp_path / "d.json").read_text())
    [world] = d["worlds"]
    assert world["cases"]["allreduce[mpi-n2-64KiB]"]["valid"] is False
    assert world["cases"]["allreduce[mpi-n2-64KiB]"]["invalid_ranks"] == [1]
    assert world["cases"]["allreduce[mpi-n2-4B]"]["valid"] is True  # under the fault's 1 KiB
    assert not any(row["windows"] for row in d["ab"] + d["stored"])  # judged nothing


@pytest.mark.world
def test_overhead_stops_at_a_world_with_wrong_sums(tmp_path, no_leftover_ranks):
    r = perfsuite("overhead", "--sizes", "4", "--iters", "20", "--warmup", "2", "--rounds", "1", cwd=tmp_path,
                  PERFSUITE_TEST_FAULT="corrupt@1")
    assert r.returncode == 4, said(r)
    lines = invalid_lines(r.stdout + r.stderr)
    assert len(lines) == 1, said(r)
    assert re.fullmatch("perfsuite overhead: INVALID: " + WRONG.format(at=r"round 1, the (native|python) loop's world")
                        + ".*", lines[0]), said(r)


STUDY = """
format = "perfsuite-study-plan"
version = 1
name = "wrong"
rounds = 2
steps = 2
warmup = 1
allreduce_iters = 20
timeout = 300

[vectors.scaling]
transports = ["mpi"]
allreduce = ["mpi"]
allreduce_sizes = ["4"]
world_sizes = [2]
"""


@pytest.mark.world
def test_study_records_a_world_with_wrong_sums_as_failed_and_finishes(tmp_path, monkeypatch, capsys,
                                                                      no_leftover_ranks):
    """Its allreduce point's two worlds run (the training points are skipped here: this is about
    the allreduce worlds' sums), both wrong: each is one line, kept with its result and marked,
    in no figure, run again on --resume; the study finishes and exits 4."""
    real = suite.run_one

    def allreduce_only(spec, cfg):
        if spec.benchmark != "allreduce":
            return formats.WorldOutcome(spec, skipped="not run by this test")
        return real(spec, cfg)

    monkeypatch.setattr(suite, "run_one", allreduce_only)
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "corrupt@1")
    plan, out = tmp_path / "plan.toml", tmp_path / "out"
    plan.write_text(STUDY)
    assert main(["study", str(plan), "--out", str(out)]) == 4
    said_ = capsys.readouterr().out
    lines = invalid_lines(said_)
    assert len(lines) == 2, said_  # one line per world
    assert [re.fullmatch("INVALID: " + WRONG.format(at=f"round {n}") + ".*", line) is not None
            for n, line in zip((1, 2), sorted(lines))] == [True, True], said_
    assert "0 of 6 worlds finished (2 point(s) skipped, 0 world(s) failed, 2 returned wrong results)" in said_, said_
    worlds = [r for r in formats.load_study(out / "study.json")["worlds"] if r["point"].startswith("allreduce")]
    assert len(worlds) == 2 and all(r["invalid"] == [{"case": CASE, "ranks": [1], "reason": None}] and r["result"]
                                    for r in worlds)
    from perfsuite.experiments import study as st, study_analysis, study_plan as sp

    parsed = sp.parse(formats.read_plan(plan), str(plan))
    data = study_analysis.collect(parsed, worlds)
    assert not data["allreduce/mpi/n2"].results and len(data["allreduce/mpi/n2"].failures) == 2
    assert {(r, k) for r, k in st.pending(parsed, worlds) if k.startswith("allreduce")} == {(0, "allreduce/mpi/n2"),
                                                                                            (1, "allreduce/mpi/n2")}


STEPS = (0.010, 0.011, 0.0105, 0.0102, 0.0108, 0.0101)  # seconds, a fake world's step times


def _outcome(spec, case: Case, *, valid: bool = True, info: dict | None = None, times=STEPS):
    metrics = {m: Metric(m, 5.0, "us", False) for m in ("latency_us", "latency_median_us")}
    sample = Sample(case, metrics, valid, tuple(times), {"nodes": ["node0", "node1"], **(info or {})})
    return formats.WorldOutcome(spec, Result(case.benchmark, case.transport, case.world_size, (sample,)))


def test_stalls_marks_a_run_with_wrong_results_and_its_breakdown(tmp_path, monkeypatch, capsys):
    """T1's result is wrong (a fake world: no training kernel can be made to corrupt it): its
    stalls are skipped, the line names its case, rank and run, the results file keeps it under
    the breakdown's info, the breakdown is marked invalid, exit 4."""
    def fake(spec, cfg):
        (case,) = spec.cases
        wrong = case.world_size == 2
        return _outcome(spec, case, valid=not wrong, info={"invalid_ranks": [1]} if wrong else {},
                        times=tuple(2 * t for t in STEPS) if wrong else STEPS)

    monkeypatch.setattr(suite, "run_one", fake)
    out = tmp_path / "stalls.json"
    assert main(["stalls", "--no-data", "--steps", "6", "--json", str(out)]) == 4
    said_ = capsys.readouterr().out
    lines = invalid_lines(said_)
    assert len(lines) == 1 and re.fullmatch(r"INVALID: tf-epoch\[mpi-n2-\S+\] returned wrong results on rank 1 "
                                            r"in run T1 .*", lines[0]), said_
    [sample] = formats.load_run(out).samples()
    assert sample.valid is False and sample.info["invalid"]["T1"]["ranks"] == [1]
    assert sample.info["invalid"]["T1"]["step_ms"] == pytest.approx([2e3 * t for t in STEPS])


def test_nodes_names_a_case_whose_links_were_not_crossed_and_judges_no_node_from_it(tmp_path, monkeypatch, capsys):
    """The one way a p2p sample is invalid: the emulated links sent fewer bytes than the calls
    must (a fake run; making it real needs root and a network namespace). Exit 4, not 1, though
    the sample names a slow link: an invalid world is no evidence."""
    why = "the emulated links sent 10 bytes, fewer than the 4096 the collectives must send"

    def fake(cases, cfg):
        spec = suite.plan(cases, cfg.options)[0]
        o = _outcome(spec, cases[0], valid=False, info={"invalid_reason": why,
                                                         "slow_links": [{"nodes": ["node0", "node1"], "a": 0, "b": 1, "ratio": 3.0, "low": 2.5,
                                                                         "high": 3.5, "measure": "latency"}]})
        return formats.SuiteRun([o])

    monkeypatch.setattr(suite, "run", fake)
    out = tmp_path / "nodes.json"
    assert main(["nodes", "--nodes", "2", "--link-sizes", "4", "--json", str(out)]) == 4
    said_ = capsys.readouterr().out
    lines = invalid_lines(said_)
    assert len(lines) == 1 and lines[0].startswith("INVALID: p2p[") and f"did not measure what it claims ({why})" \
        in lines[0], said_
    assert [s.valid for s in formats.load_run(out).samples()] == [False]

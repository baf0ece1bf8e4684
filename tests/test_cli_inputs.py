"""Files handed to perfsuite's commands: every bad one is one line and exit 2, a comparison says
what it could not compare, and a baseline is never made of a failed world's first cases."""
from __future__ import annotations

import json

import pytest

from perfsuite.store import baselines, formats
from perfsuite.faces import cli
from perfsuite import suite
from perfsuite.records.errors import LaunchError, RankFailure
from perfsuite.store.formats import SuiteRun, WorldOutcome
from perfsuite.records.model import Case, Metric, Result, Sample, WorldSpec

MPI = [Case("allreduce", "mpi", 1, size_bytes=s) for s in (4, 1024)]
RING = [Case("allreduce", "ring", 2, size_bytes=s) for s in (4, 1024)]


def sample(case: Case, us: float) -> Sample:
    """A case pooled over 5 rounds: what a baseline needs to decide anything."""
    lat = tuple(us * (1 + 0.001 * k) for k in range(50))
    rounds = [us * (1 + 0.002 * k) for k in range(5)]
    return Sample(case, {"latency_us": Metric("latency_us", us, "us", False, lat)}, True, (us * 1e-6,),
                  {"round_values": {"latency_us": rounds}, "rounds": 5})


def finished(cases, us=2.0) -> WorldOutcome:
    c = cases[0]
    return WorldOutcome(WorldSpec(c.benchmark, c.transport, c.world_size, tuple(cases)),
                        Result(c.benchmark, c.transport, c.world_size, tuple(sample(x, us) for x in cases),
                               {"host": "box"}))


def failed(cases, measured=1) -> WorldOutcome:
    c = cases[0]
    return WorldOutcome(WorldSpec(c.benchmark, c.transport, c.world_size, tuple(cases)),
                        failure=RankFailure(f"allreduce[{c.transport}-n{c.world_size}]: rank 1 on box died: "
                                            "Killed (signal 9)", rank=1, partial=[sample(x, 3.0) for x in cases[:measured]],
                                            kind="signal"))


def write(path, *outcomes, interrupted=None):
    formats.write_run(path, SuiteRun(list(outcomes), {"host": "box"}, "now", interrupted))
    return str(path)


# --- compare -----------------------------------------------------------------------------------

def test_files_that_share_no_case_are_refused(tmp_path, capsys):
    a = write(tmp_path / "a.json", finished(MPI))
    b = write(tmp_path / "b.json", finished(RING))
    assert cli.main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert "share no case" in err and "allreduce[mpi-n1]" in err and "allreduce[ring-n2]" in err
    assert len(err.strip().splitlines()) == 1


def test_a_failed_world_in_the_new_file_fails_the_comparison(tmp_path, capsys):
    mixed = write(tmp_path / "m.json", finished(MPI), failed(RING))
    assert cli.main(["compare", mixed, mixed, "--max-canary-shift", "off"]) == cli.EXIT_WORLD
    out = capsys.readouterr().out
    assert f"FAILED: allreduce[ring-n2] failed in {mixed}: rank 1 on box died" in out
    assert (f"# note: allreduce[ring-n2] failed in {mixed}: rank 1 on box died: Killed (signal 9); "
            "its 1 measured case(s) are the reference, its other cases have none") in out
    clean = write(tmp_path / "c.json", finished(MPI), finished(RING))
    assert cli.main(["compare", clean, clean, "--max-canary-shift", "off"]) == 0


def test_a_failure_that_does_not_name_its_world_is_still_listed_by_world(tmp_path, capsys):
    c = RING[0]
    no_launcher = WorldOutcome(WorldSpec(c.benchmark, c.transport, c.world_size, tuple(RING)),
                               failure=LaunchError("MPI launcher 'mpiexec' not found; install an MPI"))
    skipped = WorldOutcome(WorldSpec("allreduce", "nccl", 2, (Case("allreduce", "nccl", 2, size_bytes=4),)),
                           skipped="no GPU here")
    old = write(tmp_path / "o.json", finished(MPI))
    new = write(tmp_path / "n.json", finished(MPI), no_launcher, skipped)
    assert cli.main(["compare", old, new, "--max-canary-shift", "off"]) == cli.EXIT_WORLD
    out = capsys.readouterr().out
    assert f"FAILED: allreduce[ring-n2] failed in {new}: MPI launcher 'mpiexec' not found" in out
    assert f"# note: allreduce[nccl-n2] was skipped in {new}: no GPU here" in out


def test_a_wrong_result_in_the_new_file_is_the_line_every_command_gives(tmp_path, capsys):
    """compare names the case and the ranks as run, ab and pytest do: one INVALID line, exit 4."""
    from dataclasses import replace

    old = write(tmp_path / "o.json", finished(MPI))
    o = finished(MPI)
    bad = replace(o.result.samples[1], valid=False, info={**o.result.samples[1].info, "invalid_ranks": [0]})
    new = write(tmp_path / "n.json", replace(o, result=replace(o.result, samples=(o.result.samples[0], bad))))
    assert cli.main(["compare", old, new, "--max-canary-shift", "off"]) == cli.EXIT_WORLD
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("INVALID: ")]
    assert lines == ["INVALID: allreduce[mpi-n1-1KiB] returned wrong results on rank 0 (checked against the exact "
                     "expected values): a failed world, not a measurement"], lines


def test_an_interrupted_run_fails_the_comparison(tmp_path, capsys):
    old = write(tmp_path / "o.json", finished(MPI))
    new = write(tmp_path / "n.json", finished(MPI), interrupted="SIGTERM")
    assert cli.main(["compare", old, new, "--max-canary-shift", "off"]) == cli.EXIT_WORLD
    assert "interrupted by SIGTERM" in capsys.readouterr().out


# --- baseline update ---------------------------------------------------------------------------

def test_baseline_update_says_what_it_leaves_out_and_never_records_partial_samples(tmp_path, capsys):
    mixed = write(tmp_path / "m.json", finished(MPI), failed(RING))
    root = tmp_path / "b"
    assert cli.main(["baseline", "update", "--from", mixed, "--baseline-dir", str(root), "--system", "s"]) == 0
    out = capsys.readouterr().out
    assert "# not recorded: allreduce[ring-n2] failed" in out and "--allow-partial records them" in out
    stored = {k[0] for k in baselines.load_all(root, "s")}
    assert stored == {c.name for c in MPI}
    assert cli.main(["baseline", "update", "--from", mixed, "--baseline-dir", str(root), "--system", "s",
                     "--allow-partial"]) == 0
    assert {k[0] for k in baselines.load_all(root, "s")} == {c.name for c in MPI} | {RING[0].name}


def test_baseline_update_names_each_failed_world_once(tmp_path, capsys):
    mixed = write(tmp_path / "m.json", finished(MPI), failed(RING))
    assert cli.main(["baseline", "update", "--from", mixed, "--baseline-dir", str(tmp_path / "b"),
                     "--system", "s"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("# not recorded"))
    assert line.startswith("# not recorded: allreduce[ring-n2] failed: rank 1 on box died: Killed (signal 9); ")
    assert line.count("allreduce[ring-n2]") == 1


def test_a_file_of_failed_worlds_only_names_allow_partial(tmp_path, capsys):
    bad = write(tmp_path / "f.json", failed(RING))
    assert cli.main(["baseline", "update", "--from", bad, "--baseline-dir", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "holds only partial samples of failed or interrupted worlds" in err and "--allow-partial" in err


# --- files that are not what a command reads: one line, exit 2 ----------------------------------

@pytest.mark.parametrize("content, says", [
    (b"\x00\xff\xfe binary", "not a text file"),
    (b"{truncated", "not JSON"),
    (json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": [], "datetime": "x",
                 "version": "4.0"}).encode(), "it looks like a pytest-benchmark file"),
    (json.dumps([1, 2]).encode(), "not a perfsuite file: its top level is a JSON array"),
    (b"null", "its top level is a JSON null"),
    (json.dumps({"results": []}).encode(), 'it has no "format" field'),
    (json.dumps({"format": "perfsuite-run", "version": 99}).encode(), "written by a newer perfsuite"),
    (json.dumps({"format": "perfsuite-run", "version": "1"}).encode(),
     'without a version number ("version": "1"); pass a file written by perfsuite run --json'),
])
@pytest.mark.parametrize("command", ["report", "compare", "baseline"])
def test_a_bad_input_file_is_one_line_and_exit_2(tmp_path, capsys, content, says, command):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    good = write(tmp_path / "good.json", finished(MPI))
    argv = {"report": ["report", str(bad), "--out", str(tmp_path / "r")],
            "compare": ["compare", good, str(bad)],
            "baseline": ["baseline", "update", "--from", str(bad), "--baseline-dir", str(tmp_path / "b")]}[command]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_a_missing_input_and_a_bad_baseline_file_are_exit_2_too(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nope.json")]) == 2
    folder = tmp_path / "b" / "s"
    folder.mkdir(parents=True)
    (folder / "allreduce.json").write_bytes(b"\x00\xff")
    assert cli.main(["baseline", "show", "--baseline-dir", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "allreduce.json: not a text file" in err


@pytest.mark.parametrize("content, says", [(b"\x00\xff", "not a text file"), (b'{"format": "perfs', "not valid JSON")])
@pytest.mark.parametrize("gate", ["--compare", "--baseline-update"])
def test_a_bad_baseline_file_stops_a_judging_run_before_any_world(tmp_path, capsys, monkeypatch, content, says, gate):
    folder = tmp_path / "b" / "s"
    folder.mkdir(parents=True)
    (folder / "allreduce.json").write_bytes(content)
    monkeypatch.setattr(suite, "run", lambda *a, **k: pytest.fail("a world ran before the baselines were read"))
    argv = ["run", gate, "--baseline-dir", str(tmp_path / "b"), "--system", "s", "--transports", "mpi",
            "--world-sizes", "1", "--sizes", "4", "--json", str(tmp_path / "r.json")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"allreduce.json: {says}" in err and "re-record it" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


@pytest.mark.world
def test_a_real_failed_world_is_neither_recorded_nor_passed_by_compare(tmp_path, monkeypatch, capsys,
                                                                       no_leftover_ranks):
    mixed = str(tmp_path / "mixed.json")
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "kill@1@1024")  # rank 1 of the 2-rank world, at 1 KiB
    # 5 rounds, what a baseline needs at least (contention is not this test's business)
    assert cli.main(["run", "--transports", "mpi", "--world-sizes", "1,2", "--sizes", "4,1024", "--rounds", "5",
                     "--max-contention", "off", "--iters", "5", "--warmup", "1", "--json", mixed]) == cli.EXIT_WORLD
    monkeypatch.delenv("PERFSUITE_TEST_FAULT")
    capsys.readouterr()
    root = tmp_path / "b"
    assert cli.main(["baseline", "update", "--from", mixed, "--baseline-dir", str(root), "--system", "s"]) == 0
    out = capsys.readouterr().out
    assert "# not recorded: allreduce[mpi-n2] failed: rank 1 on " in out and "--allow-partial records them" in out
    assert {k[0] for k in baselines.load_all(root, "s")} == {"allreduce[mpi-n1-4B]", "allreduce[mpi-n1-1KiB]"}
    assert cli.main(["compare", mixed, mixed, "--max-canary-shift", "off"]) == cli.EXIT_WORLD
    assert f"FAILED: allreduce[mpi-n2] failed in {mixed}: rank 1 on " in capsys.readouterr().out

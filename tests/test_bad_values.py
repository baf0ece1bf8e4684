"""Every command's value flags: a bad value is one line on stderr naming it, exit 2, no
traceback, and no world started (docs/running.md: "A bad value is one line naming it")."""
from __future__ import annotations

from pathlib import Path

import pytest

from perfsuite.faces import cli
from perfsuite import suite
from perfsuite.store import formats
from perfsuite.store.formats import SuiteRun, WorldOutcome
from perfsuite.launch import world
from perfsuite.records.model import Case, Metric, Result, Sample, WorldSpec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "r.json"  # a results file, written by the fixture below (compare, report read it)

# (argv, the bad value the line must name). Each command is here at least once; the shared
# options once per face that parses them (run, ab, bisect, overhead, nodes, stalls).
BAD = [
    (["run", "--transports", "nope"], "nope"),
    (["run", "--world-sizes", "0"], "'0'"),
    (["run", "--benchmarks", "nope"], "nope"),
    (["run", "--sizes", "4,big"], "big"),
    (["run", "--alpha", "2"], "'2'"),
    (["run", "--tolerance", "lots"], "lots"),
    (["run", "--max-rounds", "0"], "'0'"),
    (["run", "--launcher", "nope"], "nope"),
    (["run", "--timeout", "-1"], "-1"),
    (["run", "--dtypes", "int3"], "int3"),
    (["run", "--emulated-network", "fast"], "fast"),
    (["run", "--emulated-network", "1gbit,node2=slow"], "slow"),
    (["run", "--models", "nope"], "nope"),  # no chosen benchmark reads it: still checked
    (["run", "--batches", "0"], "'0'"),
    (["run", "--stalls", "small-cnn"], "perfsuite stalls --models small-cnn"),  # argparse's own refusal
    (["ab", "--transports", "nope"], "nope"),
    (["ab", "--a-transport", "nope"], "nope"),
    (["ab", "--max-pairs", "0"], "'0'"),
    (["ab", "--budget", "soon"], "soon"),
    (["ab", "--alpha", "2"], "'2'"),
    (["bisect", "--good", "HEAD~1", "--bad", "HEAD", "--transports", "nope"], "nope"),
    (["bisect", "--good", "HEAD~1", "--bad", "HEAD", "--world-sizes", "0"], "'0'"),
    (["overhead", "--transports", "nope"], "nope"),
    (["overhead", "--sizes", "big"], "big"),
    (["nodes", "--nodes", "0"], "'0'"),
    (["nodes", "--nodes", "2", "--link-sizes", "big"], "big"),
    (["stalls", "--models", "nope"], "nope"),
    (["stalls", "--world-sizes", "0"], "'0'"),
    (["stalls", "--emulated-disk", "fast"], "fast"),
    (["detection-power", "--transports", "nope"], "nope"),
    (["detection-power", "--small", "tiny"], "tiny"),
    (["detection-power", "--blocks", "-1"], "-1"),
    (["validity", "--mode", "bogus"], "bogus"),
    (["validity", "--runs", "0"], "'0'"),
    (["validity", "--within", "x"], "'x'"),
    (["compare", RESULTS, RESULTS, "--tolerance", "lots"], "lots"),
    (["compare", RESULTS, RESULTS, "--alpha", "2"], "'2'"),
    (["report", RESULTS, "--print", "bogus"], "bogus"),
    (["history", "--asv-config", str(ROOT / "asv.conf.json"), "--threshold", "x"], "'x'"),
    (["asv-offline", "--asv-config", "missing.json"], "missing.json"),
    (["baseline", "bogus"], "bogus"),
    (["baseline", "update", "--from", "missing.json"], "missing.json"),
    (["study", "missing.toml"], "missing.toml"),
    (["transports", "--benchmarks", "nope"], "nope"),
    (["capture", "--summary", "missing-trace"], "missing-trace"),
]


@pytest.fixture
def no_world(monkeypatch, tmp_path):
    def refuse(*a, **k):
        raise AssertionError("a world started on a bad value")

    for where, name in ((suite, "run_one"), (suite, "run_world"), (world, "run_world")):
        monkeypatch.setattr(where, name, refuse)
    monkeypatch.setattr(suite.Rounds, "step", refuse)
    case = Case("allreduce", "mpi", 2, size_bytes=4)
    sample = Sample(case, {"latency_us": Metric("latency_us", 2.0, "us", False, (2.0, 2.1, 1.9))}, True)
    formats.write_run(tmp_path / RESULTS, SuiteRun([WorldOutcome(WorldSpec("allreduce", "mpi", 2, (case,)),
                                                                 Result("allreduce", "mpi", 2, (sample,)))],
                                                   {"host": "box"}, "now"))
    monkeypatch.chdir(tmp_path)


def test_every_command_has_a_bad_value_here():
    assert {argv[0] for argv, _ in BAD} == set(cli.COMMANDS)


@pytest.mark.parametrize("argv,named", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_value_is_one_line_naming_it_and_exit_2(argv, named, no_world, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as stop:  # argparse's refusals exit from parse_args
        rc = stop.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and named in lines[0], err
    assert "Traceback" not in err and lines[0].startswith(f"perfsuite {argv[0]}: error: "), err

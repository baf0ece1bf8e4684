"""The stored-format layer: one check with a hint, migrations on load, and the run file's one
reader giving back everything a run held (results, failed worlds with their partial samples and
logs, skipped worlds with their reasons)."""
from __future__ import annotations

import json

import pytest

from perfsuite.store import formats, migrations
from perfsuite.reading import report
from perfsuite.records.errors import ConfigError, FormatError, LaunchError, RankFailure
from perfsuite.store.formats import SuiteRun, WorldOutcome
from perfsuite.records.model import Case, Metric, Result, Sample, WorldSpec


def sample(case: Case, us: float) -> Sample:
    return Sample(case, {"latency_us": Metric("latency_us", us, "us", False, (us, us * 1.1))},
                  True, (us * 1e-6,), {"size_bytes": case.size_bytes})


def a_run() -> SuiteRun:
    ok = [Case("allreduce", "mpi", 2, size_bytes=s) for s in (4, 1024)]
    bad = [Case("allreduce", "ring", 2, size_bytes=s, dtype="float64") for s in (8, 1024)]
    skipped = [Case("allreduce", "nccl", 2, size_bytes=4)]
    failure = RankFailure("allreduce[ring-n2-float64]: rank 1 on box died: Killed (signal 9)",
                          rank=1, case="allreduce[ring-n2-float64]", stderr_tail="boom",
                          partial=[sample(bad[0], 20.0)], kind="signal", logs={"rank 1": "boom"})
    return SuiteRun([
        WorldOutcome(WorldSpec("allreduce", "mpi", 2, tuple(ok)),
                     Result("allreduce", "mpi", 2, tuple(sample(c, 1.5) for c in ok), {"host": "box"})),
        WorldOutcome(WorldSpec("allreduce", "ring", 2, tuple(bad)), failure=failure),
        WorldOutcome(WorldSpec("allreduce", "nccl", 2, tuple(skipped)), skipped="no NVIDIA driver here"),
        WorldOutcome(WorldSpec("tf-epoch", "grpc", 2, (Case("tf-epoch", "grpc", 2, model="small-cnn", batch=8),)),
                     failure=LaunchError("mpiexec not found")),
    ], {"host": "launcher"}, "2026-11-23T00:00:00+00:00")


def test_a_run_reads_back_whole(tmp_path):
    run = a_run()
    path = formats.write_run(tmp_path / "r.json", run)
    back = formats.load_run(path)
    assert back.to_dict() == run.to_dict()
    (skip,) = back.to_dict()["skipped"]
    assert (skip["world"], skip["reason"]) == ("allreduce[nccl-n2]", "no NVIDIA driver here")
    assert skip["cases"] == ["allreduce[nccl-n2-4B]"]
    ring, tf = back.failures
    assert isinstance(ring.failure, RankFailure) and ring.failure.rank == 1 and ring.failure.kind == "signal"
    assert ring.failure.logs == {"rank 1": "boom"} and [s.case.size_bytes for s in ring.samples()] == [8]
    assert ring.world == "allreduce[ring-n2-float64]" and isinstance(tf.failure, LaunchError)
    assert back.machine == {"host": "box"}  # rank 0's fingerprint before the launcher's
    assert not back.ok and len(back.samples()) == 3
    # A report of the file and of the live run is the same page.
    assert report.ReportRun.from_suite_run(back, "r").failures == report.ReportRun.from_suite_run(run, "r").failures


def test_an_older_v1_run_file_names_worlds_by_label_only(tmp_path):
    d = a_run().to_dict()
    for entry in d["failures"] + d["skipped"]:
        for key in ("benchmark", "transport", "world_size", "case_fields"):
            entry.pop(key, None)
    back = formats.run_from_dict(d, "old.json")
    assert [(o.spec.benchmark, o.spec.transport, o.spec.world_size) for o in back.failures + back.skipped] == [
        ("allreduce", "ring", 2), ("tf-epoch", "grpc", 2), ("allreduce", "nccl", 2)]


def test_a_migration_reads_an_old_version_and_none_means_a_hint(monkeypatch):
    v = formats.VERSIONS[formats.RUN]  # the current version, made old by a next one
    old = {"format": formats.RUN, "version": v, "results": []}
    monkeypatch.setitem(formats.VERSIONS, formats.RUN, v + 1)
    with pytest.raises(FormatError, match=rf"perfsuite-run version {v} is not supported \(this perfsuite reads "
                                          rf"version {v + 1}\); re-run the suite"):
        formats.check_format(dict(old), formats.RUN, "old.json")
    monkeypatch.setitem(migrations.MIGRATIONS, (formats.RUN, v), lambda d: {**d, "created": "migrated"})
    d = formats.check_format(dict(old), formats.RUN, "old.json")
    assert d["version"] == v + 1 and d["created"] == "migrated"
    with pytest.raises(FormatError, match=f"version {v + 2} .*upgrade perfsuite"):
        formats.check_format({**old, "version": v + 2}, formats.RUN, "new.json")


@pytest.mark.parametrize("content,error,match", [
    (b"\x00\xff\xfe", FormatError, "not a text file; pass a file written by perfsuite run --json"),
    (b"{not json", FormatError, "not JSON"),
    (b'{"format": "perfsuite-baseline", "version": 1}', FormatError, "not a perfsuite-run file"),
    (b'{"format": "perfsuite-run", "version": 1, "results": [{"benchmark": "x"}]}', FormatError,
     "malformed perfsuite-run file"),
])
def test_bad_run_files_are_one_line(tmp_path, content, error, match):
    path = tmp_path / "r.json"
    path.write_bytes(content)
    with pytest.raises(error, match=match) as info:
        formats.load_run(path)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="cannot read results file"):
        formats.load_run(tmp_path / "missing.json")


def test_atomic_write_leaves_the_old_file_or_the_new_one(tmp_path, monkeypatch):
    path = formats.write_json(tmp_path / "sub" / "f.json", {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(formats.os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        formats.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in path.parent.iterdir()] == ["f.json"]  # no temporary file left


def test_an_old_ab_file_reads_as_the_current_version():
    """An AB 3 file (no "stop_on_regression") and an AB 2 file (arms without "ref") both read as
    the current version, saying what they never recorded as its default."""
    three = {"format": formats.AB, "version": 3, "arms": {"a": {"ref": "HEAD~1 (abc)"}, "b": {"ref": None}},
             "verdicts": []}
    d = formats.check_format(json.loads(json.dumps(three)), formats.AB, "ab.json")
    assert d["version"] == formats.VERSIONS[formats.AB] and d["stop_on_regression"] is False
    two = {"format": formats.AB, "version": 2, "arms": {"a": {}, "b": {}}, "verdicts": []}
    d = formats.check_format(two, formats.AB, "ab.json")
    assert d["arms"]["a"]["ref"] is None and d["stop_on_regression"] is False


def test_every_migration_is_of_a_known_format_to_its_next_version():
    """migrations.py names the formats as strings (formats.py reads it, so it reads nothing):
    each migration is of a format formats.py versions, from a version below its current one."""
    assert migrations.MIGRATIONS and all(fmt in formats.VERSIONS and 0 < v < formats.VERSIONS[fmt]
                                         for fmt, v in migrations.MIGRATIONS)
    assert (formats.BASELINE, formats.VERSIONS[formats.BASELINE] - 1) in migrations.MIGRATIONS

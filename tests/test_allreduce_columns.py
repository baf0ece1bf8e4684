"""The allreduce table's time, algbw and busbw are one statistic (nccl-tests' habit), OMB's
per-rank means keep their own names, and results files written before the rename still read."""
from __future__ import annotations

import json

import numpy as np
import pytest

from perfsuite.store import formats
from perfsuite.bench import allreduce as bench_allreduce
from perfsuite.kernels.collectives.allreduce import summarize
from perfsuite.records.model import Case, Result

CASE = Case("allreduce", "mpi", 2, size_bytes=4 << 10, dtype="float32")


def skewed_times() -> np.ndarray:
    """Each rank slow in calls of its own: every rank's mean lies above the world's p50 (the
    README's 4 B row once printed a p50 of 0.24 below a min of 0.26)."""
    t = np.full((100, 2), 10e-6)
    t[:10, 0] = t[10:20, 1] = 100e-6
    return t


def row_of(table: str) -> dict[str, float]:
    head = table.splitlines()[1].lstrip("#").split()
    row = next(line for line in table.splitlines() if not line.startswith("#")).split()
    return {h: float(v) for h, v in zip(head, row) if h not in ("type", "redop", "valid")}


def test_time_algbw_and_busbw_are_one_statistic_and_the_table_says_which():
    s = summarize(CASE, skewed_times(), True, 100, 10, False)
    i = s.info
    assert i["latency_us"] == s.metrics["latency_us"].value == i["p50_us"] == pytest.approx(10.0)
    assert i["omb_min_us"] == pytest.approx(19.0) and i["omb_avg_us"] == pytest.approx(19.0)
    assert not {"latency_min_us", "latency_max_us"} & set(i)
    table = bench_allreduce.table(Result("allreduce", "mpi", 2, (s,)))
    row = row_of(table)
    assert row["time(us)"] == pytest.approx(10.0)
    # algbw and busbw are the printed time's: size / time, and x 2(n-1)/n = 1 at two ranks
    assert row["algbw(GB/s)"] == pytest.approx(CASE.size_bytes / (row["time(us)"] * 1e-6) / 1e9, rel=2e-3)
    assert row["busbw(GB/s)"] == row["algbw(GB/s)"]
    # no column of another statistic that could sit above the time without a word why
    assert not any("min" in h or "max" in h or "avg" in h for h in row)
    assert bench_allreduce.STATISTIC_LINE in table.splitlines()
    assert "p50" in bench_allreduce.STATISTIC_LINE and "slowest rank" in bench_allreduce.STATISTIC_LINE


def test_omb_layout_and_report_rows_read_their_own_names():
    s = summarize(CASE, skewed_times(), True, 100, 10, False)
    r = Result("allreduce", "mpi", 2, (s,))
    omb = bench_allreduce.omb_table(r).splitlines()
    assert omb[-1].split()[:4] == ["4096", "19.00", "19.00", "19.00"]
    head, rows = bench_allreduce.report_rows(r)
    assert head[1] == "time p50(us)" and rows[0][1] == "10.00"
    assert rows[0][3] == f"{s.info['algbw_GBps']:.3f}"


#: One 2-rank 4 B sample as perfsuite 4d481c6 wrote it (its summarize on the times above, 5
#: calls): info's latency_us was OMB's mean of per-rank means (28), its p50_us 10.
V1_SAMPLE = json.loads("""
{"case": {"benchmark": "allreduce", "transport": "mpi", "world_size": 2, "size_bytes": 4, "dtype": "float32",
 "model": null, "batch": null, "variant": ""}, "valid": true,
 "metrics": {"latency_us": {"name": "latency_us", "value": 10.0, "unit": "us", "higher_is_better": false,
   "samples": [10.0, 100.0, 100.0, 10.0, 10.0]},
  "busbw_GBps": {"name": "busbw_GBps", "value": 0.0004, "unit": "GB/s", "higher_is_better": true,
   "samples": [0.0004, 4e-05, 4e-05, 0.0004, 0.0004]}},
 "times_s": [1e-05, 0.0001, 0.0001, 1e-05, 1e-05],
 "info": {"transport": "mpi", "world_size": 2, "size_bytes": 4, "count": 1, "dtype": "float32", "op": "sum",
  "inplace": false, "iters": 5, "warmup": 1, "latency_us": 28.000000000000004, "latency_min_us": 28.000000000000004,
  "latency_max_us": 28.000000000000004, "p50_us": 10.0, "p99_us": 100.0, "algbw_GBps": 0.0004,
  "busbw_GBps": 0.0004, "valid": true, "nodes": ["rank0", "rank1"]}}
""")


def v1_run_file() -> dict:
    result = {"format": formats.RESULT, "version": 1, "benchmark": "allreduce", "transport": "mpi",
              "world_size": 2, "samples": [V1_SAMPLE]}
    tf = {"case": {"benchmark": "tf-epoch", "transport": "mpi", "world_size": 2, "model": "small-cnn", "batch": 8},
          "valid": True, "metrics": {}, "info": {"latency_us": 5.0, "p50_us": 1.0}}
    return {"format": formats.RUN, "version": 1, "created": "2026-11-24", "fingerprint": {},
            "results": [result, {"benchmark": "allreduce", "transport": "ring", "world_size": 2,
                                 "samples": [{**V1_SAMPLE, "case": {**V1_SAMPLE["case"], "transport": "ring"}}]}],
            "partial": [{"world": "allreduce[mpi-n3]", "samples": [V1_SAMPLE, tf]}],
            "failures": [{"world": "allreduce[mpi-n3]", "message": "rank 1 raised X", "type": "RankFailure"}]}


def test_a_version_1_results_file_reads_with_the_new_names(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(v1_run_file()))
    run = formats.load_run(path)
    allreduce = [s for s in run.samples() if s.case.benchmark == "allreduce"]
    assert len(allreduce) == 3  # a stamped result, an unstamped one and a partial sample
    for s in allreduce:
        assert s.info["latency_us"] == s.info["p50_us"] == s.metrics["latency_us"].value == 10.0
        assert s.info["omb_avg_us"] == s.info["omb_min_us"] == s.info["omb_max_us"] == pytest.approx(28.0)
        assert not {"latency_min_us", "latency_max_us"} & set(s.info)
    (tf,) = [s for s in run.samples() if s.case.benchmark == "tf-epoch"]
    assert tf.info == {"latency_us": 5.0, "p50_us": 1.0}  # not allreduce's: left as it was
    assert row_of(bench_allreduce.table(run.results[0]))["time(us)"] == 10.0
    assert formats.check_format(v1_run_file(), formats.RUN, "old.json")["version"] == formats.VERSIONS[formats.RUN]
    # A result of either version reads the same; the current one is left alone.
    old = formats.load_result(v1_run_file()["results"][0], "old.json")
    assert old.samples[0].info == run.results[0].samples[0].info
    now = formats.dump_result(old)
    assert formats.load_result(json.loads(json.dumps(now)), "new.json").samples[0].info == old.samples[0].info

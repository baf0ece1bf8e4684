"""Every collective of ``perfsuite.collectives`` as a benchmark of its own: the records against
nccl-tests' definitions (counts, busbw factors) and exact values in every type, then real
2-rank MPI worlds of every collective (native loop and mpi4py loop, in place and out of place,
every op and a root), the skips with their reasons, and a corrupt rank caught in each."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import perfsuite, said
from perfsuite import bench, collectives, transports
from perfsuite.collectives import as_type, rank_values, reduced
from perfsuite.records.model import DTYPES, Case

NAMES = collectives.NAMES
OTHERS = NAMES[1:]
EXACT = ("float32", "float64", "float16", "bfloat16", "int32")


def test_every_collective_is_a_benchmark_with_nccl_tests_factors():
    assert bench.names()[:7] == list(NAMES)
    # nccl-tests doc/PERFORMANCE.md: allreduce 2(n-1)/n; all_gather, reduce_scatter, alltoall
    # (n-1)/n; broadcast, reduce 1; one rank moves nothing over a bus; alltoallv.cu (n-1)/n
    want = {"allreduce": 1.5, "all_gather": 0.75, "reduce_scatter": 0.75, "alltoall": 0.75,
            "broadcast": 1.0, "reduce": 1.0, "alltoallv": 0.75}
    for name in NAMES:
        c = collectives.get(name)
        assert c.busbw_factor(4) == want[name] and c.busbw_factor(1) == 0.0, name
        assert c.wire_bytes(100, 4, 2) == 2 * 100 * (6 if name == "allreduce" else 3)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_counts_and_sizes_are_nccl_tests(n):
    """getCollByteCount: all_gather sends c/n and gathers (c/n) n; reduce_scatter the reverse;
    alltoall c/n per peer; the size column is the larger buffer, count the call's own count."""
    c = 1 << 10  # elements of float32 in a 4 KiB case
    ag, rs, a2a = (collectives.get(x) for x in ("all_gather", "reduce_scatter", "alltoall"))
    assert ag.buffers(4096, "float32", n) == (c // n, c // n * n)
    assert rs.buffers(4096, "float32", n) == (c // n * n, c // n)
    assert a2a.sizes(4096, "float32", n) == {"size_bytes": c // n * n * 4, "count": c // n,
                                             "omb_size_bytes": c // n * 4}
    assert ag.sizes(4096, "float32", n)["count"] == c // n
    # A size below one element per rank is one element per rank (nccl-tests' would be 0 bytes).
    assert ag.buffers(4, "float32", n) == (1, n)
    assert collectives.get("broadcast").buffers(4, "float32", n) == (1, 1)


@pytest.mark.parametrize("dtype", EXACT)
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_every_reduction_is_exact_in_every_type(dtype, n):
    """What the ranks send, reduced in the type itself (bfloat16 through float32 truncated to
    its 16 bits), equals the record's exact expectation: so an exact comparison never fails a
    right answer."""
    count = 64
    for op in collectives.OPS:
        if op == "avg" and dtype == "int32":
            continue
        sent = [as_type(rank_values(r, count, op), dtype) for r in range(n)]
        floats = [bits_to_float(s) if dtype == "bfloat16" else s.astype(np.float64) for s in sent]
        got = {"sum": sum(floats), "prod": np.prod(floats, axis=0), "min": np.min(floats, axis=0),
               "max": np.max(floats, axis=0), "avg": sum(floats) / n}[op]
        assert np.array_equal(as_type(got, dtype), as_type(reduced(n, count, op), dtype)), (op, dtype, n)


def bits_to_float(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def test_alltoall_chunks_name_their_sender_and_receiver():
    a2a = collectives.get("alltoall")
    n, count = 4, 4 * 8
    sent = [a2a.inputs(r, n, count, "sum", 0) for r in range(n)]
    for r in range(n):
        got = np.concatenate([sent[q][r * 8:(r + 1) * 8] for q in range(n)])  # what alltoall delivers
        assert np.array_equal(got, a2a.expected(r, n, count, "sum", 0))
    chunks = {tuple(s[p * 8:(p + 1) * 8]) for s in sent for p in range(n)}
    assert len(chunks) == n * n  # a misrouted chunk cannot look right


def test_case_names_carry_op_and_root_and_read_back():
    sel = [Case("reduce", "mpi", 2, 4, variant=collectives.variant("max", 1)),
           Case("allreduce", "mpi", 2, 4, dtype="bfloat16", variant=collectives.variant("avg"))]
    assert [c.name for c in sel] == ["reduce[mpi-n2-4B-max-root1]", "allreduce[mpi-n2-4B-bfloat16-avg]"]
    assert collectives.op_root(sel[0].variant) == ("max", 1) and collectives.op_root("") == ("sum", 0)
    assert DTYPES["bfloat16"] == 2


def test_the_transport_matrix_lists_every_collective_and_why_not():
    assert transports.collectives_of("mpi") == list(NAMES)
    assert transports.collectives_of("torch-gloo") == list(NAMES)
    for design in ("ring", "gpu-ring", "tf-grpc"):
        assert transports.collectives_of(design) == ["allreduce"]
        assert "allreduce design" in transports.unavailable_reason(design, "all_gather")


def run_json(tmp_path, *args, **env) -> tuple:
    r = perfsuite("run", "--transports", "mpi", "--world-sizes", "2", "--iters", "30", "--warmup", "3",
                  "--max-contention", "off", "--json", "out.json", *args, cwd=tmp_path, **env)
    data = json.loads((tmp_path / "out.json").read_text()) if (tmp_path / "out.json").exists() else {}
    return r, data


def samples(data: dict) -> list[dict]:
    return [s for w in data.get("results", []) for s in w.get("samples", [])]


@pytest.mark.world
@pytest.mark.parametrize("timing", ["auto", "python"])
def test_every_collective_on_mpi_is_valid_with_busbw(tmp_path, timing, no_leftover_ranks):
    """Both loops (the C loop, the mpi4py loop) time each collective, and every rank's result is
    the exact one: at 4 B (one element per rank) and at 64 KiB."""
    r, data = run_json(tmp_path, "--benchmarks", ",".join(OTHERS), "--sizes", "4,64KiB", "--host-timing", timing)
    assert r.returncode == 0, said(r)
    got = samples(data)
    assert sorted({s["case"]["benchmark"] for s in got}) == sorted(OTHERS)
    assert len(got) == 2 * len(OTHERS) and all(s["valid"] for s in got), said(r)
    for s in got:
        i = s["info"]
        assert i["timing"] == ("native" if timing == "auto" else "python"), i
        assert i["invalid_ranks"] == [] and i["busbw_GBps"] > 0
        factor = collectives.get(s["case"]["benchmark"]).busbw_factor(2)
        assert i["busbw_GBps"] == pytest.approx(i["algbw_GBps"] * factor)
    for name in OTHERS:  # each table heads with its collective and its own factor
        assert re.search(rf"^# {name}  transport=mpi  world_size=2", r.stdout, re.M), said(r)
    assert "busbw = algbw x (n-1)/n" in r.stdout and "busbw = algbw x 1;" in r.stdout


@pytest.mark.world
def test_ops_roots_and_in_place_run_or_skip_with_the_reason(tmp_path, no_leftover_ranks):
    r, data = run_json(tmp_path, "--benchmarks", "reduce_scatter,reduce,broadcast,all_gather,alltoall",
                       "--ops", "max,prod,avg", "--root", "1", "--inplace", "--sizes", "4,4KiB")
    assert r.returncode == 0, said(r)
    got = {(s["case"]["benchmark"], s["case"]["variant"], s["case"]["size_bytes"]): s for s in samples(data)}
    # in place: all_gather (its chunk inside recv), broadcast (one buffer), reduce (only the fresh
    # call is checked: the root accumulates); each op of reduce and the root 1
    assert {k[:2] for k in got} == {("all_gather", ""), ("broadcast", "root1"), ("reduce", "max-root1"),
                                    ("reduce", "prod-root1")}
    assert all(s["valid"] and s["info"]["inplace"] for s in got.values())
    assert got[("reduce", "max-root1", 4)]["info"]["valid_timed"] is None
    assert got[("all_gather", "", 4096)]["info"]["valid_timed"] is True
    out = r.stdout  # the summary: one line per reason, the worlds it skipped named in it
    assert ("# skipped 3 worlds (6 cases) reduce_scatter[mpi-n2-max, mpi-n2-prod, mpi-n2-avg]: reduce_scatter has "
            "no in-place form here") in out
    assert "# skipped 1 world (2 cases) alltoall[mpi-n2]: alltoall has no in-place form here" in out
    assert "# skipped 1 world (2 cases) reduce[mpi-n2-avg-root1]: MPI has no avg reduction" in out


@pytest.mark.world
def test_bfloat16_on_an_mpi_without_it_is_skipped_with_the_reason(tmp_path):
    r, data = run_json(tmp_path, "--benchmarks", "allreduce", "--dtypes", "bfloat16,float16", "--sizes", "4")
    assert r.returncode == 0, said(r)
    assert [s["case"]["dtype"] for s in samples(data)] == ["float16"]
    assert "# skipped 1 world (1 case) allreduce[mpi-n2-bfloat16]: this MPI defines no MPI_BFLOAT16_T" in r.stdout


@pytest.mark.world
def test_a_root_outside_the_world_is_bad_input(tmp_path):
    r, _ = run_json(tmp_path, "--benchmarks", "reduce", "--root", "2", "--sizes", "4")
    assert r.returncode == 2 and "root 2 is not a rank of world size 2; give --root 0..1" in r.stderr, said(r)


@pytest.mark.world
def test_a_corrupt_rank_is_caught_in_every_collective(tmp_path, no_leftover_ranks):
    """Rank 1's result off by one (reduce: rank 1's send, the buffer it checks as a non-root):
    every collective's world fails, exit 4, each line naming its case and rank 1."""
    r, data = run_json(tmp_path, "--benchmarks", ",".join(NAMES), "--sizes", "4",
                       PERFSUITE_TEST_FAULT="corrupt@1")
    assert r.returncode == 4, said(r)
    lines = [line for line in (r.stdout + r.stderr).splitlines() if "INVALID: " in line]
    for name in NAMES:
        assert any(re.search(rf"INVALID: {name}\[mpi-n2-4B\] returned wrong results on rank 1\b", line)
                   for line in lines), (name, said(r))
    assert len(samples(data)) == len(NAMES) and not any(s["valid"] for s in samples(data))
    assert all(s["info"]["invalid_ranks"] == [1] for s in samples(data))


@pytest.mark.world
def test_pytest_selects_a_collective_by_its_name():
    """`pytest benchmarks --benchmark-only -k all_gather` collects all_gather's cases alone."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "pytest", str(root / "benchmarks"), "--benchmark-only",
                        "--collect-only", "-q", "-k", "all_gather", "--perf-transports", "mpi,ring",
                        "--perf-sizes", "4,1MiB", "-p", "no:cacheprovider"],
                       capture_output=True, text=True, timeout=120, cwd=root)
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    assert ids == ["benchmarks/test_collectives.py::test_all_gather[mpi-n2-4B]",
                   "benchmarks/test_collectives.py::test_all_gather[mpi-n2-1MiB]",
                   "benchmarks/test_collectives.py::test_all_gather[ring-n2-4B]",
                   "benchmarks/test_collectives.py::test_all_gather[ring-n2-1MiB]"], r.stdout + r.stderr


@pytest.mark.world
@pytest.mark.parametrize("inplace", [False, True])
def test_device_batches_rotate_through_copies_of_the_buffers(monkeypatch, no_leftover_ranks, inplace):
    """nccl-tests shifts its buffers each call within the sweep's largest: a device batch cycles
    through copies of the case's buffers (64 at most), every copy filled, results exact. Run on
    host arrays (``array_module=numpy``) through mpi-staged, a device transport's code."""
    import dataclasses

    from perfsuite import suite
    from perfsuite.bench.allreduce import allreduce_cases
    from perfsuite.kernels.collectives.buffers import MAX_COPIES
    from perfsuite.launch.launchers import LaunchConfig
    from perfsuite.verdicts.rounds import RoundsPolicy

    spec = transports.REGISTRY["mpi-staged"]
    monkeypatch.setitem(transports.REGISTRY, "mpi-staged", dataclasses.replace(spec, check=lambda: None))
    for name in ("all_gather", "reduce", "broadcast") if inplace else OTHERS:
        (world,) = suite.plan(allreduce_cases(["mpi-staged"], [2], [8, 256, 4096], benchmark=name),
                              {"array_module": "numpy", "copy_bytes": 1 << 20, "iters": 40, "warmup": 2,
                               "device_timing": "batch", "inplace": inplace})
        out = suite.run_one(world, suite.SuiteConfig(launch=LaunchConfig(), timeout=90,
                                                     rounds=RoundsPolicy(max_contention=None, retries=0)))
        assert out.result is not None, out.failure or out.skipped
        got = {s.case.size_bytes: s for s in out.result.samples}
        assert all(s.valid and s.info["valid_fresh"] for s in got.values()), name
        assert got[256].info["buffer_copies"] == 4096 // 256  # nccl-tests' steps
        assert got[8].info["buffer_copies"] == MAX_COPIES  # 512 steps, capped
        assert "buffer_copies" not in got[4096].info


@pytest.mark.world
def test_ab_runs_a_collective_and_stops_at_an_arm_with_wrong_results(tmp_path, no_leftover_ranks):
    """`perfsuite ab --benchmarks all_gather`: both arms run the collective's worlds; arm B's rank 1
    corrupt, the first pair ends it, exit 4, the line naming the arm, case and rank."""
    r = perfsuite("ab", "--benchmarks", "all_gather", "--transports", "mpi", "--world-sizes", "2", "--sizes", "4",
                  "--iters", "20", "--warmup", "2", "--b-env", "PERFSUITE_TEST_FAULT=corrupt@1",
                  "--max-pairs", "4", "--json", "ab.json", cwd=tmp_path)
    assert r.returncode == 4, said(r)
    assert re.search(r"INVALID: arm B: all_gather\[mpi-n2-4B\] returned wrong results on rank 1 in pair 1",
                     r.stdout + r.stderr), said(r)
    d = json.loads((tmp_path / "ab.json").read_text())
    assert d["pairs"] == 1 and list(d["values"]) == ["all_gather[mpi-n2-4B]"]

"""fp8 (float8_e4m3, float8_e5m2) without a GPU: the encoder against ml_dtypes' every bit
pattern, the records' fp8 values reduced as NCCL reduces them (each partial sum rounded to fp8, in
any order) equal to the exact expectation up to the ranks ``inexact`` allows, the names
``--dtypes`` takes, NCCL's enum values and what each transport says it lacks; and on a real
2-rank ``mpi`` world, an fp8 case skipped with its reason, not failed."""
from __future__ import annotations

import types

import numpy as np
import pytest

from conftest import perfsuite, said
from perfsuite import collectives
from perfsuite.bench.allreduce import parse_dtypes
from perfsuite.collectives import FP8_EXACT_RANKS, as_type, fp8_bits, fp8_values, inexact
from perfsuite.records.errors import ConfigError
from perfsuite.records.model import DTYPES, FP8, storage_dtype
from perfsuite.transports import nccl
from perfsuite.transports.base import AllreduceTransport, Call
from perfsuite.transports.torch.allreduce import torch_lacks

ML = {"float8_e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}  # ml_dtypes' names


def ml_type(dtype: str):
    return getattr(pytest.importorskip("ml_dtypes"), ML[dtype])


@pytest.mark.parametrize("dtype", FP8)
def test_the_encoder_is_ml_dtypes_on_every_finite_value(dtype):
    bits = np.arange(256, dtype=np.uint8)
    theirs = bits.view(ml_type(dtype)).astype(np.float64)
    finite = np.isfinite(theirs)
    assert np.array_equal(fp8_bits(theirs[finite], dtype), bits[finite])  # -0 and subnormals too
    ours = fp8_values(bits, dtype)
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))
    assert np.array_equal(ours[~np.isnan(ours)], theirs[~np.isnan(theirs)])
    assert as_type(np.array([0.0, 1.0, 2.0]), dtype).dtype == np.dtype(storage_dtype(dtype)) == np.uint8


@pytest.mark.parametrize("dtype,value", [("float8_e4m3", 17.0), ("float8_e4m3", 480.0),
                                         ("float8_e5m2", 9.0), ("float8_e5m2", 1e6),
                                         ("float8_e4m3", float("nan"))])
def test_a_value_fp8_cannot_hold_raises_rather_than_rounds(dtype, value):
    with pytest.raises(ValueError, match=f"is not exactly a {dtype}"):
        fp8_bits(np.array([1.0, value]), dtype)


def nccl_reduce(sent: list[np.ndarray], op: str, dtype: str, order: list[int]) -> np.ndarray:
    """NCCL's fp8 reduction (reduce_kernel.h: through half, rounded to fp8 after each step; avg
    premultiplies by 1/n rounded to fp8), in ``order``."""
    t = ml_type(dtype)
    vals = [s.view(t) for s in sent]
    if op == "avg":
        scale = np.array(1.0 / len(sent)).astype(t).astype(np.float32)
        vals = [(v.astype(np.float32) * scale).astype(t) for v in vals]
    step = {"sum": np.add, "avg": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}[op]
    acc = vals[order[0]]
    for r in order[1:]:
        acc = step(acc.astype(np.float32), vals[r].astype(np.float32)).astype(t)
    return acc.view(np.uint8)


@pytest.mark.parametrize("dtype", FP8)
def test_every_fp8_reduction_is_exact_in_any_order_up_to_its_ranks(dtype):
    """So a bit-for-bit check never fails a right answer (nccl-tests' way: integers within the
    significand, tolerance 0), whichever ring or tree order NCCL sums in."""
    rng = np.random.default_rng(0)
    count = 16
    for n in range(1, FP8_EXACT_RANKS[dtype] + 1):
        for op in collectives.OPS:
            if inexact(op, dtype, n):
                assert op == "avg" and n & (n - 1), (op, n)
                continue
            sent = [as_type(collectives.rank_values(r, count, op, dtype), dtype) for r in range(n)]
            want = as_type(collectives.reduced(n, count, op, dtype), dtype)
            for _ in range(3):
                got = nccl_reduce(sent, op, dtype, list(rng.permutation(n)))
                assert np.array_equal(got, want), (op, n, fp8_values(got, dtype), fp8_values(want, dtype))
        zero = [as_type(collectives.zero_sum(r, n, count, dtype), dtype) for r in range(n)]  # in place
        for op in ("sum",) + (("avg",) if not n & (n - 1) else ()):
            got = nccl_reduce(zero, op, dtype, list(rng.permutation(n)))
            assert not fp8_values(got, dtype).any(), (op, n)


def test_inexact_says_where_fp8_stops_and_nothing_else():
    assert inexact("sum", "float8_e4m3", 16) is None and inexact("avg", "float8_e5m2", 8) is None
    assert inexact("sum", "float8_e5m2", 9) == ("float8_e5m2 sums are exact only to 8 ranks (its integers "
                                                "stop at 8), so a result at 9 could not be checked")
    assert inexact("avg", "float8_e4m3", 3).startswith("float8_e4m3 avg at 3 ranks is not exact")
    assert inexact("sum", "float8_e4m3", 64, reduces=False) is None  # all_gather moves bits only
    assert inexact("sum", "bfloat16", 64) is None


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 64])
def test_collectives_that_move_fp8_hold_values_it_has(dtype, n):
    """all_gather, broadcast and alltoall reduce nothing: their values need only be fp8's, at any n."""
    for name in ("all_gather", "broadcast", "alltoall"):
        c = collectives.get(name)
        for rank in {0, n - 1}:
            as_type(c.inputs(rank, n, 4 * n, "sum", 0, dtype=dtype), dtype)
            as_type(c.expected(rank, n, 4 * n, "sum", 0, dtype=dtype), dtype)
    a2a = collectives.get("alltoall")
    sent = [a2a.inputs(r, n, 4 * n, "sum", 0, dtype=dtype) for r in range(n)]
    if n > 1:  # a chunk sent to the wrong neighbour does not look right
        assert not np.array_equal(sent[0][:4], sent[0][4:8])


def test_dtypes_take_fp8_and_the_fields_other_names_for_it():
    assert DTYPES["float8_e4m3"] == DTYPES["float8_e5m2"] == 1
    assert parse_dtypes("f8e4m3,bfloat16,float8_e5m2") == ("float8_e4m3", "bfloat16", "float8_e5m2")
    assert parse_dtypes(["float8_e4m3fn", "f8e5m2"]) == ("float8_e4m3", "float8_e5m2")
    assert parse_dtypes("f8e4m3,float8_e4m3") == ("float8_e4m3",)  # one case, however asked
    with pytest.raises(ConfigError, match="dtype 'f8' is unknown"):
        parse_dtypes("f8")


def test_nccl_takes_fp8_by_its_enum():
    bare = types.SimpleNamespace()  # no CuPy so far names NCCL's fp8 types
    assert nccl.plan(Call(dtype="float8_e4m3"), bare).type == 10  # nccl.h: ncclFloat8e4m3
    assert nccl.plan(Call("reduce", "avg", dtype="float8_e5m2"), bare).type == 11  # ncclFloat8e5m2
    assert nccl.nccl_lacks(Call(dtype="float8_e4m3"), "float8_e4m3", 22304) == \
        "ncclFloat8e4m3 needs NCCL >= 2.24; this NCCL is 2.23.4"
    for op in collectives.OPS:  # every op NCCL has, on sm90, from 2.24
        for coll in ("allreduce", "reduce_scatter", "reduce", "all_gather"):
            assert nccl.nccl_lacks(Call(coll, op, dtype="float8_e5m2"), "float8_e5m2", 22403, 90) is None
    # before Hopper NCCL moves fp8 but refuses to reduce it (ncclInvalidArgument)
    assert nccl.nccl_lacks(Call("reduce_scatter", dtype="float8_e4m3"), "float8_e4m3", 23007, 80) == (
        "NCCL reduces fp8 only on sm90 or newer GPUs (Hopper on); this world's oldest is sm80 "
        "(float8_e4m3 moves there: all_gather, broadcast, alltoall)")
    for coll in ("all_gather", "broadcast", "alltoall"):
        assert nccl.nccl_lacks(Call(coll, dtype="float8_e4m3"), "float8_e4m3", 23007, 80) is None
    assert nccl.nccl_lacks(Call(dtype="float8_e4m3"), "float8_e4m3", 0, None) is None  # unknown: NCCL says


def test_nccl_buffers_of_fp8_are_bytes(monkeypatch):
    from test_nccl_collectives import fake_nccl
    from test_tf_gpu_training import FakeMpiComm

    fake, _ = fake_nccl(monkeypatch)
    fake.zeros = lambda count, dtype: np.zeros(count, dtype=dtype)
    t = nccl.NcclAllreduce(FakeMpiComm(n=2), {})
    assert t.fp8 and t.alloc(4, "float8_e4m3").dtype == np.uint8
    assert t.lacks(Call(dtype="float8_e5m2"), "float8_e5m2") is None  # the fake's NCCL is new enough


def test_other_transports_say_why_they_run_no_fp8():
    class Host(AllreduceTransport):
        name = "ring"
    assert Host(None).lacks(Call(dtype="float8_e4m3"), "float8_e4m3") == \
        "ring has no float8_e4m3 (fp8 runs on nccl alone, NCCL >= 2.24)"
    assert torch_lacks("gloo", "2.14.1", Call(), "float8_e4m3").startswith(
        "torch's gloo has no float8_e4m3 (gloo has no fp8 type")
    assert "MPI defines no fp8 datatype" in torch_lacks("mpi", "2.14.1", Call("all_gather"), "float8_e5m2")
    assert torch_lacks("nccl", "2.14.1", Call(), "float8_e5m2").startswith("torch-nccl runs no float8_e5m2 here")
    pytest.importorskip("mpi4py")
    from perfsuite.transports.mpi_calls import mpi_lacks

    for coll in ("allreduce", "all_gather"):
        assert mpi_lacks(Call(coll), "float8_e5m2") == ("MPI defines no fp8 datatype, so float8_e5m2 has no "
                                                        "MPI type to reduce or move; fp8 runs on nccl")


@pytest.mark.world
def test_fp8_on_mpi_is_skipped_with_the_reason(tmp_path):
    out = tmp_path / "run.json"
    r = perfsuite("run", "--benchmarks", "allreduce", "--transports", "mpi", "--world-sizes", "2",
                  "--iters", "5", "--warmup", "1", "--sizes", "4", "--dtypes", "f8e4m3,float32",
                  "--max-contention", "off", "--json", str(out), cwd=tmp_path)
    assert r.returncode == 0, said(r)
    assert ("# skipped 1 world (1 case) allreduce[mpi-n2-float8_e4m3]: MPI defines no fp8 datatype"
            in r.stdout), said(r)

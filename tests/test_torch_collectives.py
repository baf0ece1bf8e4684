"""The torch.distributed transports make every collective's call: real gloo worlds of 2 and 4
ranks, each running every collective, op, root, dtype (float32, bfloat16) and buffer layout once
and comparing each rank's result with the record's exact values bit for bit. One world per size:
a world start (torch's import) costs seconds, a call milliseconds."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from perfsuite import transports
from perfsuite.launch.launchers import LaunchConfig
from perfsuite.launch.world import run_program
from perfsuite.transports.base import Call

HAS_TORCH = transports.has_module("torch")
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (pip install torch torchvision: perfsuite's torch extra)")

#: One rank of the world: every combination on one torch-gloo transport; rank 0 prints one
#: JSON line with every rank's results.
WORLD = r'''
import json, traceback

import mpi4py

mpi4py.rc.thread_level = "funneled"
from mpi4py import MPI
import numpy as np

from perfsuite import collectives
from perfsuite.collectives import as_type
from perfsuite.transports.base import Call
from perfsuite.transports.torch.allreduce import TorchGlooAllreduce

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
t = TorchGlooAllreduce(comm, {})
rows = []
for name in collectives.NAMES:
    coll = collectives.get(name)
    places = (True,) if coll.one_buffer else (False, True) if coll.inplace_offset else (False,)
    for dtype in ("float32", "bfloat16"):
        for op in (collectives.OPS if coll.reduces else ("sum",)):
            for root in ((0, n - 1) if coll.rooted else (0,)):
                for inplace in places:
                    # alltoallv: zipf's uneven counts, a rank's recv padded to the largest
                    matrix = coll.splits("zipf", n, coll.counts(6 * n, n)[0]) if coll.splits else ()
                    v = {"matrix": matrix} if coll.splits else {}
                    call = Call(name, op, root, inplace, dtype, matrix)
                    row = {"collective": name, "op": op, "root": root, "inplace": inplace, "dtype": dtype}
                    rows.append(row)
                    why = t.lacks(call, dtype)
                    if why:
                        row["lacks"] = why
                        continue
                    t.bind(call)
                    send_count, recv_count = coll.buffers(0, dtype, n, matrix) if matrix else coll.counts(6 * n, n)
                    if inplace:
                        recv = t.alloc(max(send_count, recv_count), dtype)
                        offset = coll.inplace_offset(rank, n, recv_count)
                        whole = offset == 0 and send_count == recv_count
                        send = recv if whole else recv[offset:offset + send_count]
                    else:
                        send, recv = t.alloc(send_count, dtype), t.alloc(recv_count, dtype)
                    # recv poisoned first: what the call does not write stays 99
                    t.fill(recv, as_type(np.full(recv_count, 99.0), dtype))
                    t.fill(send, as_type(coll.inputs(rank, n, send_count, op, root, **v), dtype))
                    try:
                        t.call(send, recv)
                    except Exception as exc:
                        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                        continue
                    want = coll.expected(rank, n, recv_count, op, root, **v)
                    if matrix:  # the pad past this rank's receive total is never written: still 99
                        mine = sum(row[rank] for row in matrix)
                        want = np.where(np.arange(recv_count) < mine, want, 99.0)
                    got = t.to_host(recv)
                    row["host_dtype"] = str(got.dtype)
                    if want is None:
                        row["checked"] = False
                    else:
                        want = as_type(want, dtype)
                        row["checked"] = True
                        row["same"] = bool(got.dtype == want.dtype and np.array_equal(got, want))
                        if not row["same"]:
                            row["got"], row["want"] = got.tolist()[:8], want.tolist()[:8]
unknown = {"gather": t.lacks(Call("gather"), "float32"),
           "band": t.lacks(Call("allreduce", op="band"), "float32"),
           "band_broadcast": t.lacks(Call("broadcast", op="band"), "float32"),
           "int8": t.lacks(Call("allreduce"), "int8"),
           "bfloat16_avg": t.lacks(Call("allreduce", op="avg", dtype="bfloat16"), "bfloat16")}
gathered = comm.gather({"rows": rows, "unknown": unknown, "facts": t.describe(),
                        "call_is_bound": t.call == t.alltoallv}, root=0)  # the last bound
comm.Barrier()
t.close()
if rank == 0:
    print(json.dumps(gathered), flush=True)
'''


@pytest.fixture(scope="module")
def world_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch-collectives") / "world.py"
    path.write_text(WORLD)
    return path


@needs_torch
@pytest.mark.world
@pytest.mark.parametrize("n", [2, 4])
def test_torch_gloo_makes_every_collective_exactly(n, world_script, no_leftover_ranks):
    out = run_program([sys.executable, "-W", "error::FutureWarning", str(world_script)], n, LaunchConfig(), 240)
    ranks = json.loads(out.strip().splitlines()[-1])
    assert len(ranks) == n
    combos = {(r["collective"], r["op"], r["root"], r["inplace"], r["dtype"]) for r in ranks[0]["rows"]}
    # allreduce 5 ops x 2 layouts, all_gather 2 layouts, reduce_scatter 5 ops, alltoall 1,
    # broadcast 2 roots, reduce 5 ops x 2 roots x 2 layouts, alltoallv 1: 41 per dtype
    assert len(combos) == 82
    for rank, got in enumerate(ranks):
        for row in got["rows"]:
            assert "lacks" not in row and "error" not in row, row  # torch 2.8+: gloo has every call here
            assert row["host_dtype"] == ("uint16" if row["dtype"] == "bfloat16" else "float32"), row
            if row["collective"] == "reduce" and rank != row["root"]:
                assert row["checked"] is False  # a non-root's recv is not defined
            else:
                assert row["checked"] and row["same"], (rank, row)
        unknown = got["unknown"]
        assert unknown["gather"] == ("torch-gloo has no gather (it runs allreduce, all_gather, "
                                     "reduce_scatter, alltoall, broadcast, reduce, alltoallv)")
        assert unknown["band"] == "torch-gloo has no band reduction (it has sum, prod, min, max, avg)"
        assert unknown["band_broadcast"] is None  # broadcast takes no op
        assert unknown["int8"].startswith("torch-gloo has no int8 tensors")
        assert unknown["bfloat16_avg"] is None
        assert got["call_is_bound"] is True  # the kernel's call is the bound collective itself
        facts = got["facts"]
        assert facts["all_gather_call"] in ("all_gather_single", "all_gather_into_tensor")
        assert facts["reduce_scatter_call"] in ("reduce_scatter_single", "reduce_scatter_tensor")


@needs_torch
@pytest.mark.world
def test_the_plain_loop_times_any_collective(no_leftover_ranks):
    out = run_program([sys.executable, "-W", "error::FutureWarning", "-m", "perfsuite.kernels.plain.torch_allreduce",
                       "gloo", "4:10:2", "1024:10:2", "--collective", "reduce_scatter", "--dtype", "bfloat16",
                       "--op", "max"], 2, LaunchConfig(), 120)
    rows = [json.loads(line) for line in out.strip().splitlines()]
    assert [r["size_bytes"] for r in rows] == [4, 1024]
    for r in rows:
        assert r["collective"] == "reduce_scatter" and r["dtype"] == "bfloat16" and r["op"] == "max"
        assert r["inplace"] is False and r["iters"] == 10 and r["p50_us"] > 0


# --- no world: the version rules, the host copies ---------------------------------------------

def test_torch_lacks_reads_the_backend_and_versions_alone():
    from perfsuite.transports.torch.allreduce import torch_lacks

    avg = Call("allreduce", op="avg")
    assert torch_lacks("gloo", "2.7.1+cu126", avg, "float32") == \
        "torch 2.7.1+cu126's gloo has no AVG reduction (it came in torch 2.8)"
    assert torch_lacks("gloo", "2.8.0", avg, "float32") is None
    assert torch_lacks("gloo", "2.8.0", Call("reduce", op="avg"), "float32") is None
    rs_avg = Call("reduce_scatter", op="avg")
    assert "sums instead of averaging in reduce_scatter" in torch_lacks("gloo", "2.10.0", rs_avg, "float32")
    assert torch_lacks("gloo", "2.11.0+cu128", rs_avg, "float32") is None
    assert torch_lacks("gloo", "2.7.0", Call("broadcast", op="avg"), "float32") is None  # no op taken
    assert torch_lacks("nccl", "2.4.0", avg, "bfloat16", (2, 21, 5)) is None
    assert torch_lacks("nccl", "2.4.0", Call(), "bfloat16", (2, 9, 9)) == "NCCL 2.9.9 has no bfloat16 (it came in NCCL 2.10)"
    assert torch_lacks("mpi", "2.14.0", Call("all_gather"), "float32").startswith(
        "torch's MPI backend has no single-tensor all_gather")
    assert "no AVG" in torch_lacks("mpi", "2.14.0", avg, "float32")
    assert "no bfloat16" in torch_lacks("mpi", "2.14.0", Call(), "bfloat16")
    assert torch_lacks("mpi", "2.14.0", Call("alltoall"), "float32") is None
    for line in (torch_lacks("gloo", "2.7.0", avg, "float32"), torch_lacks("mpi", "2.4", Call("reduce_scatter"), "float32")):
        assert "\n" not in line


@needs_torch
def test_fill_and_to_host_copy_bfloat16_bits_exactly_through_a_slice():
    """Any 16 bits (NaN payloads and subnormals included) go in and come back unchanged, also
    into a slice of a tensor, as all_gather in place fills its chunk of recv."""
    import torch

    from perfsuite.collectives import as_type
    from perfsuite.transports.torch.allreduce import TorchGlooAllreduce

    t = object.__new__(TorchGlooAllreduce)  # no group: fill and to_host need torch alone
    t.torch, t.device = torch, torch.device("cpu")
    bits = np.random.default_rng(5).integers(0, 1 << 16, 64, dtype=np.uint64).astype(np.uint16)
    buf = t.alloc(128, "bfloat16")
    assert buf.dtype == torch.bfloat16
    t.fill(buf[32:96], bits)
    back = t.to_host(buf)
    assert back.dtype == np.uint16 and np.array_equal(back[32:96], bits) and not back[:32].any()
    assert np.array_equal(t.to_host(buf[32:96]), bits)
    # as_type's bits are torch's bfloat16 of the same numbers
    values = np.array([1.0, 2.5, -3.0, 256.0, 0.0])
    t.fill(buf[:5], as_type(values, "bfloat16"))
    assert buf[:5].float().tolist() == values.tolist()
    f32 = t.alloc(4, "float32")
    t.fill(f32, as_type(np.arange(4.0), "float32"))
    assert t.to_host(f32).dtype == np.float32 and t.to_host(f32).tolist() == [0.0, 1.0, 2.0, 3.0]


@needs_torch
@pytest.mark.world
def test_overhead_pairs_each_collective_with_a_plain_torch_loop(no_leftover_ranks):
    """`perfsuite overhead --transports torch-gloo --benchmarks ...`: the yardstick world of each
    collective times the harness's loop and torch's own call of it, alternating, and checks the
    result it left (out of place; broadcast on its one buffer)."""
    from perfsuite import suite
    from perfsuite.experiments.overhead import plain_overhead
    from perfsuite.reading.report import plain_overhead_table
    from perfsuite.verdicts.rounds import RoundsPolicy

    cfg = suite.SuiteConfig(launch=LaunchConfig(), timeout=120, options={"iters": 40},
                            rounds=RoundsPolicy(max_contention=None, retries=0))
    rep = plain_overhead(cfg, "torch-gloo", sizes=(4,), rounds=1, benchmarks=("reduce_scatter", "broadcast"))
    assert [(r["benchmark"], r["size_bytes"]) for r in rep.rows] == [("reduce_scatter", 4), ("broadcast", 4)]
    assert all(r["pairs"] == 50 and r["ratio"] > 0 for r in rep.rows)
    text = plain_overhead_table(rep)
    assert "# reduce_scatter\n" in text and "# target broadcast 4 B harness / plain <= 1.05" in text


def test_whose_wait_counts_is_the_transports_own():
    """A transport whose library makes the call on its own threads (TensorFlow's collective
    executor, torch's process-group workers) measures contention over the whole process, which
    is recorded and not judged: on 2 cores those threads wait for one another by design, so a
    re-run is as "contended" as the first (the default run ran every such world 4 times)."""
    from perfsuite.transports.mpi import MpiAllreduce
    from perfsuite.transports.ring import RingAllreduce
    from perfsuite.transports.tf.grpc import TfGrpcAllreduce
    from perfsuite.transports.torch.allreduce import TorchGlooAllreduce, TorchMpiAllreduce

    assert {c.contention_scope for c in (TfGrpcAllreduce, TorchGlooAllreduce, TorchMpiAllreduce)} == {"process"}
    assert {c.contention_scope for c in (MpiAllreduce, RingAllreduce)} == {"thread"}


@needs_torch
@pytest.mark.world
def test_a_torch_gloo_world_records_its_process_wait_and_is_not_rerun_for_it(no_leftover_ranks):
    from perfsuite import suite
    from perfsuite.records.model import Case
    from perfsuite.verdicts.rounds import RoundsPolicy, contention_of

    # the default policy: a contended round (thread scope, > 5% waiting) would be re-run 3 times
    cfg = suite.SuiteConfig(launch=LaunchConfig(), timeout=120, options={"iters": 30},
                            rounds=RoundsPolicy(rounds=1))
    cases = [Case("allreduce", "torch-gloo", 2, size) for size in (4, 4096)]
    outcome = suite.run_one(suite.plan(cases, {})[0], cfg)
    samples = outcome.samples()
    assert len(samples) == 2 and all(s.valid for s in samples)
    for s in samples:
        assert s.info["contention_scope"] == "process" and 0 <= s.info["contention"] <= 1
        assert contention_of(s) is None
    assert outcome.result.extra["rounds"] == 1

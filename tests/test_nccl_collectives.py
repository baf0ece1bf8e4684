"""Every collective of the GPU transports without a GPU: ``nccl``'s per-bind plan and counts (pure),
the CuPy calls it makes for each collective (a fake communicator logs them) and its timing
choice; ``mpi-staged`` and ``mpi-cuda`` on host arrays (``array_module=numpy``) in a real 2-rank
MPI world, each result compared exactly with ``perfsuite.collectives``' expected values."""
from __future__ import annotations

import json
import os
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from perfsuite.records.errors import ConfigError, TransportUnavailable
from perfsuite.launch.launchers import OPENMPI_ROOT_ENV
from perfsuite.launch.commands import default_program, run_command
from perfsuite.transports import gpu, nccl
from perfsuite.transports.base import COLLECTIVES, OPS, TIMINGS, Call
from test_tf_gpu_training import FakeCupyNccl, FakeMpiComm, install_fake_cupy

REPO = Path(__file__).resolve().parents[1]


# --- nccl: what a bound call passes NCCL (pure) ------------------------------------------------

def test_plan_takes_nccl_enums_from_cupy_or_from_nccl_h():
    bare = types.SimpleNamespace()  # a CuPy without the constants: NCCL's own enum values
    assert nccl.plan(Call("allreduce", "avg", dtype="bfloat16"), bare) == \
        nccl.NcclPlan("allreduce", 0, 9, 4, 0)
    want = {"float32": 7, "float64": 8, "float16": 6, "bfloat16": 9, "int32": 2}
    assert {d: nccl.plan(Call(dtype=d), bare).type for d in want} == want
    assert {o: nccl.plan(Call("reduce", o), bare).op for o in OPS} == \
        {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
    cupy_like = types.SimpleNamespace(NCCL_FLOAT16="f16", NCCL_MAX="max")
    p = nccl.plan(Call("reduce", "max", root=1, dtype="float16"), cupy_like)
    assert (p.type, p.op, p.root, p.code) == ("f16", "max", 1, 5)
    # collectives that take no op are planned with sum, whatever the call says
    assert nccl.plan(Call("all_gather", "max"), bare).op == 0
    # alltoallv's per-peer counts are not the C loop's arguments: -1, the Python batch times it
    assert [nccl.plan(Call(c), bare).code for c in COLLECTIVES] == [*range(6), -1]


@pytest.mark.parametrize("collective,want", [
    ("allreduce", (12, 0)), ("reduce", (12, 0)), ("broadcast", (12, 0)),
    ("all_gather", (3, 0)),  # send c/n (in place too: send is recv's slice)
    ("reduce_scatter", (3, 0)),  # recv c/n
    ("alltoall", (3, 24)),  # per peer c/n elements, 3 x 8 bytes apart
])
def test_counts_follow_nccl_tests(collective, want):
    sizes = {"all_gather": (3, 12), "reduce_scatter": (12, 3)}.get(collective, (12, 12))
    assert nccl.counts(collective, *sizes, 4, 8) == want


def test_what_an_nccl_cannot_do_is_said_from_its_version():
    avg, bf16 = Call("allreduce", "avg"), Call(dtype="bfloat16")
    assert nccl.nccl_lacks(avg, "float32", 23007) is None and nccl.nccl_lacks(bf16, "bfloat16", 21000) is None
    assert nccl.nccl_lacks(avg, "float32", 20905) == "ncclAvg needs NCCL >= 2.10; this NCCL is 2.9.5"
    assert nccl.nccl_lacks(bf16, "bfloat16", 2804) == "ncclBfloat16 needs NCCL >= 2.10; this NCCL is 2.8.4"
    assert nccl.nccl_lacks(Call("all_gather", "avg"), "float32", 2804) is None  # no op taken
    assert "NCCL >= 2.7" in nccl.nccl_lacks(Call("alltoall"), "float32", 2604)
    assert nccl.nccl_lacks(avg, "float32", 0) is None  # version unknown: NCCL says at the call
    assert nccl.nccl_lacks(Call(), "int8", 23007).startswith("nccl has no int8")


# --- nccl: the CuPy calls of each collective, on a fake communicator ---------------------------

class Log(list):
    pass


def fake_nccl(monkeypatch, version=22707):
    fake = FakeCupyNccl(others=0.0)
    log = Log()

    class Communicator:
        comm = 0x5eed

        def __init__(self, n, uid, rank):
            pass

        def destroy(self):
            log.append(("destroy",))

        def __getattr__(self, name):  # allReduce, allGather, ..., send, recv: logged as called
            if name.startswith("_"):
                raise AttributeError(name)
            return lambda *args: log.append((name, *args))

    fake.nccl.NcclCommunicator = Communicator
    fake.nccl.get_version = lambda: version
    fake.nccl.groupStart = lambda: log.append(("groupStart",))
    fake.nccl.groupEnd = lambda: log.append(("groupEnd",))
    install_fake_cupy(monkeypatch, fake)
    monkeypatch.setattr(gpu, "node_rank", lambda comm: (0, 1))
    return fake, log


def test_each_collective_is_one_cupy_call_with_the_bound_enums(monkeypatch):
    fake, log = fake_nccl(monkeypatch)
    t = nccl.NcclAllreduce(FakeMpiComm(rank=1, n=4), {})
    assert t.collectives == COLLECTIVES and t.reduce_ops == OPS
    send, recv = fake.zeros(12, "uint16"), fake.zeros(12, "uint16")
    s, r = send.data.ptr, recv.data.ptr
    expect = {
        ("allreduce", "avg"): ("allReduce", s, r, 12, 9, "f_avg", 0),
        ("reduce", "min"): ("reduce", s, r, 12, 9, "f_min", 2, 0),
        ("reduce_scatter", "max"): ("reduceScatter", s, recv[:3].data.ptr, 3, 9, "f_max", 0),
        ("all_gather", "sum"): ("allGather", send[:3].data.ptr, r, 3, 9, 0),
        ("broadcast", "sum"): ("broadcast", r, r, 12, 9, 2, 0),
    }
    fake.nccl.NCCL_AVG, fake.nccl.NCCL_MIN, fake.nccl.NCCL_MAX = "f_avg", "f_min", "f_max"
    for (collective, op), want in expect.items():
        log.clear()
        t.bind(Call(collective, op, root=2, dtype="bfloat16"))
        a, b = send, recv
        if collective == "reduce_scatter":
            b = recv[:3]
        elif collective == "all_gather":
            a = send[:3]
        t.call(a, b)
        assert log == [want], collective


def test_alltoall_is_a_group_of_sends_and_receives_at_byte_offsets(monkeypatch):
    fake, log = fake_nccl(monkeypatch)
    t = nccl.NcclAllreduce(FakeMpiComm(rank=0, n=3), {})
    send, recv = fake.zeros(6, "float64"), fake.zeros(6, "float64")
    t.bind(Call("alltoall", dtype="float64"))
    log.clear()
    t.call(send, recv)
    s, r = send.data.ptr, recv.data.ptr
    assert log == [("groupStart",), *[x for p in range(3) for x in
                                      (("send", s + 16 * p, 2, 8, p, 0), ("recv", r + 16 * p, 2, 8, p, 0))],
                   ("groupEnd",)]


def test_a_batch_issues_the_bound_call(monkeypatch):
    fake, log = fake_nccl(monkeypatch)
    t = nccl.NcclAllreduce(FakeMpiComm(rank=0, n=2), {"device_timing": "batch"})
    send, recv = fake.zeros(4, "float32"), fake.zeros(8, "float32")
    t.bind(Call("all_gather"))
    log.clear()
    t.time_batch(send, recv, 3)
    assert [x[0] for x in log] == ["allGather"] * 3


def test_without_a_prepared_loop_auto_times_from_python_and_says_why(monkeypatch):
    fake_nccl(monkeypatch)
    t = nccl.NcclAllreduce(FakeMpiComm(n=2), {})
    assert t.timing == "batch" and t.nccl_loop is None
    assert t.timing_why.startswith("no native NCCL loop was prepared for this world")
    assert t.describe()["timing"] == "batch" and t.describe()["timing_why"] == t.timing_why
    t = nccl.NcclAllreduce(FakeMpiComm(n=2), {"native_nccl": {"why": "no C compiler (cc) on PATH"}})
    assert t.timing_why == "no C compiler (cc) on PATH"
    with pytest.raises(TransportUnavailable, match=r"^device timing native-batch: no C compiler"):
        nccl.NcclAllreduce(FakeMpiComm(n=2), {"device_timing": "native-batch",
                                              "native_nccl": {"why": "no C compiler (cc) on PATH"}})


def test_one_rank_without_the_loop_makes_every_rank_time_from_python(monkeypatch):
    fake_nccl(monkeypatch)
    closed = []
    loop = types.SimpleNamespace(close=lambda: closed.append(1), describe=lambda: {})
    comm = FakeMpiComm(n=2)

    def open_loop(facts):  # this rank loads it; rank 1 says it cannot in the agreement that follows
        comm.reasons = [None, "no libnccl is loaded"]
        return loop, None

    monkeypatch.setattr(nccl.native_nccl, "open_loop", open_loop)
    t = nccl.NcclAllreduce(comm, {})
    assert t.timing == "batch" and t.timing_why == "rank 1: no libnccl is loaded" and closed == [1]


def test_the_loaded_loop_times_the_bound_call_with_the_plan(monkeypatch):
    fake, log = fake_nccl(monkeypatch, version=23007)
    batches = []

    class Loop:
        def describe(self):
            return {"native_nccl": "/cache/lib.so", "alltoall_call": "ncclAlltoAll"}

        def batch(self, *args):
            batches.append(args)
            return 1e-3

        def close(self):
            log.append(("loop.close",))

    monkeypatch.setattr(nccl.native_nccl, "open_loop", lambda facts: (Loop(), None))
    t = nccl.NcclAllreduce(FakeMpiComm(rank=0, n=2), {})
    assert t.timing == "native-batch" and t.facts["timing"] == "native-batch" and not t.timing_why
    assert t.describe()["alltoall_call"] == "ncclAlltoAll"
    send, recv = fake.zeros(8, "float32"), fake.zeros(8, "float32")
    t.bind(Call("alltoall"))
    assert t.time_batch(send, recv, 10) == 1e-3 and t.time_one(send, recv) == 1e-3
    assert batches[0] == (0x5eed, 3, send.data.ptr, recv.data.ptr, 4, 16, "f32", "sum", 0, 2, 0, 10, 1, 0, 0)
    assert batches[1][-4:] == (1, 1, 0, 0)  # one call, one copy: no rotation
    t.close()
    assert log[-2:] == [("loop.close",), ("destroy",)]  # the loop's events go before the communicator


def test_device_timing_auto_and_native_batch():
    assert gpu.device_timing({}, "mpi-staged", False) == "batch"
    assert gpu.device_timing({}, "nccl", True, native=True) == "native-batch"
    assert gpu.device_timing({"device_timing": "batch"}, "nccl", True, native=True) == "batch"
    assert set(gpu.DEVICE_TIMINGS) == {*TIMINGS, "auto"} and "native-batch" in TIMINGS
    with pytest.raises(TransportUnavailable, match=r"native-batch needs a transport with a C loop"):
        gpu.device_timing({"device_timing": "native-batch"}, "mpi-staged", False)
    with pytest.raises(ConfigError, match=r"choose from batch, per-call, graph, native-batch, auto"):
        gpu.device_timing({"device_timing": "native"}, "nccl", True, native=True)


def test_device_buffers_of_bfloat16_hold_its_bits(monkeypatch):
    fake, _ = fake_nccl(monkeypatch)
    fake.zeros = lambda count, dtype: np.zeros(count, dtype=dtype)
    t = nccl.NcclAllreduce(FakeMpiComm(n=2), {})
    assert t.alloc(4, "bfloat16").dtype == np.uint16 and t.alloc(4, "float32").dtype == np.float32


# --- mpi-staged and mpi-cuda: every collective in a real 2-rank world ---------------------------

WORLD = textwrap.dedent(r"""
    import json, sys
    import numpy as np
    from mpi4py import MPI
    from perfsuite import collectives
    from perfsuite.collectives import as_type
    from perfsuite.transports import load
    from perfsuite.transports.base import Call

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    out = {"rank": rank, "checked": 0, "wrong": [], "lacks": {}}
    for name in sys.argv[1].split(","):
        t = load(name)(comm, {"array_module": "numpy"})
        for cname in collectives.NAMES:
            coll = collectives.get(cname)
            places = [True] if coll.one_buffer else [False] + ([True] if coll.inplace_offset else [])
            for dtype in ("float32", "int32", "float64", "float16", "bfloat16"):
                for op in (("sum", "prod", "min", "max", "avg") if coll.reduces else ("sum",)):
                    for root in (range(n) if coll.rooted else (0,)):
                        for inplace in places:
                            for count in (14, 7):
                                # alltoallv: zipf's uneven counts, a rank's recv padded to the largest
                                matrix = coll.splits("zipf", n, coll.counts(count, n)[0]) if coll.splits else ()
                                v = {"matrix": matrix} if coll.splits else {}
                                call = Call(cname, op, root, inplace, dtype, matrix)
                                why = t.lacks(call, dtype)
                                if why:
                                    out["lacks"][f"{name} {cname} {op} {dtype}"] = why
                                    continue
                                t.bind(call)
                                s, r = coll.buffers(0, dtype, n, matrix) if matrix else coll.counts(count, n)
                                if inplace:
                                    recv = t.alloc(max(s, r), dtype)
                                    off = coll.inplace_offset(rank, n, r)
                                    send = recv if off == 0 and s == r else recv[off:off + s]
                                else:
                                    send, recv = t.alloc(s, dtype), t.alloc(r, dtype)
                                sent = as_type(coll.inputs(rank, n, s, op, root, **v), dtype)
                                want = coll.expected(rank, n, r, op, root, **v)
                                for timed in (False, True):  # one call, then a Python batch of 3
                                    if timed and inplace:
                                        break  # in place a second call reduces the result again
                                    t.fill(send, sent)
                                    t.call(send, recv) if not timed else t.time_batch(send, recv, 3)
                                    t.sync()
                                    got = t.to_host(recv if want is not None else send)
                                    ok = np.array_equal(got, as_type(want, dtype) if want is not None
                                                        else sent)
                                    out["checked"] += 1
                                    if not ok:
                                        out["wrong"].append(f"{name} {call} count {count} timed {timed}: "
                                                            f"{got.tolist()}")
        t.close()
    with open(f"{sys.argv[2]}/{rank}.json", "w") as f:  # a file each: ranks' stdout interleaves
        json.dump(out, f)
""")


@pytest.mark.world
def test_mpi_staged_and_mpi_cuda_make_every_collective_exactly(tmp_path, no_leftover_ranks):
    script = tmp_path / "world.py"
    script.write_text(WORLD)
    env = {**os.environ, **OPENMPI_ROOT_ENV, "PYTHONPATH": str(REPO),
           "PERFSUITE_MPI_CUDA_AWARE": "1"}  # host arrays: MPI reads them whatever it is
    (tmp_path / "out").mkdir()
    run_command([default_program("mpiexec"), "-n", "2", sys.executable, str(script),
                 "mpi-staged,mpi-cuda", str(tmp_path / "out")], timeout=240, env=env)
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").iterdir())]
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["wrong"] == [], r["wrong"][:5]
        assert r["checked"] > 300
        # avg is NCCL's alone; bfloat16 only where this MPI defines MPI_BFLOAT16_T
        lacks = r["lacks"]
        assert lacks["mpi-staged allreduce avg float32"].startswith("MPI has no avg reduction")
        assert all(k.split()[2] == "avg" or k.endswith("bfloat16") for k in lacks), lacks
        assert not any(k.endswith("float32") and k.split()[2] != "avg" for k in lacks)

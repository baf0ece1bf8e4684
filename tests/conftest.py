"""Fixtures for the suite's own tests."""
from __future__ import annotations

import os
import signal
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

#: Set by .ci/run: there the native timed loop must build, so a test that would skip or expect
#: the mpi4py fallback without it fails instead (a broken native_loop.c must not pass as a skip).
REQUIRE_NATIVE_ENV = "PERFSUITE_REQUIRE_NATIVE"


def native_build():
    """The native loop's build for this Python's MPI, as the suite gets it. Where
    PERFSUITE_REQUIRE_NATIVE=1, a failed build fails the calling test with the compiler's line."""
    from perfsuite.launch.native import mpi as native

    built = native.build()
    if built.why is not None and os.environ.get(REQUIRE_NATIVE_ENV) == "1":
        pytest.fail(f"{REQUIRE_NATIVE_ENV}=1 and the native loop did not build: {built.why}",
                    pytrace=False)
    return built


@pytest.fixture
def native_loop():
    """The built native loop, or a skip saying why there is none (a failure where it is required)."""
    built = native_build()
    if built.why is not None:
        pytest.skip(f"no native loop here: {built.why}")
    return built


@pytest.fixture(autouse=True)
def no_copy_bandwidth(monkeypatch):
    """Every world a test starts (in this process, a CLI subprocess or a pytester run: the ranks
    inherit the environment) skips the allreduce kernel's copy-bandwidth measurement, 64 MiB
    copied 11 times (0.1-0.3 s a world on a 2-core VM), which no test reads; a test that reads
    it passes the kernel option ``copy_bw: True``."""
    from perfsuite.kernels.collectives.allreduce import NO_COPY_BW_ENV

    monkeypatch.setenv(NO_COPY_BW_ENV, "1")


#: One recipe of real worlds for every test that needs a run and the same run made x21 slower
#: (``slowed_runs``): the mpi transport on 1 and 2 ranks at 4 B, 8 rounds of each world. Two
#: worlds, so that one can fail while the other is judged (tests/test_exit_status.py); the
#: 1-rank world is the one every such test holds to REGRESSION. Contention is not judged: every
#: round counts, so each world's 8 rounds can be recorded as a baseline (tests/test_report.py), and
#: a round's value is the median of its 20 calls, which a neighbour's burst moves only by
#: stalling most of them (the 1-rank world's calls are a copy in one process, about 1 us each).
def small_world(*more: str, sizes: str | None = "4", world_sizes: str = "2", iters: int | None = 20,
                warmup: int | None = 5, pytest: bool = False) -> list[str]:
    """The suite's small MPI world, written once: mpi, 2 ranks, 4 B, 20 timed calls after 5
    warm-up, as perfsuite's commands spell it (``pytest``: with pytest's --perf- prefix), then
    ``more``. A None leaves that option to its default."""
    given = [("transports", "mpi"), ("world-sizes", world_sizes), ("sizes", sizes), ("iters", iters),
             ("warmup", warmup)]
    prefix = "--perf-" if pytest else "--"
    return [w for name, value in given if value is not None for w in (prefix + name, str(value))] + list(more)


#: The user's benchmark file of the pytest face's tests, written once: allreduce's cases, each
#: measured through pytest-benchmark's fixture.
ALLREDUCE_BENCH = '''
import pytest

@pytest.mark.perf_benchmark("allreduce")
def test_allreduce(benchmark, perf_case, perf_measure):
    perf_measure(benchmark)
'''


SLOWED_WORLD = small_world("--rounds", "8", "--max-contention", "off", world_sizes="1,2")
#: The test-only switches a run started by a test must not inherit from the test's own environment.
SWITCHES = ("PERFSUITE_INJECT_SLOWDOWN", "PERFSUITE_TEST_FAULT")


def perfsuite(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``python -m perfsuite.faces.cli ARGS`` as a user runs it (its exit status is the process's),
    without the test's own switches or MPICH settings, plus ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("MPIR_CVAR_")}
    return subprocess.run([sys.executable, "-m", "perfsuite.faces.cli", *args], cwd=cwd, env={**clean, **env},
                          capture_output=True, text=True, timeout=600)


def said(r: subprocess.CompletedProcess) -> str:
    """A finished command's status and the ends of its output, for an assertion's message."""
    return f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture
def read_only(tmp_path):
    """``make(folder)``: from then on ``folder`` (made if missing) is a read-only bind mount of
    itself, root ignoring file modes; unmounted after the test. Skips where this machine does
    not let the test mount (not root, a container without the capability)."""
    probe = tmp_path / "mount-probe"
    probe.mkdir()
    r = _mount("--bind", str(probe), str(probe))
    if r.returncode:
        pytest.skip(f"a read-only bind mount cannot be made here: {r.stderr.strip() or r.returncode}")
    subprocess.run(["umount", str(probe)], check=True)
    mounted: list[str] = []

    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        assert _mount("--bind", str(folder), str(folder)).returncode == 0
        mounted.append(str(folder))
        r = _mount("-o", "remount,bind,ro", str(folder))
        assert r.returncode == 0, r.stderr
        return folder

    yield make
    for folder in reversed(mounted):
        # lazily where the test's working directory (restored after this) still holds it
        if subprocess.run(["umount", folder], capture_output=True).returncode:
            subprocess.run(["umount", "-l", folder], check=True)


@pytest.fixture(scope="session")
def slowed_runs(tmp_path_factory) -> Path:
    """A folder holding fast.json, a clean run of ``SLOWED_WORLD``, and slow.json, the same run
    with every timed call 21x as long (``PERFSUITE_INJECT_SLOWDOWN=20``): far beyond the x4 a
    one-session reference allows for this machine's states. Made once per session: the exit
    statuses (tests/test_exit_status.py) and the report's verdict table (tests/test_report.py)
    read the same two runs. Both exit 0: a run without --compare judges nothing."""
    from perfsuite.kernels.collectives.allreduce import NO_COPY_BW_ENV

    where = tmp_path_factory.mktemp("slowed")
    # A session fixture starts before the autouse no_copy_bandwidth: its worlds skip the copy too.
    for name, extra in (("fast.json", {}), ("slow.json", {"PERFSUITE_INJECT_SLOWDOWN": "20.0"})):
        r = perfsuite("run", *SLOWED_WORLD, "--json", name, cwd=where, **{NO_COPY_BW_ENV: "1"}, **extra)
        assert r.returncode == 0, said(r)
    return where


def worker_pids(token: str | None = None) -> list[int]:
    """PIDs of perfsuite ranks or MPI launchers still alive; with ``token``, only those started
    under it (other test runs on a shared machine have their own worlds)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((line for line in (p / "status").read_text().splitlines()
                          if line.startswith("State:")), "")
        except OSError:
            continue
        if "zombie" in state:
            continue
        if token is not None:
            try:
                if f"PERFSUITE_TEST_TOKEN={token}".encode() not in (p / "environ").read_bytes():
                    continue
            except OSError:
                continue
        if "perfsuite.worker" in cmd or "hydra_pmi_proxy" in cmd:
            pids.append(int(p.name))
    return pids


def rank_pids(token: str) -> list[int]:
    """The ranks themselves (Python running perfsuite.worker) started under ``token``: the
    launcher's own command line names the worker too, so worker_pids() alone cannot tell a
    started world from a launcher still starting one."""
    ranks = []
    for pid in worker_pids(token):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if Path(argv[0].decode(errors="replace")).name.startswith("python") and b"perfsuite.worker" in argv:
            ranks.append(pid)
    return ranks


@pytest.fixture
def no_leftover_ranks(monkeypatch):
    """Asserts, after the test, that no rank or launcher it started is still alive. Every process
    the test starts inherits a token in its environment, which is how they are found."""
    token = uuid.uuid4().hex
    monkeypatch.setenv("PERFSUITE_TEST_TOKEN", token)
    yield
    left = worker_pids(token)
    reap(left)
    assert not left, f"processes left behind: {sorted(left)}"


def reap(pids: list[int]) -> None:
    """SIGKILL what a failed test left behind, after it is reported: a rank left spinning in
    MPI's progress loop would hold a core for the rest of the session and fail the tests after
    it for being slow."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def default_sigint() -> None:
    """``preexec_fn`` for a child a test will send SIGINT: a runner started from a script's
    background job (``nohup ... &``) ignores SIGINT, its children inherit that, and Python keeps
    an ignored SIGINT ignored, so the signal under test would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signalled(proc: subprocess.Popen, sig: int, timeout: float = 60.0) -> str:
    """Send ``sig`` to ``proc`` and return the rest of its output. One still running after
    ``timeout`` is killed, so its status (-9) fails the test that expected 128+N."""
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]


def slurm_unavailable(*programs: str) -> str | None:
    """Why no Slurm node here answers (``programs`` missing from PATH, no controller, no node
    up), or None when one does."""
    missing = [p for p in ("sinfo", *programs) if shutil.which(p) is None]
    if missing:
        return f"no Slurm here ({', '.join(missing)} not on PATH; .ci/slurm-up starts a one-node cluster)"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no Slurm controller answers ({exc})"
    if out.returncode != 0 or not any(s.strip() in ("idle", "mix", "alloc") for s in out.stdout.split()):
        return f"no Slurm node is up (sinfo: {(out.stderr or out.stdout).strip()[:120]!r})"
    return None


# The container images' fixtures (podman_ready, images, no_leftover_containers), for every module.
from stack import images, no_leftover_containers, podman_ready  # noqa: E402, F401


#: What CI's pytest-xdist workers set: the pytest sessions a test starts (pytester, a user's
#: `pytest benchmarks`) are no xdist workers, and pytest-benchmark and perfsuite would read these.
XDIST = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test not marked ``world`` may start no MPI world, here or in a command it runs, nor in a
    fixture it is the first to ask for (``launch.world.UNMARKED``, set before any fixture is
    made): CI runs the unmarked tests side by side, the marked ones alone."""
    from perfsuite.launch.world import UNMARKED

    saved = {name: os.environ.get(name) for name in (UNMARKED, *XDIST)}
    for name in XDIST:
        os.environ.pop(name, None)
    if item.get_closest_marker("world") is None:
        os.environ[UNMARKED] = item.nodeid
    else:
        os.environ.pop(UNMARKED, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

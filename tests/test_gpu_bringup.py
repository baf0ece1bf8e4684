"""scripts/gpu-bringup.sh and scripts/gpu-wheels.sh, on this CPU machine, from a Python that
imitates the lent GPU machine's: mpi4py and perfsuite's other dependencies, but no MPI library and
no mpiexec (a venv over this one: it sees this venv's packages, while its own prefix, where mpi4py
looks for libmpi, holds none). Without wheels the bring-up says in one line what is missing and
what to carry; with the mpich wheel carried in a folder, the venv it makes runs real worlds."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BRINGUP = REPO / "scripts" / "gpu-bringup.sh"
WHEELS = REPO / "scripts" / "gpu-wheels.sh"
# No venv's bin on PATH: the imitated machine has no mpiexec anywhere.
BARE_PATH = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if os.path.isdir(p))


def machine_python(where: Path) -> Path:
    """A Python with this venv's packages and no MPI library of its own."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = subprocess.run([str(where / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_test_venv.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return where / "bin" / "python"


def bringup(python: Path, venv: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(BRINGUP), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": BARE_PATH, "PYTHON": str(python), "VENV": str(venv)})


@pytest.fixture(scope="module")
def carried(tmp_path_factory) -> Path:
    """The wheels scripts/gpu-wheels.sh fetches, for CPython 3.12 as on the GPU machine."""
    out = tmp_path_factory.mktemp("wheels")
    done = subprocess.run(["bash", str(WHEELS), str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHON": sys.executable})
    if done.returncode != 0:
        pytest.skip(f"scripts/gpu-wheels.sh could not download the wheels (no package index?): "
                    f"{done.stderr.strip().splitlines()[-1:]}")
    return out


def test_scripts_parse():
    for script in (BRINGUP, WHEELS):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
        assert os.access(script, os.X_OK)


def test_the_wheels_to_carry_are_listed_with_their_sizes(carried):
    (whl,) = carried.glob("mpich-*.whl")
    assert "manylinux" in whl.name
    assert whl.stat().st_size < 64 << 20


def test_with_no_mpi_library_it_says_what_to_carry_in_one_line(tmp_path):
    python = machine_python(tmp_path / "machine")
    probe = subprocess.run([str(python), "-c", "from mpi4py import MPI"], capture_output=True, text=True)
    assert probe.returncode != 0 and "cannot load MPI library" in probe.stderr  # the imitation holds
    (tmp_path / "none").mkdir()
    done = bringup(python, tmp_path / "venv", str(tmp_path / "none"))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Traceback" not in out
    missing = [line for line in done.stdout.splitlines() if line.startswith("NO ")]
    assert missing and all(line.startswith("NO MPI: mpi4py ") for line in missing), out
    assert "finds no MPI library" in missing[0] and "scripts/gpu-wheels.sh" in missing[0]
    assert done.stdout.rstrip().splitlines()[-1].startswith("gpu-bringup: not ready: no wheels in")


def test_a_missing_wheel_folder_is_bad_input(tmp_path):
    done = bringup(Path(sys.executable), tmp_path / "venv", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stdout.strip() == (f"gpu-bringup: wheel folder '{tmp_path / 'nowhere'}' does not exist; "
                                   "name the folder the carried wheels are in")


@pytest.mark.world
def test_with_the_mpich_wheel_carried_its_venv_runs_host_worlds(tmp_path, carried, no_leftover_ranks):
    python = machine_python(tmp_path / "machine")
    venv = tmp_path / "venv"
    done = bringup(python, venv, str(carried))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"installed {next(carried.glob('mpich-*.whl')).name}" in done.stdout
    assert f"ok mpiexec: {venv}/bin/mpiexec" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith(f"gpu-bringup: ready: {venv}/bin/perfsuite")
    # The machine's own packages are used as they are, not installed a second time.
    assert not list(Path(venv, "lib").glob("python*/site-packages/numpy"))
    run = subprocess.run([str(venv / "bin" / "perfsuite"), "run", "--transports", "mpi,ring", "--sizes", "4,1MiB",
                          "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PATH": BARE_PATH})
    assert run.returncode == 0, run.stdout + run.stderr
    from perfsuite.store.formats import load_run

    result = load_run(tmp_path / "r.json")
    assert sorted((s.case.transport, s.case.size_bytes) for s in result.samples()) == [
        ("mpi", 4), ("mpi", 1 << 20), ("ring", 4), ("ring", 1 << 20)]
    assert all(s.valid for s in result.samples())
    mpi = result.results[0].extra["imports"]["mpi"]
    assert mpi["file"].startswith(str(venv)) and "MPICH" in mpi["version"]
    # A second bring-up reuses the venv and keeps the installed MPI.
    again = bringup(python, venv, str(carried))
    assert again.returncode == 0 and "kept the MPI library mpi4py already loads" in again.stdout


FIRST_CONTACT = REPO / "scripts" / "gpu-first-contact.sh"


def test_first_contact_brings_up_then_says_there_is_no_gpu(tmp_path):
    """The stages a lent GPU machine runs: here, with no GPU, the bring-up runs and one line ends it."""
    assert subprocess.run(["bash", "-n", str(FIRST_CONTACT)]).returncode == 0
    (tmp_path / "none").mkdir()
    env = {**os.environ, "PATH": BARE_PATH, "PYTHON": sys.executable, "VENV": str(tmp_path / "venv"),
           "WHEELS": str(tmp_path / "none"), "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(FIRST_CONTACT), "measure"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().splitlines()[-1] == ("gpu-first-contact: no GPU here: nvidia-smi lists none; "
                                                     "the bring-up above is all this machine can show")
    assert "gpu-bringup: ready" in done.stdout
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["bringup.log"]
    bad = subprocess.run(["bash", str(FIRST_CONTACT), "every"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2
    assert bad.stdout.strip() == ("gpu-first-contact: stage 'every' is unknown; "
                                  "run it with smoke, measure, pytest or all")


def first_contact_all(tmp_path: Path, budget: int) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """`all` with only its epoch step (STEPS=epoch), a listed GPU (a fake nvidia-smi) and
    ALL_BUDGET=budget; the step's command is not run: a `timeout` first on PATH writes down what
    it was asked to run and under what limit, and passes every other command to the real one."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: a listed GPU'\n")
    calls = tmp_path / "timeout-calls"
    calls.write_text("")
    real = shutil.which("timeout", path=BARE_PATH)
    (fake / "timeout").write_text(
        "#!/bin/sh\n"
        'case "$4" in */perfsuite) printf "%s\\n" "$*" >> ' + f'"{calls}"; exit 0 ;; esac\n'
        f'exec "{real}" "$@"\n')
    for tool in ("nvidia-smi", "timeout"):
        (fake / tool).chmod(0o755)
    (tmp_path / "none").mkdir(exist_ok=True)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{BARE_PATH}", "PYTHON": sys.executable,
           "VENV": str(tmp_path / "venv"), "WHEELS": str(tmp_path / "none"), "OUT": str(tmp_path / f"out{budget}"),
           "STEPS": "epoch", "ALL_BUDGET": str(budget)}
    done = subprocess.run(["bash", str(FIRST_CONTACT), "all"], capture_output=True, text=True,
                          timeout=300, env=env)
    return done, [line.split() for line in calls.read_text().splitlines()]


def test_first_contact_in_one_call_ends_inside_its_budget(tmp_path):
    """`all` cuts each step to what is left of its budget, and names a step it had no time for.
    Both are read from what the script says and runs, never from how long this machine took:
    the budget is counted from the end of the bring-up, so what is left is at most the budget
    however slow the machine is, and a step needs 20 s of it to start."""
    # 5 s: less than a step needs, whatever part of it is left when the step comes
    done, calls = first_contact_all(tmp_path, 5)
    assert done.returncode == 1, done.stdout + done.stderr
    m = re.search(r"^== torch-nccl training epoch, n=1: not run, (-?\d+) s left of the call's budget$",
                  done.stdout, re.M)
    assert m and int(m.group(1)) <= 5, done.stdout
    assert calls == [] and done.stdout.rstrip().splitlines()[-1] == \
        f"gpu-first-contact: FAILED: 1 step(s); files in {tmp_path / 'out5'}"

    # 89 s: enough to start the step (90 s alone), which then gets what is left, at most 89
    done, calls = first_contact_all(tmp_path, 89)
    assert done.returncode == 0, done.stdout + done.stderr
    m = re.search(r"^== torch-nccl training epoch, n=1 \(limit (\d+) s\)$", done.stdout, re.M)
    assert m and 20 <= int(m.group(1)) <= 89, done.stdout
    ((k, grace, limit, exe, *args),) = calls
    assert (k, grace, limit) == ("-k", "10", m.group(1)) and exe == str(tmp_path / "venv" / "bin" / "perfsuite")
    assert args[:3] == ["run", "--benchmarks", "torch-epoch"]
    assert "== torch-nccl training epoch, n=1: exit 0 after" in done.stdout


def test_a_cupy_is_kept_from_version_14():
    from perfsuite.machine import cupy_new_enough

    assert cupy_new_enough("14.2.0") and cupy_new_enough("15.0.0rc1")
    assert not cupy_new_enough("13.6.0") and not cupy_new_enough("9.0")

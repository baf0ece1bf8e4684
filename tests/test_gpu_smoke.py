"""scripts/gpu-smoke.sh, the check for a bare GPU machine: it parses, it ends cleanly where there
is no GPU, its worst case fits the GPU machine's limit, its worlds-and-table part runs (on host
transports here) and fails on a failure, it leaves two files in $OUT, and without an MPI library
it says so in one line before starting any world."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from perfsuite.transports.gpu import need_gpu

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu-smoke.sh"
#: What the tool that runs the smoke on a lent GPU machine brings back from $OUT, and the whole
#: smoke's budget (that tool stops one command at 10 minutes).
MAX_FILES = 8
BUDGET_S = 480
WORST = re.compile(r"^gpu-smoke: worst case (\d+)m(\d\d)s \((.*) = (\d+) s\)$", re.M)


def smoke(tmp_path, **env) -> subprocess.CompletedProcess:
    # The venv's bin first: mpiexec and this Python, as on a GPU box with its own MPI on PATH.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("SMOKE_")}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=600,
                          env={**base, "PATH": path, "PYTHON": sys.executable,
                               "OUT": str(tmp_path / "out"), **env})


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def worst_case(stdout: str) -> int:
    """The worst-case line's seconds, checked against its own breakdown and its m/s form."""
    m = WORST.search(stdout)
    assert m, stdout
    minutes, seconds, parts, total = int(m[1]), int(m[2]), m[3], int(m[4])
    assert minutes * 60 + seconds == total
    summed = 0
    for part in parts.split(", "):  # "4 transports x 75 s", "nccl(graph) 45 s", "3 probes x 25 s", "machine 40 s"
        times = re.fullmatch(r"(\d+) \w+ x (\d+) s", part)
        one = re.fullmatch(r"\S+ (\d+) s", part)
        assert times or one, part
        summed += int(times[1]) * int(times[2]) if times else int(one[1])
    assert summed == total, stdout
    return total


def embedded_helper() -> str:
    """The Python the script runs for a run's rows and for smoke.json."""
    text = SCRIPT.read_text()
    return text.split("helper=$(cat <<'PY'\n", 1)[1].split("\nPY\n)", 1)[0]


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    assert os.access(SCRIPT, os.X_OK)


def test_without_a_gpu_it_says_so_and_starts_nothing(tmp_path):
    reason = need_gpu()
    if reason is None:
        pytest.skip("this machine has a GPU: the script runs its worlds instead")
    done = smoke(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"gpu-smoke: no GPU here: {reason}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_its_worst_case_fits_the_budget_at_the_defaults(tmp_path):
    done = smoke(tmp_path, SMOKE_PLAN_ONLY="1")
    assert done.returncode == 0, done.stdout + done.stderr
    # the four GPU transports, the nccl(graph) world and the probes are all counted
    assert "4 transports x " in done.stdout and "nccl(graph) " in done.stdout
    assert worst_case(done.stdout) <= BUDGET_S
    assert "warning" not in done.stdout
    assert not (tmp_path / "out").exists()

    slow = smoke(tmp_path, SMOKE_PLAN_ONLY="1", SMOKE_TIMEOUT="200")
    assert slow.returncode == 0, slow.stdout + slow.stderr  # a warning, not a refusal
    assert worst_case(slow.stdout) > BUDGET_S
    warning = [line for line in slow.stdout.splitlines() if "warning" in line]
    assert len(warning) == 1 and "SMOKE_TIMEOUT=" in warning[0], slow.stdout
    fits = int(re.search(r"SMOKE_TIMEOUT=(\d+)", warning[0])[1])
    assert worst_case(smoke(tmp_path, SMOKE_PLAN_ONLY="1", SMOKE_TIMEOUT=str(fits)).stdout) <= BUDGET_S

    assert smoke(tmp_path, SMOKE_TIMEOUT="5m").returncode == 2


@pytest.mark.world
def test_its_worlds_and_table_run_on_host_transports(tmp_path, no_leftover_ranks):
    done = smoke(tmp_path, SMOKE_TRANSPORTS="mpi", SMOKE_SIZES="4,4KiB")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("mpi ")]
    assert [(r[1], r[2], r[5]) for r in rows] == [("1", "4B", "OK"), ("1", "4KiB", "OK"),
                                                  ("2", "4B", "OK"), ("2", "4KiB", "OK")]
    assert done.stdout.rstrip().endswith("gpu-smoke: passed")
    assert done.stdout.startswith("gpu-smoke: worst case ") and worst_case(done.stdout) <= BUDGET_S
    # the rows come right after their run, before the final section
    lines = done.stdout.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("mpi "))) < lines.index(
        next(x for x in lines if x.startswith("== results")))

    out = tmp_path / "out"
    files = files_under(out)
    assert len(files) <= MAX_FILES
    assert [p.name for p in files] == ["smoke.json", "smoke.log"]
    log = (out / "smoke.log").read_text()
    assert all(line in log for line in lines), "smoke.log lacks lines the smoke printed"
    assert "# results written to" in log  # perfsuite run's own output is in it too
    doc = json.loads((out / "smoke.json").read_text())
    assert doc["smoke_version"] == 1 and doc["problems"] == [] and doc["worst_case_s"] <= BUDGET_S
    assert list(doc["runs"]) == ["mpi"]
    results = doc["runs"]["mpi"]["results"]
    assert sorted((r["world_size"], s["case"]["size_bytes"], s["valid"]) for r in results
                  for s in r["samples"]) == [(1, 4, True), (1, 4096, True), (2, 4, True), (2, 4096, True)]

    # A world whose ranks shared one GPU says so on its rows, after the columns the rows keep.
    for r in results:
        if r["world_size"] == 2:
            r.setdefault("extra", {}).setdefault("transport_facts", {})["ranks_per_gpu"] = 2
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps(doc["runs"]["mpi"]))
    table = subprocess.run([sys.executable, "-c", embedded_helper(), "rows", "mpi", "0", "75", str(shared)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert table.returncode == 0, table.stdout + table.stderr
    rows = [line for line in table.stdout.splitlines() if line.startswith("mpi ")]
    assert [(r.split()[1], r.split()[5], r.endswith("time-sliced (2 ranks on 1 GPU)")) for r in rows] == [
        ("1", "OK", False), ("1", "OK", False), ("2", "OK", True), ("2", "OK", True)]


@pytest.mark.world
def test_a_failed_world_fails_the_smoke(tmp_path, no_leftover_ranks):
    if shutil.which("mpiexec", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("no mpiexec beside this Python")
    done = smoke(tmp_path, SMOKE_TRANSPORTS="mpi", SMOKE_SIZES="4,4KiB",
                 PERFSUITE_TEST_FAULT="kill@1@4096")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: " in done.stdout and done.stdout.rstrip().endswith("gpu-smoke: FAILED")
    files = files_under(tmp_path / "out")
    assert len(files) <= MAX_FILES and [p.name for p in files] == ["smoke.json", "smoke.log"]
    doc = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert [p.split(":")[0] for p in doc["problems"]] == ["mpi"]
    assert {f["world_size"] for f in doc["runs"]["mpi"]["failures"]} == {2}


def python_without_mpi(folder: Path) -> Path:
    """A venv that sees this venv's packages (mpi4py among them) but whose prefix has no libmpi:
    mpi4py looks in sys.exec_prefix/lib and the loader's path, and finds none."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    made = subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a venv with {base}: {made.stderr.strip()[-200:]}")
    python = folder / "bin" / "python"
    theirs = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(theirs) / "_parent.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    loads = subprocess.run([str(python), "-c", "import mpi4py; mpi4py.rc.initialize = False; "
                            "from mpi4py import MPI"], capture_output=True, text=True)
    if loads.returncode == 0 or "cannot load MPI library" not in loads.stderr:
        pytest.skip(f"mpi4py finds an MPI library even from {folder} (on the loader's path?)")
    return python


def test_without_an_mpi_library_it_says_so_in_one_line_and_starts_no_world(tmp_path):
    python = python_without_mpi(tmp_path / "nompi")
    done = smoke(tmp_path, PYTHON=str(python), SMOKE_TRANSPORTS="mpi", SMOKE_SIZES="4")
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "Traceback" not in text
    diagnosis = [line for line in done.stdout.splitlines() if line.startswith("NO ")]
    assert len(diagnosis) == 1, text
    assert diagnosis[0].startswith("NO MPI: ") and "finds no MPI library" in diagnosis[0]
    assert "gpu-bringup.sh" in diagnosis[0]  # the hint: what to carry in and run
    assert "== mpi (" not in done.stdout  # no world started
    assert done.stdout.rstrip().endswith("gpu-smoke: FAILED")
    doc = json.loads((tmp_path / "out" / "smoke.json").read_text())
    assert doc["runs"] == {} and doc["problems"] == diagnosis
    assert [p.name for p in files_under(tmp_path / "out")] == ["smoke.json", "smoke.log"]

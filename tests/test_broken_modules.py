"""Issue 51's faults that a user's own benchmark module brings, each as the user meets it (a
real ``python -m perfsuite`` or ``python -m pytest`` process): one line naming the fault, the
exit status the docs promise, quickly, and nothing else broken by it.

- a syntax error (or a failing import) in a ``--benchmarks`` file: FILE:LINE and the error, exit 2;
- the same in a module of the ``perfsuite.benchmarks`` entry-point group, installed in the
  environment: only the commands that name its benchmarks fail (one line, exit 2);
  ``perfsuite transports``, the other entry points' benchmarks and an unrelated pytest session
  run (pytest with one warning, never a plugin that fails to load);
- a user's check that returns False: the world's one INVALID line names that check, exit 4;
- ``ab`` without ``--transports`` on a step declared for torch-gloo only: it runs torch-gloo,
  and a transport the step does not declare is exit 2, one line, before any world.

The entry points are installed as pip installs one, a ``.dist-info`` folder with its
``entry_points.txt`` beside the package, on a path the processes get on PYTHONPATH, so the
venv the other tests run in is never changed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SWITCHES, said

#: Seconds any of these may take: they take about one (a world: a few); a bound only a hang
#: or a world timeout (300 s) could cross, never a busy machine.
QUICK_S = 120.0
WORLD_S = 300.0

SYNTAX_ERROR = '''import perfsuite


@perfsuite.benchmark(world_sizes=[2]
def broken(world):
    return None
'''

IMPORT_ERROR = '''import perfsuite
import no_such_module_of_the_user


@perfsuite.benchmark(world_sizes=[2])
def missing(world):
    return None
'''

GOOD = '''import perfsuite


@perfsuite.benchmark(world_sizes=[2])
def good_step(world):
    return None
'''

#: A declaration perfsuite refuses (ConfigError) at import: a module that imports no more than
#: one with a syntax error.
REFUSED = '''import perfsuite


@perfsuite.benchmark(device="tpu")
def refused(world):
    return None
'''

WRONG_CHECK = '''import numpy as np
from mpi4py import MPI
import perfsuite


@perfsuite.benchmark(world_sizes=[2], max_time=0.05)
def wrong_sum(world):
    buf = np.ones(100)

    def step():
        world.comm.Allreduce(MPI.IN_PLACE, buf)

    return step, lambda: False
'''

TORCH_ONLY = '''import perfsuite


@perfsuite.benchmark(world_sizes=[2], transports=["torch-gloo"], max_time=0.05, params={"n": [64]})
def torch_step(world, n):
    import torch

    t = torch.ones(n)

    def step():
        t.fill_(1.0)
        world.dist.all_reduce(t)

    return step, lambda: bool((t == world.world_size).all())
'''


def run(args: list[str], cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """A command as the user runs it, without the suite's test switches; and its seconds."""
    clean = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("MPIR_CVAR_")}
    started = time.monotonic()
    r = subprocess.run([sys.executable, *args], cwd=cwd, env={**clean, **env}, capture_output=True, text=True,
                       timeout=WORLD_S + 60)
    return r, time.monotonic() - started


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def one_error_line(r: subprocess.CompletedProcess) -> str:
    """The command's one line on stderr (and no traceback anywhere)."""
    assert "Traceback" not in r.stdout + r.stderr, said(r)
    got = lines(r.stderr)
    assert len(got) == 1, said(r)
    return got[0]


def install(site: Path, dist: str, modules: dict[str, str], entry_points: dict[str, str]) -> None:
    """``dist`` as pip leaves it in a site folder: its modules, and ``NAME-VERSION.dist-info``
    with METADATA and the ``perfsuite.benchmarks`` entry points."""
    for name, text in modules.items():
        (site / f"{name}.py").write_text(text)
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[perfsuite.benchmarks]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))


@pytest.fixture
def venv_with_broken(tmp_path) -> dict[str, str]:
    """The environment of a venv where three user packages are installed under the
    ``perfsuite.benchmarks`` group: one with a syntax error, one whose declaration perfsuite
    refuses, and a good one. Returns the variables that make a process see them."""
    site = tmp_path / "site"
    site.mkdir()
    install(site, "brokenbench", {"brokenbench": SYNTAX_ERROR}, {"broken": "brokenbench"})
    install(site, "refusedbench", {"refusedbench": REFUSED}, {"refused": "refusedbench"})
    install(site, "goodbench", {"goodbench": GOOD}, {"good": "goodbench"})
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_a_syntax_error_in_a_benchmarks_file_is_one_line_naming_file_and_line_exit_2(tmp_path):
    (tmp_path / "test_bad.py").write_text(SYNTAX_ERROR)
    for command in (["run"], ["ab"], ["bisect", "--good", "HEAD~1", "--bad", "HEAD"]):
        r, seconds = run(["-m", "perfsuite", *command, "--benchmarks", "test_bad.py"], tmp_path)
        assert r.returncode == 2, said(r)
        line = one_error_line(r)
        assert line.startswith(f"perfsuite {command[0]}: error: --benchmarks names 'test_bad.py', which cannot be "
                               f"imported: {tmp_path / 'test_bad.py'}:4: SyntaxError: "), line
        assert seconds < QUICK_S, seconds
    (tmp_path / "test_missing.py").write_text(IMPORT_ERROR)
    r, seconds = run(["-m", "perfsuite", "run", "--benchmarks", "test_missing.py"], tmp_path)
    assert r.returncode == 2 and seconds < QUICK_S, said(r)
    assert one_error_line(r).endswith(f"{tmp_path / 'test_missing.py'}:2: ModuleNotFoundError: "
                                      "No module named 'no_such_module_of_the_user'"), said(r)


def test_a_broken_entry_point_fails_only_the_commands_that_name_its_benchmarks(tmp_path, venv_with_broken):
    r, seconds = run(["-m", "perfsuite", "transports"], tmp_path, **venv_with_broken)
    assert r.returncode == 0 and seconds < QUICK_S, said(r)
    assert "torch-gloo" in r.stdout and not r.stderr.strip(), said(r)
    r, _ = run(["-m", "perfsuite", "transports", "--benchmarks", "broken"], tmp_path, **venv_with_broken)
    assert r.returncode == 2 and "entry point 'broken' (brokenbench) cannot be imported: " in one_error_line(r)
    r, _ = run(["-m", "perfsuite", "run", "--help"], tmp_path, **venv_with_broken)
    assert r.returncode == 0 and "good_step" in r.stdout, said(r)  # the good package's benchmark is there
    for command in (["run"], ["ab"]):
        r, seconds = run(["-m", "perfsuite", *command, "--benchmarks", "broken"], tmp_path, **venv_with_broken)
        assert r.returncode == 2 and seconds < QUICK_S, said(r)
        line = one_error_line(r)
        assert line.startswith(f"perfsuite {command[0]}: error: benchmark 'broken' is unknown; choose from allreduce"), line
        site = Path(venv_with_broken["PYTHONPATH"].split(os.pathsep)[0])
        assert (f"the perfsuite.benchmarks entry point 'broken' (brokenbench) cannot be imported: "
                f"{site / 'brokenbench.py'}:4: SyntaxError: ") in line, line
        assert (f"the perfsuite.benchmarks entry point 'refused' (refusedbench) cannot be imported: "
                f"{site / 'refusedbench.py'}:4: ConfigError: refused: device 'tpu' must be one of cpu, cuda") in line
    # The good package's benchmark is selected as ever: here its cases on a transport it does not
    # declare, which is refused before any world starts.
    r, _ = run(["-m", "perfsuite", "run", "--benchmarks", "good_step", "--transports", "torch-gloo"], tmp_path,
               **venv_with_broken)
    assert r.returncode == 2 and "good_step has no case on the transports torch-gloo: it declares mpi" in \
        one_error_line(r), said(r)


def test_an_unrelated_pytest_session_passes_beside_a_broken_entry_point(tmp_path, venv_with_broken):
    (tmp_path / "test_unrelated.py").write_text("def test_arithmetic():\n    assert 1 + 1 == 2\n")
    r, seconds = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_unrelated.py"], tmp_path,
                     **venv_with_broken)
    assert r.returncode == 0 and seconds < QUICK_S, said(r)
    assert "1 passed" in r.stdout, said(r)
    out = r.stdout + r.stderr
    assert "Traceback" not in out and "INTERNALERROR" not in out, said(r)
    # one warning line per module that did not import, each naming its file and line
    said_broken = [line for line in lines(out) if "entry point 'broken'" in line]
    assert len(said_broken) == 1 and "PytestConfigWarning: perfsuite: " in said_broken[0], said(r)
    assert "brokenbench.py:4: SyntaxError" in said_broken[0]
    assert len([line for line in lines(out) if "entry point 'refused'" in line]) == 1, said(r)


def test_python_dash_m_perfsuite_is_the_command_line(tmp_path):
    r, _ = run(["-m", "perfsuite", "--version"], tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("perfsuite "), said(r)
    r, _ = run(["-m", "perfsuite", "no-such-command"], tmp_path)
    assert r.returncode == 2 and one_error_line(r).startswith("perfsuite: error: argument COMMAND: invalid choice")


@pytest.mark.world
def test_a_check_that_returns_false_is_one_invalid_line_naming_the_users_check_exit_4(tmp_path, no_leftover_ranks):
    (tmp_path / "test_wrong.py").write_text(WRONG_CHECK)
    r, seconds = run(["-m", "perfsuite", "run", "--benchmarks", "test_wrong.py", "--iters", "10", "--warmup", "1",
                      "--json", "r.json"], tmp_path)
    assert r.returncode == 4 and seconds < WORLD_S, said(r)
    assert "Traceback" not in r.stdout + r.stderr
    # stderr holds the progress lines only ('# ...'); the verdict is one line, on stdout
    assert [line for line in lines(r.stderr) if not line.startswith("#")] == [], said(r)
    invalid = [line for line in lines(r.stdout + r.stderr) if "INVALID" in line]
    assert invalid == ["INVALID: wrong_sum[mpi-n2] returned wrong results on ranks 0, 1 (wrong_sum's check "
                       "returned False): a failed world, not a measurement"], said(r)
    # what was measured is kept: the sample, marked invalid
    (sample,) = json.loads((tmp_path / "r.json").read_text())["results"][0]["samples"]
    assert sample["valid"] is False and sample["info"]["iters"] == 10


def test_ab_on_a_transport_the_step_does_not_declare_is_one_line_before_any_world(tmp_path):
    (tmp_path / "test_tm.py").write_text(TORCH_ONLY)
    for command in (["ab", "--transports", "mpi"], ["bisect", "--transports", "mpi", "--good", "HEAD~1", "--bad", "HEAD"]):
        r, seconds = run(["-m", "perfsuite", *command, "--benchmarks", "test_tm.py"], tmp_path)
        assert r.returncode == 2 and seconds < QUICK_S, said(r)
        assert one_error_line(r) == (
            f"perfsuite {command[0]}: error: torch_step has no case on the transports mpi: it declares torch-gloo "
            "(@perfsuite.benchmark(transports=...)); name one of them, e.g. --transports torch-gloo"), said(r)


@pytest.mark.world
@pytest.mark.torch
def test_ab_without_transports_runs_the_one_the_step_declares(tmp_path, no_leftover_ranks):
    pytest.importorskip("torch")
    (tmp_path / "test_tm.py").write_text(TORCH_ONLY)
    r, seconds = run(["-m", "perfsuite", "ab", "--benchmarks", "test_tm.py", "--max-pairs", "2", "--iters", "20",
                      "--warmup", "2"], tmp_path)
    assert r.returncode == 0 and seconds < WORLD_S, said(r)
    assert "# A/B: 1 case(s)" in r.stdout and "torch_step[torch-gloo-n2-n=64]" in r.stdout, said(r)
    # the step's own module has no version and no repository: named so, not "None"
    assert "test_tm unversioned from " in r.stdout and " None " not in r.stdout, said(r)

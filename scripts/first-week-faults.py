"""A user's first week, measured (issue 51): each fault a real setup meets, made to happen as the
user meets it, in a scratch folder, by this venv's perfsuite; for each, the seconds to the exit,
the exit status, and the lines that report it (stderr's lines that are not progress, and the
FAILED/INVALID/stopped lines of the results). Prints a Markdown table, the one
docs/measurements.md quotes ("A user's first week").

    python scripts/first-week-faults.py [--runs 3]   # from a clone's venv (pip install -e ".[test,torch]")

The user's project is tests/data/userproj (tinyproj) in a git repository of its own, installed with
perfsuite into a plain venv of the machine's Python (PLAIN_PYTHON, else python3 on PATH); its
commits' environments are built in the scratch folder. Every row starts real processes: no row
is simulated. tests/test_start_deadline.py, test_repeats.py, test_commit_preflight.py and
test_broken_modules.py hold each row to its status and its one line.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
USERPROJ = HERE / "tests" / "data" / "userproj"
GIT = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@u", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@u"}
SWITCHES = ("PERFSUITE_TEST_FAULT", "PERFSUITE_INJECT_SLOWDOWN")
#: The machine's own Python, for the plain venv (not this venv's, whose packages differ).
PYTHON = os.environ.get("PLAIN_PYTHON") or shutil.which("python3") or sys.executable

MINE = '''import numpy as np
import perfsuite
from tinyproj.work import normalise


@perfsuite.benchmark(world_sizes=[2], params={"rows": [32]}, max_time=0.1)
def mine(world, rows):
    x = np.random.default_rng(world.rank).random((rows, 64))
    return lambda: world.comm.allreduce(float(normalise(x)[0, 0]))


test_mine = mine.test
'''
SYNTAX = "import perfsuite\n\n\n@perfsuite.benchmark(world_sizes=[2]\ndef broken(world):\n    return None\n"
WRONG = '''import numpy as np
from mpi4py import MPI
import perfsuite


@perfsuite.benchmark(world_sizes=[2], max_time=0.05)
def wrong_sum(world):
    buf = np.ones(100)

    def step():
        world.comm.Allreduce(MPI.IN_PLACE, buf)

    return step, lambda: False
'''
GLOO = '''import torch
import perfsuite


@perfsuite.benchmark(world_sizes=[2], transports=["torch-gloo"], max_time=0.1)
def gloo_sum(world):
    t = torch.ones(1000)
    return lambda: world.dist.all_reduce(t)
'''
UNRELATED = "def test_unrelated():\n    assert 1 + 1 == 2\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT}).stdout.strip()


def commit(repo: Path, path: str, text: str, message: str) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def tinyproj(where: Path) -> Path:
    shutil.copytree(USERPROJ, where, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    git(where, "init", "-q")
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "base")
    return where


def measure(fault: str, argv: list[str], cwd: Path, env: dict | None = None) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("MPIR_CVAR_")}
    t0 = time.monotonic()
    got = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900, env={**clean, **(env or {})})
    seconds = time.monotonic() - t0
    said = [line for line in got.stderr.splitlines() if line.strip() and not line.startswith("#")
            and "warnings summary" not in line]
    said += [line for line in got.stdout.splitlines() if line.startswith(("# FAILED", "INVALID", "# stopped"))
             or " passed" in line or " failed" in line]
    shown = [Path(a).name if a.startswith("/") else a[:10] if len(a) == 40 else a
             for a in (argv[1:] if argv[0] == "bash" else argv[2:])]
    # what a run that ends well said last: its verdict row, else its last line
    verdict = [line for line in got.stdout.splitlines() if re.search(r"\b(DIFFERENT|SAME|UNKNOWN)\b|  new \(", line)]
    last = (verdict or [line for line in got.stdout.splitlines() if line.strip()] or [""])[-1]
    return {"fault": fault, "command": " ".join(shown), "seconds": seconds, "exit": got.returncode, "lines": said,
            "last": last}


def rows(scratch: Path) -> list[dict]:
    py = [sys.executable, "-m", "perfsuite"]
    out = []
    run = ["run", "--transports", "mpi,ring", "--world-sizes", "2,3", "--sizes", "4"]

    proxyless = scratch / "bin" / "mpiexec"  # a venv that lost hydra_pmi_proxy
    proxyless.parent.mkdir()
    shutil.copy2(Path(sys.executable).parent / "mpiexec", proxyless)
    out.append(measure("a launcher that prints a fatal line and hangs", py + run + ["--launcher-program", str(proxyless)],
                       scratch))
    out.append(measure("a launcher that exits at once", py + run + ["--launcher-args=-no-such-flag"], scratch))

    out.append(measure("ranks whose mpi4py cannot load its MPI (a stale MPI4PY_LIBMPI)",
                       py + run + ["--env", "MPI4PY_LIBMPI=/nonexistent/libmpi.so.12"], scratch))
    out.append(measure("the same failure in every world of one arm (its rank 0 raises: the test-only fault switch)",
                       py + ["ab", "--transports", "mpi", "--sizes", "4", "--b-env", "PERFSUITE_TEST_FAULT=raise@0"],
                       scratch))
    bare = scratch / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    out.append(measure("a Python that cannot import mpi4py (an arm's venv)",
                       py + ["ab", "--transports", "mpi", "--sizes", "4", "--b-python", str(bare / "bin" / "python")],
                       scratch))

    broken = tinyproj(scratch / "broken")
    text = (broken / "pyproject.toml").read_text()
    commit(broken, "pyproject.toml", text.replace('packages = ["tinyproj"]', 'packages = ["tinyproj", "gone"]'),
           "packaging: a folder that is not there")
    out.append(measure("a commit whose tree does not build", py + ["ab", "--a-ref", "HEAD", "--b-ref", "HEAD~1",
                                                                  "--env-dir", str(scratch / "envs1")], broken))

    lib = tinyproj(scratch / "lib")
    commit(lib, "README.md", "a harmless change\n", "docs")
    out.append(measure("a commit env that cannot load libmpi (MPI4PY_LIBMPI names one since removed)",
                       py + ["ab", "--a-ref", "HEAD~1", "--b-ref", "HEAD", "--env-dir", str(scratch / "envs2")], lib,
                       {"MPI4PY_LIBMPI": str(scratch / "gone" / "libmpi.so.12")}))

    # The user's own venv, as the docs say to make it: the machine's Python (its setuptools, no
    # wheel), perfsuite and the user's project installed by pip; the project's first pull request
    # adds a benchmark.
    pr = tinyproj(scratch / "pr")
    base = git(pr, "rev-parse", "HEAD")
    commit(pr, "benchmarks/test_mine.py", MINE, "a benchmark of my own")
    plain = scratch / "plain"
    subprocess.run([PYTHON, "-m", "venv", str(plain)], check=True)
    subprocess.run([str(plain / "bin" / "pip"), "install", "-q", str(HERE), "-e", str(pr)], check=True)
    user = [str(plain / "bin" / "python"), "-m", "perfsuite"]
    out.append(measure("a benchmark missing at one ref: the first pull request (A lacks it)",
                       user + ["ab", "--benchmarks", "benchmarks/test_mine.py", "--a-ref", base, "--b-ref", "HEAD",
                               "--env-dir", str(scratch / "envs3")], pr))
    out.append(measure("a benchmark missing at one ref: the PR recipe's gate (recipes/perf/pr-gate.sh)",
                       ["bash", str(HERE / "recipes" / "perf" / "pr-gate.sh")], pr,
                       {"PATH": f"{plain / 'bin'}{os.pathsep}{os.environ['PATH']}", "PERF_BASE": base,
                        "PERF_BENCHMARKS": "benchmarks/test_mine.py", "PERF_ENV_DIR": str(scratch / "envs3"),
                        "PERF_RESULTS": str(scratch / "pr-results")}))
    out.append(measure("a benchmark missing at one ref: bisect from a --good that lacks it",
                       user + ["bisect", "--benchmarks", "benchmarks/test_mine.py", "--good", base, "--bad", "HEAD",
                               "--env-dir", str(scratch / "envs3")], pr))
    work = (pr / "tinyproj" / "work.py").read_text()
    commit(pr, "tinyproj/work.py", work.replace("\nROW_BY_ROW = False\n", "\nROW_BY_ROW = True\n"),
           "work: normalise row by row")
    out.append(measure("none: ab of two commits from that plain venv (HEAD's step ~x3 slower)",
                       user + ["ab", "--benchmarks", "normalise_rows", "--a-ref", "HEAD~1", "--b-ref", "HEAD",
                               "--env-dir", str(scratch / "envs4")], pr))

    files = scratch / "files"
    files.mkdir()
    (files / "test_bad.py").write_text(SYNTAX)
    (files / "test_wrong.py").write_text(WRONG)
    (files / "test_gloo.py").write_text(GLOO)
    (files / "test_unrelated.py").write_text(UNRELATED)
    out.append(measure("a syntax error in a --benchmarks file", py + ["run", "--benchmarks", "test_bad.py"], files))

    site = scratch / "site"  # an installed module of the perfsuite.benchmarks group, as pip leaves one
    (site / "brokenbench-1.dist-info").mkdir(parents=True)
    (site / "brokenbench.py").write_text(SYNTAX)
    (site / "brokenbench-1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenbench\nVersion: 1\n")
    (site / "brokenbench-1.dist-info" / "entry_points.txt").write_text("[perfsuite.benchmarks]\nbroken = brokenbench\n")
    ep = {"PYTHONPATH": str(site)}
    out.append(measure("a syntax error in an entry point: the command that names it",
                       py + ["run", "--benchmarks", "broken"], files, ep))
    out.append(measure("a syntax error in an entry point: perfsuite transports", py + ["transports"], files, ep))
    out.append(measure("a syntax error in an entry point: an unrelated pytest session",
                       [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_unrelated.py"], files, ep))
    out.append(measure("a check that returns False", py + ["run", "--benchmarks", "test_wrong.py"], files))
    out.append(measure("ab on a torch-gloo step, --transports mpi (not declared)",
                       py + ["ab", "--benchmarks", "test_gloo.py", "--transports", "mpi"], files))
    out.append(measure("ab on a torch-gloo step, no --transports (its own is the default)",
                       py + ["ab", "--benchmarks", "test_gloo.py", "--max-pairs", "10"], files))
    return out


def main(argv: list[str]) -> int:
    """``--runs N``: the whole table N times (fresh scratch each), seconds as median [min, max]."""
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 1
    tables = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="perfsuite-first-week-") as scratch:
            tables.append(rows(Path(scratch)))
    print(f"| fault | command | s (median of {runs} [min, max]) | exit | lines | what it said |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(tables[0]):
        times = sorted(t[i]["seconds"] for t in tables)
        exits = sorted({t[i]["exit"] for t in tables})
        counts = sorted({len(t[i]["lines"]) for t in tables})
        first = (r["lines"][0] if r["lines"] else f"(stdout) {' '.join(r['last'].split())}").replace("|", "\\|")
        first = first if len(first) <= 220 else first[:217] + "..."
        spread = f" [{times[0]:.1f}, {times[-1]:.1f}]" if runs > 1 else ""
        print(f"| {r['fault']} | `{r['command']}` | {times[len(times) // 2]:.1f}{spread} | "
              f"{'/'.join(map(str, exits))} | {'/'.join(map(str, counts))} | {first} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

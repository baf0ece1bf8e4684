"""A stored baseline that decides (issue 52), measured as a user meets it: a project of their own in
a git repository, its benchmarks judged against baselines recorded on this machine, through both
faces (``perfsuite run --compare`` and ``pytest benchmarks --benchmark-only``). Every step starts
real worlds; nothing is simulated (``perfsuite validity`` is the simulation).

    python scripts/stored-decides.py flow [--sessions 4] [--gap S] [--confirm]
                                 # record, then a commit that doubles the work (judged again with --confirm)
    python scripts/stored-decides.py reruns [--count 20] [--every 180] [--gap S] [--then-slower]
                                                               # clean reruns after 4 sessions
    python scripts/stored-decides.py confirm [--slowdown 0.3]  # one session, a slower checkout, --confirm

Run it from a venv with perfsuite installed (``pip install -e ".[test]"``); the user's project is
installed (editable) into a venv of its own that sees this one's packages, as ``launch.envs``'s
overlay does, so commits' environments build offline. Each step prints one line: what ran, seconds,
exit status, the verdict rows (status, case, change, interval) and the run's last line.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIT = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@u", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@u"}
SWITCHES = ("PERFSUITE_TEST_FAULT", "PERFSUITE_INJECT_SLOWDOWN")

PYPROJECT = '''[project]
name = "mybench"
version = "0.1.0"
dependencies = []

[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["mybench"]
'''
WORK = '''import numpy as np

WORK = {work}  # how many passes a step makes over its data


def compute(x: np.ndarray) -> float:
    total = 0.0
    for _ in range(WORK):
        total += float(np.dot(x, x))
    return total
'''
MINE = '''import numpy as np
from mpi4py import MPI

import perfsuite
from mybench import compute


@perfsuite.benchmark(world_sizes=[2], params={"n": [10_000, 1_000_000]})
def compute_allreduce(world, n):
    x = np.ones(n)
    buf = np.zeros(1)

    def step():
        buf[0] = compute(x)
        world.comm.Allreduce(MPI.IN_PLACE, buf)
    return step


@perfsuite.benchmark(world_sizes=[2], params={"n": [1_000_000]})
def fill(world, n):
    buf = np.empty(n)
    return lambda: buf.fill(1.0)


test_compute_allreduce = compute_allreduce.test
test_fill = fill.test
'''
BENCH = ["--benchmarks", "benchmarks/test_mine.py"]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **GIT})


def project(scratch: Path, work: int = 1) -> tuple[Path, Path]:
    """(the project's repository, its venv's python): a fresh git repository with the benchmarks
    above, installed editable into a venv that sees this venv's packages."""
    proj = scratch / "proj"
    (proj / "benchmarks").mkdir(parents=True)
    (proj / "mybench").mkdir()
    (proj / "pyproject.toml").write_text(PYPROJECT)
    (proj / "mybench" / "__init__.py").write_text(WORK.format(work=work))
    (proj / "benchmarks" / "test_mine.py").write_text(MINE)
    (proj / ".gitignore").write_text("baselines/\n*.egg-info/\n__pycache__/\n.venv/\n")
    git(proj, "init", "-q")
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "benchmarks")
    venv = proj / ".venv"
    # A venv over this one, as tests/userproj.py makes the user's (its MPI library handed on).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "perfsuite.launch.envs", "overlay", str(venv)], check=True,
                   capture_output=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "-e", str(proj)], check=True, capture_output=True)
    return proj, python


def slower(proj: Path, work: int = 2) -> None:
    """The commit under test: a step that makes ``work`` passes over its data."""
    (proj / "mybench" / "__init__.py").write_text(WORK.format(work=work))
    git(proj, "commit", "-qam", f"{work} passes")


def step(python: Path, proj: Path, what: str, argv: list[str], env: dict | None = None) -> dict:
    """One command in the project, as the user types it; its seconds, exit, verdict rows, last line."""
    clean = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    clean["PATH"] = f"{python.parent}:{Path(sys.executable).parent}:{clean.get('PATH', '')}"
    start = time.monotonic()
    got = subprocess.run([str(python), *argv], cwd=proj, capture_output=True, text=True, timeout=1800,
                         env={**clean, **(env or {})})
    seconds = time.monotonic() - start
    out = got.stdout + got.stderr
    rows = [" ".join(line.split()[:2] + line.split()[5:8])
            for line in out.splitlines()
            if re.match(r"^(regression|REGRESSION|improvement|same|unknown|UNKNOWN)\s+\S+\[", line)]
    lines = [x for x in out.splitlines() if x.strip()]
    said = [x for x in got.stdout.splitlines() if x.strip()]
    last = next((x for x in reversed(lines) if x.startswith(("perfsuite:", "no regression shown"))),
                said[-1] if said else lines[-1] if lines else "")
    drift = next((x for x in lines if "drift between" in x and x.startswith("# ")), "")
    print(f"| {what} | {seconds:.0f} | {got.returncode} | {'; '.join(rows)} | {last} | {drift} |", flush=True)
    return {"seconds": seconds, "exit": got.returncode, "rows": rows, "last": last, "out": out}


def record(python: Path, proj: Path, sessions: int, gap_s: float = 0.0) -> None:
    """``sessions`` sessions, each starting ``gap_s`` after the last (sittings apart from 600 s)."""
    start = time.monotonic()
    step(python, proj, "session 1: run --baseline-update", ["-m", "perfsuite", "run", *BENCH, "--baseline-update"])
    for k in range(2, sessions + 1):
        time.sleep(max(0.0, start + (k - 1) * gap_s - time.monotonic()))
        step(python, proj, f"session {k}: run --baseline-add", ["-m", "perfsuite", "run", *BENCH, "--baseline-add"])


def judge(python: Path, proj: Path, what: str, extra: list[str] = (), env: dict | None = None) -> list[dict]:
    cli = step(python, proj, f"{what}: run --compare {' '.join(extra)}".strip(),
               ["-m", "perfsuite", "run", *BENCH, "--compare", *extra], env)
    py = step(python, proj, f"{what}: pytest {' '.join(f'--perf-{a[2:]}' for a in extra)}".strip(),
              ["-m", "pytest", "benchmarks", "--benchmark-only", "-p", "no:cacheprovider", "-q",
               *[f"--perf-{a[2:]}" if a.startswith("--") else a for a in extra]], env)
    return [cli, py]


HEAD = "| step | s | exit | verdicts (status case change interval) | last line | drift |\n|---|---|---|---|---|---|"


def main(argv: list[str]) -> int:
    mode = argv[0] if argv and not argv[0].startswith("-") else "flow"

    def opt(name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv else default

    with tempfile.TemporaryDirectory(prefix="perfsuite-stored-") as scratch:
        proj, python = project(Path(scratch))
        print(HEAD)
        gap = float(opt("--gap", "0"))
        if mode == "flow":
            record(python, proj, int(opt("--sessions", "4")), gap)
            step(python, proj, "baseline show", ["-m", "perfsuite", "baseline", "show"])
            slower(proj)
            judge(python, proj, "2 passes")
            if "--confirm" in argv:
                judge(python, proj, "2 passes", ["--confirm"])
        elif mode == "reruns":
            record(python, proj, 4, gap)
            step(python, proj, "baseline show", ["-m", "perfsuite", "baseline", "show"])
            count, every = int(opt("--count", "20")), float(opt("--every", "180"))
            start = time.monotonic()
            for k in range(count):
                time.sleep(max(0.0, start + k * every - time.monotonic()))
                step(python, proj, f"clean rerun {k + 1}: run --compare", ["-m", "perfsuite", "run", *BENCH, "--compare"])
            if "--then-slower" in argv:  # the flow on the same baseline, after the reruns
                slower(proj)
                judge(python, proj, "2 passes")
        elif mode == "confirm":
            record(python, proj, 1)
            judge(python, proj, "slower checkout", ["--confirm"],
                  {"PERFSUITE_INJECT_SLOWDOWN": opt("--slowdown", "0.3")})
            slower(proj)
            judge(python, proj, "2 passes", ["--confirm"])
        else:
            print(f"unknown mode {mode!r}: flow, reruns or confirm", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

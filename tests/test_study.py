"""perfsuite study: the plan and its bad input, the order of the rounds, the analysis'
arithmetic, and one real study (all four vectors, interrupted by SIGTERM, then resumed)."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfsuite.store import formats
from perfsuite import suite, transports
from perfsuite.faces.cli import main
from perfsuite.experiments import study, study_analysis, study_plan as sp
from perfsuite.records.model import Metric, Result, Sample

ROOT = Path(__file__).resolve().parents[1]

MINI = """
format = "perfsuite-study-plan"
version = 1
name = "mini"
rounds = 2
steps = 2
warmup = 1
allreduce_iters = 20
timeout = 300

[mpi.plain]
python = ""

[mpi.ring]
python = ""
env = { MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM = "ring" }

[vectors.scaling]
transports = ["mpi"]
allreduce = ["mpi"]
allreduce_sizes = ["4", "64KiB"]
world_sizes = [1, 2]
model = "small-cnn"
batch = 16

[vectors.batch]
transports = ["mpi"]
world_size = 2
batches = [8, 16]

[vectors.mpi-library]
transports = ["mpi"]
allreduce = ["mpi"]
allreduce_sizes = ["4", "64KiB"]
world_size = 2
libraries = ["plain", "ring"]
batch = 16

[vectors.models]
transports = ["grpc", "mpi"]
models = ["small-cnn"]
world_size = 2
batch = 16
"""


def mini(tmp_path: Path, text: str = MINI) -> Path:
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return p


def parsed(text: str = MINI) -> sp.Plan:
    import tomllib

    return sp.parse(tomllib.loads(text), "plan.toml")


# --- the plan -------------------------------------------------------------------------------------

def test_the_shipped_plans_name_all_four_vectors_and_share_points_between_them():
    plan = sp.parse(formats.read_plan(ROOT / "studies/seed-tf.toml"), "seed-tf.toml")
    assert list(plan.vectors) == ["scaling", "batch", "mpi-library", "models"]
    keys = set(plan.points)
    for t in ("grpc", "mpi", "horovod"):
        assert {f"tf-epoch/{t}/n1/small-cnn@32", f"tf-epoch/{t}/n2/small-cnn@32",
                f"tf-epoch/{t}/n4/small-cnn@32/net=1gbit", f"tf-epoch/{t}/n2/mobilenet@32"} <= keys
    # The 2-worker mpi world serves the scaling, batch, MPI-library (mpich) and models vectors.
    assert plan.points["tf-epoch/mpi/n2/small-cnn@32"].batches == (16, 32, 64)
    assert "tf-epoch/mpi/n2/small-cnn@32/mpi=openmpi" in keys
    assert ("tf-epoch/mpi/n2/small-cnn@32", "tf-epoch/mpi/n2/small-cnn@32/mpi=openmpi") in plan.units
    cluster = sp.parse(formats.read_plan(ROOT / "studies/seed-tf-cluster.toml"), "seed-tf-cluster.toml")
    assert cluster.vectors["scaling"]["world_sizes"][-1] == 64
    assert cluster.vectors["mpi-library"]["libraries"] == ("mvapich2", "openmpi", "cray-mpich")
    from perfsuite.faces.cli import study as cli_study

    launch = cli_study._base(cluster).launch  # read as perfsuite run reads its launch options
    assert launch.launcher == "srun" and launch.extra_args == ("--mpi=pmix",) and launch.ranks_per_node == 4


def test_every_round_runs_every_point_once_and_the_arms_of_a_case_back_to_back_alternating():
    plan = parsed()
    runs = study.order(plan)
    seen = [(r, k) for r, unit in runs for k in unit]
    assert len(seen) == len(set(seen)) == plan.rounds * len(plan.points)
    assert [r for r, _ in seen] == sorted(r for r, _ in seen)  # round 2 starts after round 1 ends
    pair = {u for _, u in runs if len(u) == 2 and "tf-epoch" in u[0]}
    assert len(pair) == 2 and {u[::-1] for u in pair} == pair  # A then B, then B then A
    assert study.order(plan) == runs  # the same order on every run: --resume keeps it


def test_pending_leaves_out_finished_worlds_and_points_that_cannot_run():
    plan = parsed()
    key = "tf-epoch/grpc/n2/small-cnn@32"
    failed = "tf-epoch/mpi/n1/small-cnn@32"
    records = [{"point": "allreduce/mpi/n2", "round": 0}, {"point": key, "round": 0, "skipped": "no TF"},
               {"point": failed, "round": 1, "failure": "rank 1 raised"}]
    todo = study.pending(plan, records)
    assert (0, "allreduce/mpi/n2") not in todo and (1, "allreduce/mpi/n2") in todo
    assert not [k for _, k in todo if k == key]
    assert (1, failed) in todo  # a failed world is run again
    assert len(todo) == plan.rounds * len(plan.points) - 1 - plan.rounds


# --- bad input: one line, exit 2, before any world -------------------------------------------------

BAD = [
    (MINI.replace('transports = ["grpc", "mpi"]', 'transports = ["grpcx", "mpi"]'), "grpcx"),
    (MINI.replace('models = ["small-cnn"]', 'models = ["vgg16"]'), "vgg16"),
    (MINI + "\n[vectors.speed]\ntransports = [\"mpi\"]\n", "'speed'"),
    (MINI.replace('libraries = ["plain", "ring"]', 'libraries = ["plain", "mvapich"]'), "'mvapich'"),
    (MINI.replace('transports = ["mpi"]\nallreduce = ["mpi"]\nallreduce_sizes = ["4", "64KiB"]\nworld_size = 2',
                  'transports = ["grpc"]\nallreduce = ["mpi"]\nallreduce_sizes = ["4", "64KiB"]\nworld_size = 2'),
     "grpc does not use MPI"),
    (MINI.replace("rounds = 2", "rounds = "), "not a valid plan"),
    (MINI.replace('format = "perfsuite-study-plan"', ""), "perfsuite-study-plan"),
    (MINI.replace("version = 1", "version = 2"), "version 2"),
    (MINI.replace("rounds = 2", "rounds = 1"), "rounds: 1 must be a whole number >= 2"),
    (MINI.replace("world_sizes = [1, 2]", "world_sizes = [1, 0]"), "0 must be a whole number >= 1"),
    (MINI.replace("batches = [8, 16]", "batches = [8, \"big\"]"), "big"),
    (MINI + "\n[launch]\nbogus = 1\n", "'bogus'"),
    (MINI + "\n[launch]\nlauncher-program = \"/nonexistent/mpiexec\"\n", "/nonexistent/mpiexec"),
    (MINI.replace('networks = ["none"', 'networks = ["fast"').replace(
        "world_sizes = [1, 2]", "world_sizes = [1, 2]\nnetworks = [\"fast\"]"), "fast"),
]


@pytest.fixture
def no_world(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a world started on bad input")

    monkeypatch.setattr(suite, "run_one", refuse)


@pytest.mark.parametrize("text,named", BAD, ids=[n for _, n in BAD])
def test_a_bad_plan_is_one_line_and_exit_2_before_any_world(tmp_path, capsys, no_world, text, named):
    assert main(["study", str(mini(tmp_path, text)), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err, err
    assert not (tmp_path / "out" / "study.json").exists()


def test_the_dry_run_lists_an_mpi_environment_that_cannot_run_with_how_to_make_it(tmp_path, capsys, no_world):
    """The shipped plan's openmpi arm lives in .venv-ompi, which a fresh clone lacks: its points
    are listed as unable to run, with the reason and where the way to make it is written."""
    missing = tmp_path / ".venv-ompi" / "bin" / "python"
    text = MINI.replace('[mpi.ring]\npython = ""', f'[mpi.ring]\npython = "{missing}"')
    assert main(["study", str(mini(tmp_path, text)), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (f"# skipped, 2 point(s) (mpi): MPI environment ring cannot run here: python '{missing}' is not an "
            "executable file" in out), out
    assert "docs/study.md" in out and "README.md's command 5 makes .venv-ompi" in out
    for key in ("tf-epoch/mpi/n2/small-cnn@32/mpi=ring", "allreduce/mpi/n2/mpi=ring"):
        assert f"#   {key} (" in out
    assert out.count("cannot run here: MPI environment ring (above)") == 2
    assert not (tmp_path / "out").exists()


def test_a_run_skips_an_mpi_environment_that_cannot_run_and_resume_runs_it_once_made(tmp_path, capsys,
                                                                                      monkeypatch):
    """As a transport that cannot run here: its points are skipped with the reason (exit 0, named
    in the report), no world starts under it, and --resume runs them once the venv is made."""
    venv_python = tmp_path / "bare-python"
    venv_python.write_text(f"#!/bin/sh\nexec {sys.executable} -S -I \"$@\"\n")  # no site-packages: no mpi4py
    venv_python.chmod(0o755)
    text = MINI.replace('[mpi.ring]\npython = ""', f'[mpi.ring]\npython = "{venv_python}"')
    launched = []

    def not_run(spec, cfg):  # every world that would start: its Python, and a skip
        launched.append(cfg.launch.python)
        return formats.WorldOutcome(spec, skipped="not run by this test")

    monkeypatch.setattr(suite, "run_one", not_run)
    plan, out = mini(tmp_path, text), tmp_path / "out"
    assert main(["study", str(plan), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "# skipped, 2 point(s) (mpi): MPI environment ring cannot run here: " in said
    assert "no module mpi4py" in said
    assert launched and str(venv_python) not in launched
    arm = {r["point"]: r for r in formats.load_study(out / "study.json")["worlds"] if r.get("arm_unavailable")}
    assert set(arm) == {"tf-epoch/mpi/n2/small-cnn@32/mpi=ring", "allreduce/mpi/n2/mpi=ring"}
    assert all(r["arm_unavailable"] == "ring" and "no module mpi4py" in r["skipped"] for r in arm.values())
    assert "allreduce/mpi/n2/mpi=ring: skipped: MPI environment ring cannot run here" in (out / "report.md").read_text()
    venv_python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")  # the venv made
    launched.clear()
    assert main(["study", str(plan), "--out", str(out), "--resume"]) == 0
    assert launched == [str(venv_python)] * 2  # its two points; the others were done
    assert not [r for r in formats.load_study(out / "study.json")["worlds"] if r.get("arm_unavailable")]


def test_an_existing_study_is_not_overwritten_and_resume_needs_the_same_plan(tmp_path, capsys, no_world):
    plan = mini(tmp_path)
    out = tmp_path / "out"
    assert main(["study", str(plan), "--out", str(out), "--resume"]) == 2
    assert "does not exist" in capsys.readouterr().err
    formats.write_json(out / "study.json", formats.stamp(formats.STUDY, {"plan_digest": "0" * 16,
                                                                        "plan_name": "other", "worlds": []}))
    assert main(["study", str(plan), "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["study", str(plan), "--out", str(out), "--resume"]) == 2
    assert "another plan" in capsys.readouterr().err


def test_dry_run_prints_the_worlds_and_the_expected_duration_and_runs_none(tmp_path, capsys, no_world):
    assert main(["study", str(mini(tmp_path)), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "6 points x 2 rounds = 12 worlds" in out and "expected duration ~" in out
    assert "tf-epoch/mpi/n2/small-cnn@32/mpi=ring" in out
    assert not (tmp_path / "out").exists()


PARTLY = """
format = "perfsuite-study-plan"
version = 1
name = "partly"
rounds = 2
steps = 2
warmup = 1
allreduce_iters = 20
timeout = 120

[vectors.scaling]
transports = ["torch-nccl"]
allreduce = ["mpi", "GPU"]
allreduce_sizes = ["4"]
world_sizes = [2]
"""


@pytest.mark.world
def test_the_dry_run_counts_the_worlds_the_run_starts_and_names_each_reason_once(tmp_path, capsys, monkeypatch):
    """A plan whose GPU points cannot run here: the dry run's "N to run here" is the number of
    worlds the run then starts (both read study.worlds), and what skips is one line per reason."""
    gpu = next((t for t in ("nccl", "gpu-ring", "mpi-cuda") if transports.unavailable_reason(t)), None)
    if gpu is None or not transports.unavailable_reason("torch-nccl", "torch-epoch"):
        pytest.skip("the GPU transports can run here: no plan that partly cannot")
    plan, out = mini(tmp_path, PARTLY.replace('"GPU"', f'"{gpu}"')), tmp_path / "out"
    assert main(["study", str(plan), "--out", str(out), "--dry-run"]) == 0
    said = capsys.readouterr().out
    head = said.splitlines()[0]
    assert "4 points x 2 rounds = 8 worlds, 2 to run here" in head, said
    skips = [line for line in said.splitlines() if line.startswith("# skipped, ")]
    assert len(skips) == len({transports.unavailable_reason(gpu), transports.unavailable_reason("torch-nccl",
                                                                                                 "torch-epoch")})
    assert sum(int(line.split(", ")[1].split()[0]) for line in skips) == 3 and gpu in said
    started = []
    real = suite.run_one

    def counted(spec, cfg):
        started.append(spec.transport)
        return real(spec, cfg)

    monkeypatch.setattr(suite, "run_one", counted)
    assert main(["study", str(plan), "--out", str(out)]) == 0
    worlds = formats.load_study(out / "study.json")["worlds"]
    assert started == ["mpi", "mpi"] and len([w for w in worlds if w.get("result")]) == 2
    assert {w["point"] for w in worlds if w.get("skipped")} == {
        f"allreduce/{gpu}/n2", "torch-epoch/torch-nccl/n1/small-cnn@32", "torch-epoch/torch-nccl/n2/small-cnn@32"}


# --- the analysis -------------------------------------------------------------------------------

def world(point: sp.Point, rnd: int, values: dict, contended: bool = False) -> dict:
    """A finished world's record as ``study.run_point`` writes it, with chosen values."""
    samples = []
    for case in study.cases_of(point):
        v = values[case.batch if point.benchmark == "tf-epoch" else case.size_bytes]
        name, unit = ("img_per_s", "img/s") if point.benchmark == "tf-epoch" else ("latency_us", "us")
        samples.append(Sample(case, {name: Metric(name, v, unit, point.benchmark == "tf-epoch")},
                              info={"contention": 0.3 if contended else 0.0, "contended": contended}))
    res = Result(point.benchmark, point.transport, point.world_size, tuple(samples),
                 fingerprint={"mpi_library": "MPICH Version: 5"})
    return {"point": point.key, "round": rnd, "wall_s": 1.0, "result": formats.dump_result(res)}


def test_efficiency_and_ratios_pair_the_rounds_and_contended_rounds_are_left_out():
    plan = parsed()
    p = plan.points
    one, two = p["tf-epoch/mpi/n1/small-cnn@32"], p["tf-epoch/mpi/n2/small-cnn@32"]
    grpc, ar = p["tf-epoch/grpc/n2/small-cnn@32"], p["allreduce/mpi/n2"]
    records = []
    for rnd, base in enumerate((100.0, 130.0)):  # the machine drifts 30% between rounds
        records += [world(one, rnd, {8: base, 16: base}), world(two, rnd, {8: 1.5 * base, 16: 1.5 * base}),
                    world(grpc, rnd, {16: 0.75 * base})]
    records += [world(ar, 0, {4: 1.0, 65536: 50.0}), world(ar, 1, {4: 1.2, 65536: 60.0}),
                world(ar, 2, {4: 99.0, 65536: 99.0}, contended=True)]
    an = study_analysis.analyse(plan, records)
    eff = {r["world_size"]: r["efficiency"] for r in an["scaling"]["training"]}
    assert eff[2].value == pytest.approx(0.75) and eff[2].high - eff[2].low == pytest.approx(0, abs=1e-9)
    assert eff[1].value == 1.0
    (head,) = an["models"]["headline"]
    assert head["transport"] == "mpi" and head["ratio"].value == pytest.approx(2.0) and head["paper"] is None
    lat = an["scaling"]["allreduce"][0]
    assert lat["latency_us"].rounds == 2 and lat["latency_us"].value == pytest.approx(math.sqrt(1.2))
    assert "1 of 3 rounds contended" in lat["contention"]
    missing = [r for r in an["mpi-library"] if r["library"] == "ring"]
    assert all(r["value"].rounds == 0 for r in missing)  # not run: no figure is made up


def test_the_report_has_a_section_per_vector_the_headline_and_a_picture_each(tmp_path):
    from perfsuite.reading import study_report

    plan = parsed()
    p = plan.points
    records = []
    for rnd in range(2):
        for key, v in (("tf-epoch/mpi/n1/small-cnn@32", 100.0), ("tf-epoch/mpi/n2/small-cnn@32", 150.0),
                       ("tf-epoch/grpc/n2/small-cnn@32", 80.0), ("tf-epoch/mpi/n2/small-cnn@32/mpi=ring", 140.0)):
            records.append(world(p[key], rnd, {8: v + rnd, 16: v - rnd}))
        for key in ("allreduce/mpi/n2", "allreduce/mpi/n2/mpi=ring"):
            records.append(world(p[key], rnd, {4: 1.0 + rnd / 10, 65536: 40.0 + rnd}))
    doc = study_analysis.document(plan, study_analysis.analyse(plan, records))
    written = study_report.write(tmp_path, doc, ["a fact"], ["a note"])
    md = (tmp_path / "report.md").read_text()
    for name in ("scaling", "batch", "mpi-library", "models"):
        assert f"## Vector: {name}" in md
        assert (tmp_path / study_report.PNG[name]).read_bytes()[:4] == b"\x89PNG"
    assert "## Headline" in md and "<h2>Vector: mpi-library</h2>" in (tmp_path / "report.html").read_text()
    assert len(written) == 6


# --- a real study ---------------------------------------------------------------------------------

@pytest.mark.world
@pytest.mark.tf
@pytest.mark.timeout(900)
def test_a_real_study_interrupted_keeps_its_worlds_and_resume_finishes_the_report(tmp_path):
    pytest.importorskip("tensorflow")
    plan, out = mini(tmp_path), tmp_path / "out"
    cmd = [sys.executable, "-m", "perfsuite.faces.cli", "study", str(plan), "--out", str(out)]
    env = {**os.environ, "CI": "true"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline, kept = time.monotonic() + 600, []
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "study.json").exists():
            kept = json.loads((out / "study.json").read_text())["worlds"]
            if len(kept) >= 2:
                break
        time.sleep(0.5)
    assert len(kept) >= 2, proc.communicate()[0]
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGTERM, text
    body = formats.load_study(out / "study.json")
    assert len(body["worlds"]) >= len(kept) and "INTERRUPTED by SIGTERM" in (out / "report.md").read_text()

    done = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, env=env, timeout=800)
    assert done.returncode == 0, done.stdout + done.stderr
    body = formats.load_study(out / "study.json")
    assert sorted((w["point"], w["round"]) for w in body["worlds"]) == sorted(
        (k, r) for r in range(2) for k in parsed().points)  # every world once: none lost, none twice
    assert not [w for w in body["worlds"] if w.get("failure")], body["worlds"]
    md = (out / "report.md").read_text()
    for name in ("scaling", "batch", "mpi-library", "models"):
        assert f"## Vector: {name}" in md
    assert "INTERRUPTED" not in md
    head = [line for line in md.splitlines() if line.startswith("| small-cnn | 32 | mpi |")]
    assert head and "[" in head[0], md  # the headline ratio with its interval


def test_the_time_left_comes_from_the_worlds_timed_and_scales_the_first_guess_of_the_rest():
    import io

    from rich.console import Console

    from perfsuite.reading.progress import StudyProgress

    out = io.StringIO()
    prog = StudyProgress([("a", 10.0), ("b", 20.0), ("a", 10.0), ("b", 20.0)],
                         console=Console(file=out), env={"CI": "true"}, clock=lambda: 0.0)
    assert prog.remaining_s() == 60.0  # nothing timed yet: the plan's first guess
    with prog:
        prog("start", "a", 0)
        prog("done", "a", 0, 30.0, "done")  # a took 3x its guess: so will b, until b is timed
        assert prog.remaining_s() == 30.0 + 2 * 60.0
        prog("done", "b", 0, 5.0, "done")
        assert prog.remaining_s() == 30.0 + 5.0  # each point's own time once it has one
        prog.drop("b")  # b cannot run here: its later worlds cost nothing
        assert prog.remaining_s() == 30.0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("# [1/4] a round 1, ~60 s left")
    assert "[1/4] a round 1: done in 30.0 s" in lines[1] and "~2.5 min left" in lines[1]

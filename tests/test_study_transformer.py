"""perfsuite study's parallelism vector (studies/transformer.toml): DDP against FSDP by world size
and precision on a language model. The plan and its bad input, one point per variant, the older
plans unchanged, the analysis' ratio and intervals on synthetic rounds, the report's section,
the dry run, and one small real study."""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from perfsuite.store import formats
from perfsuite.records import stats
from perfsuite import suite, transports
from perfsuite.faces.cli import main
from perfsuite.experiments import study, study_analysis, study_cost, study_plan as sp
from perfsuite.records.model import Metric, Result, Sample

ROOT = Path(__file__).resolve().parents[1]
TRANSFORMER = ROOT / "studies" / "transformer.toml"
GLOO = "torch-epoch/torch-gloo"
needs_torch = pytest.mark.skipif(not transports.has_module("torch"),
                                 reason="PyTorch is not installed (pip install torch torchvision: perfsuite's torch extra)")

SMALL = """
format = "perfsuite-study-plan"
version = 1
name = "small-transformer"
rounds = 2
steps = 6
warmup = 1
timeout = 120
yardsticks = false

[vectors.parallelism]
transports = ["torch-gloo"]
world_sizes = [1, 2]
model = "gpt-tiny"
parallel = ["ddp", "fsdp"]
amp = ["off"]
"""


def parsed(text: str = SMALL) -> sp.Plan:
    return sp.parse(tomllib.loads(text), "plan.toml")


def write(tmp_path: Path, text: str = SMALL) -> Path:
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return p


@pytest.fixture
def no_world(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a world started")

    monkeypatch.setattr(suite, "run_one", refuse)


# --- the plan -------------------------------------------------------------------------------------

def test_the_transformer_plan_has_a_point_per_transport_world_size_parallelism_and_precision():
    plan = sp.parse(formats.read_plan(TRANSFORMER), "transformer.toml")
    v = plan.vectors["parallelism"]
    assert v["world_sizes"] == (1, 2, 4) and v["parallel"] == ("ddp", "fsdp") and v["amp"] == ("off", "bf16")
    assert v["transports"] == ("torch-gloo", "torch-nccl") and v["networks"] == {1: "none", 2: "none", 4: "1gbit"}
    assert len(plan.points) == 2 * 3 * 2 * 2  # every one its own world: DDP and FSDP are distinct points
    keys = set(plan.points)
    for variant in ("", "/bf16", "/fsdp", "/fsdp-bf16"):
        assert {f"{GLOO}/n1/gpt-tiny@64tok{variant}", f"{GLOO}/n2/gpt-tiny@64tok{variant}",
                f"{GLOO}/n4/gpt-tiny@64tok{variant}/net=1gbit"} <= keys
    fsdp = plan.points[f"{GLOO}/n4/gpt-tiny@64tok/fsdp-bf16/net=1gbit"]
    assert (fsdp.variant, fsdp.seq_len, fsdp.image_size, fsdp.batches) == ("fsdp-bf16", 64, 0, (8,))
    assert fsdp.network == "1gbit"
    (case,) = study.cases_of(fsdp)  # the world runs the point's parallelism and precision
    assert (case.benchmark, case.model, case.batch, case.variant) == ("torch-epoch", "gpt-tiny", 8, "fsdp-bf16")
    cfg = study.world_config(plan, fsdp, suite.SuiteConfig())
    assert cfg.options["seq_len"] == 64 and "image_size" not in cfg.options and cfg.options["yardsticks"] is False
    assert cfg.network is not None and cfg.options["iters"] == plan.steps
    assert "fsdp, bf16" in sp.describe(fsdp) and "64 tokens" in sp.describe(fsdp)
    # A guess for every world, and the crowded 4-rank ones cost more than the 2-rank ones.
    guess = {k: study_cost.expected_world_s(p, plan.steps, plan.warmup, cores=2, yardsticks=False)
             for k, p in plan.points.items()}
    assert all(g > 0 for g in guess.values())
    assert guess[f"{GLOO}/n4/gpt-tiny@64tok/net=1gbit"] > guess[f"{GLOO}/n2/gpt-tiny@64tok"]


def test_older_plans_load_unchanged_their_points_keep_their_keys():
    """The additions are optional (a vector kind, a [seq_len] table, yardsticks): a v1 plan
    written before them reads as it did, so its study.json resumes."""
    for name in ("seed-tf.toml", "frameworks.toml", "seed-tf-cluster.toml"):
        plan = sp.parse(formats.read_plan(ROOT / "studies" / name), name)
        assert plan.yardsticks is True and plan.seq_len == {}
        assert all(p.variant == "" and p.seq_len == 0 and "tok" not in k for k, p in plan.points.items())
    plan = sp.parse(formats.read_plan(ROOT / "studies" / "seed-tf.toml"), "seed-tf.toml")
    assert "tf-epoch/mpi/n4/small-cnn@32/net=1gbit" in plan.points
    options = study.world_config(plan, plan.points["tf-epoch/mpi/n2/small-cnn@32"], suite.SuiteConfig()).options
    assert options["image_size"] == 32 and "seq_len" not in options and "yardsticks" not in options


def test_a_table_of_networks_and_a_seq_len_set_each_world_and_parallelism_defaults_to_both():
    plan = parsed(SMALL.replace('parallel = ["ddp", "fsdp"]\n', "").replace(
        'amp = ["off"]', 'network = "100mbit"') + "\n[seq_len]\ngpt-tiny = 32\n")
    v = plan.vectors["parallelism"]
    assert v["parallel"] == ("ddp", "fsdp") and v["amp"] == ("off",) and v["batches"] == (8,)
    assert set(plan.points) == {f"{GLOO}/n1/gpt-tiny@32tok", f"{GLOO}/n1/gpt-tiny@32tok/fsdp",
                                f"{GLOO}/n2/gpt-tiny@32tok/net=100mbit", f"{GLOO}/n2/gpt-tiny@32tok/fsdp/net=100mbit"}


BAD = [
    (SMALL.replace('parallel = ["ddp", "fsdp"]', 'parallel = ["ddp", "zero3"]'),
     "plan.toml vectors.parallelism.parallel: parallelism 'zero3' is unknown; choose from ddp, fsdp"),
    (SMALL.replace('amp = ["off"]', 'amp = ["off", "fp8"]'),
     "plan.toml vectors.parallelism.amp: precision (amp) 'fp8' is unknown; choose from off, bf16"),
    (SMALL.replace('amp = ["off"]', "amp = [16]"), "amp: [16] must be a list of names from off, bf16"),
    (SMALL.replace('parallel = ["ddp", "fsdp"]', "parallel = []"), "no parallelism given; choose from ddp, fsdp"),
    (SMALL.replace('transports = ["torch-gloo"]', 'transports = ["mpi"]'),
     "transport 'mpi' is unknown for torch-epoch; choose from"),
    (SMALL + 'network = { 8 = "1gbit" }\n', "network.8: names a world size not in world_sizes [1, 2]"),
    (SMALL + 'network = { 2 = "fast" }\n', "network.2: "),
    (SMALL + "\n[seq_len]\ngpt-tiny = 1\n", "sequence length 1 for gpt-tiny must be a whole number >= 2"),
    (SMALL + "\n[seq_len]\nsmall-cnn = 64\n", "seq_len: unknown key 'small-cnn'; expected one of gpt-tiny, gpt2-small"),
    (SMALL + "\n[image_size]\ngpt-tiny = 64\n", "does not apply to gpt-tiny, a language model"),
    (SMALL.replace("yardsticks = false", 'yardsticks = "off"'), 'yardsticks: "off" must be true or false'),
    (SMALL + '\n[vectors.models]\ntransports = ["mpi"]\nmodels = ["gpt-tiny"]\nworld_size = 2\n',
     "gpt-tiny is a language model (its rate is tokens/s); the models vector reports img/s"),
]


@pytest.mark.parametrize("text,named", BAD, ids=[n.split(":")[0][-30:] + str(i) for i, (_, n) in enumerate(BAD)])
def test_a_bad_parallelism_vector_is_one_line_naming_the_value_and_the_choices(tmp_path, capsys, no_world,
                                                                               text, named):
    assert main(["study", str(write(tmp_path, text)), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err, err


def test_the_dry_run_prints_every_world_and_the_expected_duration(tmp_path, capsys, no_world):
    assert main(["study", str(TRANSFORMER), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "24 points x 3 rounds = 72 worlds" in out and "expected duration ~" in out
    listed = [line for line in out.splitlines() if line.startswith("#   torch-epoch/")]
    assert len(listed) == 24
    assert f"#   {GLOO}/n4/gpt-tiny@64tok/fsdp-bf16/net=1gbit (gpt-tiny 64 tokens batch 8, fsdp, bf16)" in out
    if transports.unavailable_reason("torch-nccl", "torch-epoch"):  # without a GPU: skipped, with the reason
        assert sum("torch-nccl" in line and "cannot run here:" in line for line in listed) == 12
    assert not (tmp_path / "out").exists()


# --- the analysis ---------------------------------------------------------------------------------

def world(point: sp.Point, rnd: int, tokens_per_s: float, peak_mem: float | None = None,
          state: float | None = None) -> dict:
    """A finished world's record as ``study.run_point`` writes it, with a chosen rate (and peak
    memory and model state per rank, MiB)."""
    (case,) = study.cases_of(point)
    metrics = {"tokens_per_s": Metric("tokens_per_s", tokens_per_s, "tokens/s", True)}
    info = {"contention": 0.01, "contention_scope": "process", "seq_len": point.seq_len}
    if peak_mem is not None:
        metrics["peak_mem_MiB"] = Metric("peak_mem_MiB", peak_mem, "MiB", False)
        info["model_state_MiB"] = [state] * point.world_size
    sample = Sample(case, metrics, info=info)
    res = Result(point.benchmark, point.transport, point.world_size, (sample,), extra={"torch": "2.x"})
    return {"point": point.key, "round": rnd, "wall_s": 1.0, "result": formats.dump_result(res)}


#: round -> (DDP 1 rank, FSDP 1 rank, DDP 2 ranks, FSDP 2 ranks): the machine drifts between
#: rounds, and FSDP's share of DDP's rate is not the same in every round.
ROUNDS = {0: (1000.0, 600.0, 1800.0, 1000.0), 1: (1300.0, 700.0, 2400.0, 1500.0), 2: (900.0, 500.0, 1500.0, 800.0)}


#: Peak memory per rank (MiB) by round in the same order, and each point's model state per rank:
#: memory barely moves between rounds, and FSDP halves the state at 2 ranks.
MEMORY = {0: (700.0, 702.0, 760.0, 740.0), 1: (700.5, 702.5, 760.5, 740.2), 2: (700.2, 702.1, 760.1, 740.4)}
STATE = (10.18, 10.18, 10.18, 5.09)


def synthetic(plan: sp.Plan) -> list[dict]:
    base = GLOO + "/n{n}/gpt-tiny@64tok{v}"
    keys = [base.format(n=1, v=""), base.format(n=1, v="/fsdp"), base.format(n=2, v=""), base.format(n=2, v="/fsdp")]
    return [world(plan.points[k], r, v, m, st) for r, values in ROUNDS.items()
            for k, v, m, st in zip(keys, values, MEMORY[r], STATE)]


def test_the_analysis_gives_fsdp_over_ddp_and_efficiency_paired_by_round_with_95_intervals():
    plan = parsed(SMALL.replace("rounds = 2", "rounds = 3"))
    an = study_analysis.analyse(plan, synthetic(plan))["parallelism"]
    assert (an["metric"], an["unit"], an["seq_len"], an["batch"]) == ("tokens_per_s", "tokens/s", 64, 8)
    ddp1, fsdp1, ddp2, fsdp2 = ([v[i] for v in ROUNDS.values()] for i in range(4))
    ratio = {r["world_size"]: r["ratio"] for r in an["ratios"]}
    assert (ratio[2].value, ratio[2].low, ratio[2].high) == pytest.approx(stats.paired_ratio_ci(fsdp2, ddp2))
    assert (ratio[1].value, ratio[1].low, ratio[1].high) == pytest.approx(stats.paired_ratio_ci(fsdp1, ddp1))
    assert ratio[2].rounds == 3 and ratio[2].low < ratio[2].value < ratio[2].high
    # Paired by round: the drift cancels, so the interval is narrower than unpaired means would give.
    assert ratio[2].high / ratio[2].low < (max(fsdp2) / min(fsdp2)) ** 2
    rows = {(r["parallel"], r["world_size"]): r for r in an["rows"]}
    assert rows["fsdp", 2]["rate"].value == pytest.approx(math.prod(fsdp2) ** (1 / 3))
    eff = rows["ddp", 2]["efficiency"]
    assert (eff.value, eff.low, eff.high) == pytest.approx(stats.paired_ratio_ci(ddp2, [2 * x for x in ddp1]))
    assert rows["fsdp", 1]["efficiency"].value == 1.0
    # Memory beside the rate: FSDP's peak over DDP's paired by round, and the model state it shards
    mem = {r["world_size"]: r["mem_ratio"] for r in an["ratios"]}
    ddp2_mem, fsdp2_mem = ([v[i] for v in MEMORY.values()] for i in (2, 3))
    assert (mem[2].value, mem[2].low, mem[2].high) == pytest.approx(stats.paired_ratio_ci(fsdp2_mem, ddp2_mem))
    assert {r["world_size"]: r["state_ratio"] for r in an["ratios"]}[2] == pytest.approx(0.5)
    assert rows["fsdp", 2]["model_state_MiB"] == 5.09 and rows["ddp", 2]["peak_mem"].rounds == 3
    # Without a 1-rank point there is no efficiency, and no figure is made up.
    two = parsed(SMALL.replace("world_sizes = [1, 2]", "world_sizes = [2]"))
    an2 = study_analysis.analyse(two, [r for r in synthetic(plan) if "/n2/" in r["point"]])["parallelism"]
    assert all(r["efficiency"].rounds == 0 for r in an2["rows"]) and an2["ratios"][0]["ratio"].rounds == 3


def test_the_report_has_the_parallelism_section_its_table_and_picture(tmp_path):
    from perfsuite.reading import study_report

    plan = parsed(SMALL.replace("rounds = 2", "rounds = 3"))
    records = synthetic(plan)
    an = study_analysis.analyse(plan, records)
    doc = study_analysis.document(plan, an)
    study_report.write(tmp_path, doc, ["a fact"], ["a note"])
    md = (tmp_path / "report.md").read_text()
    assert "## Vector: parallelism" in md and "![parallelism](parallelism.png)" in md
    assert (tmp_path / "parallelism.png").read_bytes()[:4] == b"\x89PNG"
    assert ("| transport | ranks | network | precision | DDP tokens/s [95%] | FSDP tokens/s [95%] | FSDP/DDP [95%] |"
            in md)
    ratio = an["parallelism"]["ratios"][1]["ratio"]
    row = next(line for line in md.splitlines() if line.startswith("| torch-gloo | 2 |"))
    assert f"{ratio.value:.3g} [{ratio.low:.3g}, {ratio.high:.3g}]" in row and "float32" in row
    assert "1 (the reference)" in next(line for line in md.splitlines() if line.startswith("| torch-gloo | 1 |"))
    assert "| DDP peak MiB/rank [95%] | FSDP peak MiB/rank [95%] |" in md and "| FSDP/DDP model state |" in md
    mem = an["parallelism"]["ratios"][1]["mem_ratio"]
    assert f"{mem.value:.3g} [{mem.low:.3g}, {mem.high:.3g}]" in row and "| 0.500 |" in row
    assert "PyTorch 2.x" in study_analysis.frameworks(plan, an["_data"], {})
    assert "## parallelism: gpt-tiny, 64 tokens x 8 sequences per rank" in study_report.summary(doc, [])


# --- a real study ---------------------------------------------------------------------------------

@needs_torch
@pytest.mark.torch
@pytest.mark.world
@pytest.mark.timeout(300)
def test_a_small_real_study_of_ddp_against_fsdp_writes_the_ratio_with_its_interval(tmp_path, capsys):
    """gpt-tiny, DDP and FSDP at 1 and 2 ranks over gloo, 2 rounds: 8 worlds (about 40 s here)."""
    out = tmp_path / "out"
    assert main(["study", str(write(tmp_path)), "--out", str(out)]) == 0, capsys.readouterr()
    worlds = formats.load_study(out / "study.json")["worlds"]
    assert sorted((w["point"], w["round"]) for w in worlds) == sorted((k, r) for r in range(2) for k in parsed().points)
    assert all(w.get("result") and not w.get("invalid") for w in worlds), worlds
    md = (out / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| torch-gloo | 2 | none | float32 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert all("[" in c for c in cells[4:9]), row  # both rates, the ratio and both efficiencies, with intervals
    # then each one's peak memory per rank with its interval, their model state, FSDP/DDP in memory
    assert all("[" in c for c in cells[9:11]) and "[" in cells[13], row
    ddp_state, fsdp_state, state_ratio = float(cells[11]), float(cells[12]), float(cells[14])
    assert fsdp_state < ddp_state and state_ratio == pytest.approx(0.5, abs=0.01), row  # sharded over 2

"""perfsuite detection-power's bookkeeping on fake worlds (no MPI): the stream's order, the
canary study, A/B windows and stored-baseline windows with a real gap, on a fake clock."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from perfsuite.verdicts import decision
from perfsuite.store import formats
from perfsuite.records.errors import ConfigError, RankFailure
from perfsuite.experiments import canary, detection, windows
from perfsuite.records.model import Metric, Sample

WALL = 2.0  # seconds each fake world takes on the fake clock


class Machine:
    """Fake worlds on a machine that runs each world in one of ``modes`` (speed factors, at
    random), which the canary shows when ``canary_tracks``; ``spell`` is a further spread
    from world to world, ``noise`` each world's own."""

    def __init__(self, spell=0.02, noise=0.005, canary_tracks=True, contended_every=0, fail_at=None,
                 modes=(1.0, 1.6)):
        self.rng = np.random.default_rng(3)
        self.now = 0.0
        self.n = 0
        self.spell, self.noise, self.tracks, self.modes = spell, noise, canary_tracks, modes
        self.contended_every, self.fail_at = contended_every, fail_at

    def clock(self) -> float:
        return self.now

    def __call__(self, spec, slowdown):
        if spec.kernel == "perfsuite.kernels.collectives.injection":  # the in-world check: what was asked
            f = spec.options["fraction"]
            return [Sample(c, {}, info={"measured": f, "turns": 5}) for c in spec.cases]
        self.now += WALL
        self.n += 1
        if self.n == self.fail_at:
            raise RankFailure("rank 1 raised InjectedFault: boom")
        mode = float(self.rng.choice(self.modes)) * float(np.exp(self.spell * self.rng.standard_normal()))
        busy = self.contended_every and self.n % self.contended_every == 0
        out = []
        for case in spec.cases:
            base = 1e-5 if case.size_bytes == 4 else 1e-2
            t = base * mode * (1 + slowdown) * float(np.exp(self.noise * self.rng.standard_normal()))
            can = 100.0 * (mode if self.tracks else float(self.rng.choice(self.modes)))
            out.append(Sample(case, {
                "latency_us": Metric("latency_us", t * 1e6, "us", False),
                "busbw_GBps": Metric("busbw_GBps", case.size_bytes / t / 1e9, "GB/s", True)},
                info={"contention": 0.5 if busy else 0.002, "canary_us": can, "cpu_pressure": 0.01}))
        return out


def report(machine: Machine, **kw) -> detection.DetectionReport:
    cfg = detection.DetectionConfig(**{"blocks": 40, "gap_s": 100.0, "max_pairs": 20, **kw})
    return detection.run(cfg, machine, clock=machine.clock)


def rows(rep, mode, way):
    return {(r.condition, r.metric): r for r in (*rep.ab_rows, *rep.stored_rows)
            if r.mode == mode and r.rounds == way}


def test_an_automatic_stream_runs_the_gap_plus_the_candidates_time():
    """blocks 0: blocks until gap + CANDIDATE_S have passed, whatever a block costs."""
    rep = report(Machine(), blocks=0, gap_s=60.0)
    block_s = 6 * WALL
    want = math.ceil((60.0 + detection.CANDIDATE_S) / block_s)
    assert len(rep.worlds) == 6 * want and rep.to_dict()["config"]["blocks"] == want
    assert any(r.n for r in rep.stored_rows)  # the candidates came after the gap


def test_the_stream_holds_every_kind_once_per_block_with_b_slowed():
    rep = report(Machine(), blocks=3)
    assert len(rep.worlds) == 18 and rep.wall_s == pytest.approx(18 * WALL)
    for block in range(3):
        kinds = [w.kind for w in rep.worlds[6 * block:6 * block + 6]]
        assert sorted(set(kinds)) == sorted(detection.KINDS) and all(kinds.count(k) == 2 for k in detection.KINDS)
    for w in rep.worlds:
        assert w.slowdown == (rep.config.slowdown(w.kind) if w.role == "b" else 0.0)
    assert [w.t for w in rep.worlds] == [WALL * i for i in range(18)]


def test_a_canary_that_tells_the_modes_apart_earns_its_place_and_one_that_does_not_is_refused():
    tracked = canary.study(detection.DetectionConfig(), report(Machine(), blocks=30).worlds)
    for key, r in tracked.items():
        assert abs(r["pearson"]) > 0.95 and r["earns"], key  # busbw falls as the canary grows
        aa = r["pairs"]["A/A"]
        assert aa["ratio_matched"] < 0.3 and 0.3 < aa["pairs_matched"] / aa["pairs"] < 0.7
        assert r["pairs"]["A/+small"]["shift_matched"] == pytest.approx(
            0.05 if "latency" in key else -0.05 / 1.05, abs=0.01)
    blind = canary.study(detection.DetectionConfig(), report(Machine(canary_tracks=False), blocks=30).worlds)
    assert all(abs(r["pearson"]) < 0.5 and r["earns"] == "" for r in blind.values())
    text = "\n".join(canary.format_study(tracked, detection.DetectionConfig()))
    assert "earns its place: compare worlds in one mode" in text and "lag-1 autocorrelation" in text


def test_ab_windows_flag_a_slowdown_and_never_a_clean_pair():
    rep = report(Machine(spell=0.005), blocks=80, max_pairs=40)  # half the pairs straddle modes
    adjusted, plain = rows(rep, "A/B", "by mode"), rows(rep, "A/B", "all")
    for metric in ("latency_us", "busbw_GBps"):
        assert adjusted[("clean", metric)].hits == 0 and plain[("clean", metric)].hits == 0
        hit = adjusted[("+30%", metric)]
        assert hit.n >= 2 and hit.hits == hit.n
        # a window ends at one of ab's looks: its time is the worlds' wall time it needed
        looks = decision.paired_looks(40, rep.config.alpha, 2)
        assert all(w.used in looks and w.time_s == pytest.approx(2 * WALL * w.used) for w in hit.windows)
        # pairs across modes are kept, ranked apart from the rest ("by mode") or with them ("all");
        # which needs fewer pairs depends on the modes' step against the change: measured on
        # this machine by detection-power, not assumed here
        all_hit = plain[("+30%", metric)]
        assert sum(w.dropped for w in hit.windows) == 0 == sum(w.dropped for w in all_hit.windows)
        assert all_hit.hits == all_hit.n >= 2


def test_stored_windows_judge_candidates_a_gap_after_their_baseline_and_use_no_world_twice():
    """x6 slower (MPICH's ring algorithm at 4 B) against one-session baselines: flagged; x2 is
    not, since one session says nothing of how far the next run lands (only a change beyond the
    x4 span is decided)."""
    rep = report(Machine(spell=0.005, contended_every=17), large_slowdown=5.0)
    cfg = rep.config
    got = windows.stored_windows(cfg, rep.worlds, cfg.canary_shift)
    clean, slowed = got["clean"][0], got["slowed"][0]
    assert clean and slowed
    first_base_end = min(w.t for w in rep.worlds if w.slowdown == 0) + cfg.baseline_rounds * WALL
    assert all(w.t >= cfg.gap_s for w in clean + slowed) and min(w.t for w in clean) > first_base_end
    assert sum(w.dropped for w in clean + slowed) > 0  # contended candidates left out, their time counted
    by = rows(rep, "stored", "by mode")
    for metric in ("latency_us", "busbw_GBps"):
        assert by[("clean", metric)].hits == 0
        assert by[("+500%", metric)].hits == by[("+500%", metric)].n > 0
        assert all(w.used in decision.stored_looks(1, cfg.max_rounds) for w in by[("+500%", metric)].windows)
    double = rows(report(Machine(spell=0.005), large_slowdown=1.0), "stored", "by mode")
    assert double[("+100%", "latency_us")].hits == 0 and double[("+100%", "latency_us")].n > 0


def test_a_failed_world_is_reported_and_the_file_is_versioned(tmp_path):
    rep = report(Machine(fail_at=4), blocks=4, gap_s=0.0)
    assert len(rep.failures) == 1 and "boom" in rep.failures[0]
    text = detection.format_report(rep)
    assert "# FAILED world 4" in text and "A/B mode (as perfsuite ab)" in text
    assert "asked +5% allreduce[mpi-n2-4B]: measured +5.0%, +5.0%, +5.0% (median +5.0%)" in text
    assert "stored mode (as run --compare)" in text and "target stored clean" in text
    short = detection.format_report(report(Machine(), blocks=4, gap_s=600.0))
    assert "stored mode judged nothing: no calm clean world ran 600 s after a baseline" in short
    path = formats.write_json(tmp_path / "d.json", formats.stamp(formats.DETECTION, rep.to_dict()))
    data = json.loads(path.read_text())
    assert data["format"] == "perfsuite-detection" and data["version"] == 1
    assert len(data["worlds"]) == 24 and "canary_us" in next(iter(data["worlds"][0]["cases"].values()))


@pytest.mark.parametrize("kw, match", [
    ({"small_slowdown": 0.0}, "small slowdown 0.0 must be a fraction in"),
    ({"large_slowdown": 101.0}, "large slowdown 101.0 must be a fraction in"),
    ({"small": 1 << 20, "large": 4}, "must be below large size"),
    ({"gap_s": -1.0}, "gap -1.0 must be >= 0"),
])
def test_bad_config_is_one_line(kw, match):
    with pytest.raises(ConfigError, match=match):
        detection.DetectionConfig(**kw)


def test_a_saved_stream_is_judged_again_with_the_same_rules(tmp_path, capsys):
    """--from: the stream's worlds, read back, give the same windows as when they were measured,
    and another --max-pairs judges them anew without running a world."""
    from perfsuite.faces import cli

    rep = report(Machine(spell=0.005), blocks=30)
    path = tmp_path / "d.json"
    formats.write_json(path, formats.stamp(formats.DETECTION, rep.to_dict()))
    cfg, worlds = detection.from_dict(json.loads(path.read_text()))
    again = detection.judge(cfg, worlds, rep.wall_s)
    assert [r.to_dict() for r in again.ab_rows + again.stored_rows] == \
        [r.to_dict() for r in rep.ab_rows + rep.stored_rows]
    assert cli.main(["detection-power", "--from", str(path), "--max-pairs", "14", "--gap", "100"]) == 0
    out = capsys.readouterr().out
    assert f"# detection power: 180 worlds of {path}, judged again" in out and "looks at 10, 14 pairs" in out

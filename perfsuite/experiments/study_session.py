"""A study run from its plan, what ``perfsuite study`` calls: the worlds still to run (a resumed
study's file read back, MPI environments that cannot run here skipped before any world starts),
the expected duration and progress, the results file kept as each world ends (in the temp folder
once a write to ``--out`` fails), then the analysis and the report. The face parses and prints
the outcome's status."""
from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import suite
from ..records.errors import ConfigError
from ..store import fingerprint, formats

RESULTS = "study.json"


@dataclass(frozen=True)
class Outcome:
    """What a study left: worlds that failed or returned wrong results, writes that failed (one
    line each), the signal that stopped it; ``dry_run``: nothing was run."""

    failed: int = 0
    wrong: int = 0
    unwritten: list[str] = field(default_factory=list)
    stopped: str | None = None
    dry_run: bool = False


def _probe(python: str, modules: tuple[str, ...]) -> None:
    from ..launch.envs import check_python

    check_python(python, modules)


def _load(out: str | Path, resume: bool, plan) -> list[dict]:
    path = Path(out) / RESULTS
    if not resume:
        if path.exists():
            raise ConfigError(f"{path} holds a study already; pass --resume to continue it, or choose another --out")
        return []
    if not path.exists():
        raise ConfigError(f"--resume: {path} does not exist; leave out --resume to start the study")
    body = formats.load_study(path)
    if body.get("plan_digest") != plan.digest:
        raise ConfigError(f"{path} was made by another plan ({body.get('plan_name')!r}, digest "
                          f"{body.get('plan_digest')}; this plan's is {plan.digest}); resume with that plan "
                          "or start in a fresh --out")
    return list(body.get("worlds") or [])


def _skips(plan, cannot: dict[str, str]) -> list[str]:
    """One line per reason a point cannot run here: how many points, whose transports."""
    by: dict[str, list[str]] = {}
    for k, why in cannot.items():
        by.setdefault(why, []).append(k)
    return [f"# skipped, {len(keys)} point(s) ({', '.join(dict.fromkeys(plan.points[k].transport for k in keys))}): "
            f"{why}" for why, keys in by.items()]


def run(plan, plan_path: str | Path, base: suite.SuiteConfig, *, out: str | Path, resume: bool = False,
        dry_run: bool = False, say: Callable[[str], None] = print) -> Outcome:
    """Run ``plan`` (read from ``plan_path``) with the launch ``base`` into the folder ``out``."""
    from ..reading import study_report
    from . import study, study_analysis, study_cost, study_plan as sp
    from ..reading.progress import StudyProgress

    gone = sp.unavailable_arms(plan, _probe)  # MPI environments that cannot run here: skipped
    study.preflight(plan, base)
    # A resumed study runs the points of an MPI environment made since it skipped them.
    records = [r for r in _load(out, resume, plan) if r.get("arm_unavailable") in (None, *gone)]
    for p in plan.points.values():
        arm = plan.arm_of(p).name
        if p.arm and arm in gone and not any(r["point"] == p.key and r.get("skipped") for r in records):
            records.append(study.arm_skip(plan, p, gone[arm]))
    # What cannot run here is skipped before any world starts: the run and this count share
    # study.worlds, so "N to run" is the number of worlds the run starts.
    cannot = study.unavailable(plan, gone)
    todo = study.worlds(plan, records, cannot)
    timed: dict[str, list[float]] = {}
    for r in records:
        timed.setdefault(r["point"], []).append(float(r.get("wall_s", 0.0)))
    guess = {k: 0.0 if k in cannot else study_cost.expected_world_s(p, plan.steps, plan.warmup,
                                                                    yardsticks=plan.yardsticks)
             for k, p in plan.points.items()}
    progress = StudyProgress([(k, guess[k]) for _, k in todo], timed)
    total = plan.rounds * len(plan.points)
    say(f"# study {plan.name} ({plan_path}, digest {plan.digest}): {len(plan.points)} points x {plan.rounds} "
        f"rounds = {total} worlds, {len(todo)} to run here; expected duration "
        f"~{progress.remaining_s() / 60:.1f} min (a first guess until worlds are timed)")
    for line in _skips(plan, cannot):
        say(line)
    if dry_run:
        short = {k: f"MPI environment {plan.arm_of(p).name} (above)" if p.arm and plan.arm_of(p).name in gone
                 else cannot.get(k) for k, p in plan.points.items()}
        for k, p in plan.points.items():
            say(f"#   {sp.describe(p)}: " + (f"cannot run here: {short[k]}" if k in cannot else
                                              f"~{guess[k]:.0f} s a world"))
        return Outcome(dry_run=True)
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    fp = fingerprint.collect()
    path = Path(out) / RESULTS
    # Where the worlds are kept: --out, or, once a write there failed (a full disk, a read-only
    # mount), one file in the temp folder that the rest of the study goes on writing.
    kept: dict = {"at": path, "why": None}

    def keep(recs: list[dict]) -> None:
        body = formats.stamp(formats.STUDY, {
            "plan_name": plan.name, "plan_path": str(plan_path), "plan_digest": plan.digest, "plan": plan.raw,
            "created": created, "fingerprint": fp, "worlds": recs})
        where, why = formats.write_json_kept(kept["at"], body, "perfsuite-study.json")
        if why is not None:
            kept["why"] = kept["why"] or why
            kept["at"] = where or kept["at"]

    keep(records)
    t0, stopped = time.monotonic(), None

    def on(event, point, rnd, rec):
        if event == "start":
            progress("start", point.key, rnd)
        elif event == "stopped":  # a failure that repeats: its point's later rounds are not run
            progress.drop(point.key)
            say(f"# stopped {rec['why']}")
        else:
            what = rec.get("skipped") and f"skipped ({rec['skipped']})" or rec.get("failure") and "FAILED" or "done"
            progress("done", point.key, rnd, rec["wall_s"], what)
            if rec.get("skipped"):
                progress.drop(point.key)
            if rec.get("failure"):
                say(f"#   {rec['failure']}")
            for line in study.invalid_lines(plan, rec):
                say(line)

    try:
        with progress:
            study.run(plan, base, records, keep, on, cannot)
    except KeyboardInterrupt as exc:
        stopped = getattr(exc, "name", "SIGINT")
    spent = time.monotonic() - t0
    an = study_analysis.analyse(plan, records)
    last = {(r["point"], r["round"]): r for r in records}.values()  # a world run again replaces its record
    done = sum(1 for r in last if r.get("result") and not r.get("invalid"))
    skipped = {r["point"]: r["skipped"] for r in records if r.get("skipped")}
    failed = sum(1 for r in last if r.get("failure") and r["point"] not in skipped)  # found unable to run: a skip
    wrong = sum(1 for r in last if r.get("invalid"))
    facts = [f"plan {plan_path} (digest {plan.digest}), {plan.rounds} rounds, seed {plan.seed}, "
             f"{plan.steps} timed steps after {plan.warmup} warm-up per batch",
             f"machine: {fp.get('host')}, {fp.get('cpu_model')} x{fp.get('cpu_count')}, "
             f"{study_analysis.frameworks(plan, an['_data'], fp)}; "
             f"MPI: {study_analysis.libraries(plan, an['_data']) or 'no world ran'}",
             f"{done} of {total} worlds finished ({len(skipped)} point(s) skipped, {failed} world(s) failed"
             + (f", {wrong} returned wrong results" if wrong else "") + "); "
             f"this run {spent / 60:.1f} min, all worlds {sum(float(r.get('wall_s', 0)) for r in records) / 60:.1f} min"]
    if stopped:
        facts.append(f"INTERRUPTED by {stopped}: the figures use the worlds that finished; "
                     f"perfsuite study {plan_path} --out {out} --resume continues")
    notes = _notes(plan, skipped)
    doc = study_analysis.document(plan, an)
    unwritten = []  # what could not be written, one line each
    if kept["why"]:
        unwritten.append(kept["why"] + (f"; the study's worlds are in {kept['at']} instead" if kept["at"] != path
                                        else ""))
    try:
        study_report.write(out, doc, facts, notes)
    except OSError as exc:
        unwritten.append(f"{exc.filename or out} could not be written ({exc.strerror or exc}): no report")
    say(study_report.summary(doc, facts))
    if not unwritten:
        say(f"# results in {path}; report in {Path(out) / 'report.html'} and report.md")
    return Outcome(failed=failed, wrong=wrong, unwritten=unwritten, stopped=stopped)


def _notes(plan, skipped: dict) -> list[str]:
    """The report's notes: how each figure was made, and what was skipped."""
    from .study_plan import IMAGE_VECTORS

    image = [v for v in plan.vectors if v in IMAGE_VECTORS]
    notes = ["Each figure is the geometric mean over the study's rounds with its 95% t interval; a ratio or an "
             "efficiency pairs round r of one point with round r of the other (both ran in the same pass)."]
    if {"scaling", "batch"} & set(image):
        notes.append("Scaling efficiency = img/s with n workers / (n x img/s of 1 worker), same transport, model "
                     "and batch.")
    notes.append("Contention: the median over rounds of the largest run-queue wait share of any rank; '(process)' "
                 "marks the training framework's whole process (TensorFlow's thread pools, PyTorch's compute "
                 "threads: they crowd a small machine by design), reported, not judged. An allreduce round whose "
                 "timed thread waited more than 5% is contended: it is left out of its figure while two calm "
                 "rounds remain, and counted beside it.")
    if "models" in image:
        notes.append("The paper's ratios were measured on GPUs across nodes; a CPU machine's ratio answers a "
                     "different question and is shown beside it as a reference, not a target.")
    if "parallelism" in plan.vectors:
        notes.append("Parallelism: FSDP/DDP is FSDP2's rate over DDP's at the same transport, ranks and precision, "
                     "round r over round r; each one's efficiency = rate with n ranks / (n x its own rate with 1 "
                     "rank). float32 is autocast off; bf16 is autocast (DDP) or FSDP's mixed-precision policy. "
                     "A rank computes on its machine's cores divided among the machine's ranks (emulated nodes "
                     "share one machine's cores), so ranks sharing one machine have no more cores than 1 rank "
                     "had: there, efficiency tops out near 1/n. A world with more ranks than cores takes turns "
                     "on them: its rate measures the machine's crowding as much as the parallelism, and its "
                     "contention says how much.")
    notes += [f"{k}: skipped: {why}" for k, why in skipped.items()]
    return notes

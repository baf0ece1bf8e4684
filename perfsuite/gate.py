"""The gate, the session above the rules it applies: a run's plan -> its rounds, verdicts, the
lines to print, the writes to make and the exit status. Both faces (``perfsuite run`` and the
pytest plugin) make one ``Gate`` from their option values (``faces.options.gate_plan``) and only
print what it returns, so they answer every question alike
(pytest-benchmark's habit: its pytest hook and its ``compare`` command only display one
``BenchmarkSession``). What the gate settles, once per run:

* **One system.** ``--system``, else the nodes that measure: this host when the launch is local
  (read before any world starts, so a bad baseline file stops the run first), else rank 0 of the
  first world (srun, a hostfile). Looks, the family and the verdicts read that one baseline set.
* **Rounds.** A judging run adds rounds while a verdict is UNKNOWN (``judging.judging_rounds``); a
  recording takes a baseline's rounds.
* **Verdicts per world**, taken when the world is done (Holm within it, its share of the run's
  family), so pytest fails a case at its own test and the CLI prints the same verdicts at the end;
  then MISSING for each selected case with a baseline that was not measured.
* **Nothing compared**: cases were measured and none had a baseline (exit 3 under --strict).
* **Writes, in order**: the results file first, then the report, asv, the baselines. One that fails
  is one line naming the path and the OS error, exit 4, and the results are kept (in the temp
  folder when their own path failed or none was asked for).
* **The exit status**: ``records/status.exit_status`` of what the run found; pytest keeps its own
  numbers and prints which it is.

A run that records baselines is not judged: it becomes the reference (judge first with
``--compare``, then record).
"""
from __future__ import annotations

import math
import shlex
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .store import baselines, fingerprint, formats
from . import bench, interrupts, suite
from .verdicts import judging
from .verdicts import regress
from .reading import verdict_text as vt
from .verdicts.decision import DEFAULT_ALPHA
from .records.errors import ConfigError, PerfsuiteError
from .launch.launchers import LaunchConfig, local_ranks
from .records.model import Case, Sample, Tolerance, Verdict
from .verdicts.rounds import DEFAULT_CANARY_SHIFT, RoundsPolicy
from .records.status import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, EXIT_UNKNOWN, EXIT_WORLD, exit_status


@dataclass(frozen=True)
class Plan:
    """What a run asks of the gate, checked before any world starts (``faces.options.gate_plan``)."""

    compare: bool = False  # judge the run against the stored baselines
    record: str | None = None  # "update" (replace the stored rounds) or "add" (one more session)
    strict: bool = False  # a verdict left UNKNOWN, or nothing compared, is a failure (3)
    improvements: bool = False  # --fail-on-improvement: an improvement fails as a regression does (1)
    tolerance: Tolerance | None = None  # the user's, over every baseline's own
    alpha: float = DEFAULT_ALPHA
    canary_shift: float | None = DEFAULT_CANARY_SHIFT
    session_sd: float | None = None
    root: str = "baselines"
    system: str | None = None  # --system; None: the measuring nodes'
    asv: Any = None  # asv RecordTarget: the run is recorded there, and verdicts read its history
    project: str = "."  # the user's repository: a recorded session names its commit
    confirm: bool = False  # decide what stays UNKNOWN by an A/B against the baseline's commit
    confirm_budget: float = 120.0

    @property
    def active(self) -> bool:
        return self.compare or self.record is not None


@dataclass(frozen=True)
class Keep:
    """Where a run's measurements are written: the results file, the report folder (its
    ``source``: what the report says the run came from)."""

    json: str | Path | None = None
    report: str | Path | None = None
    source: str = "this run"


@dataclass
class Finish:
    """What the gate made of a run: its verdicts, the lines to print (text, bad), the CLI's exit
    status, and one line saying which status that is (pytest's summary prints it)."""

    verdicts: list[Verdict]
    lines: list[tuple[str, bool]]
    status: int
    finding: str
    nothing_compared: bool = False
    kept: bool = True
    #: The last line of a run that left cases UNKNOWN (the CLI prints it last; pytest's finding
    #: holds it), or None.
    undecided: str | None = None


#: The command that records this run's baselines, in the face's own words: (system, root) -> text.
Hint = Callable[[str, str], str]
#: --confirm: (verdicts, which code measured the baseline) -> (verdicts, lines to print).
Confirmer = Callable[[list[Verdict], dict], tuple[list[Verdict], list[str]]]


class Gate:
    """One run's gate (see the module's text). Made before the first world, told each world as
    it finishes (``judge_world``), finished once (``finish``)."""

    def __init__(self, plan: Plan, cases: Iterable[Case] = (), hint: Hint | None = None):
        self.plan = plan
        self.cases = list(cases)
        self.hint = hint
        self.system: str | None = plan.system
        self.looks = 1
        self._stored: dict | None = None
        self._family: int | None = None
        self._history: Any = None
        self._worlds: dict[str, list[Verdict]] = {}
        self.extra: list[Sample] = []  # samples measured outside the run's worlds (pytest's stalls)

    # --- before the worlds ------------------------------------------------------------------

    def select(self, cases: Iterable[Case]) -> None:
        """The run's cases, where they are known only after the gate was made (pytest's -k)."""
        self.cases = list(cases)
        self._family = None

    def prepare(self, launch: LaunchConfig) -> None:
        """Before any world: where the measuring nodes are this host, the system is this host's
        and its baselines are read now, so a bad baseline file stops the run before anything is
        measured; and a recording's folder must be writable."""
        if not self.plan.active:
            return
        if self.system is None and local_ranks(launch, 1) is not None:
            self.resolve(fingerprint.collect())
        if self.system is not None:
            self.stored()
        if self.plan.record:
            formats.check_output_dir(self.folder(), "--baseline-dir" if self.system is None else
                                     f"the baseline folder of system {self.system}")

    def rounds(self, policy: RoundsPolicy | None, *, rounds_given: bool) -> RoundsPolicy:
        """The rounds policy of this run: a recording takes a baseline's rounds; a judging run
        adds rounds while a verdict is UNKNOWN, its looks spending the family's alpha."""
        policy, self.looks = judging.judging_rounds(
            policy, update=self.plan.record is not None, rounds_given=rounds_given,
            baselines=self.stored if self.plan.compare else None, tolerance=self.plan.tolerance,
            alpha=self.plan.alpha, canary_shift=self.plan.canary_shift, family=self.family,
            session_sd=self.plan.session_sd, history=self.history())
        # The first world's rank 0 names the system where the launch is not local.
        return policy if not self.plan.active else _seeing(policy, self)

    # --- the one system and its baselines ---------------------------------------------------

    def resolve(self, fp: Mapping[str, Any] | None) -> str:
        """The run's one system: --system, else the first measuring world's (``fp``: its rank
        0's fingerprint; None: this host's)."""
        if self.system is None:
            self.system = baselines.system_for(fp or None)
        return self.system

    def folder(self) -> Path:
        return Path(self.plan.root) / self.system if self.system else Path(self.plan.root)

    def stored(self) -> dict:
        """The baselines of the run's system, read once ((case, metric) -> Baseline)."""
        if self._stored is None:
            self._stored = baselines.load_all(self.plan.root, self.resolve(None))
        return self._stored

    def family(self) -> int:
        """How many verdicts the run's cases can take: its false-alarm family."""
        if self._family is None:
            self._family = judging.family(self.cases, self.stored())
        return self._family

    def history(self) -> Any:
        """The asv history's levels per case, from which verdicts measure the drift between runs."""
        if self.plan.asv is not None and self.plan.compare and self._history is None:
            from .asv.read import drift_history

            self._history = drift_history(self.plan.asv, bench.asv_layout)
        return self._history

    # --- verdicts -----------------------------------------------------------------------------

    def judge_world(self, outcome: formats.WorldOutcome) -> list[Verdict]:
        """The verdicts of one world's measured cases, taken once (Holm within the world, its
        share of the run's family): pytest takes them as the world's first case is tested, the
        CLI at the end; both read these."""
        label = outcome.world
        if label not in self._worlds:
            samples = outcome.samples()
            verdicts: list[Verdict] = []
            if self.plan.compare and samples:
                self.resolve(outcome.result.fingerprint if outcome.result is not None else None)
                p = self.plan
                verdicts = regress.compare(samples, self.stored(), tolerance=p.tolerance, alpha=p.alpha,
                                           system=self.system or "", cases=[s.case.name for s in samples],
                                           looks=self.looks, canary_shift=p.canary_shift,
                                           family=self.family(), session_sd=p.session_sd, history=self.history())
            self._worlds[label] = verdicts
        return self._worlds[label]

    def case_failure(self, case: str, verdicts: Sequence[Verdict]) -> tuple[str, str] | None:
        """What one case's verdicts do to its pytest test: ("fail", line), ("xfail", line) or None."""
        mine = [v for v in verdicts if v.case == case]
        if self.plan.confirm:
            # --perf-confirm decides these at the session's end, by A/B; the session's status and
            # its last line carry what it decides (a test's outcome cannot be changed later)
            later = regress.to_confirm(mine)
            mine = [v for v in mine if v not in later]
        bad = regress.failing(mine, self.plan.improvements)
        if self.plan.strict:
            bad += [v for v in mine if v.status == "unknown" and not v.xfail]
            if not bad and self._nothing_can_compare():
                return "fail", self.nothing_line()
        if bad:
            return "fail", vt.case_line(bad)
        excused = [v for v in mine if v.xfail and v.is_failure]
        return ("xfail", vt.case_line(excused)) if excused else None

    def _nothing_can_compare(self) -> bool:
        """No case of the run has a baseline: nothing will be compared, whatever runs."""
        names = {c.name for c in self.cases}
        return self.plan.compare and not any(k[0] in names for k in self.stored())

    def missing(self, measured: set[str]) -> list[Verdict]:
        """MISSING for each selected case with a baseline that was not measured (its world
        failed, was skipped or interrupted)."""
        names = {c.name for c in self.cases} - measured
        gone = {k: b for k, b in self.stored().items() if k[0] in names}
        return regress.compare([], gone, system=self.system or "") if gone else []

    def nothing_line(self) -> str:
        """The one loud line of a judging run that compared nothing: which baseline is missing,
        and the face's command that records it."""
        root, system = self.plan.root, self.system or "?"
        why = (f"the baselines in {root}/{system}/ hold none of this run's cases" if self.stored()
               else f"no baseline for system {system} in {root}/{system}/")
        fix = f"; record one with: {self.hint(system, root)}" if self.hint else ""
        return f"NOTHING COMPARED: {why}, so every case is new and no regression could be seen{fix}"

    # --- the end ------------------------------------------------------------------------------

    def session(self, cfg: suite.SuiteConfig, keep: Keep = Keep(), *, rounds_given: bool = False,
                progress: Callable[[list], Any] | None = None, summary: Callable[[formats.SuiteRun], None] | None = None,
                where: str = ".", say: Callable[[str], None] | None = None) -> Finish:
        """A whole session, as ``perfsuite run`` runs one: the system and its baselines read before
        any world starts, the rounds the plan asks for, every world run (``progress(worlds)``: a
        context giving the per-world callback), then ``finish``, with SIGINT and SIGTERM deferred
        from the last world on so what finished is kept. ``summary`` sees the run before it is
        judged; under --confirm the A/B runs this session's cases with its launch (``where``: the
        user's repository, ``say``: its progress lines)."""
        self.prepare(cfg.launch)
        cfg = replace(cfg, rounds=self.rounds(cfg.rounds, rounds_given=rounds_given))
        with interrupts.handled() as signals:
            shown = progress(suite.plan(self.cases, cfg.options)) if progress is not None else nullcontext(None)
            with shown as on_world:
                run = suite.run(self.cases, cfg, on_world=on_world)
            signals.defer()
            if summary is not None:
                summary(run)
            return self.finish(run, keep, interrupted=signals.raised.name if signals.raised else None,
                               confirm=self.confirmer(cfg, where=where, say=say))

    def confirmer(self, cfg: suite.SuiteConfig, *, where: str = ".",
                  say: Callable[[str], None] | None = None) -> Confirmer | None:
        """Under --confirm, what decides the cases left to confirm: an A/B of this session's cases
        with ``cfg``'s launch against the baseline's commit (``experiments.confirm``)."""
        if not self.plan.confirm:
            return None
        from .experiments import confirm

        return confirm.confirmer(self.cases, cfg, budget_s=self.plan.confirm_budget, alpha=self.plan.alpha,
                                 where=where, progress=say)

    def finish(self, run: formats.SuiteRun, keep: Keep = Keep(), *, record_asv: bool = True,
               interrupted: str | None = None, confirm: Confirmer | None = None) -> Finish:
        """Judge the run, keep it (results file first, then the report, asv, the baselines),
        and give its lines and exit status. ``interrupted``: the signal that stopped it (the
        run is kept, neither judged nor recorded). ``confirm``: under --confirm, what decides
        the cases left UNKNOWN (``confirmer``: an A/B against the baseline's commit with the face's
        launch)."""
        lines: list[tuple[str, bool]] = []
        stop = interrupted or run.interrupted
        if self.plan.active and self.system is None:
            self.resolve(run.machine or None)
        verdicts: list[Verdict] = []
        nothing = False
        if self.plan.compare and not stop:
            for o in run.outcomes:
                verdicts += self.judge_world(o)
            measured = {s.case.name for s in run.samples()}
            verdicts += self.missing(measured)
            if self.plan.confirm and confirm is not None and regress.to_confirm(verdicts):
                verdicts, notes = confirm(verdicts, self.baseline_at())
                lines += [(text, False) for text in notes]
            nothing = bool(measured) and not any(k[0] in measured for k in self.stored())
            lines.append((f"# verdicts on {self.system} against {self.plan.root}/{self.system}/", False))
            lines += verdict_lines(verdicts, self.plan.strict, invalid=False, improvements=self.plan.improvements)
            lines.append((baselines.drift_line(self.stored(), self.system or "?"), False))
            if nothing:
                lines.append((self.nothing_line(), True))
        lines += [(vt.invalid_sample(s), True) for s in run.samples() if not s.valid]
        kept = self._keep(run, keep, verdicts, lines, record=not stop, record_asv=record_asv)
        if stop:
            lines.append((f"# interrupted by {stop}: not judged, not recorded in asv or as baselines", True))
        status = run_status(run, verdicts, kept=kept, nothing=nothing, strict=self.plan.strict, stop=stop,
                            improvements=self.plan.improvements)
        undecided = self.undecided_line(verdicts) if status in (EXIT_OK, EXIT_UNKNOWN, EXIT_REGRESSION) else None
        return Finish(verdicts, lines, status, finding(status, run, kept, nothing, self.plan.strict, undecided),
                      nothing, kept, undecided)

    def undecided_line(self, verdicts: Sequence[Verdict]) -> str | None:
        """The last word of a run that left cases UNKNOWN: no regression was shown, how many could
        not be judged, and the command that decides them (an interleaved A/B against the commit
        the baseline was measured at); None when every judged case was decided."""
        open_ = [v for v in verdicts if v.status == "unknown" and not v.xfail]
        if not open_:
            return None
        worst = max(open_, key=lambda v: abs(v.change) if v.change is not None and math.isfinite(v.change) else 0.0)
        largest = f" (largest {vt.percent(worst.change)}, {worst.case})" if worst.change is not None else ""
        shown = "regression shown" if any(v.status == "regression" and not v.xfail for v in verdicts) else \
            "no regression shown"
        return f"{shown}; {len(open_)} case(s) UNKNOWN{largest}: decide with: {self.decide_command(worst.case)}"

    def baseline_at(self) -> dict[str, str]:
        """Which code measured the latest recorded session of the run's system ({} unknown)."""
        at = baselines.recorded_at(self.plan.root, self.system) if self.system else []
        return dict(at[-1][1]) if at else {}

    def baseline_commit(self) -> str | None:
        """The commit the latest recorded session of the run's system was measured at."""
        return self.baseline_at().get("commit")

    def decide_command(self, case_name: str) -> str:
        """``perfsuite ab`` of one case's benchmark, transport and world size (and size), arm A
        the baseline's commit, arm B this checkout."""
        case = next((c for c in self.cases if c.name == case_name), None)
        spec = bench.find(case.benchmark) if case else None
        user = (spec.world_options.get("user_benchmark") or {}) if spec else {}
        # A benchmark of an installed package (its entry point) goes by its name in a new process;
        # one imported from its file (a bare module name) by that file.
        packaged = "." in str(user.get("module") or "")
        # relfile: its path in its repository; outside one, the file itself
        name = ((case.benchmark if packaged else user.get("relfile") or user.get("file")) if user
                else case.benchmark if case else case_name.split("[")[0])
        parts = ["perfsuite ab --benchmarks", shlex.quote(str(name))]
        if case is not None:
            parts += ["--transports", case.transport, "--world-sizes", str(case.world_size)]
            if case.size_bytes is not None and spec is not None and spec.name in bench.sized_benchmarks():
                parts += ["--sizes", str(case.size_bytes)]
        commit = self.baseline_commit()
        parts += ["--a-ref", commit[:10] if commit else "REV"]
        text = " ".join(parts)
        if not commit:
            text += " (REV: the commit the baseline was measured at; this baseline predates recording it)"
        return text

    def _keep(self, run: formats.SuiteRun, keep: Keep, verdicts: list[Verdict],
              lines: list[tuple[str, bool]], *, record: bool, record_asv: bool) -> bool:
        """Every write, in order; a failed one is a line naming the path and the OS error, and
        the results are kept in the temp folder when their own file could not be."""
        ok = True
        results_kept = False
        if keep.json:
            where, why = formats.write_run_kept(keep.json, run)
            lines.append((f"# results written to {where}" + (f" because {why}" if why else ""), why is not None))
            ok, results_kept = why is None, True
        if keep.report:
            from .reading import report

            try:
                report.write_report(keep.report, [report.ReportRun.from_suite_run(run, keep.source)],
                                    verdicts=verdicts or None)
                lines.append((f"# report written to {Path(keep.report) / 'index.html'}", False))
            except (OSError, PerfsuiteError) as exc:
                ok = False
                lines.append((f"# report not written to {keep.report}: {_why(exc)}", True))
        if record and record_asv and self.plan.asv is not None and run.samples():
            from .asv.record import record_run

            try:
                lines.append((record_run(run, self.plan.asv, bench.asv_layout).line(), False))
            except (OSError, PerfsuiteError) as exc:
                ok = False
                lines.append((f"# asv: NOT recorded (config {self.plan.asv.config}): {_why(exc)}", True))
        if record and self.plan.record:
            ok &= self._record(run, lines)
        if not ok and not results_kept:
            where, _ = formats.write_run_kept(formats.fallback_path("perfsuite-results.json"), run)
            lines.append((f"# results written to {where} instead", True))
        return ok

    def _record(self, run: formats.SuiteRun, lines: list[tuple[str, bool]]) -> bool:
        """The run's finished, valid cases as the baselines of its system."""
        lines += [(text, False) for text in not_recorded(run, allow_partial=False)]
        complete = [s for r in run.results for s in r.samples if s.valid] + [s for s in self.extra if s.valid]
        if not complete:
            return True
        try:
            lines += [(text, False) for text in baselines.update(
                self.plan.root, self.resolve(run.machine), complete, run.machine, session=run.created,
                add=self.plan.record == "add", measured_now=True, at=measured_at(self.plan.project))]
        except ConfigError as exc:  # too few rounds for a baseline: measured, so the run keeps them
            lines.append((f"# not recorded: {exc}", True))
            return False
        except OSError as exc:
            lines.append((f"# baselines not written to {exc.filename or self.folder()}: {_why(exc)}", True))
            return False
        return True


def measured_at(project: str | Path) -> dict[str, str]:
    """Which code measured a session: the commit of the user's repository (``project``) and
    perfsuite's version (and commit, where it runs from a checkout)."""
    at: dict[str, str] = {}
    here = fingerprint.repo_commit(project)
    if here:
        at.update(repo=here[0], commit=here[1])
    own = fingerprint.repo_commit(Path(__file__).resolve().parent)
    version = fingerprint.package_version("perfsuite") or "unknown"
    at["perfsuite"] = version + (f" (commit {own[1][:10]})" if own and (not here or own[0] != here[0]) else "")
    return at


def _seeing(policy: RoundsPolicy, gate: Gate) -> RoundsPolicy:
    return replace(policy, seen=lambda result: gate.resolve(result.fingerprint))


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def verdict_lines(verdicts: Sequence[Verdict], strict: bool, invalid: bool = True,
                  improvements: bool = False) -> list[tuple[str, bool]]:
    """The verdict table, a line per failing verdict and per UNKNOWN one saying why ((text,
    bad)); ``invalid`` False leaves out the invalid ones, which the run says case by case."""
    lines = [(vt.table(verdicts), False)]
    lines += [(f"{v.status.upper()}: {vt.line(v)}", True) for v in regress.failing(verdicts, improvements)
              if invalid or v.status != "invalid"]
    return lines + [(text, strict) for text in vt.undecided(verdicts)]


def verdict_status(verdicts: Sequence[Verdict], strict: bool, improvements: bool = False) -> int:
    """4 for an invalid result (a wrong sum is no measurement), 1 for a regression (under
    ``improvements``, --fail-on-improvement, an improvement too: the baseline wants refreshing),
    3 under ``strict`` for a case left UNKNOWN, else 0; an expected failure (xfail) is none of these."""
    found = [EXIT_WORLD if v.status == "invalid" else EXIT_REGRESSION
             for v in regress.failing(verdicts, improvements)]
    if strict and any(v.status == "unknown" and not v.xfail for v in verdicts):
        found.append(EXIT_UNKNOWN)
    return exit_status(*found)


def run_status(run: formats.SuiteRun, verdicts: Sequence[Verdict], *, kept: bool, nothing: bool,
               strict: bool, stop: str | None = None, improvements: bool = False) -> int:
    """A run's exit status: interrupted (128+N) above all; then a failed world, an invalid case
    or a failed write (4); then the verdicts' (``verdict_status``); under ``strict``, nothing
    compared is UNKNOWN (3)."""
    if stop:
        return EXIT_INTERRUPTED + signal.Signals[stop].value
    return exit_status(EXIT_OK if run.ok and kept else EXIT_WORLD, verdict_status(verdicts, strict, improvements),
                       EXIT_UNKNOWN if nothing and strict else EXIT_OK)


def finding(status: int, run: formats.SuiteRun, kept: bool, nothing: bool, strict: bool,
            undecided: str | None = None) -> str:
    """One line: which exit status a run's findings are, in words (pytest's summary ends with it).
    ``undecided``: the line of cases left UNKNOWN (``Gate.undecided_line``): then nothing is
    called wrong or right, the cases are counted."""
    if status > EXIT_INTERRUPTED:
        return "perfsuite: interrupted (what finished is kept)"
    if status == EXIT_WORLD:
        return ("perfsuite: a world failed or a case was invalid (infrastructure, not performance)"
                if not run.ok else "perfsuite: what was measured could not all be written (see above)")
    if status == EXIT_REGRESSION:
        return "perfsuite: regression"
    if status == EXIT_UNKNOWN:
        return ("perfsuite: UNKNOWN under --perf-strict (nothing compared: no baseline)" if nothing
                else f"perfsuite: UNKNOWN under --perf-strict: {undecided}" if undecided
                else "perfsuite: UNKNOWN under --perf-strict (a comparison could not be decided)")
    if undecided:
        return f"perfsuite: {undecided}"
    return "perfsuite: nothing wrong" + (" (nothing compared: no baseline)" if nothing else "")


def not_recorded(run: formats.SuiteRun, allow_partial: bool) -> list[str]:
    """A line for each world or case of a run that is not recorded as a baseline, and why."""
    lines = []
    for o in run.failures:
        kept = len(o.samples())
        what = (f"its {kept} measured case(s) recorded (--allow-partial)" if kept and allow_partial
                else f"its {kept} measured case(s) left out (--allow-partial records them)" if kept
                else "nothing measured")
        lines.append(f"# not recorded: {o.world} failed: {o.why}; {what}")
    for o in run.skipped:
        lines.append(f"# not recorded: {o.world} was skipped: {o.skipped}")
    for s in run.samples():
        if not s.valid:
            lines.append(f"# not recorded: {s.case.name} did not validate (wrong results)")
    return lines

"""Progress over a sweep of worlds: a rich bar in a terminal, plain lines everywhere else.

The bar counts cases (a world advances it by all of its cases when it ends), because a sweep's
worlds differ a lot in size. Under CI (``CI=true``, set by GitHub Actions, GitLab, Jenkins...) or
when stdout is not a terminal there is no bar and no escape codes, only one plain line per event,
so logs stay greppable. Ranks never print here: their output goes to the world's scratch files.
An instance is the ``on_world(event, spec, outcome)`` callback that ``suite.run`` takes.

Progress goes to stderr, so ``perfsuite run > r.txt`` keeps the results only. A world skipped
before it starts (its transport cannot run here) is said once, grouped by reason, in the run's
summary (``report.skipped_lines``); here it shows only when ``verbose``.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn)

from ..records.model import WorldSpec

_TRUE = ("1", "true", "yes", "on")


def in_ci(env: Mapping[str, str] | None = None) -> bool:
    """True when a CI service runs us (they all set CI; GitHub sets it to 'true')."""
    env = os.environ if env is None else env
    return env.get("CI", "").strip().lower() in _TRUE


def wants_bar(console: Console, env: Mapping[str, str] | None = None) -> bool:
    """A live bar only for a person at a real terminal: not under CI, not piped, not TERM=dumb."""
    env = os.environ if env is None else env
    return console.is_terminal and not console.is_dumb_terminal and not in_ci(env)


def outcome_line(spec: WorldSpec, outcome: Any, seconds: float) -> str:
    """One line saying what became of a world (shared by the bar and the plain lines)."""
    if outcome is None:
        return f"{spec.label}: no outcome"
    if getattr(outcome, "skipped", None):
        return f"{spec.label}: skipped: {outcome.skipped}"
    if getattr(outcome, "failure", None) is not None:
        return f"{spec.label}: FAILED after {seconds:.1f} s: {outcome.failure}"
    result = outcome.result
    wall = result.wall_s if result is not None and result.wall_s is not None else seconds
    bad = sum(1 for s in result.samples if not s.valid) if result is not None else 0
    tail = f", {bad} WRONG" if bad else ""
    return f"{spec.label}: {len(result.samples) if result else 0} cases in {wall:.1f} s{tail}"


class SweepProgress:
    """Context manager and ``on_world`` callback over the worlds of one sweep.

    ``clock`` is injectable so tests need not sleep; ``env`` decides CI-ness (default os.environ);
    ``verbose`` adds a line for each world skipped before it started.
    """

    def __init__(self, worlds: Sequence[WorldSpec], console: Console | None = None,
                 file: IO[str] | None = None, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic, verbose: bool = False):
        self.console = console or Console(file=file or sys.stderr)
        self.worlds = list(worlds)
        self.verbose = verbose
        self.total_cases = sum(len(w.cases) for w in self.worlds)
        self._never_started = 0  # worlds skipped before they started: not counted in [k/n]
        self.bar = wants_bar(self.console, env)
        self._clock = clock
        self._started: dict[str, float] = {}
        # [k/n] names the k-th world to start, on its start and done lines alike: with rounds
        # interleaved (or a contended round re-run at the end) worlds end out of order.
        self._ordinal: dict[str, int] = {}
        self._done_worlds = 0
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> "SweepProgress":
        if self.bar:
            self._progress = Progress(
                SpinnerColumn(),
                # markup off: world labels like 'allreduce[mpi-n2]' are not rich style tags
                TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
                MofNCompleteColumn(), TextColumn("cases"), TimeElapsedColumn(),
                console=self.console, transient=True)
            self._progress.start()
            self._task = self._progress.add_task("starting", total=self.total_cases or None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _line(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            # Plain text, no rich markup or colour: logs under CI stay exactly what we wrote.
            self.console.file.write(text + "\n")
            self.console.file.flush()

    def __call__(self, event: str, spec: WorldSpec, outcome: Any = None) -> None:
        if event == "done" and spec.label not in self._started:
            self._skipped_before_start(spec, outcome)
            return
        n = len(self.worlds) - self._never_started
        if event == "start":
            self._started[spec.label] = self._clock()
            k = self._ordinal.setdefault(spec.label, len(self._ordinal) + 1)
            where = f"[{k}/{n}] " if n else ""
            if self._progress is not None:
                # refresh now: a world can take minutes, the bar must name it from its start
                self._progress.update(self._task, description=f"{where}{spec.label}", refresh=True)
            else:
                self._line(f"# {where}running {spec.label}: {len(spec.cases)} cases")
        elif event == "done":
            self._done_worlds += 1
            seconds = self._clock() - self._started.pop(spec.label, self._clock())
            k = self._ordinal.get(spec.label, self._done_worlds)
            where = f"[{k}/{n}] " if n else ""
            self._line(f"# {where}{outcome_line(spec, outcome, seconds)}")
            if self._progress is not None:
                self._progress.update(self._task, advance=len(spec.cases), refresh=True)

    def _skipped_before_start(self, spec: WorldSpec, outcome: Any) -> None:
        """``suite.run`` settles these before any world starts, so [k/n] counts only the worlds
        that run, and the bar only their cases."""
        self._never_started += 1
        self.total_cases -= len(spec.cases)
        if self._progress is not None:
            self._progress.update(self._task, total=self.total_cases or None, refresh=True)
        if self.verbose:
            self._line(f"# {outcome_line(spec, outcome, 0.0)}")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


class StudyProgress:
    """Progress over a study's worlds, with the time left: each world still to run is
    estimated by the worlds of its point already timed (the rounds of a study repeat them),
    else by the plan's first guess scaled by how the timed worlds compared with theirs."""

    def __init__(self, todo: Sequence[tuple[str, float]], timed: Mapping[str, list[float]] | None = None,
                 console: Console | None = None, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.console = console or Console(file=sys.stderr)  # progress: the results go to stdout
        self.guess = dict(todo)
        self.left = [k for k, _ in todo]
        self.timed = {k: list(v) for k, v in (timed or {}).items()}
        self.bar = wants_bar(self.console, env)
        self._clock, self._t0 = clock, clock()
        self._progress: Progress | None = None
        self._task: Any = None
        self._done = 0

    def remaining_s(self) -> float:
        scale = [sum(v) / len(v) / self.guess[k] for k, v in self.timed.items() if v and self.guess.get(k, 0) > 0]
        factor = sorted(scale)[len(scale) // 2] if scale else 1.0
        return sum(sorted(self.timed[k])[len(self.timed[k]) // 2] if self.timed.get(k) else self.guess[k] * factor
                   for k in self.left)

    def drop(self, key: str) -> None:
        """``key``'s later worlds will not run (its point cannot run here)."""
        self.left = [k for k in self.left if k != key]

    def __enter__(self) -> "StudyProgress":
        if self.bar:
            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False),
                                      BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=self.console, transient=True)
            self._progress.start()
            self._task = self._progress.add_task("starting", total=len(self.left))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __call__(self, event: str, key: str, rnd: int, seconds: float | None = None, what: str = "") -> None:
        n = self._done + len(self.left)
        if event == "start":
            text = f"[{self._done + 1}/{n}] {key} round {rnd + 1}, ~{_minutes(self.remaining_s())} left"
            if self._progress is not None:
                self._progress.update(self._task, description=text, refresh=True)
            else:
                self.console.file.write(f"# {text}\n")
                self.console.file.flush()
            return
        self._done += 1
        if key in self.left:
            self.left.remove(key)
        self.timed.setdefault(key, []).append(float(seconds or 0.0))
        line = (f"# [{self._done}/{n}] {key} round {rnd + 1}: {what} in {seconds or 0:.1f} s; "
                f"{_minutes(self._clock() - self._t0)} so far, ~{_minutes(self.remaining_s())} left")
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False)
            self._progress.update(self._task, advance=1, refresh=True)
        else:
            self.console.file.write(line + "\n")
            self.console.file.flush()

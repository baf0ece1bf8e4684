"""The pytest face (pytest11 entry point ``perfsuite``): options, the world cache, fixtures.

A test asks for ``perf_case`` (parametrized from the case matrix) and ``perf_measure``; the first
test of a world starts that world for every selected case of it (one world per transport and
world size runs the whole size sweep), later tests of the same world reuse its result. The
ranks' per-iteration times are replayed into pytest-benchmark through a clock handed to it with
the public ``@pytest.mark.benchmark(timer=...)`` marker, so its statistics are the real
per-iteration times, never the time to start a world. ``perf_record`` replays any other sample
(the stall breakdown's parts) the same way.

MPI worlds never run under pytest-xdist: its workers would start worlds side by side on the
same cores, and pytest-benchmark switches itself off there, so nothing would be measured.
"""
from __future__ import annotations

import shlex
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from . import bench, formats, interrupts, options, regress, suite, transports
from . import verdict_text as vt
from .errors import ConfigError, FormatError, PerfsuiteError, RankFailure
from .model import Case, Sample
from .replay import REPLAY_CLOCK

STASH_KEY = pytest.StashKey["PerfState"]()
_REGISTRY_ERROR: str | None = None  # why the benchmark registry could not load (pytest_addoption)




class PerfState:
    """Per-session: parsed options, the cases collected, and every world's outcome."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.values = _values(config)
        self.suite_config = options.suite_config(self.values)
        self.selected: dict[tuple, list[Case]] = {}
        self.outcomes: dict[tuple, formats.WorldOutcome] = {}
        self.samples: list[Sample] = []
        self.verdicts: list = []  # regress.Verdict per metric of each measured case
        self.baselines: dict | None = None  # (case, metric) -> Baseline, loaded on first use
        self.baselines_for: str | None = None  # the system they were loaded for
        self.system: str | None = None  # baseline system, set when the first case is judged
        self.looks = 1  # how often each comparison may be looked at while rounds are added
        self.family: int | None = None  # verdicts the session can take: its false-alarm family
        self.world_verdicts: dict[tuple, list] = {}  # world key -> the verdicts of its cases
        self.canary_shift = options.canary_limit(self.values.get("max_canary_shift") or "0.15")
        self.logs_shown: dict[tuple, str] = {}  # world key -> the failed case that shows its logs
        self.report_lines: list[tuple[str, bool]] = []  # (line, is it bad) for the terminal summary
        self.missing_added = False
        self.started = time.time()  # the session's id, in the baselines it records
        self.asv_to = None  # --perf-asv's target, whose history verdicts read
        self._history = None

    def selection(self, benchmark: str, **extra: Any) -> bench.Selection:
        return options.selection(self.values, benchmark, **extra)

    def run(self) -> formats.SuiteRun:
        """Every world of the session as a run (what --perf-report and --perf-asv store)."""
        results = [o.result for o in self.outcomes.values() if o.result is not None]
        return formats.SuiteRun(outcomes=list(self.outcomes.values()),
                                fingerprint=results[0].fingerprint if results else {},
                                created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def outcome_for(self, case: Case) -> formats.WorldOutcome:
        key = case.world_key
        if key not in self.outcomes:
            cases = self.selected.get(key) or [case]
            spec = suite.plan(cases, self.suite_config.options)[0]
            try:  # pytest owns Ctrl-C; SIGTERM must unwind the same way, killing the world
                with interrupts.handled(("SIGTERM", "SIGHUP")):
                    self.outcomes[key] = suite.run_one(spec, self.judging())
            except KeyboardInterrupt as exc:  # keep what the world measured for --perf-report
                name = getattr(exc, "name", "SIGINT")
                self.outcomes[key] = formats.WorldOutcome(spec, failure=RankFailure(
                    f"{spec.label}: interrupted by {name}", case=spec.label,
                    partial=getattr(exc, "partial", []), kind="interrupted"))
                raise
        return self.outcomes[key]

    def history(self):
        """This machine's asv history as levels per case (``asv.read.drift_history``), once."""
        if self.asv_to is not None and self._history is None:
            from .asv.read import drift_history

            self._history = drift_history(self.asv_to, bench.asv_layout)
        return self._history

    def judging(self) -> suite.SuiteConfig:
        """As ``perfsuite run``: a baseline update records more rounds; otherwise rounds are
        added while a verdict against a stored baseline is UNKNOWN. Baselines that cannot be read
        here are left to ``_gate``, which fails the case with the reason."""
        from . import baselines
        from .errors import BaselineFormatError

        v = self.values
        stored = tol = None
        alpha = regress.DEFAULT_ALPHA
        if not (v.get("baseline_update") or v.get("baseline_add")):
            try:
                if self.baselines is None:
                    self.baselines_for = baselines.system_for(None, v.get("system"))
                    self.baselines = baselines.load_all(_baseline_root(self), self.baselines_for)
                stored = self.baselines
                tol = regress.parse_tolerance(v["tolerance"]) if v.get("tolerance") else None
                alpha = regress.parse_alpha(v.get("alpha"))
            except (ConfigError, BaselineFormatError, OSError):
                stored = None
        if stored is not None and self.family is None:
            self.family = suite.family([c for cs in self.selected.values() for c in cs], stored)
        policy, self.looks = suite.judging_rounds(
            self.suite_config.rounds, update=bool(v.get("baseline_update") or v.get("baseline_add")),
            rounds_given=v.get("rounds") is not None, baselines=stored, tolerance=tol, alpha=alpha,
            canary_shift=self.canary_shift, family=self.family,
            session_sd=options.session_drift(v.get("session_drift")), history=self.history())
        return replace(self.suite_config, rounds=policy)


def _values(config: pytest.Config) -> dict[str, Any]:
    """Option value, else its ini twin, else the default (options.selection fills defaults)."""
    out: dict[str, Any] = {}
    for o in options.all_options():
        value = config.getoption(f"perf_{o.dest}", default=None)
        if value is None:
            try:
                ini = config.getini(f"perf_{o.dest}")
            except ValueError:  # an option registered after pytest_addoption (a conftest's benchmark)
                ini = None
            if o.kind == "flag":
                value = ini if ini else None
            elif o.kind == "list":
                value = list(ini) or None
            else:
                value = ini or None
        out[o.dest] = value
    return out


def pytest_addoption(parser: pytest.Parser) -> None:
    global _REGISTRY_ERROR
    _REGISTRY_ERROR = None
    group = parser.getgroup("perfsuite", "perfsuite: MPI worlds and distributed DL benchmarks")
    try:
        opts = options.all_options()
    except ConfigError as exc:  # a bad PERFSUITE_BENCHMARKS: said once pytest can say it
        _REGISTRY_ERROR, opts = str(exc), options.COMMON
    added = options.add_options(group.addoption, prefix="perf-", opts=opts)
    options.add_asv_options(group.addoption, prefix="perf-")
    for o in added:
        kind = {"flag": "bool", "list": "linelist"}.get(o.kind, "string")
        parser.addini(f"perf_{o.dest}", f"ini twin of --perf-{o.name}: {o.help}", type=kind,
                      default=False if o.kind == "flag" else ([] if o.kind == "list" else ""))


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark's, whose refusal of -n says nothing of why
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perf_benchmark(name): the perfsuite benchmark a test measures")
    if _REGISTRY_ERROR:
        raise pytest.UsageError(_REGISTRY_ERROR)
    if _under_xdist(config) and _benchmark_run(config):
        raise pytest.UsageError(XDIST_REFUSED)
    try:
        state = PerfState(config)
        if state.values.get("report"):
            formats.check_output_dir(state.values["report"], "--perf-report")
        # Every option of every benchmark is checked now: a bad one is a usage error, not a
        # failure found once the first worlds have run.
        values = options.with_defaults(state.values)
        for o in options.all_options():
            options.parsed(o, values)
        for name in bench.names():
            suite.select_cases(state.selection(name))
        config.stash[STASH_KEY] = state
        to = options.prepare_asv(options.asv_target(vars(config.option), prefix="perf-"))
        if to is not None:  # --perf-asv: record every world's samples when the session ends
            from .asv.record import SessionRecorder, check_store

            check_store(to)
            config.pluginmanager.register(SessionRecorder(to, state.run, bench.asv_layout), "perfsuite-asv")
            state.asv_to = to  # its history measures the drift verdicts allow for
    except (ConfigError, FormatError) as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Where the defaults were fitted to this machine (a GPU transport's world sizes to its
    GPUs), said once per transport before anything runs."""
    state = config.stash.get(STASH_KEY, None)
    if state is None:
        return []
    return [f"perfsuite: {note}" for name in bench.names() for note in state.selection(name).notes]


def _state(config: pytest.Config) -> PerfState:
    return config.stash[STASH_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perf_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("perf_benchmark")
    benchmark = marker.args[0] if marker else "allreduce"
    state = _state(metafunc.config)
    extra = dict(marker.kwargs) if marker else {}
    try:
        cases = suite.select_cases(state.selection(benchmark, **extra))
        kind = bench.get(benchmark).transports
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    params = []
    for case in cases:
        reason = transports.spec(case.transport, kind).unavailable_reason()
        marks = [pytest.mark.skip(reason=f"{case.transport}: {reason}")] if reason else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("perf_case", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Remember which cases survived -k/deselection, so each world sweeps exactly those, and
    hand pytest-benchmark the replay clock for them."""
    state = _state(config)
    for item in items:
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("perf_case") if callspec else None
        if isinstance(case, Case):
            state.selected.setdefault(case.world_key, []).append(case)
            _replay_marker(item, f"{case.benchmark} {case.transport} n{case.world_size}")
        elif "perf_record" in getattr(item, "fixturenames", ()):  # the stall breakdown's parts
            _replay_marker(item, None)


def _replay_marker(item: pytest.Item, group: str | None) -> None:
    """The replay clock, merged into the test's own ``@pytest.mark.benchmark(...)``.

    pytest-benchmark reads only the closest ``benchmark`` marker, and a user's (say
    ``group="mine"``) is closer than one appended here, so it would time the empty replay
    target with its own clock. Ours goes first and carries the user's options: their group
    wins over ours; their timer cannot (the ranks timed the iterations, the clock only replays
    them). The others act on the empty target, so the replayed times stay the ranks' own.
    """
    own = item.get_closest_marker("benchmark")
    kwargs = ({"group": group} if group else {}) | (dict(own.kwargs) if own else {})
    if kwargs.get("timer", REPLAY_CLOCK) is not REPLAY_CLOCK:
        item.warn(pytest.PytestWarning(f"{item.name}: perfsuite replays the ranks' own times; the "
                                       f"benchmark marker's timer={kwargs['timer']!r} is not used"))
    kwargs["timer"] = REPLAY_CLOCK
    item.add_marker(pytest.mark.benchmark(*(own.args if own else ()), **kwargs), append=False)


XDIST_REFUSED = ("perfsuite starts MPI worlds, which must not run under pytest-xdist (-n): workers would "
                 "share the cores and measure nothing; run the benchmarks without -n (-p no:xdist)")


def _benchmark_run(config: pytest.Config) -> bool:
    """The session asks for measurements (--benchmark-only or a --perf-* option), so -n is
    refused up front; other sessions that merely have perfsuite installed may use xdist, and
    a measuring test among them still fails (``perf_state``)."""
    if config.getoption("benchmark_only", default=False):
        return True
    return any(config.getoption(f"perf_{o.dest}", default=None) not in (None, [])
               for o in options.COMMON)


def _under_xdist(config: pytest.Config) -> bool:
    """An xdist worker, or a controller that will hand tests to workers."""
    if hasattr(config, "workerinput"):
        return True
    n = config.getoption("numprocesses", default=None)
    return bool(n) and config.getoption("dist", default="no") != "no"


def pytest_deselected(items: list[pytest.Item]) -> None:
    if not items:
        return
    state = _state(items[0].config)
    for item in items:
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("perf_case") if callspec else None
        if isinstance(case, Case) and case in state.selected.get(case.world_key, []):
            state.selected[case.world_key].remove(case)


@pytest.fixture(scope="session")
def perf_state(request: pytest.FixtureRequest) -> PerfState:
    """Every measuring fixture goes through this one, so no world starts under xdist."""
    if _under_xdist(request.config):
        pytest.fail(XDIST_REFUSED, pytrace=False)
    return _state(request.config)


def _sample_or_fail(state: PerfState, case: Case, node: pytest.Item | None = None) -> Sample:
    outcome = state.outcome_for(case)
    if outcome.skipped:
        pytest.skip(f"{case.transport}: {outcome.skipped}")
    sample = outcome.sample_for(case)
    if sample is None:
        failure = outcome.failure
        logs = getattr(failure, "logs", {})
        shown_by = state.logs_shown.setdefault(case.world_key, case.name)
        if node is not None and shown_by == case.name:
            # Every rank's log, as pytest shows captured output: under the world's first failed
            # case only (a 13-size sweep would otherwise print them 12 times over).
            for source, text in logs.items():
                node.add_report_section("call", f"{source} log", text or "(empty)")
        tail = getattr(failure, "stderr_tail", "")
        detail = f"\n--- stderr tail ---\n{tail}" if tail else ""
        if logs and shown_by != case.name:
            detail += f"\n(every rank's log: under {shown_by})"
        pytest.fail(f"{case.name}: {failure}{detail}" if failure else f"{case.name}: no result",
                    pytrace=False)
    return sample


def record(benchmark: Any, sample: Sample, fingerprint: dict | None = None) -> None:
    """Replay the sample's per-iteration times into pytest-benchmark and fill ``extra_info``."""
    benchmark.extra_info.update(sample.info)
    benchmark.extra_info.update({"case": sample.case.name, "valid": sample.valid,
                                 **{k: m.value for k, m in sample.metrics.items()}})
    if fingerprint is not None:
        benchmark.extra_info["fingerprint"] = fingerprint
    times = list(sample.times_s) or [0.0]
    with REPLAY_CLOCK.replay(times):
        benchmark.pedantic(lambda: None, rounds=len(times), iterations=1, warmup_rounds=0)


@pytest.fixture
def perf_record():
    """``perf_record(benchmark, sample)``: replay a sample measured by other means (an
    experiment's, such as the stall breakdown's parts) into pytest-benchmark, as ``perf_measure``
    does for a world's cases."""
    return record


@pytest.fixture
def perf_measure(perf_state: PerfState, perf_case: Case, request: pytest.FixtureRequest):
    """Call with the ``benchmark`` fixture: measures (or reuses) this case's world, records it,
    and fails the test if the world failed or the result was wrong."""

    def measure(benchmark: Any) -> Sample:
        sample = _sample_or_fail(perf_state, perf_case, request.node)
        outcome = perf_state.outcome_for(perf_case)
        fp = outcome.result.fingerprint if outcome.result is not None else None
        record(benchmark, sample, fp)
        perf_state.samples.append(sample)
        if not sample.valid:
            pytest.fail(f"{perf_case.name}: wrong result (validation against the exact sum failed)",
                        pytrace=False)
        _gate(perf_state, sample, fp)
        return sample

    return measure


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STASH_KEY, None)
    if state is None or not state.outcomes:
        return
    tr = terminalreporter
    tr.section("perfsuite worlds")
    for outcome in state.outcomes.values():
        spec = outcome.spec
        if outcome.skipped:
            tr.write_line(f"{spec.label}: skipped: {outcome.skipped}")
        elif outcome.failure is not None:
            tr.write_line(f"{spec.label}: FAILED: {outcome.failure}")
        else:
            r = outcome.result
            facts = r.extra.get("transport_facts") or {}
            timed = f", timing {facts['timing']}" if facts.get("timing") in ("native", "python") else ""
            why = f" (not native: {facts['timing_why']})" if facts.get("timing_why") else ""
            sliced = f", {r.extra['time_sliced']}" if r.extra.get("time_sliced") else ""
            tr.write_line(f"{spec.label}: {len(r.samples)} cases{sliced}, world start {r.world_start_s:.2f} s, "
                          f"wall {r.wall_s:.1f} s{timed}{why}")
    _verdict_summary(state, tr)
    for line, bad in state.report_lines:
        tr.write_line(line, red=bad)
    line, bad = _finding(state)
    tr.write_line(line, red=bad, green=not bad)


def _finding(state: PerfState) -> tuple[str, bool]:
    """pytest keeps its own exit codes; this one line says which of the CLI's exit statuses
    (docs/running.md) the session's findings are, in the CLI's order: a failed world or invalid
    case first, then a regression, then a case left UNKNOWN under --perf-strict."""
    failures = [o.failure for o in state.outcomes.values() if o.failure is not None]
    if any(getattr(f, "kind", "") == "interrupted" for f in failures):
        return "perfsuite: interrupted (what finished is kept)", True
    if failures or not all(s.valid for o in state.outcomes.values() for s in o.samples()):
        return "perfsuite: a world failed (infrastructure, not performance)", True
    strict = bool(state.values.get("strict"))
    if not (state.values.get("baseline_update") or state.values.get("baseline_add")):
        if regress.failing(state.verdicts, strict):
            return "perfsuite: regression", True
        if strict and any(v.status == "unknown" and not v.xfail for v in state.verdicts):
            return "perfsuite: UNKNOWN under --perf-strict (a comparison could not be decided)", True
        if _nothing_compared(state):
            return (("perfsuite: UNKNOWN under --perf-strict" if strict else "perfsuite: nothing wrong")
                    + " (nothing compared: no baseline)", strict)
    return "perfsuite: nothing wrong", False


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """--perf-report DIR is written here, where a failed write can still fail the session
    (the terminal summary comes after the exit status is fixed)."""
    state = session.config.stash.get(STASH_KEY, None)
    if state is None or not state.outcomes or not state.values.get("report"):
        return
    from . import report

    _add_missing_verdicts(state)
    run, out = state.run(), state.values["report"]
    try:
        report.write_report(out, [report.ReportRun.from_suite_run(run, "pytest session")],
                            verdicts=getattr(state, "verdicts", None))
        formats.write_run(Path(out) / "results.json", run)
    except (OSError, PerfsuiteError) as exc:  # the tests ran: keep their results, fail the session
        spare, _ = formats.write_run_kept(formats.fallback_path("perfsuite-results.json"), run)
        state.report_lines.append((f"perfsuite report not written to {out}: "
                                   f"{getattr(exc, 'strerror', None) or exc}; results kept in {spare}", True))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    state.report_lines.append((f"perfsuite report written to {Path(out) / 'index.html'} "
                               f"(results in {Path(out) / 'results.json'})", False))


# --- baselines and verdicts --------------------------------------------------------------------

def _baseline_root(state: PerfState) -> str:
    root = state.values.get("baseline_dir") or "baselines"
    return str(state.config.rootpath / root)  # relative to the rootdir, like testpaths


def _gate(state: PerfState, sample: Sample, fingerprint: dict | None) -> None:
    """Judge one measured case against its baseline: a regression fails with one line, an
    expected one (baseline xfail reason) xfails, --perf-strict also fails improvements. With
    --perf-baseline-update nothing fails: this run becomes the baseline at the session's end."""
    from . import baselines
    from .errors import BaselineFormatError

    v = state.values
    try:
        system = baselines.system_for(fingerprint or None, v.get("system"))
        if state.baselines is None or state.baselines_for != system:
            state.baselines = baselines.load_all(_baseline_root(state), system)
            state.baselines_for = system
        tol = regress.parse_tolerance(v["tolerance"]) if v.get("tolerance") else None
        alpha = regress.parse_alpha(v.get("alpha"))
    except (ConfigError, BaselineFormatError) as exc:
        pytest.fail(str(exc), pytrace=False)
    state.system = system
    key = sample.case.world_key
    if key not in state.world_verdicts:
        # A world's cases are judged together, the first time one of them is: Holm's step-down
        # over them, with the world's share of the session's family (regress.judge).
        outcome = state.outcomes.get(key)
        world = (outcome.samples() if outcome is not None else []) or [sample]
        if state.family is None:
            state.family = suite.family([c for cs in state.selected.values() for c in cs], state.baselines)
        state.world_verdicts[key] = regress.compare(
            world, state.baselines, tolerance=tol, alpha=alpha, system=system,
            cases=[s.case.name for s in world], looks=state.looks, canary_shift=state.canary_shift,
            judged=suite.judged, family=state.family, session_sd=options.session_drift(v.get("session_drift")),
            history=state.history())
        state.verdicts += state.world_verdicts[key]
    verdicts = [x for x in state.world_verdicts[key] if x.case == sample.case.name]
    if v.get("baseline_update") or v.get("baseline_add"):
        return
    if v.get("strict") and (nothing := _nothing_compared(state)):  # as the CLI's exit 3
        pytest.fail(nothing, pytrace=False)
    bad = regress.failing(verdicts, strict=bool(v.get("strict")))
    if v.get("strict"):  # the CLI exits 3 on UNKNOWN; here the undecided case fails
        bad += [x for x in verdicts if x.status == "unknown" and not x.xfail]
    if bad:
        pytest.fail(vt.case_line(bad), pytrace=False)
    excused = [x for x in verdicts if x.xfail and x.is_failure]
    if excused:
        pytest.xfail(vt.case_line(excused))


def _nothing_compared(state: PerfState) -> str | None:
    """One line when the stored baselines judge none of the session's cases (every verdict is
    new, so a regression could not have been seen): which baseline is missing, and the pytest
    command that records it. None when something was compared, or the session records."""
    v = state.values
    if state.system is None or v.get("baseline_update") or v.get("baseline_add"):
        return None
    selected = {c.name for cs in state.selected.values() for c in cs}
    if any(k[0] in selected for k in state.baselines or {}):
        return None
    folder = Path(_baseline_root(state)) / state.system
    why = (f"the baselines in {folder}/ hold none of this session's cases" if state.baselines
           else f"no baseline for system {state.system} in {folder}/")
    # The same session, recording: without --perf-strict, and without --perf-rounds (a baseline
    # needs more rounds than a judging session may ask for; recording takes its own).
    args, drop = [], False
    for a in state.config.invocation_params.args:
        if drop or a == "--perf-strict" or a.startswith("--perf-rounds="):
            drop = False
            continue
        drop = a == "--perf-rounds"
        if not drop:
            args.append(a)
    return (f"NOTHING COMPARED: {why}, so every case is new and no regression could be seen; "
            f"record one with: {shlex.join(['pytest', *args, '--perf-baseline-update'])}")


def _add_missing_verdicts(state: PerfState) -> None:
    """Once: a MISSING verdict for each selected case with a baseline that was not measured."""
    if state.system is None or state.missing_added:
        return
    state.missing_added = True
    selected = {c.name for cs in state.selected.values() for c in cs}
    measured = {s.case.name for s in state.samples}
    gone = {k: b for k, b in (state.baselines or {}).items() if k[0] in selected - measured}
    state.verdicts += regress.compare([], gone, system=state.system, judged=suite.judged)


def _verdict_summary(state: PerfState, tr) -> None:
    """The table of every verdict (missing ones added), then --perf-baseline-update's write."""
    from . import baselines

    system = state.system
    if system is None:
        return  # no case was measured, so nothing was judged
    _add_missing_verdicts(state)
    tr.section(f"perfsuite verdicts on {system}")
    tr.write_line(vt.table(state.verdicts))
    for text in vt.undecided(state.verdicts):
        tr.write_line(text)
    if nothing := _nothing_compared(state):
        tr.write_line(nothing, red=True)
    if state.values.get("baseline_update") or state.values.get("baseline_add"):
        fp = next((o.result.fingerprint for o in state.outcomes.values() if o.result is not None), None)
        # Only worlds that finished become baselines: a failed world's first cases are partial.
        finished = {s.case for o in state.outcomes.values() if o.result is not None for s in o.result.samples}
        valid = [s for s in state.samples if s.valid and s.case in finished]
        for o in state.outcomes.values():
            if o.failure is not None:
                tr.write_line(f"# not recorded: {o.world} failed: {o.why}")
        try:
            session = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(state.started))
            for line in baselines.update(_baseline_root(state), system, valid, fp, session=session,
                                         add=bool(state.values.get("baseline_add")), source="this session",
                                         measured_now=True):
                tr.write_line(line)
        except (OSError, PerfsuiteError) as exc:
            tr.write_line(f"perfsuite baselines not updated: {exc}", red=True)

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

from .. import bench, interrupts, suite, transports
from . import options
from ..store import formats
from .. import gate
from ..reading import report
from ..reading import verdict_text as vt
from ..records.errors import ConfigError, FormatError, RankFailure
from ..records.model import Case, Sample
from .clock import REPLAY_CLOCK

STASH_KEY = pytest.StashKey["PerfState"]()
_REGISTRY_ERROR: str | None = None  # why the benchmark registry could not load (pytest_addoption)


class PerfState:
    """Per-session: parsed options, the cases collected, every world's outcome, and the gate."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.values = _values(config)
        self.suite_config = options.suite_config(self.values)
        self.selected: dict[tuple, list[Case]] = {}
        self.outcomes: dict[tuple, formats.WorldOutcome] = {}
        self.unavailable: dict[tuple, str] = {}  # world key -> why its transport cannot run here
        self.skipped_cases: list[Case] = []  # cases of those worlds that reached their skip
        self.samples: list[Sample] = []  # measured outside the worlds (the stall breakdown): recorded with them
        self.logs_shown: dict[tuple, str] = {}  # world key -> the failed case that shows its logs
        self.started = time.time()
        self.interrupted: str | None = None  # the signal that stopped a world
        self.finished: gate.Finish | None = None  # what the gate made of the session (sessionfinish)
        self.gate: gate.Gate | None = None  # made in pytest_configure
        self._judging: suite.SuiteConfig | None = None

    def selection(self, benchmark: str, **extra: Any) -> bench.Selection:
        return options.selection(self.values, benchmark, **extra)

    def run(self) -> formats.SuiteRun:
        """Every world of the session as a run (what the gate judges, keeps and records)."""
        results = [o.result for o in self.outcomes.values() if o.result is not None]
        return formats.SuiteRun(outcomes=list(self.outcomes.values()),
                                fingerprint=results[0].fingerprint if results else {},
                                created=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
                                interrupted=self.interrupted)

    def skipped_before_start(self) -> list[formats.WorldOutcome]:
        """The worlds whose transport cannot run here, with the cases that were skipped for it
        (marked at collection), so no world started and none is in ``outcomes``."""
        worlds: dict[tuple, list[Case]] = {}
        for case in self.skipped_cases:
            worlds.setdefault(case.world_key, []).append(case)
        return [formats.WorldOutcome(suite.plan(cases, self.suite_config.options)[0], skipped=self.unavailable[key])
                for key, cases in worlds.items()]

    def outcome_for(self, case: Case) -> formats.WorldOutcome:
        key = case.world_key
        if key not in self.outcomes:
            cases = self.selected.get(key) or [case]
            spec = suite.plan(cases, self.suite_config.options)[0]
            broken = next((o for o in self.outcomes.values()
                           if suite.launcher_broken(o.failure) and suite.fails_alike(o.spec, spec)), None)
            if broken is not None:  # every later world would fail as that one did: one failure, then skips
                self.outcomes[key] = formats.WorldOutcome(
                    spec, skipped=f"not started: the launcher did not start {broken.world}'s ranks")
                return self.outcomes[key]
            try:  # pytest owns Ctrl-C; SIGTERM must unwind the same way, killing the world
                with interrupts.handled(("SIGTERM", "SIGHUP")):
                    self.outcomes[key] = suite.run_one(spec, self.judging())
            except KeyboardInterrupt as exc:  # keep what the world measured for --perf-report
                name = getattr(exc, "name", "SIGINT")
                self.interrupted = name
                self.outcomes[key] = formats.WorldOutcome(spec, failure=RankFailure(
                    f"{spec.label}: interrupted by {name}", case=spec.label,
                    partial=getattr(exc, "partial", []), kind="interrupted"))
                raise
        return self.outcomes[key]

    def judging(self) -> suite.SuiteConfig:
        """The session's rounds, as ``perfsuite run``'s (``gate.Gate.rounds``), settled when
        its first world starts: by then -k has chosen the cases, which the family counts. A
        baseline file that cannot be read stops the session, as the CLI refuses it (bad input)."""
        if self._judging is None:
            assert self.gate is not None
            self.gate.select([c for cs in self.selected.values() for c in cs])
            try:
                self.gate.prepare(self.suite_config.launch)
                rounds = self.gate.rounds(self.suite_config.rounds,
                                          rounds_given=self.values.get("rounds") is not None)
            except (ConfigError, FormatError) as exc:
                pytest.exit(f"perfsuite: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
            self._judging = replace(self.suite_config, rounds=rounds)
        return self._judging


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
    # An installed benchmark module that does not import fails only the tests that name its
    # benchmarks (pytest_generate_tests); every other session is warned once and runs.
    for line in bench.BROKEN.values():
        config.issue_config_time_warning(pytest.PytestConfigWarning(f"perfsuite: {line}"), stacklevel=2)
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
            try:
                suite.select_cases(state.selection(name))
            except bench.NothingSelected:  # one --perf-transports list serves every benchmark
                pass
        to = options.prepare_asv(options.asv_target(vars(config.option), prefix="perf-"))
        if to is not None:  # --perf-asv: the gate records the session there when it ends
            from ..asv.record import check_store

            check_store(to)
        recording = bool(state.values.get("baseline_update") or state.values.get("baseline_add"))
        root = config.rootpath / (state.values.get("baseline_dir") or "baselines")  # as testpaths
        state.gate = gate.Gate(options.gate_plan(state.values, compare=not recording, root=root, asv=to,
                                         project=config.rootpath),
                               hint=lambda system, folder: _record_hint(config))
        config.stash[STASH_KEY] = state
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
    # A user benchmark's own test (``x.test``) names it on the function, as the marker does.
    own = getattr(metafunc.function, "perfsuite_benchmark", None)
    benchmark = marker.args[0] if marker else own or "allreduce"
    state = _state(metafunc.config)
    extra = dict(marker.kwargs) if marker else {}
    try:
        kind = bench.get(benchmark).transports
        cases = suite.select_cases(state.selection(benchmark, **extra))
    except bench.NothingSelected as exc:  # this benchmark has none on the session's transports
        metafunc.parametrize("perf_case", [pytest.param(None, id="nothing-selected",
                                                        marks=pytest.mark.skip(reason=str(exc)))])
        return
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    params = []
    for case in cases:
        reason = transports.spec(case.transport, kind).unavailable_reason()
        marks = [pytest.mark.skip(reason=f"{case.transport}: {reason}")] if reason else []
        if reason:
            state.unavailable[case.world_key] = reason
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Count a case of a transport that cannot run here once its skip mark has skipped it, so
    the summary's counts are the skips pytest reports (none under --collect-only or after -x)."""
    outcome = yield
    state = item.config.stash.get(STASH_KEY, None)
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get("perf_case") if callspec else None
    if (state is not None and isinstance(case, Case) and case.world_key in state.unavailable
            and outcome.excinfo is not None and issubclass(outcome.excinfo[0], pytest.skip.Exception)):
        state.skipped_cases.append(case)


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
        if not sample.valid:
            pytest.fail(vt.invalid_sample(sample), pytrace=False)
        # The world's verdicts, taken once by the gate the CLI uses; this case's fail or xfail it.
        assert perf_state.gate is not None
        verdicts = perf_state.gate.judge_world(outcome)
        what = perf_state.gate.case_failure(perf_case.name, verdicts)
        if what is not None:
            kind, line = what
            (pytest.fail if kind == "fail" else pytest.xfail)(line, **({"pytrace": False} if kind == "fail" else {}))
        return sample

    return measure


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STASH_KEY, None)
    if state is None:
        return
    skipped = [o for o in state.outcomes.values() if o.skipped] + state.skipped_before_start()
    if not (state.outcomes or skipped):
        return
    tr = terminalreporter
    tr.section("perfsuite worlds")
    for outcome in state.outcomes.values():
        spec = outcome.spec
        if outcome.skipped:
            continue  # grouped by reason below, as perfsuite run's summary does
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
    if config.option.verbose > 0:  # -v: each skipped world too, as perfsuite run -v says them
        for o in skipped:
            tr.write_line(f"{o.world}: skipped: {o.skipped}")
    for line in report.skipped_lines(skipped, prefix=""):
        tr.write_line(line)
    done = state.finished
    if done is None:
        return
    if state.gate is not None and state.gate.plan.compare and state.gate.system:
        tr.section(f"perfsuite verdicts on {state.gate.system}")
    for line, bad in done.lines:
        tr.write_line(line, red=bad)
    bad = done.status != 0
    tr.write_line(done.finding, red=bad, green=not bad)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The gate's end, here rather than in the terminal summary, so that it runs under
    ``-p no:terminal`` too and sets the session's status: verdicts, then the writes (the
    report's results.json first, the report, asv, the baselines). pytest keeps its own codes:
    whatever the CLI would exit non-zero for fails the session (1) if no test did already."""
    state = session.config.stash.get(STASH_KEY, None)
    if state is None or state.gate is None or not (state.outcomes or state.samples):
        return
    out = state.values.get("report")
    if exitstatus == pytest.ExitCode.INTERRUPTED and state.interrupted is None:
        state.interrupted = "SIGINT"
    state.gate.extra = list(state.samples)
    # --perf-confirm: the A/B runs the session's cases with its launch
    confirm = state.gate.confirmer(state.suite_config, where=str(session.config.rootpath))
    state.finished = state.gate.finish(
        state.run(), gate.Keep(json=Path(out) / "results.json" if out else None, report=out,
                               source="pytest session"), interrupted=state.interrupted, confirm=confirm)
    if state.finished.status != 0 and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _record_hint(config: pytest.Config) -> str:
    """The same session, recording: without the gating flags (--perf-strict,
    --perf-fail-on-improvement), and without --perf-rounds (a baseline needs more rounds than a
    judging session may ask for; recording takes its own)."""
    args, drop = [], False
    for a in config.invocation_params.args:
        if drop or a in ("--perf-strict", "--perf-fail-on-improvement") or a.startswith("--perf-rounds="):
            drop = False
            continue
        drop = a == "--perf-rounds"
        if not drop:
            args.append(a)
    return shlex.join(["pytest", *args, "--perf-baseline-update"])

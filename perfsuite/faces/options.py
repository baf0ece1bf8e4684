"""Every option once, for both faces (pytest-benchmark's habit): ``--perf-<name>`` plus an ini
twin ``perf_<name>`` in the pytest plugin, ``--<name>`` in the CLI, ``PERFSUITE_ASV_<NAME>``
under ``asv run``. The shared options are listed here; each benchmark adds its own from its
record (``perfsuite/bench``); the asv recording group (``--asv*``, ``--perf-asv*``) is
``ASV_OPTIONS``. Values become checked objects (``Selection``, ``SuiteConfig``)
at this boundary; a bad value raises ConfigError naming it, which each face reports its own way
(pytest's UsageError, exit 4).

``python -m perfsuite.faces.options`` prints the option reference (docs/options.md is that output).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import bench, collectives, gate, transports
from ..asv.project import DEFAULT_CONFIG as ASV_CONFIG
from ..asv.project import RecordTarget, load_project, resolve_commit
from ..bench import Selection
from ..records.errors import ConfigError
from ..launch.launchers import FLAVORS, LAUNCHERS, LaunchConfig, parse_env
from ..records.model import Opt, parse_names, split_list, whole_number
from ..verdicts.decision import DEFAULT_ALPHA, parse_alpha, parse_tolerance
from ..store import baselines
from ..verdicts import regress, rounds
from ..verdicts.regress import MIN_SESSIONS, PRIOR_SPAN
from ..verdicts.rounds import RoundsPolicy
from ..launch.netns import SHAPING_FORMS
from ..launch.world import START_TIMEOUT_S, START_TIMEOUT_SLOW_S
from ..suite import DEFAULT_TIMEOUT_S, SuiteConfig
from ..verdicts.judging import COMPARE_MAX_ROUNDS


def seconds(value: Any, what: str = "timeout") -> float:
    """A positive, finite number of seconds."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = -1.0
    if not 0 < t < float("inf"):
        raise ConfigError(f"{what} {value!r} must be a number of seconds > 0, e.g. 120")
    return t


def parse_world_sizes(text: str | Iterable[int]) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); every world size is a whole number >= 1."""
    parts = split_list(text, "world sizes", "1,2,4") if isinstance(text, str) else list(text)
    out = []
    for p in parts:
        s = str(p).strip()
        if not s:
            continue
        if not s.lstrip("-").isdigit() or int(s) < 1:
            raise ConfigError(f"world size {s!r} is not allowed; world sizes are whole numbers >= 1")
        out.append(int(s))
    if not out:
        raise ConfigError(f"world sizes {text!r} name none; use e.g. 2 or 1,2,4")
    return tuple(dict.fromkeys(out))


def _whole(what: str, low: int = 1) -> Callable[[Any], int | None]:
    return lambda value: whole_number(value, what, low)


def max_time(value: Any) -> float:
    """--max-time: seconds of timed calls per size, a positive finite number."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = -1.0
    if not 0 < t < float("inf"):
        raise ConfigError(f"max time {value!r} must be seconds of timed calls per size > 0, "
                          f"e.g. {collectives.SIZE_MAX_TIME_S:g}")
    return t


#: Where baselines are kept unless --baseline-dir says: the gate's own default.
BASELINE_DIR = gate.Plan.root

COMMON: list[Opt] = [
    Opt("transports", "all", "comma list of transports, or 'all': every one but the TensorFlow 1 designs, "
        "which perfsuite transports lists (unavailable ones are skipped with the reason)", metavar="LIST"),
    Opt("world-sizes", "2", "comma list of world sizes (ranks), e.g. 1,2,4", metavar="LIST", parse=parse_world_sizes),
    Opt("launcher", "mpiexec", f"how worlds start: {', '.join(LAUNCHERS)}", metavar="NAME"),
    Opt("launcher-program", None, "path of mpiexec/srun if not the one on PATH", metavar="PATH"),
    Opt("launcher-args", None, "extra launcher arguments, split like a shell: srun '--mpi=pmi2' "
        "(where Slurm's MpiDefault is none), mpiexec '-bind-to core'", metavar="ARGS"),
    Opt("mpi-flavor", "auto", f"mpiexec's MPI: {', '.join(FLAVORS)} (auto asks mpiexec --version)", metavar="NAME"),
    Opt("hostfile", None, "hostfile for multi-node worlds (MPICH -f, Open MPI --hostfile, srun SLURM_HOSTFILE)", metavar="PATH"),
    Opt("hosts", None, "comma list of hosts instead of a hostfile", metavar="LIST"),
    Opt("ppn", None, "ranks per node (unset: the launcher places them)", metavar="N",
        parse=_whole("ranks per node (ppn)")),
    Opt("oversubscribe", "auto", "Open MPI --oversubscribe: auto (when ranks > cores), yes, no; yes also "
        "starts a one-host world of more than 8 ranks per core, which is refused otherwise", metavar="WHEN"),
    Opt("env", [], "NAME=VALUE passed to every rank (repeatable), e.g. NCCL_DEBUG=INFO", kind="list", metavar="NAME=VALUE"),
    Opt("timeout", str(int(DEFAULT_TIMEOUT_S)), "seconds one world may take before it is killed", metavar="S", parse=seconds),
    Opt("start-timeout", None, "seconds a world's ranks have to start (each checks in after MPI_Init): a launcher "
        "that cannot start them fails its world then, quoting its own error, and the run's later worlds are not "
        f"started [default: {START_TIMEOUT_S:g}; {START_TIMEOUT_SLOW_S:g} in a container, under srun or over --hosts/--hostfile]",
        metavar="S", parse=lambda v: seconds(v, "start timeout")),
    Opt("iters", None, "timed iterations per size, exactly [default: by size, OMB-like, cut by --max-time]",
        metavar="N", parse=_whole("iterations"), knob="iters"),
    Opt("max-time", None, "seconds of timed calls per size of a collective (pytest-benchmark's max_time): "
        "a size's iterations are this over the time per call of its warm-up (the slowest rank's), never "
        "more than the by-size default, so only slow transports are cut; not with --iters "
        f"[default: {collectives.SIZE_MAX_TIME_S:g}]", metavar="S", parse=max_time, knob="max_time"),
    Opt("warmup", None, "warm-up iterations per size [default: by size]", metavar="N",
        parse=_whole("warm-up iterations", low=0), knob="warmup"),
    Opt("workdir", None, "folder for world scratch files (must be shared across nodes on a cluster)", metavar="DIR"),
    Opt("rounds", str(RoundsPolicy.rounds), "rounds: run each world this many times and pool them (noise on shared machines)", metavar="N"),
    Opt("max-rounds", None, "adaptive sampling: more rounds, up to N, until each median is known to --precision "
        f"[default: off; judging (--compare), {COMPARE_MAX_ROUNDS}: rounds are added while a verdict is UNKNOWN]",
        metavar="N"),
    Opt("precision", f"{RoundsPolicy.precision:g}", "adaptive sampling stops when the 95% CI of each median is within +-this fraction", metavar="F"),
    Opt("round-budget", None, "adaptive sampling stops after this many seconds per world", metavar="S"),
    Opt("max-contention", f"{rounds.DEFAULT_MAX_CONTENTION:g}", "a round whose ranks waited for a CPU longer than this share of the timed "
        "loop is contended: kept in the results, left out of verdicts and re-run", metavar="F"),
    Opt("contention-retries", str(rounds.DEFAULT_RETRIES), "worlds re-run per world in place of contended rounds", metavar="N"),
    Opt("max-canary-shift", f"{rounds.DEFAULT_CANARY_SHIFT:g}", "rounds whose canaries differ by more than this fraction ran in different "
        "machine modes: verdicts set rounds only against rounds of their own mode (off: every round)", metavar="F",
        parse=lambda v: canary_limit(v)),
    Opt("system", None, "baseline system name [default: from this machine's fingerprint]", metavar="NAME"),
    Opt("baseline-dir", BASELINE_DIR, "folder of baselines/<system>/<benchmark>.json", metavar="DIR"),
    Opt("baseline-update", False, "record this run as the baselines, replacing their rounds (atomic; prints "
        "what changed, and how many sessions and rounds each holds)", kind="flag"),
    Opt("baseline-add", False, "add this run's rounds to the stored baselines as one more session: once the "
        f"machine has {MIN_SESSIONS}, verdicts learn its drift between runs from all its cases instead of "
        f"deciding only changes beyond the prior x{PRIOR_SPAN:g}", kind="flag"),
    Opt("strict", False, "a gate that must decide: a comparison left UNKNOWN, or nothing compared (no "
        "baseline), fails (pytest fails the case; the CLI exits 3)", kind="flag"),
    Opt("confirm", False, "decide each case left UNKNOWN against its stored baseline, and each one "
        "decided from fewer than 8 sittings, by an interleaved A/B against the commit that measured the "
        "baseline (perfsuite ab --a-ref), within --confirm-budget; under pytest at the session's end",
        kind="flag"),
    Opt("confirm-budget", f"{gate.Plan.confirm_budget:g}", "seconds of A/B pairs --confirm may take, all its cases together (the "
        "baseline's commit is built once, not counted)", metavar="S", parse=lambda v: seconds(v, "confirm budget")),
    Opt("fail-on-improvement", False, "an improvement beyond tolerance fails too (exit 1), as a regression "
        "does: a prompt to refresh the baseline", kind="flag"),
    Opt("alpha", None, "false-alarm rate of the whole judged family: the chance that any verdict of the run wrongly says "
        f"DIFFERENT (Holm over the cases, split over the looks adaptive sampling takes) [default: {DEFAULT_ALPHA:g}]",
        metavar="P", parse=parse_alpha),
    Opt("tolerance", None, "override every tolerance: 0.05 or LOWER:UPPER like -0.10:0.05 [default: per metric, "
        "widened to 2x the baseline's between-round spread]",
        metavar="TOL", parse=parse_tolerance),
    Opt("session-drift", None, "SD of the drift of a case's level between two runs of this machine, as a "
        f"fraction > 0, taken as known [default: learned from the sessions of every case this machine "
        f"recorded, once it has {MIN_SESSIONS}; before that only changes beyond the prior x{PRIOR_SPAN:g} "
        "are decided]", metavar="F",
        parse=lambda v: _fraction_above_0(v, "session drift")),
    Opt("emulated-network", None, "run every world with one rank per emulated node (network namespaces, "
        f"tbf-shaped veth links; root): {SHAPING_FORMS}", metavar="RATE[,...]"),
    Opt("report", None, "after the run, write index.html, summary.md, CSV and PNG plots into DIR", metavar="DIR"),
]


def _fraction_above_0(text: Any, what: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{what} {text!r} must be a fraction between 0 and 1, e.g. 0.02")
    return value


#: How every help states a default, in one form: ``[default: X]``, or ``[default: X; when...]``.
DEFAULT_RE = re.compile(r"\s*\[default: ((?:[^\[\]]|\[[^\[\]]*\])*)\]")


def stated_default(help: str | None) -> str | None:
    """What a help says the default is (the text inside ``[default: ...]``), or None."""
    m = DEFAULT_RE.search(" ".join((help or "").split()))
    return m.group(1) if m else None


def leading_value(said: str) -> str | None:
    """The value a stated default starts with (``0.5``, ``4B,1MiB``, ``off``), or None where it
    starts with words about one (the model's own), another option or a variable."""
    first = re.split(r"; |, ", said)[0]
    return None if " " in first or first.startswith(("$", "-")) else first


def default_cell(said: str) -> str:
    """A stated default for a Markdown table: its value as code, the words after it as words."""
    value = leading_value(said)
    return said if value is None else f"`{value}`{said[len(value):]}"


def all_options() -> list[Opt]:
    """The shared options, then every registered benchmark's own."""
    names = {o.name for o in COMMON}
    return COMMON + [o for o in bench.options() if o.name not in names]


def add_options(addoption: Callable[..., Any], prefix: str = "",
                names: Collection[str] | None = None, opts: Iterable[Opt] | None = None) -> list[Opt]:
    """Add every option (or only ``names``, or ``opts``) through ``addoption`` (argparse's
    add_argument or pytest's group.addoption); returns the options added.

    Every option (``perfsuite run``'s set) leaves out those of a benchmark measured by its own
    experiment (the stall breakdown's ``stalls``, which ``run`` cannot run): each is hidden,
    and giving it is a usage error naming the command that runs that benchmark."""
    added = []
    elsewhere = _run_elsewhere() if opts is None and names is None else {}
    for o in all_options() if opts is None else opts:
        if names is not None and o.name not in names:
            continue
        flag = f"--{prefix}{o.name}"
        dest = f"{prefix.replace('-', '_')}{o.dest}"
        if o.name in elsewhere:
            addoption(flag, default=None, dest=dest, metavar=o.metavar, help=argparse.SUPPRESS,
                      type=elsewhere[o.name])
            continue
        text = o.help.replace("%", "%%")  # argparse %-formats help: '95% CI' would crash --help
        if o.kind == "flag":
            addoption(flag, action="store_true", default=None, dest=dest, help=text)
        elif o.kind == "list":
            addoption(flag, action="append", default=None, dest=dest, metavar=o.metavar, help=text)
        else:  # an option unset by default says what unset means in its help, never "None"
            shown = "" if o.default is None or "default:" in o.help else f" [default: {o.default}]"
            addoption(flag, default=None, dest=dest, metavar=o.metavar, help=text + shown)
        added.append(o)
    return added


# --- old spellings, accepted for one release --------------------------------------------------

def renamed_notice(old: str, now: str) -> str:
    """The one line an old spelling prints (stderr): what it is now, and that it goes."""
    return f"perfsuite: {old} is now {now}; the old spelling goes in the next release"


class Renamed(argparse.Action):
    """An option's old spelling, kept for one release (both faces, every command): hidden from
    --help, it stores what the new spelling stores (``also``: the values it implies besides) and
    says so in one line on stderr, once however often it is given."""

    def __init__(self, option_strings: list[str], dest: str, now: str, flag: bool = False,
                 also: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("default", argparse.SUPPRESS)  # never overwrite the new option's default
        super().__init__(option_strings, dest, nargs=0 if flag else None, help=argparse.SUPPRESS, **kwargs)
        self.now, self.flag, self.also, self.said = now, flag, dict(also or {}), False

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if not self.said:
            print(renamed_notice(option_string or self.option_strings[0], self.now), file=sys.stderr, flush=True)
            self.said = True
        setattr(namespace, self.dest, True if self.flag else values)
        for name, value in self.also.items():
            setattr(namespace, name, value)


def add_renamed(addoption: Callable[..., Any], old: str, now: str, dest: str, *, flag: bool = False,
                also: Mapping[str, Any] | None = None) -> None:
    """Accept ``old`` as ``now`` (whose value lands in ``dest``) for one release, through
    ``addoption`` (argparse's add_argument; faces/cli/common.py's ``renamed`` for the commands)."""
    addoption(old, action=Renamed, dest=dest, now=now, flag=flag, also=also)


def _run_elsewhere() -> dict[str, Callable[[str], Any]]:
    """Option name -> an argparse ``type`` that refuses it, for the options only a benchmark
    measured by its own experiment has (a shared option stays)."""
    def refuse(o: Opt, spec: bench.BenchmarkSpec) -> Callable[[str], Any]:
        def refused(value: str) -> Any:
            raise argparse.ArgumentTypeError(
                f"the {spec.name} benchmark is measured by its own experiment, which this command does "
                f"not run; run it with `{spec.command.format(value=value)}` (or under pytest with "
                f"--perf-{o.name} {value})")
        return refused

    kept = {o.name for o in COMMON} | {o.name for s in bench.all_specs() if s.cases is not None
                                       for o in s.options}
    return {o.name: refuse(o, s) for s in bench.all_specs() if s.cases is None and s.command
            for o in s.options if o.name not in kept}


def with_defaults(values: Mapping[str, Any]) -> dict[str, Any]:
    """Raw option values (keys are ``Opt.dest``) with every missing one at its default."""
    return {o.dest: o.default for o in all_options()} | {k: x for k, x in values.items() if x is not None}


def parsed(o: Opt, v: Mapping[str, Any]) -> Any:
    """The checked value of one option (None stays None, flags are booleans)."""
    raw = bool(v.get(o.dest)) if o.kind == "flag" else v.get(o.dest)
    if o.parse is None or (raw is None and o.kind != "flag"):
        return raw
    return o.parse(raw)


def selection(values: Mapping[str, Any], benchmark: str = "allreduce", **extra: Any) -> Selection:
    """A checked Selection of one benchmark's cases. ``extra`` (a pytest marker's keywords)
    wins over the options of the same name."""
    spec = bench.get(benchmark)
    v = with_defaults(values) | {k: x for k, x in extra.items() if x is not None}
    # Names are checked against every benchmark's transports, then filtered to this one's, so
    # one --transports list serves a session that runs allreduce and training cases together.
    every = list(dict.fromkeys(s.name for s in transports.REGISTRY.values()))
    own = set(transports.names(spec.transports))
    picked = tuple(t for t in parse_names(v["transports"], every, "transport",
                                          every=transports.default_names(spec.transports)) if t in own)
    sizes = parse_world_sizes(v["world_sizes"])
    fitted, notes = {}, []
    given = values.get("world_sizes") is not None or extra.get("world_sizes") is not None
    one_node = v["launcher"] == "mpiexec" and not v["hosts"] and not v["hostfile"]
    if not given and one_node and any(transports.spec(t, spec.transports).device == "gpu" for t in picked):
        from ..transports.gpu import fit_world_sizes, visible_gpus

        gpus = visible_gpus()
        for t in picked:
            if transports.spec(t, spec.transports).device == "gpu":
                fit, note = fit_world_sizes(sizes, gpus)
                if note:
                    fitted[t] = fit
                    notes.append(f"{t}: {note}")
    return Selection(benchmark=benchmark, transports=picked, world_sizes=sizes,
                     values={o.dest: parsed(o, v) for o in spec.options}, fitted=fitted, notes=tuple(notes),
                     world_sizes_given=given)


def launcher_args(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        return tuple(shlex.split(str(text)))
    except ValueError as exc:
        raise ConfigError(f"launcher args {text!r} cannot be split like a shell ({exc}); "
                          "quote them as a shell would, e.g. '--mpi=pmi2'") from None


def launch_config(v: Mapping[str, Any]) -> LaunchConfig:
    over = str(v["oversubscribe"]).lower()
    if over not in ("auto", "yes", "no"):
        raise ConfigError(f"oversubscribe {v['oversubscribe']!r} must be auto, yes or no")
    hosts = tuple(split_list(v["hosts"], "hosts", "node1,node2")) if v["hosts"] else ()
    if v["hostfile"] and not os.path.isfile(v["hostfile"]):
        raise ConfigError(f"hostfile {v['hostfile']!r} does not exist")
    return LaunchConfig(launcher=str(v["launcher"]), flavor=str(v["mpi_flavor"]),
                        program=v["launcher_program"], hostfile=v["hostfile"], hosts=hosts,
                        ranks_per_node=whole_number(v["ppn"], "ranks per node (ppn)"),
                        oversubscribe=None if over == "auto" else over == "yes",
                        env=parse_env(v["env"] or []), extra_args=launcher_args(v["launcher_args"]))


def suite_config(values: Mapping[str, Any]) -> SuiteConfig:
    """The checked SuiteConfig; every option with a ``knob`` becomes that kernel option."""
    v = with_defaults(values)
    for o in all_options():  # a value given is checked also where no chosen benchmark reads it
        if values.get(o.dest) is not None:
            parsed(o, v)
    launch = launch_config(v)
    knobs = {}
    for o in all_options():
        if o.knob is not None and (value := parsed(o, v)) is not None:
            knobs[o.knob] = value
    network = None
    if v.get("emulated_network"):
        from ..launch.netns import parse_shaping

        network = parse_shaping(v["emulated_network"])
    start = v.get("start_timeout")
    return SuiteConfig(launch=launch, timeout=seconds(v["timeout"]), options=knobs,
                       start_timeout=None if start in (None, "") else seconds(start, "start timeout"),
                       workdir=v["workdir"], network=network, rounds=rounds_policy(v))


def rounds_policy(v: Mapping[str, Any]) -> RoundsPolicy:
    """--rounds/--max-rounds/--precision/--round-budget as a checked RoundsPolicy; an unset one
    is its option's default (``with_defaults``), so raw parser values are taken as they are."""
    v = with_defaults(v)
    try:
        precision = float(v["precision"])
        budget = float(v["round_budget"]) if v.get("round_budget") not in (None, "") else None
    except ValueError:
        raise ConfigError(f"precision {v.get('precision')!r} and round budget {v.get('round_budget')!r} "
                          "must be numbers, e.g. 0.01 and 60") from None
    return RoundsPolicy(rounds=whole_number(v["rounds"], "rounds"),
                        max_rounds=whole_number(v.get("max_rounds"), "max rounds"),
                        precision=precision, budget_s=budget,
                        max_contention=contention_limit(v["max_contention"]),
                        retries=whole_number(v["contention_retries"], "contention retries", low=0))


def _limit_or_off(value: Any, what: str, high: float, example: str) -> float | None:
    """A fraction in (0, high], or None for 'off'."""
    if value is None or str(value).strip().lower() == "off":
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        f = -1.0
    if not 0.0 < f <= high:
        raise ConfigError(f"{what} {value!r} must be a fraction in (0, {high:g}], e.g. {example}, or off")
    return f


def contention_limit(value: Any) -> float | None:
    """--max-contention: a fraction in (0, 1], or 'off' (judge contended rounds too)."""
    return _limit_or_off(value, "max contention", 1.0, "0.05")


def session_drift(value: Any) -> float | None:
    """--session-drift: a fraction in (0, 1), or None (the verdict's own rule)."""
    return None if value in (None, "") else _fraction_above_0(value, "session drift")


def canary_limit(value: Any) -> float | None:
    """--max-canary-shift: a fraction > 0, or 'off' (compare rounds across machine modes)."""
    return _limit_or_off(value, "max canary shift", 10.0, "0.15")


# --- asv recording: where a run's samples go in asv's history --------------------------------

ASV_OPTIONS = (
    ("asv", "record this run's samples into asv's results (asv.conf.json) for the commit and machine"),
    ("asv-machine", "asv machine name [default: from the fingerprint, e.g. amd-epyc-7b13-2c]"),
    ("asv-commit", "commit the results belong to [default: git rev-parse HEAD]"),
    ("asv-config", f"asv config file [default: {ASV_CONFIG}]"),
)


def add_asv_options(addoption: Callable[..., Any], prefix: str = "") -> None:
    """Add ``--asv``, ``--asv-machine``, ``--asv-commit``, ``--asv-config`` (with ``prefix``)."""
    for name, help in ASV_OPTIONS:
        dest = (prefix + name).replace("-", "_")
        if name == "asv":
            addoption(f"--{prefix}{name}", action="store_true", default=False, dest=dest, help=help)
        else:
            addoption(f"--{prefix}{name}", default=None, dest=dest,
                      metavar=name.split("-")[1].upper(), help=help)


def asv_target(values: Mapping[str, Any], prefix: str = "") -> RecordTarget | None:
    """The checked target from option values (dest names with ``prefix``), None without --asv."""
    p = prefix.replace("-", "_")
    if not values.get(f"{p}asv"):
        for name, _ in ASV_OPTIONS[1:]:
            if values.get(p + name.replace("-", "_")):
                raise ConfigError(f"--{prefix}{name} needs --{prefix}asv (record into asv)")
        return None
    machine = values.get(f"{p}asv_machine")
    if machine is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", machine):
        raise ConfigError(f"asv machine name {machine!r} must be letters, digits, '.', '_' or '-' "
                          "(it names a folder), e.g. dgx-a100")
    return RecordTarget(config=values.get(f"{p}asv_config") or ASV_CONFIG, machine=machine,
                        commit=values.get(f"{p}asv_commit") or None)


def prepare_asv(to: RecordTarget | None) -> RecordTarget | None:
    """Check the target before anything is measured: the config loads and the commit resolves
    (HEAD is read now, so a checkout changing during a long run does not move the results)."""
    if to is None:
        return None
    from ..store.formats import check_output_dir

    project = load_project(to.config)
    check_output_dir(project.results_dir, "asv results folder")
    return RecordTarget(to.config, to.machine, resolve_commit(project, to.commit), to.env_name,
                        to.lock_timeout)


def reference_markdown() -> str:
    """The option reference as docs/options.md holds it (a test keeps the two the same)."""
    lines = ["# Options", "",
             "Generated by `python -m perfsuite.faces.options > docs/options.md`; a test fails when this",
             "file and the code disagree.", "",
             "The shared options, the suite's and each benchmark's, written once for pytest and the command line: each",
             "exists for pytest as `--perf-NAME` with an ini twin `perf_NAME` (in `pytest.ini`,",
             "`[tool.pytest.ini_options]` or `setup.cfg`), for `perfsuite run` as `--NAME`, and for",
             "`asv run` as the variable `PERFSUITE_ASV_NAME` (upper case, `_` for `-`; list options",
             "separated by `;`). They are not every option: `perfsuite run` has a few of its own, and the",
             "other commands take those of these that apply beside their own; every command's options,",
             "with its usage and exit statuses, are in [cli.md](cli.md).", "",
             "| option | default | meaning |", "| --- | --- | --- |"]
    for o in all_options():
        said = stated_default(o.help)
        default = ("off" if o.kind == "flag" else f"`{o.default}`" if o.default not in (None, [])
                   else default_cell(said) if said else "-")
        lines.append(f"| `{o.name}` | {default} | {DEFAULT_RE.sub('', o.help).replace('|', '/')} |")
    lines += ["", "The asv recording options (no ini twin, no asv variable):", "",
              "| option | default | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {default_cell(stated_default(text)) if stated_default(text) else 'off'} | "
              f"{DEFAULT_RE.sub('', text)} |" for name, text in ASV_OPTIONS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")


def gate_plan(values: Mapping[str, Any], *, compare: bool, root: str | Path | None = None, asv: Any = None,
         project: str | Path = ".") -> gate.Plan:
    """The gate's plan (``gate.Plan``) from option values (either face's: ``options.all_options`` names them),
    every one checked now. ``compare``: judge against the baselines (``run --compare``; pytest
    always, unless it records). ``root``: the baseline folder, where the face resolves it.
    ``project``: the folder of the user's repository (the CLI's working folder, pytest's rootdir)."""
    update, add = bool(values.get("baseline_update")), bool(values.get("baseline_add"))
    if update and add:
        raise ConfigError("--baseline-update replaces the stored rounds and --baseline-add adds to them; "
                          "give one of them")
    record = "update" if update else "add" if add else None
    if record and compare:
        raise ConfigError(f"--compare judges against the stored baselines and --baseline-{record} records "
                          "this run as them; give one: judge first, then record")
    given = values.get("rounds")
    if (record == "update" and given is not None
            and whole_number(given, "rounds", low=1) < regress.MIN_BASELINE_ROUNDS):
        raise ConfigError(f"--rounds {given} with --baseline-update records a baseline that can decide "
                          f"nothing; a baseline needs at least {regress.MIN_BASELINE_ROUNDS} rounds "
                          f"(leave --rounds out: {regress.BASELINE_ROUNDS} are recorded)")
    tol = parse_tolerance(values["tolerance"]) if values.get("tolerance") else None
    system = values.get("system")
    v = with_defaults(values)  # each default is its option's (docs/options.md shows them)
    return gate.Plan(compare=compare, record=record, strict=bool(values.get("strict")),
                improvements=bool(values.get("fail_on_improvement")), tolerance=tol,
                alpha=parse_alpha(values.get("alpha")),
                canary_shift=canary_limit(v["max_canary_shift"]),
                session_sd=session_drift(values.get("session_drift")),
                root=str(root or v["baseline_dir"]),
                system=baselines.system_for(name=system) if system else None, asv=asv, project=str(project),
                confirm=bool(values.get("confirm")) and compare,
                confirm_budget=seconds(v["confirm_budget"], "confirm budget"))

"""Every file perfsuite writes or reads: one version per format, one check, one atomic write.

Formats and their history (bump a version when a reader of the old one would misread the new;
register a migration in ``migrations.MIGRATIONS`` when the old one can still be read):

- ``perfsuite-job`` v1: what the launcher hands every rank: benchmark, transport, world size,
  cases, kernel knobs, the world's scratch folder, where rank 0 writes the result, the time the
  world was spawned; ``kernel`` (the module whose ``run(ctx)`` the ranks call) may be empty.
- ``perfsuite-result`` v1: one world's ``Result``, written by rank 0.
- ``perfsuite-run`` v1: the results file of ``perfsuite run --json``: results, the samples of
  failed worlds (``partial``), failures and skipped worlds. Failure and skip entries name their
  world by label; they also carry benchmark, transport and world size, and a skip its cases
  (``case_fields``); readers of older v1 files, which lack these, take the world from the label.
  ``interrupted`` (optional): the signal that stopped the run; the file holds what finished.
- ``perfsuite-baseline`` v1: ``baselines/<system>/<benchmark>.json`` (see ``baselines``). A
  metric may carry ``canary_rounds`` (the canary of each round); files without it are judged
  across machine modes, as before.
- ``perfsuite-dataset`` v1: the manifest of a generated JPEG dataset (see ``dataset``); v2 names
  its ``kind``: ``jpeg``, or ``tokens`` (a language model's token shards).
- ``perfsuite-ab`` v1: ``perfsuite ab --json``: arms, tolerance, looks, verdicts, per-arm values.
- ``perfsuite-commit-env`` v1: the stamp of a commit's environment (``launch/envs``), written last.
  ``dist`` (optional, informative: no reader needs it, so no new version): the distribution the
  commit's tree installed (its pyproject's ``[project] name``); older stamps lack it. ``project``
  (optional, informative too): the folder of the tree it was installed from ("" for the top).
- ``perfsuite-detection`` v1: ``perfsuite detection-power --json``: the config, every world of
  the stream in time order (per case: metrics, canary, contention, pressure), the canary study
  and every window's verdicts.
- ``perfsuite-study-plan`` v1: a study plan, TOML or JSON (``studies/``, ``experiments/study_plan``).
- ``perfsuite-study`` v1: ``perfsuite study``'s ``study.json``: the plan as read and every world
  finished so far (point, round, seconds, result or skip or failure), rewritten after each.

pyperf's habit: the version is checked before anything else is read, and an error says what
to do (re-run, re-record, upgrade). The run file's one reader is ``load_run``; the report, the
gate and ``baseline update`` all read through it.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..records.errors import ConfigError, FormatError, LaunchError, PerfsuiteError, RankFailure
from ..records.model import Case, Result, Sample, WorldSpec
from .migrations import LABEL as _LABEL, MIGRATIONS

AB = "perfsuite-ab"
DETECTION = "perfsuite-detection"
VALIDITY = "perfsuite-validity"
STUDY_PLAN, STUDY = "perfsuite-study-plan", "perfsuite-study"
NATIVE = "perfsuite-native-loop"  # the stamp of a cached native-loop build (launch/native/mpi.py)
COMMIT_ENV = "perfsuite-commit-env"  # the stamp of a commit's built environment (launch/envs.py)
JOB, RESULT, RUN, BASELINE, DATASET = ("perfsuite-job", "perfsuite-result", "perfsuite-run",
                                       "perfsuite-baseline", "perfsuite-dataset")
#: BASELINE 2: each entry says which loop timed it ("timing"), so none is compared across loops.
#: BASELINE 3: each round says which measurement session (perfsuite run) it came from
#: ("sessions"), and earlier sessions' levels are kept ("history"): a verdict's interval
#: includes the drift between sessions.
#: BASELINE 4: "recorded_at" says, per session, which commit of the project measured it
#: ({"commit", "repo", "perfsuite"}), so an UNKNOWN can be decided against that commit now.
#: AB 2: a verdict holds a reason code and its numbers ("reason", "facts"), not prose ("note"),
#: and one verdict per case (the judged metric; its reciprocal in "facts").
#: AB 3: each arm names the commit it ran ("ref": "HEAD~1 (abc1234def)"; null for this checkout).
#: AB 4: "stop_on_regression": whether the run stopped at the first DIFFERENT regression, so a
#: case UNKNOWN there may only have been cut short.
#: AB 5: "invalid" lists the samples that did not validate (the run stops at their pair), and each
#: case's "values" mark by index the pairs left out of B/A ("contended", "invalid").
#: AB 6: "new" lists the cases only B's tree declares (measured in B's worlds: their "values"
#: have an empty "a", and no verdict), "missing" those only A's declares (not measured).
#: RESULT 2: an allreduce sample's info["latency_us"] is the judged statistic (per call the
#: slowest rank's time, p50 over calls: its metric, and the table's time, algbw and busbw); v1's
#: latency_us/latency_min_us/latency_max_us (OMB's avg/min/max of per-rank means) are
#: omb_avg_us/omb_min_us/omb_max_us. New, optional: "invalid_ranks", the ranks whose result was wrong;
#: "iters_by" (what set "iters": "default", "max_time" or "iters"), "max_time" and "warmup_call_us"
#: (the time budget per size and the warm-up's time per call it read): no reader needs them.
#: RUN 2: its samples' info as RESULT 2, the partial samples' too.
#: DATASET 2: "kind" says what the folder holds, "jpeg" or "tokens" (a language model's
#: shards); version 1 held JPEGs only.
VERSIONS = {JOB: 1, RESULT: 2, RUN: 2, BASELINE: 4, DATASET: 2, AB: 6, DETECTION: 1, NATIVE: 1, COMMIT_ENV: 1,
            STUDY_PLAN: 1, STUDY: 1, VALIDITY: 1}

RERUN = "re-run the suite with this perfsuite to regenerate it"
REFRESH_BASELINE = ("re-record it with `perfsuite baseline update --from results.json` "
                    "or `pytest benchmarks --perf-baseline-update`")
#: What to do with a file of another format, and with one older than this perfsuite reads.
_HINTS = {
    RUN: ("pass a file written by perfsuite run --json", RERUN),
    AB: ("pass a file written by perfsuite ab --json", "re-run perfsuite ab with this perfsuite"),
    DETECTION: ("pass a file written by perfsuite detection-power --json",
                "re-run perfsuite detection-power with this perfsuite"),
    VALIDITY: ("pass a file written by perfsuite validity --json", "re-run perfsuite validity with this perfsuite"),
    RESULT: ("pass a file written by perfsuite run --json", RERUN),
    JOB: ("jobs are written by perfsuite's world runner", "start the world with this perfsuite"),
    BASELINE: (f"move it away and {REFRESH_BASELINE}",
               f"it is older than this perfsuite reads; {REFRESH_BASELINE}"),
    DATASET: ("delete the folder and let the suite rewrite it",
              "delete the folder and let the suite rewrite it"),
    NATIVE: ("delete its folder: the suite builds it again", "delete its folder: the suite builds it again"),
    COMMIT_ENV: ("delete its folder: perfsuite builds it again", "delete its folder: perfsuite builds it again"),
    STUDY_PLAN: ('begin it with format = "perfsuite-study-plan" and version = 1', "see studies/seed-tf.toml"),
    STUDY: ("pass the --out folder of a perfsuite study", "start the study again with a fresh --out"),
}


#: Files people hand perfsuite by mistake, told by keys only they have.
_FOREIGN = (({"machine_info", "commit_info", "benchmarks"}, "a pytest-benchmark file (--benchmark-json); "
             "perfsuite's own results from pytest are written by --perf-report DIR as results.json"),
            ({"params", "results", "commit_hash"}, "an asv results file"),
            ({"version", "benchmarks"}, "an asv benchmarks.json"))


def looks_like(d: Any) -> str:
    """What a JSON document that is not the expected format seems to be, in a few words."""
    if isinstance(d, dict):
        if str(d.get("format", "")).startswith("perfsuite-"):
            return f"it is a {d['format']} file"
        for keys, what in _FOREIGN:
            if keys <= d.keys():
                return f"it looks like {what}"
        return "not a perfsuite file: it has no \"format\" field"
    kind = _JSON_TYPES.get(type(d), type(d).__name__)
    return f"not a perfsuite file: its top level is a JSON {kind}, not an object"


#: JSON's own names for what ``json.loads`` returns, so a message speaks of the file.
_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


def check_format(d: Any, fmt: str, source: str, error: type[PerfsuiteError] = FormatError) -> dict:
    """``d`` as the current version of ``fmt`` (older versions migrated), or ``error`` with
    one line that says what to do."""
    wrong, older = _HINTS[fmt]
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise error(f"{source}: not a {fmt} file ({looks_like(d)}); {wrong}")
    current, version = VERSIONS[fmt], d.get("version")
    while isinstance(version, int) and version < current and (fmt, version) in MIGRATIONS:
        d = MIGRATIONS[(fmt, version)](d)
        version = d["version"] = version + 1
    if not isinstance(version, int) or isinstance(version, bool):
        # No perfsuite writes such a version: the file was edited or made by something else.
        raise error(f"{source}: {fmt} file without a version number (\"version\": "
                    f"{json.dumps(version)}); {wrong}")
    if version != current:
        hint = older if version < current else \
            "it was written by a newer perfsuite; upgrade perfsuite to read it"
        raise error(f"{source}: {fmt} version {version!r} is not supported "
                    f"(this perfsuite reads version {current}); {hint}")
    return d


def stamp(fmt: str, body: dict) -> dict:
    """``body`` with the format and its current version first."""
    return {"format": fmt, "version": VERSIONS[fmt], **body}


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` so that a reader sees the old file or the new one, never half of one:
    a temporary file in the same folder, flushed to disk, renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        _name_target(exc, path)
        raise
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            _name_target(exc, path)
        raise
    return path


def _name_target(exc: OSError, path: Path) -> None:
    """The OS's error names the file the user asked for, not its temporary sibling."""
    if exc.errno is not None:
        exc.filename, exc.filename2 = str(path), None


def write_json(path: str | os.PathLike, data: dict) -> Path:
    return atomic_write(path, json.dumps(data, indent=1))


def write_native_stamp(path: str | os.PathLike, body: dict) -> Path:
    return write_json(path, stamp(NATIVE, body))


def read_native_stamp(path: str | os.PathLike) -> dict:
    return read_stamp(path, NATIVE)


def read_stamp(path: str | os.PathLike, fmt: str) -> dict:
    """A small stamp file of ``fmt`` (a cached build's), checked."""
    try:
        d = json.loads(Path(path).read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: not valid JSON ({exc})") from None
    return check_format(d, fmt, str(path))


def _probe_folder(folder: Path, what: str, value: str) -> None:
    """Create and remove a file in ``folder`` (or in its nearest existing ancestor, where the
    write will create the rest): permission bits cannot tell, root passes them and /proc or a
    read-only mount still refuses."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{what} {value!r} cannot be written: {str(probe)!r} is not a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".perfsuite-probe.", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ConfigError(f"{what} {value!r} cannot be written: {str(probe)!r} refuses new files "
                          f"({exc.strerror}); choose a writable place") from None


def check_output_file(path: str | os.PathLike, what: str) -> None:
    """Refuse, before anything is measured, a file path that the final write would fail on."""
    value = str(path)
    p = Path(path)
    if value.endswith(os.sep) or p.is_dir():
        raise ConfigError(f"{what} {value!r} is a folder; name a file, e.g. {os.path.join(value, 'results.json')}")
    if p.exists() and not p.is_file():
        raise ConfigError(f"{what} {value!r} exists and is not a regular file; name a file")
    _probe_folder(p.parent if str(p.parent) else Path("."), what, value)


def check_output_dir(path: str | os.PathLike, what: str) -> None:
    """Refuse, before anything is measured, a folder that cannot be created or written."""
    value = str(path)
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{what} {value!r} exists and is not a folder; name a folder")
    _probe_folder(p, what, value)


def fallback_path(name: str) -> Path:
    """Where results go when their own path fails at the end: the temp folder, a fresh name."""
    import time

    stem, _, suffix = name.rpartition(".")
    return Path(tempfile.gettempdir()) / f"{stem or name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.{suffix or 'json'}"


def read_json(path: str | os.PathLike, what: str, hint: str) -> Any:
    """Parsed JSON of ``path``; a missing file is a ConfigError, a file that is not JSON a
    FormatError, each one line naming the file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FormatError(f"{path}: not a text file; {hint}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise FormatError(f"{path}: not JSON ({exc}); {hint}") from None


def read_plan(path: str | os.PathLike) -> dict:
    """A study plan (``.toml``, else JSON), its format and version checked; one line on error."""
    import tomllib

    try:
        d = tomllib.loads(Path(path).read_text()) if str(path).endswith(".toml") else read_json(path, "plan", "")
    except OSError as exc:
        raise ConfigError(f"cannot read plan {str(path)!r}: {exc.strerror}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, FormatError) as exc:
        raise ConfigError(f"{path}: not a valid plan ({exc}); see studies/seed-tf.toml") from None
    return check_format(d, STUDY_PLAN, str(path), error=ConfigError)


def load_study(path: str | os.PathLike) -> dict:
    return check_format(read_json(path, "study results", _HINTS[STUDY][1]), STUDY, str(path))


# --- the job and the result of one world ---------------------------------------------------------

def job(spec: WorldSpec, folder: str, out: str, spawned_at: float) -> dict:
    return stamp(JOB, {"benchmark": spec.benchmark, "transport": spec.transport,
                       "world_size": spec.world_size, "label": spec.label, "kernel": spec.kernel,
                       "cases": [c.to_dict() for c in spec.cases], "options": spec.options,
                       "folder": folder, "out": out, "spawned_at": spawned_at})


def read_job(path: str) -> dict:
    with open(path) as f:
        return check_format(json.load(f), JOB, path)


def dump_result(result: Result) -> dict:
    return stamp(RESULT, result.to_dict())


def load_result(d: Any, source: str) -> Result:
    return Result.from_dict(check_format(d, RESULT, source))


# --- the run file ----------------------------------------------------------------------------

@dataclass
class WorldOutcome:
    """What became of one world: a result, a failure (with partial samples), or a skip."""

    spec: WorldSpec
    result: Result | None = None
    failure: PerfsuiteError | None = None
    skipped: str | None = None
    label: str = ""  # the world's label as a results file stored it ("" = the spec's)

    @property
    def world(self) -> str:
        return self.label or self.spec.label

    @property
    def why(self) -> str:
        """Why the world failed, without the world's name that most failure messages begin with
        (the lines that print it name the world themselves)."""
        message = str(self.failure)
        return message[len(self.world) + 2:] if message.startswith(f"{self.world}: ") else \
            message or type(self.failure).__name__

    def samples(self) -> list[Sample]:
        if self.result is not None:
            return list(self.result.samples)
        if isinstance(self.failure, RankFailure) and self.failure.partial:
            return list(self.failure.partial)
        return []

    def sample_for(self, case: Case) -> Sample | None:
        return next((s for s in self.samples() if s.case == case), None)


@dataclass
class SuiteRun:
    outcomes: list[WorldOutcome] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    interrupted: str | None = None  # the signal that stopped the run early, e.g. "SIGTERM"

    @property
    def results(self) -> list[Result]:
        return [o.result for o in self.outcomes if o.result is not None]

    @property
    def failures(self) -> list[WorldOutcome]:
        return [o for o in self.outcomes if o.failure is not None]

    @property
    def skipped(self) -> list[WorldOutcome]:
        return [o for o in self.outcomes if o.skipped is not None]

    def samples(self) -> list[Sample]:
        return [s for o in self.outcomes for s in o.samples()]

    @property
    def machine(self) -> dict[str, Any]:
        """The fingerprint to file numbers under: rank 0's (it knows the MPI library), else the
        launching side's."""
        return next((r.fingerprint for r in self.results if r.fingerprint), None) or self.fingerprint

    @property
    def ok(self) -> bool:
        """Every world that could run here ran, and every sample validated."""
        return not self.interrupted and not self.failures and all(s.valid for s in self.samples())

    def to_dict(self) -> dict[str, Any]:
        return stamp(RUN, {
            "created": self.created, "fingerprint": self.fingerprint,
            "results": [dump_result(o.result) for o in self.outcomes if o.result is not None],
            "partial": [{"world": o.world, "samples": [s.to_dict() for s in o.samples()]}
                        for o in self.failures if o.samples()],
            "failures": [failure_dict(o) for o in self.failures],
            "skipped": [skip_dict(o) for o in self.skipped],
            **({"interrupted": self.interrupted} if self.interrupted else {}),
        })


def _world_fields(spec: WorldSpec) -> dict[str, Any]:
    return {"benchmark": spec.benchmark, "transport": spec.transport, "world_size": spec.world_size}


def skip_dict(o: WorldOutcome) -> dict[str, Any]:
    return {"world": o.world, **_world_fields(o.spec), "cases": [c.name for c in o.spec.cases],
            "case_fields": [c.to_dict() for c in o.spec.cases], "reason": o.skipped}


def failure_dict(o: WorldOutcome) -> dict[str, Any]:
    f = o.failure
    d = {"world": o.world, **_world_fields(o.spec), "message": str(f), "type": type(f).__name__}
    if isinstance(f, RankFailure):
        d.update(kind=f.kind, rank=f.rank, stderr_tail=f.stderr_tail, logs=f.logs)
    return d


def _spec_of(entry: dict, cases: tuple[Case, ...] = ()) -> WorldSpec:
    """The world a failure or skip entry names (older v1 files give only its label)."""
    fields = {k: entry[k] for k in ("benchmark", "transport", "world_size") if k in entry}
    if len(fields) < 3:
        m = _LABEL.match(str(entry.get("world", "")))
        fields = {**(m.groupdict() if m else {"benchmark": "?", "transport": "?", "world_size": 0}),
                  **fields}
    return WorldSpec(str(fields["benchmark"]), str(fields["transport"]), int(fields["world_size"]), cases)


def run_from_dict(d: Any, source: str) -> SuiteRun:
    d = check_format(d, RUN, source)
    try:
        run = SuiteRun(fingerprint=dict(d.get("fingerprint") or {}), created=str(d.get("created", "")),
                       interrupted=d.get("interrupted") or None)
        for r in d.get("results", []):
            res = load_result(r, source) if "format" in r else Result.from_dict(r)
            spec = WorldSpec(res.benchmark, res.transport, res.world_size, tuple(s.case for s in res.samples))
            run.outcomes.append(WorldOutcome(spec, res))
        partial = {p["world"]: [Sample.from_dict(s) for s in p.get("samples", [])]
                   for p in d.get("partial", [])}
        for f in d.get("failures", []):
            samples = partial.pop(f.get("world", ""), [])
            spec = _spec_of(f, tuple(s.case for s in samples))
            if f.get("type") == "LaunchError":
                failure: PerfsuiteError = LaunchError(f.get("message", ""))
            else:
                failure = RankFailure(f.get("message", ""), rank=f.get("rank"), case=f.get("world", ""),
                                      stderr_tail=f.get("stderr_tail") or "", partial=samples,
                                      kind=f.get("kind") or "crash", logs=f.get("logs") or {})
            run.outcomes.append(WorldOutcome(spec, failure=failure, label=f.get("world", "")))
        for world, samples in partial.items():  # partial samples whose failure entry is missing
            c0 = samples[0].case if samples else Case("?", "?", 0)
            spec = WorldSpec(c0.benchmark, c0.transport, c0.world_size, tuple(s.case for s in samples))
            run.outcomes.append(WorldOutcome(spec, failure=RankFailure(
                f"{world}: failed (see failures)", case=world, partial=samples), label=world))
        for s in d.get("skipped", []):
            cases = tuple(Case.from_dict(c) for c in s.get("case_fields", []))
            run.outcomes.append(WorldOutcome(_spec_of(s, cases), skipped=str(s.get("reason", "")),
                                             label=s.get("world", "")))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise FormatError(f"{source}: malformed {RUN} file ({what}); {RERUN}") from None
    return run


def load_run(path: str | os.PathLike) -> SuiteRun:
    """Read a results file written by ``perfsuite run --json`` (the one reader of the format)."""
    return run_from_dict(read_json(path, "results file", "pass a file written by perfsuite run --json"),
                         str(path))


def write_run(path: str | os.PathLike, run: SuiteRun) -> Path:
    return write_json(path, run.to_dict())


def write_run_kept(path: str | os.PathLike, run: SuiteRun) -> tuple[Path, str | None]:
    """``write_run``, and when ``path`` fails after all (a disk filled, a folder vanished), the
    same file in the temp folder: (where it is, why it is not at ``path`` or None)."""
    try:
        return write_run(path, run), None
    except OSError as exc:
        why = f"{path} could not be written ({exc.strerror or exc})"
    spare = fallback_path("perfsuite-results.json")
    return write_run(spare, run), why


def write_json_kept(path: str | os.PathLike, data: dict, spare_name: str) -> tuple[Path | None, str | None]:
    """``write_json``, and when ``path`` fails (a disk filled, a read-only mount), the same file
    in the temp folder: (where it is, or None where that failed too; why it is not at ``path``)."""
    try:
        return write_json(path, data), None
    except OSError as exc:
        why = f"{path} could not be written ({exc.strerror or exc})"
    spare = fallback_path(spare_name)
    try:
        return write_json(spare, data), why
    except OSError as exc:
        return None, f"{why}, nor {spare} ({exc.strerror or exc})"

"""The house's floor plan, written once: every room (module or package), its floor and what it
does, and the rules read from it. ``tests/test_architecture.py`` checks the source against it (a
room imports only rooms on its floor or below; kernels and transports stand on the ground alone;
nothing imports a face; only ``launch/`` starts processes), and docs/design.md shows the table
this module prints (``python -m perfsuite.house``; a test keeps the two the same).

Imports nothing: it is read by the tests and the docs, never by a run."""
from __future__ import annotations

from typing import NamedTuple


class Room(NamedTuple):
    prefix: str  # a module, or a package whose modules stand here unless a longer prefix says
    floor: int
    part: str
    what: str


#: The first matching prefix wins (longest listed first where they nest), so a package's modules
#: can sit on different floors: the asv store below the registry, its faces on the top floor.
ROOMS = (
    Room("perfsuite.records.errors", 0, "records", "one exception tree: `ConfigError` (bad input, exit 2), `LaunchError`, "
         "`RankFailure`, `FormatError`, `Unavailable` (a skip with its reason)"),
    Room("perfsuite.records.status", 0, "records", "the exit statuses, the same for every command and the gate"),
    Room("perfsuite.house", 0, "records", "this table and the rules read from it"),
    Room("perfsuite.records.model", 1, "records", "frozen records (`Case`, `WorldSpec`, `Sample`, `Result`, `Baseline`, "
         "`Tolerance`, `Verdict`, `Opt`) and checked values (sizes, dtypes, whole numbers)"),
    Room("perfsuite.records.userbench", 1, "records", "a user's own step declared with `perfsuite.benchmark`: its axes and "
         "where the ranks find it; imports nothing heavy, the ranks import it through the user's module"),
    Room("perfsuite.collectives", 1, "records", "one record per collective (as nccl-tests' one file each): counts, busbw "
         "factor, wire bytes, exact inputs and expected values; the ranks read them as well as the registry"),
    Room("perfsuite.verdicts.stats", 1, "verdicts", "pure statistics: robust summaries, intervals, the rank tests "
         "(stratified Mann-Whitney, Wilcoxon signed-rank), the one bootstrap, the one thinning"),
    Room("perfsuite.interrupts", 1, "running", "SIGTERM and SIGINT become an exception, so a signalled run unwinds "
         "(every world killed, what finished written)"),
    Room("perfsuite.replay", 1, "faces", "the clock through which the pytest face hands the ranks' times to pytest-benchmark"),
    Room("perfsuite.store.formats", 2, "store", "every stored format with its version and migrations, `check_format`, the "
         "one `atomic_write`, the run file (`SuiteRun`) and its one reader"),
    Room("perfsuite.store.migrations", 0, "store", "each stored format's migrations, one version to the next"),
    Room("perfsuite.store.fingerprint", 2, "store", "what machine a number was measured on; keys baselines by system"),
    Room("perfsuite.verdicts.drift", 2, "verdicts", "how far a machine's levels move between sittings, learned from "
         "every case it recorded (pooled, moderated per case)"),
    Room("perfsuite.verdicts.history", 2, "verdicts", "asv's step detection over a recorded series"),
    Room("perfsuite.verdicts.stalls", 2, "verdicts", "the Stash decomposition of a training step by differences of epochs"),
    Room("perfsuite.verdicts.stragglers", 2, "verdicts", "the rule that names a straggler rank and its node from each "
         "rank's own clock"),
    Room("perfsuite.reading.verdict_text", 2, "reading", "the only place a verdict becomes words: the line, the table, the "
         "report's rows, the A/B cells, the family's guarantee"),
    Room("perfsuite.asv.layout", 2, "store", "how a case appears in asv (parameters, names, versions)"),
    Room("perfsuite.asv.compat", 2, "store", "asv's private names, wrapped once"),
    Room("perfsuite.transports", 3, "measuring", "how bytes move (`mpi`, `ring`, `nccl`, `mpi_cuda`, `gpu_ring`; `tf/` and "
         "`torch/` for the training frameworks); each says which collectives and ops it has (`Call`, `lacks`) and why it "
         "cannot run here; `native.py`, `native_nccl.py` load the C loops"),
    Room("perfsuite.kernels", 3, "measuring", "rank-local measurement behind `run(ctx)`: `allreduce.py` (every collective; "
         "`buffers.py` lays out and checks a case's buffers), `tf_epoch.py`, `torch_epoch.py` on the loop they share "
         "(`training.py`) and the dataset's shards (`input_files.py`), `yardstick.py` (a transport beside its framework's "
         "plain loop), `user.py` (a user's step), the fault switch, the C and plain reference programs (`c/`, `plain/`)"),
    Room("perfsuite.launch", 3, "running", "the one room that starts processes: `launchers.py` builds argv (pure); "
         "`world.py` runs a world and short helper commands; `environment.py` wraps a launch in emulated nodes "
         "(`netns.py`) or a throttled disk (`diskio.py`); `deathwatch.py` names the rank that died first; "
         "`containers.py` runs a launch inside an image or under a prefix; `envs.py` builds a commit's environment (`commits.py` reads the repository) and "
         "probes an arm's Python; `pool.py` gives the rules' simulations their processes"),
    Room("perfsuite.asv.project", 3, "store", "asv.conf.json, its git, the `RecordTarget`"),
    Room("perfsuite.asv.record", 3, "store", "recording results into asv's history (and migrating older versions)"),
    Room("perfsuite.asv.read", 3, "store", "reading asv's history back"),
    Room("perfsuite.bench", 4, "measuring", "one record per benchmark and the registry (below); `collectives.py` registers "
         "the other collectives from their records with allreduce's parts; the user's declared steps join when next asked"),
    Room("perfsuite.dataset", 4, "measuring", "the JPEG files and token shards the stall runs read"),
    Room("perfsuite.worker", 4, "running", "one rank: `python -m perfsuite.worker JOB.json` (a stable entry: other "
         "versions' launchers start it)"),
    Room("perfsuite.machine", 4, "running", "what this machine can run, one line per component (`python -m perfsuite.machine`)"),
    Room("perfsuite.verdicts.decision", 5, "verdicts", "how an interval becomes a decision: evidence, looks that can "
         "decide, a run's questions judged as one family (Holm)"),
    Room("perfsuite.verdicts.regress", 5, "verdicts", "stored and paired questions from samples and baselines: modes, "
         "sessions, drift"),
    Room("perfsuite.verdicts.rounds", 5, "verdicts", "one world run many times, pooled per case, contended rounds set aside"),
    Room("perfsuite.store.baselines", 5, "store", "baselines on disk, by system and benchmark"),
    Room("perfsuite.reading.report", 5, "reading", "terminal tables, CSV, the Markdown and HTML report"),
    Room("perfsuite.reading.study_report", 5, "reading", "a study's figures and tables, as the seed paper draws them"),
    Room("perfsuite.reading.plots", 5, "reading", "PNG plots: latency and busbw against size, scaling, img/s, stalls"),
    Room("perfsuite.reading.progress", 5, "reading", "progress over a sweep of worlds, on stderr"),
    Room("perfsuite.suite", 6, "running", "the one orchestration: cases -> worlds in their environment -> rounds -> results"),
    Room("perfsuite.experiments", 7, "running", "beyond a plain run, through `suite.run_one`: overhead, stalls, A/B, "
         "bisect, detection power, the rules' error rates, studies"),
    Room("perfsuite.options", 7, "faces", "every option once, for both faces; values become `Selection`, `SuiteConfig`, "
         "the asv `RecordTarget`"),
    Room("perfsuite.verdicts.gate", 7, "verdicts", "a run's samples and options -> verdicts, lines, writes and exit status, "
         "one gate for both faces"),
    Room("perfsuite.plugin", 8, "faces", "the pytest face (`pytest11` entry point)"),
    Room("perfsuite.cli", 8, "faces", "`perfsuite COMMAND`, one module per command"),
    Room("perfsuite.__main__", 8, "faces", "`python -m perfsuite`: the same command line, run as `perfsuite.cli`"),
    Room("perfsuite.faces", 8, "faces", "`asv run`'s classes and the offline asv site"),
    Room("perfsuite.asv", 2, "store", "the asv store's package"),
    Room("perfsuite", 0, "records", "the package and its subpackages' `__init__` modules"),
)
FLOORS = [(r.prefix, r.floor) for r in ROOMS]
TOP = max(r.floor for r in ROOMS)
#: What kernels and transports may import: they run on the ranks, which never import statistics,
#: storage or pytest, only the records they share with the registry.
GROUND = ("perfsuite.records.errors", "perfsuite.records.model", "perfsuite.collectives", "perfsuite.verdicts.stats",
          "perfsuite.records.userbench")
#: Nothing imports a face: a face is what people call.
FACES = ("perfsuite.cli", "perfsuite.plugin")
#: The one room that starts processes (worlds, git, compilers, commit venvs, containers, pools).
STARTERS = ("perfsuite.launch",)
PARTS = {
    "records": "the shared records: what flows between rooms, read by ranks and registry alike",
    "measuring": "what runs on the ranks and the benchmarks' records",
    "running": "starting, orchestrating and unwinding worlds",
    "verdicts": "statistics and verdicts",
    "store": "stored baselines, results and history",
    "reading": "what people read",
    "faces": "the faces people call",
}


def floor(module: str) -> int:
    """The floor ``module`` stands on (the first room whose prefix it is or is under)."""
    for room in ROOMS:
        if module == room.prefix or module.startswith(room.prefix + "."):
            return room.floor
    raise KeyError(f"{module} has no room in perfsuite.house.ROOMS: add it")


def path_of(prefix: str) -> str:
    """``perfsuite.records.model`` -> ``records/model.py`` (a package: ``launch/``)."""
    from pathlib import Path

    rel = prefix.split(".")[1:]
    base = Path(__file__).resolve().parent
    if not rel:
        return "`__init__.py`s"
    if (base.joinpath(*rel)).is_dir():
        return f"`{'/'.join(rel)}/`"
    return f"`{'/'.join(rel)}.py`"


def table() -> str:
    """The floor table as docs/design.md shows it, from the ground up."""
    rows = ["| floor | part | room | what it does |", "| --- | --- | --- | --- |"]
    for room in sorted(ROOMS, key=lambda r: (r.floor, r.part, r.prefix)):
        if room.prefix in ("perfsuite", "perfsuite.asv"):
            continue  # package `__init__`s: no room of their own
        rows.append(f"| {room.floor} | {room.part} | {path_of(room.prefix)} | {room.what} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")

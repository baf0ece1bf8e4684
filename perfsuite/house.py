"""The house's floor plan, written once: every room (module or package), its floor and what it
does, and the rules read from it. ``tests/test_architecture.py`` checks the source against it (a
room imports only rooms on its floor or below; kernels and transports stand on the ground alone;
nothing imports a face; only ``launch/`` starts processes), and docs/design.md shows the table
this module prints (``python -m perfsuite.house``; a test keeps the two the same).

Imports nothing of perfsuite: it reads the source (``imports``, ``census``) for the tests and the
docs, and is never read by a run. ``python -m perfsuite.house --census`` prints the house's
numbers: rooms, floors, folders that import each other, arrows up, the longest function and
module."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

#: The folder that holds the package (the repository, in a checkout).
ROOT = Path(__file__).resolve().parents[1]


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
    Room("perfsuite.records.memory", 1, "records", "peak memory per rank as a metric: its name, tolerance and declared "
         "drift, and a world's summary of its ranks' figures (the largest rank, where, model state)"),
    Room("perfsuite.records.trace_formats", 1, "records", "the trace files a job's communication is read from, one per "
         "rank: PyTorch's Kineto trace (what `perfsuite capture` writes) and its execution trace, tolerant of versions"),
    Room("perfsuite.records.trace", 1, "records", "a job's captured communication: each rank's collectives in order, the "
         "check that the ranks' files are one window, what a trace holds; the replay kernel issues them again"),
    Room("perfsuite.collectives", 1, "records", "one record per collective (as nccl-tests' one file each): counts, busbw "
         "factor, wire bytes, exact inputs and expected values; the ranks read them as well as the registry"),
    Room("perfsuite.records.stats", 1, "records", "pure statistics, read by the ranks, the registry and the rules alike: robust summaries, intervals, the rank tests "
         "(stratified Mann-Whitney, Wilcoxon signed-rank), the one bootstrap, the one thinning"),
    Room("perfsuite.interrupts", 1, "running", "SIGTERM and SIGINT become an exception, so a signalled run unwinds "
         "(every world killed, what finished written)"),
    Room("perfsuite.faces.clock", 9, "faces", "the clock through which the pytest face hands the ranks' times to pytest-benchmark"),
    Room("perfsuite.store.formats", 2, "store", "every stored format with its version and migrations, `check_format`, the "
         "one `atomic_write`, the run file (`SuiteRun`) and its one reader"),
    Room("perfsuite.store.migrations", 0, "store", "each stored format's migrations, one version to the next"),
    Room("perfsuite.store.fingerprint", 2, "store", "what machine a number was measured on; keys baselines by system"),
    Room("perfsuite.verdicts.drift", 2, "verdicts", "how far a machine's levels move between sittings, learned from "
         "every case it recorded (pooled, moderated per case)"),
    Room("perfsuite.verdicts.history", 2, "verdicts", "asv's step detection over a recorded series"),
    Room("perfsuite.stalls.stash", 2, "stalls", "the Stash decomposition of a training step by differences of epochs"),
    Room("perfsuite.verdicts.stragglers", 2, "verdicts", "the rule that names a straggler rank and its node from each "
         "rank's own clock"),
    Room("perfsuite.reading.verdict_text", 5, "reading", "the only place a verdict becomes words: the line, the table, the "
         "report's rows, the A/B cells, the family's guarantee"),
    Room("perfsuite.bench.asv_view", 2, "measuring", "how a benchmark's cases appear in asv, declared in its record (parameters, names, versions)"),
    Room("perfsuite.asv.compat", 2, "store", "asv's private names, wrapped once"),
    Room("perfsuite.transports", 3, "measuring", "how bytes move (`mpi`, `ring`, `nccl`, `mpi_cuda`, `gpu_ring`; `tf/` and "
         "`torch/` for the training frameworks); each says which collectives and ops it has (`Call`, `lacks`) and why it "
         "cannot run here; `native.py`, `native_nccl.py` load the C loops `launch/native` built"),
    Room("perfsuite.kernels", 3, "measuring", "rank-local measurement behind `run(ctx)`, by kind: `collectives/` (every "
         "collective, its buffers, point-to-point, a transport beside its plain loop), `training/` (the TensorFlow and "
         "PyTorch epochs on the loop they share, their input, exposure, peaks), `models/` (the catalogue, then each model "
         "in Keras and in torch.nn), `user/` (a user's step), `replay/` (a captured job's collectives issued again); beside them what every kernel shares (context, contention, "
         "the fault switch, the ranks' own times) and the plain reference programs (`plain/`)"),
    Room("perfsuite.launch", 3, "running", "the one room that starts processes: `launchers.py` builds argv (pure); "
         "`native/` builds the C timed loops from their sources (`native/c/`; the ranks load them through transports); "
         "`world.py` runs a world, `commands.py` short helper commands; `environment.py` wraps a launch in emulated nodes "
         "(`netns.py`) or a throttled disk (`diskio.py`); `deathwatch.py` names the rank that died first; "
         "`containers.py` runs a launch inside an image or under a prefix; `envs.py` builds a commit's environment (`commits.py` reads the repository) and "
         "probes an arm's Python; `pool.py` gives the rules' simulations their processes; `capture.py` runs a job "
         "unmodified under `capture_hook/`, which profiles each of its ranks"),
    Room("perfsuite.asv.project", 3, "store", "asv.conf.json, its git, the `RecordTarget`"),
    Room("perfsuite.asv.record", 3, "store", "recording results into asv's history (and migrating older versions)"),
    Room("perfsuite.asv.read", 3, "store", "reading asv's history back"),
    Room("perfsuite.bench", 4, "measuring", "one record per benchmark and the registry (below); `collectives.py` registers "
         "the other collectives from their records with allreduce's parts; the user's declared steps join when next asked"),
    Room("perfsuite.stalls.dataset", 4, "stalls", "the JPEG files and token shards the stall runs read"),
    Room("perfsuite.worker", 4, "running", "one rank: `python -m perfsuite.worker JOB.json` (a stable entry: other "
         "versions' launchers start it)"),
    Room("perfsuite.machine", 4, "running", "what this machine can run, one line per component (`python -m perfsuite.machine`)"),
    Room("perfsuite.verdicts.decision", 5, "verdicts", "how an interval becomes a decision: evidence, looks that can "
         "decide, a run's questions judged as one family (Holm)"),
    Room("perfsuite.verdicts.regress", 5, "verdicts", "stored and paired questions from samples and baselines: modes, "
         "sessions, drift"),
    Room("perfsuite.verdicts.judging", 5, "verdicts", "the judging policy: the rounds a judging run takes, the looks its "
         "verdicts are taken at, the family its false-alarm rate is controlled over"),
    Room("perfsuite.verdicts.rounds", 5, "verdicts", "one world run many times, pooled per case, contended rounds set aside"),
    Room("perfsuite.store.baselines", 5, "store", "baselines on disk, by system and benchmark"),
    Room("perfsuite.reading.report", 5, "reading", "terminal tables, CSV, the Markdown and HTML report"),
    Room("perfsuite.reading.study_report", 5, "reading", "a study's figures and tables, as the seed paper draws them"),
    Room("perfsuite.reading.plots", 5, "reading", "PNG plots: latency and busbw against size, scaling, img/s, stalls"),
    Room("perfsuite.reading.progress", 5, "reading", "progress over a sweep of worlds, on stderr"),
    Room("perfsuite.suite", 6, "running", "the one orchestration: cases -> worlds in their environment -> rounds -> results"),
    Room("perfsuite.stalls.benchmark", 4, "stalls", "the record of the epochs a stall run measures"),
    Room("perfsuite.stalls.experiment", 7, "stalls", "the stall runs: epochs on a cold or warm cache, cut threads, a cut link"),
    Room("perfsuite.experiments", 7, "running", "beyond a plain run, through `suite.run_one`: overhead, stalls, A/B, "
         "bisect, detection power, the rules' error rates, studies"),
    Room("perfsuite.faces.options", 9, "faces", "every option once, for both faces; values become `Selection`, `SuiteConfig`, "
         "the asv `RecordTarget`"),
    Room("perfsuite.gate", 8, "running", "the session: a run's plan -> rounds, verdicts, lines, writes and exit "
         "status, one gate for both faces, above the rules it applies"),
    Room("perfsuite.faces.plugin", 9, "faces", "the pytest face (`pytest11` entry point)"),
    Room("perfsuite.faces.cli", 9, "faces", "`perfsuite COMMAND`, one module per command"),
    Room("perfsuite.__main__", 9, "faces", "`python -m perfsuite`: the same command line, run as `perfsuite.faces.cli`"),
    Room("perfsuite.faces", 9, "faces", "`asv run`'s classes and the offline asv site"),
    Room("perfsuite.asv", 2, "store", "the asv store's package"),
    Room("perfsuite", 0, "records", "the package and its subpackages' `__init__` modules"),
)
FLOORS = [(r.prefix, r.floor) for r in ROOMS]
TOP = max(r.floor for r in ROOMS)
#: What kernels and transports may import: they run on the ranks, which never import statistics,
#: storage or pytest, only the records they share with the registry.
GROUND = ("perfsuite.records.errors", "perfsuite.records.model", "perfsuite.collectives", "perfsuite.records.stats",
          "perfsuite.records.userbench", "perfsuite.records.memory", "perfsuite.records.trace",
          "perfsuite.records.trace_formats")
#: Nothing imports a face: a face is what people call.
FACES = ("perfsuite.faces", "perfsuite.__main__")
#: The one room that starts processes (worlds, git, compilers, commit venvs, containers, pools).
STARTERS = ("perfsuite.launch",)
PARTS = {
    "records": "the shared records: what flows between rooms, read by ranks and registry alike",
    "measuring": "what runs on the ranks and the benchmarks' records",
    "running": "starting, orchestrating and unwinding worlds",
    "verdicts": "statistics and verdicts",
    "store": "stored baselines, results and history",
    "reading": "what people read",
    "stalls": "Stash's stalls, one feature in one folder",
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


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.resolve().relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources(folder: Path = ROOT / "perfsuite") -> list[Path]:
    return sorted(folder.rglob("*.py"))


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute module ``from ... import`` reads from, inside the package ``package``."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([node.module] if node.module else []))
    return base


def imports(path: Path, me: str | None = None, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module) for every perfsuite module ``path`` (module ``me``) imports, also
    inside functions (lazy imports are imports)."""
    me = me or module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            # `from . import x` imports the module x when there is one
            for a in node.names:
                sub = f"{base}.{a.name}"
                is_module = (root / Path(*sub.split("."))).with_suffix(".py").exists() or \
                    (root / Path(*sub.split("."))).is_dir()
                out.append((node.lineno, sub if is_module else base))
    return [(line, m) for line, m in out if m == "perfsuite" or m.startswith("perfsuite.")]


class Census(NamedTuple):
    rooms: int
    floors: int
    edges: dict  # (folder, folder) -> ['module:line -> module', ...]
    cycles: list  # groups of folders that reach each other through imports
    upward: list  # 'module:line -> module' from a lower floor to a higher one
    longest_function: tuple  # (lines, 'module.function')
    longest_module: tuple  # (lines, 'module')

    def why(self, group) -> list[str]:
        return [w for (a, b), ws in self.edges.items() if a in group and b in group for w in ws[:1]]


def folder(module: str) -> str:
    """The folder a module stands in: its package under perfsuite/, or itself at the top."""
    return ".".join(module.split(".")[:2])


def census(root: Path = ROOT) -> Census:
    """The house's numbers, read from the source under ``root``."""
    edges: dict = {}
    upward, longest_f, longest_m = [], (0, ""), (0, "")
    for path in sources(root / "perfsuite"):
        me, text = module_name(path, root), path.read_text()
        longest_m = max(longest_m, (len(text.splitlines()), me))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                longest_f = max(longest_f, (node.end_lineno - node.lineno + 1, f"{me}.{node.name}"))
        for line, target in imports(path, me, root):
            if target == "perfsuite":
                continue
            if folder(me) != folder(target):
                edges.setdefault((folder(me), folder(target)), []).append(f"{me}:{line} -> {target}")
            if not (target.startswith(me + ".") or me.startswith(target + ".")) and floor(target) > floor(me):
                upward.append(f"{me}:{line} -> {target}")
    # Groups of folders that reach each other (Tarjan's strongly connected components).
    nodes = sorted({f for e in edges for f in e})
    after = {n: sorted(b for a, b in edges if a == n) for n in nodes}
    index: dict = {}
    low: dict = {}
    stack: list = []
    cycles: list = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in after[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in nodes:
        if v not in index:
            visit(v)
    rooms = len([r for r in ROOMS if r.prefix not in ("perfsuite", "perfsuite.asv")])
    return Census(rooms, len({r.floor for r in ROOMS}), edges, cycles, upward, longest_f, longest_m)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--census"]:
        c = census()
        print(f"rooms {c.rooms}, floors {c.floors}, folders that import each other {len(c.cycles)}"
              f"{' ' + str(c.cycles) if c.cycles else ''}, arrows up {len(c.upward)}; longest function "
              f"{c.longest_function[1]} ({c.longest_function[0]} lines), longest module {c.longest_module[1]} "
              f"({c.longest_module[0]} lines)")
    else:
        print(table(), end="")

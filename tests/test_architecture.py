"""The house rules of ../shared/DESIGN.md, read from the source: floors import downward only,
kernels and transports stand on the ground alone, no room grows past 600 lines (the house's
alarm: past it, look for the second responsibility), and nothing
imports a face. Every import counts, also those inside functions (lazy imports are imports)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perfsuite.house import FACES, GROUND, STARTERS, TOP, census, floor, imports, module_name, sources

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "perfsuite"
MAX_LINES = 600

ASV_STORE = ("perfsuite.asv.compat", "perfsuite.asv.project", "perfsuite.asv.record", "perfsuite.asv.read")
ASV_FACES = ("perfsuite.faces.asv_run", "perfsuite.faces.asv_offline")


def test_no_room_is_over_the_alarm():
    long = {module_name(p): n for p in sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"rooms over {MAX_LINES} lines: {long}"


def test_floors_import_downward_only():
    upward = []
    for path in sources():
        me = module_name(path)
        for line, target in imports(path):
            if target == "perfsuite" or target.startswith(me + ".") or me.startswith(target + "."):
                continue  # a package and its own modules
            if floor(target) > floor(me):
                upward.append(f"{me}:{line} imports {target} (floor {floor(target)} > {floor(me)})")
    assert not upward, "\n".join(upward)


def test_the_asv_store_sits_below_the_registry_and_its_faces_on_the_top_floor():
    """The asv store (its project, recording, reading the history) sits below the benchmark
    registry, and how a benchmark's cases appear in asv is declared in its record
    (``bench/asv_view.py``) and handed to the store, so the store can never look a benchmark up
    itself; asv run's classes and the offline site are faces, beside the CLI and the plugin."""
    for store in ASV_STORE:
        path = (PACKAGE / Path(*store.split(".")[1:])).with_suffix(".py")
        assert path.exists(), store
        assert floor(store) < floor("perfsuite.bench"), f"{store} is not below perfsuite.bench"
        looked_up = [t for _, t in imports(path) if t.startswith("perfsuite.bench") and t != "perfsuite.bench.asv_view"]
        assert not looked_up, f"{store} imports the registry: {looked_up}"
    for face in ASV_FACES:
        assert (PACKAGE / Path(*face.split(".")[1:])).with_suffix(".py").exists(), face
        assert floor(face) == TOP == floor("perfsuite.faces.cli") == floor("perfsuite.faces.plugin"), face
    # Nothing else under perfsuite/asv: a new module there must be placed on purpose.
    assert {module_name(p) for p in sources(PACKAGE / "asv")} == {"perfsuite.asv", *ASV_STORE}


def commands_defined(path: Path) -> list[str]:
    """The names a module registers as ``COMMANDS["name"] = ...`` (or in a COMMANDS literal)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                        and t.value.id == "COMMANDS" and isinstance(t.slice, ast.Constant)):
                    names.append(t.slice.value)
                elif isinstance(t, ast.Name) and t.id == "COMMANDS" and isinstance(node.value, ast.Dict):
                    names += [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    return names


CLI_SHARED = ("__init__.py", "__main__.py", "common.py", "reference.py")


@pytest.mark.parametrize("path", [p for p in sorted((PACKAGE / "faces" / "cli").glob("*.py")) if p.name not in CLI_SHARED],
                         ids=lambda p: p.name)
def test_each_cli_module_is_one_command(path):
    """asv's ``commands/``: one module per command, named as the command (``asv_offline.py`` is
    ``perfsuite asv-offline``); what commands share lives in ``common.py``."""
    assert commands_defined(path) == [path.stem.replace("_", "-")]


def test_every_command_comes_from_its_own_module():
    from perfsuite.faces import cli

    modules = {p.stem.replace("_", "-") for p in (PACKAGE / "faces" / "cli").glob("*.py") if p.name not in CLI_SHARED}
    assert set(cli.COMMANDS) == modules
    for name in CLI_SHARED:
        assert commands_defined(PACKAGE / "faces" / "cli" / name) == [], name


def test_kernels_and_transports_stand_on_the_ground_alone():
    bad = []
    for path in sources(PACKAGE / "kernels") + sources(PACKAGE / "transports"):
        me = module_name(path)
        allowed = GROUND + ("perfsuite.transports",) + (("perfsuite.kernels",) if ".kernels" in me else ())
        for line, target in imports(path):
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                bad.append(f"{me}:{line} imports {target}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("folder", ["perfsuite", "benchmarks"])
def test_nothing_imports_a_face(folder):
    """A face is what people call. asv's own benchmark files (``benchmarks/asv_bench``) are how
    asv calls its face, so they import ``faces.asv_run`` and nothing else of the faces."""
    entry = ("perfsuite.faces.asv_run",) if folder == "benchmarks" else ()
    bad = []
    for path in sources(ROOT / folder):
        me = module_name(path)
        for line, target in imports(path):
            face = next((f for f in FACES if target == f or target.startswith(f + ".")), None)
            if face and not (me == face or me.startswith(face + ".")) and target not in entry:
                bad.append(f"{me}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_folders_form_no_cycle():
    """One story per folder, and folders stacked: no folder (a package under perfsuite/, or a
    module at its top) imports from a folder that imports from it, through any chain. The rule
    above holds module by module; this one holds where a newcomer reads the house."""
    found = census(ROOT)
    assert not found.cycles, "folders that import each other: " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(found.why(c)) + ")" for c in found.cycles)


def test_the_cycle_rule_sees_two_folders_that_import_each_other(tmp_path):
    """The rule above must be able to fail: a rule of verdicts/ reading the registry while the
    registry reads verdicts/ is one cycle, named with an import of each side."""
    for rel, text in {"perfsuite/__init__.py": "", "perfsuite/verdicts/__init__.py": "",
                      "perfsuite/bench/__init__.py": "from ..verdicts import rule\n",
                      "perfsuite/verdicts/rule.py": "def f():\n    from .. import bench\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = census(tmp_path)
    assert found.cycles == [["perfsuite.bench", "perfsuite.verdicts"]]
    assert sorted(found.why(found.cycles[0])) == ["perfsuite.bench:1 -> perfsuite.verdicts.rule",
                                                  "perfsuite.verdicts.rule:2 -> perfsuite.bench"]


def test_the_checker_sees_an_upward_import(tmp_path):
    """The rules above must be able to fail: a kernel importing the suite is caught, however
    it spells the import."""
    probe = tmp_path / "probe.py"
    probe.write_text("from .. import suite\nimport perfsuite.faces.plugin\ndef f():\n    from ..faces.cli import main\n")
    found = imports(probe, "perfsuite.kernels.probe")
    assert found == [(1, "perfsuite.suite"), (2, "perfsuite.faces.plugin"), (4, "perfsuite.faces.cli")]
    assert all(floor(t) > floor("perfsuite.kernels.probe") for _, t in found)


def test_commands_start_without_importing_scipy():
    """scipy.stats takes 0.6 s to import and scipy.special 0.2 s: every command and pytest session
    would pay it at start (hundreds of times in this suite), so ``stats.LazyModule`` imports them
    at their first use."""
    import subprocess
    import sys

    probe = ("import sys, perfsuite.faces.cli, perfsuite.faces.plugin; "
             "print(sorted(m for m in sys.modules if m.startswith(('scipy.stats', 'scipy.special'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


#: Names through which Python starts a process: modules whose import is the way in, and the os
#: functions that fork, exec or spawn (``os.popen`` and ``os.system`` start a shell).
PROCESS_MODULES = ("subprocess", "multiprocessing", "concurrent.futures.process", "pty")
PROCESS_NAMES = {"ProcessPoolExecutor", "create_subprocess_exec", "create_subprocess_shell"}
OS_STARTERS = ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "exec", "spawn")


def process_starts(path: Path) -> list[str]:
    """Where ``path`` starts (or imports a way to start) a process: ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in PROCESS_MODULES or a.name in PROCESS_MODULES]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            mod = node.module or ""
            if mod.split(".")[0] in PROCESS_MODULES or mod in PROCESS_MODULES:
                found.append(f"{node.lineno}: from {mod} import ...")
            elif mod == "os" and any(a.name.startswith(OS_STARTERS) for a in node.names):
                found.append(f"{node.lineno}: from os import {', '.join(a.name for a in node.names)}")
            elif any(a.name in PROCESS_NAMES for a in node.names):
                found.append(f"{node.lineno}: from {mod} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute):
            if (isinstance(node.value, ast.Name) and node.value.id == "os"
                    and node.attr.startswith(OS_STARTERS)):
                found.append(f"{node.lineno}: os.{node.attr}")
            elif node.attr in PROCESS_NAMES:
                found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_only_launch_starts_processes():
    """DESIGN.md: one room starts processes (``launch/``: worlds, git, compilers, commit venvs,
    containers, a simulation's process pool), so a hang, a leftover child or an environment that
    leaks is looked for in one place. Any other room asks ``launch`` to do it."""
    bad = [f"{module_name(p)}:{where}" for p in sources()
           if not any(module_name(p) == s or module_name(p).startswith(s + ".") for s in STARTERS)
           for where in process_starts(p)]
    assert not bad, "processes started outside launch/:\n" + "\n".join(bad)


def test_the_checker_sees_a_process_started(tmp_path):
    """The rule above must be able to fail, however the start is spelled."""
    probe = tmp_path / "probe.py"
    probe.write_text("import subprocess\nimport os\nfrom concurrent.futures import ProcessPoolExecutor\n"
                     "def f():\n    os.execvp('x', ['x'])\n    os.system('x')\n"
                     "    import asyncio\n    asyncio.create_subprocess_exec('x')\n"
                     "    from multiprocessing import get_context\n")
    assert sorted(int(w.split(":")[0]) for w in process_starts(probe)) == [1, 3, 5, 6, 8, 9]


def test_every_module_has_a_room_of_its_own():
    """A new module is placed on purpose: only packages' ``__init__`` modules fall to the
    package's catch-all row, every other module matches a room named in perfsuite.house."""
    from perfsuite.house import ROOMS

    named = [r.prefix for r in ROOMS if r.prefix not in ("perfsuite", "perfsuite.asv")]
    loose = [module_name(p) for p in sources() if p.name != "__init__.py"
             and not any(module_name(p) == n or module_name(p).startswith(n + ".") for n in named)]
    assert not loose, f"modules with no room in perfsuite.house.ROOMS: {loose}"
    flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert flat == ["__main__", "gate", "house", "interrupts", "machine", "suite", "worker"], \
        f"the package's top holds only the entry points and the orchestration: {flat}"


def test_design_md_shows_the_floor_table_the_code_prints():
    """docs/design.md's table is ``python -m perfsuite.house``'s output, between its markers."""
    from perfsuite.house import table

    text = (ROOT / "docs" / "design.md").read_text()
    begin, end = "<!-- floors: python -m perfsuite.house -->\n", "<!-- /floors -->"
    assert begin in text and end in text, "docs/design.md lost its floor table's markers"
    shown = text.split(begin, 1)[1].split(end, 1)[0]
    assert shown == table(), "docs/design.md's floor table is stale: python -m perfsuite.house"


def test_every_file_outside_a_python_package_ships_as_package_data():
    """setuptools' package discovery takes folders with an __init__.py; a file elsewhere under
    perfsuite/ (the C loops' sources, the capture hook) ships only where package-data names it.
    The capture hook once did not: a pip-installed perfsuite captured nothing."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["perfsuite"]
    missing = []
    for path in PACKAGE.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and not (path.parent / "__init__.py").exists():
            rel = path.relative_to(PACKAGE).as_posix()
            if not any(fnmatch.fnmatch(rel, p) for p in patterns):
                missing.append(rel)
    assert not missing, f"files that a wheel would leave out (add them to package-data): {missing}"

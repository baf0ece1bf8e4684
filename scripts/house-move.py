"""Move perfsuite's modules by table, so no call site is edited by hand (issue 53, as the move of
553b43b was made): ``git mv`` each module, then rewrite every import of a moved module, and every
import inside a moved module, by AST (relative inside the package, absolute elsewhere), and the
dotted names and paths that text (docs, workflows, strings, pyproject) spells.

    python scripts/house-move.py OLD=NEW [OLD=NEW ...]    (dotted names: perfsuite.cli=perfsuite.faces.cli)

A package moves with its modules. Run from the repository's root, on a clean tree."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from perfsuite.house import imported_from

ROOT = Path.cwd()
TEXT = {".py", ".md", ".toml", ".sh", ".yml", ".yaml", ".cfg", ".txt", ".json", ".c", ".cjs"}
SKIP = {".git", ".venv", ".venv-ompi", "build", "node", "perfsuite.egg-info", "__pycache__", ".asv"}


def path_of(mod: str) -> Path:
    p = ROOT / Path(*mod.split("."))
    return p if p.is_dir() else p.with_suffix(".py")


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def files() -> list[Path]:
    out = []
    for p in ROOT.rglob("*"):
        if any(part in SKIP for part in p.relative_to(ROOT).parts) or not p.is_file():
            continue
        if p.suffix in TEXT or p.name in ("run", "expected-skips"):
            out.append(p)
    return sorted(out)


def is_module(mod: str) -> bool:
    p = ROOT / Path(*mod.split("."))
    return p.is_dir() or p.with_suffix(".py").exists()


def renamed(mod: str, moves: dict[str, str]) -> str:
    for old in sorted(moves, key=len, reverse=True):
        if mod == old or mod.startswith(old + "."):
            return moves[old] + mod[len(old):]
    return mod


def relative(target: str, me: str, is_pkg: bool) -> tuple[int, str]:
    """(level, module) spelling ``target`` relative to module ``me`` (both perfsuite.*)."""
    here = me.split(".") if is_pkg else me.split(".")[:-1]
    t = target.split(".")
    common = 0
    while common < min(len(here), len(t)) and here[common] == t[common]:
        common += 1
    if common == 0:
        return 0, target
    level = len(here) - common + 1
    return level, ".".join(t[common:])


def rewrite_imports(path: Path, old_me: str, new_me: str, moves: dict[str, str], old_modules: set[str]) -> bool:
    src = path.read_text()
    tree = ast.parse(src, str(path))
    is_pkg = path.name == "__init__.py"
    old_pkg = old_me if is_pkg else old_me.rpartition(".")[0]
    in_package = new_me.startswith("perfsuite")
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = imported_from(node, old_pkg)
            if not (base == "perfsuite" or base.startswith("perfsuite.")):
                continue
            # Each name: a module of its own (``from . import regress``) or a name in ``base``.
            groups: dict[str, list[str]] = {}
            for a in node.names:
                sub = f"{base}.{a.name}"
                alias = f"{a.name} as {a.asname}" if a.asname else a.name
                if sub in old_modules:
                    new = renamed(sub, moves)
                    parent, _, name = new.rpartition(".")
                    groups.setdefault(parent, []).append(f"{name} as {a.asname}" if a.asname else
                                                         (name if name == a.name else f"{name} as {a.name}"))
                else:
                    groups.setdefault(renamed(base, moves), []).append(alias)
            lines = []
            for parent, names in groups.items():
                if in_package and parent.startswith("perfsuite"):
                    level, mod = relative(parent, new_me, is_pkg)
                    spelled = "." * level + mod if level else mod
                else:
                    spelled = parent
                lines.append(f"from {spelled} import {', '.join(names)}")
            moved = old_me != new_me or any(renamed(f"{base}.{a.name}", moves) != f"{base}.{a.name}"
                                            for a in node.names) or renamed(base, moves) != base
            if not moved:
                continue
            old_text = ast.get_source_segment(src, node)
            indent = " " * node.col_offset
            new_text = ("\n" + indent).join(lines)
            if old_text != new_text:
                edits.append((node, new_text))
        elif isinstance(node, ast.Import):
            names = []
            changed = False
            for a in node.names:
                new = renamed(a.name, moves) if a.name.startswith("perfsuite") else a.name
                changed |= new != a.name
                names.append(f"{new} as {a.asname}" if a.asname else new)
            if changed:
                edits.append((node, f"import {', '.join(names)}"))
    if not edits:
        return False
    lines = src.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    data = src.encode()
    for node, text in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset
        data = data[:start] + text.encode() + data[end:]
    path.write_text(data.decode())
    return True


def main(argv: list[str]) -> None:
    if not argv or any("=" not in a for a in argv):
        raise SystemExit("usage: python scripts/house-move.py OLD=NEW [OLD=NEW ...] (dotted module names)")
    moves = dict(a.split("=", 1) for a in argv)
    old_modules = {module_of(p) for p in (ROOT / "perfsuite").rglob("*.py")}
    old_modules |= {module_of(p / "__init__.py") for p in (ROOT / "perfsuite").rglob("*") if p.is_dir()
                    and (p / "__init__.py").exists()}
    # Who each file is before and after, then the git moves.
    py = [p for p in files() if p.suffix == ".py"]
    before = {p: module_of(p) for p in py}
    for old, new in moves.items():
        src, dst = path_of(old), path_of(new)
        if src.is_dir():
            dst = ROOT / Path(*new.split("."))
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not (dst.parent / "__init__.py").exists() and dst.parent != ROOT:
            (dst.parent / "__init__.py").write_text(f'"""{new.rpartition(".")[0]}"""\n')
            subprocess.run(["git", "add", str(dst.parent / "__init__.py")], check=True)
        subprocess.run(["git", "mv", str(src), str(dst)], check=True)
    for p, old_me in before.items():
        new_me = renamed(old_me, moves) if old_me.startswith("perfsuite") else old_me
        newp = p
        if new_me != old_me:
            newp = path_of(new_me) if not (ROOT / Path(*new_me.split("."))).is_dir() else \
                ROOT / Path(*new_me.split(".")) / "__init__.py"
        if newp.exists():
            rewrite_imports(newp, old_me, new_me, moves, old_modules)
    # Dotted names and paths in text, each spot rewritten once (one alternation, longest first:
    # 'perfsuite.kernels.training' must not rewrite the 'perfsuite.kernels.training.tf_epoch' that
    # another move just wrote).
    table = {}
    for old, new in moves.items():
        table[old] = new
        op, np_ = old.replace(".", "/"), new.replace(".", "/")
        short, short_new = op.removeprefix("perfsuite/"), np_.removeprefix("perfsuite/")
        if path_of(new).suffix == ".py":
            table[op + ".py"] = np_ + ".py"
            table[short + ".py"] = short_new + ".py"  # 'verdicts/gate.py', as the docs spell it
        else:
            table[op + "/"] = np_ + "/"
            table[short + "/"] = short_new + "/"
    keys = sorted(table, key=len, reverse=True)
    # A name ends where a word does; a folder's path ('cli/') goes on with what is in it.
    rx = re.compile(r"(?<![\w/.])(" + "|".join(re.escape(k) + ("" if k.endswith("/") else r"(?![\w])")
                                                for k in keys) + r")")
    me = Path(__file__).resolve()
    for p in files():
        if p.resolve() == me:
            continue  # this script's own examples
        text = p.read_text(errors="surrogateescape")
        new = rx.sub(lambda m: table[m.group(1)], text) if p.suffix != ".py" else _outside_imports(rx, table, text)
        if new != text:
            p.write_text(new, errors="surrogateescape")


def _outside_imports(rx: re.Pattern, table: dict, text: str) -> str:
    """The text rewrite of a Python file, except its import statements: the AST pass wrote those
    already, and a move whose new name extends its old one ('perfsuite.launch.native' ->
    'perfsuite.launch.native.mpi') would rewrite them a second time."""
    lines = text.splitlines(keepends=True)
    spans = sorted((n.lineno, n.end_lineno) for n in ast.walk(ast.parse(text))
                   if isinstance(n, (ast.Import, ast.ImportFrom)))
    out, at = [], 1
    for first, last in spans:
        if first < at:
            continue
        out.append(rx.sub(lambda m: table[m.group(1)], "".join(lines[at - 1:first - 1])))
        out.append("".join(lines[first - 1:last]))
        at = last + 1
    out.append(rx.sub(lambda m: table[m.group(1)], "".join(lines[at - 1:])))
    return "".join(out)

if __name__ == "__main__":
    main(sys.argv[1:])

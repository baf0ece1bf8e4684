"""What a command's --help and the docs say against what the code does and the tree holds: every
default stated, the cap a judging run puts on --max-rounds, every --emulated-network form the
docs use is one the parser takes and the help names, and every script is named in design.md."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from perfsuite.verdicts import judging
from perfsuite.faces.cli import build_parser
from perfsuite.faces import options
from perfsuite.launch.netns import parse_shaping

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "recipes").rglob("*.md")),
        *sorted((ROOT / ".github" / "workflows").glob("*.yml"))]


def commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def flag(command: str, name: str) -> argparse.Action:
    return next(a for a in commands()[command]._actions if name in a.option_strings)


@pytest.mark.parametrize("command", sorted(commands()))
def test_every_option_with_a_default_says_it_in_its_help(command):
    """A default the code has is in the help, so a newcomer need not read the source."""
    silent = [a.option_strings[-1] for a in commands()[command]._actions
              if a.option_strings and a.nargs != 0 and a.help not in (None, argparse.SUPPRESS)
              and a.default not in (None, False, [], ()) and "[default:" not in a.help]
    assert not silent, f"perfsuite {command}: options whose help hides their default: {silent}"


def test_max_rounds_says_the_cap_a_judging_run_uses():
    assert f"{judging.COMPARE_MAX_ROUNDS}" in flag("run", "--max-rounds").help


def emulated_networks() -> list[tuple[str, str]]:
    """(file, value) of every --emulated-network (or --perf-emulated-network) the docs give."""
    found = []
    for path in DOCS:
        for value in re.findall(r"--(?:perf-)?emulated-network[ =]([0-9][^\s`'\"\])]*)", path.read_text()):
            found.append((str(path.relative_to(ROOT)), value))
    return list(dict.fromkeys(found))


def test_the_docs_give_emulated_networks_with_node_faults():
    values = [v for _, v in emulated_networks()]
    assert any("node" in v for v in values) and len(values) >= 5, values


@pytest.mark.parametrize("where,value", emulated_networks(), ids=[f"{w}:{v}" for w, v in emulated_networks()])
def test_every_emulated_network_in_the_docs_parses_and_its_forms_are_in_every_help(where, value):
    parse_shaping(value)
    forms = ["RATE"] + ["nodeK=cpu:" if re.fullmatch(r"node\d+=cpu:.*", p) else "nodeK=RATE"
                        if re.fullmatch(r"node\d+=.*", p) else p.split("=")[0] + "=" for p in value.split(",")[1:]]
    for command, parser in commands().items():
        action = next((a for a in parser._actions if "--emulated-network" in a.option_strings), None)
        if action is not None:
            missing = [f for f in forms if f not in action.help]
            assert not missing, f"perfsuite {command} --help does not name {missing} ({where} uses {value})"


def test_design_md_names_every_script():
    """docs/design.md says what scripts/ holds: each file there, by name."""
    design = (ROOT / "docs" / "design.md").read_text()
    unnamed = [p.name for p in sorted((ROOT / "scripts").iterdir()) if p.is_file() and f"`{p.name}`" not in design]
    assert not unnamed, f"scripts/ holds {unnamed}, which docs/design.md does not name"


def test_overhead_states_the_rounds_sizes_and_transport_its_code_uses():
    """Issue 56: overhead's --help said 1 round, sizes 4:64MiB and every transport (run's
    options), while the command runs ROUNDS interleaved rounds over SIZES (PLAIN_TARGET_SIZES
    beside a plain loop) of one transport, mpi unless named."""
    from perfsuite.experiments.overhead import PLAIN_LOOPS, PLAIN_TARGET_SIZES, ROUNDS, SIZES
    from perfsuite.records.model import format_size

    text = " ".join(commands()["overhead"].format_help().split())
    rounds, sizes, transports = (flag("overhead", f) for f in ("--rounds", "--sizes", "--transports"))
    assert int(rounds.default) == ROUNDS and f"[default: {ROUNDS}]" in text
    for plain in PLAIN_LOOPS:
        assert plain in transports.help
    assert transports.default == "mpi" and "'all'" not in transports.help and "comma list" not in transports.help
    for each in (SIZES, PLAIN_TARGET_SIZES):
        assert ",".join(format_size(n) for n in each) in sizes.help
    assert "4:64MiB" not in text


def test_study_names_the_vectors_a_plan_may_hold():
    """Issue 56: study's --help said "the seed paper's four vectors" where a plan has five (the
    fifth, parallelism, is PyTorch's); the help reads them from the plan's own table."""
    from perfsuite.experiments.study_plan import VECTORS

    text = " ".join(commands()["study"].format_help().split())
    assert f"{len(VECTORS)} vectors" in text and all(name in text for name in VECTORS)
    assert "four" not in text


#: The commands that compare or break down one transport (``common.one_value``).
ONE_TRANSPORT = ("ab", "bisect", "overhead", "detection-power", "stalls")


@pytest.mark.parametrize("command", ONE_TRANSPORT)
def test_a_command_of_one_transport_offers_no_list_and_no_all(command):
    """Issue 56 (fixed in 537f494): ab's and bisect's --transports said "LIST ... or 'all'
    [default: all]", run's help, while each takes one value, mpi unless named, and refuses all."""
    action = flag(command, "--transports")
    assert action.metavar != "LIST" and "comma list" not in action.help and "'all'" not in action.help
    assert "all" not in (options.stated_default(action.help) or "")
    assert "mpi" in action.help

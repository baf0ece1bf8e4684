"""What a command's --help and the docs say against what the code does and the tree holds: every
default stated, the cap a judging run puts on --max-rounds, every --emulated-network form the
docs use is one the parser takes and the help names, and every script is named in design.md."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from perfsuite.verdicts import judging
from perfsuite.faces import cli
from perfsuite.faces.cli import build_parser, reference
from perfsuite.faces.cli.common import help_text
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


def fallbacks() -> dict:
    """The value the code falls back to for an option argparse leaves None (unset means something
    to the code: a user's own benchmark's transport, the kernel's own count, given or not) whose
    help names a value, keyed by flag or (command, flag); read from the code, not written here."""
    from perfsuite import collectives
    from perfsuite.asv.project import DEFAULT_CONFIG
    from perfsuite.experiments import ab
    from perfsuite.experiments.overhead import SIZES
    from perfsuite.faces.cli import overhead, report, stalls
    from perfsuite.faces.cli.ab import tolerance_text
    from perfsuite.kernels.training.torch_epoch import DEFAULT_PROFILE_STEPS
    from perfsuite.launch.world import START_TIMEOUT_S
    from perfsuite.records.model import format_size
    from perfsuite.transports.tf.train import DEFAULT_FUSION_THRESHOLD
    from perfsuite.transports.torch.train import DEFAULT_FSDP_PREFETCH
    from perfsuite.verdicts.decision import DEFAULT_ALPHA
    from perfsuite.verdicts.rounds import RoundsPolicy

    return {"--alpha": f"{DEFAULT_ALPHA:g}", "--max-time": f"{collectives.SIZE_MAX_TIME_S:g}",
            "--start-timeout": f"{START_TIMEOUT_S:g}", "--asv-config": DEFAULT_CONFIG,
            "--max-rounds": "off" if RoundsPolicy.max_rounds is None else str(RoundsPolicy.max_rounds),
            "--fsdp-prefetch": DEFAULT_FSDP_PREFETCH, "--profile-steps": str(DEFAULT_PROFILE_STEPS),
            "--fusion-threshold": format_size(DEFAULT_FUSION_THRESHOLD),
            ("ab", "--tolerance"): tolerance_text(ab.DEFAULT_TOLERANCE),
            ("bisect", "--tolerance"): tolerance_text(ab.DEFAULT_TOLERANCE),
            ("ab", "--seed"): "random", ("bisect", "--seed"): "random",  # ab.ABConfig.seed None: drawn
            ("overhead", "--sizes"): overhead.sizes_text(SIZES), ("stalls", "--transports"): stalls.TRANSPORT,
            ("report", "--out"): report.OUT}


def shared_option(action: argparse.Action):
    """The shared option (options.COMMON, a benchmark's) ``action`` was added from, or None."""
    return next((o for o in options.all_options() if action.dest == o.dest and action.help
                 and action.help.startswith(o.help.replace("%", "%%"))), None)


@pytest.mark.parametrize("command", sorted(commands()))
def test_a_stated_default_is_the_one_the_code_uses(command):
    """Issue 56: a default is written one way, ``[default: X]``, and X is the code's: argparse's
    default, else the shared option's (``with_defaults``), else the value the code falls back to
    (``fallbacks``); a help naming a value no code holds fails here."""
    known, wrong = fallbacks(), []
    for a in commands()[command]._actions:
        if not a.option_strings or a.help in (None, argparse.SUPPRESS):
            continue
        text = help_text(a)
        flag_ = a.option_strings[-1]
        said = options.stated_default(text)
        assert not re.search(r"\(default\b", text), f"perfsuite {command} {flag_}: say [default: X]: {text}"
        shared = shared_option(a)
        actual = next((d for d in (a.default, shared and shared.default) if d is not None and d is not False),
                      known.get((command, flag_), known.get(flag_)))
        if said is None or (actual is None and options.leading_value(said) is None):
            continue
        if actual is None or not (said == str(actual) or said.startswith((f"{actual}; ", f"{actual}, "))):
            wrong.append(f"{flag_} says [default: {said}], the code's is {actual}")
    assert not wrong, f"perfsuite {command}: " + "; ".join(wrong)


def test_options_md_shows_the_default_each_help_states():
    """Issue 56: docs/options.md showed "-" for max-time and alpha, whose help says 0.5 and 0.01."""
    from perfsuite import collectives
    from perfsuite.verdicts.decision import DEFAULT_ALPHA

    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z0-9-]+)` \| ([^|]*) \|", options.reference_markdown(), re.M)}
    assert rows["max-time"].startswith(f"`{collectives.SIZE_MAX_TIME_S:g}`")
    assert rows["alpha"].startswith(f"`{DEFAULT_ALPHA:g}`")
    for o in options.all_options():
        if o.kind != "flag" and (o.default not in (None, []) or options.stated_default(o.help)):
            assert rows[o.name] != "-", o.name


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
    text = help_text(action)
    assert action.metavar != "LIST" and "comma list" not in text and "'all'" not in text
    assert "all" not in (options.stated_default(text) or "") and "mpi" in text


# --- one screen of --help, every option in --help-all and docs/cli.md (issue 56) ----------------

CLI_MD = ROOT / "docs" / "cli.md"


def printed(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(commands()))
def test_help_is_one_screen_and_help_all_lists_every_option(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    brief = printed([command, "--help"], capsys)
    assert len(brief.splitlines()) <= reference.SCREEN, brief
    assert brief.startswith(f"usage: perfsuite {command} ") and "[options]" in brief.splitlines()[0]
    every = printed([command, "--help-all"], capsys)
    for a in reference.shown(commands()[command]):
        assert a.option_strings[-1] in brief.replace("\n", " "), f"--help names no {a.option_strings[-1]}"
        assert re.search(rf"(?<![\w-]){re.escape(a.option_strings[-1])}(?![\w-])", every), a.option_strings
    assert f"perfsuite {command} --help-all" in " ".join(brief.split()) or "more options" not in brief
    assert f"docs/cli.md#{command}" in " ".join(brief.split())
    # reference.Formatter wraps at spaces only (argparse's _split_lines/_fill_text, overridden)
    assert not re.search(r"--[\w-]*-\n", brief + every), "a flag cut at its hyphen"


def test_perfsuite_help_is_one_screen(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = printed(["--help"], capsys)
    assert len(text.splitlines()) <= reference.SCREEN and all(c in text for c in commands()), text


@pytest.mark.parametrize("command", sorted(commands()))
def test_brief_names_options_the_command_has(command):
    main = getattr(cli.MODULE_OF[command], "BRIEF", None) or ()
    have = {s for a in reference.shown(commands()[command]) for s in a.option_strings}
    assert set(main) <= have, set(main) - have


def test_cli_md_is_the_reference_the_parsers_generate():
    assert CLI_MD.read_text() == reference.markdown(), (
        "docs/cli.md is out of date: python -m perfsuite.faces.cli.reference > docs/cli.md")


def cli_md_sections() -> dict[str, str]:
    parts = re.split(r"^## ", CLI_MD.read_text(), flags=re.M)
    return {p.split("\n", 1)[0]: p for p in parts[1:]}


@pytest.mark.parametrize("command", sorted(commands()))
def test_every_option_and_argument_is_in_its_commands_section_of_cli_md(command):
    """Issue 56 found 19 flags documented nowhere (ab --a-transport, baseline --add, history
    --threshold ...): every option a command's parser has, but its old spellings and the ones it
    hides, is in docs/cli.md's section of that command, with its default and exit statuses."""
    section = cli_md_sections()[command]
    p = commands()[command]
    missing = [a.option_strings[-1] for a in p._actions if a.option_strings and a.help is not argparse.SUPPRESS
               and not isinstance(a, options.Renamed) and a.option_strings[-1] not in reference.HELP_FLAGS
               and not re.search(rf"`(?:-\w, )?{re.escape(a.option_strings[-1])}[ `]", section)]
    assert not missing, f"docs/cli.md's {command} section lacks {missing}"
    for a in reference.positionals(p):
        assert f"`{reference.argument(a)}`" in section
    assert f"    {p.usage}" in section and "| exit status | meaning |" in section


def test_old_spellings_are_listed_once_at_the_end_and_in_no_commands_table():
    sections = cli_md_sections()
    old = {(c, s) for c, p in commands().items() for a in p._actions if isinstance(a, options.Renamed)
           for s in a.option_strings}
    assert old
    for command, flag_ in old:
        assert not re.search(rf"`{re.escape(flag_)}[ `]", sections[command]), (command, flag_)
        assert re.search(rf"^\| `{re.escape(flag_)}` \| .*\| .*\b{command}\b", sections["Old spellings"], re.M)


def test_each_commands_exit_statuses_are_status_pys():
    from perfsuite.records import status

    for command, module in cli.MODULE_OF.items():
        assert set(getattr(module, "EXITS", {})) <= set(status.MEANING), command
    assert set(status.MEANING) == {v for k, v in vars(status).items() if k.startswith("EXIT_")}


def test_options_md_says_what_it_covers_and_points_to_cli_md():
    """Issue 56: options.md said "Every option", while each command has options of its own."""
    text = options.reference_markdown()
    assert "Every option" not in text and "They are not every option" in text and "[cli.md](cli.md)" in text

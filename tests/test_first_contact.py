"""What a new user meets first: ``--version``, every command's ``--help``, and options offered
only where they do something."""
from __future__ import annotations

from importlib import metadata

import pytest

from perfsuite.faces import cli


def test_version_is_the_installed_one_and_exits_0(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"perfsuite {metadata.version('perfsuite')}\n"


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_no_help_shows_a_none_default(command, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([command, "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps "[default:" and "None]" apart
    assert "usage: perfsuite" in text and "[default: None]" not in text


def test_run_refuses_the_stall_option_naming_the_command_that_runs_it(capsys):
    """``--stalls`` asks for the stall breakdown, an experiment of its own that ``perfsuite run``
    never ran: it was accepted and did nothing."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "--stalls", "small-cnn"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --stalls:" in err and "`perfsuite stalls --models small-cnn`" in err
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "--stalls" not in capsys.readouterr().out


def test_pytest_still_offers_the_stall_option(pytester):
    """Under pytest, --perf-stalls is what runs benchmarks/test_stalls.py."""
    r = pytester.runpytest_subprocess("--help")
    r.stdout.fnmatch_lines(["*--perf-stalls=MODEL*pytest only: run the stall breakdown*"])

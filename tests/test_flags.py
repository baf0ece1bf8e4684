"""Flags that agree: one spelling per idea across every command (docs/running.md, "One spelling
per idea"), the old spellings accepted for one release with one line on stderr, one gating
vocabulary (a regression exits 1 where a command judges, ``--strict`` 3 for UNKNOWN or nothing
compared, ``--fail-on-improvement`` 1 for an improvement), one meaning of ``--alpha``, and
pytest's -k for ``history``; the docs write only the flags the commands have, never an old one.
"""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from conftest import perfsuite, said
from docflags import DOCS, SHELL, flags, subparsers, written_flags
from perfsuite.faces import cli, options

ROOT = Path(__file__).resolve().parents[1]

#: Every old spelling, each as a command line and the same line spelled now (the renames of
#: issue 42). A rename missing here fails ``test_every_old_spelling_is_in_the_table``.
RENAMED = [
    (["stalls", "--model", "gpt-tiny"], ["stalls", "--models", "gpt-tiny"]),
    (["stalls", "--transport", "mpi"], ["stalls", "--transports", "mpi"]),
    (["stalls", "--world-size", "4"], ["stalls", "--world-sizes", "4"]),
    (["stalls", "--batch", "8"], ["stalls", "--batches", "8"]),
    (["transports", "--benchmark", "p2p"], ["transports", "--benchmarks", "p2p"]),
    (["detection-power", "--transport", "ring"], ["detection-power", "--transports", "ring"]),
    (["nodes", "--sizes", "4,64KiB"], ["nodes", "--link-sizes", "4,64KiB"]),
    (["report", "r.json", "--baselines", "b"], ["report", "r.json", "--compare", "--baseline-dir", "b"]),
    (["report", "r.json", "--fail-on-regression"], ["report", "r.json", "--compare"]),
    (["history", "--fail-on-regression"], ["history", "--compare"]),
]


# --- old spellings -----------------------------------------------------------------------------

def test_every_old_spelling_is_in_the_table():
    found = {(cmd, flag) for cmd, p in subparsers().items() for flag in flags(p)[1]}
    assert found == {(old[0], next(w for w in old if w.startswith("--") and w not in new))
                     for old, new in RENAMED}


@pytest.mark.parametrize("old, new", RENAMED, ids=lambda argv: " ".join(argv))
def test_an_old_spelling_parses_as_the_new_and_says_so_in_one_line(old, new, capsys):
    parsed_old = vars(cli.build_parser().parse_args(old))
    notice = capsys.readouterr()
    parsed_new = vars(cli.build_parser().parse_args(new))
    assert parsed_old == parsed_new
    flag = next(w for w in old if w.startswith("--") and w not in new)
    now = " ".join(w for w in new if w.startswith("--") and w not in old)
    assert notice.out == ""
    assert notice.err == f"perfsuite: {flag} is now {now}; the old spelling goes in the next release\n"
    assert capsys.readouterr().err == ""  # the new spelling says nothing


def test_an_old_spelling_given_twice_says_so_once(capsys):
    args = cli.build_parser().parse_args(["stalls", "--model", "a", "--model", "gpt-tiny"])
    assert args.models == "gpt-tiny" and len(capsys.readouterr().err.splitlines()) == 1


def test_old_spellings_are_hidden_from_help():
    for cmd, p in subparsers().items():
        text = p.format_help()
        for flag in flags(p)[1]:
            assert not re.search(rf"(?<![\w-]){flag}(?![\w-])", text), (cmd, flag)


def test_the_new_default_stands_when_the_old_spelling_is_not_given():
    args = cli.build_parser().parse_args(["stalls"])
    assert (args.models, args.world_sizes, args.batches, args.transports) == ("small-cnn", "2", "16", None)


@pytest.mark.parametrize("argv, says", [
    (["stalls", "--models", "small-cnn,mobilenet"], "--models 'small-cnn,mobilenet' names 2 values; "
                                                     "perfsuite stalls takes one value, e.g. --models small-cnn"),
    (["stalls", "--world-sizes", "2,4"], "--world-sizes '2,4' names 2 values; perfsuite stalls takes one value"),
    (["stalls", "--transports", "all"], "--transports 'all' names every one; perfsuite stalls takes one value"),
    (["transports", "--benchmarks", "allreduce,p2p"], "perfsuite transports takes one value"),
    (["detection-power", "--transports", "mpi,ring"], "perfsuite detection-power takes one value"),
    (["overhead", "--transports", "mpi,torch-gloo"], "perfsuite overhead takes one value"),
    (["ab", "--transports", "mpi,ring"], "perfsuite ab takes one value"),
    (["ab", "--transports", "all"], "--transports 'all' names every one; perfsuite ab takes one value"),
    (["bisect", "--transports", "all", "--good", "HEAD", "--bad", "HEAD"],
     "--transports 'all' names every one; perfsuite bisect takes one value"),
    (["overhead", "--transports", "all"], "--transports 'all' names every one; perfsuite overhead takes one value"),
    (["ab", "--benchmarks", "allreduce,p2p"], "perfsuite ab takes one value"),
])
def test_a_command_of_one_value_says_so_in_one_line(argv, says, capsys):
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err


TWO = """import perfsuite


@perfsuite.benchmark(world_sizes=[2])
def first(ctx):
    pass


@perfsuite.benchmark(world_sizes=[2])
def second(ctx):
    pass
"""


@pytest.mark.parametrize("command", ["ab", "bisect"])
def test_a_file_of_two_benchmarks_says_how_to_name_one_and_that_way_works(command, tmp_path):
    """Issue 56: ``ab --benchmarks FILE`` of a file declaring two said "takes one value: name
    it" without saying how; the line gives the command that works, which gets past the check."""
    (tmp_path / "two.py").write_text(TWO)
    ends = ["--good", "HEAD", "--bad", "HEAD"] if command == "bisect" else []
    r = perfsuite(command, "--benchmarks", "two.py", *ends, cwd=tmp_path)
    assert r.returncode == cli.EXIT_USAGE and len(r.stderr.strip().splitlines()) == 1, said(r)
    way = f"PERFSUITE_BENCHMARKS=two.py perfsuite {command} --benchmarks first"
    assert "names 2 benchmarks (first, second)" in r.stderr and way in r.stderr, said(r)
    r = perfsuite(command, "--benchmarks", "first", "--max-pairs", "1", *ends, cwd=tmp_path,
                  PERFSUITE_BENCHMARKS="two.py")
    assert r.returncode == cli.EXIT_USAGE and "max pairs '1'" in r.stderr, said(r)  # past --benchmarks


def test_transports_takes_a_benchmark_file_as_ab_does(tmp_path):
    """``transports --benchmarks FILE.py`` was refused (exit 2) where run and ab take the file:
    it lists the transports of the one benchmark the file declares, and a file of two gets ab's
    line."""
    (tmp_path / "one.py").write_text(TWO[:TWO.index("@perfsuite.benchmark", TWO.index("def first"))])
    (tmp_path / "two.py").write_text(TWO)
    r = perfsuite("transports", "--benchmarks", "one.py", cwd=tmp_path)
    assert r.returncode == cli.EXIT_OK and r.stdout.split()[:2] == ["mpi", "user"], said(r)
    r = perfsuite("transports", "--benchmarks", "two.py", cwd=tmp_path)
    assert r.returncode == cli.EXIT_USAGE and "PERFSUITE_BENCHMARKS=two.py perfsuite transports" in r.stderr, said(r)


# --- the docs ----------------------------------------------------------------------------------

def test_the_docs_write_only_flags_the_commands_have_and_no_old_spelling():
    parsers = subparsers()
    found = written_flags()
    assert len({(c, f) for _, c, f in found}) > 40, found  # the parse finds the docs' commands
    unknown, old = [], []
    for where, cmd, flag in found:
        every, renamed = flags(parsers[cmd])
        if flag in renamed:
            old.append(f"{where}: perfsuite {cmd} {flag}")
        elif flag not in every:
            unknown.append(f"{where}: perfsuite {cmd} {flag}")
    assert not old, f"old spellings in the docs: {sorted(set(old))}"
    assert not unknown, f"flags the command does not have: {sorted(set(unknown))}"


def test_the_docs_write_only_pytest_options_that_exist():
    known = {f"--perf-{o.name}" for o in options.all_options()} | {f"--perf-{n}" for n, _ in options.ASV_OPTIONS}
    used = {(p.name, m) for p in [*DOCS, *SHELL] for m in re.findall(r"(--perf-[a-z0-9-]*[a-z0-9])", p.read_text())}
    assert {m for _, m in used} & known, used
    assert not [u for u in used if u[1] not in known], sorted(u for u in used if u[1] not in known)


# --- history -k: pytest's expression -----------------------------------------------------------

ENTRY = "allreduce.Allreduce.track_inv_busbw('mpi_cuda', 2, '1MiB', 'float32', 'none')"


def test_history_k_is_pytests_expression_over_the_entrys_words():
    from perfsuite.faces.cli.history import entry_words, keyword_match

    assert {"allreduce", "Allreduce", "track_inv_busbw", "mpi_cuda", "2", "1MiB", "float32", "none"} <= entry_words(ENTRY)
    match = lambda k: keyword_match(k)(ENTRY)  # noqa: E731
    assert match("inv_busbw and mpi and not 64MiB")  # a word matches part of a name, as in pytest
    assert match("1mib")  # case-insensitive
    assert not match("inv_busbw and not mpi")
    assert match("Allreduce.track_inv_busbw or p2p")
    assert not match("latency")
    assert keyword_match(None) is None and keyword_match("") is None


@pytest.mark.parametrize("bad", ["inv_busbw\\('mpi'", "mpi and", "foo(x=1)"])
def test_a_history_k_that_is_no_expression_is_one_line(bad):
    from perfsuite.faces.cli.history import keyword_match
    from perfsuite.records.errors import ConfigError

    with pytest.raises(ConfigError, match=r"is not a pytest -k expression .* -k \"inv_busbw and mpi"):
        keyword_match(bad)


def test_pytests_expression_is_the_one_history_uses():
    """history leans on pytest's private ``_pytest.mark`` (Expression, KeywordMatcher): pinned here."""
    from _pytest.mark import KeywordMatcher
    from _pytest.mark.expression import Expression

    assert Expression.compile("a and not b").evaluate(KeywordMatcher(frozenset({"xa", "c"})))
    assert not Expression.compile("a and not b").evaluate(KeywordMatcher(frozenset({"xa", "b"})))


# --- one gating vocabulary, on real stored runs ------------------------------------------------

@pytest.fixture
def judged(slowed_runs, tmp_path):
    """conftest's slowed_runs (a clean run and one 21x slower, real 1- and 2-rank worlds, 8 rounds
    a side) and three baseline folders: of the fast run, of the slow one, and none."""
    from perfsuite.store import baselines, formats

    for name in ("fast", "slow"):
        run = formats.load_run(slowed_runs / f"{name}.json")
        baselines.update(tmp_path / name, "box", [s for r in run.results for s in r.samples], run.machine,
                         session=run.created, measured_now=True)
    return slowed_runs, tmp_path


def statuses(monkeypatch, runs: Path, base: Path, ref: str, new: str, *flags: str) -> dict[str, int]:
    """The exit status of each command that judges NEW (a results file) against REF: ``run
    --compare`` (replaying NEW in place of measuring), ``compare`` and ``report --compare``."""
    from conftest import SLOWED_WORLD
    from perfsuite.store import formats
    from perfsuite import suite

    judge = ["--baseline-dir", str(base / ref), "--system", "box", "--max-canary-shift", "off", *flags]
    out = {}
    replay = formats.load_run(runs / f"{new}.json")
    with monkeypatch.context() as m, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        m.setattr(suite, "run", lambda cases, cfg, on_world=None: replay)
        out["run"] = cli.main(["run", *SLOWED_WORLD, "--compare", *judge])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        out["report"] = cli.main(["report", str(runs / f"{new}.json"), "--out", str(base / "report"),
                                  "--compare", *judge])
    if ref != "none":
        r = perfsuite("compare", f"{ref}.json", f"{new}.json", "--max-canary-shift", "off", *flags, cwd=runs)
        out["compare"] = r.returncode
    return out


@pytest.mark.world
def test_the_same_situation_exits_alike_in_every_command_that_judges(judged, monkeypatch):
    """A regression 1; a one-session reference against its own run leaves every case UNKNOWN (0,
    3 under --strict); nothing compared 0, 3 under --strict; an improvement 0, 1 under
    --fail-on-improvement. (The 2-rank world may be UNKNOWN where the 1-rank one is decided:
    a decided case outranks it, as docs/running.md's precedence says.)"""
    runs, base = judged
    seen = {
        "regression": statuses(monkeypatch, runs, base, "fast", "slow"),
        "unknown": statuses(monkeypatch, runs, base, "fast", "fast"),
        "unknown --strict": statuses(monkeypatch, runs, base, "fast", "fast", "--strict"),
        "nothing --strict": statuses(monkeypatch, runs, base, "none", "fast", "--strict"),
        "nothing": statuses(monkeypatch, runs, base, "none", "fast"),
        "improvement": statuses(monkeypatch, runs, base, "slow", "fast"),
        "improvement --fail-on-improvement": statuses(monkeypatch, runs, base, "slow", "fast",
                                                      "--fail-on-improvement"),
    }
    want = {"regression": 1, "unknown": 0, "unknown --strict": 3, "nothing --strict": 3, "nothing": 0,
            "improvement": 0, "improvement --fail-on-improvement": 1}
    assert {k: set(v.values()) for k, v in seen.items()} == {k: {s} for k, s in want.items()}, seen


def test_ab_exits_as_the_others_for_the_same_verdicts():
    """ab's status from its verdicts: a regression 1, UNKNOWN 0 (3 under --strict), nothing
    judged 3 under --strict, an improvement 0 (an A/B has no --fail-on-improvement)."""
    from types import SimpleNamespace

    from perfsuite.faces.cli.ab import ab_status
    from perfsuite.records.model import Verdict

    def rep(*statuses: str):
        return SimpleNamespace(failures=[], invalid=[], config=SimpleNamespace(new=(), missing=()),
                               verdicts=[Verdict("c", "latency_us", s, "us", False) for s in statuses])

    assert ab_status(rep("regression", "unknown"), strict=True) == cli.EXIT_REGRESSION
    assert ab_status(rep("unknown", "same"), strict=False) == cli.EXIT_OK
    assert ab_status(rep("unknown", "same"), strict=True) == cli.EXIT_UNKNOWN
    assert ab_status(rep(), strict=True) == cli.EXIT_UNKNOWN and ab_status(rep(), strict=False) == cli.EXIT_OK
    assert ab_status(rep("improvement"), strict=True) == cli.EXIT_OK


# --- one meaning of --alpha --------------------------------------------------------------------

@pytest.mark.world
def test_compare_judges_its_cases_as_one_family_at_alpha(slowed_runs, monkeypatch, capsys):
    """compare's --alpha is run's: every case of NEW is one question of one family, judged by
    decision.judge (Holm) at --alpha, not an interval per case at 1 - alpha."""
    from perfsuite.verdicts import decision, regress

    seen = []
    real = decision.judge

    def judge(questions, alpha=decision.DEFAULT_ALPHA, family=None):
        seen.append((len(questions), alpha, family))
        return real(questions, alpha, family)

    monkeypatch.setattr(regress, "judge", judge)
    cli.main(["compare", str(slowed_runs / "fast.json"), str(slowed_runs / "slow.json"), "--alpha", "0.05"])
    verdicts = capsys.readouterr().out
    ((n, alpha, family),) = seen
    assert n == 2 and alpha == 0.05 and family is None, (seen, verdicts)  # both cases, one family


def test_alpha_has_one_meaning_in_every_command():
    for cmd, p in subparsers().items():
        alpha = [a for a in p._actions if "--alpha" in a.option_strings]
        if alpha:
            assert "false-alarm rate of the whole" in alpha[0].help and "DIFFERENT" in alpha[0].help, cmd
    assert "false-alarm rate" in next(o.help for o in options.COMMON if o.name == "alpha")

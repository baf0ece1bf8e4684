"""What a user benchmark is run on and how its faults read (issue 51): nothing selected is one
line naming what the benchmark declares, never an empty run; its declared transports are the
default of a command that takes one; a module that does not import is FILE:LINE and the error;
a failed user check is named as the user's check; a package without a version is named by its
commit; and a long case id widens its column instead of running into the next."""
from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfsuite import bench, suite
from perfsuite.experiments import provenance
from perfsuite.kernels.user import step as user
from perfsuite.launch import envs
from perfsuite.reading import verdict_text as vt
from perfsuite.records import userbench
from perfsuite.records.model import Case, Result, Sample, Verdict, Metric
from perfsuite.store import formats

from test_user_benchmark import declaring, step_at_module_level  # noqa: F401  (the fixture)


def test_nothing_selected_is_one_line_naming_what_the_benchmark_declares(declaring):  # noqa: F811
    userbench.benchmark(step_at_module_level, name="ub-gloo", transports=["torch-gloo"], params={"n": [1]})
    sel = bench.Selection("ub-gloo", transports=("mpi",), world_sizes=(2,))
    with pytest.raises(bench.NothingSelected) as e:
        suite.select_cases(sel)
    assert str(e.value) == ("ub-gloo has no case on the transports mpi: it declares torch-gloo "
                            "(@perfsuite.benchmark(transports=...)); name one of them, e.g. --transports torch-gloo")
    with pytest.raises(bench.NothingSelected, match=r"^allreduce has no case on the transports none: it runs over mpi, "):
        suite.select_cases(bench.Selection("allreduce", transports=(), world_sizes=(2,)))
    assert [c.name for c in suite.select_cases(bench.Selection("ub-gloo", transports=None))] == \
        ["ub-gloo[torch-gloo-n2-n=1]"]


def test_a_command_that_takes_one_transport_defaults_to_the_first_the_step_declares(declaring):  # noqa: F811
    userbench.benchmark(step_at_module_level, name="ub-two", transports=["torch-gloo", "mpi"], params={"n": [1]})
    assert bench.default_transport("ub-two") == "torch-gloo"
    assert bench.default_transport("allreduce") == "mpi"


def test_a_pytest_session_skips_a_benchmark_with_no_case_on_its_transports_saying_why(pytester):
    pytester.makepyfile(test_gloo='''
import perfsuite


@perfsuite.benchmark(world_sizes=[2], transports=["torch-gloo"])
def gloo_only(world):
    return None


test_gloo_only = gloo_only.test
''')
    r = pytester.runpytest_subprocess("--benchmark-only", "--perf-transports", "mpi", "-rs", "-p", "no:cacheprovider")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*gloo_only has no case on the transports mpi: it declares torch-gloo*"])


def test_an_import_failure_is_the_users_file_and_line():
    try:
        compile("def f(:\n", "/x/mine.py", "exec")
    except SyntaxError as exc:
        assert bench.import_failure(exc) == "/x/mine.py:1: SyntaxError: invalid syntax"
    try:
        exec(compile("import no_such_module_of_the_user\n", "/x/mine.py", "exec"), {})
    except ImportError as exc:
        assert bench.import_failure(exc) == \
            "/x/mine.py:1: ModuleNotFoundError: No module named 'no_such_module_of_the_user'"
    try:
        bench.import_source("no_such_benchmark_module_x")
    except Exception as exc:  # nothing of the user's ran: just the message, as before
        assert "(No module named 'no_such_benchmark_module_x'); name importable modules" in str(exc)


def test_a_failed_user_check_is_named_as_the_users_check():
    ctx, case = SimpleNamespace(fault=None), Case("mine", "mpi", 2)
    assert user._checked(lambda: False, ctx, case, "mine") == "mine's check returned False"
    assert user._checked(lambda: True, ctx, case, "mine") is None

    def failing():
        raise AssertionError("sum 3 != 4")

    assert user._checked(failing, ctx, case, "mine") == "mine's check failed: sum 3 != 4"
    assert vt.invalid("mine[mpi-n2]", [0, 1], why="mine's check returned False") == (
        "INVALID: mine[mpi-n2] returned wrong results on ranks 0, 1 (mine's check returned False): a failed "
        "world, not a measurement")
    # a built-in collective's check is still its exact expected values
    assert "(checked against the exact expected values)" in vt.invalid("allreduce[mpi-n2-4B]", [1])


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def test_a_package_without_a_version_is_named_by_its_commit_or_unversioned(tmp_path):
    repo = tmp_path / "repo"
    (repo / "myops").mkdir(parents=True)
    (repo / "myops" / "__init__.py").write_text("")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    sha = git(repo, "rev-parse", "HEAD")
    mine = str(repo / "myops" / "__init__.py")
    assert provenance.commit_of(mine) == sha[:10]
    git(repo, "pack-refs", "--all")  # a branch whose ref is packed reads the same
    assert provenance.commit_of(mine) == sha[:10]
    loose = tmp_path / "loose.py"
    loose.write_text("")
    imports = {"perfsuite": {"version": "0.1.0", "file": "/p/perfsuite/__init__.py"},
               "myops": {"version": None, "file": mine}, "loose": {"version": None, "file": str(loose)},
               "mpi": {"version": None, "file": None}}
    got = provenance.versioned(imports)
    assert got["myops"]["version"] == f"commit {sha[:10]}" and got["loose"]["version"] == "unversioned"
    assert got["perfsuite"]["version"] == "0.1.0" and got["mpi"]["version"] is None
    # a commit's environment (ab --a-ref) names the commit it was built from
    env = tmp_path / "env"
    (env / "lib").mkdir(parents=True)
    formats.write_json(env / envs.STAMP, formats.stamp(formats.COMMIT_ENV, {"commit": "c0ffee" * 7}))
    (env / "lib" / "myops.py").write_text("")
    assert provenance.commit_of(str(env / "lib" / "myops.py")) == ("c0ffee" * 7)[:10]
    result = Result("mine", "mpi", 2, (), extra={"imports": imports})
    assert provenance.stamped(result) == []  # no samples, nothing to stamp; the imports are not changed
    assert imports["myops"]["version"] is None


def test_a_long_case_id_widens_its_column_instead_of_running_into_the_next():
    short, long = "allreduce[mpi-n2-4B]", "compute_allreduce[torch-gloo-n2-n=1000000-dtype=bf16]"
    lines = vt.table([Verdict(short, "step_us", "same", "us", False, 10.0, 10.0, 0.0, -0.01, 0.01, rounds=5),
                      Verdict(long, "step_us", "unknown", "us", False, 12.0, 10.0, 0.2, -0.1, 0.6, rounds=5)]).splitlines()
    head, rows = lines[0], lines[1:3]
    at = head.index("metric")
    assert all(row[at:].startswith("step") for row in rows), lines
    assert any(row[:at].rstrip().endswith(long) and row[:at].endswith("  ") for row in rows), lines


def test_a_user_table_keeps_its_columns_for_a_long_combination():
    case = Case("mine", "mpi", 2, variant="n=1000000-dtype=bfloat16-layout=channels_last")
    samples = []
    for params in ({"n": 1}, {"n": 1000000, "dtype": "bfloat16", "layout": "channels_last"}):
        samples.append(Sample(case, {userbench.METRIC: Metric(userbench.METRIC, 5.0, "us", False)}, True, (),
                              {"params": params, "iters": 10, "p99_us": 6.0, "rank_median_us": [5.0, 5.0]}))
    text = bench.user_table(Result("mine", "mpi", 2, tuple(samples)))
    head, *rows = text.splitlines()[1:]
    step_ends = head.index("step p50") + len("step p50")
    assert [row.index(" us") + len(" us") for row in rows] == [step_ends, step_ends], text

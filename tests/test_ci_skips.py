"""CI's skip check (.ci/check_skips.py) on fake pytest reports: a skip not on the expected list is
one line and exit 1, expected ones pass, the list's own mistakes are one line and exit 2, and the
list .ci/run enforces is readable and covers both of its pytest runs."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_skips", ROOT / ".ci" / "check_skips.py")
check_skips = importlib.util.module_from_spec(_spec)
sys.modules["check_skips"] = check_skips  # dataclasses look their module up while it loads
_spec.loader.exec_module(check_skips)

LIST = """\
# header: what this file is

[main]
# no GPU on this machine kind
tests/test_gpu_*.py::*
# only this reason is expected for the Slurm test
tests/test_launchers.py::test_srun_world | *under Open MPI*

[openmpi]
# nothing expected
"""


def junit(tmp_path: Path, *cases: str, name: str = "junit.xml") -> Path:
    """A pytest --junitxml report (xunit1: testcases keep their file) holding ``cases``."""
    path = tmp_path / name
    path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
                    + "".join(cases) + "</testsuite></testsuites>")
    return path


def skipped(file: str, classname: str, name: str, reason: str, kind: str = "pytest.skip") -> str:
    return (f'<testcase classname="{classname}" name="{name}" file="{file}" line="3" time="0.0">'
            f'<skipped type="{kind}" message="{reason}">{file}:3: {reason}</skipped></testcase>')


def passed(file: str, name: str) -> str:
    return f'<testcase classname="{file[:-3].replace("/", ".")}" name="{name}" file="{file}" time="0.1"/>'


def run(tmp_path, capsys, section, *reports) -> tuple[int, list[str]]:
    (tmp_path / "expected-skips").write_text(LIST)
    rc = check_skips.main([section, *map(str, reports), "--list", str(tmp_path / "expected-skips")])
    captured = capsys.readouterr()
    return rc, (captured.out + captured.err).splitlines()


CHROMIUM = skipped("tests/test_report.py", "tests.test_report", "test_page_renders",
                   "no chromium on PATH (Debian: apt-get install -y chromium)")
GPU = skipped("tests/test_gpu_smoke.py", "tests.test_gpu_smoke", "test_smoke[nccl]", "no NVIDIA driver here")


def test_an_unexpected_skip_is_one_line_naming_it_and_exit_1(tmp_path, capsys):
    """What a failed Chromium install looks like to CI: its browser test skips."""
    rc, lines = run(tmp_path, capsys, "main", junit(tmp_path, GPU, CHROMIUM, passed("tests/test_x.py", "test_a")))
    assert rc == 1
    assert lines[0] == ("check-skips main: 1 unexpected skip(s): tests/test_report.py::test_page_renders "
                        "(no chromium on PATH (Debian: apt-get install -y chromium))")
    assert not any("unexpected" in line for line in lines[1:])


def test_expected_skips_pass_and_entries_that_matched_nothing_are_only_information(tmp_path, capsys):
    rc, lines = run(tmp_path, capsys, "main", junit(tmp_path, GPU))
    assert rc == 0
    assert lines == ["check-skips main: 1 skip(s), all expected on this machine kind",
                     "check-skips main: expected but did not skip (informational): "
                     "tests/test_launchers.py::test_srun_world | *under Open MPI*"]


def test_a_reason_pattern_limits_an_entry_to_that_reason(tmp_path, capsys):
    """The srun test may skip under Open MPI, not because Slurm failed to start."""
    other = skipped("tests/test_launchers.py", "tests.test_launchers", "test_srun_world",
                    "no Slurm controller answers (sinfo)")
    rc, lines = run(tmp_path, capsys, "main", junit(tmp_path, other))
    assert rc == 1 and "test_srun_world (no Slurm controller answers (sinfo))" in lines[0]
    ompi = skipped("tests/test_launchers.py", "tests.test_launchers", "test_srun_world",
                   "srun --mpi=pmi2 cannot start ranks under Open MPI")
    assert run(tmp_path, capsys, "main", junit(tmp_path, ompi))[0] == 0


def test_each_run_is_held_to_its_own_section(tmp_path, capsys):
    rc, lines = run(tmp_path, capsys, "openmpi", junit(tmp_path, GPU))
    assert rc == 1 and "tests/test_gpu_smoke.py::test_smoke[nccl]" in lines[0]


def test_node_ids_of_classes_and_of_modules_skipped_while_collecting(tmp_path, capsys):
    in_class = skipped("tests/test_y.py", "tests.test_y.TestThing", "test_b[1.5-x]", "why")
    module = ('<testcase classname="" name="tests.test_z" file="tests/test_z.py" time="0">'
              '<skipped message="collection skipped">(\'/repo/tests/test_z.py\', 7, '
              '\'Skipped: cupy is not installed\')</skipped></testcase>')
    xfail = skipped("tests/test_w.py", "tests.test_w", "test_c", "known bug", kind="pytest.xfail")
    assert check_skips.read_skips(junit(tmp_path, in_class, module, xfail)) == [
        ("tests/test_y.py::TestThing::test_b[1.5-x]", "why"),
        ("tests/test_z.py", "cupy is not installed")]


@pytest.mark.parametrize("text, says", [
    ("[main]\ntests/test_a.py::*\n", "expected-skips:2: 'tests/test_a.py::*' has no comment above it"),
    ("# why\n\ntests/test_a.py::*\n", "expected-skips:3: an entry before any [section]"),
    ("[main]\n# why\n\ntests/test_a.py::*\n", "expected-skips:4: 'tests/test_a.py::*' has no comment"),
])
def test_an_entry_without_its_reason_or_section_is_one_line_and_exit_2(tmp_path, capsys, text, says):
    (tmp_path / "expected-skips").write_text(text)
    rc = check_skips.main(["main", str(junit(tmp_path, GPU)), "--list", str(tmp_path / "expected-skips")])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0], err


def test_a_missing_report_or_section_is_one_line_and_exit_2(tmp_path, capsys):
    rc, lines = run(tmp_path, capsys, "main", tmp_path / "absent.xml")
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("check-skips: cannot read the junit report")
    rc, lines = run(tmp_path, capsys, "nightly", junit(tmp_path, GPU))
    assert (rc, lines) == (2, [f"check-skips: {tmp_path / 'expected-skips'} has no [nightly] section "
                               "(it has: main, openmpi)"])
    xunit2 = junit(tmp_path, GPU.replace(' file="tests/test_gpu_smoke.py"', ""))
    rc, lines = run(tmp_path, capsys, "main", xunit2)
    assert rc == 2 and "-o junit_family=xunit1" in lines[0]


def test_the_list_ci_enforces_reads_and_has_a_section_for_each_checked_run():
    sections = check_skips.read_list(check_skips.DEFAULT_LIST.read_text())
    ci = (ROOT / ".ci" / "run").read_text()
    checked = set(re.findall(r"check_skips\.py (\w+) ", ci))
    assert checked == {"main", "openmpi"} and checked <= set(sections), (checked, list(sections))
    # short on purpose: each entry is a machine fact, not a way to quiet a test
    assert sum(len(e) for e in sections.values()) <= 25


def test_ci_run_times_out_every_pytest_run_and_requires_the_native_loop():
    """What .ci/run promises beside the skip check: no test runs forever in either venv, the
    README's `pytest tests` runs whole (the unmarked tests side by side, the world tests alone,
    their skips judged together), and a native loop that does not build is a failure there
    (tests/conftest.py reads the variable)."""
    ci = (ROOT / ".ci" / "run").read_text()
    runs = re.findall(r"-m pytest .*", ci.replace("\\\n", " "))  # continued lines joined
    assert len(runs) == 3 and all('--timeout "$TEST_TIMEOUT"' in r for r in runs), runs
    unmarked, worlds = runs[0], runs[1]
    assert unmarked.startswith('-m pytest tests ') and '-m "not world" -n 2' in unmarked, unmarked
    assert worlds.startswith("-m pytest tests ") and "-m world " in worlds and " -n " not in worlds, worlds
    assert "check_skips.py main .ci/junit-unmarked.xml .ci/junit-worlds.xml" in ci
    assert re.search(r"^TEST_TIMEOUT=\d+$", ci, re.M)
    assert re.search(r"^export PERFSUITE_REQUIRE_NATIVE=1$", ci, re.M)


def test_a_sections_runs_are_judged_together(tmp_path, capsys):
    """.ci/run runs the unmarked tests and the world tests apart: a skip in either report is
    judged, and an entry matched in one is not stale because the other lacks it."""
    unmarked = junit(tmp_path, GPU, name="unmarked.xml")
    worlds = junit(tmp_path, CHROMIUM, name="worlds.xml")
    rc, lines = run(tmp_path, capsys, "main", unmarked, worlds)
    assert rc == 1 and lines[0].startswith("check-skips main: 1 unexpected skip(s): tests/test_report.py::test_page_renders")
    assert run(tmp_path, capsys, "main", unmarked, junit(tmp_path, passed("tests/test_x.py", "test_a"), name="w.xml"))[0] == 0


def test_durations_sums_each_files_tests_over_a_sections_runs(tmp_path, capsys):
    """.ci/durations.py, the per-file table docs/measurements.md keeps before and after a change to
    CI's time: every report's tests summed per file, slowest first."""
    spec = importlib.util.spec_from_file_location("durations", ROOT / ".ci" / "durations.py")
    durations = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(durations)
    old = junit(tmp_path, passed("tests/test_a.py", "t1"), passed("tests/test_b.py", "t2"), name="old.xml")
    new = [junit(tmp_path, passed("tests/test_a.py", "t1"), name="u.xml"),
           junit(tmp_path, passed("tests/test_b.py", "t2"), passed("tests/test_b.py", "t3"), name="w.xml")]
    assert durations.main([*map(str, new), "--before", str(old)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| tests/test_b.py | 1 | 0.1 | 2 | 0.2 |" and lines[3] == "| tests/test_a.py | 1 | 0.1 | 1 | 0.1 |"
    assert lines[-1] == "| **all** | 2 | 0 | 3 | 0 |"


def test_a_world_started_by_a_test_not_marked_world_is_refused_naming_the_test(monkeypatch):
    """CI runs the tests not marked world side by side (.ci/run): one that starts a world there
    fails at once, naming itself, before any process starts (tests/conftest.py sets the name)."""
    import os

    from perfsuite.launch.launchers import LaunchConfig
    from perfsuite.launch.world import UNMARKED, run_program, run_world
    from perfsuite.records.errors import LaunchError
    from perfsuite.records.model import Case, WorldSpec

    assert os.environ.get(UNMARKED, "").endswith("::test_a_world_started_by_a_test_not_marked_world_is_refused_naming_the_test")
    spec = WorldSpec("allreduce", "mpi", 2, (Case("allreduce", "mpi", 2, size_bytes=4),))
    with pytest.raises(LaunchError, match=r"test_ci_skips.py::test_a_world_started_.* starts the world .* not marked world"):
        run_world(spec, LaunchConfig(program="/nonexistent/mpiexec"), timeout=5)
    with pytest.raises(LaunchError, match=r"starts the MPI program /bin/true but is not marked world"):
        run_program(["/bin/true"], 2, LaunchConfig(program="/nonexistent/mpiexec"), timeout=5)
    monkeypatch.delenv(UNMARKED)  # a marked test: the launch goes on (and here finds no launcher)
    with pytest.raises(LaunchError, match="not found|nonexistent"):
        run_program(["/bin/true"], 2, LaunchConfig(program="/nonexistent/mpiexec"), timeout=5)

"""The pytest face end to end (pytester): options, skips with reasons, replayed statistics,
extra_info, and failures that name the rank."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ALLREDUCE_BENCH

pytestmark = pytest.mark.world

QUICK = ["--perf-world-sizes", "2", "--perf-iters", "20", "--perf-warmup", "2", "-p", "no:cacheprovider"]


def test_extra_info_and_real_per_iteration_rounds(pytester, no_leftover_ranks):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    out = pytester.path / "b.json"
    # One round each, whatever the load: this checks the stats plumbing, not the contention rule.
    r = pytester.runpytest_subprocess("--benchmark-only", "--perf-transports", "mpi,ring,grpc+mpi",
                                      "--perf-sizes", "4,1MiB", f"--benchmark-json={out}",
                                      "--perf-max-contention", "off", *QUICK)
    r.assert_outcomes(passed=4, skipped=2)
    from conftest import native_build  # fails where CI requires the native loop and it did not build

    loop = "python (not native: *" if native_build().why else "native"  # the mpi loop that timed it
    r.stdout.fnmatch_lines([f"*allreduce?mpi-n2?: 2 cases, world start*, timing {loop}"])
    data = json.loads(out.read_text())
    mpi = [b for b in data["benchmarks"] if "mpi-n2" in b["name"]]
    assert {b["extra_info"]["timing"] for b in mpi} == {loop.split()[0]}
    names = {b["name"] for b in data["benchmarks"]}
    assert names == {f"test_allreduce[{t}-n2-{s}]" for t in ("mpi", "ring") for s in ("4B", "1MiB")}
    for b in data["benchmarks"]:
        info = b["extra_info"]
        for key in ("transport", "world_size", "size_bytes", "dtype", "latency_us", "algbw_GBps",
                    "busbw_GBps", "valid", "fingerprint"):
            assert key in info, key
        assert b["stats"]["rounds"] == 20  # the ranks' iterations, not one world start
        # the replayed median is the kernel's p50 of the slowest rank per iteration
        assert b["stats"]["median"] * 1e6 == pytest.approx(info["p50_us"], rel=1e-6)


def test_a_users_benchmark_marker_keeps_the_ranks_times(pytester, no_leftover_ranks):
    """pytest-benchmark's idiom ``@pytest.mark.benchmark(group=...)`` on the shipped allreduce
    test: pytest-benchmark reads only the closest marker, so a user's used to hide the replay
    clock and the entries held the empty replay target's own time (0.1 us at 4 B and 1 MiB)."""
    shipped = (Path(__file__).parents[1] / "benchmarks" / "test_allreduce.py").read_text()
    marked = shipped.replace("\ndef test_allreduce(", '\n@pytest.mark.benchmark(group="mine", disable_gc=True, '
                             'warmup=True, min_rounds=50)\ndef test_allreduce(')
    assert marked != shipped, "benchmarks/test_allreduce.py no longer defines test_allreduce"
    pytester.mkdir("benchmarks")
    (pytester.path / "benchmarks" / "test_allreduce.py").write_text(marked)
    out = pytester.path / "b.json"
    r = pytester.runpytest_subprocess("benchmarks", "--benchmark-only", "--perf-transports", "mpi",
                                      "--perf-sizes", "4,1MiB", f"--benchmark-json={out}",
                                      "--perf-max-contention", "off", *QUICK)
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines(["*benchmark 'mine': 2 tests*"])  # the terminal table: the user's group
    entries = json.loads(out.read_text())["benchmarks"]
    assert len(entries) == 2
    for b in entries:
        info, stats = b["extra_info"], b["stats"]
        assert b["group"] == "mine" and b["options"]["timer"] == "perfsuite_replay_clock"
        assert stats["rounds"] == info["iters"] == 20  # the ranks' iterations, not min_rounds
        # The replayed median is the p50 of the slowest rank's per-iteration times.
        assert stats["median"] * 1e6 == pytest.approx(info["p50_us"], rel=1e-6)
    small, large = sorted(entries, key=lambda b: b["extra_info"]["size_bytes"])
    assert large["stats"]["median"] > small["stats"]["median"]  # 1 MiB takes longer than 4 B


def test_a_users_timer_gives_way_to_the_replayed_times(pytester):
    """``perf_record`` (the stall breakdown's parts) replays too, under a user's marker, and a
    timer of their own is not used, with a warning saying so."""
    pytester.makepyfile(test_parts='''
import time

import pytest

from perfsuite.records.model import Case, Sample

@pytest.mark.benchmark(group="parts", timer=time.process_time)
def test_part(benchmark, perf_record):
    case = Case("stalls", "mpi", 2, model="small-cnn")
    perf_record(benchmark, Sample(case, {}, True, (0.001, 0.004, 0.002), {"part": "prep"}))
''')
    out = pytester.path / "b.json"
    r = pytester.runpytest_subprocess("--benchmark-only", f"--benchmark-json={out}", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1, warnings=1)
    r.stdout.fnmatch_lines(["*test_part: perfsuite replays the ranks' own times; the benchmark "
                            "marker's timer=<built-in function process_time> is not used*"])
    (b,) = json.loads(out.read_text())["benchmarks"]
    assert b["group"] == "parts" and b["extra_info"]["part"] == "prep"
    assert (b["stats"]["rounds"], b["stats"]["min"], b["stats"]["median"], b["stats"]["max"]) == \
        pytest.approx((3, 0.001, 0.002, 0.004), rel=1e-9)


def test_skipped_transports_show_their_reason(pytester):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    r = pytester.runpytest_subprocess("--perf-transports", "grpc+gdr", "--perf-sizes", "4", "-rs", *QUICK)
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*grpc+gdr: exists only in TensorFlow 1*"])


@pytest.mark.parametrize("args,needle", [
    (["--perf-world-sizes", "0"], "*world size '0' is not allowed*"),
    (["--perf-sizes", "6"], "*size 6 is not a multiple of 4 bytes*"),
    (["--perf-transports", "carrier-pigeon"], "*transport 'carrier-pigeon' is unknown*"),
    (["--perf-timeout", "soon"], "*timeout 'soon' must be a number*"),
    (["--perf-launcher", "qsub"], "*launcher 'qsub' is unknown*"),
    (["--perf-alpha", "5%"], "*significance level (alpha) '5%' must be a fraction between 0 and 1*"),
    (["--perf-tolerance", "lots"], "*tolerance*lots*"),
    (["--perf-launcher-args", "'--mpi=pmi2"], "*launcher args \"'--mpi=pmi2\" cannot be split like a shell*"),
])
def test_bad_options_are_usage_errors(pytester, args, needle):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    r = pytester.runpytest_subprocess(*args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines([needle])


def test_ini_twin(pytester):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    pytester.makeini("[pytest]\nperf_transports = ring\nperf_sizes = 8\nperf_world_sizes = 2\n")
    r = pytester.runpytest_subprocess("--collect-only", "-q")
    r.stdout.fnmatch_lines(["*test_allreduce?ring-n2-8B?*"])
    assert "mpi-n2" not in r.stdout.str()


def test_rank_failure_fails_later_cases_and_keeps_earlier(pytester, monkeypatch, no_leftover_ranks):
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "raise@1@1024")
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    r = pytester.runpytest_subprocess("--perf-transports", "mpi", "--perf-sizes", "4,1024,4096",
                                      "--benchmark-disable", *QUICK)
    r.assert_outcomes(passed=1, failed=2)
    r.stdout.fnmatch_lines(["*allreduce?mpi-n2-1KiB?: allreduce?mpi-n2?: rank 1 raised InjectedFault*"])
    # Every rank's log under the world's first failure, the way pytest shows captured output;
    # the later failures of the same world point there instead of repeating them.
    r.stdout.fnmatch_lines(["*Captured rank 0 log call*", "*Captured rank 1 log call*",
                            "*InjectedFault: injected fault on rank 1*"])
    assert r.stdout.str().count("Captured rank 1 log call") == 1
    r.stdout.fnmatch_lines(["*(every rank's log: under allreduce[[]mpi-n2-1KiB[]])*"])
    r.stdout.fnmatch_lines(["perfsuite: a world failed or a case was invalid (infrastructure, not performance)"])


def test_k_selects_sizes_inside_one_world(pytester, no_leftover_ranks):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    r = pytester.runpytest_subprocess("--perf-transports", "mpi", "--perf-sizes", "4,16,64",
                                      "-k", "16B", "--benchmark-disable", *QUICK)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*allreduce?mpi-n2?: 1 cases*"])
    r.stdout.fnmatch_lines(["perfsuite: nothing wrong (nothing compared: no baseline)"])


def test_xdist_is_refused_before_any_world_starts(pytester, no_leftover_ranks):
    pytest.importorskip("xdist", reason="pytest-xdist is not installed (pip install -e '.[test]')")
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    # A benchmark run (--benchmark-only or any --perf-* option): one usage line, before
    # pytest-benchmark's own refusal of -n, which says nothing of why.
    for extra in (["--benchmark-only"], ["--perf-transports", "mpi", "--perf-sizes", "4,8"]):
        r = pytester.runpytest_subprocess("-n", "2", *extra, "-p", "no:cacheprovider")
        assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
        r.stderr.fnmatch_lines(["*perfsuite starts MPI worlds, which must not run under pytest-xdist (-n)*"])
        assert "--benchmark-disable" not in r.stderr.str()
    # A session that merely has perfsuite installed may use -n; a measuring test in it still
    # fails with the line, never passes having measured nothing.
    r = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(["*perfsuite starts MPI worlds, which must not run under pytest-xdist (-n)*"])
    r.stdout.no_fnmatch_line("*perfsuite worlds*")  # no world ran


def test_a_report_location_that_cannot_be_written_fails_the_session(pytester, no_leftover_ranks):
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    (pytester.path / "taken").write_text("a file, not a folder")
    r = pytester.runpytest_subprocess("--perf-transports", "mpi", "--perf-sizes", "4",
                                      "--perf-report", "taken", *QUICK)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--perf-report 'taken' exists and is not a folder*"])
    # Writable when checked, gone by the end (a conftest turns the folder into a file): the
    # tests passed, the session fails, and the results are kept elsewhere.
    pytester.makeconftest("""
import pathlib, shutil
def pytest_sessionfinish(session):
    shutil.rmtree("late", ignore_errors=True)
    pathlib.Path("late").write_text("not a folder any more")
""")
    r = pytester.runpytest_subprocess("--perf-transports", "mpi", "--perf-sizes", "4",
                                      "--perf-report", "late", "--perf-max-contention", "off", *QUICK)
    assert r.ret == pytest.ExitCode.TESTS_FAILED, r.stdout.str()
    r.assert_outcomes(passed=1)
    # The results file first (the report's results.json: into the temp folder, since "late" is
    # no folder now), then the report's own line.
    r.stdout.fnmatch_lines(["# results written to * because late/results.json could not be written*",
                            "# report not written to late: *"])


def test_sigterm_kills_the_world_and_ends_the_session(pytester, no_leftover_ranks):
    """pytest turns Ctrl-C into an orderly end; SIGTERM (CI runners, Slurm, timeout) must too,
    or the world it was measuring keeps running."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import rank_pids

    # Only this test's ranks count (no_leftover_ranks put the token in the environment): another
    # run's world on a shared machine must not pass for ours.
    token = os.environ["PERFSUITE_TEST_TOKEN"]
    pytester.makepyfile(test_bench=ALLREDUCE_BENCH)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--perf-transports", "mpi",
                             "--perf-sizes", "4", "-p", "no:cacheprovider", *QUICK],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PERFSUITE_TEST_FAULT": "hang@1"})  # until we stop it
    deadline = time.monotonic() + 60
    while len(rank_pids(token)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    started = len(rank_pids(token))
    if started != 2:  # the signal would then test a session that never started its world
        proc.send_signal(signal.SIGTERM)
        pytest.fail(f"{started} of 2 ranks started within 60 s; the session said:\n"
                    + proc.communicate(timeout=60)[0])
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt" in out or "Interrupted" in out, out

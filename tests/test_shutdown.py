"""Every way a run ends (signal, timeout, an impossible world, an unwritable output) kills and
reaps the world's whole process tree, keeps what finished, and says what happened in one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import default_sigint, reap, signalled
from perfsuite.faces import cli
from perfsuite import interrupts
from perfsuite.store import formats
from perfsuite.records.errors import FormatError, Interrupted
from perfsuite.launch import proctree
from perfsuite.records.model import Sample


def left_behind(token: str) -> list[str]:
    """Every live process started under the test's token (what the test started inherits it)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if f"PERFSUITE_TEST_TOKEN={token}".encode() not in (p / "environ").read_bytes():
                continue
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out.append(f"{p.name} {cmd[:80]}")
    return out


def gone_within(token: str, seconds: float = 2.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := left_behind(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# --- signals through a real `perfsuite run` ------------------------------------------------------

def measured_in_a_world(workdir: Path, world_size: int, size: int) -> bool:
    """Has a live world of ``world_size`` ranks recorded its ``size``-byte case? Rank 0 appends
    each finished case to the world's partial record (perfsuite/worker.py), which is what an
    interrupted run keeps: the test waits for that record, not for a time."""
    for folder in workdir.glob("perfsuite-world-*"):
        try:
            if formats.read_job(str(folder / "job.json"))["world_size"] != world_size:
                continue
            lines = (folder / "partial.jsonl").read_text().splitlines()
        except (OSError, ValueError, FormatError):
            continue  # not written yet
        for line in lines:
            try:
                if Sample.from_dict(json.loads(line)).case.size_bytes == size:
                    return True
            except ValueError:
                pass  # the line rank 0 is writing now
    return False


@pytest.mark.world
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_world_and_keeps_what_finished(tmp_path, sig, status):
    """The 1-rank world finishes; the 2-rank world measures 4 B, then its rank 1 hangs at 1 KiB
    until the signal, which is sent once the 4 B case is in the world's record: what is kept
    does not depend on how fast this machine is today."""
    token = f"shutdown-{sig.name}-{os.getpid()}"
    out, workdir = tmp_path / "t.json", tmp_path / "worlds"
    workdir.mkdir()
    env = {**os.environ, "PERFSUITE_TEST_TOKEN": token, "PERFSUITE_TEST_FAULT": "hang@1@1024"}
    proc = subprocess.Popen([sys.executable, "-m", "perfsuite.faces.cli", "run", "--transports", "mpi",
                             "--world-sizes", "1,2", "--sizes", "4,1024", "--iters", "20", "--json", str(out),
                             "--workdir", str(workdir),  # where the test reads the world's record
                             # one round each, or a contended round of the first world is re-run
                             # after the second world, which hangs until the signal
                             "--max-contention", "off"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=tmp_path, preexec_fn=default_sigint)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "allreduce[mpi-n1]: 2 cases in" in line:
                break
        else:
            pytest.fail("the first world never finished:\n" + "".join(lines))
        deadline = time.monotonic() + 120  # generous: a 2-rank world starts in seconds
        while not measured_in_a_world(workdir, 2, 4) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not measured_in_a_world(workdir, 2, 4):
            pytest.fail("the 2-rank world did not record its 4 B case within 120 s")
        rest = signalled(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines) + rest
    left = gone_within(token)
    reap([int(line.split()[0]) for line in left])
    assert proc.returncode == status, text
    assert "Traceback" not in text
    assert not left, f"left running after {sig.name}"
    assert f"interrupted by {sig.name}" in text
    run = formats.load_run(out)  # what finished is there, marked
    assert run.interrupted == sig.name
    assert [(r.world_size, len(r.samples)) for r in run.results] == [(1, 2)]
    (stopped,) = run.failures
    assert stopped.failure.kind == "interrupted" and stopped.spec.world_size == 2
    assert [s.case.size_bytes for s in stopped.samples()] == [4]  # the hung world's finished case
    assert not run.ok


# --- the launcher's whole tree, at a timeout -------------------------------------------------

@pytest.mark.world
def test_a_timeout_kills_a_world_that_left_the_launchers_group(tmp_path, monkeypatch, capsys):
    """Hydra starts its proxy and every rank in sessions of their own, Open MPI daemonises its
    helpers, and a launcher may not pass SIGTERM on (a wrapper that ignores it, a proxy busy
    starting 2000 ranks). Here the launcher is a shell that ignores SIGTERM, starts mpiexec in
    a new session and daemonises a helper of its own: killing the launcher's group and the
    ranks it wrote down leaves the helper, at least, running."""
    token = f"timeout-{os.getpid()}"
    monkeypatch.setenv("PERFSUITE_TEST_TOKEN", token)
    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "hang@1")
    from perfsuite.launch.commands import default_program

    wrapper = tmp_path / "mpiexec-wrapper"
    wrapper.write_text(f"#!/bin/sh\ntrap '' TERM\nsetsid sleep 300 &\n"
                       f"setsid {default_program('mpiexec')} \"$@\" &\nwait\n")
    wrapper.chmod(0o755)
    code = cli.main(["run", "--transports", "mpi", "--world-sizes", "2", "--sizes", "4", "--iters", "5",
                     "--launcher-program", str(wrapper), "--mpi-flavor", "mpich", "--timeout", "4"])
    assert code == cli.EXIT_WORLD  # a hung world is infrastructure, not performance
    assert "killed at the 4 s timeout" in capsys.readouterr().out
    assert not gone_within(token), "left running after the timeout"


def test_kill_tree_finds_processes_that_left_its_session_and_parent(tmp_path):
    """A child in a new session, and a grandchild whose parent has exited, carry the token."""
    token = f"tree-{os.getpid()}"
    script = ("import os, subprocess, time\n"
              "subprocess.Popen(['setsid', 'sleep', '60'])\n"
              "if os.fork() == 0:\n"
              "    subprocess.Popen(['sleep', '61']); os._exit(0)\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                            env={**os.environ, proctree.TOKEN_VAR: token})
    try:
        deadline = time.monotonic() + 10
        while len(proctree.stragglers(token)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        # python, the sleep in its own session, and the orphaned sleep (its parent exited)
        assert len(proctree.stragglers(token)) == 3
        killed = proctree.kill_tree(proc.pid, token)
        assert proc.pid in killed and len(killed) >= 3
        assert not proctree.stragglers(token)
    finally:
        proc.kill()
        proc.wait()


# --- interrupts.handled ----------------------------------------------------------------------

def test_the_first_signal_raises_and_later_ones_wait_for_the_write():
    with pytest.raises(Interrupted) as caught:
        with interrupts.handled() as h:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert caught.value.status == 143 and caught.value.name == "SIGTERM"
    with interrupts.handled() as h:
        h.defer()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert h.raised is not None and h.raised.name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


# --- refused before any world starts -----------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (["--world-sizes", "2000"], "world size 2000 puts 2000 ranks on this host"),
    (["--sizes", "99999GiB"], "size 99999GiB needs about"),
    (["--sizes", "4,,8"], "sizes '4,,8' has an empty item"),
    (["--world-sizes", "1,2,"], "world sizes '1,2,' has an empty item"),
    (["--timeout", "inf"], "timeout 'inf' must be a number of seconds > 0"),
    (["--launcher-program", "/bin/false"], "launcher program '/bin/false': cannot tell which MPI"),
    (["--launcher-program", "/nonexistent/mpiexec"], "launcher program '/nonexistent/mpiexec'"),
    (["--json", "/proc/x.json"], "--json '/proc/x.json' cannot be written"),
    (["--json", "DIR/"], "is a folder; name a file"),
    (["--report", "FILE"], "exists and is not a folder"),
    (["--workdir", "/proc/nope"], "workdir '/proc/nope' cannot be written"),
])
def test_what_no_world_could_survive_is_refused_first(tmp_path, monkeypatch, capsys, args, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "DIR").mkdir()
    (tmp_path / "FILE").write_text("x")
    monkeypatch.setattr("perfsuite.launch.world.run_world",
                        lambda *a, **k: pytest.fail("a world started"))
    assert cli.main(["run", "--transports", "mpi", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_a_results_file_that_fails_at_the_end_is_kept_elsewhere(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "spare"))
    (tmp_path / "spare").mkdir()
    run = formats.SuiteRun(created="now")
    real = formats.write_run

    def disk_full(path, r):
        if Path(path).parent == tmp_path:
            raise OSError(28, "No space left on device")
        return real(path, r)

    monkeypatch.setattr(formats, "write_run", disk_full)
    where, why = formats.write_run_kept(tmp_path / "r.json", run)
    assert where.parent == tmp_path / "spare" and "No space left on device" in why
    assert formats.load_run(where).created == "now"

"""A/B arms that are stacks, in real worlds: each arm's whole MPI world runs inside its own
container image (podman; launch/containers.py), or under a command prefix (bubblewrap).

The two images differ only in their MPI (mpich 4.2.3 and 5.0.2 from PyPI; perfsuite built from
this tree in both): tests/tools/stack_images.py builds them once per tree, without a registry.
What is held here: each arm ran its own image's MPI and perfsuite, and says so (the report's
``# A:``/``# B:`` lines, the A/B file's ``container`` and ``stack``); a rank that dies or hangs
in a container fails its world as on the host, and leaves no process and no container behind;
a prefix arm runs the host's perfsuite under the prefix.

The verdicts themselves are not held: the two MPICH versions may really differ, and on a 2-core
machine 8 pairs may all be dropped as contended. Only the exit status that says the comparison
could not be made (2: bad input, 4: a failed world) fails these tests.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import perfsuite, said, small_world
from stack import BUILD_TIMEOUT_S  # the fixtures (images, podman_ready) come through conftest

ROOT = Path(__file__).resolve().parents[1]
#: One world in a container takes 2-3 s here (podman's start and removal), a host world 1 s.
WORLD = small_world(sizes=None, iters=50)


pytestmark = [pytest.mark.world, pytest.mark.timeout(BUILD_TIMEOUT_S + 300)]


def arm_lines(stdout: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r"^# ([AB]): (.*)$", stdout, re.M)}


def verdicts(stdout: str) -> dict[str, str]:
    """case -> its verdict, from the report's table."""
    return {m[1]: m[2] for m in re.finditer(r"^(\S+\[\S+\])\s+\S+\s.*\s(SAME|DIFFERENT|UNKNOWN)\b", stdout, re.M)}


def test_two_images_are_two_mpi_stacks_each_named_in_the_report_and_the_ab_file(tmp_path, images,
                                                                                  no_leftover_containers):
    """The arms differ in their image alone: each world ran that image's MPI and perfsuite (its
    ranks imported perfsuite from the image's venv), and the report and the file say which."""
    r = perfsuite("ab", "--a-image", images["4.2.3"], "--b-image", images["5.0.2"], "--container-runtime", "podman",
                  *WORLD, "--sizes", "4,1MiB", "--max-pairs", "8", "--host-timing", "python", "--strict",
                  "--json", "ab.json", cwd=tmp_path)
    # 0 SAME, 1 DIFFERENT (the two MPICH may really differ), 3 UNKNOWN; never 2 or 4
    assert r.returncode in (0, 1, 3), said(r)
    lines = arm_lines(r.stdout)
    for arm, version in (("A", "4.2.3"), ("B", "5.0.2")):
        line = lines.get(arm, "")
        assert f"image {images[version]} (podman)" in line, said(r)
        assert f"MPICH Version: {version}" in line, said(r)
        assert "from /opt/venv/" in line, said(r)  # the ranks' perfsuite is the image's
    assert set(verdicts(r.stdout)) == {"allreduce[mpi-n2-4B]", "allreduce[mpi-n2-1MiB]"}, said(r)
    body = json.loads((tmp_path / "ab.json").read_text())
    for side, version in (("a", "4.2.3"), ("b", "5.0.2")):
        arm = body["arms"][side]
        assert arm["container"]["image"] == images[version] and arm["container"]["runtime"] == "podman", arm
        stack = arm["stack"]
        assert version in stack["mpi"] and stack["dists"]["mpich"] == version, stack
        assert stack["dists"]["perfsuite"] and stack["image_id"], stack
    assert not body["failures"], body["failures"]
    assert {v["case"] for v in body["verdicts"]} == {"allreduce[mpi-n2-4B]", "allreduce[mpi-n2-1MiB]"}


@pytest.mark.parametrize("fault, timeout, says", [
    ("kill@1", "60", r"rank 1 on \S+ died"),
    ("hang@1", "8", r"killed at the 8 s timeout"),
], ids=["killed", "hung"])
def test_a_rank_that_dies_or_hangs_in_a_container_fails_its_world_and_leaves_nothing(
        tmp_path, images, no_leftover_containers, fault, timeout, says):
    """Arm B's rank 1 is SIGKILLed (or hangs until the world's timeout) inside its container: the
    runner's kills reach every rank through the shared pid namespace, the container is removed,
    and the run says which rank, as it would on the host (exit 4: a failed world)."""
    r = perfsuite("ab", "--a-image", images["4.2.3"], "--b-image", images["4.2.3"], "--container-runtime", "podman",
                  *WORLD, "--sizes", "4", "--max-pairs", "2", "--host-timing", "python", "--timeout", timeout,
                  "--b-env", f"PERFSUITE_TEST_FAULT={fault}", cwd=tmp_path)
    assert r.returncode == 4, said(r)
    # B failed in both pairs: one line, stopped there when the two failures read the same
    # (experiments/repeats.py; a hung world's stacks may differ between its pairs), else a line each
    assert re.search(rf"^# FAILED(, stopped after 2 pair\(s\): arm B failed the same way in pair 1 and pair 2| "
                     rf"pair \d+, arm B): .*{says}", r.stdout, re.M), said(r)
    assert "arm A" not in "\n".join(line for line in r.stdout.splitlines() if line.startswith("# FAILED")), said(r)


BWRAP = ("bwrap --ro-bind / / --dev /dev --proc /proc --bind /tmp /tmp --bind {folder} {folder} "
         "--bind {cwd} {cwd} --die-with-parent")


def test_a_prefix_arm_runs_the_hosts_perfsuite_under_bubblewrap(tmp_path, no_leftover_ranks):
    """``--a-prefix``: arm A's launch runs under bubblewrap (the host's file system read-only, its
    own /dev and /proc, the world's folder writable) against the same perfsuite on the host: an
    A/A at heart, so never a failed world or bad input."""
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap is not on PATH: apt-get install bubblewrap (.ci/run installs it)")
    # Under the prefix, the launch finds mpiexec and python3 on PATH: this venv's.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    r = perfsuite("ab", "--a-prefix", BWRAP, *WORLD, "--sizes", "4", "--max-pairs", "4", "--strict", "--json",
                  "ab.json", cwd=tmp_path, PATH=path)
    assert r.returncode in (0, 3), said(r)  # SAME or UNKNOWN: 4 pairs decide no difference
    line = arm_lines(r.stdout).get("A", "")
    assert "prefix bwrap --ro-bind / /" in line, said(r)
    assert "image" not in arm_lines(r.stdout).get("B", ""), said(r)
    assert set(verdicts(r.stdout)) == {"allreduce[mpi-n2-4B]"}, said(r)
    arms = json.loads((tmp_path / "ab.json").read_text())["arms"]
    assert arms["a"]["container"]["prefix"][0] == "bwrap" and arms["b"]["container"] is None, arms

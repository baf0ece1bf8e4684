"""Container images for the tests of image arms (tests/test_image_arms.py, tests/test_recipes.py):
podman ready or a skip naming the install, the two MPI images built from this tree
(tests/tools/stack_images.py), and the check that a test's worlds left no container. Its
fixtures are registered for every test module through conftest.py."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILDER = ROOT / "tests" / "tools" / "stack_images.py"
IMAGES = {"4.2.3": "localhost/perfsuite-test:mpich-4.2.3", "5.0.2": "localhost/perfsuite-test:mpich-5.0.2"}
BASE = "localhost/perfsuite-test-base:bookworm"
INSTALL = ("apt-get install podman runc uidmap debootstrap bubblewrap, and copy .ci/containers.conf to "
           "/etc/containers/containers.conf where that file does not exist (.ci/run does both)")
#: The first test to ask for the images builds them: cold, about 130 s on the 2-core CI machine
#: kind (debootstrap 70 s, the dependency layer 40 s); from podman's layer cache after a change
#: to the tree, about 20 s; unchanged, 3 s.
BUILD_TIMEOUT_S = 900
def podman(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def podman_ready() -> None:
    """Skips, naming the install, where podman is missing or cannot run a container's setup."""
    if shutil.which("podman") is None:
        pytest.skip(f"podman is not on PATH: {INSTALL}")
    got = podman("info", "--format", "{{.Host.OCIRuntime.Name}}")
    if got.returncode:
        why = (got.stderr.strip().splitlines() or [f"exit {got.returncode}"])[-1]
        pytest.skip(f"`podman info` fails here ({why}): {INSTALL}")


@pytest.fixture(scope="session")
def images(podman_ready) -> dict[str, str]:
    """The two MPI images, built from this tree where missing or stale (its own session, killed
    whole at the timeout, so a hung build leaves nothing running)."""
    if shutil.which("debootstrap") is None and podman("image", "exists", BASE).returncode:
        pytest.skip(f"debootstrap is not on PATH and {BASE} is not built: {INSTALL}")
    proc = subprocess.Popen([sys.executable, str(BUILDER), "--mpich", ",".join(IMAGES)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the test images did not build in {BUILD_TIMEOUT_S} s:\n{out[-4000:]}", pytrace=False)
    if proc.returncode:
        pytest.fail(f"the test images did not build (exit {proc.returncode}):\n{out[-4000:]}", pytrace=False)
    print(out)  # the builder's times, shown with -s or on a failure
    return dict(IMAGES)


def containers_of(token: str) -> list[str]:
    """This test's containers (they carry its PERFSUITE_TEST_TOKEN: every PERFSUITE_ variable is
    passed in) in any state, running or stopped; other sessions' worlds on this machine are theirs."""
    names = podman("ps", "-a", "--filter", "name=^perfsuite-", "--format", "{{.Names}}").stdout.split()
    mine = []
    for name in names:
        env = podman("container", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", name)
        if f"PERFSUITE_TEST_TOKEN={token}" in env.stdout.splitlines():
            mine.append(name)
    return mine


@pytest.fixture
def no_leftover_containers(no_leftover_ranks):
    """After the test, neither a rank nor a launcher (conftest's no_leftover_ranks) nor a container
    of its worlds is left."""
    token = os.environ["PERFSUITE_TEST_TOKEN"]
    yield
    left = containers_of(token)
    for name in left:  # after it is reported, so the next test starts clean
        podman("rm", "-f", "-t", "0", "--ignore", name)
    assert not left, f"containers left behind: {left}"

"""An arm that is a stack: the launch a container arm runs, as strings (launch/containers.py), and
how an A/B arm hands it on. The worlds themselves run in tests/test_image_arms.py."""
from __future__ import annotations

import pytest

from perfsuite.records.errors import ConfigError
from perfsuite.experiments.ab import Arm
from perfsuite.launch import containers
from perfsuite.launch.containers import Container
from perfsuite.launch.launchers import LaunchConfig

LAUNCH = ["mpiexec", "-n", "2", "python3", "-P", "-m", "perfsuite.worker", "/w/f/job.json"]


def test_a_podman_world_shares_the_hosts_namespaces_and_mounts_its_folder_and_the_working_directory():
    argv = Container("podman", "localhost/img:1").wrap(LAUNCH, "/w/f", "/home/me/repo", ["B", "A"], "perfsuite-x", 60)
    assert argv[:4] == ["podman", "run", "--rm", "--name"] and argv[4] == "perfsuite-x"
    for flag in ("--pid=host", "--network=host", "--ipc=host", "--uts=host"):
        assert flag in argv  # host pids in rank-N.pid, the host's node name, MPI's shm and sockets
    assert argv[argv.index("--timeout") + 1] == str(60 + containers.AFTER_TIMEOUT_S)
    assert "/w/f:/w/f" in argv and "/home/me/repo:/home/me/repo" in argv
    assert argv[argv.index("-w") + 1] == "/home/me/repo"
    assert argv[argv.index("-e") + 1] == "A"  # passed by name: values come from the client's own environment
    assert argv[-len(LAUNCH) - 1:] == ["localhost/img:1", *LAUNCH]


def test_apptainer_binds_the_same_paths_and_a_prefix_fills_in_the_folder():
    argv = Container("apptainer", "img.sif").wrap(LAUNCH, "/w/f", "/w/f", [], "n")
    assert argv[:2] == ["apptainer", "exec"] and argv.count("--bind") == 1 and argv[-len(LAUNCH) - 1] == "img.sif"
    prefix = Container(prefix=("bwrap", "--bind", "{folder}", "{folder}", "--chdir", "{cwd}"))
    assert prefix.wrap(LAUNCH, "/w/f", "/c", [], "n") == ["bwrap", "--bind", "/w/f", "/w/f", "--chdir", "/c", *LAUNCH]


def test_what_passes_into_a_container_is_the_launchs_own_the_token_and_the_libraries_settings():
    env = {"PERFSUITE_TEST_FAULT": "kill@1", "MPIR_CVAR_X": "1", "NCCL_DEBUG": "INFO", "HOME": "/root"}
    assert containers.passed_names(env, ["OMPI_ALLOW_RUN_AS_ROOT", "PERFSUITE_WORLD_TOKEN"]) == [
        "MPIR_CVAR_X", "NCCL_DEBUG", "OMPI_ALLOW_RUN_AS_ROOT", "PERFSUITE_TEST_FAULT", "PERFSUITE_WORLD_TOKEN"]


@pytest.mark.parametrize("kwargs, says", [
    ({}, "names an image or a command prefix"),
    ({"runtime": "podman", "image": "i", "prefix": ("x",)}, "names an image or a command prefix"),
    ({"runtime": "lxc", "image": "i"}, "container runtime 'lxc' is unknown"),
])
def test_a_bad_container_is_one_line(kwargs, says):
    with pytest.raises(ConfigError, match=says):
        Container(**kwargs)


def test_an_image_arm_launches_the_images_own_mpiexec_and_python():
    box = Container("podman", "localhost/img:1")
    cfg = Arm("A", "mpi", container=box).launch(LaunchConfig(program="/host/venv/bin/mpiexec"))
    assert cfg.container == box and cfg.python == containers.PYTHON and cfg.program is None
    assert Arm("B", "mpi", python="/opt/venv/bin/python", container=box).launch(LaunchConfig()).python == \
        "/opt/venv/bin/python"
    assert Arm("A", "mpi", container=box).fields() != Arm("B", "mpi").fields()  # not an A/A run


def test_the_stack_line_says_what_the_image_holds():
    facts = {"dists": {"perfsuite": "0.1.0", "mpi4py": "4.1.2", "mpich": "4.2.3", "torch": "2.11.0"},
             "mpi": "MPICH Version: 4.2.3", "image_id": "sha256:0123456789abcdef"}
    assert containers.stack_line(facts) == ("perfsuite 0.1.0, MPICH Version: 4.2.3, mpi4py 4.1.2, torch 2.11.0, "
                                            "image 0123456789ab")


def test_a_working_directory_that_holds_the_images_stack_is_not_mounted_over_it():
    argv = Container("podman", "img").wrap(LAUNCH, "/tmp/w", "/opt", [], "n")
    assert "/opt:/opt" not in argv and argv[argv.index("-w") + 1] == "/tmp/w"
    assert argv[argv.index("--conmon-pidfile") + 1] == "/tmp/w/conmon.pid"  # reaped after the world
    assert containers.mountable("/home/me/repo") and not containers.mountable("/usr/")

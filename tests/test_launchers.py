"""Launchers build argv only: compared as strings, no MPI needed (ReFrame's habit)."""
from __future__ import annotations

import pytest

from perfsuite.records.errors import ConfigError
from perfsuite.launch.launchers import LaunchConfig, build

PY = "/usr/bin/python3"
TAIL = [PY, "-P", "-m", "perfsuite.worker", "/w/job.json"]  # -P: no cwd on the ranks' sys.path


def argv(cfg, n=2, **kw):
    return list(build(cfg, n, "/w/job.json", **kw).argv)


def test_mpich_localhost():
    assert argv(LaunchConfig(flavor="mpich", python=PY)) == ["mpiexec", "-n", "2"] + TAIL


def test_mpich_hostfile_ppn_env():
    cfg = LaunchConfig(flavor="mpich", python=PY, hostfile="/h", ranks_per_node=4,
                       env={"NCCL_DEBUG": "INFO"}, program="/opt/mpich/bin/mpiexec")
    assert argv(cfg, 8) == ["/opt/mpich/bin/mpiexec", "-n", "8", "-f", "/h", "-ppn", "4",
                            "-genv", "NCCL_DEBUG", "INFO"] + TAIL


def test_openmpi_oversubscribes_only_past_the_core_count():
    cfg = LaunchConfig(flavor="openmpi", python=PY)
    assert "--oversubscribe" not in argv(cfg, 2, cpu_count=2)
    assert "--oversubscribe" in argv(cfg, 3, cpu_count=2)
    assert "--oversubscribe" not in argv(LaunchConfig(flavor="openmpi", python=PY, oversubscribe=False), 3, cpu_count=2)
    assert "--oversubscribe" in argv(LaunchConfig(flavor="openmpi", python=PY, oversubscribe=True), 2, cpu_count=8)


def test_openmpi_root_flags_only_as_root():
    cfg = LaunchConfig(flavor="openmpi", python=PY, env={"A": "1"})
    as_root = build(cfg, 2, "/w/job.json", cpu_count=4, is_root=True)
    assert as_root.env == {"A": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    assert build(cfg, 2, "/w/job.json", cpu_count=4, is_root=False).env == {"A": "1"}
    assert list(as_root.argv) == ["mpiexec", "-n", "2", "-x", "A=1"] + TAIL


def test_openmpi_hosts_and_ppn():
    cfg = LaunchConfig(flavor="openmpi", python=PY, hosts=("a", "b"), ranks_per_node=2)
    assert argv(cfg, 4, cpu_count=1) == ["mpiexec", "-n", "4", "--host", "a,b", "--map-by", "ppr:2:node"] + TAIL


def test_srun():
    cfg = LaunchConfig(launcher="srun", python=PY, ranks_per_node=4, env={"NCCL_IB_HCA": "mlx5"},
                       extra_args=("--mpi=pmix",))
    assert argv(cfg, 8) == ["srun", "-n", "8", "--kill-on-bad-exit=1", "--ntasks-per-node=4",
                            "--export=ALL,NCCL_IB_HCA=mlx5", "--mpi=pmix"] + TAIL


def test_srun_hostfile_goes_through_slurm_hostfile():
    launch = build(LaunchConfig(launcher="srun", python=PY, hostfile="/h"), 2, "/w/job.json")
    assert "--distribution=arbitrary" in launch.argv and launch.env["SLURM_HOSTFILE"] == "/h"


@pytest.mark.parametrize("n", [0, -1])
def test_world_size_below_one(n):
    with pytest.raises(ConfigError, match=f"world size {n}"):
        build(LaunchConfig(flavor="mpich"), n, "/w/job.json")


def test_unresolved_flavor_is_refused():
    with pytest.raises(ConfigError, match="resolved"):
        build(LaunchConfig(), 2, "/w/job.json")


def test_a_cgroup_is_joined_by_the_launcher_before_it_starts():
    cfg = LaunchConfig(flavor="mpich", python=PY, cgroup="/sys/fs/cgroup/blkio/psio-1-0")
    assert argv(cfg) == ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"',
                         "/sys/fs/cgroup/blkio/psio-1-0", "mpiexec", "-n", "2"] + TAIL

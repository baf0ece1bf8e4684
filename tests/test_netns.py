"""Emulated nodes: the commands as argv (pure), the session's clean-up with a fake runner, and,
as root with ip/tc, a real allreduce world across two namespaces whose shaped links must carry
at least the bytes the allreduces sent."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from types import SimpleNamespace

import pytest

from perfsuite.records.errors import ConfigError, LaunchError, RankFailure
from perfsuite.bench.allreduce import allreduce_wire_bytes
from perfsuite.launch import netns
from perfsuite.launch.launchers import LaunchConfig, build

NET = netns.EmulatedNetwork(2, 10**9, tag="4242-1")


def test_parse_rate_and_shaping():
    assert netns.parse_rate("1gbit") == 10**9
    assert netns.parse_rate("25gbit") == 25 * 10**9
    assert netns.parse_rate("100mbit") == 10**8
    assert netns.format_rate(10 * 10**9) == "10gbit"
    s = netns.parse_shaping("10gbit,delay=5ms")
    assert (s.rate_bps, s.delay, s.label) == (10**10, "5ms", "10gbit-delay5ms")
    for bad in ("fast", "1", "0gbit", "1000gbit", "1 gigabit"):
        with pytest.raises(ConfigError, match="emulated network"):
            netns.parse_rate(bad)
    with pytest.raises(ConfigError, match="delay=<time>"):
        netns.parse_shaping("1gbit,jitter=1ms")


def test_a_node_made_worse_by_link_rate_or_cpu_quota():
    s = netns.parse_shaping("1gbit,node2=100mbit,node3=cpu:0.5,node2=cpu:0.25")
    assert s.faults == (netns.NodeFault(2, 10**8, 0.25), netns.NodeFault(3, None, 0.5))
    assert s.nodes_needed == 4 and s.label == "1gbit-node2-100mbit-node3-cpu0.5"
    net = s.network(4)
    assert [net.rate_of(i) for i in range(4)] == [10**9, 10**9, 10**8, 10**9]
    assert [net.cpu_of(i) for i in range(4)] == [None, None, 0.25, 0.5]
    assert net.label == "1gbit,node2=100mbit,node3=cpu:0.5"
    cmds = [" ".join(c) for c in netns.setup_commands(net)]
    # node2's link is slow both ways: its own egress, and the hub's port towards it
    assert any(c.startswith(f"tc -n {net.node(2)} qdisc add dev psv0 root handle 1: tbf rate 100000000bit")
               for c in cmds)
    assert [c for c in cmds if c.startswith(f"tc -n {net.hub} ")] == [
        f"tc -n {net.hub} qdisc add dev {net.hub_port(2)} root handle 1: tbf rate 100000000bit burst 67050 "
        "limit 625000"]
    cpu = [" ".join(c) for c in netns.cpu_commands(net, "/scratch")]
    assert cpu[:4] == [f"mkdir {net.cpu_cgroup(2)}",
                       f"sh -c echo 10000 > '{net.cpu_cgroup(2)}/cpu.cfs_period_us' && "
                       f"echo 2500 > '{net.cpu_cgroup(2)}/cpu.cfs_quota_us'",
                       "mkdir /scratch/cpu-n2", f"mount --bind {net.cpu_cgroup(2)} /scratch/cpu-n2"]
    script = netns.node_exec_script(net, "ip", "/scratch")
    assert "echo $$ > /scratch/cpu-n3/cgroup.procs || exit 2; PERFSUITE_NODE=node3 ;;" in script
    assert "PERFSUITE_NODE=node0 ;;" in script and "export PERFSUITE_NODE" in script


@pytest.mark.parametrize("text, says", [
    ("1gbit,node2=fast", "node2=fast' must give a link rate or a CPU quota"),
    ("1gbit,node2=cpu:0", "cpu:0 must be 0.01 to 64 cores"),
    ("1gbit,nodeX=1mbit", "nodeK=<rate>"),
])
def test_a_bad_node_fault_is_one_line(text, says):
    with pytest.raises(ConfigError, match=says):
        netns.parse_shaping(text)


def test_a_node_beyond_the_world_is_refused():
    with pytest.raises(ConfigError, match="names node5, but this world has 4 nodes .* --world-sizes 6"):
        netns.parse_shaping("1gbit,node5=100mbit").network(4)


def test_names_are_ours_and_fit_the_kernel_limit():
    assert NET.namespaces == ["psns-4242-1-hub", "psns-4242-1-n0", "psns-4242-1-n1"]
    assert all(n.startswith(netns.PREFIX) for n in NET.namespaces)
    assert all(len(NET.hub_port(i)) <= 15 for i in range(2))
    with pytest.raises(ConfigError):
        netns.EmulatedNetwork(1, 10**9)


def test_setup_commands_as_strings():
    cmds = [" ".join(c) for c in netns.setup_commands(NET)]
    assert cmds[:3] == ["ip netns add psns-4242-1-hub", "ip netns add psns-4242-1-n0",
                        "ip netns add psns-4242-1-n1"]
    assert "ip -n psns-4242-1-hub addr add 10.200.0.254/24 dev psbr" in cmds
    assert ("ip link add ps4242x1h0 netns psns-4242-1-hub type veth peer name psv0 "
            "netns psns-4242-1-n0") in cmds
    assert "ip -n psns-4242-1-n1 addr add 10.200.0.2/24 dev psv0" in cmds
    assert ("tc -n psns-4242-1-n0 qdisc add dev psv0 root handle 1: tbf rate 1000000000bit "
            "burst 125000 limit 6250000") in cmds
    # Only addresses inside our own namespaces: every address is 10.200.0.x.
    addrs = [c.split()[5] for c in cmds if " addr add " in c]
    assert addrs and all(a.startswith("10.200.0.") for a in addrs)
    # Every command either creates a namespace or works inside one of ours.
    for c in netns.setup_commands(NET)[3:]:
        assert any(ns in c for ns in NET.namespaces), c
    assert [" ".join(c) for c in netns.teardown_commands(NET)] == [
        "ip netns delete psns-4242-1-n1", "ip netns delete psns-4242-1-n0",
        "ip netns delete psns-4242-1-hub"]


def test_high_rates_get_a_bigger_bucket():
    fast = netns.EmulatedNetwork(2, 25 * 10**9, tag="1-1")
    assert fast.burst_bytes == 25 * 10**9 // 8 // 1000
    assert fast.limit_bytes >= 4 * fast.burst_bytes


def test_parse_counters_and_netns_list():
    out = ("qdisc tbf 1: root refcnt 2 rate 1Gbit burst 125000b lat 49.9ms\n"
           " Sent 193017920 bytes 128275 pkt (dropped 0, overlimits 6458 requeues 0)\n"
           " backlog 0b 0p requeues 0\n")
    assert netns.parse_sent_bytes(out) == 193017920
    with pytest.raises(LaunchError, match="Sent"):
        netns.parse_sent_bytes("qdisc noqueue 0: root")
    assert netns.list_namespaces("psns-1-1-n0 (id: 1)\nother\n") == ["psns-1-1-n0", "other"]


def test_launch_config_puts_one_rank_per_node():
    cfg = netns.launch_config(NET, LaunchConfig(flavor="mpich", program="/x/mpiexec"), 2,
                              "/s/hub-mpiexec", "/s/node-exec")
    argv = build(cfg, 2, "/j.json").argv
    line = " ".join(argv)
    assert argv[0] == "/s/hub-mpiexec"
    assert "-hosts 10.200.0.1,10.200.0.2 -ppn 1" in line
    assert "-genv FI_TCP_IFACE psv0" in line and "-genv MPIR_CVAR_NOLOCAL 1" in line
    assert "-genv MPIR_CVAR_CH4_NETMOD ofi" in line and "-genv FI_PROVIDER tcp" in line
    assert "-launcher ssh -launcher-exec /s/node-exec -localhost 10.200.0.254" in line
    assert "-genv PERFSUITE_NODE_IFACE psv0" in line  # a gRPC worker serves on its node's address
    with pytest.raises(ConfigError, match="MPICH"):
        netns.launch_config(NET, LaunchConfig(flavor="openmpi"), 2, "h", "n")
    with pytest.raises(ConfigError, match="hosts"):
        netns.launch_config(NET, LaunchConfig(hosts=("a",)), 2, "h", "n")


def test_scripts_map_addresses_to_our_namespaces():
    node = netns.node_exec_script(NET, "/usr/sbin/ip")
    assert "10.200.0.1) ns=psns-4242-1-n0; PERFSUITE_NODE=node0 ;;" in node
    assert 'exec /usr/sbin/ip netns exec "$ns" /bin/sh -c "$*"' in node
    hub = netns.hub_exec_script(NET, "/v/bin/mpiexec", "/usr/sbin/ip")
    assert 'exec /usr/sbin/ip netns exec psns-4242-1-hub /v/bin/mpiexec "$@"' in hub


def test_node_exec_script_runs_like_ssh(tmp_path):
    """Hydra calls it as ``node-exec -x HOST "quoted" args``; a fake ``ip`` shows what runs."""
    fake_ip = tmp_path / "ip"
    fake_ip.write_text('#!/bin/sh\necho "$@"\n')
    fake_ip.chmod(0o755)
    script = tmp_path / "node-exec"
    script.write_text(netns.node_exec_script(NET, str(fake_ip)))
    script.chmod(0o755)
    out = subprocess.run([str(script), "-x", "10.200.0.2", '"/bin/proxy"', "--id", "1"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'netns exec psns-4242-1-n1 /bin/sh -c "/bin/proxy" --id 1'
    bad = subprocess.run([str(script), "-x", "192.0.2.1", "true"], capture_output=True, text=True,
                         timeout=10)
    assert bad.returncode == 2 and "not an emulated node" in bad.stderr


def test_wire_bytes_lower_bound():
    assert allreduce_wire_bytes(1 << 20, 2, 10) == 10 * (1 << 20) * 2
    assert allreduce_wire_bytes(1 << 20, 4, 1) == (1 << 20) * 6
    assert allreduce_wire_bytes(1 << 20, 1, 10) == 0


class FakeRun:
    """Records argv; fails the command whose argv contains ``fail_on``."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[list[str]] = []
        self.fail_on = fail_on
        self.alive: set[str] = set()

    def __call__(self, argv, timeout=60.0, check=True):
        self.calls.append(list(argv))
        if self.fail_on and self.fail_on in argv:
            if check:
                raise LaunchError(f"{' '.join(argv)} exited 2: RTNETLINK answers: boom")
            return SimpleNamespace(returncode=2, stdout="", stderr="Error: Specified qdisc kind is unknown.")
        if argv[:3] == ["ip", "netns", "add"]:
            self.alive.add(argv[3])
        if argv[:3] == ["ip", "netns", "delete"]:
            self.alive.discard(argv[3])
        if argv[:3] == ["ip", "netns", "list"]:
            return SimpleNamespace(returncode=0, stdout="\n".join(self.alive), stderr="")
        return SimpleNamespace(returncode=0, stdout=" Sent 10 bytes 1 pkt\n", stderr="")


def test_session_removes_only_its_namespaces_even_when_setup_fails():
    run = FakeRun(fail_on="tbf")
    with pytest.raises(LaunchError, match="boom"):
        with netns.NetnsSession(NET, run):
            pass
    deleted = [c[3] for c in run.calls if c[:3] == ["ip", "netns", "delete"]]
    assert sorted(deleted) == sorted(NET.namespaces)
    assert not run.alive


def test_session_removes_namespaces_when_the_body_raises():
    run = FakeRun()
    with pytest.raises(KeyboardInterrupt):
        with netns.NetnsSession(NET, run) as s:
            assert s.sent_bytes() == [10, 10]
            raise KeyboardInterrupt  # Ctrl-C in the middle of a world
    assert not run.alive
    assert all(c[3].startswith("psns-4242-1-") for c in run.calls if c[:3] == ["ip", "netns", "delete"])


def test_delay_without_netem_says_so():
    net = netns.EmulatedNetwork(2, 10**9, delay="5ms", tag="4242-2")
    run = FakeRun(fail_on="netem")
    with pytest.raises(ConfigError, match="no netem on this kernel"):
        with netns.NetnsSession(net, run):
            pass
    assert not run.alive


# --- as root: real namespaces -----------------------------------------------------------------

REASON = netns.unavailable_reason()
needs_root = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def _psns_left() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    mine = f"{netns.PREFIX}{os.getpid()}-"
    return [n for n in netns.list_namespaces(out) if n.startswith(mine)]


@pytest.fixture
def no_namespaces_left():
    yield
    assert _psns_left() == [], "network namespaces left behind"


@needs_root
def test_real_session_builds_and_removes(no_namespaces_left):
    from perfsuite.launch.commands import run_command

    net = netns.Shaping(10**9).network(2)
    with netns.NetnsSession(net, run_command) as s:
        assert set(net.namespaces) <= set(s.existing())
        assert len(s.sent_bytes()) == 2
        qd = run_command(netns.counter_command(net, 0)).stdout
        assert "tbf" in qd and "rate 1Gbit" in qd
    assert not set(net.namespaces) & set(netns.list_namespaces(
        run_command(["ip", "netns", "list"]).stdout))


@pytest.mark.world
@needs_root
@pytest.mark.skipif(shutil.which("mpiexec") is None and not os.path.exists(
    os.path.join(os.path.dirname(os.sys.executable), "mpiexec")), reason="no mpiexec")
def test_allreduce_crosses_the_emulated_network(no_namespaces_left, no_leftover_ranks):
    """The qdisc counters must grow by at least the bytes the allreduces sent, or it fails."""
    from perfsuite import suite
    from perfsuite.bench.allreduce import allreduce_cases

    cfg = suite.SuiteConfig(timeout=120, options={"iters": 5, "warmup": 1},
                            network=netns.parse_shaping("10gbit"))
    size = 1 << 20
    spec = suite.plan(allreduce_cases(["mpi"], [2], [size]), cfg.options)[0]
    outcome = suite.run_one(spec, cfg)
    assert outcome.failure is None and outcome.skipped is None, outcome.failure or outcome.skipped
    (sample,) = outcome.result.samples
    need = allreduce_wire_bytes(size, 2, 6)
    assert sample.info["wire_bytes_min"] == need
    assert sample.info["wire_bytes_sent"] >= need, sample.info
    assert sample.valid
    assert outcome.result.extra["emulated_network"]["crossed"] is True


def test_a_rank_on_an_emulated_node_gives_its_interface_address_not_the_shared_host_name(monkeypatch):
    from perfsuite.transports.tf import support as tf_support

    monkeypatch.delenv(tf_support.NODE_IFACE_ENV, raising=False)
    assert tf_support.node_address() == socket.gethostname()
    monkeypatch.setenv(tf_support.NODE_IFACE_ENV, "lo")
    assert tf_support.node_address() == "127.0.0.1"


@pytest.mark.world
@needs_root
@pytest.mark.tf
@pytest.mark.timeout(300)
def test_grpc_training_runs_across_emulated_nodes(no_namespaces_left, no_leftover_ranks):
    """Every node shares the machine's host name and has its own loopback: a gRPC worker that
    named either to the others would wait for them until the world's timeout."""
    pytest.importorskip("tensorflow")
    from perfsuite import suite
    from perfsuite.bench.tf_epoch import tf_cases

    cfg = suite.SuiteConfig(timeout=150, options={"iters": 2, "warmup": 1},
                            network=netns.parse_shaping("1gbit"))
    spec = suite.plan(tf_cases(["grpc"], [2], "small-cnn", "16"), cfg.options)[0]
    outcome = suite.run_one(spec, cfg)
    assert outcome.failure is None and outcome.skipped is None, outcome.failure or outcome.skipped
    (sample,) = outcome.result.samples
    assert sample.valid and sample.metrics["img_per_s"].value > 0
    assert outcome.result.extra["emulated_network"]["crossed"] is True


@pytest.mark.world
@needs_root
def test_traffic_that_does_not_cross_fails_the_case(no_namespaces_left, no_leftover_ranks, monkeypatch):
    """Without MPICH's TCP settings the ranks silently use shared memory (the namespaces share
    /dev/shm): the byte-counter check must catch it and fail the case."""
    from perfsuite import suite
    from perfsuite.bench.allreduce import allreduce_cases

    monkeypatch.setattr(netns, "MPICH_TCP_ENV", {})
    cfg = suite.SuiteConfig(timeout=120, options={"iters": 5, "warmup": 1},
                            network=netns.parse_shaping("10gbit"))
    spec = suite.plan(allreduce_cases(["mpi"], [2], [1 << 20]), cfg.options)[0]
    outcome = suite.run_one(spec, cfg)
    (sample,) = outcome.result.samples
    assert not sample.valid
    assert "did not cross the emulated network" in sample.info["invalid_reason"]


@pytest.mark.world
@needs_root
def test_a_hung_world_is_killed_and_namespaces_removed(no_namespaces_left, no_leftover_ranks, monkeypatch):
    from perfsuite import suite
    from perfsuite.bench.allreduce import allreduce_cases

    monkeypatch.setenv("PERFSUITE_TEST_FAULT", "hang@1")
    # 10 s: a 1.5 s timeout already found both ranks in their first call here (load 2.4 on 2
    # cores), and the namespaces' start-up is what a busy machine slows most; the stack line below
    # shows the kill found the world started and rank 1 hung, not still starting (a 0.3 s timeout
    # fails it).
    cfg = suite.SuiteConfig(timeout=10, options={"iters": 3, "warmup": 0},
                            network=netns.parse_shaping("1gbit"))
    spec = suite.plan(allreduce_cases(["mpi"], [2], [4096]), cfg.options)[0]
    outcome = suite.run_one(spec, cfg)
    # The hang must be what ended it: a crash or a launch error would pass "some failure" too.
    assert isinstance(outcome.failure, RankFailure) and outcome.result is None, outcome.failure
    assert outcome.failure.kind == "timeout", outcome.failure
    assert "killed at the 10 s timeout" in str(outcome.failure), outcome.failure
    assert "rank 1 in faults.py" in str(outcome.failure), outcome.failure  # the hung rank's own stack

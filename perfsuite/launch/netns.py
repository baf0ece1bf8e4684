"""Emulated nodes on one machine: network namespaces joined by veth pairs, shaped with tbf.

Topology (all of it inside namespaces this run creates; the host's own interfaces, routes and
addresses are never touched)::

    psns-<pid>-<k>-hub      bridge psbr, 10.200.0.254   <- mpiexec runs here
      |  veth ps<pid>h0            |  veth ps<pid>h1
    psns-<pid>-<k>-n0              psns-<pid>-<k>-n1     <- one "node" each: rank(s), proxy
      psv0 10.200.0.1 (tbf)        psv0 10.200.0.2 (tbf)

Each node's ``psv0`` egress carries a tbf qdisc at the chosen rate, so every byte one node
sends to another crosses exactly one shaped link (full duplex, like a NIC port), and the tbf byte
counters prove that it did. Every node names its interface ``psv0``, so one
``FI_TCP_IFACE=psv0`` serves every rank.

One node may be made worse than the rest, to check that perfsuite names it
(``1gbit,node2=100mbit,node3=cpu:0.5``): a slower link is that node's egress tbf at the lower
rate plus a tbf at the same rate on the hub's port towards it, so the link is slow both ways as
a NIC that trained down is; a throttled CPU is a cgroup v1 ``cpu`` quota that the node's launcher
joins before it starts anything, so the node's ranks get that many cores' worth of time.

How ranks get into the nodes: Hydra (MPICH's mpiexec) runs inside the hub namespace with the
node addresses as its host list and ``-launcher ssh -launcher-exec <node-exec>``, where
node-exec is a small shell script that Hydra calls exactly as it would call ssh
(``node-exec -x HOST command...``) and that ``exec``s ``ip netns exec NODE sh -c command``.
``ip netns exec`` and ``exec`` replace themselves, so each proxy stays in the world's process
group and the world runner's timeout and kill-the-group rules hold unchanged. MPICH must be told
to use the network between "hosts" that share a hostname: ``MPIR_CVAR_CH4_NETMOD=ofi
FI_PROVIDER=tcp FI_TCP_IFACE=psv0 MPIR_CVAR_NOLOCAL=1`` (without them MPICH silently takes
shared memory and nothing crosses the emulated wire).

This module builds every command as an argv list (pure, unit-tested as strings); ``NetnsSession``
runs them through an injected ``run_command`` (``launch/commands.run_command`` in real use) and
always removes what it made, also on failure and on Ctrl-C/SIGTERM.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..records.errors import ConfigError, LaunchError
from .launchers import LaunchConfig
from ..transports.hosts import NODE_IFACE_ENV, NODE_NAME_ENV  # what a rank learns of its node

PREFIX = "psns-"
SUBNET = "10.200.0"  # private to our own namespaces: no host route can clash with it
HUB_HOST = 254
NODE_IFACE = "psv0"
BRIDGE = "psbr"
#: Environment that makes MPICH ranks on "different hosts" of one machine use TCP over psv0.
MPICH_TCP_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": NODE_IFACE,
                 "MPIR_CVAR_NOLOCAL": "1"}
#: Bandwidths the suite documents (any rate from 1mbit to 400gbit is accepted).
COMMON_RATES = ("1gbit", "10gbit", "25gbit")
#: Every form parse_shaping takes, for the options' help.
SHAPING_FORMS = ("RATE[,delay=TIME][,nodeK=RATE][,nodeK=cpu:CORES], e.g. 1gbit, 10gbit,delay=5ms (needs netem), "
                 "1gbit,node2=100mbit (node 2's link slower), 1gbit,node3=cpu:0.5 (node 3 on half a core); "
                 "rates in kbit, mbit, gbit (or kbps, mbps, gbps)")
_UNITS = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "kbps": 8 * 10**3, "mbps": 8 * 10**6,
          "gbps": 8 * 10**9}
_SENT = re.compile(r"Sent (\d+) bytes (\d+) pkt")
NO_NETEM = "no netem on this kernel: only bandwidth (tbf) can be emulated, not delay"
CPU_ROOT = "/sys/fs/cgroup/cpu"
#: A short period spreads the quota over a step's work (as a slower CPU would) instead of letting
#: the node run at full speed for part of each 100 ms, the kernel's default period.
CFS_PERIOD_US = 10_000

Runner = Callable[..., object]  # run_command(argv, timeout=..., check=...) -> CompletedProcess


def parse_rate(text: str) -> int:
    """'1gbit' -> 1_000_000_000 bits/s ('10gbit', '25gbit', '100mbit', '1gbps' = 8 gbit)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]bit|[kmg]bps)\s*", str(text).lower())
    if not m:
        raise ConfigError(f"emulated network {text!r} must be a bandwidth like "
                          f"{', '.join(COMMON_RATES)} (tc units: kbit, mbit, gbit)")
    bps = int(float(m.group(1)) * _UNITS[m.group(2)])
    if not 10**6 <= bps <= 400 * 10**9:
        raise ConfigError(f"emulated network {text!r} is outside 1mbit..400gbit")
    return bps


def format_rate(bps: int) -> str:
    for unit, f in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % f == 0:
            return f"{bps // f}{unit}"
    return f"{bps}bit"


@dataclass(frozen=True)
class NodeFault:
    """One emulated node made worse than the others: its link rate, or the cores its ranks get."""

    node: int
    rate_bps: int | None = None
    cpu: float | None = None  # cores' worth of CPU time (cgroup cfs quota / period)

    @property
    def label(self) -> str:
        what = format_rate(self.rate_bps) if self.rate_bps is not None else f"cpu:{self.cpu:g}"
        return f"node{self.node}={what}"


@dataclass(frozen=True)
class EmulatedNetwork:
    """``nodes`` namespaces joined through a hub, each node's egress shaped to ``rate_bps``
    (or a fault's own rate), some nodes' CPU throttled by ``faults``."""

    nodes: int
    rate_bps: int
    delay: str | None = None  # asked-for one-way delay (needs netem; refused where absent)
    tag: str = field(default_factory=lambda: f"{os.getpid()}-0")  # pid + sequence: ours alone
    faults: tuple[NodeFault, ...] = ()

    def __post_init__(self):
        if self.nodes < 2 or self.nodes > 200:
            raise ConfigError(f"emulated nodes {self.nodes} must be between 2 and 200")
        if not re.fullmatch(r"\d+-\d+", self.tag):
            raise ConfigError(f"namespace tag {self.tag!r} must be '<pid>-<n>'")
        for f in self.faults:
            if f.node >= self.nodes:
                raise ConfigError(f"emulated network names node{f.node}, but this world has "
                                  f"{self.nodes} nodes (node0..node{self.nodes - 1}); give "
                                  f"--world-sizes {f.node + 1} or more, or name a node below node{self.nodes}")

    @property
    def rate(self) -> str:
        return format_rate(self.rate_bps)

    @property
    def label(self) -> str:
        """'1gbit', or with the nodes made worse: '1gbit,node2=100mbit'."""
        return ",".join([self.rate, *(f.label for f in self.faults)])

    def rate_of(self, i: int) -> int:
        """Node i's link rate (both ways), bits/s."""
        return next((f.rate_bps for f in self.faults if f.node == i and f.rate_bps is not None), self.rate_bps)

    def cpu_of(self, i: int) -> float | None:
        """The cores node i's ranks may use, or None (unthrottled)."""
        return next((f.cpu for f in self.faults if f.node == i and f.cpu is not None), None)

    def node_name(self, i: int) -> str:
        return f"node{i}"

    def cpu_cgroup(self, i: int) -> str:
        return f"{CPU_ROOT}/{self.node(i)}"

    @property
    def hub(self) -> str:
        return f"{PREFIX}{self.tag}-hub"

    def node(self, i: int) -> str:
        return f"{PREFIX}{self.tag}-n{i}"

    @property
    def namespaces(self) -> list[str]:
        return [self.hub] + [self.node(i) for i in range(self.nodes)]

    def address(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    @property
    def hub_address(self) -> str:
        return f"{SUBNET}.{HUB_HOST}"

    def hub_port(self, i: int) -> str:
        """Hub end of node i's veth: unique per run (<= 15 characters, the kernel's limit)."""
        return f"ps{self.tag.replace('-', 'x')}h{i}"[:15]

    @property
    def burst_bytes(self) -> int:
        return burst_bytes(self.rate_bps)

    @property
    def limit_bytes(self) -> int:
        return limit_bytes(self.rate_bps)


def burst_bytes(rate_bps: int) -> int:
    # tbf needs a bucket of at least one GSO packet (64 KiB); 1 ms of traffic above that
    # keeps high rates (25gbit) from being capped by timer granularity.
    return max(64 * 1024 + 1514, rate_bps // 8 // 1000)


def limit_bytes(rate_bps: int) -> int:
    # Queue up to 50 ms of traffic: a shallow queue would drop and make TCP, not the
    # emulated link, the bottleneck.
    return max(4 * burst_bytes(rate_bps), rate_bps // 8 // 20)


@dataclass(frozen=True)
class Shaping:
    """What the user asked for (``--emulated-network 1gbit[,delay=5ms][,node2=100mbit]
    [,node3=cpu:0.5]``); the node count comes from each world's size (one rank per emulated
    node)."""

    rate_bps: int
    delay: str | None = None
    faults: tuple[NodeFault, ...] = ()

    @property
    def label(self) -> str:
        return (format_rate(self.rate_bps) + (f"-delay{self.delay}" if self.delay else "")
                + "".join(f"-{f.label.replace('=', '-').replace(':', '')}" for f in self.faults))

    @property
    def nodes_needed(self) -> int:
        """The fewest nodes a world needs for every named node to exist."""
        return max((f.node + 1 for f in self.faults), default=2)

    def network(self, nodes: int) -> EmulatedNetwork:
        return EmulatedNetwork(nodes, self.rate_bps, self.delay, tag=next_tag(), faults=self.faults)


_NODE = re.compile(r"node(\d+)")
_CPU = re.compile(r"cpu:(\d+(?:\.\d+)?)")


def parse_shaping(text: str) -> Shaping:
    """'1gbit', '1gbit,delay=5ms', '1gbit,node2=100mbit', '1gbit,node3=cpu:0.5' -> Shaping
    (the delay is refused later where there is no netem, a CPU quota where there is no cgroup)."""
    rate, *rest = [p.strip() for p in str(text).split(",")]
    delay, faults = None, {}
    for part in rest:
        key, sep, value = part.partition("=")
        node = _NODE.fullmatch(key)
        if key == "delay" and sep and re.fullmatch(r"\d+(\.\d+)?(us|ms|s)", value):
            delay = value
        elif node and sep:
            i = int(node.group(1))
            fault = faults.get(i, NodeFault(i))
            if cpu := _CPU.fullmatch(value):
                cores = float(cpu.group(1))
                if not 0.01 <= cores <= 64:
                    raise ConfigError(f"emulated node {part!r}: cpu:{cpu.group(1)} must be 0.01 to 64 cores, "
                                      "e.g. cpu:0.5 for half a core")
                fault = replace(fault, cpu=cores)
            else:
                try:
                    fault = replace(fault, rate_bps=parse_rate(value))
                except ConfigError:
                    raise ConfigError(f"emulated node {part!r} must give a link rate or a CPU quota, e.g. "
                                      f"{key}=100mbit or {key}=cpu:0.5") from None
            faults[i] = fault
        else:
            raise ConfigError(f"emulated network option {part!r} must be delay=<time> (delay=5ms) or "
                              "nodeK=<rate> / nodeK=cpu:<cores> (node2=100mbit, node3=cpu:0.5)")
    return Shaping(parse_rate(rate), delay, tuple(faults[i] for i in sorted(faults)))


def setup_commands(net: EmulatedNetwork) -> list[list[str]]:
    """Every command that builds ``net``, in order (teardown_commands undoes all of it)."""
    hub = net.hub
    cmds = [["ip", "netns", "add", ns] for ns in net.namespaces]
    cmds += [["ip", "-n", hub, "link", "set", "lo", "up"],
             ["ip", "-n", hub, "link", "add", BRIDGE, "type", "bridge"],
             ["ip", "-n", hub, "addr", "add", f"{net.hub_address}/24", "dev", BRIDGE],
             ["ip", "-n", hub, "link", "set", BRIDGE, "up"]]
    for i in range(net.nodes):
        node, port = net.node(i), net.hub_port(i)
        cmds += [
            ["ip", "link", "add", port, "netns", hub, "type", "veth", "peer", "name", NODE_IFACE,
             "netns", node],
            ["ip", "-n", hub, "link", "set", port, "master", BRIDGE],
            ["ip", "-n", hub, "link", "set", port, "up"],
            ["ip", "-n", node, "link", "set", "lo", "up"],
            ["ip", "-n", node, "addr", "add", f"{net.address(i)}/24", "dev", NODE_IFACE],
            ["ip", "-n", node, "link", "set", NODE_IFACE, "up"],
            shape_command(net, i),
        ]
        if net.rate_of(i) != net.rate_bps:
            cmds.append(inbound_shape_command(net, i))
    return cmds


def shape_command(net: EmulatedNetwork, i: int, verb: str = "add") -> list[str]:
    """tbf on node i's egress: the emulated NIC's line rate."""
    rate = net.rate_of(i)
    return ["tc", "-n", net.node(i), "qdisc", verb, "dev", NODE_IFACE, "root", "handle", "1:",
            "tbf", "rate", f"{rate}bit", "burst", str(burst_bytes(rate)), "limit", str(limit_bytes(rate))]


def inbound_shape_command(net: EmulatedNetwork, i: int) -> list[str]:
    """tbf on the hub's port towards node i, for a node whose link is slower than the rest: its
    link is then slow both ways (its egress tbf is the other way)."""
    rate = net.rate_of(i)
    return ["tc", "-n", net.hub, "qdisc", "add", "dev", net.hub_port(i), "root", "handle", "1:",
            "tbf", "rate", f"{rate}bit", "burst", str(burst_bytes(rate)), "limit", str(limit_bytes(rate))]


def cpu_mount(scratch: str | Path, i: int) -> str:
    """Where node i's cgroup is bind-mounted: ``ip netns exec`` mounts a fresh /sys for the
    namespace, so /sys/fs/cgroup is out of reach of the node's launcher, but a mount elsewhere
    (taken before the world starts) is copied into its mount namespace."""
    return f"{scratch}/cpu-n{i}"


def cpu_commands(net: EmulatedNetwork, scratch: str | Path) -> list[list[str]]:
    """The cgroup of each CPU-throttled node, with its quota (cgroup v1 ``cpu``), bind-mounted
    where the node's launcher can join it."""
    cmds = []
    for i in range(net.nodes):
        cores = net.cpu_of(i)
        if cores is not None:
            cg, at = net.cpu_cgroup(i), cpu_mount(scratch, i)
            cmds += [["mkdir", cg],
                     ["sh", "-c", f"echo {CFS_PERIOD_US} > '{cg}/cpu.cfs_period_us' && "
                                  f"echo {round(cores * CFS_PERIOD_US)} > '{cg}/cpu.cfs_quota_us'"],
                     ["mkdir", at], ["mount", "--bind", cg, at]]
    return cmds


def delay_command(net: EmulatedNetwork, i: int) -> list[str]:
    """netem under the tbf, for an asked-for delay; fails where the kernel has no sch_netem."""
    return ["tc", "-n", net.node(i), "qdisc", "add", "dev", NODE_IFACE, "parent", "1:1",
            "handle", "10:", "netem", "delay", str(net.delay)]


def teardown_commands(net: EmulatedNetwork) -> list[list[str]]:
    """Deleting a namespace deletes its interfaces (veth peers and the bridge go with them)."""
    return [["ip", "netns", "delete", ns] for ns in reversed(net.namespaces)]


def counter_command(net: EmulatedNetwork, i: int) -> list[str]:
    return ["tc", "-n", net.node(i), "-s", "qdisc", "show", "dev", NODE_IFACE]


def parse_sent_bytes(tc_output: str) -> int:
    """Bytes the root qdisc sent, from ``tc -s qdisc show`` (its first 'Sent N bytes' line)."""
    m = _SENT.search(tc_output)
    if not m:
        raise LaunchError(f"no 'Sent N bytes' in tc output: {tc_output.strip()[:200]!r}")
    return int(m.group(1))


def list_namespaces(ip_netns_list: str) -> list[str]:
    """Names from ``ip netns list`` output ('name (id: 3)' lines)."""
    return [line.split()[0] for line in ip_netns_list.splitlines() if line.strip()]


def node_exec_script(net: EmulatedNetwork, ip: str = "ip", scratch: str | Path = "") -> str:
    """The ssh stand-in Hydra calls as ``node-exec [-x] HOST COMMAND...``.

    Hydra quotes its arguments for a remote shell, as ssh would hand them to one, so the
    command is re-parsed by ``sh -c``. ``exec`` all the way: no extra process and the proxy
    stays in the launcher's process group.
    """
    lines = ["#!/bin/sh", "# perfsuite emulated-node launcher (made per run; see launch/netns.py)",
             'while [ "${1#-}" != "$1" ]; do shift; done  # ssh options Hydra adds (-x)',
             'host="$1"; shift', 'case "$host" in']
    for i in range(net.nodes):
        # A throttled node's launcher joins its cgroup first: the proxy and the ranks inherit it.
        join = (f" echo $$ > {shlex.quote(cpu_mount(scratch, i) + '/cgroup.procs')} || exit 2;"
                if net.cpu_of(i) is not None else "")
        lines.append(f"  {net.address(i)}) ns={shlex.quote(net.node(i))};{join} "
                     f"{NODE_NAME_ENV}={net.node_name(i)} ;;")
    lines += ['  *) echo "perfsuite node-exec: $host is not an emulated node of this run" >&2; exit 2 ;;',
              "esac", f"export {NODE_NAME_ENV}",
              f'exec {shlex.quote(ip)} netns exec "$ns" /bin/sh -c "$*"', ""]
    return "\n".join(lines)


def hub_exec_script(net: EmulatedNetwork, mpiexec: str, ip: str = "ip") -> str:
    """Runs mpiexec inside the hub namespace (the world runner starts this as its launcher)."""
    return "\n".join(["#!/bin/sh", f"exec {shlex.quote(ip)} netns exec {shlex.quote(net.hub)} "
                      f'{shlex.quote(mpiexec)} "$@"', ""])


def launch_config(net: EmulatedNetwork, base: LaunchConfig, world_size: int, hub_exec: str,
                  node_exec: str) -> LaunchConfig:
    """``base`` turned into a world whose ranks sit on the emulated nodes, round-robin by node."""
    if base.launcher != "mpiexec" or base.flavor == "openmpi":
        raise ConfigError("the emulated network needs MPICH's mpiexec (Hydra); "
                          f"got launcher {base.launcher!r}, flavor {base.flavor!r}")
    if base.hostfile or base.hosts:
        raise ConfigError("the emulated network chooses the hosts itself; drop --hostfile/--hosts")
    per_node = -(-world_size // net.nodes)
    return replace(base, flavor="mpich", program=hub_exec,
                   hosts=tuple(net.address(i) for i in range(net.nodes)),
                   ranks_per_node=per_node, env={**base.env, **MPICH_TCP_ENV, NODE_IFACE_ENV: NODE_IFACE},
                   extra_args=tuple(base.extra_args) + (
                       "-launcher", "ssh", "-launcher-exec", node_exec,
                       "-localhost", net.hub_address))


def unavailable_reason(is_root: bool | None = None) -> str | None:
    """Why emulated nodes cannot be made here, or None."""
    if is_root is None:
        from ..store.fingerprint import is_root as root

        is_root = root()
    if not is_root:
        return "the emulated network needs root (network namespaces, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the emulated network needs '{tool}' (iproute2) on PATH"
    return None


def cpu_unavailable_reason() -> str | None:
    """Why a node's CPU cannot be throttled here, or None."""
    if not os.path.exists(f"{CPU_ROOT}/cpu.cfs_quota_us"):
        return f"no cgroup v1 cpu controller at {CPU_ROOT} (cannot throttle an emulated node's CPU here)"
    return None


_SEQ = [0]
_SEQ_LOCK = threading.Lock()


def next_tag() -> str:
    with _SEQ_LOCK:
        _SEQ[0] += 1
        return f"{os.getpid()}-{_SEQ[0]}"


class NetnsSession:
    """Build ``net`` with ``run_command``, hand out a LaunchConfig and the byte counters, and
    always remove the namespaces this session made (``with`` block: also on error, Ctrl-C,
    and SIGTERM, which is turned into KeyboardInterrupt while the session is open)."""

    def __init__(self, net: EmulatedNetwork, run_command: Runner, timeout: float = 20.0):
        self.net = net
        self.run = run_command
        self.timeout = timeout
        self.created: list[str] = []
        self.cgroups: list[str] = []
        self.mounts: list[str] = []
        self.scratch: Path | None = None
        self._old_term = None

    def _cmd(self, argv: list[str], check: bool = True):
        return self.run(argv, timeout=self.timeout, check=check)

    def __enter__(self) -> "NetnsSession":
        if threading.current_thread() is threading.main_thread():
            self._old_term = signal.signal(signal.SIGTERM, _term_to_interrupt)
        try:
            for argv in setup_commands(self.net):
                if argv[:3] == ["ip", "netns", "add"]:
                    self.created.append(argv[3])  # before running: a half-made one is removed too
                self._cmd(argv)
            self.scratch = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{self.net.tag}-"))
            for argv in cpu_commands(self.net, self.scratch):
                if argv[0] == "mkdir" and argv[1].startswith(CPU_ROOT):
                    self.cgroups.append(argv[1])
                self._cmd(argv)
                if argv[0] == "mount":
                    self.mounts.append(argv[-1])
            if self.net.delay:
                for i in range(self.net.nodes):
                    proc = self._cmd(delay_command(self.net, i), check=False)
                    if getattr(proc, "returncode", 1) != 0:
                        why = (getattr(proc, "stderr", "") or "").strip().splitlines()[-1:]
                        raise ConfigError(f"delay {self.net.delay!r} asked for, but {NO_NETEM} "
                                          f"(tc: {' '.join(why) or 'netem refused'})")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> list[str]:
        """Remove our namespaces (only ours) and scratch; return any that would not go."""
        left = []
        for ns in reversed(self.created):
            proc = self._cmd(["ip", "netns", "delete", ns], check=False)
            if getattr(proc, "returncode", 0) != 0 and ns in self.existing():
                left.append(ns)
        self.created = []
        for at in reversed(self.mounts):
            proc = self._cmd(["umount", at], check=False)
            if getattr(proc, "returncode", 0) != 0:
                left.append(at)
        self.mounts = []
        for cg in reversed(self.cgroups):  # empty once the world's processes are gone
            proc = self._cmd(["rmdir", cg], check=False)
            if getattr(proc, "returncode", 0) != 0 and os.path.isdir(cg):
                left.append(cg)
        self.cgroups = []
        if self.scratch is not None and not left:  # never remove through a mount still held
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None
        if left:
            raise LaunchError(f"could not remove {', '.join(left)}; remove them with: ip netns delete "
                              "NAME (a namespace), umount PATH (a mount) or rmdir PATH (a cgroup, once its "
                              "processes are gone)")
        return left

    def existing(self) -> list[str]:
        proc = self._cmd(["ip", "netns", "list"], check=False)
        return list_namespaces(getattr(proc, "stdout", "") or "")

    def sent_bytes(self) -> list[int]:
        """Bytes each node's shaped link has sent so far."""
        return [parse_sent_bytes(self._cmd(counter_command(self.net, i)).stdout)
                for i in range(self.net.nodes)]

    def launch_config(self, base: LaunchConfig, world_size: int, mpiexec: str) -> LaunchConfig:
        """Write the two launcher scripts into this session's scratch folder (removed on close)
        and return the LaunchConfig that puts the ranks on the nodes."""
        assert self.scratch is not None, "use the session in a with block"
        ip = shutil.which("ip") or "ip"
        hub = self.scratch / "hub-mpiexec"
        node = self.scratch / "node-exec"
        hub.write_text(hub_exec_script(self.net, mpiexec, ip))
        node.write_text(node_exec_script(self.net, ip, self.scratch))
        for p in (hub, node):
            p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return launch_config(self.net, base, world_size, str(hub), str(node))


def _term_to_interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")
